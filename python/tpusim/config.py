"""Settings of the Python package (read when used, so they can be changed at any time).

- ``backend``: ``"gpu"`` (wgpu, the default), ``"cpu"`` (host memory, the oracle) or
  ``"auto"`` (the GPU where wgpu finds an adapter, else the CPU); environment
  ``TPUSIM_BACKEND``.
- ``schedule``: the schedule a run follows (``eager``, ``lazy``, ``lockstep``,
  ``run-ahead:D``, ``random:SEED``); environment ``TPUSIM_SCHEDULE``.
- ``devices``: how many JAX CPU devices ``python -m tpusim`` starts JAX with unless
  ``--devices`` says; environment ``TPUSIM_DEVICES`` (default 4).
"""

import os

backend = os.environ.get("TPUSIM_BACKEND", "gpu")
schedule = os.environ.get("TPUSIM_SCHEDULE", "eager")
devices = int(os.environ.get("TPUSIM_DEVICES", "4"))
