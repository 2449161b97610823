//! The analytic engine: exact recall and needle-rank distribution by numerical quadrature.
//!
//! With the needle's best covering entry Y and T_j the j-th largest distractor score,
//! rank ≤ j ⟺ Y > T_j, so P(rank ≤ j) = ∫ f_{T_j}(t) · P(Y > t) dt. Integrating over the order
//! statistic rather than over the needle keeps every integrand evaluation O(1): the density of
//! T_j needs one binomial pmf (Loader's formula), where the needle-side form
//! ∫ f_Y(y) P[Bin(N−r, Q(y)) ≤ j − 1] dy would need a binomial CDF (an incomplete beta) per node.
//! With hard negatives the distractors form two groups and the pmf is a short convolution.
//! The needle's shared component z (layers, or several correlated needle entries) is a further
//! outer integral against the standard normal density.

use crate::geometry::Geometry;
use crate::quadrature::{integrate, integrate_vec};
use crate::scenario::{Readout, Scenario};
use crate::scores::{EntryLaw, NotExact, ScoreModel};
use crate::stats::{ln_binom_pmf, ln_norm_pdf};

/// Absolute tolerance of each inner integral (the engine promises 1e-6 on recall).
const TOL_INNER: f64 = 1e-9;
/// Absolute tolerance of the outer integral over the needle's shared component.
const TOL_OUTER: f64 = 1e-9;
/// The outer integral runs over z in [−Z_MAX, Z_MAX]; the normal mass outside is 1.5e-23.
const Z_MAX: f64 = 10.0;
/// Density ratio (in nats) below which the order statistic's tails are cut off.
const TAIL_NATS: f64 = 46.0;

/// A scenario prepared for exact evaluation.
#[derive(Debug, Clone)]
pub struct Analytic {
    model: ScoreModel,
    geometry: Geometry,
    layers: u32,
    readout: Readout,
    p_read: f64,
    p_guess: f64,
}

/// The support and location of T_j, the j-th largest distractor score.
#[derive(Debug, Clone)]
struct OrderStat {
    j: u64,
    lo: f64,
    hi: f64,
    /// The points the edge search stepped through: geometric away from the centre, they split
    /// the range into panels matched to the density's scale (a single panel over a heavy tail
    /// would miss the bulk between its nodes).
    breaks: Vec<f64>,
}

impl Analytic {
    /// Prepares a validated scenario, or says why it has no exact evaluation.
    pub fn new(s: &Scenario) -> Result<Analytic, NotExact> {
        let geometry = Geometry::new(s);
        let model = ScoreModel::new(s, &geometry)?;
        Ok(Analytic { model, geometry, layers: s.selecting_layers(), readout: s.readout, p_read: s.p_read, p_guess: s.p_guess })
    }

    /// The resolved geometry.
    pub fn geometry(&self) -> &Geometry {
        &self.geometry
    }

    /// Number of distractor entries (N minus the needle's entries).
    fn n_distractors(&self) -> u64 {
        self.model.n_regular + self.model.n_hard
    }

    /// ln f_{T_j}(t).
    fn ln_order_density(&self, j: u64, t: f64) -> f64 {
        let m = &self.model;
        let group = |law: &EntryLaw| {
            let (q, f) = law.sf_cdf(t);
            (q, f, law.ln_pdf(t))
        };
        let (qr, fr, gr) = group(&m.distractor);
        let v = if m.n_hard == 0 {
            let n = m.n_regular;
            (n as f64).ln() + ln_binom_pmf(n - 1, j - 1, qr, fr) + gr
        } else {
            let (qh, fh, gh) = group(&m.hard);
            let mut total = 0.0;
            if m.n_regular > 0 {
                total += (m.n_regular as f64).ln().exp()
                    * gr.exp()
                    * sum_pmf(m.n_regular - 1, qr, fr, m.n_hard, qh, fh, j - 1);
            }
            total += m.n_hard as f64 * gh.exp() * sum_pmf(m.n_regular, qr, fr, m.n_hard - 1, qh, fh, j - 1);
            total.ln()
        };
        if v.is_nan() {
            f64::NEG_INFINITY
        } else {
            v
        }
    }

    /// Expected number of distractors scoring above t.
    fn expected_above(&self, t: f64) -> f64 {
        let m = &self.model;
        m.n_regular as f64 * m.distractor.sf(t) + m.n_hard as f64 * m.hard.sf(t)
    }

    /// Locates T_j: its centre (expected count above = j − ½) and a range holding all its mass.
    fn order_stat(&self, j: u64) -> OrderStat {
        let target = j as f64 - 0.5;
        let (mut lo, mut hi) = (-1.0f64, 1.0f64);
        for _ in 0..1100 {
            if self.expected_above(lo) >= target {
                break;
            }
            lo *= 2.0;
        }
        for _ in 0..1100 {
            if self.expected_above(hi) <= target {
                break;
            }
            hi *= 2.0;
        }
        for _ in 0..200 {
            let mid = 0.5 * (lo + hi);
            if !(mid > lo && mid < hi) {
                break;
            }
            if self.expected_above(mid) > target {
                lo = mid;
            } else {
                hi = mid;
            }
        }
        let centre = 0.5 * (lo + hi);
        let m = &self.model;
        let rate = m.n_regular as f64 * m.distractor.ln_pdf(centre).exp()
            + m.n_hard as f64 * m.hard.ln_pdf(centre).exp();
        let n_d = self.n_distractors() as f64;
        let sd_count = (j as f64 * (1.0 - j as f64 / n_d).max(0.0)).sqrt() + 0.5;
        let mut h = sd_count / rate;
        if !(h.is_finite() && h > 0.0) {
            h = 1.0;
        }
        h = h.max(1e-9 * (1.0 + centre.abs()));
        let mut peak = self.ln_order_density(j, centre);
        let mut breaks = vec![centre];
        let mut edge = |dir: f64, breaks: &mut Vec<f64>| {
            let mut step = h;
            let mut t = centre + dir * step;
            let mut last_break = 0.0;
            for _ in 0..400 {
                let v = self.ln_order_density(j, t);
                if v > peak {
                    peak = v;
                }
                if v < peak - TAIL_NATS {
                    break;
                }
                // A breakpoint every factor of ~5 in distance keeps panels matched to the scale.
                if step >= 5.0 * last_break {
                    breaks.push(t);
                    last_break = step;
                }
                step *= 1.5;
                t = centre + dir * step;
            }
            t
        };
        let hi = edge(1.0, &mut breaks);
        let lo = edge(-1.0, &mut breaks);
        OrderStat { j, lo, hi, breaks }
    }

    /// P(rank ≤ j) in one layer given the needle's shared component z.
    fn rank_le_given(&self, os: &OrderStat, z: Option<f64>, laws: &mut Vec<(EntryLaw, f64)>) -> f64 {
        let m = &self.model;
        if m.needle_entries.is_empty() {
            return 0.0;
        }
        if os.j > self.n_distractors() {
            return 1.0;
        }
        // Entries that pool alike have one law: a group of n contributes n·ln F(t), so the cost
        // is per kind of entry (a handful), not per entry (up to 2^24 with many long copies).
        laws.clear();
        laws.extend(m.needle_groups.iter().map(|(e, n)| (m.needle_law(e, z), *n as f64)));
        let mut breaks: Vec<f64> = laws.iter().filter_map(|(l, _)| l.breakpoint()).collect();
        breaks.extend_from_slice(&os.breaks);
        let laws = &*laws;
        let needle_sf = |t: f64| {
            if let [(law, n)] = &laws[..] {
                if *n == 1.0 {
                    return law.sf(t);
                }
            }
            let ln_f: f64 = laws.iter().map(|(l, n)| n * l.ln_cdf(t)).sum();
            -ln_f.exp_m1()
        };
        integrate(
            |t| {
                let d = self.ln_order_density(os.j, t);
                if d == f64::NEG_INFINITY {
                    0.0
                } else {
                    d.exp() * needle_sf(t)
                }
            },
            os.lo,
            os.hi,
            &breaks,
            TOL_INNER,
        )
    }

    /// E_z[g(P(rank ≤ j | z))] when the shared component matters, else g(P(rank ≤ j)).
    fn over_shared(&self, j: u64, g: impl Fn(f64) -> f64) -> f64 {
        let os = self.order_stat(j.max(1));
        let mut laws = Vec::with_capacity(self.model.needle_groups.len());
        if self.model.shared {
            integrate(
                |z| ln_norm_pdf(z).exp() * g(self.rank_le_given(&os, Some(z), &mut laws)),
                -Z_MAX,
                Z_MAX,
                &[0.0],
                TOL_OUTER,
            )
        } else {
            g(self.rank_le_given(&os, None, &mut laws))
        }
    }

    /// P(needle attended by enough selecting layers for the readout).
    pub fn p_attended(&self) -> f64 {
        if self.geometry.always_attended {
            return 1.0;
        }
        if self.geometry.k_eff == 0 || self.model.needle_entries.is_empty() {
            return 0.0;
        }
        let (n, readout) = (self.layers, self.readout);
        self.over_shared(self.geometry.k_eff, |a| readout_probability(a, n, readout))
    }

    /// P(exactly m of the scenario's layers select the needle), m = 0..=layers: each layer's
    /// indexer alone (the window and sink are not selections), the layers independent given the
    /// needle's shared component. The likelihood of captured per-layer selections.
    pub fn layer_count_pmf(&self) -> Vec<f64> {
        let n = self.layers as u64;
        let mut out = vec![0.0; n as usize + 1];
        if self.geometry.k_eff == 0 || self.model.needle_entries.is_empty() {
            out[0] = 1.0;
            return out;
        }
        // One integral over the shared component for all m at once: the per-layer selection
        // probability at each z (an inner integral) is the expensive part.
        let os = self.order_stat(self.geometry.k_eff.max(1));
        let mut laws = Vec::with_capacity(self.model.needle_groups.len());
        let fill = |a: f64, w: f64, out: &mut [f64]| {
            let a = a.clamp(0.0, 1.0);
            for (m, o) in out.iter_mut().enumerate() {
                *o = w * ln_binom_pmf(n, m as u64, a, 1.0 - a).exp();
            }
        };
        if self.model.shared {
            out = integrate_vec(
                |z, o| {
                    let a = self.rank_le_given(&os, Some(z), &mut laws);
                    fill(a, ln_norm_pdf(z).exp(), o)
                },
                n as usize + 1,
                -Z_MAX,
                Z_MAX,
                &[0.0],
                TOL_OUTER,
            );
        } else {
            let a = self.rank_le_given(&os, None, &mut laws);
            fill(a, 1.0, &mut out);
        }
        // Quadrature leaves the total within its tolerance of 1: normalise.
        let total: f64 = out.iter().sum();
        if total > 0.0 {
            out.iter_mut().for_each(|p| *p /= total);
        }
        out
    }

    /// P(correct answer) = p_u + (p_read − p_u)·P(attended), p_u the answer's probability when
    /// the selecting layers miss ([`Geometry::answer_probability`]; p_u is p_guess without
    /// non-selecting layers).
    pub fn recall(&self) -> f64 {
        self.geometry.answer_probability(self.p_read, self.p_guess, self.p_attended()).clamp(0.0, 1.0)
    }

    /// P(rank ≤ j) in one layer: the rank is 1 + the number of candidates scoring above the
    /// needle's best covering entry (the window and sink do not enter it).
    pub fn rank_cdf(&self, j: u64) -> f64 {
        if j == 0 || self.model.needle_entries.is_empty() {
            return 0.0;
        }
        self.over_shared(j, |a| a).clamp(0.0, 1.0)
    }

    /// The smallest j with P(rank ≤ j) ≥ p, or `None` when the needle is in no entry.
    pub fn rank_quantile(&self, p: f64) -> Option<u64> {
        if self.model.needle_entries.is_empty() {
            return None;
        }
        let (mut lo, mut hi) = (1u64, self.n_distractors() + 1);
        if self.rank_cdf(lo) >= p {
            return Some(1);
        }
        // Invariant: cdf(lo) < p ≤ cdf(hi).
        while hi - lo > 1 {
            let mid = lo + (hi - lo) / 2;
            if self.rank_cdf(mid) >= p {
                hi = mid;
            } else {
                lo = mid;
            }
        }
        Some(hi)
    }
}

/// Σ_i P[Bin(n_b, p_b) = i] · P[Bin(n_a, p_a) = m − i]: the pmf of a sum of two binomials at m.
///
/// The terms are log-concave in i (a product of two log-concave sequences), so they rise to one
/// mode and fall. The mode is found by bisection on the ratio of consecutive terms, and the sum
/// walks outwards from it with that ratio (a few flops per term instead of two binomial pmfs),
/// until the terms fall below 1e-20 of the sum. Degenerate probabilities (0 or 1) take the
/// direct sum.
fn sum_pmf(n_a: u64, p_a: f64, q_a: f64, n_b: u64, p_b: f64, q_b: f64, m: u64) -> f64 {
    let lo = m.saturating_sub(n_a);
    let hi = n_b.min(m);
    if lo > hi {
        return 0.0;
    }
    let positive = |x: f64| x.is_finite() && x > 0.0;
    if !(positive(p_a) && positive(q_a) && positive(p_b) && positive(q_b)) || hi - lo < 16 {
        return sum_pmf_direct(n_a, p_a, q_a, n_b, p_b, q_b, m);
    }
    let odds = (p_b / q_b) * (q_a / p_a);
    // term(i + 1) / term(i); decreasing in i.
    let ratio = |i: u64| {
        let (i, na, nb, m) = (i as f64, n_a as f64, n_b as f64, m as f64);
        (nb - i) / (i + 1.0) * (m - i) / (na - m + i + 1.0) * odds
    };
    // The mode: the first i in [lo, hi] with ratio(i) < 1 (hi if there is none).
    let (mut a, mut b) = (lo, hi);
    while a < b {
        let mid = a + (b - a) / 2;
        if ratio(mid) < 1.0 {
            b = mid;
        } else {
            a = mid + 1;
        }
    }
    let mode = a;
    let ln_peak = ln_binom_pmf(n_b, mode, p_b, q_b) + ln_binom_pmf(n_a, m - mode, p_a, q_a);
    if ln_peak == f64::NEG_INFINITY || ln_peak.is_nan() {
        return sum_pmf_direct(n_a, p_a, q_a, n_b, p_b, q_b, m);
    }
    const CUT: f64 = 1e-20;
    let mut total = 1.0;
    let mut t = 1.0;
    let mut i = mode;
    while i < hi {
        t *= ratio(i);
        i += 1;
        total += t;
        if t < CUT * total {
            break;
        }
    }
    let mut t = 1.0;
    let mut i = mode;
    while i > lo {
        t /= ratio(i - 1);
        i -= 1;
        total += t;
        if t < CUT * total {
            break;
        }
    }
    total * ln_peak.exp()
}

/// [`sum_pmf`] term by term, each with its own binomial pmfs.
fn sum_pmf_direct(n_a: u64, p_a: f64, q_a: f64, n_b: u64, p_b: f64, q_b: f64, m: u64) -> f64 {
    let lo = m.saturating_sub(n_a);
    let hi = n_b.min(m);
    if lo > hi {
        return 0.0;
    }
    let centre = ((n_b as f64 * p_b).round() as u64).clamp(lo, hi);
    let term = |i: u64| (ln_binom_pmf(n_b, i, p_b, q_b) + ln_binom_pmf(n_a, m - i, p_a, q_a)).exp();
    let ln_b_peak = ln_binom_pmf(n_b, centre, p_b, q_b);
    let mut total = term(centre);
    // Walk outwards until the second binomial's pmf is negligible (it bounds every term).
    let mut i = centre;
    while i > lo {
        i -= 1;
        if ln_binom_pmf(n_b, i, p_b, q_b) < ln_b_peak - 40.0 {
            break;
        }
        total += term(i);
    }
    let mut i = centre;
    while i < hi {
        i += 1;
        if ln_binom_pmf(n_b, i, p_b, q_b) < ln_b_peak - 40.0 {
            break;
        }
        total += term(i);
    }
    total
}

/// P(readout satisfied) when each of `n` layers attends independently with probability `a`.
pub(crate) fn readout_probability(a: f64, n: u32, readout: Readout) -> f64 {
    let a = a.clamp(0.0, 1.0);
    match readout {
        Readout::Any => -((n as f64) * (-a).ln_1p()).exp_m1(),
        Readout::All => a.powi(n as i32),
        Readout::AtLeast(m) => {
            if m == 0 {
                return 1.0;
            }
            if m > n {
                return 0.0;
            }
            (m..=n).map(|i| ln_binom_pmf(n as u64, i as u64, a, 1.0 - a).exp()).sum::<f64>().min(1.0)
        }
    }
}

/// Exact recall of a validated scenario, or why it has none.
pub fn recall(s: &Scenario) -> Result<f64, NotExact> {
    Ok(Analytic::new(s)?.recall())
}

/// Exact P(needle rank ≤ j) in one layer, or why it has none.
pub fn rank_cdf(s: &Scenario, j: u64) -> Result<f64, NotExact> {
    Ok(Analytic::new(s)?.rank_cdf(j))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sum_of_binomials_pmf_matches_direct_convolution() {
        for &(n_a, p_a, n_b, p_b) in &[
            (1000u64, 0.01, 50u64, 0.3),
            (100_000, 0.002, 95_000, 0.0015),
            (20, 0.5, 20, 0.5),
            (5000, 0.2, 3, 0.9),
        ] {
            let mean = n_a as f64 * p_a + n_b as f64 * p_b;
            for m in [0u64, 1, (mean * 0.5) as u64, mean as u64, (mean * 1.5) as u64 + 3] {
                let direct: f64 = (0..=n_b.min(m))
                    .filter(|&i| m - i <= n_a)
                    .map(|i| (ln_binom_pmf(n_b, i, p_b, 1.0 - p_b) + ln_binom_pmf(n_a, m - i, p_a, 1.0 - p_a)).exp())
                    .sum();
                let fast = sum_pmf(n_a, p_a, 1.0 - p_a, n_b, p_b, 1.0 - p_b, m);
                assert!((fast - direct).abs() <= 1e-12 * direct.max(1e-300) + 1e-300, "{n_a} {p_a} {n_b} {p_b} m={m}: {fast} vs {direct}");
            }
        }
    }
}

#[cfg(test)]
mod sum_pmf_tests {
    use super::*;

    /// The exact convolution, every term.
    fn brute(n_a: u64, p_a: f64, n_b: u64, p_b: f64, m: u64) -> f64 {
        (0..=n_b.min(m))
            .filter(|&i| m - i <= n_a)
            .map(|i| (ln_binom_pmf(n_b, i, p_b, 1.0 - p_b) + ln_binom_pmf(n_a, m - i, p_a, 1.0 - p_a)).exp())
            .sum()
    }

    #[test]
    fn the_ratio_walk_matches_the_full_sum() {
        let mut worst: f64 = 0.0;
        for &(n_a, n_b) in &[(1000u64, 10u64), (50, 5000), (20000, 20000), (100000, 300), (7, 40)] {
            for &p_a in &[1e-6, 1e-3, 0.02, 0.3, 0.9] {
                for &p_b in &[1e-5, 0.01, 0.4, 0.999] {
                    let mean = n_a as f64 * p_a + n_b as f64 * p_b;
                    let sd = (n_a as f64 * p_a * (1.0 - p_a) + n_b as f64 * p_b * (1.0 - p_b)).sqrt();
                    for &k in &[-3.0, -1.0, 0.0, 0.5, 2.0, 6.0] {
                        let m = (mean + k * sd).round().max(0.0) as u64;
                        let want = brute(n_a, p_a, n_b, p_b, m);
                        let got = sum_pmf(n_a, p_a, 1.0 - p_a, n_b, p_b, 1.0 - p_b, m);
                        let err = (got - want).abs() / want.max(1e-300);
                        if want > 1e-250 {
                            assert!(err < 1e-9, "n_a {n_a} p_a {p_a} n_b {n_b} p_b {p_b} m {m}: {got} vs {want}");
                        }
                        worst = worst.max(if want > 1e-250 { err } else { 0.0 });
                    }
                }
            }
        }
        assert!(worst < 1e-9, "{worst}");
    }
}
