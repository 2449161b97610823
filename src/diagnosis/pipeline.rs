//! The one path from a measured table to a call and its numbers, shared by the commands
//! (`verdict --data`, `verdict --data --fit`, `plan`) and the calibration experiments: the
//! numbers' scenario and the model for it ([`numbers`]) first, then the diagnosis
//! ([`diagnosed`]), or the fit with the likelihood region the verdict's ranges need ([`fit`])
//! and the call at the numbers' scenario ([`call`]; both: [`fitted_call`]). What differs
//! between the callers is what they pass (the experiment's curves and its `compare`), never the
//! steps.

use super::{calibrated_call, diagnose, numbers_scenario, CalibratedCall, Diagnosis, GivenFields, NumbersAt};
use crate::calibrate::report::CalibrationReport;
use crate::calibrate::{run_calibration, CalibError, Dataset, FreeParam, Problem};
use crate::engine::{EngineModel, RecallModel};
use crate::scenario::Scenario;
use crate::sweep::Axis;
use crate::verdict::VerdictOptions;

/// The first step: the scenario the numbers on `data` are at (`base` at the table's length and
/// k where the user gave none: [`numbers_scenario`]), where they come from, and `model`
/// expecting every k the table's rows ask at that length (so one replay serves them).
pub(crate) fn numbers(
    data: &Dataset,
    base: &Scenario,
    given: GivenFields,
    model: EngineModel,
) -> Result<(Scenario, NumbersAt, EngineModel), CalibError> {
    let (at, length) = numbers_scenario(data, base, given)?;
    let model = model.expecting_topks(data.topks_asked(Some(&at)));
    Ok((at, length, model))
}

/// `verdict --data`: the table diagnosed at the numbers' scenario `at` (`user_free`: nuisance
/// parameters free in every hypothesis).
pub(crate) fn diagnosed(
    data: &Dataset,
    (at, length): (&Scenario, NumbersAt),
    user_free: &[FreeParam],
    model: &dyn RecallModel,
    opts: VerdictOptions,
) -> Result<Diagnosis, CalibError> {
    Ok(diagnose(data, at, user_free, model, opts)?.numbers_at(length))
}

/// What a calibrated call is asked for besides the table, the scenarios and the model.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct FitRequest<'a> {
    /// Also fit and rank the named hypotheses.
    pub(crate) compare: bool,
    /// What-if axes predicted with their bands.
    pub(crate) predict: &'a [Axis],
}

/// `verdict --data --fit` and a calibration experiment, first step: `free` fitted on `base` (with
/// the hypotheses and predictions `req` asks for) and the fit's 95% likelihood region, refitted
/// with it when the calibration did not need one (the verdict's ranges do).
pub(crate) fn fit(
    data: &Dataset,
    base: &Scenario,
    free: Vec<FreeParam>,
    model: &dyn RecallModel,
    req: FitRequest,
    describe: impl Fn() -> String,
) -> Result<CalibrationReport, CalibError> {
    let mut report = run_calibration(data, base, free, model, req.compare, req.predict, describe)?;
    if report.fit.region.is_empty() {
        let problem = Problem::new(data, base, report.free.clone(), model)?;
        report.fit = crate::calibrate::fit::fit(&problem, true, true)?;
    }
    Ok(report)
}

/// The second step: the call at the numbers' scenario `at` from a [`fit`]'s report (a
/// calibration experiment predicts its curves in between).
pub(crate) fn call(
    data: &Dataset,
    (at, length): (&Scenario, NumbersAt),
    report: &CalibrationReport,
    model: &dyn RecallModel,
    opts: VerdictOptions,
) -> Result<CalibratedCall, CalibError> {
    Ok(calibrated_call(data, at, report, model, opts)?.numbers_at(length))
}

/// `verdict --data --fit`: [`fit`] (no hypotheses compared, nothing predicted), then [`call`].
pub(crate) fn fitted_call(
    data: &Dataset,
    base: &Scenario,
    (at, length): (&Scenario, NumbersAt),
    free: Vec<FreeParam>,
    model: &dyn RecallModel,
    opts: VerdictOptions,
) -> Result<(CalibrationReport, CalibratedCall), CalibError> {
    let report = fit(data, base, free, model, FitRequest::default(), String::new)?;
    let call = call(data, (at, length), &report, model, opts)?;
    Ok((report, call))
}
