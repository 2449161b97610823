//! The calibrated call (`verdict --data --fit`, a calibration experiment's verdict): the
//! verdict's numbers at the fit's estimate and over its 95% region, with the call the decision
//! rule makes from the fit's own signatures ([`super::rule`]), and its text and JSON.

use super::rule;
use super::signature::{fit_signatures, FitSignatures, Signature};
use crate::calibrate::output::CalibrationReport;
use crate::calibrate::CalibError;
use crate::engine::RecallModel;
use crate::measured::Dataset;
use crate::scenario::{Field, Scenario};
use crate::verdict::{calibrated_verdict_json, verdict_text, VerdictOptions};

/// A calibrated verdict (`verdict --data --fit`, a calibration experiment's verdict): the
/// verdict at the fit's estimate and over its 95% region, with the call the fit's own
/// signatures force ([`fit_signatures`]). The one place such a call is made.
#[derive(Debug, Clone)]
pub struct CalibratedCall {
    /// The verdict at the estimate and over the region (calls replaced by a forced call).
    pub verdict: crate::verdict::CalibratedVerdict,
    /// The scenarios at the estimate (first) and the region's points.
    pub scenarios: Vec<Scenario>,
    /// The signatures and the call they force.
    pub signatures: FitSignatures,
    /// Where the numbers' context length and k come from ([`CalibratedCall::numbers_at`]).
    pub numbers_at: super::NumbersAt,
}

/// [`CalibratedCall`] of a calibration `report` of `data` on `base`.
pub fn calibrated_call(
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
    pub fn numbers_at(mut self, at: super::NumbersAt) -> Self {
        self.numbers_at = at;
        self
    }

    /// The verdict's JSON (docs/cli.md#output) with `signatures` and `random_indexer_lr`.
    pub fn to_json(&self) -> serde_json::Value {
        let mut j = calibrated_verdict_json(&self.verdict, &self.scenarios[0]);
        self.signatures.annotate(&mut j);
        self.numbers_at.annotate(&mut j);
        j
    }

    /// The verdict's text: the random-indexer test when it was run, the numbers with their 95%
    /// ranges and, when the rule overrides them, the signatures that force the call.
    pub fn to_text(&self) -> String {
        let mut text = String::new();
        if let Some(lr) = self.signatures.random_indexer_lr {
            text.push_str(&format!(
                "random indexer (dprime = 0) against the fitted dprime: 2·Δloglik = {lr:.2} ({} at level 0.01)\n",
                if self.signatures.signatures.contains(&Signature::WorseThanRandom) {
                    "rejected"
                } else {
                    "not rejected"
                }
            ));
        }
        text.push_str(&format!("numbers {}:\n", self.numbers_at.describe(&self.verdict.at_estimate)));
        text.push_str(&verdict_text(&self.verdict.at_estimate, Some(&self.verdict)));
        if self.signatures.forced_call.is_some() {
            text.push_str(&self.signatures.forced_text());
            text.push_str("`verdict --data` without --fit ranks the defect hypotheses on this table.\n");
        }
        text
    }
}
