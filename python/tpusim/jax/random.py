"""Stand-in for ``jax.random`` (numpy's generator: the numbers differ from JAX's)."""

import numpy as _np

__all__ = ["key", "PRNGKey", "uniform", "normal", "randint"]


def key(seed):
    """A key: here a numpy generator seed."""
    return int(seed)


PRNGKey = key


def _rng(k):
    return _np.random.default_rng(k)


def uniform(key, shape=(), dtype=_np.float32, minval=0.0, maxval=1.0):
    """Uniform floats in [minval, maxval)."""
    return _rng(key).uniform(minval, maxval, size=shape).astype(dtype)


def normal(key, shape=(), dtype=_np.float32):
    """Standard normal floats."""
    return _rng(key).standard_normal(size=shape).astype(dtype)


def randint(key, shape, minval, maxval, dtype=_np.int32):
    """Integers in [minval, maxval)."""
    return _rng(key).integers(minval, maxval, size=shape).astype(dtype)
