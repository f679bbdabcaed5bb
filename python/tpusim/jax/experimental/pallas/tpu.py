"""Stand-in for ``jax.experimental.pallas.tpu`` (``pltpu``): grid specs, memory
spaces, semaphore types, DMAs and the barrier semaphore. Anything not listed in
``__all__`` is an :class:`tpusim.UnsupportedError` naming the construct and line.
"""

from .... import _kernel, _pallas
from ...._sites import unsupported as _unsupported

PrefetchScalarGridSpec = _pallas.PrefetchScalarGridSpec
CompilerParams = _pallas.CompilerParams
TPUCompilerParams = _pallas.CompilerParams
ANY = _pallas.ANY
HBM = _pallas.HBM
VMEM = _pallas.VMEM
SMEM = _pallas.SMEM
SEMAPHORE = _pallas.SEMAPHORE
SemaphoreType = _pallas.SemaphoreType
DeviceIdType = _pallas.DeviceIdType
make_async_copy = _kernel.make_async_copy
make_async_remote_copy = _kernel.make_async_remote_copy
get_barrier_semaphore = _kernel.get_barrier_semaphore
semaphore_signal = _kernel.semaphore_signal
semaphore_wait = _kernel.semaphore_wait


class MemorySpace:
    """``pltpu.MemorySpace`` / ``pltpu.TPUMemorySpace``: ``ANY``, ``HBM``, ``VMEM``, ``SMEM``."""

    ANY = _pallas.ANY
    HBM = _pallas.HBM
    VMEM = _pallas.VMEM
    SMEM = _pallas.SMEM
    SEMAPHORE = _pallas.SEMAPHORE


TPUMemorySpace = MemorySpace

__all__ = [
    "PrefetchScalarGridSpec", "CompilerParams", "TPUCompilerParams", "ANY", "HBM", "VMEM",
    "SMEM", "SEMAPHORE", "SemaphoreType", "DeviceIdType", "make_async_copy",
    "make_async_remote_copy", "get_barrier_semaphore", "semaphore_signal",
    "semaphore_wait", "MemorySpace", "TPUMemorySpace",
]


def __getattr__(name):
    if name.startswith("_"):
        raise AttributeError(name)
    raise _unsupported(f"pltpu.{name}")
