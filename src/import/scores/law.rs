//! The distractor law a capture measured, as a recall model: calibration and `--predict` with the
//! distractors' own scores in place of the scalar model's normal (or Gumbel, Student-t) law.
//!
//! The law is the capture's pooled standardised distractors (each query's scores standardised by
//! that query's own mean and sd, every layer and query pooled) with a continuous, piecewise-linear
//! survival between its order statistics up to the tail threshold u, and the fitted
//! generalised-Pareto tail beyond it ([`super::tail`]). Its unit is the sd of a distractor's score,
//! as the scalar model's is, so `dprime` keeps its meaning.
//!
//! [`EmpiricalModel`] computes the recall of the scalar model's scenarios that keep the
//! distractor law's role simple: every candidate entry scores one draw of the law (pooling none,
//! or token-level entries), the needle's covering entries draw Normal(dprime, needle_sd²) each and
//! the best counts, layers independent. There recall is exact given the law:
//! P(rank ≤ k) = ∫ f_best(x) P[Binomial(N − e, Q(x)) ≤ k − 1] dx, e the covering entries. Other
//! scenarios (mean or max pooling of several tokens, hard negatives, score noise, a shared
//! needle component across layers, the vector model) are refused with one line.

use super::tail::{excesses, fit_gpd, standardised, threshold, Gpd};
use super::{CapturedScores, ScoresError};
use crate::engine::{EngineError, RecallModel};
use crate::geometry::Geometry;
use crate::quadrature::integrate;
use crate::scenario::{Model, Pooling, Scenario};
use crate::stats::{binom_cdf, ln_norm_pdf, norm_cdf};

/// The pooled standardised distractor law of a capture.
#[derive(Debug, Clone, PartialEq)]
pub struct EmpiricalLaw {
    /// Every standardised distractor below or at u, ascending.
    body: Vec<f64>,
    /// Pooled sample size (body and tail).
    n: usize,
    /// The tail threshold.
    u: f64,
    /// The pooled fraction above u.
    p_u: f64,
    /// The fitted tail.
    gpd: Gpd,
    /// Where the law came from (for reports).
    source: String,
}

impl EmpiricalLaw {
    /// The law of every layer's distractors pooled.
    pub fn new(c: &CapturedScores, source: &str) -> Result<EmpiricalLaw, ScoresError> {
        let z: Vec<Vec<f64>> = c.layers.iter().flat_map(standardised).collect();
        if z.is_empty() {
            return Err(ScoresError(format!("{source}: the capture holds no query")));
        }
        let u = threshold(&z);
        let gpd = fit_gpd(&excesses(&z, u, 0..z.len())).map_err(|e| ScoresError(format!("{source}: {}", e.0)))?;
        let n: usize = z.iter().map(Vec::len).sum();
        let mut body: Vec<f64> = z.iter().flatten().copied().filter(|&v| v <= u).collect();
        body.sort_unstable_by(|a, b| a.total_cmp(b));
        let p_u = (n - body.len()) as f64 / n as f64;
        Ok(EmpiricalLaw { body, n, u, p_u, gpd, source: source.to_string() })
    }

    /// P(X > x): the pooled sample's exceedance fraction, linear between order statistics,
    /// below u; the tail above.
    pub fn sf(&self, x: f64) -> f64 {
        if x > self.u {
            return self.p_u * self.gpd.sf(x - self.u);
        }
        let m = self.body.len();
        if m == 0 || x < self.body[0] {
            return 1.0;
        }
        // i = the number of body points ≤ x (≥ 1 here): the sample's survival is (n − i)/n at the
        // i-th point and falls linearly to (n − i − 1)/n at the next; past the last body point
        // it is the tail's p_u up to u.
        let i = self.body.partition_point(|&v| v <= x);
        if i == m {
            return self.p_u;
        }
        let (lo, hi) = (self.body[i - 1], self.body[i]);
        let frac = if hi > lo { ((x - lo) / (hi - lo)).clamp(0.0, 1.0) } else { 0.0 };
        ((self.n - i) as f64 - frac) / self.n as f64
    }
}

/// Recall with the captured distractor law in place of the scenario's own.
pub struct EmpiricalModel {
    law: EmpiricalLaw,
}

impl EmpiricalModel {
    /// A model from a capture's law.
    pub fn new(law: EmpiricalLaw) -> EmpiricalModel {
        EmpiricalModel { law }
    }

    /// Why the model cannot compute `s`, if it cannot.
    fn unsupported(s: &Scenario) -> Option<&'static str> {
        if s.model != Model::Scalar {
            return Some("the vector model draws its own keys");
        }
        if s.pooling != Pooling::None && s.compress_ratio > 1 {
            return Some("mean or max pooling of several tokens would need the law's convolution (use pooling = none)");
        }
        if s.hard_negatives > 0.0 {
            return Some("hard negatives have their own law");
        }
        if s.score_noise > 0.0 {
            return Some("score noise would need the law's convolution with a normal");
        }
        if s.layer_corr > 0.0 && s.selecting_layers() > 1 {
            return Some("a shared needle component across layers (layer_corr > 0 with layers > 1)");
        }
        None
    }

    /// P(the needle ranks within k_eff) in one layer.
    fn p_selected(&self, s: &Scenario, g: &Geometry) -> f64 {
        let e = g.needle_entries.len() as f64;
        let d = g.n_candidates.saturating_sub(g.needle_entries.len() as u64);
        let k1 = g.k_eff - 1;
        let at = |x: f64| binom_cdf(d, k1, self.law.sf(x));
        if s.needle_sd <= 0.0 {
            return at(s.dprime);
        }
        // The best of e Normal(dprime, sd²) needle entries: density e φ(z) Φ(z)^(e − 1) / sd.
        let sd = s.needle_sd;
        let f = |x: f64| {
            let z = (x - s.dprime) / sd;
            let ln = e.ln() + ln_norm_pdf(z) + (e - 1.0) * norm_cdf(z).max(1e-300).ln() - sd.ln();
            ln.exp() * at(x)
        };
        integrate(f, s.dprime - 9.0 * sd, s.dprime + (9.0 + e.ln().sqrt()) * sd, &[self.law.u], 1e-10).clamp(0.0, 1.0)
    }
}

impl RecallModel for EmpiricalModel {
    /// The captured law is per layer and per draw: no component shared across layers.
    fn shares_across_layers(&self) -> bool {
        false
    }

    fn recall(&self, s: &Scenario) -> Result<f64, EngineError> {
        s.validate()?;
        if let Some(why) = Self::unsupported(s) {
            return Err(EngineError::NeedsExact(format!(
                "the captured distractor law ({}) cannot model this scenario: {why}",
                self.law.source
            )));
        }
        let g = Geometry::new(s);
        let attended = if g.always_attended {
            1.0
        } else if g.k_eff == 0 || g.needle_entries.is_empty() {
            0.0
        } else {
            crate::engine::analytic::readout_probability(self.p_selected(s, &g), s.selecting_layers(), s.readout)
        };
        Ok(g.answer_probability(s.p_read, s.p_guess, attended).clamp(0.0, 1.0))
    }

    fn describe(&self) -> String {
        format!(
            "the captured distractor law of {} (pooled standardised scores, generalised-Pareto tail; exact quadrature)",
            self.law.source
        )
    }
}
