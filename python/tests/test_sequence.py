"""Kernel invocations back to back: `repeat=` on the shipped collectives, a JAX function
that makes several pallas_calls checked as one sequence, and the single-barrier
variants (the hazard the Pallas docs' double barrier is for)."""

import jax
import pytest
from conftest import HERE
from jax import lax
from jax import numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

import tpusim

P = jax.sharding.PartitionSpec


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


def shift_kernel(double):
    # The right shift with a collective_id: a handshake with both neighbours on the
    # barrier semaphore, then (`double`) a second round on a scoped REGULAR semaphore, as
    # the docs' double barrier.
    def kernel(x_ref, y_ref, send, recv):
        me = lax.axis_index("x")
        right, left = lax.rem(me + 1, 5), lax.rem(me + 4, 5)

        def round_on(sem):
            pl.semaphore_signal(sem, device_id=(left,))
            pl.semaphore_signal(sem, device_id=(right,))
            pl.semaphore_wait(sem, 2)

        round_on(pltpu.get_barrier_semaphore())
        if double:
            pl.run_scoped(round_on, pltpu.SemaphoreType.REGULAR)
        c = pltpu.make_async_remote_copy(x_ref, y_ref, send, recv, device_id=(right,))
        c.start()
        c.wait()

    return kernel


def twice(double):
    mesh = jax.make_mesh((5,), ("x",))

    def f(x):
        call = pl.pallas_call(
            shift_kernel(double),
            out_shape=jax.ShapeDtypeStruct((8, 128), jnp.float32),
            in_specs=[pl.BlockSpec(memory_space=pl.ANY)],
            out_specs=pl.BlockSpec(memory_space=pl.ANY),
            scratch_shapes=[pltpu.SemaphoreType.DMA] * 2,
            compiler_params=pltpu.CompilerParams(collective_id=0),
        )
        return call(call(x))

    g = jax.jit(jax.shard_map(f, mesh=mesh, in_specs=P(None, "x"), out_specs=P(None, "x"), check_vma=False))
    x = jax.device_put(jnp.zeros((8, 128 * 5), jnp.float32), jax.NamedSharding(mesh, P(None, "x")))
    return g, x


def test_a_function_with_two_pallas_calls_is_checked_as_a_sequence():
    g, x = twice(double=False)
    # Each call alone is clean; back to back, the single barrier lets a device that left
    # the first call signal its neighbour's barrier before that neighbour entered the second.
    (alone,) = tpusim.check(g, x, schedules=30)
    assert alone.clean, str(alone)
    (seq,) = tpusim.check(g, x, schedules=30, sequence=True)
    assert seq.title.startswith("kernel then kernel") and not seq.clean, str(seq)
    assert "sent before the receiver entered the kernel" in seq.kinds()
    g, x = twice(double=True)
    (seq,) = tpusim.check(g, x, schedules=30, sequence=True, repeat=2)
    assert seq.clean, str(seq)


def test_the_cli_checks_a_scripts_calls_as_one_sequence(tmp_path):
    from test_cli import tpusim_cli

    for double in (False, True):
        script = tmp_path / f"twice_{double}.py"
        script.write_text(
            f"import sys\nsys.path.insert(0, {HERE!r})\nfrom test_sequence import twice\n"
            f"g, x = twice(double={double})\ng(x).block_until_ready()\n"
        )
        code, out, err = tpusim_cli("check", "--devices", "5", "--schedules", "30", str(script))
        assert code == 0 and out.count("clean under 30 schedules") == 1, (out, err)  # one distinct call
        code, out, err = tpusim_cli("check", "--devices", "5", "--schedules", "30", "--sequence", str(script))
        assert "kernel then kernel P=5" in out, (out, err)
        if double:
            assert code == 0 and "clean under 30 schedules" in out, (out, err)
        else:
            assert code == 1 and "sent before the receiver entered the kernel" in out, (out, err)
