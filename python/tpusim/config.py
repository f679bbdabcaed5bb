"""Settings of the Python package (read when used, so they can be changed at any time).

- ``backend``: ``"auto"`` (the default: the GPU executor on a hardware adapter, the CPU
  executor where the only adapters are software ones such as lavapipe), ``"gpu"`` (wgpu,
  on whatever adapter) or ``"cpu"`` (host memory, the oracle); environment
  ``TPUSIM_BACKEND``.
- ``schedule``: the schedule a run follows (``eager``, ``lazy``, ``lockstep``,
  ``run-ahead:D``, ``random:SEED``); environment ``TPUSIM_SCHEDULE``.
- What memory nothing wrote reads as: environment ``TPUSIM_UNINIT``, ``nan`` (the
  default: NaN for floats, the largest value for integers, as JAX's interpret mode) or
  ``zero``; read when a call is planned.
- ``devices``: how many JAX CPU devices ``python -m tpusim`` starts JAX with unless
  ``--devices`` says; environment ``TPUSIM_DEVICES`` (default 4).
"""

import os
import sys
import types

backend = os.environ.get("TPUSIM_BACKEND", "auto")
schedule = os.environ.get("TPUSIM_SCHEDULE", "eager")
devices = int(os.environ.get("TPUSIM_DEVICES", "4"))


class _Settings(types.ModuleType):
    """The module's class: a changed setting makes the runs that repeated pallas_calls
    saved under the old ones stale (``_native.forget_saved_runs``)."""

    def __setattr__(self, name, value):
        super().__setattr__(name, value)
        from . import _native

        _native.forget_saved_runs()


sys.modules[__name__].__class__ = _Settings
