//! A progress bar on stderr — only when stderr is a terminal, so logs and
//! pipes never see control characters.

use std::io::IsTerminal;

use indicatif::{ProgressBar, ProgressStyle};

/// Documents done, docs/s and an ETA from the expected total.
pub struct Progress {
    bar: Option<ProgressBar>,
}

impl Progress {
    pub fn new(total: Option<u64>, start: u64) -> Progress {
        if !std::io::stderr().is_terminal() {
            return Progress { bar: None };
        }
        let bar = match total {
            Some(t) => ProgressBar::new(t.max(start)),
            None => ProgressBar::new_spinner(),
        };
        let template = if total.is_some() {
            "{wide_bar} {human_pos}/{human_len} docs  {rate}  ETA {eta}  {msg}"
        } else {
            "{spinner} {human_pos} docs  {rate}  {msg}"
        };
        if let Ok(style) = ProgressStyle::with_template(template) {
            bar.set_style(style.with_key(
                "rate",
                |s: &indicatif::ProgressState, w: &mut dyn std::fmt::Write| {
                    let _ = write!(w, "{:.0} docs/s", s.per_sec());
                },
            ));
        }
        bar.set_position(start);
        Progress { bar: Some(bar) }
    }

    pub fn inc(&self, n: u64) {
        if let Some(b) = &self.bar {
            b.inc(n);
        }
    }

    pub fn message(&self, msg: String) {
        if let Some(b) = &self.bar {
            b.set_message(msg);
        }
    }

    pub fn finish(&self) {
        if let Some(b) = &self.bar {
            b.finish_and_clear();
        }
    }
}
