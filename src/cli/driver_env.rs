//! Keeping the GPU driver quiet on a successful run. Mesa's Wayland client (loaded with
//! the GL backend even when nothing is displayed) prints `error: XDG_RUNTIME_DIR is
//! invalid or not set in the environment.` when that variable is unset or not an
//! absolute path, which reads like a failure. tpusim never opens a window, so where the
//! variable is unusable it points it at a private temporary directory for this process.

use std::path::Path;

/// True when `value` is a runtime directory the Wayland client accepts and exists.
fn usable(value: Option<&std::ffi::OsStr>) -> bool {
    value.is_some_and(|v| {
        let p = Path::new(v);
        p.is_absolute() && p.is_dir()
    })
}

/// Sets `XDG_RUNTIME_DIR` to a fresh private directory when it is not usable; the
/// directory lives (and is removed) with the returned guard. Call before any thread or
/// GPU instance is created.
pub fn quiet_driver() -> Option<tempfile::TempDir> {
    if usable(std::env::var_os("XDG_RUNTIME_DIR").as_deref()) {
        return None;
    }
    let dir = tempfile::Builder::new()
        .prefix("tpusim-runtime-")
        .tempdir()
        .ok()?;
    std::env::set_var("XDG_RUNTIME_DIR", dir.path());
    // A signal ends the process before the guard is dropped: the handler removes it.
    tpusim::files::remove_on_signals(dir.path());
    Some(dir)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_absolute_existing_directories_are_usable() {
        assert!(usable(Some(std::env::temp_dir().as_os_str())));
        assert!(!usable(None));
        assert!(!usable(Some("relative".as_ref())));
        assert!(!usable(Some("/nonexistent/tpusim".as_ref())));
    }
}
