//! The command line: one file per subcommand, shared scenario flags and error handling here.

pub mod calibrate;
pub mod formats;
pub mod presets;
pub mod progress;
pub mod quantize;
pub mod rank;
pub mod recall;
pub mod run;
pub mod sweep;
pub mod verdict;

use crate::engine::{EngineChoice, RunOptions, DEFAULT_SEED, MAX_TRIALS};
use crate::error::{Classify, ErrorKind};
use crate::scenario::Scenario;
use clap::{Parser, Subcommand};
use std::path::PathBuf;

/// The exit status of a command that failed: 2 for bad input, 1 for a failure to compute or to
/// write. The one place where the kinds of errors become exit codes.
pub fn exit_code(kind: ErrorKind) -> u8 {
    match kind {
        ErrorKind::Input => 2,
        ErrorKind::Failure => 1,
    }
}

/// A command's failure: its kind and the message (one line).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CliError {
    /// Bad input or a failure: decides the exit code ([`exit_code`]).
    pub kind: ErrorKind,
    /// One-line description naming what was wrong.
    pub message: String,
}

impl CliError {
    /// Bad input.
    pub fn input(message: impl Into<String>) -> CliError {
        CliError { kind: ErrorKind::Input, message: message.into() }
    }
    /// A failure to compute or write.
    pub fn failure(message: impl Into<String>) -> CliError {
        CliError { kind: ErrorKind::Failure, message: message.into() }
    }
    /// The process exit code.
    pub fn exit_code(&self) -> u8 {
        exit_code(self.kind)
    }
}

/// Every library error becomes a command error of its own kind.
impl<E: Classify> From<E> for CliError {
    fn from(e: E) -> Self {
        CliError { kind: e.kind(), message: e.to_string() }
    }
}

const ABOUT: &str = "Simulates sparse-attention needle retrieval (DeepSeek DSA / V4 CSA and relatives) \
to tell a coverage failure (raise index_topk) from a discrimination failure (the indexer's precision \
must improve).";

const WORKFLOW: &str = "Typical questions:
  How likely is the needle found?
    dsa-sim recall --preset deepseek-v4-flash --context-len 131072 --dprime 2
  Where does it rank, against k?
    dsa-sim rank --preset deepseek-v4-flash --context-len 131072 --dprime 2
  How does it scale? (CSV for a notebook)
    dsa-sim sweep --preset deepseek-v4-flash --vary context_len=1024..1048576:x2 --out s.csv
  Curves and a report:
    dsa-sim run experiments/dsv4-needle-diagnosis.toml

Every command takes --preset, --scenario FILE.toml and one flag per scenario field (see `dsa-sim \
recall --help`), --json for one JSON object on stdout, and --seed for reproducible Monte Carlo \
(results do not depend on --threads).";

/// dsa-sim command line.
#[derive(Parser, Debug)]
#[command(name = "dsa-sim", version, about = ABOUT, long_about = None, after_help = WORKFLOW)]
pub struct Cli {
    /// The command to run.
    #[command(subcommand)]
    pub command: Command,
}

/// Subcommands.
#[derive(Subcommand, Debug)]
pub enum Command {
    /// Recall of a needle: P(correct answer), exact or Monte Carlo with a 95% interval.
    Recall(recall::RecallArgs),
    /// The needle's rank distribution: quantiles and P(rank ≤ j).
    Rank(rank::RankArgs),
    /// Fit scalar parameters to measured recall (CSV): estimates, intervals, goodness of fit, hypotheses, what-if.
    Calibrate(calibrate::CalibrateArgs),
    /// Coverage- or discrimination-limited? Recall now, at 2k and max k, k / dprime / noise needed.
    Verdict(verdict::VerdictArgs),
    /// Recall and rank quantiles over a grid of scenario fields, as CSV or JSON.
    Sweep(sweep::SweepArgs),
    /// Run an experiment file: data, figures (SVG, PNG) and a markdown report in one folder.
    Run(run::RunExperimentArgs),
    /// List every preset with every field's value.
    Presets(presets::PresetsArgs),
    /// Per-format error of the vector indexer: q/k error, score correlation, top-k overlap with fp32, induced score_noise, dprime loss.
    Formats(formats::FormatsArgs),
    /// Quantize-dequantize numbers read on stdin with a number format (bf16 … fp4, block-scaled).
    Quantize(quantize::QuantizeArgs),
}

impl Command {
    /// Runs the command.
    pub fn run(&self) -> Result<(), CliError> {
        match self {
            Command::Recall(a) => recall::run(a),
            Command::Rank(a) => rank::run(a),
            Command::Calibrate(a) => calibrate::run(a),
            Command::Verdict(a) => verdict::run(a),
            Command::Sweep(a) => sweep::run(a),
            Command::Run(a) => run::run(a),
            Command::Presets(a) => presets::run(a),
            Command::Quantize(a) => quantize::run(a),
            Command::Formats(a) => formats::run(a),
        }
    }
}

macro_rules! scenario_args {
    ($( $field:ident : $help:literal ),* $(,)?) => {
        /// Scenario selection shared by every command: a preset, a TOML file, and one flag per
        /// field (applied in that order, later wins).
        #[derive(clap::Args, Debug, Clone, Default)]
        pub struct ScenarioArgs {
            /// Start from a named preset: deepseek-v3.2, deepseek-v4-flash, deepseek-v4-pro,
            /// deepseek-v4-flash-fp8cache, deepseek-v4-pro-fp8cache, quest-16, nsa.
            #[arg(long, value_name = "NAME", help_heading = "Scenario")]
            pub preset: Option<String>,
            /// Read scenario fields from a TOML file (a `preset = "..."` key in it is honoured).
            #[arg(long, value_name = "FILE.toml", help_heading = "Scenario")]
            pub scenario: Option<PathBuf>,
            $(
                #[doc = $help]
                #[arg(long, value_name = "V", help_heading = "Scenario fields", allow_hyphen_values = true)]
                pub $field: Option<String>,
            )*
        }

        impl ScenarioArgs {
            /// The fields given as flags, as (name, text) pairs in declaration order.
            pub fn overrides(&self) -> Vec<(&'static str, &str)> {
                let mut v = Vec::new();
                $( if let Some(x) = &self.$field { v.push((stringify!($field), x.as_str())); } )*
                v
            }
        }
    };
}

scenario_args! {
    context_len: "Tokens before the query (default 65536).",
    window: "Sliding window: the last W tokens are always attended (default 0; V4: 128).",
    sink: "Attention sink: the first S tokens are always attended (default 0).",
    compress_ratio: "Tokens per candidate entry, c (default 1 = token-level; V4 CSA: 4).",
    overlap: "true: entry i also pools the previous block (V4 CSA). Default false.",
    index_topk: "k: candidates the indexer selects (default 2048).",
    max_topk: "Largest k the top-k kernel supports (default 2048; V4-Flash 1024).",
    needle_tokens: "Consecutive tokens of one needle copy (default 1).",
    depth: "Needle position, 0 = start, 1 = end of the context (default 0.5).",
    distractor: "Distractor score law: normal, gumbel or student_t:DF (default normal).",
    hard_negatives: "Look-alike distractors: a count ≥ 1 or a fraction of the candidates in (0, 1) (default 0).",
    hard_mean: "Mean score of a hard negative, in distractor sd (default 2).",
    dprime: "Needle's mean score above a typical distractor, in distractor sd (default 3).",
    needle_sd: "Spread of the needle's score from trial to trial (default 1).",
    pooling: "Entry score from its tokens: none, mean or max (default none).",
    score_noise: "sd of noise added to every entry score: quantization / implementation error (default 0).",
    repeat: "Copies of the needle; success if any is attended (default 1).",
    repeat_layout: "spread (copies over the context) or adjacent (one after another from depth). Default spread.",
    layers: "Indexer layers (default 1).",
    layer_corr: "Fraction of the needle's score variance shared across layers, tokens and copies, 0..1 (default 0).",
    readout: "Layers that must attend the needle: any, all or at_least:M (default any).",
    p_read: "P(correct answer | needle attended) (default 1).",
    p_guess: "P(correct answer | needle not attended) (default 0).",
    model: "scalar (score model of DESIGN §2.2, analytic or Monte Carlo) or vector (the lightning indexer, Monte Carlo only; ignores distractor, hard_mean, dprime, needle_sd, pooling, score_noise, layer_corr). Default scalar.",
    heads: "Vector model: indexer heads H (default 64).",
    head_dim: "Vector model: head dimension d (default 128; a power of two with --hadamard true).",
    alignment: "Vector model: cosine of the needle key with the query direction, -1..1 (default 0.35).",
    hard_alignment: "Vector model: cosine of a hard-negative key with the query direction (default 0.25).",
    outlier_channels: "Vector model: channels of q and keys scaled by --outlier-scale (default 0).",
    outlier_scale: "Vector model: scale of the outlier channels (default 8).",
    hadamard: "Vector model: orthonormal Hadamard rotation of q and keys before quantization (default true).",
    key_norm: "Vector model: RMS-normalise entry keys after pooling (default true).",
    q_format: "Vector model: query format, NAME[:BLOCK[:SCALE]], e.g. fp32, bf16, fp8-e4m3:128:fp32, fp4-e2m1:32:ue8m0, mxfp4, nvfp4 (default fp32).",
    k_format: "Vector model: indexer key-cache format, as --q-format (default fp32).",
    compressor: "Vector model: token keys to entry keys, mean or gated (per-channel softmax, V4). Default gated.",
}

impl ScenarioArgs {
    /// Builds the validated scenario: defaults, then `--preset`, then `--scenario FILE`, then flags.
    pub fn resolve(&self) -> Result<Scenario, CliError> {
        let mut s = match &self.preset {
            Some(name) => Scenario::preset(name)?,
            None => Scenario::default(),
        };
        if let Some(path) = &self.scenario {
            let text = crate::input::read_to_string(path)
                .map_err(|e| CliError::input(format!("--scenario {}: {}", path.display(), e)))?;
            let table: toml::Table = toml::from_str(&text).map_err(|e| {
                CliError::input(format!(
                    "--scenario {}: {}",
                    path.display(),
                    crate::scenario::one_line(e.message(), e.span(), &text)
                ))
            })?;
            if let Some(p) = table.get("preset") {
                if self.preset.is_some() {
                    return Err(CliError::input(format!(
                        "--preset conflicts with `preset = {p}` in {}: give one of them",
                        path.display()
                    )));
                }
                let name = p.as_str().ok_or_else(|| {
                    CliError::input(format!("--scenario {}: preset = {p}: expected a preset name string", path.display()))
                })?;
                s = Scenario::preset(name)?;
            }
            s.apply_toml_table(&table)
                .map_err(|e| CliError::input(format!("--scenario {}: {e}", path.display())))?;
        }
        for (field, value) in self.overrides() {
            s.set(field, value).map_err(|e| CliError::input(format!("--{}: {e}", field.replace('_', "-"))))?;
        }
        s.validate()?;
        Ok(s)
    }
}

/// Engine, trials, seed, threads and output format, shared by the evaluating commands.
#[derive(clap::Args, Debug, Clone)]
pub struct RunArgs {
    /// auto (analytic where exact, else Monte Carlo), analytic, or montecarlo.
    #[arg(long, default_value = "auto", value_name = "ENGINE", help_heading = "Engine")]
    pub engine: EngineChoice,
    /// Monte Carlo trials [default: 100000 for the scalar model, 2000 for the vector model, whose
    /// trials draw every entry key].
    #[arg(long, value_name = "N", help_heading = "Engine")]
    pub trials: Option<u64>,
    /// Monte Carlo seed: trial i draws only from (seed, i), so results repeat exactly.
    #[arg(long, default_value_t = DEFAULT_SEED, value_name = "S", help_heading = "Engine")]
    pub seed: u64,
    /// Worker threads (default: all cores). Results do not depend on it.
    #[arg(long, value_name = "N", help_heading = "Engine")]
    pub threads: Option<usize>,
    /// Print one JSON object on stdout instead of the summary.
    #[arg(long)]
    pub json: bool,
}

impl RunArgs {
    /// Engine options from the flags, for a scenario (whose model sets the default trials).
    pub fn options(&self, s: &Scenario) -> Result<RunOptions, CliError> {
        let trials = self.trials.unwrap_or(crate::engine::default_trials(s.model));
        check_trials(trials)?;
        crate::engine::check_threads(self.threads)?;
        Ok(RunOptions { engine: self.engine, trials, seed: self.seed, ..RunOptions::default() })
    }

    /// Runs `f` on a pool of `--threads` workers (or the default pool).
    pub fn in_pool<T: Send>(&self, f: impl FnOnce() -> T + Send) -> Result<T, CliError> {
        Ok(crate::engine::in_pool(self.threads, f)?)
    }
}

/// Checks a `--trials` value: 1..=[`MAX_TRIALS`].
pub fn check_trials(trials: u64) -> Result<(), CliError> {
    if trials == 0 || trials > MAX_TRIALS {
        return Err(CliError::input(format!("--trials {trials}: allowed 1..={MAX_TRIALS}")));
    }
    Ok(())
}

/// Appends one formatted line to a String buffer.
macro_rules! outln {
    ($buf:expr, $($arg:tt)*) => {{
        use std::fmt::Write as _;
        let _ = writeln!($buf, $($arg)*);
    }};
}
pub(crate) use outln;

/// Writes a command's whole output to stdout at once. A closed pipe (`| head`) is not an error.
pub fn emit(text: &str) -> Result<(), CliError> {
    use std::io::Write;
    let mut stdout = std::io::stdout().lock();
    match stdout.write_all(text.as_bytes()).and_then(|_| stdout.flush()) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        Err(e) => Err(CliError::failure(format!("cannot write to stdout: {e}"))),
    }
}

/// Prints a JSON value on stdout as one object.
pub fn print_json(v: &serde_json::Value) -> Result<(), CliError> {
    let text = serde_json::to_string_pretty(v).map_err(|e| CliError::failure(e.to_string()))?;
    emit(&(text + "\n"))
}

/// The scenario as a JSON object.
pub fn scenario_json(s: &Scenario) -> serde_json::Value {
    serde_json::to_value(s).unwrap_or(serde_json::Value::Null)
}
