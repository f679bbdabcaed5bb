"""Fits the odd rational approximations x * P(x^2) / Q(x^2) of tanh and erf that
src/device_sim/cpu/vmath.rs uses, minimax in relative error, and prints their
coefficients rounded to f32 with the worst error in f32 ulps of the f32 evaluation.

    python tools/fit_rational.py tanh 9.0 6 3
    python tools/fit_rational.py erf 3.92 5 5

(vmath.rs's constants are these two runs' output, needing python/.venv's numpy and
scipy.) Arguments: the function, the clamp c (the fit covers [0, c]), the degrees m
and n of P and Q in x^2. P(0) is fixed at the function's slope at 0 and Q(0) at 1, so that
x * P(0) / Q(0) is x's exact image where x is tiny. The fit is the differential
correction algorithm (linear programs in the coefficients, each weighted by the last
Q) on Chebyshev-spaced points.
"""

import math
import sys

import numpy as np
from scipy.optimize import linprog

FUNCS = {"tanh": (np.tanh, 1.0), "erf": (np.vectorize(math.erf), 2 / math.sqrt(math.pi))}


def fit(f, slope, c, m, n, points=3000, rounds=12):
    k = np.arange(points)
    x = c * (1 - np.cos(np.pi * (k + 0.5) / points)) / 2
    x = x[x > 1e-4]
    y = f(x)
    z = x * x
    # Powers of z / c^2 (in [0, 1]) keep the linear programs well conditioned.
    zp = np.stack([(z / c**2) ** i for i in range(1, m + 1)], 1)
    zq = np.stack([(z / c**2) ** i for i in range(1, n + 1)], 1)
    q_prev = np.ones_like(x)
    best = None
    for _ in range(rounds):
        # |x (slope + zp.p) - y (1 + zq.q)| / (y q_prev) <= t, minimize t.
        # In units of 1e-7 relative, above the solver's tolerances.
        a = np.hstack([x[:, None] * zp, -y[:, None] * zq]) / (1e-7 * y * q_prev)[:, None]
        b = (y - slope * x) / (1e-7 * y * q_prev)
        nv = m + n
        a_ub = np.vstack([np.hstack([a, -np.ones((len(x), 1))]), np.hstack([-a, -np.ones((len(x), 1))])])
        b_ub = np.concatenate([b, -b])
        cost = np.zeros(nv + 1)
        cost[-1] = 1
        r = linprog(cost, A_ub=a_ub, b_ub=b_ub, bounds=[(None, None)] * nv + [(0, None)], method="highs")
        if r.x is None:
            break
        coef = r.x[:nv] / np.concatenate([c ** (2 * np.arange(1, m + 1)), c ** (2 * np.arange(1, n + 1))])
        p = np.concatenate([[slope], coef[:m]])
        q = np.concatenate([[1.0], coef[m:]])
        q_prev = np.polyval(q[::-1], z)
        err = np.max(np.abs(x * np.polyval(p[::-1], z) / q_prev - y) / y)
        if best is None or err < best[0]:
            best = (err, p, q)
    return best


def horner32(c, z):
    acc = np.full_like(z, c[-1])
    for v in c[-2::-1]:
        acc = (acc * z + v).astype(np.float32)
    return acc


def ulps32(f, slope, c, p, q):
    """Worst ulps of the f32 evaluation over every 7th f32 in [1e-4, c)."""
    bits = np.arange(np.float32(1e-4).view(np.int32), np.float32(c).view(np.int32), 7, dtype=np.int32)
    x = bits.view(np.float32)
    p32, q32 = p.astype(np.float32), q.astype(np.float32)
    z = x * x
    got = x * horner32(p32, z) / horner32(q32, z)
    want = f(x.astype(np.float64))
    w32 = want.astype(np.float32)
    ulp = (np.nextafter(w32, np.float32(np.inf)) - w32).astype(np.float64)
    u = np.abs(got.astype(np.float64) - want) / ulp
    i = np.argmax(u)
    return u[i], x[i]


def main():
    name, c, m, n = sys.argv[1], float(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
    f, slope = FUNCS[name]
    err, p, q = fit(f, slope, c, m, n)
    u, at = ulps32(f, slope, c, p, q)
    print(f"{name} on [0, {c}], P degree {m}, Q degree {n} (in x^2): relative {err:.3e}")
    print(f"  f32 evaluation: worst {u:.2f} ulps at {at!r}")
    for label, v in (("P", p), ("Q", q)):
        print(f"  {label} = [{', '.join(f'{float(np.float32(a))!r}' for a in v)}]")
        print(f"  {label} (f64) = [{', '.join(f'{float(a)!r}' for a in v)}]")


if __name__ == "__main__":
    main()
