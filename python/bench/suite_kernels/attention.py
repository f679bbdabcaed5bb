"""Ring attention: every device's queries attend to every device's keys and values,
which travel the ring (rings.ring_pass) while each device folds the block it holds into
its running max, sum and output (online softmax), a block of queries at a time."""

import jax
import numpy as np
from jax import lax
from jax import numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

from .common import AXIS, COLLECTIVE, Case, P
from .rings import ring_pass

VMEM = pl.BlockSpec(memory_space=pltpu.VMEM)
DMA = pltpu.SemaphoreType.DMA
BF16 = jnp.bfloat16
D = 128  # head dimension
SEQ = 512  # sequence rows per device (and head)
QBLOCK = 256  # query rows per block
# The running max starts here, not at -inf: tpusim refuses a kernel with an infinite
# constant ("malformed kernel recording: invalid number"), and JAX's own flash
# attention kernels start from a finite mask value too.
START = -0.7 * float(np.finfo(np.float32).max)


def scores(q, k):
    """q @ k^T / sqrt(D) in f32."""
    return lax.dot_general(q, k, (((1,), (1,)), ((), ())), preferred_element_type=jnp.float32) * (D**-0.5)


def wide(column, like):
    """A (rows, 1) column broadcast to `like`'s shape. Written out because tpusim refuses
    the implicit size-1 broadcast JAX 0.12 puts into `sc - m` ("Sub of shapes [256, 512]
    and [256, 1] ... cannot give [256, 512]")."""
    return jnp.broadcast_to(column, like.shape)


def ring_attention(p, size):
    """softmax(q K^T / sqrt(D)) V per head over the keys and values of all devices (no
    mask); q, k, v (heads, SEQ, D) bf16 per device, the sequence sharded, `size` the
    bytes of q (more heads at larger sizes, so the work grows with the size, not its
    square). The probabilities are multiplied by V in bf16, as flash attention does."""
    heads = max(1, size // (SEQ * D * 2))
    qb = QBLOCK
    nq = SEQ // qb

    def kernel(q_ref, k_ref, v_ref, o_ref, kbuf, vbuf, send_sems, recv_sems, capacity, m_ref, l_ref, acc_ref):
        kbuf[0] = k_ref[...]
        vbuf[0] = v_ref[...]
        m_ref[...] = jnp.full_like(m_ref, START)
        l_ref[...] = jnp.zeros_like(l_ref)
        acc_ref[...] = jnp.zeros_like(acc_ref)

        def compute(s, owner, slot):
            def block(i, carry):
                h, rows = i // nq, pl.ds(pl.multiple_of(i % nq * qb, qb), qb)
                sc = scores(q_ref[h, rows], kbuf[slot, h])
                m_prev = m_ref[h, rows]
                m_new = jnp.maximum(m_prev, jnp.max(sc, axis=1, keepdims=True))
                e = jnp.exp(sc - wide(m_new, sc))
                alpha = jnp.exp(m_prev - m_new)
                l_ref[h, rows] = alpha * l_ref[h, rows] + jnp.sum(e, axis=1, keepdims=True)
                pv = jnp.dot(e.astype(BF16), vbuf[slot, h], preferred_element_type=jnp.float32)
                acc_ref[h, rows] = wide(alpha, pv) * acc_ref[h, rows] + pv
                m_ref[h, rows] = m_new

                @pl.when(s == p - 1)
                def _():
                    o_ref[h, rows] = (acc_ref[h, rows] / wide(l_ref[h, rows], pv)).astype(BF16)

                return carry

            lax.fori_loop(0, heads * nq, block, 0)

        ring_pass(p, [kbuf, vbuf], send_sems, recv_sems, capacity, compute)

    local = (heads, SEQ, D)
    scratch = [
        pltpu.VMEM((2, *local), BF16),
        pltpu.VMEM((2, *local), BF16),
        DMA((2,)),
        DMA((2,)),
        pltpu.SemaphoreType.REGULAR,
        pltpu.VMEM((heads, SEQ, 1), jnp.float32),
        pltpu.VMEM((heads, SEQ, 1), jnp.float32),
        pltpu.VMEM(local, jnp.float32),
    ]
    call = pl.pallas_call(
        kernel,
        out_shape=jax.ShapeDtypeStruct(local, BF16),
        in_specs=[VMEM] * 3,
        out_specs=VMEM,
        compiler_params=COLLECTIVE,
        scratch_shapes=scratch,
    )

    def reference(q, k, v):
        ks, vs = (lax.all_gather(t, AXIS, axis=1, tiled=True) for t in (k, v))

        def head(qh, kh, vh):
            def block(qi):  # a block of queries at a time: the whole score matrix need not fit
                return jnp.dot(jax.nn.softmax(scores(qi, kh), axis=-1), vh.astype(jnp.float32))

            return lax.map(block, qh.reshape(nq, qb, D)).reshape(SEQ, D)

        return lax.map(lambda a: head(*a), (q, ks, vs)).astype(BF16)

    ins = [((heads, p * SEQ, D), BF16)] * 3
    return Case(
        call,
        reference,
        (P(None, AXIS),) * 3,
        P(None, AXIS),
        ins,
        ins[:1],
        lambda rng: [rng.standard_normal(ins[0][0], dtype=np.float32).astype(BF16) for _ in range(3)],
        rtol=2e-2,
        blocks=(VMEM,) * 4,
        scratch=scratch,
    )
