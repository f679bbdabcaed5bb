"""The seed's all_gather with one mistake: every step's DMA lands on one shared receive
semaphore (`recv_sem`) instead of `recv_sems.at[step]`. The official text warns that
this can silently corrupt data; tpusim's verifier must report it. A JAX script: run it
with `python -m tpusim check shared_recv_sem.py`."""

import jax
from jax import lax
from jax import numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

P = jax.sharding.PartitionSpec
num_devices = jax.local_device_count()


def all_gather_kernel(x_ref, out_ref, local_sem, send_sem, recv_sem):
    step = pl.program_id(0)
    my_id = lax.axis_index("x")
    right = lax.rem(my_id + 1, num_devices)

    slot = lax.rem(my_id - step + num_devices, num_devices)

    @pl.when(step == 0)
    def _():
        local = pltpu.make_async_copy(
            src_ref=x_ref,
            dst_ref=out_ref.at[my_id],
            sem=local_sem,
        )
        local.start()
        local.wait()

    remote = pltpu.make_async_remote_copy(
        src_ref=out_ref.at[slot],
        dst_ref=out_ref.at[slot],
        send_sem=send_sem,
        recv_sem=recv_sem,
        device_id=(right,),
        device_id_type=pl.DeviceIdType.MESH,
    )
    remote.start()  # <- start
    remote.wait()  # <- wait


def all_gather(x):
    grid_spec = pltpu.PrefetchScalarGridSpec(
        num_scalar_prefetch=0,
        in_specs=[pl.BlockSpec(memory_space=pl.ANY)],
        out_specs=pl.BlockSpec(memory_space=pl.ANY),
        scratch_shapes=[pltpu.SemaphoreType.DMA] * 3,
        grid=(num_devices - 1,),
    )
    out_shape = jax.ShapeDtypeStruct((num_devices, 8, 128), jnp.float32)
    return pl.pallas_call(all_gather_kernel, out_shape=out_shape, grid_spec=grid_spec)(x)


partition = P("x", None)
mesh = jax.make_mesh((num_devices,), ("x",))
input_arr = jax.device_put(
    jax.random.uniform(jax.random.key(0), (8 * num_devices, 128)), jax.NamedSharding(mesh, partition)
)
pallas_result = jax.jit(jax.shard_map(all_gather, mesh=mesh, in_specs=partition, out_specs=partition, check_vma=False))(
    input_arr
)
