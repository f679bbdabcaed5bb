"""Stand-in for ``jax.lax``.

Inside kernels: ``axis_index``, ``rem`` and ``div`` (C semantics: the remainder has the
dividend's sign, so ``lax.rem(my_id - 1, n)`` is -1 on device 0, the seed-003 trap, and
the device id is reported out of range), ``max``, ``min``, ``fori_loop`` with concrete
bounds (unrolled).

Inside ``shard_map`` bodies, on per-device values: ``ppermute``, ``all_gather``,
``psum``, ``pmax``, ``pmin``, ``psum_scatter`` run tpusim's shipped Rust collectives
(the seed's kernels) on the simulated devices, over the named mesh axis (or axes: one
ring through all of them), every group of devices along it an independent ring.
"""

import numpy as _np

from .. import _kernel, _native, config
from .._shard_map import PerDevice as _PerDevice
from .._shard_map import current_mesh as _current_mesh
from .._sites import unsupported as _unsupported

__all__ = [
    "axis_index", "rem", "div", "max", "min", "fori_loop", "ppermute", "all_gather",
    "psum", "pmax", "pmin", "psum_scatter",
]

axis_index = _kernel.axis_index


def _scalars(construct, *xs):
    for x in xs:
        if isinstance(x, (_kernel.Value, _kernel.Ref)):
            raise _unsupported(construct, "on scalars from program_id, axis_index and constants only")


def _int32(r, *xs):
    """int32 when every operand was a Python int (JAX's weak typing), else numpy's type."""
    if all(isinstance(x, int) for x in xs) and isinstance(r, _np.integer):
        return _np.int32(r)
    return r


def rem(x, y):
    """``lax.rem``: the remainder of truncating division (sign of `x`), as in C."""
    _scalars("lax.rem", x, y)
    return _int32(_np.fmod(x, y), x, y)


def div(x, y):
    """``lax.div``: division rounding toward zero (integers), as in C."""
    _scalars("lax.div", x, y)
    if _np.issubdtype(_np.asarray(x).dtype, _np.integer) and _np.issubdtype(_np.asarray(y).dtype, _np.integer):
        q = _np.abs(x) // _np.abs(y)
        return _int32(q * (_np.sign(x) * _np.sign(y)), x, y)
    return _np.true_divide(x, y)


def max(x, y):  # noqa: A001 - lax's name
    """``lax.max`` on scalars."""
    _scalars("lax.max", x, y)
    return _np.maximum(x, y)


def min(x, y):  # noqa: A001 - lax's name
    """``lax.min`` on scalars."""
    _scalars("lax.min", x, y)
    return _np.minimum(x, y)


def fori_loop(lower, upper, body_fun, init_val, *, unroll=None):
    """``lax.fori_loop`` with concrete bounds: runs (unrolls) the body in Python."""
    lo = _kernel.concrete_int(lower, "lax.fori_loop")
    hi = _kernel.concrete_int(upper, "lax.fori_loop")
    val = init_val
    for i in range(lo, hi):
        val = body_fun(_np.int32(i), val)
    return val


def _axes(axis_name, construct):
    """The mesh axes `axis_name` names (a name or a tuple of names) and how many devices
    one ring along them spans."""
    mesh = _current_mesh(construct)
    names = (axis_name,) if isinstance(axis_name, str) else tuple(axis_name)
    sizes = dict(mesh.axes)
    if not names or any(n not in sizes for n in names):
        raise _unsupported(
            f"{construct}(axis_name={axis_name!r})",
            f"the axes of the shard_map's mesh, {[a for a, _ in mesh.axes]}",
        )
    return mesh, names, int(_np.prod([sizes[n] for n in names]))


def _collective(name, x, axis_name, construct, **kw):
    if not isinstance(x, _PerDevice):
        raise _unsupported(construct, "inside a shard_map body, on the per-device value it gets")
    mesh, names, _ = _axes(axis_name, construct)
    # Not ascontiguousarray: it makes a 0-d array 1-d (lax.psum of a scalar is a scalar).
    arrays = [_np.require(a, requirements="C") for a in x.arrays]
    out = _native.collective_run(
        name, mesh, [[a] for a in arrays], backend=config.backend, axis=",".join(names), **kw
    )
    return _PerDevice(d[0] for d in out)


def ppermute(x, axis_name, perm):
    """``lax.ppermute``: `perm` is ``[(source, destination), …]``."""
    return _collective("ppermute", x, axis_name, "lax.ppermute", perm=[tuple(p) for p in perm])


def all_gather(x, axis_name, *, axis=0, tiled=False):
    """``lax.all_gather`` along a new leading axis (``tiled``: concatenated)."""
    if axis != 0:
        raise _unsupported(f"lax.all_gather(axis={axis})", "tpusim gathers along axis 0")
    y = _collective("all_gather", x, axis_name, "lax.all_gather")
    if tiled:
        return y.reshape((-1,) + tuple(x.shape[1:]))
    return y


def psum(x, axis_name):
    """``lax.psum`` (the seed's ring all-reduce)."""
    return _collective("psum", x, axis_name, "lax.psum", op="sum")


def pmax(x, axis_name):
    """``lax.pmax``."""
    return _collective("psum", x, axis_name, "lax.pmax", op="max")


def pmin(x, axis_name):
    """``lax.pmin``."""
    return _collective("psum", x, axis_name, "lax.pmin", op="min")


def psum_scatter(x, axis_name, *, scatter_dimension=0, tiled=False):
    """``lax.psum_scatter`` over the leading dimension (the seed's bidirectional
    reduce-scatter): untiled, `x` is ``(P, R, …)`` and the result ``(R, …)``; tiled,
    `x` is ``(P·R, …)`` and the result ``(R, …)``."""
    if scatter_dimension != 0:
        raise _unsupported(
            f"lax.psum_scatter(scatter_dimension={scatter_dimension})",
            "tpusim scatters the leading dimension",
        )
    p = _axes(axis_name, "lax.psum_scatter")[2]
    shape = tuple(x.shape)
    rows = shape[0] * shape[1] if not tiled else shape[0]
    rest = shape[2:] if not tiled else shape[1:]
    if not tiled and shape[0] != p:
        from .._native import BadInput

        raise BadInput(f"bad input: lax.psum_scatter needs a leading dimension of {p}, got {shape}")
    cols = int(_np.prod(rest, dtype=_np.int64))
    y = _collective("psum_scatter", x.reshape(rows, cols), axis_name, "lax.psum_scatter")
    return y.reshape((rows // p,) + tuple(rest))


def __getattr__(name):
    if name.startswith("_"):
        raise AttributeError(name)
    raise _unsupported(f"lax.{name}")
