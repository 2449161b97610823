//! A calibration's result (`calibrate`, `verdict --data --fit`, calibration experiments): the
//! table, the fit, the hypotheses, the row checks and the predictions. Its text and JSON are
//! [`crate::present::calibrate`]'s.

use super::fit::FitResult;
use super::hypotheses::HypothesisResult;
use super::predict::Prediction;
use super::FreeParam;
use crate::measured::Dataset;
use crate::scenario::{Field, Scenario};

/// Everything a calibration run produced.
#[derive(Debug, Clone)]
pub struct CalibrationReport {
    /// The table.
    pub data: Dataset,
    /// The user's scenario (before substituting the fit).
    pub base: Scenario,
    /// The free parameters and their ranges.
    pub free: Vec<FreeParam>,
    /// The engine(s) used.
    pub engine: String,
    /// The fit.
    pub fit: FitResult,
    /// Hypotheses, when compared.
    pub hypotheses: Option<Vec<HypothesisResult>>,
    /// Row checks (random-indexer floor, selection-independent misses).
    pub checks: Option<super::row_checks::RowChecks>,
    /// Predictions.
    pub predictions: Vec<Prediction>,
    /// Wall time of the whole calibration, seconds (not written to JSON, which must repeat exactly).
    pub elapsed_s: f64,
}

impl CalibrationReport {
    /// Warnings every rendering must carry (transcribed data, unidentifiable parameters,
    /// rejected fit).
    pub(crate) fn warnings(&self) -> Vec<String> {
        let mut w: Vec<String> = self.data.transcribed_warning().into_iter().collect();
        for e in &self.fit.estimates {
            if e.value_at_bound {
                w.push(format!(
                    "{} = {} sits on its search bound [{}, {}]: the likelihood keeps improving beyond it (a ridge, e.g. dprime → −∞ with needle_sd → ∞); read it as a limit, not a value",
                    e.field, e.value, e.bounds.0, e.bounds.1
                ));
            }
            if !e.identifiable {
                w.push(format!(
                    "{} is not identifiable from these data: its profile likelihood is flat across the whole search range [{}, {}]",
                    e.field, e.bounds.0, e.bounds.1
                ));
            }
        }
        if let Some(p) = self.fit.gof_p {
            if p < 0.05 {
                w.push(format!(
                    "the model fits poorly (deviance {:.2} on {} df, p = {:.2e}): read the intervals with care",
                    self.fit.deviance, self.fit.df, p
                ));
            }
        }
        if self.data.rows.iter().any(|r| r.trials < 20) {
            w.push("some rows have fewer than 20 trials: the χ² approximation of the deviance p-value is rough".into());
        }
        w
    }
}

impl CalibrationReport {
    /// Whether a prediction's point sets index_topk beyond the scenario's kernel maximum.
    pub(crate) fn beyond_kernel_max(&self, p: &Prediction) -> bool {
        p.point
            .iter()
            .any(|(f, v)| *f == Field::IndexTopk && v.parse::<f64>().is_ok_and(|k| k > self.base.max_topk as f64))
    }
}
