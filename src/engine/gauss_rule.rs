//! Gauss rules of a discrete measure: few nodes that integrate smooth functions against T_j's
//! law as its whole table does.
//!
//! An order statistic's table ([`super::analytic`]) is a discrete measure Σ wᵢ δ(tᵢ) of some
//! hundreds of nodes, fine enough to integrate the needle's survival function at its sharpest.
//! When that function is smooth over T_j's support (the usual case: T_j is narrow, the needle's
//! score noise is not), an n-point Gauss rule of the same measure, exact for every polynomial of
//! degree < 2n, gives the same integral with n ≪ hundreds of evaluations. The rule comes from
//! the measure's three-term recurrence (the discretised Stieltjes procedure, run on the table's
//! own nodes: stable for n well below the number of nodes) and the Golub–Welsch eigenproblem of
//! its Jacobi matrix (implicit QL on the tridiagonal matrix, `tridiagonal_eigen`). Whether a
//! rule is good enough for a given sharpness is not assumed: [`Ladder::choose`] checks it
//! against a rule of twice its size (and the tests against the whole measure).

/// An n-point quadrature rule: Σ weight · f(node).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct GaussRule {
    /// Nodes, increasing.
    pub(crate) nodes: Vec<f64>,
    /// Positive weights, summing to the measure's mass.
    pub(crate) weights: Vec<f64>,
}

impl GaussRule {
    /// The n-point Gauss rule of the measure Σ w δ(t) (positive weights), or `None` when the
    /// measure has fewer than about n points of support or the recurrence breaks down.
    #[cfg(test)]
    pub(crate) fn of_measure(t: &[f64], w: &[f64], n: usize) -> Option<GaussRule> {
        Recurrence::new(t, w)?.rule(w, n)
    }

    /// The rule of the Jacobi matrix (diagonal `alpha`, off-diagonal `beta`) of a measure of
    /// mass `mass` on [−1, 1], mapped back by t = c + h·x.
    fn of_jacobi(alpha: &[f64], beta: &[f64], mass: f64, c: f64, h: f64) -> Option<GaussRule> {
        let (nodes, first) = tridiagonal_eigen(alpha, beta)?;
        let mut pairs: Vec<(f64, f64)> = nodes.iter().zip(&first).map(|(&x, &z)| (c + h * x, mass * z * z)).collect();
        pairs.sort_by(|a, b| a.0.total_cmp(&b.0));
        if pairs.iter().any(|p| !(p.0.is_finite() && p.1.is_finite() && p.1 >= 0.0)) {
            return None;
        }
        Some(GaussRule { nodes: pairs.iter().map(|p| p.0).collect(), weights: pairs.iter().map(|p| p.1).collect() })
    }

    /// Σ weight · f(node).
    #[inline]
    pub(crate) fn integrate(&self, mut f: impl FnMut(f64) -> f64) -> f64 {
        self.nodes.iter().zip(&self.weights).map(|(&t, &w)| w * f(t)).sum()
    }
}

/// The three-term recurrence of a discrete measure's orthonormal polynomials (the discretised
/// Stieltjes procedure, run on the measure's own points, mapped to [−1, 1] so that the
/// coefficients are O(1) whatever the scale of t), extended as far as asked: the first n
/// coefficients are the same arithmetic whatever n, so one run serves every rule of a
/// [`Ladder`].
#[derive(Debug, Clone)]
struct Recurrence {
    c: f64,
    h: f64,
    mass: f64,
    /// The points on [−1, 1].
    x: Vec<f64>,
    /// q_{k−1} and q_k at the points.
    q_prev: Vec<f64>,
    q: Vec<f64>,
    /// α_0.. and β_1.. so far.
    alpha: Vec<f64>,
    beta: Vec<f64>,
    /// The recurrence broke down at the next step (the measure is, numerically, supported on
    /// fewer points).
    broken: bool,
}

impl Recurrence {
    fn new(t: &[f64], w: &[f64]) -> Option<Recurrence> {
        if t.len() != w.len() {
            return None;
        }
        let mass: f64 = w.iter().sum();
        if !(mass > 0.0 && mass.is_finite()) || w.iter().any(|&x| !(x >= 0.0)) {
            return None;
        }
        let (lo, hi) = span(t);
        let (c, h) = (0.5 * (lo + hi), 0.5 * (hi - lo));
        if !(h > 0.0 && h.is_finite()) {
            return None;
        }
        let x: Vec<f64> = t.iter().map(|&t| (t - c) / h).collect();
        Some(Recurrence {
            c,
            h,
            mass,
            q_prev: vec![0.0; x.len()],
            q: vec![1.0 / mass.sqrt(); x.len()],
            x,
            alpha: Vec::new(),
            beta: Vec::new(),
            broken: false,
        })
    }

    /// Runs the recurrence until it has α_0..α_{n−1} and β_1..β_{n−1} (or breaks down).
    /// Orthonormal polynomials at the points: q_{k+1} = ((x − α_k) q_k − β_k q_{k−1}) / β_{k+1}.
    fn extend(&mut self, w: &[f64], n: usize) {
        while !self.broken && self.alpha.len() < n {
            if let (Some(&a), true) = (self.alpha.last(), self.alpha.len() > self.beta.len()) {
                // α_k is known: the step to q_{k+1}.
                let b = self.beta.last().copied().unwrap_or(0.0);
                let mut norm = 0.0;
                for (((&x, q), q_prev), &wi) in self.x.iter().zip(&mut self.q).zip(&mut self.q_prev).zip(w) {
                    let r = (x - a) * *q - b * *q_prev;
                    *q_prev = *q;
                    *q = r;
                    norm += wi * r * r;
                }
                let nb = norm.sqrt();
                if !(nb > 1e-14) {
                    self.broken = true;
                    break;
                }
                self.q.iter_mut().for_each(|v| *v /= nb);
                self.beta.push(nb);
            }
            let a: f64 = self.x.iter().zip(&self.q).zip(w).map(|((x, q), w)| w * x * q * q).sum();
            self.alpha.push(a);
        }
    }

    /// The n-point rule, or `None` (too few points, or a breakdown before n).
    fn rule(&mut self, w: &[f64], n: usize) -> Option<GaussRule> {
        if n == 0 || self.x.len() < 3 * n {
            return None;
        }
        self.extend(w, n);
        if self.alpha.len() < n {
            return None;
        }
        GaussRule::of_jacobi(&self.alpha[..n], &self.beta[..n - 1], self.mass, self.c, self.h)
    }
}

/// √(a² + b²): directly where neither square can overflow or underflow (libm's `hypot`, which
/// guards against both, was a sixth of the eigensolver's time), else by `hypot`.
#[inline]
fn pythag(a: f64, b: f64) -> f64 {
    const SAFE: std::ops::RangeInclusive<f64> = 1e-150..=1e150;
    let (x, y) = (a.abs(), b.abs());
    if (SAFE.contains(&x) || x == 0.0) && (SAFE.contains(&y) || y == 0.0) {
        (x * x + y * y).sqrt()
    } else {
        a.hypot(b)
    }
}

/// Eigenvalues of the symmetric tridiagonal matrix with diagonal `d` and off-diagonal `e`
/// (one shorter), with the first component of each normalised eigenvector: the Golub–Welsch
/// nodes and (squared, times the mass) weights. The implicit QL algorithm with Wilkinson
/// shifts, carrying only the first row of the eigenvector matrix (Golub & Welsch 1969, in the
/// form of Elhay & Kautsky's IMTQLX): O(n²), where a dense eigensolver (nalgebra's
/// `SymmetricEigen`, tridiagonalising again and accumulating every eigenvector) is O(n³) and
/// was a fifth of the time of a fit that makes a table per evaluation (hard negatives).
/// Written here because no crate of the registry offers a tridiagonal eigensolver returning
/// first components; tested against nalgebra's. `None` when it does not converge.
fn tridiagonal_eigen(d: &[f64], e: &[f64]) -> Option<(Vec<f64>, Vec<f64>)> {
    const MAX_ITERATIONS: usize = 60;
    let n = d.len();
    let mut d = d.to_vec();
    let mut e: Vec<f64> = e.iter().copied().chain(std::iter::once(0.0)).collect();
    e.truncate(n);
    let mut z = vec![0.0; n];
    if n == 0 {
        return Some((d, z));
    }
    z[0] = 1.0;
    for l in 0..n {
        let mut iterations = 0;
        loop {
            // The first negligible off-diagonal element at or after l.
            let mut m = l;
            while m + 1 < n {
                if e[m].abs() <= f64::EPSILON * (d[m].abs() + d[m + 1].abs()) {
                    break;
                }
                m += 1;
            }
            if m == l {
                break;
            }
            iterations += 1;
            if iterations > MAX_ITERATIONS {
                return None;
            }
            // Wilkinson's shift from the leading 2×2 block.
            let mut p = d[l];
            let mut g = (d[l + 1] - p) / (2.0 * e[l]);
            let mut r = pythag(g, 1.0);
            g = d[m] - p + e[l] / (g + r.copysign(g));
            let (mut s, mut c) = (1.0f64, 1.0f64);
            p = 0.0;
            let mut underflow = false;
            for i in (l..m).rev() {
                let f = s * e[i];
                let b = c * e[i];
                r = pythag(f, g);
                e[i + 1] = r;
                if r == 0.0 {
                    // Recover from underflow: deflate and restart the sweep.
                    d[i + 1] -= p;
                    e[m] = 0.0;
                    underflow = true;
                    break;
                }
                s = f / r;
                c = g / r;
                g = d[i + 1] - p;
                r = (d[i] - g) * s + 2.0 * c * b;
                p = s * r;
                d[i + 1] = g + p;
                g = c * r - b;
                // The rotation applied to the first row of the eigenvector matrix.
                let f = z[i + 1];
                z[i + 1] = s * z[i] + c * f;
                z[i] = c * z[i] - s * f;
            }
            if underflow {
                continue;
            }
            d[l] -= p;
            e[l] = g;
            e[m] = 0.0;
        }
    }
    Some((d, z))
}

/// Rule sizes tried, smallest first.
const SIZES: &[usize] = &[2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128];

/// Kernel centres per unit of the sharpness scale in a check: the difference of two rules is a
/// smooth function of the centre, seen at its peaks on this grid.
const CENTRES_PER_SCALE: f64 = 2.0;

/// A check's centres run this many scales beyond the support (farther out, the kernel is
/// constant over the support to 3e-5 and any rule integrates it to far below tolerance).
const CENTRES_BEYOND: f64 = 4.0;

/// Most kernel centres a check takes: a support wider than this many half-scales is too wide
/// for a small rule anyway.
const MAX_CENTRES: usize = 200;

/// The Gauss rules of one discrete measure, built as they are asked for.
#[derive(Debug, Default)]
pub(crate) struct Ladder {
    rules: Vec<std::sync::OnceLock<Option<GaussRule>>>,
    /// The measure's recurrence, run as far as the largest rule built so far.
    recurrence: std::sync::Mutex<Option<Option<Recurrence>>>,
}

impl Clone for Ladder {
    fn clone(&self) -> Ladder {
        let recurrence = self.recurrence.lock().unwrap_or_else(|e| e.into_inner()).clone();
        Ladder { rules: self.rules.clone(), recurrence: std::sync::Mutex::new(recurrence) }
    }
}

impl Ladder {
    /// The ladder of a measure (no rule built yet).
    pub(crate) fn new() -> Ladder {
        Ladder { rules: SIZES.iter().map(|_| std::sync::OnceLock::new()).collect(), recurrence: Default::default() }
    }

    /// The rule of [`SIZES`]`[at]` for the measure (t, w), if it exists.
    fn get(&self, t: &[f64], w: &[f64], at: usize) -> Option<&GaussRule> {
        self.rules
            .get(at)?
            .get_or_init(|| {
                let mut r = self.recurrence.lock().unwrap_or_else(|e| e.into_inner());
                r.get_or_insert_with(|| Recurrence::new(t, w)).as_mut()?.rule(w, SIZES[at])
            })
            .as_ref()
    }

    /// The smallest rule of the measure (t, w) whose integral of every normal survival function
    /// of sd `scale` (any centre) is within `tol` of the measure's own, or `None` when none is
    /// found (the function is too sharp over the measure's support: integrate with the measure
    /// itself). Returns the rule's position for [`Ladder::rule`].
    ///
    /// A normal survival function of sd s is the sharpest the needle's survival can be at that
    /// scale; a broader one is smoother and a rule integrates it at least as well. The kernel
    /// centres run `CENTRES_PER_SCALE` per sd over the support and `CENTRES_BEYOND` sd past
    /// it (see [`Ladder::choose_by`]).
    pub(crate) fn choose(&self, t: &[f64], w: &[f64], scale: f64, tol: f64) -> Option<usize> {
        let centres = kernel_centres(t, scale)?;
        self.choose_by(t, w, &centres, tol, |rule, m| rule.integrate(|x| crate::stats::norm_sf((x - m) / scale)))
    }

    /// The smallest rule of the measure (t, w) whose `value(rule, centre)` agrees to tol/2 with
    /// the rule two sizes up (about twice the nodes: Gauss rules converge geometrically for
    /// smooth integrands, so the larger one is the more exact by orders of magnitude) at every
    /// centre, the central ones first (where a too-small rule fails); `None` when no size
    /// passes.
    pub(crate) fn choose_by(
        &self,
        t: &[f64],
        w: &[f64],
        centres: &[f64],
        tol: f64,
        value: impl Fn(&GaussRule, f64) -> f64,
    ) -> Option<usize> {
        (0..SIZES.len().saturating_sub(2)).find(|&at| {
            let (Some(small), Some(large)) = (self.get(t, w, at), self.get(t, w, at + 2)) else { return false };
            centres.iter().all(|&m| (value(small, m) - value(large, m)).abs() <= 0.5 * tol)
        })
    }

    /// The rule at a position [`Ladder::choose`] returned (built by it).
    pub(crate) fn rule(&self, at: usize) -> &GaussRule {
        self.rules[at]
            .get()
            .and_then(Option::as_ref)
            .expect("Ladder::choose_by returns a position only once the rule there is built")
    }
}

/// The centres at which a rule is checked against kernels of sd `scale` over the support of the
/// points `t` ([`Ladder::choose`]): `CENTRES_PER_SCALE` per sd, `CENTRES_BEYOND` sd past
/// either end, the middle ones first; `None` when more than `MAX_CENTRES` would be needed
/// (the kernel is too sharp for a rule over that support) or there is no support.
pub(crate) fn kernel_centres(t: &[f64], scale: f64) -> Option<Vec<f64>> {
    if !(scale > 0.0 && scale.is_finite()) || t.is_empty() {
        return None;
    }
    let (lo, hi) = span(t);
    let (from, to) = (lo - CENTRES_BEYOND * scale, hi + CENTRES_BEYOND * scale);
    let count = ((to - from) / scale * CENTRES_PER_SCALE).ceil();
    if !(count.is_finite() && count <= MAX_CENTRES as f64) {
        return None;
    }
    Some(centres(from, to, count as usize + 1))
}

/// The smallest and largest of `t` (a table's nodes come panel by panel, not in order).
pub(crate) fn span(t: &[f64]) -> (f64, f64) {
    t.iter().fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), &x| (lo.min(x), hi.max(x)))
}

/// `count` points from `from` to `to`, the middle ones first.
pub(crate) fn centres(from: f64, to: f64, count: usize) -> Vec<f64> {
    let count = count.max(2);
    let mid = 0.5 * (from + to);
    let mut c: Vec<f64> = (0..count).map(|i| from + (to - from) * i as f64 / (count - 1) as f64).collect();
    c.sort_by(|a, b| (a - mid).abs().total_cmp(&(b - mid).abs()));
    c
}

/// A discrete measure with its ladder of Gauss rules.
#[derive(Debug)]
pub(crate) struct Measure {
    /// Points.
    pub(crate) t: Vec<f64>,
    /// Their weights.
    pub(crate) w: Vec<f64>,
    /// Its standard deviation.
    pub(crate) sd: f64,
    /// Its rules.
    pub(crate) ladder: Ladder,
}

/// The standard deviation of the measure (t, w) of positive mass.
pub(crate) fn measure_sd(t: &[f64], w: &[f64]) -> f64 {
    let mass: f64 = w.iter().sum();
    let mean = t.iter().zip(w).map(|(x, w)| x * w).sum::<f64>() / mass;
    (t.iter().zip(w).map(|(x, w)| (x - mean).powi(2) * w).sum::<f64>() / mass).sqrt()
}

/// Grid step of [`max_of_normals`]: the trapezoid rule of a smooth density decaying at both ends
/// is exact to rounding at this step (its error falls like exp(−2π²/h²)).
const MAX_LAW_STEP: f64 = 0.002;

/// The law of the largest of `c` independent standard normals (density c·φ·Φ^{c−1}) as a fine
/// discrete measure on [−12, 12], with its ladder: the needle's score when it lies in `c` entries
/// of one law. Kept per c.
pub(crate) fn max_of_normals(c: u32) -> std::sync::Arc<Measure> {
    use std::collections::HashMap;
    use std::sync::{Arc, Mutex, OnceLock};
    static LAWS: OnceLock<Mutex<HashMap<u32, Arc<Measure>>>> = OnceLock::new();
    let memo = LAWS.get_or_init(Default::default);
    if let Some(m) = memo.lock().unwrap_or_else(|e| e.into_inner()).get(&c) {
        return Arc::clone(m);
    }
    let n = (24.0 / MAX_LAW_STEP).round() as usize + 1;
    let t: Vec<f64> = (0..n).map(|i| -12.0 + MAX_LAW_STEP * i as f64).collect();
    let w: Vec<f64> = t
        .iter()
        .map(|&x| {
            let ln = crate::stats::ln_norm_pdf(x) + (c as f64 - 1.0) * crate::stats::ln_norm_cdf(x);
            MAX_LAW_STEP * c as f64 * ln.exp()
        })
        .collect();
    let sd = measure_sd(&t, &w);
    let m = Arc::new(Measure { t, w, sd, ladder: Ladder::new() });
    // A thread that built it concurrently may have kept its own first: every caller gets that
    // one, since a rule position chosen on one measure's ladder is read from whichever measure a
    // later call returns (`OrderTable::needle_side`), and another's ladder may not have it built.
    Arc::clone(memo.lock().unwrap_or_else(|e| e.into_inner()).entry(c).or_insert(m))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A Gauss rule of a measure reproduces its moments up to degree 2n − 1, and its nodes are
    /// those of the classical rule when the measure is a fine discretisation of a classical
    /// weight (Legendre on [−1, 1]: nodes ±1/√3 for n = 2, 0 and ±√(3/5) for n = 3).
    #[test]
    fn rules_reproduce_moments_and_the_legendre_nodes() {
        // Midpoint rule of the uniform density on [−1, 1] with 20 000 cells: moments exact to
        // ~1e-9 (the midpoint rule's own error), far better than the nodes' differences.
        let m = 20_000;
        let t: Vec<f64> = (0..m).map(|i| -1.0 + (i as f64 + 0.5) * 2.0 / m as f64).collect();
        let w = vec![2.0 / m as f64; m];
        let r2 = GaussRule::of_measure(&t, &w, 2).unwrap();
        assert!(
            (r2.nodes[1] - 1.0 / 3f64.sqrt()).abs() < 1e-8 && (r2.nodes[0] + r2.nodes[1]).abs() < 1e-12,
            "{:?}",
            r2.nodes
        );
        let r3 = GaussRule::of_measure(&t, &w, 3).unwrap();
        assert!((r3.nodes[2] - 0.6f64.sqrt()).abs() < 1e-8 && r3.nodes[1].abs() < 1e-12, "{:?}", r3.nodes);
        assert!((r3.weights[1] - 8.0 / 9.0).abs() < 1e-8, "{:?}", r3.weights);
        // Moments of a skewed measure (a gamma-like density on 3000 points): the 8-point rule's
        // equal the measure's through degree 15.
        let t: Vec<f64> = (0..3000).map(|i| 0.01 * i as f64).collect();
        let w: Vec<f64> = t.iter().map(|&x| x * x * (-x).exp() * 0.01).collect();
        let r = GaussRule::of_measure(&t, &w, 8).unwrap();
        for d in 0..16 {
            let want: f64 = t.iter().zip(&w).map(|(x, w)| w * x.powi(d)).sum();
            let got = r.integrate(|x| x.powi(d));
            assert!((got - want).abs() <= 1e-10 * want.abs(), "degree {d}: {got} vs {want}");
        }
    }

    /// The tridiagonal eigensolver against tests/data/gauss/tridiagonal_reference.txt (40-digit
    /// values from mpmath, gen_tridiagonal_reference.py): 48 random matrices of 1 to 64 rows,
    /// some with a negligible or a zero off-diagonal element, and the Legendre and Hermite
    /// Jacobi matrices of 32 and 48 rows. Eigenvalues to 1e-14 of the spectral radius, squared
    /// first components to 1e-14 plus their conditioning (an eigenvector is determined to about
    /// ε·‖T‖ / gap, Davis–Kahan: random matrices have nearly equal eigenvalues). nalgebra's dense
    /// `SymmetricEigen`, which built the rules before, is off by up to 4e-10 on these weights.
    #[test]
    fn the_tridiagonal_eigensolver_matches_40_digit_references() {
        let text =
            std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/gauss/tridiagonal_reference.txt"))
                .unwrap();
        let numbers = |l: &str| -> Vec<f64> { l.split_whitespace().skip(1).map(|x| x.parse().unwrap()).collect() };
        let mut checked = 0;
        let mut lines = text.lines().filter(|l| !l.starts_with('#')).peekable();
        while let Some(head) = lines.next() {
            let name = head.strip_prefix("matrix ").expect("a matrix line");
            let d = numbers(lines.next().unwrap());
            let e = numbers(lines.next().unwrap());
            let want: Vec<(f64, f64)> =
                (0..d.len()).map(|_| numbers(lines.next().unwrap())).map(|p| (p[0], p[1])).collect();
            let (values, first) = tridiagonal_eigen(&d, &e).expect("converges");
            let mut got: Vec<(f64, f64)> = values.iter().zip(&first).map(|(&v, &z)| (v, z * z)).collect();
            got.sort_by(|a, b| a.0.total_cmp(&b.0));
            let radius = want.iter().map(|p| p.0.abs()).fold(0.0, f64::max).max(1e-300);
            for (i, (g, w)) in got.iter().zip(&want).enumerate() {
                assert!((g.0 - w.0).abs() <= 1e-14 * radius, "{name}: eigenvalue {i}: {} vs {}", g.0, w.0);
                let gap = want
                    .iter()
                    .enumerate()
                    .filter(|(j, _)| *j != i)
                    .map(|(_, c)| (c.0 - w.0).abs())
                    .fold(f64::INFINITY, f64::min);
                let tol = 1e-14 + 8.0 * f64::EPSILON * radius / gap;
                assert!((g.1 - w.1).abs() <= tol, "{name}: weight {i}: {} vs {} (tolerance {tol})", g.1, w.1);
            }
            checked += 1;
        }
        assert_eq!(checked, 52);
    }

    /// The rules of a ladder, built from one run of the recurrence, are the rules built alone.
    #[test]
    fn a_ladder_builds_the_rules_of_the_measure() {
        let t: Vec<f64> = (0..3000).map(|i| 0.01 * i as f64).collect();
        let w: Vec<f64> = t.iter().map(|&x| x * x * (-x).exp() * 0.01).collect();
        let ladder = Ladder::new();
        for at in [5, 2, 7, 0, 9] {
            assert_eq!(ladder.get(&t, &w, at), GaussRule::of_measure(&t, &w, SIZES[at]).as_ref(), "size {}", SIZES[at]);
        }
    }

    /// The ladder picks a small rule for a kernel broad against the measure, none for a kernel
    /// far sharper than its support, and what it picks integrates every centre to tolerance.
    #[test]
    fn the_ladder_checks_what_it_picks() {
        let t: Vec<f64> = (0..2000).map(|i| -0.2 + 0.4 * i as f64 / 1999.0).collect();
        let w: Vec<f64> = t.iter().map(|&x| (-(x / 0.05).powi(2) / 2.0).exp()).collect();
        // A probability measure, as T_j's table is (the tolerance is absolute).
        let mass: f64 = w.iter().sum();
        let w: Vec<f64> = w.iter().map(|w| w / mass).collect();
        let ladder = Ladder::new();
        let broad = ladder.choose(&t, &w, 0.5, 1e-13).expect("a broad kernel has a small rule");
        assert!(ladder.rule(broad).nodes.len() <= 8, "{}", ladder.rule(broad).nodes.len());
        assert_eq!(ladder.choose(&t, &w, 0.0005, 1e-13), None);
        for &s in &[0.5, 0.1, 0.03] {
            if let Some(at) = ladder.choose(&t, &w, s, 1e-13) {
                for i in 0..200 {
                    let m = -1.0 + 2.0 * i as f64 / 199.0 + 0.0037;
                    let f = |x: f64| crate::stats::norm_sf((x - m) / s);
                    let exact: f64 = t.iter().zip(&w).map(|(&x, &w)| w * f(x)).sum();
                    assert!((ladder.rule(at).integrate(f) - exact).abs() <= 1e-13, "s {s} m {m}");
                }
            }
        }
    }

    /// Concurrent first calls of [`max_of_normals`] for one c get one measure: a table keeps the
    /// rule position it chose on the measure's ladder (`OrderTable::needle_side`) and reads the
    /// rule from whichever measure a later call returns, so two copies would leave one without it.
    #[test]
    fn max_of_normals_is_one_measure_per_c_under_contention() {
        let threads = 8;
        let barrier = std::sync::Barrier::new(threads);
        // A c no other test asks for, so every thread's call is a first call.
        let laws: Vec<std::sync::Arc<Measure>> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..threads)
                .map(|_| {
                    s.spawn(|| {
                        barrier.wait();
                        max_of_normals(977)
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        assert!(
            laws.iter().all(|l| std::sync::Arc::ptr_eq(l, &laws[0])),
            "concurrent first calls built separate measures"
        );
    }
}
