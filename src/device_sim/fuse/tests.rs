//! What the fusion pass makes of small kernels: which ops join a region, what it reads
//! and writes once the dead writes are gone. (That fused runs equal unfused ones is
//! tests/fused.rs.)

use super::*;
use crate::array::DType;
use crate::kernel::{Args, Ctx, GridSpec, MemorySpace, PallasCall};
use crate::mesh::Mesh;
use crate::run::Job;

fn fused_of(
    spec: GridSpec,
    devices: usize,
    body: impl Fn(&Ctx, &Args) + Send + Sync + 'static,
) -> (Program, Fused) {
    let call = PallasCall::new("k", spec, body);
    let plan = Job::call(call, Mesh::new(devices, "x").unwrap())
        .plan()
        .unwrap();
    let f = fuse(&plan.program, &plan.schedule, &[], Keep::Outputs);
    (plan.program.clone(), f)
}

fn regions(f: &Fused) -> Vec<&Region> {
    f.steps
        .iter()
        .filter_map(|s| match s {
            Step::Region(r) => Some(&**r),
            Step::Op(_) => None,
        })
        .collect()
}

#[test]
fn a_chain_from_an_input_to_an_output_reads_and_writes_hbm_once() {
    // y = x * 2 + 1 with x and y whole-array VMEM operands: the copy in, the load, the
    // two ops, the store and the copy out are one region from HBM x to HBM y.
    let spec = GridSpec::new()
        .input("x", MemorySpace::Vmem, &[8, 128], DType::F32)
        .output("y", MemorySpace::Vmem, &[8, 128], DType::F32);
    let (prog, f) = fused_of(spec, 1, |pl, a| {
        let x = pl.load(a.r("x"));
        let y = &(&x * 2.0) + 1.0;
        pl.store(a.r("y"), &y);
    });
    assert_eq!(f.steps.len(), 1, "{f:#?}");
    let r = regions(&f)[0];
    assert_eq!(r.n, 8 * 128);
    let (x, y) = (prog.inputs[0], prog.outputs[0]);
    assert_eq!(r.inputs.len(), 1);
    assert_eq!(r.inputs[0].view.alloc(), x);
    assert_eq!(r.inputs[0].pattern, Pattern::Full);
    let outs: Vec<usize> = r.outputs.iter().map(|o| o.view.alloc()).collect();
    assert_eq!(outs, vec![y], "only the result reaches memory");
    // Two uniform constants, a load, two ops.
    assert_eq!(r.instrs.len(), 5, "{:?}", r.instrs);
    assert!(r.nslots <= 4, "registers share buffers: {}", r.nslots);
}

#[test]
fn a_value_read_by_a_reduction_is_written_and_the_chain_goes_on_after_it() {
    // s = sum(exp(x), 1); y = exp(x) / s[:, None]: the reduction needs exp(x) in
    // memory; the broadcast of s joins the second region as a pattern, not a copy.
    let spec = GridSpec::new()
        .input("x", MemorySpace::Vmem, &[16, 256], DType::F32)
        .output("y", MemorySpace::Vmem, &[16, 256], DType::F32);
    let (_, f) = fused_of(spec, 1, |pl, a| {
        let x = pl.load(a.r("x"));
        let e = pl.exp(&x);
        let s = e.sum(&[1]);
        let b = s.broadcast_in_dim(&[16, 256], &[0]);
        pl.store(a.r("y"), &(&e / &b));
    });
    let rs = regions(&f);
    assert_eq!(rs.len(), 2, "{f:#?}");
    assert!(
        matches!(f.steps[1], Step::Op(_)),
        "the reduction runs between them"
    );
    assert!(rs[1]
        .inputs
        .iter()
        .any(|i| matches!(i.pattern, Pattern::Broadcast { .. })));
}

#[test]
fn ops_of_different_devices_interleaved_in_the_schedule_fuse_per_device() {
    let spec = GridSpec::new()
        .input("x", MemorySpace::Vmem, &[4, 128], DType::F32)
        .output("y", MemorySpace::Vmem, &[4, 128], DType::F32);
    let (_, f) = fused_of(spec, 3, |pl, a| {
        let x = pl.load(a.r("x"));
        let y = pl.tanh(&(&x * 3.0));
        pl.store(a.r("y"), &y);
    });
    let rs = regions(&f);
    assert_eq!(rs.len(), 3, "one region per device: {f:#?}");
    let mut devices: Vec<usize> = rs.iter().map(|r| r.device).collect();
    devices.sort();
    assert_eq!(devices, vec![0, 1, 2]);
}

#[test]
fn cuts_keep_every_write_and_split_regions() {
    let spec = GridSpec::new()
        .input("x", MemorySpace::Vmem, &[4, 128], DType::F32)
        .output("y", MemorySpace::Vmem, &[4, 128], DType::F32);
    let call = PallasCall::new("k", spec, |pl: &Ctx, a: &Args| {
        let x = pl.load(a.r("x"));
        let y = &(&x * 2.0) + 1.0;
        pl.store(a.r("y"), &y);
    });
    let plan = Job::call(call, Mesh::new(1, "x").unwrap()).plan().unwrap();
    let ops = plan.schedule.ops.len();
    let whole = fuse(&plan.program, &plan.schedule, &[], Keep::Outputs);
    let cut = fuse(&plan.program, &plan.schedule, &[ops / 2], Keep::All);
    assert_eq!(cut.piece_ends.len(), 2);
    let writes = |f: &Fused| -> usize {
        f.steps
            .iter()
            .map(|s| match s {
                Step::Op(_) => 1,
                Step::Region(r) => r.outputs.len(),
            })
            .sum()
    };
    assert!(writes(&cut) > writes(&whole), "{cut:#?}");
}

#[test]
fn a_partial_overlap_in_place_is_not_fused() {
    // y[1:] = y[:-1] + 1 style: the destination overlaps the source shifted by one, so
    // a block could read what another block already wrote.
    let spec = GridSpec::new().output("y", MemorySpace::Vmem, &[2, 128], DType::F32);
    let (_, f) = fused_of(spec, 1, |pl, a| {
        pl.fill(a.r("y"), 1.0);
        let v = pl.read(a.r("y").at(0));
        let w = &v + 1.0;
        pl.store(a.r("y").at(1), &w);
        let u = pl.read(a.r("y").flat().slice(crate::kernel::ds(64, 128)));
        let z = &u * 2.0;
        pl.store(a.r("y").at(0), &z);
    });
    for r in regions(&f) {
        for o in &r.outputs {
            for i in &r.inputs {
                assert!(
                    !o.view.overlaps(&i.view) || (o.view == i.view && i.pattern == Pattern::Full),
                    "{r:#?}"
                );
            }
        }
    }
}

/// psum read through its output only (`run`'s check): every sum reads a device's input
/// where the ring's copies took it from, so no step touches the VMEM copies, the HBM
/// double buffer or the receive buffer; the accumulator is the output's memory. Read
/// through both outputs, the double buffer is written (its last values are results).
#[test]
fn psum_read_through_its_output_touches_its_input_and_output_only() {
    use crate::collectives::Registry;
    use crate::mesh::Placement;
    let psum = Registry::builtin().by_name("psum").unwrap();
    let joins = Joins {
        sums: true,
        overwrites: true,
        forward: true,
        reduces: true,
    };
    for devices in [2, 4, 5] {
        let job = Job::collective(
            psum.clone(),
            Placement::whole(Mesh::new(devices, "x").unwrap()),
        )
        .with_shape(&[64, 1024]);
        let plan = job.plan().unwrap();
        let (prog, sched) = (&plan.program, &plan.schedule);
        let (x, o) = (prog.inputs[0], prog.outputs[0]);
        let touched = |f: &Fused| {
            let ops = f.ops.as_deref().unwrap_or(&sched.ops);
            let mut t: Vec<usize> = f
                .steps
                .iter()
                .flat_map(|s| match s {
                    Step::Op(i) => ops[*i].reads().chain(ops[*i].writes()).collect::<Vec<_>>(),
                    Step::Region(r) => r.reads().chain(r.writes()).collect(),
                })
                .map(|v| v.alloc())
                .collect();
            t.sort_unstable();
            t.dedup();
            t
        };
        let one = fuse_reading(prog, sched, &[0], joins);
        assert_eq!(touched(&one), vec![x, o], "P={devices}: {one:#?}");
        // A fill and a sum of each device's input per device, each a region.
        assert_eq!(one.steps.len(), devices * (devices + 1), "P={devices}");
        let both = fuse_reading(prog, sched, &[0, 1], joins);
        assert!(touched(&both).contains(&prog.outputs[1]), "P={devices}");
    }
}

/// Fused in lanes of devices (each on its own, merged by where one pass makes each step),
/// every shipped collective and a kernel of chains, sums and DMAs fuse into the steps one
/// pass over every device makes, whatever the lanes.
#[test]
fn lanes_of_devices_fuse_as_one_pass_does() {
    use crate::collectives::Registry;
    use crate::mesh::Placement;
    let cpu = Joins {
        sums: true,
        overwrites: true,
        forward: true,
        reduces: true,
    };
    let check = |what: &str, prog: &Program, sched: &Schedule| {
        let memory = sched.memory(prog);
        let later = later::Later::of(prog, sched, true);
        for joins in [Joins::default(), cpu] {
            let f = lanes::Fusing {
                ops: &sched.ops,
                allocs: &memory.allocs,
                staging: Schedule::staging_alloc(prog),
                joins,
                later: &later,
                apart: &[],
                devices: prog.devices,
            };
            let mut one = Fused::default();
            fuse_in_pieces(&f, &[], Keep::Outputs, &mut one);
            assert!(!one.steps.is_empty(), "{what}");
            for lanes in 2..=prog.devices.min(4) {
                let split = lanes::fuse_in_lanes(&f, lanes);
                assert_eq!(split, one.steps, "{what}, {lanes} lanes, {joins:?}");
            }
        }
    };
    let mut checked = 0;
    for c in Registry::builtin().iter() {
        for devices in [3, 4] {
            let job = Job::collective(
                c.clone(),
                Placement::whole(Mesh::new(devices, "x").unwrap()),
            )
            .with_shape(&[64, 256]);
            // Collectives that need other shapes or meshes are not this test's matter.
            let Ok(plan) = job.plan() else { continue };
            check(c.name(), &plan.program, &plan.schedule);
            checked += 1;
        }
    }
    assert!(checked >= 16, "{checked} plans checked");
    // Each device: a chain into a scratch, a DMA of it to the right, a sum of what came
    // from the left into the output, more chains after (copies taken past DMAs). Device
    // 0 sends before it computes: its first region opens after the others' (`x` comes in
    // by a DMA, not as a VMEM operand's copy, which would open every device's first).
    let spec = GridSpec::new()
        .grid(&[3])
        .input("x", MemorySpace::Any, &[16, 128], DType::F32)
        .output("y", MemorySpace::Vmem, &[16, 128], DType::F32)
        .vmem("xv", &[16, 128], DType::F32)
        .vmem("s", &[16, 128], DType::F32)
        .vmem("r", &[16, 128], DType::F32)
        .dma_sem("send")
        .dma_sem("recv")
        .dma_sem("local");
    for devices in [2, 3, 5] {
        let call = PallasCall::new("chains", spec.clone(), |pl, a| {
            let me = pl.axis_index("x");
            let right = (me + 1) % pl.num_devices();
            let dma =
                pl.make_async_remote_copy(a.r("x"), a.r("r"), a.sem("send"), a.sem("recv"), right);
            if me == 0 {
                dma.start();
                dma.wait();
            }
            if pl.program_id(0) == 0 {
                pl.fill(a.r("y"), 0.0);
            }
            let copy_in = pl.make_async_copy(a.r("x"), a.r("xv"), a.sem("local"));
            copy_in.start();
            copy_in.wait();
            let x = pl.load(a.r("xv"));
            let t = &(&x * 2.0) + (pl.program_id(0) as f64);
            pl.store(a.r("s"), &pl.tanh(&t));
            if me != 0 {
                dma.start();
                dma.wait();
            }
            pl.accumulate(a.r("y"), a.r("r"), crate::kernel::ReduceOp::Sum);
            let y = pl.load(a.r("y"));
            pl.store(a.r("s"), &(&y * &x));
        });
        let plan = Job::call(call, Mesh::new(devices, "x").unwrap())
            .plan()
            .unwrap();
        check("chains", &plan.program, &plan.schedule);
    }
}
