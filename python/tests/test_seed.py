"""The seed's four Pallas kernels, as written (their scripts with their own `import jax`
lines), on tpusim: results equal to XLA's collectives (numpy here, and JAX's own in the
script), step tables equal to the Rust kernels', clean under the verifier; the
all_gather with one shared receive semaphore is reported."""

import os

import numpy as np
import pytest
from conftest import HERE, SEED_DIR, SEEDS, marked_line, run_script, seed_path

import tpusim

PS = [2, 3, 4, 8]


def xla_reference(name, x, p):
    """XLA's collective on the seed's global input, with numpy."""
    if name == "ppermute":  # lax.ppermute with (i, i+1): device d gets shard d-1
        shards = np.split(x, p, axis=1)
        return np.concatenate([shards[(d - 1) % p] for d in range(p)], axis=1)
    if name == "all_gather":  # lax.all_gather: every device gets stack(shards)
        stacked = np.stack(np.split(x, p, axis=0))
        return np.concatenate([stacked] * p, axis=0)
    if name == "psum":  # lax.psum: every device gets the sum of the shards
        total = np.sum(np.stack(np.split(x.astype(np.float64), p, axis=1)), axis=0)
        return np.concatenate([total] * p, axis=1)
    if name == "psum_scatter":  # device d gets sum_k (shard_k reshaped (P, R, C))[d]
        shards = [s.astype(np.float64).reshape(p, -1, s.shape[1]) for s in np.split(x, p, axis=1)]
        blocks = np.sum(np.stack(shards), axis=0)
        return blocks.reshape(-1, blocks.shape[2])
    raise ValueError(name)


@pytest.mark.parametrize("p", PS)
@pytest.mark.parametrize("name", SEEDS)
def test_seed_results_equal_xla_and_are_clean(name, p):
    arrays, info = run_script(seed_path(name), p, check=200)
    x = arrays["input_arr"]
    want = xla_reference(name, x, p)
    got = arrays["pallas_result"]
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    # The script's own xla_result (JAX's collective) agrees as well.
    np.testing.assert_allclose(arrays["xla_result"], want, rtol=1e-5, atol=1e-6)
    (plan,) = info["plans"]
    assert plan["p"] == p
    assert plan["report"]["clean"], plan["report"]["text"]
    assert plan["report"]["schedules"] == 200


@pytest.mark.parametrize("name", SEEDS)
def test_seed_results_on_the_gpu_executor(name):
    arrays, _ = run_script(seed_path(name), 4, backend="gpu")
    np.testing.assert_allclose(
        arrays["pallas_result"], xla_reference(name, arrays["input_arr"], 4), rtol=1e-5, atol=1e-6
    )


# psum_scatter's table labels single elements of each half block (the seed's T2(2+1+0)),
# so it is traced with 2x1 blocks, the shape of the Rust kernel's table; the other
# tables are traced at the seed's own (8, 128) shards.
TRACE_BLOCK = [("block_size = (16, 128)", "block_size = (2, 1)")]


@pytest.mark.parametrize("p", [2, 4, 8])
@pytest.mark.parametrize("name", SEEDS)
def test_seed_step_tables_equal_the_rust_kernels(name, p):
    _, info = run_script(seed_path(name), p, like=name, replace=TRACE_BLOCK if name == "psum_scatter" else ())
    (plan,) = info["plans"]
    table = plan["table"]
    rust = tpusim.trace(name, p)
    got = [(tuple(r[0]) if r[0] is not None else None, r[1], r[2]) for r in table["rows"]]
    assert (table["columns"], got) == rust.steps()
    assert [r[3] for r in table["rows"]] == [r.notation for r in rust.rows]
    # Independently of the Rust table: the final row holds every device's contribution
    # exactly once in the result column (each seed kernel's last step completes it).
    final = table["rows"][-1][2]
    col = {"ppermute": "y_ref", "all_gather": "out_ref[0]", "psum": "o_ref", "psum_scatter": "o_ref.top"}[name]
    i = table["columns"].index(col)
    for d, cells in enumerate(final):
        devices = sorted(t[0] for t in cells[i])
        want = {"ppermute": [(d - 1) % p], "all_gather": [0]}.get(name, list(range(p)))
        assert devices == want, (d, cells[i])


SHARED = os.path.join(HERE, "shared_recv_sem.py")


@pytest.mark.parametrize("p", [3, 4, 8])
def test_all_gather_with_one_shared_receive_semaphore_is_reported(p):
    _, info = run_script(SHARED, p, check=200)
    (plan,) = info["plans"]
    report = plan["report"]
    assert report["kinds"] == ["race"], report["text"]
    race = report["findings"][0]
    # The race is between the DMA the kernel starts and the wait that a shared
    # semaphore lets through too early: both name the kernel's lines.
    start = f"{SHARED}:{marked_line(SHARED, 'start')}"
    wait = f"{SHARED}:{marked_line(SHARED, 'wait')}"
    assert start in race["locations"] and wait in race["locations"], race["message"]
    assert race["details"]["shared_semaphore"]["semaphore"] == "recv_sem", race["details"]
    assert f"({start})" in race["message"] and "recv_sem" in race["message"]


def test_seed_kernels_are_the_seeds_byte_for_byte():
    """Every kernel and helper function in seed/ appears verbatim in the seed document
    (when the document is beside the repository, as in CI)."""
    doc = os.path.join(HERE, "..", "..", "..", "shared", "seeds", "000_448ce85d16c0ffa8.txt")
    if not os.path.exists(doc):
        pytest.skip("the seed document is not beside this checkout")
    text = open(doc, encoding="utf-8").read()
    import ast

    checked = 0
    for name in SEEDS:
        path = os.path.join(SEED_DIR, f"seed_{name}.py")
        src = open(path).read()
        for node in ast.parse(src).body:
            if isinstance(node, ast.FunctionDef):
                body = ast.get_source_segment(src, node)
                assert body in text, f"{node.name} in {path} differs from the seed"
                checked += 1
    assert checked >= 8
