//! `dsa-sim probe`: measure a live server (needle prompts of exact token lengths) into a
//! measured table, a transcript and, where the server returns them, indexer captures.

use super::{emit, print_json, CliError};
use crate::commands::probe::ProbeSpec;
use crate::commands::probe_loop::LoopSpec;
use std::path::PathBuf;

const HELP: &str = "Sends needle prompts to an OpenAI-compatible server (/v1/completions, or \
/v1/chat/completions with --chat; the model id from /v1/models) or SGLang's /generate \
(--generate), at exact token lengths: the haystack is lengthened until the server's own count \
(its /tokenize endpoint where it has one, else each reply's usage.prompt_tokens) is within ±1% of \
the cell's, and that count is what the table records, with the depth where the needle actually \
sits. A hit is an answer containing the needle's value (RULER's string_match_all). Needle i of \
every cell is drawn from (--seed, i).

--tokenizer tokenizer.json (the served model's file from its Hugging Face repository, read from \
disk) counts the prompts locally instead: the length search needs no server round trip per step, \
and the depth recorded is where the needle's tokens sit in the tokenizer's own encoding. The table \
still records the server's usage.prompt_tokens where the server reports it. Before the budget is \
spent, the tokenizer is checked against the server's count of one prompt (its /tokenize, or one \
request for one token): more than 1% apart stops the probe with one line and exit 2 (another \
model's tokenizer; or, with --chat, a chat template of more than 1% of the prompt, which \
tokenizer.json does not hold: drop --tokenizer then), as does any later reply more than 1% \
apart; within 1%, the difference (a short template) is allowed for.

OUT/ gets measured.csv (the measured-table format with a `# provenance:` line: server, model, \
sampling, seed, version, date; condition columns from --label, --concurrency and \
--prefix-cache-twice), transcript.jsonl (every request: seed, cell, tokens, answer, hit, timing) \
and, with --capture, captures/ and manifest.csv that `dsa-sim import topk --manifest` reads. The \
folder is staged: a run that fails or is killed keeps its transcript (rerun with --resume: at most \
the requests in flight are lost); only a complete run replaces OUT, and only if dsa-sim wrote it.

Requests: at most --max-inflight at once, each bounded by --timeout, retried with exponential \
backoff on 429, 5xx, broken connections and malformed replies (Retry-After honoured). The key is \
read from the environment variable --api-key-env and never written.

The loop:
  dsa-sim probe --url http://localhost:30000 --context-len 2K..64K:x2 --trials 20 --out run1
  dsa-sim verdict --preset deepseek-v4-flash --data run1/measured.csv
  dsa-sim plan --preset deepseek-v4-flash --data run1/measured.csv --out cells.csv
  dsa-sim probe --url http://localhost:30000 --cells cells.csv --out run2
  dsa-sim verdict --preset deepseek-v4-flash --data run1/measured.csv --data run2/measured.csv

With --tokenizer tokenizer.json either probe counts its prompts locally.";

/// Arguments of `dsa-sim probe`.
#[derive(clap::Args, Debug)]
#[command(after_help = HELP)]
pub struct ProbeArgs {
    /// The server: http://HOST:PORT (with or without /v1).
    #[arg(long, value_name = "URL")]
    pub url: String,
    /// The output folder.
    #[arg(long, short = 'o', value_name = "FOLDER", required_unless_present = "dry_run")]
    pub out: Option<PathBuf>,
    /// Prompt lengths in tokens: a list and ranges (2K..64K:x2; K = 1000, Ki = 1024).
    #[arg(long, value_name = "LENGTHS", help_heading = "Cells")]
    pub context_len: Option<String>,
    /// Needle depths in [0, 1].
    #[arg(long, default_value = "0.1,0.5,0.9", value_name = "DEPTHS", help_heading = "Cells")]
    pub depth: String,
    /// Needle copies (spread over the haystack as the model's `spread` layout places them).
    #[arg(long, default_value = "1", value_name = "R,…", help_heading = "Cells")]
    pub repeat: String,
    /// Prompts per cell [default: 20; with --cells, the file's trials column].
    #[arg(long, value_name = "N", help_heading = "Cells")]
    pub trials: Option<u64>,
    /// Spread each cell's trials over N consecutive lengths (trial t at tokens + t mod N), each
    /// recorded exactly [default: 4 with --context-len, 1 with --cells].
    #[arg(long, value_name = "N", help_heading = "Cells")]
    pub spread: Option<u64>,
    /// The cells as `dsa-sim plan --out` writes them (context_len,index_topk,depth,repeat,trials).
    #[arg(long, value_name = "cells.csv", help_heading = "Cells")]
    pub cells: Option<PathBuf>,
    /// The deployment's k (the table's index_topk column; planned cells at another k are left out).
    #[arg(long, default_value_t = 512, value_name = "K", help_heading = "Cells")]
    pub index_topk: u64,
    /// Use /v1/chat/completions (the prompt as one user message).
    #[arg(long, help_heading = "Server")]
    pub chat: bool,
    /// Use SGLang's native /generate.
    #[arg(long, help_heading = "Server")]
    pub generate: bool,
    /// The model id to send [default: the first /v1/models lists].
    #[arg(long, value_name = "ID", help_heading = "Server")]
    pub model: Option<String>,
    /// Ask for the indexer's top-k (SGLang --enable-return-indexer-topk with --generate; vLLM's
    /// indexer_topk) and save each reply under captures/ with manifest.csv.
    #[arg(long, help_heading = "Server")]
    pub capture: bool,
    /// How prompt tokens are counted: auto (/tokenize when the server has it, else usage), tokenize, usage.
    #[arg(long, default_value = "auto", value_name = "HOW", help_heading = "Server")]
    pub token_count: String,
    /// The served model's Hugging Face tokenizer.json: prompts counted locally (no server round
    /// trip per step of the length search, the needle's tokens located exactly); the server's
    /// usage is still what the table records, and a server count more than 1% apart stops the
    /// probe before it spends the budget.
    #[arg(long, value_name = "tokenizer.json", help_heading = "Server")]
    pub tokenizer: Option<PathBuf>,
    /// Answer tokens to generate (temperature 0).
    #[arg(long, default_value_t = 32, value_name = "N", help_heading = "Server")]
    pub max_tokens: u32,
    /// The environment variable holding the API key (sent as a Bearer token).
    #[arg(long, default_value = "OPENAI_API_KEY", value_name = "VAR", help_heading = "Server")]
    pub api_key_env: String,
    /// A condition column NAME=VALUE recorded on every row (repeatable): --label build=fork.
    #[arg(long, value_name = "NAME=VALUE", help_heading = "Conditions")]
    pub label: Vec<String>,
    /// Run each cell at each of these concurrencies (requests in flight) and record the column.
    #[arg(long, value_name = "N,…", help_heading = "Conditions")]
    pub concurrency: Option<String>,
    /// Send each prompt twice and record prefix_cache=miss|hit.
    #[arg(long, help_heading = "Conditions")]
    pub prefix_cache_twice: bool,
    /// Requests in flight at most.
    #[arg(long, default_value_t = 4, value_name = "N", help_heading = "Requests")]
    pub max_inflight: u32,
    /// Seconds one request may take.
    #[arg(long, default_value_t = 600.0, value_name = "S", help_heading = "Requests")]
    pub timeout: f64,
    /// Retries of a failed request.
    #[arg(long, default_value_t = 5, value_name = "N", help_heading = "Requests")]
    pub retries: u32,
    /// Seconds before the first retry (doubling, at most 60; a Retry-After header wins).
    #[arg(long, default_value_t = 0.5, value_name = "S", help_heading = "Requests")]
    pub backoff: f64,
    /// The haystack's text [default: a built-in neutral filler].
    #[arg(long, value_name = "FILE")]
    pub haystack: Option<PathBuf>,
    /// The prompt's shape: ruler (default), gkamradt, or a TOML file with preamble, needle,
    /// question, answer_prefix (and haystack) using {key} and {value}; every template is scored
    /// by the needle's value in the answer.
    #[arg(long, value_name = "NAME|FILE.toml")]
    pub template: Option<String>,
    /// Needle i of every cell is drawn from (seed, i).
    #[arg(long, default_value_t = crate::commands::DEFAULT_SEED, value_name = "S")]
    pub seed: u64,
    /// Continue an interrupted probe from its transcript (a finished one of the same options is
    /// reported complete and left as it is).
    #[arg(long)]
    pub resume: bool,
    /// Print the cells, the number of requests and the tokens they send; send nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Loop: measure, verdict, plan, measure the planned cells, until the call is decided or
    /// --budget is spent; every round in OUT/round-N/, the outcome in OUT/report.md.
    #[arg(long, help_heading = "Until decided")]
    pub until_decided: bool,
    /// The deployment's preset the verdict and the plan use (with --until-decided).
    #[arg(long, default_value = "deepseek-v4-flash", value_name = "NAME", help_heading = "Until decided")]
    pub preset: String,
    /// A scenario TOML file applied after the preset (with --until-decided).
    #[arg(long, value_name = "FILE.toml", help_heading = "Until decided")]
    pub scenario: Option<PathBuf>,
    /// A scenario field NAME=VALUE applied after the preset (repeatable): --set stack=none.
    #[arg(long, value_name = "FIELD=VALUE", help_heading = "Until decided")]
    pub set: Vec<String>,
    /// Requests in all, every round's (with --until-decided).
    #[arg(long, default_value_t = crate::commands::probe_loop::DEFAULT_BUDGET, value_name = "N", help_heading = "Until decided")]
    pub budget: u64,
    /// Most rounds (with --until-decided).
    #[arg(long, default_value_t = crate::commands::probe_loop::DEFAULT_ROUNDS, value_name = "N", help_heading = "Until decided")]
    pub max_rounds: u32,
    /// A shell command restarting the server at k = {k} (planned cells at another k run after
    /// it, then it restores --index-topk); without it those cells are listed, not run.
    #[arg(long, value_name = "COMMAND", help_heading = "Until decided")]
    pub restart_cmd: Option<String>,
    /// Seconds to wait for the server to answer after --restart-cmd.
    #[arg(long, default_value_t = 600.0, value_name = "S", help_heading = "Until decided")]
    pub ready_timeout: f64,
    /// A table measured before (another build's, with its --label), joined to every verdict
    /// and plan of the loop (repeatable).
    #[arg(long, value_name = "FILE.csv", help_heading = "Until decided")]
    pub data: Vec<PathBuf>,
    /// Print one JSON object instead of the summary.
    #[arg(long)]
    pub json: bool,
}

impl ProbeArgs {
    fn spec(&self) -> ProbeSpec {
        ProbeSpec {
            url: self.url.clone(),
            out: self.out.clone(),
            context_len: self.context_len.clone(),
            depth: self.depth.clone(),
            repeat: self.repeat.clone(),
            trials: self.trials,
            cells: self.cells.clone(),
            chat: self.chat,
            generate: self.generate,
            model: self.model.clone(),
            index_topk: self.index_topk,
            labels: self.label.clone(),
            concurrency: self.concurrency.clone(),
            prefix_cache_twice: self.prefix_cache_twice,
            seed: self.seed,
            max_inflight: self.max_inflight,
            timeout: self.timeout,
            retries: self.retries,
            backoff: self.backoff,
            max_tokens: self.max_tokens,
            haystack: self.haystack.clone(),
            api_key_env: self.api_key_env.clone(),
            capture: self.capture,
            token_count: self.token_count.clone(),
            tokenizer: self.tokenizer.clone(),
            resume: self.resume,
            spread: self.spread,
            template: self.template.clone(),
        }
    }
}

/// A progress bar over requests, with rate and ETA (on a terminal only).
fn bar(enabled: bool) -> super::progress::Bar {
    super::progress::Bar::requests(enabled)
}

impl ProbeArgs {
    fn loop_spec(&self) -> Result<LoopSpec, CliError> {
        let mut fields = Vec::new();
        for t in &self.set {
            let (k, v) = t
                .split_once('=')
                .ok_or_else(|| CliError::input(format!("--set {t}: expected FIELD=VALUE, e.g. stack=none")))?;
            let f = crate::scenario::Field::from_name(k).map_err(|e| CliError::input(format!("--set {t}: {e}")))?;
            fields.push((f, v.trim().to_string()));
        }
        Ok(LoopSpec {
            probe: self.spec(),
            scenario: crate::commands::ScenarioSpec {
                preset: Some(self.preset.clone()),
                file: self.scenario.clone(),
                fields,
            },
            engine: crate::commands::FitEngineSpec::default(),
            budget: self.budget,
            max_rounds: self.max_rounds,
            restart_cmd: self.restart_cmd.clone(),
            ready_timeout: self.ready_timeout,
            data: self.data.clone(),
        })
    }
}

/// Runs `dsa-sim probe`.
pub fn run(args: &ProbeArgs) -> Result<(), CliError> {
    if args.until_decided && !args.dry_run {
        let l = args.loop_spec()?.run(&bar(!args.json))?;
        return if args.json { print_json(&l.to_json()) } else { emit(&l.to_text()) };
    }
    let spec = args.spec();
    if args.dry_run {
        let d = spec.dry_run()?;
        return if args.json { print_json(&d.to_json()) } else { emit(&d.to_text()) };
    }
    let p = spec.run(&bar(!args.json))?;
    if args.json {
        print_json(&p.to_json())
    } else {
        emit(&p.to_text())
    }
}
