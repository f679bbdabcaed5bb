"""Stand-in for ``jax.experimental``: ``pallas`` and ``shard_map``."""

from . import pallas, shard_map

__all__ = ["pallas", "shard_map"]
