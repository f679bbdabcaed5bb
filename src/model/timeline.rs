//! Chrome trace event JSON (opens in Perfetto or chrome://tracing): one process per
//! device with tracks for grid points, its MXU, VPU and VMEM load/store slots, DMAs and waits; flow arrows
//! from a DMA's sender to its receiver. Times are the model's, in microseconds.

use super::{TimedEvent, Unit};
use serde_json::{json, Value};

const GRID: u32 = 0;
const MXU: u32 = 1;
const DMA_OUT: u32 = 2;
const DMA_IN: u32 = 3;
const WAIT: u32 = 4;
const INVOCATION: u32 = 5;
const VPU: u32 = 6;
const LOAD_STORE: u32 = 7;

fn us(s: f64) -> f64 {
    s * 1e6
}

/// The track of the link `a -> b` in the links process.
fn link_track(devices: usize, a: usize, b: usize) -> u32 {
    (a * devices + b) as u32
}

/// The trace for `events` of a kernel on `devices` devices: a process per device, and
/// one more (pid `devices`) with a track per link that carried DMA bytes.
pub fn chrome_trace(kernel: &str, devices: usize, events: &[TimedEvent]) -> Value {
    let mut out = Vec::new();
    out.push(
        json!({"ph": "M", "name": "process_name", "pid": devices, "args": {"name": "ICI links"}}),
    );
    let mut links: Vec<(usize, usize)> = events
        .iter()
        .filter_map(|e| match e {
            TimedEvent::Dma { route, .. } => Some(route.windows(2).map(|w| (w[0], w[1]))),
            _ => None,
        })
        .flatten()
        .collect();
    let sequence = events
        .iter()
        .any(|e| matches!(e, TimedEvent::Invocation { .. }));
    links.sort_unstable();
    links.dedup();
    for (a, b) in links {
        out.push(json!({"ph": "M", "name": "thread_name", "pid": devices, "tid": link_track(devices, a, b), "args": {"name": format!("link {a}->{b}")}}));
    }
    for d in 0..devices {
        out.push(json!({"ph": "M", "name": "process_name", "pid": d, "args": {"name": format!("device {d}")}}));
        let tracks = [
            (GRID, "grid"),
            (MXU, "MXU"),
            (VPU, "VPU"),
            (LOAD_STORE, "VMEM ld/st"),
            (DMA_OUT, "DMA out"),
            (DMA_IN, "DMA in"),
            (WAIT, "waits"),
            (INVOCATION, "invocations"),
        ];
        // The invocations track only for a sequence of kernel invocations.
        let shown = if sequence {
            tracks.len()
        } else {
            tracks.len() - 1
        };
        for (order, &(tid, name)) in tracks[..shown].iter().enumerate() {
            out.push(json!({"ph": "M", "name": "thread_name", "pid": d, "tid": tid, "args": {"name": name}}));
            out.push(json!({"ph": "M", "name": "thread_sort_index", "pid": d, "tid": tid, "args": {"sort_index": order}}));
        }
    }
    let slice = |pid: usize, tid: u32, name: String, start: f64, end: f64, args: Value| json!({"ph": "X", "pid": pid, "tid": tid, "name": name, "ts": us(start), "dur": us(end - start), "args": args});
    for e in events {
        match e {
            TimedEvent::Grid {
                device,
                invocation,
                grid,
                start,
                end,
            } => out.push(slice(
                *device,
                GRID,
                match invocation {
                    Some(k) => format!("{kernel} #{k} {grid:?}"),
                    None => format!("{kernel} {grid:?}"),
                },
                *start,
                *end,
                json!({}),
            )),
            TimedEvent::Invocation {
                device,
                invocation,
                name,
                start,
                end,
            } => out.push(slice(
                *device,
                INVOCATION,
                format!("#{invocation} {name}"),
                *start,
                *end,
                json!({}),
            )),
            TimedEvent::Compute {
                device,
                op,
                unit,
                macs,
                start,
                end,
            } => out.push(slice(
                *device,
                match unit {
                    Unit::Mxu => MXU,
                    Unit::Vpu => VPU,
                    Unit::LoadStore => LOAD_STORE,
                },
                op.to_string(),
                *start,
                *end,
                if *macs > 0 {
                    json!({"macs": macs})
                } else {
                    json!({})
                },
            )),
            TimedEvent::Wait {
                device,
                semaphore,
                start,
                end,
            } => out.push(slice(
                *device,
                WAIT,
                format!("wait {semaphore}"),
                *start,
                *end,
                json!({}),
            )),
            TimedEvent::Dma {
                id,
                from,
                to,
                bytes,
                start,
                sent,
                end,
                route,
            } => {
                let name = format!("DMA {from}->{to} ({bytes} B)");
                // Each link it crossed, on the links' own tracks, while its bytes flowed.
                for w in route.windows(2) {
                    out.push(slice(
                        devices,
                        link_track(devices, w[0], w[1]),
                        name.clone(),
                        *start,
                        *sent,
                        json!({"bytes": bytes}),
                    ));
                }
                // The sender's slice ends at the send completion (its source is free).
                out.push(slice(
                    *from,
                    DMA_OUT,
                    name.clone(),
                    *start,
                    *sent,
                    json!({"bytes": bytes, "received": us(*end), "route": route}),
                ));
                if from != to {
                    // The arrival, as a short slice the flow arrow can land on.
                    out.push(slice(
                        *to,
                        DMA_IN,
                        name.clone(),
                        *end,
                        *end,
                        json!({"bytes": bytes}),
                    ));
                    out.push(json!({"ph": "s", "id": id, "pid": from, "tid": DMA_OUT, "ts": us(*start), "name": "dma", "cat": "dma"}));
                    out.push(json!({"ph": "f", "bp": "e", "id": id, "pid": to, "tid": DMA_IN, "ts": us(*end), "name": "dma", "cat": "dma"}));
                }
            }
        }
    }
    json!({"traceEvents": out, "displayTimeUnit": "ns"})
}
