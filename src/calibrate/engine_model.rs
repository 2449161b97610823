//! The project's engines as a [`RecallModel`]: the exact analytic engine where it applies, and
//! otherwise Monte Carlo with common random numbers (trial i always draws from (seed, i)), so the
//! likelihood surface is a deterministic function of the parameters and profile/optimiser steps
//! compare like with like.

use super::RecallModel;
use crate::engine::{analytic, simulate_successes, EngineChoice};
use crate::scenario::Scenario;
use std::sync::atomic::{AtomicU64, Ordering};

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

    fn mc(&self, s: &Scenario) -> Result<f64, String> {
        self.mc_calls.fetch_add(1, Ordering::Relaxed);
        let hits = simulate_successes(s, self.trials, self.seed).map_err(|e| e.to_string())?;
        Ok(hits as f64 / self.trials as f64)
    }

    /// (analytic evaluations, Monte Carlo evaluations) so far.
    pub fn counts(&self) -> (u64, u64) {
        (self.analytic_calls.load(Ordering::Relaxed), self.mc_calls.load(Ordering::Relaxed))
    }
}

impl RecallModel for EngineModel {
    fn recall(&self, s: &Scenario) -> Result<f64, String> {
        match self.choice {
            EngineChoice::MonteCarlo => self.mc(s),
            EngineChoice::Analytic => {
                self.analytic_calls.fetch_add(1, Ordering::Relaxed);
                analytic::recall(s).map_err(|e| format!("analytic engine: {e} (use --engine auto or montecarlo)"))
            }
            EngineChoice::Auto => match analytic::recall(s) {
                Ok(r) => {
                    self.analytic_calls.fetch_add(1, Ordering::Relaxed);
                    Ok(r)
                }
                Err(_) => self.mc(s),
            },
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
