//! `verdict`: the call on a scenario, on a measured table (diagnosed) or on a calibrated fit.

use super::table::{check_rows, given_fields, load_all, with_table_facts};
use super::{CommandError, Evaluations, FitEngineSpec, ScenarioSpec};
use crate::calibrate::report::CalibrationReport;
use crate::calibrate::{parse_fit_spec, Dataset};
use crate::diagnosis::pipeline;
use crate::diagnosis::{numbers_scenario, CalibratedCall, Diagnosis};
use crate::present::verdict as present;
use crate::scenario::Scenario;
use crate::verdict::{Verdict, VerdictOptions};
use std::path::Path;

/// What `verdict` found: the call on the scenario alone, on a diagnosed table (`--data`), or on
/// a calibrated fit (`--data --fit`).
#[derive(Debug, Clone)]
pub enum VerdictResult {
    /// The scenario alone.
    Scenario {
        /// The call and its numbers.
        verdict: Box<Verdict>,
        /// The resolved scenario.
        scenario: Box<Scenario>,
    },
    /// A measured table diagnosed (row checks, every hypothesis).
    Diagnosed {
        /// The diagnosis.
        diagnosis: Box<Diagnosis>,
        /// The table.
        data: Dataset,
    },
    /// Fitted fields first, every number with its 95% range.
    Calibrated {
        /// The calibration behind it.
        report: Box<CalibrationReport>,
        /// The verdict at the estimate and over the likelihood region, with the call the
        /// decision rule makes from the fit's signatures.
        call: Box<CalibratedCall>,
        /// The table.
        data: Dataset,
    },
}

/// The call (docs/model.md#verdict): `target` recall; with `data`, the table diagnosed, or with
/// `fit` as well, calibrated first.
pub fn verdict(
    spec: &ScenarioSpec,
    engine: &FitEngineSpec,
    target: f64,
    data: Option<&Path>,
    fit: Option<&str>,
    observe: Evaluations,
) -> Result<VerdictResult, CommandError> {
    let tables: Vec<&Path> = data.into_iter().collect();
    verdict_tables(spec, engine, target, &tables, fit, observe)
}

/// [`verdict`] on several measured tables joined into one (`verdict --data a.csv --data b.csv`:
/// rows in order, condition columns united; `crate::measured::join`).
pub fn verdict_tables(
    spec: &ScenarioSpec,
    engine: &FitEngineSpec,
    target: f64,
    tables: &[&Path],
    fit: Option<&str>,
    observe: Evaluations,
) -> Result<VerdictResult, CommandError> {
    let data = (!tables.is_empty()).then_some(tables);
    let (base, given) = spec.resolve_given()?;
    let opts = VerdictOptions { target, max_topk: base.max_topk };
    opts.validate()?;
    let model = engine.model()?;
    engine.check(&base)?;
    match (data, fit) {
        (Some(paths), Some(fit)) => {
            let data = load_all(paths)?;
            let base = with_table_facts(spec, base, &data)?;
            check_rows(&data, &base, engine)?;
            let free = parse_fit_spec(fit, Some(&data))?;
            let (at, length) = numbers_scenario(&data, &base, given_fields(&given))?;
            let model = model.expecting_topks(data.topks_asked(Some(&at)));
            let (report, call) = engine.in_pool(|| {
                let req = pipeline::FitRequest::default();
                let cached = engine.cached(&model, observe);
                let report = pipeline::fit(&data, &base, free, &cached, req, String::new)?;
                let call = pipeline::call(&data, (&at, length), &report, &cached, opts)?;
                Ok::<_, crate::calibrate::CalibError>((report, call))
            })??;
            Ok(VerdictResult::Calibrated { report: Box::new(report), call: Box::new(call), data })
        }
        (Some(paths), None) => {
            let data = load_all(paths)?;
            let base = with_table_facts(spec, base, &data)?;
            check_rows(&data, &base, engine)?;
            let (at, length) = numbers_scenario(&data, &base, given_fields(&given))?;
            let model = model.expecting_topks(data.topks_asked(Some(&at)));
            let d = engine
                .in_pool(|| pipeline::diagnosed(&data, (&at, length), &[], &engine.cached(&model, observe), opts))??;
            Ok(VerdictResult::Diagnosed { diagnosis: Box::new(d), data })
        }
        (None, Some(_)) => Err(CommandError::input("--fit needs --data FILE.csv: the measured table to fit")),
        (None, None) => {
            let v = engine.in_pool(|| crate::verdict::verdict(&base, &model, opts))??;
            Ok(VerdictResult::Scenario { verdict: Box::new(v), scenario: Box::new(base) })
        }
    }
}

impl VerdictResult {
    /// The `verdict --json` object (docs/cli.md#output).
    pub fn to_json(&self) -> serde_json::Value {
        match self {
            VerdictResult::Scenario { verdict, scenario } => present::verdict_json(verdict, scenario),
            VerdictResult::Diagnosed { diagnosis: d, data } => present::diagnosis_json(d, data),
            VerdictResult::Calibrated { report, call, .. } => present::calibrated_report_json(report, call),
        }
    }

    /// The summary `verdict` prints.
    pub fn to_text(&self) -> String {
        match self {
            VerdictResult::Scenario { verdict, .. } => present::verdict_text(verdict, None),
            VerdictResult::Diagnosed { diagnosis: d, data } => present::diagnosis_text(d, data),
            VerdictResult::Calibrated { report, call, data } => present::calibrated_report_text(report, call, data),
        }
    }
}
