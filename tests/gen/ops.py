"""Generates tests/data/ops/: every compute op of tpusim on inputs of every dtype it
takes, with the results JAX (XLA on the CPU) computes for them, as .npy files and a
manifest (cases.json) that tests/ops.rs runs on both executors.

Run from the repository root with jax[cpu] and ml_dtypes installed:
    python3 tests/gen/ops.py
Each case names its op as tpusim's IR does (src/ir/compute.rs) and how close a result
must be: "exact" (the same bits; any NaN matches any NaN), or a per-element tolerance
file (`tol`, float64): |got - want| <= tol, from the op's accuracy bound.
"""

import json
import os

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
from jax import lax

jax.config.update("jax_platforms", "cpu")

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "data", "ops")
BF16 = ml_dtypes.bfloat16
NAMES = {
    np.dtype(np.float32): "f32",
    np.dtype(np.int32): "i32",
    np.dtype(np.float16): "f16",
    np.dtype(BF16): "bf16",
    np.dtype(np.int8): "i8",
    np.dtype(np.uint8): "u8",
    np.dtype(np.bool_): "bool",
}
FLOATS = [np.float32, BF16, np.float16]
INTS = [np.int32, np.int8, np.uint8]
rng = np.random.RandomState(7)
cases = []
files = {}


def save(arr, tag):
    arr = np.array(arr, order="C")  # (ascontiguousarray makes a 0-d array 1-d)
    name = f"{len(files):04d}_{tag}.npy"
    files[name] = arr
    return name


def unit(dt):
    """Unit roundoff of a float dtype."""
    return {np.dtype(np.float32): 2.0**-24, np.dtype(np.float16): 2.0**-11, np.dtype(BF16): 2.0**-8}[
        np.dtype(dt)
    ]


def floats(shape, dt, lo=-4.0, hi=4.0, special=True):
    x = rng.uniform(lo, hi, size=shape)
    flat = x.reshape(-1)
    if special and flat.size >= 12:
        flat[:12] = [0.0, -0.0, np.inf, -np.inf, np.nan, 1.0, -1.0, 0.5, -0.5, 2.5, -2.5, 1e-3]
    return x.astype(dt)


def ints(shape, dt):
    info = np.iinfo(dt)
    lo, hi = max(info.min, -1000), min(info.max, 1000)
    x = rng.randint(lo, hi + 1, size=shape).astype(np.int64)
    flat = x.reshape(-1)
    if flat.size >= 6:
        flat[:6] = [0, 1, -1 if info.min < 0 else 2, info.min, info.max, 7]
    return x.astype(dt)


def bools(shape):
    return rng.randint(0, 2, size=shape).astype(np.bool_)


def values(shape, dt):
    dt = np.dtype(dt)
    if dt == np.bool_:
        return bools(shape)
    if dt.kind in "iu":
        return ints(shape, dt)
    return floats(shape, dt)


def ulps_tol(want, dt, n):
    """n ulps of the result (at least n ulps of the smallest normal), 0 for NaN/inf."""
    w = np.asarray(want, np.float64)
    mag = np.where(np.isfinite(w), np.abs(w), 0.0)
    tiny = float(np.finfo(np.float32).tiny if np.dtype(dt) == np.float32 else np.finfo(dt).tiny)
    return n * 2.0 * unit(dt) * np.maximum(mag, tiny)


def case(op, params, ins, want, tol=None, shape=None, dtype=None):
    if callable(want):
        try:
            want = want()
        except Refused:
            return
    want = np.asarray(want)
    c = {
        "op": op,
        "params": params,
        "inputs": [save(np.asarray(a), NAMES[np.asarray(a).dtype]) for a in ins],
        "want": save(want, NAMES[want.dtype]),
        "shape": list(want.shape) if shape is None else shape,
        "dtype": NAMES[want.dtype] if dtype is None else dtype,
    }
    if tol is not None:
        c["tol"] = save(np.asarray(tol, np.float64), "tol")
    cases.append(c)


class Refused(Exception):
    """JAX does not take the op on these dtypes: no case."""


def run(f, *args):
    try:
        return np.asarray(jax.jit(f)(*args))
    except TypeError as e:
        raise Refused(str(e)) from e


# ---- unary ----
EXACT_UNARY = {
    "neg": lax.neg,
    "abs": lax.abs,
    "sign": lax.sign,
    "floor": lax.floor,
    "ceil": lax.ceil,
    "round": lambda x: lax.round(x, lax.RoundingMethod.AWAY_FROM_ZERO),
    "round_even": lambda x: lax.round(x, lax.RoundingMethod.TO_NEAREST_EVEN),
}
# (op, lax function, ulps allowed against XLA's CPU result, input range)
TRANSCENDENTAL = [
    ("exp", lax.exp, 4, (-8, 8)),
    ("exp2", lax.exp2, 4, (-8, 8)),
    ("expm1", lax.expm1, 4, (-4, 4)),
    ("log", lax.log, 4, (0.01, 100)),
    ("log1p", lax.log1p, 4, (-0.9, 100)),
    ("sqrt", lax.sqrt, 1, (0, 100)),
    ("rsqrt", lax.rsqrt, 4, (0.01, 100)),
    ("tanh", lax.tanh, 8, (-5, 5)),
    ("logistic", lax.logistic, 8, (-8, 8)),
    ("sin", lax.sin, 8, (-10, 10)),
    ("cos", lax.cos, 8, (-10, 10)),
    ("erf", lax.erf, 8, (-3, 3)),
]
for dt in FLOATS:
    for op, f in EXACT_UNARY.items():
        x = floats((3, 5), dt)
        case(op, {}, [x], run(f, x))
    for op, f, n, (lo, hi) in TRANSCENDENTAL:
        x = floats((3, 5), dt, lo, hi, special=False)
        w = run(f, x)
        if op == "exp2" and np.dtype(dt) != np.float32:
            # JAX lowers a 16-bit exp2 as exp(x * ln 2) with ln 2 rounded to the dtype
            # (1% off in bf16); the primitive means 2^x: numpy's, rounded once.
            w = np.exp2(x.astype(np.float64)).astype(dt)
        # 16-bit results: the f32 function rounded once, so one ulp of the dtype more.
        extra = 0 if np.dtype(dt) == np.float32 else 1
        tol = ulps_tol(w, np.float32, n) + (ulps_tol(w, dt, extra) if extra else 0)
        case(op, {}, [x], w, tol)
    for n in [2, 3, -2]:
        x = floats((3, 5), dt, -3, 3, special=False)
        w = run(lambda a: lax.integer_pow(a, n), x)
        case("integer_pow", {"n": n}, [x], w, ulps_tol(w, dt, 2))
for dt in INTS:
    for op in ["neg", "abs", "sign", "not"]:
        if op == "sign" and np.dtype(dt) == np.uint8:
            continue
        f = {"neg": lax.neg, "abs": lax.abs, "sign": lax.sign, "not": lax.bitwise_not}[op]
        x = ints((3, 5), dt)
        case(op, {}, [x], lambda: run(f, x))
    x = ints((3, 5), dt)
    case("integer_pow", {"n": 3}, [x], run(lambda a: lax.integer_pow(a, 3), x))
x = bools((3, 5))
case("not", {}, [x], run(lax.bitwise_not, x))
# A larger tanh, across workgroups and odd sizes.
x = floats((129, 257), np.float32, -5, 5, special=False)
w = run(lax.tanh, x)
case("tanh", {}, [x], w, ulps_tol(w, np.float32, 8))

# ---- binary ----
EXACT_FLOAT_BINARY = {"add": lax.add, "sub": lax.sub, "mul": lax.mul, "div": lax.div,
                      "rem": lax.rem, "max": lax.max, "min": lax.min}
for dt in FLOATS:
    for op, f in EXACT_FLOAT_BINARY.items():
        x, y = floats((3, 5), dt), floats((3, 5), dt)
        case(op, {}, [x, y], run(f, x, y))
    for op, f, lo, hi in [("pow", lax.pow, 0.1, 3), ("atan2", lax.atan2, -3, 3)]:
        x, y = floats((3, 5), dt, lo, hi, special=False), floats((3, 5), dt, -3, 3, special=False)
        w = run(f, x, y)
        extra = 0 if np.dtype(dt) == np.float32 else 1
        tol = ulps_tol(w, np.float32, 8) + (ulps_tol(w, dt, extra) if extra else 0)
        case(op, {}, [x, y], w, tol)
INT_BINARY = {"add": lax.add, "sub": lax.sub, "mul": lax.mul, "div": lax.div, "rem": lax.rem,
              "max": lax.max, "min": lax.min, "and": lax.bitwise_and, "or": lax.bitwise_or,
              "xor": lax.bitwise_xor, "shift_left": lax.shift_left,
              "shift_right_arithmetic": lax.shift_right_arithmetic,
              "shift_right_logical": lax.shift_right_logical}
for dt in INTS:
    for op, f in INT_BINARY.items():
        x, y = ints((4, 6), dt), ints((4, 6), dt)
        if op.startswith("shift"):
            bits = np.iinfo(dt).bits
            y = rng.randint(-2, bits + 3, size=(4, 6)).astype(np.int64).astype(dt)
        if op in ("div", "rem"):
            y.reshape(-1)[:3] = 0  # division by zero
            if np.iinfo(dt).min < 0:
                x.reshape(-1)[3], y.reshape(-1)[3] = np.iinfo(dt).min, -1
        case(op, {}, [x, y], lambda: run(f, x, y))
for op, f in [("and", lax.bitwise_and), ("or", lax.bitwise_or), ("xor", lax.bitwise_xor)]:
    x, y = bools((3, 5)), bools((3, 5))
    case(op, {}, [x, y], run(f, x, y))
# A scalar operand broadcast over the other (jaxprs' `add x 1.0:f32[]`).
x = floats((3, 5), np.float32)
k = np.float32(1.5)
case("add", {}, [x, np.asarray(k)], run(lambda a: a + k, x))
case("sub", {}, [np.asarray(k), x], run(lambda a: k - a, x))
xi = ints((3, 5), np.int32)
case("mul", {}, [xi, np.asarray(np.int32(-3))], run(lambda a: a * np.int32(-3), xi))
x, y = floats((129, 257), np.float32), floats((129, 257), np.float32)
case("mul", {}, [x, y], run(lax.mul, x, y))

# ---- comparisons and select ----
CMPS = {"eq": lax.eq, "ne": lax.ne, "lt": lax.lt, "le": lax.le, "gt": lax.gt, "ge": lax.ge}
for dt in [np.float32, BF16, np.int32, np.uint8, np.int8, np.bool_]:
    for op, f in CMPS.items():
        x, y = values((3, 5), dt), values((3, 5), dt)
        x.reshape(-1)[5:8] = y.reshape(-1)[5:8]  # some ties
        case(op, {}, [x, y], run(f, x, y))
for dt in [np.float32, BF16, np.int32, np.int8, np.bool_]:
    p, x, y = bools((3, 5)), values((3, 5), dt), values((3, 5), dt)
    case("select", {}, [p, x, y], run(lambda c, a, b: lax.select(c, a, b), p, x, y))
p, x = bools((3, 5)), floats((3, 5), np.float32)
z = np.float32(0.0)
case("select", {}, [p, x, np.asarray(z)], run(lambda c, a: jnp.where(c, a, z), p, x))

# ---- conversions between every pair ----
ALL = [np.float32, np.int32, np.float16, BF16, np.int8, np.uint8, np.bool_]
for a in ALL:
    for b in ALL:
        if a is b:
            continue
        if np.dtype(a).kind == "f":
            x = floats((4, 8), a, -300, 300)
            x.reshape(-1)[12:16] = np.array([1e6, -1e6, 2.5, -2.5]).astype(a)
        else:
            x = values((4, 8), a)
        case("convert", {}, [x], run(lambda v: lax.convert_element_type(v, b), x))

# ---- data movement ----
x = floats((3,), np.float32)
case("broadcast", {"dims": [1]}, [x], run(lambda v: lax.broadcast_in_dim(v, (2, 3), (1,)), x))
x = ints((3, 1), np.int32)
case("broadcast", {"dims": [0, 1]}, [x], run(lambda v: lax.broadcast_in_dim(v, (3, 4), (0, 1)), x))
x = np.asarray(np.float32(2.5))
case("broadcast", {"dims": []}, [x], run(lambda v: lax.broadcast_in_dim(v, (2, 2), ()), x))
x = values((2, 3), BF16)
case("broadcast", {"dims": [0, 2]}, [x], run(lambda v: lax.broadcast_in_dim(v, (2, 4, 3), (0, 2)), x))
x = ints((3, 5), np.int32)
case("reshape", {}, [x], run(lambda v: v.reshape(5, 3), x))
for shape, perm, dt in [((2, 3, 4), (2, 0, 1), np.float32), ((2, 3, 4, 5), (3, 1, 0, 2), np.int32),
                        ((129, 257), (1, 0), np.float32), ((5, 7), (1, 0), BF16), ((4, 6), (1, 0), np.int8)]:
    x = values(shape, dt)
    case("transpose", {"perm": list(perm)}, [x], run(lambda v: lax.transpose(v, perm), x))
for dt, dim in [(np.int32, 0), (np.int32, 1), (np.float32, 1), (BF16, 0)]:
    case("iota", {"dim": dim}, [], run(lambda: lax.broadcasted_iota(dt, (3, 5), dim)))
x = ints((7, 9), np.int32)
case("slice", {"start": [1, 2], "strides": [2, 3]}, [x],
     run(lambda v: lax.slice(v, (1, 2), (6, 9), (2, 3)), x))
x = values((7, 9), BF16)
case("slice", {"start": [2, 1], "strides": [1, 1]}, [x], run(lambda v: lax.slice(v, (2, 1), (5, 8)), x))
x, u = ints((5, 6), np.int32), ints((2, 3), np.int32)
case("update_slice", {"start": [1, 2]}, [x, u], run(lambda a, b: lax.dynamic_update_slice(a, b, (1, 2)), x, u))
a, b, c = floats((2, 3), np.float32), floats((2, 1), np.float32), floats((2, 4), np.float32)
case("concat", {"dim": 1}, [a, b, c], run(lambda *v: lax.concatenate(v, 1), a, b, c))
a, b = values((1, 3), BF16), values((2, 3), BF16)
case("concat", {"dim": 0}, [a, b], run(lambda *v: lax.concatenate(v, 0), a, b))

# ---- reductions ----
def sum_tol(x, axes):
    """k-term bound of an f32 sum: k * u * sum |x| (k terms)."""
    ax = tuple(axes)
    k = int(np.prod([x.shape[i] for i in ax]))
    mag = np.sum(np.abs(np.asarray(x, np.float64)), axis=ax)
    return k * 2.0**-24 * mag


for shape, axes in [((3, 5), [1]), ((4, 3, 5), [0, 2]), ((3, 5), [0, 1]), ((129, 257), [1])]:
    x = floats(shape, np.float32, special=False)
    w = run(lambda v: lax.reduce_sum(v, tuple(axes)), x)
    case("reduce_sum", {"axes": axes}, [x], w, sum_tol(x, axes))
    for op, f in [("reduce_max", lax.reduce_max), ("reduce_min", lax.reduce_min)]:
        # XLA's vectorized CPU reduction drops a NaN among many elements (max is NaN-
        # propagating as a primitive, and on a TPU): NaNs only in the small cases.
        y = floats(shape, np.float32, special=shape[-1] < 100)
        case(op, {"axes": axes}, [y], run(lambda v: f(v, tuple(axes)), y))
for dt in [np.int32, np.int8, np.uint8]:
    x = ints((4, 3, 5), dt)
    for op, f in [("reduce_sum", lax.reduce_sum), ("reduce_max", lax.reduce_max), ("reduce_min", lax.reduce_min)]:
        case(op, {"axes": [0, 2]}, [x], run(lambda v: f(v, (0, 2)), x))
x = floats((3, 5), BF16, special=False)
w = run(lambda v: lax.reduce_max(v, (1,)), x)
case("reduce_max", {"axes": [1]}, [x], w)
for op, f in [("argmax", jnp.argmax), ("argmin", jnp.argmin)]:
    for dt in [np.float32, np.int32, BF16]:
        x = values((4, 6), dt)
        for axis in [0, 1]:
            case(op, {"axis": axis}, [x], run(lambda v: f(v, axis).astype(jnp.int32), x))

# ---- dot_general ----
def dot_tol(a, b, dims, acc):
    """The k-term bound of an f32 dot: k * u * sum |a_i b_i| (and one rounding of a
    16-bit result)."""
    a64, b64 = np.asarray(a, np.float64), np.asarray(b, np.float64)
    mag = np.asarray(lax.dot_general(np.abs(a64), np.abs(b64), dims))
    k = int(np.prod([a.shape[i] for i in dims[0][0]]))
    tol = k * 2.0**-24 * mag
    return tol


def dot_case(a, b, dims, acc):
    f = lambda x, y: lax.dot_general(x, y, dims, preferred_element_type=acc)
    w = run(f, a, b)
    params = {"lhs_contract": list(dims[0][0]), "rhs_contract": list(dims[0][1]),
              "lhs_batch": list(dims[1][0]), "rhs_batch": list(dims[1][1])}
    exact = np.dtype(acc).kind in "iu"
    tol = None if exact else dot_tol(a, b, dims, acc) + (0 if np.dtype(acc) == np.float32 else ulps_tol(w, acc, 1))
    case("dot", params, [a, b], w, tol)


MM = (((1,), (0,)), ((), ()))
dot_case(floats((3, 5), np.float32, special=False), floats((5, 4), np.float32, special=False), MM, np.float32)
dot_case(floats((129, 257), np.float32, special=False), floats((257, 33), np.float32, special=False), MM, np.float32)
dot_case(floats((2, 3, 5), np.float32, special=False), floats((2, 5, 4), np.float32, special=False),
         (((2,), (1,)), ((0,), (0,))), np.float32)
dot_case(floats((5, 3), np.float32, special=False), floats((5, 4), np.float32, special=False),
         (((0,), (0,)), ((), ())), np.float32)
dot_case(floats((3, 5), np.float32, special=False), floats((4, 5), np.float32, special=False),
         (((1,), (1,)), ((), ())), np.float32)
dot_case(floats((16, 24), BF16, special=False), floats((24, 8), BF16, special=False), MM, np.float32)
dot_case(floats((16, 24), np.float16, special=False), floats((24, 8), np.float16, special=False), MM, np.float32)
dot_case(floats((8, 12), BF16, special=False), floats((12, 8), BF16, special=False), MM, BF16)
dot_case(ints((6, 9), np.int8), ints((9, 5), np.int8), MM, np.int32)
dot_case(ints((6, 9), np.int32), ints((9, 5), np.int32), MM, np.int32)

os.makedirs(OUT, exist_ok=True)
for f in os.listdir(OUT):
    os.remove(os.path.join(OUT, f))
for name, arr in files.items():
    np.save(os.path.join(OUT, name), arr)
with open(os.path.join(OUT, "cases.json"), "w") as f:
    json.dump({"jax": jax.__version__, "cases": cases}, f, indent=1)
print(f"{len(cases)} cases, {len(files)} arrays, "
      f"{sum(a.nbytes for a in files.values()) / 1e6:.1f} MB in {os.path.relpath(OUT)}")
