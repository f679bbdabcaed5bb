//! Results as JSON values: the verifier's report, step tables, modeled runs and bench
//! rows. The Python side turns them into objects (`tpusim/results.py`).

use serde_json::{json, Value};
use tpusim::sched::ScheduleSpec;
use tpusim::error::{Blocked, ExitProblem, KernelError, Site};
use tpusim::model::{bus_factor, chrome_trace, ideal_seconds, CostModel, TimedRun, Traffic};
use tpusim::trace::Table;
use tpusim::verify::{Problem, RaceSide, Report};
use tpusim::Error;

/// A site: device, grid point, API call and `file:line`.
pub fn site(s: &Site) -> Value {
    json!({"device": s.device, "grid": s.grid, "op": s.op, "location": s.location})
}

fn side(s: &RaceSide) -> Value {
    json!({"actor": s.actor, "access": s.access, "site": s.site.as_ref().map(site)})
}

/// The name of a kernel error's kind, as the core's message starts (`device id out of
/// range`, `out of bounds`, `shape mismatch`, `HBM used in compute`, `misuse`, …).
pub fn kernel_kind(k: &KernelError) -> String {
    let msg = Error::Kernel(k.clone()).to_string();
    msg.split_once(": ")
        .map_or(msg.clone(), |(kind, _)| kind.to_string())
}

/// A trace-time kernel error.
pub fn kernel_error(k: &KernelError) -> Value {
    json!({"kind": kernel_kind(k), "site": site(&k.site), "detail": k.detail})
}

/// A device blocked in a deadlock.
pub fn blocked(b: &Blocked) -> Value {
    json!({"site": site(&b.site), "semaphore": b.semaphore, "value": b.value,
           "awaited": b.awaited, "exact": b.exact})
}

/// A leftover at kernel exit.
pub fn exit_problem(p: &ExitProblem) -> Value {
    match p {
        ExitProblem::SemaphoreNotZero {
            device,
            semaphore,
            value,
            last_signal,
        } => json!({"kind": "semaphore not zero", "device": device, "semaphore": semaphore,
                    "value": value, "last_signal": last_signal.as_ref().map(site)}),
        ExitProblem::DmaNotWaited {
            site: s,
            semaphore,
            bytes,
        } => json!({"kind": "DMA never waited", "site": site(s), "semaphore": semaphore,
                    "bytes": bytes}),
        other => json!({"kind": "exit", "message": format!("{other:?}")}),
    }
}

/// Every site a problem names, in the order its message does.
fn sites(p: &Problem) -> Vec<Value> {
    match p {
        Problem::Race(r) => {
            let mut v: Vec<Value> = [&r.first, &r.second]
                .iter()
                .filter_map(|s| s.site.as_ref().map(site))
                .collect();
            if let Some(sh) = &r.shared {
                v.push(site(&sh.wait));
                v.extend(sh.instead.site.as_ref().map(site));
            }
            v
        }
        Problem::Early(e) => std::iter::once(site(&e.sender))
            .chain(e.entry.as_ref().map(site))
            .collect(),
        Problem::Deadlock(b) => b.iter().map(|b| site(&b.site)).collect(),
        Problem::Exit(ExitProblem::SemaphoreNotZero { last_signal, .. }) => {
            last_signal.as_ref().map(site).into_iter().collect()
        }
        Problem::Exit(ExitProblem::DmaNotWaited { site: s, .. }) => vec![site(s)],
        Problem::Exit(_) => Vec::new(),
        Problem::Kernel(k) => vec![site(&k.site)],
    }
}

/// The details of a problem as data.
fn details(p: &Problem) -> Value {
    match p {
        Problem::Race(r) => json!({
            "alloc": r.alloc, "device": r.device, "bytes": [r.bytes.0, r.bytes.1],
            "first": side(&r.first), "second": side(&r.second),
            "shared_semaphore": r.shared.as_ref().map(|s| json!({
                "semaphore": s.semaphore, "device": s.device, "wait": site(&s.wait),
                "instead": side(&s.instead)})),
        }),
        Problem::Early(e) => json!({"what": e.what, "sender": site(&e.sender), "to": e.to,
                                    "entry": e.entry.as_ref().map(site)}),
        Problem::Deadlock(b) => json!({"blocked": b.iter().map(blocked).collect::<Vec<_>>()}),
        Problem::Exit(e) => exit_problem(e),
        Problem::Kernel(k) => kernel_error(k),
    }
}

/// The verifier's report.
pub fn report(r: &Report) -> Value {
    json!({
        "schedules": r.schedules,
        "findings": r.findings.iter().map(|f| json!({
            "kind": f.problem.kind().to_string(),
            "message": f.problem.to_string(),
            "schedule": f.schedule.map(|s: ScheduleSpec| s.to_string()),
            "schedules": f.schedules,
            "sites": sites(&f.problem),
            "details": details(&f.problem),
        })).collect::<Vec<_>>(),
    })
}

/// A step table: its JSON form plus every cell in the seeds' notation and the markdown.
pub fn table(t: &Table) -> Value {
    let mut v = t.json();
    v["notation"] = json!(t
        .rows
        .iter()
        .map(|r| r
            .cells
            .iter()
            .map(|d| d.iter().map(|c| t.notation(c)).collect::<Vec<_>>())
            .collect::<Vec<_>>())
        .collect::<Vec<_>>());
    v["markdown"] = json!(t.markdown());
    v
}

/// Parses a traffic class name (`all_reduce`, `all_gather`, `reduce_scatter`,
/// `send_recv`, `broadcast`).
pub fn traffic(s: &str) -> tpusim::Result<Traffic> {
    Ok(match s {
        "all_reduce" => Traffic::AllReduce,
        "all_gather" => Traffic::AllGather,
        "reduce_scatter" => Traffic::ReduceScatter,
        "send_recv" => Traffic::SendRecv,
        "broadcast" => Traffic::Broadcast,
        _ => {
            return Err(Error::bad_input(format!(
                "unknown traffic `{s}` (expected all_reduce, all_gather, reduce_scatter, send_recv or broadcast)"
            )))
        }
    })
}

/// A modeled run: seconds, and with a traffic class nccl-tests' sizes and bandwidths;
/// the Chrome trace when asked for.
pub fn timed(
    name: &str,
    devices: usize,
    m: &CostModel,
    run: &TimedRun,
    traffic: Option<(Traffic, u64)>,
    timeline: bool,
) -> Value {
    let mut v = json!({
        "model": m.name,
        "seconds": run.seconds,
        "events": run.events.len(),
    });
    if let Some((t, shard_bytes)) = traffic {
        let size = t.size(devices, shard_bytes) as f64;
        let algbw = size / run.seconds.max(f64::MIN_POSITIVE);
        v["size"] = json!(size);
        v["algbw"] = json!(algbw);
        v["busbw"] = json!(algbw * bus_factor(t, devices));
        v["ideal_seconds"] = json!(ideal_seconds(t, devices, size, m.link_bw));
    }
    if timeline {
        v["timeline"] = chrome_trace(name, devices, &run.events);
    }
    v
}
