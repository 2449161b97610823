//! The distractors' upper tail: each query's sample standardised by its own mean and sd, pooled
//! over the layer's queries, compared with the normal, and its exceedances over a high threshold
//! fitted by a generalised Pareto distribution (the limit law of threshold exceedances,
//! Pickands–Balkema–de Haan).
//!
//! The GPD is fitted by maximum likelihood through Grimshaw's (1993) reduction to one dimension:
//! with θ = ξ/σ the likelihood's maximum over ξ at fixed θ is ξ̂(θ) = mean ln(1 + θ·y), leaving a
//! profile in θ alone, searched on a grid and refined by golden section. Written here because no
//! well-kept Rust crate fits a GPD (statrs has no Pareto-tail family with a shape parameter).

use super::{LayerScores, ScoresError};
use crate::stats::norm_sf;
use statrs::distribution::{ContinuousCDF, Normal};

/// The fraction of the pooled standardised distractors above the threshold u.
pub const TAIL_FRACTION: f64 = 0.01;

/// Fewest exceedances a tail fit accepts.
pub(crate) const MIN_EXCEEDANCES: usize = 50;

/// A generalised Pareto law of the excess y = z − u > 0: survival (1 + ξ·y/σ)^(−1/ξ)
/// (exp(−y/σ) at ξ = 0).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Gpd {
    /// Shape ξ: 0 for an exponential (normal-like, light) tail, > 0 heavy (a Student-t with ν
    /// degrees of freedom has ξ = 1/ν), < 0 bounded.
    pub xi: f64,
    /// Scale σ > 0.
    pub sigma: f64,
}

impl Gpd {
    /// P(Y > y) for y ≥ 0.
    pub(crate) fn sf(&self, y: f64) -> f64 {
        if y <= 0.0 {
            return 1.0;
        }
        let t = self.xi * y / self.sigma;
        if self.xi.abs() < 1e-12 {
            (-y / self.sigma).exp()
        } else if 1.0 + t <= 0.0 {
            0.0
        } else {
            // (1 + t)^(−1/ξ) through ln_1p: accurate when t is small.
            (-(t.ln_1p()) / self.xi).exp()
        }
    }
}

/// −(the weighted profile log-likelihood) at θ, with the ξ̂ it implies; None outside the domain
/// or where ξ̂ < −1 (there the likelihood is unbounded at the sample maximum: no regular MLE).
/// `wsum` = Σ w, `mean` the weighted mean excess; unit weights give the ordinary likelihood.
fn profile(y: &[f64], w: &[f64], wsum: f64, mean: f64, theta: f64) -> Option<(f64, f64)> {
    if theta.abs() * mean < 1e-9 {
        // The exponential limit θ → 0: σ̂ = mean.
        return Some((wsum * mean.ln() + wsum, 0.0));
    }
    let mut s = 0.0;
    for (&v, &wi) in y.iter().zip(w) {
        if wi <= 0.0 {
            continue;
        }
        let a = theta * v;
        if a <= -1.0 {
            return None;
        }
        s += wi * a.ln_1p();
    }
    let xi = s / wsum;
    if xi < -1.0 || xi / theta <= 0.0 {
        return None;
    }
    Some((wsum * (xi / theta).ln() + s + wsum, xi))
}

/// The maximum-likelihood GPD of the excesses `y` (all > 0).
pub fn fit_gpd(y: &[f64]) -> Result<Gpd, ScoresError> {
    fit_gpd_weighted(y, &vec![1.0; y.len()])
}

/// The weighted maximum-likelihood GPD: excess i counts `w[i]` times (a query's responsibility
/// for a tail class in [`super::classes`], a bootstrap multiplicity). Unit weights are
/// [`fit_gpd`] to the last bit. The effective count Σ w must reach [`MIN_EXCEEDANCES`].
pub(crate) fn fit_gpd_weighted(y: &[f64], w: &[f64]) -> Result<Gpd, ScoresError> {
    let wsum: f64 = w.iter().sum();
    if !(wsum >= MIN_EXCEEDANCES as f64) {
        return Err(ScoresError(format!("{} exceedances: a tail fit needs at least {MIN_EXCEEDANCES}", wsum.round())));
    }
    let mean = y.iter().zip(w).map(|(v, wi)| v * wi).sum::<f64>() / wsum;
    let ymax = y.iter().zip(w).filter(|(_, &wi)| wi > 0.0).map(|(v, _)| *v).fold(0.0, f64::max);
    if !(mean > 0.0) {
        return Err(ScoresError("the exceedances are all zero: no tail to fit".into()));
    }
    // θ ranges over (−1/ymax, ∞): the grid approaches the lower end geometrically and spans
    // twelve decades of positive θ·mean (ξ from ~0 to heavy tails far beyond any Student-t).
    let lo = -1.0 / ymax;
    let mut grid: Vec<f64> = (1..=60).map(|i| lo * (1.0 - 10f64.powf(-(i as f64) / 10.0))).collect();
    grid.push(0.0);
    grid.extend((0..=120).map(|i| 10f64.powf(-6.0 + i as f64 / 10.0) / mean));
    grid.sort_by(|a, b| a.total_cmp(b));
    let f = |t: f64| profile(y, w, wsum, mean, t).map_or(f64::INFINITY, |p| p.0);
    let vals: Vec<f64> = grid.iter().map(|&t| f(t)).collect();
    let best = (0..grid.len()).min_by(|&a, &b| vals[a].total_cmp(&vals[b])).expect("the grid has 182 points");
    if !vals[best].is_finite() {
        return Err(ScoresError("the tail fit found no admissible shape".into()));
    }
    // Golden section between the best grid point's neighbours (the profile is unimodal there),
    // at most 80 steps.
    let (a, b) = (grid[best.saturating_sub(1)], grid[(best + 1).min(grid.len() - 1)]);
    let [(c, fc), (d, fd)] =
        golden_section(f, a, b, |a, b, i| i > 0 && ((b - a).abs() <= 1e-12 * (a.abs() + b.abs()) + 1e-300 || i >= 80));
    let candidates = [(grid[best], vals[best]), (c, fc), (d, fd)];
    let (theta, _) = candidates.iter().cloned().min_by(|x, y| x.1.total_cmp(&y.1)).expect("three candidates");
    // f is +∞ only where profile is None, and θ's value is at most the finite vals[best].
    let (_, xi) = profile(y, w, wsum, mean, theta).expect("the best candidate θ is in the profile's domain");
    let sigma = if theta.abs() * mean < 1e-9 { mean } else { xi / theta };
    Ok(Gpd { xi, sigma })
}

/// [`fit_gpd_weighted`] from a nearby fit: Newton's method on the profile in θ = ξ/σ, started
/// at `start`'s θ, with a halving line search. An EM iteration moves the weights a little, so
/// the maximum moves a little, and five or so Newton steps (one pass over the excesses each)
/// replace the grid's ~260 passes; where Newton is not safe (θ near the exponential limit, a
/// non-convex profile, no descent) the grid search decides.
pub(crate) fn refine_gpd_weighted(y: &[f64], w: &[f64], start: Gpd) -> Result<Gpd, ScoresError> {
    let wsum: f64 = w.iter().sum();
    if !(wsum >= MIN_EXCEEDANCES as f64) {
        return Err(ScoresError(format!("{} exceedances: a tail fit needs at least {MIN_EXCEEDANCES}", wsum.round())));
    }
    let mean = y.iter().zip(w).map(|(v, wi)| v * wi).sum::<f64>() / wsum;
    if !(mean > 0.0) || !(start.sigma > 0.0) {
        return fit_gpd_weighted(y, w);
    }
    // f(θ) = W ln(S/(Wθ)) + S + W, S = Σ w ln(1 + θy): value, first and second derivative.
    let eval = |theta: f64| -> Option<(f64, f64, f64)> {
        let (mut s, mut s1, mut s2) = (0.0, 0.0, 0.0);
        for (&v, &wi) in y.iter().zip(w) {
            if wi <= 0.0 {
                continue;
            }
            let a = theta * v;
            if a <= -1.0 {
                return None;
            }
            let r = v / (1.0 + a);
            s += wi * a.ln_1p();
            s1 += wi * r;
            s2 -= wi * r * r;
        }
        let xi = s / wsum;
        if xi < -1.0 || xi / theta <= 0.0 {
            return None;
        }
        let f = wsum * (xi / theta).ln() + s + wsum;
        let g = wsum * (s1 / s - 1.0 / theta) + s1;
        let h = wsum * (s2 / s - (s1 / s) * (s1 / s) + 1.0 / (theta * theta)) + s2;
        Some((f, g, h))
    };
    let near_zero = |t: f64| t.abs() * mean < 1e-4;
    let mut theta = start.xi / start.sigma;
    if near_zero(theta) {
        return fit_gpd_weighted(y, w);
    }
    let Some(mut cur) = eval(theta) else { return fit_gpd_weighted(y, w) };
    for _ in 0..50 {
        let (f, g, h) = cur;
        if !(h > 0.0) {
            return fit_gpd_weighted(y, w);
        }
        let step = g / h;
        let mut t = 1.0;
        let next = loop {
            let cand = theta - t * step;
            if !near_zero(cand) {
                if let Some(e) = eval(cand) {
                    if e.0 <= f + 1e-12 * f.abs() {
                        break Some((cand, e));
                    }
                }
            }
            t *= 0.5;
            if t < 1e-6 {
                break None;
            }
        };
        let Some((cand, e)) = next else { return fit_gpd_weighted(y, w) };
        let moved = (cand - theta).abs();
        theta = cand;
        cur = e;
        if moved <= 1e-9 * theta.abs() {
            let (_, xi) =
                profile(y, w, wsum, mean, theta).ok_or_else(|| ScoresError("the tail fit left its domain".into()))?;
            return Ok(Gpd { xi, sigma: xi / theta });
        }
    }
    fit_gpd_weighted(y, w)
}

/// ln of the GPD density of the excess y > 0 (−∞ beyond a bounded tail's end).
pub(crate) fn gpd_ln_pdf(g: &Gpd, y: f64) -> f64 {
    if g.xi.abs() < 1e-12 {
        return -g.sigma.ln() - y / g.sigma;
    }
    let t = g.xi * y / g.sigma;
    if t <= -1.0 {
        return f64::NEG_INFINITY;
    }
    -g.sigma.ln() - (1.0 / g.xi + 1.0) * t.ln_1p()
}

/// One layer's tail: the threshold, the normal comparison and the fit.
#[derive(Debug, Clone, PartialEq)]
pub struct TailSummary {
    /// The layer.
    pub layer: usize,
    /// Pooled standardised distractors.
    pub pooled: usize,
    /// The threshold u (a standardised score): the pooled 1 − [`TAIL_FRACTION`] quantile.
    pub threshold: f64,
    /// Exceedances of u.
    pub exceedances: usize,
    /// (p, pooled quantile, normal quantile) for p = 0.9, 0.99, … while n·(1 − p) ≥ 10.
    pub quantiles: Vec<(f64, f64, f64)>,
    /// (z, observed P(Z > z), normal P(Z > z)) for z = 2, 3, 4, 5 while the normal expects at
    /// least one exceedance.
    pub exceedance: Vec<(f64, f64, f64)>,
    /// The generalised Pareto fit of the excesses over u.
    pub gpd: Gpd,
}

/// Each query's distractors standardised by its own sample mean and sd.
pub fn standardised(layer: &LayerScores) -> Vec<Vec<f64>> {
    layer
        .queries
        .iter()
        .map(|q| {
            let (m, sd) = q.mean_sd();
            let sd = if sd > 0.0 { sd } else { 1.0 };
            q.distractors.iter().map(|d| (d - m) / sd).collect()
        })
        .collect()
}

/// The pooled 1 − [`TAIL_FRACTION`] quantile of standardised samples (each sorted high first).
pub(crate) fn threshold(z: &[Vec<f64>]) -> f64 {
    let mut all: Vec<f64> = z.iter().flatten().cloned().collect();
    let i = threshold_rank(all.len());
    let (_, u, _) = all.select_nth_unstable_by(i, |a, b| b.total_cmp(a));
    *u
}

/// The index of the threshold u among `n` pooled values sorted high first (so a caller that
/// has them sorted reads u off as `sorted[threshold_rank(n)]`, the value [`threshold`] selects).
pub(crate) fn threshold_rank(n: usize) -> usize {
    (((n as f64) * TAIL_FRACTION).floor() as usize).min(n.saturating_sub(1))
}

/// The excesses z − u > 0 of the chosen queries (indices into `z`, repeats allowed).
pub(crate) fn excesses(z: &[Vec<f64>], u: f64, queries: impl Iterator<Item = usize>) -> Vec<f64> {
    let mut y = Vec::new();
    for q in queries {
        y.extend(z[q].iter().take_while(|&&v| v > u).map(|v| v - u));
    }
    y
}

/// The tail of one layer.
pub fn summarise(layer: &LayerScores, z: &[Vec<f64>]) -> Result<TailSummary, ScoresError> {
    let mut all: Vec<f64> = z.iter().flatten().cloned().collect();
    all.sort_unstable_by(|a, b| b.total_cmp(a));
    let n = all.len();
    let u = all[threshold_rank(n)];
    let y = excesses(z, u, 0..z.len());
    let gpd = fit_gpd(&y).map_err(|e| ScoresError(format!("layer {}: {}", layer.layer, e.0)))?;
    let normal = Normal::standard();
    let mut quantiles = Vec::new();
    let mut tail = 0.1;
    while n as f64 * tail >= 10.0 {
        let p = 1.0 - tail;
        // The pooled upper quantile: the ⌈n·tail⌉-th largest.
        let i = ((n as f64 * tail).ceil() as usize).clamp(1, n) - 1;
        quantiles.push((p, all[i], normal.inverse_cdf(p)));
        tail /= 10.0;
    }
    let exceedance = [2.0, 3.0, 4.0, 5.0]
        .iter()
        .filter(|&&zv| norm_sf(zv) * n as f64 >= 1.0)
        .map(|&zv| (zv, all.partition_point(|&v| v > zv) as f64 / n as f64, norm_sf(zv)))
        .collect();
    Ok(TailSummary { layer: layer.layer, pooled: n, threshold: u, exceedances: y.len(), quantiles, exceedance, gpd })
}

/// Golden-section search for the minimum of `f` on [a, b] (where it is unimodal): the bracket
/// shrinks by the golden ratio a step until `stop(a, b, steps taken)`, checked before each step;
/// returns the two inner points with their values (the caller picks among them and its own
/// starting points, with its own rule for ties). Written here (for the tail fits' one-dimensional
/// profiles, `tail` and `top`) because a crate's line search would not stop where these must:
/// at a bracket width relative to the shape's scale, without re-evaluating the points it keeps.
pub(crate) fn golden_section(
    mut f: impl FnMut(f64) -> f64,
    mut a: f64,
    mut b: f64,
    stop: impl Fn(f64, f64, usize) -> bool,
) -> [(f64, f64); 2] {
    const G: f64 = 0.618_033_988_749_894_9;
    let (mut c, mut d) = (b - G * (b - a), a + G * (b - a));
    let (mut fc, mut fd) = (f(c), f(d));
    let mut steps = 0;
    while !stop(a, b, steps) {
        if fc < fd {
            b = d;
            d = c;
            fd = fc;
            c = b - G * (b - a);
            fc = f(c);
        } else {
            a = c;
            c = d;
            fc = fd;
            d = a + G * (b - a);
            fd = f(d);
        }
        steps += 1;
    }
    [(c, fc), (d, fd)]
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;
    use rand_distr::{Distribution, Exp, Uniform};

    /// GPD draws by inversion: y = σ/ξ · (U^(−ξ) − 1).
    fn gpd_sample(xi: f64, sigma: f64, n: usize, seed: u64) -> Vec<f64> {
        let mut rng = rand_xoshiro::Xoshiro256PlusPlus::seed_from_u64(seed);
        let u = Uniform::new(0.0f64, 1.0).unwrap();
        (0..n)
            .map(|_| {
                let v: f64 = 1.0 - u.sample(&mut rng);
                if xi == 0.0 {
                    -sigma * v.ln()
                } else {
                    sigma / xi * (v.powf(-xi) - 1.0)
                }
            })
            .collect()
    }

    #[test]
    fn recovers_known_shapes_and_scales() {
        // 20,000 excesses: the MLE's asymptotic sds are (1 + ξ)/√n in ξ and √(2(1 + ξ)/n) in
        // σ̂/σ (Smith 1987), about 0.01 each; 6 sd bounds.
        for &(xi, sigma, seed) in &[(0.0, 1.0, 1u64), (0.25, 0.7, 2), (0.5, 2.0, 3), (-0.2, 1.5, 4)] {
            let y = gpd_sample(xi, sigma, 20_000, seed);
            let g = fit_gpd(&y).unwrap();
            let sd_xi = (1.0 + xi) / (20_000f64).sqrt();
            assert!((g.xi - xi).abs() < 6.0 * sd_xi, "xi {xi}: fitted {g:?}");
            let sd_sigma = (2.0 * (1.0 + xi) / 20_000f64).sqrt();
            assert!((g.sigma / sigma - 1.0).abs() < 6.0 * sd_sigma, "sigma {sigma}: fitted {g:?}");
        }
    }

    #[test]
    fn the_fit_maximises_the_likelihood() {
        // Against a direct two-parameter log-likelihood on a fine grid around the fit.
        let y = gpd_sample(0.3, 1.0, 2_000, 9);
        let g = fit_gpd(&y).unwrap();
        let ll = |xi: f64, s: f64| -> f64 {
            y.iter()
                .map(|&v| {
                    let t = 1.0 + xi * v / s;
                    if t <= 0.0 {
                        f64::NEG_INFINITY
                    } else {
                        -s.ln() - (1.0 + 1.0 / xi) * t.ln()
                    }
                })
                .sum()
        };
        let best = ll(g.xi, g.sigma);
        for dx in [-0.02, -0.005, 0.005, 0.02] {
            for ds in [-0.02, -0.005, 0.0, 0.005, 0.02] {
                assert!(ll(g.xi + dx, g.sigma * (1.0 + ds)) <= best + 1e-9, "({dx}, {ds})");
            }
        }
    }

    #[test]
    fn exponential_excesses_give_a_light_tail() {
        let mut rng = rand_xoshiro::Xoshiro256PlusPlus::seed_from_u64(5);
        let e = Exp::new(2.0).unwrap();
        let y: Vec<f64> = (0..10_000).map(|_| e.sample(&mut rng)).collect();
        let g = fit_gpd(&y).unwrap();
        assert!(g.xi.abs() < 6.0 / 100.0, "{g:?}");
        assert!((g.sigma - 0.5).abs() < 0.05, "{g:?}");
        assert!(fit_gpd(&y[..10]).unwrap_err().0.contains("at least 50"));
    }
}
