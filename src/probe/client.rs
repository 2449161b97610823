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

/// Largest reply body read into memory (a capture goes to a file instead).
pub const MAX_REPLY_BYTES: u64 = 64 << 20;

/// Which endpoint generates the answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Api {
    /// `/v1/completions` (the prompt as text).
    Completions,
    /// `/v1/chat/completions` (the prompt as one user message).
    Chat,
    /// SGLang's native `/generate`.
    Generate,
}

impl Api {
    /// The endpoint's path.
    pub fn path(self) -> &'static str {
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
pub fn parse_retry_after_at(v: &str, now: std::time::SystemTime) -> Option<Duration> {
    let v = v.trim();
    if let Ok(s) = v.parse::<u64>() {
        return Some(Duration::from_secs(s));
    }
    if let Some(d) = v.parse::<f64>().ok().filter(|s| s.is_finite() && *s >= 0.0) {
        return Some(Duration::from_secs_f64(d));
    }
    // The date parser of the `httpdate` crate (IMF-fixdate and the two obsolete forms).
    httpdate::parse_http_date(v).ok().map(|at| at.duration_since(now).unwrap_or(Duration::ZERO))
}

/// One generated answer.
#[derive(Debug, Clone, PartialEq)]
pub struct Answer {
    /// The answer's text.
    pub text: String,
    /// The server's count of the prompt's tokens, when the reply has one.
    pub prompt_tokens: Option<u64>,
    /// Attempts it took.
    pub attempts: u32,
    /// Wall time of the successful attempt.
    pub elapsed: Duration,
}

/// What one attempt's failure means.
enum Attempt {
    /// Worth retrying (after the wait, or the server's Retry-After).
    Retry(String, Option<Duration>),
    /// Not worth retrying: the request itself is refused.
    Fatal(String),
}

/// A client of one server.
#[derive(Debug, Clone)]
pub struct Client {
    agent: ureq::Agent,
    base: String,
    shown: String,
    key: Option<String>,
    retry: RetryPolicy,
}

/// The server's address without credentials, query or fragment (what outputs may name).
pub fn shown_url(url: &str) -> String {
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

impl Client {
    /// A client of the server at `url` (`http://host:port`, with or without a trailing `/v1`),
    /// each request bounded by `timeout`, retried by `retry`, sent with `Authorization: Bearer
    /// KEY` when a key is given.
    pub fn new(url: &str, timeout: Duration, retry: RetryPolicy, key: Option<String>) -> Result<Client, ProbeError> {
        let u = url.trim();
        let scheme_ok = u.starts_with("http://") || u.starts_with("https://");
        if !scheme_ok || u.len() <= "https://".len() {
            return Err(ProbeError::input(format!("--url {}: expected http://HOST:PORT (an OpenAI-compatible or SGLang server)", clip(u, 80))));
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
        let agent = ureq::AgentBuilder::new().timeout_connect(timeout.min(Duration::from_secs(30))).timeout(timeout).build();
        Ok(Client { agent, shown: shown_url(&base), base, key: key.filter(|k| !k.is_empty()), retry })
    }

    /// The server as outputs name it (no credentials).
    pub fn shown(&self) -> &str {
        &self.shown
    }

    fn request(&self, method: &str, path: &str) -> ureq::Request {
        let r = self.agent.request(method, &format!("{}{path}", self.base));
        match &self.key {
            Some(k) => r.set("Authorization", &format!("Bearer {k}")),
            None => r,
        }
    }

    /// One attempt: the body parsed as JSON (or, with `sink`, streamed to that file first and
    /// parsed from it).
    fn attempt(&self, method: &str, path: &str, body: Option<&Value>, sink: Option<&Path>) -> Result<Value, Attempt> {
        let req = self.request(method, path);
        let resp = match body {
            Some(b) => req.set("Content-Type", "application/json").send_string(&b.to_string()),
            None => req.call(),
        };
        let resp = match resp {
            Ok(r) => r,
            Err(ureq::Error::Status(code, r)) => {
                let ra = r.header("Retry-After").and_then(parse_retry_after);
                let mut text = String::new();
                let _ = r.into_reader().take(4096).read_to_string(&mut text);
                let what = format!("HTTP {code} from {}{path}: {}", self.shown, clip(&server_message(&text), 200));
                return Err(if code == 429 || code == 408 || (500..600).contains(&code) { Attempt::Retry(what, ra) } else { Attempt::Fatal(what) });
            }
            Err(ureq::Error::Transport(t)) => return Err(Attempt::Retry(clip(&t.to_string().replace(&self.base, &self.shown), 200), None)),
        };
        let bad = |m: String| Attempt::Retry(format!("{}{path}: {m}", self.shown), None);
        match sink {
            None => {
                let mut buf = Vec::new();
                resp.into_reader()
                    .take(MAX_REPLY_BYTES + 1)
                    .read_to_end(&mut buf)
                    .map_err(|e| bad(format!("the reply was cut off ({e})")))?;
                if buf.len() as u64 > MAX_REPLY_BYTES {
                    return Err(Attempt::Fatal(format!("{}{path}: the reply is larger than {} MiB", self.shown, MAX_REPLY_BYTES >> 20)));
                }
                serde_json::from_slice(&buf).map_err(|e| bad(format!("the reply is not valid JSON ({e})")))
            }
            Some(file) => {
                let written = (|| -> std::io::Result<()> {
                    let mut f = std::fs::File::create(file)?;
                    std::io::copy(&mut resp.into_reader(), &mut f)?;
                    f.sync_all()
                })();
                if let Err(e) = written {
                    let _ = std::fs::remove_file(file);
                    return Err(bad(format!("the reply was cut off ({e})")));
                }
                // Parsed from the file, skipping (not holding) the large indexer_topk string.
                let parsed = std::fs::File::open(file)
                    .map_err(|e| e.to_string())
                    .and_then(|f| light_reply(std::io::BufReader::new(f)).map_err(|e| e.to_string()));
                parsed.map_err(|e| {
                    let _ = std::fs::remove_file(file);
                    bad(format!("the reply is not valid JSON ({e})"))
                })
            }
        }
    }

    /// Sends with retries; `Err` is one line naming the server, the endpoint and the last failure.
    fn send(&self, method: &str, path: &str, body: Option<&Value>, sink: Option<&Path>, stop: &dyn Fn() -> bool) -> Result<(Value, u32, Duration), ProbeError> {
        let mut n = 0u32;
        loop {
            n += 1;
            let t0 = Instant::now();
            match self.attempt(method, path, body, sink) {
                Ok(v) => return Ok((v, n, t0.elapsed())),
                Err(Attempt::Fatal(m)) => return Err(ProbeError::server(m)),
                Err(Attempt::Retry(m, ra)) => {
                    if n > self.retry.retries || stop() {
                        return Err(ProbeError::server(format!("{m} (after {n} attempt{})", if n == 1 { "" } else { "s" })));
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
    pub fn model_id(&self) -> Result<String, ProbeError> {
        let (v, _, _) = self.send("GET", "/v1/models", None, None, &|| false)?;
        v["data"][0]["id"]
            .as_str()
            .map(str::to_string)
            .ok_or_else(|| ProbeError::server(format!("{}/v1/models: the reply lists no model (expected data[0].id); give --model", self.shown)))
    }

    /// The server's token count of `text` by its `/tokenize` endpoint (vLLM's; the chat template
    /// applied in chat mode), or `None` when the server has none (404, 405, 501).
    pub fn tokenize(&self, model: &str, api: Api, text: &str) -> Result<Option<u64>, ProbeError> {
        let body = match api {
            Api::Chat => json!({"model": model, "messages": [{"role": "user", "content": text}], "add_generation_prompt": true}),
            _ => json!({"model": model, "prompt": text}),
        };
        match self.send("POST", "/tokenize", Some(&body), None, &|| false) {
            Ok((v, _, _)) => {
                // vLLM: {"count", "tokens"}; llama.cpp: {"tokens"}; TGI: a list of tokens.
                let n = v["count"].as_u64().or_else(|| v["tokens"].as_array().map(|a| a.len() as u64)).or_else(|| v.as_array().map(|a| a.len() as u64));
                n.map(Some).ok_or_else(|| ProbeError::server(format!("{}/tokenize: the reply has no count or tokens", self.shown)))
            }
            Err(e) if ["HTTP 404", "HTTP 405", "HTTP 501"].iter().any(|c| e.message.starts_with(c)) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Generates the answer to `prompt`: temperature 0, at most `max_tokens`; with `capture`,
    /// asks for the indexer's top-k and streams the whole reply into that file.
    pub fn generate(&self, api: Api, model: &str, prompt: &str, max_tokens: u32, capture: Option<&Path>, stop: &dyn Fn() -> bool) -> Result<Answer, ProbeError> {
        let mut body = match api {
            Api::Completions => json!({"model": model, "prompt": prompt, "max_tokens": max_tokens, "temperature": 0}),
            Api::Chat => json!({"model": model, "messages": [{"role": "user", "content": prompt}], "max_tokens": max_tokens, "temperature": 0}),
            Api::Generate => json!({"text": prompt, "sampling_params": {"max_new_tokens": max_tokens, "temperature": 0}}),
        };
        if capture.is_some() {
            body["return_indexer_topk"] = json!(true);
        }
        let (v, attempts, elapsed) = self.send("POST", api.path(), Some(&body), capture, stop)?;
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
            ProbeError::server(format!("{shown}: the reply has no {want}: {}", clip(&v.to_string(), 160)))
        })?;
        Ok(Answer { text: text.to_string(), prompt_tokens: tokens, attempts, elapsed })
    }
}

/// A server's error message from its JSON body (`{"error": {"message": …}}`, `{"detail": …}`,
/// `{"message": …}`), else the body's text.
fn server_message(body: &str) -> String {
    let v: Value = serde_json::from_str(body).unwrap_or(Value::Null);
    let pick = |v: &Value| v.as_str().map(str::to_string);
    pick(&v["error"]["message"])
        .or_else(|| pick(&v["error"]))
        .or_else(|| pick(&v["detail"]))
        .or_else(|| pick(&v["message"]))
        .unwrap_or_else(|| if body.trim().is_empty() { "(no body)".to_string() } else { body.to_string() })
}

/// The parts of a generation reply the probe reads, from a reader, with every other field
/// (the indexer's top-k string above all) skipped as it is read rather than held.
fn light_reply(r: impl std::io::Read) -> serde_json::Result<Value> {
    #[derive(serde::Deserialize, Default)]
    struct Usage {
        prompt_tokens: Option<u64>,
    }
    #[derive(serde::Deserialize, Default)]
    struct Message {
        content: Option<String>,
    }
    #[derive(serde::Deserialize, Default)]
    struct Choice {
        text: Option<String>,
        message: Option<Message>,
    }
    #[derive(serde::Deserialize, Default)]
    struct Meta {
        prompt_tokens: Option<u64>,
    }
    #[derive(serde::Deserialize)]
    struct Light {
        #[serde(default)]
        choices: Vec<Choice>,
        usage: Option<Usage>,
        text: Option<String>,
        meta_info: Option<Meta>,
    }
    let l: Light = serde_json::from_reader(r)?;
    let mut v = json!({});
    if let Some(c) = l.choices.first() {
        v["choices"] = json!([{"text": c.text, "message": {"content": c.message.as_ref().and_then(|m| m.content.clone())}}]);
    }
    if let Some(u) = l.usage {
        v["usage"] = json!({"prompt_tokens": u.prompt_tokens});
    }
    if let Some(t) = l.text {
        v["text"] = json!(t);
    }
    if let Some(m) = l.meta_info {
        v["meta_info"] = json!({"prompt_tokens": m.prompt_tokens});
    }
    Ok(v)
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
        assert_eq!(parse_retry_after_at("Wed, 21 Oct 2015 07:28:00 GMT", at - Duration::from_secs(3)), Some(Duration::from_secs(3)));
        assert_eq!(parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT"), Some(Duration::ZERO));
        assert_eq!(parse_retry_after("soon"), None);
    }

    #[test]
    fn light_reply_skips_the_capture() {
        let r = br#"{"text": " 1234567.", "meta_info": {"prompt_tokens": 12, "indexer_topk": "AAAA"}}"#;
        let v = light_reply(&r[..]).unwrap();
        assert_eq!(v["text"], " 1234567.");
        assert_eq!(v["meta_info"]["prompt_tokens"], 12);
        assert!(light_reply(&br#"{"text": "x""#[..]).is_err());
    }
}
