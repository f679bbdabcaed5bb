//! A first run's fresh buffers (`device_sim::cpu::prefault`): a thread asks the kernel
//! for the pages the run writes while it runs, and for no others: pages that a zero
//! fill leaves untouched, or that nothing writes, stay out of memory; the results are
//! the unfused executor's.

use tpusim::device_sim::cpu::words::PAGE;
use tpusim::device_sim::cpu::CpuExecutor;
use tpusim::device_sim::Executor;
use tpusim::ir::Uninit;
use tpusim::kernel::{ds, GridSpec, MemorySpace, PallasCall};
use tpusim::run::{random_inputs, Job};
use tpusim::Mesh;
use tpusim::{DType, HostArray};

/// Rows of each output (512 f32 a row: 8 MiB, fresh pages of their own).
const ROWS: usize = 4096;
/// Rows written of each.
const WRITTEN: usize = 64;

/// `a` written in its first rows alone (the rest never written: zero); `b` filled with
/// zeros whole, then its first rows landed in from `x` by a DMA.
fn written_in_part() -> PallasCall {
    let spec = GridSpec::new()
        .input("x", MemorySpace::Any, &[WRITTEN, 512], DType::F32)
        .output("a", MemorySpace::Vmem, &[ROWS, 512], DType::F32)
        .output("b", MemorySpace::Vmem, &[ROWS, 512], DType::F32)
        .dma_sem("sem");
    PallasCall::new("written_in_part", spec, |pl, r| {
        let (x, a, b) = (r.r("x"), r.r("a"), r.r("b"));
        pl.fill(a.slice(ds(0, WRITTEN as i64)), 3.0);
        pl.fill(b, 0.0);
        let land = pl.make_async_copy(x, b.slice(ds(0, WRITTEN as i64)), r.sem("sem"));
        land.start();
        land.wait();
    })
}

/// Which pages of `words` (page-aligned) are in memory.
#[cfg(target_os = "linux")]
fn resident(words: &[u32]) -> Vec<usize> {
    let bytes = std::mem::size_of_val(words);
    assert_eq!(words.as_ptr() as usize % PAGE, 0);
    let mut v = vec![0u8; bytes.div_ceil(PAGE)];
    // SAFETY: the run's own buffer, alive while borrowed; a byte per page.
    let r = unsafe { libc::mincore(words.as_ptr() as *mut _, bytes, v.as_mut_ptr()) };
    assert_eq!(r, 0);
    (0..v.len()).filter(|&p| v[p] & 1 == 1).collect()
}

#[cfg(target_os = "linux")]
#[test]
fn a_first_run_brings_in_the_pages_it_writes_and_leaves_the_others_out() {
    let mesh = Mesh::new(2, "x").unwrap();
    let plan = Job::call(written_in_part(), mesh)
        .with_uninit(Uninit::Zero)
        .plan()
        .unwrap();
    let prog = &plan.program;
    let inputs: Vec<Vec<HostArray>> = random_inputs(prog, 5).unwrap();
    let want = plan.execute(&mut CpuExecutor::unfused(), &inputs).unwrap();
    let cpu = CpuExecutor::new();
    let mut run = cpu.prepare(prog, &plan.schedule).unwrap();
    run.upload(&inputs).unwrap();
    run.run(1).unwrap();
    // The written rows' pages, the first 32 of each 2048 (no zero page read: a and b
    // are read after this, not before).
    let pages_written = WRITTEN * 512 * 4 / PAGE;
    for (d, want) in want.iter().enumerate().take(prog.devices) {
        for (o, want) in want.iter().enumerate().take(2) {
            let got = run.output_words(d, o).unwrap();
            assert_eq!(
                resident(got),
                (0..pages_written).collect::<Vec<_>>(),
                "device {d}, output {o}"
            );
            assert_eq!(got, &want.words[..], "device {d}, output {o}");
        }
    }
}
