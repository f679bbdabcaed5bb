"""The seed's four Pallas kernels, as written, on tpusim: results equal to XLA's
collectives (computed here with numpy), step tables equal to the Rust kernels', clean
under the verifier; the all_gather with one shared receive semaphore is reported."""

import os

import numpy as np
import pytest

import tpusim
from conftest import HERE, SEED_DIR, SEEDS, load_seed, marked_line

PS = [2, 3, 4, 8]


def mapped(name, mod):
    """The seed's `jax.shard_map(...)` of its pallas_call (as in its pallas_result)."""
    jax, P = mod.jax, mod.P
    f, in_specs, out_specs = {
        "ppermute": (lambda: mod.right_shift, mod.partition, mod.partition),
        "all_gather": (lambda: mod.all_gather, mod.partition, mod.partition),
        "psum": (lambda: mod.psum_pallas, mod.partition, mod.partition),
        "psum_scatter": (lambda: mod.pallas_reduce_scatter, P(None, "x"), P("x", None)),
    }[name]
    return jax.shard_map(f(), mesh=mod.mesh, in_specs=in_specs, out_specs=out_specs, check_vma=False)


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
def test_seed_results_equal_xla(name, p):
    mod = load_seed(name, p)
    x = np.asarray(mod.input_arr)
    want = xla_reference(name, x, p)
    got = np.asarray(mod.pallas_result)
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    # The seed's own xla_result (tpusim's shipped Rust collectives) agrees as well.
    np.testing.assert_allclose(np.asarray(mod.xla_result), want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("name", SEEDS)
def test_seed_results_on_the_gpu_executor(name):
    mod = load_seed(name, 4, backend="gpu")
    x = np.asarray(mod.input_arr)
    np.testing.assert_allclose(np.asarray(mod.pallas_result), xla_reference(name, x, 4), rtol=1e-5, atol=1e-6)


# psum_scatter's table labels single elements of each half block (the seed's T2(2+1+0)),
# so it is traced with 2x1 blocks, the shape of the Rust kernel's table; the other
# tables are traced at the seed's own (8, 128) shards.
TRACE_BLOCK = ("block_size = (16, 128)", "block_size = (2, 1)")


@pytest.mark.parametrize("p", PS)
@pytest.mark.parametrize("name", SEEDS)
def test_seed_step_tables_equal_the_rust_kernels(name, p):
    mod = load_seed(name, p, replace=TRACE_BLOCK if name == "psum_scatter" else None)
    table = mapped(name, mod).trace(mod.input_arr, like=name)
    rust = tpusim.trace(name, p)
    assert table.steps() == rust.steps()
    assert [r.notation for r in table.rows] == [r.notation for r in rust.rows]
    # Independently of the Rust table: the final row holds every device's contribution
    # exactly once in the result column (each seed kernel's last step completes it).
    final = table.rows[-1]
    col = {
        "ppermute": "y_ref",
        "all_gather": "out_ref[0]",
        "psum": "o_ref",
        "psum_scatter": "o_ref.top",
    }[name]
    i = table.columns.index(col)
    for d, cells in enumerate(final.cells):
        devices = sorted(t[0] for t in cells[i])
        want = {
            "ppermute": [(d - 1) % p],
            "all_gather": [0],
        }.get(name, list(range(p)))
        assert devices == want, (d, cells[i])


@pytest.mark.parametrize("p", PS)
@pytest.mark.parametrize("name", SEEDS)
def test_seed_kernels_are_clean(name, p):
    mod = load_seed(name, p)
    report = mapped(name, mod).check(mod.input_arr, schedules=200)
    assert report.clean, str(report)
    assert report.schedules == 200


SHARED = os.path.join(HERE, "shared_recv_sem.py")


@pytest.mark.parametrize("p", [3, 4, 8])
def test_all_gather_with_one_shared_receive_semaphore_is_reported(p):
    mod = load_seed("all_gather", p)
    import shared_recv_sem as broken

    broken.num_devices = p
    f = mod.jax.shard_map(broken.all_gather, mesh=mod.mesh, in_specs=mod.partition,
                          out_specs=mod.partition, check_vma=False)
    report = f.check(mod.input_arr, schedules=200)
    assert report.kinds() == ["race"], str(report)
    race = report.findings[0]
    # The race is between the DMA the kernel starts and the wait that a shared
    # semaphore lets through too early: both name the kernel's lines.
    start = f"{SHARED}:{marked_line(SHARED, 'start')}"
    wait = f"{SHARED}:{marked_line(SHARED, 'wait')}"
    assert start in race.locations and wait in race.locations, race.message
    assert race.details["shared_semaphore"]["semaphore"] == "recv_sem", race.details
    assert f"({start})" in race.message and "recv_sem" in race.message


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
