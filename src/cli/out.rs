//! Standard output that reports a failure instead of panicking: a full disk is an error
//! naming standard output (exit 2); a reader that went away (`| head`) ends the command
//! quietly, as other Unix tools do. Where an output file is standard output itself
//! (`--output /dev/stdout`), what a command says goes to standard error instead.

use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};
use tpusim::Error;

/// Set on the ranks of a partitioned run other than rank 0: they print nothing.
static QUIET: AtomicBool = AtomicBool::new(false);

/// Set by `--quiet`: no notes (the executor line, warnings, progress), results only.
static NO_NOTES: AtomicBool = AtomicBool::new(false);

/// Set when an output file is standard output: what a command says goes to standard
/// error, so the output stays whole.
static TO_STDERR: AtomicBool = AtomicBool::new(false);

/// Says where an output file goes: when `path` is standard output, what the command
/// says goes to standard error from now on.
pub fn keep_apart(path: &std::path::Path) {
    if tpusim::files::is_stdout(path) {
        TO_STDERR.store(true, Ordering::SeqCst);
    }
}

/// Makes this process print nothing (a rank other than 0).
#[cfg_attr(not(feature = "mpi"), allow(dead_code))]
pub fn set_quiet() {
    QUIET.store(true, Ordering::SeqCst);
}

/// True when this process prints nothing.
pub fn quiet() -> bool {
    QUIET.load(Ordering::SeqCst)
}

/// Turns notes off (`--quiet`): results and errors only.
pub fn set_no_notes() {
    NO_NOTES.store(true, Ordering::SeqCst);
}

/// True when notes (what a person reads once: the executor chosen and why, warnings,
/// progress) are printed: not on `--quiet`, nor on a rank that prints nothing.
pub fn notes() -> bool {
    !quiet() && !NO_NOTES.load(Ordering::SeqCst)
}

/// Writes `args` to standard output, then a newline if `newline`.
pub fn write(args: std::fmt::Arguments, newline: bool) -> tpusim::Result<()> {
    if quiet() {
        return Ok(());
    }
    if TO_STDERR.load(Ordering::SeqCst) {
        let mut e = std::io::stderr().lock();
        let _ = e
            .write_fmt(args)
            .and_then(|()| if newline { e.write_all(b"\n") } else { Ok(()) });
        return Ok(());
    }
    let mut o = std::io::stdout().lock();
    o.write_fmt(args)
        .and_then(|()| if newline { o.write_all(b"\n") } else { Ok(()) })
        .map_err(|source| Error::File {
            action: "write output to".into(),
            path: "standard output".into(),
            source,
        })
}

/// True for a write to standard output whose reader has gone (also an output file that
/// is standard output: `--json /dev/stdout | head`).
pub fn closed(e: &Error) -> bool {
    matches!(e, Error::File { path, source, .. }
        if source.kind() == std::io::ErrorKind::BrokenPipe
            && (path.as_os_str() == "standard output" || tpusim::files::is_stdout(path)))
}

/// `print!` through [`write`]: evaluates to a `Result`.
macro_rules! out {
    ($($t:tt)*) => { $crate::cli::out::write(format_args!($($t)*), false) };
}

/// `println!` through [`write`]: evaluates to a `Result`.
macro_rules! outln {
    ($($t:tt)*) => { $crate::cli::out::write(format_args!($($t)*), true) };
}

pub(crate) use {out, outln};
