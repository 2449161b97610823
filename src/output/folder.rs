//! The one staged-folder writer: a result folder is built in `.NAME.partial` beside its final
//! place and swapped in when complete.

use super::{OutputError, OutputLock};
use std::ffi::OsString;
use std::path::{Path, PathBuf};

/// The file in every result folder that marks it as written by dsa-sim (and so replaceable by
/// dsa-sim).
pub const RESULT_MARKER: &str = ".dsa-sim-result";
/// The content of [`RESULT_MARKER`] (fixed, so that result folders reproduce byte for byte).
pub(crate) const RESULT_MARKER_TEXT: &str =
    "This folder was written by dsa-sim. dsa-sim replaces a folder only when it holds this file.\n";
/// The file in a staging folder that says which run (experiment text and dsa-sim version) it
/// belongs to, so that `--resume` continues only the same run.
pub(crate) const STAGE_MARKER: &str = ".experiment-fingerprint";

/// How to begin a staged folder.
#[derive(Debug, Clone, Copy)]
pub struct StageOptions<'a> {
    /// Continue the staging folder of an interrupted run with the same fingerprint, if there is
    /// one, instead of starting empty.
    pub resume: bool,
    /// Identifies the run (written into `STAGE_MARKER`).
    pub fingerprint: &'a str,
    /// The run's input files: an output folder holding one of them is never replaced.
    pub inputs: &'a [&'a Path],
}

/// A result folder being built. [`StagedDir::begin`] checks the output and takes its lock
/// before any work; files go into `StagedDir::path`; `StagedDir::commit` swaps the folder
/// in. Dropped without a commit (any failure), it removes its staging folder; a process that is
/// killed leaves it, with `STAGE_MARKER`, for `--resume` (or for the next run to remove).
#[derive(Debug)]
pub struct StagedDir {
    shown: PathBuf,
    target: PathBuf,
    parent: PathBuf,
    leaf: OsString,
    stage: PathBuf,
    resumed: bool,
    committed: bool,
    _lock: OutputLock,
}

fn is_file(p: &Path) -> bool {
    std::fs::symlink_metadata(p).is_ok_and(|m| m.is_file())
}

fn is_empty_dir(p: &Path) -> bool {
    std::fs::read_dir(p).is_ok_and(|mut d| d.next().is_none())
}

/// (parent folder, final name) of an output folder; `.` and `..` are resolved.
fn split(out: &Path) -> Result<(PathBuf, OsString), OutputError> {
    if out.as_os_str().is_empty() {
        return Err(OutputError::NoName { path: String::new() });
    }
    let (parent, leaf) = match out.file_name() {
        Some(leaf) => (
            out.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new(".")).to_path_buf(),
            leaf.to_os_string(),
        ),
        None => {
            let abs = std::fs::canonicalize(out).map_err(|e| OutputError::setup(out, e))?;
            match (abs.parent(), abs.file_name()) {
                (Some(p), Some(l)) => (p.to_path_buf(), l.to_os_string()),
                _ => return Err(OutputError::NoName { path: out.display().to_string() }),
            }
        }
    };
    Ok((parent, leaf))
}

/// The ancestors of `dir` (itself included) that do not exist yet, deepest first: what
/// `create_dir_all(dir)` creates, and what a refused output removes again
/// ([`remove_empty_dirs`]).
pub(crate) fn missing_ancestors(dir: &Path) -> Vec<PathBuf> {
    dir.ancestors()
        .filter(|a| !a.as_os_str().is_empty())
        .take_while(|a| std::fs::symlink_metadata(a).is_err())
        .map(Path::to_path_buf)
        .collect()
}

/// Removes the folders `dirs` (deepest first, as [`missing_ancestors`] lists them) that are still
/// empty: those a refused output created and left nothing in.
pub(crate) fn remove_empty_dirs(dirs: &[PathBuf]) {
    for d in dirs {
        let _ = std::fs::remove_dir(d); // fails, and keeps it, unless empty
    }
}

/// Whether an existing output folder may be replaced: it must be a folder, hold none of the
/// inputs, and be a dsa-sim result (the marker) or empty.
fn check_existing(target: &Path, shown: &Path, inputs: &[&Path]) -> Result<(), OutputError> {
    let meta = match std::fs::metadata(target) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            // A dangling symbolic link is not a folder either.
            if std::fs::symlink_metadata(target).is_ok() {
                return Err(OutputError::NotAFolder { path: shown.display().to_string() });
            }
            return Ok(());
        }
        Err(e) => return Err(OutputError::setup(shown, e)),
    };
    if !meta.is_dir() {
        return Err(OutputError::NotAFolder { path: shown.display().to_string() });
    }
    if let Ok(abs) = std::fs::canonicalize(target) {
        for input in inputs {
            if std::fs::canonicalize(input).is_ok_and(|i| i.starts_with(&abs)) {
                return Err(OutputError::HoldsInput {
                    path: shown.display().to_string(),
                    input: input.display().to_string(),
                });
            }
        }
    }
    if is_file(&target.join(RESULT_MARKER)) || is_empty_dir(target) {
        Ok(())
    } else {
        Err(OutputError::NotOurs { path: shown.display().to_string() })
    }
}

impl StagedDir {
    /// Checks the output folder `out` (see the module rules), takes its lock, removes what
    /// killed runs on it left behind, and prepares the staging folder: the one of an
    /// interrupted run with the same fingerprint when `opts.resume` is set, else a new, empty
    /// one holding only `STAGE_MARKER`.
    pub fn begin(out: &Path, opts: &StageOptions) -> Result<StagedDir, OutputError> {
        let (parent, leaf) = split(out)?;
        let target = parent.join(&leaf);
        check_existing(&target, out, opts.inputs)?;
        // A refused output leaves nothing behind: the folders created for it here (`results/`
        // of a default --out) are removed again when a later step refuses it.
        let created = missing_ancestors(&parent);
        std::fs::create_dir_all(&parent).map_err(|e| OutputError::setup(out, e))?;
        let begun = Self::begin_in(out, opts, parent, leaf, target);
        if begun.is_err() {
            remove_empty_dirs(&created);
        }
        begun
    }

    fn begin_in(
        out: &Path,
        opts: &StageOptions,
        parent: PathBuf,
        leaf: OsString,
        target: PathBuf,
    ) -> Result<StagedDir, OutputError> {
        let lock = OutputLock::acquire(&target, out)?;
        // Again under the lock: another run may have swapped its folder in meanwhile.
        check_existing(&target, out, opts.inputs)?;
        let name = leaf.to_string_lossy().into_owned();
        let stage = parent.join(format!(".{name}.partial"));
        let mut dir = StagedDir {
            shown: out.to_path_buf(),
            target,
            parent,
            leaf,
            stage,
            resumed: false,
            committed: true,
            _lock: lock,
        };
        dir.remove_stale_old_folders(&name);
        dir.prepare_stage(opts)?;
        dir.committed = false;
        Ok(dir)
    }

    /// Previous results that a killed run had moved aside (`.NAME.old-PID`, with the marker).
    fn remove_stale_old_folders(&self, name: &str) {
        let prefix = format!(".{name}.old-");
        let Ok(entries) = std::fs::read_dir(&self.parent) else { return };
        for e in entries.flatten() {
            let f = e.file_name().to_string_lossy().into_owned();
            let pid = f.strip_prefix(&prefix).unwrap_or("");
            if !pid.is_empty()
                && pid.bytes().all(|b| b.is_ascii_digit())
                && e.file_type().is_ok_and(|t| t.is_dir())
                && is_file(&e.path().join(RESULT_MARKER))
            {
                let _ = std::fs::remove_dir_all(e.path());
            }
        }
    }

    fn prepare_stage(&mut self, opts: &StageOptions) -> Result<(), OutputError> {
        let stage = self.stage.clone();
        let marker = stage.join(STAGE_MARKER);
        if let Ok(m) = std::fs::symlink_metadata(&stage) {
            let ours = m.is_dir() && (is_file(&marker) || is_empty_dir(&stage));
            if !ours {
                return Err(OutputError::NotOurs { path: stage.display().to_string() });
            }
            if opts.resume && is_file(&marker) {
                let text = crate::input::read_regular_file(&marker).ok().flatten();
                if text.as_deref() != Some(opts.fingerprint) {
                    return Err(OutputError::StageMismatch { path: stage.display().to_string() });
                }
                self.resumed = true;
                return Ok(());
            }
            std::fs::remove_dir_all(&stage).map_err(|e| OutputError::setup(&stage, e))?;
        }
        std::fs::create_dir(&stage).map_err(|e| OutputError::setup(&self.shown, e))?;
        std::fs::write(&marker, opts.fingerprint).map_err(|e| {
            let _ = std::fs::remove_dir_all(&stage);
            OutputError::write(&marker, e)
        })
    }

    /// The staging folder, where the run writes its files.
    pub(crate) fn path(&self) -> &Path {
        &self.stage
    }

    /// Whether the staging folder of an interrupted run is being continued.
    pub(crate) fn resumed(&self) -> bool {
        self.resumed
    }

    /// Leaves the staging folder in place, unlocked, as a killed run would (`dsa-sim probe`
    /// keeps the requests it made for `--resume` when the server fails).
    pub(crate) fn keep(mut self) {
        self.committed = true;
    }

    /// Marks the staging folder as a result ([`RESULT_MARKER`]) and moves it into place: the
    /// previous result moves aside first, so that a failed rename puts it back.
    pub(crate) fn commit(mut self) -> Result<(), OutputError> {
        let _ = std::fs::remove_file(self.stage.join(STAGE_MARKER));
        let marker = self.stage.join(RESULT_MARKER);
        std::fs::write(&marker, RESULT_MARKER_TEXT).map_err(|e| OutputError::write(&marker, e))?;
        let old = self.parent.join(format!(".{}.old-{}", self.leaf.to_string_lossy(), std::process::id()));
        let existed = std::fs::symlink_metadata(&self.target).is_ok();
        if existed {
            std::fs::rename(&self.target, &old).map_err(|e| OutputError::write(&self.shown, e))?;
        }
        if let Err(e) = std::fs::rename(&self.stage, &self.target) {
            if existed {
                let _ = std::fs::rename(&old, &self.target);
            }
            return Err(OutputError::write(&self.shown, e));
        }
        self.committed = true;
        if existed {
            let _ = std::fs::remove_dir_all(&old);
        }
        Ok(())
    }
}

impl Drop for StagedDir {
    fn drop(&mut self) {
        if !self.committed {
            let _ = std::fs::remove_dir_all(&self.stage);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(dir: &Path) -> Vec<String> {
        let mut v: Vec<String> =
            std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap()).collect();
        v.sort();
        v
    }

    const OPTS: StageOptions = StageOptions { resume: false, fingerprint: "f", inputs: &[] };

    #[test]
    fn stages_commits_and_replaces_only_its_own_folders() {
        let d = tempfile::tempdir().unwrap();
        let out = d.path().join("res");
        let s = StagedDir::begin(&out, &OPTS).unwrap();
        std::fs::write(s.path().join("a.txt"), "1").unwrap();
        s.commit().unwrap();
        assert_eq!(names(&out), [RESULT_MARKER, "a.txt"]);
        assert_eq!(names(d.path()), ["res"]);
        // A result is replaced.
        let s = StagedDir::begin(&out, &OPTS).unwrap();
        std::fs::write(s.path().join("b.txt"), "2").unwrap();
        s.commit().unwrap();
        assert_eq!(names(&out), [RESULT_MARKER, "b.txt"]);
        // A user's folder is not, and nothing is left behind.
        let mine = d.path().join("mine");
        std::fs::create_dir(&mine).unwrap();
        std::fs::write(mine.join("thesis.txt"), "x").unwrap();
        let e = StagedDir::begin(&mine, &OPTS).unwrap_err();
        assert!(matches!(e, OutputError::NotOurs { .. }) && e.is_input(), "{e}");
        // Nor a result holding an input.
        let input = out.join("b.txt");
        let inputs: &[&Path] = &[&input];
        let e = StagedDir::begin(&out, &StageOptions { inputs, ..OPTS }).unwrap_err();
        assert!(matches!(e, OutputError::HoldsInput { .. }), "{e}");
        assert_eq!(names(d.path()), ["mine", "res"]);
        assert_eq!(names(&mine), ["thesis.txt"]);
    }

    #[test]
    fn failure_removes_the_stage_and_a_second_writer_is_refused() {
        let d = tempfile::tempdir().unwrap();
        let out = d.path().join("res");
        let s = StagedDir::begin(&out, &OPTS).unwrap();
        let e = StagedDir::begin(&out, &OPTS).unwrap_err();
        assert!(matches!(e, OutputError::Locked { .. }), "{e}");
        drop(s);
        assert!(names(d.path()).is_empty());
    }

    #[test]
    fn resume_continues_only_the_same_run() {
        let d = tempfile::tempdir().unwrap();
        let out = d.path().join("res");
        let s = StagedDir::begin(&out, &OPTS).unwrap();
        std::fs::write(s.path().join("rows.csv"), "1").unwrap();
        std::mem::forget(s); // as if killed (the lock goes with the process; here, with a leak)
        let stage = d.path().join(".res.partial");
        // The leaked lock is still held by this process's open file: remove its file so that a
        // new lock file is made (as after a kill, where the lock is simply released).
        std::fs::remove_file(d.path().join(".res.lock")).unwrap();
        let e = StagedDir::begin(&out, &StageOptions { resume: true, fingerprint: "g", inputs: &[] }).unwrap_err();
        assert!(matches!(e, OutputError::StageMismatch { .. }), "{e}");
        let s = StagedDir::begin(&out, &StageOptions { resume: true, ..OPTS }).unwrap();
        assert!(s.resumed() && stage.join("rows.csv").exists());
        drop(s);
        assert!(!stage.exists());
    }
}
