"""Conformance with the pinned JAX's Mosaic TPU lowering: every primitive it registers a
rule for is in the Python chapter's (docs/src/python.md) conformance table, supported or refused with a reason;
each supported value primitive runs in a kernel on odd shapes and every dtype it takes
and matches the same jnp code jitted by XLA on the CPU; a refused one raises
``UnsupportedError`` naming the primitive and the kernel's line."""

import os
import re

import jax
import ml_dtypes
import numpy as np
import pytest
from conftest import marked_line
from jax import lax
from jax import numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

import tpusim

HERE = os.path.abspath(__file__)
README = os.path.join(os.path.dirname(HERE), "..", "..", "docs", "src", "python.md")
BF16 = ml_dtypes.bfloat16
SHAPE = (5, 13)


def registered():
    """The TensorCore primitives the pinned JAX's Mosaic lowering has rules for, with the
    modules that register more imported (the pipeline's, einshape's); tpusim's own
    `tpusim_trace_step` aside."""
    from jax._src.pallas import einshape  # noqa: F401
    from jax._src.pallas.mosaic import core as tpu_core
    from jax._src.pallas.mosaic import (
        lowering,
        pipeline,  # noqa: F401
    )

    return {p.name for p in lowering.lowering_rules[tpu_core.CoreType.TC]} - {"tpusim_trace_step"}


def table():
    """{primitive: status} from the README's conformance table."""
    text = open(README).read()
    section = text.split("## Conformance with the Mosaic TPU lowering", 1)[1].split("\n## ", 1)[0]
    rows = {}
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) >= 2 and cells[0].startswith("`"):
            for name in re.findall(r"`([a-z0-9_]+)`", cells[0]):
                rows[name] = cells[1]
    return rows


def test_the_table_lists_every_primitive_the_lowering_registers():
    rows = table()
    missing = registered() - set(rows)
    assert not missing, f"primitives without a row: {sorted(missing)}"
    extra = set(rows) - registered()
    assert not extra, f"rows of no registered primitive: {sorted(extra)}"
    for name, status in rows.items():
        assert status.startswith(("supported", "refused", "ignored")), (name, status)


# ------------------------------------------------------------------ the value primitives


def data(dtype, seed, positive=False):
    rng = np.random.default_rng(seed)
    dt = np.dtype(dtype)
    if dt == np.bool_:
        return rng.integers(0, 2, SHAPE).astype(bool)
    if dt.kind in "iu":
        info = np.iinfo(dt)
        lo, hi = (0, 12) if positive else (max(info.min, -1000), min(info.max, 1000))
        return rng.integers(lo, hi, SHAPE).astype(dt)
    a = rng.normal(size=SHAPE) * 3
    if positive:
        a = np.abs(a) + 0.1
    else:
        a.flat[:5] = [0.0, -0.0, np.inf, -np.inf, np.nan]
    return a.astype(dt)


FLOAT_UNARY = {
    "neg": lax.neg,
    "abs": lax.abs,
    "sign": lax.sign,
    "floor": lax.floor,
    "ceil": lax.ceil,
    "round": lax.round,
    "exp": lax.exp,
    "exp2": lax.exp2,
    "log": lax.log,
    "log1p": lax.log1p,
    "sqrt": lax.sqrt,
    "rsqrt": lax.rsqrt,
    "tanh": lax.tanh,
    "logistic": lax.logistic,
    "sin": lax.sin,
    "cos": lax.cos,
    "tan": lax.tan,
    "erf": lax.erf,
    "is_finite": lambda x: lax.is_finite(x).astype(x.dtype),
    "square": lax.square,
    "integer_pow": lambda x: lax.integer_pow(x, 3),
    "reciprocal": pl.reciprocal,
    "log2": jnp.log2,
    "one_minus_square": lambda x: 1 - lax.square(x),
}
INT_UNARY = {
    "neg": lax.neg,
    "abs": lax.abs,
    "sign": lax.sign,
    "not": lax.bitwise_not,
    "square": lax.square,
    "integer_pow": lambda x: lax.integer_pow(x, 2),
}
FLOAT_BINARY = {
    "add": lax.add,
    "sub": lax.sub,
    "mul": lax.mul,
    "div": lax.div,
    "rem": lax.rem,
    "pow": lax.pow,
    "max": lax.max,
    "min": lax.min,
    "atan2": lax.atan2,
}
INT_BINARY = {
    "add": lax.add,
    "sub": lax.sub,
    "mul": lax.mul,
    "div": lax.div,
    "rem": lax.rem,
    "max": lax.max,
    "min": lax.min,
    "and": lax.bitwise_and,
    "or": lax.bitwise_or,
    "xor": lax.bitwise_xor,
    "shift_left": lax.shift_left,
    "shift_right_arithmetic": lax.shift_right_arithmetic,
    "shift_right_logical": lax.shift_right_logical,
}
BOOL_BINARY = {"and": lax.bitwise_and, "or": lax.bitwise_or, "xor": lax.bitwise_xor}
COMPARE = {"eq": lax.eq, "ne": lax.ne, "lt": lax.lt, "le": lax.le, "gt": lax.gt, "ge": lax.ge}
EXACT = {
    "neg",
    "abs",
    "sign",
    "floor",
    "ceil",
    "round",
    "is_finite",
    "add",
    "sub",
    "mul",
    "div",
    "max",
    "min",
    "not",
    "and",
    "or",
    "xor",
    "shift_left",
    "shift_right_arithmetic",
    "shift_right_logical",
    "square",
    "rem",
}
TOL = {np.dtype(np.float32): 2e-6, np.dtype(BF16): 1e-2, np.dtype(np.float16): 2e-3}


def on_tpusim(fns, args, out_dtypes):
    """`[f(*args) for f in fns]` computed in one kernel on tpusim (outputs stacked per
    dtype)."""
    n = len(args)

    def kernel(*refs):
        ins, outs = refs[:n], refs[n:]
        vals = [r[...] for r in ins]
        for k, f in enumerate(fns):
            outs[k][...] = f(*vals)

    shapes = [jax.ShapeDtypeStruct(SHAPE, d) for d in out_dtypes]
    call = pl.pallas_call(
        kernel,
        out_shape=shapes,
        in_specs=[pl.BlockSpec(memory_space=pltpu.VMEM)] * n,
        out_specs=[pl.BlockSpec(memory_space=pltpu.VMEM)] * len(fns),
    )
    with tpusim.simulate(backend="cpu"):
        return [np.asarray(o) for o in jax.jit(call)(*args)]


def assert_like_xla(name, got, want, exact):
    dt = np.dtype(want.dtype)
    if dt == np.dtype(BF16):
        got, want = got.astype(np.float32), want.astype(np.float32)
    if exact or dt.kind in "iub":
        np.testing.assert_array_equal(got, want, err_msg=name)
    else:
        tol = TOL[dt]
        np.testing.assert_allclose(got, want, rtol=tol, atol=tol, equal_nan=True, err_msg=name)


@pytest.mark.parametrize(
    "dtype", [np.float32, BF16, np.float16, np.int32, np.int8, np.uint8, np.bool_], ids=lambda d: np.dtype(d).name
)
def test_elementwise_primitives_against_xla_on_the_cpu(dtype):
    dt = np.dtype(dtype)
    x, y = data(dt, 1), data(dt, 2)
    if dt.kind == "f" or dt == np.dtype(BF16):
        unary, binary = FLOAT_UNARY, FLOAT_BINARY
    elif dt == np.bool_:
        unary, binary = {"not": lax.bitwise_not}, BOOL_BINARY
    else:
        unary, binary = dict(INT_UNARY), dict(INT_BINARY)
        if dt.kind == "u":  # lax takes no abs or sign of unsigned integers
            del unary["abs"], unary["sign"]
        bits = dt.itemsize * 8
        y = np.where(np.arange(y.size).reshape(SHAPE) % 7 == 0, y, np.abs(y.astype(np.int64)) % bits).astype(dt)
    cmp = {} if dt == np.bool_ else COMPARE
    fns = [(n, (lambda f: lambda a, b: f(a))(f)) for n, f in unary.items()]
    fns += list(binary.items()) + list(cmp.items())
    out_dtypes = [dt] * (len(unary) + len(binary)) + [np.bool_] * len(cmp)
    got = on_tpusim([f for _, f in fns], [x, y], out_dtypes)
    if dt.kind == "f" or dt == np.dtype(BF16):
        # One XLA function for every float dtype (its transcendentals take seconds to
        # compile): tpusim widens 16-bit floats to f32 and rounds once (README: "Compute
        # on values"), so XLA in f32 rounded once is their reference (XLA's CPU computes
        # some in the narrow type itself: its exp2 of bf16 is 2 ulps off).
        ref = _float_reference(tuple(n for n, _ in fns), tuple(f for _, f in fns))
        f32 = np.float32
        want = [
            np.asarray(v).astype(dt) if v.dtype == f32 else np.asarray(v) for v in ref(x.astype(f32), y.astype(f32))
        ]
    else:
        want = [np.asarray(o) for o in jax.jit(lambda a, b: [f(a, b) for _, f in fns])(x, y)]
    for (name, _), g, w in zip(fns, got, want):
        assert_like_xla(f"{name} {dt.name}", g, w, name in EXACT)


_references = {}


def _float_reference(names, fns):
    """The jitted XLA function of `fns` (by their names: made once)."""
    got = _references.get(names)
    if got is None:
        got = _references[names] = jax.jit(lambda a, b: [f(a, b) for f in fns])
    return got


def kernel_of(fn, args, outs):
    """`fn(*values)` (a tuple of results) as a kernel of whole VMEM refs on tpusim, and
    the same function jitted on the CPU."""
    n = len(args)

    def kernel(*refs):
        res = fn(*[r[...] for r in refs[:n]])
        for r, v in zip(refs[n:], res):
            r[...] = v

    call = pl.pallas_call(
        kernel,
        out_shape=[jax.ShapeDtypeStruct(np.shape(o), o.dtype) for o in outs],
        in_specs=[pl.BlockSpec(memory_space=pltpu.VMEM)] * n,
        out_specs=[pl.BlockSpec(memory_space=pltpu.VMEM)] * len(outs),
    )
    with tpusim.simulate(backend="cpu"):
        return [np.asarray(o) for o in jax.jit(call)(*args)]


def structural(x, y, w, k):
    i32 = jnp.int32
    return (
        lax.broadcast_in_dim(x[0], (3,) + x[0].shape, (1,)),  # broadcast_in_dim
        jnp.broadcast_to(x[:, :1], x.shape),  # broadcast (size 1)
        x.reshape(13, 5),  # reshape
        jnp.squeeze(x[:1], 0),  # squeeze
        x.T,  # transpose
        lax.slice(x, (1, 2), (5, 13), (2, 3)),  # slice (strided)
        lax.dynamic_slice(x, (k, 3), (2, 4)),  # dynamic_slice
        lax.dynamic_update_slice(x, y[:2, :3], (k, 5)),  # dynamic_update_slice
        jnp.concatenate([x, y[:2]], axis=0),  # concatenate
        jnp.split(x, [4], axis=1)[1],  # split
        jnp.stack([x, y], axis=1),  # stack
        jnp.tile(x[:2, :3], (2, 3)),  # tile
        lax.pad(x[:2, :3], jnp.array(0, x.dtype), ((1, 2, 0), (0, 1, 0))),  # pad
        pltpu.roll(x, 4, 1),  # roll
        pltpu.einshape("ab->ba", x),  # einshape_lo
        lax.broadcasted_iota(i32, (4, 6), 1),  # iota
        jnp.sum(x, axis=1),
        jnp.max(x, axis=0),
        jnp.min(x, keepdims=True),  # reduce_*
        jnp.argmax(x, axis=1).astype(i32),
        jnp.argmin(x, axis=0).astype(i32),  # argmax / argmin
        lax.clamp(jnp.array(-2, x.dtype), x, jnp.array(3, x.dtype)),  # clamp
        lax.select_n(lax.rem(jnp.abs(w), 3), x, y, x + y),  # select_n, 3 cases
        *lax.top_k(x, 3),  # top_k
        jnp.dot(x, y.T, preferred_element_type=jnp.float32 if x.dtype != jnp.int32 else i32),  # dot_general
    )


@pytest.mark.parametrize("dtype", [np.float32, BF16, np.int32], ids=lambda d: np.dtype(d).name)
def test_structural_reductions_products_and_top_k_against_xla(dtype):
    rng = np.random.default_rng(5)
    dt = np.dtype(dtype)
    x = (rng.integers(-20, 20, SHAPE)).astype(dt)
    y = (rng.integers(-20, 20, SHAPE)).astype(dt)
    w = rng.integers(-9, 9, SHAPE).astype(np.int32)
    want = [np.asarray(o) for o in jax.jit(lambda a, b, c: structural(a, b, c, 2))(x, y, w)]
    got = kernel_of(lambda a, b, c: structural(a, b, c, 2), [x, y, w], want)
    for n, (g, wv) in enumerate(zip(got, want)):
        assert_like_xla(f"structural #{n} {dt.name}", g, wv, exact=True)


def test_conversions_bitcasts_and_boolean_reductions_against_xla():
    dts = [np.float32, BF16, np.float16, np.int32, np.int8, np.uint8, np.bool_]
    x = (np.random.default_rng(3).normal(size=SHAPE) * 60).astype(np.float32)
    b = x > 0

    def fn(v, m):
        outs = [v.astype(d).astype(e) for d in dts for e in dts if not (d == np.bool_ and e == np.bool_)]
        outs += [
            lax.bitcast_convert_type(v, jnp.int32),
            lax.bitcast_convert_type(v.astype(BF16), jnp.float16),
            pltpu.bitcast(v.astype(jnp.int32), jnp.float32),
            jnp.all(m, axis=1),
            jnp.any(m, axis=0),
        ]
        return tuple(outs)

    want = [np.asarray(o) for o in jax.jit(fn)(x, b)]
    got = kernel_of(fn, [x, b], want)
    for n, (g, w) in enumerate(zip(got, want)):
        assert_like_xla(f"conversion #{n}", g, w, exact=True)


# ------------------------------------------------------------------ refused primitives


def erf_inv_kernel(x_ref, o_ref):
    o_ref[...] = lax.erf_inv(x_ref[...])  # <- erf_inv


def clz_kernel(x_ref, o_ref):
    o_ref[...] = lax.clz(x_ref[...]).astype(o_ref.dtype)  # <- clz


def population_count_kernel(x_ref, o_ref):
    o_ref[...] = lax.population_count(x_ref[...]).astype(o_ref.dtype)  # <- population_count


def nextafter_kernel(x_ref, o_ref):
    o_ref[...] = lax.nextafter(x_ref[...], x_ref[...] + 1)  # <- nextafter


@pytest.mark.parametrize(
    "kernel, prim, dtype",
    [
        (erf_inv_kernel, "erf_inv", np.float32),
        (clz_kernel, "clz", np.int32),
        (population_count_kernel, "population_count", np.int32),
        (nextafter_kernel, "nextafter", np.float32),
    ],
)
def test_a_refused_primitive_names_itself_and_the_kernels_line(kernel, prim, dtype):
    call = pl.pallas_call(
        kernel,
        out_shape=jax.ShapeDtypeStruct(SHAPE, dtype),
        in_specs=[pl.BlockSpec(memory_space=pltpu.VMEM)],
        out_specs=pl.BlockSpec(memory_space=pltpu.VMEM),
    )
    with pytest.raises(tpusim.UnsupportedError) as e, tpusim.simulate(backend="cpu"):
        jax.block_until_ready(jax.jit(call)(np.ones(SHAPE, dtype)))
    assert f"`{prim}`" in str(e.value) and f"{HERE}:{marked_line(HERE, prim)}" in str(e.value), str(e.value)
