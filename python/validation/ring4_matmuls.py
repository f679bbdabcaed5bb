"""Three collective matmuls on a ring of 4 devices with everything in VMEM, written to
be measured the way beshrislambouli/TPU-Collectives measured theirs on a 2x2 TPU v5p
(``collective_matmul.py`` there): the kernel body looped inside one ``pallas_call``,
less a calibration loop that only zeroes the output and hand-shakes, so what is left is
the body alone. Our own kernels of the same algorithms (not that code):

- ``ag_matmul``: ``all_gather(x, axis=1) @ w``. Each device sends its ``x`` shard
  both ways round the ring and multiplies its own block while they travel; each
  neighbour's shard goes one hop further, half of its rows each way, so the shard of
  the device opposite arrives in two halves from the two sides; the blocks are
  multiplied as they arrive and summed into the output.
- ``matmul_rs``: ``psum_scatter(x @ w, axis=1)``. The partial product for the device
  opposite is computed first and sent half each way; the partials for the two
  neighbours next, the halves that arrived added in, and sent; the device's own
  partial last, the two that arrive added to it.
- ``mlp``: three layers of ``gelu(x @ w1) @ w2`` summed over the devices, tensor
  parallel: the first layer's ``x @ w1`` local, each ``@ w2`` a ``matmul_rs``, each next
  ``@ w1`` an ``ag_matmul`` of the scattered rows, a final all-gather.

Shapes per device: x ``[B, K1/4]`` / w ``[K1, K2]`` (ag_matmul), x ``[B, K2]`` / w
``[K2, K1]`` (matmul_rs), bf16. ``loop(kernel, iters, calibrate)`` is the measured
call.
"""

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu
from jax.sharding import PartitionSpec as P

N = 4  # devices on the ring
AXIS = "i"
LOGICAL = pl.DeviceIdType.LOGICAL
VMEM = pl.BlockSpec(memory_space=pltpu.VMEM)
VMEM_LIMIT = 60 << 20  # the measured kernels' own vmem_limit_bytes
SIZES = {"batch": 256, "k1": 1024, "k2": 4096}  # the measured sizes


class Ring:
    """This device's place on the ring and its DMA semaphores (``send[i]`` and
    ``recv[i]`` pair up transfer ``i``: 0-3 the all-gather's, 4-7 the reduce-scatter's,
    so that a neighbour already in the next phase cannot satisfy a wait of this one)."""

    def __init__(self, send, recv):
        self.me = lax.axis_index(AXIS)
        self.next = lax.rem(self.me + 1, N)
        self.opp = lax.rem(self.me + 2, N)
        self.prev = lax.rem(self.me + 3, N)
        self.send, self.recv = send, recv

    def put(self, i, src, dst, to):
        """Starts transfer `i`: local `src` into `dst` on device `to`."""
        c = pltpu.make_async_remote_copy(
            src, dst, self.send.at[i], self.recv.at[i], device_id=to, device_id_type=LOGICAL
        )
        c.start()
        return c


def _bf16_dot(a, b):
    return jnp.dot(a, b, preferred_element_type=jnp.float32).astype(jnp.bfloat16)


def ag_matmul_body(ring, x_ref, w_ref, o_ref, shards):
    """o = all_gather(x, axis=1) @ w; `shards` [N, B, K3] holds the gathered blocks."""
    k3 = x_ref.shape[1]
    half = x_ref.shape[0] // 2
    me, nxt, prv, opp = ring.me, ring.next, ring.prev, ring.opp

    def block(d):
        return _bf16_dot(shards[d], w_ref[pl.ds(pl.multiple_of(d * k3, k3), k3), :])

    shards[me] = x_ref[...]
    hop1 = [ring.put(0, shards.at[me], shards.at[me], nxt), ring.put(1, shards.at[me], shards.at[me], prv)]
    o_ref[...] = block(me)
    for c in hop1:
        c.wait()
    # The opposite device's shard: its first rows come on from `prv`, the rest from `nxt`.
    hop2 = [
        ring.put(2, shards.at[prv, pl.ds(0, half)], shards.at[prv, pl.ds(0, half)], nxt),
        ring.put(3, shards.at[nxt, pl.ds(half, half)], shards.at[nxt, pl.ds(half, half)], prv),
    ]
    o_ref[...] += block(prv)
    o_ref[...] += block(nxt)
    for c in hop2:
        c.wait()
    o_ref[...] += block(opp)


def ag_matmul_scratch(batch, k3):
    return [pltpu.VMEM((N, batch, k3), jnp.bfloat16)]


def matmul_rs_body(ring, x_ref, w_ref, o_ref, part, halves, fulls):
    """o = psum_scatter(x @ w, axis=1): `part` [3, B, K3] the partials for the device
    opposite, next and previous; `halves` [2, B/2, K3] and `fulls` [2, B, K3] receive
    from the previous (0) and the next (1) device."""
    k3 = o_ref.shape[1]
    half = x_ref.shape[0] // 2
    me, nxt, prv, opp = ring.me, ring.next, ring.prev, ring.opp

    def partial(d):
        return _bf16_dot(x_ref[...], w_ref[:, pl.ds(pl.multiple_of(d * k3, k3), k3)])

    part[0] = partial(opp)
    # The opposite device's sum travels two hops: first rows via `nxt`, the rest via `prv`.
    hop1 = [
        ring.put(4, part.at[0, pl.ds(0, half)], halves.at[0], nxt),
        ring.put(5, part.at[0, pl.ds(half, half)], halves.at[1], prv),
    ]
    part[1] = partial(nxt)
    part[2] = partial(prv)
    for c in hop1:
        c.wait()
    # What came from `prv` is for `nxt` (its first rows), what came from `nxt` for `prv`.
    part[1, pl.ds(0, half)] += halves[0]
    part[2, pl.ds(half, half)] += halves[1]
    hop2 = [ring.put(6, part.at[1], fulls.at[0], nxt), ring.put(7, part.at[2], fulls.at[1], prv)]
    o_ref[...] = partial(me)
    for c in hop2:
        c.wait()
    o_ref[...] += fulls[0]
    o_ref[...] += fulls[1]


def matmul_rs_scratch(batch, k3):
    return [
        pltpu.VMEM((3, batch, k3), jnp.bfloat16),
        pltpu.VMEM((2, batch // 2, k3), jnp.bfloat16),
        pltpu.VMEM((2, batch, k3), jnp.bfloat16),
    ]


def mlp_body(ring, x_ref, w1_ref, w2_ref, o_ref, h, y, shards, part, halves, fulls):
    """Three tensor-parallel layers; `h` [B, K2] the hidden activations, `y` [B, K3]
    this device's columns of a layer's output."""
    layers = w1_ref.shape[0]
    k3 = y.shape[1]
    h[...] = _bf16_dot(x_ref[...], w1_ref[0])
    for layer in range(layers):
        h[...] = jax.nn.gelu(h[...])
        matmul_rs_body(ring, h, w2_ref.at[layer], y, part, halves, fulls)
        if layer + 1 < layers:
            ag_matmul_body(ring, y, w1_ref.at[layer + 1], h, shards)
    # The last layer's columns to every device.
    o_ref[:, pl.ds(pl.multiple_of(ring.me * k3, k3), k3)] = y[...]
    dst = o_ref.at[:, pl.ds(pl.multiple_of(ring.me * k3, k3), k3)]
    sends = [ring.put(i, y, dst, lax.rem(ring.me + 1 + i, N)) for i in range(N - 1)]
    for c in sends:
        c.wait()


def mlp_scratch(batch, k2, k3):
    return [pltpu.VMEM((batch, k2), jnp.bfloat16), pltpu.VMEM((batch, k3), jnp.bfloat16)] + [
        *ag_matmul_scratch(batch, k3),
        *matmul_rs_scratch(batch, k3),
    ]


KERNELS = {
    # name: (body, scratch(batch, k1, k2), output shape (batch, k1, k2), inputs)
    "ag_matmul": (ag_matmul_body, lambda b, k1, k2: ag_matmul_scratch(b, k1 // N), lambda b, k1, k2: (b, k2), 2),
    "matmul_rs": (matmul_rs_body, lambda b, k1, k2: matmul_rs_scratch(b, k1 // N), lambda b, k1, k2: (b, k1 // N), 2),
    "mlp": (mlp_body, lambda b, k1, k2: mlp_scratch(b, k2, k1 // N), lambda b, k1, k2: (b, k1), 3),
}


def flops_per_device(name, batch, k1, k2, layers=3):
    """The source's count: 2*B*K1*K2 per matmul of a device, two per layer."""
    one = 2 * batch * k1 * k2
    return one * 2 * layers if name == "mlp" else one


def loop(name, iters, calibrate=False, batch=256, k1=1024, k2=4096):
    """The per-device ``pallas_call`` that runs kernel `name` `iters` times (a static
    trip count), each time zeroing the output first and ending with a two-round
    handshake with every other device; `calibrate`: the loop without the kernel."""
    body, scratch, out_shape, n_in = KERNELS[name]

    def kernel(*refs):
        ins, o_ref, hand, send, recv = refs[:n_in], refs[n_in], refs[n_in + 1], refs[n_in + 2], refs[n_in + 3]
        rest = refs[n_in + 4 :]
        ring = Ring(send, recv)

        def once(_, carry):
            o_ref[...] = jnp.zeros(o_ref.shape, o_ref.dtype)
            if not calibrate:
                body(ring, *ins, o_ref, *rest)
            for r in range(2):
                for d in range(1, N):
                    pl.semaphore_signal(hand.at[r], 1, device_id=lax.rem(ring.me + d, N), device_id_type=LOGICAL)
                pl.semaphore_wait(hand.at[r], N - 1)
            return carry

        lax.fori_loop(0, iters, once, 0)

    return pl.pallas_call(
        kernel,
        out_shape=jax.ShapeDtypeStruct(out_shape(batch, k1, k2), jnp.bfloat16),
        in_specs=[VMEM] * n_in,
        out_specs=VMEM,
        scratch_shapes=[
            pltpu.SemaphoreType.REGULAR((2,)),
            pltpu.SemaphoreType.DMA((2 * N,)),
            pltpu.SemaphoreType.DMA((2 * N,)),
            *scratch(batch, k1, k2),
        ],
        compiler_params=pltpu.CompilerParams(vmem_limit_bytes=VMEM_LIMIT),
    )


def global_shapes(name, batch=256, k1=1024, k2=4096, layers=3):
    """The global operands' shapes of kernel `name` (all bf16)."""
    if name == "ag_matmul":
        return [(batch, k1), (k1, k2 * N)]
    if name == "matmul_rs":
        return [(batch, k2 * N), (k2 * N, k1)]
    return [(batch, k1), (layers, k1, k2 * N), (layers, k2 * N, k1)]


def place(mesh, name, operands):
    """`operands` (arrays, or ``jax.ShapeDtypeStruct``s: no data) sharded as kernel
    `name` takes them."""
    ins, _ = specs(name)
    out = []
    for a, spec in zip(operands, ins):
        sh = jax.NamedSharding(mesh, spec)
        if isinstance(a, jax.ShapeDtypeStruct):
            out.append(jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=sh))
        else:
            out.append(jax.device_put(a, sh))
    return out


def abstract(mesh, name, **sizes):
    """Kernel `name`'s operands as placed shapes, for model-only runs."""
    return place(mesh, name, [jax.ShapeDtypeStruct(s, jnp.bfloat16) for s in global_shapes(name, **sizes)])


def specs(name):
    """(in_specs, out_spec) of the shard_map: the source's sharding."""
    if name == "ag_matmul":
        return (P(None, AXIS), P(None, AXIS)), P(None, AXIS)
    if name == "matmul_rs":
        return (P(None, AXIS), P(AXIS, None)), P(None, AXIS)
    return (P(), P(None, None, AXIS), P(None, AXIS, None)), P()


def sharded(mesh, name, iters, calibrate=False, **sizes):
    """``fn(*global operands)``: kernel `name` looped `iters` times on every device."""
    ins, out = specs(name)
    call = loop(name, iters, calibrate, **sizes)
    return jax.jit(jax.shard_map(call, mesh=mesh, in_specs=ins, out_specs=out, check_vma=False))


def reference(name, *args, layers=3):
    """The same computation in plain JAX on the global operands (f32)."""
    f32 = [jnp.asarray(a, jnp.float32) for a in args]
    if name in ("ag_matmul", "matmul_rs"):
        return f32[0] @ f32[1]
    x, w1, w2 = f32
    for i in range(layers):
        x = jax.nn.gelu(x @ w1[i]) @ w2[i]
    return x
