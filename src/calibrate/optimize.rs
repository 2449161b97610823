//! Bounded minimisation for the likelihood fits: a Nelder–Mead simplex with projection onto the
//! box, started from the best points of a deterministic screening design, restarted until a
//! fresh simplex no longer improves.
//!
//! Why this method and not a gradient one (or the `argmin` crate): the objective is a binomial
//! deviance whose recall comes from quadrature (smooth but without analytic gradients) or from
//! common-random-number Monte Carlo (piecewise constant: gradients are zero almost everywhere).
//! Derivative-free simplex search handles both; projection keeps every evaluated point inside the
//! bounds, so boundary optima (score_noise = 0, p_read = 1) are reached exactly rather than
//! approached through a logit transform; the screening design and the restarts guard against the
//! simplex collapsing on a boundary or stopping in a poor local optimum. The problems have 1–4
//! parameters, where Nelder–Mead is reliable, and no extra dependency is compiled.

/// Result of a minimisation.
#[derive(Debug, Clone, PartialEq)]
pub struct Minimum {
    /// Arg-min found.
    pub x: Vec<f64>,
    /// Objective there.
    pub fx: f64,
    /// Objective evaluations used.
    pub evals: usize,
}

/// Options of [`nelder_mead`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct NmOptions {
    /// Stop when the simplex's objective values span less than this.
    pub ftol: f64,
    /// ... and its vertices lie within this fraction of the box width of the best one.
    pub xtol: f64,
    /// Evaluation budget (restarts included).
    pub max_evals: usize,
}

impl Default for NmOptions {
    fn default() -> Self {
        NmOptions { ftol: 1e-6, xtol: 1e-5, max_evals: 600 }
    }
}

fn clamp_into(x: &mut [f64], lo: &[f64], hi: &[f64]) {
    for i in 0..x.len() {
        x[i] = x[i].clamp(lo[i], hi[i]);
    }
}

/// Minimises `f` over the box `[lo, hi]` from `x0` with initial steps `step` (per coordinate; a
/// step that would leave the box is reflected inward). Non-finite objective values count as +∞.
pub fn nelder_mead(
    f: &mut dyn FnMut(&[f64]) -> f64,
    x0: &[f64],
    step: &[f64],
    lo: &[f64],
    hi: &[f64],
    opts: NmOptions,
) -> Minimum {
    let n = x0.len();
    let mut evals = 0usize;
    let mut eval = |x: &[f64], evals: &mut usize| {
        *evals += 1;
        let v = f(x);
        if v.is_nan() {
            f64::INFINITY
        } else {
            v
        }
    };
    let mut best_x: Vec<f64> = x0.to_vec();
    clamp_into(&mut best_x, lo, hi);
    if n == 0 {
        let fx = eval(&best_x, &mut evals);
        return Minimum { x: best_x, fx, evals };
    }
    let mut best_f = eval(&best_x, &mut evals);
    let mut scale: Vec<f64> = step.to_vec();
    let width: Vec<f64> = (0..n).map(|i| (hi[i] - lo[i]).max(1e-300)).collect();
    for round in 0..8 {
        // Build a simplex around best_x.
        let mut pts: Vec<Vec<f64>> = vec![best_x.clone()];
        let mut vals: Vec<f64> = vec![best_f];
        for i in 0..n {
            let mut p = best_x.clone();
            let s = scale[i].abs().max(1e-12 * width[i]);
            p[i] = if p[i] + s <= hi[i] { p[i] + s } else { p[i] - s };
            clamp_into(&mut p, lo, hi);
            let v = eval(&p, &mut evals);
            pts.push(p);
            vals.push(v);
        }
        loop {
            // Order.
            let mut idx: Vec<usize> = (0..=n).collect();
            idx.sort_by(|&a, &b| vals[a].total_cmp(&vals[b]));
            pts = idx.iter().map(|&i| pts[i].clone()).collect();
            vals = idx.iter().map(|&i| vals[i]).collect();
            let spread_f = vals[n] - vals[0];
            let spread_x = (1..=n)
                .flat_map(|j| (0..n).map(move |i| (j, i)))
                .map(|(j, i)| (pts[j][i] - pts[0][i]).abs() / width[i])
                .fold(0.0f64, f64::max);
            if (spread_f.is_finite() && spread_f <= opts.ftol && spread_x <= opts.xtol.max(1e-12))
                || spread_x <= 1e-12
                || evals >= opts.max_evals
            {
                break;
            }
            if spread_f.is_finite() && spread_f <= opts.ftol * 1e-3 {
                break;
            }
            let mut centroid = vec![0.0; n];
            for p in &pts[..n] {
                for i in 0..n {
                    centroid[i] += p[i] / n as f64;
                }
            }
            let along = |t: f64| -> Vec<f64> {
                let mut q: Vec<f64> = (0..n).map(|i| centroid[i] + t * (pts[n][i] - centroid[i])).collect();
                clamp_into(&mut q, lo, hi);
                q
            };
            let xr = along(-1.0);
            let fr = eval(&xr, &mut evals);
            if fr < vals[0] {
                let xe = along(-2.0);
                let fe = eval(&xe, &mut evals);
                if fe < fr {
                    pts[n] = xe;
                    vals[n] = fe;
                } else {
                    pts[n] = xr;
                    vals[n] = fr;
                }
            } else if fr < vals[n - 1] {
                pts[n] = xr;
                vals[n] = fr;
            } else {
                let (xc, fc) = if fr < vals[n] {
                    let xc = along(-0.5);
                    let fc = eval(&xc, &mut evals);
                    (xc, fc)
                } else {
                    let xc = along(0.5);
                    let fc = eval(&xc, &mut evals);
                    (xc, fc)
                };
                if fc < vals[n].min(fr) {
                    pts[n] = xc;
                    vals[n] = fc;
                } else {
                    // Shrink towards the best vertex.
                    for j in 1..=n {
                        let mut q: Vec<f64> = (0..n).map(|i| pts[0][i] + 0.5 * (pts[j][i] - pts[0][i])).collect();
                        clamp_into(&mut q, lo, hi);
                        vals[j] = eval(&q, &mut evals);
                        pts[j] = q;
                    }
                }
            }
        }
        let (bi, bv) = vals.iter().enumerate().min_by(|a, b| a.1.total_cmp(b.1)).map(|(i, v)| (i, *v)).unwrap();
        let improved = best_f - bv;
        if bv <= best_f {
            best_f = bv;
            best_x = pts[bi].clone();
        }
        if evals >= opts.max_evals || (round > 0 && !(improved > opts.ftol)) {
            break;
        }
        // Restart with a smaller fresh simplex: guards against collapse on a bound.
        for s in scale.iter_mut() {
            *s *= 0.5;
        }
    }
    Minimum { x: best_x, fx: best_f, evals }
}

/// Screening points over the box: a full grid for up to 4 parameters, a Halton design beyond.
pub fn screening_design(lo: &[f64], hi: &[f64]) -> Vec<Vec<f64>> {
    let n = lo.len();
    let fracs: &[f64] = match n {
        0 => return vec![vec![]],
        1 => &[0.05, 0.2, 0.35, 0.5, 0.65, 0.8, 0.95],
        2 => &[0.1, 0.3, 0.5, 0.7, 0.9],
        _ => &[0.2, 0.5, 0.8],
    };
    if n <= 4 {
        let m = fracs.len();
        let total = m.pow(n as u32);
        (0..total)
            .map(|mut code| {
                (0..n)
                    .map(|i| {
                        let f = fracs[code % m];
                        code /= m;
                        lo[i] + f * (hi[i] - lo[i])
                    })
                    .collect()
            })
            .collect()
    } else {
        const PRIMES: [u64; 12] = [2, 3, 5, 7, 11, 13, 17, 19, 23, 29, 31, 37];
        (1..=60u64)
            .map(|k| {
                (0..n)
                    .map(|i| {
                        let b = PRIMES[i % PRIMES.len()];
                        let (mut x, mut f, mut kk) = (0.0, 1.0 / b as f64, k);
                        while kk > 0 {
                            x += f * (kk % b) as f64;
                            kk /= b;
                            f /= b as f64;
                        }
                        lo[i] + x * (hi[i] - lo[i])
                    })
                    .collect()
            })
            .collect()
    }
}

/// Global bounded minimisation: screen the design (plus `extra` starting points), run
/// [`nelder_mead`] from the best `starts` distinct screening points, keep the best.
pub fn minimize_bounded(
    f: &mut dyn FnMut(&[f64]) -> f64,
    lo: &[f64],
    hi: &[f64],
    extra: &[Vec<f64>],
    starts: usize,
    opts: NmOptions,
) -> Minimum {
    let n = lo.len();
    let mut cand: Vec<(f64, Vec<f64>)> = Vec::new();
    let mut evals = 0;
    for mut x in screening_design(lo, hi).into_iter().chain(extra.iter().cloned()) {
        clamp_into(&mut x, lo, hi);
        let v = f(&x);
        evals += 1;
        cand.push((if v.is_nan() { f64::INFINITY } else { v }, x));
    }
    cand.sort_by(|a, b| a.0.total_cmp(&b.0));
    let step: Vec<f64> = (0..n).map(|i| 0.15 * (hi[i] - lo[i])).collect();
    let mut chosen: Vec<Vec<f64>> = Vec::new();
    for (_, x) in &cand {
        let distinct = chosen.iter().all(|c| {
            (0..n).any(|i| (c[i] - x[i]).abs() > 0.2 * (hi[i] - lo[i]))
        });
        if distinct {
            chosen.push(x.clone());
        }
        if chosen.len() >= starts.max(1) {
            break;
        }
    }
    let mut best: Option<Minimum> = None;
    for x0 in chosen {
        let m = nelder_mead(f, &x0, &step, lo, hi, opts);
        evals += m.evals;
        if best.as_ref().is_none_or(|b| m.fx < b.fx) {
            best = Some(m);
        }
    }
    let mut best = best.unwrap_or(Minimum { x: vec![], fx: f64::INFINITY, evals: 0 });
    best.evals = evals;
    best
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rosenbrock_and_bounds() {
        let mut f = |x: &[f64]| (1.0 - x[0]).powi(2) + 100.0 * (x[1] - x[0] * x[0]).powi(2);
        let m = minimize_bounded(&mut f, &[-2.0, -2.0], &[2.0, 2.0], &[], 2, NmOptions { max_evals: 3000, ftol: 1e-12, xtol: 1e-9 });
        assert!((m.x[0] - 1.0).abs() < 1e-3 && (m.x[1] - 1.0).abs() < 1e-3, "{m:?}");
        // Optimum outside the box: lands exactly on the bound.
        let mut g = |x: &[f64]| (x[0] + 3.0).powi(2) + (x[1] - 0.5).powi(2);
        let m = minimize_bounded(&mut g, &[0.0, 0.0], &[1.0, 1.0], &[], 2, NmOptions::default());
        assert_eq!(m.x[0], 0.0);
        assert!((m.x[1] - 0.5).abs() < 1e-3, "{m:?}");
        let mut h = |x: &[f64]| (x[0] - 0.3).abs();
        let m = minimize_bounded(&mut h, &[0.0], &[1.0], &[], 1, NmOptions::default());
        assert!((m.x[0] - 0.3).abs() < 1e-4, "{m:?}");
    }
}

/// One-dimensional bounded minimisation from a warm start `x0` (the inner problem of a
/// two-parameter profile): successive parabolic interpolation through three points spaced `h`
/// apart, expanding the step while the minimum is not bracketed, and stopping when the parabola
/// predicts less than `ftol` further improvement. Warm-started along a smooth profile path it
/// needs a handful of evaluations.
pub fn min_1d(f: &mut dyn FnMut(f64) -> f64, x0: f64, h0: f64, lo: f64, hi: f64, ftol: f64, max_evals: usize) -> Minimum {
    let mut evals = 0usize;
    let mut ev = |x: f64, evals: &mut usize| {
        *evals += 1;
        let v = f(x);
        if v.is_nan() {
            f64::INFINITY
        } else {
            v
        }
    };
    let width = (hi - lo).max(1e-300);
    let mut x = x0.clamp(lo, hi);
    let mut fx = ev(x, &mut evals);
    let mut h = h0.abs().max(1e-9 * width).min(0.5 * width);
    while evals < max_evals {
        let a = (x - h).max(lo);
        let b = (x + h).min(hi);
        let fa = if a < x { ev(a, &mut evals) } else { f64::INFINITY };
        let fb = if b > x { ev(b, &mut evals) } else { f64::INFINITY };
        if fa < fx || fb < fx {
            // Not bracketed: move downhill and widen.
            if fa < fb {
                x = a;
                fx = fa;
            } else {
                x = b;
                fx = fb;
            }
            h *= 2.0;
            continue;
        }
        if !fa.is_finite() && !fb.is_finite() {
            break;
        }
        // x is the best of three points: parabola through them (one side may be a bound).
        let (pa, pb) = (if fa.is_finite() { Some((a, fa)) } else { None }, if fb.is_finite() { Some((b, fb)) } else { None });
        let (x1, f1, x3, f3) = match (pa, pb) {
            (Some((a, fa)), Some((b, fb))) => (a, fa, b, fb),
            // At a bound with the interior side uphill: the bound is the minimum to within h.
            _ => {
                if h <= 1e-6 * width {
                    break;
                }
                h *= 0.25;
                continue;
            }
        };
        let d1 = (fx - f1) / (x - x1);
        let d2 = (f3 - fx) / (x3 - x);
        let curv = (d2 - d1) / (x3 - x1) * 2.0;
        if !(curv > 0.0) {
            h *= 0.5;
            if h <= 1e-6 * width {
                break;
            }
            continue;
        }
        // Vertex of the interpolating parabola.
        let xv = (x - (d1 * (x3 - x) + d2 * (x - x1)) / (x3 - x1) / curv).clamp(x1, x3);
        let predicted = 0.5 * curv * (xv - x) * (xv - x);
        if predicted < ftol {
            break;
        }
        let fv = ev(xv, &mut evals);
        let moved = (xv - x).abs();
        if fv < fx {
            x = xv;
            fx = fv;
        }
        h = (2.0 * moved).clamp(1e-6 * width, h);
        if moved < 1e-7 * width {
            break;
        }
    }
    Minimum { x: vec![x], fx, evals }
}

#[cfg(test)]
mod tests_1d {
    use super::*;

    #[test]
    fn parabolic_search() {
        let mut n = 0;
        let mut f = |x: f64| {
            n += 1;
            (x - 0.37).powi(2) * 3.0 + 0.1 * (x - 0.37).powi(4)
        };
        let m = min_1d(&mut f, 0.2, 0.02, -5.0, 5.0, 1e-9, 100);
        assert!((m.x[0] - 0.37).abs() < 1e-4, "{m:?}");
        assert!(m.evals < 30, "{m:?}");
        let mut g = |x: f64| (x + 2.0).powi(2);
        let m = min_1d(&mut g, 0.5, 0.1, 0.0, 1.0, 1e-9, 100);
        assert!(m.x[0] < 1e-5, "{m:?}");
    }
}
