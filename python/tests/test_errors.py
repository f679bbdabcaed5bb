"""One test per error kind: each kernel in broken_kernels.py has one mistake, and the
report (or the exception) names the kernel's Python file and line."""

import os

import numpy as np
import pytest

import broken_kernels as bk
import tpusim
from conftest import HERE, marked_line
from tpusim.jax import numpy as jnp
from tpusim.jax.experimental import pallas as pl
from tpusim.jax.experimental.pallas import tpu as pltpu

SRC = os.path.join(HERE, "broken_kernels.py")
DMA, REGULAR = pltpu.SemaphoreType.DMA, pltpu.SemaphoreType.REGULAR


def at(marker):
    return f"{SRC}:{marked_line(SRC, marker)}"


def x(p=4, shard=bk.SHARD):
    rng = np.random.default_rng(0)
    return rng.uniform(size=(shard[0], shard[1] * p)).astype(np.float32)


def only(report, kind):
    assert report.kinds() == [kind], str(report)
    return report.findings[0]


def test_race_names_both_accesses(cpu):
    f = bk.mapped(bk.call(bk.race_kernel, scratch=[DMA, DMA], space=pltpu.VMEM))
    race = only(f.check(x(), schedules=50), "race")
    assert at("race start") in race.locations and at("race overwrite") in race.locations
    assert race.details["alloc"] == "x_ref"
    assert f"({at('race overwrite')})" in race.message


def test_deadlock_names_the_wait(cpu):
    f = bk.mapped(bk.call(bk.deadlock_kernel, scratch=[REGULAR]))
    found = only(f.check(x(), schedules=10), "deadlock")
    assert found.locations == [at("deadlock")]
    assert {b["semaphore"] for b in found.details["blocked"]} == {"done"}
    # Running it raises the same report.
    with pytest.raises(tpusim.DeadlockError) as e:
        f(x())
    assert at("deadlock") in str(e.value)
    assert [b["site"]["location"] for b in e.value.blocked] == [at("deadlock")] * 4


def test_semaphore_not_zero_names_the_last_signal(cpu):
    f = bk.mapped(bk.call(bk.extra_signal_kernel, scratch=[REGULAR]))
    found = only(f.check(x(), schedules=10), "semaphore not zero at exit")
    assert found.locations == [at("extra signal")]
    assert found.details["value"] == 1 and found.details["semaphore"] == "sem"
    with pytest.raises(tpusim.ExitError) as e:
        f(x())
    assert at("extra signal") in str(e.value)


def test_dma_never_waited_names_its_start(cpu):
    f = bk.mapped(bk.call(bk.unwaited_kernel, scratch=[DMA]))
    found = only(f.check(x(), schedules=10), "DMA never waited")
    assert found.locations == [at("never waited")]
    assert found.details["bytes"] == 8 * 128 * 4
    with pytest.raises(tpusim.ExitError) as e:
        f(x())
    assert at("never waited") in str(e.value)


def test_device_id_out_of_range_is_the_seed_003_trap(cpu):
    f = bk.mapped(bk.call(bk.negative_left_kernel, scratch=[DMA, DMA]))
    found = only(f.check(x(), schedules=10), "device id out of range")
    assert found.locations == [at("negative left")]
    assert found.schedule is None  # found while tracing: under every schedule
    assert "got -1" in found.message and found.sites[0].device == 0
    with pytest.raises(tpusim.KernelError) as e:
        f(x())
    assert e.value.kind == "device id out of range"
    assert e.value.site["location"] == at("negative left")
    # Floor modulo (Python's %, like jnp's) gives the right neighbour: clean, correct.
    g = bk.mapped(bk.call(bk.floor_left_kernel, scratch=[DMA, DMA]))
    assert g.check(x(), schedules=20).clean
    shards = np.split(x(), 4, axis=1)
    np.testing.assert_array_equal(g(x()), np.concatenate([shards[(d + 1) % 4] for d in range(4)], axis=1))


def test_send_before_entry_names_the_send(cpu):
    f = bk.mapped(bk.call(bk.early_send_kernel, scratch=[DMA, DMA], collective_id=0))
    found = only(f.check(x(), schedules=10), "sent before the receiver entered the kernel")
    assert found.locations[0] == at("early send")


def test_out_of_bounds_names_the_ref_use(cpu):
    out = bk.jax.ShapeDtypeStruct((bk.num_devices, 8, 128), jnp.float32)
    f = bk.mapped(bk.call(bk.out_of_bounds_kernel, out_shape=out, scratch=[DMA]))
    found = only(f.check(x(), schedules=10), "out-of-bounds ref slice")
    assert found.locations == [at("out of bounds")]
    assert "`y_ref.at(4)`" in found.message


def test_shape_mismatch_names_the_copy(cpu):
    f = bk.mapped(bk.call(bk.shape_mismatch_kernel, scratch=[DMA]))
    with pytest.raises(tpusim.KernelError) as e:
        f(x())
    assert e.value.kind == "shape mismatch" and e.value.site["location"] == at("shape mismatch")


def test_compute_on_hbm_names_the_store(cpu):
    f = bk.mapped(bk.call(bk.hbm_compute_kernel))
    found = only(f.check(x(), schedules=10), "kernel error")
    assert found.details["kind"] == "HBM used in compute"
    assert found.locations == [at("hbm compute")]


def test_barrier_semaphore_needs_a_collective_id(cpu):
    f = bk.mapped(bk.call(bk.no_collective_id_kernel, scratch=[DMA]))
    with pytest.raises(tpusim.KernelError) as e:
        f(x())
    assert "collective_id" in str(e.value) and e.value.site["location"] == at("no collective id")


@pytest.mark.parametrize(
    "kernel, marker, construct, scratch",
    [
        (bk.unsupported_op_kernel, "unsupported multiply", "*", []),
        (bk.unsupported_jnp_kernel, "unsupported sin", "jnp.sin", []),
        (bk.data_dependent_kernel, "data dependent", ">", []),
        (bk.strided_kernel, "non-contiguous", "x_ref[...]", []),
        (bk.local_wait_send_kernel, "local wait_send", "wait_send", [DMA]),
    ],
)
def test_unsupported_constructs_name_the_construct_and_line(cpu, kernel, marker, construct, scratch):
    f = bk.mapped(bk.call(kernel, space=pltpu.VMEM, scratch=scratch))
    with pytest.raises(tpusim.UnsupportedError) as e:
        f(x())
    msg = str(e.value)
    assert f"`{construct}`" in msg and f"({at(marker)})" in msg, msg
    assert "device 0 at grid point []" in msg
    # The same error from the other entry points.
    with pytest.raises(tpusim.UnsupportedError):
        f.check(x())


def test_unsupported_spec_names_its_line(cpu):
    spec = pl.BlockSpec((8, 128), lambda i: (0, 0))  # <- blocked spec
    here = f"{__file__}:{marked_line(__file__, 'blocked spec')}"
    call = pl.pallas_call(
        bk.hbm_compute_kernel,
        out_shape=bk.jax.ShapeDtypeStruct(bk.SHARD, jnp.float32),
        in_specs=[spec],
        out_specs=pl.BlockSpec(memory_space=pl.ANY),
    )
    with pytest.raises(tpusim.UnsupportedError) as e:
        bk.mapped(call)(x())
    assert "pl.BlockSpec(block_shape, index_map)" in str(e.value) and here in str(e.value)


def test_unknown_pallas_names_are_errors_at_the_line():
    with pytest.raises(tpusim.UnsupportedError) as e:
        pl.atomic_add  # <- unknown name
    assert f"{__file__}:{marked_line(__file__, 'unknown name')}" in str(e.value)
    assert "`pl.atomic_add`" in str(e.value)
    with pytest.raises(tpusim.UnsupportedError):
        pltpu.semaphore_read
    with pytest.raises(AttributeError):
        pl._private


def test_pallas_calls_outside_a_kernel_or_shard_map_are_errors():
    with pytest.raises(tpusim.UnsupportedError) as e:
        pl.program_id(0)
    assert "inside a kernel" in str(e.value)
    call = bk.call(bk.hbm_compute_kernel)
    with pytest.raises(tpusim.UnsupportedError) as e:
        call(x())
    assert "inside" in str(e.value) and "shard_map" in str(e.value)


def test_bad_input_dtype_and_arity(cpu):
    with pytest.raises(tpusim.BadInput) as e:
        bk.mapped(bk.call(bk.hbm_compute_kernel))(x().astype(np.int16))
    assert "int16" in str(e.value) and "float16 and bfloat16" in str(e.value)
    with pytest.raises(tpusim.BadInput) as e:
        bk.mapped(bk.call(bk.deadlock_kernel))(x())  # the kernel takes a third ref
    assert "takes 3 refs but the call gives 2" in str(e.value)
    assert f"{SRC}:" in str(e.value)
