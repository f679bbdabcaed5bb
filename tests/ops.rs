//! Every compute op on inputs of every dtype it takes, against what JAX (XLA on the CPU)
//! computes for the same inputs: `tests/data/ops/` holds the inputs and JAX's results,
//! made by `tests/gen/ops.py`. Exact ops must give JAX's bits (any NaN matches any
//! NaN); the others stay within the tolerance the generator wrote from each op's
//! accuracy bound (transcendentals in ulps, sums and dot products the k-term bound).

mod common;

use serde_json::Value as Json;
use std::path::{Path, PathBuf};
use tpusim::device_sim::cpu::CpuExecutor;
use tpusim::device_sim::Executor;
use tpusim::ir::{Binary, Comparison, ComputeKind, DotDims, Reduction, Unary};
use tpusim::kernel::{GridSpec, MemorySpace, PallasCall};
use tpusim::npy::read_npy;
use tpusim::{DType, HostArray, Mesh};

fn dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/ops")
}

fn dims(p: &Json, key: &str) -> Vec<usize> {
    p[key]
        .as_array()
        .unwrap_or(&vec![])
        .iter()
        .map(|v| v.as_u64().expect("a dimension") as usize)
        .collect()
}

/// The IR's kind for a case's op and parameters.
fn kind(op: &str, p: &Json) -> ComputeKind {
    let unary = |u| ComputeKind::Unary(u);
    let binary = |b| ComputeKind::Binary(b);
    let cmp = |c| ComputeKind::Compare(c);
    match op {
        "neg" => unary(Unary::Neg),
        "abs" => unary(Unary::Abs),
        "sign" => unary(Unary::Sign),
        "floor" => unary(Unary::Floor),
        "ceil" => unary(Unary::Ceil),
        "round" => unary(Unary::Round),
        "round_even" => unary(Unary::RoundEven),
        "exp" => unary(Unary::Exp),
        "exp2" => unary(Unary::Exp2),
        "expm1" => unary(Unary::Expm1),
        "log" => unary(Unary::Log),
        "log1p" => unary(Unary::Log1p),
        "sqrt" => unary(Unary::Sqrt),
        "rsqrt" => unary(Unary::Rsqrt),
        "tanh" => unary(Unary::Tanh),
        "logistic" => unary(Unary::Logistic),
        "sin" => unary(Unary::Sin),
        "cos" => unary(Unary::Cos),
        "erf" => unary(Unary::Erf),
        "not" => unary(Unary::Not),
        "integer_pow" => unary(Unary::IntegerPow(p["n"].as_i64().unwrap() as i32)),
        "add" => binary(Binary::Add),
        "sub" => binary(Binary::Sub),
        "mul" => binary(Binary::Mul),
        "div" => binary(Binary::Div),
        "rem" => binary(Binary::Rem),
        "pow" => binary(Binary::Pow),
        "max" => binary(Binary::Max),
        "min" => binary(Binary::Min),
        "and" => binary(Binary::And),
        "or" => binary(Binary::Or),
        "xor" => binary(Binary::Xor),
        "shift_left" => binary(Binary::ShiftLeft),
        "shift_right_arithmetic" => binary(Binary::ShiftRightArithmetic),
        "shift_right_logical" => binary(Binary::ShiftRightLogical),
        "atan2" => binary(Binary::Atan2),
        "eq" => cmp(Comparison::Eq),
        "ne" => cmp(Comparison::Ne),
        "lt" => cmp(Comparison::Lt),
        "le" => cmp(Comparison::Le),
        "gt" => cmp(Comparison::Gt),
        "ge" => cmp(Comparison::Ge),
        "select" => ComputeKind::Select,
        "convert" => ComputeKind::Convert,
        "broadcast" => ComputeKind::Broadcast {
            dims: dims(p, "dims"),
        },
        "reshape" => ComputeKind::Reshape,
        "transpose" => ComputeKind::Transpose {
            perm: dims(p, "perm"),
        },
        "iota" => ComputeKind::Iota {
            dim: p["dim"].as_u64().unwrap() as usize,
        },
        "slice" => ComputeKind::Slice {
            start: dims(p, "start"),
            strides: dims(p, "strides"),
        },
        "update_slice" => ComputeKind::UpdateSlice {
            start: dims(p, "start"),
        },
        "concat" => ComputeKind::Concat {
            dim: p["dim"].as_u64().unwrap() as usize,
        },
        "reduce_sum" | "reduce_max" | "reduce_min" => ComputeKind::Reduce {
            op: match op {
                "reduce_sum" => Reduction::Sum,
                "reduce_max" => Reduction::Max,
                _ => Reduction::Min,
            },
            axes: dims(p, "axes"),
        },
        "argmax" | "argmin" => ComputeKind::ArgReduce {
            op: if op == "argmax" {
                Reduction::Max
            } else {
                Reduction::Min
            },
            axis: p["axis"].as_u64().unwrap() as usize,
        },
        "dot" => ComputeKind::Dot(DotDims {
            lhs_contract: dims(p, "lhs_contract"),
            rhs_contract: dims(p, "rhs_contract"),
            lhs_batch: dims(p, "lhs_batch"),
            rhs_batch: dims(p, "rhs_batch"),
        }),
        other => panic!("unknown op `{other}` in cases.json"),
    }
}

/// A scalar travels as a [1] operand (operands have at least one dimension).
fn operand_shape(s: &[usize]) -> Vec<usize> {
    if s.is_empty() {
        vec![1]
    } else {
        s.to_vec()
    }
}

/// The kernel of one case: load every input, apply the op, store the result.
fn kernel(k: ComputeKind, ins: &[HostArray], shape: Vec<usize>, dtype: DType) -> PallasCall {
    let mut spec = GridSpec::new();
    let in_shapes: Vec<Vec<usize>> = ins.iter().map(|a| a.shape.clone()).collect();
    for (i, a) in ins.iter().enumerate() {
        spec = spec.input(
            &format!("x{i}"),
            MemorySpace::Vmem,
            &operand_shape(&a.shape),
            a.dtype,
        );
    }
    spec = spec.output("y", MemorySpace::Vmem, &operand_shape(&shape), dtype);
    let n = ins.len();
    PallasCall::new("op", spec, move |pl, a| {
        let loaded: Vec<_> = (0..n)
            .map(|i| {
                let v = pl.load(a.r(i));
                if in_shapes[i].is_empty() {
                    v.reshape(&[])
                } else {
                    v
                }
            })
            .collect();
        let refs: Vec<_> = loaded.iter().collect();
        let y = pl.compute(k.clone(), &refs, &shape, dtype);
        let y = if shape.is_empty() { y.reshape(&[1]) } else { y };
        pl.store(a.r(n), &y);
    })
}

fn close(dtype: DType, got: u32, want: u32, tol: Option<f64>) -> bool {
    let (g, w) = (dtype.value_of(got), dtype.value_of(want));
    if g.is_nan() || w.is_nan() {
        return g.is_nan() && w.is_nan();
    }
    match tol {
        None => got == want,
        Some(t) => g == w || (g - w).abs() <= t,
    }
}

fn check_all(exec: &mut dyn Executor) {
    let manifest: Json =
        serde_json::from_str(&std::fs::read_to_string(dir().join("cases.json")).unwrap()).unwrap();
    let cases = manifest["cases"].as_array().unwrap();
    assert!(cases.len() > 250, "the generator's cases are all here");
    let mesh = Mesh::new(1, "x").unwrap();
    let mut failures = Vec::new();
    for c in cases {
        let op = c["op"].as_str().unwrap();
        let load = |f: &Json| read_npy(&dir().join(f.as_str().unwrap())).unwrap();
        let ins: Vec<HostArray> = c["inputs"].as_array().unwrap().iter().map(load).collect();
        let want = load(&c["want"]);
        let tol = c.get("tol").map(|t| {
            let bytes = std::fs::read(dir().join(t.as_str().unwrap())).unwrap();
            npyz::NpyFile::new(&bytes[..])
                .unwrap()
                .into_vec::<f64>()
                .unwrap()
        });
        let dtype = DType::parse(c["dtype"].as_str().unwrap()).unwrap();
        let shape = dims(c, "shape");
        let call = kernel(kind(op, &c["params"]), &ins, shape.clone(), dtype);
        let feed: Vec<HostArray> = ins
            .iter()
            .map(|a| HostArray {
                shape: operand_shape(&a.shape),
                ..a.clone()
            })
            .collect();
        let what = format!(
            "{op} {:?} on {:?} -> {shape:?} {dtype}",
            c["params"],
            ins.iter()
                .map(|a| format!("{:?} {}", a.shape, a.dtype))
                .collect::<Vec<_>>()
        );
        let got = match common::simulate(&call, &mesh, &[feed], exec) {
            Ok(mut out) => out.remove(0).remove(0),
            Err(e) => {
                failures.push(format!("{what}: {e}"));
                continue;
            }
        };
        let bad: Vec<usize> = (0..want.len())
            .filter(|&i| {
                !close(
                    dtype,
                    got.words[i],
                    want.words[i],
                    tol.as_ref().map(|t| t[i]),
                )
            })
            .collect();
        if let Some(&i) = bad.first() {
            failures.push(format!(
                "{what}: {} of {} differ, first at {i}: got {} want {} (tol {:?})",
                bad.len(),
                want.len(),
                dtype.value_of(got.words[i]),
                dtype.value_of(want.words[i]),
                tol.as_ref().map(|t| t[i])
            ));
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} cases on {}:\n{}",
        failures.len(),
        cases.len(),
        exec.describe(),
        failures.join("\n")
    );
}

#[test]
fn every_op_agrees_with_jax_on_the_cpu_executor() {
    check_all(&mut CpuExecutor::new());
}

#[test]
fn every_op_agrees_with_jax_on_the_gpu_executor() {
    check_all(&mut *common::gpu());
}

/// Operands of a bf16 dot of these shapes holding small integers (exact in bf16, and
/// their sums in f32): their values, and the arrays.
fn integer_bf16_operands(
    lshape: &[usize],
    rshape: &[usize],
) -> (Vec<f32>, Vec<f32>, Vec<HostArray>) {
    let values = |shape: &[usize], salt: usize| -> Vec<f32> {
        let len: usize = shape.iter().product();
        (0..len)
            .map(|i| ((i * 7 + salt) % 9) as f32 - 4.0)
            .collect()
    };
    let (a, b) = (values(lshape, 1), values(rshape, 5));
    let bf = |v: &[f32]| v.iter().map(|&x| half::bf16::from_f32(x)).collect();
    let ins = vec![
        HostArray::from_bf16(lshape, bf(&a)).unwrap(),
        HostArray::from_bf16(rshape, bf(&b)).unwrap(),
    ];
    (a, b, ins)
}

/// A bf16 left operand past the size widened a block of rows at a time (over a million
/// elements: blocks of 2048 rows of 512, the last one short; and two batches of 1100
/// rows) into an f32 result: equal to the integer sums (small integers are exact in
/// bf16 and their sums in f32).
#[test]
fn large_bf16_dots_widened_by_blocks_of_rows_give_the_exact_sums() {
    let mesh = Mesh::new(1, "x").unwrap();
    for (batch, m) in [(1usize, 2100usize), (2, 1100)] {
        let (k, n) = (512, 8);
        let (lshape, rshape, oshape, dims) = if batch == 1 {
            let d = DotDims {
                lhs_contract: vec![1],
                rhs_contract: vec![0],
                lhs_batch: vec![],
                rhs_batch: vec![],
            };
            (vec![m, k], vec![k, n], vec![m, n], d)
        } else {
            let d = DotDims {
                lhs_contract: vec![2],
                rhs_contract: vec![1],
                lhs_batch: vec![0],
                rhs_batch: vec![0],
            };
            (vec![batch, m, k], vec![batch, k, n], vec![batch, m, n], d)
        };
        let (a, b, ins) = integer_bf16_operands(&lshape, &rshape);
        let call = kernel(ComputeKind::Dot(dims), &ins, oshape.clone(), DType::F32);
        let plan = tpusim::run::Job::call(call, mesh.clone()).plan().unwrap();
        let got = plan.execute(&mut CpuExecutor::new(), &[ins]).unwrap();
        let got = got[0][0].as_f32();
        for bi in 0..batch {
            for i in 0..m {
                for j in 0..n {
                    let want: f64 = (0..k)
                        .map(|p| a[(bi * m + i) * k + p] as f64 * b[(bi * k + p) * n + j] as f64)
                        .sum();
                    let at = (bi * m + i) * n + j;
                    assert_eq!(
                        got[at] as f64, want,
                        "batch {batch} m {m}: ({bi}, {i}, {j})"
                    );
                }
            }
        }
    }
}

/// MXCSR's flush-to-zero and denormals-are-zero bits (XLA's threads' mode).
#[cfg(target_arch = "x86_64")]
const FTZ_DAZ: u32 = 0x8000 | 0x0040;

#[cfg(target_arch = "x86_64")]
fn csr() -> u32 {
    let mut c = 0u32;
    // SAFETY: stores MXCSR into a local u32.
    unsafe { std::arch::asm!("stmxcsr [{p}]", p = in(reg) &mut c as *mut u32, options(nostack)) };
    c
}

#[cfg(target_arch = "x86_64")]
fn set_csr(c: u32) {
    // SAFETY: loads MXCSR from a local u32 (this thread's flags only).
    unsafe { std::arch::asm!("ldmxcsr [{p}]", p = in(reg) &c as *const u32, options(nostack)) };
}

/// bf16 dots as JAX calls them (from a thread that flushes subnormals: on the AMX tiles
/// where the CPU has them, `TPUSIM_AMX` unset) and as the command line does (the
/// widened gemm path): plain, batched, with the right operand transposed, into f32 and
/// into bf16, at shapes that are not whole tiles. Small integers: every sum is exact
/// in f32, so both give the f64 sums exactly (rounded once to bf16 for a bf16 result).
#[test]
#[cfg(target_arch = "x86_64")]
fn bf16_dots_in_either_subnormal_mode_give_the_exact_sums() {
    let mesh = Mesh::new(1, "x").unwrap();
    let (m, k, n) = (130, 100, 70);
    for (case, batch, transposed, out) in [
        (0, 1, false, DType::F32),
        (1, 3, false, DType::F32),
        (2, 1, true, DType::F32),
        (3, 2, true, DType::BF16),
    ] {
        let b_ = |v: Vec<usize>| {
            if batch > 1 {
                [vec![batch], v].concat()
            } else {
                v
            }
        };
        let o = usize::from(batch > 1);
        let dims = DotDims {
            lhs_contract: vec![o + 1],
            rhs_contract: vec![if transposed { o + 1 } else { o }],
            lhs_batch: (0..o).collect(),
            rhs_batch: (0..o).collect(),
        };
        let rshape = if transposed { vec![n, k] } else { vec![k, n] };
        let (lshape, rshape, oshape) = (b_(vec![m, k]), b_(rshape), b_(vec![m, n]));
        let (a, b, ins) = integer_bf16_operands(&lshape, &rshape);
        let call = kernel(ComputeKind::Dot(dims), &ins, oshape.clone(), out);
        let plan = tpusim::run::Job::call(call, mesh.clone()).plan().unwrap();
        let own = csr();
        for flush in [true, false] {
            set_csr(if flush { own | FTZ_DAZ } else { own & !FTZ_DAZ });
            let got = plan.execute(&mut CpuExecutor::new(), std::slice::from_ref(&ins));
            set_csr(own);
            let got = got.unwrap()[0][0].values();
            for bi in 0..batch {
                for i in 0..m {
                    for j in 0..n {
                        let rb = |p: usize| {
                            let at = if transposed { j * k + p } else { p * n + j };
                            b[bi * k * n + at] as f64
                        };
                        let want: f64 =
                            (0..k).map(|p| a[(bi * m + i) * k + p] as f64 * rb(p)).sum();
                        let want = if out == DType::BF16 {
                            half::bf16::from_f64(want).to_f64()
                        } else {
                            want
                        };
                        let at = (bi * m + i) * n + j;
                        assert_eq!(got[at], want, "case {case} flush {flush}: ({bi}, {i}, {j})");
                    }
                }
            }
        }
    }
}
