//! The progress bar: a spinner on stderr with the current scenario, server
//! and completed samples, drawn only when stderr is a terminal (hidden in
//! pipes, logs and tests). Cloning is cheap; `tick` is an atomic add.

use std::io::IsTerminal;
use std::time::Duration;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// Progress of the whole run.
#[derive(Debug, Clone)]
pub struct Progress {
    bar: ProgressBar,
}

impl Progress {
    pub fn new() -> Progress {
        let target = if std::io::stderr().is_terminal() {
            ProgressDrawTarget::stderr_with_hz(8)
        } else {
            ProgressDrawTarget::hidden()
        };
        let bar = ProgressBar::with_draw_target(None, target);
        bar.set_style(
            ProgressStyle::with_template("{spinner} [{elapsed_precise}] {msg} {pos} samples")
                .unwrap_or_else(|_| ProgressStyle::default_spinner()),
        );
        bar.enable_steady_tick(Duration::from_millis(125));
        Progress { bar }
    }

    pub fn hidden() -> Progress {
        Progress {
            bar: ProgressBar::hidden(),
        }
    }

    /// Starts a new step (resets the sample count).
    pub fn step(&self, msg: String) {
        self.bar.set_position(0);
        self.bar.set_message(msg);
    }

    pub fn tick(&self, n: u64) {
        self.bar.inc(n);
    }

    /// Prints a line without tearing the bar.
    pub fn println(&self, line: &str) {
        if self.bar.is_hidden() {
            eprintln!("{line}");
        } else {
            self.bar.println(line);
        }
    }

    /// Runs `f` with the bar hidden (for printing to stdout).
    pub fn suspend<R>(&self, f: impl FnOnce() -> R) -> R {
        self.bar.suspend(f)
    }

    pub fn finish(&self) {
        self.bar.finish_and_clear();
    }
}

impl Default for Progress {
    fn default() -> Self {
        Progress::new()
    }
}
