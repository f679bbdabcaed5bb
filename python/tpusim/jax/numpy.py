"""Stand-in for ``jax.numpy`` inside kernels: dtypes, what a store can take
(``zeros_like``, ``ones_like``, ``full_like``, ``zeros``, ``ones``, ``full``,
``maximum`` / ``minimum`` of two loads) and scalar logic on ``program_id`` /
``axis_index`` values (``logical_and``, ``logical_or``, ``logical_not``, ``where``, …).
"""

import numpy as _np

from .._kernel import Combine as _Combine
from .._kernel import Full as _Full
from .._kernel import Load as _Load
from .._kernel import Ref as _Ref
from .._kernel import Value as _Value
from .._sites import unsupported as _unsupported

float32 = _np.float32
int32 = _np.int32
float16 = _np.float16
bool_ = _np.bool_
dtype = _np.dtype

__all__ = [
    "float32", "int32", "float16", "bool_", "dtype", "zeros_like", "ones_like", "full_like", "zeros",
    "ones", "full", "maximum", "minimum", "logical_and", "logical_or", "logical_not",
    "logical_xor", "where",
]

try:  # jnp.bfloat16 is ml_dtypes' type; without ml_dtypes numpy has no bf16.
    from ml_dtypes import bfloat16

    __all__.append("bfloat16")
except ImportError:  # pragma: no cover
    pass


def _like(x, what):
    if isinstance(x, (_Ref, _Load, _Full)):
        return x.shape, x.dtype
    if hasattr(x, "shape") and hasattr(x, "dtype"):
        return tuple(x.shape), x.dtype
    raise _unsupported(f"jnp.{what}({type(x).__name__})", "expected a ref or a loaded value")


def zeros_like(x, dtype=None):
    """Zeros of `x`'s shape (a fill when stored)."""
    shape, dt = _like(x, "zeros_like")
    return _Full(shape, dtype or dt, 0)


def ones_like(x, dtype=None):
    """Ones of `x`'s shape."""
    shape, dt = _like(x, "ones_like")
    return _Full(shape, dtype or dt, 1)


def full_like(x, fill_value, dtype=None):
    """`fill_value` in every element of `x`'s shape."""
    shape, dt = _like(x, "full_like")
    return _Full(shape, dtype or dt, fill_value)


def _shape(s):
    return tuple(s) if isinstance(s, (tuple, list)) else (s,)


def zeros(shape, dtype=float32):
    """Zeros of `shape`."""
    return _Full(_shape(shape), dtype, 0)


def ones(shape, dtype=float32):
    """Ones of `shape`."""
    return _Full(_shape(shape), dtype, 1)


def full(shape, fill_value, dtype=None):
    """`fill_value` in every element of `shape`."""
    return _Full(_shape(shape), dtype or float32, fill_value)


def _two(a, b, reduce, f, what):
    if isinstance(a, _Load) and isinstance(b, _Load):
        return _Combine(reduce, a, b)
    if isinstance(a, (_Value, _Ref)) or isinstance(b, (_Value, _Ref)):
        raise _unsupported(f"jnp.{what}", "on kernel values it takes two loads: jnp.{}(a[...], b[...])".format(what))
    return f(a, b)


def maximum(a, b):
    """Elementwise max: of two loads, an accumulate when stored into one of them."""
    return _two(a, b, "max", _np.maximum, "maximum")


def minimum(a, b):
    """Elementwise min: of two loads, an accumulate when stored into one of them."""
    return _two(a, b, "min", _np.minimum, "minimum")


def _scalar(f, what):
    def g(*args):
        if any(isinstance(a, (_Value, _Ref)) for a in args):
            raise _unsupported(f"jnp.{what}", "on scalars from program_id, axis_index and constants only")
        return f(*args)

    g.__name__ = what
    g.__doc__ = f"``jnp.{what}`` on scalars."
    return g


logical_and = _scalar(_np.logical_and, "logical_and")
logical_or = _scalar(_np.logical_or, "logical_or")
logical_not = _scalar(_np.logical_not, "logical_not")
logical_xor = _scalar(_np.logical_xor, "logical_xor")
where = _scalar(_np.where, "where")


def __getattr__(name):
    if name.startswith("_"):
        raise AttributeError(name)
    raise _unsupported(f"jnp.{name}")
