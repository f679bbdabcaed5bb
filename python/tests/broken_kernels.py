"""Kernels with one mistake each, for the error tests, written with JAX itself. A line
a report must name ends with a `# <- marker` comment (tests find it with
conftest.marked_line)."""

import jax
from jax import lax
from jax import numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

P = jax.sharding.PartitionSpec
num_devices = 4
partition = P(None, "x")
SHARD = (8, 128)


def call(kernel, out_shape=None, scratch=(), space=pl.ANY, grid=(), collective_id=None):
    """A pallas_call of `kernel` with one input and one output (of the input's shape)."""
    grid_spec = pltpu.PrefetchScalarGridSpec(
        num_scalar_prefetch=0,
        in_specs=[pl.BlockSpec(memory_space=space)],
        out_specs=pl.BlockSpec(memory_space=space),
        scratch_shapes=list(scratch),
        grid=grid,
    )
    params = None if collective_id is None else pltpu.CompilerParams(collective_id=collective_id)
    return pl.pallas_call(
        kernel,
        out_shape=out_shape or jax.ShapeDtypeStruct(SHARD, jnp.float32),
        grid_spec=grid_spec,
        compiler_params=params,
    )


def mesh():
    return jax.make_mesh((num_devices,), ("x",))


def mapped(pallas):
    """`jax.jit(jax.shard_map(...))` of a pallas_call over a 1-D mesh of num_devices."""
    return jax.jit(jax.shard_map(pallas, mesh=mesh(), in_specs=partition, out_specs=partition, check_vma=False))


def sharded(a):
    """`a` laid out as `mapped` takes it."""
    return jax.device_put(a, jax.NamedSharding(mesh(), partition))


def race_kernel(x_ref, y_ref, send_sem, recv_sem):
    # Starts the push to the right neighbour, then overwrites its source before
    # `wait_send` says the DMA has read it.
    my_id = lax.axis_index("x")
    right = lax.rem(my_id + 1, num_devices)
    dma = pltpu.make_async_remote_copy(
        x_ref, y_ref, send_sem, recv_sem, device_id=(right,), device_id_type=pl.DeviceIdType.MESH
    )
    dma.start()  # <- race start
    x_ref[...] = jnp.zeros_like(x_ref)  # <- race overwrite
    dma.wait()


def deadlock_kernel(x_ref, y_ref, done):
    # Every device waits for a `done` signal nobody sends.
    pl.semaphore_wait(done, 1)  # <- deadlock


def extra_signal_kernel(x_ref, y_ref, sem):
    # Signals itself twice and waits once: 1 is left at exit.
    pl.semaphore_signal(sem, 2)  # <- extra signal
    pl.semaphore_wait(sem, 1)


def unwaited_kernel(x_ref, y_ref, sem):
    # Starts a copy and never waits for it.
    copy = pltpu.make_async_copy(x_ref, y_ref, sem)
    copy.start()  # <- never waited


def negative_left_kernel(x_ref, y_ref, send_sem, recv_sem):
    # Seed 003's trap: C's remainder keeps the sign, so device 0's left is -1.
    my_id = lax.axis_index("x")
    left = lax.rem(my_id - 1, num_devices)
    dma = pltpu.make_async_remote_copy(
        src_ref=x_ref,
        dst_ref=y_ref,
        send_sem=send_sem,
        recv_sem=recv_sem,
        device_id=(left,),
        device_id_type=pl.DeviceIdType.MESH,
    )
    dma.start()  # <- negative left
    dma.wait()


def floor_left_kernel(x_ref, y_ref, send_sem, recv_sem):
    # The same with Python's (and jnp's) floor modulo: -1 % n == n - 1, correct.
    my_id = lax.axis_index("x")
    left = (my_id - 1) % num_devices
    dma = pltpu.make_async_remote_copy(
        src_ref=x_ref,
        dst_ref=y_ref,
        send_sem=send_sem,
        recv_sem=recv_sem,
        device_id=(left,),
        device_id_type=pl.DeviceIdType.MESH,
    )
    dma.start()
    dma.wait()


def early_send_kernel(x_ref, y_ref, send_sem, recv_sem):
    # A collective_id kernel must itself make sure its neighbour has entered (a barrier
    # handshake) before it sends there; this one does not.
    right = lax.rem(lax.axis_index("x") + 1, num_devices)
    dma = pltpu.make_async_remote_copy(
        x_ref, y_ref, send_sem, recv_sem, device_id=(right,), device_id_type=pl.DeviceIdType.MESH
    )
    dma.start()  # <- early send
    dma.wait()


def out_of_bounds_kernel(x_ref, y_ref, sem):
    # Device 3's slot 4 of a (num_devices, 8, 128) output does not exist.
    copy = pltpu.make_async_copy(x_ref, y_ref.at[lax.axis_index("x") + 1], sem)
    copy.start()  # <- out of bounds
    copy.wait()


def shape_mismatch_kernel(x_ref, y_ref, sem):
    copy = pltpu.make_async_copy(x_ref.at[pl.ds(0, 4)], y_ref, sem)
    copy.start()  # <- shape mismatch
    copy.wait()


def hbm_compute_kernel(x_ref, y_ref):
    # Both refs stay in HBM (memory_space=ANY): only DMAs may touch them.
    y_ref[...] = x_ref[...]  # <- hbm compute


def no_collective_id_kernel(x_ref, y_ref, sem):
    barrier = pltpu.get_barrier_semaphore()  # <- no collective id
    pl.semaphore_signal(barrier, 1)
    pl.semaphore_wait(barrier, 1)
    copy = pltpu.make_async_copy(x_ref, y_ref, sem)
    copy.start()
    copy.wait()


def unsupported_jnp_kernel(x_ref, y_ref):
    y_ref[...] = jnp.cumsum(x_ref[...], axis=0)  # <- unsupported cumsum


def masked_load_kernel(x_ref, y_ref):
    mask = lax.broadcasted_iota(jnp.int32, SHARD, 1) < 64
    y_ref[...] = pltpu.load(x_ref, mask=mask)  # <- masked load


def strided_kernel(x_ref, y_ref):
    # Column halves swapped: two strided windows of each ref (tpusim copies them row by row).
    y_ref[:, pl.ds(0, 64)] = x_ref[:, pl.ds(64, 64)]
    y_ref[:, pl.ds(64, 64)] = x_ref[:, pl.ds(0, 64)]
