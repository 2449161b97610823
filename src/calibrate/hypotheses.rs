//! Named hypotheses about why the needle is lost, each a set of free parameters, fitted to the
//! same table and ranked by AIC with Akaike weights.

use crate::measured::Dataset;
use super::fit::fit;
use super::likelihood::{set_field, Problem};
use super::{default_param, CalibError, FreeParam, RecallModel};
use crate::scenario::{Field, Scenario};

/// The fields the named hypotheses are about; any other `--fit` field (p_read, score_noise, …) is
/// a nuisance parameter, free in every hypothesis.
pub const HYPOTHESIS_FIELDS: &[Field] = &[Field::Dprime, Field::NeedleSd, Field::HardNegatives, Field::HardMean];

/// A hypothesis's fit.
#[derive(Debug, Clone, PartialEq)]
pub struct HypothesisResult {
    /// Name.
    pub name: String,
    /// One-line meaning.
    pub description: String,
    /// Fields fixed by the hypothesis, with their values.
    pub fixed: Vec<(Field, f64)>,
    /// Free fields with their estimates.
    pub estimates: Vec<(Field, f64)>,
    /// Maximised log-likelihood.
    pub loglik: f64,
    /// Number of free parameters.
    pub k: usize,
    /// AIC.
    pub aic: f64,
    /// AIC − min AIC.
    pub delta_aic: f64,
    /// Akaike weight.
    pub weight: f64,
    /// Deviance.
    pub deviance: f64,
    /// Goodness-of-fit p-value.
    pub gof_p: Option<f64>,
}

struct Spec {
    name: &'static str,
    description: &'static str,
    fixed: Vec<(Field, f64)>,
    free: Vec<Field>,
}

fn specs() -> Vec<Spec> {
    vec![
        Spec {
            name: "coverage-only",
            description: "dprime = 0: the indexer cannot tell the needle from a distractor; only k/N and the window matter",
            fixed: vec![(Field::Dprime, 0.0)],
            free: vec![],
        },
        Spec {
            name: "discrimination",
            description: "dprime free: the needle scores dprime distractor-sd above (or below) a typical distractor",
            fixed: vec![],
            free: vec![Field::Dprime],
        },
        Spec {
            name: "discrimination-with-spread",
            description: "dprime and needle_sd free: needle difficulty also varies from query to query",
            fixed: vec![],
            free: vec![Field::Dprime, Field::NeedleSd],
        },
        Spec {
            name: "hard-negatives",
            description: "hard_negatives (fraction of candidates) and hard_mean free, dprime at the scenario's value: look-alike distractors outrank the needle",
            fixed: vec![],
            free: vec![Field::HardNegatives, Field::HardMean],
        },
    ]
}

/// Fits every named hypothesis (plus `nuisance` parameters, free in all) and ranks them by AIC.
pub fn compare_hypotheses(
    data: &Dataset,
    base: &Scenario,
    user_free: &[FreeParam],
    model: &dyn RecallModel,
) -> Result<Vec<HypothesisResult>, CalibError> {
    let nuisance: Vec<FreeParam> =
        user_free.iter().filter(|p| !HYPOTHESIS_FIELDS.contains(&p.field)).cloned().collect();
    let mut out = Vec::new();
    for spec in specs() {
        let mut b = base.clone();
        for (f, v) in &spec.fixed {
            set_field(&mut b, *f, *v)?;
        }
        let mut free: Vec<FreeParam> = spec
            .free
            .iter()
            .map(|&f| match user_free.iter().find(|p| p.field == f) {
                Some(p) => Ok(p.clone()),
                None => default_param(f).ok_or_else(|| CalibError::Input(format!("{f} cannot be fitted"))),
            })
            .collect::<Result<_, _>>()?;
        free.extend(nuisance.iter().cloned());
        let problem = Problem::new(data, &b, free, model)?;
        let r = fit(&problem, false, false)?;
        out.push(HypothesisResult {
            name: spec.name.to_string(),
            description: spec.description.to_string(),
            fixed: spec
                .fixed
                .iter()
                .copied()
                .chain(if spec.name == "hard-negatives" { vec![(Field::Dprime, base.dprime)] } else { vec![] })
                .collect(),
            estimates: problem.free.iter().zip(&r.theta).map(|(p, &v)| (p.field, v)).collect(),
            loglik: r.loglik,
            k: problem.dim(),
            aic: r.aic,
            delta_aic: 0.0,
            weight: 0.0,
            deviance: r.deviance,
            gof_p: r.gof_p,
        });
    }
    akaike_weights(&mut out);
    out.sort_by(|a, b| a.aic.total_cmp(&b.aic));
    Ok(out)
}

/// Fills ΔAIC and the Akaike weights exp(−Δ/2) / Σ exp(−Δ/2).
pub(crate) fn akaike_weights(h: &mut [HypothesisResult]) {
    let min = h.iter().map(|x| x.aic).fold(f64::INFINITY, f64::min);
    let total: f64 = h.iter().map(|x| (-(x.aic - min) / 2.0).exp()).sum();
    for x in h.iter_mut() {
        x.delta_aic = x.aic - min;
        x.weight = (-(x.delta_aic) / 2.0).exp() / total;
    }
}
