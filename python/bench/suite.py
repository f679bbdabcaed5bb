"""The kernel suite: Pallas TPU kernels of this project's own (suite_kernels/), each
against its pure-JAX reference, through JAX's TPU interpret mode and through tpusim, at
the same sizes and device counts, with the machine's roofs, in one run.

Needs the package's Python (jax[cpu] and tpusim installed, as python/test.sh makes it):

    python/.venv/bin/python python/bench/suite.py --sizes small,16M -p 4,8 --markdown

Every (kernel, P, size, mode) case runs in its own process with a time limit
(`--timeout`; a case past it reads "> T s", interpret mode is slow at large sizes).
Modes: `xla` (the jitted pure-JAX reference: the roof of a kernel's compute),
`interpret` (the kernel under `pltpu.force_tpu_interpret_mode`), `tpusim-cpu` and
`tpusim-gpu` (under `tpusim.simulate`). A case reports its first call (JAX's tracing and
compilation, tpusim's planning), then the median and mean of at least `--reps` calls and
`--seconds` of calls, timed back to back after `--warmup` untimed ones; the error of its
last result against the reference (computed by JAX in the same process); the process's
peak resident memory over the timed calls alone (`VmHWM` reset before them; the
whole process's peak where it cannot be reset; each result dropped before the next
call), with its ratio to what a call needs: the runtime's memory before the inputs were
made, JAX's arrays (every device's inputs and output) and the kernel's own buffers on
every device as it declares them (the VMEM copies of its VMEM operands and its scratch,
`Case.kernel_bytes`), the same sum for XLA's reference; then the peak of one more call
alone, made after the allocator has given freed memory back (`malloc_trim`, glibc): the
peak over many calls also holds the freed results of earlier calls that glibc keeps in
its arenas (blocks under its mmap threshold, which grows to 32 MiB: a 16 MiB result
adds 16 MiB per call for a while, in every mode, XLA's too), not what a call needs;
and the calls' page faults (in `--json`); and, for the data-movement kernels, numpy's
copy bandwidth over P buffers of one device's operand each, copied one after the other
(best of several), the memcpy roof.
A case whose memory is estimated past `--memory-limit` is skipped with a note.
"""

import argparse
import json
import os
import re
import resource
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SIZES = {"small": 128 << 10}
MODES = ("xla", "interpret", "tpusim-cpu", "tpusim-gpu")
GiB = 1 << 30


def parse_size(s):
    if s in SIZES:
        return SIZES[s]
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(s[-1].upper(), 1)
    return int(float(s[:-1] if s[-1].upper() in "KMG" else s) * mult)


def cases():
    sys.path.insert(0, HERE)
    import suite_kernels

    return suite_kernels


def estimate(case):
    """Bytes a case may need at its peak: its buffers about four times (JAX's arrays,
    the host inputs, the kernel's own copies, the reference's result) and a runtime."""
    return 4 * case.buffer_bytes() + GiB


def context(mode, p):
    if mode == "interpret":
        from jax.experimental.pallas import tpu as pltpu

        return pltpu.force_tpu_interpret_mode(pltpu.InterpretParams())
    if mode.startswith("tpusim"):
        import tpusim

        return tpusim.simulate(devices=p, backend=mode.split("-")[1])
    import contextlib

    return contextlib.nullcontext()


def calls(f, args, n, seconds):
    """Calls f(*args) at least n times and until `seconds` have passed: each call's time, the last result.
    Each result is dropped before the next call (outside its time), so that a call's peak
    memory is its own: its inputs, its result and what it makes on the way."""
    import jax

    times, start, y = [], time.perf_counter(), None
    while len(times) < n or time.perf_counter() - start < seconds:
        y = None
        t0 = time.perf_counter()
        y = jax.block_until_ready(f(*args))
        times.append(time.perf_counter() - t0)
    return times, y


#: Elements compared at a time by `errors`.
CHUNK = 1 << 20


def errors(y, want):
    """Largest absolute difference, and that over the reference's largest magnitude.
    Compared in f64 a chunk at a time: whole f64 copies of a large result and their
    differences are gigabytes of fresh memory (the all-gather matmul's 128M-element
    result at 16 MiB: about 5 GiB, over a minute of page faults on a VM whose host
    backs freed memory lazily)."""
    import jax
    import numpy as np

    worst = scale = 0.0
    for a, b in zip(jax.tree.leaves(y), jax.tree.leaves(want)):
        a, b = np.asarray(a), np.asarray(b)
        if a.shape != b.shape:
            raise ValueError(f"result shape {a.shape} is not the reference's {b.shape}")
        a, b = a.reshape(-1), b.reshape(-1)
        for i in range(0, a.size, CHUNK):
            x, w = a[i : i + CHUNK].astype(np.float64), b[i : i + CHUNK].astype(np.float64)
            worst = max(worst, float(np.max(np.abs(x - w))))
            scale = max(scale, float(np.max(np.abs(w))))
    return worst, worst / scale if scale else worst


def memcpy_bandwidth(nbytes, copies, seconds=0.3):
    """numpy's copy of `copies` buffers of `nbytes` each into as many others, one after
    the other (one per device, as a call's devices hold them: a single buffer of a
    device's size can stay in the caches, which a call's P buffers do not): bytes per
    second, best of several."""
    import numpy as np

    srcs = [np.ones(nbytes, dtype=np.uint8) for _ in range(copies)]
    dsts = [np.empty_like(s) for s in srcs]
    for d, s in zip(dsts, srcs):
        d[...] = s  # pages touched before timing
    best, start = float("inf"), time.perf_counter()
    while time.perf_counter() - start < seconds or best == float("inf"):
        t0 = time.perf_counter()
        for d, s in zip(dsts, srcs):
            d[...] = s
        best = min(best, time.perf_counter() - t0)
    return copies * nbytes / best


def maxrss():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def status_bytes(field):
    """`VmRSS`, `VmHWM`, … of /proc/self/status in bytes (None off Linux)."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def reset_peak():
    """Resets the process's peak resident memory (`VmHWM`, Linux 4.0+): true if it could,
    so that the peak read later is that of the calls in between."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def trim_heap():
    """Gives the allocator's free memory back to the system (glibc's `malloc_trim`, every
    arena): true if it could."""
    import ctypes

    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
        return True
    except (OSError, AttributeError):
        return False


def faults():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_minflt, r.ru_majflt


def child(kernel, p, size, mode, reps, warmup, seconds):
    import jax
    import numpy as np

    jax.config.update("jax_platforms", "cpu")
    jax.config.update("jax_num_cpu_devices", p)
    with context(mode, p):
        case = cases().KERNELS[kernel](p, size)  # interpret mode is decided where a pallas_call is made
        from suite_kernels import AXIS

        mesh = jax.make_mesh((p,), (AXIS,))
        base = status_bytes("VmRSS") or maxrss()
        host = case.inputs(np.random.default_rng(0))
        args = [jax.device_put(a, jax.sharding.NamedSharding(mesh, s)) for a, s in zip(host, case.in_specs)]
        del host

        def wrap(fn):
            return jax.jit(
                jax.shard_map(fn, mesh=mesh, in_specs=case.in_specs, out_specs=case.out_specs, check_vma=False)
            )

        f = wrap(case.reference if mode == "xla" else case.kernel)
        t0 = time.perf_counter()
        jax.block_until_ready(f(*args))
        first = time.perf_counter() - t0
        calls(f, args, warmup, 0.0)
        # The peak and page faults of the steady calls alone (not the first's planning).
        before, steady = status_bytes("VmRSS") or maxrss(), reset_peak()
        minflt, majflt = faults()
        times, y = calls(f, args, reps, seconds)
        rss = (status_bytes("VmHWM") if steady else None) or maxrss()
        minflt, majflt = (b - a for a, b in zip((minflt, majflt), faults()))
        # One more call from a trimmed heap (untimed): the peak of a call alone.
        y = None
        alone = trim_heap() and reset_peak()
        y = jax.block_until_ready(f(*args))
        rss_call = status_bytes("VmHWM") if alone else None
        process_rss = maxrss()
        want = y if mode == "xla" else wrap(case.reference)(*args)
        max_abs, max_rel = errors(y, want)
    del y, want, args
    out = {
        "first": first,
        "median": float(np.median(times)),
        "mean": float(np.mean(times)),
        "reps": len(times),
        "max_abs": max_abs,
        "max_rel": max_rel,
        "ok": max_rel <= case.rtol,
        "rtol": case.rtol,
        "rss": rss,
        "rss_steady_only": steady,
        "rss_call": rss_call,
        "rss_before_calls": before,
        "rss_process": process_rss,
        "rss_base": base,
        "minor_faults_per_call": minflt / len(times),
        "major_faults_per_call": majflt / len(times),
        "buffers": case.buffer_bytes(),
        "jax_bytes": case.jax_bytes(p),
        "kernel_bytes": case.kernel_bytes(p),
        "result_dropped": True,
        "moved": case.moved,
        "keep_heap": os.environ.get("TPUSIM_KEEP_HEAP") == "1",
    }
    if case.moved is not None:
        shape, dtype = case.in_shapes[-1]
        out["memcpy_bw"] = memcpy_bandwidth(int(np.prod(shape)) * np.dtype(dtype).itemsize // p, p)
    print(json.dumps(out))


def run_case(a, kernel, p, size, mode):
    """One case in its own process: its result dict, with `status` ok, failed, timeout or skipped."""
    row = {"kernel": kernel, "p": p, "size": size, "size_bytes": parse_size(size), "mode": mode}
    case = cases().KERNELS[kernel](p, parse_size(size))
    need = estimate(case)
    if need > a.memory_limit * GiB:
        return row | {
            "status": "skipped",
            "note": f"needs ~{need / GiB:.0f} GiB > {a.memory_limit:g} GiB",
            "buffers": case.buffer_bytes(),
        }
    cmd = [
        sys.executable,
        __file__,
        "--child",
        kernel,
        str(p),
        str(parse_size(size)),
        mode,
        str(a.reps),
        str(a.warmup),
        str(a.seconds),
    ]
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=a.timeout)
    except subprocess.TimeoutExpired:
        return row | {"status": "timeout", "note": f"> {a.timeout:g} s", "limit": a.timeout}
    if r.returncode != 0:
        return row | {"status": "failed", "note": failure(r)}
    return row | {"status": "ok"} | json.loads(r.stdout.strip().splitlines()[-1])


def failure(r):
    """The exception line of a failed case's stderr (else its last line, else its exit status)."""
    lines = [l for l in r.stderr.strip().splitlines() if l.strip()]
    errs = [l for l in lines if re.match(r"^[\w.]*(Error|Exception)\b", l)]
    return (errs or lines or [f"exit status {r.returncode}"])[-1][:300].replace("|", "/")


def seconds_text(t):
    return f"{t * 1e3:.3g} ms" if t < 1 else f"{t:.3g} s"


def bytes_text(n):
    for unit, size in (("GiB", GiB), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size:
            return f"{n / size:.3g} {unit}"
    return f"{n} B"


def cell(r):
    if r is None:
        return "-"
    if r["status"] != "ok":
        return r.get("note", r["status"])
    return f"{seconds_text(r['first'])} / {seconds_text(r['median'])}"


def table_row(kernel, p, size, by_mode, modes):
    """One markdown row: every mode's first call / median call, then tpusim's figures
    (each tpusim mode's, separated by `/`)."""
    sims = [m for m in modes if m.startswith("tpusim")]
    xla, interp = by_mode.get("xla"), by_mode.get("interpret")

    def ok(r):
        return r is not None and r["status"] == "ok"

    def per_sim(fn):
        vals = [fn(by_mode[m]) if ok(by_mode.get(m)) else "-" for m in sims]
        return " / ".join(vals) or "-"

    def speedup_of(r):
        if ok(interp):
            return f"{interp['median'] / r['median']:.3g}x"
        if interp is not None and interp["status"] == "timeout":  # interpret's first call alone took longer
            return f"> {interp['limit'] / r['median']:.3g}x"
        return "-"

    speedup = per_sim(speedup_of)
    roof = per_sim(lambda r: f"{r['median'] / xla['median']:.3g}x" if ok(xla) else "-")
    memcpy = per_sim(lambda r: f"{100 * r['moved'] / r['median'] / r['memcpy_bw']:.3g}%" if r.get("moved") else "-")
    errs = (
        " / ".join(
            f"{by_mode[m]['max_rel']:.2g}{'' if by_mode[m]['ok'] else ' (!)'}"
            for m in modes
            if m != "xla" and ok(by_mode.get(m))
        )
        or "-"
    )

    def peak(r):
        text = f"{bytes_text(r['rss'])} ({r['rss'] / (r['rss_base'] + needed(r)):.2g}x"
        if r.get("rss_call"):
            text += f", alone {r['rss_call'] / (r['rss_base'] + needed(r)):.2g}x"
        return text + ")"

    rss = " / ".join(peak(r) for r in (by_mode.get(m) for m in sims + ["xla"]) if ok(r))
    buffers = next((needed(r) for r in by_mode.values() if "buffers" in r), None)
    rss = f"{rss or '-'} vs {bytes_text(buffers)}" if buffers is not None else rss or "-"
    return (
        f"| {kernel} | {p} | {size} | "
        + " | ".join(cell(by_mode.get(m)) for m in modes)
        + f" | {speedup} | {roof} | {memcpy} | {errs} | {rss} |"
    )


def needed(r):
    """Bytes a call needs beyond the runtime: JAX's arrays and the kernel's own buffers on
    every device (results written before these were counted: their inputs and outputs)."""
    if "jax_bytes" in r:
        return r["jax_bytes"] + r["kernel_bytes"]
    return r["buffers"]


def header(modes):
    sims = "/".join(m.split("-")[1] for m in modes if m.startswith("tpusim"))
    names = {"xla": "xla (roof)", "interpret": "interpret"}
    checked = " / ".join(m for m in modes if m != "xla")
    cols = [names.get(m, m) for m in modes] + [
        f"speed-up vs interpret ({sims})",
        "x of roof",
        "% memcpy",
        f"max error, rel. ({checked})",
        f"peak RSS of a call ({sims}/xla; x of runtime + arrays + kernel buffers; alone: one call"
        " from a trimmed heap) vs arrays + kernel buffers",
    ]
    return "| kernel | P | size | " + " | ".join(cols) + " |\n|---|---|---|" + "---|" * len(cols)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--child", nargs=7, help=argparse.SUPPRESS)
    ap.add_argument("--kernels", default=None, help="comma-separated (default: all)")
    ap.add_argument("--sizes", default="small", help="bytes of the main operand per device: small (128K), 16M, 256M, …")
    ap.add_argument("-p", default="4", help="device counts, comma-separated")
    ap.add_argument("--modes", default="xla,interpret,tpusim-cpu", help=f"comma-separated, of {', '.join(MODES)}")
    ap.add_argument("--timeout", type=float, default=300, help="seconds a case may take")
    ap.add_argument("--reps", type=int, default=5, help="timed calls, at least")
    ap.add_argument("--seconds", type=float, default=1.0, help="timed calls for at least this long")
    ap.add_argument("--warmup", type=int, default=2, help="untimed calls after the first")
    ap.add_argument("--memory-limit", type=float, default=16, help="GiB a case may be estimated to need")
    ap.add_argument("--json", help="write every case's result to this file")
    ap.add_argument("--plot", help="also write the results as a `tpusim bench` file for `tpusim plot` to draw")
    ap.add_argument("--markdown", action="store_true", help="print the table in markdown only (no progress lines)")
    a = ap.parse_args()
    if a.child:
        kernel, p, size, mode, reps, warmup, seconds = a.child
        child(kernel, int(p), int(size), mode, int(reps), int(warmup), float(seconds))
        return
    known = cases().KERNELS
    kernels = a.kernels.split(",") if a.kernels else list(known)
    modes = a.modes.split(",")
    bad = [k for k in kernels if k not in known] + [m for m in modes if m not in MODES]
    if bad:
        ap.error(f"unknown kernel or mode: {', '.join(bad)} (kernels: {', '.join(known)}; modes: {', '.join(MODES)})")
    try:
        ps = [int(p) for p in a.p.split(",")]
        sizes = a.sizes.split(",")
        [parse_size(s) for s in sizes]
    except ValueError as e:
        ap.error(f"bad -p or --sizes: {e}")
    for out in (a.json, a.plot):
        if out and os.path.exists(out):
            ap.error(f"{out} exists: not overwriting it")
    results, rows = [], []
    for kernel in kernels:
        for p in ps:
            for size in sizes:
                by_mode = {}
                for mode in modes:
                    r = run_case(a, kernel, p, size, mode)
                    by_mode[mode] = r
                    results.append(r)
                    if not a.markdown:
                        print(
                            f"{kernel} P={p} {size} {mode}: {cell(r)}"
                            + (
                                f", max error {r['max_abs']:.3g} (rel {r['max_rel']:.3g})"
                                if r["status"] == "ok"
                                else ""
                            ),
                            file=sys.stderr,
                            flush=True,
                        )
                rows.append(table_row(kernel, p, size, by_mode, modes))
    print(header(modes))
    print("\n".join(rows))
    if a.json:
        write_json(a.json, results)
    if a.plot:
        write_json(a.plot, {"rows": plot_rows(results)})


def write_json(path, value):
    """Writes the whole file or nothing (a file beside it renamed over it)."""
    tmp = path + ".part"
    with open(tmp, "w") as f:
        json.dump(value, f, indent=1)
    os.replace(tmp, path)


def plot_rows(results):
    """The cases that ran, as rows of a `tpusim bench --json` file: one line per kernel,
    P and mode ("collective"), against the size of the main operand per device; time per
    call (median), and as "busbw" the bytes a device's DMAs move per second (GB/s) for
    the data-movement kernels (0, not drawn, for the others)."""
    rows = []
    for r in results:
        if r["status"] == "ok":
            rate = r["moved"] / r["p"] / r["median"] / 1e9 if r.get("moved") else 0.0
            rows.append(
                {
                    "collective": f"{r['kernel']} P={r['p']} {r['mode']}",
                    "size": r["size_bytes"],
                    "busbw_gbps": rate,
                    "time_us": r["median"] * 1e6,
                }
            )
    return rows


if __name__ == "__main__":
    main()
