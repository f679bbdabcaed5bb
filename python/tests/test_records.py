"""The native reader of a kernel recording (``src/records.rs``, which walks the front
end's dicts and lists itself) against the serde derives it replaced (``pythonize`` into
``replay::Op``, kept as its reference): the same ops from the records of real kernels
and from records of every kind, and a clear ``BadInput`` naming the record and field
where a record is malformed."""

import os
import sys

import jax
import numpy as np
import pytest

import tpusim
from tpusim import _batch, _native

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "bench"))
import suite  # noqa: E402
import suite_kernels  # noqa: E402

AT = ["kernel.py", 12]


def read_both(recording):
    """(the reader's ops, the reference's ops), each a Debug text or "error: …"."""
    return _native._read_recording_both(recording)


def test_the_suite_kernels_records_read_as_the_reference_reads_them(recordings):
    caught = recordings
    mesh = jax.make_mesh((4,), (suite_kernels.AXIS,))
    for name in ("ring_attention", "moe", "all_gather_matmul", "reduce_scatter"):
        with tpusim.simulate(backend="cpu"):
            case = suite_kernels.KERNELS[name](4, suite.SIZES["small"])
            args = [
                jax.device_put(a, jax.NamedSharding(mesh, s))
                for a, s in zip(case.inputs(np.random.default_rng(2)), case.in_specs)
            ]
            f = jax.shard_map(case.kernel, mesh=mesh, in_specs=case.in_specs, out_specs=case.out_specs, check_vma=False)
            jax.block_until_ready(jax.jit(f)(*args))
    assert caught, "no recording was read"
    kinds = set()
    copies = 0
    for rec in caught:
        # A batched loop's copies are made natively (`_batch.Copies`); the reference reads
        # the copies Python makes.
        expanded = [[_batch.expand(point) for point in dev] for dev in rec]
        copies += sum(type(r) is _batch.Copies for dev in rec for point in dev for r in point)
        got, want = _native._read_recording_both(rec, expanded)
        assert not got.startswith("error"), got
        assert got == want
        kinds |= {r["op"] for dev in expanded for point in dev for r in point}
    assert copies, "no loop's copies were made natively"
    # What these kernels record between them (the other kinds: test below).
    assert {"compute", "iter", "mark", "dma_wait", "load", "full", "start", "remote_copy", "store"} <= kinds


def sem(i, index=None):
    return [{"Arg": i}, index]


def every_kind(ints=int):
    """One grid point with a record of every kind, optional fields both ways (`ints`:
    the type of a few of its integers)."""
    path = [0, [[0, 1, 0], [1, 2, 4], [2, 8, 16], [4, 2, 128]]]
    return [
        {"op": "iter", "loops": [[["kernel.py", 7], 3], [("kernel.py", 9), ints(1)]]},
        {"op": "local_copy", "id": 0, "src": path, "dst": [1, []], "sem": sem(2), "at": AT},
        {
            "op": "remote_copy",
            "id": 1,
            "src": [0, ()],
            "dst": (1, [(1, 0, 8)]),
            "send_sem": sem(3, 1),
            "recv_sem": [{"Barrier": 0}, None],
            "dev": {"Mesh": [1, ints(0)]},
            "at": AT,
        },
        {
            "op": "remote_copy",
            "id": 2,
            "src": [0, []],
            "dst": [1, []],
            "send_sem": sem(3, 0),
            "recv_sem": sem(3, 2),
            "dev": {"Logical": -1},
            "at": AT,
        },
        {"op": "start", "id": ints(1), "at": AT},
        {"op": "wait", "id": 0, "at": AT},
        {"op": "wait_send", "id": 1, "at": AT},
        {"op": "wait_recv", "id": 1, "at": ["other.py", 3]},
        {"op": "signal", "sem": sem(2), "inc": -2, "dev": None, "at": AT},
        {"op": "signal", "sem": sem(2), "inc": 1, "dev": {"Logical": 3}, "at": AT},
        {"op": "signal", "sem": sem(2), "inc": 1, "at": AT},  # no device: this one
        {"op": "sem_wait", "sem": sem(2, 0), "value": 4, "at": AT},
        {"op": "sem_read", "sem": sem(2), "dst": [5, [[0, 0, 0]]], "at": AT},
        {"op": "fill", "dst": [1, []], "value": float("-inf"), "at": AT},
        {"op": "fill", "dst": [1, []], "value": 3, "at": AT},
        {"op": "copy", "dst": [1, []], "src": [0, []], "at": AT},
        {"op": "accumulate", "dst": [1, []], "src": [0, []], "reduce": "max", "at": AT},
        {"op": "barrier", "at": AT},
        {"op": "load", "id": 0, "src": [0, []], "at": AT, "dead": False},
        {
            "op": "load",
            "id": 1,
            "src": [0, []],
            "window": {"start": [0, 8], "shape": [8, 8], "strides": [1, 2]},
            "at": AT,
        },
        {"op": "full", "id": 2, "shape": [8, 128], "value": 0.5, "dtype": "float32", "at": AT},
        {"op": "const", "id": 3, "data": 0, "shape": [8], "dtype": "int32", "at": AT},
        {
            "op": "compute",
            "id": 4,
            "kind": {"k": "binary", "op": "add"},
            "args": [0, 2],
            "shape": [8, 128],
            "dtype": "float32",
            "at": AT,
        },
        {
            "op": "compute",
            "id": 5,
            "kind": {"k": "dot", "lhs_contract": [1], "rhs_contract": [0], "lhs_batch": [], "rhs_batch": []},
            "args": [4, 4],
            "shape": [8, 8],
            "dtype": "float32",
            "at": AT,
        },
        {
            "op": "compute",
            "id": 6,
            "kind": {
                "k": "unary",
                "op": "integer_pow",
                "n": 3,
                "dims": [0],
                "dim": 1,
                "start": [0, 0],
                "strides": [1, 1],
            },
            "args": [5],
            "shape": [8, 8],
            "dtype": "float32",
            "at": AT,
        },
        {"op": "store", "dst": [1, []], "src": 4, "at": AT},
        {"op": "store", "dst": [1, []], "src": 6, "start": [0, 8], "at": AT},
        {"op": "store", "dst": [1, []], "src": 6, "start": None, "at": AT},
        {"op": "dma_wait", "sem": sem(2), "bytes": 1 << 40, "side": "recv", "at": AT},
        {"op": "read", "value": 6, "at": AT},
        {"op": "read", "src": [5, [[0, 1, 0]]], "fetch": [5, []], "at": AT},
        {"op": "read", "value": None, "src": [5, []], "at": AT},
        {"op": "mark", "label": "step 1 ✓", "at": AT},
        {"op": "error", "kind": "device_id_out_of_range", "what": "remote_copy", "detail": "device 9", "at": AT},
        {"op": "iter", "loops": []},
    ]


def test_every_record_kind_reads_as_the_reference_reads_it():
    ops = every_kind()
    assert len({r["op"] for r in ops}) == 23  # every kind of replay::Op
    got, want = read_both([[ops, ops[:3]], [[], ops[::-1]]])
    assert not got.startswith("error"), got
    assert got == want
    # A few values as read (the Debug text of the ops).
    assert "Signal { sem: SemPath(Arg(2), None), inc: -2, dev: None" in got
    assert "Mesh([1, 0])" in got and "Logical(-1)" in got
    assert "value: -inf" in got and "bytes: 1099511627776" in got
    assert "RefPath(0, [(0, 1, 0), (1, 2, 4), (2, 8, 16), (4, 2, 128)])" in got


def copies_of(records, n, base, by, dbase, dby):
    """A `_batch.Copies` made by hand: `records` standing for their copies at `n` iterations."""
    c = object.__new__(_batch.Copies)
    c.template, c.n, c.records = None, n, records
    c.base, c.by, c.dbase, c.dby = base, by, dbase, dby
    return c


def test_a_loops_copies_read_as_the_copies_written_out():
    """The native reader makes a batched body's copies: ids from the body on shift per
    iteration (values from `base` by `by`, descriptors from `dbase` by `dby`), ids from
    before it stay, and each PerIter field is its value at the iteration."""
    steps = _batch.PerIter([[2, [[1, 8 * j, 8]]] for j in range(3)])
    body = [
        {"op": "iter", "loops": [[["kernel.py", 7], _batch.PerIter([2, 3, 4])]]},
        {"op": "load", "id": 10, "src": steps, "at": AT},
        {
            "op": "compute",
            "id": 11,
            "kind": {"k": "binary", "op": "add"},
            "args": [10, 3],
            "shape": [8],
            "dtype": "float32",
            "at": AT,
        },
        {"op": "store", "dst": [1, []], "src": 11, "at": AT},
        {"op": "store", "dst": [1, []], "src": 3, "at": AT},
        {"op": "local_copy", "id": 4, "src": [0, []], "dst": [1, []], "sem": sem(2), "at": AT},
        {"op": "wait", "id": 1, "at": AT},
        {"op": "full", "id": 12, "shape": [], "value": _batch.PerIter([0.5, 1.5, 2.5]), "dtype": "float32", "at": AT},
        {"op": "mark", "label": _batch.PerIter(["a", "b", "c"]), "at": AT},
    ]
    written = []
    for j in range(3):
        written += [
            {"op": "iter", "loops": [[["kernel.py", 7], 2 + j]]},
            {"op": "load", "id": 10 + 3 * j, "src": [2, [[1, 8 * j, 8]]], "at": AT},
            {
                "op": "compute",
                "id": 11 + 3 * j,
                "kind": {"k": "binary", "op": "add"},
                "args": [10 + 3 * j, 3],
                "shape": [8],
                "dtype": "float32",
                "at": AT,
            },
            {"op": "store", "dst": [1, []], "src": 11 + 3 * j, "at": AT},
            {"op": "store", "dst": [1, []], "src": 3, "at": AT},
            {"op": "local_copy", "id": 4 + 2 * j, "src": [0, []], "dst": [1, []], "sem": sem(2), "at": AT},
            {"op": "wait", "id": 1, "at": AT},
            {"op": "full", "id": 12 + 3 * j, "shape": [], "value": 0.5 + j, "dtype": "float32", "at": AT},
            {"op": "mark", "label": "abc"[j], "at": AT},
        ]
    before = [{"op": "full", "id": 3, "shape": [8], "value": 1.0, "dtype": "float32", "at": AT}]
    after = [{"op": "wait", "id": 8, "at": AT}]
    got, want = read_both([[before + [copies_of(body, 3, base=10, by=3, dbase=4, dby=2)] + after]])
    assert not got.startswith("error"), got
    assert got == read_both([[before + written + after]])[1]
    assert want.startswith("error")  # the serde derives know no copies


def test_a_copies_per_iteration_value_missing_is_named():
    body = [{"op": "mark", "label": _batch.PerIter(["a", "b"]), "at": AT}]
    got, _ = read_both([[[copies_of(body, 3, 0, 0, 0, 0)]]])
    assert got.startswith("error: bad input: malformed kernel recording: device 0: grid point 0, record 0"), got
    assert "copy 2" in got and "no per-iteration value for iteration 2" in got, got
    got, _ = read_both([[[{"op": "mark", "label": _batch.PerIter(["a"]), "at": AT}]]])
    assert "a per-iteration value outside a loop's copies" in got, got


def test_numpy_integers_read_as_ints():
    """The reference refuses them (`pythonize`); the reader takes any `__index__`."""
    want, _ = read_both([[every_kind()]])
    for t in (np.int64, np.int32, np.uint8):
        got, _ = read_both([[every_kind(t)]])
        assert got == want


def with_record(rec, k=1):
    ops = every_kind()[:4]
    ops.insert(k, rec)
    return [[ops]]


@pytest.mark.parametrize(
    "recording, says",
    [
        ({"id": 0, "at": AT}, "record 1: missing field `op`"),
        ({"op": "teleport", "at": AT}, "record 1 (`teleport`): unknown record `teleport`"),
        ({"op": "start", "at": AT}, "record 1 (`start`): missing field `id`"),
        ({"op": "start", "id": -1, "at": AT}, "field `id`: expected a non-negative integer, got -1"),
        ({"op": "start", "id": 1.0, "at": AT}, "field `id`: expected a non-negative integer, got float"),
        ({"op": "start", "id": True, "at": AT}, "field `id`: expected a non-negative integer, got bool"),
        ({"op": "start", "id": "1", "at": AT}, "field `id`: expected a non-negative integer, got str"),
        ({"op": "start", "id": 1, "at": ["k.py"]}, "field `at`: expected a list of 2 items, got 1"),
        ({"op": "start", "id": 1, "at": [3, 4]}, "field `at`: expected a file name, got int"),
        ({"op": "start", "id": 1, "at": ["k.py", 1 << 33]}, "expected a non-negative 32-bit integer"),
        (
            {"op": "full", "id": 2, "shape": [8, -1], "value": 0, "dtype": "float32", "at": AT},
            "field `shape`: item 1: expected a non-negative integer, got -1",
        ),
        (
            {"op": "full", "id": 2, "shape": 8, "value": 0, "dtype": "float32", "at": AT},
            "field `shape`: expected a list, got int",
        ),
        ({"op": "fill", "dst": [1, []], "value": "zero", "at": AT}, "field `value`: expected a number, got str"),
        (
            {"op": "copy", "dst": [1, [[0, 1]]], "src": [0, []], "at": AT},
            "field `dst`: step 0: expected a list of 3 items, got 2",
        ),
        ({"op": "copy", "dst": [1, [[300, 1, 0]]], "src": [0, []], "at": AT}, "expected a step kind (0-255)"),
        ({"op": "wait", "id": 0, "at": AT, "sem": 1}, None),  # an unknown field is ignored
        ({"op": "wait", "id": 0, "at": AT, "dead": True}, None),
        (
            {"op": "signal", "sem": [{"Ark": 1}, None], "inc": 1, "at": AT},
            "field `sem`: unknown semaphore source `Ark`",
        ),
        (
            {"op": "signal", "sem": [{"Arg": 1, "Barrier": 0}, None], "inc": 1, "at": AT},
            "field `sem`: expected a dict of one entry, got 2 entries",
        ),
        (
            {"op": "signal", "sem": sem(1), "inc": 1, "dev": {"Torus": 1}, "at": AT},
            "field `dev`: unknown device id kind `Torus`",
        ),
        (
            {"op": "accumulate", "dst": [1, []], "src": [0, []], "reduce": "prod", "at": AT},
            "field `reduce`: unknown reduction `prod`",
        ),
        ({"op": "dma_wait", "sem": sem(2), "bytes": 8, "side": "both", "at": AT}, "unknown DMA side `both`"),
        ({"op": "error", "kind": "oops", "what": "x", "detail": "y", "at": AT}, "unknown error kind `oops`"),
        (
            {"op": "compute", "id": 4, "kind": {"op": "add"}, "args": [0], "shape": [], "dtype": "float32", "at": AT},
            "field `kind`: missing field `k`",
        ),
        (
            {"op": "load", "id": 0, "src": [0, []], "window": {"start": [0]}, "at": AT},
            "field `window`: missing field `shape`",
        ),
        ("start", "record 1: expected a dict, got str"),
    ],
)
def test_a_malformed_record_is_named_with_its_field(recording, says):
    got, want = read_both(with_record(recording))
    if says is None:
        assert got == want and not got.startswith("error")
        return
    assert got.startswith("error: bad input: malformed kernel recording: device 0: grid point 0, ") and says in got, got
    assert want.startswith("error")  # the reference refuses it too


def test_a_malformed_recording_is_bad_input_not_a_crash():
    for recording, says in [
        (7, "expected a list, got int"),
        ([[7]], "device 0: grid point 0: expected a list, got int"),
        (
            [[[{"op": "barrier", "at": AT}], [{"op": "barrier"}]]],
            "grid point 1, record 0 (`barrier`): missing field `at`",
        ),
    ]:
        with pytest.raises(_native.BadInput, match="malformed kernel recording") as e:
            _native.KernelCall("k", _native.Mesh(1), [2], [], [("o", "any", [8, 128], "float32")], [], None, recording)
        assert says in str(e.value)
