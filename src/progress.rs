//! Progress of long computations, reported to an observer: the library never draws on the
//! terminal itself (the command line turns these calls into progress bars).

/// Receives the progress of one computation at a time: Monte Carlo trials, the points of a
/// sweep grid. Calls may come from several worker threads at once.
pub trait Progress: Sync {
    /// A computation of `total` units starts, `done` of them already finished (rows resumed
    /// from a partial file).
    fn start(&self, total: u64, done: u64) {
        let _ = (total, done);
    }
    /// `n` more units are finished.
    fn advance(&self, n: u64) {
        let _ = n;
    }
    /// The computation is over (finished or stopped).
    fn finish(&self) {}
    /// Runs `write`, which prints to standard output while the computation runs (a sweep's
    /// rows), with any progress display taken off the terminal meanwhile, so that output and
    /// progress never share a line.
    fn suspend(&self, write: &mut dyn FnMut()) {
        write();
    }
}

/// Reports nothing.
#[derive(Debug, Clone, Copy, Default)]
pub struct Silent;

impl Progress for Silent {}
