//! The symbolic executor: the same schedule, but every element holds the list of input
//! elements summed into it, in accumulation order (or "never written"). It is an
//! [`Observer`], so it sees exactly the order the scheduler ran.

use crate::ir::{Completion, DataOp, Op, OpKind, OpSite, Program, View};
use crate::sched::Observer;
use std::collections::HashMap;

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
    marks: Marks,
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
            marks: Marks::new(p),
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

/// The step marks of a program, matched across devices by grid point, label and
/// occurrence (the n-th mark of that label in that grid point): a step's row comes
/// once every device that has that mark passed it, so devices whose loops run a
/// different number of iterations, or that mark steps other devices do not, each get
/// their rows.
struct Marks {
    /// Each device's marks in program order, as step numbers.
    order: Vec<Vec<usize>>,
    /// Per device, the marks it passed.
    passed: Vec<usize>,
    /// Per step: its grid point, label, the devices that have it and those past it.
    steps: Vec<(usize, String, usize, usize)>,
}

impl Marks {
    fn new(p: &Program) -> Self {
        let mut number: HashMap<(usize, &str, usize), usize> = HashMap::new();
        let mut steps = Vec::new();
        let order = p
            .ops
            .iter()
            .map(|ops| {
                let mut seen: HashMap<(usize, &str), usize> = HashMap::new();
                ops.iter()
                    .filter_map(|op| match &op.kind {
                        OpKind::Mark(label) => Some((op.site.grid_linear as usize, &**label)),
                        _ => None,
                    })
                    .map(|(g, label)| {
                        let n = seen.entry((g, label)).or_insert(0);
                        *n += 1;
                        let k = *number.entry((g, label, *n)).or_insert_with(|| {
                            steps.push((g, label.to_string(), 0, 0));
                            steps.len() - 1
                        });
                        steps[k].2 += 1;
                        k
                    })
                    .collect()
            })
            .collect();
        Marks {
            order,
            passed: vec![0; p.devices],
            steps,
        }
    }

    /// Device `device` passed its next mark: the step's grid point and label when it
    /// was the last device to reach it.
    fn pass(&mut self, device: usize) -> Option<(usize, String)> {
        let k = *self.order[device].get(self.passed[device])?;
        self.passed[device] += 1;
        let (g, label, have, past) = &mut self.steps[k];
        *past += 1;
        (*past == *have).then(|| (*g, label.clone()))
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

    fn mark(&mut self, device: usize, _label: &str) {
        self.begin();
        if let Some((g, label)) = self.marks.pass(device) {
            self.rows.push((Some(g), Some(label), self.mem.clone()));
        }
    }

    fn release(&mut self, _device: usize, _op: &Op) {
        self.begin();
    }

    fn acquire(&mut self, _device: usize, _op: &Op) {
        self.begin();
    }

    fn dma_complete(&mut self, _dma: usize, _side: Completion, moved: &[DataOp]) {
        self.begin();
        for op in moved {
            self.apply(op);
        }
    }

    fn after_step(&mut self, device: usize, next_grid: Option<usize>) {
        let points = self.p.steps();
        self.cur[device] = next_grid.unwrap_or(points);
        self.flush();
    }
}
