"""Stand-in for ``jax.sharding``: ``PartitionSpec`` and ``NamedSharding``."""

from .._shard_map import NamedSharding, PartitionSpec
from .._native import Mesh

__all__ = ["PartitionSpec", "NamedSharding", "Mesh"]
