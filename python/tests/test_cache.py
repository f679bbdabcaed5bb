"""Plan once, run many: a pallas_call with the same kernel, shapes, mesh and SMEM values
reuses its planned program, also across jits; other SMEM values are another plan."""

import jax
import numpy as np
import pytest
from jax import lax
from jax import numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

import tpusim
from tpusim import _hook, _native

P = jax.sharding.PartitionSpec


def kernel(shift_ref, x_ref, o_ref, send, recv):
    me = lax.axis_index("x")
    dma = pltpu.make_async_remote_copy(x_ref, o_ref, send, recv, device_id=(lax.rem(me + shift_ref[0], 4),))
    dma.start()
    dma.wait()


def f(shift, x):
    call = pl.pallas_call(
        kernel,
        out_shape=jax.ShapeDtypeStruct((8, 128), jnp.int32),
        in_specs=[pl.BlockSpec(memory_space=pltpu.SMEM), pl.BlockSpec(memory_space=pl.ANY)],
        out_specs=pl.BlockSpec(memory_space=pl.ANY),
        scratch_shapes=[pltpu.SemaphoreType.DMA] * 2,
    )
    mesh = jax.make_mesh((4,), ("x",))
    return jax.shard_map(call, mesh=mesh, in_specs=(P(), P("x")), out_specs=P("x"), check_vma=False)(shift, x)


def test_repeated_calls_reuse_their_plan_and_new_scalars_make_a_new_one():
    mesh = jax.make_mesh((4,), ("x",))
    x = jax.device_put(jnp.arange(32 * 128, dtype=jnp.int32).reshape(32, 128), jax.NamedSharding(mesh, P("x")))
    seen = []
    _hook._plans.clear()
    with tpusim.simulate(backend="cpu"), _hook.observing(lambda what, plan: seen.append((what, id(plan)))):
        g = jax.jit(f)
        outs = [np.asarray(g(jnp.array([s], jnp.int32), x)) for s in (1, 1, 1, 3)]
        # Another jit of the same function: the same program, planned already.
        np.asarray(jax.jit(f)(jnp.array([1], jnp.int32), x))
        jax.effects_barrier()
    planned = [p for w, p in seen if w == "planned"]
    calls = [p for w, p in seen if w == "call"]
    assert len(calls) == 5 and len(planned) == 2
    assert calls[0] == calls[1] == calls[2] == calls[4] != calls[3]
    a = np.asarray(x).reshape(4, 8, 128)
    for shift, out in ((1, outs[0]), (3, outs[3])):
        got = out.reshape(4, 8, 128)
        for d in range(4):
            np.testing.assert_array_equal(got[(d + shift) % 4], a[d])


def shift_kernel(x_ref, o_ref, send, recv):
    me = lax.axis_index("x")
    dma = pltpu.make_async_remote_copy(x_ref, o_ref, send, recv, device_id=(lax.rem(me + 1, 4),))
    dma.start()
    dma.wait()


def shifted():
    call = pl.pallas_call(
        shift_kernel,
        out_shape=jax.ShapeDtypeStruct((8, 128), jnp.int32),
        in_specs=[pl.BlockSpec(memory_space=pl.ANY)],
        out_specs=pl.BlockSpec(memory_space=pl.ANY),
        scratch_shapes=[pltpu.SemaphoreType.DMA] * 2,
    )
    mesh = jax.make_mesh((4,), ("x",))
    g = jax.jit(jax.shard_map(call, mesh=mesh, in_specs=P("x"), out_specs=P("x"), check_vma=False))
    return g, jax.NamedSharding(mesh, P("x"))


def shift_of(host):
    a = host.reshape(4, 8, 128)
    return np.concatenate([a[(d - 1) % 4] for d in range(4)])


@pytest.mark.parametrize("backend", ["cpu", "gpu"])
def test_a_repeated_call_runs_from_rust_on_each_calls_own_inputs(backend):
    g, sharding = shifted()
    with tpusim.simulate(backend=backend):
        before = None
        for k in range(6):
            host = np.arange(32 * 128, dtype=np.int32).reshape(32, 128) * (k + 2) - k
            got = np.asarray(g(jax.device_put(host, sharding)))
            np.testing.assert_array_equal(got, shift_of(host), err_msg=f"call {k}")
            if k == 0:
                before = _native.saved_rounds()
        # The first call planned it in Python; every one after ran the saved run.
        assert _native.saved_rounds() - before == 5


def test_a_changed_setting_or_an_observer_reaches_a_repeated_call():
    g, sharding = shifted()
    host = np.arange(32 * 128, dtype=np.int32).reshape(32, 128)
    x = jax.device_put(host, sharding)
    with tpusim.simulate(backend="cpu"):
        for _ in range(3):
            np.testing.assert_array_equal(np.asarray(g(x)), shift_of(host))
        # A schedule that is none is refused when set, as on the command line...
        with pytest.raises(tpusim.BadInput, match="sideways"):
            tpusim.config.schedule = "sideways"
        # ...and one set now is the one the next call follows: one naming a device the
        # call's mesh lacks is refused there.
        tpusim.config.schedule = "run-ahead:99"
        with pytest.raises(Exception, match="run-ahead:99"):
            np.asarray(g(x))
        tpusim.config.schedule = "lazy"
        np.testing.assert_array_equal(np.asarray(g(x)), shift_of(host))
        np.testing.assert_array_equal(np.asarray(g(x)), shift_of(host))
        # The tools see every call, the repeated one too.
        seen = []
        with _hook.observing(lambda what, plan: seen.append(what)):
            np.asarray(g(x))
            np.asarray(g(x))
        assert seen.count("call") == 2
    # Leaving simulate restored the schedule: the saved lazy run is stale.
    assert tpusim.config.schedule == "eager"


def routed():
    # `kernel` with each device's own shift, scalar-prefetched: it decides where the rows go.
    call = pl.pallas_call(
        kernel,
        out_shape=jax.ShapeDtypeStruct((8, 128), jnp.int32),
        grid_spec=pltpu.PrefetchScalarGridSpec(
            num_scalar_prefetch=1,
            in_specs=[pl.BlockSpec(memory_space=pl.ANY)],
            out_specs=pl.BlockSpec(memory_space=pl.ANY),
            scratch_shapes=[pltpu.SemaphoreType.DMA] * 2,
        ),
    )
    mesh = jax.make_mesh((4,), ("x",))
    g = jax.jit(jax.shard_map(call, mesh=mesh, in_specs=(P("x"), P("x")), out_specs=P("x"), check_vma=False))
    return g, jax.NamedSharding(mesh, P("x"))


def routed_of(shifts, host):
    """numpy's answer: device d's rows land on device d + shifts[d] (a permutation)."""
    a = host.reshape(4, 8, 128)
    out = np.zeros_like(a)
    for d in range(4):
        out[(d + shifts[d]) % 4] = a[d]
    return out.reshape(32, 128)


@pytest.mark.parametrize("backend", ["cpu", "gpu"])
def test_a_call_keyed_by_scalar_prefetch_values_runs_from_rust_when_they_repeat(backend):
    g, sharding = routed()
    # Shift values per device; B differs from A on devices 2 and 3 only.
    a, b, c = (1, 1, 1, 1), (1, 1, 2, 0), (3, 3, 3, 3)
    _native.forget_saved_runs()  # nothing saved by an earlier test's lowering counts

    def call(shifts, k):
        host = np.arange(32 * 128, dtype=np.int32).reshape(32, 128) * (k + 3) - k
        before = _native.saved_rounds()
        got = np.asarray(g(jax.device_put(np.array(shifts, np.int32), sharding), jax.device_put(host, sharding)))
        np.testing.assert_array_equal(got, routed_of(shifts, host), err_msg=f"call {k}: {shifts}")
        return _native.saved_rounds() - before

    with tpusim.simulate(backend=backend):
        # New values go through Python (which plans and saves them); repeated ones run
        # the run saved under their bytes, each call on its own inputs.
        assert [call(s, k) for k, s in enumerate((a, a, b, b, a, c, c))] == [0, 1, 0, 1, 1, 0, 1]
        # A changed setting makes every saved run stale: the first call after it is
        # Python's, and follows it (a schedule naming a device the mesh lacks is refused).
        tpusim.config.schedule = "run-ahead:99"
        with pytest.raises(Exception, match="run-ahead:99"):
            call(a, 7)
        tpusim.config.schedule = "lazy"
        assert [call(s, k) for k, s in enumerate((a, a, b), 8)] == [0, 1, 0]
        # An observer sees every call, the repeated ones too.
        seen = []
        with _hook.observing(lambda what, plan: seen.append(what)):
            assert [call(s, k) for k, s in enumerate((a, b), 11)] == [0, 0]
        assert seen.count("call") == 2


def test_a_call_site_keeps_its_latest_64_sets_of_scalar_prefetch_values():
    g, sharding = routed()
    host = np.arange(32 * 128, dtype=np.int32).reshape(32, 128) - 5
    x = jax.device_put(host, sharding)
    _native.forget_saved_runs()

    def saved(k):
        # Shifts 1 + 4k all send device d's rows to d + 1, under different bytes.
        shifts = np.full(4, 1 + 4 * k, np.int32)
        before = _native.saved_rounds()
        got = np.asarray(g(jax.device_put(shifts, sharding), x))
        np.testing.assert_array_equal(got, routed_of([1] * 4, host), err_msg=f"values {k}")
        return _native.saved_rounds() - before

    with tpusim.simulate(backend="cpu"):
        assert not any(saved(k) for k in range(65))  # each new: through Python
        # The oldest of the 65 (values 0) was dropped, the 64 after it kept; saving 0
        # again drops the oldest then kept (1).
        assert [saved(64), saved(1), saved(0), saved(1), saved(0)] == [1, 1, 0, 0, 1]


def test_a_plan_says_how_long_its_native_planning_took():
    g, sharding = shifted()
    host = np.arange(32 * 128, dtype=np.int32).reshape(32, 128) + 7
    seen = []
    _hook._plans.clear()
    with (
        tpusim.simulate(backend="cpu"),
        _hook.observing(lambda what, plan: seen.append((plan, plan.call.planning_seconds))),
    ):
        np.testing.assert_array_equal(np.asarray(g(jax.device_put(host, sharding))), shift_of(host))
    plan, before = seen[0]
    assert before is None  # heard of before its first run made the native plan
    took = plan.call.planning_seconds
    assert isinstance(took, float) and took >= 0.0


def test_a_fresh_native_plan_is_the_plan_made_before():
    # `_plan_digest` (the benchmarks' check that a faster planner plans alike) hashes a
    # fresh plan: the same kernel planned twice gives the same digest, and another
    # kernel another one.
    g, sharding = shifted()
    host = np.arange(32 * 128, dtype=np.int32).reshape(32, 128)
    seen = []
    _hook._plans.clear()
    with (
        tpusim.simulate(backend="cpu"),
        _hook.observing(lambda what, plan: seen.append(plan)),
    ):
        np.testing.assert_array_equal(np.asarray(g(jax.device_put(host, sharding))), shift_of(host))
    call = seen[0].call
    (a, took), (b, _) = call._plan_digest(), call._plan_digest()
    assert a == b and len(a) == 16 and took >= 0.0
    assert call._plan_digest("lockstep")[0] != a
    with pytest.raises(Exception, match="schedule"):
        call._plan_digest("no such schedule")
