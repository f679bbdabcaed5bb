"""What the Pallas front end supports beyond the seed's kernels, each checked against
numpy: ref slicing, fills, copies and accumulates (sum, max, min), 2-D grids, 2-D
meshes, LOGICAL and dict device ids, wait_send/wait_recv, run_scoped, fori_loop; and
the model, bench and derived step tables of a Python kernel."""

import json

import numpy as np
import pytest

import tpusim
import tpusim.jax as jax
from tpusim.jax import lax
from tpusim.jax import numpy as jnp
from tpusim.jax.experimental import pallas as pl
from tpusim.jax.experimental.pallas import tpu as pltpu

P = jax.sharding.PartitionSpec
DMA, REGULAR = pltpu.SemaphoreType.DMA, pltpu.SemaphoreType.REGULAR


def local_kernel(x_ref, y_ref, o_ref, mx_ref, mn_ref, part_ref):
    i = pl.program_id(0)
    j = pl.program_id(1)

    @pl.when(jnp.logical_and(i == 0, j == 0))
    def _():
        mx_ref[...] = jnp.full_like(mx_ref, -7)
        mn_ref[...] = jnp.full(mn_ref.shape, 7, jnp.int32)
        part_ref[...] = jnp.zeros_like(part_ref)

    dst = o_ref.at[i, j]
    dst[...] = x_ref[...]
    dst[...] += y_ref[...]
    mx_ref[...] = jnp.maximum(mx_ref[...], x_ref[...])
    mn_ref[...] = jnp.minimum(y_ref[...], mn_ref[...])

    @pl.when(j == pl.num_programs(1) - 1)
    def _():
        # Rows 2..4 of this device's x into the i-th block of part_ref, by two syntaxes.
        part_ref[i, pl.ds(0, 2)] = x_ref[2:4, :]
        part_ref.at[i][pl.ds(2, 2), ...] += y_ref[pl.ds(2, 2)]


def test_local_ops_on_a_2d_grid(cpu):
    mesh = jax.make_mesh((2,), ("x",))
    rng = np.random.default_rng(3)
    x = rng.integers(-50, 50, size=(8, 2 * 8)).astype(np.int32)
    y = rng.integers(-50, 50, size=(8, 2 * 8)).astype(np.int32)
    vmem = pl.BlockSpec(memory_space=pltpu.VMEM)
    i32 = lambda *s: jax.ShapeDtypeStruct(s, jnp.int32)
    call = pl.pallas_call(
        local_kernel,
        out_shape=(i32(2, 3, 8, 8), i32(8, 8), i32(8, 8), i32(2, 4, 8)),
        grid=(2, 3),
        in_specs=[vmem, vmem],
        out_specs=[vmem] * 4,
    )
    out_specs = (P(None, None, None, "x"), P(None, "x"), P(None, "x"), P(None, None, "x"))
    f = jax.shard_map(call, mesh=mesh, in_specs=P(None, "x"), out_specs=out_specs)
    o, mx, mn, part = f(x, y)
    for d in range(2):
        xd, yd = x[:, 8 * d : 8 * d + 8], y[:, 8 * d : 8 * d + 8]
        od = o[:, :, :, 8 * d : 8 * d + 8]
        assert (od == (xd + yd)[None, None]).all()
        np.testing.assert_array_equal(mx[:, 8 * d : 8 * d + 8], np.maximum(xd, -7))
        np.testing.assert_array_equal(mn[:, 8 * d : 8 * d + 8], np.minimum(yd, 7))
        pd = part[:, :, 8 * d : 8 * d + 8]
        for i in range(2):
            np.testing.assert_array_equal(pd[i, 0:2], xd[2:4])
            np.testing.assert_array_equal(pd[i, 2:4], yd[2:4])
    assert f.check(x, y, schedules=10).clean


def mesh2d_kernel(x_ref, o_ref, o2_ref, send_sem, recv_sem, send2, recv2):
    # On a 2x2 mesh: push to the next linear device by LOGICAL id, and to the device
    # with the other x coordinate by a dict id; the waits are split.
    me = lax.axis_index(("x", "y"))
    nxt = lax.rem(me + 1, 4)
    a = pltpu.make_async_remote_copy(x_ref, o_ref, send_sem, recv_sem,
                                     device_id=nxt, device_id_type=pl.DeviceIdType.LOGICAL)
    other = 1 - lax.axis_index("x")
    b = pltpu.make_async_remote_copy(x_ref, o2_ref, send2, recv2, device_id={"x": other})
    a.start()
    b.start()
    a.wait_send()
    b.wait_send()
    a.wait_recv()
    b.wait_recv()


def test_2d_mesh_logical_and_dict_device_ids(cpu):
    mesh = jax.make_mesh((2, 2), ("x", "y"))
    x = np.arange(4 * 8 * 128, dtype=np.float32).reshape(4 * 8, 128)
    f32 = jax.ShapeDtypeStruct((8, 128), jnp.float32)
    call = pl.pallas_call(
        mesh2d_kernel,
        out_shape=(f32, f32),
        in_specs=[pl.BlockSpec(memory_space=pl.ANY)],
        out_specs=[pl.BlockSpec(memory_space=pl.ANY)] * 2,
        scratch_shapes=[DMA] * 4,
    )
    spec = P(("x", "y"), None)
    f = jax.shard_map(call, mesh=mesh, in_specs=spec, out_specs=spec)
    o, o2 = f(x)
    blocks = np.split(x, 4)
    for d in range(4):
        np.testing.assert_array_equal(np.split(o, 4)[d], blocks[(d - 1) % 4])
        xc, yc = divmod(d, 2)
        np.testing.assert_array_equal(np.split(o2, 4)[d], blocks[(1 - xc) * 2 + yc])
    assert f.check(x, schedules=20).clean


def scoped_kernel(x_ref, o_ref, sem):
    # A double handshake with both neighbours through two scoped REGULAR semaphores.
    n = 4
    me = lax.axis_index("x")
    right, left = lax.rem(me + 1, n), lax.rem(me + n - 1, n)

    def body(first, second):
        for s in (first, second):
            pltpu.semaphore_signal(s, 1, device_id=(right,), device_id_type=pl.DeviceIdType.MESH)
            pltpu.semaphore_signal(s, 1, device_id=(left,), device_id_type=pl.DeviceIdType.MESH)
            pltpu.semaphore_wait(s, 2)
        return "done"

    assert pl.run_scoped(body, REGULAR, REGULAR) == "done"
    c = pltpu.make_async_copy(x_ref, o_ref, sem)
    c.start()
    c.wait()


def loop_gather_kernel(x_ref, out_ref, local_sem, send_sem, recv_sems):
    # The seed's all_gather with its grid turned into a fori_loop.
    n = 4
    my_id = lax.axis_index("x")
    right = lax.rem(my_id + 1, n)
    c = pltpu.make_async_copy(x_ref, out_ref.at[my_id], local_sem)
    c.start()
    c.wait()

    def body(step, carry):
        slot = lax.rem(my_id - step + n, n)
        r = pltpu.make_async_remote_copy(out_ref.at[slot], out_ref.at[slot], send_sem,
                                         recv_sems.at[step], device_id=(right,),
                                         device_id_type=pl.DeviceIdType.MESH)
        r.start()
        r.wait()
        return carry + 1

    assert lax.fori_loop(0, n - 1, body, 0) == n - 1


@pytest.mark.parametrize("backend", ["cpu", "gpu"])
def test_run_scoped_and_fori_loop(backend):
    tpusim.config.backend, prev = backend, tpusim.config.backend
    try:
        mesh = jax.make_mesh((4,), ("x",))
        x = np.random.default_rng(5).uniform(size=(32, 128)).astype(np.float32)
        any_ = pl.BlockSpec(memory_space=pl.ANY)
        f32 = lambda *s: jax.ShapeDtypeStruct(s, jnp.float32)
        scoped = pl.pallas_call(scoped_kernel, out_shape=f32(8, 128), in_specs=[any_],
                                out_specs=any_, scratch_shapes=[DMA])
        f = jax.shard_map(scoped, mesh=mesh, in_specs=P("x", None), out_specs=P("x", None))
        np.testing.assert_array_equal(f(x), x)
        assert f.check(x, schedules=20).clean
        gather = pl.pallas_call(loop_gather_kernel, out_shape=f32(4, 8, 128), in_specs=[any_],
                                out_specs=any_, scratch_shapes=[DMA, DMA, DMA((3,))])
        g = jax.shard_map(gather, mesh=mesh, in_specs=P("x", None), out_specs=P("x", None))
        got = g(x)
        np.testing.assert_array_equal(got, np.concatenate([x.reshape(4, 8, 128)] * 4))
        assert g.check(x, schedules=20).clean
    finally:
        tpusim.config.backend = prev


def test_model_bench_and_derived_trace_of_a_python_kernel(cpu, tmp_path):
    import conftest

    mod = conftest.load_seed("psum", 4)
    f = jax.shard_map(mod.psum_pallas, mesh=mod.mesh, in_specs=mod.partition, out_specs=mod.partition)
    run = f.model(mod.input_arr, traffic="all_reduce", timeline=str(tmp_path / "t.json"))
    rust = tpusim.model("psum", 4, shape=[8, 128])
    assert run.seconds == pytest.approx(rust.seconds) and run.busbw == pytest.approx(rust.busbw)
    assert json.loads((tmp_path / "t.json").read_text())["traceEvents"]
    slower = f.model(mod.input_arr, preset="v5e", link_gbps=5)
    assert slower.seconds > run.seconds and slower.busbw is None
    b = f.bench(mod.input_arr, iters=3, warmup=1)
    assert b["seconds"] > 0 and b["data_ops"] > 0 and b["executor"] == "cpu"
    t = f.trace(mod.input_arr)  # columns derived from the kernel's own allocations
    assert t.columns == ["o_ref", "hbm_buf[0]", "hbm_buf[1]", "vmem_recv"]
    assert t.rows[-1].notation[0][0] == "x3+x2+x1+x0"


def test_trace_like_needs_a_matching_shape(cpu):
    import conftest

    mod = conftest.load_seed("psum_scatter", 4)
    f = jax.shard_map(mod.pallas_reduce_scatter, mesh=mod.mesh, in_specs=P(None, "x"), out_specs=P("x", None))
    with pytest.raises(tpusim.BadInput) as e:
        f.trace(mod.input_arr, like="psum_scatter")
    assert "8 elements per device" in str(e.value)


def test_check_needs_exactly_one_pallas_call(cpu):
    mesh = jax.make_mesh((2,), ("x",))
    f = jax.shard_map(lambda v: v + 1, mesh=mesh, in_specs=P("x"), out_specs=P("x"))
    np.testing.assert_array_equal(f(np.arange(4, dtype=np.float32)), np.arange(4) + 1)
    with pytest.raises(tpusim.BadInput) as e:
        f.check(np.arange(4, dtype=np.float32))
    assert "made 0 pallas_calls" in str(e.value)


def test_lowered_kernel_and_old_import_paths(cpu):
    import broken_kernels as bk
    from conftest import marked_line
    from tpusim.jax.experimental.shard_map import shard_map

    x = np.zeros((8, 512), np.float32)
    spec = pl.BlockSpec(memory_space=pltpu.TPUMemorySpace.ANY)
    call = pl.pallas_call(bk.negative_left_kernel, out_shape=jax.ShapeDtypeStruct((8, 128), jnp.float32),
                          in_specs=[spec], out_specs=spec, scratch_shapes=[DMA, DMA])
    f = shard_map(call, mesh=jax.make_mesh((4,), ("x",)), in_specs=P(None, "x"), out_specs=P(None, "x"))
    kernel, inputs, first = f.kernel(x)
    assert kernel.name == "negative_left_kernel" and len(inputs) == 4 and first[0].shape == (8, 128)
    low = kernel.lower()
    assert [e["kind"] for e in low["errors"]] == ["device id out of range"]
    line = marked_line(bk.__file__, "negative left")
    assert low["errors"][0]["site"]["location"] == f"{bk.__file__}:{line}"
