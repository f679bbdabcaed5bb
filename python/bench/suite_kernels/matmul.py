"""The collective matmuls, bf16 operands with f32 accumulation: all-gather matmul,
matmul reduce-scatter, and a tensor-parallel MLP layer with gelu. `size` is the bytes
of one device's activations x; the weights are K x N (K = N = 512) per device."""

import jax
import numpy as np
from jax import lax
from jax import numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

from .common import AXIS, COLLECTIVE, Case, P, rows_for
from .rings import ring_pass, ring_reduce

VMEM = pl.BlockSpec(memory_space=pltpu.VMEM)
DMA = pltpu.SemaphoreType.DMA
REGULAR = pltpu.SemaphoreType.REGULAR
K = N = 512
BF16 = jnp.bfloat16


def weights(rng, shape):
    """bf16 weights scaled so a product of K terms stays near 1."""
    return (rng.standard_normal(shape, dtype=np.float32) / np.sqrt(shape[-2])).astype(BF16)


def dot(a, b):
    return jnp.dot(a, b, preferred_element_type=jnp.float32)


def all_gather_matmul(p, size):
    """all_gather(x) @ W: each device's rows of x travel the ring (rings.ring_pass) while
    every device multiplies the block it holds by its own W (columns of a wider W)."""
    m = rows_for(size, 2 * K)

    def kernel(x_ref, w_ref, o_ref, buf, send_sems, recv_sems, capacity):
        buf[0] = x_ref[...]

        def compute(s, owner, slot):
            o_ref[pl.ds(pl.multiple_of(owner * m, 8), m), :] = dot(buf[slot], w_ref[...]).astype(BF16)

        ring_pass(p, [buf], send_sems, recv_sems, capacity, compute)

    scratch = [pltpu.VMEM((2, m, K), BF16), DMA((1,)), DMA((1,)), REGULAR]
    call = pl.pallas_call(
        kernel,
        out_shape=jax.ShapeDtypeStruct((p * m, N), BF16),
        in_specs=[VMEM, VMEM],
        out_specs=VMEM,
        compiler_params=COLLECTIVE,
        scratch_shapes=scratch,
    )

    def reference(x, w):
        return dot(lax.all_gather(x, AXIS, tiled=True), w).astype(BF16)

    ins = [((p * m, K), BF16), ((K, p * N), BF16)]
    return Case(
        call,
        reference,
        (P(AXIS), P(None, AXIS)),
        P(None, AXIS),
        ins,
        [((p * m, p * N), BF16)],
        lambda rng: [rng.standard_normal(ins[0][0], dtype=np.float32).astype(BF16), weights(rng, ins[1][0])],
        rtol=1e-2,
        blocks=(VMEM,) * 3,
        scratch=scratch,
    )


def reduce_scatter_call(p, m, cols, contract, prologue=None, scratch=()):
    """The pallas_call of a matmul reduce-scatter: o = block `me` (m / p rows) of
    sum over devices of a @ W, a (m, contract) and W (contract, cols) per device, each
    step's partial product computed as the ring needs it (rings.ring_reduce). With a
    prologue, a is what prologue(refs…, a_scratch) writes into a VMEM scratch first."""
    mb = m // p

    def kernel(*refs):
        nin = 3 if prologue else 2
        ins, o_ref, (acc, recv, send_sem, recv_sems, capacity), extra = (
            refs[:nin],
            refs[nin],
            refs[nin + 1 : nin + 6],
            refs[nin + 6 :],
        )
        a_ref, w_ref = (extra[0], ins[2]) if prologue else ins
        if prologue:
            prologue(*ins[:2], a_ref)

        def contribution(blk):
            return dot(a_ref[pl.ds(pl.multiple_of(blk * mb, 8), mb), :], w_ref[...])

        o_ref[...] = ring_reduce(p, contribution, acc, recv, send_sem, recv_sems, capacity)

    nin = 3 if prologue else 2
    scratch = reduce_scatter_scratch(p, m, cols, scratch)
    return pl.pallas_call(
        kernel,
        out_shape=jax.ShapeDtypeStruct((mb, cols), jnp.float32),
        in_specs=[VMEM] * nin,
        out_specs=VMEM,
        compiler_params=COLLECTIVE,
        scratch_shapes=scratch,
    )


def reduce_scatter_scratch(p, m, cols, extra=()):
    """The scratch of reduce_scatter_call: the ring's accumulator, its two receive slots,
    semaphores, then `extra`."""
    mb = m // p
    return [
        pltpu.VMEM((mb, cols), jnp.float32),
        pltpu.VMEM((2, mb, cols), jnp.float32),
        DMA,
        DMA((2,)),
        REGULAR,
        *extra,
    ]


def matmul_reduce_scatter(p, size):
    """psum_scatter(x @ W) over rows: x (m, K) and W (K, N) hold one device's share of
    the contraction; device d ends with rows block d of the f32 sum."""
    m = rows_for(size, 2 * K, 8 * p)
    call = reduce_scatter_call(p, m, N, K)

    def reference(x, w):
        return lax.psum_scatter(dot(x, w), AXIS, scatter_dimension=0, tiled=True)

    ins = [((m, p * K), BF16), ((p * K, N), BF16)]
    return Case(
        call,
        reference,
        (P(None, AXIS), P(AXIS)),
        P(AXIS),
        ins,
        [((m, N), np.float32)],
        lambda rng: [rng.standard_normal(ins[0][0], dtype=np.float32).astype(BF16), weights(rng, ins[1][0])],
        rtol=1e-4,
        blocks=(VMEM,) * 3,
        scratch=reduce_scatter_scratch(p, m, N),
    )


def gelu_hidden(x, w1):
    """The MLP's hidden layer, as the kernel and the reference both compute it."""
    return jax.nn.gelu(dot(x, w1)).astype(BF16)


def tp_mlp(p, size):
    """A tensor-parallel MLP layer: x (m, D) on every device, W1 (D, H) its columns and
    W2 (H, D) its rows of the hidden layer; h = gelu(x @ W1) in bf16, then the matmul
    reduce-scatter of h @ W2 (device d ends with rows block d of the f32 sum)."""
    d = hidden = K
    m = rows_for(size, 2 * d, 8 * p)

    def prologue(x_ref, w1_ref, h_ref):
        h_ref[...] = gelu_hidden(x_ref[...], w1_ref[...])

    extra = [pltpu.VMEM((m, hidden), BF16)]
    call = reduce_scatter_call(p, m, d, hidden, prologue, extra)

    def reference(x, w1, w2):
        return lax.psum_scatter(dot(gelu_hidden(x, w1), w2), AXIS, scatter_dimension=0, tiled=True)

    ins = [((m, d), BF16), ((d, p * hidden), BF16), ((p * hidden, d), BF16)]
    return Case(
        call,
        reference,
        (P(), P(None, AXIS), P(AXIS)),
        P(AXIS),
        ins,
        [((m, d), np.float32)],
        lambda rng: [
            rng.standard_normal(ins[0][0], dtype=np.float32).astype(BF16),
            weights(rng, ins[1][0]),
            weights(rng, ins[2][0]),
        ],
        rtol=1e-2,
        blocks=(VMEM,) * 4,
        scratch=reduce_scatter_scratch(p, m, d, extra),
    )
