//! Maximum-likelihood fit, 95% profile-likelihood intervals, goodness of fit, and the 95%
//! likelihood-ratio region used to carry the fit's uncertainty into predictions and verdicts.

use super::likelihood::{unit_deviance, Problem};
use super::optimize::{min_1d, minimize_bounded, nelder_mead, NmOptions};
use super::CalibError;
use crate::measured::Observation;
use statrs::distribution::{ChiSquared, ContinuousCDF};
use std::cell::RefCell;

/// Half the 95% quantile of χ²₁: the profile log-likelihood drop that bounds a 95% interval.
pub(crate) const HALF_CHI2_95: f64 = 1.920_729_410_347_062;

/// One fitted parameter.
#[derive(Debug, Clone, PartialEq)]
pub struct ParamEstimate {
    /// The fitted field.
    pub field: crate::scenario::Field,
    /// Maximum-likelihood value.
    pub value: f64,
    /// Lower end of the 95% profile-likelihood interval.
    pub ci_low: f64,
    /// Upper end.
    pub ci_high: f64,
    /// The interval runs into the lower search bound (the data do not exclude it).
    pub low_at_bound: bool,
    /// The interval runs into the upper search bound.
    pub high_at_bound: bool,
    /// False when the profile is flat: the interval spans the whole search range on both sides,
    /// so the data cannot identify this parameter.
    pub identifiable: bool,
    /// The estimate itself sits on an arbitrary search bound (not a physical limit such as
    /// score_noise = 0): the likelihood keeps improving beyond it, typically along a ridge.
    pub value_at_bound: bool,
    /// The search range used.
    pub bounds: (f64, f64),
}

/// Observed against fitted for one row.
#[derive(Debug, Clone, PartialEq)]
pub struct RowFit {
    /// The row.
    pub(crate) obs: Observation,
    /// Model recall at the estimate.
    pub(crate) fitted: f64,
    /// Pearson residual (y − n p) / sqrt(n p (1 − p)); NaN where the model's recall is 0 or 1
    /// and the row disagrees (a selection-independent miss, not a residual).
    pub(crate) pearson: f64,
    /// Signed deviance residual.
    pub(crate) deviance_residual: f64,
}

/// A completed fit.
#[derive(Debug, Clone, PartialEq)]
pub struct FitResult {
    /// Estimates with intervals (intervals equal the value when not computed).
    pub estimates: Vec<ParamEstimate>,
    /// The estimate as a vector.
    pub theta: Vec<f64>,
    /// Maximised log-likelihood (binomial coefficients included).
    pub loglik: f64,
    /// Deviance against the saturated model.
    pub deviance: f64,
    /// Residual degrees of freedom: rows − parameters.
    pub df: i64,
    /// P(χ²_df ≥ deviance); None when df ≤ 0.
    pub gof_p: Option<f64>,
    /// Akaike information criterion −2ℓ + 2p.
    pub aic: f64,
    /// Small-sample AIC (None when n − p − 1 ≤ 0, n = total trials).
    pub aicc: Option<f64>,
    /// Per-row comparison.
    pub rows: Vec<RowFit>,
    /// Points on the boundary of the 95% likelihood-ratio region (empty if not computed).
    pub region: Vec<Vec<f64>>,
    /// Likelihood evaluations used.
    pub evals: usize,
    /// The needle-level overdispersion, when the rows carry needle ids.
    pub overdispersion: Option<Overdispersion>,
}

/// The needle-level overdispersion of a fit on rows that carry needle ids: ρ, the correlation of
/// two trials of one needle (a beta-binomial per row), with its 95% profile interval.
#[derive(Debug, Clone, PartialEq)]
pub struct Overdispersion {
    /// Maximum-likelihood ρ.
    pub rho: f64,
    /// 95% profile-likelihood interval.
    pub ci_low: f64,
    /// 95% profile-likelihood interval.
    pub ci_high: f64,
    /// Mean trials per needle row n̄.
    pub mean_trials: f64,
    /// The variance of a row's hit count against the binomial's: 1 + (n̄ − 1)·ρ (the design
    /// effect; its square root is how much too narrow naive binomial standard errors are).
    pub design_effect: f64,
}

struct Objective<'p, 'a> {
    problem: &'p Problem<'a>,
    error: RefCell<Option<CalibError>>,
    evals: RefCell<usize>,
}

impl<'p, 'a> Objective<'p, 'a> {
    fn new(problem: &'p Problem<'a>) -> Self {
        Objective { problem, error: RefCell::new(None), evals: RefCell::new(0) }
    }
    fn nll(&self, theta: &[f64]) -> f64 {
        *self.evals.borrow_mut() += 1;
        match self.problem.loglik(theta) {
            Ok(l) => -l,
            Err(e) => {
                self.error.borrow_mut().get_or_insert(e);
                f64::INFINITY
            }
        }
    }
    fn check(&self) -> Result<(), CalibError> {
        match self.error.borrow_mut().take() {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }
}

/// Fits the free parameters by maximum likelihood (no intervals yet).
pub(crate) fn fit_mle(problem: &Problem) -> Result<(Vec<f64>, f64, usize), CalibError> {
    let obj = Objective::new(problem);
    let (lo, hi) = problem.bounds();
    let mut start: Vec<f64> =
        problem.free.iter().map(|p| problem.base.number(p.field).unwrap_or(p.lo).clamp(p.lo, p.hi)).collect();
    if problem.overdispersed {
        start.push(super::likelihood::START_OVERDISPERSION);
    }
    let m = minimize_bounded(
        &mut |x: &[f64]| obj.nll(x),
        &lo,
        &hi,
        &[start],
        2,
        NmOptions { ftol: 1e-6, xtol: 1e-4, max_evals: 800 },
    );
    obj.check()?;
    if !m.fx.is_finite() {
        return Err(CalibError::Fit("the likelihood is not finite anywhere in the search box".into()));
    }
    let evals = *obj.evals.borrow();
    Ok((m.x, -m.fx, evals))
}

/// The profile log-likelihood of parameter `j` at value `v`: the others maximised, started from
/// `warm` (updated to the new optimum).
fn profile_at(obj: &Objective, j: usize, v: f64, warm: &mut Vec<f64>) -> f64 {
    let problem = obj.problem;
    let (lo, hi) = problem.bounds();
    let n = problem.dim();
    if n == 1 {
        warm[0] = v;
        return -obj.nll(&[v]);
    }
    let others: Vec<usize> = (0..n).filter(|&i| i != j).collect();
    let lo_o: Vec<f64> = others.iter().map(|&i| lo[i]).collect();
    let hi_o: Vec<f64> = others.iter().map(|&i| hi[i]).collect();
    let x0: Vec<f64> = others.iter().map(|&i| warm[i]).collect();
    let step: Vec<f64> = others.iter().map(|&i| 0.05 * (hi[i] - lo[i])).collect();
    let mut full = warm.clone();
    full[j] = v;
    if others.len() == 1 {
        let i = others[0];
        let mut g = |x: f64| {
            let mut t = full.clone();
            t[i] = x;
            obj.nll(&t)
        };
        let m = min_1d(&mut g, warm[i], 0.02 * (hi[i] - lo[i]), lo[i], hi[i], 1e-5, 60);
        full[i] = m.x[0];
        *warm = full;
        return -m.fx;
    }
    let mut f = |x: &[f64]| {
        let mut t = full.clone();
        for (k, &i) in others.iter().enumerate() {
            t[i] = x[k];
        }
        obj.nll(&t)
    };
    let m = nelder_mead(&mut f, &x0, &step, &lo_o, &hi_o, NmOptions { ftol: 1e-5, xtol: 1e-3, max_evals: 200 });
    for (k, &i) in others.iter().enumerate() {
        full[i] = m.x[k];
    }
    *warm = full;
    -m.fx
}

/// One side of a profile interval: returns (endpoint, reached the bound, full parameter vector at
/// the endpoint).
fn profile_side(obj: &Objective, theta: &[f64], ll_hat: f64, j: usize, sign: f64) -> (f64, bool, Vec<f64>) {
    let (lo, hi) = obj.problem.bounds();
    let range = hi[j] - lo[j];
    let bound = if sign > 0.0 { hi[j] } else { lo[j] };
    let dist = (bound - theta[j]).abs();
    if dist <= 1e-9 * range {
        return (bound, true, theta.to_vec());
    }
    let mut warm = theta.to_vec();
    let mut inner = (0.0f64, 0.0f64, theta.to_vec()); // (distance, drop, point)
    let mut outer: Option<(f64, f64, Vec<f64>)> = None;
    let mut t = (0.05 * range).min(dist);
    for _ in 0..40 {
        let v = theta[j] + sign * t;
        let mut w = if outer.is_some() { inner.2.clone() } else { warm.clone() };
        let ll = profile_at(obj, j, v, &mut w);
        let z = (ll_hat - ll).max(0.0);
        if z >= HALF_CHI2_95 {
            outer = Some((t, z, w.clone()));
        } else {
            inner = (t, z, w.clone());
        }
        warm = w;
        match &outer {
            None => {
                if t >= dist * (1.0 - 1e-12) {
                    return (bound, true, inner.2);
                }
                let grow = if z > 1e-8 { (HALF_CHI2_95 / z).sqrt() * 1.15 } else { 4.0 };
                t = (t * grow.clamp(1.2, 4.0)).min(dist);
            }
            Some((to, zo, po)) => {
                let (ti, zi) = (inner.0, inner.1);
                if (z - HALF_CHI2_95).abs() < 0.02 || (to - ti) < 1e-5 * range {
                    // Interpolate the crossing on sqrt(drop), which is close to linear in the parameter.
                    let (ri, ro) = (zi.sqrt(), zo.sqrt());
                    let tc = if ro > ri { ti + (HALF_CHI2_95.sqrt() - ri) / (ro - ri) * (to - ti) } else { *to };
                    let end = if (z - HALF_CHI2_95).abs() < 0.02 { theta[j] + sign * t } else { theta[j] + sign * tc };
                    let pt = if z >= HALF_CHI2_95 { po.clone() } else { inner.2.clone() };
                    return (end, false, pt);
                }
                let (ri, ro) = (zi.sqrt(), zo.sqrt());
                let mut tn = ti + (HALF_CHI2_95.sqrt() - ri) / (ro - ri) * (to - ti);
                let lo_t = ti + 0.05 * (to - ti);
                let hi_t = to - 0.05 * (to - ti);
                if !(tn.is_finite()) {
                    tn = 0.5 * (ti + to);
                }
                t = tn.clamp(lo_t, hi_t);
            }
        }
    }
    let (to, _, po) = outer.unwrap_or((inner.0, inner.1, inner.2.clone()));
    (theta[j] + sign * 0.5 * (inner.0 + to), false, po)
}

/// 95% profile-likelihood interval of parameter `j`, and the two parameter vectors at its ends.
pub(crate) fn profile_interval(
    problem: &Problem,
    theta: &[f64],
    ll_hat: f64,
    j: usize,
) -> Result<(ParamEstimate, [Vec<f64>; 2], usize), CalibError> {
    let obj = Objective::new(problem);
    let (low, low_b, p_low) = profile_side(&obj, theta, ll_hat, j, -1.0);
    let (high, high_b, p_high) = profile_side(&obj, theta, ll_hat, j, 1.0);
    obj.check()?;
    let p = &problem.free[j];
    let est = ParamEstimate {
        field: p.field,
        value: theta[j],
        ci_low: low.min(theta[j]),
        ci_high: high.max(theta[j]),
        low_at_bound: low_b && theta[j] > p.lo + 1e-9 * (p.hi - p.lo),
        high_at_bound: high_b && theta[j] < p.hi - 1e-9 * (p.hi - p.lo),
        identifiable: !(low_b && high_b),
        value_at_bound: at_search_bound(p, theta[j]),
        bounds: (p.lo, p.hi),
    };
    let evals = *obj.evals.borrow();
    Ok((est, [p_low, p_high], evals))
}

/// Deterministic directions on the unit sphere in `n` dimensions: ±axes, plus ±e_i ± e_j
/// diagonals (n ≥ 2), plus, in 2-D, the 16 points of the circle.
fn directions(n: usize) -> Vec<Vec<f64>> {
    let mut out = Vec::new();
    if n == 2 {
        for k in 0..16 {
            let a = k as f64 * std::f64::consts::PI / 8.0;
            out.push(vec![a.cos(), a.sin()]);
        }
        return out;
    }
    for i in 0..n {
        for s in [-1.0, 1.0] {
            let mut d = vec![0.0; n];
            d[i] = s;
            out.push(d);
        }
    }
    let h = std::f64::consts::FRAC_1_SQRT_2;
    for i in 0..n {
        for j in i + 1..n {
            for (si, sj) in [(1.0, 1.0), (1.0, -1.0), (-1.0, 1.0), (-1.0, -1.0)] {
                let mut d = vec![0.0; n];
                d[i] = si * h;
                d[j] = sj * h;
                out.push(d);
            }
        }
    }
    out
}

/// Points on the boundary of the 95% likelihood-ratio region {θ : 2(ℓ̂ − ℓ(θ)) ≤ χ²₁,0.95}
/// (clipped to the search box). The range of any prediction g(θ) over this region is the
/// profile-likelihood 95% interval of g; the region is traced along fixed directions from the
/// estimate in coordinates scaled by each parameter's profile interval, and the profile
/// interval endpoints (which lie on the boundary) are added.
pub(crate) fn likelihood_region(
    problem: &Problem,
    theta: &[f64],
    ll_hat: f64,
    spans: &[(f64, f64, f64)],
    endpoints: &[Vec<f64>],
) -> Result<(Vec<Vec<f64>>, usize), CalibError> {
    let n = theta.len();
    let mut pts: Vec<Vec<f64>> = endpoints.to_vec();
    if n < 2 {
        return Ok((pts, 0));
    }
    let obj = Objective::new(problem);
    let (lo, hi) = problem.bounds();
    for u in directions(n) {
        // Displacement per unit radius.
        let dvec: Vec<f64> = (0..n)
            .map(|i| {
                let (value, ci_low, ci_high) = spans[i];
                let w = if u[i] >= 0.0 { ci_high - value } else { value - ci_low };
                let w = if w > 0.0 { w } else { 1e-3 * (hi[i] - lo[i]) };
                u[i] * w
            })
            .collect();
        let r_max = (0..n)
            .filter(|&i| dvec[i].abs() > 0.0)
            .map(|i| if dvec[i] > 0.0 { (hi[i] - theta[i]) / dvec[i] } else { (lo[i] - theta[i]) / dvec[i] })
            .fold(f64::INFINITY, f64::min)
            .max(0.0);
        if !(r_max > 0.0) || !r_max.is_finite() {
            continue;
        }
        let at = |r: f64| -> Vec<f64> { (0..n).map(|i| (theta[i] + r * dvec[i]).clamp(lo[i], hi[i])).collect() };
        let drop = |r: f64| (ll_hat + obj.nll(&at(r))).max(0.0);
        let (mut ri, mut zi) = (0.0f64, 0.0f64);
        let mut r = 1.0f64.min(r_max);
        let mut outer: Option<(f64, f64)> = None;
        let mut found = None;
        for _ in 0..25 {
            let z = drop(r);
            if z >= HALF_CHI2_95 {
                outer = Some((r, z));
            } else {
                ri = r;
                zi = z;
            }
            match outer {
                None => {
                    if r >= r_max * (1.0 - 1e-12) {
                        found = Some(r_max);
                        break;
                    }
                    let grow = if z > 1e-8 { (HALF_CHI2_95 / z).sqrt() * 1.1 } else { 3.0 };
                    r = (r * grow.clamp(1.2, 3.0)).min(r_max);
                }
                Some((ro, zo)) => {
                    if (z - HALF_CHI2_95).abs() < 0.02 || ro - ri < 1e-4 {
                        found = Some(if z >= HALF_CHI2_95 && (z - HALF_CHI2_95).abs() < 0.02 { r } else { ri });
                        break;
                    }
                    let (a, b) = (zi.sqrt(), zo.sqrt());
                    let rn = ri + (HALF_CHI2_95.sqrt() - a) / (b - a) * (ro - ri);
                    let rn = if rn.is_finite() { rn } else { 0.5 * (ri + ro) };
                    r = rn.clamp(ri + 0.05 * (ro - ri), ro - 0.05 * (ro - ri));
                }
            }
        }
        pts.push(at(found.unwrap_or(ri)));
    }
    obj.check()?;
    let evals = *obj.evals.borrow();
    Ok((pts, evals))
}

/// Goodness of fit and per-row residuals at `theta`.
pub(crate) fn row_fits(problem: &Problem, theta: &[f64]) -> Result<(Vec<RowFit>, f64), CalibError> {
    let fitted = problem.fitted(theta)?;
    let mut dev = 0.0;
    let rows = problem
        .data
        .rows
        .iter()
        .zip(fitted)
        .map(|(r, p)| {
            let d = unit_deviance(r.hits, r.trials, p);
            dev += d;
            let n = r.trials as f64;
            let y = r.hits as f64;
            let pc = p.clamp(1e-12, 1.0 - 1e-12);
            // Where the model is certain (recall 0 or 1: every candidate selected, or the needle
            // in no entry) and the row disagrees, the Pearson residual is no number: those misses
            // are selection-independent (the row checks say so), not a ranking residual.
            let certain = p >= 1.0 - 1e-9 || p <= 1e-9;
            let pearson =
                if certain && (y - n * p).abs() > 0.5 { f64::NAN } else { (y - n * p) / (n * pc * (1.0 - pc)).sqrt() };
            let sign = if y >= n * p { 1.0 } else { -1.0 };
            RowFit { obs: r.clone(), fitted: p, pearson, deviance_residual: sign * d.sqrt() }
        })
        .collect();
    Ok((rows, dev))
}

/// P(χ²_df ≥ x), None when df ≤ 0.
pub(crate) fn chi2_sf(x: f64, df: i64) -> Option<f64> {
    if df <= 0 {
        return None;
    }
    let c = ChiSquared::new(df as f64).ok()?;
    Some((1.0 - c.cdf(x.max(0.0))).clamp(0.0, 1.0))
}

/// Fits, and when `intervals` is set computes profile intervals and (if `region` is set) the
/// likelihood-ratio region.
pub(crate) fn fit(problem: &Problem, intervals: bool, region: bool) -> Result<FitResult, CalibError> {
    let (mut theta, mut ll, mut evals) = fit_mle(problem)?;
    let mut estimates = Vec::new();
    let mut ends = Vec::new();
    if intervals {
        let mut j = 0;
        let mut refits = 0;
        while j < problem.free.len() {
            let (e, pts, ev) = profile_interval(problem, &theta, ll, j)?;
            evals += ev;
            // A profile that finds a higher likelihood than the "optimum" means the optimiser
            // stopped early: restart from the better point and redo the intervals.
            let better = pts
                .iter()
                .map(|p| (problem.loglik(p).unwrap_or(f64::NEG_INFINITY), p))
                .filter(|(l, _)| *l > ll + 1e-4)
                .max_by(|a, b| a.0.total_cmp(&b.0));
            if let (Some((l, p)), true) = (better, refits < 3) {
                theta = p.clone();
                ll = l;
                let obj_fit = polish(problem, &theta)?;
                if obj_fit.1 > ll {
                    theta = obj_fit.0;
                    ll = obj_fit.1;
                }
                refits += 1;
                estimates.clear();
                ends.clear();
                j = 0;
                continue;
            }
            estimates.push(e);
            ends.extend(pts);
            j += 1;
        }
    } else {
        for (p, &v) in problem.free.iter().zip(&theta) {
            estimates.push(ParamEstimate {
                field: p.field,
                value: v,
                ci_low: v,
                ci_high: v,
                low_at_bound: false,
                high_at_bound: false,
                identifiable: true,
                value_at_bound: at_search_bound(p, v),
                bounds: (p.lo, p.hi),
            });
        }
    }
    let od_mean_trials = {
        let rows: Vec<_> = problem.data.rows.iter().filter(|r| r.needle.is_some()).collect();
        rows.iter().map(|r| r.trials as f64).sum::<f64>() / rows.len().max(1) as f64
    };
    let overdispersion = problem.overdispersed.then(|| {
        let j = problem.free.len();
        let rho = theta[j];
        let (ci_low, ci_high) = if intervals {
            let obj = Objective::new(problem);
            let (low, _, p_low) = profile_side(&obj, &theta, ll, j, -1.0);
            let (high, _, p_high) = profile_side(&obj, &theta, ll, j, 1.0);
            evals += *obj.evals.borrow();
            ends.push(p_low);
            ends.push(p_high);
            (low.min(rho), high.max(rho))
        } else {
            (rho, rho)
        };
        Overdispersion {
            rho,
            ci_low,
            ci_high,
            mean_trials: od_mean_trials,
            design_effect: 1.0 + (od_mean_trials - 1.0).max(0.0) * rho,
        }
    });
    let region_pts = if intervals && region {
        let mut spans: Vec<(f64, f64, f64)> = estimates.iter().map(|e| (e.value, e.ci_low, e.ci_high)).collect();
        if let Some(o) = &overdispersion {
            spans.push((o.rho, o.ci_low, o.ci_high));
        }
        let (pts, ev) = likelihood_region(problem, &theta, ll, &spans, &ends)?;
        evals += ev;
        pts
    } else {
        Vec::new()
    };
    let (rows, binomial_deviance) = row_fits(problem, &theta)?;
    let k = problem.dim() as i64;
    let df = problem.residual_df(problem.dim());
    // Selection data: the deviance of the layers' patterns (the rows' residuals stay those of
    // the any-layer rate).
    let deviance = if problem.data.is_selection() {
        (2.0 * (problem.saturated_loglik() - ll)).max(0.0)
    } else {
        binomial_deviance
    };
    let n_trials = problem.data.total_trials() as f64;
    let aic = -2.0 * ll + 2.0 * k as f64;
    let aicc =
        (n_trials - k as f64 - 1.0 > 0.0).then(|| aic + 2.0 * (k * (k + 1)) as f64 / (n_trials - k as f64 - 1.0));
    Ok(FitResult {
        estimates,
        theta,
        loglik: ll,
        deviance,
        df,
        // With needle-level overdispersion the binomial deviance is inflated by the design
        // effect (quasi-likelihood): the test is of deviance / design effect.
        gof_p: chi2_sf(overdispersion.as_ref().map_or(deviance, |o| deviance / o.design_effect), df),
        aic,
        aicc,
        rows,
        region: region_pts,
        evals,
        overdispersion,
    })
}

fn at_search_bound(p: &super::FreeParam, v: f64) -> bool {
    let eps = 1e-9 * (p.hi - p.lo);
    ((v - p.lo).abs() <= eps || (p.hi - v).abs() <= eps) && !p.field.is_physical_limit(v)
}

fn polish(problem: &Problem, theta: &[f64]) -> Result<(Vec<f64>, f64), CalibError> {
    let obj = Objective::new(problem);
    let (lo, hi) = problem.bounds();
    let step: Vec<f64> = (0..theta.len()).map(|i| 0.05 * (hi[i] - lo[i])).collect();
    let m = nelder_mead(
        &mut |x: &[f64]| obj.nll(x),
        theta,
        &step,
        &lo,
        &hi,
        NmOptions { ftol: 1e-7, xtol: 1e-6, max_evals: 400 },
    );
    obj.check()?;
    Ok((m.x, -m.fx))
}
