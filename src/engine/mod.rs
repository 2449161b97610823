//! The engines: exact quadrature ([`analytic`]) and Monte Carlo ([`montecarlo`]), and
//! [`estimate`], which picks one and summarises recall and the needle's rank distribution.

pub mod analytic;
pub mod binomial;
pub mod montecarlo;

use crate::scenario::{Model, Scenario, ScenarioError};
use crate::scores::NotExact;
use crate::stats::{wilson, Z95};
use analytic::Analytic;
use montecarlo::{simulate, simulate_observed, McPath};
use serde::Serialize;
use std::fmt;
use std::str::FromStr;

/// Which engine to use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
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
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s.trim() {
            "auto" => Ok(EngineChoice::Auto),
            "analytic" => Ok(EngineChoice::Analytic),
            "montecarlo" | "monte-carlo" | "mc" => Ok(EngineChoice::MonteCarlo),
            o => Err(format!("engine = {o:?}: expected auto, analytic or montecarlo")),
        }
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
    /// Show a progress bar on stderr for Monte Carlo runs (hidden when stderr is not a terminal).
    pub progress: bool,
}

impl Default for RunOptions {
    fn default() -> Self {
        RunOptions { engine: EngineChoice::Auto, trials: 100_000, seed: DEFAULT_SEED, mc_path: McPath::Auto, progress: false }
    }
}

/// The seed used when none is given.
pub const DEFAULT_SEED: u64 = 20_251_201;

/// The rank quantiles every summary reports.
pub const RANK_QUANTILES: [f64; 4] = [0.05, 0.5, 0.9, 0.95];

/// The needle's rank distribution in one layer.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct RankSummary {
    /// Candidate entries N.
    pub n_candidates: u64,
    /// (p, smallest j with P(rank ≤ j) ≥ p); `None`: never reached (needle in no entry).
    pub quantiles: Vec<(f64, Option<u64>)>,
    /// (j, P(rank ≤ j)) at powers of two, k and the kernel maximum.
    pub cdf: Vec<(u64, f64)>,
}

impl RankSummary {
    /// The quantiles as a JSON object keyed by p ("0.05", "0.5", …); `null` where never reached.
    pub fn quantiles_json(&self) -> serde_json::Value {
        let map: serde_json::Map<String, serde_json::Value> =
            self.quantiles.iter().map(|(p, v)| (format!("{p}"), serde_json::json!(v))).collect();
        serde_json::Value::Object(map)
    }

    /// The quantile at p if it was computed.
    pub fn quantile(&self, p: f64) -> Option<u64> {
        self.quantiles.iter().find(|(q, _)| (q - p).abs() < 1e-12).and_then(|(_, v)| *v)
    }
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
    /// Rank distribution (empty from [`estimate_recall`]).
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
}

fn cdf_grid(s: &Scenario, n_candidates: u64) -> Vec<u64> {
    let mut js: Vec<u64> = (0..64).map(|e| 1u64 << e).take_while(|&j| j <= n_candidates).collect();
    js.extend([s.index_topk, s.max_topk, n_candidates].iter().filter(|&&j| j >= 1 && j <= n_candidates));
    js.sort_unstable();
    js.dedup();
    js
}

fn evaluate(s: &Scenario, opts: &RunOptions, with_rank: bool) -> Result<Estimate, EngineError> {
    s.validate()?;
    let n = s.n_candidates();
    let vector = s.model == Model::Vector;
    let analytic = match opts.engine {
        EngineChoice::MonteCarlo => Err(NotExact("Monte Carlo requested".into())),
        _ if vector => Err(NotExact("model = vector: the lightning-indexer model is simulated, it has no closed form".into())),
        _ => Analytic::new(s),
    };
    match (analytic, opts.engine) {
        (Ok(a), _) => {
            let recall = a.recall();
            let rank = if with_rank {
                RankSummary {
                    n_candidates: n,
                    quantiles: RANK_QUANTILES.iter().map(|&p| (p, a.rank_quantile(p))).collect(),
                    cdf: cdf_grid(s, n).into_iter().map(|j| (j, a.rank_cdf(j))).collect(),
                }
            } else {
                RankSummary { n_candidates: n, ..RankSummary::default() }
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
        (Err(e), EngineChoice::Analytic) => Err(EngineError::NotExact(e.0)),
        (Err(e), _) => {
            if opts.trials == 0 {
                return Err(EngineError::NoTrials);
            }
            if let Some(why) = montecarlo::materialise_limit(s, opts.mc_path).filter(|_| !vector) {
                return Err(EngineError::TooLarge(why));
            }
            let bar = if opts.progress {
                let bar = indicatif::ProgressBar::new(opts.trials);
                bar.set_style(
                    indicatif::ProgressStyle::with_template("{spinner} Monte Carlo {bar:30} {pos}/{len} trials, eta {eta}")
                        .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
                );
                bar
            } else {
                indicatif::ProgressBar::hidden()
            };
            let run = if vector {
                crate::indexer::simulate_observed(s, opts.trials, opts.seed, &|n| bar.inc(n))
            } else {
                simulate_observed(s, opts.trials, opts.seed, opts.mc_path, &|n| bar.inc(n))
                    .map_err(|e| EngineError::NotExact(e.0))?
            };
            bar.finish_and_clear();
            let (lo, hi) = wilson(run.successes, run.trials, Z95);
            let rank = if with_rank {
                RankSummary {
                    n_candidates: n,
                    quantiles: RANK_QUANTILES.iter().map(|&p| (p, run.ranks.quantile(p))).collect(),
                    cdf: cdf_grid(s, n).into_iter().map(|j| (j, run.ranks.cdf(j))).collect(),
                }
            } else {
                RankSummary { n_candidates: n, ..RankSummary::default() }
            };
            Ok(Estimate {
                recall: run.successes as f64 / run.trials as f64,
                ci_low: lo,
                ci_high: hi,
                engine: EngineUsed::MonteCarlo,
                trials: Some(run.trials),
                not_exact: if opts.engine == EngineChoice::MonteCarlo { None } else { Some(e.0) },
                rank,
            })
        }
    }
}

/// Checks, without computing anything, that [`estimate`] accepts `s` under `opts`: the
/// scenario validates, the analytic engine applies when it alone was requested, and a Monte
/// Carlo run has trials and is within [`montecarlo::MAX_MATERIALISED_CANDIDATES`]. Sweeps call
/// it on every point before they start, so a refusal never leaves a partial file behind.
pub fn check(s: &Scenario, opts: &RunOptions) -> Result<(), EngineError> {
    s.validate()?;
    let vector = s.model == Model::Vector;
    let analytic = match opts.engine {
        EngineChoice::MonteCarlo => Err(NotExact("Monte Carlo requested".into())),
        _ if vector => Err(NotExact("model = vector: the lightning-indexer model is simulated, it has no closed form".into())),
        _ => Analytic::new(s).map(|_| ()),
    };
    match (analytic, opts.engine) {
        (Ok(()), _) => Ok(()),
        (Err(e), EngineChoice::Analytic) => Err(EngineError::NotExact(e.0)),
        (Err(_), _) if opts.trials == 0 => Err(EngineError::NoTrials),
        (Err(_), _) if vector => Ok(()),
        (Err(_), _) => match montecarlo::materialise_limit(s, opts.mc_path) {
            Some(why) => Err(EngineError::TooLarge(why)),
            None => Ok(()),
        },
    }
}

/// Recall with its interval and the needle's rank distribution.
pub fn estimate(s: &Scenario, opts: &RunOptions) -> Result<Estimate, EngineError> {
    evaluate(s, opts, true)
}

/// Recall with its interval only (the rank summary is left empty): the cheap call for sweeps
/// and fits.
pub fn estimate_recall(s: &Scenario, opts: &RunOptions) -> Result<Estimate, EngineError> {
    evaluate(s, opts, false)
}

/// Monte Carlo successes of `trials` trials seeded from (seed, i): with the same seed, two
/// parameter values share their random numbers trial by trial (common random numbers).
pub fn simulate_successes(s: &Scenario, trials: u64, seed: u64) -> Result<u64, EngineError> {
    s.validate()?;
    if s.model == Model::Vector {
        return Ok(crate::indexer::simulate(s, trials, seed).successes);
    }
    if let Some(why) = montecarlo::materialise_limit(s, McPath::Auto) {
        return Err(EngineError::TooLarge(why));
    }
    Ok(simulate(s, trials, seed, McPath::Auto).map_err(|e| EngineError::NotExact(e.0))?.successes)
}
