//! `input_output_aliases` (`GridSpec::alias`): the output starts as the input, and the
//! kernel's refs of both are the output.

mod common;

use common::simulate;
use tpusim::device_sim::cpu::CpuExecutor;
use tpusim::kernel::{GridSpec, MemorySpace, PallasCall};
use tpusim::{DType, HostArray, Mesh};

#[test]
fn an_aliased_output_starts_as_its_input_and_is_written_through_either_ref() {
    for space in [MemorySpace::Any, MemorySpace::Vmem] {
        let spec = GridSpec::new()
            .input("x", space, &[2, 4], DType::I32)
            .input("y", MemorySpace::Any, &[4], DType::I32)
            .output("o", space, &[2, 4], DType::I32)
            .dma_sem("sem")
            .alias(0, 0);
        // Row 1 is overwritten through the input's ref; row 0 keeps the input's values.
        let call = PallasCall::new("alias", spec, |pl, a| {
            let c = pl.make_async_copy(a.r("y"), a.r("x").at(1), a.sem("sem"));
            c.start();
            c.wait();
        });
        let x = HostArray::from_i32(&[2, 4], (0..8).collect()).unwrap();
        let y = HostArray::from_i32(&[4], vec![-1, -2, -3, -4]).unwrap();
        let mesh = Mesh::new(1, "x").unwrap();
        let out = simulate(&call, &mesh, &[vec![x, y]], &mut CpuExecutor::new()).unwrap();
        assert_eq!(
            out[0][0].as_i32(),
            &[0, 1, 2, 3, -1, -2, -3, -4],
            "{space:?}"
        );
    }
    let bad = GridSpec::new()
        .input("x", MemorySpace::Any, &[4], DType::I32)
        .output("o", MemorySpace::Any, &[4], DType::F32)
        .alias(0, 0);
    let err = PallasCall::new("bad", bad, |_, _| {})
        .lower(&Mesh::new(1, "x").unwrap())
        .unwrap_err();
    assert!(
        err.to_string().contains("input_output_aliases 0: 0"),
        "{err}"
    );
}
