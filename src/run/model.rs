//! A job on the cost model's clock: the modeled time, the timeline, nccl-tests' figures
//! (size, algbw, busbw) with the ideal ring bound they are compared with, and how much
//! of the communication the compute hid.

use super::Job;
use crate::budget::Work;
use crate::error::Result;
use crate::model::{
    bus_factor, ideal_seconds, CostModel, Overlap, Timed, TimedEvent, Topology, Traffic,
};

/// nccl-tests' figures of a modeled run.
#[derive(Clone, Debug, PartialEq)]
pub struct Nccl {
    /// The traffic class the figures follow.
    pub traffic: Traffic,
    /// Devices one instance spans (the bus factor's P).
    pub devices: usize,
    /// nccl-tests' size in bytes.
    pub size: u64,
    /// size / time, bytes per second.
    pub algbw: f64,
    /// algbw times the bus factor.
    pub busbw: f64,
    /// The bandwidth bound of a ring on one link direction, seconds (for every
    /// invocation of a sequence).
    pub ideal_seconds: f64,
}

/// The outcome of [`Job::model`].
#[derive(Clone, Debug)]
pub struct Modeled {
    /// The model it ran on (its topology filled in).
    pub model: CostModel,
    /// The wiring the run used.
    pub topology: Topology,
    /// Devices of the whole mesh.
    pub devices: usize,
    /// Modeled seconds from the first op to the last completion.
    pub seconds: f64,
    /// nccl-tests' figures, for collectives (and kernels given a traffic class).
    pub nccl: Option<Nccl>,
    /// Compute and communication time, and how much of one ran under the other.
    pub overlap: Overlap,
    /// The timeline.
    pub events: Vec<TimedEvent>,
}

impl Modeled {
    /// The ideal ring bound as a fraction of the modeled time.
    pub fn ideal_fraction(&self) -> Option<f64> {
        let n = self.nccl.as_ref()?;
        (self.seconds > 0.0).then(|| n.ideal_seconds / self.seconds)
    }

    /// FLOP/s of one device's matrix units over the run (2 per multiply-add, every
    /// device's averaged), and that as a fraction of the bf16 peak (`None`: no matmul).
    pub fn tflops(&self) -> Option<(f64, f64)> {
        let macs = self.overlap.macs;
        (macs > 0 && self.seconds > 0.0).then(|| {
            let flops = 2.0 * macs as f64 / self.devices.max(1) as f64 / self.seconds;
            (flops / 1e12, flops / self.model.mxu_flops)
        })
    }

    /// The compute line people read under the modeled time, where the kernel computes:
    /// `compute: MXU 1.000 us, VPU 0.200 us per device, 150.0 TFLOP/s per chip (76% of
    /// the 197 TFLOP/s bf16 peak); communication hidden: 80% (…)`. One text for the
    /// command line and Python.
    pub fn compute_line(&self) -> Option<String> {
        let o = &self.overlap;
        if o.mxu_seconds + o.vpu_seconds <= 0.0 {
            return None;
        }
        let per = |s: f64| s / self.devices.max(1) as f64 * 1e6;
        let flops = match self.tflops() {
            Some((t, peak)) => format!(
                ", {t:.1} TFLOP/s per chip ({:.0}% of the {:.0} TFLOP/s bf16 peak)",
                100.0 * peak,
                self.model.mxu_flops / 1e12
            ),
            None => String::new(),
        };
        let hidden = match o.hidden() {
            Some(h) => format!(
                "; communication hidden: {:.0}% ({:.3} of {:.3} us per device under compute)",
                100.0 * h,
                per(o.hidden_seconds),
                per(o.comm_seconds)
            ),
            None => String::new(),
        };
        Some(format!(
            "compute: MXU {:.3} us, VPU {:.3} us per device{flops}{hidden}",
            per(o.mxu_seconds),
            per(o.vpu_seconds)
        ))
    }

    /// The timeline as Chrome trace JSON (Perfetto), for kernel `name`.
    pub fn chrome_trace(&self, name: &str) -> serde_json::Value {
        crate::model::chrome_trace(name, self.devices, &self.events)
    }
}

/// A modeled run as data: the model, the topology, the modeled seconds, the number of
/// timeline events and, with a traffic class, nccl-tests' size, algbw and busbw
/// (bytes/s) and the ideal ring bound (the timeline itself: [`Modeled::chrome_trace`]).
impl serde::Serialize for Modeled {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        let mut v = serde_json::json!({
            "model": self.model.name,
            "topology": self.topology.to_string(),
            "seconds": self.seconds,
            "events": self.events.len(),
            "overlap": self.overlap,
            "hidden": self.overlap.hidden(),
        });
        if let Some((tflops, peak)) = self.tflops() {
            v["tflops"] = serde_json::json!(tflops);
            v["mxu_peak_fraction"] = serde_json::json!(peak);
        }
        if let Some(n) = &self.nccl {
            v["size"] = serde_json::json!(n.size);
            v["algbw"] = serde_json::json!(n.algbw);
            v["busbw"] = serde_json::json!(n.busbw);
            v["ideal_seconds"] = serde_json::json!(n.ideal_seconds);
        }
        v.serialize(s)
    }
}

impl Job {
    /// The job on the cost model `m`'s clock. A multi-axis mesh is wired as the torus of
    /// its shape unless `m` names a topology. `traffic` gives nccl-tests' figures for a
    /// kernel of the user's own (a collective has its own class).
    pub fn model(&self, m: &CostModel, traffic: Option<Traffic>) -> Result<Modeled> {
        self.ensure_fits(Work::Model { timeline: true })?;
        let mut m = m.clone();
        let mesh = &self.place().mesh;
        if m.topology.is_none() && mesh.axes().len() > 1 {
            m.topology = Some(Topology::of_mesh(mesh));
        }
        let (_, run) = match self.steering()? {
            // Traced while it runs on the model's clock: the order it times is the one
            // its reads see.
            Some(s) => crate::steer::steer(&**s, &self.place().ring, |p, resume| {
                m.check_vmem(p)?;
                Timed::new(p, m.clone())?.run_steps(resume)
            })?,
            None => {
                let program = self.lower()?;
                m.check_vmem(&program)?;
                let run = Timed::new(&program, m.clone())?.run()?;
                (program, run)
            }
        };
        crate::model::check_modeled(&m, &format!("`{}`", self.name()), run.seconds)?;
        let traffic = traffic.or_else(|| self.collective_of().map(|c| c.traffic()));
        let nccl = traffic.map(|t| {
            // Sizes and bus factors are per collective: per group on a multi-axis mesh.
            let n = self.place().devices();
            let shard_bytes = match self.collective_of() {
                Some(c) => c.shard_bytes(self.shape(), self.dtype()),
                None => (self.shape().iter().product::<usize>() * self.dtype().size()) as u64,
            };
            let size = t.size(n, shard_bytes);
            // A sequence (`--repeat K`) moves the collective's size K times.
            let k = self.invocations() as f64;
            let algbw = k * size as f64 / run.seconds.max(f64::MIN_POSITIVE);
            Nccl {
                traffic: t,
                devices: n,
                size,
                algbw,
                busbw: algbw * bus_factor(t, n),
                ideal_seconds: k * ideal_seconds(t, n, size as f64, m.link_bw),
            }
        });
        Ok(Modeled {
            overlap: Overlap::of(mesh.size(), &run.events),
            topology: m.topology_for(mesh.size()),
            model: m,
            devices: mesh.size(),
            seconds: run.seconds,
            nccl,
            events: run.events,
        })
    }
}
