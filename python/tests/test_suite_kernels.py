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


def traced_pallas_call(case, mesh):
    """The pallas_call equation of a case's kernel, traced on its global shapes."""
    f = sharded(case, case.kernel, mesh)
    args = [
        jax.ShapeDtypeStruct(shape, dtype, sharding=jax.NamedSharding(mesh, spec))
        for (shape, dtype), spec in zip(case.in_shapes, case.in_specs)
    ]

    def find(jaxpr):
        for eqn in jaxpr.eqns:
            if eqn.primitive.name == "pallas_call":
                return eqn
            for v in eqn.params.values():
                inner = getattr(v, "jaxpr", None)
                if inner is not None and (found := find(inner if hasattr(inner, "eqns") else inner.jaxpr)):
                    return found
        return None

    return find(jax.make_jaxpr(f)(*args).jaxpr)


@pytest.mark.parametrize("name", list(suite_kernels.KERNELS))
def test_kernel_bytes_are_what_the_traced_pallas_call_allocates_on_chip(name):
    """The suite's memory measure counts the kernel's own buffers from the case's
    declaration (`blocks`, `scratch`): equal to the on-chip (VMEM, SMEM) block and
    scratch references of the pallas_call JAX traces, on every device."""
    mesh = jax.make_mesh((P_,), (suite_kernels.AXIS,))
    case = suite_kernels.KERNELS[name](P_, suite.SIZES["small"])
    eqn = traced_pallas_call(case, mesh)
    gm = eqn.params["grid_mapping"]
    refs = [bm.transformed_block_aval for bm in gm.block_mappings] + list(gm.scratch_avals)
    on_chip = sum(
        int(np.prod(r.shape)) * np.dtype(r.dtype).itemsize for r in refs if str(r.memory_space) in ("vmem", "smem")
    )
    prefetched = sum(v.aval.size * v.aval.dtype.itemsize for v in eqn.invars[: gm.num_index_operands])
    assert case.kernel_bytes(P_) == P_ * (on_chip + prefetched)
    # JAX's arrays: one device's shard of each operand, on every device.
    shards = [v.aval for v in eqn.invars] + [v.aval for v in eqn.outvars]
    assert case.jax_bytes(P_) == P_ * sum(a.size * a.dtype.itemsize for a in shards)


def test_tp_mlp_kernel_bytes_by_hand():
    """tp_mlp at P = 4, 128 KiB: m = 128 rows of x (128, 512) bf16 replicated, W1 and W2
    (512, 512) bf16 shards, out (32, 512) f32; on chip x, W1, W2 and out in VMEM, the
    ring's accumulator (32, 512) f32, its receive slots 2 x (32, 512) f32 and h (128, 512) bf16."""
    case = suite_kernels.KERNELS["tp_mlp"](P_, suite.SIZES["small"])
    x, w, out = 128 * 512 * 2, 512 * 512 * 2, 32 * 512 * 4
    assert case.jax_bytes(P_) == P_ * (x + 2 * w + out)
    assert case.kernel_bytes(P_) == P_ * (x + 2 * w + out + out + 2 * out + x)
