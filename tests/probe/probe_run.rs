//! `dsa-sim probe` against the loopback test server (tests/probe_server): exact lengths, depths
//! where the needle sits, scoring, the output folder, captures that `import topk --manifest`
//! reads, conditions, resume, dry run, and bad input.

use crate::probe_server;

use probe_server::{start, Config, Defect};
use std::path::Path;
use std::process::Command;

fn dsa(args: &[&str]) -> (i32, String, String) {
    let o = Command::new(env!("CARGO_BIN_EXE_dsa-sim")).args(args).env_remove("OPENAI_API_KEY").output().unwrap();
    (
        o.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&o.stdout).into(),
        String::from_utf8_lossy(&o.stderr).into(),
    )
}

fn ok(args: &[&str]) -> String {
    let (code, out, err) = dsa(args);
    assert_eq!(code, 0, "{args:?}\nstdout: {out}\nstderr: {err}");
    out
}

fn transcript(dir: &Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(dir.join("transcript.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

#[test]
fn exact_lengths_depths_and_a_table_verdict_reads() {
    let srv = start(Config::healthy());
    let d = tempfile::tempdir().unwrap();
    let out = d.path().join("run1");
    let j: serde_json::Value = serde_json::from_str(&ok(&[
        "probe",
        "--url",
        &srv.url,
        "--context-len",
        "2K,8K,4003",
        "--depth",
        "0.1,0.9",
        "--trials",
        "3",
        "--out",
        out.to_str().unwrap(),
        "--json",
    ]))
    .unwrap();
    assert_eq!(j["model"], "test/dsv4-sim");
    assert_eq!(j["token_count"], "tokenize");
    assert_eq!(j["trials"], 18);
    let recs = transcript(&out);
    assert_eq!(recs.len(), 18);
    for r in &recs {
        let target = r["target_tokens"].as_u64().unwrap();
        let p = r["prompt_tokens"].as_u64().unwrap();
        assert!(p.abs_diff(target) as f64 <= 0.01 * target as f64, "{r}");
        // The server's own count of this prompt: its /tokenize and its usage agree.
        let d = r["depth"].as_f64().unwrap();
        assert!((d - r["target_depth"].as_f64().unwrap()).abs() < 0.02, "{r}");
        assert_eq!(r["hit"].as_bool().unwrap(), r["answer"].as_str().unwrap().contains(r["value"].as_str().unwrap()));
        assert_eq!(r["positions"], "tokenize");
    }
    // The exact length is reached when the haystack allows it (4003 included).
    let exact = recs.iter().filter(|r| r["prompt_tokens"] == r["target_tokens"]).count();
    assert!(exact >= 15, "{exact} of 18 exact");
    let csv = std::fs::read_to_string(out.join("measured.csv")).unwrap();
    assert!(csv.starts_with("# provenance: dsa-sim probe"), "{csv}");
    assert!(
        csv.contains("test/dsv4-sim") && csv.contains(&srv.url) && csv.contains("seed 20251201") && csv.contains("UTC"),
        "{csv}"
    );
    assert!(out.join(".dsa-sim-result").exists());
    // The table is one the verdict takes as it is.
    let (code, _, err) = dsa(&[
        "verdict",
        "--preset",
        "deepseek-v4-flash",
        "--stack",
        "none",
        "--data",
        out.join("measured.csv").to_str().unwrap(),
        "--json",
    ]);
    assert_eq!(code, 0, "{err}");
}

#[test]
fn the_same_probe_writes_the_same_table_whatever_the_inflight_count() {
    let srv = start(Config::healthy());
    let d = tempfile::tempdir().unwrap();
    let run = |name: &str, inflight: &str| {
        let out = d.path().join(name);
        ok(&[
            "probe",
            "--url",
            &srv.url,
            "--context-len",
            "4K,16K",
            "--depth",
            "0.1,0.9",
            "--trials",
            "6",
            "--max-inflight",
            inflight,
            "--out",
            out.to_str().unwrap(),
        ]);
        let table: Vec<String> =
            std::fs::read_to_string(out.join("measured.csv")).unwrap().lines().skip(1).map(str::to_string).collect();
        let mut prompts: Vec<(String, u64, u64)> = transcript(&out)
            .iter()
            .map(|r| (r["id"].as_str().unwrap().to_string(), r["words"].as_u64().unwrap(), r["skip"].as_u64().unwrap()))
            .collect();
        prompts.sort();
        (table, prompts)
    };
    assert_eq!(run("a", "1"), run("b", "8"));
}

#[test]
fn chat_and_usage_only_servers() {
    // Chat completions: the template's tokens are counted by the server (its /tokenize with
    // messages), so the lengths still hit the cell.
    let srv = start(Config::healthy());
    let d = tempfile::tempdir().unwrap();
    let out = d.path().join("chat");
    ok(&[
        "probe",
        "--url",
        &srv.url,
        "--chat",
        "--context-len",
        "4K",
        "--depth",
        "0.3",
        "--trials",
        "3",
        "--out",
        out.to_str().unwrap(),
    ]);
    for r in transcript(&out) {
        // Trial t at 4000 + t mod 4 (the default --spread).
        assert_eq!(r["prompt_tokens"], 4000 + r["trial"].as_u64().unwrap() % 4, "{r}");
        assert!((r["depth"].as_f64().unwrap() - 0.3).abs() < 0.02, "{r}");
    }
    // No /tokenize (as SGLang's /generate): the reply's count; positions estimated.
    let mut cfg = Config::healthy();
    cfg.tokenize = false;
    let srv = start(cfg);
    let out = d.path().join("usage");
    let j: serde_json::Value = serde_json::from_str(&ok(&[
        "probe",
        "--url",
        &srv.url,
        "--generate",
        "--context-len",
        "2K,16K",
        "--depth",
        "0.2,0.8",
        "--trials",
        "3",
        "--out",
        out.to_str().unwrap(),
        "--json",
    ]))
    .unwrap();
    assert_eq!(j["token_count"], "usage");
    assert_eq!(j["trials"], 12);
    // A /tokenize of another shape (TGI) refuses the probe's fields, and llama.cpp's reads
    // `content` and answers them with no tokens (200): usage counts then, both.
    for (bad, name) in [(probe_server::Bad::OtherTokenize, "tgi"), (probe_server::Bad::EmptyTokenize, "llama")] {
        let srv = start(Config::healthy().bad(bad));
        let out = d.path().join(name);
        let args = ["probe", "--url", &srv.url, "--context-len", "2K", "--depth", "0.5", "--trials", "2", "--out"];
        let mut args: Vec<&str> = args.to_vec();
        args.extend([out.to_str().unwrap(), "--json"]);
        let j: serde_json::Value = serde_json::from_str(&ok(&args)).unwrap();
        assert_eq!((j["token_count"].as_str(), j["trials"].as_u64()), (Some("usage"), Some(2)), "{name}");
    }
    for r in transcript(&out).iter().filter(|r| r["discarded"].is_null()) {
        let (p, t) = (r["prompt_tokens"].as_u64().unwrap(), r["target_tokens"].as_u64().unwrap());
        assert!(p.abs_diff(t) as f64 <= 0.01 * t as f64, "{r}");
        assert_eq!(r["positions"], "estimate");
        assert!((r["depth"].as_f64().unwrap() - r["target_depth"].as_f64().unwrap()).abs() < 0.03, "{r}");
    }
}

#[test]
fn captures_are_read_by_import_topk_as_written() {
    for generate in [true, false] {
        // k = 128 and a weak needle: at 2K-3K tokens (500-750 candidates) some needles are missed
        // (the server's needle is as long as its sentence, five entries or so: a needle scored
        // below a typical distractor still leaves both outcomes).
        let mut cfg = Config::healthy();
        cfg.scenario.index_topk = 128;
        cfg.scenario.dprime = -0.5;
        let srv = start(cfg);
        let d = tempfile::tempdir().unwrap();
        let out = d.path().join("caps");
        let mut args = vec![
            "probe",
            "--url",
            &srv.url,
            "--context-len",
            "2K,3K",
            "--depth",
            "0.5",
            "--trials",
            "4",
            "--capture",
            "--out",
            out.to_str().unwrap(),
        ];
        if generate {
            args.push("--generate");
        }
        let text = ok(&args);
        assert!(text.contains("captures and manifest.csv"), "{text}");
        let man = std::fs::read_to_string(out.join("manifest.csv")).unwrap();
        assert_eq!(man.lines().count(), 9, "{man}");
        let sel = d.path().join("selections.csv");
        let j: serde_json::Value = serde_json::from_str(&ok(&[
            "import",
            "topk",
            "--manifest",
            out.join("manifest.csv").to_str().unwrap(),
            "--layers",
            "1",
            "--index-topk",
            "128",
            "--compress-ratio",
            "4",
            "--overlap",
            "true",
            "--out",
            sel.to_str().unwrap(),
            "--json",
        ]))
        .unwrap();
        // Each request's selection agrees with its scored answer (the server selects the needle iff it answers).
        let recs = transcript(&out);
        let hits = recs.iter().filter(|r| r["hit"] == true).count() as u64;
        let per = j["per_request"].as_array().unwrap();
        assert_eq!(j["requests"].as_u64().unwrap(), 8, "{j}");
        for r in &recs {
            let sel = per.iter().find(|p| p["request"] == r["id"]).unwrap();
            assert_eq!(sel["layers_selected"].as_u64().unwrap() > 0, r["hit"] == true, "{sel} {r}");
            assert_eq!(sel["context_len"], r["prompt_tokens"]);
        }
        assert!(hits > 0 && hits < 8, "{hits} of 8 found: the check needs both");
    }
}

#[test]
fn conditions_concurrency_prefix_cache_and_labels() {
    let srv = start(Config::healthy().with(Defect::PrefixHit));
    let d = tempfile::tempdir().unwrap();
    let out = d.path().join("c");
    ok(&[
        "probe",
        "--url",
        &srv.url,
        "--context-len",
        "16K",
        "--depth",
        "0.5",
        "--trials",
        "4",
        "--concurrency",
        "1,4",
        "--prefix-cache-twice",
        "--label",
        "build=main",
        "--out",
        out.to_str().unwrap(),
    ]);
    assert!(srv.stats.max_inflight.load(std::sync::atomic::Ordering::SeqCst) >= 2);
    let csv = std::fs::read_to_string(out.join("measured.csv")).unwrap();
    let header = csv.lines().find(|l| !l.starts_with('#')).unwrap();
    assert_eq!(header, "context_len,index_topk,depth,repeat,needle_tokens,build,concurrency,prefix_cache,trials,hits");
    // A prompt seen before (the second send) loses its needle on this server.
    for l in csv.lines().filter(|l| l.contains(",hit,")) {
        assert!(l.ends_with(",0"), "{csv}");
    }
    assert_eq!(transcript(&out).len(), 16);
}

#[test]
fn dry_run_sends_nothing_and_bad_input_is_one_line() {
    let srv = start(Config::healthy());
    let j: serde_json::Value = serde_json::from_str(&ok(&[
        "probe",
        "--url",
        &srv.url,
        "--context-len",
        "2K..64K:x2",
        "--depth",
        "0.1,0.5,0.9",
        "--repeat",
        "1,8",
        "--trials",
        "5",
        "--dry-run",
        "--json",
    ]))
    .unwrap();
    assert_eq!(j["requests"], 6 * 3 * 2 * 5);
    // Trial t at the cell's length + t mod 4 (the default --spread): 0 + 1 + 2 + 3 + 0 more per cell.
    assert_eq!(j["prompt_tokens"], (2000 + 4000 + 8000 + 16000 + 32000 + 64000) * 3 * 2 * 5 + 6 * 3 * 2 * 6);
    assert_eq!(j["spread"], 4);
    assert_eq!(
        srv.stats.generate.load(std::sync::atomic::Ordering::Relaxed)
            + srv.stats.models.load(std::sync::atomic::Ordering::Relaxed),
        0
    );
    let d = tempfile::tempdir().unwrap();
    let mine = d.path().join("mine");
    std::fs::create_dir(&mine).unwrap();
    std::fs::write(mine.join("notes.txt"), "mine").unwrap();
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (vec!["--context-len", "2K", "--depth", "1.5"], "--depth"),
        (vec!["--context-len", "10"], "--context-len"),
        (vec!["--depth", "0.5"], "--context-len"),
        (vec!["--context-len", "2K", "--label", "dprime=2"], "--label"),
        (vec!["--context-len", "2K", "--concurrency", "8"], "--max-inflight"),
        (vec!["--context-len", "2K", "--chat", "--capture"], "--capture"),
        (vec!["--context-len", "2K", "--token-count", "guess"], "--token-count"),
        (vec!["--context-len", "2K", "--cells", "x.csv"], "--cells"),
    ];
    for (extra, needle) in cases {
        let mut a = vec!["probe", "--url", srv.url.as_str(), "--out", mine.to_str().unwrap()];
        a.extend(extra.iter());
        let (code, out, err) = dsa(&a);
        assert_eq!(code, 2, "{a:?}: {err}");
        assert!(out.is_empty() && err.trim_end().lines().count() == 1 && err.contains(needle), "{a:?}: {err}");
    }
    // A folder dsa-sim did not write is never replaced.
    let (code, _, err) =
        dsa(&["probe", "--url", &srv.url, "--context-len", "2K", "--trials", "1", "--out", mine.to_str().unwrap()]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("not a dsa-sim result"), "{err}");
    assert_eq!(std::fs::read_dir(&mine).unwrap().count(), 1);
    assert_eq!(srv.stats.generate.load(std::sync::atomic::Ordering::Relaxed), 0);
}
