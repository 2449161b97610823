//! The shipped result folders reproduce (issue 42): each fast shipped experiment
//! (`experiments/NAME.toml`, under ~10 s on 2 cores) is rerun into a temporary folder by the
//! binary under test, and every data and report file is compared byte for byte with the
//! committed `results/NAME/`; figures are compared by their data (the `data/` file each is drawn
//! from, compared byte for byte, and the same figure files present), not by their pixels or
//! glyph outlines. A change that moves a printed digit regenerates the folders in the same
//! commit: `scripts/regenerate-results` (docs/cli.md, `run`).
//!
//! Every experiment file is compared unless it is listed in [`SLOW`] with its runtime, so a new
//! experiment is covered without editing this test.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;
use std::time::Instant;

use crate::common;

/// Experiments too slow for every CI run (measured on 2 shared cores, release build), compared
/// only by `scripts/regenerate-results` followed by `git diff`.
const SLOW: &[(&str, &str)] = &[
    ("indexer-formats", "about 400 s (vector-model Monte Carlo per point)"),
    ("v4-fidelity", "over 25 min (vector-model stacks, every mechanism on and off)"),
];

fn compare(name: &str) -> Result<f64, String> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let committed = root.join("results").join(name);
    if !committed.is_dir() {
        return Err(format!("{name}: no committed results/{name}/ (run scripts/regenerate-results {name})"));
    }
    let d = tempfile::tempdir().unwrap();
    let out = d.path().join(name);
    let t0 = Instant::now();
    // Run from the checkout's root with the path as the committed folders were made with
    // (scripts/regenerate-results): the report quotes the command, and data paths are named
    // as given.
    let o = Command::new(env!("CARGO_BIN_EXE_dsa-sim"))
        .current_dir(root)
        .args(["run", &format!("experiments/{name}.toml"), "--quiet", "--out"])
        .arg(&out)
        .output()
        .unwrap();
    let secs = t0.elapsed().as_secs_f64();
    if !o.status.success() {
        return Err(format!("{name}: dsa-sim run failed: {}", String::from_utf8_lossy(&o.stderr)));
    }
    let old = common::files(&committed);
    let new = common::files(&out);
    let mut diffs = Vec::new();
    let names = |m: &BTreeMap<String, Vec<u8>>| m.keys().cloned().collect::<Vec<_>>();
    if names(&old) != names(&new) {
        diffs.push(format!("the files differ: committed {:?}, rerun {:?}", names(&old), names(&new)));
    }
    for (path, bytes) in &new {
        let Some(was) = old.get(path) else { continue };
        if path.starts_with("figures/") {
            // A figure is compared by its data: a data file of the same name (data/NAME.csv, or
            // NAME.csv at the top of a calibration folder), itself compared byte for byte.
            let stem = Path::new(path).file_stem().unwrap().to_string_lossy().into_owned();
            let has_data = new.keys().any(|k| {
                !k.starts_with("figures/")
                    && k.ends_with(".csv")
                    && Path::new(k).file_stem().is_some_and(|s| s.to_string_lossy() == stem)
            });
            if !has_data {
                diffs.push(format!("{path}: no data file of the same name to compare the figure by"));
            }
            continue;
        }
        if was != bytes {
            let first = was.iter().zip(bytes).position(|(a, b)| a != b).unwrap_or(was.len().min(bytes.len()));
            let line = was[..first].iter().filter(|&&b| b == b'\n').count() + 1;
            let show = |b: &[u8]| {
                String::from_utf8_lossy(b).lines().nth(line - 1).unwrap_or("").chars().take(160).collect::<String>()
            };
            diffs.push(format!("{path}: differs from line {line}: committed {:?}, rerun {:?}", show(was), show(bytes)));
        }
    }
    if diffs.is_empty() {
        Ok(secs)
    } else {
        Err(format!("{name} ({secs:.1} s) does not reproduce (scripts/regenerate-results {name} after a deliberate change):\n  {}", diffs.join("\n  ")))
    }
}

fn experiments() -> Vec<String> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("experiments");
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "toml"))
        .map(|p| p.file_stem().unwrap().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

#[test]
fn fast_shipped_experiments_reproduce_byte_for_byte() {
    let all = experiments();
    for (s, _) in SLOW {
        assert!(all.iter().any(|e| e == s), "SLOW names {s}, which is not in experiments/");
    }
    let mut failures = Vec::new();
    for name in all.iter().filter(|n| !SLOW.iter().any(|(s, _)| s == n)) {
        match compare(name) {
            Ok(secs) => eprintln!("{name}: reproduced in {secs:.1} s"),
            Err(e) => failures.push(e),
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
