//! The calling thread's handling of subnormal floats, carried to the cores a step is
//! spread over. XLA's threads flush subnormals to zero (as results and as operands, as a
//! TPU's vector unit does); the command line's threads do not. A step's result must not
//! depend on which core ran which part of it, so every part runs in the mode of the
//! thread that runs the step. (x86-64 only: elsewhere each core keeps its own mode.)

/// A thread's subnormal handling (on x86-64, MXCSR's flush-to-zero and
/// denormals-are-zero bits).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FloatMode(u32);

#[cfg(target_arch = "x86_64")]
const BITS: u32 = 0x8000 | 0x0040;

impl FloatMode {
    /// The calling thread's mode.
    pub fn current() -> Self {
        #[cfg(target_arch = "x86_64")]
        return FloatMode(csr() & BITS);
        #[cfg(not(target_arch = "x86_64"))]
        FloatMode(0)
    }

    /// Whether this mode flushes subnormals, as operands and as results (XLA's).
    pub fn flushes(self) -> bool {
        #[cfg(target_arch = "x86_64")]
        return self.0 == BITS;
        #[cfg(not(target_arch = "x86_64"))]
        false
    }

    /// Runs `f` on this thread in this mode, then gives the thread its own back. What
    /// `f` reads from memory and writes to memory is computed in the mode (the switch is
    /// opaque to the compiler for memory, not for arithmetic left in registers).
    pub fn run<T>(self, f: impl FnOnce() -> T) -> T {
        #[cfg(target_arch = "x86_64")]
        {
            let own = csr();
            if own & BITS == self.0 {
                return f();
            }
            set_csr((own & !BITS) | self.0);
            let out = f();
            set_csr(own);
            out
        }
        #[cfg(not(target_arch = "x86_64"))]
        f()
    }

    /// Runs `f`, which spreads its work over rayon's pool by itself (gemm's own
    /// parallelism: its parts cannot be wrapped in [`FloatMode::run`]), with every part
    /// in this mode: on the global pool where its workers run in it, else on a pool of
    /// as many workers kept for this mode (started in it; where no thread can be
    /// started, the global pool's, as before).
    pub fn install<T: Send>(self, f: impl FnOnce() -> T + Send) -> T {
        if workers_mode() == Some(self) {
            return f();
        }
        match pool(self) {
            Some(p) => p.install(f),
            None => f(),
        }
    }
}

/// The mode every worker of rayon's global pool runs in, asked once (a worker keeps
/// the mode it was started in: [`FloatMode::run`] gives it back), or `None` if they
/// differ.
fn workers_mode() -> Option<FloatMode> {
    static MODE: std::sync::OnceLock<Option<FloatMode>> = std::sync::OnceLock::new();
    *MODE.get_or_init(|| {
        let modes = rayon::broadcast(|_| FloatMode::current());
        modes.iter().all(|&m| m == modes[0]).then_some(modes[0])
    })
}

/// The pool whose workers run in `mode`, started on first use (as many workers as the
/// global pool); `None` if its threads cannot be started.
fn pool(mode: FloatMode) -> Option<std::sync::Arc<rayon::ThreadPool>> {
    static POOLS: std::sync::Mutex<Vec<(FloatMode, std::sync::Arc<rayon::ThreadPool>)>> =
        std::sync::Mutex::new(Vec::new());
    let mut pools = POOLS.lock().unwrap_or_else(|e| e.into_inner());
    if let Some((_, p)) = pools.iter().find(|(m, _)| *m == mode) {
        return Some(p.clone());
    }
    let p = rayon::ThreadPoolBuilder::new()
        .num_threads(rayon::current_num_threads())
        .thread_name(|i| format!("tpusim-mode-{i}"))
        .start_handler(move |_| mode.set())
        .build()
        .ok()?;
    let p = std::sync::Arc::new(p);
    pools.push((mode, p.clone()));
    Some(p)
}

impl FloatMode {
    /// Puts the calling thread in this mode for good (a pool worker's start).
    fn set(self) {
        #[cfg(target_arch = "x86_64")]
        set_csr((csr() & !BITS) | self.0);
    }
}

#[cfg(target_arch = "x86_64")]
fn csr() -> u32 {
    let mut c = 0u32;
    // SAFETY: stores MXCSR into a local u32.
    unsafe {
        std::arch::asm!("stmxcsr [{p}]", p = in(reg) &mut c as *mut u32, options(nostack, preserves_flags));
    }
    c
}

#[cfg(target_arch = "x86_64")]
fn set_csr(c: u32) {
    // SAFETY: loads MXCSR from a local u32 holding only bits MXCSR had or FTZ/DAZ.
    unsafe {
        std::arch::asm!("ldmxcsr [{p}]", p = in(reg) &c as *const u32, options(nostack, preserves_flags, readonly));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Doubles a subnormal in `mode` on another thread (as a pool's worker would).
    fn doubled_elsewhere(mode: FloatMode, x: f32) -> f32 {
        std::thread::scope(|s| {
            s.spawn(|| {
                // Through memory, as the executor's parts are: the product is made
                // while the mode holds (registers alone may be moved past it).
                let mut out = 0.0f32;
                mode.run(|| {
                    out = std::hint::black_box(x) * 2.0;
                    std::hint::black_box(&mut out);
                });
                out
            })
            .join()
            .unwrap()
        })
    }

    #[test]
    fn a_worker_runs_in_the_callers_mode_and_keeps_its_own_after() {
        let tiny = f32::from_bits(1); // the least subnormal
        let plain = FloatMode::current();
        assert_eq!(doubled_elsewhere(plain, tiny), f32::from_bits(2));
        #[cfg(target_arch = "x86_64")]
        {
            let flushing = FloatMode(BITS);
            assert_eq!(doubled_elsewhere(flushing, tiny), 0.0);
            // The mode is the worker's only while it runs the part.
            std::thread::scope(|s| {
                s.spawn(|| {
                    flushing.run(|| ());
                    assert_eq!(FloatMode::current(), plain);
                    assert_eq!(std::hint::black_box(tiny) * 2.0, f32::from_bits(2));
                });
            });
        }
    }
}
