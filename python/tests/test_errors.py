"""One test per error kind: each kernel in broken_kernels.py has one mistake, and the
report (or the error) names the kernel's Python file and line. Kernels are JAX's own
(real jax imports); a run's error reaches the caller as JAX's runtime error carrying
tpusim's message, and as the typed exception `tpusim.last_error()`."""

import os

import jax
import numpy as np
import pytest
from jax import numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

import broken_kernels as bk
import tpusim
from conftest import HERE, marked_line

SRC = os.path.join(HERE, "broken_kernels.py")
DMA, REGULAR = pltpu.SemaphoreType.DMA, pltpu.SemaphoreType.REGULAR


def at(marker):
    return f"{SRC}:{marked_line(SRC, marker)}"


def x(p=4, shard=bk.SHARD):
    rng = np.random.default_rng(0)
    return bk.sharded(rng.uniform(size=(shard[0], shard[1] * p)).astype(np.float32))


def only(reports, kind):
    (report,) = reports
    assert report.kinds() == [kind], str(report)
    return report.findings[0]


def check(f, schedules=20):
    return tpusim.check(f, x(), schedules=schedules)


def raises(f, cls):
    """Runs `f` on tpusim; returns the tpusim error the run raised: out of `simulate`,
    JAX's runtime error (which carries tpusim's message) becomes tpusim's own."""
    with pytest.raises(cls) as e, tpusim.simulate():
        jax.block_until_ready(f(x()))
    assert isinstance(e.value.__cause__, jax.errors.JaxRuntimeError)
    assert tpusim.last_error() is e.value
    return e.value


def test_race_names_both_accesses(cpu):
    f = bk.mapped(bk.call(bk.race_kernel, scratch=[DMA, DMA], space=pltpu.VMEM))
    race = only(check(f, 50), "race")
    assert at("race start") in race.locations and at("race overwrite") in race.locations
    assert race.details["alloc"] == "x_ref"
    assert f"({at('race overwrite')})" in race.message


def test_deadlock_names_the_wait(cpu):
    f = bk.mapped(bk.call(bk.deadlock_kernel, scratch=[REGULAR]))
    found = only(check(f, 10), "deadlock")
    assert found.locations == [at("deadlock")]
    assert {b["semaphore"] for b in found.details["blocked"]} == {"done"}
    # Running it raises the same report.
    err = raises(f, tpusim.DeadlockError)
    assert at("deadlock") in str(err)
    assert [b["site"]["location"] for b in err.blocked] == [at("deadlock")] * 4


def test_semaphore_not_zero_names_the_last_signal(cpu):
    f = bk.mapped(bk.call(bk.extra_signal_kernel, scratch=[REGULAR]))
    found = only(check(f, 10), "semaphore not zero at exit")
    assert found.locations == [at("extra signal")]
    assert found.details["value"] == 1 and found.details["semaphore"] == "sem"
    assert at("extra signal") in str(raises(f, tpusim.ExitError))


def test_dma_never_waited_names_its_start(cpu):
    f = bk.mapped(bk.call(bk.unwaited_kernel, scratch=[DMA]))
    found = only(check(f, 10), "DMA never waited")
    assert found.locations == [at("never waited")]
    assert found.details["bytes"] == 8 * 128 * 4
    assert at("never waited") in str(raises(f, tpusim.ExitError))


def test_device_id_out_of_range_is_the_seed_003_trap(cpu):
    f = bk.mapped(bk.call(bk.negative_left_kernel, scratch=[DMA, DMA]))
    found = only(check(f, 10), "device id out of range")
    assert found.locations == [at("negative left")]
    assert found.schedule is None  # found while tracing: under every schedule
    assert "-1" in found.message and found.sites[0].device == 0
    err = raises(f, tpusim.KernelError)
    assert err.kind == "device id out of range"
    assert err.site["location"] == at("negative left")
    # Floor modulo (Python's %, like jnp's) gives the right neighbour: clean, correct.
    g = bk.mapped(bk.call(bk.floor_left_kernel, scratch=[DMA, DMA]))
    assert tpusim.check(g, x(), schedules=20).clean
    with tpusim.simulate():
        got = np.asarray(g(x()))
    shards = np.split(np.asarray(x()), 4, axis=1)
    np.testing.assert_array_equal(got, np.concatenate([shards[(d + 1) % 4] for d in range(4)], axis=1))


def test_send_before_entry_names_the_send(cpu):
    f = bk.mapped(bk.call(bk.early_send_kernel, scratch=[DMA, DMA], collective_id=0))
    found = only(check(f, 10), "sent before the receiver entered the kernel")
    assert found.locations[0] == at("early send")


def test_out_of_bounds_names_the_ref_use(cpu):
    out = jax.ShapeDtypeStruct((bk.num_devices, 8, 128), jnp.float32)
    f = bk.mapped(bk.call(bk.out_of_bounds_kernel, out_shape=out, scratch=[DMA]))
    (report,) = check(f, 10)
    assert not report.clean
    found = report.findings[0]
    assert found.locations == [at("out of bounds")]
    assert "`y_ref` index 4" in found.message and found.sites[0].device == 3


def test_shape_mismatch_names_the_copy(cpu):
    f = bk.mapped(bk.call(bk.shape_mismatch_kernel, scratch=[DMA]))
    err = raises(f, tpusim.KernelError)
    assert err.kind == "shape mismatch" and err.site["location"] == at("shape mismatch")


def test_compute_on_hbm_names_the_store(cpu):
    f = bk.mapped(bk.call(bk.hbm_compute_kernel))
    found = only(check(f, 10), "kernel error")
    assert found.details["kind"] == "HBM used in compute"
    assert found.locations == [at("hbm compute")]


def test_barrier_semaphore_needs_a_collective_id(cpu):
    f = bk.mapped(bk.call(bk.no_collective_id_kernel, scratch=[DMA]))
    err = raises(f, tpusim.KernelError)
    assert "collective_id" in str(err) and err.site["location"] == at("no collective id")


@pytest.mark.parametrize(
    "kernel, marker, construct",
    [
        (bk.unsupported_jnp_kernel, "unsupported cumsum", "cumsum"),
        (bk.data_dependent_kernel, "data dependent", "cond"),
    ],
)
def test_unsupported_constructs_name_the_primitive_and_line(cpu, kernel, marker, construct):
    f = bk.mapped(bk.call(kernel, space=pltpu.VMEM))
    err = raises(f, tpusim.UnsupportedError)
    msg = str(err)
    assert f"`{construct}`" in msg and f"({at(marker)})" in msg, msg
    assert "device 0 at grid point []" in msg
    # The same error from the verifier.
    with pytest.raises(tpusim.UnsupportedError):
        check(f)


def test_strided_windows_are_copied_row_by_row(sim):
    f = bk.mapped(bk.call(bk.strided_kernel, space=pltpu.VMEM))
    got = np.asarray(f(x()))
    want = np.asarray(x()).reshape(8, 4, 2, 64)[:, :, ::-1].reshape(8, 512)
    np.testing.assert_array_equal(got, want)


def test_unsupported_dtype_names_the_operand(cpu):
    f = bk.mapped(bk.call(bk.hbm_compute_kernel, out_shape=jax.ShapeDtypeStruct(bk.SHARD, jnp.int16)))
    err = raises(lambda v: f(bk.sharded(v.astype(jnp.int16))), tpusim.UnsupportedError)
    assert "int16" in str(err) and "x_ref" in str(err)
