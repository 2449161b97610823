//! `probe`: the options as text (flags, or the Python package's keyword arguments) to
//! `crate::probe::Options`, and the run or the dry run.

use super::CommandError;
use crate::probe::{self, cells, Api, Haystack, Options, RetryPolicy, TokenCount};
use crate::progress::Progress;
use std::path::PathBuf;
use std::time::Duration;

/// What `probe` takes, as the front ends give it.
#[derive(Debug, Clone)]
pub struct ProbeSpec {
    /// The server.
    pub url: String,
    /// The output folder (not needed for a dry run).
    pub out: Option<PathBuf>,
    /// `--context-len` (lengths and ranges).
    pub context_len: Option<String>,
    /// `--depth`.
    pub depth: String,
    /// `--repeat`.
    pub repeat: String,
    /// `--trials` (per cell; with `--cells`, for cells without a trials column).
    pub trials: Option<u64>,
    /// `--cells cells.csv` (as `plan --out` writes them).
    pub cells: Option<PathBuf>,
    /// `--chat`: `/v1/chat/completions`.
    pub chat: bool,
    /// `--generate`: SGLang's native `/generate`.
    pub generate: bool,
    /// `--model`.
    pub model: Option<String>,
    /// `--index-topk`: the deployment's k.
    pub index_topk: u64,
    /// `--label NAME=VALUE`, repeatable.
    pub labels: Vec<String>,
    /// `--concurrency 1,8`.
    pub concurrency: Option<String>,
    /// `--prefix-cache-twice`.
    pub prefix_cache_twice: bool,
    /// `--seed`.
    pub seed: u64,
    /// `--max-inflight`.
    pub max_inflight: u32,
    /// `--timeout` in seconds.
    pub timeout: f64,
    /// `--retries`.
    pub retries: u32,
    /// `--backoff` in seconds (the first retry's wait).
    pub backoff: f64,
    /// `--max-tokens`.
    pub max_tokens: u32,
    /// `--haystack FILE`.
    pub haystack: Option<PathBuf>,
    /// `--api-key-env`: the environment variable holding the key.
    pub api_key_env: String,
    /// `--capture`.
    pub capture: bool,
    /// `--token-count auto|tokenize|usage`.
    pub token_count: String,
    /// `--tokenizer tokenizer.json`: the served model's tokenizer, counted locally.
    pub tokenizer: Option<PathBuf>,
    /// `--resume`.
    pub resume: bool,
    /// `--template ruler|gkamradt|FILE.toml`: the prompt's shape.
    pub template: Option<String>,
    /// `--spread N`: consecutive lengths each cell's trials spread over [default: 4 for a
    /// `--context-len` grid, 1 for `--cells`, whose lengths are exact].
    pub spread: Option<u64>,
}

impl Default for ProbeSpec {
    fn default() -> Self {
        ProbeSpec {
            url: String::new(),
            out: None,
            context_len: None,
            depth: "0.1,0.5,0.9".into(),
            repeat: "1".into(),
            trials: None,
            cells: None,
            chat: false,
            generate: false,
            model: None,
            index_topk: 512,
            labels: Vec::new(),
            concurrency: None,
            prefix_cache_twice: false,
            seed: crate::engine::DEFAULT_SEED,
            max_inflight: 4,
            timeout: 600.0,
            retries: 5,
            backoff: 0.5,
            max_tokens: 32,
            haystack: None,
            api_key_env: "OPENAI_API_KEY".into(),
            capture: false,
            token_count: "auto".into(),
            tokenizer: None,
            resume: false,
            spread: None,
            template: None,
        }
    }
}

/// Default trials per cell of a `--context-len` grid.
pub(crate) const DEFAULT_TRIALS: u64 = 20;
/// Default `--spread` of a `--context-len` grid: trial t at the cell's length + t mod 4 (every
/// residue mod 4, and mod the compression ratio of the presets' models).
pub(crate) const DEFAULT_SPREAD: u64 = 4;

impl ProbeSpec {
    /// The probe's options, checked (reads `--cells` and `--haystack`; sends nothing). Also the
    /// notes on planned cells left out.
    pub(crate) fn options(&self) -> Result<(Options, Vec<String>), CommandError> {
        let mut notes = Vec::new();
        let mut file_conditions: Vec<(String, Vec<String>)> = Vec::new();
        let api = match (self.chat, self.generate) {
            (true, true) => {
                return Err(CommandError::input(
                    "--chat and --generate: give one of them (chat completions, or SGLang's /generate)",
                ))
            }
            (true, false) => Api::Chat,
            (false, true) => Api::Generate,
            (false, false) => Api::Completions,
        };
        let mut cells = match (&self.cells, &self.context_len) {
            (Some(_), Some(_)) => return Err(CommandError::input("--cells and --context-len: give one of them")),
            (None, None) => {
                return Err(CommandError::input(
                    "give --context-len (e.g. 2K..64K:x2) or --cells cells.csv (as `dsa-sim plan --out` writes it)",
                ))
            }
            (Some(path), None) => {
                let text = crate::input::read_to_string(path)
                    .map_err(|e| CommandError::input(format!("--cells {}: {e}", path.display())))?;
                file_conditions = cells::parse_cells_conditions(&text, &path.display().to_string())?;
                cells::parse_cells_csv(&text, &path.display().to_string(), self.trials)?
            }
            (None, Some(spec)) => {
                let lengths = cells::parse_lengths(spec)?;
                let depths = cells::parse_depths(&self.depth)?;
                let repeats = cells::parse_counts("--repeat", &self.repeat, cells::MAX_REPEAT as u64)?;
                cells::grid(&lengths, &depths, &repeats, self.trials.unwrap_or(DEFAULT_TRIALS))?
            }
        };
        // A grid's lengths (2K..64K:x2, 1Ki..64Ki:x2) often share one residue mod 4: spread by
        // default, so that a length-periodic defect shows; planned cells are exact.
        let spread = self.spread.unwrap_or(if self.cells.is_some() { 1 } else { DEFAULT_SPREAD });
        let planned = cells.len();
        let other_k: Vec<u64> = {
            let mut v: Vec<u64> = cells.iter().filter_map(|c| c.index_topk).filter(|&k| k != self.index_topk).collect();
            v.sort_unstable();
            v.dedup();
            v
        };
        cells.retain(|c| c.index_topk.is_none_or(|k| k == self.index_topk));
        if !other_k.is_empty() {
            let ks = other_k.iter().map(u64::to_string).collect::<Vec<_>>().join(", ");
            if cells.is_empty() {
                return Err(CommandError::input(format!(
                    "--cells: every cell is planned at index_topk {ks}, and this server runs --index-topk {}: restart the server with that k and give --index-topk K",
                    self.index_topk
                )));
            }
            notes.push(format!(
                "{} of {planned} planned cells are at index_topk {ks}, not this server's {}: left out (restart the server with that k and rerun with --index-topk K)",
                planned - cells.len(),
                self.index_topk
            ));
        }
        let mut concurrency: Vec<u32> = match &self.concurrency {
            Some(c) => cells::parse_counts("--concurrency", c, 256)?.into_iter().map(|c| c as u32).collect(),
            None => Vec::new(),
        };
        let mut labels = self.labels.iter().map(|l| probe::parse_label(l)).collect::<Result<Vec<_>, _>>()?;
        let mut prefix_cache_twice = self.prefix_cache_twice;
        let mut max_inflight = self.max_inflight;
        // The conditions the planned cells' table was measured under, carried by `plan --out`:
        // measured again under the same ones unless a flag says otherwise.
        let name = self.cells.as_ref().map(|p| p.display().to_string()).unwrap_or_default();
        for (col, vals) in &file_conditions {
            match col.as_str() {
                "prefix_cache" => {
                    if let Some(v) = vals.iter().find(|v| *v != "miss" && *v != "hit") {
                        return Err(CommandError::input(format!(
                            "--cells {name}: column `prefix_cache` value `{v}`: allowed miss, hit"
                        )));
                    }
                    if vals.iter().any(|v| v == "hit") && !prefix_cache_twice {
                        prefix_cache_twice = true;
                        notes.push(format!("each prompt sent twice (prefix_cache miss|hit), as {name} asks"));
                    }
                }
                "concurrency" => {
                    let want: Vec<u32> =
                        cells::parse_counts(&format!("--cells {name}: column `concurrency`"), &vals.join(","), 256)?
                            .into_iter()
                            .map(|c| c as u32)
                            .collect();
                    if self.concurrency.is_none() {
                        let top = want.iter().copied().max().unwrap_or(1);
                        if top > max_inflight {
                            max_inflight = top;
                        }
                        notes.push(format!(
                            "each cell at concurrency {}, as {name} asks",
                            want.iter().map(u32::to_string).collect::<Vec<_>>().join(", ")
                        ));
                        concurrency = want;
                    }
                }
                _ => {
                    if labels.iter().any(|(k, _)| k == col) {
                        continue;
                    }
                    if vals.len() > 1 {
                        return Err(CommandError::input(format!(
                            "--cells {name}: column `{col}` has the values {}: a probe measures one server under one of them; give --label {col}=VALUE",
                            vals.join(", ")
                        )));
                    }
                    let l = probe::parse_label(&format!("{col}={}", vals[0]))
                        .map_err(|e| CommandError::input(format!("--cells {name}: column `{col}`: {}", e.message)))?;
                    notes.push(format!("every row labelled {col}={}, as {name} says", l.1));
                    labels.push(l);
                }
            }
        }
        let template = match &self.template {
            Some(t) => probe::Template::parse(t)?,
            None => probe::Template::ruler(),
        };
        let mut haystack = match (&self.haystack, &template.haystack) {
            (Some(p), _) => {
                let text = crate::input::read_to_string(p)
                    .map_err(|e| CommandError::input(format!("--haystack {}: {e}", p.display())))?;
                Haystack::from_text(&text, &p.display().to_string())?
            }
            (None, Some(text)) => Haystack::from_text(text, &format!("the template {}'s", template.name))?,
            (None, None) => Haystack::noise(),
        };
        haystack.template = template;
        if !(self.timeout.is_finite() && self.timeout > 0.0 && self.timeout <= 86_400.0) {
            return Err(CommandError::input(format!("--timeout {}: allowed (0, 86400] seconds", self.timeout)));
        }
        if !(self.backoff.is_finite() && (0.0..=600.0).contains(&self.backoff)) {
            return Err(CommandError::input(format!("--backoff {}: allowed 0..=600 seconds", self.backoff)));
        }
        if self.retries > 100 {
            return Err(CommandError::input(format!("--retries {}: allowed 0..=100", self.retries)));
        }
        // Read before any request: a bad file is one line and exit 2.
        let tokenizer = match &self.tokenizer {
            Some(p) => Some(std::sync::Arc::new(probe::LocalTokenizer::from_file(p)?)),
            None => None,
        };
        let api_key = if self.api_key_env.is_empty() { None } else { std::env::var(&self.api_key_env).ok() };
        let opts = Options {
            url: self.url.clone(),
            api,
            model: self.model.clone(),
            cells,
            index_topk: self.index_topk,
            labels,
            concurrency,
            prefix_cache_twice,
            seed: self.seed,
            max_inflight,
            timeout: Duration::from_secs_f64(self.timeout),
            retry: RetryPolicy {
                retries: self.retries,
                base: Duration::from_secs_f64(self.backoff),
                max: Duration::from_secs(60),
            },
            max_tokens: self.max_tokens,
            haystack,
            api_key,
            capture: self.capture,
            token_count: TokenCount::parse(&self.token_count)?,
            tokenizer,
            spread,
        };
        opts.check()?;
        crate::probe::Client::new(&opts.url, opts.timeout, opts.retry, None)?;
        Ok((opts, notes))
    }

    /// `--dry-run`: the cells, the requests and the tokens, nothing sent.
    pub fn dry_run(&self) -> Result<probe::DryRun, CommandError> {
        let (opts, _) = self.options()?;
        Ok(probe::dry_run(&opts)?)
    }

    /// Runs the probe.
    pub fn run(&self, progress: &dyn Progress) -> Result<probe::Probed, CommandError> {
        let (opts, notes) = self.options()?;
        let out = self.out.as_ref().ok_or_else(|| {
            CommandError::input("--out FOLDER is required (where measured.csv, transcript.jsonl and the captures go)")
        })?;
        let inputs: Vec<&std::path::Path> =
            self.haystack.iter().chain(self.cells.iter()).chain(self.tokenizer.iter()).map(PathBuf::as_path).collect();
        let mut p = probe::run(&opts, out, self.resume, &inputs, progress)?;
        p.notes.splice(0..0, notes);
        Ok(p)
    }
}
