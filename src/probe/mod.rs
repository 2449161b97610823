//! `dsa-sim probe`: measures a live server. Needle prompts of exact token lengths (the server's
//! own count) are sent to an OpenAI-compatible or SGLang server, answers scored with RULER's
//! string_match_all, and the results written as one folder: `measured.csv` (the measured-table
//! format of [`crate::measured`], with a `# provenance:` line and condition columns),
//! `transcript.jsonl` (every request), and, where the server returns the indexer's top-k,
//! `captures/` and `manifest.csv` in the layout `dsa-sim import topk --manifest` reads
//! (docs/capture.md). The folder is staged ([`crate::output::StagedDir`]): a probe that fails
//! keeps its transcript for `--resume`, and only a complete run replaces the output.
//!
//! - [`cells`]: the grid (`2K..64K:x2` × depths × repeats) or the cells of `plan --out`;
//! - [`prompt`]: haystack, needle, question, and the length search;
//! - [`client`]: HTTP with timeouts, retries and backoff;
//! - `tokenizer`: `--tokenizer tokenizer.json`, the served model's tokenizer counted locally;
//! - [`transcript`]: the per-request lines and their reading on `--resume`.

pub mod cells;
pub mod client;
pub mod prompt;
pub(crate) mod tokenizer;
pub mod transcript;

pub(crate) use cells::Cell;
pub(crate) use client::{Api, Client, RetryPolicy};
pub(crate) use prompt::{Haystack, Needle, Template};
pub(crate) use tokenizer::LocalTokenizer;
pub(crate) use transcript::Record;

use crate::error::{Classify, ErrorKind};
use crate::output::{StageOptions, StagedDir};
use crate::progress::Progress;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// A probe's failure: bad input (exit 2) or a failure of the server or of writing (exit 1).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct ProbeError {
    /// Bad input or a failure.
    pub kind: ErrorKind,
    /// One line.
    pub message: String,
}

impl ProbeError {
    /// Bad input.
    pub(crate) fn input(m: impl Into<String>) -> ProbeError {
        ProbeError { kind: ErrorKind::Input, message: m.into() }
    }
    /// A failure (computing or writing).
    pub(crate) fn failure(m: impl Into<String>) -> ProbeError {
        ProbeError { kind: ErrorKind::Failure, message: m.into() }
    }
    /// The server failed or refused (a failure: exit 1).
    pub(crate) fn server(m: impl Into<String>) -> ProbeError {
        ProbeError::failure(m)
    }
}

impl Classify for ProbeError {
    fn kind(&self) -> ErrorKind {
        self.kind
    }
}

impl From<crate::output::OutputError> for ProbeError {
    fn from(e: crate::output::OutputError) -> Self {
        ProbeError { kind: e.kind(), message: e.to_string() }
    }
}

/// How prompt tokens are counted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub(crate) enum TokenCount {
    /// `/tokenize` when the server has it, else each reply's usage.
    Auto,
    /// The server's `/tokenize` (vLLM's; exact positions).
    Tokenize,
    /// Each reply's `usage.prompt_tokens` (`meta_info.prompt_tokens` for `/generate`); the
    /// needle's position is then estimated in proportion to characters.
    Usage,
}

impl TokenCount {
    /// Parses `auto`, `tokenize` or `usage`.
    pub(crate) fn parse(t: &str) -> Result<TokenCount, ProbeError> {
        match t.trim() {
            "auto" => Ok(TokenCount::Auto),
            "tokenize" => Ok(TokenCount::Tokenize),
            "usage" => Ok(TokenCount::Usage),
            _ => Err(ProbeError::input(format!("--token-count {t}: allowed auto, tokenize, usage"))),
        }
    }
}

/// Everything a probe needs.
#[derive(Debug, Clone)]
pub(crate) struct Options {
    /// The server (`http://host:port`).
    pub(crate) url: String,
    /// The generating endpoint.
    pub(crate) api: Api,
    /// The model id to send; `None`: the first `/v1/models` lists.
    pub(crate) model: Option<String>,
    /// The cells.
    pub(crate) cells: Vec<Cell>,
    /// The deployment's k (the table's index_topk column).
    pub(crate) index_topk: u64,
    /// Condition columns given as `--label NAME=VALUE`.
    pub(crate) labels: Vec<(String, String)>,
    /// Run each cell at each of these concurrencies (requests in flight) and record it.
    pub(crate) concurrency: Vec<u32>,
    /// Send each prompt twice and record `prefix_cache=miss|hit`.
    pub(crate) prefix_cache_twice: bool,
    /// Needle i of every cell is drawn from (seed, i).
    pub(crate) seed: u64,
    /// Requests in flight at most.
    pub(crate) max_inflight: u32,
    /// Per-request timeout.
    pub(crate) timeout: Duration,
    /// Retries and backoff.
    pub(crate) retry: RetryPolicy,
    /// Answer tokens to generate.
    pub(crate) max_tokens: u32,
    /// The haystack.
    pub(crate) haystack: Haystack,
    /// The API key (from an environment variable; never written anywhere).
    pub(crate) api_key: Option<String>,
    /// Ask for the indexer's top-k and save each reply.
    pub(crate) capture: bool,
    /// How tokens are counted.
    pub(crate) token_count: TokenCount,
    /// The served model's tokenizer (`--tokenizer tokenizer.json`): the length search and the
    /// needle's position counted locally, checked against the server's count.
    pub(crate) tokenizer: Option<Arc<LocalTokenizer>>,
    /// Consecutive lengths each cell's trials spread over (`--spread`): trial t aims at the
    /// cell's length + t mod spread, so that a grid of lengths ≡ 0 mod 4 still covers every
    /// residue mod 4 (a length-periodic defect shows); 1: every trial at the cell's length.
    pub(crate) spread: u64,
}

/// Most consecutive lengths `--spread` takes.
pub(crate) const MAX_SPREAD: u64 = 64;

/// Names a `--label` may not take: the measured table's own columns and the probe's conditions.
const RESERVED: &[&str] = &[
    "context_len",
    "index_topk",
    "depth",
    "repeat",
    "compress_ratio",
    "window",
    "label",
    "trials",
    "hits",
    "needle",
    "sample",
    "concurrency",
    "prefix_cache",
    "observed",
    "fitted",
    "request",
    "layer",
    "selected",
];

/// Parses `--label NAME=VALUE`: NAME a lowercase identifier that is not a table column or a
/// scenario field, VALUE letters, digits and `._:/+-`.
pub(crate) fn parse_label(t: &str) -> Result<(String, String), ProbeError> {
    let (k, v) = t
        .split_once('=')
        .ok_or_else(|| ProbeError::input(format!("--label {t}: expected NAME=VALUE, e.g. build=fork")))?;
    let (k, v) = (k.trim().to_ascii_lowercase(), v.trim());
    if k.is_empty()
        || !k.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
        || k.starts_with(|c: char| c.is_ascii_digit())
    {
        return Err(ProbeError::input(format!("--label {t}: the name must be letters, digits and _ (e.g. build)")));
    }
    if RESERVED.contains(&k.as_str()) || crate::scenario::Field::from_name(&k).is_ok() {
        return Err(ProbeError::input(format!(
            "--label {t}: `{k}` is a column of the measured table or a scenario field; choose another name"
        )));
    }
    if v.is_empty() || !v.chars().all(|c| c.is_ascii_alphanumeric() || "._:/+-".contains(c)) {
        return Err(ProbeError::input(format!("--label {t}: the value must be non-empty letters, digits and ._:/+-")));
    }
    Ok((k, v.to_string()))
}

/// One unit of work: a trial of a cell in a phase, sent once or twice (prefix cache).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Job {
    /// Index into the cells.
    pub(crate) cell: usize,
    /// Trial within the cell.
    pub(crate) trial: u64,
    /// The phase's concurrency, when `--concurrency` is given.
    pub(crate) concurrency: Option<u32>,
}

impl Job {
    /// The id of pass `pass` (0: first send; 1: the second with `--prefix-cache-twice`).
    pub(crate) fn id(&self, twice: bool, pass: usize) -> String {
        let mut s = format!("c{}-t{}", self.cell, self.trial);
        if let Some(n) = self.concurrency {
            s.push_str(&format!("-n{n}"));
        }
        if twice {
            s.push_str(if pass == 0 { "-miss" } else { "-hit" });
        }
        s
    }
}

impl Options {
    /// Checks the options (before any request).
    pub(crate) fn check(&self) -> Result<(), ProbeError> {
        if self.cells.is_empty() {
            return Err(ProbeError::input(
                "no cells to measure: give --context-len (and --depth, --trials) or --cells cells.csv",
            ));
        }
        if self.max_inflight == 0 || self.max_inflight > 256 {
            return Err(ProbeError::input(format!("--max-inflight {}: allowed 1..=256", self.max_inflight)));
        }
        if let Some(&c) = self.concurrency.iter().find(|&&c| c > self.max_inflight) {
            return Err(ProbeError::input(format!(
                "--concurrency {c}: above --max-inflight {}; raise --max-inflight to run it",
                self.max_inflight
            )));
        }
        if self.spread == 0 || self.spread > MAX_SPREAD {
            return Err(ProbeError::input(format!("--spread {}: allowed 1..={MAX_SPREAD}", self.spread)));
        }
        if self.index_topk == 0 {
            return Err(ProbeError::input("--index-topk 0: allowed ≥ 1"));
        }
        if self.max_tokens == 0 || self.max_tokens > 4096 {
            return Err(ProbeError::input(format!("--max-tokens {}: allowed 1..=4096", self.max_tokens)));
        }
        if self.timeout.is_zero() {
            return Err(ProbeError::input("--timeout 0: allowed > 0 seconds"));
        }
        if self.tokenizer.is_some() && self.token_count != TokenCount::Auto {
            return Err(ProbeError::input(
                "--tokenizer and --token-count: give one of them (with --tokenizer the prompts are counted locally and the server's usage is recorded)",
            ));
        }
        if self.capture && self.api == Api::Chat {
            return Err(ProbeError::input("--capture needs /generate (SGLang, the default with --generate) or /v1/completions (vLLM): chat replies carry no indexer top-k"));
        }
        let mut seen = HashSet::new();
        for (k, _) in &self.labels {
            if !seen.insert(k) {
                return Err(ProbeError::input(format!("--label {k}=…: given twice")));
            }
        }
        Ok(())
    }

    /// The work, in order: each phase (concurrency), each cell, each trial.
    pub(crate) fn jobs(&self) -> Vec<Job> {
        let phases: Vec<Option<u32>> =
            if self.concurrency.is_empty() { vec![None] } else { self.concurrency.iter().map(|&c| Some(c)).collect() };
        let mut out = Vec::new();
        for &p in &phases {
            for (i, c) in self.cells.iter().enumerate() {
                for t in 0..c.trials {
                    out.push(Job { cell: i, trial: t, concurrency: p });
                }
            }
        }
        out
    }

    /// The length trial `trial` of cell `cell` aims at (the server's count): the cell's length
    /// plus `trial mod spread`.
    pub(crate) fn target(&self, cell: usize, trial: u64) -> u64 {
        self.cells[cell].context_len + trial % self.spread.max(1)
    }

    /// Sends per job.
    pub(crate) fn passes(&self) -> usize {
        if self.prefix_cache_twice {
            2
        } else {
            1
        }
    }

    /// What identifies the run's requests: `--resume` continues only a run with the same one.
    pub(crate) fn fingerprint(&self) -> String {
        let mut f = serde_json::json!({
            "dsa-sim probe": env!("CARGO_PKG_VERSION"),
            "url": client::shown_url(&self.url),
            "api": self.api,
            "model": self.model,
            "cells": self.cells,
            "index_topk": self.index_topk,
            "labels": self.labels,
            "concurrency": self.concurrency,
            "prefix_cache_twice": self.prefix_cache_twice,
            "seed": self.seed,
            "max_tokens": self.max_tokens,
            "haystack": self.haystack.digest(),
            "capture": self.capture,
            "token_count": self.token_count,
        });
        // Only when given, so that runs without one keep the fingerprint they had.
        if let Some(t) = &self.tokenizer {
            f["tokenizer"] = serde_json::json!(t.digest());
        }
        if self.spread > 1 {
            f["spread"] = serde_json::json!(self.spread);
        }
        if self.haystack.template != prompt::Template::ruler() {
            f["template"] = serde_json::json!(self.haystack.template.digest());
        }
        f.to_string()
    }
}

/// What a dry run prints: the cells, the requests and the tokens they send.
#[derive(Debug, Clone, PartialEq)]
pub struct DryRun {
    /// The cells.
    pub(crate) cells: Vec<Cell>,
    /// Concurrency phases (empty: one phase at --max-inflight).
    pub(crate) concurrency: Vec<u32>,
    /// Generation requests.
    pub(crate) requests: u64,
    /// Prompt tokens they send (the cells' target lengths).
    pub(crate) tokens: u64,
    /// Consecutive lengths each cell's trials spread over.
    pub(crate) spread: u64,
}

/// The dry run of `opts`: nothing is sent.
pub(crate) fn dry_run(opts: &Options) -> Result<DryRun, ProbeError> {
    opts.check()?;
    let jobs = opts.jobs();
    let passes = opts.passes() as u64;
    let tokens = jobs.iter().map(|j| opts.target(j.cell, j.trial) * passes).sum();
    Ok(DryRun {
        cells: opts.cells.clone(),
        concurrency: opts.concurrency.clone(),
        requests: jobs.len() as u64 * passes,
        tokens,
        spread: opts.spread,
    })
}

/// One row of the measured table.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub(crate) struct Row {
    /// The server's count of the prompt's tokens.
    pub(crate) context_len: u64,
    /// The deployment's k.
    pub(crate) index_topk: u64,
    /// Where the needle sat.
    pub(crate) depth: String,
    /// Needle copies.
    pub(crate) repeat: u32,
    /// The needle's length in tokens as counted, the run's median ([`Probed::needle_tokens`]):
    /// the table carries it, so the verdict models the needle that was sent.
    pub(crate) needle_tokens: u64,
    /// Condition values, in [`Probed::condition_columns`] order.
    pub(crate) conditions: Vec<String>,
    /// Requests counted.
    pub(crate) trials: u64,
    /// Answers with the value.
    pub(crate) hits: u64,
}

/// A finished probe.
#[derive(Debug, Clone)]
pub struct Probed {
    /// The output folder.
    pub(crate) out: PathBuf,
    /// The server as named in outputs.
    pub(crate) server: String,
    /// The model id.
    pub(crate) model: String,
    /// How tokens were counted (`tokenize`, `usage` or `tokenizer`).
    pub(crate) token_count: String,
    /// Requests sent by this run (retried attempts counted once), discarded ones included.
    pub(crate) sent: u64,
    /// Requests taken from the transcript (`--resume`).
    pub(crate) resumed: u64,
    /// The condition columns.
    pub(crate) condition_columns: Vec<String>,
    /// The table's rows.
    pub(crate) rows: Vec<Row>,
    /// Replies saved with the indexer's top-k.
    pub(crate) captures: u64,
    /// The median needle length in tokens.
    pub(crate) needle_tokens: u64,
    /// The seed.
    pub(crate) seed: u64,
    /// Notes (skipped cells, …).
    pub(crate) notes: Vec<String>,
}

/// What counts a prompt's tokens during a run.
#[derive(Debug, Clone)]
enum Counter {
    /// The server's `/tokenize`.
    Tokenize,
    /// Only each reply's usage (positions estimated).
    Usage,
    /// `--tokenizer`: the local tokenizer (the server's usage checked against it and recorded).
    Local(Arc<LocalTokenizer>),
}

impl Counter {
    /// The name outputs give it (`token_count` in the JSON).
    fn name(&self) -> &'static str {
        match self {
            Counter::Tokenize => "tokenize",
            Counter::Usage => "usage",
            Counter::Local(_) => "tokenizer",
        }
    }
}

/// The shared state of the workers.
struct Ctx<'a> {
    opts: &'a Options,
    client: Client,
    model: String,
    counter: Counter,
    stage: &'a Path,
    /// Haystack words found for each cell (reused by its other trials).
    words: Mutex<HashMap<usize, usize>>,
    /// Haystack words per token seen so far (the first guess of a cell's search).
    ratio: Mutex<f64>,
    /// The count of the text before the needle, per (cell, words, skip): it does not depend on
    /// the needle.
    before: Mutex<HashMap<(usize, usize, usize), u64>>,
    /// Where each cell's length search starts ([`Ctx::cell_start`]).
    starts: Mutex<HashMap<usize, usize>>,
    /// With `--tokenizer`: the server's count less the local one, measured before the run (a
    /// chat template's tokens; 0 for a completion with the model's own tokenizer).
    offset: AtomicI64,
    stop: AtomicBool,
}

fn now_secs() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

/// `YYYY-MM-DD HH:MM` (UTC) of a Unix time.
pub(crate) fn utc_date(secs: u64) -> String {
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    // Howard Hinnant's civil_from_days.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + if m <= 2 { 1 } else { 0 };
    format!("{y:04}-{m:02}-{d:02} {:02}:{:02}", rem / 3600, rem % 3600 / 60)
}

impl Ctx<'_> {
    fn stopped(&self) -> bool {
        self.stop.load(Ordering::Relaxed)
    }

    fn count(&self, text: &str) -> Result<u64, ProbeError> {
        if let Counter::Local(t) = &self.counter {
            return t.count(text);
        }
        self.client.tokenize(&self.model, self.opts.api, text)?.ok_or_else(|| {
            ProbeError::server(format!("{}/tokenize: the endpoint went away during the run", self.client.shown()))
        })
    }

    fn first_guess(&self, cell: usize) -> usize {
        if let Some(&w) = self.words.lock().map(|m| m.get(&cell).copied()).ok().flatten().as_ref() {
            return w;
        }
        let r = self.ratio.lock().map_or(0.75, |r| *r);
        let target = self.opts.cells[cell].context_len;
        ((target as f64 * r).round() as usize).clamp(1, prompt::max_words(target + self.opts.spread))
    }

    fn learn(&self, cell: usize, words: usize, tokens: u64) {
        if let Ok(mut m) = self.words.lock() {
            m.insert(cell, words);
        }
        if let Ok(mut r) = self.ratio.lock() {
            *r = words as f64 / tokens.max(1) as f64;
        }
    }

    /// Where a cell's length search starts when prompts are counted (/tokenize or --tokenizer): the words found for trial 0's
    /// needle from a fixed first guess, computed once per cell, so that every trial's search
    /// (and so its prompt) is the same whatever order the trials run in.
    fn cell_start(&self, cell: usize) -> Result<usize, ProbeError> {
        let mut m = self.starts.lock().map_err(|_| ProbeError::failure("internal: a worker panicked"))?;
        if let Some(&w) = m.get(&cell) {
            return Ok(w);
        }
        let o = self.opts;
        let c = &o.cells[cell];
        let needle = Needle::draw(o.seed, 0);
        let guess = ((c.context_len as f64 * 0.75).round() as usize).max(1);
        let f = prompt::search(c.context_len, guess, &mut |w, k| {
            self.count(&prompt::build_from(&o.haystack, k, w, c.depth, c.repeat, &needle).text)
        })?;
        m.insert(cell, f.words);
        Ok(f.words)
    }

    /// The prompt of `job` with `words` haystack words from word `skip`, counted and its needle
    /// located by the local tokenizer.
    fn located(
        &self,
        tok: &LocalTokenizer,
        job: Job,
        words: usize,
        skip: usize,
    ) -> Result<tokenizer::Located, ProbeError> {
        let o = self.opts;
        let cell = &o.cells[job.cell];
        let p = prompt::build_from(&o.haystack, skip, words, cell.depth, cell.repeat, &Needle::draw(o.seed, job.trial));
        tok.locate(&p.text, (p.needle_at[0], p.needle_len))
    }

    /// Before any job, `--tokenizer` against the server's count of the smallest cell's first
    /// prompt (its /tokenize where it has one, else the usage of one request for one token):
    /// more than 1% apart is bad input, found before the budget is spent; within, the
    /// difference is the offset the local search allows for. Returns a note.
    fn check_tokenizer(&self, tok: &LocalTokenizer) -> Result<Option<String>, ProbeError> {
        let o = self.opts;
        let Some(cell) = (0..o.cells.len()).min_by_key(|&i| o.cells[i].context_len) else { return Ok(None) };
        let words = self.cell_start(cell)?;
        let c = &o.cells[cell];
        let text = prompt::build(&o.haystack, words, c.depth, c.repeat, &Needle::draw(o.seed, 0)).text;
        let mine = tok.count(&text)?;
        let server = match self.client.tokenize(&self.model, o.api, &text) {
            Ok(Some(n)) => Some((n, "/tokenize".to_string())),
            Ok(None) => None,
            Err(e) if other_tokenize(&e) => None,
            Err(e) => return Err(e),
        };
        let server = match server {
            Some(s) => Some(s),
            None => self
                .client
                .generate(o.api, &self.model, &text, 1, None, &|| self.stopped())?
                .prompt_tokens
                .map(|n| (n, format!("usage (one extra request for one token to {})", o.api.path()))),
        };
        match server {
            Some((s, _)) if !agrees(mine, s) => Err(mismatch(tok, o.api, mine, s, &format!("a prompt of the {}-token cell", c.context_len))),
            Some((s, how)) => {
                self.offset.store(s as i64 - mine as i64, Ordering::Relaxed);
                Ok(Some(format!("--tokenizer checked against the server's {how}: {mine} and {s} tokens for a prompt of the {}-token cell", c.context_len)))
            }
            None => Ok(Some("the server reports no token count (no /tokenize, no usage): the --tokenizer count is recorded unchecked".to_string())),
        }
    }

    /// Runs one job: its records in send order. `done`: the passes already in the transcript,
    /// with the haystack words and phase their prompt had (a second pass sends that prompt).
    fn run(&self, job: Job, done: &HashMap<String, (usize, usize)>) -> Result<Vec<Record>, ProbeError> {
        let o = self.opts;
        let cell = &o.cells[job.cell];
        let target = o.target(job.cell, job.trial);
        let needle = Needle::draw(o.seed, job.trial);
        let twice = o.prefix_cache_twice;
        let prior = (0..o.passes()).find_map(|p| done.get(&job.id(twice, p)).copied());
        let mut out = Vec::new();
        // The prompt, and the positions counted by /tokenize or the local tokenizer.
        let (mut words, mut skip) = prior.unwrap_or((self.first_guess(job.cell), 0));
        let mut counted: Option<(u64, u64, u64)> = None; // (tokens, needle_start, needle_tokens)
                                                         // The length the local tokenizer aims at: the cell's, less the server's own additions
                                                         // (a chat template's tokens) measured before the run.
        let aim = (target as i64 - self.offset.load(Ordering::Relaxed)).max(1) as u64;
        let local = match &self.counter {
            Counter::Local(t) => Some(t.as_ref()),
            _ => None,
        };
        if let Some(tok) = local {
            if prior.is_none() {
                let start = self.cell_start(job.cell)?;
                let found = prompt::search(aim, start, &mut |w, k| {
                    self.count(&prompt::build_from(&o.haystack, k, w, cell.depth, cell.repeat, &needle).text)
                })?;
                (words, skip) = (found.words, found.skip);
            }
            let l = self.located(tok, job, words, skip)?;
            counted = Some((l.tokens, l.needle_start, l.needle_tokens));
        } else if matches!(self.counter, Counter::Tokenize) {
            let tokens = match prior {
                Some(_) => {
                    self.count(&prompt::build_from(&o.haystack, skip, words, cell.depth, cell.repeat, &needle).text)?
                }
                None => {
                    let start = self.cell_start(job.cell)?;
                    let found = prompt::search(target, start, &mut |w, k| {
                        self.count(&prompt::build_from(&o.haystack, k, w, cell.depth, cell.repeat, &needle).text)
                    })?;
                    (words, skip) = (found.words, found.skip);
                    found.tokens
                }
            };
            self.learn(job.cell, words, tokens);
            let p = prompt::build_from(&o.haystack, skip, words, cell.depth, cell.repeat, &needle);
            let memo = self.before.lock().ok().and_then(|m| m.get(&(job.cell, words, skip)).copied());
            let before = match memo {
                Some(b) => b,
                None => {
                    let b = self.count(p.before_needle())?;
                    if let Ok(mut m) = self.before.lock() {
                        m.insert((job.cell, words, skip), b);
                    }
                    b
                }
            };
            let through = self.count(p.through_needle())?;
            counted = Some((tokens, before, through.saturating_sub(before).max(1)));
        }
        for pass in 0..o.passes() {
            let id = job.id(twice, pass);
            if done.contains_key(&id) {
                continue;
            }
            let mut tries = 0;
            loop {
                tries += 1;
                let p = prompt::build_from(&o.haystack, skip, words, cell.depth, cell.repeat, &needle);
                let cap_rel = o.capture.then(|| format!("captures/{id}.json"));
                let cap_abs = cap_rel.as_ref().map(|r| self.stage.join(r));
                let a = self
                    .client
                    .generate(o.api, &self.model, &p.text, o.max_tokens, cap_abs.as_deref(), &|| self.stopped())?;
                if let (Some(tok), Some(server), Some((mine, _, _))) = (local, a.prompt_tokens, counted) {
                    if !agrees(mine, server) {
                        if let Some(c) = &cap_abs {
                            let _ = std::fs::remove_file(c);
                        }
                        return Err(mismatch(tok, o.api, mine, server, &format!("request {id}")));
                    }
                }
                let tokens = match (a.prompt_tokens, counted) {
                    (Some(t), _) => t,
                    (None, Some((t, _, _))) => t,
                    (None, None) => {
                        return Err(ProbeError::server(format!(
                            "{}{}: the reply has no {} and the server has no /tokenize endpoint: the prompt's tokens cannot be counted",
                            self.client.shown(),
                            o.api.path(),
                            if o.api == Api::Generate { "meta_info.prompt_tokens" } else { "usage.prompt_tokens" }
                        )))
                    }
                };
                // The depth on the count the positions come from (the server's own count when
                // they are estimated from it).
                let (basis, start, m, positions) = match counted {
                    Some((c, s, m)) => (c, s, m, if local.is_some() { "tokenizer" } else { "tokenize" }),
                    None => {
                        let total = p.text.len().max(1) as f64;
                        let s = (tokens as f64 * p.needle_at[0] as f64 / total).round() as u64;
                        let m = ((tokens as f64 * p.needle_len as f64 / total).round() as u64).max(1);
                        (tokens, s, m, "estimate")
                    }
                };
                let depth = if basis > m { (start as f64 / (basis - m) as f64).clamp(0.0, 1.0) } else { 0.0 };
                let ok = prompt::within(tokens, target);
                let rec = Record {
                    id: id.clone(),
                    cell: job.cell,
                    target_tokens: target,
                    target_depth: cell.depth,
                    repeat: cell.repeat,
                    trial: job.trial,
                    seed: o.seed,
                    concurrency: job.concurrency,
                    prefix_cache: twice.then(|| if pass == 0 { "miss" } else { "hit" }.to_string()),
                    key: needle.key.clone(),
                    value: needle.value.clone(),
                    words,
                    skip,
                    prompt_tokens: tokens,
                    local_tokens: local.and(counted).map(|c| c.0),
                    needle_start: start,
                    needle_tokens: m,
                    depth,
                    positions: positions.to_string(),
                    hit: crate::import::niah::string_match_all(&a.text, &[needle.value.as_str()]),
                    answer: a.text,
                    ms: a.elapsed.as_millis() as u64,
                    attempts: a.attempts,
                    capture: cap_rel.clone().filter(|_| ok),
                    discarded: (!ok).then(|| "length".to_string()),
                    at: now_secs(),
                };
                out.push(rec);
                if ok {
                    if counted.is_none() {
                        self.learn(job.cell, words, tokens);
                    }
                    break;
                }
                if let Some(c) = &cap_abs {
                    let _ = std::fs::remove_file(c);
                }
                if let (Some(tok), Some((mine, _, _))) = (local, counted) {
                    return Err(ProbeError::server(format!(
                        "{}: the server counts {tokens} tokens for a prompt --tokenizer {} counts {mine} (cell {} wants {} ± 1%): their difference is not the {} tokens measured before the run; drop --tokenizer to count on the server",
                        self.client.shown(),
                        tok.name,
                        job.cell,
                        target,
                        self.offset.load(Ordering::Relaxed)
                    )));
                }
                if tries >= 6 || counted.is_some() {
                    return Err(ProbeError::server(format!(
                        "{}: the server counts {tokens} tokens for a prompt built to {} (cell {} wants {} ± 1%): its count changes between requests",
                        self.client.shown(),
                        counted.map_or(0, |c| c.0),
                        job.cell,
                        target
                    )));
                }
                // Usage counts only: scale the haystack and send again.
                let scaled = (words as f64 * target as f64 / tokens.max(1) as f64).round() as usize;
                // Within [1, max_words]: a server's zero, huge or jumping counts never build an
                // empty or an endless prompt.
                let next = if scaled == words {
                    if tokens > target {
                        words.saturating_sub(1)
                    } else {
                        words + 1
                    }
                } else {
                    scaled
                };
                words = next.clamp(1, prompt::max_words(target));
            }
        }
        Ok(out)
    }
}

/// A `/tokenize` of another shape (TGI's, llama.cpp's take other fields and refuse ours with a
/// 4xx): no /tokenize for the probe.
fn other_tokenize(e: &ProbeError) -> bool {
    e.message.starts_with("HTTP 4") || e.message.contains("no count or tokens")
}

/// Whether the local and the server's counts of a prompt agree within 1% (of the local count).
pub(crate) fn agrees(local: u64, server: u64) -> bool {
    local.abs_diff(server) as f64 <= 0.01 * local.max(1) as f64
}

/// The one line of a local tokenizer that disagrees with the server by more than 1%.
fn mismatch(tok: &LocalTokenizer, api: Api, local: u64, server: u64, what: &str) -> ProbeError {
    let pct = 100.0 * (server as f64 - local as f64) / local.max(1) as f64;
    let hint = if api == Api::Chat {
        "; with --chat the server also counts the model's chat template, which tokenizer.json does not hold"
    } else {
        ""
    };
    ProbeError::input(format!(
        "--tokenizer {}: counts {local} tokens for {what}, the server {server} ({pct:+.1}%, more than 1% apart): not the served model's tokenizer{hint}; give the model's own tokenizer.json, or drop --tokenizer to count on the server",
        tok.name
    ))
}

/// The measured table's rows from the counted records: one per (cell, the server's count,
/// depth to 4 decimals, concurrency, prefix cache), in cell order, each with the run's median
/// needle length (the upper median of an even count): a needle's key words move its length by a token or two
/// from request to request, which is no property of a row, and one value keeps one model
/// evaluation per cell.
pub(crate) fn table(opts: &Options, records: &[Record]) -> (Vec<String>, Vec<Row>) {
    let mut cols: Vec<String> = opts.labels.iter().map(|(k, _)| k.clone()).collect();
    let conc = records.iter().any(|r| r.concurrency.is_some());
    let prefix = records.iter().any(|r| r.prefix_cache.is_some());
    if conc {
        cols.push("concurrency".into());
    }
    if prefix {
        cols.push("prefix_cache".into());
    }
    type Key = (usize, u64, String, u32, Option<u32>, Option<String>);
    let needle_tokens = median_needle(records).max(1);
    let mut by: BTreeMap<Key, (u64, u64)> = BTreeMap::new();
    for r in records.iter().filter(|r| r.counts()) {
        let e = by
            .entry((
                r.cell,
                r.prompt_tokens,
                format!("{:.4}", r.depth),
                r.repeat,
                r.concurrency,
                r.prefix_cache.clone(),
            ))
            .or_default();
        e.0 += 1;
        e.1 += r.hit as u64;
    }
    let rows = by
        .into_iter()
        .map(|((_, l, d, rep, c, p), (t, h))| {
            let mut conditions: Vec<String> = opts.labels.iter().map(|(_, v)| v.clone()).collect();
            if conc {
                conditions.push(c.map(|c| c.to_string()).unwrap_or_default());
            }
            if prefix {
                conditions.push(p.unwrap_or_default());
            }
            Row {
                context_len: l,
                index_topk: opts.index_topk,
                depth: d,
                repeat: rep,
                needle_tokens,
                conditions,
                trials: t,
                hits: h,
            }
        })
        .collect();
    (cols, rows)
}

/// The median needle length of the counted records (the upper one of an even count; 0 for
/// none): the summary's, the provenance's and every row's of the table.
fn median_needle(records: &[Record]) -> u64 {
    let mut m: Vec<u64> = records.iter().filter(|r| r.counts()).map(|r| r.needle_tokens).collect();
    m.sort_unstable();
    m.get(m.len() / 2).copied().unwrap_or(0)
}

/// The measured table's text.
fn csv_text(provenance: &str, cols: &[String], rows: &[Row]) -> String {
    let mut s = format!("# provenance: {}\n", provenance.replace(['\n', '\r'], " "));
    s.push_str("context_len,index_topk,depth,repeat,needle_tokens,");
    for c in cols {
        s.push_str(c);
        s.push(',');
    }
    s.push_str("trials,hits\n");
    for r in rows {
        s.push_str(&format!("{},{},{},{},{},", r.context_len, r.index_topk, r.depth, r.repeat, r.needle_tokens));
        for c in &r.conditions {
            s.push_str(c);
            s.push(',');
        }
        s.push_str(&format!("{},{}\n", r.trials, r.hits));
    }
    s
}

/// Runs the probe into the folder `out` (staged; `resume` continues an interrupted run's
/// transcript). `inputs`: files the run reads (a haystack, a cells file), which the output
/// folder must not hold.
pub(crate) fn run(
    opts: &Options,
    out: &Path,
    resume: bool,
    inputs: &[&Path],
    progress: &dyn Progress,
) -> Result<Probed, ProbeError> {
    opts.check()?;
    let client = Client::new(&opts.url, opts.timeout, opts.retry, opts.api_key.clone())?;
    let fingerprint = opts.fingerprint();
    let stage = StagedDir::begin(out, &StageOptions { resume, fingerprint: &fingerprint, inputs })?;
    if resume && !stage.resumed() {
        // No interrupted run to continue: a finished one of the same options is complete (and
        // left as it is), one of other options is not replaced on a --resume.
        if let Some(p) = finished(opts, out, &fingerprint, client.shown())? {
            drop(stage);
            return Ok(p);
        }
    }
    match run_in(opts, out, &stage, client, progress) {
        Ok(p) => {
            stage.commit()?;
            Ok(p)
        }
        Err(e) => {
            let kept = std::fs::metadata(stage.path().join(transcript::FILE)).is_ok_and(|m| m.len() > 0);
            if kept {
                let shown = stage.path().display().to_string();
                stage.keep();
                return Err(ProbeError {
                    kind: e.kind,
                    message: format!(
                        "{} (the requests so far are kept in {shown}: rerun with --resume to continue)",
                        e.message
                    ),
                });
            }
            Err(e)
        }
    }
}

fn run_in(
    opts: &Options,
    out: &Path,
    stage: &StagedDir,
    client: Client,
    progress: &dyn Progress,
) -> Result<Probed, ProbeError> {
    let dir = stage.path();
    let tpath = dir.join(transcript::FILE);
    let previous = if stage.resumed() { transcript::read(&tpath)? } else { Vec::new() };
    let done: HashMap<String, (usize, usize)> =
        previous.iter().filter(|r| r.counts()).map(|r| (r.id.clone(), (r.words, r.skip))).collect();
    let model = match &opts.model {
        Some(m) => m.clone(),
        None => match client.model_id() {
            Ok(m) => m,
            Err(_) if opts.api == Api::Generate => "unknown (no /v1/models)".to_string(),
            Err(e) => {
                return Err(ProbeError {
                    kind: e.kind,
                    message: format!("{} (give the model id with --model)", e.message),
                })
            }
        },
    };
    let counter = match (&opts.tokenizer, opts.token_count) {
        (Some(t), _) => Counter::Local(t.clone()),
        (None, TokenCount::Usage) => Counter::Usage,
        // A /tokenize of another shape (TGI's, llama.cpp's take other fields and refuse ours
        // with a 4xx) is no /tokenize for the probe: the replies' usage counts instead.
        (None, TokenCount::Auto) => match client.tokenize(&model, opts.api, "hello") {
            Ok(Some(_)) => Counter::Tokenize,
            Ok(None) => Counter::Usage,
            Err(e) if other_tokenize(&e) => Counter::Usage,
            Err(e) => return Err(e),
        },
        (None, TokenCount::Tokenize) => {
            if client.tokenize(&model, opts.api, "hello")?.is_none() {
                return Err(ProbeError::input(format!(
                    "--token-count tokenize: {} has no /tokenize endpoint (use auto or usage)",
                    client.shown()
                )));
            }
            Counter::Tokenize
        }
    };
    if opts.capture {
        std::fs::create_dir_all(dir.join("captures"))
            .map_err(|e| ProbeError::failure(format!("cannot write {}: {e}", dir.display())))?;
    }
    let ctx = Ctx {
        opts,
        client,
        model,
        counter,
        stage: dir,
        words: Mutex::new(HashMap::new()),
        ratio: Mutex::new(0.75),
        before: Mutex::new(HashMap::new()),
        starts: Mutex::new(HashMap::new()),
        offset: AtomicI64::new(0),
        stop: AtomicBool::new(false),
    };
    for r in previous.iter().filter(|r| r.counts()) {
        ctx.learn(r.cell, r.words, r.prompt_tokens);
    }
    let mut notes = Vec::new();
    if let Counter::Local(t) = &ctx.counter {
        // Checked once before the budget is spent (a resumed run was checked when it began, and
        // each of its replies since).
        let before = previous
            .iter()
            .find_map(|r| r.local_tokens.filter(|_| r.counts()).map(|l| r.prompt_tokens as i64 - l as i64));
        match before {
            Some(d) => ctx.offset.store(d, Ordering::Relaxed),
            None => notes.extend(ctx.check_tokenizer(t)?),
        }
    }
    let jobs = opts.jobs();
    let passes = opts.passes();
    let total = jobs.len() as u64 * passes as u64;
    let todo: Vec<Job> = jobs
        .iter()
        .copied()
        .filter(|j| (0..passes).any(|p| !done.contains_key(&j.id(opts.prefix_cache_twice, p))))
        .collect();
    progress.start(total, total - (todo.len() as u64 * passes as u64).min(total));
    let mut writer = transcript::Writer::open(&tpath)?;
    let mut records = previous;
    let mut sent = 0u64;
    let mut failed: Option<ProbeError> = None;
    let phases: Vec<Option<u32>> =
        if opts.concurrency.is_empty() { vec![None] } else { opts.concurrency.iter().map(|&c| Some(c)).collect() };
    for phase in phases {
        let mine: Vec<Job> = todo.iter().copied().filter(|j| j.concurrency == phase).collect();
        if mine.is_empty() || failed.is_some() {
            continue;
        }
        let workers = phase.unwrap_or(opts.max_inflight).max(1) as usize;
        let next = AtomicUsize::new(0);
        let (tx, rx) = std::sync::mpsc::channel::<Result<Vec<Record>, ProbeError>>();
        std::thread::scope(|s| {
            for _ in 0..workers.min(mine.len()) {
                let tx = tx.clone();
                let (ctx, mine, next, done) = (&ctx, &mine, &next, &done);
                s.spawn(move || loop {
                    if ctx.stopped() {
                        break;
                    }
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    let Some(&job) = mine.get(i) else { break };
                    let r = ctx.run(job, done);
                    if r.is_err() {
                        ctx.stop.store(true, Ordering::Relaxed);
                    }
                    if tx.send(r).is_err() {
                        break;
                    }
                });
            }
            drop(tx);
            for r in rx {
                match r {
                    Ok(recs) => {
                        for rec in recs {
                            sent += 1;
                            if let Err(e) = writer.append(&rec) {
                                ctx.stop.store(true, Ordering::Relaxed);
                                failed.get_or_insert(e);
                            }
                            if rec.counts() {
                                progress.advance(1);
                            }
                            records.push(rec);
                        }
                    }
                    Err(e) => {
                        failed.get_or_insert(e);
                    }
                }
            }
        });
    }
    progress.finish();
    if let Some(e) = failed {
        return Err(e);
    }
    let resumed = records.iter().filter(|r| r.counts()).count() as u64
        - records[records.len() - sent as usize..].iter().filter(|r| r.counts()).count() as u64;
    // Sorted so that the files do not depend on the order replies came in.
    records.sort_by(|a, b| {
        (a.cell, a.trial, a.concurrency, &a.prefix_cache, &a.id).cmp(&(
            b.cell,
            b.trial,
            b.concurrency,
            &b.prefix_cache,
            &b.id,
        ))
    });
    if matches!(ctx.counter, Counter::Usage) {
        notes.push("the server has no /tokenize: each prompt's length is the reply's usage count, the needle's position estimated in proportion to characters (within a few tokens)".to_string());
    }
    let discarded = records.iter().filter(|r| !r.counts()).count();
    if discarded > 0 {
        notes.push(format!("{discarded} replies to prompts the server counted outside ±1% of their cell were sent again and are not counted (kept in the transcript)"));
    }
    notes.extend(ctx.client.notes());
    let p = summary(opts, out, ctx.client.shown(), &ctx.model, ctx.counter.name(), &records, sent, resumed, notes);
    let needle_tokens = p.needle_tokens;
    let provenance = format!(
        "dsa-sim probe {} measured {}{} ({}), model {}, temperature 0, max_tokens {}, seed {}, prompt tokens counted by {}, needle about {needle_tokens} tokens, haystack {}, template {} (scored by the needle's value in the answer), {} UTC; index_topk {} as given to the probe; every request in transcript.jsonl",
        env!("CARGO_PKG_VERSION"),
        ctx.client.shown(),
        opts.api.path(),
        match opts.api {
            Api::Completions => "completions",
            Api::Chat => "chat completions",
            Api::Generate => "SGLang native",
        },
        ctx.model,
        opts.max_tokens,
        opts.seed,
        match &ctx.counter {
            Counter::Tokenize => "the server's /tokenize".to_string(),
            Counter::Usage => "the replies' usage".to_string(),
            Counter::Local(t) => format!("--tokenizer {} locally (the replies' usage recorded where given; it agreed within 1%)", t.name),
        },
        opts.haystack.name,
        opts.haystack.template.name,
        utc_date(now_secs()),
        opts.index_topk,
    );
    let (cols, rows) = (&p.condition_columns, &p.rows);
    let text = csv_text(&provenance, cols, rows);
    // Read back with the one reader: verdict --data takes the table as written.
    let back = crate::measured::parse_csv(&text, "measured.csv")
        .map_err(|e| ProbeError::failure(format!("internal: measured.csv does not read back: {e}")))?;
    let (t, h): (u64, u64) = rows.iter().fold((0, 0), |a, r| (a.0 + r.trials, a.1 + r.hits));
    if back.rows.len() != rows.len() || back.total_trials() != t || back.rows.iter().map(|r| r.hits).sum::<u64>() != h {
        return Err(ProbeError::failure("internal: measured.csv does not read back with every trial and hit"));
    }
    crate::output::write_file_atomic(&dir.join("measured.csv"), text.as_bytes())?;
    let caps: Vec<&Record> = records.iter().filter(|r| r.counts() && r.capture.is_some()).collect();
    if !caps.is_empty() {
        let mut man = String::from("file,row,context_len,needle_start,needle_tokens,request,label\n");
        for r in &caps {
            man.push_str(&format!(
                "{},{},{},{},{},0,{}\n",
                r.capture.as_deref().unwrap_or(""),
                r.prompt_tokens - 1,
                r.prompt_tokens,
                r.needle_start.min(r.prompt_tokens - r.needle_tokens.min(r.prompt_tokens)),
                r.needle_tokens.min(r.prompt_tokens),
                r.id
            ));
        }
        crate::output::write_file_atomic(&dir.join("manifest.csv"), man.as_bytes())?;
    }
    // What a later --resume on the finished folder compares its options with.
    let run = serde_json::json!({"fingerprint": opts.fingerprint(), "server": p.server, "model": p.model, "token_count": p.token_count});
    crate::output::write_file_atomic(&dir.join(RUN_FILE), format!("{run}\n").as_bytes())?;
    Ok(p)
}

/// The finished folder's record of its run (hidden, like the other markers): its fingerprint,
/// server, model and way of counting.
pub(crate) const RUN_FILE: &str = ".probe-run.json";

/// The summary of a run's records (sorted).
#[allow(clippy::too_many_arguments)]
fn summary(
    opts: &Options,
    out: &Path,
    server: &str,
    model: &str,
    token_count: &str,
    records: &[Record],
    sent: u64,
    resumed: u64,
    notes: Vec<String>,
) -> Probed {
    let counted: Vec<&Record> = records.iter().filter(|r| r.counts()).collect();
    let (condition_columns, rows) = table(opts, records);
    Probed {
        out: out.to_path_buf(),
        server: server.to_string(),
        model: model.to_string(),
        token_count: token_count.to_string(),
        sent,
        resumed,
        condition_columns,
        rows,
        captures: counted.iter().filter(|r| r.capture.is_some()).count() as u64,
        needle_tokens: median_needle(records),
        seed: opts.seed,
        notes,
    }
}

/// `--resume` where no interrupted run is left: the summary of `out` when it is a finished
/// probe of the same options (nothing sent, nothing written), an error when it is a finished
/// probe of other options (or of a dsa-sim that kept no record of them), `None` when `out` is
/// no finished probe (the run starts afresh).
fn finished(opts: &Options, out: &Path, fingerprint: &str, server: &str) -> Result<Option<Probed>, ProbeError> {
    let is_file = |p: &Path| std::fs::metadata(p).is_ok_and(|m| m.is_file());
    if !is_file(&out.join(crate::output::RESULT_MARKER)) || !is_file(&out.join(transcript::FILE)) {
        return Ok(None);
    }
    let shown = out.display();
    let run: Option<serde_json::Value> =
        crate::input::read_regular_file(&out.join(RUN_FILE)).ok().flatten().and_then(|t| serde_json::from_str(&t).ok());
    let Some(run) = run else {
        return Err(ProbeError::input(format!(
            "--resume: {shown} is a finished probe without a record of its options (written by an earlier dsa-sim): nothing to continue; drop --resume to measure again into it (it is replaced), or choose another --out"
        )));
    };
    if run["fingerprint"].as_str() != Some(fingerprint) {
        return Err(ProbeError::input(format!(
            "--resume: {shown} is a finished probe of other options (server, cells, seed, …): --resume continues only an interrupted run of the same options; drop --resume to measure again into it (it is replaced), or choose another --out"
        )));
    }
    let mut records = transcript::read_only(&out.join(transcript::FILE))?;
    records.sort_by(|a, b| {
        (a.cell, a.trial, a.concurrency, &a.prefix_cache, &a.id).cmp(&(
            b.cell,
            b.trial,
            b.concurrency,
            &b.prefix_cache,
            &b.id,
        ))
    });
    let counted = records.iter().filter(|r| r.counts()).count() as u64;
    let note = format!("nothing to resume: {shown} is a complete probe of these options; it is left as it was (drop --resume to measure again)");
    let text = |k: &str, or: &str| run[k].as_str().unwrap_or(or).to_string();
    Ok(Some(summary(
        opts,
        out,
        &text("server", server),
        &text("model", "unknown"),
        &text("token_count", "unknown"),
        &records,
        0,
        counted,
        vec![note],
    )))
}
#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates_and_labels() {
        assert_eq!(utc_date(0), "1970-01-01 00:00");
        assert_eq!(utc_date(1_796_205_600), "2026-12-02 10:00");
        assert_eq!(parse_label("build=fork").unwrap(), ("build".into(), "fork".into()));
        assert!(parse_label("dprime=1").is_err());
        assert!(parse_label("hits=1").is_err());
        assert!(parse_label("build=a,b").is_err());
        assert!(parse_label("build").is_err());
    }
}
