//! TEMPORARY diagnostic (TPUSIM_DEBUG_BLOCKED=1 | whole): each blocked stretch's shape
//! and time per call; `whole` runs the stretches' steps whole (timing the same steps).

use super::blocked::Stretch;
use crate::device_sim::fuse::{Instr, Step};
use crate::ir::{DataOp, View};
use std::time::Duration;

/// None: off; Some(true): stretches run whole.
pub fn mode() -> Option<bool> {
    let v = std::env::var("TPUSIM_DEBUG_BLOCKED").ok()?;
    Some(v == "whole")
}

pub fn describe(
    s: &Stretch,
    steps: &[Step],
    ops: &[DataOp],
    kept: &[View],
    staged: &[View],
) -> String {
    let mut kinds = String::new();
    let mut views: Vec<View> = Vec::new();
    for st in &steps[s.steps.clone()] {
        let (k, vs): (String, Vec<View>) = match st {
            Step::Op(i) => match &ops[*i] {
                DataOp::Copy { src, dst } => ("C".into(), vec![*src, *dst]),
                DataOp::Fill { dst, .. } => ("F".into(), vec![*dst]),
                DataOp::Accumulate { src, dst, .. } => ("A".into(), vec![*src, *dst]),
                DataOp::Compute(_) => ("?".into(), vec![]),
            },
            Step::Region(r) => {
                let un: Vec<String> = r
                    .instrs
                    .iter()
                    .filter_map(|i| match i {
                        Instr::Unary(u, ..) => Some(format!("{u:?}")),
                        _ => None,
                    })
                    .collect();
                (
                    format!(
                        "R{}i{}o{}{}{}",
                        r.instrs.len(),
                        r.inputs.len(),
                        r.outputs.len(),
                        if un.is_empty() {
                            String::new()
                        } else {
                            format!("[{}]", un.join(","))
                        },
                        if super::blocked::accumulate_of(r).is_some() {
                            "=A"
                        } else {
                            ""
                        }
                    ),
                    r.reads().chain(r.writes()).collect(),
                )
            }
        };
        kinds.push_str(&k);
        kinds.push(' ');
        for v in vs {
            if !views.contains(&v) {
                views.push(v);
            }
        }
    }
    format!(
        "steps {:?} n {} block {} blocks {} distinct {} ({} MiB) kept {} staged {} :: {}",
        s.steps,
        s.n,
        s.block,
        s.n.div_ceil(s.block),
        views.len(),
        4 * s.n * views.len() >> 20,
        kept.len(),
        staged.len(),
        kinds
    )
}

pub fn report(
    name: &str,
    whole: bool,
    descs: &[String],
    times: &[(Duration, usize)],
    other: Duration,
) {
    let total: Duration = times.iter().map(|t| t.0).sum();
    eprintln!(
        "blocked-debug {name} ({}): {} stretches {:.3} s, other steps {:.3} s",
        if whole { "whole" } else { "blocked" },
        descs.len(),
        total.as_secs_f64(),
        other.as_secs_f64()
    );
    let mut order: Vec<usize> = (0..times.len()).collect();
    order.sort_by_key(|&k| std::cmp::Reverse(times[k].0));
    for &k in order.iter().take(8) {
        eprintln!(
            "  #{k} {:.4} s x{} :: {}",
            times[k].0.as_secs_f64(),
            times[k].1,
            descs[k]
        );
    }
}
