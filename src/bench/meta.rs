//! The self-describing result of a sweep: what ran, where, how, and its rows (what
//! `tpusim bench --json` writes and Python's `tpusim.bench` returns).

use super::{BenchConfig, BenchRow, ModelRow};
use crate::device_sim::Executor;
use crate::mesh::Mesh;
use serde_json::{json, Value};

/// tpusim's version, as result files name it.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

/// Where a sweep's rows came from.
pub enum Ran<'a> {
    /// Measured on an executor.
    Executor {
        /// The backend asked for (`auto`, `gpu`, `cpu`).
        backend: &'a str,
        /// The executor that ran (its description is the adapter's).
        exec: &'a dyn Executor,
        /// The rows.
        rows: &'a [BenchRow],
    },
    /// On a cost model's clock.
    Model {
        /// The model's name.
        name: &'a str,
        /// The rows.
        rows: &'a [ModelRow],
    },
}

/// What a sweep was asked to do beyond its [`BenchConfig`].
pub struct Asked<'a> {
    /// The command line (or call) that ran it.
    pub command: Vec<String>,
    /// When it started ([`super::utc_now`]).
    pub date: String,
    /// The mesh.
    pub mesh: &'a Mesh,
    /// The axis a ring collective ran over (`--axis`), if one was named.
    pub axis: Option<&'a str>,
    /// Devices one instance of the collective spans (a group along the axis).
    pub group_devices: Option<usize>,
    /// Kernel invocations per iteration (`--repeat`).
    pub repeat: usize,
}

/// The results of a sweep as one JSON object: tpusim's version, the command, the date
/// it started (UTC), devices, mesh, axis, dtype, schedule, iterations, sizes, the backend asked for,
/// the executor that ran (`gpu` or `cpu`) and its adapter, the timing (`measured`, or
/// `modeled` with the model and topology, and no iterations: the model's clock has no
/// noise), and the rows.
pub fn results(cfg: &BenchConfig, asked: &Asked, ran: &Ran) -> Value {
    let mut v = json!({
        "tpusim": VERSION,
        "command": asked.command,
        "date": asked.date,
        "devices": cfg.devices,
        "mesh": asked.mesh.axes().iter().map(|(n, s)| format!("{n}={s}")).collect::<Vec<_>>().join(","),
        "axis": asked.axis,
        "group_devices": asked.group_devices,
        "dtype": cfg.dtype.to_string(),
        "schedule": cfg.schedule.to_string(),
        "iters": cfg.iters,
        "warmup": cfg.warmup,
        "checks": cfg.checks,
        "repeat": asked.repeat,
        "min_bytes": cfg.min_bytes,
        "max_bytes": cfg.max_bytes,
        "factor": cfg.factor,
    });
    match ran {
        Ran::Executor {
            backend,
            exec,
            rows,
        } => {
            v["backend"] = json!(backend);
            v["executor"] = json!(if exec.is_gpu() { "gpu" } else { "cpu" });
            v["adapter"] = json!(exec.describe());
            v["timing"] = json!("measured");
            v["rows"] = rows.iter().map(BenchRow::json).collect();
        }
        Ran::Model { name, rows } => {
            v["backend"] = Value::Null;
            v["executor"] = Value::Null;
            v["model"] = json!(name);
            v["timing"] = json!("modeled");
            for k in ["iters", "warmup", "checks"] {
                v[k] = Value::Null;
            }
            if let Some(t) = rows.first() {
                v["topology"] = json!(t.topology);
            }
            v["rows"] = rows.iter().map(ModelRow::json).collect();
        }
    }
    v
}
