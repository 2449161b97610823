//! Bounded minimisation for the likelihood fits: a Nelder–Mead simplex with projection onto the
//! box, started from the best points of a deterministic screening design, restarted until a
//! fresh simplex no longer improves; the best start's minimum polished by Newton's method on
//! finite-difference derivatives.
//!
//! Why these methods and not a gradient one throughout (or the `argmin` crate): the objective
//! is a binomial deviance whose recall comes from quadrature (smooth but without analytic
//! gradients; a count or an effective k rounded to an integer makes some hypotheses' surfaces
//! steps) or from common-random-number Monte Carlo (piecewise constant: gradients are zero
//! almost everywhere). Derivative-free simplex search handles all of them; projection keeps
//! every evaluated point inside the bounds, so boundary optima (score_noise = 0, p_read = 1)
//! are reached exactly rather than approached through a logit transform; the screening design
//! and the restarts guard against the simplex collapsing on a boundary or stopping in a poor
//! local optimum. Near a smooth minimum the simplex is slow (hundreds of evaluations for the
//! last digits of a curved valley) and Newton's method fast, so the simplex runs to a coarse
//! tolerance and Newton finishes; where Newton's quadratic model fails (a step surface) the
//! simplex finishes instead. The problems have 1–5 parameters, and no extra dependency is
//! compiled.

/// Result of a minimisation.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Minimum {
    /// Arg-min found.
    pub(crate) x: Vec<f64>,
    /// Objective there.
    pub(crate) fx: f64,
    /// Objective evaluations used.
    pub(crate) evals: usize,
}

/// Options of [`nelder_mead`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct NmOptions {
    /// Stop when the simplex's objective values span less than this.
    pub(crate) ftol: f64,
    /// ... and its vertices lie within this fraction of the box width of the best one.
    pub(crate) xtol: f64,
    /// Evaluation budget (restarts included).
    pub(crate) max_evals: usize,
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
pub(crate) fn nelder_mead(
    f: &mut dyn FnMut(&[f64]) -> f64,
    x0: &[f64],
    step: &[f64],
    lo: &[f64],
    hi: &[f64],
    opts: NmOptions,
) -> Minimum {
    simplex(f, x0, step, lo, hi, opts, false)
}

/// [`nelder_mead`]; with `settle` a simplex within `opts.xtol` stops whatever its values'
/// spread. For the polish where Newton's method failed near a minimum: a smooth objective
/// varies by less than ftol across so small a simplex there, and one that still varies more is
/// a surface of steps at that scale (a count or a k rounded to an integer, a Monte Carlo
/// estimate), where shrinking the simplex further only walks from step to step.
fn simplex(
    f: &mut dyn FnMut(&[f64]) -> f64,
    x0: &[f64],
    step: &[f64],
    lo: &[f64],
    hi: &[f64],
    opts: NmOptions,
    settle: bool,
) -> Minimum {
    let n = x0.len();
    let mut obj = Counted { f, evals: 0 };
    let mut best_x: Vec<f64> = x0.to_vec();
    clamp_into(&mut best_x, lo, hi);
    if n == 0 {
        let fx = obj.at(&best_x);
        return Minimum { x: best_x, fx, evals: obj.evals };
    }
    let mut best_f = obj.at(&best_x);
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
            let v = obj.at(&p);
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
            if (spread_x <= opts.xtol.max(1e-12) && (settle || (spread_f.is_finite() && spread_f <= opts.ftol)))
                || spread_x <= 1e-12
                || obj.evals >= opts.max_evals
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
            let fr = obj.at(&xr);
            if fr < vals[0] {
                let xe = along(-2.0);
                let fe = obj.at(&xe);
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
                    let fc = obj.at(&xc);
                    (xc, fc)
                } else {
                    let xc = along(0.5);
                    let fc = obj.at(&xc);
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
                        vals[j] = obj.at(&q);
                        pts[j] = q;
                    }
                }
            }
        }
        let (bi, bv) = vals
            .iter()
            .enumerate()
            .min_by(|a, b| a.1.total_cmp(b.1))
            .map(|(i, v)| (i, *v))
            .expect("the simplex has n + 1 ≥ 1 vertices");
        let improved = best_f - bv;
        if bv <= best_f {
            best_f = bv;
            best_x = pts[bi].clone();
        }
        // Restarts go on while they improve by more than ftol; on a surface of steps (`settle`)
        // a restart that gains less than a step's height only moves to a neighbouring step, and
        // a settling simplex that gained less than that from its start (a Newton point) is at
        // its step: restarting it only walks to the next (its first restart gained nothing on
        // the slowest fits traced, at half the evaluations of the settling).
        let worth = if settle { opts.ftol * SETTLE_GAIN } else { opts.ftol };
        if obj.evals >= opts.max_evals || ((round > 0 || settle) && !(improved > worth)) {
            break;
        }
        // Restart with a smaller fresh simplex: guards against collapse on a bound.
        for s in scale.iter_mut() {
            *s *= 0.5;
        }
    }
    Minimum { x: best_x, fx: best_f, evals: obj.evals }
}

/// A settling simplex restarts while a restart gains more than this many ftol.
const SETTLE_GAIN: f64 = 1e3;
/// An objective that counts its evaluations and reads NaN as +∞ (a point where the model is
/// undefined is never a minimum).
struct Counted<'f> {
    f: &'f mut dyn FnMut(&[f64]) -> f64,
    evals: usize,
}

impl Counted<'_> {
    fn at(&mut self, x: &[f64]) -> f64 {
        self.evals += 1;
        let v = (self.f)(x);
        if v.is_nan() {
            f64::INFINITY
        } else {
            v
        }
    }
}

/// Coarse tolerances of [`minimize_bounded`]'s first pass over its starts.
const COARSE_FTOL: f64 = 1e-2;
const COARSE_XTOL: f64 = 3e-2;
/// Starts whose coarse minimum is within this of the best coarse one are polished: twice the
/// coarse tolerance.
const POLISH_MARGIN: f64 = 2.0 * COARSE_FTOL;
/// The polishing simplex's size, as a fraction of the first pass's initial steps.
const POLISH_STEP: f64 = 0.1;

/// Most Newton iterations of [`newton_polish`] (a step-size refinement counts as one).
const NEWTON_ITERS: usize = 10;
/// [`newton_polish`]'s first finite-difference step, as a fraction of the box's width.
const FD_STEP: f64 = 1e-3;
/// The change of the objective a finite-difference step aims at along its coordinate: the step
/// is sqrt(2 · FD_DELTA / H_ii). Small against the objective's changes that matter (ftol, the
/// quadratic region's size), large against its rounding (the quadrature's ~1e-9 relative): the
/// central differences' truncation, f''' h² / 6, then moves the minimum by a negligible amount
/// where the curvature changes on a short scale (layer_corr near 1).
const FD_DELTA: f64 = 1e-4;
/// The most damping [`newton_polish`] may have needed where it stops as converged: its first
/// level, and only with positive curvature measured along every free axis (a Hessian positive
/// definite to within a thousandth of its diagonal). Its negative curvature then lies along a
/// ridge between the axes: a flat direction or finite-difference noise. A zero or negative
/// diagonal is a surface of steps between the stencil's points, where the model says nothing
/// (hard negatives' count: on the probe bench tables that fit's polish never stops here).
const FLAT_DAMPING: f64 = 1e-3;
/// Most a damped Newton step is stretched along a ridge (in doublings, from 2).
const RIDGE_STRETCH: f64 = 16.0;
/// How much [`newton_polish`] grows a coordinate's finite-difference step at a time where the
/// stencil finds a tread of a surface of steps (f exactly unchanged on one side).
const STEP_GROWTH: f64 = 4.0;
/// Most halvings of a Newton step that does not lower the objective.
const BACKTRACKS: usize = 4;

/// Cholesky factorisation of a small symmetric matrix (row-major, n × n) in place: `None` when
/// it is not positive definite. Written here (not a linear-algebra crate) because the systems
/// are at most the fits' 5 × 5 Hessians, solved a few times per fit.
fn cholesky(a: &mut [f64], n: usize) -> Option<()> {
    for j in 0..n {
        let mut d = a[j * n + j];
        for k in 0..j {
            d -= a[j * n + k] * a[j * n + k];
        }
        if !(d > 0.0) {
            return None;
        }
        let d = d.sqrt();
        a[j * n + j] = d;
        for i in j + 1..n {
            let mut v = a[i * n + j];
            for k in 0..j {
                v -= a[i * n + k] * a[j * n + k];
            }
            a[i * n + j] = v / d;
        }
    }
    Some(())
}

/// Solves L Lᵀ x = b for the factor [`cholesky`] left in `l`.
fn cholesky_solve(l: &[f64], n: usize, b: &mut [f64]) {
    for i in 0..n {
        let mut v = b[i];
        for k in 0..i {
            v -= l[i * n + k] * b[k];
        }
        b[i] = v / l[i * n + i];
    }
    for i in (0..n).rev() {
        let mut v = b[i];
        for k in i + 1..n {
            v -= l[k * n + i] * b[k];
        }
        b[i] = v / l[i * n + i];
    }
}

/// Newton's method from `start` with the gradient and Hessian by central differences (each
/// coordinate's step fitted to its curvature, [`FD_DELTA`]; the stencil moved inside the box
/// where the point is near a bound), coordinates at a bound the gradient pushes against held
/// there, the Hessian damped (Levenberg–Marquardt) until positive definite and the step halved
/// until it lowers `f`. Returns the last point accepted and whether the quadratic model
/// predicted less than `opts.ftol` further improvement (converged): near a smooth minimum
/// Newton converges in two or three steps, where a simplex creeps (hundreds of evaluations
/// for the last 1e-3 of a curved valley).
fn newton_polish(
    f: &mut dyn FnMut(&[f64]) -> f64,
    start: Minimum,
    lo: &[f64],
    hi: &[f64],
    opts: NmOptions,
) -> (Minimum, bool) {
    let n = start.x.len();
    let mut obj = Counted { f, evals: 0 };
    let (mut x, mut fx) = (start.x, start.fx);
    let done = |x: Vec<f64>, fx: f64, evals: usize, ok: bool| (Minimum { x, fx, evals }, ok);
    let width: Vec<f64> = (0..n).map(|i| hi[i] - lo[i]).collect();
    if n == 0 || !fx.is_finite() || width.iter().any(|&w| !(w > 0.0 && w.is_finite())) {
        return done(x, fx, 0, false);
    }
    let mut h: Vec<f64> = width.iter().map(|w| FD_STEP * w).collect();
    // Per coordinate, the least step at which the stencil saw f change on both sides: a step
    // refitted to the curvature never goes below it (see STEP_GROWTH).
    let mut least_h = vec![0.0; n];
    let mut hess = vec![0.0; n * n];
    let mut g = vec![0.0; n];
    let (mut fp, mut fm) = (vec![0.0; n], vec![0.0; n]);
    let mut y = x.clone();
    // Evaluations one stencil may take (its centre, 2n along the axes, n(n − 1) across them).
    let stencil = 2 * n * n + 2;
    'iteration: for _ in 0..NEWTON_ITERS {
        if obj.evals + stencil > opts.max_evals {
            return done(x, fx, obj.evals, false);
        }
        // The stencil's centre: x, moved inside the box by a step where it is nearer a bound.
        let c: Vec<f64> = (0..n).map(|i| x[i].clamp(lo[i] + h[i], hi[i] - h[i])).collect();
        let fc = if c == x { fx } else { obj.at(&c) };
        for i in 0..n {
            loop {
                y.copy_from_slice(&c);
                y[i] = c[i] + h[i];
                fp[i] = obj.at(&y);
                y[i] = c[i] - h[i];
                fm[i] = obj.at(&y);
                // f exactly unchanged on a side: a tread of a surface of steps (a count or a k
                // rounded to an integer) spans that side of the stencil, and the differences
                // measure the treads and risers, not the surface (a riser in the stencil reads
                // as a curvature of jump / h², whose fitted step is shorter still). The step
                // grows until both sides see f change, and is not refitted below that: the
                // differences then measure the surface the steps follow.
                let stepped = fp[i] == fc || fm[i] == fc;
                let grown = (h[i] * STEP_GROWTH).min(FD_STEP * width[i]);
                if !stepped || grown <= h[i] || obj.evals + stencil > opts.max_evals {
                    break;
                }
                h[i] = grown;
                least_h[i] = grown;
                if x[i].clamp(lo[i] + h[i], hi[i] - h[i]) != c[i] {
                    // Near a bound the grown step moves the stencil's centre: take it again.
                    continue 'iteration;
                }
            }
            g[i] = (fp[i] - fm[i]) / (2.0 * h[i]);
            hess[i * n + i] = (fp[i] - 2.0 * fc + fm[i]) / (h[i] * h[i]);
        }
        if !(fc.is_finite() && g.iter().chain(&hess).all(|v| v.is_finite())) {
            return done(x, fx, obj.evals, false);
        }
        // A step far from its curvature's scale: refit the steps and take the stencil again.
        let fitted: Vec<f64> = (0..n)
            .map(|i| {
                let d = hess[i * n + i];
                if d > 0.0 {
                    (2.0 * FD_DELTA / d).sqrt().clamp(1e-9 * width[i], FD_STEP * width[i]).max(least_h[i])
                } else {
                    h[i]
                }
            })
            .collect();
        if (0..n).any(|i| fitted[i] < h[i] / 3.0) {
            h = fitted;
            continue;
        }
        for i in 0..n {
            for j in i + 1..n {
                // f(+i+j) + f(−i−j) − f(±i) − f(±j) + 2 f(c) = 2 H_ij h_i h_j + O(h⁴).
                y.copy_from_slice(&c);
                y[i] += h[i];
                y[j] += h[j];
                let fpp = obj.at(&y);
                y[i] = c[i] - h[i];
                y[j] = c[j] - h[j];
                let fmm = obj.at(&y);
                let v = (fpp + fmm - fp[i] - fm[i] - fp[j] - fm[j] + 2.0 * fc) / (2.0 * h[i] * h[j]);
                hess[i * n + j] = v;
                hess[j * n + i] = v;
            }
        }
        if !hess.iter().all(|v| v.is_finite()) {
            return done(x, fx, obj.evals, false);
        }
        // The model's gradient at x (the stencil was centred at c).
        for i in 0..n {
            g[i] += (0..n).map(|j| hess[i * n + j] * (x[j] - c[j])).sum::<f64>();
        }
        let free: Vec<usize> =
            (0..n).filter(|&i| !((x[i] <= lo[i] && g[i] > 0.0) || (x[i] >= hi[i] && g[i] < 0.0))).collect();
        let m = free.len();
        if m == 0 {
            return done(x, fx, obj.evals, true);
        }
        // Newton's step on the free coordinates, damped until the system is positive definite.
        let diag: Vec<f64> = free.iter().map(|&i| hess[i * n + i].abs().max(1e-12 / (h[i] * h[i]))).collect();
        let mut lambda = 0.0;
        let step = loop {
            let mut a: Vec<f64> =
                free.iter().flat_map(|&i| free.iter().map(move |&j| (i, j))).map(|(i, j)| hess[i * n + j]).collect();
            for (k, d) in diag.iter().enumerate() {
                a[k * m + k] += lambda * d;
            }
            if cholesky(&mut a, m).is_some() {
                let mut b: Vec<f64> = free.iter().map(|&i| -g[i]).collect();
                cholesky_solve(&a, m, &mut b);
                break b;
            }
            lambda = if lambda == 0.0 { FLAT_DAMPING } else { lambda * 10.0 };
            if lambda > 1e12 {
                return done(x, fx, obj.evals, false);
            }
        };
        // Curvature measured along every free axis, not the floor `diag` puts under a zero.
        let curved = free.iter().all(|&i| hess[i * n + i] > 0.0);
        // The model's decrease over the free coordinates' full step: ½ gᵀ H⁻¹ g.
        let decrement = -0.5 * free.iter().zip(&step).map(|(&i, s)| g[i] * s).sum::<f64>();
        let mut t = 1.0;
        let mut moved = false;
        for _ in 0..=BACKTRACKS {
            let mut z = x.clone();
            for (k, &i) in free.iter().enumerate() {
                z[i] = (x[i] + t * step[k]).clamp(lo[i], hi[i]);
            }
            let fz = obj.at(&z);
            if t == 1.0 && decrement < opts.ftol && (lambda == 0.0 || (lambda <= FLAT_DAMPING && curved)) {
                // At the model's minimum to within ftol: take the step if it helps, and stop.
                if fz < fx {
                    (x, fx) = (z, fz);
                }
                return done(x, fx, obj.evals, true);
            }
            if fz < fx {
                // The full step fell further than the model said: f flattens less than a
                // quadratic along it (an exponential approach to a plateau, where each Newton
                // step gains a fixed fraction of what is left: hard negatives' ridge).
                let beyond_model = t == 1.0 && fx - fz > decrement;
                (x, fx) = (z.clone(), fz);
                moved = true;
                if t == 1.0 && (lambda > 0.0 || beyond_model) {
                    // The damped step of an indefinite Hessian (a curved ridge) is short, and a
                    // step the model underestimated stops short: go on along it while that keeps
                    // lowering f.
                    let mut t = 2.0;
                    while t <= RIDGE_STRETCH && obj.evals < opts.max_evals {
                        for (k, &i) in free.iter().enumerate() {
                            z[i] = (x[i] + 0.5 * t * step[k]).clamp(lo[i], hi[i]);
                        }
                        let fz = obj.at(&z);
                        if !(fz < fx) {
                            break;
                        }
                        (x, fx) = (z.clone(), fz);
                        t *= 2.0;
                    }
                }
                break;
            }
            t *= 0.5;
        }
        if !moved {
            return done(x, fx, obj.evals, false);
        }
    }
    done(x, fx, obj.evals, false)
}

/// Screening points over the box: a full grid for up to 4 parameters, a Halton design beyond.
pub(crate) fn screening_design(lo: &[f64], hi: &[f64]) -> Vec<Vec<f64>> {
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
pub(crate) fn minimize_bounded(
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
        let distinct = chosen.iter().all(|c| (0..n).any(|i| (c[i] - x[i]).abs() > 0.2 * (hi[i] - lo[i])));
        if distinct {
            chosen.push(x.clone());
        }
        if chosen.len() >= starts.max(1) {
            break;
        }
    }
    // Every start to a coarse tolerance, then those whose coarse minimum is within
    // POLISH_MARGIN of the best polished to `opts` by Newton's method (or, where the objective
    // is not smooth enough for it, the simplex): the simplex spends most of a run creeping the
    // last 1e-2 of a curved valley, which Newton crosses in two or three steps. A start that
    // ended further above the best stopped within about the coarse tolerance of its own
    // minimum, too far to overtake by polishing.
    let coarse =
        NmOptions { ftol: opts.ftol.max(COARSE_FTOL), xtol: opts.xtol.max(COARSE_XTOL), max_evals: opts.max_evals };
    let rough: Vec<Minimum> = chosen
        .iter()
        .map(|x0| {
            let m = nelder_mead(f, x0, &step, lo, hi, coarse);
            evals += m.evals;
            m
        })
        .collect();
    let polish: Vec<f64> = step.iter().map(|s| s * POLISH_STEP).collect();
    let mut best: Option<Minimum> = None;
    let floor = rough.iter().map(|m| m.fx).fold(f64::INFINITY, f64::min);
    // The lowest first. A coarse minimum within the polishing simplex's size (every coordinate)
    // of one whose Newton polish converged is that minimum reached again: the objective is smooth
    // there, and a second polish walks the same last digits (V3.2 `var`'s hard-negatives fit: 358
    // of its 1,398 evaluations). So is one near a minimum whose settling simplex gained nothing.
    // Where Newton failed and the simplex still gained (a surface of steps: an effective k) the
    // nearby one is polished all the same, and finds what the first missed
    // (tests/verdict/error_rates_refit.rs: skipping it there, the rerun procedure's power
    // against an effective-k defect fell from 1 to 0.64).
    let mut rough: Vec<Minimum> = rough.into_iter().filter(|m| m.fx <= floor + POLISH_MARGIN).collect();
    rough.sort_by(|a, b| a.fx.total_cmp(&b.fx));
    // Coarse minima whose neighbourhood a polish has settled (Newton converged, or the settling
    // simplex found nothing better).
    let mut settled: Vec<Vec<f64>> = Vec::new();
    for r in rough {
        if settled.iter().any(|p| (0..n).all(|i| (p[i] - r.x[i]).abs() <= polish[i])) {
            continue;
        }
        let from = r.x.clone();
        let (mut m, converged) = newton_polish(f, r, lo, hi, opts);
        evals += m.evals;
        if converged {
            settled.push(from);
        } else {
            // Not smooth enough for a quadratic model there (a Monte Carlo objective is piecewise
            // constant): the simplex finishes.
            let s = simplex(f, &m.x, &polish, lo, hi, opts, true);
            evals += s.evals;
            if !(s.fx < m.fx - opts.ftol) {
                // The simplex searched the polishing scale around Newton's point and found
                // nothing better: a coarse minimum near this one is this one again, as where
                // Newton converged (V3.2 `var`'s hard-negatives fit: its second polish, 273
                // evaluations, ended 2e-3 worse).
                settled.push(from);
            }
            if s.fx < m.fx {
                m = s;
            }
        }
        if best.as_ref().is_none_or(|b| m.fx < b.fx) {
            best = Some(m);
        }
    }
    let mut best = best.unwrap_or(Minimum { x: vec![], fx: f64::INFINITY, evals: 0 });
    // Never worse than a point evaluated on the way (a start given in `extra` included).
    if let Some((v, x)) = cand.first() {
        if *v < best.fx {
            best = Minimum { x: x.clone(), fx: *v, evals: 0 };
        }
    }
    best.evals = evals;
    best
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cholesky_solves_a_positive_definite_system_and_refuses_an_indefinite_one() {
        // A = M Mᵀ + I for a fixed M; b = A x for a known x.
        let m = [[1.0, 2.0, 0.5], [-0.3, 1.1, 2.0], [0.7, -1.2, 0.4]];
        let mut a = vec![0.0; 9];
        for i in 0..3 {
            for j in 0..3 {
                a[i * 3 + j] = (0..3).map(|k| m[i][k] * m[j][k]).sum::<f64>() + if i == j { 1.0 } else { 0.0 };
            }
        }
        let x = [0.25, -1.5, 3.0];
        let mut b: Vec<f64> = (0..3).map(|i| (0..3).map(|j| a[i * 3 + j] * x[j]).sum()).collect();
        let mut l = a.clone();
        cholesky(&mut l, 3).unwrap();
        cholesky_solve(&l, 3, &mut b);
        for i in 0..3 {
            assert!((b[i] - x[i]).abs() < 1e-12, "{b:?}");
        }
        let mut indefinite = vec![1.0, 2.0, 2.0, 1.0];
        assert!(cholesky(&mut indefinite, 2).is_none());
    }

    #[test]
    fn newton_polish_finds_a_smooth_minimum_in_few_evaluations() {
        // A correlated, badly scaled quartic bowl: minimum at (0.3, 2.0, -1.0), value 5.
        let mut evals = 0;
        let mut f = |x: &[f64]| {
            evals += 1;
            let (u, v, w) = (x[0] - 0.3, (x[1] - 2.0) / 10.0, x[2] + 1.0);
            5.0 + 40.0 * u * u + 30.0 * u * v + 20.0 * v * v + w * w + (u + w).powi(4)
        };
        let start = Minimum { x: vec![0.35, 2.6, -0.9], fx: 0.0, evals: 0 };
        let start = Minimum { fx: f(&start.x), ..start };
        let opts = NmOptions { ftol: 1e-10, xtol: 1e-8, max_evals: 400 };
        let (m, converged) = newton_polish(&mut f, start, &[-1.0, -10.0, -5.0], &[1.0, 10.0, 5.0], opts);
        assert!(converged, "{m:?}");
        for (got, want) in m.x.iter().zip([0.3, 2.0, -1.0]) {
            assert!((got - want).abs() < 1e-5, "{m:?}");
        }
        assert!(m.fx - 5.0 < 1e-9, "{m:?}");
        // Iterations of 1 + 2n + n(n−1) = 13 evaluations and a step each.
        assert!(m.evals <= 80, "{} evaluations", m.evals);
    }

    #[test]
    fn newton_polish_holds_a_bound_the_gradient_pushes_against() {
        // Unconstrained minimum at (1.5, 0.2): the box stops x at 1, where y's minimum is
        // 0.2 + 0.5 · (1 − 1.5) · 0.4 / 1 ... solved below.
        let mut f = |x: &[f64]| (x[0] - 1.5).powi(2) + 0.8 * (x[0] - 1.5) * (x[1] - 0.2) + (x[1] - 0.2).powi(2);
        let x0 = vec![0.9, 0.1];
        let start = Minimum { fx: f(&x0), x: x0, evals: 0 };
        let (m, converged) = newton_polish(
            &mut f,
            start,
            &[0.0, -1.0],
            &[1.0, 1.0],
            NmOptions { ftol: 1e-12, xtol: 1e-9, max_evals: 200 },
        );
        assert!(converged, "{m:?}");
        // At x = 1: ∂f/∂y = 0.8 (1 − 1.5) + 2 (y − 0.2) = 0 → y = 0.4.
        assert_eq!(m.x[0], 1.0);
        assert!((m.x[1] - 0.4).abs() < 1e-6, "{m:?}");
    }

    #[test]
    fn newton_polish_stretches_a_step_the_model_underestimates() {
        // An exponential approach to a plateau (hard negatives' ridge): each Newton step gains
        // 1 − 1/e of what is left, ten of them short of ftol from e^−1; stretched while f
        // falls, the first step reaches e^−17 and the second iteration stops as converged.
        let mut f = |x: &[f64]| (x[0] - 0.3).powi(2) + (-x[1]).exp();
        let x0 = vec![0.3, 1.0];
        let start = Minimum { fx: f(&x0), x: x0, evals: 0 };
        let opts = NmOptions { ftol: 1e-6, xtol: 1e-4, max_evals: 400 };
        let (m, converged) = newton_polish(&mut f, start, &[-1.0, 0.0], &[1.0, 30.0], opts);
        assert!(converged, "{m:?}");
        assert!(m.fx < 1e-6, "{m:?}");
        assert!(m.x[1] > 13.8 && (m.x[0] - 0.3).abs() < 1e-6, "{m:?}");
        assert!(m.evals <= 40, "{} evaluations", m.evals);
    }

    #[test]
    fn newton_polish_converges_on_a_flat_ridge() {
        // 50 (x − y)² − δ (x + y)²: curvature 100 across the ridge x = y and −4δ along it, so
        // the Hessian is indefinite by a hair (its first damping makes it positive definite)
        // and the box's lowest point, −4δ at a corner, is within ftol of every point of the
        // ridge. Newton stops there as converged, where the undamped rule walked the ridge in
        // steps of ~1e-6 until its iterations ran out.
        let delta = 1e-7;
        let mut f = |x: &[f64]| 50.0 * (x[0] - x[1]).powi(2) - delta * (x[0] + x[1]).powi(2);
        let x0 = vec![0.2, 0.2];
        let start = Minimum { fx: f(&x0), x: x0, evals: 0 };
        let opts = NmOptions { ftol: 1e-6, xtol: 1e-4, max_evals: 400 };
        let (m, converged) = newton_polish(&mut f, start, &[-1.0, -1.0], &[1.0, 1.0], opts);
        assert!(converged, "{m:?}");
        assert!(m.fx - (-4.0 * delta) < opts.ftol, "{m:?}");
        // One stencil (refitted once to the curvature) and its step.
        assert!(m.evals <= 2 * 6 + 1, "{} evaluations", m.evals);
    }

    #[test]
    fn newton_polish_converges_on_steps_that_follow_a_smooth_surface() {
        // A steep parabola in x read through x rounded to a thousandth (a count rounded to an
        // integer) and a smooth one in y. x's curvature (2e4) fits a step of 1e-4, a tenth of a
        // tread: the stencil there sees f unchanged and reads no slope and no curvature. Grown
        // until both sides see f change, the step measures the parabola the treads follow, and
        // Newton converges at its minimum's tread.
        let mut f = |x: &[f64]| 1e4 * ((x[0] * 1e3).round() / 1e3 - 0.3).powi(2) + (x[1] - 0.5).powi(2);
        let x0 = vec![0.3132, 0.45];
        let start = Minimum { fx: f(&x0), x: x0, evals: 0 };
        let opts = NmOptions { ftol: 1e-6, xtol: 1e-4, max_evals: 400 };
        let (m, converged) = newton_polish(&mut f, start, &[-1.0, -1.0], &[1.0, 1.0], opts);
        assert!(converged, "{m:?}");
        assert!(m.fx < 1e-6, "{m:?}");
        assert!((m.x[0] - 0.3).abs() < 5e-4 && (m.x[1] - 0.5).abs() < 1e-3, "{m:?}");
        assert!(m.evals <= 80, "{} evaluations", m.evals);
    }

    #[test]
    fn newton_polish_reports_a_step_surface_as_not_converged() {
        // Piecewise constant (a Monte Carlo objective's shape): no descent step exists.
        let mut f = |x: &[f64]| ((x[0] * 50.0).floor() - 10.0).abs() + ((x[1] * 50.0).floor() + 3.0).abs();
        let x0 = vec![0.37, 0.41];
        let start = Minimum { fx: f(&x0), x: x0.clone(), evals: 0 };
        let (m, converged) = newton_polish(&mut f, start, &[-1.0, -1.0], &[1.0, 1.0], NmOptions::default());
        assert!(!converged);
        assert!(m.fx <= f(&x0));
    }

    #[test]
    fn minimize_bounded_reaches_the_smooth_minimum_to_its_tolerance() {
        // A curved valley, at the fits' tolerances: the coarse pass and Newton reach the minimum
        // a long, tight simplex run finds to within ftol, in far fewer evaluations than the
        // simplex alone at the same tolerances.
        let g = |x: &[f64]| {
            let (a, b) = (x[0], x[1]);
            (a - 1.0).powi(2) * 3.0 + 10.0 * (b - a * a / 2.0 - 0.5).powi(2) + 0.1 * (a * b).sin()
        };
        let mut n_fast = 0;
        let opts = NmOptions { ftol: 1e-6, xtol: 1e-4, max_evals: 800 };
        let fast = minimize_bounded(
            &mut |x: &[f64]| {
                n_fast += 1;
                g(x)
            },
            &[-3.0, -3.0],
            &[3.0, 3.0],
            &[],
            2,
            opts,
        );
        let slow = nelder_mead(
            &mut |x: &[f64]| g(x),
            &fast.x,
            &[0.3, 0.3],
            &[-3.0, -3.0],
            &[3.0, 3.0],
            NmOptions { ftol: 1e-14, xtol: 1e-11, max_evals: 20_000 },
        );
        assert!(fast.fx - slow.fx < 1e-6, "{fast:?} vs {slow:?}");
        assert!((fast.x[0] - slow.x[0]).abs() < 1e-3 && (fast.x[1] - slow.x[1]).abs() < 1e-3, "{fast:?} vs {slow:?}");
        let mut n_simplex = 0;
        let x0 = vec![0.0, 0.0];
        nelder_mead(
            &mut |x: &[f64]| {
                n_simplex += 1;
                g(x)
            },
            &x0,
            &[0.9, 0.9],
            &[-3.0, -3.0],
            &[3.0, 3.0],
            opts,
        );
        assert!(n_fast < 300, "{n_fast} evaluations (the simplex alone: {n_simplex})");
    }

    #[test]
    fn rosenbrock_and_bounds() {
        let mut f = |x: &[f64]| (1.0 - x[0]).powi(2) + 100.0 * (x[1] - x[0] * x[0]).powi(2);
        let m = minimize_bounded(
            &mut f,
            &[-2.0, -2.0],
            &[2.0, 2.0],
            &[],
            2,
            NmOptions { max_evals: 3000, ftol: 1e-12, xtol: 1e-9 },
        );
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
pub(crate) fn min_1d(
    f: &mut dyn FnMut(f64) -> f64,
    x0: f64,
    h0: f64,
    lo: f64,
    hi: f64,
    ftol: f64,
    max_evals: usize,
) -> Minimum {
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
        let (pa, pb) =
            (if fa.is_finite() { Some((a, fa)) } else { None }, if fb.is_finite() { Some((b, fb)) } else { None });
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
