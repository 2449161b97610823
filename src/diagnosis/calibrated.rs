//! The calibrated call (`verdict --data --fit`, a calibration experiment's verdict): the
//! verdict's numbers at the fit's estimate and over its 95% region, with the call the decision
//! rule makes from the fit's own signatures ([`super::rule`]), and its text and JSON.

use super::rule;
use super::signature::{Signature, CHI2_1_99};
use crate::calibrate::likelihood::set_field;
use crate::calibrate::report::CalibrationReport;
use crate::calibrate::{CalibError, FreeParam, RowChecks};
use crate::engine::RecallModel;
use crate::measured::Dataset;
use crate::scenario::{Field, Scenario};
use crate::verdict::{Call, VerdictOptions};

/// The signatures a calibrated fit (`verdict --data --fit`) shows by itself, and the call they
/// force whatever the fitted numbers would say: rows jointly (or singly) below the
/// random-indexer floor and a fitted separation significantly below 0 are defects
/// (implementation-suspect); misses where every candidate is selected are read-limited. The
/// same rules as [`super::diagnose`] on the same evidence, so that adding `--fit` cannot turn a
/// defect into a prescription.
#[derive(Debug, Clone, PartialEq)]
pub struct FitSignatures {
    /// The signatures found.
    pub signatures: Vec<Signature>,
    /// The call they force (None: the fitted numbers decide).
    pub forced_call: Option<Call>,
    /// Twice the log-likelihood gain of the fitted dprime over dprime = 0 (the other fitted
    /// fields refitted there), when the fitted dprime is below 0 and the floor test has not
    /// already decided.
    pub random_indexer_lr: Option<f64>,
}

/// [`FitSignatures`] of a calibration of `data` on `base` with `free` fitted to `fit`.
pub fn fit_signatures(
    data: &Dataset,
    base: &Scenario,
    free: &[FreeParam],
    fit: &crate::calibrate::FitResult,
    checks: Option<&RowChecks>,
    model: &dyn RecallModel,
) -> Result<FitSignatures, CalibError> {
    let mut sig = Vec::new();
    if checks.is_some_and(RowChecks::any_below_floor) {
        sig.push(Signature::BelowRandomFloor);
    }
    let d = fit.estimates.iter().find(|e| e.field == Field::Dprime).map(|e| e.value);
    // dprime < 0 is the only side on which the random indexer is the better-ranking null.
    let mut lr = None;
    // When the floor test has decided, the likelihood-ratio test would only repeat it (a refit of
    // every other field at dprime = 0 costs as much as the fit itself).
    let decided = sig.contains(&Signature::BelowRandomFloor);
    if d.is_some_and(|d| d < 0.0) && !decided {
        // The random indexer as the null: dprime = 0, every other fitted field refitted.
        let base = &crate::calibrate::answer_scenario(data, base);
        let mut at0 = base.clone();
        set_field(&mut at0, Field::Dprime, 0.0)?;
        let rest: Vec<FreeParam> = free.iter().filter(|p| p.field != Field::Dprime).cloned().collect();
        let problem = crate::calibrate::Problem::new(data, &at0, rest, model)?;
        let l0 = if problem.dim() == 0 {
            problem.loglik(&[])?
        } else {
            crate::calibrate::fit::fit(&problem, false, false)?.loglik
        };
        let stat = 2.0 * (fit.loglik - l0);
        lr = Some(stat);
        if stat > CHI2_1_99 {
            sig.push(Signature::WorseThanRandom);
        }
    }
    if checks.is_some_and(|c| !c.selection_independent_misses().is_empty()) {
        sig.push(Signature::MissesWhenAllSelected);
    }
    let forced_call = rule::overriding_call(&sig);
    Ok(FitSignatures { signatures: sig, forced_call, random_indexer_lr: lr })
}

/// A calibrated verdict (`verdict --data --fit`, a calibration experiment's verdict): the
/// verdict at the fit's estimate and over its 95% region, with the call the fit's own
/// signatures force ([`fit_signatures`]). The one place such a call is made.
#[derive(Debug, Clone)]
pub struct CalibratedCall {
    /// The verdict at the estimate and over the region (calls replaced by a forced call).
    pub(crate) verdict: crate::verdict::CalibratedVerdict,
    /// The scenarios at the estimate (first) and the region's points.
    pub(crate) scenarios: Vec<Scenario>,
    /// The signatures and the call they force.
    pub(crate) signatures: FitSignatures,
    /// Where the numbers' context length and k come from ([`CalibratedCall::numbers_at`]).
    pub(crate) numbers_at: super::NumbersAt,
}

/// [`CalibratedCall`] of a calibration `report` of `data` on `base`.
pub(crate) fn calibrated_call(
    data: &Dataset,
    base: &Scenario,
    report: &CalibrationReport,
    model: &dyn RecallModel,
    opts: VerdictOptions,
) -> Result<CalibratedCall, CalibError> {
    let scenarios = crate::calibrate::fitted_scenarios(data, base, report, model)?;
    let mut cv = crate::verdict::calibrated_verdict(&scenarios, model, opts)?;
    cv.at_estimate.dprime_on_bound = report.fit.estimates.iter().any(|e| e.field == Field::Dprime && e.value_at_bound);
    let signatures = fit_signatures(data, base, &report.free, &report.fit, report.checks.as_ref(), model)?;
    // A defect is not a prescription: the fitted numbers stay, the call is the rule's.
    let evidence = rule::Evidence::signatures_only(&signatures.signatures);
    cv.at_estimate.call = rule::decide(&evidence, cv.at_estimate.call).0;
    cv.region.iter_mut().for_each(|v| v.call = rule::decide(&evidence, v.call).0);
    Ok(CalibratedCall { verdict: cv, scenarios, signatures, numbers_at: super::NumbersAt::default() })
}

impl CalibratedCall {
    /// The call with its numbers named as at `at` ([`super::numbers_scenario`]).
    pub(crate) fn numbers_at(mut self, at: super::NumbersAt) -> Self {
        self.numbers_at = at;
        self
    }
}
