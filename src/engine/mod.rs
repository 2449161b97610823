//! The engines: exact quadrature ([`analytic`]) and Monte Carlo ([`montecarlo`] for the scalar
//! model, [`crate::indexer`] for the vector model, both driven by [`crate::trials`]), and
//! [`estimate`], which picks one and summarises recall and the needle's rank distribution.
//!
//! `route` is the one decision between the engines. The limits of a run ([`MAX_TRIALS`],
//! [`MAX_THREADS`], the default trials) and its thread pool (`in_pool`) live here, and
//! [`RecallModel`] gives calibration and the verdict recall as a function of the scenario.

pub mod analytic;
pub mod binomial;
pub(crate) mod gauss_rule;
pub mod montecarlo;
pub(crate) mod recall_model;
pub(crate) mod table_cdf;

pub use recall_model::{with_noise, EngineModel, FnModel, RecallModel};
pub(crate) use recall_model::{with_topk, KCurve, NoiseCurve};

use crate::progress::{Progress, Silent};
use crate::scenario::{Model, Scenario, ScenarioError};
use crate::stats::{wilson, Z95};
use analytic::Analytic;
use montecarlo::McPath;
use serde::Serialize;
use std::fmt;
use std::str::FromStr;

/// Which engine to use: parsed once, where the choice is read (a flag, an experiment file).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Deserialize)]
#[serde(try_from = "String")]
pub enum EngineChoice {
    /// Analytic where exact, else Monte Carlo.
    #[default]
    Auto,
    /// Analytic only (an error where it is not exact).
    Analytic,
    /// Monte Carlo only.
    MonteCarlo,
}

impl FromStr for EngineChoice {
    type Err = EngineError;
    fn from_str(s: &str) -> Result<Self, EngineError> {
        match s.trim() {
            "auto" => Ok(EngineChoice::Auto),
            "analytic" => Ok(EngineChoice::Analytic),
            "montecarlo" | "monte-carlo" | "mc" => Ok(EngineChoice::MonteCarlo),
            o => Err(EngineError::UnknownEngine(o.to_string())),
        }
    }
}

impl TryFrom<String> for EngineChoice {
    type Error = EngineError;
    fn try_from(s: String) -> Result<Self, EngineError> {
        s.parse()
    }
}

impl fmt::Display for EngineChoice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            EngineChoice::Auto => "auto",
            EngineChoice::Analytic => "analytic",
            EngineChoice::MonteCarlo => "montecarlo",
        })
    }
}

/// The engine that produced a result.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum EngineUsed {
    /// Exact quadrature.
    Analytic,
    /// Monte Carlo.
    MonteCarlo,
}

impl fmt::Display for EngineUsed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            EngineUsed::Analytic => "analytic",
            EngineUsed::MonteCarlo => "montecarlo",
        })
    }
}

/// How a scenario is evaluated under an engine choice (see [`route`]).
#[derive(Debug, Clone)]
pub(crate) enum Route {
    /// Exact quadrature, prepared.
    Analytic(Box<Analytic>),
    /// Monte Carlo.
    MonteCarlo {
        /// Why the analytic engine was not used; `None` when Monte Carlo was requested.
        not_exact: Option<String>,
    },
}

/// Why the vector model has no analytic evaluation.
const VECTOR_NOT_EXACT: &str = "model = vector: the lightning-indexer model is simulated, it has no closed form";

/// The one decision between the engines: Monte Carlo when it is requested; otherwise the
/// analytic engine where it is exact (never for the vector model), and where it is not, Monte
/// Carlo under `auto` or an error under `analytic`. [`estimate`], [`check`] and
/// [`EngineModel`] all decide through it.
pub(crate) fn route(s: &Scenario, choice: EngineChoice) -> Result<Route, EngineError> {
    let why = match choice {
        EngineChoice::MonteCarlo => return Ok(Route::MonteCarlo { not_exact: None }),
        _ if s.model == Model::Vector => VECTOR_NOT_EXACT.to_string(),
        _ => match Analytic::new(s) {
            Ok(a) => return Ok(Route::Analytic(Box::new(a))),
            Err(e) => e.0,
        },
    };
    match choice {
        EngineChoice::Analytic => Err(EngineError::NotExact(why)),
        _ => Ok(Route::MonteCarlo { not_exact: Some(why) }),
    }
}

/// Most Monte Carlo trials a run accepts (10^12: about a week of trials at N = 10^3 on one
/// core; more is a typo, and 2^64 − 1 would never finish).
pub const MAX_TRIALS: u64 = 1_000_000_000_000;

/// Most worker threads a run accepts (more would only exhaust the system's threads).
pub const MAX_THREADS: usize = 1024;

/// Default Monte Carlo trials for the scalar model (exact sampling: milliseconds).
pub(crate) const DEFAULT_TRIALS_SCALAR: u64 = 100_000;
/// Default Monte Carlo trials for the vector model (every key drawn: ~20 ms a trial at 128K).
pub(crate) const DEFAULT_TRIALS_VECTOR: u64 = 2_000;
/// Default Monte Carlo trials per model evaluation of a fit (hundreds of evaluations).
pub const DEFAULT_FIT_TRIALS: u64 = 4_000;

/// The default Monte Carlo trials of a scenario's model.
pub(crate) fn default_trials(model: Model) -> u64 {
    match model {
        Model::Scalar => DEFAULT_TRIALS_SCALAR,
        Model::Vector => DEFAULT_TRIALS_VECTOR,
    }
}

/// Checks a worker-thread count: 1..=[`MAX_THREADS`] (`None`: the default pool).
pub(crate) fn check_threads(threads: Option<usize>) -> Result<(), EngineError> {
    match threads {
        Some(n) if n == 0 || n > MAX_THREADS => Err(EngineError::Threads(n)),
        _ => Ok(()),
    }
}

/// Runs `f` on a pool of `threads` workers (`None`: the default pool, all cores). Results never
/// depend on the count; only the time does.
pub(crate) fn in_pool<T: Send>(threads: Option<usize>, f: impl FnOnce() -> T + Send) -> Result<T, EngineError> {
    check_threads(threads)?;
    match threads {
        None => Ok(f()),
        Some(n) => rayon::ThreadPoolBuilder::new()
            .num_threads(n)
            .build()
            .map(|pool| pool.install(f))
            .map_err(|e| EngineError::Pool(format!("cannot start {n} threads: {e}"))),
    }
}

/// Options of one evaluation.
#[derive(Debug, Clone, PartialEq)]
pub struct RunOptions {
    /// Engine choice.
    pub engine: EngineChoice,
    /// Monte Carlo trials.
    pub trials: u64,
    /// Monte Carlo seed: trial i draws from (seed, i) only.
    pub seed: u64,
    /// Monte Carlo path (exact sampling where possible by default).
    pub mc_path: McPath,
    /// Whether `trials` was left to its default: then each scenario runs its own model's
    /// default (`default_trials`), so a sweep over `model = scalar, vector` gives the vector
    /// points 2000 trials, not the scalar 100000.
    pub trials_by_model: bool,
    /// Where the vector model's trials run (the scalar model always runs on the CPU).
    pub device: crate::indexer::device::Device,
}

impl Default for RunOptions {
    fn default() -> Self {
        RunOptions {
            engine: EngineChoice::Auto,
            trials: DEFAULT_TRIALS_SCALAR,
            seed: DEFAULT_SEED,
            mc_path: McPath::Auto,
            trials_by_model: false,
            device: crate::indexer::device::Device::Cpu,
        }
    }
}

impl RunOptions {
    /// The trials a Monte Carlo run of `s` draws under these options.
    pub(crate) fn trials_for(&self, s: &Scenario) -> u64 {
        if self.trials_by_model {
            default_trials(s.model)
        } else {
            self.trials
        }
    }
}

/// Most work units a scalar Monte Carlo run may take (token scores drawn, or needle-entry
/// draws, each counted as 4 units): about two minutes on two cores at this machine's
/// 5·10^8 scores/s. A larger run is refused before it starts, naming the trials that would fit.
pub(crate) const MAX_WORK_UNITS: u64 = 1 << 36;
/// The vector model's bound on trials × tokens × head_dim × layers (key components drawn,
/// about 1 ns each on two cores: some ten minutes).
pub(crate) const MAX_VECTOR_WORK_UNITS: u64 = 1 << 40;

/// The seed used when none is given.
pub const DEFAULT_SEED: u64 = 20_251_201;

/// The quantiles of the needle's rank that every summary reports (recall and rank commands,
/// sweep rows, figures): at each level p, the smallest j with P(rank ≤ j) ≥ p; `None` where it
/// is never reached (the needle is in no entry) or was not computed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RankQuantiles {
    /// 5th percentile.
    pub p05: Option<u64>,
    /// Median.
    pub p50: Option<u64>,
    /// 90th percentile.
    pub p90: Option<u64>,
    /// 95th percentile.
    pub p95: Option<u64>,
}

impl RankQuantiles {
    /// The levels p, in the order of the fields.
    pub(crate) const LEVELS: [f64; 4] = [0.05, 0.5, 0.9, 0.95];

    /// The quantiles from a quantile function, evaluated at each level in order.
    pub(crate) fn from_fn(mut quantile: impl FnMut(f64) -> Option<u64>) -> RankQuantiles {
        let [a, b, c, d] = Self::LEVELS;
        RankQuantiles { p05: quantile(a), p50: quantile(b), p90: quantile(c), p95: quantile(d) }
    }

    /// (level, quantile) pairs in level order.
    pub fn pairs(&self) -> [(f64, Option<u64>); 4] {
        let [a, b, c, d] = Self::LEVELS;
        [(a, self.p05), (b, self.p50), (c, self.p90), (d, self.p95)]
    }

    /// The quantile at level `p` (one of `RankQuantiles::LEVELS`).
    pub fn get(&self, p: f64) -> Option<u64> {
        self.pairs().iter().find(|(q, _)| (q - p).abs() < 1e-12).and_then(|(_, v)| *v)
    }
}

/// The needle's rank distribution in one layer.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct RankSummary {
    /// Candidate entries N.
    pub n_candidates: u64,
    /// The quantiles (all `None` from `estimate_recall`, which does not compute them).
    pub quantiles: RankQuantiles,
    /// (j, P(rank ≤ j)) at powers of two, k and the kernel maximum.
    pub cdf: Vec<(u64, f64)>,
}

/// Recall of a scenario with its interval, and the needle's rank distribution.
#[derive(Debug, Clone, PartialEq)]
pub struct Estimate {
    /// P(correct answer).
    pub recall: f64,
    /// Lower end of the 95% interval (= recall when exact).
    pub ci_low: f64,
    /// Upper end of the 95% interval (= recall when exact).
    pub ci_high: f64,
    /// The engine used.
    pub engine: EngineUsed,
    /// Monte Carlo trials, `None` when exact.
    pub trials: Option<u64>,
    /// Why the analytic engine was not used, if it was not.
    pub not_exact: Option<String>,
    /// Rank distribution (empty from `estimate_recall`).
    pub rank: RankSummary,
}

/// Why an evaluation failed.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum EngineError {
    /// The scenario is invalid.
    #[error(transparent)]
    Scenario(#[from] ScenarioError),
    /// The analytic engine was requested for a scenario it cannot compute exactly.
    #[error("the analytic engine cannot compute this scenario exactly ({0}); use --engine montecarlo or auto")]
    NotExact(String),
    /// Monte Carlo would have to draw more candidates per trial than it allows
    /// ([`montecarlo::MAX_MATERIALISED_CANDIDATES`]).
    #[error("{0}")]
    TooLarge(String),
    /// Zero Monte Carlo trials were requested.
    #[error("trials = 0: allowed ≥ 1")]
    NoTrials,
    /// An engine name that is not `auto`, `analytic` or `montecarlo`.
    #[error("engine = {0:?}: expected auto, analytic or montecarlo")]
    UnknownEngine(String),
    /// A worker-thread count outside 1..=[`MAX_THREADS`].
    #[error("--threads {0}: allowed 1..={max}", max = MAX_THREADS)]
    Threads(usize),
    /// The worker threads could not be started.
    #[error("{0}")]
    Pool(String),
    /// A quantity only the exact engine computes (per-layer selection probabilities) was asked
    /// of a scenario or model that has none.
    #[error("{0}")]
    NeedsExact(String),
    /// A `--device` this build or machine cannot run.
    #[error(transparent)]
    Device(#[from] crate::indexer::device::DeviceError),
    /// The device failed mid-run.
    #[error("{0}")]
    DeviceFailed(String),
}

impl crate::error::Classify for EngineError {
    /// Bad input, except threads that could not be started.
    fn kind(&self) -> crate::error::ErrorKind {
        match self {
            EngineError::Pool(_) | EngineError::DeviceFailed(_) => crate::error::ErrorKind::Failure,
            _ => crate::error::ErrorKind::Input,
        }
    }
}

fn cdf_grid(s: &Scenario, n_candidates: u64) -> Vec<u64> {
    let mut js: Vec<u64> = (0..64).map(|e| 1u64 << e).take_while(|&j| j <= n_candidates).collect();
    js.extend([s.index_topk, s.max_topk, n_candidates].iter().filter(|&&j| j >= 1 && j <= n_candidates));
    js.sort_unstable();
    js.dedup();
    js
}

fn evaluate(
    s: &Scenario,
    opts: &RunOptions,
    with_rank: bool,
    progress: &dyn Progress,
) -> Result<Estimate, EngineError> {
    s.validate()?;
    let n = s.n_candidates();
    let empty = || RankSummary { n_candidates: n, ..RankSummary::default() };
    match route(s, opts.engine)? {
        Route::Analytic(a) => {
            let recall = a.recall();
            let rank = if with_rank {
                RankSummary {
                    n_candidates: n,
                    quantiles: RankQuantiles::from_fn(|p| a.rank_quantile(p)),
                    cdf: cdf_grid(s, n).into_iter().map(|j| (j, a.rank_cdf(j))).collect(),
                }
            } else {
                empty()
            };
            Ok(Estimate {
                recall,
                ci_low: recall,
                ci_high: recall,
                engine: EngineUsed::Analytic,
                trials: None,
                not_exact: None,
                rank,
            })
        }
        Route::MonteCarlo { not_exact } => {
            check_monte_carlo(s, opts)?;
            let trials = opts.trials_for(s);
            progress.start(trials, 0);
            let run = monte_carlo(s, trials, opts.seed, opts.mc_path, opts.device, progress);
            progress.finish();
            let run = run?;
            let (lo, hi) = wilson(run.successes, run.trials, Z95);
            let rank = if with_rank {
                RankSummary {
                    n_candidates: n,
                    quantiles: RankQuantiles::from_fn(|p| run.ranks.quantile(p)),
                    cdf: cdf_grid(s, n).into_iter().map(|j| (j, run.ranks.cdf(j))).collect(),
                }
            } else {
                empty()
            };
            Ok(Estimate {
                recall: run.successes as f64 / run.trials as f64,
                ci_low: lo,
                ci_high: hi,
                engine: EngineUsed::MonteCarlo,
                trials: Some(run.trials),
                not_exact,
                rank,
            })
        }
    }
}

/// Refuses a Monte Carlo run without trials, or one that would have to materialise more than
/// [`montecarlo::MAX_MATERIALISED_CANDIDATES`] candidates per trial.
pub(crate) fn check_monte_carlo(s: &Scenario, opts: &RunOptions) -> Result<(), EngineError> {
    let trials = opts.trials_for(s);
    if trials == 0 {
        return Err(EngineError::NoTrials);
    }
    if s.model == Model::Vector {
        opts.device.check()?;
    }
    let (per, what, bound) = if s.model == Model::Vector {
        let per = s.context_len.saturating_mul(s.head_dim as u64).saturating_mul(s.selecting_layers() as u64);
        (per.max(1), "key components (tokens × head_dim × layers)", MAX_VECTOR_WORK_UNITS)
    } else {
        let (per, what) = montecarlo::trial_work(s, opts.mc_path).map_err(EngineError::TooLarge)?;
        (per, what, MAX_WORK_UNITS)
    };
    if trials.saturating_mul(per) > bound {
        return Err(EngineError::TooLarge(format!(
            "trials = {trials}: a Monte Carlo trial of this scenario draws {per} {what}, and a run is \
             bounded at {bound} (2^{}) so that it finishes; use at most {} trials",
            bound.trailing_zeros(),
            (bound / per).max(1)
        )));
    }
    Ok(())
}

/// Monte Carlo trials of a checked scenario, on the model's own trial plan.
fn monte_carlo(
    s: &Scenario,
    trials: u64,
    seed: u64,
    path: McPath,
    device: crate::indexer::device::Device,
    progress: &dyn Progress,
) -> Result<crate::trials::Tally, EngineError> {
    if s.model == Model::Vector {
        return crate::indexer::simulate_on(s, trials, seed, device, progress).map_err(EngineError::DeviceFailed);
    }
    montecarlo::simulate_observed(s, trials, seed, path, progress).map_err(|e| EngineError::NotExact(e.0))
}

/// Checks, without computing anything, that [`estimate`] accepts `s` under `opts`: the
/// scenario validates, the analytic engine applies when it alone was requested, and a Monte
/// Carlo run has trials and is within [`montecarlo::MAX_MATERIALISED_CANDIDATES`]. Sweeps call
/// it on every point before they start, so a refusal never leaves a partial file behind.
pub(crate) fn check(s: &Scenario, opts: &RunOptions) -> Result<(), EngineError> {
    s.validate()?;
    match route(s, opts.engine)? {
        Route::Analytic(_) => Ok(()),
        Route::MonteCarlo { .. } => check_monte_carlo(s, opts),
    }
}

/// Recall with its interval and the needle's rank distribution.
pub fn estimate(s: &Scenario, opts: &RunOptions) -> Result<Estimate, EngineError> {
    evaluate(s, opts, true, &Silent)
}

/// [`estimate`], reporting the progress of Monte Carlo trials to `progress` (an analytic
/// evaluation reports nothing).
pub(crate) fn estimate_observed(
    s: &Scenario,
    opts: &RunOptions,
    progress: &dyn Progress,
) -> Result<Estimate, EngineError> {
    evaluate(s, opts, true, progress)
}

/// Recall with its interval only (the rank summary is left empty): the cheap call for sweeps
/// and fits.
pub(crate) fn estimate_recall(s: &Scenario, opts: &RunOptions) -> Result<Estimate, EngineError> {
    evaluate(s, opts, false, &Silent)
}

/// Monte Carlo successes of `trials` trials seeded from (seed, i): with the same seed, two
/// parameter values share their random numbers trial by trial (common random numbers).
pub fn simulate_successes(s: &Scenario, trials: u64, seed: u64) -> Result<u64, EngineError> {
    s.validate()?;
    let opts = RunOptions { trials, seed, ..RunOptions::default() };
    check_monte_carlo(s, &opts)?;
    Ok(monte_carlo(s, trials, seed, McPath::Auto, crate::indexer::device::Device::Cpu, &Silent)?.successes)
}
