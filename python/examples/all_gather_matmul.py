"""An all-gather matmul in Pallas (tensor parallel): ``x`` row-sharded over `tp`
devices, ``w`` column-sharded; each device computes ``all_gather(x) @ w_local``.

The row chunks of ``x`` go round a unidirectional ring in a double buffer in VMEM:
at step `s` a device sends the chunk it holds on to its right neighbour while it
multiplies it (in ``bn``-column, ``bk``-deep blocks of ``w`` fetched from HBM, two
in flight) and writes the result rows to HBM. A capacity semaphore says when the
neighbour's other slot is free. Everything is in HBM (``pl.ANY``) but the buffers.

    python -m tpusim model --devices 8 --preset v6e all_gather_matmul.py
"""

import functools

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu
from jax.sharding import PartitionSpec as P

MESH = pl.DeviceIdType.MESH


def _kernel(x_hbm, w_hbm, o_hbm, xbuf, wbuf, obuf, xsem, send_sem, recv_sem, cap_sem, wsem, osem, *, tp, axis, bn, bk):
    mc, k_total = xbuf.shape[1], xbuf.shape[2]
    n_local = w_hbm.shape[1]
    nb, kb = n_local // bn, k_total // bk
    me = lax.axis_index(axis)
    right, left = lax.rem(me + 1, tp), lax.rem(me + tp - 1, tp)

    # Both neighbours have entered before anyone sends to them.
    bar = pltpu.get_barrier_semaphore()
    pl.semaphore_signal(bar, 1, device_id=(left,), device_id_type=MESH)
    pl.semaphore_signal(bar, 1, device_id=(right,), device_id_type=MESH)
    pl.semaphore_wait(bar, 2)

    local = pltpu.make_async_copy(x_hbm, xbuf.at[0], xsem)
    local.start()
    local.wait()
    # My slot 1 is free for the left neighbour's first send.
    pl.semaphore_signal(cap_sem, 1, device_id=(left,), device_id_type=MESH)

    def w_copy(j, k, b):
        return pltpu.make_async_copy(w_hbm.at[pl.ds(k * bk, bk), pl.ds(j * bn, bn)], wbuf.at[b], wsem.at[b])

    def step(s, carry):
        slot = lax.rem(s, 2)
        src = lax.rem(me + tp - s, tp)  # whose rows this chunk is
        ring = pltpu.make_async_remote_copy(
            xbuf.at[slot], xbuf.at[1 - slot], send_sem, recv_sem, device_id=(right,), device_id_type=MESH
        )

        @pl.when(s < tp - 1)
        def _():
            pl.semaphore_wait(cap_sem, 1)
            ring.start()

        def column_block(j, c):
            w_copy(j, 0, 0).start()

            def depth_block(k, acc):
                b = lax.rem(k, 2)

                @pl.when(k + 1 < kb)
                def _():
                    w_copy(j, k + 1, 1 - b).start()

                w_copy(j, k, b).wait()
                part = xbuf[slot, :, pl.ds(pl.multiple_of(k * bk, bk), bk)]
                return acc + jnp.dot(part, wbuf[b], preferred_element_type=jnp.float32)

            acc = lax.fori_loop(0, kb, depth_block, jnp.zeros((mc, bn), jnp.float32))
            obuf[...] = acc.astype(obuf.dtype)
            out = pltpu.make_async_copy(obuf, o_hbm.at[pl.ds(src * mc, mc), pl.ds(j * bn, bn)], osem)
            out.start()
            out.wait()
            return c

        lax.fori_loop(0, nb, column_block, 0)

        @pl.when(s < tp - 1)
        def _():
            ring.wait()

        @pl.when(s < tp - 2)
        def _():
            # The slot just used is free for the left neighbour's next send.
            pl.semaphore_signal(cap_sem, 1, device_id=(left,), device_id_type=MESH)

        return carry

    lax.fori_loop(0, tp, step, 0)


def all_gather_matmul(mesh, axis, m, k, n, *, bn, bk, dtype=jnp.bfloat16, vmem_limit_bytes=None):
    """The jitted function ``(x, w) -> all_gather(x) @ w`` on `mesh` along `axis`:
    ``x`` (m, k) row-sharded, ``w`` (k, n) and the result (m, n) column-sharded."""
    tp = mesh.shape[axis]
    mc, n_local = m // tp, n // tp
    if m % tp or n % tp or n_local % bn or k % bk:
        raise ValueError(f"bn={bn} must divide n/tp={n_local} and bk={bk} must divide k={k}")
    kernel = functools.partial(_kernel, tp=tp, axis=axis, bn=bn, bk=bk)
    call = pl.pallas_call(
        kernel,
        out_shape=jax.ShapeDtypeStruct((m, n_local), dtype),
        in_specs=[pl.BlockSpec(memory_space=pl.ANY), pl.BlockSpec(memory_space=pl.ANY)],
        out_specs=pl.BlockSpec(memory_space=pl.ANY),
        scratch_shapes=[
            pltpu.VMEM((2, mc, k), dtype),
            pltpu.VMEM((2, bk, bn), dtype),
            pltpu.VMEM((mc, bn), dtype),
            pltpu.SemaphoreType.DMA,
            pltpu.SemaphoreType.DMA,
            pltpu.SemaphoreType.DMA,
            pltpu.SemaphoreType.REGULAR,
            pltpu.SemaphoreType.DMA((2,)),
            pltpu.SemaphoreType.DMA,
        ],
        compiler_params=pltpu.CompilerParams(collective_id=0, vmem_limit_bytes=vmem_limit_bytes),
        name="all_gather_matmul",
    )
    return jax.jit(
        jax.shard_map(call, mesh=mesh, in_specs=(P(axis), P(None, axis)), out_specs=P(None, axis), check_vma=False)
    )


def operands(mesh, axis, x, w):
    """`x` and `w` (arrays, or ``jax.ShapeDtypeStruct``s: no data) placed as the function
    takes them: ``x`` row-sharded, ``w`` column-sharded over `axis`."""

    def put(a, spec):
        sh = jax.NamedSharding(mesh, spec)
        if isinstance(a, jax.ShapeDtypeStruct):
            return jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=sh)
        return jax.device_put(a, sh)

    return put(x, P(axis)), put(w, P(None, axis))


def production_args(mesh, axis, m=8192, k=5120, n=51200, dtype=jnp.bfloat16):
    """Abstract operands of the production shape (no data), placed."""
    return operands(mesh, axis, jax.ShapeDtypeStruct((m, k), dtype), jax.ShapeDtypeStruct((k, n), dtype))


if __name__ == "__main__":
    import numpy as np

    mesh = jax.make_mesh((jax.device_count(),), ("x",))
    m, k, n = 64 * jax.device_count(), 256, 128 * jax.device_count()
    f = all_gather_matmul(mesh, "x", m, k, n, bn=128, bk=128)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((m, k)).astype(jnp.bfloat16)
    w = rng.standard_normal((k, n)).astype(jnp.bfloat16)
    print(np.asarray(f(*operands(mesh, "x", x, w)))[:2, :4])
