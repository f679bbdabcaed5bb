//! The memory a command needs, from a [`Census`]: the traced program, the scheduler's
//! state and schedule, and per command what else it holds (data, GPU recording, race
//! checker clocks, symbolic step tables). Each part is named, says what it scales with,
//! and is computed from the sizes of the structures that hold it.

use super::census::{Census, Traced, HOST_WORD};
use crate::ir::{DataOp, Dma, Op, SemInfo};
use std::mem::size_of;

/// Where the kernel's buffers live while it runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Buffers {
    /// In host memory (the CPU executor, or a GPU whose memory is host memory, such as
    /// lavapipe).
    Host,
    /// In GPU memory, whose size wgpu does not report.
    Device,
}

/// What a command does with the kernel.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Work {
    /// `run`: plan, execute once, compare with the reference; `model` also runs the cost
    /// model (`timeline`: and writes its trace).
    Run {
        /// Where the buffers live.
        buffers: Buffers,
        /// On the GPU (recorded commands and bind groups).
        gpu: bool,
        /// The cost model runs too.
        model: bool,
        /// A timeline is written.
        timeline: bool,
        /// The reference is computed in chunks of element positions (an element-wise
        /// collective, [`crate::collectives::Collective::elementwise`]): a rank holds its
        /// own devices' inputs, reference and results only ([`crate::run::Job`] sets it).
        chunked: bool,
    },
    /// The cost model alone (`timeline`: and its events kept for a trace).
    Model {
        /// A timeline is kept.
        timeline: bool,
    },
    /// `check`: the race checker under one schedule at a time. It holds no data (an
    /// allocation of up to [`crate::budget::MAX_CHECKED_ELEMENTS`] elements costs what a small one does).
    Check {
        /// Schedules asked for, run one after the other (each a whole run of the
        /// kernel).
        schedules: u64,
        /// The schedules are `check`'s set: every deterministic policy (run-ahead once
        /// per device), so at least P + 3 of them at P devices ([`Work::schedules`]).
        deterministic: bool,
    },
    /// `trace`: the symbolic executor's step table.
    Trace,
    /// `bench` at its largest size: `warmup`, then `iters` iterations, each batch encoded
    /// into one submission, then `checks` iterations read back and compared.
    Bench {
        /// Where the buffers live.
        buffers: Buffers,
        /// On the GPU.
        gpu: bool,
        /// Timed iterations (`-n`).
        iters: u64,
        /// Warm-up iterations (`-w`).
        warmup: u64,
        /// Check iterations (`-c`).
        checks: u64,
        /// The reference is computed in chunks, as [`Work::Run`]'s `chunked` says ([`crate::run::Job`] sets it).
        chunked: bool,
    },
    /// `apply` on a `.npy` file of `file_bytes`.
    Apply {
        /// Where the buffers live.
        buffers: Buffers,
        /// On the GPU.
        gpu: bool,
        /// Size of the input file.
        file_bytes: u64,
        /// Each rank reads its own devices' slices of the file and computes the
        /// reference in chunks (an element-wise collective on ranks,
        /// [`crate::run::Job::reads_own_slices`], on a file).
        chunked: bool,
    },
}

impl Work {
    /// The schedules a check of `devices` devices runs (0 for other work): the
    /// schedules asked for, or at least P + 3 for `check`'s set.
    pub fn schedules(&self, devices: usize) -> u64 {
        match *self {
            Work::Check {
                schedules,
                deterministic: true,
            } => schedules.max((devices as u64).saturating_add(3)),
            Work::Check { schedules, .. } => schedules,
            _ => 0,
        }
    }
}

/// What a part of the need grows with (the knob that makes it smaller).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scales {
    /// The traced program and its schedule: with P (and the kernel's grid).
    Program,
    /// The data: with the size of one device's shard.
    Data,
    /// With the number of iterations encoded at once.
    Iterations,
    /// With nothing a command line sets.
    Fixed,
}

/// One named part of a need.
#[derive(Clone, Debug, PartialEq)]
pub struct Part {
    /// What it is, e.g. `traced program`.
    pub name: &'static str,
    /// Bytes.
    pub bytes: f64,
    /// What it grows with.
    pub scales: Scales,
    /// True when it lives in GPU memory.
    pub on_device: bool,
}

/// Host bytes per GPU data op while a run is prepared: its recorded command, bind
/// group and parameter block in wgpu and the driver. Measured on lavapipe with
/// `tpusim run psum --backend gpu` at P = 100–400 (0.6–0.8 KiB per data op above the
/// CPU run), rounded up.
pub const GPU_BYTES_PER_DATA_OP: f64 = 1024.0;

/// Host bytes per data op and iteration encoded into one command buffer (bench):
/// measured on lavapipe as the growth with `-n` of `tpusim bench psum -p 64 -b 4K -e 4K`
/// (about 0.75 KiB), rounded up.
pub const ENCODE_BYTES_PER_DATA_OP: f64 = 1024.0;

/// Host bytes of an opened GPU adapter with tpusim's shaders compiled, whatever the run:
/// measured on lavapipe as the peak of `tpusim info` (about 88 MiB), rounded up.
pub const GPU_BASE_BYTES: f64 = 96.0 * 1024.0 * 1024.0;

/// Host bytes per traced op for the cost model's timed run (its events, about 94 B),
/// and with a timeline also the JSON built from them (about 2.5 KiB). Measured with
/// `tpusim run psum --backend cpu --model v5e` with and without `--timeline` at
/// P = 64 and 128, rounded up.
pub const MODEL_BYTES_PER_OP: f64 = 128.0;
/// See [`MODEL_BYTES_PER_OP`].
pub const TIMELINE_BYTES_PER_OP: f64 = 3072.0;

/// Bytes of one semaphore slot's description in the layout (its struct and name).
const SEM_INFO_BYTES: f64 = size_of::<SemInfo>() as f64 + 32.0;
/// Bytes of one invocation's description in a program, besides its per-device starts.
const INVOCATION_BYTES: f64 = size_of::<crate::ir::Invocation>() as f64 + 64.0;
/// Bytes of one recorded access in the race checker's shadow memory (an upper bound of
/// its private struct).
const ACCESS_BYTES: f64 = 64.0;
/// Bytes of a vector (pointer, capacity, length).
const VEC_BYTES: f64 = 24.0;
/// Bytes of one event of the verifier's log.
const EVENT_BYTES: f64 = size_of::<crate::verify::Entry>() as f64;
/// Bytes per credit in the check: its fact (12), its DMA side in the race checker (4),
/// its id, clock component and running total in its semaphore's sorted list (16), its
/// id while that list is built (4) and its clock's handle while it waits for a join (4,
/// amortized).
const CREDIT_BYTES: f64 = 40.0;
/// Bytes per wait in the check: its fact (8) and the fixpoint's answer, old, new and
/// their meet (12), and its place in the replay's records (4).
const WAIT_BYTES: f64 = 24.0;
/// Bytes per DMA in the race checker: a wait ordered after each of its two completions.
const DMA_MARK_BYTES: f64 = 16.0;
/// Bytes per semaphore slot some credit reaches, in the check: its entry in the
/// fixpoint's map of sorted credit lists (a 104-byte entry, three vectors' heap blocks)
/// and in the race checker's map of DMA sides, each map up to half empty as it grows.
/// Slots nothing credits cost nothing there (a kernel may declare P² semaphores per
/// device and credit a few: seed 003's signal matrix).
const CREDITED_SLOT_BYTES: f64 = 384.0;
/// Vector clocks of P counters alive at once in a replay, per device beyond its own:
/// the copies its credits and DMA starts hold until a wait joins them, shared with the
/// device's clock until it learns something (measured: at most 1.25 over every
/// shipped collective and schedule policy at P = 16 and 64; counted as 2).
const CLOCK_COPIES_PER_DEVICE: f64 = 2.0;

/// The memory a command needs (the default: nothing counted).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Need {
    /// Every part, host and device.
    pub parts: Vec<Part>,
    /// The census it was computed from.
    pub census: Census,
}

impl Need {
    /// Bytes of host memory.
    pub fn host(&self) -> f64 {
        self.parts
            .iter()
            .filter(|p| !p.on_device)
            .map(|p| p.bytes)
            .sum()
    }

    /// Bytes of GPU memory.
    pub fn device(&self) -> f64 {
        self.parts
            .iter()
            .filter(|p| p.on_device)
            .map(|p| p.bytes)
            .sum()
    }

    /// Bytes of host memory in parts that scale with `s`.
    pub fn host_scaling(&self, s: Scales) -> f64 {
        self.parts
            .iter()
            .filter(|p| !p.on_device && p.scales == s)
            .map(|p| p.bytes)
            .sum()
    }
}

/// The need of `work` on the kernel counted by `c` (sampled or not: unsampled, the
/// traced parts are left out, so the need is a lower bound).
pub fn need(c: &Census, work: Work) -> Need {
    need_on(c, work, 1)
}

/// The need of `work` on one rank of `ranks` of a partitioned run
/// ([`crate::device_sim::ranks`]; 1: one process): each rank plans the whole program and
/// schedule and computes the reference from every device's inputs, but holds the
/// buffers, recorded commands and results of its own devices only (at most ⌈P/R⌉), and
/// the messages in flight (at most one device's memory).
pub fn need_on(c: &Census, work: Work, ranks: usize) -> Need {
    let p = c.devices;
    let held = (p / ranks.max(1) as f64).ceil().min(p);
    let t = c.traced.unwrap_or_default();
    let ops = p * t.ops;
    let dmas = p * t.dmas;
    let data_ops = p * (t.computes + t.dma_runs + c.copies);
    let mut parts = Vec::new();
    let mut host = |name, bytes, scales| {
        parts.push(Part {
            name,
            bytes,
            scales,
            on_device: false,
        })
    };
    host(
        "traced program",
        ops * size_of::<Op>() as f64
            + dmas * size_of::<Dma>() as f64
            + c.sem_slots * SEM_INFO_BYTES,
        Scales::Program,
    );
    host(
        "scheduler state and schedule",
        p * c.sem_slots * 8.0 + data_ops * size_of::<DataOp>() as f64,
        Scales::Program,
    );
    // Per device and invocation of a sequence: where it begins and, checked, its entry.
    host(
        "kernel invocations",
        c.invocations * (INVOCATION_BYTES + p * 8.0),
        Scales::Program,
    );
    // Inputs, the reference's result and the result read back, on the host.
    let host_data = p * (c.input_bytes + c.output_bytes) + held * c.output_bytes;
    let held_ops = data_ops * held / p.max(1.0);
    let held_data = |chunked: bool| {
        if chunked {
            // Its own devices' inputs, reference and result, and one chunk of every
            // device's inputs and reference.
            held * (c.input_bytes + 2.0 * c.output_bytes) + p * chunk_words(p as usize) as f64 * 8.0
        } else {
            host_data
        }
    };
    let mut device = Vec::new();
    match work {
        Work::Run {
            buffers,
            gpu,
            model,
            timeline,
            chunked,
        } => {
            host(
                "inputs, reference and result",
                held_data(chunked),
                Scales::Data,
            );
            executor(&mut host, &mut device, c, buffers, gpu, held, held_ops);
            if model {
                cost_model(&mut host, ops, timeline);
            }
        }
        Work::Model { timeline } => cost_model(&mut host, ops, timeline),
        // A check holds no data: its program names views, its race checker runs of
        // elements.
        Work::Check { .. } => host("race checker", checker(c, &t, data_ops), Scales::Program),
        Work::Trace => host("step table", step_table(c, &t), Scales::Program),
        Work::Bench {
            buffers,
            gpu,
            iters,
            warmup,
            chunked,
            ..
        } => {
            host(
                "inputs, reference and result",
                held_data(chunked),
                Scales::Data,
            );
            executor(&mut host, &mut device, c, buffers, gpu, held, held_ops);
            if gpu {
                // The most iterations encoded at once (timed or warm-up).
                host(
                    "encoded iterations",
                    iters.max(warmup) as f64 * held_ops * ENCODE_BYTES_PER_DATA_OP,
                    Scales::Iterations,
                );
            }
        }
        Work::Apply {
            buffers,
            gpu,
            file_bytes,
            chunked,
        } => {
            if chunked {
                // Its own devices' slices and the kernel's copies of them; their results,
                // reference and one chunk of every device's inputs and reference.
                host("input slices", 2.0 * held * c.input_bytes, Scales::Data);
                host(
                    "results",
                    2.0 * held * c.output_bytes + p * chunk_words(p as usize) as f64 * 8.0,
                    Scales::Data,
                );
            } else {
                // The file and its decoded array, the shards and the kernel's copies of
                // them; the results of the run and of the reference, joined, and the
                // written result.
                host(
                    "input file, array and shards",
                    2.0 * file_bytes as f64 + 2.0 * p * c.input_bytes,
                    Scales::Data,
                );
                host("results", 5.0 * p * c.output_bytes, Scales::Data);
            }
            executor(&mut host, &mut device, c, buffers, gpu, held, held_ops);
        }
    }
    let runs = matches!(
        work,
        Work::Run { .. } | Work::Bench { .. } | Work::Apply { .. }
    );
    if ranks > 1 && runs {
        host("messages in flight", c.alloc_bytes, Scales::Data);
        host(
            "shared-memory rings",
            crate::device_sim::ranks::shm::rank_bytes_at_most(ranks) as f64,
            Scales::Fixed,
        );
    }
    parts.extend(device);
    Need {
        parts,
        census: c.clone(),
    }
}

/// The cost model's parts: its events, and the timeline when one is kept.
fn cost_model(host: &mut impl FnMut(&'static str, f64, Scales), ops: f64, timeline: bool) {
    host(
        "cost model events",
        ops * MODEL_BYTES_PER_OP,
        Scales::Program,
    );
    if timeline {
        host("timeline", ops * TIMELINE_BYTES_PER_OP, Scales::Program);
    }
}

/// The executor's parts for the `p` devices it holds: their buffers (host or device)
/// and, on the GPU, the recording of `data_ops` ops (on the CPU, its fused schedule).
fn executor(
    host: &mut impl FnMut(&'static str, f64, Scales),
    device: &mut Vec<Part>,
    c: &Census,
    buffers: Buffers,
    gpu: bool,
    p: f64,
    data_ops: f64,
) {
    let bytes = if gpu {
        // Pooled buffers and the readback staging buffers.
        p * c.pooled_bytes + p * c.output_bytes
    } else {
        p * c.alloc_elems * HOST_WORD
    };
    match buffers {
        Buffers::Host => host("buffers", bytes, Scales::Data),
        Buffers::Device => device.push(Part {
            name: "GPU buffers",
            bytes,
            scales: Scales::Data,
            on_device: true,
        }),
    }
    if !gpu {
        // Its fused schedule: a step per op at most, and the ops a pass rewrote (a run
        // read through some outputs forwards reads: a whole second copy).
        host(
            "CPU executor's fused schedule",
            data_ops * (size_of::<DataOp>() + size_of::<crate::device_sim::fuse::Step>()) as f64,
            Scales::Program,
        );
    }
    if gpu {
        host("GPU driver and shaders", GPU_BASE_BYTES, Scales::Fixed);
        host(
            "GPU commands and bind groups",
            data_ops * GPU_BYTES_PER_DATA_OP,
            Scales::Program,
        );
    }
}

/// The check of one run: its records, from the sizes of the verifier's structures (the
/// event log; per credit and wait their facts and answers; per DMA the waits ordered
/// after its two completions; per credited semaphore slot its lists), a vector clock
/// of P 4-byte counters per device and the copies its credits and DMA starts keep
/// ([`CLOCK_COPIES_PER_DEVICE`], at most one per credit or DMA of the device), and the
/// shadow accesses (one live per data op of a device, at most). Unsampled (no traced
/// counts) only the device clocks and the records of the spec's copies remain: a lower
/// bound.
fn checker(c: &Census, t: &Traced, data_ops: f64) -> f64 {
    let p = c.devices;
    let credits = p * (t.signals + 2.0 * t.dmas);
    let waits = p * (t.ops - t.dmas - t.computes - t.signals - t.marks).max(0.0);
    let events = p * (t.ops + 2.0 * t.dmas + 1.0 + c.copies);
    let credited = credits.min(p * c.sem_slots);
    let clock = 4.0 * p + 2.0 * VEC_BYTES;
    let copies = CLOCK_COPIES_PER_DEVICE.min(t.signals + t.dmas);
    let records = events * EVENT_BYTES
        + credits * CREDIT_BYTES
        + waits * WAIT_BYTES
        + p * t.dmas * DMA_MARK_BYTES
        + credited * CREDITED_SLOT_BYTES;
    records + p * (1.0 + copies) * clock + data_ops * ACCESS_BYTES
}

/// The symbolic executor's memory and a snapshot per row, each element holding the
/// contributions summed into it (half the devices' on average: the ring all-reduces'
/// chunks fill up to every device's; psum's forwarded shards hold one, so there it is
/// about twice the real figure), and the table's text (about two accumulating columns
/// per device, four characters per term).
fn step_table(c: &Census, t: &Traced) -> f64 {
    let p = c.devices;
    let rows = c.grid_points + t.marks + 1.0;
    let terms = (p + 1.0) / 2.0;
    let elems = p * c.alloc_elems;
    let snapshot = elems * (VEC_BYTES + 8.0 * terms);
    let text = p * 2.0 * 4.0 * terms;
    (rows + 1.0) * snapshot + rows * text
}

/// Element positions per device in one chunk of a chunked reference (at least; at
/// large P fewer, so that a chunk of every device stays near 32 MiB of words).
const CHUNK_WORDS: usize = 1 << 20;

/// Words of every device in one chunk of a run's chunked reference at `devices`
/// devices (`crate::run`'s data): the budget counts a chunk of every device.
pub fn chunk_words(devices: usize) -> usize {
    (CHUNK_WORDS * 8 / devices.max(1)).clamp(1024, CHUNK_WORDS)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::collectives::Registry;
    use crate::mesh::Mesh;
    use crate::DType;

    /// The sampled census of collective `name` at P devices on a ring, with `shape`,
    /// and the lowered program's ops and DMAs (the independent figures).
    fn counted(name: &str, p: usize, shape: &[usize]) -> (Census, f64, f64) {
        let mesh = Mesh::new(p, "x").unwrap();
        let call = Registry::builtin()
            .by_name(name)
            .unwrap()
            .call(&mesh, shape, DType::F32)
            .unwrap();
        let mut c = Census::of_spec(&call, p);
        c.sample(&call, &mesh);
        let program = call.lower(&mesh).unwrap();
        (c, program.op_count() as f64, program.dmas.len() as f64)
    }

    fn check() -> Work {
        Work::Check {
            schedules: 1,
            deterministic: false,
        }
    }

    fn part(n: &Need, name: &str) -> f64 {
        n.parts
            .iter()
            .filter(|p| p.name == name)
            .map(|p| p.bytes)
            .sum()
    }

    /// A check holds no data: its need does not grow with the shard.
    #[test]
    fn a_check_counts_no_data() {
        let (small, _, _) = counted("psum", 8, &[8, 128]);
        let (large, _, _) = counted("psum", 8, &[65536, 4096]);
        assert!(large.input_bytes > 1e5 * small.input_bytes);
        let (a, b) = (need(&small, check()), need(&large, check()));
        assert_eq!(a.host_scaling(Scales::Data), 0.0, "{a:?}");
        assert_eq!(a.host(), b.host());
        // A run of the large shape does hold its data.
        let run = Work::Run {
            buffers: Buffers::Host,
            gpu: false,
            model: false,
            timeline: false,
            chunked: false,
        };
        assert!(need(&large, run).host() > 8.0 * large.input_bytes);
    }

    /// The race checker's records grow with what the run does (its ops and DMAs) and
    /// its clocks with P² (a few of P counters per device), not with the semaphores a
    /// kernel declares: seed 003's ring declares 2(P−1)·P per device and uses 2(P−1).
    #[test]
    fn the_race_checker_grows_with_the_run_not_the_declared_semaphores() {
        for name in ["ring_allreduce", "psum", "all_gather"] {
            for p in [4usize, 16, 48] {
                let shape = Registry::builtin().by_name(name).unwrap().default_shape(p);
                let (c, ops, dmas) = counted(name, p, &shape);
                let bytes = part(&need(&c, check()), "race checker");
                let q = p as f64;
                // Per op or DMA, less than the size of its records (a few hundred
                // bytes), and per device at most four clocks of P counters.
                let bound = 512.0 * (ops + dmas) + 4.0 * q * (4.0 * q + 64.0);
                assert!(bytes <= bound, "{name} P={p}: {bytes} > {bound}");
                // At least every device's clock.
                assert!(bytes >= q * 4.0 * q, "{name} P={p}: {bytes}");
            }
        }
    }
}
