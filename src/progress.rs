//! Progress of long work on a terminal: one line on standard error (`checking
//! schedules 37 of 200`, `recording `k`: 1.2e6 of 4.0e7 kernel calls`), shown only when
//! standard error is a terminal and the work has taken a second, redrawn a few times a
//! second, and removed when the work ends. Elsewhere (a pipe, a file, a test) nothing
//! is printed and an update costs a comparison.

use std::time::{Duration, Instant};

/// How long work runs before its progress is shown.
pub const SHOW_AFTER: Duration = Duration::from_secs(1);

/// The progress of one piece of work (see the module docs).
pub struct Progress {
    what: String,
    total: Option<u64>,
    start: Instant,
    /// Whether standard error is a terminal (asked once).
    terminal: bool,
    bar: Option<indicatif::ProgressBar>,
}

/// True when standard error is a terminal (asked once per process).
fn on_terminal() -> bool {
    use std::io::IsTerminal;
    static TERMINAL: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *TERMINAL.get_or_init(|| std::io::stderr().is_terminal())
}

impl Progress {
    /// Work called `what`, of `total` steps when known.
    pub fn new(what: impl Into<String>, total: Option<u64>) -> Self {
        Progress {
            what: what.into(),
            total,
            start: Instant::now(),
            terminal: on_terminal(),
            bar: None,
        }
    }

    /// `done` steps are done (`note`: what the current step is, when it says more).
    pub fn set(&mut self, done: u64, note: Option<&str>) {
        if !self.terminal {
            return;
        }
        let bar = match &self.bar {
            Some(b) => b,
            None => {
                if self.start.elapsed() < SHOW_AFTER {
                    return;
                }
                let b = match self.total {
                    Some(t) => indicatif::ProgressBar::new(t),
                    None => indicatif::ProgressBar::new_spinner(),
                };
                b.set_draw_target(indicatif::ProgressDrawTarget::stderr_with_hz(4));
                let template = match self.total {
                    Some(_) => "tpusim: {msg} {human_pos} of {human_len} ({percent}%, {elapsed}, about {eta} left)",
                    None => "tpusim: {msg} {human_pos} ({elapsed})",
                };
                if let Ok(style) = indicatif::ProgressStyle::with_template(template) {
                    b.set_style(style);
                }
                b.set_message(self.what.clone());
                self.bar.insert(b)
            }
        };
        bar.set_position(done);
        if let Some(n) = note {
            bar.set_message(format!("{} ({n})", self.what));
        }
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        if let Some(b) = self.bar.take() {
            b.finish_and_clear();
        }
    }
}
