//! Calibration against measured recall (docs/model.md#calibration): load a table of measured
//! cells, fit chosen scalar parameters by maximum binomial likelihood, 95% profile-likelihood
//! intervals, deviance goodness of fit, named hypotheses ranked by AIC, and what-if predictions
//! whose 95% bands are carried over from the fit.
//!
//! The recall model is abstract ([`RecallModel`], shared with the verdict): [`crate::engine::EngineModel`] uses
//! the exact analytic engine where it applies and common-random-number Monte Carlo otherwise;
//! tests may plug in closed-form models ([`crate::engine::FnModel`]).

pub mod cache;
pub(crate) mod fit;
pub(crate) mod hypotheses;
pub(crate) mod hypothesis;
pub(crate) mod likelihood;
pub(crate) mod optimize;
pub(crate) mod predict;
pub(crate) mod report;
pub mod row_checks;

/// The measured-data types, re-exported from [`crate::measured`] (their one home).
pub use crate::measured::{load_csv, parse_csv, Dataset, MeasuredError, Observation};
pub use fit::{FitResult, ParamEstimate, RowFit};
pub use hypotheses::{check_name, compare_hypotheses, HypothesisResult};
pub use hypothesis::{Family, Hypothesis};
pub use likelihood::Problem;
pub use predict::predict_grid;
pub(crate) use predict::{parse_predict_specs, Prediction};
pub use row_checks::row_checks;
pub(crate) use row_checks::{JointFloor, RowChecks};

use crate::engine::{EngineError, RecallModel};
use crate::scenario::{field_names, Field, Scenario, ScenarioError};

/// Why a calibration failed.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum CalibError {
    /// The table could not be loaded.
    #[error("{0}")]
    Data(#[from] MeasuredError),
    /// Bad user input (a field, a bound, a prediction spec, a row that is not a valid scenario).
    #[error("{0}")]
    Input(String),
    /// The recall model failed during the computation.
    #[error("recall model: {0}")]
    Model(EngineError),
    /// The fit failed (no finite likelihood in the search box).
    #[error("recall model: {0}")]
    Fit(String),
    /// The result could not be written.
    #[error("{0}")]
    Output(String),
}

impl crate::error::Classify for CalibError {
    /// Bad input for the table and the options; a failure for the model and the output.
    fn kind(&self) -> crate::error::ErrorKind {
        use crate::error::ErrorKind;
        match self {
            CalibError::Data(_) | CalibError::Input(_) => ErrorKind::Input,
            // Selection data under a model without an exact likelihood: the user's choice.
            CalibError::Model(crate::engine::EngineError::NeedsExact(_)) => ErrorKind::Input,
            CalibError::Model(_) | CalibError::Fit(_) | CalibError::Output(_) => ErrorKind::Failure,
        }
    }
}

/// A verdict's failure inside a calibration, a diagnosis or a plan: the model's failure stays
/// a failure, anything else is bad input.
impl From<crate::verdict::VerdictError> for CalibError {
    fn from(e: crate::verdict::VerdictError) -> Self {
        match e {
            crate::verdict::VerdictError::Model(e) => CalibError::Model(e),
            e => CalibError::Input(e.to_string()),
        }
    }
}

impl From<ScenarioError> for CalibError {
    fn from(e: ScenarioError) -> Self {
        CalibError::Input(e.to_string())
    }
}

/// One free parameter and its search range.
#[derive(Debug, Clone, PartialEq)]
pub struct FreeParam {
    /// Scenario field (a real field with fit bounds in the field table).
    pub(crate) field: Field,
    /// Lower bound.
    pub(crate) lo: f64,
    /// Upper bound.
    pub(crate) hi: f64,
}

// The fields that can be fitted, their default search ranges and which ends are physical
// limits come from the field table ([`crate::scenario::FitBounds`]). dprime may be negative (a
// needle the indexer scores *below* a typical distractor: worse than chance); hard_negatives is
// fitted as a fraction of the candidates.

/// Parses `--fit` text: comma-separated fields, each optionally with a range `field=lo:hi`.
/// Rejects unknown fields, fields that are not fittable (structural fields fixed by the preset or
/// scenario, and columns the table sets per row) and repeated fields, naming the field.
pub fn parse_fit_spec(spec: &str, data: Option<&Dataset>) -> Result<Vec<FreeParam>, CalibError> {
    let mut out: Vec<FreeParam> = Vec::new();
    let fittable_names: Vec<&str> = Field::fittable().map(Field::name).collect();
    for item in spec.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let (name, range) = match item.split_once('=') {
            Some((n, r)) => (n.trim(), Some(r.trim())),
            None => (item, None),
        };
        let field = name.replace('-', "_");
        let Some((f, b)) = Field::from_name(&field).ok().and_then(|f| f.spec().fit.map(|b| (f, b))) else {
            if field_names().contains(&field.as_str()) {
                return Err(CalibError::Input(format!(
                    "--fit {field}: cannot be fitted: it is fixed by the preset/scenario or set per row by the table (fittable: {})",
                    fittable_names.join(", ")
                )));
            }
            return Err(CalibError::Input(format!(
                "--fit {name}: unknown field (fittable: {})",
                fittable_names.join(", ")
            )));
        };
        if let Some(d) = data {
            if d.has_column(f) {
                return Err(CalibError::Input(format!(
                    "--fit {field}: cannot be fitted: the table sets it per row (column `{field}`)"
                )));
            }
        }
        let (dlo, dhi) = (b.lo, b.hi);
        let (lo, hi) = match range {
            None => (dlo, dhi),
            Some(r) => {
                let (a, b) = r
                    .split_once(':')
                    .ok_or_else(|| CalibError::Input(format!("--fit {item}: expected FIELD or FIELD=LO:HI")))?;
                let lo: f64 =
                    a.trim().parse().map_err(|_| CalibError::Input(format!("--fit {item}: `{a}` is not a number")))?;
                let hi: f64 =
                    b.trim().parse().map_err(|_| CalibError::Input(format!("--fit {item}: `{b}` is not a number")))?;
                if !(lo.is_finite() && hi.is_finite() && lo < hi && lo >= dlo && hi <= dhi) {
                    return Err(CalibError::Input(format!("--fit {item}: range must satisfy {dlo} ≤ LO < HI ≤ {dhi}")));
                }
                (lo, hi)
            }
        };
        if out.iter().any(|p| p.field == f) {
            return Err(CalibError::Input(format!("--fit {field}: given twice")));
        }
        out.push(FreeParam { field: f, lo, hi });
    }
    if out.is_empty() {
        return Err(CalibError::Input(format!("--fit: no field given (fittable: {})", fittable_names.join(", "))));
    }
    Ok(out)
}

/// The default search range of a field, if it can be fitted.
pub(crate) fn default_param(field: Field) -> Option<FreeParam> {
    field.spec().fit.map(|b| FreeParam { field, lo: b.lo, hi: b.hi })
}

/// Fits `free` on `data` starting from `base`; profile intervals when `intervals` is set, and
/// the 95% likelihood region (for prediction bands and calibrated verdicts) when `region` is set.
pub fn calibrate(
    data: &Dataset,
    base: &Scenario,
    free: Vec<FreeParam>,
    model: &dyn RecallModel,
    intervals: bool,
    region: bool,
) -> Result<FitResult, CalibError> {
    let problem = Problem::new(data, base, free, model)?;
    fit::fit(&problem, intervals, region)
}

/// Runs a whole calibration: fit with profile intervals, the likelihood region when predictions
/// are asked for, hypotheses when `compare` is set, and the predictions.
pub fn run_calibration(
    data: &Dataset,
    base: &Scenario,
    free: Vec<FreeParam>,
    model: &dyn RecallModel,
    compare: bool,
    predict: &[crate::sweep::Axis],
    engine_description: impl Fn() -> String,
) -> Result<report::CalibrationReport, CalibError> {
    let t0 = std::time::Instant::now();
    let base = &answer_scenario(data, base);
    let problem = Problem::new(data, base, free.clone(), model)?;
    let fit = fit::fit(&problem, true, !predict.is_empty())?;
    let predictions = if predict.is_empty() { Vec::new() } else { predict_grid(&problem, &fit, base, predict)? };
    let hypotheses = if compare { Some(compare_hypotheses(data, base, &free, model)?) } else { None };
    let checks = Some(row_checks(data, base, model)?);
    Ok(report::CalibrationReport {
        data: data.clone(),
        base: base.clone(),
        free,
        engine: engine_description(),
        fit,
        hypotheses,
        checks,
        predictions,
        elapsed_s: t0.elapsed().as_secs_f64(),
    })
}

/// The scenario whose answer-level recall predictions and verdicts describe: `base`, and for
/// selection data (captured per-layer selections) with its selecting layers set to the number of
/// captured indexer layers (the stack's other layers kept), the readout as given.
pub(crate) fn answer_scenario(data: &Dataset, base: &Scenario) -> Scenario {
    let mut s = base.clone();
    if let Some(c) = data.rows.first().and_then(|r| r.layer_counts.as_ref()) {
        s.set_selecting_layers((c.len() - 1) as u32);
    }
    s
}

/// The scenarios at the estimate (first) and at every point of the fit's 95% likelihood region:
/// the inputs of a calibrated verdict.
pub(crate) fn fitted_scenarios(
    data: &Dataset,
    base: &Scenario,
    report: &report::CalibrationReport,
    model: &dyn RecallModel,
) -> Result<Vec<Scenario>, CalibError> {
    let base = &answer_scenario(data, base);
    let problem = Problem::new(data, base, report.free.clone(), model)?;
    let mut out = vec![problem.with_theta(base, &report.fit.theta)?];
    for th in &report.fit.region {
        out.push(problem.with_theta(base, th)?);
    }
    Ok(out)
}
