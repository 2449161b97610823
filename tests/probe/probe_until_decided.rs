//! `probe --until-decided` end to end on the loopback test server (tests/probe_server: its own
//! prompt parsing and token counting, its model dsa-sim's simulation of one DeepSeek-V4-Flash
//! indexer layer, defects planted there): one command, from a live server to the call, within
//! its budget. A healthy server ends saturated or with a physical call; each planted defect is
//! named. A `--restart-cmd` writes the k to a file the server reads at every request, as a
//! relaunch at another k would change it.

use crate::probe_server;

use probe_server::{start, Config, Defect};
use serde_json::Value;
use std::path::Path;
use std::process::Command;

const BUDGET: u64 = 4000;

fn dsa(args: &[&str]) -> (i32, String, String) {
    let o = Command::new(env!("CARGO_BIN_EXE_dsa-sim")).args(args).env_remove("OPENAI_API_KEY").output().unwrap();
    (
        o.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

/// `probe --until-decided --json` on `url` into `out`, the deployment's preset one layer.
fn until_decided(url: &str, out: &Path, extra: &[&str]) -> Value {
    let budget = BUDGET.to_string();
    let mut a = vec![
        "probe",
        "--url",
        url,
        "--out",
        out.to_str().unwrap(),
        "--until-decided",
        "--set",
        "stack=none",
        "--budget",
        &budget,
        "--max-inflight",
        "8",
        "--json",
    ];
    a.extend_from_slice(extra);
    let (code, stdout, stderr) = dsa(&a);
    assert_eq!(code, 0, "{a:?}\n{stdout}\n{stderr}");
    serde_json::from_str(&stdout).unwrap()
}

/// A temporary folder; kept (its path printed) when DSA_SIM_TEST_KEEP is set, to read the rounds.
fn tmp() -> tempfile::TempDir {
    let mut d = tempfile::tempdir().unwrap();
    if std::env::var_os("DSA_SIM_TEST_KEEP").is_some() {
        d.disable_cleanup(true);
        eprintln!("kept {}", d.path().display());
    }
    d
}

fn summary(v: &Value) -> String {
    format!("call {} decided {} stop {}: {}\n{}", v["call"], v["decided"], v["stop"], v["stop_line"], v["rounds"])
}

fn signatures(v: &Value) -> Vec<String> {
    let last = v["rounds"].as_array().unwrap().last().unwrap();
    last["signatures"].as_array().unwrap().iter().map(|s| s.as_str().unwrap().to_string()).collect()
}

/// The restart hook of a server that reads its k from `file`.
fn hook(file: &Path) -> String {
    format!("echo {{k}} > {}", file.display())
}

const GRID: &[&str] = &["--context-len", "2K..64K:x2", "--depth", "0.1,0.5,0.9", "--trials", "40"];

fn check_budget_and_files(v: &Value, out: &Path) {
    assert!(v["requests"].as_u64().unwrap() <= BUDGET, "{}", summary(v));
    let report = std::fs::read_to_string(out.join("report.md")).unwrap();
    assert!(report.contains(&format!("**call: {}**", v["call"].as_str().unwrap())), "{report}");
    for r in v["rounds"].as_array().unwrap() {
        let first = r["folders"][0][0].as_str().unwrap();
        for f in ["measured.csv", "transcript.jsonl", "verdict.txt", "verdict.json"] {
            assert!(out.join(first).join(f).is_file(), "{first}/{f} missing\n{}", summary(v));
        }
    }
}

#[test]
fn healthy_server_ends_physical() {
    let d = tmp();
    let kf = d.path().join("k");
    let cfg = Config { k_file: Some(kf.clone()), ..Config::healthy() };
    let srv = start(cfg);
    let out = d.path().join("loop");
    let v = until_decided(&srv.url, &out, &[GRID, &["--restart-cmd", &hook(&kf)]].concat());
    eprintln!("healthy: {}", summary(&v));
    assert!(
        ["saturated", "coverage-limited", "discrimination-limited"].contains(&v["call"].as_str().unwrap()),
        "{}",
        summary(&v)
    );
    assert_eq!(v["decided"], true, "{}", summary(&v));
    check_budget_and_files(&v, &out);
    // The same command again continues the finished loop: nothing is sent, the call is the same.
    let before = srv.stats.generate.load(std::sync::atomic::Ordering::Relaxed);
    let again = until_decided(&srv.url, &out, &[GRID, &["--restart-cmd", &hook(&kf)]].concat());
    assert_eq!(again["call"], v["call"]);
    assert_eq!(srv.stats.generate.load(std::sync::atomic::Ordering::Relaxed), before);
}

#[test]
fn candidate_count_limit_is_named() {
    // Nothing selected beyond 2048 candidates (8192 tokens), at any k.
    let d = tmp();
    let kf = d.path().join("k");
    let srv = start(Config { k_file: Some(kf.clone()), ..Config::healthy().with(Defect::CandidateLimit(2048)) });
    let out = d.path().join("loop");
    let v = until_decided(&srv.url, &out, &[GRID, &["--restart-cmd", &hook(&kf)]].concat());
    eprintln!("candidate limit: {}", summary(&v));
    assert_eq!(v["call"], "implementation-suspect", "{}", summary(&v));
    assert!(signatures(&v).contains(&"candidate_count_limit".to_string()), "{}", summary(&v));
    check_budget_and_files(&v, &out);
}

#[test]
fn first_k_unscored_is_named() {
    let d = tmp();
    let srv = start(Config::healthy().with(Defect::FirstKUnscored));
    let out = d.path().join("loop");
    let v = until_decided(&srv.url, &out, GRID);
    eprintln!("first k unscored: {}", summary(&v));
    assert_eq!(v["call"], "implementation-suspect", "{}", summary(&v));
    assert!(signatures(&v).contains(&"first_k_unscored".to_string()), "{}", summary(&v));
    check_budget_and_files(&v, &out);
}

#[test]
fn length_mod_4_is_named_from_the_default_spread() {
    // The grid's lengths are all ≡ 0 mod 4; probe spreads each cell's trials over 4 lengths.
    let d = tmp();
    let srv = start(Config::healthy().with(Defect::LengthMod4));
    let out = d.path().join("loop");
    let v = until_decided(&srv.url, &out, &["--context-len", "4Ki..64Ki:x2", "--depth", "0.5", "--trials", "120"]);
    eprintln!("length mod 4: {}", summary(&v));
    assert_eq!(v["call"], "implementation-suspect", "{}", summary(&v));
    assert!(signatures(&v).contains(&"length_periodic".to_string()), "{}", summary(&v));
    check_budget_and_files(&v, &out);
}

#[test]
fn prefix_cache_condition_is_named() {
    let d = tmp();
    let srv = start(Config::healthy().with(Defect::PrefixHit));
    let out = d.path().join("loop");
    let v = until_decided(
        &srv.url,
        &out,
        &["--context-len", "4K,16K,64K", "--depth", "0.5", "--trials", "40", "--prefix-cache-twice"],
    );
    eprintln!("prefix cache: {}", summary(&v));
    assert_condition_named(&v, &out, "prefix_cache");
}

#[test]
fn a_broken_build_is_named() {
    // Half the requests never select the needle.
    let d = tmp();
    let srv = start(Config::healthy().with(Defect::Broken(0.5)));
    let out = d.path().join("loop");
    let v = until_decided(&srv.url, &out, &[GRID, &["--label", "build=fork"]].concat());
    eprintln!("broken build: {}", summary(&v));
    assert_eq!(v["call"], "implementation-suspect", "{}", summary(&v));
    check_budget_and_files(&v, &out);
}

#[test]
fn a_build_condition_against_a_reference_table_is_named() {
    // The reference build measured once (`--label build=main`); the fork's loop joins that table
    // to every verdict (`--data`), so the build column is tested at identical cells.
    let d = tmp();
    let main = start(Config::healthy());
    let fork = start(Config::healthy().with(Defect::Broken(0.5)));
    let grid = ["--context-len", "4K,16K,64K", "--depth", "0.5", "--trials", "60"];
    let reference = d.path().join("main");
    let mut a = vec!["probe", "--url", &main.url, "--out", reference.to_str().unwrap(), "--label", "build=main"];
    a.extend_from_slice(&grid);
    let (code, _, stderr) = dsa(&a);
    assert_eq!(code, 0, "{stderr}");
    let table = reference.join("measured.csv");
    let out = d.path().join("loop");
    let v = until_decided(
        &fork.url,
        &out,
        &[&grid[..], &["--label", "build=fork", "--data", table.to_str().unwrap()]].concat(),
    );
    eprintln!("build condition: {}", summary(&v));
    assert_condition_named(&v, &out, "build");
}

/// The loop ended implementation-suspect on a condition column, named in its first verdict,
/// within its budget and with every file written.
fn assert_condition_named(v: &Value, out: &Path, column: &str) {
    assert_eq!(v["call"], "implementation-suspect", "{}", summary(v));
    assert!(signatures(v).contains(&"condition_dependent".to_string()), "{}", summary(v));
    let verdict = std::fs::read_to_string(out.join("round-1/verdict.txt")).unwrap();
    assert!(verdict.contains(&format!("`{column}`")), "{verdict}");
    check_budget_and_files(v, out);
}

#[test]
fn cells_at_another_k_are_listed_without_a_restart_hook() {
    let d = tmp();
    let srv = start(Config::healthy().with(Defect::CandidateLimit(2048)));
    let out = d.path().join("loop");
    let v = until_decided(&srv.url, &out, GRID);
    eprintln!("no hook: {}", summary(&v));
    let report = std::fs::read_to_string(out.join("report.md")).unwrap();
    // Either decided at the deployment's k alone, or the cells at another k are listed with the
    // command that measures them after a restart: never silently skipped.
    if v["decided"] != true {
        assert!(!v["pending"].as_array().unwrap().is_empty(), "{}", summary(&v));
    }
    for p in v["pending"].as_array().unwrap() {
        let k = p["k"].as_u64().unwrap();
        assert_ne!(k, 512);
        assert!(report.contains(&format!("to run after restarting at k = {k}")), "{report}");
        assert!(p["command"].as_str().unwrap().contains(&format!("--index-topk {k}")));
        // The command measures them as planned.
        let cells = std::fs::read_to_string(p["cells"].as_str().unwrap()).unwrap();
        assert!(cells.lines().any(|l| l.split(',').nth(1) == Some(&k.to_string())), "{cells}");
    }
}

#[test]
fn a_folder_not_ours_is_refused() {
    let d = tmp();
    let out = d.path().join("mine");
    std::fs::create_dir(&out).unwrap();
    std::fs::write(out.join("notes.txt"), "mine").unwrap();
    let (code, _, stderr) = dsa(&[
        "probe",
        "--url",
        "http://127.0.0.1:9",
        "--out",
        out.to_str().unwrap(),
        "--until-decided",
        "--context-len",
        "4K",
    ]);
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("not written by probe --until-decided"), "{stderr}");
    assert_eq!(std::fs::read_to_string(out.join("notes.txt")).unwrap(), "mine");
    let (code, _, stderr) = dsa(&[
        "probe",
        "--url",
        "http://127.0.0.1:9",
        "--out",
        d.path().join("x").to_str().unwrap(),
        "--until-decided",
        "--restart-cmd",
        "systemctl restart server",
    ]);
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("{k}"), "{stderr}");
}

#[test]
fn templates_reach_the_server_in_their_shape() {
    // gkamradt's shape, and a file of one's own; the server finds the needle by its own parsing.
    let d = tmp();
    let srv = start(Config::healthy());
    let file = d.path().join("mine.toml");
    std::fs::write(
        &file,
        "preamble = \"Read this.\\n\"\nneedle = \" The special magic {key} number is: {value}.\"\nquestion = \"\\nWhat is the special magic {key} number?\"\nanswer_prefix = \" It is\"\n",
    )
    .unwrap();
    for (name, t) in [("g", "gkamradt".to_string()), ("f", file.display().to_string())] {
        let out = d.path().join(name);
        let (code, stdout, stderr) = dsa(&[
            "probe",
            "--url",
            &srv.url,
            "--out",
            out.to_str().unwrap(),
            "--context-len",
            "4K",
            "--depth",
            "0.5",
            "--trials",
            "8",
            "--template",
            &t,
            "--json",
        ]);
        assert_eq!(code, 0, "{stdout}\n{stderr}");
        let j: Value = serde_json::from_str(&stdout).unwrap();
        // A healthy server at 4K finds (nearly) every needle: the server parsed the template's
        // needle and question (an unparsed prompt is never answered).
        assert!(j["hits"].as_u64().unwrap() >= 6, "{t}: {j}");
        let table = std::fs::read_to_string(out.join("measured.csv")).unwrap();
        assert!(table.lines().next().unwrap().contains(&format!("template {t}")), "{table}");
    }
    let (code, _, stderr) =
        dsa(&["probe", "--url", &srv.url, "--context-len", "4K", "--template", "nope.toml", "--dry-run"]);
    assert_eq!(code, 2, "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
}

#[test]
fn nothing_to_plan_is_a_result_and_unusable_hypotheses_say_why() {
    let d = tmp();
    // Every row selects every candidate (N ≤ k): no hypothesis differs from another on it.
    let dense = d.path().join("dense.csv");
    std::fs::write(&dense, "context_len,index_topk,trials,hits\n1000,512,20,20\n1500,512,20,20\n").unwrap();
    let cells = d.path().join("cells.csv");
    let (code, stdout, stderr) = dsa(&[
        "plan",
        "--preset",
        "deepseek-v4-flash",
        "--stack",
        "none",
        "--data",
        dense.to_str().unwrap(),
        "--out",
        cells.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{stdout}\n{stderr}");
    assert_eq!(stdout.lines().count(), 1, "{stdout}");
    assert!(stdout.starts_with("nothing to plan: the verdict stands ("), "{stdout}");
    assert!(!cells.exists());
    // A table whose lengths share one residue mod 4: length-periodic does not apply, and why.
    let flat = d.path().join("flat.csv");
    std::fs::write(&flat, "context_len,index_topk,trials,hits\n4000,512,20,20\n8000,512,20,3\n16000,512,20,0\n")
        .unwrap();
    let (code, _, stderr) = dsa(&[
        "plan",
        "--preset",
        "deepseek-v4-flash",
        "--stack",
        "none",
        "--data",
        flat.to_str().unwrap(),
        "--hypotheses",
        "discrimination,length-periodic",
    ]);
    assert_eq!(code, 2, "{stderr}");
    assert_eq!(stderr.trim().lines().count(), 1, "{stderr}");
    assert!(stderr.contains("`length-periodic` does not apply") && stderr.contains("≡ 0 mod 4"), "{stderr}");
    // Its planned cells spread over consecutive lengths (every residue mod 8: all rows ≡ 0 mod 8).
    let (code, _, stderr) = dsa(&[
        "plan",
        "--preset",
        "deepseek-v4-flash",
        "--stack",
        "none",
        "--data",
        flat.to_str().unwrap(),
        "--budget",
        "400",
        "--out",
        cells.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{stderr}");
    let text = std::fs::read_to_string(&cells).unwrap();
    let mut residues: Vec<u64> = text
        .lines()
        .filter(|l| !l.starts_with('#'))
        .skip(1)
        .map(|l| l.split(',').next().unwrap().parse::<u64>().unwrap() % 8)
        .collect();
    residues.sort_unstable();
    residues.dedup();
    assert_eq!(residues, (0..8).collect::<Vec<_>>(), "{text}");
}
