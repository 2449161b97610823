//! How often the diagnosis's rule is wrong on tables like the user's (docs/model.md#error-rates).
//!
//! A parametric bootstrap at the user's own design (the rows' cells and trials): tables are
//! drawn from the best-fitting physical hypothesis of a working indexer (`discrimination`,
//! `discrimination-with-spread`, `hard-negatives` or `read-failure` with dprime ≥ 0; the random
//! indexer, dprime = 0, when every such fit lies below it) and from the best-fitting
//! defect hypothesis, each row's hits Binomial(trials, the hypothesis's fitted recall), and the
//! rule is applied to every simulated table. The rule calls a table implementation-suspect when
//! its rows lie jointly below the random-indexer floor ([`crate::calibrate::JointFloor`]) or when
//! the defect's evidence D = AIC(physical) − AIC(defect) exceeds the threshold τ.
//!
//! Refitting every hypothesis on every simulated table would cost hundreds of fits; instead each
//! simulated table is scored at the hypotheses' fitted recalls, and the gain a refit would add
//! is drawn as Wilks's χ² with the defect's extra free parameters (the optimism of the
//! maximised likelihood under the physical truth). τ is the 95th percentile of the largest D
//! over the defect hypotheses on tables from the physical fit (at least 2, AIC's own margin),
//! so the rule's false-alarm rate is about 5% by construction; it is measured on the same
//! tables (with the floor test), and the power is measured on tables from the defect's fit.
//! Table i draws only from (seed, i).

use crate::calibrate::likelihood::binom_loglik;
use crate::calibrate::{HypothesisResult, JointFloor};
use crate::measured::Dataset;
use rand_distr::{ChiSquared, Distribution};
use rayon::prelude::*;

/// Simulated tables per truth.
pub const TABLES: u64 = 400;
/// The seed of the simulation (recorded in every output).
pub const SEED: u64 = 20_261_201;
/// The quantile of D on physical tables that sets τ.
const TAU_QUANTILE: f64 = 0.95;

/// The hypotheses of a working indexer.
pub const PHYSICAL: &[&str] = &["discrimination", "discrimination-with-spread", "hard-negatives", "read-failure"];

/// Whether `h` is a hypothesis of a working indexer: a physical one that ranks the needle at
/// least as well as a random pick (dprime ≥ 0).
pub fn working_indexer(h: &HypothesisResult) -> bool {
    PHYSICAL.contains(&h.name.as_str()) && h.estimate("dprime").is_some_and(|d| d >= 0.0)
}

/// The rule's measured error rates at the user's design.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct ErrorRates {
    /// The physical hypothesis the null tables come from.
    pub physical: String,
    /// The defect hypothesis the alternative tables come from (None when no defect hypothesis
    /// was fitted).
    pub defect: Option<String>,
    /// Tables simulated per truth.
    pub tables: u64,
    /// Their seed.
    pub seed: u64,
    /// τ: the defect evidence (ΔAIC) the rule needs.
    pub threshold: f64,
    /// The defect evidence in the data: AIC(physical) − AIC(defect).
    pub evidence: f64,
    /// Fraction of tables from the physical fit that the rule calls implementation-suspect.
    pub false_alarm: f64,
    /// Fraction of tables from the defect's fit that it calls implementation-suspect.
    pub power: Option<f64>,
    /// Mean defect evidence on the defect's tables: below τ, the defect as fitted predicts these
    /// cells too much like the physical fit to be found on this design.
    pub mean_evidence_under_defect: Option<f64>,
    /// Fraction of the defect's tables whose evidence is at most the data's: how plausible the
    /// data's evidence is if the defect were true (below [`MAX_DEFECT_P`], the defect is ruled
    /// out).
    pub defect_p: Option<f64>,
}

/// Largest plausibility of the data under the preferred defect ([`ErrorRates::defect_p`]) at
/// which a physical call is still made.
pub const MAX_DEFECT_P: f64 = 0.10;

impl ErrorRates {
    /// Whether the preferred defect, as fitted, would be found on this design more often than
    /// not (its mean evidence reaches τ).
    pub fn defect_distinguishable(&self) -> bool {
        self.mean_evidence_under_defect.is_some_and(|e| e >= self.threshold)
    }

    /// Whether the data leave the preferred defect plausible although the rule did not call it:
    /// it would be found on this design, yet tables from it show evidence as low as the data's
    /// at least [`MAX_DEFECT_P`] of the time.
    pub fn defect_not_ruled_out(&self) -> bool {
        self.defect_distinguishable() && self.defect_p.is_some_and(|p| p >= MAX_DEFECT_P)
    }

    /// Whether the procedure meets both targets on this design: a working indexer called
    /// implementation-suspect in at most [`super::rule::MAX_FALSE_ALARM`] of tables, a defect like
    /// the preferred one found in at least [`super::rule::MIN_POWER`].
    pub fn meets_targets(&self) -> bool {
        self.false_alarm <= super::rule::MAX_FALSE_ALARM && self.power.is_some_and(|p| p >= super::rule::MIN_POWER)
    }

    /// One sentence for the text output.
    pub fn sentence(&self) -> String {
        let mut s = format!(
            "error rates (simulated, {} tables per truth, seed {}): on tables like yours this procedure calls a working indexer ({}) implementation-suspect {:.0}% of the time",
            self.tables,
            self.seed,
            self.physical,
            100.0 * self.false_alarm
        );
        match (&self.defect, self.power) {
            (Some(d), Some(p)) => s.push_str(&format!(
                ", and finds a defect like the best-fitting one ({d}) {:.0}% of the time{}",
                100.0 * p,
                if self.defect_distinguishable() { "" } else { " (as fitted, it predicts these cells like the working indexer: not distinguishable on this design)" }
            )),
            _ => s.push_str(" (no defect hypothesis was fitted)"),
        }
        s.push_str(&format!(
            " (targets: at most {:.0}% and at least {:.0}%{})",
            100.0 * super::rule::MAX_FALSE_ALARM,
            100.0 * super::rule::MIN_POWER,
            if self.meets_targets() { ", met" } else { ", not both met" }
        ));
        s
    }
}

/// Log-likelihood of `hits` under per-row recall `p`.
fn loglik(data: &Dataset, hits: &[u64], p: &[f64]) -> f64 {
    data.rows.iter().zip(hits).zip(p).map(|((r, &h), &p)| binom_loglik(h, r.trials, p)).sum()
}

/// The best (lowest-AIC) hypothesis among `names`.
fn best_of<'a>(h: &'a [HypothesisResult], names: &dyn Fn(&str) -> bool) -> Option<&'a HypothesisResult> {
    h.iter().filter(|x| names(&x.name)).min_by(|a, b| a.aic.total_cmp(&b.aic))
}

/// The error rates of the rule on `data`'s design, from its fitted `hypotheses` (recall
/// tables; `None` for selection tables, whose likelihood is per pattern) and the joint floor
/// test's law.
pub fn error_rates(data: &Dataset, hypotheses: &[HypothesisResult], joint: Option<&JointFloor>) -> Option<ErrorRates> {
    if data.is_selection() {
        return None;
    }
    // A working indexer ranks the needle at least as well as a random pick: the null is the best
    // physical fit with dprime ≥ 0, or the random indexer (dprime = 0, the least favourable
    // working indexer) when every physical fit lies below it.
    let physical = hypotheses
        .iter()
        .filter(|h| working_indexer(h))
        .min_by(|a, b| a.aic.total_cmp(&b.aic))
        .or_else(|| hypotheses.iter().find(|h| h.name == "random-indexer"))?;
    let defects: Vec<&HypothesisResult> = hypotheses.iter().filter(|h| h.is_implementation()).collect();
    let defect = best_of(hypotheses, &|n| crate::calibrate::hypotheses::IMPLEMENTATION_HYPOTHESES.contains(&n));
    let evidence = defect.map_or(f64::NEG_INFINITY, |d| physical.aic - d.aic);
    // D on a table: the largest evidence over the defect hypotheses, each with a refit's gain.
    let evidence_on = |hits: &[u64], rng: &mut rand_xoshiro::Xoshiro256PlusPlus| -> f64 {
        let lp = loglik(data, hits, &physical.fitted);
        let mut best = f64::NEG_INFINITY;
        for d in &defects {
            let extra = d.k.saturating_sub(physical.k).max(1) as f64;
            let gain = ChiSquared::new(extra).map(|c| c.sample(rng)).unwrap_or(0.0);
            let e = 2.0 * (loglik(data, hits, &d.fitted) - lp) + gain - 2.0 * (d.k as f64 - physical.k as f64);
            best = best.max(e);
        }
        best
    };
    let floor_rejects = |hits: &[u64]| joint.is_some_and(|j| j.rejects(hits));
    let draw = |p: &[f64], i: u64| -> (Vec<u64>, rand_xoshiro::Xoshiro256PlusPlus) {
        let mut rng = crate::trials::trial_rng(SEED, i);
        let hits = data.rows.iter().zip(p).map(|(r, &p)| crate::engine::binomial::sample(r.trials, p.clamp(0.0, 1.0), &mut rng)).collect();
        (hits, rng)
    };
    // Tables from the physical fit: τ, then the false-alarm rate.
    // Each table's draws come from (SEED, i) alone, so the tables are simulated in parallel
    // with the same results in the same order.
    let null: Vec<(f64, bool)> = (0..TABLES)
        .into_par_iter()
        .map(|i| {
            let (hits, mut rng) = draw(&physical.fitted, i);
            (evidence_on(&hits, &mut rng), floor_rejects(&hits))
        })
        .collect();
    let mut d_null: Vec<f64> = null.iter().map(|x| x.0).collect();
    d_null.sort_by(|a, b| a.total_cmp(b));
    let q = d_null[((TAU_QUANTILE * TABLES as f64).ceil() as usize).min(d_null.len()) - 1];
    let threshold = if q.is_finite() { q.max(2.0) } else { 2.0 };
    let false_alarm = null.iter().filter(|x| x.0 > threshold || x.1).count() as f64 / TABLES as f64;
    let (power, mean_evidence_under_defect) = match defect {
        Some(d) => {
            let alt: Vec<(f64, bool)> = (0..TABLES)
                .into_par_iter()
                .map(|i| {
                    let (hits, mut rng) = draw(&d.fitted, TABLES + i);
                    (evidence_on(&hits, &mut rng), floor_rejects(&hits))
                })
                .collect();
            let power = alt.iter().filter(|x| x.0 > threshold || x.1).count() as f64 / TABLES as f64;
            let mean = alt.iter().map(|x| x.0).sum::<f64>() / TABLES as f64;
            let below = alt.iter().filter(|x| x.0 <= evidence).count() as f64 / TABLES as f64;
            (Some(power), Some((mean, below)))
        }
        None => (None, None),
    };
    let (mean_evidence_under_defect, defect_p) = (mean_evidence_under_defect.map(|m| m.0), mean_evidence_under_defect.map(|m| m.1));
    Some(ErrorRates {
        physical: physical.name.clone(),
        defect: defect.map(|d| d.name.clone()),
        tables: TABLES,
        seed: SEED,
        threshold,
        evidence,
        false_alarm,
        power,
        mean_evidence_under_defect,
        defect_p,
    })
}
