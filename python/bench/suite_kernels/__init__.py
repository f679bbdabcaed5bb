"""The kernel suite (python/bench/suite.py): Pallas TPU kernels of this project's own,
each with a pure-JAX reference on the same sharded data. `KERNELS[name](p, size)`
gives the `Case` of one kernel at p devices and `size` bytes of main operand per device."""

from .attention import ring_attention
from .common import AXIS, Case
from .matmul import all_gather_matmul, matmul_reduce_scatter, tp_mlp
from .moe import moe
from .movement import all_gather, neighbour_exchange, ragged_all_to_all, reduce_scatter

KERNELS = {
    "neighbour_exchange": neighbour_exchange,
    "reduce_scatter": reduce_scatter,
    "all_gather": all_gather,
    "ragged_all_to_all": ragged_all_to_all,
    "all_gather_matmul": all_gather_matmul,
    "matmul_reduce_scatter": matmul_reduce_scatter,
    "tp_mlp": tp_mlp,
    "ring_attention": ring_attention,
    "moe": moe,
}

__all__ = ["AXIS", "Case", "KERNELS"]
