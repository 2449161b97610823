//! `--model vector` on recall / rank / sweep, and the `formats` command, as a user runs them.

use std::process::{Command, Output};

fn dsa(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_dsa-sim")).args(args).output().expect("binary runs")
}

fn json(args: &[&str]) -> serde_json::Value {
    let out = dsa(args);
    assert!(out.status.success(), "{args:?}: {}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).expect("one JSON object on stdout")
}

fn bad(args: &[&str], needles: &[&str]) {
    let out = dsa(args);
    assert_eq!(out.status.code(), Some(2), "{args:?} should exit 2");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.trim_end().lines().count(), 1, "{args:?}: one line expected, got {err}");
    assert!(!err.contains("panicked"), "{err}");
    for n in needles {
        assert!(err.contains(n), "{args:?}: `{n}` missing from {err}");
    }
    assert!(out.stdout.is_empty(), "no partial output");
}

#[test]
fn recall_and_rank_with_the_vector_model() {
    let base = [
        "--preset",
        "deepseek-v4-flash",
        "--stack",
        "none",
        "--model",
        "vector",
        "--context-len",
        "8192",
        "--trials",
        "40",
        "--seed",
        "3",
        "--json",
    ];
    let v = json(&[&["recall"], &base[..], &["--q-format", "fp4-e2m1:32:ue8m0"]].concat());
    assert_eq!(v["engine"], "montecarlo");
    assert_eq!(v["trials"], 40);
    assert_eq!(v["scenario"]["model"], "vector");
    assert_eq!(v["scenario"]["q_format"], "fp4-e2m1:32:ue8m0");
    assert_eq!(v["scenario"]["k_format"], "fp4-e2m1:32:ue8m0:floor=7.052966e-38");
    assert!(v["not_exact"].as_str().unwrap().contains("vector"));
    let r = v["recall"].as_f64().unwrap();
    assert!((0.0..=1.0).contains(&r) && v["ci_low"].as_f64().unwrap() <= r);
    // Same seed, any thread count: same answer.
    let one = json(&[&["recall"], &base[..], &["--threads", "1"]].concat());
    let two = json(&[&["recall"], &base[..], &["--threads", "2"]].concat());
    assert_eq!(one["recall"], two["recall"]);
    assert_eq!(one["rank"], two["rank"]);
    let rank = json(&[&["rank"], &base[..]].concat());
    assert_eq!(rank["n_candidates"], 2048);
    assert!(rank["quantiles"]["0.5"].as_u64().is_some());
    // The analytic engine says why it cannot.
    bad(&["recall", "--model", "vector", "--engine", "analytic"], &["vector", "montecarlo"]);
}

#[test]
fn sweep_over_alignment_with_the_vector_model() {
    let out = dsa(&[
        "sweep",
        "--preset",
        "deepseek-v4-flash",
        "--stack",
        "none",
        "--model",
        "vector",
        "--context-len",
        "4096",
        "--trials",
        "20",
        "--vary",
        "alignment=0.2,0.6",
        "--vary",
        "k_format=fp32,fp4-e2m1:32:ue8m0",
    ]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(text.lines().count(), 5, "{text}");
}

#[test]
fn formats_command() {
    let v = json(&[
        "formats",
        "--context-len",
        "8192",
        "--trials",
        "3",
        "--json",
        "--format",
        "fp32",
        "--format",
        "bf16",
        "--format",
        "nvfp4",
    ]);
    let rows = v["formats"].as_array().unwrap();
    assert_eq!(rows.len(), 3);
    for key in [
        "format",
        "q_rel_rms_error",
        "k_rel_rms_error",
        "score_corr",
        "topk_jaccard",
        "score_noise",
        "dprime",
        "dprime_loss",
    ] {
        assert!(rows[0].get(key).is_some(), "missing {key}");
    }
    assert_eq!(rows[0]["topk_jaccard"], 1.0);
    assert_eq!(rows[0]["score_noise"], 0.0);
    assert_eq!(v["scenario"]["heads"], 64);
    assert_eq!(v["scenario"]["head_dim"], 128);
    assert_eq!(v["top_k"], 512);
    assert!(v["fp32_effective"]["fit"]["ks_distance"].as_f64().is_some());
    let text = dsa(&["formats", "--context-len", "4096", "--trials", "2"]);
    assert!(text.status.success());
    assert!(String::from_utf8_lossy(&text.stdout).contains("fp4-e2m1:32:ue8m0"));
}

#[test]
fn bad_input_is_one_line_and_exit_2() {
    bad(&["formats", "--format", "fp9"], &["fp9"]);
    bad(&["formats", "--format", "fp4-e2m1:48", "--trials", "1"], &["48", "head_dim"]);
    bad(&["formats", "--trials", "0"], &["trials"]);
    bad(&["recall", "--model", "vectr"], &["model", "vectr", "scalar or vector"]);
    bad(&["recall", "--model", "vector", "--alignment", "1.5"], &["alignment", "1.5", "-1..=1"]);
    bad(&["recall", "--model", "vector", "--head-dim", "96"], &["head_dim", "96", "power of two"]);
    bad(&["recall", "--model", "vector", "--k-format", "nvfp4", "--head-dim", "8"], &["k_format", "16"]);
    bad(&["recall", "--model", "vector", "--compressor", "max"], &["compressor", "mean, gated or quest"]);
    bad(&["recall", "--model", "vector", "--outlier-channels", "500"], &["outlier_channels", "500"]);
    bad(&["recall", "--model", "vector", "--heads", "0"], &["heads"]);
}
