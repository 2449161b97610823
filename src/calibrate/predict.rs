//! What-if predictions: the user's scenario with the fitted parameters substituted, each grid
//! point changing only the named fields. The 95% band of a prediction is its profile-likelihood
//! interval: the range of the predicted recall over the 95% likelihood-ratio region of the fit
//! (see [`super::fit::likelihood_region`]), not a bootstrap.

use super::fit::FitResult;
use super::likelihood::Problem;
use super::CalibError;
use crate::scenario::Scenario;
use crate::sweep::{Axis, Grid};

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

/// Parses `--predict` arguments (and calibration experiments' `curves`), each a sweep axis
/// `FIELD=V1,V2,…` or a range (`A..B:xF`, `A..B:N`, `A..B:+S`, see [`Axis::parse`]); a field
/// may be given once.
pub fn parse_predict_specs(args: &[String]) -> Result<Vec<Axis>, CalibError> {
    let mut out: Vec<Axis> = Vec::new();
    for a in args {
        let axis = Axis::parse(a).map_err(|e| CalibError::Input(format!("--predict {a}: {e}")))?;
        if out.iter().any(|p| p.field == axis.field) {
            return Err(CalibError::Input(format!("--predict {}: given twice", axis.field)));
        }
        out.push(axis);
    }
    Ok(out)
}

/// Every grid point of the axes, as (field, value) pairs, in sweep grid order (the first axis
/// varying slowest).
pub(crate) fn grid_points(axes: &[Axis], base: &Scenario) -> Vec<Vec<(String, String)>> {
    let grid = Grid { base: base.clone(), axes: axes.to_vec(), rank: false };
    (0..grid.len()).map(|i| grid.assignments(i)).collect()
}

/// The scenario at parameters `theta` and grid point `point`.
pub(crate) fn point_scenario(
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
    axes: &[Axis],
) -> Result<Vec<Prediction>, CalibError> {
    use rayon::prelude::*;
    let points = grid_points(axes, base);
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
