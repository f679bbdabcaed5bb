//! A dot large enough for gemm to spread over its own rayon parts, called from a thread
//! that reads subnormals as zero and flushes them (as XLA's threads do): every part
//! computes as that thread would, not in the pool workers' mode.

#![cfg(target_arch = "x86_64")]

use tpusim::device_sim::cpu::compute::matmul_f32;

/// MXCSR's flush-to-zero and denormals-are-zero bits.
const FTZ_DAZ: u32 = 0x8000 | 0x0040;

fn csr() -> u32 {
    let mut c = 0u32;
    // SAFETY: stores MXCSR into a local u32.
    unsafe { std::arch::asm!("stmxcsr [{p}]", p = in(reg) &mut c as *mut u32, options(nostack)) };
    c
}

fn set_csr(c: u32) {
    // SAFETY: loads MXCSR from a local u32 (this thread's flags only).
    unsafe { std::arch::asm!("ldmxcsr [{p}]", p = in(reg) &c as *const u32, options(nostack)) };
}

#[test]
fn a_spread_dot_runs_in_the_callers_subnormal_mode() {
    let (m, k, n) = (512, 384, 256);
    let int = |i: usize| ((i * 7919) % 7) as f32 - 3.0;
    // Even rows small integers, odd rows subnormals; b integers times 2^100, so a
    // subnormal read as itself gives products near 1e-10 and sums far from 0.
    let a: Vec<f32> = (0..m * k)
        .map(|i| {
            if (i / k) % 2 == 0 {
                int(i)
            } else {
                f32::from_bits(1 + (i as u32).wrapping_mul(2_654_435_761) % 0x7f_ffff)
            }
        })
        .collect();
    let big = 2f32.powi(100);
    let b: Vec<f32> = (0..k * n).map(|i| int(i + 3) * big).collect();
    // 2^-70 times 2^-70: every product below f32's normals, flushed to zero.
    let tiny = 2f32.powi(-70);
    let a2: Vec<f32> = (0..m * k).map(|i| (int(i) + 4.0) * tiny).collect();
    let b2: Vec<f32> = (0..k * n).map(|i| (int(i + 5) + 4.0) * tiny).collect();
    let (mut c, mut c2) = (vec![f32::NAN; m * n], vec![f32::NAN; m * n]);
    // The pool's workers start now, in this thread's plain mode (a new thread takes
    // its creator's); the dots below are then called in the other mode, then in theirs.
    rayon::join(|| (), || ());
    let own = csr();
    assert_eq!(own & FTZ_DAZ, 0, "the test thread starts in the plain mode");
    set_csr(own | FTZ_DAZ);
    matmul_f32(&a, &b, &mut c, m, k, n);
    matmul_f32(&a2, &b2, &mut c2, m, k, n);
    std::hint::black_box((&mut c, &mut c2));
    set_csr(own);
    for i in 0..m {
        for j in 0..n {
            // Exact: small integers times a power of two.
            let want: f64 = if i % 2 == 1 {
                0.0
            } else {
                (0..k)
                    .map(|l| f64::from(a[i * k + l]) * f64::from(b[l * n + j]))
                    .sum()
            };
            assert_eq!(f64::from(c[i * n + j]), want, "({i}, {j})");
            assert_eq!(c2[i * n + j], 0.0, "({i}, {j}) flushed");
        }
    }
    // The same dots in the plain mode keep the subnormals (so the test can fail).
    let mut p = vec![0.0; m * n];
    matmul_f32(&a2, &b2, &mut p, m, k, n);
    assert!(p.iter().all(|&v| v > 0.0));
    matmul_f32(&a, &b, &mut p, m, k, n);
    assert!((0..m * n).filter(|x| (x / n) % 2 == 1).all(|x| p[x] != 0.0));
}
