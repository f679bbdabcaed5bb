"""Stand-in for ``jax`` (``import tpusim.jax as jax``): what a Pallas TPU script needs
around its kernels. ``jax.jit`` is the identity; ``jax.shard_map`` runs the mapped
function on per-device values of simulated devices; ``jax.make_mesh`` makes a tpusim
mesh; ``jax.local_device_count()`` answers ``tpusim.config.devices``.

Anything else is an :class:`tpusim.UnsupportedError` naming the construct and line.
"""

import numpy as _np

from .. import config as _config
from .._native import Mesh as _Mesh
from .._pallas import ShapeDtypeStruct
from .._shard_map import shard_map
from .._sites import unsupported as _unsupported
from . import experimental, lax, numpy, random, sharding

__all__ = [
    "ShapeDtypeStruct", "shard_map", "experimental", "lax", "numpy", "random", "sharding",
    "local_device_count", "device_count", "make_mesh", "jit", "device_put", "block_until_ready",
]


def local_device_count():
    """How many simulated devices there are: ``tpusim.config.devices``."""
    return _config.devices


device_count = local_device_count


def make_mesh(axis_shapes, axis_names, *, devices=None, axis_types=None):
    """``jax.make_mesh((4,), ("x",))``: a tpusim mesh with those axes."""
    axis_shapes = tuple(axis_shapes)
    axis_names = tuple(axis_names)
    if len(axis_shapes) != len(axis_names):
        from .._native import BadInput

        raise BadInput(
            f"bad input: make_mesh got {len(axis_shapes)} axis sizes and {len(axis_names)} names"
        )
    return _Mesh(axes=[(n, int(s)) for n, s in zip(axis_names, axis_shapes)])


def jit(f=None, **kwargs):
    """The identity: tpusim does not compile (usable as ``@jax.jit`` or ``jax.jit(f)``)."""
    if f is None:
        return lambda g: g
    return f


def device_put(x, device=None, **kwargs):
    """Returns `x` as a numpy array (shard_map splits it over the mesh)."""
    return _np.asarray(x)


def block_until_ready(x):
    """Results are ready when returned."""
    return x


def __getattr__(name):
    if name.startswith("_"):
        raise AttributeError(name)
    raise _unsupported(f"jax.{name}")
