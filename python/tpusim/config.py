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

Each is checked by the command line's rule for it: a value set here when it is set, the
environment's when the package is imported; a bad one there is a
:class:`tpusim.BadInput` naming the variable (``TPUSIM_DEVICES must be between 1 and
4294967294 (got `abc`)``), raised where the setting is first used, so ``import tpusim``
itself succeeds.
"""

import os
import sys
import types

from . import _native

#: How each setting is checked: (environment variable, default, check(value, name)).
_SETTINGS = {
    "backend": ("TPUSIM_BACKEND", "auto", lambda v, n: _native.backend(v, name=n)),
    "schedule": ("TPUSIM_SCHEDULE", "eager", lambda v, n: _native.schedule(v, name=n)),
    "devices": ("TPUSIM_DEVICES", 4, lambda v, n: _native.count("devices", n, v)),
}


def _from_env(name):
    var, default, check = _SETTINGS[name]
    value = os.environ.get(var)
    return default if value is None else check(value, var)


#: The environment's settings that were refused: raised where they are read.
_refused = {}
for _name in _SETTINGS:
    try:
        globals()[_name] = _from_env(_name)
    except _native.BadInput as _e:
        _refused[_name] = _e


def __getattr__(name):
    if name in _refused:
        raise _native.BadInput(str(_refused[name]))
    raise AttributeError(f"module 'tpusim.config' has no attribute '{name}'")


class _Settings(types.ModuleType):
    """The module's class: a setting is checked when set, and a changed one makes the
    runs that repeated pallas_calls saved under the old ones stale
    (``_native.forget_saved_runs``)."""

    def __setattr__(self, name, value):
        if name in _SETTINGS:
            value = _SETTINGS[name][2](value, f"tpusim.config.{name}")
            _refused.pop(name, None)
        super().__setattr__(name, value)
        _native.forget_saved_runs()


sys.modules[__name__].__class__ = _Settings
