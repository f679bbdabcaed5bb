//! What a kernel's program will hold, counted before it is traced in full: allocations
//! and semaphore slots from its spec, and ops, DMAs and data ops per device from a few
//! traced (device, grid point) samples. Counts are `f64`: at the scales this guards
//! against, products of P and per-device counts overflow 64-bit integers.

use crate::ir::{MemorySpace, OpKind, Program};
use crate::kernel::{PallasCall, ScratchSpec, MAX_SCOPED};
use crate::mesh::Mesh;

/// Counts taken from the spec alone (no tracing); the default counts nothing.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Census {
    /// Devices.
    pub devices: f64,
    /// Grid points per device.
    pub grid_points: f64,
    /// Semaphore slots per device.
    pub sem_slots: f64,
    /// Bytes of every allocation of one device.
    pub alloc_bytes: f64,
    /// The same, as the GPU buffer pool allocates them (each rounded up to a power of two).
    pub pooled_bytes: f64,
    /// Elements of every allocation of one device.
    pub alloc_elems: f64,
    /// Elements of the largest allocation.
    pub largest_alloc: f64,
    /// Bytes of one device's input operands as host arrays hold them (a 32-bit word per
    /// element, whatever the dtype).
    pub input_bytes: f64,
    /// Bytes of one device's output operands, likewise.
    pub output_bytes: f64,
    /// Operand copies into VMEM before the grid and out after it, per device.
    pub copies: f64,
    /// Kernel invocations (a sequence has more than one).
    pub invocations: f64,
    /// Per-device counts from traced samples; `None` until [`Census::sample`].
    pub traced: Option<Traced>,
}

/// Per-device counts (means over the devices) estimated from traced samples.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Traced {
    /// Traced ops.
    pub ops: f64,
    /// DMAs started.
    pub dmas: f64,
    /// The runs those DMAs move (a data op each: a strided DMA moves one per row).
    pub dma_runs: f64,
    /// VMEM compute ops.
    pub computes: f64,
    /// Semaphore signals (local or remote).
    pub signals: f64,
    /// Step marks (`Ctx::trace_step`).
    pub marks: f64,
}

/// Bytes a host array or the CPU executor spends per element (16-bit ones too).
pub const HOST_WORD: f64 = 4.0;

fn product(dims: &[usize]) -> f64 {
    dims.iter().map(|&d| d as f64).product()
}

impl Census {
    /// Counts what the spec of `call` declares, for `devices` devices.
    pub fn of_spec(call: &PallasCall, devices: usize) -> Self {
        let spec = call.spec();
        let mut c = Census {
            devices: devices as f64,
            grid_points: product(&spec.grid),
            sem_slots: (MAX_SCOPED + usize::from(spec.collective_id.is_some())) as f64,
            alloc_bytes: 0.0,
            pooled_bytes: 0.0,
            alloc_elems: 0.0,
            largest_alloc: 0.0,
            input_bytes: 0.0,
            output_bytes: 0.0,
            copies: 0.0,
            invocations: 1.0,
            traced: None,
        };
        let mut alloc = |elems: f64, size: usize| {
            let bytes = elems * size as f64;
            c.alloc_elems += elems;
            c.largest_alloc = c.largest_alloc.max(elems);
            c.alloc_bytes += bytes;
            c.pooled_bytes += pooled(bytes);
            bytes
        };
        let mut copies = 0.0;
        let (mut input_bytes, mut output_bytes) = (0.0, 0.0);
        for (is_out, ops) in [(false, &spec.inputs), (true, &spec.outputs)] {
            for o in ops.iter() {
                alloc(product(&o.shape), o.dtype.storage());
                let bytes = product(&o.shape) * HOST_WORD;
                if o.space == MemorySpace::Vmem {
                    alloc(product(&o.shape), o.dtype.storage());
                    copies += 1.0;
                }
                if is_out {
                    output_bytes += bytes;
                } else {
                    input_bytes += bytes;
                }
            }
        }
        let mut sems = 0.0;
        for s in &spec.scratch {
            match s {
                ScratchSpec::Vmem { shape, dtype, .. } => {
                    alloc(product(shape), dtype.storage());
                }
                ScratchSpec::Sem { count, .. } => sems += count.unwrap_or(1) as f64,
                ScratchSpec::SignalMatrix { rows, cols, .. } => sems += *rows as f64 * *cols as f64,
            }
        }
        c.sem_slots += sems;
        c.copies = copies;
        c.input_bytes = input_bytes;
        c.output_bytes = output_bytes;
        c
    }

    /// Traces a sample of (device, grid point) pairs of `call` on `mesh` and fills in
    /// [`Census::traced`]: the devices and grid points chosen by `weighted`, each
    /// weighted by how many it stands for; the allocations of the kernel's values (known
    /// only once it is traced) join the spec's. Exact on small meshes and grids; on large ones
    /// within the difference between strata (a few percent for the shipped collectives).
    /// Kernel mistakes are ignored here: the full trace reports them.
    pub fn sample(&mut self, call: &PallasCall, mesh: &Mesh) {
        let Ok((frame, lane)) = call.frame(false) else {
            return;
        };
        let p = mesh.size();
        let points: usize = call.spec().grid.iter().product();
        let devices = weighted(p);
        let grid = weighted(points);
        let mut t = Traced::default();
        for &(d, wd) in &devices {
            for &(g, wg) in &grid {
                let (rec, _) = call.trace_point(mesh, &frame, &lane, d, g, 0, Default::default());
                let w = wd * wg;
                t.ops += w * rec.ops.len() as f64;
                t.dmas += w * rec.dmas.len() as f64;
                t.dma_runs += w * rec.dmas.iter().map(|d| d.runs().1 as f64).sum::<f64>();
                for op in &rec.ops {
                    match op.kind {
                        OpKind::Compute(_) => t.computes += w,
                        OpKind::Signal { .. } => t.signals += w,
                        OpKind::Mark(_) => t.marks += w,
                        _ => {}
                    }
                }
            }
        }
        // The values' temporaries: the most each dtype held at any sampled point.
        for (dtype, elems) in lane.temps.borrow().allocations() {
            let bytes = elems as f64 * dtype.storage() as f64;
            self.alloc_elems += elems as f64;
            self.largest_alloc = self.largest_alloc.max(elems as f64);
            self.alloc_bytes += bytes;
            self.pooled_bytes += pooled(bytes);
        }
        self.traced = Some(t.per_device(p));
    }

    /// Fills in [`Census::traced`] from `program`, `call` lowered on a mesh of `p`
    /// devices: the counts [`Census::sample`] takes where it traces every point
    /// ([`traces_whole`]), without tracing the kernel again.
    pub fn count_program(&mut self, program: &Program, p: usize) {
        let mut t = Traced {
            dmas: program.dmas.len() as f64,
            dma_runs: program.dmas.iter().map(|d| d.runs().1 as f64).sum(),
            ..Traced::default()
        };
        for op in program.ops.iter().flatten() {
            t.ops += 1.0;
            match op.kind {
                OpKind::Compute(_) => t.computes += 1.0,
                OpKind::Signal { .. } => t.signals += 1.0,
                OpKind::Mark(_) => t.marks += 1.0,
                _ => {}
            }
        }
        // The values' temporaries, as the lowering appended them.
        for a in program.layout.allocs.iter().filter(|a| a.holds_values()) {
            let elems = a.numel() as f64;
            let bytes = elems * a.dtype.storage() as f64;
            self.alloc_elems += elems;
            self.largest_alloc = self.largest_alloc.max(elems);
            self.alloc_bytes += bytes;
            self.pooled_bytes += pooled(bytes);
        }
        self.traced = Some(t.per_device(p));
    }
}

impl Traced {
    /// Totals over `p` devices as means per device.
    fn per_device(self, p: usize) -> Traced {
        let n = p as f64;
        Traced {
            ops: self.ops / n,
            dmas: self.dmas / n,
            dma_runs: self.dma_runs / n,
            computes: self.computes / n,
            signals: self.signals / n,
            marks: self.marks / n,
        }
    }
}

/// True when [`Census::sample`] traces every (device, grid point) pair of a kernel of
/// `points` grid points on `p` devices: its counts are then the full trace's.
pub fn traces_whole(p: usize, points: usize) -> bool {
    p <= TRACE_ALL && points <= TRACE_ALL
}

impl Census {
    /// The census of the invocations `parts` counts (every one on the same devices), run
    /// in order `repeat` times: what they hold adds up, except that the sequence's
    /// inputs are the first one's and its outputs the last one's.
    pub fn sequence(parts: &[Census], repeat: usize) -> Census {
        let k = repeat as f64;
        let sum = |f: &dyn Fn(&Census) -> f64| k * parts.iter().map(f).sum::<f64>();
        let traced = parts.iter().all(|c| c.traced.is_some()).then(|| {
            let t = |f: fn(&Traced) -> f64| sum(&|c| c.traced.as_ref().map_or(0.0, f));
            Traced {
                ops: t(|t| t.ops),
                dmas: t(|t| t.dmas),
                dma_runs: t(|t| t.dma_runs),
                computes: t(|t| t.computes),
                signals: t(|t| t.signals),
                marks: t(|t| t.marks),
            }
        });
        Census {
            devices: parts.first().map_or(0.0, |c| c.devices),
            grid_points: sum(&|c| c.grid_points),
            sem_slots: sum(&|c| c.sem_slots),
            alloc_bytes: sum(&|c| c.alloc_bytes),
            pooled_bytes: sum(&|c| c.pooled_bytes),
            alloc_elems: sum(&|c| c.alloc_elems),
            largest_alloc: parts.iter().map(|c| c.largest_alloc).fold(0.0, f64::max),
            input_bytes: parts.first().map_or(0.0, |c| c.input_bytes),
            output_bytes: parts.last().map_or(0.0, |c| c.output_bytes),
            copies: sum(&|c| c.copies),
            invocations: sum(&|c| c.invocations),
            traced,
        }
    }
}

/// A buffer of `bytes` as the GPU pool allocates it: a power of two, at least 4 bytes.
fn pooled(bytes: f64) -> f64 {
    bytes.max(4.0).log2().ceil().exp2()
}

/// Every index of a range this short is traced.
const TRACE_ALL: usize = 64;
/// Strata of the inner indices of a longer range.
const STRATA: usize = 32;

/// Sample indices of `0..n` with the number of indices each stands for: all of them
/// when `n` is small, else two at each end and the first index of each of [`STRATA`]
/// equal strata of the rest (kernels change behaviour at their first and last steps
/// and between phases).
fn weighted(n: usize) -> Vec<(usize, f64)> {
    if n <= TRACE_ALL {
        return (0..n).map(|i| (i, 1.0)).collect();
    }
    let inner = n - 4;
    let mut v = vec![(0, 1.0), (1, 1.0)];
    for s in 0..STRATA {
        let (a, b) = (2 + s * inner / STRATA, 2 + (s + 1) * inner / STRATA);
        v.push((a, (b - a) as f64));
    }
    v.extend([(n - 2, 1.0), (n - 1, 1.0)]);
    v
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::collectives::{variants::variants, Registry};
    use crate::DType;

    /// The sampled census matches the full trace of every shipped kernel.
    #[test]
    fn sampled_counts_match_the_full_trace() {
        let mut calls = Vec::new();
        for p in [1usize, 2, 3, 4, 5, 8, 13, 16] {
            let mesh = Mesh::new(p, "x").unwrap();
            for c in Registry::builtin().iter() {
                let name = c.name();
                let shape = c.default_shape(p);
                calls.push((
                    format!("{name} P={p}"),
                    mesh.clone(),
                    c.call(&mesh, &shape, DType::F32).unwrap(),
                ));
            }
            for v in variants() {
                let shape = Registry::builtin()
                    .by_name(v.collective)
                    .unwrap()
                    .default_shape(p);
                calls.push((
                    format!("{v:?} P={p}"),
                    mesh.clone(),
                    v.call(&mesh, &shape, DType::F32).unwrap(),
                ));
            }
        }
        for (what, mesh, call) in calls {
            let (program, _) = call.trace(&mesh).unwrap();
            let mut c = Census::of_spec(&call, mesh.size());
            c.sample(&call, &mesh);
            let t = c.traced.unwrap();
            let n = mesh.size() as f64;
            let close = |a: f64, b: usize| (a - b as f64).abs() <= 1e-6 * (b as f64).max(1.0);
            assert!(
                close(t.ops * n, program.op_count()),
                "{what}: ops {} vs {}",
                t.ops * n,
                program.op_count()
            );
            assert!(close(t.dmas * n, program.dmas.len()), "{what}: dmas");
            assert_eq!(
                c.sem_slots as usize,
                program.layout.sems.len(),
                "{what}: sems"
            );
            let bytes: u64 = program
                .layout
                .allocs
                .iter()
                .map(|a| a.storage_bytes())
                .sum();
            assert_eq!(c.alloc_bytes as u64, bytes, "{what}: bytes");
            assert_eq!(
                c.copies as usize * mesh.size(),
                program.prologue.len() + program.epilogue.len(),
                "{what}: copies"
            );
        }
    }

    /// On a mesh and grid too large to trace whole, the sample is within a few percent.
    #[test]
    fn sampled_counts_are_close_on_large_meshes() {
        let p = 100;
        let mesh = Mesh::new(p, "x").unwrap();
        for c in Registry::builtin().iter() {
            let name = c.name();
            let shape = c.default_shape(p);
            let call = c.call(&mesh, &shape, DType::F32).unwrap();
            let program = call.lower(&mesh).unwrap();
            let mut c = Census::of_spec(&call, p);
            c.sample(&call, &mesh);
            let ops = c.traced.unwrap().ops * p as f64;
            let real = program.op_count() as f64;
            assert!((ops - real).abs() <= 0.05 * real, "{name}: {ops} vs {real}");
        }
    }

    #[test]
    fn pooled_sizes_are_powers_of_two() {
        assert_eq!(pooled(0.0), 4.0);
        assert_eq!(pooled(4096.0), 4096.0);
        assert_eq!(pooled(4097.0), 8192.0);
        assert_eq!(weighted(3), vec![(0, 1.0), (1, 1.0), (2, 1.0)]);
        for n in [65, 100, 1000, 123457] {
            let w = weighted(n);
            assert_eq!(w.iter().map(|x| x.1).sum::<f64>(), n as f64, "{n}");
            assert!(w.iter().all(|&(i, _)| i < n) && w.len() <= STRATA + 4);
        }
    }
}
