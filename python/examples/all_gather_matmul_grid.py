"""An all-gather matmul laid out as a grid, the structure of the tensor-parallel
all-gather matmul of vllm-project/tpu-inference
(``tpu_inference/kernels/collectives/all_gather_matmul.py``), whose ``(bn, bk)`` that
project tuned on TPU v6e per shape: this is our own kernel of that structure, so that
its block sizes mean the same thing.

``x`` (``m x k``) is row-sharded over `tp` devices, ``y`` (``k x n``) column-sharded;
each device computes ``all_gather(x) @ y_local`` (``m x n/tp``). The grid is
``(tp + 2, n/tp/bn, k/bk)``, every step sequential:

- ring: each device's rows go both ways round the ring, the first half left and the
  second half right, one hop per outer step, into a ``[tp-1, m/tp, k]`` scratch in HBM
  (a second output), after a barrier with both neighbours;
- VMEM: ``x`` for two outer steps (``[2, m/tp, k]``), all of ``y_local`` (``[k, n/tp]``,
  fetched block by block in the first outer step), the output in two ``[m/tp, bn]``
  slots, and an f32 ``[m/tp, bn]`` accumulator when ``k`` is split (``bk < k``);
- step ``g`` starts and waits the copies its blocks need (``x`` at ``j == 0``, ``y`` in
  the first outer step), multiplies the blocks of step ``g - 1`` and sends the finished
  output block of the step before to HBM while it does.

The kernel's ``vmem_limit_bytes`` is that project's: its estimate of the scratch (the
output slots counted at ``m`` rows) plus 8 MiB.
"""

import functools

import jax
import jax.numpy as jnp
from all_gather_matmul import operands  # noqa: F401  (the same placement: x rows, y columns)
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu
from jax.sharding import PartitionSpec as P

MESH = pl.DeviceIdType.MESH


def _kernel(x_hbm, y_hbm, o_hbm, xs_hbm, x_sem, y_sem, o_sem, send, recv, xv, yv, ov, acc, *, tp, axis, gn, gk, bn, bk):
    s, j, kk = pl.program_id(0), pl.program_id(1), pl.program_id(2)
    per = gn * gk  # steps per outer step
    total = tp * per  # blocks to multiply
    g = s * per + j * gk + kk
    mh = xv.shape[1] // 2
    me = lax.axis_index(axis)
    left, right = lax.rem(me + tp - 1, tp), lax.rem(me + 1, tp)

    # The ring: halves of the rows one hop further each outer step.
    def hop(step, first):
        src = x_hbm if first else xs_hbm.at[step - 1]
        return [
            pltpu.make_async_remote_copy(
                src.at[pl.ds(h * mh, mh)],
                xs_hbm.at[step, pl.ds(h * mh, mh)],
                send.at[h, step],
                recv.at[h, step],
                device_id=(to,),
                device_id_type=MESH,
            )
            for h, to in ((0, left), (1, right))
        ]

    def x_in(step):  # this outer step's rows (all k columns of block kk) into VMEM
        ks = pl.ds(kk * bk, bk)
        slot = lax.rem(step, 2)
        if_first = [pltpu.make_async_copy(x_hbm.at[:, ks], xv.at[slot, :, ks], x_sem)]
        later = [
            pltpu.make_async_copy(xs_hbm.at[step - 1, pl.ds(h * mh, mh), ks], xv.at[slot, pl.ds(h * mh, mh), ks], x_sem)
            for h in (0, 1)
        ]
        return if_first, later

    def y_in():
        blk = (pl.ds(kk * bk, bk), pl.ds(j * bn, bn))
        return pltpu.make_async_copy(y_hbm.at[blk], yv.at[blk], y_sem)

    def o_out(c):  # output block c (c-th n block overall) to HBM, its halves to their rows
        sc, jc = c // gn, lax.rem(c, gn)
        src_top, src_bot = lax.rem(me + sc, tp), lax.rem(me + tp - sc, tp)
        return [
            pltpu.make_async_copy(
                ov.at[lax.rem(c, 2), pl.ds(h * mh, mh)],
                o_hbm.at[pl.ds((2 * src + h) * mh, mh), pl.ds(jc * bn, bn)],
                o_sem,
            )
            for h, src in ((0, src_top), (1, src_bot))
        ]

    first_hop, later_hop = hop(0, True), hop(s, False)
    x_first, x_later = x_in(s)
    # Output block c is complete after step (c + 1) * gk; it goes out during the next gk steps.
    c_out = (g - 1) // gk - 1
    o_busy = jnp.logical_and(g > gk, g <= total + gk)

    @pl.when(g == 0)
    def _():
        if gk > 1:
            acc[...] = jnp.zeros_like(acc)
        bar = pltpu.get_barrier_semaphore()
        for to in (left, right):
            pl.semaphore_signal(bar, 1, device_id=(to,), device_id_type=MESH)
        pl.semaphore_wait(bar, 2)
        for c in first_hop:
            c.start()

    later_ring = jnp.logical_and(jnp.logical_and(s > 0, s < tp - 1), lax.rem(g, per) == 0)

    @pl.when(later_ring)
    def _():
        for c in later_hop:
            c.start()

    @pl.when(jnp.logical_and(s == 0, j == 0))
    def _():
        x_first[0].start()

    x_from_ring = jnp.logical_and(jnp.logical_and(s > 0, s < tp), j == 0)

    @pl.when(x_from_ring)
    def _():
        for c in x_later:
            c.start()

    @pl.when(s == 0)
    def _():
        y_in().start()

    @pl.when(jnp.logical_and(o_busy, lax.rem(g - 1, gk) == 0))
    def _():
        for c in o_out(c_out):
            c.start()

    @pl.when(jnp.logical_and(g >= 1, g <= total))
    def _():
        b = g - 1
        bs, bj, bki = b // per, lax.rem(b, per) // gk, lax.rem(b, gk)
        lhs = xv.at[lax.rem(bs, 2), :, pl.ds(bki * bk, bk)]
        rhs = yv.at[pl.ds(bki * bk, bk), pl.ds(bj * bn, bn)]
        slot = lax.rem(b // gk, 2)
        if gk == 1:
            ov[slot] = jnp.dot(lhs[...], rhs[...], preferred_element_type=jnp.float32).astype(ov.dtype)
        else:
            acc[...] += jnp.dot(lhs[...], rhs[...], preferred_element_type=jnp.float32)

            @pl.when(bki == gk - 1)
            def _():
                ov[slot] = acc[...].astype(ov.dtype)
                acc[...] = jnp.zeros_like(acc)

    @pl.when(jnp.logical_and(o_busy, lax.rem(g, gk) == 0))
    def _():
        for c in o_out(c_out):
            c.wait()

    @pl.when(s == 0)
    def _():
        y_in().wait()

    @pl.when(jnp.logical_and(s == 0, j == 0))
    def _():
        x_first[0].wait()

    @pl.when(x_from_ring)
    def _():
        for c in x_later:
            c.wait()

    @pl.when(g == per - 1)
    def _():
        for c in first_hop:
            c.wait()

    @pl.when(jnp.logical_and(jnp.logical_and(s > 0, s < tp - 1), lax.rem(g, per) == per - 1))
    def _():
        for c in later_hop:
            c.wait()


def vmem_limit_bytes(m, n, k, bn, bk, tp, itemsize=2):
    """The limit the kernel asks for: tpu-inference's estimate of its VMEM scratch (the
    output slots counted at ``m`` rows) plus 8 MiB."""
    mp, np_ = m // tp, n // tp
    acc = (mp * bn if bk < k else 8 * 128) * 4
    return 2 * mp * k * itemsize + k * np_ * itemsize + 2 * m * bn * itemsize + acc + (8 << 20)


def all_gather_matmul(mesh, axis, m, k, n, *, bn, bk, dtype=jnp.bfloat16):
    """The jitted ``(x, y) -> all_gather(x) @ y`` on `mesh` along `axis` (``x`` (m, k)
    row-sharded, ``y`` (k, n) and the result (m, n) column-sharded)."""
    tp = mesh.shape[axis]
    mp, np_ = m // tp, n // tp
    if m % (2 * tp) or (mp // 2) % 8 or n % tp or np_ % bn or k % bk or bn % 128 or bk % 128:
        raise ValueError(
            f"m={m} must split in 2*tp halves of 8-row multiples, bn={bn} must divide n/tp={np_} "
            f"and bk={bk} k={k}, both multiples of 128"
        )
    gn, gk = np_ // bn, k // bk
    kernel = functools.partial(_kernel, tp=tp, axis=axis, gn=gn, gk=gk, bn=bn, bk=bk)
    hbm = pl.BlockSpec(memory_space=pltpu.HBM)
    call = pl.pallas_call(
        kernel,
        out_shape=(jax.ShapeDtypeStruct((m, np_), dtype), jax.ShapeDtypeStruct((tp - 1, mp, k), dtype)),
        grid_spec=pltpu.PrefetchScalarGridSpec(
            num_scalar_prefetch=0,
            grid=(tp + 2, gn, gk),
            in_specs=[hbm, hbm],
            out_specs=[hbm, hbm],
            scratch_shapes=[
                pltpu.SemaphoreType.DMA,
                pltpu.SemaphoreType.DMA,
                pltpu.SemaphoreType.DMA,
                pltpu.SemaphoreType.DMA((2, tp - 1)),
                pltpu.SemaphoreType.DMA((2, tp - 1)),
                pltpu.VMEM((2, mp, k), dtype),
                pltpu.VMEM((k, np_), dtype),
                pltpu.VMEM((2, mp, bn), dtype),
                pltpu.VMEM((mp, bn) if gk > 1 else (8, 128), jnp.float32),
            ],
        ),
        compiler_params=pltpu.CompilerParams(
            collective_id=0, vmem_limit_bytes=vmem_limit_bytes(m, n, k, bn, bk, tp, jnp.dtype(dtype).itemsize)
        ),
        name="all_gather_matmul_grid",
    )
    return jax.jit(
        jax.shard_map(
            lambda x, y: call(x, y)[0],
            mesh=mesh,
            in_specs=(P(axis), P(None, axis)),
            out_specs=P(None, axis),
            check_vma=False,
        )
    )


def candidates(extent, floor=1024):
    """Block sizes a tuner tries along an extent: the multiples of 128 that divide it,
    from `floor` up (or the extent itself when smaller)."""
    return [b for b in range(128, extent + 1, 128) if extent % b == 0 and b >= min(floor, extent)]
