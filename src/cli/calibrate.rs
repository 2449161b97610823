//! `dsa-sim calibrate`: fit scalar parameters to measured recall (docs/model.md#calibration).

use super::{emit, print_json, CliError, ScenarioArgs};
use crate::commands::calibrate::{calibrate, CalibrateRequest};
use crate::commands::run::calibration_experiment;
use crate::commands::{FitEngineSpec, DEFAULT_FIT_TRIALS, DEFAULT_SEED};
use crate::engine::EngineChoice;
use std::path::PathBuf;

/// Engine flags of the calibrating commands (fewer Monte Carlo trials per evaluation by default
/// than `recall`: a fit evaluates the model hundreds of times).
#[derive(clap::Args, Debug, Clone)]
pub struct FitEngineArgs {
    /// auto (analytic where exact, else common-random-number Monte Carlo), analytic, or montecarlo.
    #[arg(long, default_value = "auto", value_name = "ENGINE", help_heading = "Engine")]
    pub engine: EngineChoice,
    /// Monte Carlo trials per model evaluation (only where the analytic engine is not exact).
    #[arg(long, default_value_t = DEFAULT_FIT_TRIALS, value_name = "N", help_heading = "Engine")]
    pub trials: u64,
    /// Monte Carlo seed, shared by every evaluation (common random numbers).
    #[arg(long, default_value_t = DEFAULT_SEED, value_name = "S", help_heading = "Engine")]
    pub seed: u64,
    /// Worker threads (default: all cores).
    #[arg(long, value_name = "N", help_heading = "Engine")]
    pub threads: Option<usize>,
    /// Print one JSON object on stdout instead of the summary.
    #[arg(long)]
    pub json: bool,
}

impl FitEngineArgs {
    /// The engine the flags give, as the library's commands take it.
    pub fn spec(&self) -> FitEngineSpec {
        FitEngineSpec { engine: self.engine, trials: self.trials, seed: self.seed, threads: self.threads }
    }
}

/// A fit's observer: a spinner on stderr counting model evaluations when stderr is a terminal,
/// else nothing.
pub fn spinner() -> impl Fn(u64) + Send + Sync {
    use std::io::IsTerminal;
    let bar = std::io::stderr().is_terminal().then(|| {
        let bar = indicatif::ProgressBar::new_spinner().with_finish(indicatif::ProgressFinish::AndClear);
        if let Ok(style) =
            indicatif::ProgressStyle::with_template("{spinner} fitting: {pos} model evaluations ({per_sec}), {elapsed}")
        {
            bar.set_style(style);
        }
        bar
    });
    move |n| {
        if let Some(b) = &bar {
            b.set_position(n);
        }
    }
}

/// Arguments of `dsa-sim calibrate`.
#[derive(clap::Args, Debug)]
#[command(after_help = "Examples:\n  \
dsa-sim calibrate --data experiments/dsv4_seed_observations.csv --fit dprime \\\n      \
--preset deepseek-v4-flash\n  \
dsa-sim calibrate --data experiments/dsv4_seed_observations.csv --fit dprime,needle_sd \\\n      \
--preset deepseek-v4-flash --compare --predict index_topk=1024,2048 \\\n      \
--predict context_len=131072 --json\n  \
dsa-sim calibrate --data experiments/quest_passkey_10k.csv --fit dprime,p_read \\\n      \
--preset quest-16\n  \
dsa-sim calibrate --experiment experiments/calibrate-dsv4-observations.toml\n\n\
CSV columns: context_len,index_topk,trials,hits (required), depth,repeat,compress_ratio,window,needle_tokens,label (optional, per row).\n\
--fit FIELD[=LO:HI],…: fittable fields dprime, needle_sd, score_noise, hard_negatives, hard_mean, layer_corr, p_read, p_guess, depth.\n\
Intervals: 95% profile likelihood. Prediction bands: profile likelihood over the fit's 95% likelihood-ratio region.")]
pub struct CalibrateArgs {
    #[command(flatten)]
    #[allow(missing_docs)]
    pub scenario: ScenarioArgs,
    /// Measured recall table (CSV).
    #[arg(long, value_name = "FILE.csv")]
    pub data: Option<PathBuf>,
    /// Fields to fit, comma-separated, each optionally with a search range: dprime,needle_sd=0.1:5
    #[arg(long, value_name = "FIELD,…")]
    pub fit: Option<String>,
    /// Also fit the named hypotheses (random-indexer, discrimination, discrimination-with-spread,
    /// hard-negatives, positional, effective-k, broken-fraction, read-failure, length-periodic)
    /// and rank them by AIC with Akaike weights.
    #[arg(long)]
    pub compare: bool,
    /// What-if: FIELD=V1,V2,… (repeatable: a grid) from the command-line scenario with the fit substituted.
    #[arg(long, value_name = "FIELD=V1,V2,…")]
    pub predict: Vec<String>,
    /// Captured indexer scores (.npz, as `import scores` reads them): their pooled distractor law (generalised-Pareto tail) replaces the scenario's distractor law in the fit and the predictions (pooling none or token-level entries).
    #[arg(long, value_name = "FILE.npz")]
    pub scores: Option<PathBuf>,
    /// Run a calibration experiment file instead (writes its result folder).
    #[arg(long, value_name = "FILE.toml", conflicts_with_all = ["data", "fit", "predict", "compare", "scores"])]
    pub experiment: Option<PathBuf>,
    /// Result folder for --experiment (default results/<name>).
    #[arg(long, value_name = "DIR", requires = "experiment")]
    pub out: Option<PathBuf>,
    #[command(flatten)]
    #[allow(missing_docs)]
    pub engine: FitEngineArgs,
}

/// Runs `dsa-sim calibrate`.
pub fn run(args: &CalibrateArgs) -> Result<(), CliError> {
    if let Some(exp) = &args.experiment {
        let out = calibration_experiment(exp, args.out.as_deref(), args.engine.threads)?;
        return emit(&format!("wrote {}\n", out.display()));
    }
    if let Some(out) = &args.out {
        return Err(CliError::input(format!("--out {}: only applies with --experiment FILE.toml", out.display())));
    }
    let req = CalibrateRequest {
        data: args.data.as_deref(),
        fit: args.fit.as_deref(),
        compare: args.compare,
        predict: &args.predict,
        scores: args.scores.as_deref(),
    };
    let report = calibrate(&args.scenario.spec(), &args.engine.spec(), &req, &spinner())?;
    if args.engine.json {
        print_json(&report.to_json())
    } else {
        emit(&report.to_text())
    }
}
