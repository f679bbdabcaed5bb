//! Executing a job: its plan (program and schedule) on an executor, on the user's data
//! or on deterministic random data checked against the reference.

use super::Job;
use crate::array::HostArray;
use crate::budget::{Share, Work};
use crate::device_sim::ranks::RunReport;
use crate::device_sim::{check_inputs, count_wrong, Executor};
use crate::error::Result;
use crate::ir::{Program, Schedule};
use std::time::{Duration, Instant};

/// A job lowered and scheduled: what every executor runs.
#[derive(Clone, Debug)]
pub struct Plan {
    /// The traced program on every device of the mesh.
    pub program: Program,
    /// Its schedule of data ops.
    pub schedule: Schedule,
    /// Time spent lowering and scheduling.
    pub plan_time: Duration,
}

impl Plan {
    /// Runs the plan once on `exec`: `inputs[device][operand]` in, outputs out.
    pub fn execute(
        &self,
        exec: &mut dyn Executor,
        inputs: &[Vec<HostArray>],
    ) -> Result<Vec<Vec<HostArray>>> {
        check_inputs(&self.program, inputs)?;
        exec.check(&self.program)?;
        exec.execute(&self.program, &self.schedule, inputs)
    }
}

/// The outcome of [`Job::run`].
#[derive(Debug)]
pub struct Checked {
    /// Elements that differ from the reference, over all devices and outputs.
    pub wrong: usize,
    /// Elements compared.
    pub total: usize,
    /// Time spent executing the schedule (upload, run, readback).
    pub exec_time: Duration,
    /// Time spent lowering and scheduling.
    pub plan_time: Duration,
    /// The schedule's length in data ops.
    pub data_ops: usize,
    /// On ranks ([`crate::device_sim::ranks`]): the split and every rank's share of the run.
    pub ranks: Option<(crate::device_sim::ranks::Partition, RunReport)>,
}

/// Deterministic random inputs for every device and operand of `program` from `seed`
/// (see [`super::data::fill_words`]: any device, or part of one, is made alone with
/// the same bytes). A limit error when the host cannot hold them.
pub fn random_inputs(program: &Program, seed: u64) -> Result<Vec<Vec<HostArray>>> {
    super::data::random_inputs_of(program, seed, 0..program.devices)
}

/// Per device and operand: the data a process holds (the devices of other ranks empty).
pub type HeldData = Vec<Vec<HostArray>>;

impl Job {
    /// The deterministic random inputs (from `seed`) of the devices `held` of `plan`'s
    /// program and, with `reference`, their expected results; the other devices'
    /// entries are empty. An element-wise collective makes only the held devices'
    /// inputs and its reference a chunk of element positions at a time (the other
    /// devices' words made from the seed and dropped); any other kernel makes every
    /// input, since its reference needs them all, and keeps the held devices'.
    pub fn held_data(
        &self,
        program: &Program,
        seed: u64,
        held: std::ops::Range<usize>,
        reference: bool,
    ) -> Result<(HeldData, Option<HeldData>)> {
        if let Some(c) = self.elementwise() {
            let inputs = super::data::random_inputs_of(program, seed, held.clone())?;
            let dtype = program.layout.allocs[program.inputs[0]].dtype;
            let fetch = |d, range| Ok(super::data::random_words(seed, d, 0, dtype, range));
            let expected = match reference {
                true => Some(super::data::chunked_reference(
                    c.as_ref(),
                    &self.place,
                    program.devices,
                    &inputs,
                    held,
                    &fetch,
                )?),
                false => None,
            };
            return Ok((inputs, expected));
        }
        let inputs = random_inputs(program, seed)?;
        let expected = match reference {
            true => Some(self.reference(&inputs)?),
            false => None,
        };
        let keep = |mut v: HeldData| {
            for (d, x) in v.iter_mut().enumerate() {
                if !held.contains(&d) {
                    *x = Vec::new();
                }
            }
            v
        };
        Ok((keep(inputs), expected.map(keep)))
    }
}

impl Job {
    /// The work of a run on `exec`, for the budget.
    pub fn run_work(exec: &dyn Executor, model: bool, timeline: bool) -> Work {
        Work::Run {
            buffers: Job::buffers_on(exec),
            gpu: exec.is_gpu(),
            model,
            timeline,
            chunked: false,
        }
    }

    /// Runs the job once on `exec` on `inputs[device][operand]` (the kernel's input
    /// shapes) and returns `outputs[device][operand]`.
    pub fn execute(
        &self,
        exec: &mut dyn Executor,
        inputs: &[Vec<HostArray>],
    ) -> Result<Vec<Vec<HostArray>>> {
        self.fitted_plan(exec)?.execute(exec, inputs)
    }

    /// The plan of a run on `exec`, once the budget has passed it.
    fn fitted_plan(&self, exec: &dyn Executor) -> Result<Plan> {
        self.clone()
            .on_ranks(Share::of(exec))
            .ensure_fits(Job::run_work(exec, false, false))?;
        self.plan()
    }

    /// [`Job::execute`] on the devices this process holds: on ranks, `inputs` of its own
    /// devices (the others' empty) in, and its own devices' outputs out (the others'
    /// empty); without, every device's.
    pub fn execute_held(
        &self,
        exec: &mut dyn Executor,
        inputs: &[Vec<HostArray>],
    ) -> Result<Vec<Vec<HostArray>>> {
        let plan = self.fitted_plan(exec)?;
        if exec.ranks().is_none() {
            check_inputs(&plan.program, inputs)?;
        }
        exec.check(&plan.program)?;
        let mut run = exec.prepare(&plan.program, &plan.schedule)?;
        run.upload(inputs)?;
        run.run(1)?;
        run.read_held_outputs()
    }

    /// Runs the job on deterministic random data from `seed` and counts the elements
    /// that differ from the reference.
    pub fn run(&self, exec: &mut dyn Executor, seed: u64) -> Result<Checked> {
        self.clone()
            .on_ranks(Share::of(exec))
            .ensure_fits(Job::run_work(exec, false, false))?;
        let plan = self.plan()?;
        exec.check(&plan.program)?;
        let p = plan.program.devices;
        // On ranks, each makes, keeps and checks its own devices' inputs and expected
        // results (all of them where the reference needs every input at once).
        let held = match exec.ranks() {
            Some(r) => r.held(p)?,
            None => 0..p,
        };
        let tolerance = self.tolerance();
        let (wrong, total, exec_time) = match self.elementwise() {
            Some(c) => {
                let alloc = &plan.program.layout.allocs[plan.program.inputs[0]];
                let (n, dtype) = (alloc.numel(), alloc.dtype);
                let fetch = |d, range| Ok(super::data::random_words(seed, d, 0, dtype, range));
                // Only output 0 is checked (the reference's): the others (a kernel's
                // scratch passed out) need not be made.
                let mut run = exec.prepare_reading(&plan.program, &plan.schedule, &[0])?;
                let total = held.len() * n;
                // Where the run's memory is host memory, the inputs are made in place and
                // the results compared where they lie, against the reference a block at a
                // time from the inputs where the run kept them (else made again: the seed
                // makes any range alone): no copy in or out, and neither inputs nor
                // reference held twice or whole.
                // (Output 0 is what the reference gives, as `count_wrong` pairs them.)
                let host = plan.program.inputs.len() == 1
                    && held.clone().all(|d| {
                        run.input_words(d, 0).is_some_and(|w| w.len() == n)
                            && run.output_words(d, 0).is_some_and(|w| w.len() == n)
                    });
                if host {
                    for d in held.clone() {
                        let words = run.input_words(d, 0).expect("host memory (checked above)");
                        super::data::fill_words(seed, [d, 0], dtype, 0, words);
                    }
                    let t1 = Instant::now();
                    run.run(1)?;
                    let exec_time = t1.elapsed();
                    let (mut outs, mut ins) = (vec![&[][..]; p], vec![None; p]);
                    for d in held.clone() {
                        outs[d] = run.output_words(d, 0).expect("host memory (checked above)");
                        ins[d] = run.input_kept(d, 0);
                    }
                    let got = |d: usize| outs[d];
                    let kept = |d: usize| ins[d];
                    let wrong = super::data::count_wrong_chunked(
                        c.as_ref(),
                        &self.place,
                        p,
                        n,
                        dtype,
                        held.clone(),
                        &kept,
                        &fetch,
                        &got,
                        tolerance,
                    )?;
                    (wrong, total, exec_time)
                } else {
                    let inputs = super::data::random_inputs_of(&plan.program, seed, held.clone())?;
                    let t1 = Instant::now();
                    run.upload(&inputs)?;
                    run.run(1)?;
                    let got = run.read_held_outputs()?;
                    drop(run);
                    let exec_time = t1.elapsed();
                    let expected = super::data::chunked_reference(
                        c.as_ref(),
                        &self.place,
                        p,
                        &inputs,
                        held.clone(),
                        &fetch,
                    )?;
                    drop(inputs);
                    (count_wrong(&got, &expected, tolerance), total, exec_time)
                }
            }
            None => {
                let (inputs, expected) = self.held_data(&plan.program, seed, held.clone(), true)?;
                let expected = expected.expect("asked for");
                let t1 = Instant::now();
                let got = {
                    let mut run = exec.prepare(&plan.program, &plan.schedule)?;
                    run.upload(&inputs)?;
                    run.run(1)?;
                    run.read_held_outputs()?
                };
                drop(inputs);
                let exec_time = t1.elapsed();
                let total = expected.iter().flatten().map(HostArray::len).sum::<usize>();
                (count_wrong(&got, &expected, tolerance), total, exec_time)
            }
        };
        let (mut wrong, mut total) = (wrong as u64, total as u64);
        let mut ranks = None;
        if let Some(r) = exec.ranks() {
            wrong = r.sum(wrong)?;
            total = r.sum(total)?;
            ranks = Some((r.partition(p)?, r.last_run()));
        }
        Ok(Checked {
            wrong: wrong as usize,
            total: total as usize,
            exec_time,
            plan_time: plan.plan_time,
            data_ops: plan.schedule.ops.len(),
            ranks,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::collectives::Registry;
    use crate::mesh::{Mesh, Placement};

    /// What a rank makes for its devices (element-wise collectives: its own inputs and a
    /// reference in chunks; others: everything, then kept) is the held part of the whole.
    #[test]
    fn held_data_is_the_held_part_of_the_whole() {
        let reg = Registry::builtin();
        for name in ["psum", "ring_allreduce", "all_gather"] {
            for p in [4, 8] {
                let c = reg.by_name(name).unwrap();
                let job = Job::collective(c, Placement::whole(Mesh::new(p, "x").unwrap()));
                let plan = job.plan().unwrap();
                let inputs = random_inputs(&plan.program, 7).unwrap();
                let expected = job.reference(&inputs).unwrap();
                for held in [0..p / 2, p / 2..p, 1..p - 1, 0..p] {
                    let (i, e) = job.held_data(&plan.program, 7, held.clone(), true).unwrap();
                    let e = e.unwrap();
                    for d in 0..p {
                        if held.contains(&d) {
                            assert_eq!(i[d], inputs[d], "{name} P={p} device {d}");
                            assert_eq!(e[d], expected[d], "{name} P={p} device {d}");
                        } else {
                            assert!(i[d].is_empty() && e[d].is_empty());
                        }
                    }
                }
                let (_, none) = job.held_data(&plan.program, 7, 0..1, false).unwrap();
                assert!(none.is_none());
            }
        }
    }

    /// Where the CPU executor says it kept an input, the words there after the run
    /// are the input as written (the check reads them in place of making them again).
    #[test]
    fn an_input_the_run_kept_is_the_input_as_written() {
        use crate::device_sim::cpu::CpuExecutor;
        let reg = Registry::builtin();
        let mut kept = Vec::new();
        for c in reg.iter() {
            let job = Job::collective(c.clone(), Placement::whole(Mesh::new(4, "x").unwrap()));
            let Ok(plan) = job.plan() else { continue };
            let inputs = random_inputs(&plan.program, 5).unwrap();
            let exec = CpuExecutor::new();
            let mut run = exec.prepare(&plan.program, &plan.schedule).unwrap();
            run.upload(&inputs).unwrap();
            run.run(2).unwrap();
            for (d, dev) in inputs.iter().enumerate() {
                for (k, x) in dev.iter().enumerate() {
                    if let Some(w) = run.input_kept(d, k) {
                        assert!(w == &x.words[..], "{} device {d} input {k}", c.name());
                        kept.push(c.name());
                    }
                }
            }
            assert!(run.input_kept(0, plan.program.inputs.len()).is_none());
            assert!(run.input_kept(plan.program.devices, 0).is_none());
        }
        assert!(kept.contains(&"psum"), "{kept:?}");
    }
}
