"""Kernel invocations back to back: `repeat=` on the shipped collectives, a function
that makes several pallas_calls checked as one sequence, and the single-barrier
variants (the hazard the Pallas docs' double barrier is for)."""

import numpy as np
import pytest

import tpusim
from conftest import load_seed


def test_repeat_checks_invocations_back_to_back():
    assert tpusim.check("psum", 4, repeat=3, schedules=50).clean
    # One barrier round is enough for psum: every neighbour waits on this device first.
    r = tpusim.check("psum", 4, variant="single-barrier", repeat=2)
    assert r.clean, str(r)
    # Not for the shift: its left neighbour never waits for it.
    r = tpusim.check("ppermute", 5, variant="single-barrier", repeat=2)
    assert r.kinds() == ["sent before the receiver entered the kernel"], str(r)
    invocations = {s.invocation for s in r.findings[0].sites}
    assert invocations == {0, 1}, r.findings[0].sites
    assert "--repeat 2" in str(r) and "in invocation 1" in str(r)
    assert tpusim.check("ppermute", 5, variant="single-barrier").clean
    v = {(x["collective"], x["name"]): x for x in tpusim.variants()}
    assert v[("psum", "single-barrier")]["expect"] is None
    assert v[("ppermute", "single-barrier")]["repeat"] == 2
    t = tpusim.trace("psum", 2, repeat=2)
    assert len(t.rows) == 1 + 2 * 2
    with pytest.raises(tpusim.BadInput, match="at least 1"):
        tpusim.check("psum", 4, repeat=0)
    with pytest.raises(tpusim.LimitError):
        tpusim.check("psum", 4, repeat=10**12)


def test_a_function_with_two_pallas_calls_is_checked_as_a_sequence():
    mod = load_seed("psum", 4)
    jax = mod.jax
    twice = jax.shard_map(
        lambda x: mod.psum_pallas(mod.psum_pallas(x)[0]),
        mesh=mod.mesh,
        in_specs=mod.partition,
        out_specs=mod.partition,
        check_vma=False,
    )
    x = np.asarray(mod.input_arr)
    calls = twice.kernels(x)
    assert len(calls) == 2
    r = twice.check(x, schedules=50)
    assert r.clean and r.title.startswith("psum_kernel then psum_kernel"), str(r)
    assert tpusim.check(calls, schedules=20, repeat=2).clean
