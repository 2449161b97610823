//! How often the diagnosis's rule is wrong on tables like the user's (docs/model.md#error-rates).
//!
//! A parametric bootstrap at the user's own design (the rows' cells and trials), symmetric in the
//! two kinds of error. Tables are drawn from the **working explanations** (the plausible fits of
//! a working indexer or of the model's reading, [`super::plausible`], each table from one of
//! them with its Akaike weight among them; the random indexer when none is plausible) and from
//! each **competing defect** (a defect hypothesis whose fit is not the working indexer it nests,
//! [`nests_working`], and that predicts a measured cell otherwise or fits as well; at most
//! [`MAX_COMPETITORS`], best AIC first),
//! each row's hits Binomial(trials, the hypothesis's fitted recall). On every table the defect
//! evidence D = AIC(best working) − AIC(best defect) is scored.
//!
//! - τ, the evidence a **defect call** needs, is the 95th percentile of D on working tables (at
//!   least 2, AIC's own margin): a working indexer is called implementation-suspect about 5% of
//!   the time, measured on the same tables (with the floor test) as `false_alarm`.
//! - A **physical call** needs the same standard the other way: for every competing defect, the
//!   data's D must be lower than all but [`MAX_DEFECT_P`] of the D its own tables show
//!   (`defect_p` per competitor). A defect that the design cannot separate from the working
//!   explanation is never ruled out, so the call is then `undecided`.
//!
//! Refitting every hypothesis on every simulated table would cost hundreds of fits; instead each
//! simulated table is scored at the hypotheses' fitted recalls, and the gain a refit would add
//! is drawn as Wilks's χ² with the defect's extra free parameters (the optimism of the
//! maximised likelihood under the working truth). Table i draws only from (seed, i).

use crate::calibrate::likelihood::binom_loglik;
use crate::calibrate::{Family, Hypothesis, HypothesisResult, JointFloor};
use crate::measured::Dataset;
use rand::Rng;
use rand_distr::{ChiSquared, Distribution};
use rayon::prelude::*;

/// Simulated tables per truth.
pub(crate) const TABLES: u64 = 400;
/// The seed of the simulation (recorded in every output).
pub(crate) const SEED: u64 = 20_261_201;
/// The quantile of D on working tables that sets τ.
const TAU_QUANTILE: f64 = 0.95;
/// Competing defects simulated at most (the best by AIC among those that predict the measured
/// cells otherwise than the best working explanation).
pub(crate) const MAX_COMPETITORS: usize = 3;
/// A defect competes when its fitted recall differs from the best working explanation's by at
/// least this at some measured row.
pub(crate) const MATERIAL_DIFFERENCE: f64 = 0.05;

/// A defect fit whose defect parameter is this close to the value that nests a working indexer
/// (a broken fraction of 1%, a kernel k within 5% of every row's, near and far separations
/// within 0.1) is the working indexer, not a competing cause.
pub(crate) const NESTED_TOLERANCE: f64 = 0.05;

/// Whether a defect's fit is the working indexer it nests (see [`NESTED_TOLERANCE`]).
pub(crate) fn nests_working(d: &HypothesisResult, data: &Dataset) -> bool {
    match d.hypothesis {
        Hypothesis::BrokenFraction | Hypothesis::LengthPeriodic => {
            d.estimate("broken_fraction").is_some_and(|f| f < 0.2 * NESTED_TOLERANCE)
        }
        Hypothesis::EffectiveK => d.estimate("log10_k_eff").is_some_and(|l| {
            let k = 10f64.powf(l);
            data.rows.iter().all(|r| (k / r.index_topk as f64 - 1.0).abs() < NESTED_TOLERANCE)
        }),
        Hypothesis::Positional => match (d.estimate("dprime_near"), d.estimate("dprime_far")) {
            (Some(a), Some(b)) => (a - b).abs() < 2.0 * NESTED_TOLERANCE,
            _ => false,
        },
        _ => false,
    }
}
/// Largest share of a competing defect's tables whose evidence is at most the data's at which the
/// defect counts as ruled out: the 5% a defect call allows a working indexer.
pub(crate) const MAX_DEFECT_P: f64 = 0.05;

/// Whether `h` is a hypothesis of a working indexer: a physical one (the physical calls'
/// explanations, plausible or not: a working indexer's or the model's reading) that ranks the
/// needle at least as well as a random pick (dprime ≥ 0).
pub(crate) fn working_indexer(h: &HypothesisResult) -> bool {
    matches!(h.hypothesis.family(), Family::Working | Family::Read) && h.estimate("dprime").is_some_and(|d| d >= 0.0)
}

/// One competing defect's simulation.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Competitor {
    /// The defect hypothesis.
    #[serde(rename = "name")]
    pub(crate) hypothesis: Hypothesis,
    /// Its ΔAIC on the table.
    pub(crate) delta_aic: f64,
    /// Fraction of its tables that the rule calls implementation-suspect.
    pub(crate) power: f64,
    /// Mean defect evidence on its tables (below τ: the design cannot find it as fitted).
    pub(crate) mean_evidence: f64,
    /// Fraction of its tables whose evidence is at most the data's: below [`MAX_DEFECT_P`] the
    /// defect is ruled out.
    pub(crate) defect_p: f64,
    /// Its fit's goodness-of-fit p-value is below [`super::plausible::MIN_GOF_P`]: its rates
    /// come from a model of the table that fits it badly.
    pub(crate) poor_fit: bool,
}

impl Competitor {
    /// Whether the data rule this defect out at the standard a defect call must meet.
    pub(crate) fn ruled_out(&self) -> bool {
        self.defect_p < MAX_DEFECT_P
    }
    /// Whether the design could find it as fitted (its mean evidence reaches τ).
    pub(crate) fn distinguishable(&self, threshold: f64) -> bool {
        self.mean_evidence >= threshold
    }
}

/// The rule's measured error rates at the user's design.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct ErrorRates {
    /// The best working explanation (the null tables' first), or `random-indexer` when none is
    /// plausible.
    pub physical: Hypothesis,
    /// Every working explanation the null tables come from, with its weight among them.
    pub null_weights: Vec<(Hypothesis, f64)>,
    /// The best defect hypothesis (None when no defect hypothesis was fitted).
    pub defect: Option<Hypothesis>,
    /// Tables simulated per truth.
    pub tables: u64,
    /// Their seed.
    pub seed: u64,
    /// τ: the defect evidence (ΔAIC) the rule needs.
    pub threshold: f64,
    /// The defect evidence in the data: AIC(best working) − AIC(best defect).
    pub evidence: f64,
    /// Fraction of working tables that the rule calls implementation-suspect.
    pub false_alarm: f64,
    /// Fraction of the best competing defect's tables that it calls implementation-suspect.
    pub power: Option<f64>,
    /// Mean defect evidence on the best competing defect's tables.
    pub mean_evidence_under_defect: Option<f64>,
    /// The largest `defect_p` over the competing defects: how plausible the data's evidence is
    /// if the least ruled-out defect were true.
    pub defect_p: Option<f64>,
    /// Every competing defect simulated, best AIC first.
    pub competitors: Vec<Competitor>,
    /// The null's best working explanation fits the table badly: its false-alarm rate is
    /// reported but supports nothing.
    pub null_poor_fit: bool,
}

impl ErrorRates {
    /// Whether the best competing defect, as fitted, would be found on this design more often
    /// than not (its mean evidence reaches τ).
    pub fn defect_distinguishable(&self) -> bool {
        self.mean_evidence_under_defect.is_some_and(|e| e >= self.threshold)
    }

    /// The competing defects the data do not rule out (at the standard a defect call meets).
    pub(crate) fn not_ruled_out(&self) -> Vec<&Competitor> {
        self.competitors.iter().filter(|c| !c.ruled_out()).collect()
    }

    /// Whether the procedure meets both targets on this design: a working indexer called
    /// implementation-suspect in at most [`super::rule::MAX_FALSE_ALARM`] of tables, a defect like
    /// the best competitor found in at least [`super::rule::MIN_POWER`].
    pub(crate) fn meets_targets(&self) -> bool {
        self.false_alarm <= super::rule::MAX_FALSE_ALARM && self.power.is_some_and(|p| p >= super::rule::MIN_POWER)
    }

    /// One sentence for the text output.
    pub(crate) fn sentence(&self) -> String {
        let mut s = format!(
            "error rates (simulated, {} tables per truth, seed {}): on tables like yours this procedure calls a working indexer ({}) implementation-suspect {:.0}% of the time{}",
            self.tables,
            self.seed,
            if self.null_weights.len() > 1 {
                self.null_weights.iter().map(|(n, w)| format!("{n} {w:.2}")).collect::<Vec<_>>().join(", ")
            } else {
                self.physical.to_string()
            },
            100.0 * self.false_alarm,
            if self.null_poor_fit { " (from a fit that matches the table badly: this rate supports no call)" } else { "" }
        );
        if self.competitors.is_empty() {
            s.push_str(match &self.defect {
                Some(_) => "; no defect hypothesis predicts these cells otherwise than the working explanation",
                None => " (no defect hypothesis was fitted)",
            });
        }
        for c in &self.competitors {
            s.push_str(&format!(
                "; a defect like {} (ΔAIC {:.1}) is found {:.0}% of the time{} and {}",
                c.hypothesis,
                c.delta_aic,
                100.0 * c.power,
                if c.distinguishable(self.threshold) { "" } else { " (the design cannot separate it as fitted)" },
                if c.ruled_out() {
                    format!("its tables show evidence as low as the data's {:.1}% of the time (ruled out for a physical call)", 100.0 * c.defect_p)
                } else {
                    format!("its tables show evidence as low as the data's {:.0}% of the time (not ruled out: at least {:.0}%)", 100.0 * c.defect_p, 100.0 * MAX_DEFECT_P)
                }
            ));
            if c.poor_fit {
                s.push_str(" [its fit matches the table badly]");
            }
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

/// The rule's error rates on `data`'s design, from its fitted `hypotheses` (recall tables;
/// `None` for selection tables, whose likelihood is per pattern), which of them are working
/// explanations (`explains`, per hypothesis) and the joint floor test's law.
pub(crate) fn error_rates(
    data: &Dataset,
    hypotheses: &[HypothesisResult],
    explains: &[bool],
    joint: Option<&JointFloor>,
) -> Option<ErrorRates> {
    if data.is_selection() {
        return None;
    }
    // The null: the working explanations, weighted among themselves; the random indexer (the
    // least favourable working indexer) when none is plausible.
    let mut null: Vec<&HypothesisResult> =
        hypotheses.iter().zip(explains).filter(|(_, &e)| e).map(|(h, _)| h).collect();
    if null.is_empty() {
        null.extend(hypotheses.iter().find(|h| h.hypothesis == Hypothesis::RandomIndexer));
    }
    if null.is_empty() {
        return None;
    }
    null.sort_by(|a, b| a.aic.total_cmp(&b.aic));
    let best_null = null[0];
    let min_aic = best_null.aic;
    let null_w: Vec<f64> = null.iter().map(|h| (-(h.aic - min_aic) / 2.0).exp()).collect();
    let null_total: f64 = null_w.iter().sum();
    let mut defects: Vec<&HypothesisResult> = hypotheses.iter().filter(|h| h.is_implementation()).collect();
    defects.sort_by(|a, b| a.aic.total_cmp(&b.aic));
    let evidence = defects.first().map_or(f64::NEG_INFINITY, |d| best_null.aic - d.aic);
    // D on a table: the best working explanation against the best defect. The hypotheses are
    // scored at their fits to the data, not refitted; a refit's gain is drawn for the side that
    // is not the table's truth (Wilks's χ² with its extra free parameters): on working tables
    // each defect gains, on a defect's tables the working explanation does. The data's own D
    // comes from real refits, so neither simulation favours the call it tests.
    let evidence_on = |hits: &[u64], truth_defect: bool, rng: &mut rand_xoshiro::Xoshiro256PlusPlus| -> f64 {
        let (lw, kw) = null
            .iter()
            .map(|w| (loglik(data, hits, &w.fitted), w.k))
            .max_by(|a, b| (a.0 - a.1 as f64).total_cmp(&(b.0 - b.1 as f64)))
            .expect("the null has at least one hypothesis");
        let mut best = f64::NEG_INFINITY;
        for d in &defects {
            let e = if truth_defect {
                let extra = kw.saturating_sub(d.k).max(1) as f64;
                let gain = ChiSquared::new(extra).map(|c| c.sample(rng)).unwrap_or(0.0);
                2.0 * (loglik(data, hits, &d.fitted) - lw) - gain - 2.0 * (d.k as f64 - kw as f64)
            } else {
                let extra = d.k.saturating_sub(kw).max(1) as f64;
                let gain = ChiSquared::new(extra).map(|c| c.sample(rng)).unwrap_or(0.0);
                2.0 * (loglik(data, hits, &d.fitted) - lw) + gain - 2.0 * (d.k as f64 - kw as f64)
            };
            best = best.max(e);
        }
        best
    };
    let floor_rejects = |hits: &[u64]| joint.is_some_and(|j| j.rejects(hits));
    let draw = |p: &[f64], rng: &mut rand_xoshiro::Xoshiro256PlusPlus| -> Vec<u64> {
        data.rows
            .iter()
            .zip(p)
            .map(|(r, &p)| crate::engine::binomial::sample(r.trials, p.clamp(0.0, 1.0), rng))
            .collect()
    };
    // Working tables: τ, then the false-alarm rate. Table i's draws (which working explanation,
    // then the hits) come from (SEED, i) alone, so the tables are simulated in parallel with the
    // same results in the same order.
    let on_null: Vec<(f64, bool)> = (0..TABLES)
        .into_par_iter()
        .map(|i| {
            let mut rng = crate::trials::trial_rng(SEED, i);
            let u: f64 = if null.len() > 1 { rng.random::<f64>() * null_total } else { 0.0 };
            let mut acc = 0.0;
            let pick = null_w.iter().position(|w| {
                acc += w;
                u < acc
            });
            let h = null[pick.unwrap_or(null.len() - 1)];
            let hits = draw(&h.fitted, &mut rng);
            (evidence_on(&hits, false, &mut rng), floor_rejects(&hits))
        })
        .collect();
    let mut d_null: Vec<f64> = on_null.iter().map(|x| x.0).collect();
    d_null.sort_by(|a, b| a.total_cmp(b));
    let q = d_null[((TAU_QUANTILE * TABLES as f64).ceil() as usize).min(d_null.len()) - 1];
    let threshold = if q.is_finite() { q.max(2.0) } else { 2.0 };
    let false_alarm = on_null.iter().filter(|x| x.0 > threshold || x.1).count() as f64 / TABLES as f64;
    // The competing defects: those whose fit is not the working indexer they nest, and that
    // either predict some measured cell otherwise than the best working explanation or fit the
    // table as well as it (within AIC's tie margin): the first must be ruled out by their own
    // tables, the second the table cannot tell apart from the working explanation, and no fix is
    // prescribed. A nested-looking defect that predicts the same cells and fits worse is the
    // working explanation with a spare parameter.
    let material = |d: &HypothesisResult| {
        d.fitted.iter().zip(&best_null.fitted).any(|(a, b)| (a - b).abs() >= MATERIAL_DIFFERENCE)
    };
    let tied = |d: &HypothesisResult| d.aic <= best_null.aic + crate::calibrate::hypotheses::AIC_TIE + 1e-9;
    let competitors: Vec<Competitor> = defects
        .iter()
        .filter(|d| !nests_working(d, data) && (material(d) || tied(d)))
        .take(MAX_COMPETITORS)
        .enumerate()
        .map(|(j, d)| {
            let alt: Vec<(f64, bool)> = (0..TABLES)
                .into_par_iter()
                .map(|i| {
                    let mut rng = crate::trials::trial_rng(SEED, (j as u64 + 1) * TABLES + i);
                    let hits = draw(&d.fitted, &mut rng);
                    (evidence_on(&hits, true, &mut rng), floor_rejects(&hits))
                })
                .collect();
            let n = TABLES as f64;
            Competitor {
                hypothesis: d.hypothesis,
                delta_aic: d.delta_aic,
                power: alt.iter().filter(|x| x.0 > threshold || x.1).count() as f64 / n,
                mean_evidence: alt.iter().map(|x| x.0).sum::<f64>() / n,
                defect_p: alt.iter().filter(|x| x.0 <= evidence).count() as f64 / n,
                poor_fit: d.gof_p.is_some_and(|p| p < super::plausible::MIN_GOF_P),
            }
        })
        .collect();
    Some(ErrorRates {
        physical: best_null.hypothesis,
        null_weights: null.iter().zip(&null_w).map(|(h, w)| (h.hypothesis, w / null_total)).collect(),
        defect: defects.first().map(|d| d.hypothesis),
        tables: TABLES,
        seed: SEED,
        threshold,
        evidence,
        false_alarm,
        power: competitors.first().map(|c| c.power),
        mean_evidence_under_defect: competitors.first().map(|c| c.mean_evidence),
        defect_p: competitors.iter().map(|c| c.defect_p).reduce(f64::max),
        competitors,
        null_poor_fit: best_null.gof_p.is_some_and(|p| p < super::plausible::MIN_GOF_P),
    })
}
impl From<&ErrorRates> for super::rule::DefectEvidence {
    fn from(r: &ErrorRates) -> Self {
        super::rule::DefectEvidence {
            evidence: r.evidence,
            threshold: r.threshold,
            false_alarm: r.false_alarm,
            defect_not_ruled_out: !r.not_ruled_out().is_empty(),
            defect_poor_fit: r.competitors.first().is_some_and(|c| c.poor_fit),
        }
    }
}
