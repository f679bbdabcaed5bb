"""tpusim's f32 transcendentals (the CPU executor's vmath.rs, fused multiply-adds) against
XLA's on the CPU over a sweep of f32 values: their greatest distance in ulps, the bound
docs/src/compute.md states (each is within its own bound of the exact value; XLA's are
within a few ulps too, so the two differ by at most about the sum)."""

import jax
import numpy as np
import pytest
from jax import lax
from jax import numpy as jnp
from jax.experimental import pallas as pl

import tpusim

# Every 9973rd normal f32 bit pattern of each sign up to 12.0 (where erf and tanh are
# ±1 and exp is far from its overflow), and the specials. No subnormals: XLA's threads
# flush them to zero, the simulation keeps the mode of the thread that calls it.
_BITS = np.arange(np.float32(2.0**-126).view(np.uint32), np.float32(12.0).view(np.uint32), 9973, dtype=np.uint32)
_SPECIALS = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 88.5, -88.5, -103.0], np.float32)
SWEEP = np.concatenate([_BITS.view(np.float32), -_BITS.view(np.float32), _SPECIALS])
# For the logarithms, whose input is any positive f32: every 99991st normal one up to the
# largest, and the specials (the negatives are NaN).
_WIDE = np.arange(
    np.float32(2.0**-126).view(np.uint32), np.float32(np.finfo(np.float32).max).view(np.uint32), 99991, dtype=np.uint32
)
WIDE = np.concatenate([SWEEP, _WIDE.view(np.float32), np.array([1.0, np.finfo(np.float32).max, -1.0], np.float32)])

# (function, the greatest ulps from XLA's result it may be: its own bound and XLA's,
# the inputs).
FUNCS = {
    "erf": (lax.erf, 8.0, SWEEP),
    "tanh": (jnp.tanh, 8.0, SWEEP),
    "exp": (jnp.exp, 2.0, SWEEP),
    "logistic": (jax.nn.sigmoid, 4.0, SWEEP),
    "log": (jnp.log, 2.5, WIDE),
    # A fused chain of abs, add and log: the same log of other inputs.
    "log(|x|+1)": (lambda x: jnp.log(jnp.abs(x) + 1), 2.5, WIDE),
    "log1p": (jnp.log1p, 4.5, WIDE),
}


def on_tpusim(f, x):
    def body(x_ref, o_ref):
        o_ref[...] = f(x_ref[...])

    call = pl.pallas_call(body, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype))
    with tpusim.simulate(devices=1, backend="cpu"):
        return np.asarray(jax.jit(call)(x))


def ulps_apart(got, want):
    """|got - want| in ulps of `want` (f32; the same NaNs and infinities: 0)."""
    same = (got == want) | (np.isnan(got) & np.isnan(want))
    ulp = np.spacing(np.abs(want).astype(np.float32)).astype(np.float64)
    with np.errstate(invalid="ignore"):  # inf - inf where both are the same infinity
        d = np.abs(got.astype(np.float64) - want.astype(np.float64)) / np.maximum(ulp, np.float64(2.0**-149))
    return np.where(same, 0.0, d)


@pytest.mark.parametrize("name", list(FUNCS))
def test_f32_transcendental_is_within_its_stated_ulps_of_xla_over_a_sweep(name):
    f, bound, sweep = FUNCS[name]
    # Odd shape: (n, 128) padded with zeros, then one column short.
    n = sweep.size
    rows = -(-n // 127)
    x = np.zeros((rows, 127), np.float32)
    x.flat[:n] = sweep
    got = on_tpusim(f, jnp.asarray(x))
    want = np.asarray(jax.jit(f)(jnp.asarray(x)))
    d = np.where(np.abs(want) < np.float32(2.0**-126), 0.0, ulps_apart(got, want))
    worst = int(np.argmax(d))
    print(f"{name}: {d.flat[worst]:.2f} ulps from XLA at {x.flat[worst]!r}")
    assert d.flat[worst] <= bound, f"{name}: {d.flat[worst]:.2f} ulps from XLA at {x.flat[worst]!r}"
    # NaN in, NaN out; the infinities as XLA's.
    assert np.array_equal(np.isnan(got), np.isnan(want))
