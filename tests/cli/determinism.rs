//! Determinism: every command that draws random numbers prints byte-identical JSON (and writes
//! byte-identical files) for `--threads 1`, `--threads 2` and a rerun.

use crate::common;
use common::files;
use std::path::Path;
use std::process::Command;

fn out(dir: &Path, args: &[&str]) -> Vec<u8> {
    let o = Command::new(env!("CARGO_BIN_EXE_dsa-sim")).args(args).current_dir(dir).output().unwrap();
    assert!(o.status.success(), "{args:?}: {}", String::from_utf8_lossy(&o.stderr));
    o.stdout
}

/// Runs `args` with `--threads 1`, `--threads 2` and `--threads 2` again; the three stdouts must
/// be identical. Returns the parsed JSON.
fn same_json(args: &[&str]) -> serde_json::Value {
    let d = tempfile::tempdir().unwrap();
    let dir = d.path();
    let run = |threads: &str| out(dir, &[args, &["--threads", threads]].concat());
    let one = run("1");
    let two = run("2");
    let again = run("2");
    assert!(one == two, "{args:?}: --threads 1 and --threads 2 differ");
    assert!(two == again, "{args:?}: a rerun differs");
    serde_json::from_slice(&one).unwrap_or_else(|e| panic!("{args:?}: not one JSON object: {e}"))
}

#[test]
fn recall_and_rank_monte_carlo_on_every_path() {
    let cases: Vec<Vec<&str>> = vec![
        // Exact sampling (closed-form laws), with hard negatives and correlated layers.
        vec![
            "--engine",
            "montecarlo",
            "--trials",
            "20000",
            "--hard-negatives",
            "0.01",
            "--layers",
            "3",
            "--layer-corr",
            "0.4",
            "--readout",
            "at_least:2",
        ],
        // Materialising: overlapping mean pooling.
        vec![
            "--preset",
            "deepseek-v4-flash",
            "--stack",
            "none",
            "--pooling",
            "mean",
            "--context-len",
            "8192",
            "--trials",
            "3000",
            "--seed",
            "5",
        ],
        // Materialising: noise on Student-t tokens, repeats.
        vec![
            "--distractor",
            "student_t:4",
            "--score-noise",
            "0.3",
            "--context-len",
            "4096",
            "--repeat",
            "3",
            "--trials",
            "3000",
        ],
        // The vector lightning-indexer model, quantized.
        vec![
            "--model",
            "vector",
            "--preset",
            "deepseek-v4-flash",
            "--stack",
            "none",
            "--context-len",
            "8192",
            "--trials",
            "40",
            "--q-format",
            "fp4-e2m1:32:ue8m0",
            "--k-format",
            "fp8-e4m3:128:fp32",
        ],
    ];
    for c in cases {
        let v = same_json(&[&["recall", "--json"], &c[..]].concat());
        assert_eq!(v["engine"], "montecarlo", "{c:?}");
        same_json(&[&["rank", "--json"], &c[..]].concat());
    }
}

#[test]
fn sweep_monte_carlo_json() {
    let v = same_json(&[
        "sweep",
        "--preset",
        "deepseek-v4-flash",
        "--stack",
        "none",
        "--pooling",
        "max",
        "--context-len",
        "4096",
        "--trials",
        "2000",
        "--vary",
        "dprime=1,2.5",
        "--vary",
        "index_topk=64,256",
        "--json",
        "--quiet",
    ]);
    assert_eq!(v["rows"].as_array().unwrap().len(), 4);
    assert_eq!(v["rows"][0]["engine"], "montecarlo");
}

#[test]
fn calibrate_and_verdict_with_monte_carlo() {
    let d = tempfile::tempdir().unwrap();
    let csv = "context_len,index_topk,trials,hits\n2048,64,20,18\n4096,64,20,11\n8192,128,20,7\n";
    let data = d.path().join("obs.csv");
    std::fs::write(&data, csv).unwrap();
    let data = data.to_str().unwrap();
    let common = [
        "--preset",
        "deepseek-v4-flash",
        "--stack",
        "none",
        "--pooling",
        "mean",
        "--context-len",
        "4096",
        "--trials",
        "300",
        "--seed",
        "3",
    ];
    let v = same_json(&[&["calibrate", "--data", data, "--fit", "dprime", "--json"], &common[..]].concat());
    assert!(v["estimates"]["dprime"]["value"].is_f64(), "{v}");
    let v = same_json(&[&["verdict", "--json", "--index-topk", "64", "--max-topk", "256"], &common[..]].concat());
    assert!(v["call"].is_string(), "{v}");
}

#[test]
fn formats_json() {
    let v = same_json(&[
        "formats",
        "--json",
        "--trials",
        "3",
        "--context-len",
        "16384",
        "--format",
        "fp8-e4m3:128:fp32",
        "--format",
        "fp4-e2m1:32:ue8m0",
    ]);
    assert!(v.is_object());
}

#[test]
fn run_with_a_monte_carlo_figure() {
    let d = tempfile::tempdir().unwrap();
    let dir = d.path();
    std::fs::write(
        dir.join("exp.toml"),
        r#"name = "mc"
seed = 9
trials = 2000
[scenario]
preset = "deepseek-v4-flash"
stack = "none"
pooling = "mean"
context_len = 4096
[[figure]]
name = "curves"
kind = "recall_curves"
x = "dprime=0..4:5"
series = ["index_topk=64,128"]
[[figure]]
name = "ranks"
kind = "rank_band"
x = "depth=0..1:3"
k_lines = [64]
"#,
    )
    .unwrap();
    out(dir, &["run", "exp.toml", "--out", "a", "-q", "--threads", "1"]);
    out(dir, &["run", "exp.toml", "--out", "b", "-q", "--threads", "2"]);
    out(dir, &["run", "exp.toml", "--out", "c", "-q", "--threads", "2"]);
    let a = files(&dir.join("a"));
    assert!(String::from_utf8_lossy(&a["data/curves.csv"]).contains("montecarlo"));
    for other in ["b", "c"] {
        let b = files(&dir.join(other));
        assert_eq!(a.keys().collect::<Vec<_>>(), b.keys().collect::<Vec<_>>());
        for (k, v) in &a {
            assert!(v == &b[k], "{other}/{k} differs");
        }
    }
}
