"""The project's own kernels steered by what they compute (``python/examples/moe_ep.py``):
the fused expert-parallel MoE layer (in-kernel top-k routing, metadata all-gather,
token scatter to the experts' devices, the expert FFN in bf16, results gathered back)
at P = 4 and 8 and on a 2-D ("data", "model") mesh, against the same layer in plain JAX,
clean under the verifier; its broken twin (the routing counts read before their DMAs
landed) reported; and a ragged all-to-all whose sizes the kernel counts, against numpy.
Lean sizes: a few tokens per device."""

import os
import sys

import jax
import numpy as np
import pytest

import tpusim

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples"))
import moe_ep  # noqa: E402

P = jax.sharding.PartitionSpec
CFG = dict(T=4, H=128, F=128, K=2)


def run(f, *args):
    with tpusim.simulate(backend="cpu"):
        return jax.tree.map(np.asarray, f(*args))


@pytest.mark.parametrize("p, experts, replay", [(4, 8, None), (8, 8, "random:1")])
def test_moe_layer_matches_plain_jax_and_checks_clean(p, experts, replay):
    mesh = jax.make_mesh((p,), ("x",), devices=jax.devices()[:p])
    args = moe_ep.moe_inputs(mesh, "x", E=experts, **CFG)
    f = moe_ep.moe_call(mesh, "x", E=experts, **CFG)
    got = run(f, *args)
    want = np.asarray(moe_ep.moe_reference(*args, K=CFG["K"]))
    # bf16 tokens and activations, f32 products summed in another order: a few ulps of f32.
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    # P = 4 under every deterministic schedule (7); P = 8 under one (lean for CI).
    reports = tpusim.check(f, *args, schedules=1, replay=replay)
    assert reports.clean, str(reports)


def test_moe_layer_on_a_data_by_model_mesh():
    mesh = jax.make_mesh((2, 4), ("data", "model"))
    args = moe_ep.moe_inputs(mesh, "model", E=8, **CFG)
    f = moe_ep.moe_call(mesh, "model", E=8, **CFG)
    got = run(f, *args)
    np.testing.assert_allclose(got, np.asarray(moe_ep.moe_reference(*args, K=CFG["K"])), rtol=1e-5, atol=1e-5)
    assert tpusim.check(f, *args, replay="lazy").clean


def test_the_broken_twin_reads_the_counts_before_their_dmas_landed():
    mesh = jax.make_mesh((4,), ("x",), devices=jax.devices()[:4])
    args = moe_ep.moe_inputs(mesh, "x", E=8, **CFG)
    f = moe_ep.moe_call(mesh, "x", E=8, broken=True, **CFG)
    (report,) = tpusim.check(f, *args, schedules=4)
    race = next((g for g in report.findings if g.kind == "race" and "`counts_s (SMEM)`" in g.message), None)
    assert race is not None, str(report)
    assert "`read`" in race.message and "`start`" in race.message, race.message


def test_moe_layer_step_tables_and_modeled_time_come_out():
    mesh = jax.make_mesh((4,), ("x",), devices=jax.devices()[:4])
    args = moe_ep.moe_inputs(mesh, "x", E=8, **CFG)
    f = moe_ep.moe_call(mesh, "x", E=8, **CFG)
    (table,) = tpusim.trace(f, *args)
    text = str(table)
    assert "moe_kernel on 4 devices" in text and "y_ref" in text and len(table.rows) > 1, text
    (run,) = tpusim.model(f, *args, preset="v5e", execute=True)
    assert run.seconds > 0


@pytest.mark.parametrize("p, rows", [(4, 5), (8, 3)])
def test_ragged_all_to_all_with_sizes_the_kernel_counts(p, rows):
    mesh = jax.make_mesh((p,), ("x",), devices=jax.devices()[:p])
    host = np.random.default_rng(p).integers(0, 1000, size=(p * rows, 7)).astype(np.int32)
    x = jax.device_put(host, jax.NamedSharding(mesh, P("x")))
    f = moe_ep.ragged_call(mesh, "x", T=rows, H=7)
    got, n = run(f, x)
    want, want_n = moe_ep.ragged_reference(host, p)
    np.testing.assert_array_equal(n, want_n)
    np.testing.assert_array_equal(got, want)
    assert tpusim.check(f, x, schedules=4).clean
