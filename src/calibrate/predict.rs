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

/// Parses `--predict` arguments (and calibration experiments' `curves`), each a sweep axis
/// `FIELD=V1,V2,…` or a range (`A..B:xF`, `A..B:N`, `A..B:+S`, see [`Axis::parse`]); a field
/// may be given once.
pub(crate) fn parse_predict_specs(args: &[String]) -> Result<Vec<Axis>, CalibError> {
    let mut out: Vec<Axis> = Vec::new();
    for a in args {
        let axis = Axis::parse(a).map_err(|e| CalibError::Input(format!("--predict {a}: {e}")))?;
        if out.iter().any(|p| p.field == axis.field) {
            return Err(CalibError::Input(format!("--predict {}: given twice", axis.field)));
        }
        out.push(axis);
    }
    let points = out.iter().try_fold(1usize, |n, a| n.checked_mul(a.values.len()));
    match points {
        Some(n) if n <= MAX_PREDICT_POINTS => Ok(out),
        _ => Err(CalibError::Input(format!(
            "--predict: the what-if grid has {} points (at most {MAX_PREDICT_POINTS}: each is a model evaluation per point of the fit's likelihood region)",
            points.map_or("more than 2^64".to_string(), |n| n.to_string())
        ))),
    }
}

/// Most points a what-if grid may have (every point costs one model evaluation per point of
/// the fit's 95% region, dozens to hundreds).
pub(crate) const MAX_PREDICT_POINTS: usize = 100_000;

/// Every grid point of the specs (cartesian product, first spec varying slowest), as the
/// index of each spec's value.
pub(crate) fn grid_points(specs: &[Axis]) -> Vec<Vec<usize>> {
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
pub(crate) fn point_scenario(
    problem: &Problem,
    base: &Scenario,
    theta: &[f64],
    specs: &[Axis],
    point: &[usize],
) -> Result<Scenario, CalibError> {
    let mut s = base.clone();
    for (p, &v) in problem.free.iter().zip(theta) {
        super::likelihood::set_field(&mut s, p.field, v)?;
    }
    at_point(s, specs, point)
}

/// `s` with the what-if grid's `point` (one value index per axis) substituted, validated; an
/// invalid point is refused naming its values.
pub(crate) fn at_point(mut s: Scenario, specs: &[Axis], point: &[usize]) -> Result<Scenario, CalibError> {
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
    specs: &[Axis],
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
