//! What a step table shows: the small shape a trace runs at, the regions shown as
//! columns, and how an input element is labeled (whole shard, top/bottom half of a
//! block, chunk). Collectives give their own (the seeds' names) or get one derived
//! from their kernel's allocations.

use super::symbolic::{Sym, COMPUTED, CONST};
use super::Cell;
use crate::ir::Program;

/// Suffix of the HBM copy of a VMEM operand (see `PallasCall::trace`).
const HBM_COPY: &str = " (HBM operand)";

/// Columns for any kernel traced at input shape `shard`: every allocation but the
/// inputs (and the HBM copies of VMEM operands), one column each, or one per block of
/// its leading dimension when it stacks shard-shaped blocks (rank above the shard's).
pub fn derived_layout(program: &Program, shard: &[usize]) -> TraceLayout {
    let allocs = &program.layout.allocs;
    let base = |n: &str| n.strip_suffix(HBM_COPY).unwrap_or(n).to_string();
    let inputs: Vec<String> = program
        .inputs
        .iter()
        .map(|&a| base(&allocs[a].name))
        .collect();
    let mut columns = Vec::new();
    let shard_elems = shard.iter().product::<usize>().max(1);
    let mut unit = shard_elems;
    let mut seen: Vec<&str> = Vec::new();
    for a in allocs {
        // A sequence has each name once per invocation: one column, per row its own.
        if a.name.ends_with(HBM_COPY)
            || inputs.contains(&a.name)
            || a.holds_values()
            || seen.contains(&&*a.name)
        {
            continue;
        }
        seen.push(&a.name);
        if a.shape.len() > shard.len() && a.shape[0] > 0 {
            let block = a.numel() / a.shape[0];
            unit = unit.min(block.max(1));
            for i in 0..a.shape[0] {
                columns.push(Column::new(
                    format!("{}[{i}]", a.name),
                    &a.name,
                    i * block,
                    block,
                ));
            }
        } else {
            columns.push(Column::new(a.name.clone(), &a.name, 0, a.numel()));
        }
    }
    TraceLayout {
        shape: shard.to_vec(),
        columns,
        labels: if unit == shard_elems {
            Labels::Whole { elems: unit }
        } else {
            Labels::Blocks {
                elems: unit,
                per_shard: shard_elems / unit,
            }
        },
    }
}

/// A named region of one allocation.
#[derive(Clone, Debug)]
pub struct Column {
    /// Column name (`hbm_buf[0].top`).
    pub name: String,
    /// Allocation name as the kernel names it.
    pub alloc: String,
    /// First element.
    pub offset: usize,
    /// Elements.
    pub len: usize,
}

/// How input elements are labeled in cells.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Labels {
    /// Whole shards of `elems` elements: `x3+x2`.
    Whole {
        /// Elements per shard.
        elems: usize,
    },
    /// Blocks of `elems` elements, `per_shard` to a shard: `x3.1` is block 1 of device
    /// 3's shard (derived layouts of kernels that move parts of shards).
    Blocks {
        /// Elements per block.
        elems: usize,
        /// Blocks per shard.
        per_shard: usize,
    },
    /// Blocks of two one-element halves: `T2(2+1+0)` / `B0(0+1)`.
    Halves,
    /// One-element chunks: `C2(2+1)`.
    Chunks,
}

/// What a trace of one collective shows.
#[derive(Clone, Debug)]
pub struct TraceLayout {
    /// Per-device input shape the trace runs at.
    pub shape: Vec<usize>,
    /// Columns.
    pub columns: Vec<Column>,
    /// Labeling.
    pub labels: Labels,
}

impl Column {
    /// Column `name`: `len` elements of allocation `alloc` from element `offset`.
    pub fn new(name: impl Into<String>, alloc: &str, offset: usize, len: usize) -> Self {
        Column {
            name: name.into(),
            alloc: alloc.into(),
            offset,
            len,
        }
    }
}

impl Labels {
    /// (block, part, offset in part) of input element `i`.
    fn label(&self, i: usize) -> (usize, usize, usize) {
        match self {
            Labels::Whole { elems } => (0, 0, i % elems),
            Labels::Blocks { elems, .. } => (i / elems, 0, i % elems),
            Labels::Halves => (i / 2, i % 2, 0),
            Labels::Chunks => (i, 0, 0),
        }
    }

    fn part_len(&self) -> usize {
        match self {
            Labels::Whole { elems } | Labels::Blocks { elems, .. } => *elems,
            _ => 1,
        }
    }

    /// The cell for a region's elements: the same labeled sum in every element, each
    /// term at the element's own offset, or `Mixed`.
    pub(crate) fn cell(&self, elems: &[Sym]) -> Cell {
        if elems.iter().all(Option::is_none) {
            return Cell::Never;
        }
        if let Some(Some(t)) = elems.first() {
            if t.first().is_some_and(|t| t.0 == COMPUTED) {
                return self.computed(elems);
            }
        }
        let mut first: Option<Vec<(usize, usize, usize)>> = None;
        for (j, e) in elems.iter().enumerate() {
            let Some(terms) = e else { return Cell::Mixed };
            let mut labeled = Vec::with_capacity(terms.len());
            for &(d, i) in terms {
                if d == CONST {
                    return Cell::Mixed;
                }
                let (block, part, off) = self.label(i as usize);
                if off != j % self.part_len() {
                    return Cell::Mixed;
                }
                labeled.push((d as usize, block, part));
            }
            match &first {
                None => first = Some(labeled),
                Some(f) if *f == labeled => {}
                Some(_) => return Cell::Mixed,
            }
        }
        let terms = first.unwrap_or_default();
        let part = terms.first().map(|t| (t.1, t.2));
        if terms.iter().any(|t| Some((t.1, t.2)) != part) {
            return Cell::Mixed;
        }
        Cell::Sum(
            terms.iter().map(|t| (t.0, t.1)).collect(),
            part.map_or(0, |p| p.1),
        )
    }

    /// The cell of computed elements: the input blocks they depend on, the same for
    /// every element, or `Mixed`.
    fn computed(&self, elems: &[Sym]) -> Cell {
        let mut first: Option<Vec<(usize, usize)>> = None;
        for e in elems {
            let Some(terms) = e else { return Cell::Mixed };
            if terms.first() != Some(&(COMPUTED, 0)) {
                return Cell::Mixed;
            }
            let mut blocks: Vec<(usize, usize)> = Vec::new();
            for &(d, i) in &terms[1..] {
                let b = (d as usize, self.label(i as usize).0);
                if !blocks.contains(&b) {
                    blocks.push(b);
                }
            }
            match &first {
                None => first = Some(blocks),
                Some(f) if *f == blocks => {}
                Some(_) => return Cell::Mixed,
            }
        }
        Cell::Computed(first.unwrap_or_default())
    }

    /// Markdown notation of a computed cell that depends on `blocks`: `f(x2)`,
    /// `f(x1.2,x0.2)`.
    pub(crate) fn computed_notation(&self, blocks: &[(usize, usize)]) -> String {
        let names: Vec<String> = blocks
            .iter()
            .map(|&(d, b)| match self {
                Labels::Whole { .. } => format!("x{d}"),
                _ => format!("x{d}.{b}"),
            })
            .collect();
        format!("f({})", names.join(","))
    }

    /// Markdown notation of a non-empty sum whose terms are all of part `part`.
    pub(crate) fn notation(&self, terms: &[(usize, usize)], part: usize) -> String {
        let devices: Vec<String> = terms.iter().map(|t| t.0.to_string()).collect();
        match self {
            Labels::Whole { .. } => terms
                .iter()
                .map(|t| format!("x{}", t.0))
                .collect::<Vec<_>>()
                .join("+"),
            Labels::Blocks { .. } => terms
                .iter()
                .map(|t| format!("x{}.{}", t.0, t.1))
                .collect::<Vec<_>>()
                .join("+"),
            Labels::Halves => {
                let half = if part == 0 { "T" } else { "B" };
                format!("{half}{}({})", terms[0].1, devices.join("+"))
            }
            Labels::Chunks => format!("C{}({})", terms[0].1, devices.join("+")),
        }
    }
}
