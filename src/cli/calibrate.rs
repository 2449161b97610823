//! `dsa-sim calibrate`: fit scalar parameters to measured recall (docs/model.md#calibration).

use super::{emit, print_json, CliError, ScenarioArgs};
use crate::calibrate::{load_csv, parse_fit_spec, parse_predict_specs, run_calibration, CalibError};
use crate::engine::{EngineChoice, EngineModel, RecallModel, DEFAULT_FIT_TRIALS, DEFAULT_SEED};
use crate::experiment::calibration::run_experiment;
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
    /// The engine-backed recall model.
    pub fn model(&self) -> Result<EngineModel, CliError> {
        super::check_trials(self.trials)?;
        crate::engine::check_threads(self.threads)?;
        Ok(EngineModel::new(self.engine, self.trials, self.seed))
    }

    /// Checks that the engine accepts `s` (an analytic-only request on a scenario without a
    /// closed form, a Monte Carlo scenario too large to draw) before any fitting starts, so that
    /// such input is refused as bad input (exit 2) rather than failing mid-way.
    pub fn check(&self, s: &crate::scenario::Scenario) -> Result<(), CliError> {
        let opts = crate::engine::RunOptions { engine: self.engine, trials: self.trials, seed: self.seed, ..Default::default() };
        Ok(crate::engine::check(s, &opts)?)
    }

    /// Runs `f` on `--threads` workers.
    /// The model behind a memo (each distinct scenario evaluated once: exact, the engines being
    /// deterministic), with a spinner on stderr counting evaluations when it is a terminal.
    pub fn cached<'a>(&self, model: &'a EngineModel) -> crate::calibrate::cache::CachedModel<'a> {
        use std::io::IsTerminal;
        let m = crate::calibrate::cache::CachedModel::new(model);
        if !std::io::stderr().is_terminal() {
            return m;
        }
        let bar = indicatif::ProgressBar::new_spinner().with_finish(indicatif::ProgressFinish::AndClear);
        if let Ok(style) = indicatif::ProgressStyle::with_template("{spinner} fitting: {pos} model evaluations ({per_sec}), {elapsed}") {
            bar.set_style(style);
        }
        m.with_observer(move |n| bar.set_position(n))
    }

    pub fn in_pool<T: Send>(&self, f: impl FnOnce() -> T + Send) -> Result<T, CliError> {
        Ok(crate::engine::in_pool(self.threads, f)?)
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
CSV columns: context_len,index_topk,trials,hits (required), depth,repeat,compress_ratio,window,label (optional, per row).\n\
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
    /// Run a calibration experiment file instead (writes its result folder).
    #[arg(long, value_name = "FILE.toml", conflicts_with_all = ["data", "fit", "predict", "compare"])]
    pub experiment: Option<PathBuf>,
    /// Result folder for --experiment (default results/<name>).
    #[arg(long, value_name = "DIR", requires = "experiment")]
    pub out: Option<PathBuf>,
    #[command(flatten)]
    #[allow(missing_docs)]
    pub engine: FitEngineArgs,
}

/// Checks every row of a table, applied to the base scenario, with the engine (see
/// [`FitEngineArgs::check`]); rows that do not apply are left to the fit's own message.
pub fn check_rows(data: &crate::calibrate::Dataset, base: &crate::scenario::Scenario, engine: &FitEngineArgs) -> Result<(), CliError> {
    for r in &data.rows {
        if let Ok(s) = r.apply(base) {
            engine.check(&s).map_err(|e| CliError::input(format!("{}: line {}: {}", data.source, r.line, e.message)))?;
        }
    }
    Ok(())
}

/// Runs `dsa-sim calibrate`.
pub fn run(args: &CalibrateArgs) -> Result<(), CliError> {
    if let Some(exp) = &args.experiment {
        let out = args.engine.in_pool(|| run_experiment(exp, args.out.as_deref()))??;
        return emit(&format!("wrote {}\n", out.display()));
    }
    if let Some(out) = &args.out {
        return Err(CliError::input(format!("--out {}: only applies with --experiment FILE.toml", out.display())));
    }
    let data_path = args.data.as_ref().ok_or_else(|| CliError::input("--data FILE.csv is required (or --experiment FILE.toml)"))?;
    let fit = args.fit.as_ref().ok_or_else(|| CliError::input("--fit FIELD,… is required (for example --fit dprime)"))?;
    let base = args.scenario.resolve()?;
    let model = args.engine.model()?;
    let data = load_csv(data_path).map_err(CalibError::from)?;
    check_rows(&data, &base, &args.engine)?;
    let free = parse_fit_spec(fit, Some(&data))?;
    let specs = parse_predict_specs(&args.predict)?;
    let report = args
        .engine
        .in_pool(|| {
            let cached = args.engine.cached(&model);
            run_calibration(&data, &base, free, &cached, args.compare, &specs, || model.describe())
        })??;
    if args.engine.json {
        print_json(&report.to_json())
    } else {
        emit(&report.to_text())
    }
}
