"""Primitives on kernel values that the core has no single compute op for, built from
the ops it has (each rule records a few compute ops, with XLA's semantics):
``select_n`` of any number of cases, ``top_k``, ``clamp``, ``tan``, ``log2``, ``erfc``,
``reciprocal``, ``is_finite``, ``split``, ``stack``, ``unstack``, ``pad``, ``tile``,
``pltpu.einshape`` and TPU's ``roll``.

A rule takes the evaluator, the equation, its inputs (values or concrete numpy
operands), the inputs' avals and the current site, and returns the equation's result
(a list for several)."""

import numpy as np

#: name -> rule(ev, eqn, ins, avals, where).
RULES = {}


def rule(*names):
    def register(f):
        for n in names:
            RULES[n] = f
        return f

    return register


# ---------------------------------------------------------------- small helpers


def _op(ev, kind, args, shape, dtype, where, avals=None):
    return ev.compute(kind.get("op", kind["k"]), kind, args, tuple(shape), dtype, where, avals)


def _binary(ev, op, a, b, shape, dtype, where):
    return _op(ev, {"k": "binary", "op": op}, [a, b], shape, dtype, where)


def _unary(ev, op, a, shape, dtype, where):
    return _op(ev, {"k": "unary", "op": op}, [a], shape, dtype, where)


def _compare(ev, op, a, b, shape, where):
    return _op(ev, {"k": "compare", "op": op}, [a, b], shape, np.bool_, where)


def _select(ev, pred, t, f, shape, dtype, where):
    return _op(ev, {"k": "select"}, [pred, t, f], shape, dtype, where)


def _scalar(value, dtype):
    return np.asarray(value, dtype=dtype)


def _lowest(dtype):
    dtype = np.dtype(dtype)
    if dtype.kind == "f" or dtype.name == "bfloat16":
        return _scalar(-np.inf, dtype)
    if dtype == np.bool_:
        return _scalar(False, dtype)
    return _scalar(np.iinfo(dtype).min, dtype)


def _out(eqn, k=0):
    a = eqn.outvars[k].aval
    return tuple(a.shape), a.dtype


# ---------------------------------------------------------------- rules


@rule("select_n")
def select_n(ev, eqn, ins, avals, where):
    """`lax.select_n(which, *cases)`: case `which` (a bool picks case 1 when true)."""
    which, cases = ins[0], ins[1:]
    shape, dtype = _out(eqn)
    wdt = np.dtype(getattr(avals[0], "dtype", np.bool_))
    out = cases[0]
    out_aval = avals[1]
    for k in range(1, len(cases)):
        if wdt == np.bool_:
            pred = which
        else:
            pred = _compare(ev, "eq", which, _scalar(k, wdt), getattr(avals[0], "shape", ()), where)
        out = _op(ev, {"k": "select"}, [pred, cases[k], out], shape, dtype, where, [None, avals[k + 1], out_aval])
        out_aval = None
    if not hasattr(out, "id"):  # every case concrete: the evaluator's constant
        out = ev.constant(np.broadcast_to(np.asarray(out), shape), dtype, where)
    return out


@rule("clamp")
def clamp(ev, eqn, ins, avals, where):
    """`lax.clamp(lo, x, hi)`: `min(max(x, lo), hi)`."""
    lo, x, hi = ins
    shape, dtype = _out(eqn)
    m = _op(ev, {"k": "binary", "op": "max"}, [x, lo], shape, dtype, where, [avals[1], avals[0]])
    return _op(ev, {"k": "binary", "op": "min"}, [m, hi], shape, dtype, where, [None, avals[2]])


@rule("tan")
def tan(ev, eqn, ins, avals, where):
    shape, dtype = _out(eqn)
    s = _unary(ev, "sin", ins[0], shape, dtype, where)
    c = _unary(ev, "cos", ins[0], shape, dtype, where)
    return _binary(ev, "div", s, c, shape, dtype, where)


@rule("log2")
def log2(ev, eqn, ins, avals, where):
    shape, dtype = _out(eqn)
    ln = _unary(ev, "log", ins[0], shape, dtype, where)
    return _binary(ev, "div", ln, _scalar(np.log(2.0), dtype), shape, dtype, where)


@rule("erfc")
def erfc(ev, eqn, ins, avals, where):
    """`1 - erf(x)` (XLA's own keeps more digits where erfc is tiny: x past about 4)."""
    shape, dtype = _out(eqn)
    e = _unary(ev, "erf", ins[0], shape, dtype, where)
    return _binary(ev, "sub", _scalar(1, dtype), e, shape, dtype, where)


@rule("reciprocal")
def reciprocal(ev, eqn, ins, avals, where):
    """`pl.reciprocal(x, approx=...)`: `1 / x` (exactly, approximate or not)."""
    shape, dtype = _out(eqn)
    return _binary(ev, "div", _scalar(1, dtype), ins[0], shape, dtype, where)


@rule("one_minus_square")
def one_minus_square(ev, eqn, ins, avals, where):
    shape, dtype = _out(eqn)
    sq = _op(ev, {"k": "unary", "op": "integer_pow", "n": 2}, [ins[0]], shape, dtype, where)
    return _binary(ev, "sub", _scalar(1, dtype), sq, shape, dtype, where)


@rule("is_finite")
def is_finite(ev, eqn, ins, avals, where):
    """`x - x == 0`: false for infinities and NaN (whose difference is NaN)."""
    x = ins[0]
    shape, _ = _out(eqn)
    d = _binary(ev, "sub", x, x, shape, x.dtype, where)
    return _compare(ev, "eq", d, _scalar(0, x.dtype), shape, where)


@rule("add_any")
def add_any(ev, eqn, ins, avals, where):
    shape, dtype = _out(eqn)
    return _op(ev, {"k": "binary", "op": "add"}, ins, shape, dtype, where, avals)


@rule("top_k", "approx_top_k")
def top_k(ev, eqn, ins, avals, where):
    """`lax.top_k(x, k)` along `axis` (the last by default): the k largest and their
    indices, the lower index first among equals. Element i's rank is the number of
    elements j that beat it (`x[j] > x[i]`, or equal with `j < i`); the t-th output is
    the element of rank t (NaNs: unspecified here)."""
    unsupported = ev.unsupported

    x = ins[0]
    p = eqn.params
    s = tuple(x.shape)
    r = len(s)
    if not p.get("is_max_k", True):
        raise unsupported("approx_min_k", "the smallest k (top_k takes the largest)", where)
    axis = p.get("axis", p.get("reduction_dimension"))
    a = int(axis) % r if axis is not None else r - 1
    k = int(p["k"])
    n = s[a]
    dt = x.dtype
    (vshape, vdt), (ishape, idt) = _out(eqn, 0), _out(eqn, 1)
    # [..., i, j, ...]: element i against element j along the axis.
    e = s[:a] + (n, n) + s[a + 1 :]
    keep = list(range(a)) + [d + 1 for d in range(a + 1, r)]
    xi = _op(ev, {"k": "broadcast", "dims": keep[:a] + [a] + keep[a:]}, [x], e, dt, where)
    xj = _op(ev, {"k": "broadcast", "dims": keep[:a] + [a + 1] + keep[a:]}, [x], e, dt, where)
    i_idx = _op(ev, {"k": "iota", "dim": a}, [], e, np.int32, where)
    j_idx = _op(ev, {"k": "iota", "dim": a + 1}, [], e, np.int32, where)
    gt = _compare(ev, "gt", xj, xi, e, where)
    eq = _compare(ev, "eq", xj, xi, e, where)
    before = _compare(ev, "lt", j_idx, i_idx, e, where)
    tie = _binary(ev, "and", eq, before, e, np.bool_, where)
    beats = _binary(ev, "or", gt, tie, e, np.bool_, where)
    count = _op(ev, {"k": "convert"}, [beats], e, np.int32, where)
    rank = _op(ev, {"k": "reduce", "op": "sum", "dims": [a + 1]}, [count], s, np.int32, where)
    pos = _op(ev, {"k": "iota", "dim": a}, [], s, idt, where)
    reduced = s[:a] + s[a + 1 :]
    one = s[:a] + (1,) + s[a + 1 :]
    vals, idxs = [], []
    for t in range(k):
        hot = _compare(ev, "eq", rank, _scalar(t, np.int32), s, where)
        v = _select(ev, hot, x, _lowest(dt), s, dt, where)
        v = _op(ev, {"k": "reduce", "op": "max", "dims": [a]}, [v], reduced, dt, where)
        vals.append(_op(ev, {"k": "reshape"}, [v], one, dt, where))
        i = _select(ev, hot, pos, _scalar(-1, idt), s, idt, where)
        i = _op(ev, {"k": "reduce", "op": "max", "dims": [a]}, [i], reduced, idt, where)
        idxs.append(_op(ev, {"k": "reshape"}, [i], one, idt, where))
    if k == 1:
        return [vals[0], idxs[0]]
    if p.get("aggregate_to_topk", True) is False:
        raise unsupported("approx_top_k(aggregate_to_topk=False)", "results of more than k", where)
    return [
        _op(ev, {"k": "concat", "dim": a}, vals, vshape, vdt, where),
        _op(ev, {"k": "concat", "dim": a}, idxs, ishape, idt, where),
    ]


@rule("split")
def split(ev, eqn, ins, avals, where):
    """`lax.split(x, sizes, axis)`: slices."""
    x = ins[0]
    axis, sizes = int(eqn.params["axis"]), [int(n) for n in eqn.params["sizes"]]
    outs, at = [], 0
    for n, v in zip(sizes, eqn.outvars):
        start = [0] * len(x.shape)
        start[axis] = at
        outs.append(
            _op(ev, {"k": "slice", "start": start, "strides": [1] * len(x.shape)}, [x], v.aval.shape, x.dtype, where)
        )
        at += n
    return outs


@rule("stack")
def stack(ev, eqn, ins, avals, where):
    """`jnp.stack` as lax's `stack`: each operand with a new dimension, concatenated."""
    axis = int(eqn.params["axis"])
    shape, dtype = _out(eqn)
    one = shape[:axis] + (1,) + shape[axis + 1 :]
    parts = [_op(ev, {"k": "reshape"}, [x], one, dtype, where, [a]) for x, a in zip(ins, avals)]
    return _op(ev, {"k": "concat", "dim": axis}, parts, shape, dtype, where)


@rule("unstack")
def unstack(ev, eqn, ins, avals, where):
    """lax's `unstack`: the slices along `axis`, that dimension dropped."""
    x = ins[0]
    axis = int(eqn.params["axis"])
    r = len(x.shape)
    one = list(x.shape)
    one[axis] = 1
    outs = []
    for i, v in enumerate(eqn.outvars):
        start = [0] * r
        start[axis] = i
        part = _op(ev, {"k": "slice", "start": start, "strides": [1] * r}, [x], one, x.dtype, where)
        outs.append(_op(ev, {"k": "reshape"}, [part], v.aval.shape, x.dtype, where))
    return outs


@rule("einshape_lo")
def einshape_lo(ev, eqn, ins, avals, where):
    """`pltpu.einshape`: the reshapes and transposes its equation makes, evaluated."""
    import functools

    import jax
    from jax._src.pallas import einshape as einshape_mod

    p = eqn.params
    f = functools.partial(einshape_mod._einshape, p["equation"], **dict(p["sizes"]))
    jx = jax.make_jaxpr(f)(jax.ShapeDtypeStruct(avals[0].shape, avals[0].dtype))
    (out,) = ev.run(jx.jaxpr, jx.consts, [ins[0]])
    return out


@rule("tile")
def tile(ev, eqn, ins, avals, where):
    """`jnp.tile` as lax's `tile`: element i of dimension d is element i % n there."""
    x = ins[0]
    reps = [int(n) for n in eqn.params["reps"]]
    s = list(x.shape)
    reps = [1] * (len(s) - len(reps)) + reps if len(reps) < len(s) else reps
    s = [1] * (len(reps) - len(s)) + s
    x = _op(ev, {"k": "reshape"}, [x], s, x.dtype, where) if len(s) != len(x.shape) else x
    wide = [d for pair in zip(reps, s) for d in pair]
    b = _op(ev, {"k": "broadcast", "dims": [2 * d + 1 for d in range(len(s))]}, [x], wide, x.dtype, where)
    shape, dtype = _out(eqn)
    return _op(ev, {"k": "reshape"}, [b], shape, dtype, where)


@rule("roll")
def roll(ev, eqn, ins, avals, where):
    """`pltpu.roll(x, shift, axis)`: `jnp.roll` (element i moves to i + shift)."""
    unsupported = ev.unsupported

    x, shift = ins[0], ins[1]
    p = eqn.params
    if p.get("stride") is not None:
        raise unsupported("roll(stride=...)", "strided rolls", where)
    axis = int(p["axis"]) % len(x.shape)
    n = x.shape[axis]
    s = ev.concrete_int(shift, "the shift of `roll`", where) % n
    if s == 0:
        return x
    r = len(x.shape)
    tail = list(x.shape)
    tail[axis] = s
    head = list(x.shape)
    head[axis] = n - s
    at = [0] * r
    at[axis] = n - s
    one = [1] * r
    a = _op(ev, {"k": "slice", "start": at, "strides": one}, [x], tail, x.dtype, where)
    b = _op(ev, {"k": "slice", "start": [0] * r, "strides": one}, [x], head, x.dtype, where)
    return _op(ev, {"k": "concat", "dim": axis}, [a, b], x.shape, x.dtype, where)


@rule("pad")
def pad(ev, eqn, ins, avals, where):
    """`lax.pad` with edge padding (no interior or negative padding): the padding
    value everywhere, the operand written over it."""
    unsupported = ev.unsupported

    x, value = ins
    config = [tuple(int(c) for c in cfg) for cfg in eqn.params["padding_config"]]
    if any(lo < 0 or hi < 0 or mid != 0 for lo, hi, mid in config):
        raise unsupported("pad", "interior or negative padding", where)
    shape, dtype = _out(eqn)
    full = _op(ev, {"k": "broadcast", "dims": []}, [value], shape, dtype, where, [avals[1]])
    return _op(
        ev,
        {"k": "update_slice", "start": [lo for lo, _, _ in config]},
        [full, x],
        shape,
        dtype,
        where,
        [None, avals[0]],
    )
