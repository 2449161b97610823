//! What-if predictions: the user's scenario with the fitted parameters substituted, each grid
//! point changing only the named fields. The 95% band of a prediction is its profile-likelihood
//! interval: the range of the predicted recall over the 95% likelihood-ratio region of the fit
//! (see [`super::fit::likelihood_region`]), not a bootstrap.
//!
//! A what-if grid is a list of sweep axes ([`crate::sweep::Axis`]): `--predict FIELD=V1,V2,…`
//! takes the sweep's value syntax, ranges included.

use super::fit::FitResult;
use super::likelihood::Problem;
use super::CalibError;
use crate::scenario::{Field, Scenario};
use crate::sweep::Axis;

/// One `--predict FIELD=V1,V2,…` axis: a sweep axis.
pub type PredictSpec = Axis;

/// One predicted point.
#[derive(Debug, Clone, PartialEq)]
pub struct Prediction {
    /// The grid point: (field, value as written) pairs.
    pub point: Vec<(Field, String)>,
    /// Recall at the estimate.
    pub recall: f64,
    /// 95% band, lower end.
    pub ci_low: f64,
    /// 95% band, upper end.
    pub ci_high: f64,
}

/// Parses `--predict` arguments (each a sweep axis); each value is parsed as its field's type.
pub fn parse_predict_specs(args: &[String], _base: &Scenario) -> Result<Vec<PredictSpec>, CalibError> {
    let mut out: Vec<PredictSpec> = Vec::new();
    for a in args {
        let (f, vals) = a
            .split_once('=')
            .ok_or_else(|| CalibError::Input(format!("--predict {a}: expected FIELD=V1,V2,…")))?;
        if vals.split(',').all(|v| v.trim().is_empty()) {
            return Err(CalibError::Input(format!("--predict {a}: no values after `=`")));
        }
        let axis = Axis::from_spec(f, vals).map_err(|e| CalibError::Input(format!("--predict: {e}")))?;
        if out.iter().any(|p| p.field == axis.field) {
            return Err(CalibError::Input(format!("--predict {}: given twice", axis.field)));
        }
        out.push(axis);
    }
    Ok(out)
}

/// Every grid point of the specs (cartesian product, first spec varying slowest), as the
/// index of each spec's value.
pub fn grid_points(specs: &[PredictSpec]) -> Vec<Vec<usize>> {
    let mut pts: Vec<Vec<usize>> = vec![vec![]];
    for s in specs {
        pts = pts
            .into_iter()
            .flat_map(|p| {
                (0..s.values.len()).map(move |i| {
                    let mut q = p.clone();
                    q.push(i);
                    q
                })
            })
            .collect();
    }
    pts
}

/// The scenario at parameters `theta` and grid point `point` (one value index per spec).
pub fn point_scenario(
    problem: &Problem,
    base: &Scenario,
    theta: &[f64],
    specs: &[PredictSpec],
    point: &[usize],
) -> Result<Scenario, CalibError> {
    let mut s = base.clone();
    for (p, &v) in problem.free.iter().zip(theta) {
        super::likelihood::set_field(&mut s, p.field, v)?;
    }
    for (a, &i) in specs.iter().zip(point) {
        s.set(a.field, a.values[i])?;
    }
    s.validate().map_err(|e| {
        let at: Vec<String> = specs.iter().zip(point).map(|(a, &i)| format!("{}={}", a.field, a.texts[i])).collect();
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
            let s = point_scenario(problem, base, &fit.theta, specs, pt)?;
            let recall = problem.model.recall(&s).map_err(CalibError::Model)?;
            let (mut lo, mut hi) = (recall, recall);
            for th in &fit.region {
                let s = point_scenario(problem, base, th, specs, pt)?;
                let r = problem.model.recall(&s).map_err(CalibError::Model)?;
                lo = lo.min(r);
                hi = hi.max(r);
            }
            let point = specs.iter().zip(pt).map(|(a, &i)| (a.field, a.texts[i].clone())).collect();
            Ok(Prediction { point, recall, ci_low: lo, ci_high: hi })
        })
        .collect()
}
