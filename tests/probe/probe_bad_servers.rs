//! `dsa-sim probe` against bad servers: each failure is a retry or one clear line (exit 1),
//! never a corrupted table; an interrupted probe resumes from its transcript, losing nothing.

use crate::probe_server;

use probe_server::{raw, start, Bad, Config};
use std::path::Path;
use std::process::Command;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

fn dsa(args: &[&str]) -> (i32, String, String) {
    let o = Command::new(env!("CARGO_BIN_EXE_dsa-sim")).args(args).env_remove("OPENAI_API_KEY").output().unwrap();
    (
        o.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&o.stdout).into(),
        String::from_utf8_lossy(&o.stderr).into(),
    )
}

fn probe(url: &str, out: &Path, extra: &[&str]) -> (i32, String, String) {
    let mut a = vec!["--context-len", "2K,4K", "--depth", "0.5", "--trials", "3"];
    a.extend_from_slice(extra);
    probe_cells(url, out, &a)
}

fn probe_cells(url: &str, out: &Path, extra: &[&str]) -> (i32, String, String) {
    let mut a = vec!["probe", "--url", url, "--backoff", "0.01", "--out", out.to_str().unwrap()];
    a.extend_from_slice(extra);
    dsa(&a)
}

/// A failed probe: exit 1, one line naming `needle`, and no output folder (nothing counted, so
/// nothing is kept either).
fn fails_cleanly(code: i32, out: &str, err: &str, dir: &Path, needle: &str) {
    assert_eq!(code, 1, "{err}");
    assert!(out.is_empty(), "{out}");
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    assert!(err.starts_with("error: ") && err.contains(needle), "{err}");
    assert!(!dir.join("run").exists());
}

#[test]
fn wrong_json_no_usage_wrong_layout_are_one_line() {
    let d = tempfile::tempdir().unwrap();
    let out = d.path().join("run");
    let srv = start(Config::healthy().bad(Bad::WrongJson));
    let (c, o, e) = probe(&srv.url, &out, &["--retries", "2"]);
    fails_cleanly(c, &o, &e, d.path(), "not valid JSON");
    assert!(e.contains("after 3 attempts"), "{e}");
    // No usage and no /tokenize: the tokens cannot be counted.
    let mut cfg = Config::healthy().bad(Bad::NoUsage);
    cfg.tokenize = false;
    let srv = start(cfg);
    let (c, o, e) = probe(&srv.url, &out, &[]);
    fails_cleanly(c, &o, &e, d.path(), "usage.prompt_tokens");
    // No usage but /tokenize: the tokenizer's count is used.
    let srv = start(Config::healthy().bad(Bad::NoUsage));
    let (c, _, e) = probe(&srv.url, &out, &[]);
    assert_eq!(c, 0, "{e}");
    std::fs::remove_dir_all(&out).unwrap();
    let srv = start(Config::healthy().bad(Bad::WrongLayout));
    let (c, o, e) = probe(&srv.url, &out, &[]);
    fails_cleanly(c, &o, &e, d.path(), "choices[0].text");
}

#[test]
fn a_server_that_ignores_the_capture_request_is_one_line_at_its_first_reply() {
    // `return_indexer_topk` is SGLang's field; that vLLM reads the same one is an assumption
    // (docs/capture.md): a server that ignores it is said at once, not found by `import topk`.
    for api in [&["--generate"][..], &[]] {
        let d = tempfile::tempdir().unwrap();
        let out = d.path().join("run");
        let srv = start(Config::healthy().bad(Bad::IgnoresCapture));
        let (c, o, e) = probe(&srv.url, &out, &[api, &["--capture", "--max-inflight", "1"]].concat());
        fails_cleanly(c, &o, &e, d.path(), "--capture: the reply carries no indexer_topk");
        assert!(e.contains("ignored return_indexer_topk") && e.contains("--enable-return-indexer-topk"), "{e}");
        assert_eq!(srv.stats.generate.load(Ordering::Relaxed), 1, "stopped at the first reply");
    }
}

#[test]
fn truncated_replies_and_closed_connections_are_retried_then_one_line() {
    let d = tempfile::tempdir().unwrap();
    let out = d.path().join("run");
    for (reply, retries) in [(&b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 4000\r\n\r\n{\"choices\": [{\"text\""[..], 2u64), (&b""[..], 1)] {
        let (url, conns) = raw(reply);
        let r = retries.to_string();
        let (c, o, e) = probe(&url, &out, &["--model", "m", "--token-count", "usage", "--retries", &r, "--max-inflight", "1"]);
        fails_cleanly(c, &o, &e, d.path(), "/v1/completions");
        assert!(e.contains(&format!("after {} attempts", retries + 1)), "{e}");
        assert_eq!(conns.load(Ordering::Relaxed), retries + 1, "{e}");
    }
}

#[test]
fn http_500_and_429_are_retried_with_retry_after_honoured() {
    let d = tempfile::tempdir().unwrap();
    let srv = start(Config::healthy().bad(Bad::Status500(3)));
    let out = d.path().join("a");
    let (c, _, e) = probe(&srv.url, &out, &["--max-inflight", "1"]);
    assert_eq!(c, 0, "{e}");
    let t = std::fs::read_to_string(out.join("transcript.jsonl")).unwrap();
    assert!(t.lines().next().unwrap().contains("\"attempts\":4"), "{t}");
    let srv = start(Config::healthy().bad(Bad::TooMany(1, 1)));
    let out = d.path().join("b");
    let t0 = Instant::now();
    let (c, _, e) = probe(&srv.url, &out, &["--max-inflight", "1"]);
    assert_eq!(c, 0, "{e}");
    assert!(t0.elapsed() >= Duration::from_secs(1), "Retry-After: 1 was not waited for");
    let t = std::fs::read_to_string(out.join("transcript.jsonl")).unwrap();
    assert!(t.lines().next().unwrap().contains("\"attempts\":2"), "{t}");
}

#[test]
fn slow_replies_time_out_and_are_retried() {
    let d = tempfile::tempdir().unwrap();
    let out = d.path().join("run");
    let srv = start(Config::healthy().bad(Bad::Slow(Duration::from_secs(3))));
    let t0 = Instant::now();
    let (c, o, e) = probe(&srv.url, &out, &["--timeout", "0.3", "--retries", "1", "--max-inflight", "1"]);
    fails_cleanly(c, &o, &e, d.path(), "after 2 attempts");
    assert!(e.to_lowercase().contains("timed out") || e.contains("timeout"), "{e}");
    assert!(t0.elapsed() < Duration::from_secs(3), "{:?}", t0.elapsed());
}

fn table_rows(dir: &Path) -> String {
    std::fs::read_to_string(dir.join("measured.csv"))
        .unwrap()
        .lines()
        .filter(|l| !l.starts_with('#'))
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn a_failing_server_keeps_the_transcript_and_resume_loses_nothing() {
    let d = tempfile::tempdir().unwrap();
    // The reference: the whole run in one go.
    let srv = start(Config::healthy());
    let whole = d.path().join("whole");
    let cells = ["--context-len", "4K,16K", "--depth", "0.2,0.8", "--trials", "5", "--max-inflight", "2"];
    let (c, _, e) = probe_cells(&srv.url, &whole, &cells);
    assert_eq!(c, 0, "{e}");
    // The server starts failing after 7 requests.
    srv.stats.fail_from.store(srv.stats.generate.load(Ordering::SeqCst) + 7, Ordering::SeqCst);
    let out = d.path().join("run");
    let (c, o, e) = probe_cells(&srv.url, &out, &[&cells[..], &["--retries", "1"]].concat());
    assert_eq!(c, 1, "{e}");
    assert!(
        o.is_empty() && e.trim_end().lines().count() == 1 && e.contains("--resume") && e.contains("HTTP 503"),
        "{e}"
    );
    assert!(!out.exists(), "a failed run must not leave a table");
    let stage = d.path().join(".run.partial");
    let kept = std::fs::read_to_string(stage.join("transcript.jsonl")).unwrap();
    assert!((5..=8).contains(&kept.lines().count()), "{kept}");
    // Healthy again: --resume sends only what is missing.
    srv.stats.fail_from.store(0, Ordering::SeqCst);
    let before = srv.stats.generate.load(Ordering::SeqCst);
    let (c, o, e) = probe_cells(&srv.url, &out, &[&cells[..], &["--resume", "--json"]].concat());
    assert_eq!(c, 0, "{e}");
    let j: serde_json::Value = serde_json::from_str(&o).unwrap();
    let sent = srv.stats.generate.load(Ordering::SeqCst) - before;
    assert_eq!(sent + kept.lines().count() as u64, 20, "{j}");
    assert_eq!(j["requests_resumed"].as_u64().unwrap(), kept.lines().count() as u64);
    assert_eq!(table_rows(&out), table_rows(&whole));
    let ids: Vec<String> = std::fs::read_to_string(out.join("transcript.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap()["id"].as_str().unwrap().to_string())
        .collect();
    let mut u = ids.clone();
    u.sort();
    u.dedup();
    assert_eq!((ids.len(), u.len()), (20, 20));
}

#[test]
fn a_killed_probe_resumes_to_the_same_table() {
    let d = tempfile::tempdir().unwrap();
    let srv = start(Config::healthy().bad(Bad::Slow(Duration::from_millis(40))));
    let cells = ["--context-len", "4K", "--depth", "0.1,0.5,0.9", "--trials", "10", "--max-inflight", "2"];
    let whole = d.path().join("whole");
    let (c, _, e) = probe_cells(&srv.url, &whole, &cells);
    assert_eq!(c, 0, "{e}");
    let out = d.path().join("run");
    let mut a = vec!["probe", "--url", srv.url.as_str(), "--backoff", "0.01", "--out", out.to_str().unwrap()];
    a.extend_from_slice(&cells);
    let mut child = Command::new(env!("CARGO_BIN_EXE_dsa-sim")).args(&a).spawn().unwrap();
    let stage = d.path().join(".run.partial").join("transcript.jsonl");
    let t0 = Instant::now();
    while std::fs::read_to_string(&stage).map_or(0, |t| t.lines().count()) < 5 && t0.elapsed() < Duration::from_secs(20)
    {
        std::thread::sleep(Duration::from_millis(10));
    }
    child.kill().unwrap();
    child.wait().unwrap();
    let kept = std::fs::read_to_string(&stage).unwrap().lines().count();
    assert!((5..30).contains(&kept), "{kept}");
    a.push("--resume");
    let (c, _, e) = dsa(&a);
    assert_eq!(c, 0, "{e}");
    assert_eq!(table_rows(&out), table_rows(&whole));
}

#[test]
fn the_key_is_sent_and_never_written() {
    let d = tempfile::tempdir().unwrap();
    let srv = start(Config::healthy());
    let out = d.path().join("run");
    let o = Command::new(env!("CARGO_BIN_EXE_dsa-sim"))
        .args([
            "probe",
            "--url",
            &srv.url,
            "--context-len",
            "2K",
            "--trials",
            "2",
            "--api-key-env",
            "PROBE_TEST_KEY",
            "--out",
            out.to_str().unwrap(),
        ])
        .env("PROBE_TEST_KEY", "sk-secret-4242")
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let auth = srv.stats.auth.lock().unwrap().clone();
    assert!(!auth.is_empty() && auth.iter().all(|a| a == "Bearer sk-secret-4242"), "{auth:?}");
    for f in ["measured.csv", "transcript.jsonl"] {
        assert!(!std::fs::read_to_string(out.join(f)).unwrap().contains("sk-secret"), "{f}");
    }
    assert!(!String::from_utf8_lossy(&o.stdout).contains("sk-secret"));
}
