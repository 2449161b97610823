//! A test server for `dsa-sim probe` on loopback (an ephemeral port), speaking the endpoints and
//! reply layouts of an OpenAI-compatible server (`/v1/models`, `/v1/completions`,
//! `/v1/chat/completions`, vLLM's `/tokenize`) and SGLang's `/generate`. Its "model" answers
//! from dsa-sim's own simulation of a deployment: the needle's recall at the request's actual
//! token length, depth and needle length (the analytic engine on the deployment's scenario,
//! the needle as long as this server counts its sentence), drawn once per
//! prompt from a hash of it, so the same prompt gets the same answer; with `return_indexer_topk`
//! the reply carries a top-k row at the prompt's last token that holds a needle entry exactly
//! when the needle was found (SGLang: base64 of raw int32; vLLM: base64 of .npy bytes).
//! Defects can be planted (a candidate-count limit, the first k unscored, prompt length mod 4,
//! needles lost under concurrency, on a prefix-cache hit, or in a fraction of requests), and
//! the server can misbehave (bad JSON, no usage, 500s, 429 with Retry-After, slow replies).
//!
//! Tokens: a whitespace-separated word counts ceil(len / 4) tokens, or, with `tokenizer` set,
//! the tokens of a Hugging Face tokenizer (the `tokenizers` crate itself, no special tokens;
//! [`word_tokenizer_json`] writes one); a completion prompt adds one (BOS), a chat prompt three
//! (the template's head and tail) plus `chat_extra`.
#![allow(dead_code)]

use base64::Engine as _;
use dsa_sim::engine::{estimate, EngineChoice, RunOptions};
use dsa_sim::geometry::Geometry;
use dsa_sim::Scenario;
use serde_json::{json, Value};
use std::collections::HashMap;
use std::io::Read;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// A planted defect.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Defect {
    None,
    /// Beyond this many candidates the indexer never selects the needle.
    CandidateLimit(u64),
    /// The top-k kernel returns the first k candidates unscored.
    FirstKUnscored,
    /// Prompts of length ≡ 3 mod 4 lose the needle 80% of the time.
    LengthMod4,
    /// With at least this many requests in flight, 70% of needles are lost (each generation
    /// request is then held 30 ms, so that a client's concurrent requests do overlap).
    Concurrency(usize),
    /// A prompt seen before (a prefix-cache hit) loses its needle.
    PrefixHit,
    /// This fraction of requests never selects the needle (a broken build).
    Broken(f64),
}

/// A misbehaviour.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Bad {
    None,
    /// Generation replies are not JSON.
    WrongJson,
    /// Generation replies have no usage (and prompt_tokens).
    NoUsage,
    /// The first n generation requests get HTTP 500.
    Status500(u64),
    /// The first n generation requests get HTTP 429 with `Retry-After: s`.
    TooMany(u64, u64),
    /// Every generation reply waits this long first.
    Slow(Duration),
    /// A generation reply's answer misses `choices` (an unexpected layout).
    WrongLayout,
    /// /tokenize exists but takes other fields (TGI's `inputs`, llama.cpp's `content`): 422.
    OtherTokenize,
    /// Generation replies' usage counts this many tokens more than /tokenize does.
    UsageExtra(u64),
    /// `return_indexer_topk` is ignored: replies carry no capture (a server launched without
    /// the capture flag, or one whose field has another name).
    IgnoresCapture,
    /// /tokenize reads another field (llama.cpp's `content`) and answers a request without it
    /// with 200 and no tokens: `{"tokens": []}`.
    EmptyTokenize,
}

#[derive(Debug, Clone)]
pub struct Config {
    /// The deployment (one selecting layer is what the captures carry).
    pub scenario: Scenario,
    pub defect: Defect,
    pub bad: Bad,
    /// Whether /tokenize exists.
    pub tokenize: bool,
    /// Seed of the answers' draws.
    pub seed: u64,
    pub threads: usize,
    pub model: String,
    /// Counts tokens with this tokenizer instead of ceil(len / 4) per word.
    pub tokenizer: Option<Arc<tokenizers::Tokenizer>>,
    /// More tokens of the chat template (in its head).
    pub chat_extra: u64,
    /// A file holding the k the server runs (written by a `--restart-cmd` such as
    /// `echo {k} > FILE`): read at every generation request, overriding `scenario.index_topk`.
    pub k_file: Option<std::path::PathBuf>,
}

impl Config {
    /// One DeepSeek-V4-Flash indexer layer (c = 4, overlap, k = 512, window 128), needle 2.5 sd
    /// above a typical distractor.
    pub fn healthy() -> Config {
        let s = Scenario { dprime: 2.5, ..Scenario::preset("deepseek-v4-flash").unwrap().one_layer() };
        Config {
            scenario: s,
            defect: Defect::None,
            bad: Bad::None,
            tokenize: true,
            seed: 1,
            threads: 8,
            model: "test/dsv4-sim".into(),
            tokenizer: None,
            chat_extra: 0,
            k_file: None,
        }
    }
    pub fn with(mut self, d: Defect) -> Config {
        self.defect = d;
        self
    }
    pub fn bad(mut self, b: Bad) -> Config {
        self.bad = b;
        self
    }
}

#[derive(Debug, Default)]
pub struct Stats {
    pub generate: AtomicU64,
    pub tokenize: AtomicU64,
    pub models: AtomicU64,
    pub inflight: AtomicUsize,
    pub max_inflight: AtomicUsize,
    /// Authorization headers seen on generation requests.
    pub auth: Mutex<Vec<String>>,
    /// Each generation request's needle as the server locates it: (value, prompt tokens, the
    /// needle's first token counted from the prompt's start, BOS and template head included).
    pub needles: Mutex<Vec<(String, u64, u64)>>,
    /// Bodies of generation requests that asked for the top-k.
    pub captured: AtomicU64,
    /// Generation requests numbered above this get HTTP 503 (0: none; set by a test mid-run).
    pub fail_from: AtomicU64,
}

pub struct Server {
    pub url: String,
    pub stats: Arc<Stats>,
    server: Arc<tiny_http::Server>,
    threads: Vec<std::thread::JoinHandle<()>>,
}

impl Drop for Server {
    fn drop(&mut self) {
        for _ in 0..self.threads.len() {
            self.server.unblock();
        }
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

/// Tokens of a text: ceil(len / 4) per whitespace-separated word.
pub fn count_words(text: &str) -> u64 {
    text.split_whitespace().map(|w| (w.len() as u64).div_ceil(4)).sum()
}

/// A tokenizer.json of a word-level model: every whitespace-separated word one token (unknown
/// words `<unk>`), punctuation split off as tokens of its own, a BOS `<s>` added by the
/// post-processor, and a truncation to 512 that a prompt's count must ignore.
pub fn word_tokenizer_json() -> String {
    let special = |id: u32, c: &str| json!({"id": id, "content": c, "single_word": false, "lstrip": false, "rstrip": false, "normalized": false, "special": true});
    let mut vocab = serde_json::Map::new();
    for (i, w) in ["<unk>", "<s>", "The", "grass", "is", "green", "sky", "blue", ".", ":", "-", "magic", "number"]
        .iter()
        .enumerate()
    {
        vocab.insert(w.to_string(), json!(i));
    }
    json!({
        "version": "1.0",
        "truncation": {"direction": "Right", "max_length": 512, "strategy": "LongestFirst", "stride": 0},
        "padding": null,
        "added_tokens": [special(0, "<unk>"), special(1, "<s>")],
        "normalizer": null,
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [{"type": "WhitespaceSplit"}, {"type": "Punctuation", "behavior": "Isolated"}]},
        "post_processor": {"type": "TemplateProcessing",
            "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
            "pair": [{"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}, {"Sequence": {"id": "B", "type_id": 1}}],
            "special_tokens": {"<s>": {"id": "<s>", "ids": [1], "tokens": ["<s>"]}}},
        "decoder": null,
        "model": {"type": "WordLevel", "vocab": vocab, "unk_token": "<unk>"}
    })
    .to_string()
}

/// The server's tokenizer from a tokenizer.json's text (no truncation: it counts whole prompts).
pub fn tokenizer(json: &str) -> Arc<tokenizers::Tokenizer> {
    let mut t = tokenizers::Tokenizer::from_bytes(json.as_bytes()).unwrap();
    t.with_truncation(None).unwrap();
    Arc::new(t)
}

fn fnv(bytes: &[u8], seed: u64) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325 ^ seed.wrapping_mul(0x9e37_79b9_7f4a_7c15);
    for &b in bytes {
        h ^= b as u64;
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h ^ (h >> 29)
}

/// The needle in a prompt of gkamradt's shape ("The special magic KEY number is: VALUE."; the
/// question "What is the special magic KEY number?"): (key, value, byte offset of each copy).
fn find_gkamradt_needle(text: &str) -> Option<(String, String, Vec<usize>)> {
    const Q: &str = "What is the special magic ";
    let q = text.rfind(Q)?;
    let key = text[q + Q.len()..].split(' ').next()?.to_string();
    let mark = format!(" The special magic {key} number is: ");
    let at: Vec<usize> = text.match_indices(&mark).map(|(i, _)| i).collect();
    let value = text[*at.first()? + mark.len()..].split('.').next()?.to_string();
    Some((key, value, at))
}

/// The needle in a prompt: (key, value, byte offset of each copy's sentence).
fn find_needle(text: &str) -> Option<(String, String, Vec<usize>)> {
    if !text.contains("What is the special magic number for ") {
        return find_gkamradt_needle(text);
    }
    const MARK: &str = " One of the special magic numbers for ";
    let q = text.rfind("What is the special magic number for ")?;
    let key = text[q + "What is the special magic number for ".len()..].split(' ').next()?.to_string();
    let mut at = Vec::new();
    let mut value = None;
    let mut from = 0;
    while let Some(i) = text[from..].find(MARK) {
        let p = from + i;
        let rest = &text[p + MARK.len()..];
        if let Some(r) = rest.strip_prefix(&format!("{key} is: ")) {
            value = Some(r.split('.').next()?.to_string());
            at.push(p);
        }
        from = p + MARK.len();
    }
    Some((key, value?, at))
}

fn recall(s: &Scenario) -> f64 {
    estimate(s, &RunOptions { engine: EngineChoice::Analytic, ..RunOptions::default() })
        .map(|e| e.recall)
        .unwrap_or(0.0)
}

struct Model {
    cfg: Config,
    seen: Mutex<HashMap<u64, u32>>,
}

/// The model's decision on one prompt: (found, prompt tokens, needle_start, scenario).
impl Model {
    /// Tokens of a text, without BOS or template.
    fn count(&self, text: &str) -> u64 {
        match &self.cfg.tokenizer {
            Some(t) => t.encode(text, false).unwrap().len() as u64,
            None => count_words(text),
        }
    }

    /// The model's decision, and the needle's (value, first token) as the server sees them.
    fn decide_at(&self, text: &str, head: u64, inflight: usize) -> ((bool, u64, Scenario), Option<(String, u64)>) {
        let p = head + self.count(text);
        let mut s = self.cfg.scenario.clone();
        if let Some(k) =
            self.cfg.k_file.as_ref().and_then(|f| std::fs::read_to_string(f).ok()).and_then(|t| t.trim().parse().ok())
        {
            s.index_topk = k;
        }
        s.context_len = p.max(2);
        let Some((_key, value, at)) = find_needle(text) else { return ((false, p, s), None) };
        // The needle's first token: the tokens of the text before it (BOS and template head
        // included), counted on that text alone.
        let start = head + self.count(&text[..at[0]]);
        // The needle's length as this server counts its sentence (through the value's period):
        // the model's needle is the one in the prompt.
        let end = at[0] + text[at[0]..].find(&format!("{value}.")).map_or(0, |i| i + value.len() + 1);
        let m = (head + self.count(&text[..end])).saturating_sub(start).max(1);
        s.needle_tokens = m;
        s.repeat = at.len() as u32;
        s.depth = if p > m { (start as f64 / (p - m) as f64).clamp(0.0, 1.0) } else { 0.0 };
        // The model's needle starts at floor(depth · (L − m)) = start (up to rounding).
        let lost = |s: &Scenario| recall(&Scenario { dprime: -10.0, ..s.clone() });
        let h = fnv(text.as_bytes(), self.cfg.seed);
        let seen = {
            let mut m = self.seen.lock().unwrap();
            let e = m.entry(h).or_insert(0);
            *e += 1;
            *e > 1
        };
        let r = match self.cfg.defect {
            Defect::None => recall(&s),
            Defect::CandidateLimit(n0) => {
                if s.n_candidates() > n0 {
                    lost(&s)
                } else {
                    recall(&s)
                }
            }
            Defect::FirstKUnscored => {
                let g = Geometry::new(&s);
                let first = g.needle_entries.iter().any(|e| e.index < g.k_eff);
                recall(&Scenario { dprime: if first { 10.0 } else { -10.0 }, ..s.clone() })
            }
            Defect::LengthMod4 => {
                if p % 4 == 3 {
                    0.2 * recall(&s) + 0.8 * lost(&s)
                } else {
                    recall(&s)
                }
            }
            Defect::Concurrency(th) => {
                if inflight >= th {
                    0.3 * recall(&s) + 0.7 * lost(&s)
                } else {
                    recall(&s)
                }
            }
            Defect::PrefixHit => {
                if seen {
                    lost(&s)
                } else {
                    recall(&s)
                }
            }
            Defect::Broken(f) => (1.0 - f) * recall(&s) + f * lost(&s),
        };
        let u = (h >> 11) as f64 / (1u64 << 53) as f64;
        ((u < r, p, s), Some((value, start)))
    }
}

/// The top-k row at the prompt's last token: a needle entry among the k iff `found`.
fn topk_row(s: &Scenario, found: bool) -> Vec<i32> {
    let n = s.n_candidates();
    let k = s.index_topk;
    let g = Geometry::new(s);
    let needle: Vec<u64> = g.needle_entries.iter().map(|e| e.index).collect();
    let mut row: Vec<i32> = Vec::with_capacity(k as usize);
    if n <= k {
        row.extend((0..n).map(|i| i as i32));
    } else {
        if found {
            if let Some(&e) = needle.first() {
                row.push(e as i32);
            }
        }
        let mut i = n;
        while row.len() < k as usize && i > 0 {
            i -= 1;
            if !needle.contains(&i) {
                row.push(i as i32);
            }
        }
    }
    row.resize(k as usize, -1);
    row
}

fn npy(rows: usize, layers: usize, k: usize, data: &[i32]) -> Vec<u8> {
    let dict = format!("{{'descr': '<i4', 'fortran_order': False, 'shape': ({rows}, {layers}, {k}), }}");
    let mut header = dict.into_bytes();
    while (10 + header.len() + 1) % 64 != 0 {
        header.push(b' ');
    }
    header.push(b'\n');
    let mut out = b"\x93NUMPY\x01\x00".to_vec();
    out.extend_from_slice(&(header.len() as u16).to_le_bytes());
    out.extend_from_slice(&header);
    for v in data {
        out.extend_from_slice(&v.to_le_bytes());
    }
    out
}

/// The capture of a request: rows 0 … P − 1 (−1 everywhere but row P − 1), one layer.
fn capture(s: &Scenario, p: u64, found: bool) -> (usize, Vec<i32>) {
    let k = s.index_topk as usize;
    let rows = p as usize;
    let mut data = vec![-1i32; rows * k];
    data[(rows - 1) * k..].copy_from_slice(&topk_row(s, found));
    (rows, data)
}

fn respond(req: tiny_http::Request, code: u16, body: String, headers: &[(&str, String)]) {
    let mut r = tiny_http::Response::from_string(body).with_status_code(code);
    r.add_header(tiny_http::Header::from_bytes(&b"Content-Type"[..], &b"application/json"[..]).unwrap());
    for (k, v) in headers {
        r.add_header(tiny_http::Header::from_bytes(k.as_bytes(), v.as_bytes()).unwrap());
    }
    let _ = req.respond(r);
}

fn handle(mut req: tiny_http::Request, model: &Model, stats: &Stats) {
    let url = req.url().to_string();
    let mut body = String::new();
    let _ = req.as_reader().read_to_string(&mut body);
    let v: Value = serde_json::from_str(&body).unwrap_or(Value::Null);
    let cfg = &model.cfg;
    match url.as_str() {
        "/v1/models" => {
            stats.models.fetch_add(1, Ordering::Relaxed);
            respond(
                req,
                200,
                json!({"object": "list", "data": [{"id": cfg.model, "object": "model"}]}).to_string(),
                &[],
            );
        }
        "/tokenize" => {
            if cfg.bad == Bad::EmptyTokenize {
                return respond(req, 200, json!({"tokens": []}).to_string(), &[]);
            }
            if cfg.bad == Bad::OtherTokenize {
                return respond(
                    req,
                    422,
                    json!({"error": "Input validation error: `inputs` is required"}).to_string(),
                    &[],
                );
            }
            if !cfg.tokenize {
                return respond(req, 404, json!({"detail": "Not Found"}).to_string(), &[]);
            }
            stats.tokenize.fetch_add(1, Ordering::Relaxed);
            let n = if let Some(p) = v["prompt"].as_str() {
                1 + model.count(p)
            } else if let Some(c) = v["messages"][0]["content"].as_str() {
                3 + cfg.chat_extra + model.count(c)
            } else {
                return respond(
                    req,
                    400,
                    json!({"error": {"message": "prompt or messages required"}}).to_string(),
                    &[],
                );
            };
            respond(req, 200, json!({"count": n, "max_model_len": 1 << 20}).to_string(), &[]);
        }
        "/v1/completions" | "/v1/chat/completions" | "/generate" => {
            let n = stats.generate.fetch_add(1, Ordering::Relaxed) + 1;
            if let Some(a) = req.headers().iter().find(|h| h.field.equiv("Authorization")) {
                stats.auth.lock().unwrap().push(a.value.as_str().to_string());
            }
            let arrived = stats.inflight.fetch_add(1, Ordering::SeqCst) + 1;
            // Let requests overlap as they would on a GPU server; in flight is the most seen
            // while this one was held.
            let hold = if matches!(cfg.defect, Defect::Concurrency(_)) { 30 } else { 2 };
            std::thread::sleep(Duration::from_millis(hold));
            let inflight = arrived.max(stats.inflight.load(Ordering::SeqCst));
            stats.max_inflight.fetch_max(inflight, Ordering::SeqCst);
            let reply = generate(&url, &v, model, stats, inflight, n);
            stats.inflight.fetch_sub(1, Ordering::SeqCst);
            match reply {
                Reply::Json(code, body, headers) => respond(req, code, body, &headers),
            }
        }
        _ => respond(req, 404, json!({"detail": "Not Found"}).to_string(), &[]),
    }
}

enum Reply {
    Json(u16, String, Vec<(&'static str, String)>),
}

fn generate(url: &str, v: &Value, model: &Model, stats: &Stats, inflight: usize, n: u64) -> Reply {
    let cfg = &model.cfg;
    let from = stats.fail_from.load(Ordering::SeqCst);
    if from > 0 && n > from {
        return Reply::Json(503, json!({"error": {"message": "overloaded (planted)"}}).to_string(), vec![]);
    }
    match cfg.bad {
        Bad::Status500(first) if n <= first => {
            return Reply::Json(500, json!({"error": {"message": "internal error (planted)"}}).to_string(), vec![])
        }
        Bad::TooMany(first, secs) if n <= first => {
            return Reply::Json(
                429,
                json!({"error": {"message": "rate limited (planted)"}}).to_string(),
                vec![("Retry-After", secs.to_string())],
            )
        }
        Bad::Slow(d) => std::thread::sleep(d),
        Bad::WrongJson => return Reply::Json(200, "<html>this is not json</html>".into(), vec![]),
        _ => {}
    }
    let (text, head) = match url {
        "/v1/chat/completions" => (v["messages"][0]["content"].as_str().unwrap_or(""), 2 + cfg.chat_extra),
        "/generate" => (v["text"].as_str().unwrap_or(""), 1),
        _ => (v["prompt"].as_str().unwrap_or(""), 1),
    };
    let ((found, _, s), at) = model.decide_at(text, head, inflight);
    let mut p =
        if url == "/v1/chat/completions" { 3 + cfg.chat_extra + model.count(text) } else { 1 + model.count(text) };
    if let Some((value, start)) = at {
        stats.needles.lock().unwrap().push((value, p, start));
    }
    if let Bad::UsageExtra(n) = cfg.bad {
        p += n;
    }
    let answer = match find_needle(text) {
        Some((_, value, _)) if found => format!(" {value}."),
        _ => " I do not know.".to_string(),
    };
    let want_topk = v["return_indexer_topk"].as_bool() == Some(true) && cfg.bad != Bad::IgnoresCapture;
    if want_topk {
        stats.captured.fetch_add(1, Ordering::Relaxed);
    }
    let b64 = base64::engine::general_purpose::STANDARD;
    let body = match url {
        "/generate" => {
            let mut meta = json!({"prompt_tokens": p, "completion_tokens": 3, "id": format!("req-{n}")});
            if want_topk {
                let (_, data) = capture(&s, p, found);
                let bytes: Vec<u8> = data.iter().flat_map(|x| x.to_le_bytes()).collect();
                meta["indexer_topk"] = json!(b64.encode(bytes));
            }
            if cfg.bad == Bad::NoUsage {
                meta.as_object_mut().unwrap().remove("prompt_tokens");
            }
            json!({"text": answer, "meta_info": meta})
        }
        "/v1/chat/completions" => {
            let mut j = json!({"id": format!("chatcmpl-{n}"), "object": "chat.completion", "model": cfg.model,
                "choices": [{"index": 0, "message": {"role": "assistant", "content": answer}, "finish_reason": "stop"}],
                "usage": {"prompt_tokens": p, "completion_tokens": 3, "total_tokens": p + 3}});
            if cfg.bad == Bad::NoUsage {
                j.as_object_mut().unwrap().remove("usage");
            }
            j
        }
        _ => {
            let mut choice = json!({"index": 0, "text": answer, "finish_reason": "stop"});
            if want_topk {
                let (rows, data) = capture(&s, p, found);
                choice["indexer_topk"] = json!(b64.encode(npy(rows, 1, s.index_topk as usize, &data)));
            }
            let mut j = json!({"id": format!("cmpl-{n}"), "object": "text_completion", "model": cfg.model, "choices": [choice],
                "usage": {"prompt_tokens": p, "completion_tokens": 3, "total_tokens": p + 3}});
            if cfg.bad == Bad::NoUsage {
                j.as_object_mut().unwrap().remove("usage");
            }
            if cfg.bad == Bad::WrongLayout {
                j.as_object_mut().unwrap().remove("choices");
            }
            j
        }
    };
    Reply::Json(200, body.to_string(), vec![])
}

/// Starts a server on 127.0.0.1 at an ephemeral port.
pub fn start(cfg: Config) -> Server {
    let server = Arc::new(tiny_http::Server::http("127.0.0.1:0").unwrap());
    let port = server.server_addr().to_ip().unwrap().port();
    let stats = Arc::new(Stats::default());
    let model = Arc::new(Model { seen: Mutex::new(HashMap::new()), cfg: cfg.clone() });
    let threads = (0..cfg.threads)
        .map(|_| {
            let (server, stats, model) = (server.clone(), stats.clone(), model.clone());
            std::thread::spawn(move || {
                while let Ok(req) = server.recv() {
                    handle(req, &model, &stats);
                }
            })
        })
        .collect();
    Server { url: format!("http://127.0.0.1:{port}"), stats, server, threads }
}

/// A raw server that answers every connection with `reply` bytes (a cut-off body, nothing at
/// all) and closes it; returns its URL and how many connections it took.
pub fn raw(reply: &'static [u8]) -> (String, Arc<AtomicU64>) {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", l.local_addr().unwrap());
    let n = Arc::new(AtomicU64::new(0));
    let n2 = n.clone();
    std::thread::spawn(move || {
        for s in l.incoming() {
            let Ok(mut s) = s else { break };
            n2.fetch_add(1, Ordering::Relaxed);
            let mut buf = [0u8; 65536];
            let _ = s.set_read_timeout(Some(Duration::from_millis(200)));
            // Read the request (headers and some body), then reply and close.
            let _ = s.read(&mut buf);
            use std::io::Write;
            let _ = s.write_all(reply);
            let _ = s.shutdown(std::net::Shutdown::Both);
        }
    });
    (url, n)
}
