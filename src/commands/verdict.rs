//! `verdict`: the call on a scenario, on a measured table (diagnosed) or on a calibrated fit.

use super::table::{prepare, setup, Prepared, Setup};
use super::{CommandError, Evaluations, FitEngineSpec, ScenarioSpec};
use crate::calibrate::report::CalibrationReport;
use crate::calibrate::Dataset;
use crate::diagnosis::pipeline;
use crate::diagnosis::{CalibratedCall, Diagnosis};
use crate::present::verdict as present;
use crate::scenario::Scenario;
use crate::verdict::Verdict;
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
    if tables.is_empty() {
        let Setup { base, opts, model, .. } = setup(spec, engine, target)?;
        if fit.is_some() {
            return Err(CommandError::input("--fit needs --data FILE.csv: the measured table to fit"));
        }
        let v = engine.in_pool(|| crate::verdict::verdict(&base, &model, opts))??;
        return Ok(VerdictResult::Scenario { verdict: Box::new(v), scenario: Box::new(base) });
    }
    let Prepared { data, base, at, length, model, opts, free } = prepare(spec, engine, target, tables, fit)?;
    match free {
        Some(free) => {
            let (report, call) = engine.in_pool_cached(&model, observe, |m| {
                pipeline::fitted_call(&data, &base, (&at, length), free, m, opts)
            })??;
            Ok(VerdictResult::Calibrated { report: Box::new(report), call: Box::new(call), data })
        }
        None => {
            let d = engine
                .in_pool_cached(&model, observe, |m| pipeline::diagnosed(&data, (&at, length), &[], m, opts))??;
            Ok(VerdictResult::Diagnosed { diagnosis: Box::new(d), data })
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
