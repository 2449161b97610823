//! What-if predictions: the user's scenario with the fitted parameters substituted, each grid
//! point changing only the named fields. The 95% band of a prediction is its profile-likelihood
//! interval: the range of the predicted recall over the 95% likelihood-ratio region of the fit
//! (see [`super::fit::likelihood_region`]), not a bootstrap.

use super::fit::FitResult;
use super::likelihood::Problem;
use super::CalibError;
use crate::scenario::Scenario;

/// One `--predict FIELD=V1,V2,…` axis.
#[derive(Debug, Clone, PartialEq)]
pub struct PredictSpec {
    /// Field name.
    pub field: String,
    /// Values, as given.
    pub values: Vec<String>,
}

/// One predicted point.
#[derive(Debug, Clone, PartialEq)]
pub struct Prediction {
    /// The grid point: (field, value) pairs.
    pub point: Vec<(String, String)>,
    /// Recall at the estimate.
    pub recall: f64,
    /// 95% band, lower end.
    pub ci_low: f64,
    /// 95% band, upper end.
    pub ci_high: f64,
}

/// Parses `--predict` arguments; each value is checked by setting it on `base`.
pub fn parse_predict_specs(args: &[String], base: &Scenario) -> Result<Vec<PredictSpec>, CalibError> {
    let mut out: Vec<PredictSpec> = Vec::new();
    for a in args {
        let (f, vals) = a
            .split_once('=')
            .ok_or_else(|| CalibError::Input(format!("--predict {a}: expected FIELD=V1,V2,…")))?;
        let field = f.trim().replace('-', "_");
        let values: Vec<String> = vals.split(',').map(|v| v.trim().to_string()).filter(|v| !v.is_empty()).collect();
        if values.is_empty() {
            return Err(CalibError::Input(format!("--predict {a}: no values after `=`")));
        }
        for v in &values {
            let mut s = base.clone();
            s.set(&field, v).map_err(|e| CalibError::Input(format!("--predict: {e}")))?;
        }
        if out.iter().any(|p| p.field == field) {
            return Err(CalibError::Input(format!("--predict {field}: given twice")));
        }
        out.push(PredictSpec { field, values });
    }
    Ok(out)
}

/// Every grid point of the specs (cartesian product, first spec varying slowest).
pub fn grid_points(specs: &[PredictSpec]) -> Vec<Vec<(String, String)>> {
    let mut pts: Vec<Vec<(String, String)>> = vec![vec![]];
    for s in specs {
        pts = pts
            .into_iter()
            .flat_map(|p| {
                s.values.iter().map(move |v| {
                    let mut q = p.clone();
                    q.push((s.field.clone(), v.clone()));
                    q
                })
            })
            .collect();
    }
    pts
}

/// The scenario at parameters `theta` and grid point `point`.
pub fn point_scenario(
    problem: &Problem,
    base: &Scenario,
    theta: &[f64],
    point: &[(String, String)],
) -> Result<Scenario, CalibError> {
    let mut s = base.clone();
    for (p, &v) in problem.free.iter().zip(theta) {
        super::likelihood::set_field(&mut s, &p.field, v)?;
    }
    for (f, v) in point {
        s.set(f, v)?;
    }
    s.validate().map_err(|e| {
        let at: Vec<String> = point.iter().map(|(f, v)| format!("{f}={v}")).collect();
        CalibError::Input(format!("--predict {}: {e}", at.join(" ")))
    })?;
    Ok(s)
}

/// Predicted recall with 95% bands at every grid point.
pub fn predict_grid(
    problem: &Problem,
    fit: &FitResult,
    base: &Scenario,
    specs: &[PredictSpec],
) -> Result<Vec<Prediction>, CalibError> {
    use rayon::prelude::*;
    let points = grid_points(specs);
    points
        .par_iter()
        .map(|pt| {
            let s = point_scenario(problem, base, &fit.theta, pt)?;
            let recall = problem.model.recall(&s).map_err(CalibError::Model)?;
            let (mut lo, mut hi) = (recall, recall);
            for th in &fit.region {
                let s = point_scenario(problem, base, th, pt)?;
                let r = problem.model.recall(&s).map_err(CalibError::Model)?;
                lo = lo.min(r);
                hi = hi.max(r);
            }
            Ok(Prediction { point: pt.clone(), recall, ci_low: lo, ci_high: hi })
        })
        .collect()
}
