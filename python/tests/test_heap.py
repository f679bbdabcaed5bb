"""`TPUSIM_KEEP_HEAP=1` sets glibc's heap when tpusim is imported (one arena, blocks up
to 1 GiB from the heap, freed heap kept); a plain import sets nothing. Each case runs
in a process of its own, started with the environment under test, and reads what glibc
did with a 256 MiB block through `mallinfo2` and `malloc_info`."""

import json
import os
import platform
import subprocess
import sys

import pytest

pytestmark = pytest.mark.skipif(
    platform.system() != "Linux" or platform.libc_ver()[0] != "glibc", reason="glibc's allocator only"
)

BLOCK = 256 << 20

PROBE = r"""
import ctypes, json, os, sys, tempfile, threading
import tpusim  # noqa: F401  (the import under test)

libc = ctypes.CDLL("libc.so.6")
fields = ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks", "keepcost")
class MallInfo2(ctypes.Structure):
    _fields_ = [(n, ctypes.c_size_t) for n in fields]
libc.mallinfo2.restype = MallInfo2
libc.malloc.restype = ctypes.c_void_p
libc.malloc.argtypes = [ctypes.c_size_t]
libc.free.argtypes = [ctypes.c_void_p]
libc.fopen.restype = ctypes.c_void_p
libc.malloc_info.argtypes = [ctypes.c_int, ctypes.c_void_p]
libc.fclose.argtypes = [ctypes.c_void_p]

block = libc.malloc(int(sys.argv[1]))
mapped_during = libc.mallinfo2().hblkhd
libc.free(block)
heap_after = libc.mallinfo2().arena

# A new thread's allocations: in an arena of their own unless there is only one.
def small():
    ptrs = [libc.malloc(1000) for _ in range(100)]
    for p in ptrs:
        libc.free(p)
t = threading.Thread(target=small)
t.start()
t.join()
path = os.path.join(tempfile.mkdtemp(), "info.xml")
fp = libc.fopen(path.encode(), b"w")
libc.malloc_info(0, fp)
libc.fclose(fp)
arenas = open(path).read().count("<heap nr=")
print(json.dumps({"mapped_during": mapped_during, "heap_after": heap_after, "arenas": arenas}))
"""


def probe(**env):
    e = {k: v for k, v in os.environ.items() if not k.startswith(("TPUSIM_KEEP_HEAP", "MALLOC_", "GLIBC_TUNABLES"))}
    e.update(env)
    r = subprocess.run([sys.executable, "-c", PROBE, str(BLOCK)], capture_output=True, text=True, env=e, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(r.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("env", [{}, {"TPUSIM_KEEP_HEAP": "0"}, {"TPUSIM_KEEP_HEAP": "yes"}])
def test_importing_tpusim_sets_nothing_without_the_opt_in(env):
    got = probe(**env)
    # glibc's own default: a block past 32 MiB is a mapping of its own, given back on free.
    assert got["mapped_during"] >= BLOCK, got
    assert got["heap_after"] < BLOCK, got
    assert got["arenas"] > 1, got


def test_the_opt_in_keeps_blocks_in_one_heap():
    got = probe(TPUSIM_KEEP_HEAP="1")
    assert got["mapped_during"] < BLOCK, got
    assert got["heap_after"] >= BLOCK, got  # freed, and kept
    assert got["arenas"] == 1, got


def test_the_users_own_malloc_settings_take_precedence():
    got = probe(TPUSIM_KEEP_HEAP="1", MALLOC_MMAP_THRESHOLD_=str(1 << 20), MALLOC_ARENA_MAX="2")
    assert got["mapped_during"] >= BLOCK, got  # the user's 1 MiB threshold
    assert got["arenas"] == 2, got
