"""Names a TPU script may use that the pinned JAX no longer has: a script written for
another JAX version fails on them with an AttributeError, which ``python -m tpusim``
explains instead of showing a traceback from its own entry point. tpusim does not
re-implement them: the message names what replaced each."""

import os
import re
import traceback

# (module, name) -> what to use instead, as a script spells it.
REPLACED = {
    ("jax.experimental.pallas.tpu", "DeviceIdType"): "pl.DeviceIdType",
    ("jax.experimental.pallas.tpu", "TPUCompilerParams"): "pltpu.CompilerParams",
    ("jax.experimental.pallas.tpu", "TPUMemorySpace"): "pltpu.MemorySpace",
    ("jax.experimental.pallas.tpu", "TPUInterpretParams"): "pltpu.InterpretParams",
    ("jax.experimental.pallas.tpu", "semaphore_signal"): "pl.semaphore_signal",
    ("jax.experimental.pallas.tpu", "semaphore_wait"): "pl.semaphore_wait",
    ("jax.experimental.pallas.tpu", "semaphore_read"): "pl.semaphore_read",
    ("jax.experimental.pallas.tpu", "run_scoped"): "pl.run_scoped",
    ("jax.experimental.pallas.tpu", "ANY"): "pl.ANY",
    ("jax.experimental.pallas", "dot"): "jnp.dot (or lax.dot_general)",
}

# How a script usually names each module.
ALIAS = {"jax.experimental.pallas.tpu": "pltpu", "jax.experimental.pallas": "pl"}

_MISSING = re.compile(r"module '([\w.]+)' has no attribute '(\w+)'")


def missing_name(e, script):
    """For an AttributeError `e` on a Pallas module, the message that explains it (with
    the script's line), else None."""
    if not isinstance(e, AttributeError):
        return None
    m = _MISSING.search(str(e))
    if m is None:
        return None
    module, name = m.groups()
    if module not in ALIAS:
        return None
    import jax

    where = ""
    frames = [f for f in traceback.extract_tb(e.__traceback__) if os.path.abspath(f.filename) == script]
    if frames:
        where = f" (at {frames[-1].filename}:{frames[-1].lineno})"
    spelled = f"{ALIAS[module]}.{name}"
    have = f"JAX {jax.__version__}, which tpusim pins"
    if (module, name) in REPLACED:
        return f"`{spelled}` is not in {have}: removed from JAX, use `{REPLACED[(module, name)]}`{where}"
    return f"`{spelled}` is not in {have} ({module}): a name from another JAX version?{where}"
