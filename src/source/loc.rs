//! A line of kernel source (a file name's number and a line), the one every report
//! names.

use std::collections::HashSet;
use std::fmt;
use std::panic::Location;
use std::sync::Mutex;

/// A line of kernel source: a file name and a line number. A Rust kernel's come from
/// `#[track_caller]` ([`SourceLoc::caller`]); a front end for kernels written in another
/// language (the Python package) makes its own with [`SourceLoc::intern`] and hands
/// them to `Ctx::set_source`, so every report names the line the kernel author wrote.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct SourceLoc {
    /// The file name's number (`files`).
    file: u32,
    line: u32,
}

impl SourceLoc {
    /// The location of the nearest caller that is not `#[track_caller]`.
    #[track_caller]
    pub fn caller() -> Self {
        Location::caller().into()
    }

    /// `file:line` for a file name known only at run time. Each distinct file name is
    /// copied once into memory that lives as long as the process (a kernel has few source
    /// files), so sites stay `Copy`.
    pub fn intern(file: &str, line: u32) -> Self {
        static FILES: Mutex<Option<HashSet<&'static str>>> = Mutex::new(None);
        let mut files = FILES.lock().unwrap_or_else(|e| e.into_inner());
        let files = files.get_or_insert_with(HashSet::new);
        let file = match files.get(file) {
            Some(f) => *f,
            None => {
                let f: &'static str = Box::leak(file.to_owned().into_boxed_str());
                files.insert(f);
                f
            }
        };
        SourceLoc {
            file: super::files::number(file),
            line,
        }
    }

    /// The file name.
    pub fn file(&self) -> &'static str {
        super::files::name(self.file)
    }

    /// The line number (1-based).
    pub fn line(&self) -> u32 {
        self.line
    }
}

impl From<&'static Location<'static>> for SourceLoc {
    fn from(l: &'static Location<'static>) -> Self {
        SourceLoc {
            file: super::files::number(l.file()),
            line: l.line(),
        }
    }
}

impl fmt::Display for SourceLoc {
    /// `file:line`, or the name alone for a place with no line (line 0: what a sequence
    /// does at an invocation's entry and exit).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.line {
            0 => write!(f, "{}", self.file()),
            line => write!(f, "{}:{line}", self.file()),
        }
    }
}
