"""Issue 40: the cost model counts the VMEM that is live, models kernels without running
them (production sizes), overlaps vector work with the MXU, and sweeps parameters."""

import os
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

import tpusim

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples"))
import all_gather_matmul as agmm  # noqa: E402

N = 256  # 256 x 256 f32: 256 KiB per array
ARRAY = N * N * 4
VMEM = dict(in_specs=[pl.BlockSpec(memory_space=pltpu.VMEM)], out_specs=pl.BlockSpec(memory_space=pltpu.VMEM))


def looped(trips, **cp):
    def kernel(x_ref, o_ref):
        o_ref[...] = jnp.zeros_like(o_ref)

        def body(i, c):
            t = x_ref[...] * (i + 1).astype(jnp.float32)  # a new temporary every iteration
            o_ref[...] += t
            return c

        jax.lax.fori_loop(0, trips, body, 0)

    params = {"compiler_params": pltpu.CompilerParams(**cp)} if cp else {}
    return lambda x: pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct((N, N), jnp.float32), **VMEM, **params)(x)


X = jax.ShapeDtypeStruct((N, N), jnp.float32)


@pytest.mark.parametrize("trips", [4, 16])
def test_a_loops_temporaries_count_once(trips):
    # Live at once, by hand: the two VMEM operands, and in an iteration the product t
    # and the sum (the loads of x_ref and o_ref are those refs' bytes): 4 arrays,
    # whatever the trip count (counting every iteration's would be 2 + 2 x trips).
    need = 4 * ARRAY
    r = tpusim.model(looped(trips), X, preset="v5p", vmem_bytes=need)
    assert r[0].seconds > 0
    with pytest.raises(tpusim.LimitError) as e:
        tpusim.model(looped(trips), X, preset="v5p", vmem_bytes=need - 1)
    assert f"values live at once {2 * ARRAY} B" in str(e.value)
    assert f"needs {need} bytes" in str(e.value)


def test_the_kernels_vmem_limit_bytes_is_honoured():
    ok = tpusim.model(looped(4, vmem_limit_bytes=4 * ARRAY), X, preset="v5p")
    assert ok[0].seconds > 0
    with pytest.raises(tpusim.LimitError) as e:
        tpusim.model(looped(4, vmem_limit_bytes=4 * ARRAY - 1), X, preset="v5p")
    assert "its vmem_limit_bytes" in str(e.value)
    # A limit above the chip's is held to the chip's VMEM.
    with pytest.raises(tpusim.LimitError) as e:
        tpusim.model(looped(4, vmem_limit_bytes=1 << 40), X, preset="v5p", vmem_bytes=3 * ARRAY)
    assert "on v5p" in str(e.value)


def _mesh(p):
    return jax.make_mesh((p,), ("x",), devices=jax.devices()[:p])


def test_all_gather_matmul_computes_and_model_only_times_what_a_run_times(cpu):
    mesh = _mesh(4)
    m, k, n = 4 * 16, 256, 4 * 256
    f = agmm.all_gather_matmul(mesh, "x", m, k, n, bn=128, bk=128)
    rng = np.random.default_rng(0)
    x = rng.integers(-3, 4, (m, k)).astype(jnp.bfloat16)
    w = rng.integers(-3, 4, (k, n)).astype(jnp.bfloat16)
    with tpusim.simulate():
        got = np.asarray(f(*agmm.operands(mesh, "x", x, w))).astype(np.float64)
    # Small integers: the f32 sums are exact; the result is rounded once, to bf16.
    want = (x.astype(np.float64) @ w.astype(np.float64)).astype(jnp.bfloat16).astype(np.float64)
    np.testing.assert_array_equal(got, want)
    ran = tpusim.model(f, *agmm.operands(mesh, "x", x, w), preset="v6e", execute=True)
    only = tpusim.model(
        f,
        *agmm.operands(mesh, "x", jax.ShapeDtypeStruct(x.shape, x.dtype), jax.ShapeDtypeStruct(w.shape, w.dtype)),
        preset="v6e",
    )
    assert len(ran) == len(only) == 1
    assert only[0].seconds == ran[0].seconds
    assert 0.0 <= only[0].hidden <= 1.0


def test_a_production_shape_is_modeled_without_its_data():
    # 8192 x 5120 @ 5120 x 51200 bf16 over 8 devices: 800 MiB of result alone, never made.
    mesh = _mesh(8)
    m, k, n = 8192, 5120, 51200
    f = agmm.all_gather_matmul(mesh, "x", m, k, n, bn=3200, bk=2560)
    (r,) = tpusim.model(f, *agmm.production_args(mesh, "x", m, k, n), preset="v6e")
    # No faster than the MXU peak on the FLOPs, nor than a ring moving 7/8 of x per link.
    preset = {p["name"]: p for p in tpusim.presets()}["v6e"]
    flops = 2 * m * k * n / 8
    assert r.seconds >= flops / (preset["mxu_flops"])
    assert r.seconds >= (7 / 8) * m * k * 2 / preset["link_bw"]
    assert r.tflops <= preset["mxu_flops"] / 1e12


def _two_ops(how):
    def kernel(a_ref, b_ref, c_ref, o_ref, e_ref):
        o_ref[...] = jnp.dot(a_ref[...], b_ref[...], preferred_element_type=jnp.float32)
        src = o_ref if how == "chained" else c_ref
        e_ref[...] = jnp.exp(src[...]) * 2.0 + 1.0

    s = jax.ShapeDtypeStruct((512, 512), jnp.float32)
    return lambda a, b, c: pl.pallas_call(
        kernel,
        out_shape=(s, s),
        in_specs=[pl.BlockSpec(memory_space=pltpu.VMEM)] * 3,
        out_specs=(pl.BlockSpec(memory_space=pltpu.VMEM),) * 2,
    )(a, b, c)


def test_vector_work_overlaps_the_mxu_unless_it_reads_back_the_dots_result():
    bf = jax.ShapeDtypeStruct((512, 512), jnp.bfloat16)
    c = jax.ShapeDtypeStruct((512, 512), jnp.float32)
    apart, chained = (tpusim.model(_two_ops(how), bf, bf, c, preset="v5e")[0] for how in ("apart", "chained"))
    mxu = apart.overlap["mxu_seconds"]
    assert mxu == pytest.approx(chained.overlap["mxu_seconds"])
    # The vector work by hand: 256 vregs of f32; exp at 2 cycles a vreg, then * and +
    # at 1 each, at v5e's 1.5 GHz (its vector rate: 1024 elements a cycle).
    rate = {p["name"]: p for p in tpusim.presets()}["v5e"]["vector_rate"]
    vpu = (2 + 1 + 1) * 512 * 512 / rate
    # Apart, the vector work runs under the dot; reading back the dot's stored result,
    # only after it.
    assert apart.seconds < mxu + vpu
    assert chained.seconds >= mxu + vpu


def test_sweep_ranks_block_sizes_and_says_why_points_are_skipped():
    mesh = _mesh(4)
    m, k, n = 4 * 128, 512, 4 * 512
    args = agmm.production_args(mesh, "x", m, k, n)
    s = tpusim.sweep(
        lambda x, w, bn, bk: agmm.all_gather_matmul(mesh, "x", m, k, n, bn=bn, bk=bk)(x, w),
        args,
        params={"bn": [128, 256, 384], "bk": [128, 512]},
        preset="v6e",
        vmem_bytes=1 << 20,
    )
    ranked = [p.seconds for p in s.ranked]
    assert ranked == sorted(ranked) and len(ranked) >= 2
    why = {tuple(p.params.values()): p.skipped for p in s.skipped}
    assert "must divide" in why[(384, 128)] and "must divide" in why[(384, 512)]
    # The biggest blocks: two 512 x 256 bf16 buffers of w alone are half of the 1 MiB.
    assert "VMEM" in why[(256, 512)] and (128, 128) not in why
    best = s.best
    (alone,) = tpusim.model(agmm.all_gather_matmul(mesh, "x", m, k, n, **best.params), *args, preset="v6e")
    assert best.seconds == alone.seconds
    assert "| 1 |" in s.markdown()
    with pytest.raises(tpusim.BadInput):
        tpusim.sweep(lambda x, w: None, args, params={"bn": []})


SWEEP_SCRIPT = """
import sys
sys.path.insert(0, {examples!r})
import jax, numpy as np, jax.numpy as jnp
import tpusim
import all_gather_matmul as agmm
mesh = jax.make_mesh((4,), ("x",))
m, k, n = 4 * 64, 512, 4 * 512
f = agmm.all_gather_matmul(mesh, "x", m, k, n, bn=tpusim.param("bn", 128), bk=tpusim.param("bk", 128))
f(*agmm.operands(mesh, "x", np.ones((m, k), jnp.bfloat16), np.ones((k, n), jnp.bfloat16)))
"""


def test_the_command_lines_sweep_runs_the_script_per_combination(tmp_path):
    import subprocess

    examples = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples")
    script = tmp_path / "agmm.py"
    script.write_text(SWEEP_SCRIPT.format(examples=examples))
    svg = tmp_path / "sweep.svg"
    p = subprocess.run(
        [
            sys.executable,
            "-m",
            "tpusim",
            "sweep",
            "--devices",
            "4",
            "--preset",
            "v6e",
            "--param",
            "bn=128,256,384",
            "--param",
            "bk=256",
            "--plot",
            str(svg),
            str(script),
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert p.returncode == 0, p.stderr
    rows = [line for line in p.stdout.splitlines() if line.startswith("| ")]
    assert rows[1].startswith("| 1 | bn=") and rows[2].startswith("| 2 | bn=")
    assert "bn=384, bk=256 | skipped: bn=384 must divide" in p.stdout
    assert svg.read_text().startswith("<svg")
    bad = subprocess.run(
        [sys.executable, "-m", "tpusim", "sweep", "--param", "bn", str(script)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert bad.returncode == 2 and "give NAME=V1,V2" in bad.stderr


def test_a_block_is_one_value_repeated_by_its_bits():
    # Model-only's planning asks this of every concrete block (a kernel's jnp.zeros of an
    # accumulator); it compares each element's bits as one integer: by value, -0.0 and 0.0
    # would be one value and a NaN never equal to itself.
    import ml_dtypes

    from tpusim._jaxpr import _uniform

    for dt in (np.float32, ml_dtypes.bfloat16, np.int8, np.bool_, np.float64, np.int16):
        a = np.zeros(4096, dt)
        assert _uniform(a)
        a[4095] = 1
        assert not _uniform(a)
    assert not _uniform(np.array([0.0, -0.0], np.float32))
    assert _uniform(np.full(3, np.nan, np.float32))
    assert not _uniform(np.array([np.nan, -np.nan], np.float32))
    assert _uniform(np.array([], np.float32)) and _uniform(np.array([7], np.int32))
    # A broadcast of one element is answered without being made whole (4 TiB here).
    assert _uniform(np.broadcast_to(np.float32(np.nan), (1 << 40,)))
    assert not _uniform(np.broadcast_to(np.array([1, 2], np.int32), (1 << 20, 2)).reshape(-1))


def _dot(grid, semantics=None):
    """bf16[1024, 1024] @ bf16[1024, 1024] -> f32, whole (no grid) or in `grid` row blocks
    (with `dimension_semantics`, when given)."""
    a = jax.ShapeDtypeStruct((1024, 1024), jnp.bfloat16)

    def kernel(a_ref, b_ref, o_ref):
        o_ref[...] = jnp.dot(a_ref[...], b_ref[...], preferred_element_type=jnp.float32)

    if grid is None:
        specs = dict(
            in_specs=[pl.BlockSpec(memory_space=pltpu.VMEM)] * 2, out_specs=pl.BlockSpec(memory_space=pltpu.VMEM)
        )
    else:
        rows = 1024 // grid
        specs = dict(
            grid=(grid,),
            in_specs=[pl.BlockSpec((rows, 1024), lambda i: (i, 0)), pl.BlockSpec((1024, 1024), lambda i: (0, 0))],
            out_specs=pl.BlockSpec((rows, 1024), lambda i: (i, 0)),
        )
        if semantics is not None:
            specs["compiler_params"] = pltpu.CompilerParams(dimension_semantics=semantics)
    f = pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct((1024, 1024), jnp.float32), **specs)
    return f, a


@pytest.mark.parametrize("chip,cores", [("v5p", 2), ("v6e", 1)])
def test_only_a_parallel_grid_runs_on_every_tensorcore(chip, cores):
    # A pallas_call runs on one TensorCore of a megacore chip unless a grid dimension
    # is parallel: then its dot takes 1/`cores` of the time the same rows take whole
    # (every pass at least a tile's rows, so the MXU time is proportional to the rows);
    # without a grid, or with an `arbitrary` one, as long.
    whole, a = _dot(None)
    (w,) = tpusim.model(whole, a, a, preset=chip)
    for semantics, share in [(("parallel",), 1 / cores), ((pltpu.GridDimensionSemantics.PARALLEL,), 1 / cores)]:
        (s,) = tpusim.model(_dot(2, semantics)[0], a, a, preset=chip)
        assert s.overlap["mxu_seconds"] == pytest.approx(share * w.overlap["mxu_seconds"], rel=1e-9), semantics
    for semantics in [None, ("arbitrary",)]:
        (s,) = tpusim.model(_dot(2, semantics)[0], a, a, preset=chip)
        assert s.overlap["mxu_seconds"] == pytest.approx(w.overlap["mxu_seconds"], rel=1e-9), semantics
