//! The `recall` and `rank` commands as a user runs them.

use std::process::{Command, Output};

fn dsa(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_dsa-sim")).args(args).output().expect("binary runs")
}

fn json(args: &[&str]) -> serde_json::Value {
    let out = dsa(args);
    assert!(out.status.success(), "{args:?}: {}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).expect("one JSON object on stdout")
}

#[test]
fn recall_json_has_the_contract_keys() {
    let v = json(&["recall", "--preset", "deepseek-v4-flash", "--stack", "none", "--context-len", "131072", "--json"]);
    for key in ["recall", "ci_low", "ci_high", "engine", "trials", "scenario", "seed"] {
        assert!(v.get(key).is_some(), "missing {key}");
    }
    assert_eq!(v["engine"], "analytic");
    assert!(v["trials"].is_null());
    assert_eq!(v["ci_low"], v["recall"]);
    assert_eq!(v["ci_high"], v["recall"]);
    assert_eq!(v["scenario"]["compress_ratio"], 4);
    assert_eq!(v["scenario"]["overlap"], true);
    assert_eq!(v["scenario"]["context_len"], 131072);
    assert_eq!(v["coverage_horizon_tokens"], 2048);
    // The number is the library's.
    let s = dsa_sim::Scenario {
        context_len: 131_072,
        ..dsa_sim::Scenario::preset("deepseek-v4-flash").unwrap().one_layer()
    };
    let exact = dsa_sim::engine::analytic::recall(&s).unwrap();
    assert_eq!(v["recall"].as_f64().unwrap(), exact);
}

#[test]
fn monte_carlo_json_and_thread_independence() {
    let args = [
        "recall",
        "--preset",
        "deepseek-v4-flash",
        "--stack",
        "none",
        "--pooling",
        "mean",
        "--context-len",
        "16384",
        "--trials",
        "3000",
        "--seed",
        "9",
        "--json",
    ];
    let one = dsa(&[&args[..], &["--threads", "1"]].concat());
    let two = dsa(&[&args[..], &["--threads", "2"]].concat());
    assert!(one.status.success());
    assert_eq!(one.stdout, two.stdout, "JSON must not depend on the thread count");
    let again = dsa(&[&args[..], &["--threads", "2"]].concat());
    assert_eq!(two.stdout, again.stdout, "reruns must repeat");
    let v: serde_json::Value = serde_json::from_slice(&one.stdout).unwrap();
    assert_eq!(v["engine"], "montecarlo");
    assert_eq!(v["trials"], 3000);
    assert_eq!(v["seed"], 9);
    assert!(v["ci_low"].as_f64().unwrap() <= v["recall"].as_f64().unwrap());
    assert!(v["ci_high"].as_f64().unwrap() >= v["recall"].as_f64().unwrap());
    assert!(v["not_exact"].as_str().unwrap().contains("correlated"));
}

#[test]
fn rank_json_has_the_contract_keys() {
    let v = json(&["rank", "--context-len", "1000000", "--dprime", "3.5", "--json"]);
    assert_eq!(v["n_candidates"], 1_000_000);
    for q in ["0.05", "0.5", "0.9", "0.95"] {
        assert!(v["quantiles"][q].is_u64(), "quantile {q}: {}", v["quantiles"][q]);
    }
    let cdf = v["cdf"].as_array().unwrap();
    assert!(cdf.len() > 10);
    let mut prev = 0.0;
    for pair in cdf {
        let p = pair[1].as_f64().unwrap();
        assert!(p >= prev - 1e-12 && p <= 1.0, "CDF must be non-decreasing");
        prev = p;
    }
    let q50 = v["quantiles"]["0.5"].as_u64().unwrap();
    let q90 = v["quantiles"]["0.9"].as_u64().unwrap();
    assert!(q50 <= q90);
}

#[test]
fn human_output_summarises() {
    let out = dsa(&["recall", "--preset", "deepseek-v4-flash", "--stack", "none", "--context-len", "65536"]);
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains("recall 0."), "{text}");
    assert!(text.contains("coverage horizon 2048 tokens"), "{text}");
    assert!(text.contains("median"), "{text}");
    let out = dsa(&["recall", "--preset", "deepseek-v4-flash", "--stack", "none", "--depth", "1"]);
    assert!(String::from_utf8(out.stdout).unwrap().contains("sliding window"));
}

#[test]
fn scenario_files_and_presets() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.toml");
    std::fs::write(&path, "preset = \"deepseek-v4-pro\"\ncontext_len = 262144\ndprime = 2.5\n").unwrap();
    let v = json(&["recall", "--scenario", path.to_str().unwrap(), "--dprime", "3", "--json"]);
    assert_eq!(v["scenario"]["index_topk"], 1024);
    assert_eq!(v["scenario"]["context_len"], 262144);
    assert_eq!(v["scenario"]["dprime"], 3.0, "flags override the file");
}

#[test]
fn bad_input_exits_2_with_one_line() {
    let dir = tempfile::tempdir().unwrap();
    let bad_toml = dir.path().join("bad.toml");
    std::fs::write(&bad_toml, "context_len = [1, 2\n").unwrap();
    let unknown = dir.path().join("unknown.toml");
    std::fs::write(&unknown, "contxt_len = 5\n").unwrap();
    let missing = dir.path().join("missing.toml");
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (vec!["recall", "--depth", "1.5"], "depth"),
        (vec!["recall", "--depth", "NaN"], "depth"),
        (vec!["recall", "--dprime", "inf"], "dprime"),
        (vec!["recall", "--context-len", "-5"], "context_len"),
        (vec!["recall", "--context-len", "0"], "context_len"),
        (vec!["recall", "--index-topk", "0"], "index_topk"),
        (vec!["recall", "--compress-ratio", "0"], "compress_ratio"),
        (vec!["recall", "--needle-sd", "-1"], "needle_sd"),
        (vec!["recall", "--score-noise", "-0.1"], "score_noise"),
        (vec!["recall", "--layer-corr", "1.1"], "layer_corr"),
        (vec!["recall", "--layers", "2", "--readout", "at_least:3"], "readout"),
        (vec!["recall", "--readout", "most"], "readout"),
        (vec!["recall", "--distractor", "cauchy"], "distractor"),
        (vec!["recall", "--distractor", "student_t:1"], "distractor"),
        (vec!["recall", "--pooling", "sum"], "pooling"),
        (vec!["recall", "--p-read", "2"], "p_read"),
        (vec!["recall", "--repeat", "0"], "repeat"),
        (vec!["recall", "--hard-negatives", "2.5"], "hard_negatives"),
        (vec!["recall", "--needle-tokens", "100", "--context-len", "10"], "needle_tokens"),
        (vec!["recall", "--preset", "deepseek-v9"], "deepseek-v9"),
        (vec!["recall", "--engine", "quantum"], "engine"),
        (vec!["recall", "--trials", "0"], "trials"),
        (vec!["recall", "--threads", "0"], "threads"),
        (
            vec![
                "recall",
                "--engine",
                "analytic",
                "--pooling",
                "mean",
                "--preset",
                "deepseek-v4-flash",
                "--stack",
                "none",
            ],
            "analytic",
        ),
        (vec!["recall", "--scenario", bad_toml.to_str().unwrap()], "line 2"),
        (vec!["recall", "--scenario", unknown.to_str().unwrap()], "contxt_len"),
        (vec!["recall", "--scenario", missing.to_str().unwrap()], "missing.toml"),
        (vec!["recall", "--no-such-flag"], "--no-such-flag"),
        (vec!["rank", "--window", "x"], "window"),
        (vec!["rank", "--overlap", "maybe"], "overlap"),
    ];
    for (args, needle) in cases {
        let out = dsa(&args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert_eq!(err.trim_end().lines().count(), 1, "{args:?}: one line expected, got {err}");
        assert!(err.contains(needle), "{args:?}: {err} should name {needle}");
        assert!(!err.contains("panicked"), "{args:?}: {err}");
        assert!(out.stdout.is_empty(), "{args:?}: nothing on stdout");
    }
}

#[test]
fn help_teaches() {
    let out = dsa(&["recall", "--help"]);
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    for flag in
        ["--context-len", "--index-topk", "--dprime", "--score-noise", "--preset", "--seed", "--json", "Examples"]
    {
        assert!(text.contains(flag), "help lacks {flag}");
    }
}
