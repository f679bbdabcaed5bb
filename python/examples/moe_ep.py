"""A fused expert-parallel mixture-of-experts layer in one Pallas TPU kernel, and a
ragged all-to-all whose sizes the kernel computes: tpusim's own kernels, steered by
values they compute (run while tracing).

The MoE layer, on every device of the expert axis (`E` experts, `E / P` on each):

1. routing: logits = x @ w_router, softmax, ``lax.top_k`` (k experts per token), the
   weights renormalised; per expert, how many of this device's token slots chose it,
   and each slot's rank among them (vector compute, an iota-built triangular mask);
2. metadata all-gather: every device's counts go into every device's SMEM (remote DMAs
   from VMEM into SMEM), so each knows where every token lands;
3. scatter: each token slot is one row DMA'd to the device of its expert, at the row of
   its expert's region for its source device (sizes and targets read from SMEM), with
   its return address (source device, slot in expert order) as a row of metadata into
   the expert device's SMEM;
4. the expert FFN in bf16 (``gelu(x @ w1) @ w2``, f32 accumulation) on the block of
   rows that came, each local expert's result kept for its own rows, each row pushed
   back to its source;
5. combine: each token's k results weighted and summed (one product with the weights
   scattered to the results' slots).

``moe_reference`` is the same layer in plain JAX. ``ragged_all_to_all`` sends each row
of x to the device its key names (``x[:, 0] mod P``), sizes counted in the kernel.

Run it: ``python python/examples/moe_ep.py [--devices 8] [--backend cpu|gpu]
[--check] [--interpret]`` (under tpusim; ``--interpret`` times JAX's interpret mode).
"""

import argparse
import functools
import sys
import time

import numpy as np


def _setup(devices):
    import jax

    jax.config.update("jax_platforms", "cpu")
    jax.config.update("jax_num_cpu_devices", devices)


def moe_kernel(
    x_ref,
    wr_ref,
    w1_ref,
    w2_ref,
    y_ref,
    route_v,
    route_s,
    cnt_v,
    counts_s,
    recv,
    meta_v,
    recv_meta,
    res,
    ret,
    sems,
    *,
    axis,
    other,
    P,
    E,
    K,
    broken=False,
):
    """The fused MoE layer on one device (see the module's doc). `other`: the mesh's
    other axis, when the expert axis is one of two (device ids name both). `broken`:
    the counts are read before their DMAs are waited for."""
    import jax
    from jax import lax
    from jax import numpy as jnp
    from jax.experimental import pallas as pl
    from jax.experimental.pallas import tpu as pltpu

    cnt_send, cnt_recv, tok_send, tok_recv, meta_send, meta_recv, back_send, back_recv = (sems.at[i] for i in range(8))
    T, H = x_ref.shape
    EL = E // P
    N = T * K
    R = recv.shape[0]
    f32, i32 = jnp.float32, jnp.int32
    me = lax.axis_index(axis)

    def remote(src, dst, send, recv_sem, p):
        dev = {axis: p} if other is None else {axis: p, other: lax.axis_index(other)}
        return pltpu.make_async_remote_copy(src, dst, send, recv_sem, device_id=dev)

    # 1. Routing, counts and ranks: vector compute.
    logits = jnp.dot(x_ref[...].astype(f32), wr_ref[...], preferred_element_type=f32)
    w, idx = lax.top_k(jax.nn.softmax(logits, axis=-1), K)
    w = w / jnp.sum(w, axis=-1, keepdims=True)
    e_of = idx.reshape(N, 1)  # slot n = t * K + k
    onehot = (e_of == lax.broadcasted_iota(i32, (N, E), 1)).astype(i32)  # [N, E]
    counts = jnp.sum(onehot, axis=0, keepdims=True)  # [1, E]
    before = (lax.broadcasted_iota(i32, (N, N), 1) < lax.broadcasted_iota(i32, (N, N), 0)).astype(i32)
    rank = jnp.sum(jnp.dot(before, onehot, preferred_element_type=i32) * onehot, axis=1, keepdims=True)
    upper = (lax.broadcasted_iota(i32, (E, E), 0) < lax.broadcasted_iota(i32, (E, E), 1)).astype(i32)
    first = jnp.dot(counts, upper, preferred_element_type=i32)  # my first slot of each expert
    slot = jnp.sum(onehot * first, axis=1, keepdims=True) + rank  # slot n's place in expert order
    route_v[...] = jnp.concatenate([e_of, rank, slot], axis=1)
    meta_v[...] = jnp.concatenate([jnp.full((N, 1), me, i32), slot], axis=1)
    cnt_v[...] = counts
    pltpu.sync_copy(route_v, route_s)  # VMEM -> SMEM: scalars to steer by
    recv[...] = jnp.zeros_like(recv)  # before my counts go out: no token lands here before

    # 2. Metadata all-gather: my counts into row `me` of every device's SMEM.
    for p in range(P):
        remote(cnt_v, counts_s.at[pl.ds(me, 1)], cnt_send, cnt_recv, p).start()
    one_count = remote(cnt_v, counts_s.at[pl.ds(0, 1)], cnt_send, cnt_recv, 0)

    def wait_counts():
        for _ in range(P):
            one_count.wait_send()
            one_count.wait_recv()

    if not broken:
        wait_counts()

    # 3. Scatter: every slot's token row and return address to its expert's device, at
    # its expert's region there (experts in order), its source's part of it, its rank.
    C = [[counts_s[s, e] for e in range(E)] for s in range(P)]
    tot = [sum(C[s][e] for s in range(P)) for e in range(E)]
    base = jnp.stack([sum((tot[(e // EL) * EL + j] for j in range(e % EL)), i32(0)) for e in range(E)])
    off = jnp.stack([sum((jnp.where(s < me, C[s][e], 0) for s in range(P)), i32(0)) for e in range(E)])
    for n in range(N):
        e, r = route_s[n, 0], route_s[n, 1]
        row = base[e] + off[e] + r
        remote(x_ref.at[pl.ds(n // K, 1)], recv.at[pl.ds(row, 1)], tok_send, tok_recv, e // EL).start()
        remote(meta_v.at[pl.ds(n, 1)], recv_meta.at[pl.ds(row, 1)], meta_send, meta_recv, e // EL).start()
    if broken:
        wait_counts()
    totv = jnp.stack([jnp.asarray(t, i32) for t in tot])
    mine_in = sum(totv[me * EL + j] for j in range(EL))
    one_tok = remote(x_ref.at[pl.ds(0, 1)], recv.at[pl.ds(0, 1)], tok_send, tok_recv, 0)
    one_meta = remote(meta_v.at[pl.ds(0, 1)], recv_meta.at[pl.ds(0, 1)], meta_send, meta_recv, 0)

    @pl.loop(0, N)
    def _(i):
        one_tok.wait_send()
        one_meta.wait_send()

    @pl.loop(0, mine_in)
    def _(i):
        one_tok.wait_recv()
        one_meta.wait_recv()

    # 4. The expert FFN in bf16 on the whole block of rows (zeros past the ones that
    # came), each local expert's result kept for its own rows; each row pushed back.
    rows = lax.broadcasted_iota(i32, (R, 1), 0)
    block = recv[...]
    out = jnp.zeros((R, H), f32)
    start = i32(0)
    for l in range(EL):
        n_l = totv[me * EL + l]
        h = jax.nn.gelu(jnp.dot(block, w1_ref[l], preferred_element_type=f32)).astype(jnp.bfloat16)
        y = jnp.dot(h, w2_ref[l], preferred_element_type=f32)
        out = jnp.where((rows >= start) & (rows < start + n_l), y, out)
        start = start + n_l
    res[...] = out

    @pl.loop(0, mine_in)
    def _(row):
        src, at = recv_meta[row, 0], recv_meta[row, 1]
        remote(res.at[pl.ds(row, 1)], ret.at[pl.ds(at, 1)], back_send, back_recv, src).start()

    one_back = remote(res.at[pl.ds(0, 1)], ret.at[pl.ds(0, 1)], back_send, back_recv, 0)

    @pl.loop(0, mine_in)
    def _(i):
        one_back.wait_send()

    @pl.loop(0, N)
    def _(i):
        one_back.wait_recv()

    # 5. Combine: token t's k results (at their slots in expert order), weighted: one
    # product with the routing weights scattered to those slots.
    pick = (slot.reshape(T, K, 1) == lax.broadcasted_iota(i32, (T, K, N), 2)).astype(f32)
    weights = jnp.sum(pick * w.reshape(T, K, 1), axis=1)  # [T, N]
    y_ref[...] = jnp.dot(weights, ret[...], preferred_element_type=f32)


def moe_call(mesh, axis, *, T, H, F, E, K, broken=False):
    """`f(x, w_router, w1, w2)`: the MoE layer over `axis` of `mesh` (the other axis, if
    any, splits the tokens too): x [tokens, H] bf16 (split over every axis), w_router
    [H, E] f32 (replicated), w1 [E, H, F] and w2 [E, F, H] bf16 (experts split over
    `axis`). T: tokens per device."""
    import jax
    from jax import numpy as jnp
    from jax.experimental import pallas as pl
    from jax.experimental.pallas import tpu as pltpu

    Pspec = jax.sharding.PartitionSpec
    names = mesh.axis_names
    other = next((a for a in names if a != axis), None)
    P = mesh.shape[axis]
    N, R = T * K, P * T * K
    VMEM, SMEM = pltpu.VMEM, pltpu.SMEM
    kernel = functools.partial(moe_kernel, axis=axis, other=other, P=P, E=E, K=K, broken=broken)

    def body(x, wr, w1, w2):
        return pl.pallas_call(
            kernel,
            out_shape=jax.ShapeDtypeStruct((T, H), jnp.float32),
            in_specs=[pl.BlockSpec(memory_space=VMEM)] * 4,
            out_specs=pl.BlockSpec(memory_space=VMEM),
            scratch_shapes=[
                VMEM((N, 3), jnp.int32),
                SMEM((N, 3), jnp.int32),  # route_v, route_s
                VMEM((1, E), jnp.int32),
                SMEM((P, E), jnp.int32),  # cnt_v, counts_s
                VMEM((R, H), jnp.bfloat16),
                VMEM((N, 2), jnp.int32),  # recv, meta_v
                SMEM((R, 2), jnp.int32),
                VMEM((R, H), jnp.float32),  # recv_meta, res
                VMEM((N, H), jnp.float32),  # ret
                pltpu.SemaphoreType.DMA((8,)),
            ],
        )(x, wr, w1, w2)

    tokens = Pspec(tuple(names))
    return jax.jit(
        jax.shard_map(
            body, mesh=mesh, in_specs=(tokens, Pspec(), Pspec(axis), Pspec(axis)), out_specs=tokens, check_vma=False
        )
    )


def moe_reference(x, wr, w1, w2, K):
    """The same layer in plain JAX, token by token's k experts (the kernel's roundings:
    bf16 tokens and hidden activations, f32 products)."""
    import jax
    from jax import lax
    from jax import numpy as jnp

    f32 = jnp.float32
    x, wr, w1, w2 = (jnp.asarray(np.asarray(a)) for a in (x, wr, w1, w2))  # off the mesh
    w, idx = lax.top_k(jax.nn.softmax(jnp.dot(x.astype(f32), wr), axis=-1), K)
    w = w / jnp.sum(w, axis=-1, keepdims=True)
    y = jnp.zeros((x.shape[0], w2.shape[-1]), f32)
    for k in range(K):
        a = jnp.einsum("th,thf->tf", x, w1[idx[:, k]], preferred_element_type=f32)
        a = jax.nn.gelu(a).astype(jnp.bfloat16)
        b = jnp.einsum("tf,tfh->th", a, w2[idx[:, k]], preferred_element_type=f32)
        y = y + w[:, k : k + 1] * b
    return y


def moe_inputs(mesh, axis, *, T, H, F, E, K=None, seed=0):
    """Deterministic inputs of the layer, laid out as `moe_call` takes them."""
    import jax
    from jax import numpy as jnp

    Pspec = jax.sharding.PartitionSpec
    rng = np.random.default_rng(seed)
    n = T * mesh.size
    x = jnp.asarray(rng.normal(size=(n, H)), jnp.bfloat16)
    wr = jnp.asarray(rng.normal(size=(H, E)) / np.sqrt(H), jnp.float32)
    w1 = jnp.asarray(rng.normal(size=(E, H, F)) / np.sqrt(H), jnp.bfloat16)
    w2 = jnp.asarray(rng.normal(size=(E, F, H)) / np.sqrt(F), jnp.bfloat16)
    put = lambda a, spec: jax.device_put(a, jax.NamedSharding(mesh, spec))  # noqa: E731
    return (put(x, Pspec(tuple(mesh.axis_names))), put(wr, Pspec()), put(w1, Pspec(axis)), put(w2, Pspec(axis)))


def ragged_kernel(x_ref, out_ref, n_ref, route_v, route_s, cnt_v, counts_s, sems, *, axis, P):
    """Each row of x goes to the device its key names (``x[:, 0] mod P``); a device's
    output holds the rows it got, by source device then source row, zeros after them,
    and their number. The sizes are counted here, in the kernel."""
    from jax import lax
    from jax import numpy as jnp
    from jax.experimental import pallas as pl
    from jax.experimental.pallas import tpu as pltpu

    cnt_send, cnt_recv, row_send, row_recv = (sems.at[i] for i in range(4))
    T = x_ref.shape[0]
    i32 = jnp.int32
    me = lax.axis_index(axis)

    def remote(src, dst, send, recv, p):
        return pltpu.make_async_remote_copy(src, dst, send, recv, device_id={axis: p})

    dest = lax.rem(x_ref[:, 0:1], P)  # [T, 1]
    onehot = (dest == lax.broadcasted_iota(i32, (T, P), 1)).astype(i32)
    before = (lax.broadcasted_iota(i32, (T, T), 1) < lax.broadcasted_iota(i32, (T, T), 0)).astype(i32)
    rank = jnp.sum(jnp.dot(before, onehot, preferred_element_type=i32) * onehot, axis=1, keepdims=True)
    route_v[...] = jnp.concatenate([dest, rank], axis=1)
    cnt_v[...] = jnp.sum(onehot, axis=0, keepdims=True)
    pltpu.sync_copy(route_v, route_s)
    out_ref[...] = jnp.zeros_like(out_ref)  # before my counts go out: nobody writes here before
    for p in range(P):
        remote(cnt_v, counts_s.at[pl.ds(me, 1)], cnt_send, cnt_recv, p).start()
    one = remote(cnt_v, counts_s.at[pl.ds(0, 1)], cnt_send, cnt_recv, 0)
    for _ in range(P):
        one.wait_send()
        one.wait_recv()
    C = [[counts_s[s, p] for p in range(P)] for s in range(P)]
    off = jnp.stack([sum((jnp.where(s < me, C[s][p], 0) for s in range(P)), i32(0)) for p in range(P)])
    for t in range(T):
        p, r = route_s[t, 0], route_s[t, 1]
        remote(x_ref.at[pl.ds(t, 1)], out_ref.at[pl.ds(off[p] + r, 1)], row_send, row_recv, p).start()
    mine = jnp.stack([sum((C[s][p] for s in range(P)), i32(0)) for p in range(P)])[me]
    row = remote(x_ref.at[pl.ds(0, 1)], out_ref.at[pl.ds(0, 1)], row_send, row_recv, 0)

    @pl.loop(0, T)
    def _(i):
        row.wait_send()

    @pl.loop(0, mine)
    def _(i):
        row.wait_recv()

    n_ref[...] = jnp.full((1, 1), mine, i32)


def ragged_call(mesh, axis, *, T, H):
    """`f(x)`: the ragged all-to-all of x [T * P, H] int32 (T rows per device): per
    device, [P * T, H] rows and [1, 1] their number."""
    import jax
    from jax import numpy as jnp
    from jax.experimental import pallas as pl
    from jax.experimental.pallas import tpu as pltpu

    Pspec = jax.sharding.PartitionSpec
    P = mesh.shape[axis]
    kernel = functools.partial(ragged_kernel, axis=axis, P=P)

    def body(x):
        return pl.pallas_call(
            kernel,
            out_shape=(jax.ShapeDtypeStruct((P * T, H), jnp.int32), jax.ShapeDtypeStruct((1, 1), jnp.int32)),
            in_specs=[pl.BlockSpec(memory_space=pltpu.VMEM)],
            out_specs=(pl.BlockSpec(memory_space=pltpu.VMEM), pl.BlockSpec(memory_space=pltpu.VMEM)),
            scratch_shapes=[
                pltpu.VMEM((T, 2), jnp.int32),
                pltpu.SMEM((T, 2), jnp.int32),
                pltpu.VMEM((1, P), jnp.int32),
                pltpu.SMEM((P, P), jnp.int32),
                pltpu.SemaphoreType.DMA((4,)),
            ],
        )(x)

    spec = Pspec(axis)
    return jax.jit(jax.shard_map(body, mesh=mesh, in_specs=spec, out_specs=(spec, spec), check_vma=False))


def ragged_reference(x, P):
    """Per device p: the rows whose key is p, by source device then row; zeros after."""
    x = np.asarray(x)
    T = x.shape[0] // P
    outs, ns = [], []
    for p in range(P):
        rows = [x[s * T + t] for s in range(P) for t in range(T) if x[s * T + t, 0] % P == p]
        out = np.zeros((P * T, x.shape[1]), x.dtype)
        if rows:
            out[: len(rows)] = np.stack(rows)
        outs.append(out)
        ns.append(len(rows))
    return np.concatenate(outs), np.array(ns, np.int32).reshape(P, 1)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--devices", type=int, default=4, help="P: devices of the expert axis (default 4)")
    ap.add_argument("--mesh2d", action="store_true", help="a (2, P/2) ('data', 'model') mesh instead")
    ap.add_argument("--tokens", type=int, default=8, help="tokens per device (default 8)")
    ap.add_argument("--hidden", type=int, default=128)
    ap.add_argument("--ffn", type=int, default=256)
    ap.add_argument("--experts", type=int, default=8)
    ap.add_argument("--topk", type=int, default=2)
    ap.add_argument("--backend", default="cpu", help="tpusim's executor: cpu, gpu or auto")
    ap.add_argument("--calls", type=int, default=3, help="timed calls (default 3)")
    ap.add_argument("--check", type=int, default=0, metavar="N", help="verify under N schedules too")
    ap.add_argument("--model", default=None, metavar="PRESET", help="the cost model's time (v5e, v5p, v6e)")
    ap.add_argument("--interpret", action="store_true", help="time JAX's TPU interpret mode too")
    a = ap.parse_args(argv)
    _setup(a.devices)
    import jax
    from jax.experimental.pallas import tpu as pltpu

    import tpusim

    if a.mesh2d:
        mesh, axis = jax.make_mesh((2, a.devices // 2), ("data", "model")), "model"
    else:
        mesh, axis = jax.make_mesh((a.devices,), ("x",)), "x"
    cfg = dict(T=a.tokens, H=a.hidden, F=a.ffn, E=a.experts, K=a.topk)
    args = moe_inputs(mesh, axis, **cfg)
    f = moe_call(mesh, axis, **cfg)
    want = np.asarray(moe_reference(*args, K=a.topk))

    def timed(label):
        t = time.perf_counter()
        y = np.asarray(f(*args))  # compiles (tpusim: traces while it runs), then calls
        first = time.perf_counter() - t  # run as a program repeats them
        t = time.perf_counter()
        for _ in range(a.calls):
            y = np.asarray(f(*args))
        dt = (time.perf_counter() - t) / a.calls
        print(
            f"{label}: first call {first * 1e3:.1f} ms, then {dt * 1e3:.1f} ms a call, "
            f"max |error| vs plain JAX {np.abs(y - want).max():.2e}"
        )

    print(f"MoE layer: P={mesh.size} {dict(mesh.shape)}, {cfg}")
    with tpusim.simulate(backend=a.backend):
        timed(f"tpusim ({a.backend})")
    if a.check:
        print(tpusim.check(f, *args, schedules=a.check))
    if a.model:
        for run in tpusim.model(f, *args, preset=a.model):
            print(f"modeled on {a.model}: {run.seconds * 1e6:.2f} us")
    if a.interpret:
        with pltpu.force_tpu_interpret_mode(pltpu.InterpretParams()):
            timed("JAX interpret mode")
    if not a.mesh2d:
        rows = a.tokens
        host = np.random.default_rng(0).integers(0, 1000, size=(mesh.size * rows, 8)).astype(np.int32)
        x = jax.device_put(host, jax.NamedSharding(mesh, jax.sharding.PartitionSpec(axis)))
        g = ragged_call(mesh, axis, T=rows, H=8)
        with tpusim.simulate(backend=a.backend):
            got, n = (np.asarray(v) for v in g(x))
        ref, ref_n = ragged_reference(host, mesh.size)
        print(
            f"ragged all-to-all: rows per device {n.ravel().tolist()}, "
            f"equal to numpy: {bool((got == ref).all() and (n == ref_n).all())}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
