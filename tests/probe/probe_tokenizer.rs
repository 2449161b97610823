//! `dsa-sim probe --tokenizer tokenizer.json` against the loopback test server counting with the
//! same tokenizer (the `tokenizers` crate, on the text before the needle alone): lengths within
//! ±1% of the cells, the local count equal to the server's, the needle's first token where the
//! server finds it; a tokenizer that disagrees with the server (another model's, a chat template
//! it does not hold) stopped before the budget is spent, or at the first reply that disagrees;
//! bad files one line before any request. And `--resume` on a finished folder.

use crate::probe_server;

use probe_server::{start, tokenizer, word_tokenizer_json, Bad, Config};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::Ordering;

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

/// A refused probe: exit 2, one line naming `needle`, nothing on stdout, no output folder.
fn refused(args: &[&str], needle: &str, out: &Path) -> String {
    let (code, o, err) = dsa(args);
    assert_eq!(code, 2, "{args:?}\nstdout: {o}\nstderr: {err}");
    assert!(o.is_empty(), "{o}");
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    assert!(err.starts_with("error: ") && err.contains(needle), "{err}");
    assert!(!out.exists(), "{} was left behind", out.display());
    err
}

fn transcript(dir: &Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(dir.join("transcript.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// The test's tokenizer.json, written to `dir`.
fn tokenizer_file(dir: &Path) -> (PathBuf, String) {
    let json = word_tokenizer_json();
    let path = dir.join("tokenizer.json");
    std::fs::write(&path, &json).unwrap();
    (path, json)
}

fn with_tokenizer(json: &str) -> Config {
    let mut c = Config::healthy();
    c.tokenizer = Some(tokenizer(json));
    c
}

#[test]
fn local_counts_hit_the_cells_and_agree_with_the_server() {
    let d = tempfile::tempdir().unwrap();
    let (tok, json) = tokenizer_file(d.path());
    for tokenize in [true, false] {
        // With /tokenize the check before the run asks it; without, one request for one token.
        let mut cfg = with_tokenizer(&json);
        cfg.tokenize = tokenize;
        let srv = start(cfg);
        let out = d.path().join(format!("run-{tokenize}"));
        let j: serde_json::Value = serde_json::from_str(&ok(&[
            "probe",
            "--url",
            &srv.url,
            "--tokenizer",
            tok.to_str().unwrap(),
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
        assert_eq!(j["token_count"], "tokenizer");
        assert_eq!(j["trials"], 18);
        let recs = transcript(&out);
        assert_eq!(recs.len(), 18, "no reply was discarded");
        let needles = srv.stats.needles.lock().unwrap().clone();
        for r in &recs {
            let (target, p) = (r["target_tokens"].as_u64().unwrap(), r["prompt_tokens"].as_u64().unwrap());
            assert!(p.abs_diff(target) as f64 <= 0.01 * target as f64, "{r}");
            // The table's count is the server's usage, equal to the local count here.
            assert_eq!(r["local_tokens"].as_u64(), Some(p), "{r}");
            assert_eq!(r["positions"], "tokenizer");
            assert!((r["depth"].as_f64().unwrap() - r["target_depth"].as_f64().unwrap()).abs() < 0.02, "{r}");
            // The needle's first token (from the tokens' offsets) is where the server, counting
            // the text before it, finds it (trial i's needle is the same in every cell: at 2K
            // both depths' prompts have it, at their own starts).
            let value = r["value"].as_str().unwrap().to_string();
            let seen: Vec<u64> = needles.iter().filter(|(v, n, _)| *v == value && *n == p).map(|x| x.2).collect();
            assert!(seen.contains(&r["needle_start"].as_u64().unwrap()), "{seen:?} {r}");
            // The needle " One of the special magic numbers for KEY-KEY is: VALUE." is 14 tokens.
            assert_eq!(r["needle_tokens"], 14, "{r}");
        }
        let exact = recs.iter().filter(|r| r["prompt_tokens"] == r["target_tokens"]).count();
        assert!(exact >= 15, "{exact} of 18 exact");
        // The length search asked the server nothing: one count before the run, one request per trial.
        assert_eq!(srv.stats.tokenize.load(Ordering::Relaxed), tokenize as u64);
        assert_eq!(srv.stats.generate.load(Ordering::Relaxed), 18 + !tokenize as u64);
        let notes = j["notes"].to_string();
        assert!(notes.contains("--tokenizer checked against the server's"), "{notes}");
        assert_eq!(notes.contains("one extra request"), !tokenize, "{notes}");
        let csv = std::fs::read_to_string(out.join("measured.csv")).unwrap();
        assert!(csv.lines().next().unwrap().contains(&format!("--tokenizer {} locally", tok.display())), "{csv}");
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
}

#[test]
fn a_chat_template_is_allowed_for_or_refused_when_over_one_percent() {
    let d = tempfile::tempdir().unwrap();
    let (tok, json) = tokenizer_file(d.path());
    // The server's chat template adds 2 tokens to the BOS the tokenizer counts: measured before
    // the run, so that the server's count is the cell's.
    let srv = start(with_tokenizer(&json));
    let out = d.path().join("chat");
    ok(&[
        "probe",
        "--url",
        &srv.url,
        "--chat",
        "--tokenizer",
        tok.to_str().unwrap(),
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
        let t = r["trial"].as_u64().unwrap() % 4;
        assert_eq!(r["prompt_tokens"], 4000 + t, "{r}");
        assert_eq!(r["local_tokens"], 3998 + t, "{r}");
        assert!((r["depth"].as_f64().unwrap() - 0.3).abs() < 0.02, "{r}");
    }
    // A template of 14 tokens in a 256-token prompt: 5% more than the tokenizer counts.
    let mut cfg = with_tokenizer(&json);
    cfg.chat_extra = 12;
    let srv = start(cfg);
    let out = d.path().join("chat-long-template");
    let err = refused(
        &[
            "probe",
            "--url",
            &srv.url,
            "--chat",
            "--tokenizer",
            tok.to_str().unwrap(),
            "--context-len",
            "256,2K",
            "--depth",
            "0.5",
            "--trials",
            "2",
            "--out",
            out.to_str().unwrap(),
        ],
        "more than 1% apart",
        &out,
    );
    assert!(err.contains("chat template") && err.contains("256-token cell"), "{err}");
    assert_eq!(srv.stats.generate.load(Ordering::Relaxed), 0);
}

#[test]
fn another_models_tokenizer_is_stopped_before_the_budget() {
    let d = tempfile::tempdir().unwrap();
    let (tok, _) = tokenizer_file(d.path());
    // The server counts ceil(len / 4) tokens a word; the tokenizer one a word and punctuation.
    for tokenize in [true, false] {
        let mut cfg = Config::healthy();
        cfg.tokenize = tokenize;
        let srv = start(cfg);
        let out = d.path().join("other");
        let err = refused(
            &[
                "probe",
                "--url",
                &srv.url,
                "--tokenizer",
                tok.to_str().unwrap(),
                "--context-len",
                "8K,2K",
                "--trials",
                "5",
                "--out",
                out.to_str().unwrap(),
            ],
            "not the served model's tokenizer",
            &out,
        );
        assert!(err.contains("2000-token cell") && !err.contains("chat template"), "{err}");
        // At most the one request for one token (no /tokenize): none of the budget.
        assert_eq!(srv.stats.generate.load(Ordering::Relaxed), !tokenize as u64, "{err}");
    }
    // A server whose replies count otherwise than its /tokenize: the first reply stops the run
    // (one line; the reply is not counted).
    let (_, json) = tokenizer_file(d.path());
    let srv = start(with_tokenizer(&json).bad(Bad::UsageExtra(200)));
    let out = d.path().join("drift");
    let (code, o, err) = dsa(&[
        "probe",
        "--url",
        &srv.url,
        "--tokenizer",
        tok.to_str().unwrap(),
        "--context-len",
        "4K",
        "--trials",
        "2",
        "--max-inflight",
        "1",
        "--out",
        out.to_str().unwrap(),
    ]);
    assert_eq!(code, 2, "{o}{err}");
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    assert!(err.contains("request c0-t0") && err.contains("more than 1% apart"), "{err}");
    assert_eq!(srv.stats.generate.load(Ordering::Relaxed), 1);
    assert!(!out.exists());
}

#[test]
fn bad_tokenizer_files_are_one_line_before_any_request() {
    let d = tempfile::tempdir().unwrap();
    let srv = start(Config::healthy());
    let text = d.path().join("words.txt");
    std::fs::write(&text, "not json at all").unwrap();
    let other = d.path().join("config.json");
    std::fs::write(&other, r#"{"architectures": ["DeepseekV32ForCausalLM"], "vocab_size": 129280}"#).unwrap();
    let out = d.path().join("run");
    let missing = d.path().join("missing.json");
    let cases: Vec<(&Path, &str)> = vec![
        (&missing, "cannot read"),
        (d.path(), "a folder"),
        (&text, "not a Hugging Face tokenizer.json"),
        (&other, "not a Hugging Face tokenizer.json"),
    ];
    for (file, needle) in cases {
        let err = refused(
            &[
                "probe",
                "--url",
                &srv.url,
                "--tokenizer",
                file.to_str().unwrap(),
                "--context-len",
                "2K",
                "--out",
                out.to_str().unwrap(),
            ],
            needle,
            &out,
        );
        assert!(err.contains(&format!("--tokenizer {}", file.display())), "{err}");
        // The dry run reads it too.
        let (code, _, e) = dsa(&[
            "probe",
            "--url",
            &srv.url,
            "--tokenizer",
            file.to_str().unwrap(),
            "--context-len",
            "2K",
            "--dry-run",
        ]);
        assert_eq!((code, e.trim_end().lines().count()), (2, 1), "{e}");
    }
    let (tok, _) = tokenizer_file(d.path());
    refused(
        &[
            "probe",
            "--url",
            &srv.url,
            "--tokenizer",
            tok.to_str().unwrap(),
            "--token-count",
            "usage",
            "--context-len",
            "2K",
            "--out",
            out.to_str().unwrap(),
        ],
        "--token-count",
        &out,
    );
    let s = &srv.stats;
    assert_eq!(
        (s.generate.load(Ordering::Relaxed), s.tokenize.load(Ordering::Relaxed), s.models.load(Ordering::Relaxed)),
        (0, 0, 0)
    );
}

/// Every file of a folder (hidden ones included) with its bytes.
fn snapshot(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let mut v: Vec<(String, Vec<u8>)> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap())
        .filter(|e| e.file_type().unwrap().is_file())
        .map(|e| (e.file_name().to_string_lossy().into_owned(), std::fs::read(e.path()).unwrap()))
        .collect();
    v.sort();
    v
}

#[test]
fn resume_on_a_finished_probe_says_it_is_complete_and_leaves_it() {
    let srv = start(Config::healthy());
    let d = tempfile::tempdir().unwrap();
    let out = d.path().join("done");
    let args = [
        "probe",
        "--url",
        &srv.url,
        "--context-len",
        "2K,4K",
        "--depth",
        "0.5",
        "--trials",
        "3",
        "--out",
        out.to_str().unwrap(),
        "--json",
    ];
    let first: serde_json::Value = serde_json::from_str(&ok(&args)).unwrap();
    let files = snapshot(&out);
    let sent = srv.stats.generate.load(Ordering::Relaxed);
    let mut again = args.to_vec();
    again.push("--resume");
    let j: serde_json::Value = serde_json::from_str(&ok(&again)).unwrap();
    assert_eq!((j["requests_sent"].as_u64(), j["requests_resumed"].as_u64()), (Some(0), Some(6)), "{j}");
    assert_eq!(
        (&j["rows"], &j["model"], &j["token_count"], &j["hits"]),
        (&first["rows"], &first["model"], &first["token_count"], &first["hits"])
    );
    assert!(j["notes"].to_string().contains("nothing to resume"), "{j}");
    let mut plain: Vec<&str> = args[..args.len() - 1].to_vec();
    plain.push("--resume");
    let text = ok(&plain);
    assert!(text.contains("nothing to resume") && text.contains("0 requests sent, 6 resumed"), "{text}");
    assert_eq!(srv.stats.generate.load(Ordering::Relaxed), sent, "nothing was sent");
    assert_eq!(snapshot(&out), files, "the folder is as it was");
    // Other options: not replaced on a --resume.
    let mut other = again.clone();
    other.extend(["--seed", "7"]);
    let (code, _, err) = dsa(&other);
    assert_eq!((code, err.trim_end().lines().count()), (2, 1), "{err}");
    assert!(err.contains("finished probe of other options"), "{err}");
    assert_eq!(snapshot(&out), files);
    // A finished probe of an earlier dsa-sim (no record of its options): said, not replaced.
    std::fs::remove_file(out.join(".probe-run.json")).unwrap();
    let files = snapshot(&out);
    let (code, _, err) = dsa(&again);
    assert_eq!((code, err.trim_end().lines().count()), (2, 1), "{err}");
    assert!(err.contains("without a record of its options"), "{err}");
    assert_eq!(snapshot(&out), files);
    assert_eq!(srv.stats.generate.load(Ordering::Relaxed), sent);
    // Without --resume the same folder is measured again and replaced.
    ok(&args);
    assert_eq!(srv.stats.generate.load(Ordering::Relaxed), sent + 6);
    assert!(out.join(".probe-run.json").exists());
}
