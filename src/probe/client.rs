//! The HTTP client of `dsa-sim probe`: OpenAI-compatible `/v1/completions`,
//! `/v1/chat/completions` and `/v1/models`, SGLang's native `/generate`, vLLM-style
//! `/tokenize`; timeouts, and retries with exponential backoff on 429, 5xx, broken connections
//! and malformed replies (`Retry-After` honoured, in seconds or as an HTTP-date). Blocking (ureq), one agent shared by the
//! worker threads.

use super::ProbeError;
use serde_json::{json, Value};
use std::io::Read;
use std::path::Path;
use std::time::{Duration, Instant};

/// Largest generation reply (and error body) read into memory: an answer is at most 4096
/// tokens (`--max-tokens`), well under 1 MiB of JSON, so a larger reply is not one. With at
/// most 256 requests in flight, replies in memory stay under 1 GiB in all whatever
/// `--max-inflight` (docs/capture.md, "Limits").
pub(crate) const MAX_REPLY_BYTES: u64 = 4 << 20;

/// Largest `/tokenize` or `/v1/models` reply: read as a stream that keeps only the count or
/// the first model id (constant memory), so this bound is on time, not memory; it is above the
/// token ids of the longest prompt a cell may ask for (2^24 tokens, ~140 MB).
pub(crate) const MAX_LIST_BYTES: u64 = 256 << 20;

/// Largest capture (`--capture`), streamed to its file, never held: a 64K-token capture is
/// ~3.7 GB; an endless one stops here instead of filling the disk.
pub(crate) const MAX_CAPTURE_BYTES: u64 = 64 << 30;

/// What the API key is replaced with wherever a server echoes it back (an error message, an
/// answer, a model id, a capture): it is never written to a file or a message.
pub const KEY_SHOWN: &str = "[API key]";

/// Which endpoint generates the answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub(crate) enum Api {
    /// `/v1/completions` (the prompt as text).
    Completions,
    /// `/v1/chat/completions` (the prompt as one user message).
    Chat,
    /// SGLang's native `/generate`.
    Generate,
}

impl Api {
    /// The endpoint's path.
    pub(crate) fn path(self) -> &'static str {
        match self {
            Api::Completions => "/v1/completions",
            Api::Chat => "/v1/chat/completions",
            Api::Generate => "/generate",
        }
    }
}

/// How requests are retried.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RetryPolicy {
    /// Retries after the first attempt.
    pub retries: u32,
    /// The first backoff; each retry doubles it.
    pub base: Duration,
    /// The longest wait (also caps a server's Retry-After).
    pub max: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy { retries: 5, base: Duration::from_millis(500), max: Duration::from_secs(60) }
    }
}

impl RetryPolicy {
    /// The wait before retry `n` (1-based): base · 2^(n−1), capped, or the server's Retry-After.
    pub fn wait(&self, n: u32, retry_after: Option<Duration>) -> Duration {
        if let Some(ra) = retry_after {
            return ra.min(self.max);
        }
        let f = 2u32.saturating_pow(n.saturating_sub(1).min(20));
        self.base.saturating_mul(f).min(self.max)
    }
}

/// Parses a `Retry-After` value (RFC 9110 §10.2.3): delay-seconds, or an HTTP-date, whose delay
/// is counted from now (a date already past: retry at once).
pub fn parse_retry_after(v: &str) -> Option<Duration> {
    parse_retry_after_at(v, std::time::SystemTime::now())
}

/// [`parse_retry_after`] with the clock given (an HTTP-date's delay is `date − now`).
pub(crate) fn parse_retry_after_at(v: &str, now: std::time::SystemTime) -> Option<Duration> {
    let v = v.trim();
    if let Ok(s) = v.parse::<u64>() {
        return Some(Duration::from_secs(s));
    }
    if let Some(d) = v.parse::<f64>().ok().filter(|s| s.is_finite() && *s >= 0.0) {
        // A value past Duration's range (1e300 s) is as good as forever: the policy caps it.
        return Some(Duration::try_from_secs_f64(d).unwrap_or(Duration::MAX));
    }
    // The date parser of the `httpdate` crate (IMF-fixdate and the two obsolete forms).
    httpdate::parse_http_date(v).ok().map(|at| at.duration_since(now).unwrap_or(Duration::ZERO))
}

/// One generated answer.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Answer {
    /// The answer's text.
    pub(crate) text: String,
    /// The server's count of the prompt's tokens, when the reply has one.
    pub(crate) prompt_tokens: Option<u64>,
    /// Attempts it took.
    pub(crate) attempts: u32,
    /// Wall time of the successful attempt.
    pub(crate) elapsed: Duration,
}

/// What one attempt's failure means.
enum Attempt {
    /// Worth retrying (after the wait, or the server's Retry-After).
    Retry(String, Option<Duration>),
    /// Not worth retrying: the request itself is refused.
    Fatal(String),
}

/// How a request's reply is read.
#[derive(Clone, Copy)]
enum Reply<'a> {
    /// A generation reply, read into memory (at most [`MAX_REPLY_BYTES`]).
    Generate,
    /// A generation reply streamed to this file first (a capture, at most [`MAX_CAPTURE_BYTES`]).
    Capture(&'a Path),
    /// `/v1/models`: only the first model id is kept, read as a stream.
    Models,
    /// `/tokenize`: only the count is kept, read as a stream.
    Tokenize,
}

/// A client of one server.
#[derive(Debug, Clone)]
pub(crate) struct Client {
    agent: ureq::Agent,
    base: String,
    shown: String,
    key: Option<String>,
    retry: RetryPolicy,
    /// Notes for the probe's summary (a Retry-After above the cap), shared by clones.
    notes: std::sync::Arc<std::sync::Mutex<std::collections::BTreeSet<String>>>,
}

/// The server's address without credentials, query or fragment (what outputs may name).
pub(crate) fn shown_url(url: &str) -> String {
    let (scheme, rest) = url.split_once("://").unwrap_or(("http", url));
    let rest = rest.split(['?', '#']).next().unwrap_or("");
    let rest = match rest.split_once('/') {
        Some((host, path)) => format!("{}/{path}", host.rsplit('@').next().unwrap_or(host)),
        None => rest.rsplit('@').next().unwrap_or(rest).to_string(),
    };
    format!("{scheme}://{}", rest.trim_end_matches('/'))
}

fn clip(s: &str, n: usize) -> String {
    let one: String = s.split_whitespace().collect::<Vec<_>>().join(" ");
    match one.char_indices().nth(n) {
        Some((i, _)) => format!("{}…", &one[..i]),
        None => one,
    }
}

/// A reader that counts the bytes it passes, so that a reply cut at its limit is told from a
/// malformed one.
struct Counted<R> {
    inner: R,
    n: u64,
}

impl<R: Read> Read for Counted<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let k = self.inner.read(buf)?;
        self.n += k as u64;
        Ok(k)
    }
}

/// A writer that replaces every occurrence of `key` by [`KEY_SHOWN`] in what it writes, across
/// the boundaries of the writes (the last `key.len() − 1` bytes wait for the next write).
struct Redacting<W: std::io::Write> {
    inner: W,
    key: Vec<u8>,
    pending: Vec<u8>,
}

impl<W: std::io::Write> Redacting<W> {
    fn drain(&mut self, last: bool) -> std::io::Result<()> {
        let Some(&k0) = self.key.first() else {
            self.inner.write_all(&self.pending)?;
            self.pending.clear();
            return Ok(());
        };
        let mut out = Vec::with_capacity(self.pending.len());
        let mut i = 0;
        // From one place the key could start (its first byte, found by memchr) to the next.
        while let Some(j) = memchr::memchr(k0, &self.pending[i..]) {
            out.extend_from_slice(&self.pending[i..i + j]);
            i += j;
            let rest = &self.pending[i..];
            if rest.starts_with(&self.key) {
                out.extend_from_slice(KEY_SHOWN.as_bytes());
                i += self.key.len();
            } else if !last && rest.len() < self.key.len() && self.key.starts_with(rest) {
                // Maybe the start of a key that the next write completes: held back.
                self.pending.drain(..i);
                return self.inner.write_all(&out);
            } else {
                out.push(k0);
                i += 1;
            }
        }
        out.extend_from_slice(&self.pending[i..]);
        self.pending.clear();
        self.inner.write_all(&out)
    }
}

impl<W: std::io::Write> std::io::Write for Redacting<W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.pending.extend_from_slice(buf);
        self.drain(false)?;
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}

impl Client {
    /// A client of the server at `url` (`http://host:port`, with or without a trailing `/v1`),
    /// each request bounded by `timeout` (in all: connecting, sending and reading the whole
    /// reply, so a server that drips its reply is cut off), retried by `retry`, sent with
    /// `Authorization: Bearer KEY` when a key is given. Redirects are not followed: the
    /// requests, and the key, go only to `url`.
    pub(crate) fn new(
        url: &str,
        timeout: Duration,
        retry: RetryPolicy,
        key: Option<String>,
    ) -> Result<Client, ProbeError> {
        let u = url.trim();
        let scheme_ok = u.starts_with("http://") || u.starts_with("https://");
        if !scheme_ok || u.len() <= "https://".len() {
            return Err(ProbeError::input(format!(
                "--url {}: expected http://HOST:PORT (an OpenAI-compatible or SGLang server)",
                clip(u, 80)
            )));
        }
        if u.starts_with("https://") && !cfg!(feature = "tls") {
            return Err(ProbeError::input(format!(
                "--url {}: https is not built into this dsa-sim (build with `cargo install --path . --features tls`), or use http:// on a local port",
                shown_url(u)
            )));
        }
        let mut base = u.split(['?', '#']).next().unwrap_or(u).trim_end_matches('/').to_string();
        if let Some(b) = base.strip_suffix("/v1") {
            base = b.to_string();
        }
        let agent = ureq::AgentBuilder::new()
            .timeout_connect(timeout.min(Duration::from_secs(30)))
            .timeout(timeout)
            .redirects(0)
            .build();
        Ok(Client {
            agent,
            shown: shown_url(&base),
            base,
            key: key.filter(|k| !k.is_empty()),
            retry,
            notes: Default::default(),
        })
    }

    /// The server as outputs name it (no credentials).
    pub(crate) fn shown(&self) -> &str {
        &self.shown
    }

    /// Notes for the summary: a server's Retry-After above the cap, once each.
    pub(crate) fn notes(&self) -> Vec<String> {
        self.notes.lock().map(|n| n.iter().cloned().collect()).unwrap_or_default()
    }

    /// `s` with the API key replaced by [`KEY_SHOWN`]: every text that came from the server goes
    /// through here before it reaches a message, a transcript or a table.
    pub(crate) fn redact(&self, s: &str) -> String {
        match &self.key {
            Some(k) if s.contains(k.as_str()) => s.replace(k.as_str(), KEY_SHOWN),
            _ => s.to_string(),
        }
    }

    fn request(&self, method: &str, path: &str) -> ureq::Request {
        let r = self.agent.request(method, &format!("{}{path}", self.base));
        match &self.key {
            Some(k) => r.set("Authorization", &format!("Bearer {k}")),
            None => r,
        }
    }

    /// One attempt: the reply read as `reply` says, as a small JSON value holding only what the
    /// probe reads.
    fn attempt(&self, method: &str, path: &str, body: Option<&Value>, reply: Reply) -> Result<Value, Attempt> {
        let req = self.request(method, path);
        let resp = match body {
            Some(b) => req.set("Content-Type", "application/json").send_string(&b.to_string()),
            None => req.call(),
        };
        let at = format!("{}{path}", self.shown);
        let resp = match resp {
            Ok(r) => r,
            Err(ureq::Error::Status(code, r)) => {
                let ra = r.header("Retry-After").and_then(parse_retry_after);
                let mut bytes = Vec::new();
                let _ = r.into_reader().take(4096).read_to_end(&mut bytes);
                let text = self.redact(&String::from_utf8_lossy(&bytes));
                let what = format!("HTTP {code} from {at}: {}", clip(&self.redact(&server_message(&text)), 200));
                return Err(if code == 429 || code == 408 || (500..600).contains(&code) {
                    Attempt::Retry(what, ra)
                } else {
                    Attempt::Fatal(what)
                });
            }
            Err(ureq::Error::Transport(t)) => {
                return Err(Attempt::Retry(
                    clip(&self.redact(&t.to_string().replace(&self.base, &self.shown)), 200),
                    None,
                ))
            }
        };
        let code = resp.status();
        if (300..400).contains(&code) {
            let to = resp.header("Location").map_or_else(
                || "nowhere (no Location)".to_string(),
                |l| if l.contains("://") { shown_url(l) } else { clip(l, 80) },
            );
            return Err(Attempt::Fatal(format!(
                "{at}: HTTP {code} redirects to {}, which is not followed (requests and the API key go only to --url): give the address it redirects to as --url",
                self.redact(&to)
            )));
        }
        if let Some(enc) = resp
            .header("Content-Encoding")
            .map(str::trim)
            .filter(|e| !e.is_empty() && !e.eq_ignore_ascii_case("identity"))
        {
            return Err(Attempt::Fatal(format!("{at}: the reply is compressed (Content-Encoding: {}), which the request did not ask for and the probe does not decode", clip(&self.redact(enc), 40))));
        }
        if resp.header("Content-Type").is_some_and(|t| t.to_ascii_lowercase().contains("text/event-stream")) {
            return Err(Attempt::Fatal(format!("{at}: the server sent an event stream (text/event-stream), which the request did not ask for: the probe reads one JSON reply")));
        }
        let bad = |m: String| Attempt::Retry(format!("{at}: {m}"), None);
        let mut r = Counted { inner: resp.into_reader(), n: 0 };
        let parsed: Result<Value, String> = match reply {
            Reply::Generate => {
                let mut buf = Vec::new();
                (&mut r)
                    .take(MAX_REPLY_BYTES + 1)
                    .read_to_end(&mut buf)
                    .map_err(|e| bad(format!("the reply was cut off ({})", self.redact(&e.to_string()))))?;
                if buf.len() as u64 > MAX_REPLY_BYTES {
                    return Err(Attempt::Fatal(format!("{at}: the reply is larger than the {} MiB per-reply limit (an answer of --max-tokens tokens is far smaller)", MAX_REPLY_BYTES >> 20)));
                }
                not_json(&buf).map_or_else(|| light_reply(&buf[..]).map_err(|e| json_error(&e)), Err)
            }
            Reply::Capture(file) => {
                let written = (|| -> std::io::Result<u64> {
                    let f = std::fs::File::create(file)?;
                    let mut w = Redacting {
                        inner: std::io::BufWriter::new(f),
                        key: self.key.clone().unwrap_or_default().into_bytes(),
                        pending: Vec::new(),
                    };
                    let n = std::io::copy(&mut (&mut r).take(MAX_CAPTURE_BYTES + 1), &mut w)?;
                    w.drain(true)?;
                    let f = w.inner.into_inner().map_err(|e| e.into_error())?;
                    f.sync_all()?;
                    Ok(n)
                })();
                match written {
                    Err(e) => {
                        let _ = std::fs::remove_file(file);
                        return Err(bad(format!("the reply was cut off ({})", self.redact(&e.to_string()))));
                    }
                    Ok(n) if n > MAX_CAPTURE_BYTES => {
                        let _ = std::fs::remove_file(file);
                        return Err(Attempt::Fatal(format!(
                            "{at}: the reply is larger than the {} GiB capture limit",
                            MAX_CAPTURE_BYTES >> 30
                        )));
                    }
                    Ok(_) => {}
                }
                // Parsed from the file, skipping (not holding) the large indexer_topk string.
                let parsed = std::fs::File::open(file).map_err(|e| e.to_string()).and_then(|f| {
                    let mut head = [0u8; 512];
                    let n = (&f).read(&mut head).map_err(|e| e.to_string())?;
                    if let Some(m) = not_json(&head[..n]) {
                        return Err(m);
                    }
                    let f = std::fs::File::open(file).map_err(|e| e.to_string())?;
                    light_reply(std::io::BufReader::new(f)).map_err(|e| json_error(&e))
                });
                if parsed.is_err() {
                    let _ = std::fs::remove_file(file);
                }
                parsed
            }
            Reply::Models | Reply::Tokenize => {
                let mut br = std::io::BufReader::new((&mut r).take(MAX_LIST_BYTES + 1));
                let head = std::io::BufRead::fill_buf(&mut br)
                    .map_err(|e| bad(format!("the reply was cut off ({})", self.redact(&e.to_string()))))?;
                match not_json(head) {
                    Some(m) => Err(m),
                    None if matches!(reply, Reply::Models) => light_models(br).map_err(|e| json_error(&e)),
                    None => light_count(br).map_err(|e| json_error(&e)),
                }
            }
        };
        let n = r.n;
        let v = match parsed {
            Ok(v) => v,
            Err(_) if matches!(reply, Reply::Models | Reply::Tokenize) && n > MAX_LIST_BYTES => {
                return Err(Attempt::Fatal(format!(
                    "{at}: the reply is larger than the {} MiB limit of a list reply",
                    MAX_LIST_BYTES >> 20
                )));
            }
            Err(m) => return Err(bad(clip(&self.redact(&m), 240))),
        };
        // A 2xx carrying an error object and nothing else (some gateways): the server's failure,
        // retried like a 5xx.
        if let Some(m) = v.get("error").and_then(Value::as_str) {
            let has_content =
                ["choices", "text", "data", "count"].iter().any(|k| v.get(*k).is_some_and(|x| !x.is_null()));
            if !has_content {
                return Err(Attempt::Retry(
                    format!("HTTP {code} from {at} carries an error: {}", clip(&self.redact(m), 200)),
                    None,
                ));
            }
        }
        Ok(v)
    }

    /// Sends with retries; `Err` is one line naming the server, the endpoint and the last failure.
    fn send(
        &self,
        method: &str,
        path: &str,
        body: Option<&Value>,
        reply: Reply,
        stop: &dyn Fn() -> bool,
    ) -> Result<(Value, u32, Duration), ProbeError> {
        let mut n = 0u32;
        loop {
            n += 1;
            let t0 = Instant::now();
            match self.attempt(method, path, body, reply) {
                Ok(v) => return Ok((v, n, t0.elapsed())),
                Err(Attempt::Fatal(m)) => return Err(ProbeError::server(m)),
                Err(Attempt::Retry(m, ra)) => {
                    // A Retry-After beyond the longest wait (a year) is capped, and said.
                    let capped = ra.filter(|&d| d > self.retry.max).map(|d| {
                        let secs =
                            if d == Duration::MAX { "forever".to_string() } else { format!("{} s", d.as_secs()) };
                        format!(
                            "{} asked to wait {secs} (Retry-After); waits are capped at {} s",
                            self.shown,
                            self.retry.max.as_secs()
                        )
                    });
                    if n > self.retry.retries || stop() {
                        let cap = capped.map_or(String::new(), |c| format!("; {c}"));
                        return Err(ProbeError::server(format!(
                            "{m} (after {n} attempt{}{cap})",
                            if n == 1 { "" } else { "s" }
                        )));
                    }
                    if let (Some(c), Ok(mut notes)) = (capped, self.notes.lock()) {
                        notes.insert(c);
                    }
                    let wait = self.retry.wait(n, ra);
                    let until = Instant::now() + wait;
                    while Instant::now() < until && !stop() {
                        std::thread::sleep((until - Instant::now()).min(Duration::from_millis(50)));
                    }
                }
            }
        }
    }

    /// The first model id `/v1/models` lists.
    pub(crate) fn model_id(&self) -> Result<String, ProbeError> {
        let (v, _, _) = self.send("GET", "/v1/models", None, Reply::Models, &|| false)?;
        v["data"][0]["id"].as_str().filter(|id| !id.is_empty()).map(|id| self.redact(id)).ok_or_else(|| {
            ProbeError::server(format!(
                "{}/v1/models: the reply lists no model (expected data[0].id); give --model",
                self.shown
            ))
        })
    }

    /// The server's token count of `text` by its `/tokenize` endpoint (vLLM's; the chat template
    /// applied in chat mode), or `None` when the server has none (404, 405, 501). A count that
    /// cannot be this text's (none for a text, or more tokens than the text has bytes, beyond a
    /// template's) is refused.
    pub(crate) fn tokenize(&self, model: &str, api: Api, text: &str) -> Result<Option<u64>, ProbeError> {
        let body = match api {
            Api::Chat => {
                json!({"model": model, "messages": [{"role": "user", "content": text}], "add_generation_prompt": true})
            }
            _ => json!({"model": model, "prompt": text}),
        };
        match self.send("POST", "/tokenize", Some(&body), Reply::Tokenize, &|| false) {
            Ok((v, _, _)) => {
                // No count, or none for a text that has bytes: a /tokenize of other fields (llama.cpp
                // answers a request without its `content` with no tokens).
                let n = v["count"].as_u64().filter(|&n| n > 0 || text.is_empty()).ok_or_else(|| {
                    ProbeError::server(format!("{}/tokenize: the reply has no count or tokens", self.shown))
                })?;
                if !plausible_count(n, text.len()) {
                    return Err(ProbeError::server(format!(
                        "{}/tokenize: the server counts {n} tokens for a text of {} bytes: not a count of that text",
                        self.shown,
                        text.len()
                    )));
                }
                Ok(Some(n))
            }
            Err(e) if ["HTTP 404", "HTTP 405", "HTTP 501"].iter().any(|c| e.message.starts_with(c)) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Generates the answer to `prompt`: temperature 0, at most `max_tokens`; with `capture`,
    /// asks for the indexer's top-k and streams the whole reply into that file.
    pub(crate) fn generate(
        &self,
        api: Api,
        model: &str,
        prompt: &str,
        max_tokens: u32,
        capture: Option<&Path>,
        stop: &dyn Fn() -> bool,
    ) -> Result<Answer, ProbeError> {
        let mut body = match api {
            Api::Completions => json!({"model": model, "prompt": prompt, "max_tokens": max_tokens, "temperature": 0}),
            Api::Chat => {
                json!({"model": model, "messages": [{"role": "user", "content": prompt}], "max_tokens": max_tokens, "temperature": 0})
            }
            Api::Generate => {
                json!({"text": prompt, "sampling_params": {"max_new_tokens": max_tokens, "temperature": 0}})
            }
        };
        if capture.is_some() {
            body["return_indexer_topk"] = json!(true);
        }
        let reply = capture.map_or(Reply::Generate, Reply::Capture);
        let (v, attempts, elapsed) = self.send("POST", api.path(), Some(&body), reply, stop)?;
        let shown = format!("{}{}", self.shown, api.path());
        let (text, tokens) = match api {
            Api::Completions => (v["choices"][0]["text"].as_str(), v["usage"]["prompt_tokens"].as_u64()),
            Api::Chat => (v["choices"][0]["message"]["content"].as_str(), v["usage"]["prompt_tokens"].as_u64()),
            Api::Generate => (v["text"].as_str(), v["meta_info"]["prompt_tokens"].as_u64()),
        };
        let text = text.ok_or_else(|| {
            let want = match api {
                Api::Completions => "choices[0].text",
                Api::Chat => "choices[0].message.content",
                Api::Generate => "text",
            };
            ProbeError::server(format!("{shown}: the reply has no {want}: {}", clip(&self.redact(&v.to_string()), 160)))
        })?;
        // A count of 0 is no count (some gateways fill usage with zeros); one above the
        // prompt's bytes cannot be this prompt's.
        let tokens = tokens.filter(|&n| n > 0);
        if let Some(n) = tokens.filter(|&n| !plausible_count(n, prompt.len())) {
            return Err(ProbeError::server(format!(
                "{shown}: the reply counts {n} prompt tokens for a prompt of {} bytes: not a count of that prompt",
                prompt.len()
            )));
        }
        if let Some(file) = capture {
            if v["has_indexer_topk"] != json!(true) {
                // The request field is SGLang's; another server may ignore it (docs/capture.md
                // says which formats are checked and which assumed): said at the first reply.
                let _ = std::fs::remove_file(file);
                return Err(ProbeError::server(format!(
                    "{shown}: --capture: the reply carries no indexer_topk (SGLang: meta_info.indexer_topk, vLLM: choices[0].indexer_topk): the server ignored return_indexer_topk (SGLang captures only when launched with --enable-return-indexer-topk); relaunch it so, or drop --capture"
                )));
            }
        }
        Ok(Answer { text: self.redact(text), prompt_tokens: tokens, attempts, elapsed })
    }
}

/// Whether `n` tokens can be a count of a text of `bytes` bytes: at least one token, and at
/// most one a byte (byte-level tokenizers' worst case) plus room for a chat template.
pub(crate) fn plausible_count(n: u64, bytes: usize) -> bool {
    n >= 1 && n <= bytes as u64 + 65_536
}

/// A reply's JSON error as a message: not JSON at all, or JSON of another layout.
fn json_error(e: &serde_json::Error) -> String {
    match e.classify() {
        serde_json::error::Category::Data => format!("the reply is not the JSON expected ({e})"),
        _ => format!("the reply is not valid JSON ({e})"),
    }
}

/// Why a reply that should be JSON is not, from its first bytes: not UTF-8, or an HTML page
/// (a proxy's error or login page), named by its title.
fn not_json(head: &[u8]) -> Option<String> {
    // The head may end inside a character: only an invalid sequence counts, not a cut one.
    if let Err(e) = std::str::from_utf8(head) {
        if e.error_len().is_some() {
            return Some("the reply is not UTF-8 text".to_string());
        }
    }
    html_page(head)
        .map(|page| format!("the reply is not valid JSON but {page}: is --url the server itself, not a proxy's page?"))
}

/// `an HTML page ("TITLE")` when `head` starts an HTML document (a proxy's error or login page).
fn html_page(head: &[u8]) -> Option<String> {
    let text = String::from_utf8_lossy(&head[..head.len().min(4096)]);
    let t = text.trim_start_matches('\u{feff}').trim_start();
    if !t.starts_with('<') {
        return None;
    }
    let lower = t.to_ascii_lowercase();
    // Byte offsets of the lowercase copy hold for `t`: ASCII lowercasing keeps every length.
    let title =
        lower.find("<title>").and_then(|i| lower[i + 7..].find("</title>").map(|j| clip(&t[i + 7..i + 7 + j], 80)));
    Some(match title {
        Some(ti) if !ti.is_empty() => format!("an HTML page (\"{ti}\")"),
        _ => "an HTML page".to_string(),
    })
}

/// A server's error message from its body (`{"error": {"message": …}}`, `{"detail": …}`,
/// `{"message": …}`; an HTML page by its title), else the body's text.
fn server_message(body: &str) -> String {
    if let Some(page) = html_page(body.as_bytes()) {
        return page;
    }
    let v: Value = serde_json::from_str(body).unwrap_or(Value::Null);
    let pick = |v: &Value| v.as_str().map(str::to_string);
    pick(&v["error"]["message"])
        .or_else(|| pick(&v["error"]))
        .or_else(|| pick(&v["detail"]))
        .or_else(|| pick(&v["message"]))
        .unwrap_or_else(|| if body.trim().is_empty() { "(no body)".to_string() } else { body.to_string() })
}

/// A JSON value of any shape, keeping only a non-negative integer or a string (or, for an
/// object, its `message` string): what the probe reads from a field a hostile server may fill
/// with anything. Everything else is skipped as it is read, never held.
#[derive(Default)]
struct Loose {
    num: Option<u64>,
    text: Option<String>,
}

impl<'de> serde::Deserialize<'de> for Loose {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        use serde::de::{IgnoredAny, MapAccess, SeqAccess, Visitor};
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Loose;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("any JSON value")
            }
            fn visit_u64<E>(self, v: u64) -> Result<Loose, E> {
                Ok(Loose { num: Some(v), text: None })
            }
            fn visit_i64<E>(self, v: i64) -> Result<Loose, E> {
                Ok(Loose { num: u64::try_from(v).ok(), text: None })
            }
            fn visit_f64<E>(self, _: f64) -> Result<Loose, E> {
                Ok(Loose::default())
            }
            fn visit_bool<E>(self, _: bool) -> Result<Loose, E> {
                Ok(Loose::default())
            }
            fn visit_str<E>(self, v: &str) -> Result<Loose, E> {
                Ok(Loose { num: None, text: Some(v.to_string()) })
            }
            fn visit_string<E>(self, v: String) -> Result<Loose, E> {
                Ok(Loose { num: None, text: Some(v) })
            }
            fn visit_unit<E>(self) -> Result<Loose, E> {
                Ok(Loose::default())
            }
            fn visit_none<E>(self) -> Result<Loose, E> {
                Ok(Loose::default())
            }
            fn visit_some<D: serde::Deserializer<'de>>(self, d: D) -> Result<Loose, D::Error> {
                <Loose as serde::Deserialize>::deserialize(d)
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut a: A) -> Result<Loose, A::Error> {
                while a.next_element::<IgnoredAny>()?.is_some() {}
                Ok(Loose::default())
            }
            fn visit_map<A: MapAccess<'de>>(self, mut a: A) -> Result<Loose, A::Error> {
                let mut out = Loose::default();
                while let Some(k) = a.next_key::<Loose>()? {
                    if k.text.as_deref() == Some("message") && out.text.is_none() {
                        out.text = a.next_value::<Loose>()?.text;
                    } else {
                        a.next_value::<IgnoredAny>()?;
                    }
                }
                Ok(out)
            }
        }
        d.deserialize_any(V)
    }
}

/// A JSON list of which only the first element is kept (read as `T`) and the others counted
/// and skipped: a list of 10^6 entries costs no memory. Anything but a list is an empty one.
struct First<T> {
    first: Option<T>,
    len: u64,
}

impl<T> Default for First<T> {
    fn default() -> Self {
        First { first: None, len: 0 }
    }
}

impl<'de, T: serde::Deserialize<'de>> serde::Deserialize<'de> for First<T> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        use serde::de::{IgnoredAny, SeqAccess, Visitor};
        struct V<T>(std::marker::PhantomData<T>);
        impl<'de, T: serde::Deserialize<'de>> Visitor<'de> for V<T> {
            type Value = First<T>;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a list")
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut a: A) -> Result<First<T>, A::Error> {
                let first = a.next_element::<T>()?;
                let mut len = u64::from(first.is_some());
                while a.next_element::<IgnoredAny>()?.is_some() {
                    len += 1;
                }
                Ok(First { first, len })
            }
        }
        d.deserialize_seq(V(std::marker::PhantomData))
    }
}

#[derive(serde::Deserialize, Default)]
#[serde(default)]
struct UsageFields {
    prompt_tokens: Loose,
    /// SGLang's capture (under `meta_info`): whether it is there, its string skipped unread.
    indexer_topk: Option<serde::de::IgnoredAny>,
}

/// `usage` / `meta_info`: an object only. serde's derive would also read a list as the fields in
/// order (`[1, 2]` as a count of 1 with a capture), which is no server's reply: a list is refused
/// as the reply not understood.
#[derive(Default)]
struct Usage(UsageFields);

impl<'de> serde::Deserialize<'de> for Usage {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        use serde::de::{MapAccess, Visitor};
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Usage;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a usage object")
            }
            fn visit_map<A: MapAccess<'de>>(self, a: A) -> Result<Usage, A::Error> {
                let fields =
                    <UsageFields as serde::Deserialize>::deserialize(serde::de::value::MapAccessDeserializer::new(a))?;
                Ok(Usage(fields))
            }
        }
        d.deserialize_map(V)
    }
}

#[derive(serde::Deserialize, Default)]
#[serde(default)]
struct Message {
    content: Loose,
}

#[derive(serde::Deserialize, Default)]
#[serde(default)]
struct Choice {
    text: Loose,
    message: Option<Message>,
    /// vLLM's capture (under `choices[0]`): whether it is there, its string skipped unread.
    indexer_topk: Option<serde::de::IgnoredAny>,
}

/// The parts of a generation reply the probe reads, from a reader, with every other field
/// (the indexer's top-k string above all) and every choice after the first skipped as it is
/// read rather than held; fields of an unexpected type are skipped too (a negative or
/// fractional usage count reads as none).
fn light_reply(r: impl std::io::Read) -> serde_json::Result<Value> {
    #[derive(serde::Deserialize, Default)]
    #[serde(default)]
    struct Light {
        choices: Option<First<Choice>>,
        usage: Option<Usage>,
        text: Loose,
        meta_info: Option<Usage>,
        error: Loose,
    }
    let l: Light = serde_json::from_reader(r)?;
    let captured = l.meta_info.as_ref().is_some_and(|m| m.0.indexer_topk.is_some())
        || l.choices.as_ref().and_then(|c| c.first.as_ref()).is_some_and(|c| c.indexer_topk.is_some());
    let mut v = json!({"has_indexer_topk": captured});
    if let Some(c) = l.choices.and_then(|c| c.first) {
        v["choices"] = json!([{"text": c.text.text, "message": {"content": c.message.and_then(|m| m.content.text)}}]);
    }
    if let Some(u) = l.usage {
        v["usage"] = json!({"prompt_tokens": u.0.prompt_tokens.num});
    }
    if let Some(t) = l.text.text {
        v["text"] = json!(t);
    }
    if let Some(m) = l.meta_info {
        v["meta_info"] = json!({"prompt_tokens": m.0.prompt_tokens.num});
    }
    if let Some(e) = l.error.text {
        v["error"] = json!(e);
    }
    Ok(v)
}

/// `/v1/models`: the first model's id, the rest of the list skipped as it is read.
fn light_models(r: impl std::io::Read) -> serde_json::Result<Value> {
    #[derive(serde::Deserialize, Default)]
    #[serde(default)]
    struct Model {
        id: Loose,
    }
    #[derive(serde::Deserialize, Default)]
    #[serde(default)]
    struct Models {
        data: Option<First<Model>>,
        error: Loose,
    }
    let m: Models = serde_json::from_reader(r)?;
    let mut v = json!({});
    if let Some(id) = m.data.and_then(|d| d.first).and_then(|f| f.id.text) {
        v["data"] = json!([{ "id": id }]);
    }
    if let Some(e) = m.error.text {
        v["error"] = json!(e);
    }
    Ok(v)
}

/// `/tokenize`: the count (vLLM: `{"count", "tokens"}`; llama.cpp: `{"tokens"}`; TGI: a list
/// of tokens), the tokens counted as they are read, never held.
fn light_count(r: impl std::io::Read) -> serde_json::Result<Value> {
    use serde::de::{IgnoredAny, MapAccess, SeqAccess, Visitor};
    struct V;
    impl<'de> Visitor<'de> for V {
        type Value = Value;
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("a /tokenize reply (an object or a list)")
        }
        fn visit_seq<A: SeqAccess<'de>>(self, mut a: A) -> Result<Value, A::Error> {
            let mut n = 0u64;
            while a.next_element::<IgnoredAny>()?.is_some() {
                n += 1;
            }
            Ok(json!({ "count": n }))
        }
        fn visit_map<A: MapAccess<'de>>(self, mut a: A) -> Result<Value, A::Error> {
            let (mut count, mut tokens, mut error) = (None, None, None);
            while let Some(k) = a.next_key::<String>()? {
                match k.as_str() {
                    "count" => count = a.next_value::<Loose>()?.num,
                    "tokens" => tokens = Some(a.next_value::<First<IgnoredAny>>()?.len),
                    "error" => error = a.next_value::<Loose>()?.text,
                    _ => {
                        a.next_value::<IgnoredAny>()?;
                    }
                }
            }
            let mut v = json!({});
            if let Some(n) = count.or(tokens) {
                v["count"] = json!(n);
            }
            if let Some(e) = error {
                v["error"] = json!(e);
            }
            Ok(v)
        }
    }
    let mut de = serde_json::Deserializer::from_reader(r);
    let v = serde::Deserializer::deserialize_any(&mut de, V)?;
    de.end()?;
    Ok(v)
}

/// What the client makes of a 2xx reply's body, for the fuzz target `probe_reply` (fuzz/):
/// `kind` 0 a generation reply, 1 `/v1/models`, 2 `/tokenize`. Not part of the API.
#[doc(hidden)]
pub fn parse_reply_for_fuzzing(kind: u8, body: &[u8]) -> Result<Value, String> {
    if let Some(m) = not_json(body) {
        return Err(m);
    }
    match kind % 3 {
        0 => light_reply(body),
        1 => light_models(body),
        _ => light_count(body),
    }
    .map_err(|e| json_error(&e))
}

/// `body` written through the key-redacting writer of captures in pieces cut at `cuts`, for
/// the fuzz target `probe_reply`: it must equal replacing `key` in the whole body at once.
#[doc(hidden)]
pub fn redact_in_pieces_for_fuzzing(key: &[u8], body: &[u8], cuts: &[usize]) -> Vec<u8> {
    use std::io::Write as _;
    let mut w = Redacting { inner: Vec::new(), key: key.to_vec(), pending: Vec::new() };
    let mut at = 0;
    for &c in cuts.iter().chain(std::iter::once(&body.len())) {
        let c = c.clamp(at, body.len());
        w.write_all(&body[at..c]).unwrap();
        at = c;
    }
    w.drain(true).unwrap();
    w.inner
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_shown_without_credentials() {
        assert_eq!(shown_url("http://user:secret@host:8000/v1?key=x"), "http://host:8000/v1");
        assert_eq!(shown_url("http://localhost:30000/"), "http://localhost:30000");
        assert!(Client::new("localhost:30000", Duration::from_secs(1), RetryPolicy::default(), None).is_err());
    }

    #[test]
    fn backoff_doubles_and_honours_retry_after() {
        let p = RetryPolicy { retries: 5, base: Duration::from_millis(100), max: Duration::from_secs(1) };
        assert_eq!(p.wait(1, None), Duration::from_millis(100));
        assert_eq!(p.wait(3, None), Duration::from_millis(400));
        assert_eq!(p.wait(9, None), Duration::from_secs(1));
        assert_eq!(p.wait(1, parse_retry_after("2")), Duration::from_secs(1));
        assert_eq!(parse_retry_after(" 0.25 "), Some(Duration::from_millis(250)));
        // An HTTP-date: the delay from now; a date past means at once; not a date: none.
        let at = httpdate::parse_http_date("Wed, 21 Oct 2015 07:28:00 GMT").unwrap();
        assert_eq!(
            parse_retry_after_at("Wed, 21 Oct 2015 07:28:00 GMT", at - Duration::from_secs(3)),
            Some(Duration::from_secs(3))
        );
        assert_eq!(parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT"), Some(Duration::ZERO));
        assert_eq!(parse_retry_after("soon"), None);
        // Past Duration's range: forever, which the policy caps (from_secs_f64 would panic).
        assert_eq!(parse_retry_after("1e300"), Some(Duration::MAX));
        assert_eq!(p.wait(1, parse_retry_after("1e300")), Duration::from_secs(1));
    }

    #[test]
    fn light_reply_skips_the_capture() {
        let r = br#"{"text": " 1234567.", "meta_info": {"prompt_tokens": 12, "indexer_topk": "AAAA"}}"#;
        let v = light_reply(&r[..]).unwrap();
        assert_eq!(v["text"], " 1234567.");
        assert_eq!(v["meta_info"]["prompt_tokens"], 12);
        assert_eq!(v["has_indexer_topk"], true);
        let vllm = br#"{"choices": [{"text": "a", "indexer_topk": "k05VTVBZ"}], "usage": {"prompt_tokens": 3}}"#;
        assert_eq!(light_reply(&vllm[..]).unwrap()["has_indexer_topk"], true);
        let none = br#"{"text": "a", "meta_info": {"prompt_tokens": 3, "indexer_topk": null}}"#;
        assert_eq!(light_reply(&none[..]).unwrap()["has_indexer_topk"], false);
        assert!(light_reply(&br#"{"text": "x""#[..]).is_err());
        // A usage that is a list is no usage object (serde's derive would read it field by field).
        assert!(light_reply(&br#"{"choices": [{"text": "x"}], "usage": [1, 2]}"#[..]).is_err());
        assert!(light_reply(&br#"{"text": "x", "meta_info": [7]}"#[..]).is_err());
        assert_eq!(light_reply(&br#"{"text": "x", "usage": null}"#[..]).unwrap()["text"], "x");
        // Fields of another type read as absent; only the first choice is kept.
        let v = light_reply(
            &br#"{"choices": [{"text": "a"}, {"text": "b"}], "usage": {"prompt_tokens": -3}, "text": 5}"#[..],
        )
        .unwrap();
        assert_eq!(v["choices"].as_array().unwrap().len(), 1);
        assert_eq!(v["choices"][0]["text"], "a");
        assert!(v["usage"]["prompt_tokens"].is_null() && v.get("text").is_none());
        assert_eq!(light_count(&b"[1, 2, 3]"[..]).unwrap()["count"], 3);
        assert_eq!(light_count(&br#"{"tokens": [1, 2], "max_model_len": 8}"#[..]).unwrap()["count"], 2);
        assert_eq!(light_models(&br#"{"data": [{"id": "m"}, {"id": "n"}]}"#[..]).unwrap()["data"][0]["id"], "m");
    }

    #[test]
    fn the_key_is_redacted_across_writes() {
        for cuts in [vec![], vec![1], vec![3, 4, 5], vec![2, 9]] {
            let out = redact_in_pieces_for_fuzzing(b"sk-1", b"a sk-1 b sk-sk-1 sk-", &cuts);
            assert_eq!(String::from_utf8(out).unwrap(), "a [API key] b sk-[API key] sk-", "{cuts:?}");
        }
        assert!(not_json(b"<html><title>502 Bad Gateway</title>").unwrap().contains("\"502 Bad Gateway\""));
        assert!(not_json(b"\xff\xfe{}").unwrap().contains("UTF-8"));
        assert_eq!(not_json(b"{\"a\": \"\xc3"), None, "a character cut at the end of the head is not an error");
    }
}
