"""Stand-in for ``jax.experimental.shard_map`` (``from … import shard_map``)."""

from ..._shard_map import shard_map

__all__ = ["shard_map"]
