//! Writing one file atomically, only over a regular file, and the temporaries of such writes.

use super::{kind_of, OutputError};
use std::io::Write;
use std::path::{Path, PathBuf};

/// Refuses a target that exists and is not a regular file (following a symbolic link): a
/// device, FIFO, socket or folder is never replaced or written through.
pub(crate) fn check_regular_target(path: &Path) -> Result<(), OutputError> {
    match std::fs::metadata(path) {
        Ok(m) if m.is_file() => Ok(()),
        Ok(m) => Err(OutputError::NotRegular { path: path.display().to_string(), kind: kind_of(m.file_type()) }),
        // A dangling link or nothing at all: the rename creates (or replaces the link with) a file.
        Err(_) => Ok(()),
    }
}

/// The temporary that [`write_file_atomic`] writes `path` through: `.NAME.tmp-PID` beside it.
pub(crate) fn temp_path(path: &Path) -> PathBuf {
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_else(|| "out".into());
    path.with_file_name(format!(".{name}.tmp-{}", std::process::id()))
}

/// Writes `bytes` to `path` through a temporary file in the same folder ([`temp_path`]), then
/// renames it over `path`, so `path` is never half-written. `path` must be absent or a regular
/// file; the temporary is removed on every failure.
pub(crate) fn write_file_atomic(path: &Path, bytes: &[u8]) -> Result<(), OutputError> {
    check_regular_target(path)?;
    let tmp = temp_path(path);
    // A temporary of a dead process with our PID: ours to remove, if it is a plain file.
    if std::fs::symlink_metadata(&tmp).is_ok_and(|m| m.is_file()) {
        let _ = std::fs::remove_file(&tmp);
    }
    let written = (|| {
        let mut f = std::fs::OpenOptions::new().write(true).create_new(true).open(&tmp)?;
        f.write_all(bytes)?;
        f.flush()
    })();
    if let Err(e) = written {
        let _ = std::fs::remove_file(&tmp);
        return Err(OutputError::write(path, e));
    }
    // Checked again right before the rename: the target may have changed while writing.
    if let Err(e) = check_regular_target(path) {
        let _ = std::fs::remove_file(&tmp);
        return Err(e);
    }
    std::fs::rename(&tmp, path).map_err(|e| {
        let _ = std::fs::remove_file(&tmp);
        OutputError::write(path, e)
    })
}

/// Removes the temporaries that writes of `path` by killed processes left beside it
/// (`.NAME.tmp-PID`, regular files only). Call it while holding the output's lock.
pub(crate) fn remove_stale_temporaries(path: &Path) {
    let Some(name) = path.file_name().map(|n| n.to_string_lossy().into_owned()) else { return };
    let dir = path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    let prefix = format!(".{name}.tmp-");
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    for e in entries.flatten() {
        let f = e.file_name();
        let f = f.to_string_lossy();
        let stale =
            f.strip_prefix(&prefix).is_some_and(|pid| !pid.is_empty() && pid.bytes().all(|b| b.is_ascii_digit()));
        if stale && e.file_type().is_ok_and(|t| t.is_file()) {
            let _ = std::fs::remove_file(e.path());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_and_replaces_regular_files_only() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("a.csv");
        write_file_atomic(&p, b"one").unwrap();
        write_file_atomic(&p, b"two").unwrap();
        assert_eq!(std::fs::read(&p).unwrap(), b"two");
        let e = write_file_atomic(d.path(), b"x").unwrap_err();
        assert!(matches!(e, OutputError::NotRegular { kind: "folder", .. }), "{e}");
        assert_eq!(std::fs::read_dir(d.path()).unwrap().count(), 1);
    }

    #[test]
    fn stale_temporaries_are_removed() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("s.csv");
        for n in [".s.csv.tmp-123", ".s.csv.tmp-9", ".s.csv.tmp-x", ".t.csv.tmp-1", "s.csv"] {
            std::fs::write(d.path().join(n), "x").unwrap();
        }
        remove_stale_temporaries(&p);
        let mut left: Vec<String> =
            std::fs::read_dir(d.path()).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap()).collect();
        left.sort();
        assert_eq!(left, [".s.csv.tmp-x", ".t.csv.tmp-1", "s.csv"]);
    }
}
