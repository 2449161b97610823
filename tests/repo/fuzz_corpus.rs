//! Replays the committed fuzz inputs (fuzz/seeds/ and fuzz/regressions/, one folder per target)
//! through the same checks the fuzz targets make (fuzz/harness.rs), so a plain `cargo test`
//! guards every input the fuzzer ever crashed on without libFuzzer or a nightly toolchain.

#[path = "../../fuzz/harness.rs"]
mod harness;

use std::path::Path;

fn replay(target: &str, check: fn(&[u8])) {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz");
    let mut n = 0;
    for kind in ["seeds", "regressions"] {
        let dir = root.join(kind).join(target);
        let Ok(entries) = std::fs::read_dir(&dir) else { continue };
        let mut paths: Vec<_> = entries.map(|e| e.unwrap().path()).collect();
        paths.sort();
        for p in paths {
            let bytes = std::fs::read(&p).unwrap();
            let r = std::panic::catch_unwind(|| check(&bytes));
            assert!(r.is_ok(), "{target}: {} fails the fuzz checks", p.display());
            n += 1;
        }
    }
    assert!(n > 0, "no committed inputs for {target}");
}

#[test]
fn scenario_toml_inputs() {
    replay("scenario_toml", harness::scenario_toml);
}

#[test]
fn measured_csv_inputs() {
    replay("measured_csv", harness::measured_csv);
}

#[test]
fn sweep_axis_inputs() {
    replay("sweep_axis", harness::sweep_axis);
}

#[test]
fn quantize_inputs() {
    replay("quantize_input", harness::quantize_input);
}

#[test]
fn experiment_toml_inputs() {
    replay("experiment_toml", harness::experiment_toml);
}

#[test]
fn import_capture_inputs() {
    replay("import_capture", harness::import_capture);
}

#[test]
fn import_niah_inputs() {
    replay("import_niah", harness::import_niah);
}

#[test]
fn import_scores_inputs() {
    replay("import_scores", harness::import_scores);
}

#[test]
fn probe_reply_inputs() {
    replay("probe_reply", harness::probe_reply);
}
