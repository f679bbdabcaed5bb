//! Per collective: the small shape a trace runs at, the regions shown as columns, and
//! how an input element is labeled (whole shard, top/bottom half of a block, chunk).

use super::symbolic::{Sym, CONST};
use super::Cell;

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

fn col(name: impl Into<String>, alloc: &str, offset: usize, len: usize) -> Column {
    Column {
        name: name.into(),
        alloc: alloc.into(),
        offset,
        len,
    }
}

/// The layout for collective `name` at `p` devices.
pub fn layout_for(name: &str, p: usize) -> TraceLayout {
    const W: usize = 2; // elements per whole shard
    let whole = Labels::Whole { elems: W };
    match name {
        "ppermute" => TraceLayout {
            shape: vec![1, W],
            columns: vec![col("y_ref", "y_ref", 0, W)],
            labels: whole,
        },
        "all_gather" => TraceLayout {
            shape: vec![1, W],
            columns: (0..p)
                .map(|i| col(format!("out_ref[{i}]"), "out_ref", i * W, W))
                .collect(),
            labels: whole,
        },
        "psum" => TraceLayout {
            shape: vec![1, W],
            columns: vec![
                col("hbm_buf[0]", "hbm_buf", 0, W),
                col("hbm_buf[1]", "hbm_buf", W, W),
                col("o_ref", "o_ref", 0, W),
            ],
            labels: whole,
        },
        "psum_scatter" => TraceLayout {
            shape: vec![2 * p, 1],
            columns: vec![
                col("hbm_buf[0].top", "hbm_buf", 0, 1),
                col("hbm_buf[0].bottom", "hbm_buf", 1, 1),
                col("hbm_buf[1].top", "hbm_buf", 2, 1),
                col("hbm_buf[1].bottom", "hbm_buf", 3, 1),
                col("accum", "accum", 0, 1),
                col("o_ref.top", "o_ref", 0, 1),
                col("o_ref.bottom", "o_ref", 1, 1),
            ],
            labels: Labels::Halves,
        },
        "ring_allreduce" => TraceLayout {
            shape: vec![p, 1],
            columns: (0..p)
                .map(|c| col(format!("scratch[c{c}]"), "scratch", c, 1))
                .chain([col("recv", "recv", 0, 1), col("acc", "acc", 0, 1)])
                .collect(),
            labels: Labels::Chunks,
        },
        _ => TraceLayout {
            // ring_allreduce_push
            shape: vec![p, 1],
            columns: [
                col("hbm_buf[0]", "hbm_buf", 0, 1),
                col("hbm_buf[1]", "hbm_buf", 1, 1),
            ]
            .into_iter()
            .chain((0..p).map(|c| col(format!("o_ref[c{c}]"), "o_ref", c, 1)))
            .chain([col("vmem_recv", "vmem_recv", 0, 1)])
            .collect(),
            labels: Labels::Chunks,
        },
    }
}

impl Labels {
    /// (block, part, offset in part) of input element `i`.
    fn label(&self, i: usize) -> (usize, usize, usize) {
        match self {
            Labels::Whole { elems } => (0, 0, i % elems),
            Labels::Halves => (i / 2, i % 2, 0),
            Labels::Chunks => (i, 0, 0),
        }
    }

    fn part_len(&self) -> usize {
        match self {
            Labels::Whole { elems } => *elems,
            _ => 1,
        }
    }

    /// The cell for a region's elements: the same labeled sum in every element, each
    /// term at the element's own offset, or `Mixed`.
    pub(crate) fn cell(&self, elems: &[Sym]) -> Cell {
        if elems.iter().all(Option::is_none) {
            return Cell::Never;
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

    /// Markdown notation of a non-empty sum whose terms are all of part `part`.
    pub(crate) fn notation(&self, terms: &[(usize, usize)], part: usize) -> String {
        let devices: Vec<String> = terms.iter().map(|t| t.0.to_string()).collect();
        match self {
            Labels::Whole { .. } => terms
                .iter()
                .map(|t| format!("x{}", t.0))
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
