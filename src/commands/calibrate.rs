//! `calibrate`: the scenario's fields fitted to a measured table.

use super::table::read;
use super::{CommandError, Evaluations, FitEngineSpec, ScenarioSpec};
use crate::calibrate::report::CalibrationReport;
use crate::calibrate::{parse_fit_spec, parse_predict_specs, run_calibration};
use crate::engine::RecallModel;
use std::path::Path;

/// What `calibrate` asks for besides the scenario and the engine.
#[derive(Debug, Clone, Default)]
pub struct CalibrateRequest<'a> {
    /// The measured table (`--data`).
    pub data: Option<&'a Path>,
    /// The fields to fit, `FIELD[=LO:HI],…` (`--fit`).
    pub fit: Option<&'a str>,
    /// Also fit and rank the named hypotheses (`--compare`).
    pub compare: bool,
    /// What-if axes, `FIELD=V1,V2,…` each (`--predict`).
    pub predict: &'a [String],
    /// Captured indexer scores (`--scores FILE.npz`): their distractor law replaces the
    /// scenario's own in every evaluation ([`crate::import::scores::EmpiricalModel`]).
    pub scores: Option<&'a Path>,
}

/// Fits the scenario's fields to the measured table: the report `calibrate` prints
/// (`CalibrationReport::to_json`, `CalibrationReport::to_text`).
pub fn calibrate(
    spec: &ScenarioSpec,
    engine: &FitEngineSpec,
    req: &CalibrateRequest,
    observe: Evaluations,
) -> Result<CalibrationReport, CommandError> {
    let data_path =
        req.data.ok_or_else(|| CommandError::input("--data FILE.csv is required (or --experiment FILE.toml)"))?;
    let fit = req.fit.ok_or_else(|| CommandError::input("--fit FIELD,… is required (for example --fit dprime)"))?;
    let base = spec.resolve()?;
    let model = engine.model()?;
    let (data, base) = read(spec, engine, base, &[data_path])?;
    let model = model.expecting_topks(data.topks_asked(None));
    let free = parse_fit_spec(fit, Some(&data))?;
    let specs = parse_predict_specs(req.predict)?;
    if let Some(path) = req.scores {
        let capture = crate::import::scores::read_file(path)?;
        let law = crate::import::scores::EmpiricalLaw::new(&capture, &path.display().to_string())?;
        let emp = crate::import::scores::EmpiricalModel::new(law);
        let report = engine.in_pool(|| {
            let cached = crate::calibrate::cache::CachedModel::new(&emp).with_observer(observe);
            run_calibration(&data, &base, free, &cached, req.compare, &specs, || emp.describe())
        })??;
        return Ok(report);
    }
    let report = engine.in_pool_cached(&model, observe, |cached| {
        run_calibration(&data, &base, free, cached, req.compare, &specs, || model.describe())
    })??;
    Ok(report)
}
