"""A mixture-of-experts layer, one expert per device, top-1 routing fixed per call:
dispatch (each block of tokens DMA'd to its expert's device), expert (gelu(x @ W) on
the blocks it received), return (each result DMA'd back where it came from) and
combine (scaled by the token's gate)."""

import jax
import numpy as np
from jax import lax
from jax import numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

from .common import AXIS, COLLECTIVE, Case, P, all_barrier, rows_for
from .matmul import dot
from .rings import remote

ANY = pl.BlockSpec(memory_space=pl.ANY)
VMEM = pl.BlockSpec(memory_space=pltpu.VMEM)
SMEM = pl.BlockSpec(memory_space=pltpu.SMEM)  # where scalar-prefetch operands go
DMA = pltpu.SemaphoreType.DMA
BF16 = jnp.bfloat16
D = 256  # model width; each expert is D x D
BLOCKS = 4  # blocks of tokens per device and expert, on average


def routing(p, nb, seed=0):
    """Device i sends its token block b to expert route[i, b], into that expert's
    inbox slot slot[i, b] (slots in order of sender, then block). Per expert e: how many
    blocks it receives, and for each slot the device and block it came from."""
    route = np.random.default_rng(seed + p).integers(0, p, size=(p, nb))
    count = np.zeros(p, np.int64)
    slot = np.zeros((p, nb), np.int64)
    origin = [[] for _ in range(p)]
    for i in range(p):
        for b in range(nb):
            e = route[i, b]
            slot[i, b] = count[e]
            count[e] += 1
            origin[e].append((i, b))
    cap = max(1, int(count.max()))
    back_dev = np.zeros((p, cap), np.int64)
    back_blk = np.zeros((p, cap), np.int64)
    for e in range(p):
        for k, (i, b) in enumerate(origin[e]):
            back_dev[e, k], back_blk[e, k] = i, b
    return [t.astype(np.int32) for t in (route, slot, count[:, None], back_dev, back_blk)], cap


def expert(x, w):
    """One expert on a block of tokens, as the kernel and the reference both compute it."""
    return jax.nn.gelu(dot(x, w)).astype(BF16)


def moe(p, size):
    """x (t, D) bf16 tokens per device, `size` their bytes, in p * BLOCKS blocks; W (D, D)
    the device's expert; gate (t, 1) f32 each token's weight."""
    t = rows_for(size, 2 * D, 8 * BLOCKS * p)
    nb = BLOCKS * p
    g = t // nb
    tables, cap = routing(p, nb)

    def kernel(route, slot, count, back_dev, back_blk, x_ref, w_ref, gate_ref, o_ref, inbox, outbox, back, sems):
        me = lax.axis_index(AXIS)
        all_barrier(p)  # every inbox and return buffer exists before anyone writes into it

        def dispatch(b, c):
            src = x_ref.at[pl.ds(pl.multiple_of(b * g, 8), g)]
            remote(src, inbox.at[slot[0, b]], sems.at[0], sems.at[1], route[0, b]).start()
            return c

        lax.fori_loop(0, nb, dispatch, 0)
        # Every DMA is one block: wait for as many as went out and as come in.
        one = remote(inbox.at[0], outbox.at[0], sems.at[0], sems.at[1], me)
        lax.fori_loop(0, nb, lambda b, c: (one.wait_send(), c)[1], 0)
        lax.fori_loop(0, count[0, 0], lambda k, c: (one.wait_recv(), c)[1], 0)

        def compute(k, c):
            outbox[k] = expert(inbox[k], w_ref[...])
            dst = back.at[pl.ds(pl.multiple_of(back_blk[0, k] * g, 8), g)]
            remote(outbox.at[k], dst, sems.at[2], sems.at[3], back_dev[0, k]).start()
            return c

        lax.fori_loop(0, count[0, 0], compute, 0)
        one = remote(outbox.at[0], inbox.at[0], sems.at[2], sems.at[3], me)
        lax.fori_loop(0, count[0, 0], lambda k, c: (one.wait_send(), c)[1], 0)
        lax.fori_loop(0, nb, lambda b, c: (one.wait_recv(), c)[1], 0)
        gate = gate_ref[...]
        o_ref[...] = (jnp.broadcast_to(gate, (t, D)) * back[...]).astype(BF16)

    scratch = [
        pltpu.VMEM((cap, g, D), BF16),
        pltpu.VMEM((cap, g, D), BF16),
        pltpu.VMEM((t, D), BF16),
        DMA((4,)),
    ]
    grid_spec = pltpu.PrefetchScalarGridSpec(
        num_scalar_prefetch=5, in_specs=[ANY, VMEM, VMEM], out_specs=VMEM, scratch_shapes=scratch
    )
    call = pl.pallas_call(
        kernel, out_shape=jax.ShapeDtypeStruct((t, D), BF16), grid_spec=grid_spec, compiler_params=COLLECTIVE
    )

    def reference(route, slot, count, back_dev, back_blk, x, w, gate):
        experts = lax.all_gather(w, AXIS)[route[0]]  # each block's expert's weights
        y = jax.vmap(expert)(x.reshape(nb, g, D), experts).reshape(t, D)
        return (gate * y).astype(BF16)

    ins = [(tb.shape, np.int32) for tb in tables] + [((p * t, D), BF16), ((p * D, D), BF16), ((p * t, 1), np.float32)]

    def inputs(rng):
        x = rng.standard_normal(ins[5][0], dtype=np.float32).astype(BF16)
        w = (rng.standard_normal(ins[6][0], dtype=np.float32) / np.sqrt(D)).astype(BF16)
        return tables + [x, w, rng.uniform(0, 1, size=ins[7][0]).astype(np.float32)]

    return Case(
        call,
        reference,
        (P(AXIS),) * 8,
        P(AXIS),
        ins,
        [((p * t, D), BF16)],
        inputs,
        rtol=1e-2,
        blocks=(SMEM,) * 5 + (ANY, VMEM, VMEM, VMEM),
        scratch=scratch,
    )
