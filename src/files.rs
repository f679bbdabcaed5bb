//! Files the user names. Inputs are read whole with the path in every error; outputs
//! are checked before a run (by creating and removing a file next to them) and written
//! to a temporary file in the same directory that is renamed over the target when it is
//! complete, so a failed run leaves neither a truncated file nor a clobbered good one.
//! Special files (`/dev/null`, `/dev/stdout`, pipes) are written in place.

use crate::error::{Error, Result};
use std::fs::{File, Permissions};
use std::io::{BufWriter, Read, Write};
use std::path::{Path, PathBuf};

fn file_error(action: String, path: &Path, source: std::io::Error) -> Error {
    Error::File {
        action,
        path: path.to_path_buf(),
        source,
    }
}

/// Reads the file at `path` whole; `what` names it in errors ("input"). A file larger
/// than `cap` bytes is refused before it is read.
pub fn read(path: &Path, what: &str, cap: Option<u64>) -> Result<Vec<u8>> {
    let action = || format!("read {what}");
    let fail = |e| file_error(action(), path, e);
    let meta = std::fs::metadata(path).map_err(fail)?;
    if meta.is_dir() {
        return Err(file_error(action(), path, is_a_directory()));
    }
    if let Some(cap) = cap {
        if meta.is_file() && meta.len() > cap {
            return Err(Error::TooLarge(format!(
                "{what} {} is {} but {} of memory are available",
                path.display(),
                crate::units::bytes(meta.len() as f64),
                crate::units::bytes(cap as f64)
            )));
        }
    }
    let f = File::open(path).map_err(fail)?;
    let mut bytes = Vec::new();
    let limit = cap.unwrap_or(u64::MAX);
    f.take(limit.saturating_add(1))
        .read_to_end(&mut bytes)
        .map_err(fail)?;
    if bytes.len() as u64 > limit {
        return Err(Error::TooLarge(format!(
            "{what} {} holds more than the {} of memory available",
            path.display(),
            crate::units::bytes(limit as f64)
        )));
    }
    Ok(bytes)
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
    /// A device, pipe or socket: written in place.
    Stream,
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
    /// directory, and a file can be created next to it (then removed again).
    pub fn check(path: &Path, what: &str) -> Result<Self> {
        let fail = |e| file_error(format!("write {what} to"), path, e);
        let target = match std::fs::metadata(path) {
            Ok(m) if m.is_dir() => return Err(fail(is_a_directory())),
            Ok(m) if !m.is_file() => {
                // Opening a device or pipe for writing is the only check that means something.
                std::fs::OpenOptions::new()
                    .append(true)
                    .open(path)
                    .map_err(fail)?;
                Target::Stream
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
                let dir = match path.parent() {
                    Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
                    _ => PathBuf::from("."),
                };
                let name = path
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
        if let Target::Replace { dir, .. } = &out.target {
            // Create and remove a file where the real one will be written.
            drop(out.temp(dir).map_err(fail)?);
        }
        Ok(out)
    }

    /// The path as the user gave it.
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn temp(&self, dir: &Path) -> std::io::Result<tempfile::NamedTempFile> {
        let mut b = tempfile::Builder::new();
        b.prefix(".tpusim-").suffix(".tmp");
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            // The mode a plain create would give (the umask applies to it).
            b.permissions(Permissions::from_mode(0o666));
        }
        b.tempfile_in(dir).map_err(plain)
    }

    /// Writes the output with `fill`: whole, or not at all (see the module docs).
    pub fn write_with(
        &self,
        fill: impl FnOnce(&mut dyn Write) -> std::io::Result<()>,
    ) -> Result<()> {
        let fail = |e| file_error(format!("write {} to", self.what), &self.path, e);
        match &self.target {
            Target::Stream => {
                let f = std::fs::OpenOptions::new()
                    .append(true)
                    .open(&self.path)
                    .map_err(fail)?;
                let mut w = BufWriter::new(f);
                fill(&mut w).and_then(|_| w.flush()).map_err(fail)
            }
            Target::Replace { dir, file, keep } => {
                let tmp = self.temp(dir).map_err(fail)?;
                let mut w = BufWriter::new(tmp);
                fill(&mut w).and_then(|_| w.flush()).map_err(fail)?;
                let tmp = w.into_inner().map_err(|e| fail(e.into_error()))?;
                tmp.as_file().sync_all().map_err(fail)?;
                if let Some(p) = keep {
                    tmp.as_file().set_permissions(p.clone()).map_err(fail)?;
                }
                tmp.persist(file).map_err(|e| fail(plain(e.error)))?;
                Ok(())
            }
        }
    }

    /// Writes `bytes` (see [`Output::write_with`]).
    pub fn write(&self, bytes: &[u8]) -> Result<()> {
        self.write_with(|w| w.write_all(bytes))
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

/// True when `a` and `b` name the same existing file.
pub fn same_file(a: &Path, b: &Path) -> bool {
    match (std::fs::canonicalize(a), std::fs::canonicalize(b)) {
        (Ok(x), Ok(y)) => x == y,
        _ => false,
    }
}
