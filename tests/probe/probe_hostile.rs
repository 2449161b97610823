//! `dsa-sim probe` against hostile or badly broken servers (issue 42): endless bodies, endless
//! chunked streams, compressed bodies, drips, redirects elsewhere, non-UTF-8 and HTML replies,
//! errors in a 200, unrequested event streams, absurd usage counts, huge model lists, a
//! Retry-After of a year, counts that are zero or jump, and a server that echoes the API key.
//! Each must end in bounded time with one clear line (exit 1 for a server's failure), the
//! transcript kept for `--resume`, memory bounded, and the key in no output at all.
//!
//! The server here is written on raw TCP for these tests alone, independently of the probe's
//! client and of tests/probe_server: it speaks just enough HTTP/1.1 to misbehave precisely. It
//! listens on 127.0.0.1 (an ephemeral port) only.

use serde_json::{json, Value};
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Longest any one probe run here may take before the test calls it a hang.
const LIMIT: Duration = Duration::from_secs(40);

const KEY: &str = "sk-hostile-test-9f3a1c77e2b04d18";

/// One request as the server read it.
#[derive(Debug, Clone)]
struct Req {
    #[allow(dead_code)] // kept for debugging a failing case
    method: String,
    path: String,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

impl Req {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(k, _)| k.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_str())
    }
    fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or(Value::Null)
    }
    /// The prompt's words: this server's token count.
    fn words(&self) -> u64 {
        let j = self.json();
        let text = j["prompt"]
            .as_str()
            .or_else(|| j["messages"][0]["content"].as_str())
            .or_else(|| j["text"].as_str())
            .unwrap_or("");
        text.split_whitespace().count() as u64
    }
}

type Handler = dyn Fn(u64, &Req, &mut TcpStream) + Send + Sync;

struct Server {
    url: String,
    port: u16,
    requests: Arc<Mutex<Vec<Req>>>,
    connections: Arc<AtomicU64>,
}

fn read_request(s: &mut TcpStream) -> Option<Req> {
    s.set_read_timeout(Some(Duration::from_secs(10))).ok()?;
    let mut buf = Vec::new();
    let mut b = [0u8; 4096];
    let head_end = loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
        let n = s.read(&mut b).ok()?;
        if n == 0 || buf.len() > 1 << 20 {
            return None;
        }
        buf.extend_from_slice(&b[..n]);
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).into_owned();
    let mut lines = head.split("\r\n");
    let mut first = lines.next()?.split(' ');
    let (method, path) = (first.next()?.to_string(), first.next()?.to_string());
    let headers: Vec<(String, String)> =
        lines.filter_map(|l| l.split_once(':')).map(|(k, v)| (k.trim().to_string(), v.trim().to_string())).collect();
    let len: usize = headers
        .iter()
        .find(|(k, _)| k.eq_ignore_ascii_case("content-length"))
        .and_then(|(_, v)| v.parse().ok())
        .unwrap_or(0);
    let mut body = buf[head_end..].to_vec();
    while body.len() < len {
        let n = s.read(&mut b).ok()?;
        if n == 0 {
            return None;
        }
        body.extend_from_slice(&b[..n]);
    }
    Some(Req { method, path, headers, body })
}

/// Starts a server on 127.0.0.1 answering every request with `handler(n, request, stream)`
/// (n counts requests from 0), one thread per connection, each closed after its reply.
fn serve(handler: Arc<Handler>) -> Server {
    serve_on("127.0.0.1", handler)
}

/// [`serve`] on another loopback address (127.0.0.2: "another host" for a redirect).
fn serve_on(ip: &str, handler: Arc<Handler>) -> Server {
    let l = TcpListener::bind((ip, 0)).unwrap();
    let port = l.local_addr().unwrap().port();
    let requests = Arc::new(Mutex::new(Vec::new()));
    let connections = Arc::new(AtomicU64::new(0));
    let n = Arc::new(AtomicU64::new(0));
    let (rq, cn) = (requests.clone(), connections.clone());
    std::thread::spawn(move || {
        for s in l.incoming() {
            let Ok(mut s) = s else { continue };
            cn.fetch_add(1, Ordering::SeqCst);
            let (h, rq, n) = (handler.clone(), rq.clone(), n.clone());
            std::thread::spawn(move || {
                if let Some(r) = read_request(&mut s) {
                    rq.lock().unwrap().push(r.clone());
                    let i = n.fetch_add(1, Ordering::SeqCst);
                    h(i, &r, &mut s);
                }
                let _ = s.flush();
                let _ = s.shutdown(std::net::Shutdown::Both);
            });
        }
    });
    Server { url: format!("http://{ip}:{port}"), port, requests, connections }
}

fn respond(s: &mut TcpStream, status: &str, headers: &[(&str, &str)], body: &[u8]) {
    let mut h = format!("HTTP/1.1 {status}\r\nConnection: close\r\nContent-Length: {}\r\n", body.len());
    for (k, v) in headers {
        h.push_str(&format!("{k}: {v}\r\n"));
    }
    h.push_str("\r\n");
    let _ = s.write_all(h.as_bytes());
    let _ = s.write_all(body);
}

fn respond_json(s: &mut TcpStream, status: &str, v: &Value) {
    respond(s, status, &[("Content-Type", "application/json")], v.to_string().as_bytes());
}

/// A well-formed completion reply counting the prompt's words as its tokens.
fn healthy(r: &Req, s: &mut TcpStream) {
    respond_json(
        s,
        "200 OK",
        &json!({"choices": [{"text": "no idea", "index": 0}], "usage": {"prompt_tokens": r.words(), "completion_tokens": 2}}),
    );
}

struct Run {
    code: i32,
    stdout: String,
    stderr: String,
    elapsed: Duration,
    peak_rss_kb: u64,
}

/// Runs the probe with the API key in its environment, killing it past [`LIMIT`], sampling
/// its resident memory.
fn probe(url: &str, out: &Path, extra: &[&str]) -> Run {
    let mut args: Vec<String> = ["probe", "--url", url, "--out", out.to_str().unwrap(), "--backoff", "0.01"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    // Defaults for what `extra` does not give.
    let has = |f: &str| extra.contains(&f);
    for (flag, value) in
        [("--context-len", "2K"), ("--depth", "0.5"), ("--trials", "2"), ("--retries", "1"), ("--timeout", "5")]
    {
        if !has(flag) {
            args.extend([flag.to_string(), value.to_string()]);
        }
    }
    args.extend(extra.iter().map(|s| s.to_string()));
    let t0 = Instant::now();
    let mut child = Command::new(env!("CARGO_BIN_EXE_dsa-sim"))
        .args(&args)
        .env("OPENAI_API_KEY", KEY)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let (mut o, mut e) = (child.stdout.take().unwrap(), child.stderr.take().unwrap());
    let ot = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = o.read_to_string(&mut s);
        s
    });
    let et = std::thread::spawn(move || {
        let mut s = Vec::new();
        let _ = e.read_to_end(&mut s);
        String::from_utf8_lossy(&s).into_owned()
    });
    let status_path = format!("/proc/{}/status", child.id());
    let mut peak = 0;
    let status = loop {
        if let Ok(st) = std::fs::read_to_string(&status_path) {
            if let Some(kb) = st
                .lines()
                .find(|l| l.starts_with("VmHWM:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|v| v.parse().ok())
            {
                peak = peak.max(kb);
            }
        }
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        assert!(t0.elapsed() < LIMIT, "probe {extra:?} did not end within {LIMIT:?} (a hang)");
        std::thread::sleep(Duration::from_millis(20));
    };
    Run {
        code: status.code().unwrap_or(-1),
        stdout: ot.join().unwrap(),
        stderr: et.join().unwrap(),
        elapsed: t0.elapsed(),
        peak_rss_kb: peak,
    }
}

/// Every file under `dir` (recursively), with its bytes.
fn all_files(dir: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(rd) = std::fs::read_dir(&d) else { continue };
        for e in rd.flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else if let Ok(b) = std::fs::read(&p) {
                out.push((p, b));
            }
        }
    }
    out
}

/// The key is in no file under `dir` and in neither output stream.
fn key_nowhere(dir: &Path, r: &Run) {
    assert!(!r.stderr.contains(KEY) && !r.stdout.contains(KEY), "the API key leaked into the output: {}", r.stderr);
    for (p, b) in all_files(dir) {
        assert!(!b.windows(KEY.len()).any(|w| w == KEY.as_bytes()), "the API key leaked into {}", p.display());
    }
}

/// A failed run: exit 1, one `error:` line holding `needle`, no table, the key nowhere.
fn fails(r: &Run, dir: &Path, needle: &str) {
    assert_eq!(r.code, 1, "stderr: {}", r.stderr);
    assert!(
        r.stderr.starts_with("error: ") && r.stderr.trim_end().lines().count() == 1,
        "not one line: {:?}",
        r.stderr
    );
    assert!(r.stderr.contains(needle), "missing `{needle}` in {}", r.stderr);
    assert!(!r.stderr.contains("panicked"), "{}", r.stderr);
    key_nowhere(dir, r);
}

const USAGE: &[&str] = &["--model", "m", "--token-count", "usage"];

/// A server whose generation replies are `bad` from request `from` on (the earlier ones
/// healthy), and healthy again once `mended` is set (the same address: `--resume` continues
/// only a probe of the same server).
fn bad_from(
    from: u64,
    mended: Arc<std::sync::atomic::AtomicBool>,
    bad: impl Fn(&Req, &mut TcpStream) + Send + Sync + 'static,
) -> Server {
    serve(Arc::new(move |i, r, s| if i < from || mended.load(Ordering::SeqCst) { healthy(r, s) } else { bad(r, s) }))
}

#[test]
fn endless_bodies_are_cut_at_the_per_reply_limit() {
    let d = tempfile::tempdir().unwrap();
    // Close-delimited, no length: a JSON string that never ends.
    let endless = serve(Arc::new(|_, _, s| {
        let _ = s.write_all(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: close\r\n\r\n{\"choices\": [{\"text\": \"");
        let chunk = vec![b'a'; 1 << 16];
        while s.write_all(&chunk).is_ok() {}
    }));
    // Chunked, chunks forever.
    let chunked = serve(Arc::new(|_, _, s| {
        let _ = s.write_all(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n");
        let mut chunk = format!("{:x}\r\n", 1 << 16).into_bytes();
        chunk.extend(vec![b' '; 1 << 16]);
        chunk.extend_from_slice(b"\r\n");
        while s.write_all(&chunk).is_ok() {}
    }));
    for (name, srv) in [("endless", &endless), ("chunked", &chunked)] {
        // Many requests in flight: memory stays bounded all the same.
        let out = d.path().join(name);
        let r = probe(
            &srv.url,
            &out,
            &[USAGE, &["--max-inflight", "64", "--trials", "64", "--context-len", "2K,4K"]].concat(),
        );
        fails(&r, d.path(), "per-reply limit");
        eprintln!("{name}: {:?}, peak memory {} kB; {}", r.elapsed, r.peak_rss_kb, r.stderr.trim_end());
        assert!(r.peak_rss_kb < 1 << 20, "{name}: peak memory {} kB with 64 replies in flight", r.peak_rss_kb);
    }
}

#[test]
fn compressed_streamed_and_undecodable_replies_are_one_line() {
    let d = tempfile::tempdir().unwrap();
    // A gzip "bomb": gzip bytes the request never asked for (no Accept-Encoding was sent).
    let gz = serve(Arc::new(|_, r, s| {
        assert!(r.header("Accept-Encoding").is_none_or(|v| !v.contains("gzip")), "the probe asked for gzip");
        let mut body = vec![0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 3];
        body.extend(vec![0u8; 4096]);
        respond(s, "200 OK", &[("Content-Type", "application/json"), ("Content-Encoding", "gzip")], &body);
    }));
    let r = probe(&gz.url, &d.path().join("gz"), USAGE);
    fails(&r, d.path(), "Content-Encoding: gzip");
    // An event stream nobody asked for.
    let sse = serve(Arc::new(|_, _, s| {
        respond(
            s,
            "200 OK",
            &[("Content-Type", "text/event-stream")],
            b"data: {\"choices\": [{\"text\": \"a\"}]}\n\ndata: [DONE]\n\n",
        );
    }));
    let r = probe(&sse.url, &d.path().join("sse"), USAGE);
    fails(&r, d.path(), "event stream");
    // Not UTF-8.
    let bin = serve(Arc::new(|_, _, s| {
        respond(s, "200 OK", &[("Content-Type", "application/json")], b"{\"choices\": [{\"text\": \"\xff\xfe\xfd\"}]}")
    }));
    let r = probe(&bin.url, &d.path().join("bin"), USAGE);
    fails(&r, d.path(), "not UTF-8");
    // A proxy's HTML page, as a 502 and as a 200.
    let page = b"<!DOCTYPE html>\n<html><head><title>502 Bad Gateway</title></head><body><h1>502 Bad Gateway</h1><hr>nginx</body></html>";
    let html502 = serve(Arc::new(move |_, _, s| respond(s, "502 Bad Gateway", &[("Content-Type", "text/html")], page)));
    let r = probe(&html502.url, &d.path().join("h1"), USAGE);
    fails(&r, d.path(), "HTML page (\"502 Bad Gateway\")");
    let html200 = serve(Arc::new(move |_, _, s| {
        respond(s, "200 OK", &[("Content-Type", "text/html")], b"<html><head><title>Sign in</title></head></html>")
    }));
    let r = probe(&html200.url, &d.path().join("h2"), USAGE);
    fails(&r, d.path(), "HTML page (\"Sign in\")");
    // A 200 carrying an error object.
    let err200 = serve(Arc::new(|_, _, s| {
        respond_json(
            s,
            "200 OK",
            &json!({"error": {"message": "model overloaded", "type": "server_error", "code": 503}}),
        )
    }));
    let r = probe(&err200.url, &d.path().join("e"), USAGE);
    fails(&r, d.path(), "carries an error: model overloaded");
    assert!(r.stderr.contains("after 2 attempts"), "a 200 with an error is retried: {}", r.stderr);
}

#[test]
fn a_drip_meets_the_deadline_of_the_whole_request() {
    let d = tempfile::tempdir().unwrap();
    let drip = serve(Arc::new(|_, _, s| {
        let _ = s.write_all(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n");
        loop {
            if s.write_all(b" ").is_err() {
                return;
            }
            std::thread::sleep(Duration::from_secs(1));
        }
    }));
    let r = probe(
        &drip.url,
        &d.path().join("drip"),
        &[USAGE, &["--timeout", "2", "--retries", "1", "--max-inflight", "1"]].concat(),
    );
    fails(&r, d.path(), "/v1/completions");
    assert!(r.stderr.contains("time"), "{}", r.stderr);
    // Two attempts of 2 s each, not 100000 s.
    assert!(r.elapsed < Duration::from_secs(15), "{:?}", r.elapsed);
}

#[test]
fn redirects_elsewhere_are_not_followed_and_get_no_key() {
    let d = tempfile::tempdir().unwrap();
    let elsewhere = serve_on("127.0.0.2", Arc::new(|_, r, s| healthy(r, s)));
    let target = format!("http://127.0.0.2:{}/v1/completions", elsewhere.port);
    for code in ["302 Found", "307 Temporary Redirect", "308 Permanent Redirect"] {
        let t = target.clone();
        let srv = serve(Arc::new(move |_, _, s| respond(s, code, &[("Location", &t)], b"")));
        let r = probe(&srv.url, &d.path().join("r"), USAGE);
        fails(&r, d.path(), "not followed");
        assert!(r.stderr.contains("127.0.0.2"), "{}", r.stderr);
        // The key went to the server named by --url, and nowhere else.
        assert_eq!(srv.requests.lock().unwrap()[0].header("Authorization"), Some(format!("Bearer {KEY}").as_str()));
    }
    assert_eq!(elsewhere.connections.load(Ordering::SeqCst), 0, "a redirect was followed");
}

#[test]
fn usage_that_is_negative_absurd_zero_or_missing_is_one_line() {
    let d = tempfile::tempdir().unwrap();
    for (name, usage, needle) in [
        ("negative", json!({"prompt_tokens": -5}), "usage.prompt_tokens"),
        ("fraction", json!({"prompt_tokens": 1.5e300}), "usage.prompt_tokens"),
        ("string", json!({"prompt_tokens": "many"}), "usage.prompt_tokens"),
        ("zero", json!({"prompt_tokens": 0}), "usage.prompt_tokens"),
        ("missing", json!({}), "usage.prompt_tokens"),
        ("not an object", json!([1, 2]), "/v1/completions"),
        ("absurd", json!({"prompt_tokens": u64::MAX}), "not a count of that prompt"),
    ] {
        let srv = serve(Arc::new(move |_, _, s| {
            respond_json(s, "200 OK", &json!({"choices": [{"text": "x"}], "usage": usage}))
        }));
        let r = probe(&srv.url, &d.path().join(name), USAGE);
        fails(&r, d.path(), needle);
    }
}

#[test]
fn counts_that_jump_or_stay_at_one_keep_the_length_search_bounded() {
    let d = tempfile::tempdir().unwrap();
    // usage: 1 token whatever the prompt (a prompt ever longer would be built to reach 2K).
    let one = serve(Arc::new(|_, _, s| {
        respond_json(s, "200 OK", &json!({"choices": [{"text": "x"}], "usage": {"prompt_tokens": 1}}))
    }));
    let r = probe(&one.url, &d.path().join("one"), USAGE);
    fails(&r, d.path(), "count");
    assert!(r.peak_rss_kb < 1 << 20, "peak {} kB", r.peak_rss_kb);
    // Jumping: alternately a tenth and ten times the words.
    let jump = serve(Arc::new(|i, r, s| {
        let n = if i % 2 == 0 { (r.words() / 10).max(1) } else { r.words() * 10 };
        respond_json(s, "200 OK", &json!({"choices": [{"text": "x"}], "usage": {"prompt_tokens": n}}));
    }));
    let r = probe(&jump.url, &d.path().join("jump"), USAGE);
    fails(&r, d.path(), "count");
    // /tokenize that answers 1, then jumps: the search stops after its bounded counts.
    let tok = serve(Arc::new(|i, r, s| match r.path.as_str() {
        "/tokenize" => respond_json(s, "200 OK", &json!({"count": if i % 3 == 0 { 1 } else { r.words() * 3 }})),
        _ => healthy(r, s),
    }));
    let r = probe(&tok.url, &d.path().join("tok"), &["--model", "m", "--token-count", "tokenize"]);
    fails(&r, d.path(), "tokens");
    assert!(tok.requests.lock().unwrap().len() < 200, "{} requests", tok.requests.lock().unwrap().len());
}

#[test]
fn a_model_list_of_a_million_entries_costs_no_memory() {
    let d = tempfile::tempdir().unwrap();
    let srv = serve(Arc::new(|_, r, s| {
        if r.path == "/v1/models" {
            let mut body = String::from("{\"object\": \"list\", \"data\": [");
            for i in 0..1_000_000 {
                if i > 0 {
                    body.push(',');
                }
                body.push_str(&format!("{{\"id\": \"model-{i}\", \"object\": \"model\", \"owned_by\": \"x\"}}"));
            }
            body.push_str("]}");
            respond(s, "200 OK", &[("Content-Type", "application/json")], body.as_bytes());
        } else if r.path == "/tokenize" {
            respond(s, "404 Not Found", &[], b"");
        } else {
            healthy(r, s);
        }
    }));
    let out = d.path().join("run");
    let r = probe(&srv.url, &out, &["--json"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let j: Value = serde_json::from_str(&r.stdout).unwrap();
    assert_eq!(j["model"], "model-0");
    assert!(r.peak_rss_kb < 512 << 10, "peak {} kB", r.peak_rss_kb);
    key_nowhere(d.path(), &r);
}

#[test]
fn a_retry_after_of_a_year_is_capped_and_said() {
    let d = tempfile::tempdir().unwrap();
    for ra in ["31536000", "1e300", "Fri, 31 Dec 9999 23:59:59 GMT"] {
        let srv = serve(Arc::new(move |_, _, s| {
            respond(s, "429 Too Many Requests", &[("Retry-After", ra)], b"{\"error\": {\"message\": \"slow down\"}}")
        }));
        let r = probe(&srv.url, &d.path().join("ra"), &[USAGE, &["--retries", "0"]].concat());
        fails(&r, d.path(), "capped at 60 s");
        assert!(r.stderr.contains("slow down"), "{}", r.stderr);
    }
}

#[test]
fn an_echoed_key_is_written_nowhere() {
    let d = tempfile::tempdir().unwrap();
    // Echoed in the answer, in the model id and (from request 6 until mended) in an error.
    let echo = |r: &Req| r.header("Authorization").unwrap_or("").trim_start_matches("Bearer ").to_string();
    let mended = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let m = mended.clone();
    let srv = serve(Arc::new(move |i, r, s| {
        let k = echo(r);
        match r.path.as_str() {
            "/v1/models" => respond_json(s, "200 OK", &json!({"data": [{"id": format!("model-{k}")}]})),
            "/tokenize" => respond(s, "404 Not Found", &[], format!("no tokenize for {k}").as_bytes()),
            _ if i >= 6 && !m.load(Ordering::SeqCst) => {
                respond_json(s, "401 Unauthorized", &json!({"error": {"message": format!("invalid key {k}")}}))
            }
            _ => respond_json(
                s,
                "200 OK",
                &json!({"choices": [{"text": format!("the key is {k}")}], "usage": {"prompt_tokens": r.words()}}),
            ),
        }
    }));
    let out = d.path().join("run");
    let r = probe(&srv.url, &out, &["--trials", "8", "--max-inflight", "1", "--context-len", "2K", "--depth", "0.5"]);
    fails(&r, d.path(), "invalid key [API key]");
    // The transcript is kept for --resume, the answers in it redacted.
    let kept = std::fs::read_to_string(d.path().join(".run.partial/transcript.jsonl")).unwrap();
    assert!(kept.lines().count() >= 1 && kept.contains("the key is [API key]"), "{kept}");
    // Healthy again (but still echoing): --resume finishes, and nothing holds the key.
    mended.store(true, Ordering::SeqCst);
    let r = probe(
        &srv.url,
        &out,
        &["--trials", "8", "--max-inflight", "1", "--context-len", "2K", "--depth", "0.5", "--resume"],
    );
    assert_eq!(r.code, 0, "{}", r.stderr);
    key_nowhere(d.path(), &r);
    let t = std::fs::read_to_string(out.join("transcript.jsonl")).unwrap();
    assert_eq!(t.lines().filter(|l| l.contains("\"discarded\":null")).count(), 8, "{t}");
    assert!(std::fs::read_to_string(out.join("measured.csv")).unwrap().contains("model-[API key]"));
}

#[test]
fn each_failure_keeps_the_transcript_and_resume_finishes() {
    let d = tempfile::tempdir().unwrap();
    type Reply = Box<dyn Fn(&Req, &mut TcpStream) + Send + Sync>;
    let cases: Vec<(&str, Reply)> = vec![
        (
            "html",
            Box::new(|_, s| {
                respond(s, "502 Bad Gateway", &[("Content-Type", "text/html")], b"<html><title>down</title></html>")
            }),
        ),
        ("error in a 200", Box::new(|_, s| respond_json(s, "200 OK", &json!({"error": "overloaded"})))),
        ("not UTF-8", Box::new(|_, s| respond(s, "200 OK", &[], b"\xff\xff"))),
        (
            "endless",
            Box::new(|_, s| {
                let _ = s.write_all(b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n");
                let chunk = vec![b'{'; 1 << 16];
                while s.write_all(&chunk).is_ok() {}
            }),
        ),
    ];
    for (name, bad) in cases {
        let bad = Arc::new(bad);
        let mended = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let srv = bad_from(3, mended.clone(), move |r, s| bad(r, s));
        let out = d.path().join(name.replace(' ', "-"));
        let cells =
            [USAGE, &["--context-len", "2K", "--depth", "0.5", "--trials", "6", "--max-inflight", "1"]].concat();
        let r = probe(&srv.url, &out, &cells);
        assert_eq!(r.code, 1, "{name}: {}", r.stderr);
        assert!(r.stderr.trim_end().lines().count() == 1 && r.stderr.contains("--resume"), "{name}: {}", r.stderr);
        let stage = out.parent().unwrap().join(format!(".{}.partial", out.file_name().unwrap().to_str().unwrap()));
        let kept = std::fs::read_to_string(stage.join("transcript.jsonl")).unwrap();
        assert!(!kept.is_empty(), "{name}: nothing kept");
        for l in kept.lines() {
            serde_json::from_str::<Value>(l)
                .unwrap_or_else(|e| panic!("{name}: a transcript line is not JSON ({e}): {l}"));
        }
        mended.store(true, Ordering::SeqCst);
        let r = probe(&srv.url, &out, &[&cells[..], &["--resume"]].concat());
        assert_eq!(r.code, 0, "{name}: {}", r.stderr);
        let t = std::fs::read_to_string(out.join("transcript.jsonl")).unwrap();
        let counted = t.lines().filter(|l| l.contains("\"discarded\":null")).count();
        assert_eq!(counted, 6, "{name}: {t}");
        key_nowhere(d.path(), &r);
    }
}
