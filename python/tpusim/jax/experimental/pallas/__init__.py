"""Stand-in for ``jax.experimental.pallas`` (``pl``): what a distributed TPU kernel
uses. ``pl.pallas_call`` returns a call to make inside ``jax.shard_map``. Anything not
listed in ``__all__`` is an :class:`tpusim.UnsupportedError` naming the construct and
the kernel's file and line.
"""

from .... import _kernel, _pallas
from ...._sites import unsupported as _unsupported
from . import tpu

ANY = _pallas.ANY
BlockSpec = _pallas.BlockSpec
GridSpec = _pallas.GridSpec
DeviceIdType = _pallas.DeviceIdType
Slice = _kernel.Slice
ds = _kernel.ds
program_id = _kernel.program_id
num_programs = _kernel.num_programs
when = _kernel.when
run_scoped = _kernel.run_scoped
semaphore_signal = _kernel.semaphore_signal
semaphore_wait = _kernel.semaphore_wait
pallas_call = _pallas.PallasCall

__all__ = [
    "ANY", "BlockSpec", "GridSpec", "DeviceIdType", "Slice", "ds", "program_id",
    "num_programs", "when", "run_scoped", "semaphore_signal", "semaphore_wait",
    "pallas_call", "tpu",
]


def __getattr__(name):
    if name.startswith("_"):
        raise AttributeError(name)
    raise _unsupported(f"pl.{name}")
