"""The benchmark suite's kernels (python/bench/suite_kernels) at P=4 and their smallest
size: tpusim's result against the kernel's pure-JAX reference (jitted jax.numpy / lax on
the same sharded data, run by JAX), within the case's stated tolerance (zero for the
data-movement kernels), and each kernel clean under the verifier."""

import os
import sys

import jax
import numpy as np
import pytest

import tpusim

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "bench"))
import suite  # noqa: E402
import suite_kernels  # noqa: E402

P_ = 4


def sharded(case, fn, mesh):
    return jax.jit(jax.shard_map(fn, mesh=mesh, in_specs=case.in_specs, out_specs=case.out_specs, check_vma=False))


@pytest.mark.parametrize("name", list(suite_kernels.KERNELS))
def test_suite_kernel_equals_its_reference(name):
    mesh = jax.make_mesh((P_,), (suite_kernels.AXIS,))
    with tpusim.simulate(backend="cpu"):
        case = suite_kernels.KERNELS[name](P_, suite.SIZES["small"])
        args = [
            jax.device_put(a, jax.NamedSharding(mesh, s))
            for a, s in zip(case.inputs(np.random.default_rng(1)), case.in_specs)
        ]
        f = sharded(case, case.kernel, mesh)
        got = f(*args)
    want = sharded(case, case.reference, mesh)(*args)
    assert np.any(np.asarray(want, dtype=np.float32) != 0)
    max_abs, max_rel = suite.errors(got, want)
    assert max_rel <= case.rtol, f"{name}: max error {max_abs} ({max_rel} of the largest) > {case.rtol}"
    reports = tpusim.check(f, *args, schedules=5)
    assert reports and reports.clean, str(reports)


def test_errors_compare_chunk_by_chunk_as_whole_arrays_do(monkeypatch):
    rng = np.random.default_rng(3)
    want = rng.standard_normal((37, 11)).astype(np.float32)
    got = want + rng.standard_normal(want.shape).astype(np.float32) * 1e-3
    got[20, 7] = want[20, 7] + 0.5  # the largest difference, in a later chunk
    monkeypatch.setattr(suite, "CHUNK", 16)
    max_abs, max_rel = suite.errors([got, got[:3]], [want, want[:3]])
    diff = np.abs(got.astype(np.float64) - want.astype(np.float64))
    assert max_abs == diff.max() == np.float64(got[20, 7]) - np.float64(want[20, 7])
    assert max_rel == max_abs / np.abs(want.astype(np.float64)).max()
    with pytest.raises(ValueError, match="shape"):
        suite.errors([got], [want[:3]])
