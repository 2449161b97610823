//! Special functions and interval estimates shared by the engines.

mod normal_tail;
mod normal_tail_table;

pub use normal_tail::norm_sf;
use statrs::function::gamma::ln_gamma;
use std::f64::consts::PI;

/// z for a two-sided 95% interval.
pub const Z95: f64 = 1.959_963_984_540_054;

/// Wilson score interval for `successes` out of `trials` at normal quantile `z`.
pub fn wilson(successes: u64, trials: u64, z: f64) -> (f64, f64) {
    if trials == 0 {
        return (0.0, 1.0);
    }
    let n = trials as f64;
    let p = successes as f64 / n;
    let z2 = z * z;
    let den = 1.0 + z2 / n;
    let centre = (p + z2 / (2.0 * n)) / den;
    let half = z * (p * (1.0 - p) / n + z2 / (4.0 * n * n)).sqrt() / den;
    let lo = if successes == 0 { 0.0 } else { (centre - half).max(0.0) };
    let hi = if successes == trials { 1.0 } else { (centre + half).min(1.0) };
    (lo, hi)
}

/// Standard normal CDF Φ(x), accurate in both tails.
#[inline]
pub fn norm_cdf(x: f64) -> f64 {
    norm_sf(-x)
}

/// ln Φ(x) without underflow for very negative x.
pub(crate) fn ln_norm_cdf(x: f64) -> f64 {
    if x > 0.0 {
        (-norm_sf(x)).ln_1p()
    } else if x > -30.0 {
        norm_cdf(x).ln()
    } else {
        // Asymptotic series of the Mills ratio: Φ(x) = φ(x)/|x| · (1 − 1/x² + 3/x⁴ − 15/x⁶ + …);
        // at |x| ≥ 30 five terms leave a relative error below 1e-16.
        let x2 = x * x;
        -0.5 * x2 - (-x).ln() - 0.5 * (2.0 * PI).ln() + {
            let u = 1.0 / x2;
            (1.0 - u * (1.0 - 3.0 * u * (1.0 - 5.0 * u * (1.0 - 7.0 * u * (1.0 - 9.0 * u))))).ln()
        }
    }
}

/// ln(1 − Φ(x)).
pub(crate) fn ln_norm_sf(x: f64) -> f64 {
    ln_norm_cdf(-x)
}

/// ln φ(x).
pub fn ln_norm_pdf(x: f64) -> f64 {
    -0.5 * x * x - 0.5 * (2.0 * PI).ln()
}

/// Stirling's-series error ln Γ(n+1) − [(n+½) ln n − n + ½ ln 2π] (Loader 2000).
fn stirlerr(n: f64) -> f64 {
    const S0: f64 = 1.0 / 12.0;
    const S1: f64 = 1.0 / 360.0;
    const S2: f64 = 1.0 / 1260.0;
    const S3: f64 = 1.0 / 1680.0;
    const S4: f64 = 1.0 / 1188.0;
    if n <= 15.0 {
        // Small arguments: no cancellation, so the direct formula is exact to rounding.
        return ln_gamma(n + 1.0) - (n + 0.5) * n.ln() + n - 0.5 * (2.0 * PI).ln();
    }
    let nn = n * n;
    if n > 500.0 {
        (S0 - S1 / nn) / n
    } else if n > 80.0 {
        (S0 - (S1 - S2 / nn) / nn) / n
    } else if n > 35.0 {
        (S0 - (S1 - (S2 - S3 / nn) / nn) / nn) / n
    } else {
        (S0 - (S1 - (S2 - (S3 - S4 / nn) / nn) / nn) / nn) / n
    }
}

/// The deviance term x ln(x / np) + np − x, computed without cancellation (Loader 2000).
fn bd0(x: f64, np: f64) -> f64 {
    if (x - np).abs() < 0.1 * (x + np) {
        let mut v = (x - np) / (x + np);
        let mut s = (x - np) * v;
        let mut ej = 2.0 * x * v;
        v *= v;
        for j in 1..1000 {
            ej *= v;
            let s1 = s + ej / (2 * j + 1) as f64;
            if s1 == s {
                return s1;
            }
            s = s1;
        }
        s
    } else {
        x * (x / np).ln() + np - x
    }
}

/// ln P[Binomial(n, p) = x] with q = 1 − p given separately (both accurate), by Loader's
/// saddle-point formula. Written here because the ln-gamma-difference form (statrs' pmf) loses
/// about 1e-5 relative accuracy at n ~ 10^9, more than the analytic engine's error budget.
pub(crate) fn ln_binom_pmf(n: u64, x: u64, p: f64, q: f64) -> f64 {
    if x > n {
        return f64::NEG_INFINITY;
    }
    if p <= 0.0 {
        return if x == 0 { 0.0 } else { f64::NEG_INFINITY };
    }
    if q <= 0.0 {
        return if x == n { 0.0 } else { f64::NEG_INFINITY };
    }
    let nf = n as f64;
    if x == 0 {
        if n == 0 {
            return 0.0;
        }
        return if p < 0.1 { -bd0(nf, nf * q) - nf * p } else { nf * q.ln() };
    }
    if x == n {
        return if q < 0.1 { -bd0(nf, nf * p) - nf * q } else { nf * p.ln() };
    }
    let xf = x as f64;
    let lc = stirlerr(nf) - stirlerr(xf) - stirlerr(nf - xf) - bd0(xf, nf * p) - bd0(nf - xf, nf * q);
    let lf = (2.0 * PI).ln() + xf.ln() + (-xf / nf).ln_1p();
    lc - 0.5 * lf
}

/// P[Binomial(n, p) ≤ j]. The terms are log-concave in x, so from the mode they fall away on
/// both sides: the sum starts at the end of the support nearer the mode (from x = j down when j
/// is below the mode, else the upper tail from j + 1 up, subtracted from 1) and walks with the
/// ratio of consecutive terms until a term falls below 1e-20 of the sum. Written here because
/// the regularised-beta form loses relative accuracy in the far left tail at n ~ 10^9, where
/// the prediction of a needle's selection probability lives (statrs' `Binomial::cdf` agrees
/// with it to 1e-12 at moderate n; tested).
pub fn binom_cdf(n: u64, j: u64, p: f64) -> f64 {
    if j >= n || p <= 0.0 {
        return 1.0;
    }
    if p >= 1.0 {
        return 0.0;
    }
    let q = 1.0 - p;
    let (nf, odds) = (n as f64, p / q);
    // term(x + 1) / term(x)
    let up = |x: u64| (nf - x as f64) / (x as f64 + 1.0) * odds;
    const CUT: f64 = 1e-20;
    let mode = ((nf + 1.0) * p).floor() as u64;
    if j < mode {
        let mut x = j;
        let (mut t, mut total) = (1.0f64, 1.0f64);
        while x > 0 {
            t /= up(x - 1);
            x -= 1;
            total += t;
            if t < CUT * total {
                break;
            }
        }
        (total * ln_binom_pmf(n, j, p, q).exp()).min(1.0)
    } else {
        let mut x = j + 1;
        let (mut t, mut total) = (1.0f64, 1.0f64);
        while x < n {
            t *= up(x);
            x += 1;
            total += t;
            if t < CUT * total {
                break;
            }
        }
        (1.0 - total * ln_binom_pmf(n, j + 1, p, q).exp()).clamp(0.0, 1.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn binomial_pmf_matches_direct_sums() {
        // Small n: against the ln-gamma formula (exact there) and normalisation.
        for &(n, p) in &[(10u64, 0.3), (57, 0.01), (200, 0.77), (1, 0.5)] {
            let q = 1.0 - p;
            let total: f64 = (0..=n).map(|x| ln_binom_pmf(n, x, p, q).exp()).sum();
            assert!((total - 1.0).abs() < 1e-13, "n={n} p={p}: {total}");
            for x in 0..=n {
                let direct = ln_gamma(n as f64 + 1.0) - ln_gamma(x as f64 + 1.0) - ln_gamma((n - x) as f64 + 1.0)
                    + x as f64 * p.ln()
                    + (n - x) as f64 * q.ln();
                assert!((ln_binom_pmf(n, x, p, q) - direct).abs() < 1e-10);
            }
        }
        // Huge n: normalisation over the bulk.
        let (n, p) = (1_000_000_000u64, 2e-6);
        let total: f64 = (0..6000).map(|x| ln_binom_pmf(n, x, p, 1.0 - p).exp()).sum();
        assert!((total - 1.0).abs() < 1e-12, "{total}");
    }

    #[test]
    fn binomial_cdf_matches_statrs_and_direct_sums() {
        use statrs::distribution::{Binomial, DiscreteCDF};
        for &(n, p) in &[(10u64, 0.3), (57, 0.01), (200, 0.77), (1, 0.5), (5000, 0.002), (100_000, 0.4)] {
            let b = Binomial::new(p, n).unwrap();
            for j in [0, 1, 2, n / 3, n / 2, n.saturating_sub(1), n] {
                let (ours, theirs) = (binom_cdf(n, j, p), b.cdf(j));
                // statrs' regularised beta is good to about 1e-11 relative here.
                assert!(
                    (ours - theirs).abs() < 1e-10 * theirs.max(1e-300) + 1e-15,
                    "n={n} p={p} j={j}: {ours} vs {theirs}"
                );
            }
        }
        // Far left tail at huge n: against the sum of the pmfs themselves.
        let (n, p) = (1_000_000_000u64, 2e-6);
        for j in [0u64, 10, 500, 1900, 2000, 2100, 4000] {
            let direct: f64 = (0..=j).map(|x| ln_binom_pmf(n, x, p, 1.0 - p).exp()).sum();
            let ours = binom_cdf(n, j, p);
            assert!((ours - direct).abs() <= 1e-12 * direct + 1e-300, "j={j}: {ours} vs {direct}");
        }
        // Exact (50-digit decimal arithmetic): q^4999 (q + 5000 p) at n = 5000, p = 0.002.
        let exact = 0.000_495_324_273_148_176_2;
        assert!((binom_cdf(5000, 1, 0.002) / exact - 1.0).abs() < 1e-14);
        assert_eq!(binom_cdf(5, 5, 0.3), 1.0);
        assert_eq!(binom_cdf(5, 2, 0.0), 1.0);
        assert_eq!(binom_cdf(5, 2, 1.0), 0.0);
    }

    #[test]
    fn wilson_interval() {
        let (lo, hi) = wilson(50, 100, Z95);
        assert!((lo - 0.4038).abs() < 1e-4 && (hi - 0.5962).abs() < 1e-4, "{lo} {hi}");
        assert_eq!(wilson(0, 10, Z95).0, 0.0);
        assert_eq!(wilson(10, 10, Z95).1, 1.0);
    }

    #[test]
    #[allow(clippy::excessive_precision)] // mpmath digits, kept verbatim
    fn normal_tails() {
        assert!((ln_norm_cdf(-40.0) - (-804.608_442_013_753_8)).abs() < 1e-9);
        assert!((ln_norm_cdf(-29.9) - norm_cdf(-29.9).ln()).abs() < 1e-10);
        assert!((ln_norm_cdf(-30.1) - (-457.329_564_416_382_26)).abs() < 1e-9);
        assert!((norm_sf(8.0) / 6.220_960_574_271_784e-16 - 1.0).abs() < 1e-14, "{}", norm_sf(8.0));
        // mpmath (40 digits): Q(x) = 1 − Φ(x) (a denser check is tests/engines/normal_tail.rs).
        for (x, q) in [
            (0.3, 0.382_088_577_811_047_37),
            (1.7, 0.044_565_462_758_543_044),
            (3.1, 0.000_967_603_213_218_356_6),
            (5.5, 1.898_956_246_588_772e-8),
            (12.0, 1.776_482_112_077_679e-33),
            (20.0, 2.753_624_118_606_233_7e-89),
            (30.0, 4.906_713_927_148_187e-198),
            (37.0, 5.725_571_222_524_577e-300),
        ] {
            let tol = 1e-15;
            assert!((norm_sf(x) / q - 1.0).abs() < tol, "Q({x}) = {} vs {q}", norm_sf(x));
            assert!((norm_cdf(-x) / q - 1.0).abs() < tol);
            assert!((norm_cdf(x) - (1.0 - q)).abs() < 2e-16);
        }
        assert_eq!(norm_sf(f64::INFINITY), 0.0);
        assert_eq!(norm_sf(f64::NEG_INFINITY), 1.0);
        assert!(norm_sf(f64::NAN).is_nan());
        // mpmath: erfc(1) = 0.15729920705028513.
        assert!((2.0 * norm_sf(std::f64::consts::SQRT_2) / 0.157_299_207_050_285_13 - 1.0).abs() < 1e-15);
    }
}
