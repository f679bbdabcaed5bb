"""Source lines and error messages of the Pallas front end.

Every call a kernel makes is attributed to the first stack frame outside this package:
the kernel's own file and line, also when the call is made from a helper the kernel
calls (the seed's ``neighbor_barrier`` or ``signal``). Errors found on the Python side
read like the Rust core's: ``kind: detail in device D at grid point [..], `op` (file:line)``.
"""

import os
import sys

from . import _native

_PKG = os.path.dirname(os.path.abspath(__file__)) + os.sep

#: The kernel evaluation in progress (device, grid point, recorded calls), or None.
current = None


def caller():
    """(file, line) of the nearest frame outside the tpusim package."""
    f = sys._getframe(1)
    while f is not None and os.path.abspath(f.f_code.co_filename).startswith(_PKG):
        f = f.f_back
    if f is None:
        return ("<unknown>", 0)
    return (f.f_code.co_filename, f.f_lineno)


def where(site, ctx=None, op=None):
    """` in device D at grid point [..], `op` (file:line)`, or ` (file:line)` outside a kernel."""
    loc = f"{site[0]}:{site[1]}"
    if ctx is None:
        return f" ({loc})"
    grid = "[" + ", ".join(str(i) for i in ctx.point) + "]"
    return f" in device {ctx.device} at grid point {grid}, `{op}` ({loc})"


def _error(cls, kind, detail, site, ctx, op):
    e = cls(f"{kind}: {detail}{where(site, ctx, op)}")
    e.kind = kind
    e.detail = detail
    e.site = {
        "device": ctx.device if ctx else None,
        "grid": list(ctx.point) if ctx else None,
        "op": op,
        "location": f"{site[0]}:{site[1]}",
    }
    return e


def unsupported(construct, why="", site=None):
    """An UnsupportedError naming the construct and the kernel's file and line (and,
    inside a kernel, the device and grid point)."""
    site = site or caller()
    ctx = current
    detail = f"`{construct}` is not supported by tpusim's Pallas front end"
    if why:
        detail += f": {why}"
    return _error(_native.UnsupportedError, "unsupported", detail, site, ctx, construct)


def kernel_error(kind, detail, op, site=None):
    """A KernelError of `kind` (``out of bounds``, ``shape mismatch``, ``misuse``, ...)."""
    return _error(_native.KernelError, kind, detail, site or caller(), current, op)
