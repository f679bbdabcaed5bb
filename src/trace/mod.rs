//! Step tables: what every device holds after every grid point, in the seeds' notation
//! (`tpusim trace`), and after every step mark inside one. The symbolic executor runs the
//! lockstep schedule, in lockstep at step marks too; a collective's
//! [`TraceLayout`] names the buffer regions (columns) and how input elements are labeled.

mod layouts;
mod symbolic;

pub use layouts::{derived_layout, Column, Labels, TraceLayout};
pub use symbolic::{Snapshot, Sym, Symbolic, Term, COMPUTED, CONST};

use crate::error::{Error, Result};
use crate::ir::Program;
use crate::sched::policies::Lockstep;
use crate::sched::schedule_observed;
use serde_json::{json, Value};

/// One cell: a region's value on one device.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Cell {
    /// Never written.
    Never,
    /// The sum of these input contributions `(device, block)`, in accumulation order
    /// (empty: zero), all of the same part of their block (0: top or whole, 1: bottom).
    Sum(Vec<(usize, usize)>, usize),
    /// Computed (a compute op's result) from these input blocks `(device, block)`, in
    /// the order the computation read them (empty: from no input, e.g. the weights).
    Computed(Vec<(usize, usize)>),
    /// The region's elements differ, or hold something else (a constant fill).
    Mixed,
}

/// One row: the state after grid point `after` (`None`: before the grid), or after
/// every device passed the step mark `step` inside that grid point; in a sequence of
/// kernel invocations, of invocation `invocation` (rows come per invocation, its columns
/// showing that invocation's buffers).
#[derive(Clone, Debug)]
pub struct Row {
    /// The kernel invocation, in a sequence of them.
    pub invocation: Option<usize>,
    /// Grid coordinates, or `None` for the initial state.
    pub after: Option<Vec<usize>>,
    /// The step mark's label (`Ctx::trace_step`), for rows inside a grid point.
    pub step: Option<String>,
    /// `cells[device][column]`.
    pub cells: Vec<Vec<Cell>>,
}

/// A step table.
#[derive(Clone, Debug)]
pub struct Table {
    /// Collective name.
    pub collective: String,
    /// Number of devices.
    pub devices: usize,
    /// Column names (the kernel's ref names).
    pub columns: Vec<String>,
    /// Markdown prefix of each column's cells (`x`, `T`, `B`, `C`).
    labels: Labels,
    /// Rows in order.
    pub rows: Vec<Row>,
}

/// The step table of `program` (kernel `name`) with the columns of `layout`: the
/// lockstep schedule run by the symbolic executor.
pub fn trace_program(name: &str, program: &Program, layout: &TraceLayout) -> Result<Table> {
    let mut sym = Symbolic::new(program);
    let mut policy = Lockstep::at_marks(program);
    schedule_observed(program, &mut policy, &mut sym)?;
    sym.flush();
    build(name, program, layout, &sym.rows)
}

/// [`trace_program`] of a kernel traced while it runs ([`crate::steer`]): the
/// lockstep schedule it traces under is the one the table shows; `layout` gives the
/// columns of the program it comes to.
pub fn trace_steered(
    name: &str,
    steering: &dyn crate::steer::Steering,
    mesh: &crate::Mesh,
    layout: impl Fn(&Program) -> TraceLayout,
) -> Result<Table> {
    use crate::steer::{steer, Attempt};
    let (program, rows) = steer(steering, mesh, |p, resume| {
        let mut sym = Symbolic::new(p);
        let mut policy = Lockstep::at_marks(p);
        let mut d = crate::sched::Split {
            policy: &mut policy,
            observer: &mut sym,
        };
        let steps = crate::sched::run_steps(p, &mut d, resume)?;
        if steps.paused.is_some() {
            return Ok(Attempt::Paused(steps));
        }
        sym.flush();
        Ok(Attempt::Done(sym.rows))
    })?;
    build(name, &program, &layout(&program), &rows)
}

fn build(name: &str, program: &Program, layout: &TraceLayout, rows: &[Snapshot]) -> Result<Table> {
    let n = program.layout.allocs.len();
    let allocs = &program.layout.allocs;
    // A column is the allocation of its name that is the row's invocation's own (in a
    // sequence each has its own), else the first of that name (a fed input).
    let alloc_of = |col: &Column, k: usize| {
        let inv = &program.invocations[k];
        let own = inv.first_alloc..program.invocations.get(k + 1).map_or(n, |i| i.first_alloc);
        let a = own
            .clone()
            .find(|&a| allocs[a].name == col.alloc)
            .or_else(|| allocs.iter().position(|a| a.name == col.alloc))
            .ok_or_else(|| {
                let known: Vec<&str> = allocs[own].iter().map(|a| a.name.as_str()).collect();
                Error::bad_input(format!(
                    "the step-table layout of `{name}` names an allocation `{}` the kernel does not have (it has: {})",
                    col.alloc,
                    known.join(", ")
                ))
            })?;
        if col.offset + col.len > allocs[a].numel() {
            return Err(Error::bad_input(format!(
                "the step-table column `{}` of `{name}` reaches past the end of `{}`",
                col.name, col.alloc
            )));
        }
        Ok(a)
    };
    let per_invocation: Vec<Vec<usize>> = (0..program.invocations.len())
        .map(|k| layout.columns.iter().map(|c| alloc_of(c, k)).collect())
        .collect::<Result<_>>()?;
    let last = program.steps().saturating_sub(1);
    let rows = rows
        .iter()
        .map(|(g, step, mem)| {
            // A mark row belongs to the grid point in progress.
            let at = g.map(|g| if step.is_some() { g.min(last) } else { g });
            let k = at.map_or(0, |g| program.invocation_of_step(g));
            Row {
                invocation: program.is_sequence().then_some(k),
                after: at.map(|g| program.grid_point(g)),
                step: step.clone(),
                cells: (0..program.devices)
                    .map(|d| {
                        layout
                            .columns
                            .iter()
                            .zip(&per_invocation[k])
                            .map(|(col, &a)| {
                                layout
                                    .labels
                                    .cell(&mem[d * n + a][col.offset..col.offset + col.len])
                            })
                            .collect()
                    })
                    .collect(),
            }
        })
        .collect();
    Ok(Table {
        collective: name.to_string(),
        devices: program.devices,
        columns: layout.columns.iter().map(|c| c.name.clone()).collect(),
        labels: layout.labels,
        rows,
    })
}

impl Table {
    /// The seeds' notation for one cell.
    pub fn notation(&self, c: &Cell) -> String {
        match c {
            Cell::Never => "-".into(),
            Cell::Mixed => "mixed".into(),
            Cell::Sum(t, _) if t.is_empty() => "0".into(),
            Cell::Sum(t, part) => self.labels.notation(t, *part),
            Cell::Computed(b) => self.labels.computed_notation(b),
        }
    }

    /// A markdown table: one row per grid point (`#k [g]`: grid point g of invocation k,
    /// in a sequence), one column per device, each cell the tuple of the regions' values.
    pub fn markdown(&self) -> String {
        let mut s = format!(
            "{} on {} devices: each cell is ({})\n\n| after |",
            self.collective,
            self.devices,
            self.columns.join(", ")
        );
        for d in 0..self.devices {
            s += &format!(" D{d} |");
        }
        s += "\n|---|";
        s += &"---|".repeat(self.devices);
        s += "\n";
        for r in &self.rows {
            let mut after = match (&r.after, &r.step) {
                (_, Some(step)) => step.clone(),
                (None, None) => "initial".to_string(),
                (Some(g), None) => format!("{g:?}"),
            };
            if let (Some(k), Some(_)) = (r.invocation, &r.after) {
                after = format!("#{k} {after}");
            }
            s += &format!("| {after} |");
            for cells in &r.cells {
                let vals: Vec<String> = cells.iter().map(|c| self.notation(c)).collect();
                s += &format!(" `({})` |", vals.join(", "));
            }
            s += "\n";
        }
        s
    }

    /// The JSON form: `{"collective", "devices", "columns", "rows": [{"after", "cells"}]}`.
    pub fn json(&self) -> Value {
        let cell = |c: &Cell| match c {
            Cell::Never => Value::Null,
            Cell::Mixed => json!("mixed"),
            Cell::Sum(t, _) => json!(t.iter().map(|(d, b)| json!([d, b])).collect::<Vec<_>>()),
            Cell::Computed(b) => {
                json!({"f": b.iter().map(|(d, b)| json!([d, b])).collect::<Vec<_>>()})
            }
        };
        let row = |r: &Row| {
            let mut v = json!({
                "after": r.after,
                "step": r.step,
                "cells": r.cells.iter().map(|d| d.iter().map(cell).collect::<Vec<_>>()).collect::<Vec<_>>(),
            });
            if let Some(k) = r.invocation {
                v["invocation"] = json!(k);
            }
            v
        };
        json!({
            "collective": self.collective,
            "devices": self.devices,
            "columns": self.columns,
            "rows": self.rows.iter().map(row).collect::<Vec<_>>(),
        })
    }
}

/// The table as data: its JSON form ([`Table::json`]) with every cell in the seeds'
/// notation (`notation[row][device][column]`) and the markdown.
impl serde::Serialize for Table {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        let mut v = self.json();
        v["notation"] = json!(self
            .rows
            .iter()
            .map(|r| r
                .cells
                .iter()
                .map(|d| d.iter().map(|c| self.notation(c)).collect::<Vec<_>>())
                .collect::<Vec<_>>())
            .collect::<Vec<_>>());
        v["markdown"] = json!(self.markdown());
        v.serialize(s)
    }
}
