//! Files the user names.
//!
//! Inputs are read with a bound ([`read`], [`read_with`]): a regular file larger than
//! the bound is refused unread, and a stream (a FIFO, a pipe, a device such as
//! `/dev/zero`) is read only up to it, never to its end; a reader that can tell sooner
//! (a `.npy` header, a JSON parser) stops at the first byte that cannot be its format.
//!
//! Outputs are checked before the work that fills them ([`Output::check`]). A regular
//! file (or none yet) is checked by creating and removing a file next to it, then
//! written to a temporary file in the same directory that is renamed over the target
//! when complete, so a failed run leaves neither a truncated file nor a clobbered good
//! one. A device, FIFO or pipe (`/dev/null`, a named pipe), and a path that names one
//! of the process's own open files (`/dev/stdout`, `/dev/stderr`, `/dev/fd/N`,
//! `/proc/self/fd/N`, whatever it is open on), is written in place: opened once, by the
//! check (a FIFO's reader sees one writer and one end of file; with no reader yet, the
//! check waits for one), and written when the work is done. An output that is one of
//! the command's inputs (also through a symbolic or hard link) is refused before
//! anything is opened or written ([`Output::check_apart`]).
//!
//! A temporary file is named after its output and the writing process
//! (`.y.npy.tpusim-PID-XXXXXX.tmp` beside `y.npy`). While one exists it is listed here,
//! so that [`remove_temporaries_on_signals`] (which the command line installs) removes
//! it on SIGINT, SIGTERM or SIGHUP; one left by a process killed outright (SIGKILL) is
//! removed by the next process that writes the same output, once its writer is gone.
//! An output that is a symbolic link is written through to what it points to, whether
//! or not that exists yet (the link itself is kept); a path that names a directory (one
//! that exists, or any path ending in `/`) is refused.

use crate::error::{Error, Result};
use std::fs::{File, Permissions};
use std::io::{BufReader, BufWriter, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

/// The temporary files of outputs being written now, removed on a signal.
static LIVE: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());

fn live() -> MutexGuard<'static, Vec<PathBuf>> {
    LIVE.lock().unwrap_or_else(|e| e.into_inner())
}

/// Lists `path` (a file or a directory of the process's own) for removal on the signals
/// [`remove_temporaries_on_signals`] handles, until [`forget_temporary`].
pub fn remove_on_signals(path: &Path) {
    live().push(path.to_path_buf());
}

/// No longer removes `path` on a signal.
pub fn forget_temporary(path: &Path) {
    live().retain(|p| p != path);
}

/// Removes the temporary files of the outputs being written when the process gets
/// SIGINT, SIGTERM or SIGHUP, then ends it as the signal would have (the command line
/// calls this once at start; a library user may, or handle the signals itself). A
/// no-op where signals are not Unix's.
pub fn remove_temporaries_on_signals() -> Result<()> {
    #[cfg(unix)]
    {
        use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
        remove_temporaries_on(&[SIGINT, SIGTERM, SIGHUP])?;
    }
    Ok(())
}

/// [`remove_temporaries_on_signals`] for `signals` only (Python keeps SIGINT for its
/// own KeyboardInterrupt, and takes only those whose action is still the default).
pub fn remove_temporaries_on(signals: &[i32]) -> Result<()> {
    #[cfg(unix)]
    {
        let mut signals = signal_hook::iterator::Signals::new(signals)
            .map_err(|e| Error::bad_input(format!("cannot install signal handlers: {e}")))?;
        let (ready, started) = std::sync::mpsc::sync_channel(1);
        std::thread::Builder::new()
            .name("tpusim-signals".into())
            .spawn(move || {
                // A thread's first allocation maps its allocator arena: made before the
                // caller goes on, so the address space the budget sees (ulimit -v) does
                // not depend on when this thread got to run.
                drop(std::hint::black_box(Box::new(0u64)));
                let _ = ready.send(());
                if let Some(sig) = signals.forever().next() {
                    // Held until the process ends: no temporary file is made or renamed
                    // after this.
                    let files = live();
                    for f in files.iter() {
                        if std::fs::remove_file(f).is_err() {
                            let _ = std::fs::remove_dir_all(f);
                        }
                    }
                    let _ = signal_hook::low_level::emulate_default_handler(sig);
                    std::process::exit(128 + sig);
                }
            })
            .map_err(|e| Error::bad_input(format!("cannot install signal handlers: {e}")))?;
        let _ = started.recv();
    }
    #[cfg(not(unix))]
    let _ = signals;
    Ok(())
}

fn file_error(action: String, path: &Path, source: std::io::Error) -> Error {
    Error::File {
        action,
        path: path.to_path_buf(),
        source,
    }
}

/// Reads the file at `path` whole; `what` names it in errors ("input"). A regular file
/// larger than `cap` bytes is refused before it is read, a stream that holds more once
/// `cap` bytes are read.
pub fn read(path: &Path, what: &str, cap: Option<u64>) -> Result<Vec<u8>> {
    read_with(path, what, cap, |r| {
        let mut bytes = Vec::new();
        r.read_to_end(&mut bytes)
            .map_err(|e| file_error(format!("read {what}"), path, e))?;
        Ok(bytes)
    })
}

/// Reads the file at `path` with `parse`, which may stop early (at the first byte that
/// is not its format); `what` names the file in errors. The reader `parse` gets ends
/// after `cap` bytes and one more: a regular file larger than `cap` is refused before
/// it is opened, and a stream (a FIFO, `/dev/zero`) from which `parse` read more than
/// `cap` bytes is refused whatever `parse` made of them.
pub fn read_with<T>(
    path: &Path,
    what: &str,
    cap: Option<u64>,
    parse: impl FnOnce(&mut dyn Read) -> Result<T>,
) -> Result<T> {
    let action = || format!("read {what}");
    let fail = |e| file_error(action(), path, e);
    let meta = std::fs::metadata(path).map_err(fail)?;
    if meta.is_dir() {
        return Err(file_error(action(), path, is_a_directory()));
    }
    let limit = cap.unwrap_or(u64::MAX);
    let too_large = |verb: &str| {
        Error::TooLarge(format!(
            "{what} {} {verb} the {} of memory available to read it",
            path.display(),
            crate::units::bytes(limit as f64)
        ))
    };
    if meta.is_file() && meta.len() > limit {
        return Err(Error::TooLarge(format!(
            "{what} {} is {} but {} of memory are available to read it",
            path.display(),
            crate::units::bytes(meta.len() as f64),
            crate::units::bytes(limit as f64)
        )));
    }
    let f = File::open(path).map_err(fail)?;
    let mut r = Bounded {
        inner: BufReader::with_capacity(1 << 16, f),
        left: limit.saturating_add(1),
    };
    let out = parse(&mut r);
    crate::interrupt::check()?;
    if r.left == 0 {
        return Err(too_large("holds more than"));
    }
    out
}

/// A reader that ends after `left` bytes.
struct Bounded<R> {
    inner: R,
    left: u64,
}

impl<R: Read> Read for Bounded<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        // Between reads, long or endless ones, a watched caller may stop.
        if crate::interrupt::requested() {
            // Not ErrorKind::Interrupted: readers retry that one.
            return Err(std::io::Error::other("interrupted"));
        }
        let n = buf
            .len()
            .min(usize::try_from(self.left).unwrap_or(usize::MAX));
        let got = self.inner.read(&mut buf[..n])?;
        self.left -= got as u64;
        Ok(got)
    }
}

fn is_a_directory() -> std::io::Error {
    std::io::Error::from(std::io::ErrorKind::IsADirectory)
}

/// How an output is written.
#[derive(Clone, Debug)]
enum Target {
    /// A regular file (or none yet): a temporary file in `dir`, renamed to `file`.
    Replace {
        /// The directory of the file.
        dir: PathBuf,
        /// The file (symbolic links resolved).
        file: PathBuf,
        /// Permissions of the file it replaces, if any.
        keep: Option<Permissions>,
    },
    /// A device, FIFO or pipe, or one of the process's open files: opened once, by the
    /// check, and written in place.
    Stream(Arc<File>),
}

/// An output file, checked for writability before the work that fills it.
#[derive(Clone, Debug)]
pub struct Output {
    path: PathBuf,
    what: String,
    target: Target,
}

impl Output {
    /// Checks that `path` can be written (`what` names it in errors: "timeline"): not a
    /// directory, and a file can be created next to it (then removed again); a stream
    /// is opened (see the module docs).
    pub fn check(path: &Path, what: &str) -> Result<Self> {
        Self::check_apart(path, what, &[])
    }

    /// [`Output::check`], refusing an output that is one of `inputs` (the same file,
    /// also through a symbolic or hard link) before anything is opened.
    pub fn check_apart(path: &Path, what: &str, inputs: &[&Path]) -> Result<Self> {
        let fail = |e| file_error(format!("write {what} to"), path, e);
        if names_a_directory(path) {
            return Err(fail(std::io::Error::new(
                std::io::ErrorKind::IsADirectory,
                "it names a directory (it ends with `/`): give a file name",
            )));
        }
        // (A terminal may be read and written at once: only files and FIFOs are kept.)
        if let Some(input) = inputs
            .iter()
            .find(|i| same_file(i, path) && !is_a_terminal_or_device(path))
        {
            let shown = if input == &path {
                String::new()
            } else {
                format!(" {}", input.display())
            };
            return Err(Error::bad_input(format!(
                "the {what} {} is the input file{shown}: write the {what} somewhere else, the input is kept",
                path.display()
            )));
        }
        // What a write through `path` reaches, as the system follows it (a pipe behind
        // /dev/stdout has no name to follow by hand).
        let target = match std::fs::metadata(path) {
            Ok(m) if m.is_dir() => return Err(fail(is_a_directory())),
            Ok(m) if !m.is_file() || names_an_open_file(path) => {
                Target::Stream(Arc::new(open_stream(path, &m).map_err(fail)?))
            }
            Ok(m) => {
                let file = std::fs::canonicalize(path).map_err(fail)?;
                let dir = file.parent().map(Path::to_path_buf).unwrap_or_default();
                Target::Replace {
                    dir,
                    file,
                    keep: Some(m.permissions()),
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                // A new file, perhaps through a dangling symbolic link: made where the
                // link points.
                let real = resolve_links(path).map_err(fail)?;
                let dir = match real.parent() {
                    Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
                    _ => PathBuf::from("."),
                };
                let name = real
                    .file_name()
                    .ok_or_else(|| fail(std::io::Error::other("it names no file")))?;
                let dir_meta = std::fs::metadata(&dir).map_err(fail)?;
                if !dir_meta.is_dir() {
                    return Err(fail(std::io::Error::other(format!(
                        "{} is not a directory",
                        dir.display()
                    ))));
                }
                Target::Replace {
                    file: dir.join(name),
                    dir,
                    keep: None,
                }
            }
            Err(e) => return Err(fail(e)),
        };
        let out = Output {
            path: path.to_path_buf(),
            what: what.to_string(),
            target,
        };
        if let Target::Replace { dir, file, .. } = &out.target {
            remove_stale(dir, file);
            // Create and remove a file where the real one will be written.
            drop(out.temp(dir, file).map_err(fail)?);
        }
        Ok(out)
    }

    /// The path as the user gave it.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// True when the output is this process's standard output (`/dev/stdout`, `-o
    /// /proc/self/fd/1`, or a file that standard output is redirected to): a command
    /// then says what it did on standard error, to keep the output whole.
    pub fn is_stdout(&self) -> bool {
        is_stdout(&self.path)
    }

    /// A temporary file for `file` in `dir`, listed for the signal handler while it lives.
    fn temp(&self, dir: &Path, file: &Path) -> std::io::Result<Temp> {
        let prefix = format!("{}{}-", temp_prefix(file), std::process::id());
        let mut b = tempfile::Builder::new();
        b.prefix(&prefix).suffix(TEMP_SUFFIX);
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            // The mode a plain create would give (the umask applies to it).
            b.permissions(Permissions::from_mode(0o666));
        }
        // Listed in the same step as it is made, so a signal finds it or nothing.
        let mut files = live();
        let f = b.tempfile_in(dir).map_err(plain)?;
        files.push(f.path().to_path_buf());
        Ok(Temp(Some(f)))
    }

    /// Writes the output with `fill`: whole, or not at all (see the module docs).
    pub fn write_with(
        &self,
        fill: impl FnOnce(&mut dyn Write) -> std::io::Result<()>,
    ) -> Result<()> {
        let fail = |e| file_error(format!("write {} to", self.what), &self.path, e);
        match &self.target {
            Target::Stream(f) => {
                let mut w = BufWriter::new(&**f);
                fill(&mut w).and_then(|_| w.flush()).map_err(fail)
            }
            Target::Replace { dir, file, keep } => {
                let mut tmp = self.temp(dir, file).map_err(fail)?;
                let mut w = BufWriter::new(tmp.file());
                fill(&mut w).and_then(|_| w.flush()).map_err(fail)?;
                drop(w);
                // A watched caller asked to stop: the temporary file goes, the target stays.
                crate::interrupt::check()?;
                tmp.file().sync_all().map_err(fail)?;
                if let Some(p) = keep {
                    tmp.file().set_permissions(p.clone()).map_err(fail)?;
                }
                tmp.persist(file).map_err(fail)
            }
        }
    }

    /// A temporary file of `len` bytes for this output, for several writers (the ranks
    /// of a partitioned run) to fill at offsets before [`Shared::commit`] renames it over
    /// the target; `None` for a stream, which is written in order only.
    pub fn shared(&self, len: u64) -> Result<Option<Shared>> {
        let fail = |e| file_error(format!("write {} to", self.what), &self.path, e);
        match &self.target {
            Target::Stream(_) => Ok(None),
            Target::Replace { dir, file, keep } => {
                let mut tmp = self.temp(dir, file).map_err(fail)?;
                tmp.file().set_len(len).map_err(fail)?;
                Ok(Some(Shared {
                    tmp,
                    file: file.clone(),
                    keep: keep.clone(),
                    output: self.clone(),
                }))
            }
        }
    }

    /// Writes `bytes` (see [`Output::write_with`]).
    pub fn write(&self, bytes: &[u8]) -> Result<()> {
        self.write_with(|w| w.write_all(bytes))
    }
}

/// An output being written by several writers at offsets ([`Output::shared`]): whole
/// once committed, removed if dropped before.
pub struct Shared {
    tmp: Temp,
    file: PathBuf,
    keep: Option<Permissions>,
    output: Output,
}

impl Shared {
    /// The temporary file, which the other writers open to write their parts.
    pub fn path(&self) -> &Path {
        self.tmp.path()
    }

    /// The temporary file, open for writing.
    pub fn file(&mut self) -> &File {
        self.tmp.file()
    }

    /// Renames the filled file over the target.
    pub fn commit(mut self) -> Result<()> {
        let fail = |e| {
            file_error(
                format!("write {} to", self.output.what),
                &self.output.path,
                e,
            )
        };
        crate::interrupt::check()?;
        self.tmp.file().sync_all().map_err(fail)?;
        if let Some(p) = &self.keep {
            self.tmp.file().set_permissions(p.clone()).map_err(fail)?;
        }
        self.tmp.persist(&self.file).map_err(fail)
    }
}

/// True when `path` reaches this process's standard output (`/dev/stdout`, or the file
/// standard output is redirected to).
pub fn is_stdout(path: &Path) -> bool {
    let Ok(m) = std::fs::metadata(path) else {
        return false;
    };
    #[cfg(unix)]
    {
        use std::os::fd::AsFd;
        use std::os::unix::fs::MetadataExt;
        let Ok(out) = std::io::stdout().as_fd().try_clone_to_owned() else {
            return false;
        };
        File::from(out)
            .metadata()
            .is_ok_and(|o| o.dev() == m.dev() && o.ino() == m.ino())
    }
    #[cfg(not(unix))]
    {
        let _ = m;
        false
    }
}

/// Opens a stream output (`meta`: what `path` reaches) for writing, once. A FIFO with
/// no reader yet is waited for (a shell's `> fifo` waits too), while a watched caller
/// may stop it; on a terminal the wait says so after a second.
fn open_stream(path: &Path, meta: &std::fs::Metadata) -> std::io::Result<File> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
        if meta.file_type().is_fifo() {
            let start = std::time::Instant::now();
            let mut said = false;
            loop {
                match std::fs::OpenOptions::new()
                    .write(true)
                    .custom_flags(libc::O_NONBLOCK)
                    .open(path)
                {
                    Ok(f) => {
                        set_blocking(&f)?;
                        return Ok(f);
                    }
                    // No reader yet.
                    Err(e) if e.raw_os_error() == Some(libc::ENXIO) => {}
                    Err(e) => return Err(e),
                }
                if crate::interrupt::requested() {
                    return Err(std::io::Error::other(
                        "interrupted while waiting for a reader",
                    ));
                }
                if !said && start.elapsed() > std::time::Duration::from_secs(1) {
                    said = true;
                    use std::io::IsTerminal;
                    if std::io::stderr().is_terminal() {
                        eprintln!(
                            "tpusim: waiting for a reader of {} (a FIFO)",
                            path.display()
                        );
                    }
                }
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
        }
    }
    let _ = meta;
    std::fs::OpenOptions::new().append(true).open(path)
}

/// Clears `O_NONBLOCK` (set to open a FIFO without blocking): writes wait for the reader.
#[cfg(unix)]
fn set_blocking(f: &File) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    let fd = f.as_raw_fd();
    // SAFETY: fcntl on a descriptor this function's caller owns, for the flags only.
    let flags = unsafe { libc::fcntl(fd, libc::F_GETFL) };
    if flags < 0
        // SAFETY: as above.
        || unsafe { libc::fcntl(fd, libc::F_SETFL, flags & !libc::O_NONBLOCK) } < 0
    {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// True when `path`, or a symbolic link on the way from it, names one of the process's
/// own open files (`/dev/stdout`, `/dev/fd/1`, `/proc/self/fd/1`): written in place
/// whatever they are open on, so a shell's redirection keeps what it opened.
fn names_an_open_file(path: &Path) -> bool {
    let mut p = path.to_path_buf();
    for _ in 0..40 {
        let s = p.to_string_lossy();
        let rest = s
            .strip_prefix("/proc/self/fd/")
            .or_else(|| s.strip_prefix("/proc/thread-self/fd/"))
            .or_else(|| s.strip_prefix("/dev/fd/"));
        if rest.is_some_and(|r| !r.is_empty() && r.bytes().all(|b| b.is_ascii_digit()))
            || matches!(&*s, "/dev/stdout" | "/dev/stderr" | "/dev/stdin")
        {
            return true;
        }
        match std::fs::read_link(&p) {
            Ok(to) => {
                p = match p.parent() {
                    Some(dir) if to.is_relative() => dir.join(to),
                    _ => to,
                }
            }
            Err(_) => return false,
        }
    }
    false
}

/// Checks that `path` can hold several outputs (`what` names them: "timelines"): a
/// directory that exists, or one made now in a directory that does (as `mkdir` makes
/// it: a missing parent is refused, as for a file). Returns the path.
pub fn output_dir(path: &Path, what: &str) -> Result<PathBuf> {
    let fail = |e| file_error(format!("write {what} to"), path, e);
    match std::fs::metadata(path) {
        Ok(m) if m.is_dir() => Ok(path.to_path_buf()),
        Ok(_) => Err(fail(std::io::Error::new(
            std::io::ErrorKind::NotADirectory,
            "it is a file, not a directory",
        ))),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            std::fs::create_dir(path).map_err(fail)?;
            Ok(path.to_path_buf())
        }
        Err(e) => Err(fail(e)),
    }
}

/// What every temporary file's name ends with.
const TEMP_SUFFIX: &str = ".tmp";

/// The start of the name of every temporary file for `file`, before the writer's process
/// id: `.NAME.tpusim-` (the name cut to 200 bytes, so the whole stays a legal name).
fn temp_prefix(file: &Path) -> String {
    let name = file
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let mut cut = name.len().min(200);
    while !name.is_char_boundary(cut) {
        cut -= 1;
    }
    format!(".{}.tpusim-", &name[..cut])
}

/// A temporary output file, listed for the signal handler until it is renamed over its
/// target or removed (when dropped).
struct Temp(Option<tempfile::NamedTempFile>);

impl Temp {
    fn file(&mut self) -> &mut File {
        self.0
            .as_mut()
            .expect("a temporary file until persisted")
            .as_file_mut()
    }

    fn path(&self) -> &Path {
        self.0
            .as_ref()
            .expect("a temporary file until persisted")
            .path()
    }

    /// Renames the file over `target`, and no longer lists it.
    fn persist(mut self, target: &Path) -> std::io::Result<()> {
        let f = self.0.take().expect("persisted once");
        let mut files = live();
        let path = f.path().to_path_buf();
        files.retain(|p| *p != path);
        match f.persist(target) {
            Ok(_) => Ok(()),
            Err(e) => {
                // Dropping the file removes it.
                drop(e.file);
                Err(plain(e.error))
            }
        }
    }
}

impl Drop for Temp {
    fn drop(&mut self) {
        if let Some(f) = self.0.take() {
            let mut files = live();
            let path = f.path().to_path_buf();
            drop(f);
            files.retain(|p| *p != path);
        }
    }
}

/// True when `path` ends with a path separator: it can only name a directory.
fn names_a_directory(path: &Path) -> bool {
    let s = path.as_os_str().to_string_lossy();
    s.ends_with('/') || s.ends_with(std::path::MAIN_SEPARATOR)
}

/// `path` with symbolic links at its end followed (what a write through it reaches),
/// whether or not the last target exists.
fn resolve_links(path: &Path) -> std::io::Result<PathBuf> {
    let mut p = path.to_path_buf();
    // As many links as Linux follows in one path.
    for _ in 0..40 {
        match std::fs::symlink_metadata(&p) {
            Ok(m) if m.file_type().is_symlink() => {
                let to = std::fs::read_link(&p)?;
                p = match p.parent() {
                    Some(dir) if to.is_relative() => dir.join(to),
                    _ => to,
                };
            }
            _ => return Ok(p),
        }
    }
    Err(std::io::Error::other("too many levels of symbolic links"))
}

/// Removes temporary files for `file` in `dir` left by writers that are gone (a process
/// killed outright leaves its temporary file behind).
fn remove_stale(dir: &Path, file: &Path) {
    let prefix = temp_prefix(file);
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let Some(rest) = name
            .strip_prefix(&prefix)
            .filter(|r| r.ends_with(TEMP_SUFFIX))
        else {
            continue;
        };
        let pid = rest.split('-').next().and_then(|p| p.parse::<u32>().ok());
        if pid.is_some_and(|p| !process_alive(p)) {
            let _ = std::fs::remove_file(e.path());
        }
    }
}

/// True unless process `pid` is known to be gone (where that cannot be told, it is
/// taken to be alive, and its files are kept).
fn process_alive(pid: u32) -> bool {
    if pid == std::process::id() {
        return true;
    }
    #[cfg(unix)]
    {
        let Ok(p) = libc::pid_t::try_from(pid) else {
            return true;
        };
        // Signal 0 only asks whether the process exists (EPERM: it does, not ours).
        // SAFETY: kill with signal 0 sends nothing and touches no memory.
        let r = unsafe { libc::kill(p, 0) };
        r == 0 || std::io::Error::last_os_error().raw_os_error() != Some(libc::ESRCH)
    }
    #[cfg(not(unix))]
    {
        true
    }
}

/// `tempfile`'s errors end with ` at path "…"` naming the temporary file; messages name
/// the target, so that part is cut.
fn plain(e: std::io::Error) -> std::io::Error {
    if e.raw_os_error().is_some() {
        return e;
    }
    let text = e.to_string();
    match text.split_once(" at path \"") {
        Some((head, _)) => std::io::Error::new(e.kind(), head.to_string()),
        None => e,
    }
}

/// True when `path` reaches a character or block device (a terminal, `/dev/null`).
fn is_a_terminal_or_device(path: &Path) -> bool {
    #[cfg(unix)]
    {
        use std::os::unix::fs::FileTypeExt;
        std::fs::metadata(path)
            .is_ok_and(|m| m.file_type().is_char_device() || m.file_type().is_block_device())
    }
    #[cfg(not(unix))]
    {
        let _ = path;
        false
    }
}

/// True when `a` and `b` name the same existing file (also through symbolic or hard
/// links).
pub fn same_file(a: &Path, b: &Path) -> bool {
    match (std::fs::metadata(a), std::fs::metadata(b)) {
        #[cfg(unix)]
        (Ok(x), Ok(y)) => {
            use std::os::unix::fs::MetadataExt;
            x.dev() == y.dev() && x.ino() == y.ino()
        }
        #[cfg(not(unix))]
        (Ok(_), Ok(_)) => match (std::fs::canonicalize(a), std::fs::canonicalize(b)) {
            (Ok(x), Ok(y)) => x == y,
            _ => false,
        },
        _ => false,
    }
}
