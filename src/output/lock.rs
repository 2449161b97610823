//! The exclusive lock of one output (a file or a folder).

use super::{kind_of, OutputError};
use std::fs::{File, TryLockError};
use std::path::{Path, PathBuf};

/// An exclusive lock on an output, held while a run writes it: the file `.NAME.lock` beside the
/// output, locked with the operating system's advisory file lock. The lock ends with the
/// process, so a killed run never blocks the next one; the file is removed when the lock is
/// dropped.
#[derive(Debug)]
pub(crate) struct OutputLock {
    file: File,
    path: PathBuf,
}

/// The lock file of `target`: `.NAME.lock` in the same folder.
fn lock_path(target: &Path) -> PathBuf {
    let name = target.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_else(|| "out".into());
    target.with_file_name(format!(".{name}.lock"))
}

#[cfg(unix)]
fn same_file(a: &std::fs::Metadata, b: &std::fs::Metadata) -> bool {
    use std::os::unix::fs::MetadataExt;
    a.dev() == b.dev() && a.ino() == b.ino()
}

#[cfg(not(unix))]
fn same_file(_: &std::fs::Metadata, _: &std::fs::Metadata) -> bool {
    true
}

impl OutputLock {
    /// Takes the lock of `target` (whose folder must exist), or fails at once with
    /// [`OutputError::Locked`] when another process holds it. `shown` is the output as the user
    /// gave it, for messages.
    pub(crate) fn acquire(target: &Path, shown: &Path) -> Result<OutputLock, OutputError> {
        let path = lock_path(target);
        // A lock file whose path another run removed (and maybe re-created) between our open and
        // our lock is not the lock: try again on the current file.
        for _ in 0..16 {
            if let Ok(m) = std::fs::symlink_metadata(&path) {
                if !m.is_file() {
                    return Err(OutputError::NotRegular {
                        path: path.display().to_string(),
                        kind: kind_of(m.file_type()),
                    });
                }
            }
            let file = std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .create(true)
                .truncate(false)
                .open(&path)
                .map_err(|e| OutputError::setup(shown, e))?;
            match file.try_lock() {
                Ok(()) => {}
                Err(TryLockError::WouldBlock) => {
                    return Err(OutputError::Locked {
                        path: shown.display().to_string(),
                        lock: path.display().to_string(),
                    })
                }
                Err(TryLockError::Error(e)) => return Err(OutputError::setup(shown, e)),
            }
            let held = file.metadata().map_err(|e| OutputError::setup(shown, e))?;
            match std::fs::symlink_metadata(&path) {
                Ok(now) if same_file(&held, &now) => return Ok(OutputLock { file, path }),
                _ => continue,
            }
        }
        Err(OutputError::Locked { path: shown.display().to_string(), lock: path.display().to_string() })
    }

    /// The lock file.
    #[cfg(test)]
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for OutputLock {
    fn drop(&mut self) {
        // Removed while still locked (the lock is released when `file` closes just after), and
        // only if the path is still our file.
        if let (Ok(held), Ok(now)) = (self.file.metadata(), std::fs::symlink_metadata(&self.path)) {
            if same_file(&held, &now) {
                let _ = std::fs::remove_file(&self.path);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_lock_fails_and_the_file_goes_with_the_first() {
        let d = tempfile::tempdir().unwrap();
        let t = d.path().join("res");
        let a = OutputLock::acquire(&t, Path::new("res")).unwrap();
        assert!(a.path().ends_with(".res.lock"));
        let e = OutputLock::acquire(&t, Path::new("res")).unwrap_err();
        assert!(matches!(e, OutputError::Locked { .. }) && e.to_string().contains("another dsa-sim run"), "{e}");
        drop(a);
        assert_eq!(std::fs::read_dir(d.path()).unwrap().count(), 0);
        let b = OutputLock::acquire(&t, Path::new("res")).unwrap();
        drop(b);
    }
}
