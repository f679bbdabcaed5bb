//! `lax.psum_scatter`: the seed's bidirectional reduce-scatter (section 4). Top halves
//! of the blocks travel left and bottom halves right; the partial sums move, and each
//! device adds its own contribution from VMEM as a half passes through.

use super::barrier::neighbor_barrier;
use super::Collective;
use crate::array::{DType, HostArray};
use crate::error::{Error, Result};
use crate::kernel::{ds, Ctx, GridSpec, MemorySpace, PallasCall, Ref, Sem};
use crate::mesh::Mesh;
use crate::model::Traffic;
use crate::trace::{Column, Labels, TraceLayout};

/// Phase of the `(P, 2)` grid that computes the top half (sent left).
pub const LEFT: i64 = 0;
/// Phase of the `(P, 2)` grid that computes the bottom half (sent right).
pub const RIGHT: i64 = 1;

fn modulo(x: i64, n: i64) -> i64 {
    (x + n) % n
}

fn signal(pl: &Ctx, direction: i64, sem: Sem) {
    let num_devices = pl.num_devices();
    let my_id = pl.axis_index("x");
    let target = if direction == LEFT {
        modulo(my_id - 1, num_devices)
    } else {
        modulo(my_id + 1, num_devices)
    };
    pl.semaphore_signal(sem, 1, target);
}

/// The seed's `reduce_scatter_kernel`, line for line. `x_ref` is `(P, R, C)`: block
/// `b` is this device's contribution to device `b`'s result.
#[allow(clippy::too_many_arguments)]
pub fn reduce_scatter_kernel(
    pl: &Ctx,
    x_ref: Ref,
    o_ref: Ref,
    hbm_buf: Ref,
    local_copy_sem: Sem,
    left_recv_sem: Sem,
    left_send_sem: Sem,
    right_recv_sem: Sem,
    right_send_sem: Sem,
    left_capacity_sem: Sem,
    right_capacity_sem: Sem,
    accum: Ref,
) {
    reduce_scatter_kernel_with(
        pl,
        true,
        [x_ref, o_ref, hbm_buf, accum],
        [
            local_copy_sem,
            left_recv_sem,
            left_send_sem,
            right_recv_sem,
            right_send_sem,
        ],
        [left_capacity_sem, right_capacity_sem],
    )
}

/// [`reduce_scatter_kernel`], its barrier in two rounds or (a broken variant) one.
pub(crate) fn reduce_scatter_kernel_with(
    pl: &Ctx,
    double_barrier: bool,
    [x_ref, o_ref, hbm_buf, accum]: [Ref; 4],
    [local_copy_sem, left_recv_sem, left_send_sem, right_recv_sem, right_send_sem]: [Sem; 5],
    [left_capacity_sem, right_capacity_sem]: [Sem; 2],
) {
    reduce_scatter_body(
        pl,
        double_barrier,
        x_ref,
        o_ref,
        hbm_buf,
        local_copy_sem,
        left_recv_sem,
        left_send_sem,
        right_recv_sem,
        right_send_sem,
        left_capacity_sem,
        right_capacity_sem,
        accum,
    )
}

#[allow(clippy::too_many_arguments)]
fn reduce_scatter_body(
    pl: &Ctx,
    double_barrier: bool,
    x_ref: Ref,
    o_ref: Ref,
    hbm_buf: Ref,
    local_copy_sem: Sem,
    left_recv_sem: Sem,
    left_send_sem: Sem,
    right_recv_sem: Sem,
    right_send_sem: Sem,
    left_capacity_sem: Sem,
    right_capacity_sem: Sem,
    accum: Ref,
) {
    let num_devices = pl.num_devices();
    let step = pl.program_id(0);
    let phase = pl.program_id(1);

    let is_first = step == 0 && phase == LEFT;
    let is_last_step = step == pl.num_programs(0) - 1;

    let working = step % 2;
    let receiving = 1 - working;

    let my_id = pl.axis_index("x");
    let right = modulo(my_id + 1, num_devices);
    let left = modulo(my_id - 1, num_devices);

    let left_block = modulo(my_id + step + 1, num_devices);
    let right_block = modulo(my_id - step - 1, num_devices);

    let half_rows = o_ref.shape()[0] as i64 / 2;
    let top = ds(0, half_rows);
    let bottom = ds(half_rows, half_rows);
    let current_half = ds(phase * half_rows, half_rows);

    let init_left = pl.make_async_remote_copy(
        x_ref.at(my_id).slice(top),
        hbm_buf.at(working).slice(top),
        left_send_sem,
        left_recv_sem,
        left,
    );
    let init_right = pl.make_async_remote_copy(
        x_ref.at(my_id).slice(bottom),
        hbm_buf.at(working).slice(bottom),
        right_send_sem,
        right_recv_sem,
        right,
    );
    let send_left = pl.make_async_remote_copy(
        hbm_buf.at(working).slice(top),
        hbm_buf.at(receiving).slice(top),
        left_send_sem,
        left_recv_sem,
        left,
    );
    let send_right = pl.make_async_remote_copy(
        hbm_buf.at(receiving).slice(bottom),
        hbm_buf.at(working).slice(bottom),
        right_send_sem,
        right_recv_sem,
        right,
    );

    if is_first {
        neighbor_barrier(pl, left, right, double_barrier);
        pl.fill(o_ref, 0.0);
        pl.fill(accum, 0.0);

        init_left.start();
        init_left.wait();
        init_right.start();

        signal(pl, LEFT, right_capacity_sem);
        signal(pl, RIGHT, left_capacity_sem);
    } else if phase == LEFT {
        pl.semaphore_wait(right_capacity_sem, 1);
        send_right.start();
    } else {
        pl.semaphore_wait(left_capacity_sem, 1);
        send_left.start();
    }

    let local = pl.make_async_copy(
        hbm_buf.at(working).slice(current_half),
        accum,
        local_copy_sem,
    );
    local.start();
    local.wait();

    if !is_last_step {
        if phase == LEFT {
            pl.add_assign(accum, x_ref.at(left_block).slice(top));
        } else {
            pl.add_assign(accum, x_ref.at(right_block).slice(bottom));
        }
    }

    let local = pl.make_async_copy(
        accum,
        hbm_buf.at(working).slice(current_half),
        local_copy_sem,
    );
    local.start();
    local.wait();

    if is_first {
        init_right.wait();
    } else if phase == LEFT {
        send_right.wait();
        signal(pl, LEFT, right_capacity_sem);
    } else {
        send_left.wait();
        signal(pl, RIGHT, left_capacity_sem);
    }

    if is_last_step {
        if phase == LEFT {
            pl.copy(o_ref.slice(top), accum);
            pl.semaphore_wait(right_capacity_sem, 1);
        } else {
            pl.copy(o_ref.slice(bottom), accum);
            pl.semaphore_wait(left_capacity_sem, 1);
        }
    }
}

/// Bidirectional ring `psum_scatter` (sum only, as in the seed).
#[derive(Clone, Debug, Default)]
pub struct PsumScatter;

impl PsumScatter {
    /// Block shape `(R, C)` for a per-device input of shape `(P·R, C)`.
    pub fn block(p: usize, shard: &[usize]) -> Result<(usize, usize)> {
        let [rows, cols] = shard else {
            return Err(Error::bad_input(format!(
                "psum_scatter takes a 2-D per-device input (P·R)xC, got {shard:?}"
            )));
        };
        if !rows.is_multiple_of(p) {
            return Err(Error::bad_input(format!(
                "psum_scatter scatters the leading dimension over P={p} devices, but {rows} rows are not divisible by {p}"
            )));
        }
        let r = rows / p;
        if !r.is_multiple_of(2) {
            return Err(Error::bad_input(format!(
                "psum_scatter splits each block of {r} rows into top and bottom halves, so rows/P must be even \
                 (got {rows} rows / {p} devices = {r})"
            )));
        }
        Ok((r, *cols))
    }
}

impl Collective for PsumScatter {
    fn traffic(&self) -> Traffic {
        Traffic::ReduceScatter
    }

    /// Each device's block of rows splits into a top and a bottom half.
    fn rows_multiple(&self, p: usize) -> usize {
        2 * p
    }

    /// The seed shards columns (`P(None, "x")`) and joins the scattered blocks along rows.
    fn apply_dims(&self) -> (usize, usize) {
        (1, 0)
    }

    fn trace_layout(&self, p: usize) -> Option<TraceLayout> {
        Some(TraceLayout {
            shape: vec![2 * p, 1],
            columns: vec![
                Column::new("hbm_buf[0].top", "hbm_buf", 0, 1),
                Column::new("hbm_buf[0].bottom", "hbm_buf", 1, 1),
                Column::new("hbm_buf[1].top", "hbm_buf", 2, 1),
                Column::new("hbm_buf[1].bottom", "hbm_buf", 3, 1),
                Column::new("accum", "accum", 0, 1),
                Column::new("o_ref.top", "o_ref", 0, 1),
                Column::new("o_ref.bottom", "o_ref", 1, 1),
            ],
            labels: Labels::Halves,
        })
    }

    fn name(&self) -> &'static str {
        "psum_scatter"
    }

    fn summary(&self) -> &'static str {
        "bidirectional ring reduce-scatter, grid (P, 2): per step a half block (N/(2P) bytes) goes each way"
    }

    fn call(&self, mesh: &Mesh, shard: &[usize], dtype: DType) -> Result<PallasCall> {
        self.call_with(mesh, shard, dtype, true)
    }

    fn reference(&self, inputs: &[Vec<HostArray>]) -> Result<Vec<Vec<HostArray>>> {
        Ok(super::reference::psum_scatter(inputs))
    }

    fn output_shape(&self, devices: usize, shard: &[usize]) -> Vec<usize> {
        let mut s = shard.to_vec();
        if let Some(rows) = s.first_mut() {
            *rows /= devices.max(1);
        }
        s
    }

    fn tolerance(&self) -> f32 {
        super::SUM_TOLERANCE
    }
}

impl PsumScatter {
    /// The kernel, its barrier in two rounds or (a broken variant) one.
    pub(crate) fn call_with(
        &self,
        mesh: &Mesh,
        shard: &[usize],
        dtype: DType,
        double_barrier: bool,
    ) -> Result<PallasCall> {
        let p = mesh.size();
        let (r, c) = Self::block(p, shard)?;
        let spec = GridSpec::new()
            .input("x_ref", MemorySpace::Vmem, &[p, r, c], dtype)
            .output("o_ref", MemorySpace::Vmem, &[r, c], dtype)
            .output("hbm_buf", MemorySpace::Any, &[2, r, c], dtype)
            .dma_sem("local_copy_sem")
            .dma_sem("left_recv_sem")
            .dma_sem("left_send_sem")
            .dma_sem("right_recv_sem")
            .dma_sem("right_send_sem")
            .regular_sem("left_capacity_sem")
            .regular_sem("right_capacity_sem")
            .vmem("accum", &[r / 2, c], dtype)
            .grid(&[p, 2])
            .collective_id(0);
        Ok(PallasCall::new("psum_scatter", spec, move |pl, a| {
            reduce_scatter_kernel_with(
                pl,
                double_barrier,
                [a.r("x_ref"), a.r("o_ref"), a.r("hbm_buf"), a.r("accum")],
                [
                    a.sem("local_copy_sem"),
                    a.sem("left_recv_sem"),
                    a.sem("left_send_sem"),
                    a.sem("right_recv_sem"),
                    a.sem("right_send_sem"),
                ],
                [a.sem("left_capacity_sem"), a.sem("right_capacity_sem")],
            )
        }))
    }
}
