//! The command line: one file per subcommand, shared scenario flags and error handling here.

pub mod calibrate;
pub mod formats;
pub mod import;
pub mod merge;
pub mod plan;
pub mod presets;
pub mod probe;
pub mod progress;
pub mod quantize;
pub mod rank;
pub mod recall;
pub mod run;
pub mod shell;
pub mod sweep;
pub mod verdict;

use crate::commands::{EngineSpec, ScenarioSpec, DEFAULT_SEED};
use crate::engine::EngineChoice;
use crate::error::ErrorKind;
use crate::scenario::Field;
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

/// A command's failure: its kind and the message (one line). The library's type, shared with the
/// Python package, under the command line's name.
pub use crate::commands::CommandError as CliError;

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

recall, rank, sweep, calibrate, verdict and formats take --preset, --scenario FILE.toml and one flag \
per scenario field (see `dsa-sim recall --help`). recall, rank, sweep, calibrate and verdict take \
--engine, --trials and --seed, formats --trials and --seed: Monte Carlo results repeat exactly from \
the seed and do not depend on --threads. run reads its scenario, engine, trials and seed from the \
experiment file (run --seed replaces its seed). With --json a command prints one JSON object on \
stdout. import topk reads captured indexer selections (SGLang, vLLM, .npz) and import niah turns \
needle-in-a-haystack results into a measured table for calibrate and verdict. A sweep splits over \
machines with sweep --shard I/N, and merge joins the parts; the \
completions command prints shell completions, man the manual page. Exit codes: 0 success, 2 bad \
input, 1 any other failure. Reference: docs/cli.md.";

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
    /// The cells to measure next that best separate the leading hypotheses, within a trial budget.
    Plan(plan::PlanArgs),
    /// Recall and rank quantiles over a grid of scenario fields, as CSV or JSON.
    Sweep(sweep::SweepArgs),
    /// Run an experiment file: data, figures (SVG, PNG) and a markdown report in one folder.
    Run(run::RunExperimentArgs),
    /// Import measurements: captured indexer top-k (import topk), captured scores (import scores) or needle-in-a-haystack results (import niah).
    Import(import::ImportArgs),
    /// Measure a live server (OpenAI-compatible or SGLang): needle prompts of exact token lengths to a measured table, a transcript and indexer captures.
    Probe(Box<probe::ProbeArgs>),
    /// Join the parts of a sharded sweep (sweep --shard I/N) into the file an unsharded sweep writes.
    Merge(merge::MergeArgs),
    /// List every preset with every field's value.
    Presets(presets::PresetsArgs),
    /// Per-format error of the vector indexer: q/k error, score correlation, top-k overlap with fp32, induced score_noise, dprime loss.
    Formats(formats::FormatsArgs),
    /// Quantize-dequantize numbers read on stdin with a number format (bf16 … fp4, block-scaled).
    Quantize(quantize::QuantizeArgs),
    /// Print a shell completion script (bash, zsh, fish, powershell) on stdout.
    Completions(shell::CompletionsArgs),
    /// Print the manual page dsa-sim(1) (roff) on stdout.
    Man(shell::ManArgs),
}

impl Command {
    /// Runs the command.
    pub fn run(&self) -> Result<(), CliError> {
        match self {
            Command::Recall(a) => recall::run(a),
            Command::Rank(a) => rank::run(a),
            Command::Calibrate(a) => calibrate::run(a),
            Command::Verdict(a) => verdict::run(a),
            Command::Plan(a) => plan::run(a),
            Command::Sweep(a) => sweep::run(a),
            Command::Import(a) => import::run(a),
            Command::Run(a) => run::run(a),
            Command::Merge(a) => merge::run(a),
            Command::Probe(a) => probe::run(a),
            Command::Presets(a) => presets::run(a),
            Command::Quantize(a) => quantize::run(a),
            Command::Formats(a) => formats::run(a),
            Command::Completions(a) => shell::completions(a),
            Command::Man(a) => shell::man(a),
        }
    }
}

/// Scenario selection shared by every command: a preset, a TOML file, and one flag per field
/// (applied in that order, later wins). The field flags come from the field table
/// ([`Field::ALL`], [`crate::scenario::FieldSpec::help`]): one `--kebab-name V` per field.
#[derive(Debug, Clone, Default)]
pub struct ScenarioArgs {
    /// Start from a named preset.
    pub preset: Option<String>,
    /// Read scenario fields from a TOML file.
    pub scenario: Option<PathBuf>,
    /// The fields given as flags, with their text, in table order.
    pub fields: Vec<(Field, String)>,
}

/// The `--preset` help: the names of the preset table ([`crate::scenario::PRESETS`]),
/// so that it lists exactly the presets that exist.
fn preset_help() -> String {
    let names = crate::commands::presets::names();
    format!("Start from a named preset: {} (`dsa-sim presets` shows their values)", names.join(", "))
}

impl clap::Args for ScenarioArgs {
    fn augment_args(cmd: clap::Command) -> clap::Command {
        let cmd = cmd
            .arg(
                clap::Arg::new("preset").long("preset").value_name("NAME").help(preset_help()).help_heading("Scenario"),
            )
            .arg(
                clap::Arg::new("scenario")
                    .long("scenario")
                    .value_name("FILE.toml")
                    .value_parser(clap::value_parser!(PathBuf))
                    .help("Read scenario fields from a TOML file (a `preset = \"...\"` key in it is honoured)")
                    .help_heading("Scenario"),
            );
        Field::ALL.iter().fold(cmd, |cmd, f| {
            cmd.arg(
                clap::Arg::new(f.name())
                    .long(f.flag())
                    .value_name("V")
                    // As clap's derive does with doc comments: no final period in `--help`.
                    .help(f.spec().help.strip_suffix('.').unwrap_or(f.spec().help))
                    .help_heading("Scenario fields")
                    .allow_hyphen_values(true),
            )
        })
    }
    fn augment_args_for_update(cmd: clap::Command) -> clap::Command {
        Self::augment_args(cmd)
    }
}

impl clap::FromArgMatches for ScenarioArgs {
    fn from_arg_matches(m: &clap::ArgMatches) -> Result<Self, clap::Error> {
        let mut a = ScenarioArgs::default();
        a.update_from_arg_matches(m)?;
        Ok(a)
    }
    fn update_from_arg_matches(&mut self, m: &clap::ArgMatches) -> Result<(), clap::Error> {
        if let Some(p) = m.get_one::<String>("preset") {
            self.preset = Some(p.clone());
        }
        if let Some(p) = m.get_one::<PathBuf>("scenario") {
            self.scenario = Some(p.clone());
        }
        for &f in Field::ALL {
            if let Some(t) = m.get_one::<String>(f.name()) {
                self.fields.retain(|(g, _)| *g != f);
                self.fields.push((f, t.clone()));
            }
        }
        self.fields.sort_by_key(|(f, _)| *f);
        Ok(())
    }
}

impl ScenarioArgs {
    /// The scenario the flags give, as the library's commands take it.
    pub fn spec(&self) -> ScenarioSpec {
        ScenarioSpec { preset: self.preset.clone(), file: self.scenario.clone(), fields: self.fields.clone() }
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
    /// Where the vector model's trials run: cpu, or cuda, cuda:N, cuda:N,M,… (a build with
    /// `--features cuda`; several devices split the trials, with the counts of one). Results
    /// do not depend on it. [default: the scenario file's `device`, else cpu]
    #[arg(long, value_name = "DEVICE", help_heading = "Engine")]
    pub device: Option<crate::indexer::device::Device>,
    /// Print one JSON object on stdout instead of the summary.
    #[arg(long)]
    pub json: bool,
}

impl RunArgs {
    /// The engine the flags give, as the library's commands take it.
    pub fn spec(&self) -> EngineSpec {
        EngineSpec {
            engine: self.engine,
            trials: self.trials,
            seed: self.seed,
            threads: self.threads,
            device: self.device,
        }
    }
}

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
