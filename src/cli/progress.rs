//! Progress bars on stderr (only when it is a terminal): the command line's [`Progress`]
//! observer, handed to the library's long computations.

use crate::progress::Progress;
use indicatif::{ProgressBar, ProgressStyle};
use std::io::IsTerminal;
use std::sync::Mutex;

/// A progress bar drawn for each computation the library starts.
pub struct Bar {
    template: &'static str,
    enabled: bool,
    bar: Mutex<ProgressBar>,
}

impl Bar {
    /// A bar over Monte Carlo trials (`enabled = false`: draws nothing).
    pub fn trials(enabled: bool) -> Bar {
        Bar::new("{spinner} Monte Carlo {bar:30} {pos}/{len} trials, eta {eta}", enabled)
    }

    /// A bar over the points of a sweep grid (`enabled = false`: draws nothing).
    pub fn points(enabled: bool) -> Bar {
        Bar::new("{bar:40.cyan/blue} {pos}/{len} points  {elapsed_precise} (eta {eta})", enabled)
    }

    /// A bar over bootstrap resamples (`enabled = false`: draws nothing).
    pub fn resamples(enabled: bool) -> Bar {
        Bar::new("{spinner} bootstrap {bar:30} {pos}/{len} resamples, eta {eta}", enabled)
    }

    /// A bar over a probe's requests, with their rate (`enabled = false`: draws nothing).
    pub fn requests(enabled: bool) -> Bar {
        Bar::new("{spinner} probe {bar:30} {pos}/{len} requests, {per_sec}, eta {eta}", enabled)
    }

    fn new(template: &'static str, enabled: bool) -> Bar {
        Bar { template, enabled: enabled && std::io::stderr().is_terminal(), bar: Mutex::new(ProgressBar::hidden()) }
    }

    fn with(&self, f: impl FnOnce(&mut ProgressBar)) {
        if self.enabled {
            if let Ok(mut b) = self.bar.lock() {
                f(&mut b);
            }
        }
    }
}

impl Progress for Bar {
    fn start(&self, total: u64, done: u64) {
        let template = self.template;
        self.with(|b| {
            let bar = ProgressBar::new(total);
            bar.set_style(ProgressStyle::with_template(template).unwrap_or_else(|_| ProgressStyle::default_bar()));
            bar.set_position(done);
            *b = bar;
        });
    }

    fn advance(&self, n: u64) {
        self.with(|b| b.inc(n));
    }

    fn finish(&self) {
        self.with(|b| {
            b.finish_and_clear();
            *b = ProgressBar::hidden();
        });
    }

    /// Clears the bar's line, runs `write` (rows on stdout), then draws the bar again below.
    fn suspend(&self, write: &mut dyn FnMut()) {
        if !self.enabled {
            return write();
        }
        match self.bar.lock() {
            Ok(b) => b.suspend(write),
            Err(_) => write(),
        }
    }
}
