//! The CPU executor: every allocation is a host vector; the oracle for tests. Compute
//! ops run in [`compute`].

pub mod compute;

use super::lend::{Coverage, Lent};
use super::{check_inputs, host_words, Executor, Prepared};
use crate::array::{DType, HostArray};
use crate::error::{Error, Result};
use crate::ir::{self, Compute, DataOp, Program, ReduceOp, Schedule, View};
use std::ops::{Deref, DerefMut, Range};
use std::time::{Duration, Instant};

/// Runs schedules in host memory.
#[derive(Debug, Default)]
pub struct CpuExecutor;

impl CpuExecutor {
    /// A new CPU executor.
    pub fn new() -> Self {
        CpuExecutor
    }

    /// Prepares `schedule` with the allocations of `lent` in the caller's memory: an
    /// input is read where it is (copied where an op writes it, so the caller's data
    /// stays as it was), an output is the run's memory for it (zeroed first only where
    /// `coverage`, [`Coverage::of`] this schedule, says the run needs it). The others
    /// are the run's own, zeroed; an input not lent is written with
    /// [`Prepared::input_words`] or [`Prepared::upload`].
    pub fn prepare_lent<'a>(
        &'a self,
        program: &'a Program,
        schedule: &'a Schedule,
        coverage: &Coverage,
        lent: Vec<Lent<'a>>,
    ) -> Result<Box<dyn Prepared + 'a>> {
        let table = schedule.memory(program);
        let mut bufs: Vec<Option<Buf<'a>>> = (0..table.len()).map(|_| None).collect();
        for l in lent {
            let (d, a) = l.place();
            let why = lent_mismatch(program, &l);
            let i = table.index_of(d, a);
            if let Some(why) = why.or_else(|| bufs[i].is_some().then_some("lent twice")) {
                return Err(Error::bad_input(format!(
                    "`{}`: memory lent for allocation {a} of device {d}: {why}",
                    program.name
                )));
            }
            bufs[i] = Some(match l {
                Lent::Input { words, .. } if coverage.input_written(d, a) => {
                    Buf::Own(words.to_vec())
                }
                Lent::Input { words, .. } => Buf::Read(words),
                Lent::Output { words, .. } => {
                    if coverage.output_needs_zero(d, a) {
                        words.fill(0);
                    }
                    Buf::Lent(words)
                }
            });
        }
        let bufs = bufs
            .into_iter()
            .zip(table.iter())
            .map(|(b, (_, a))| match b {
                Some(b) => Ok(b),
                None => Ok(Buf::Own(host_words(a.numel(), &format!("`{}`", a.name))?)),
            })
            .collect::<Result<_>>()?;
        Ok(Box::new(CpuRun {
            program,
            schedule,
            mem: Memory { table, bufs },
            pieces: pieces(schedule.ops.len(), &[]),
        }))
    }
}

/// Why `l` cannot be the memory of its allocation: a device or allocation the program
/// lacks, an input lent as an output or the other way, the wrong size or element width.
fn lent_mismatch(program: &Program, l: &Lent) -> Option<&'static str> {
    let (d, a) = l.place();
    let alloc = program.layout.allocs.get(a).filter(|_| d < program.devices);
    let Some(alloc) = alloc else {
        return Some("no such device or allocation");
    };
    let role = match l {
        Lent::Input { .. } => &program.inputs,
        Lent::Output { .. } => &program.outputs,
    };
    if !role.contains(&a) {
        return Some("not an input lent as one, or an output lent as one");
    }
    if alloc.dtype.size() != 4 {
        return Some("elements narrower than the 32-bit words lent");
    }
    (alloc.numel() != l.len()).then_some("not its number of elements")
}

/// The words of one allocation: the run's own, or the caller's ([`Lent`]).
enum Buf<'a> {
    Own(Vec<u32>),
    /// An input read in place: no op writes it ([`Coverage::input_written`]).
    Read(&'a [u32]),
    Lent(&'a mut [u32]),
}

impl Deref for Buf<'_> {
    type Target = [u32];
    fn deref(&self) -> &[u32] {
        match self {
            Buf::Own(v) => v,
            Buf::Read(w) => w,
            Buf::Lent(w) => w,
        }
    }
}

impl DerefMut for Buf<'_> {
    fn deref_mut(&mut self) -> &mut [u32] {
        match self {
            Buf::Own(v) => v,
            Buf::Lent(w) => w,
            Buf::Read(_) => unreachable!("an input lent for reading is never written (Coverage)"),
        }
    }
}

/// Host memory: one word buffer per (device, allocation), in the order of
/// [`ir::Memory::index`].
struct Memory<'a> {
    table: ir::Memory,
    bufs: Vec<Buf<'a>>,
}

impl Memory<'_> {
    fn index(&self, v: &View) -> usize {
        self.table.index(v)
    }

    fn words(&self, v: &View) -> &[u32] {
        &self.bufs[self.index(v)][v.offset()..v.offset() + v.len()]
    }

    /// Runs compute op `c`: its sources are read whole before its destination is
    /// written (they may share a buffer with it).
    fn compute(&mut self, c: &Compute) {
        let out = {
            let srcs: Vec<&[u32]> = c.srcs.iter().map(|o| self.words(&o.view)).collect();
            compute::compute(c, &srcs)
        };
        let d = &c.dst.view;
        let i = self.index(d);
        self.bufs[i][d.offset()..d.offset() + d.len()].copy_from_slice(&out);
    }

    /// Mutable destination and shared source, which may be the same buffer.
    fn with_pair(&mut self, dst: &View, src: &View, f: impl FnOnce(&mut [u32], &[u32])) {
        let (di, si) = (self.index(dst), self.index(src));
        let (dr, sr) = (
            dst.offset()..dst.offset() + dst.len(),
            src.offset()..src.offset() + src.len(),
        );
        if di == si {
            let tmp = self.bufs[si][sr].to_vec();
            f(&mut self.bufs[di][dr], &tmp);
        } else if di < si {
            let (a, b) = self.bufs.split_at_mut(si);
            f(&mut a[di][dr], &b[0][sr]);
        } else {
            let (a, b) = self.bufs.split_at_mut(di);
            f(&mut b[0][dr], &a[si][sr]);
        }
    }
}

/// Applies one accumulate element-wise on 32-bit words.
pub fn accumulate_words(dst: &mut [u32], src: &[u32], op: ReduceOp, dtype: DType) {
    match dtype {
        DType::F32 => {
            for (d, s) in dst.iter_mut().zip(src) {
                let (a, b) = (f32::from_bits(*d), f32::from_bits(*s));
                *d = match op {
                    ReduceOp::Sum => (a + b).to_bits(),
                    // XLA's max and min propagate NaN: the first operand that is one.
                    _ if a.is_nan() => *d,
                    _ if b.is_nan() => *s,
                    ReduceOp::Max => a.max(b).to_bits(),
                    ReduceOp::Min => a.min(b).to_bits(),
                };
            }
        }
        DType::I32 => {
            for (d, s) in dst.iter_mut().zip(src) {
                let (a, b) = (*d as i32, *s as i32);
                *d = match op {
                    ReduceOp::Sum => a.wrapping_add(b),
                    ReduceOp::Max => a.max(b),
                    ReduceOp::Min => a.min(b),
                } as u32;
            }
        }
        DType::F16 => accumulate_halves(dst, src, op, is_nan_f16, |a, b| {
            let (a, b) = (half::f16::from_bits(a), half::f16::from_bits(b));
            half::f16::from_f32(a.to_f32() + b.to_f32()).to_bits()
        }),
        DType::BF16 => accumulate_halves(dst, src, op, is_nan_bf16, |a, b| {
            let (a, b) = (half::bf16::from_bits(a), half::bf16::from_bits(b));
            half::bf16::from_f32(a.to_f32() + b.to_f32()).to_bits()
        }),
        // Accumulates are traced for the collectives' dtypes only.
        DType::I8 | DType::U8 | DType::Bool => {
            unreachable!("an accumulate in {dtype}: the kernel API refuses it")
        }
    }
}

/// A 16-bit float accumulate: `sum` adds in f32 and rounds to nearest even (correctly
/// rounded for both formats: f32 carries more than twice their significand plus two bits,
/// so rounding twice equals rounding once); max and min by [`order16`], a NaN (`is_nan`)
/// in either operand propagated as XLA's max and min do.
fn accumulate_halves(
    dst: &mut [u32],
    src: &[u32],
    op: ReduceOp,
    is_nan: fn(u16) -> bool,
    sum: impl Fn(u16, u16) -> u16,
) {
    for (d, s) in dst.iter_mut().zip(src) {
        let (a, b) = (*d as u16, *s as u16);
        *d = match op {
            ReduceOp::Sum => sum(a, b),
            // XLA's max and min propagate NaN: the first operand that is one.
            _ if is_nan(a) => a,
            _ if is_nan(b) => b,
            ReduceOp::Max if order16(b) > order16(a) => b,
            ReduceOp::Min if order16(b) < order16(a) => b,
            ReduceOp::Max | ReduceOp::Min => a,
        } as u32;
    }
}

/// True when f16 `bits` is a NaN (exponent all ones, fraction not zero).
pub fn is_nan_f16(bits: u16) -> bool {
    bits & 0x7fff > 0x7c00
}

/// True when bf16 `bits` is a NaN (exponent all ones, fraction not zero).
pub fn is_nan_bf16(bits: u16) -> bool {
    bits & 0x7fff > 0x7f80
}

/// The order max and min use for 16-bit floats (the shaders use the same): the value's
/// order for numbers and infinities, -0 equal to +0 (the destination is kept on ties),
/// NaNs above +inf (or below -inf when negative) by their bits.
pub fn order16(bits: u16) -> i32 {
    let magnitude = (bits & 0x7fff) as i32;
    if bits & 0x8000 != 0 {
        -magnitude
    } else {
        magnitude
    }
}

/// Data ops run between two looks at whether a watched caller asked to stop.
const INTERRUPT_EVERY_OPS: usize = 256;

/// A schedule prepared in host memory.
struct CpuRun<'a> {
    program: &'a Program,
    schedule: &'a Schedule,
    mem: Memory<'a>,
    /// The ops of each piece ([`Executor::prepare_pieces`]; one piece: all of them).
    pieces: Vec<Range<usize>>,
}

/// The op ranges between `cuts` (op indices) of a schedule of `ops` ops.
pub(crate) fn pieces(ops: usize, cuts: &[usize]) -> Vec<Range<usize>> {
    let mut at = 0;
    let mut v: Vec<Range<usize>> = cuts
        .iter()
        .map(|&c| {
            let r = at..c.clamp(at, ops);
            at = r.end;
            r
        })
        .collect();
    v.push(at..ops);
    v
}

impl Memory<'_> {
    /// Runs `ops` in order.
    fn run(&mut self, ops: &[DataOp]) {
        for op in ops {
            match op {
                DataOp::Copy { src, dst } => {
                    self.with_pair(dst, src, |d, s| d.copy_from_slice(s));
                }
                DataOp::Fill { dst, bits } => {
                    let i = self.index(dst);
                    self.bufs[i][dst.offset()..dst.offset() + dst.len()].fill(*bits);
                }
                DataOp::Accumulate {
                    dst,
                    src,
                    op,
                    dtype,
                } => {
                    self.with_pair(dst, src, |d, s| accumulate_words(d, s, *op, *dtype));
                }
                DataOp::Compute(c) => self.compute(c),
            }
        }
    }
}

impl Executor for CpuExecutor {
    fn describe(&self) -> String {
        "cpu".into()
    }

    fn prepare<'a>(
        &'a self,
        program: &'a Program,
        schedule: &'a Schedule,
    ) -> Result<Box<dyn Prepared + 'a>> {
        self.prepare_pieces(program, schedule, &[])
    }

    fn prepare_pieces<'a>(
        &'a self,
        program: &'a Program,
        schedule: &'a Schedule,
        cuts: &[usize],
    ) -> Result<Box<dyn Prepared + 'a>> {
        let table = schedule.memory(program);
        let mem = Memory {
            bufs: table
                .iter()
                .map(|(_, a)| Ok(Buf::Own(host_words(a.numel(), &format!("`{}`", a.name))?)))
                .collect::<Result<_>>()?,
            table,
        };
        Ok(Box::new(CpuRun {
            program,
            schedule,
            mem,
            pieces: pieces(schedule.ops.len(), cuts),
        }))
    }
}

impl Prepared for CpuRun<'_> {
    fn upload(&mut self, inputs: &[Vec<HostArray>]) -> Result<()> {
        check_inputs(self.program, inputs)?;
        for (d, dev) in inputs.iter().enumerate() {
            for (&a, arr) in self.program.inputs.iter().zip(dev) {
                let i = self.mem.table.index_of(d, a);
                self.mem.bufs[i].copy_from_slice(&arr.words);
            }
        }
        Ok(())
    }

    fn run(&mut self, iters: usize) -> Result<Duration> {
        let t = Instant::now();
        for _ in 0..iters {
            // In slices, so that a watched caller may stop a long run between them
            // (crate::interrupt); the ops run in the same order.
            for ops in self.schedule.ops.chunks(INTERRUPT_EVERY_OPS) {
                crate::interrupt::check()?;
                self.mem.run(ops);
            }
        }
        Ok(t.elapsed())
    }

    fn input_words(&mut self, device: usize, operand: usize) -> Option<&mut [u32]> {
        let a = *self.program.inputs.get(operand)?;
        (device < self.program.devices).then(|| {
            let i = self.mem.table.index_of(device, a);
            &mut self.mem.bufs[i][..]
        })
    }

    fn output_words(&self, device: usize, operand: usize) -> Option<&[u32]> {
        let a = *self.program.outputs.get(operand)?;
        (device < self.program.devices)
            .then(|| &self.mem.bufs[self.mem.table.index_of(device, a)][..])
    }

    fn run_piece(&mut self, k: usize) -> Result<()> {
        let r = self.pieces.get(k).cloned().ok_or_else(|| {
            crate::Error::bad_input(format!("no piece {k} of {}", self.pieces.len()))
        })?;
        self.mem.run(&self.schedule.ops[r]);
        Ok(())
    }

    fn read_view(&mut self, v: View, elem: usize) -> Result<Vec<u8>> {
        let words = self.mem.words(&v);
        Ok(match elem {
            4 => bytemuck::cast_slice(words).to_vec(),
            _ => words
                .iter()
                .flat_map(|w| (*w as u16).to_le_bytes())
                .collect(),
        })
    }

    fn write_view(&mut self, v: View, elem: usize, bytes: &[u8]) -> Result<()> {
        if bytes.len() != v.len() * elem {
            return Err(crate::Error::bad_input(format!(
                "{} bytes for a view of {} elements of {elem} bytes",
                bytes.len(),
                v.len()
            )));
        }
        let i = self.mem.index(&v);
        let dst = &mut self.mem.bufs[i][v.offset()..v.offset() + v.len()];
        for (d, b) in dst.iter_mut().zip(bytes.chunks_exact(elem)) {
            *d = match elem {
                4 => u32::from_le_bytes([b[0], b[1], b[2], b[3]]),
                _ => u16::from_le_bytes([b[0], b[1]]) as u32,
            };
        }
        Ok(())
    }

    fn read_outputs(&mut self) -> Result<Vec<Vec<HostArray>>> {
        let allocs = &self.program.layout.allocs;
        Ok((0..self.program.devices)
            .map(|d| {
                self.program
                    .outputs
                    .iter()
                    .map(|&a| HostArray {
                        dtype: allocs[a].dtype,
                        shape: allocs[a].shape.clone(),
                        words: self.mem.bufs[self.mem.table.index_of(d, a)].to_vec(),
                    })
                    .collect()
            })
            .collect())
    }
}
