//! Recall as a function of the scenario, the model that calibration and the verdict evaluate:
//! the [`RecallModel`] trait, the project's engines behind it ([`EngineModel`]: the exact
//! analytic engine where it applies, and otherwise Monte Carlo with common random numbers, trial
//! i always drawing from (seed, i), so that the likelihood surface is a deterministic function of
//! the parameters and profile/optimiser steps compare like with like), and closed-form models
//! for tests ([`FnModel`]).

use super::{route, simulate_successes, EngineChoice, EngineError, Route};
use crate::scenario::Scenario;
use std::sync::atomic::{AtomicU64, Ordering};

/// A recall model: P(success) for a scenario.
pub trait RecallModel: Sync {
    /// Recall of `s`, or why it cannot be computed.
    fn recall(&self, s: &Scenario) -> Result<f64, EngineError>;
    /// Short description (engine used) for reports.
    fn describe(&self) -> String;
    /// Whether the rows of a table should be evaluated in parallel (expensive models).
    fn parallel_rows(&self) -> bool {
        true
    }
    /// P(exactly m of the scenario's layers select the needle), m = 0..=layers (the
    /// likelihood of captured per-layer selections); by default not available.
    fn layer_count_pmf(&self, s: &Scenario) -> Result<Vec<f64>, EngineError> {
        let _ = s;
        Err(EngineError::NeedsExact(format!("per-layer selection data need the exact engine, which {} is not", self.describe())))
    }
}

/// A closed-form or test model from a function.
pub struct FnModel<F>(pub F, pub &'static str);

impl<F: Fn(&Scenario) -> f64 + Sync> RecallModel for FnModel<F> {
    fn recall(&self, s: &Scenario) -> Result<f64, EngineError> {
        Ok((self.0)(s))
    }
    fn describe(&self) -> String {
        self.1.to_string()
    }
    fn parallel_rows(&self) -> bool {
        false
    }
}

/// Engine-backed recall.
#[derive(Debug)]
pub struct EngineModel {
    /// Which engine.
    pub choice: EngineChoice,
    /// Monte Carlo trials per evaluation (when Monte Carlo is used).
    pub trials: u64,
    /// Monte Carlo seed (common random numbers across parameter values).
    pub seed: u64,
    analytic_calls: AtomicU64,
    mc_calls: AtomicU64,
}

impl EngineModel {
    /// A model with the given engine choice, Monte Carlo trials and seed.
    pub fn new(choice: EngineChoice, trials: u64, seed: u64) -> EngineModel {
        EngineModel { choice, trials: trials.max(1), seed, analytic_calls: AtomicU64::new(0), mc_calls: AtomicU64::new(0) }
    }

    fn mc(&self, s: &Scenario) -> Result<f64, EngineError> {
        self.mc_calls.fetch_add(1, Ordering::Relaxed);
        let hits = simulate_successes(s, self.trials, self.seed)?;
        Ok(hits as f64 / self.trials as f64)
    }

    /// (analytic evaluations, Monte Carlo evaluations) so far.
    pub fn counts(&self) -> (u64, u64) {
        (self.analytic_calls.load(Ordering::Relaxed), self.mc_calls.load(Ordering::Relaxed))
    }
}

impl RecallModel for EngineModel {
    fn recall(&self, s: &Scenario) -> Result<f64, EngineError> {
        match route(s, self.choice)? {
            Route::Analytic(a) => {
                self.analytic_calls.fetch_add(1, Ordering::Relaxed);
                Ok(a.recall())
            }
            Route::MonteCarlo { .. } => self.mc(s),
        }
    }

    fn layer_count_pmf(&self, s: &Scenario) -> Result<Vec<f64>, EngineError> {
        match route(s, EngineChoice::Analytic) {
            Ok(Route::Analytic(a)) => {
                self.analytic_calls.fetch_add(1, Ordering::Relaxed);
                Ok(a.layer_count_pmf())
            }
            Ok(Route::MonteCarlo { .. }) | Err(_) => Err(EngineError::NeedsExact(
                "per-layer selection data are fitted by their exact likelihood, which needs a scenario the analytic engine covers \
                 (pooling none or max without overlap, or mean pooling without overlap; not the vector model)"
                    .into(),
            )),
        }
    }

    fn describe(&self) -> String {
        let (a, m) = self.counts();
        let mc = format!("montecarlo (common random numbers: {} trials per evaluation, seed {})", self.trials, self.seed);
        match (a > 0, m > 0) {
            (_, false) => "analytic (exact quadrature)".to_string(),
            (false, true) => mc,
            (true, true) => format!("analytic where exact, {mc} elsewhere ({m} of {} evaluations)", a + m),
        }
    }
}
