//! The symbolic executor: the same schedule, but every element holds the list of input
//! elements summed into it, in accumulation order (or "never written"). It is an
//! [`Observer`], so it sees exactly the order the scheduler ran.

use crate::ir::{Completion, DataOp, Op, OpSite, Program, View};
use crate::sched::Observer;

/// An input element: (device, element index in that device's input operand 0).
pub type Term = (u32, u32);

/// Marks a term that is a constant fill (its second field holds the bits).
pub const CONST: u32 = u32::MAX;

/// Marks a computed element (a compute op's result): its first term is `(COMPUTED, 0)`
/// and the others are the input elements it depends on, in the order the op read them;
/// `(COMPUTED, 1)` alone when it depends on more than 64. No device has this
/// id (the planner's limit is 2^32 − 2 devices).
pub const COMPUTED: u32 = u32::MAX - 1;

/// Most input elements a computed element lists (a step table runs at a small shape).
const MAX_DEPS: usize = 64;

/// One element's symbolic value: `None` never written, `Some(vec![])` zero.
pub type Sym = Option<Vec<Term>>;

/// A snapshot of symbolic memory: the grid point reached (`None`: before the grid), the
/// step mark's label for rows inside a grid point, and every allocation's elements.
pub type Snapshot = (Option<usize>, Option<String>, Vec<Vec<Sym>>);

/// Symbolic memory of every allocation on every device.
pub struct Symbolic<'p> {
    p: &'p Program,
    mem: Vec<Vec<Sym>>,
    /// Per device: the staging area of DMA data in flight (grows as used).
    staging: Vec<Vec<Sym>>,
    cur: Vec<usize>,
    next_row: usize,
    started: bool,
    marks: Vec<usize>,
    labels: Vec<String>,
    next_mark: usize,
    /// Snapshots, in order.
    pub rows: Vec<Snapshot>,
}

impl<'p> Symbolic<'p> {
    /// Memory as the kernel starts: each input operand element holds itself.
    pub fn new(p: &'p Program) -> Self {
        let n = p.layout.allocs.len();
        let mut mem: Vec<Vec<Sym>> = (0..p.devices)
            .flat_map(|_| p.layout.allocs.iter().map(|a| vec![None; a.numel()]))
            .collect();
        for d in 0..p.devices {
            if let Some(&a) = p.inputs.first() {
                for (i, e) in mem[d * n + a].iter_mut().enumerate() {
                    *e = Some(vec![(d as u32, i as u32)]);
                }
            }
        }
        let points = p.steps();
        let cur = (0..p.devices)
            .map(|d| {
                p.ops[d]
                    .first()
                    .map_or(points, |o| o.site.grid_linear as usize)
            })
            .collect();
        Self {
            p,
            mem,
            staging: vec![Vec::new(); p.devices],
            cur,
            next_row: 0,
            started: false,
            marks: vec![0; p.devices],
            labels: Vec::new(),
            next_mark: 0,
            rows: Vec::new(),
        }
    }

    fn read(&self, v: &View) -> Vec<Sym> {
        self.slice(v).to_vec()
    }

    fn slice(&self, v: &View) -> &[Sym] {
        let n = self.p.layout.allocs.len();
        let mem = if v.alloc() == n {
            &self.staging[v.device()]
        } else {
            &self.mem[v.device() * n + v.alloc()]
        };
        &mem[v.offset()..v.offset() + v.len()]
    }

    /// What an element computed from the elements `reads` holds: the input elements
    /// they hold or depend on (constants and never-written elements add nothing).
    fn computed(&self, reads: impl Iterator<Item = View>) -> Vec<Term> {
        let mut deps: Vec<Term> = Vec::new();
        for r in reads {
            for terms in self.slice(&r).iter().flatten() {
                for &t in terms {
                    if t.0 == CONST || t.0 == COMPUTED || deps.contains(&t) {
                        continue;
                    }
                    if deps.len() == MAX_DEPS {
                        return vec![(COMPUTED, 1)];
                    }
                    deps.push(t);
                }
            }
        }
        let mut v = vec![(COMPUTED, 0)];
        v.extend(deps);
        v
    }

    fn region(&mut self, v: &View) -> &mut [Sym] {
        let n = self.p.layout.allocs.len();
        let mem = if v.alloc() == n {
            let s = &mut self.staging[v.device()];
            if s.len() < v.offset() + v.len() {
                s.resize(v.offset() + v.len(), None);
            }
            s
        } else {
            &mut self.mem[v.device() * n + v.alloc()]
        };
        &mut mem[v.offset()..v.offset() + v.len()]
    }

    /// Records the initial row (after the prologue) before the first grid op.
    fn begin(&mut self) {
        if !self.started {
            self.started = true;
            self.rows.push((None, None, self.mem.clone()));
        }
    }

    /// Emits rows for every grid point all devices have left (call at the end too).
    pub fn flush(&mut self) {
        self.begin();
        let lowest = self.cur.iter().copied().min().unwrap_or(0);
        while self.next_row < lowest {
            self.rows
                .push((Some(self.next_row), None, self.mem.clone()));
            self.next_row += 1;
        }
    }

    fn apply(&mut self, op: &DataOp) {
        match op {
            DataOp::Copy { src, dst } => {
                let s = self.read(src);
                self.region(dst).clone_from_slice(&s);
            }
            DataOp::Fill { dst, bits } => {
                let v = if *bits == 0 {
                    vec![]
                } else {
                    vec![(CONST, *bits)]
                };
                for e in self.region(dst) {
                    *e = Some(v.clone());
                }
            }
            DataOp::Accumulate { dst, src, .. } => {
                let s = self.read(src);
                for (e, add) in self.region(dst).iter_mut().zip(s) {
                    match (e.as_mut(), add) {
                        (Some(terms), Some(more)) => terms.extend(more),
                        (None, add) => *e = add,
                        (Some(_), None) => {}
                    }
                }
            }
            // Computed values are not sums of inputs: the table shows what they depend on.
            DataOp::Compute(c) => {
                let v = self.computed(c.reads().iter().copied());
                for w in c.writes() {
                    for e in self.region(w) {
                        *e = Some(v.clone());
                    }
                }
            }
        }
    }
}

impl Observer for Symbolic<'_> {
    fn data(&mut self, _device: usize, op: &DataOp, site: Option<&OpSite>) {
        if site.is_some() {
            self.begin();
        }
        self.apply(op);
    }

    fn dma_start(&mut self, _device: usize, _dma: usize) {
        self.begin();
    }

    fn mark(&mut self, device: usize, label: &str) {
        self.begin();
        let k = self.marks[device];
        if self.labels.len() <= k {
            self.labels.push(label.to_string());
        }
        self.marks[device] += 1;
        let lowest = self.marks.iter().copied().min().unwrap_or(0);
        while self.next_mark < lowest {
            let label = self.labels[self.next_mark].clone();
            let g = self.cur.iter().copied().min();
            self.rows.push((g, Some(label), self.mem.clone()));
            self.next_mark += 1;
        }
    }

    fn release(&mut self, _device: usize, _op: &Op) {
        self.begin();
    }

    fn acquire(&mut self, _device: usize, _op: &Op) {
        self.begin();
    }

    fn dma_complete(&mut self, _dma: usize, _side: Completion, moved: Option<&DataOp>) {
        self.begin();
        if let Some(op) = moved {
            self.apply(op);
        }
    }

    fn after_step(&mut self, device: usize, next_grid: Option<usize>) {
        let points = self.p.steps();
        self.cur[device] = next_grid.unwrap_or(points);
        self.flush();
    }
}
