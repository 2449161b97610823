//! Writing results without ever losing a user's files: the one staged-folder writer (used by
//! `dsa-sim run` for experiments and calibration experiments), the one atomic file writer (used
//! by sweeps, figures and the experiment's data files), output locks and output-name checks.
//!
//! The rules, enforced here for every command:
//!
//! - **dsa-sim deletes or replaces only what it created.** A result folder carries a marker file,
//!   [`RESULT_MARKER`]; an existing output folder is replaced only if it has that marker (or is
//!   empty), and never when it holds one of the run's own input files. Anything else is refused
//!   before any work, naming the folder (bad input, exit 2).
//! - **One writer per output.** An exclusive lock (`OutputLock`, `.NAME.lock` next to the
//!   output, held with `flock` semantics so that a killed run never leaves a lock that blocks)
//!   makes a second run on the same output fail at once with one line.
//! - **Only regular files are written over.** A device, FIFO, socket or folder where a file is to
//!   be written is refused (`check_regular_target`).
//! - **Output names never collide** (`check_collisions`, called before any work).
//! - **No stray temporaries.** Every temporary is removed on every failure path; a run that was
//!   killed leaves only recognisable temporaries (`.NAME.partial/` staging folders, carrying
//!   `STAGE_MARKER`, and `.NAME.tmp-PID` files), which the next run on the same output resumes
//!   (`--resume`) or removes.
//!
//! The text a result folder holds is made safe here too: user text escaped for SVG and markdown
//! (`escape`).
//!
//! This module imports nothing else of the crate but `crate::input`: every writer above it
//! (sweep, experiment, calibrate, figure) may use it.

pub(crate) mod escape;
mod file;
mod folder;
mod lock;

pub(crate) use file::{check_regular_target, remove_stale_temporaries, write_file_atomic};
pub(crate) use folder::{missing_ancestors, remove_empty_dirs, RESULT_MARKER_TEXT, STAGE_MARKER};
pub use folder::{StageOptions, StagedDir, RESULT_MARKER};
pub(crate) use lock::OutputLock;

use std::collections::HashMap;

/// Why an output cannot be written. Its kind ([`crate::error::Classify`]): bad input (exit 2) when
/// the output named by the user is refused before any work, a failure (exit 1) when writing fails.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OutputError {
    /// The output's place cannot be prepared (its folder cannot be created, the lock file cannot
    /// be made): the path given is unusable.
    #[error("cannot write {path}: {reason}")]
    Setup {
        /// The output as given.
        path: String,
        /// The operating system's reason.
        reason: String,
    },
    /// Writing failed part-way (a full disk, a folder removed under the run).
    #[error("cannot write {path}: {reason}")]
    Write {
        /// The file or folder being written.
        path: String,
        /// The operating system's reason.
        reason: String,
    },
    /// The output folder's path is taken by something that is not a folder.
    #[error("cannot write {path}: it exists and is not a folder")]
    NotAFolder {
        /// The output as given.
        path: String,
    },
    /// The output folder exists and is not a dsa-sim result.
    #[error("{path}: the folder exists and is not a dsa-sim result (it has no {RESULT_MARKER} file): refusing to replace it; choose another --out or empty it yourself")]
    NotOurs {
        /// The folder.
        path: String,
    },
    /// The output folder holds one of the run's inputs.
    #[error("{path}: the folder holds this run's input {input}: refusing to replace it; choose another --out")]
    HoldsInput {
        /// The folder.
        path: String,
        /// The input inside it.
        input: String,
    },
    /// Another dsa-sim process is writing the same output.
    #[error("{path}: another dsa-sim run is writing it (lock {lock}): wait for it to finish or choose another output")]
    Locked {
        /// The output as given.
        path: String,
        /// The lock file.
        lock: String,
    },
    /// A file would be written over something that is not a regular file.
    #[error("{path}: is a {kind}, not a regular file: dsa-sim writes files only over regular files")]
    NotRegular {
        /// The path.
        path: String,
        /// What is there (`FIFO`, `character device`, …).
        kind: &'static str,
    },
    /// Two outputs of one run have the same name.
    #[error("output name collision: {name} would be written by both {first} and {second}; rename one of them")]
    Collision {
        /// The file both would write.
        name: String,
        /// What writes it first.
        first: String,
        /// What writes it too.
        second: String,
    },
    /// `--resume` onto the staging folder of another run.
    #[error("{path} belongs to a different experiment or dsa-sim version: delete it or run without --resume")]
    StageMismatch {
        /// The staging folder.
        path: String,
    },
    /// The output path names no folder that could be written (`/`).
    #[error("--out {path}: names no folder that can be written (give a folder name)")]
    NoName {
        /// The output as given.
        path: String,
    },
}

impl crate::error::Classify for OutputError {
    /// A refused output (not ours, locked, not a regular file, colliding names) is bad input;
    /// a failed write is a failure.
    fn kind(&self) -> crate::error::ErrorKind {
        if self.is_input() {
            crate::error::ErrorKind::Input
        } else {
            crate::error::ErrorKind::Failure
        }
    }
}

impl OutputError {
    /// Whether the error is bad input (the output named by the user is refused), as opposed to
    /// a failure while writing.
    pub(crate) fn is_input(&self) -> bool {
        !matches!(self, OutputError::Write { .. })
    }

    pub(crate) fn setup(path: &std::path::Path, e: impl std::fmt::Display) -> OutputError {
        OutputError::Setup { path: path.display().to_string(), reason: e.to_string() }
    }

    pub(crate) fn write(path: &std::path::Path, e: impl std::fmt::Display) -> OutputError {
        OutputError::Write { path: path.display().to_string(), reason: e.to_string() }
    }
}

/// Checks that no two outputs of a run share a name: `outputs` are (relative path, what writes
/// it) pairs, in the order they would be written.
pub(crate) fn check_collisions(outputs: impl IntoIterator<Item = (String, String)>) -> Result<(), OutputError> {
    let mut seen: HashMap<String, String> = HashMap::new();
    for (name, what) in outputs {
        if let Some(first) = seen.get(&name) {
            return Err(OutputError::Collision { name, first: first.clone(), second: what });
        }
        seen.insert(name, what);
    }
    Ok(())
}

/// A human name for a file type (for [`OutputError::NotRegular`]).
pub(crate) fn kind_of(t: std::fs::FileType) -> &'static str {
    #[cfg(unix)]
    {
        use std::os::unix::fs::FileTypeExt;
        if t.is_fifo() {
            return "FIFO";
        }
        if t.is_char_device() {
            return "character device";
        }
        if t.is_block_device() {
            return "block device";
        }
        if t.is_socket() {
            return "socket";
        }
    }
    if t.is_dir() {
        "folder"
    } else if t.is_symlink() {
        "symbolic link"
    } else if t.is_file() {
        "regular file"
    } else {
        "special file"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn collisions_name_both_writers() {
        let ok = [("data/a.csv".to_string(), "figure `a`".to_string()), ("data/b.csv".into(), "figure `b`".into())];
        assert!(check_collisions(ok).is_ok());
        let e = check_collisions([
            ("data/measured-x.csv".to_string(), "figure `measured-x`".to_string()),
            ("data/measured-x.csv".into(), "the copy of data `obs` (x.csv)".into()),
        ])
        .unwrap_err();
        let m = e.to_string();
        assert!(
            m.contains("data/measured-x.csv") && m.contains("figure `measured-x`") && m.contains("data `obs`"),
            "{m}"
        );
        assert!(e.is_input());
    }
}
