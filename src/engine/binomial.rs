//! Exact binomial sampling for the Monte Carlo hot loop.
//!
//! Written here rather than using `rand_distr::Binomial` because every trial draws from a
//! different (n, p): rand_distr builds a BTPE/BINV sampler per call whose set-up (and its BTPE
//! acceptance loop) dominated the trial cost. This is Hörmann's BTRS (transformed rejection with
//! squeeze; W. Hörmann, "The generation of binomial random variates", J. Stat. Comput. Simul. 46,
//! 1993) for n·p ≥ 10, whose set-up is a square root and a few flops and whose squeeze accepts
//! ~70% of candidates at n·p ~ 300 (the rest take the exact test), and sequential inversion for
//! n·p < 10. The exact test uses Hörmann's Stirling form of the pmf ratio with exact correction
//! terms (ln1p where n ~ 10^9 would otherwise lose precision). Tested against the exact pmf by
//! chi-square at far-tail thresholds.

use rand::Rng;

/// One draw from Binomial(n, p).
#[inline]
pub fn sample<R: Rng + ?Sized>(n: u64, p: f64, rng: &mut R) -> u64 {
    if n == 0 || !(p > 0.0) {
        return 0;
    }
    if p >= 1.0 {
        return n;
    }
    if p > 0.5 {
        return n - sample_low(n, 1.0 - p, rng);
    }
    sample_low(n, p, rng)
}

/// p ≤ 0.5.
#[inline]
fn sample_low<R: Rng + ?Sized>(n: u64, p: f64, rng: &mut R) -> u64 {
    let np = n as f64 * p;
    if np < 10.0 {
        inversion(n, p, rng)
    } else {
        btrs(n, p, rng)
    }
}

/// Largest count the inversion search visits before restarting.
const MAX_INVERSION: u64 = 110;

/// 1/x for x ≤ MAX_INVERSION (index 0 unused).
static RECIPROCALS: [f64; MAX_INVERSION as usize + 1] = {
    let mut t = [0.0; MAX_INVERSION as usize + 1];
    let mut x = 1;
    while x <= MAX_INVERSION as usize {
        t[x] = 1.0 / x as f64;
        x += 1;
    }
    t
};

/// Sequential search from 0 (expected n·p + 1 steps < 11).
fn inversion<R: Rng + ?Sized>(n: u64, p: f64, rng: &mut R) -> u64 {
    let q = 1.0 - p;
    let s = p / q;
    let a = (n as f64 + 1.0) * s;
    let r0 = (n as f64 * (-p).ln_1p()).exp();
    loop {
        let mut r = r0;
        let mut u: f64 = rng.random();
        let mut x = 0u64;
        // n·p < 10: a count beyond 110 is > 30 sd out; restart rather than loop on rounding.
        let mut ok = true;
        while u > r {
            u -= r;
            x += 1;
            if x > MAX_INVERSION || x > n {
                ok = false;
                break;
            }
            // a·(1/x) from a table: a multiply instead of a division on the loop's critical path.
            r *= a * RECIPROCALS[x as usize] - s;
        }
        if ok {
            return x;
        }
    }
}

/// BTRS for n·p ≥ 10, p ≤ 0.5.
fn btrs<R: Rng + ?Sized>(n: u64, p: f64, rng: &mut R) -> u64 {
    let q = 1.0 - p;
    let nf = n as f64;
    let spq = (nf * p * q).sqrt();
    let b = 1.15 + 2.53 * spq;
    let a = -0.0873 + 0.0248 * b + 0.01 * p;
    let c = nf * p + 0.5;
    let v_r = 0.92 - 4.2 / b;
    loop {
        let u: f64 = rng.random::<f64>() - 0.5;
        let v: f64 = rng.random();
        let us = 0.5 - u.abs();
        let x = (2.0 * a / us + b) * u + c;
        // floor by truncation (one instruction; f64::floor is a libm call on baseline x86-64):
        // equal for x ≥ 0, and x < 0 is rejected anyway.
        if !(x >= 0.0) {
            continue;
        }
        let kf = floor_nonnegative(x);
        if kf > nf {
            continue;
        }
        if us >= 0.07 && v <= v_r {
            return kf as u64;
        }
        // The squeeze failed (~30% of candidates at n·p ~ 300): the exact test.
        if exact_test(nf, p, q, spq, a, b, us, v, kf) {
            return kf as u64;
        }
    }
}

/// BTRS's exact acceptance test of candidate `kf` for the uniforms (us, v), after the squeeze
/// failed. Out of line and cold on purpose: its mode, ratio and log terms are loop-invariant,
/// and inlined into [`btrs`] the compiler hoisted them (a logarithm, a square root's worth of
/// divisions) into every draw's set-up, although ~3 draws in 4 never get here. Same operations
/// in the same order as inline, so the same decisions.
#[cold]
#[inline(never)]
#[allow(clippy::too_many_arguments)]
fn exact_test(nf: f64, p: f64, q: f64, spq: f64, a: f64, b: f64, us: f64, v: f64, kf: f64) -> bool {
    let m = floor_nonnegative((nf + 1.0) * p);
    let r = p / q;
    let alpha = (2.83 + 5.1 / b) * spq;
    // ln(v·alpha / (a/us² + b)) with one division.
    let us2 = us * us;
    let lhs = (v * alpha * us2 / (a + b * us2)).ln();
    lhs <= ln_pmf_ratio(nf, kf, m, r)
}

/// floor(x) for x ≥ 0 (not NaN): the truncation `(x as u64) as f64`, through i64 below 2^52
/// (on baseline x86-64 a float to/from u64 conversion is a dozen instructions with a branch,
/// to/from i64 one each); from 2^52 on every f64 is an integer, its own floor, which the u64
/// round trip also returned below 2^64 (beyond, it saturated at 2^64: above any n the caller
/// compares with).
#[inline(always)]
fn floor_nonnegative(x: f64) -> f64 {
    const EXACT: f64 = (1u64 << 52) as f64;
    if x < EXACT {
        (x as i64) as f64
    } else {
        x
    }
}

/// ln(pmf(k) / pmf(m)) of Binomial(n, p) with r = p/q, by Hörmann's Stirling form with the
/// exact correction terms fc: three logs instead of two full pmf evaluations. The middle term
/// uses ln1p: at n ~ 10^9 a plain log of a ratio near 1 would lose 1e-7.
#[inline]
fn ln_pmf_ratio(n: f64, k: f64, m: f64, r: f64) -> f64 {
    (m + 0.5) * ((m + 1.0) / (r * (n - m + 1.0))).ln()
        + (n + 1.0) * ((k - m) / (n - k + 1.0)).ln_1p()
        + (k + 0.5) * (r * (n - k + 1.0) / (k + 1.0)).ln()
        + fc(m)
        + fc(n - m)
        - fc(k)
        - fc(n - k)
}

/// fc(k) = ln k! − (k + ½) ln(k + 1) + (k + 1) − ½ ln 2π: exact values below 10 (from mpmath),
/// the Stirling series beyond (error < 1e-11 there).
#[inline]
fn fc(k: f64) -> f64 {
    #[allow(clippy::excessive_precision)] // mpmath digits, kept verbatim
    const SMALL: [f64; 10] = [
        0.081_061_466_795_327_26,
        0.041_340_695_955_409_29,
        0.027_677_925_684_998_34,
        0.020_790_672_103_765_09,
        0.016_644_691_189_821_19,
        0.013_876_128_823_070_75,
        0.011_896_709_945_891_77,
        0.010_411_265_261_972_1,
        0.009_255_462_182_712_733,
        0.008_330_563_433_362_871,
    ];
    if k < 10.0 {
        return SMALL[k as usize];
    }
    // One division: 1/(k+1), then its powers.
    let i = 1.0 / (k + 1.0);
    let i2 = i * i;
    (1.0 / 12.0 - (1.0 / 360.0 - i2 * (1.0 / 1260.0)) * i2) * i
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stats::ln_binom_pmf;
    use rand::SeedableRng;
    use statrs::distribution::{ChiSquared, ContinuousCDF};

    /// Chi-square goodness of fit of `draws` samples against the exact pmf, pooling cells with
    /// expected count < 5; fails only beyond the 1 − 1e-9 quantile.
    fn check(n: u64, p: f64, draws: usize, seed: u64) {
        let mut rng = rand_xoshiro::Xoshiro256PlusPlus::seed_from_u64(seed);
        let mean = n as f64 * p;
        let sd = (mean * (1.0 - p)).sqrt();
        let lo = (mean - 8.0 * sd - 2.0).max(0.0) as u64;
        let hi = ((mean + 8.0 * sd + 2.0) as u64).min(n);
        let mut counts = vec![0u64; (hi - lo + 3) as usize];
        for _ in 0..draws {
            let x = sample(n, p, &mut rng);
            let idx = if x < lo {
                0
            } else if x > hi {
                counts.len() - 1
            } else {
                (x - lo + 1) as usize
            };
            counts[idx] += 1;
        }
        let mut cells: Vec<(f64, f64)> = Vec::new();
        let (mut e_acc, mut o_acc) = (0.0, 0.0);
        let expected = |x: u64| ln_binom_pmf(n, x, p, 1.0 - p).exp() * draws as f64;
        for x in lo..=hi {
            e_acc += expected(x);
            o_acc += counts[(x - lo + 1) as usize] as f64;
            if e_acc >= 5.0 {
                cells.push((o_acc, e_acc));
                e_acc = 0.0;
                o_acc = 0.0;
            }
        }
        if let Some(last) = cells.last_mut() {
            last.0 += o_acc;
            last.1 += e_acc;
        }
        // Outside [lo, hi] the expected count is below 1e-10: any draw there is a failure.
        assert_eq!(counts[0] + counts[counts.len() - 1], 0, "n={n} p={p}: draws 8 sd out");
        let stat: f64 = cells.iter().map(|(o, e)| (o - e) * (o - e) / e).sum();
        let df = (cells.len() - 1) as f64;
        let pv = 1.0 - ChiSquared::new(df).unwrap().cdf(stat);
        assert!(pv > 1e-9, "n={n} p={p}: chi2 {stat:.1} on {df} df, p-value {pv:.2e}");
    }

    #[test]
    fn matches_the_binomial_pmf() {
        for (i, &(n, p)) in [
            (20u64, 0.3),
            (1000, 0.004),
            (1000, 0.011),
            (1000, 0.5),
            (1000, 0.93),
            (262_143, 1.2e-3),
            (262_143, 3.0e-5),
            (1_000_000_000, 2.0e-6),
            (1_000_000_000, 0.37),
            (50, 0.999),
        ]
        .iter()
        .enumerate()
        {
            check(n, p, 200_000, 11 + i as u64);
        }
    }

    #[test]
    fn pmf_ratio_matches_loader() {
        for &(n, p) in &[(1000u64, 0.3), (262_143, 1.2e-3), (1_000_000_000, 2e-6), (50, 0.2), (40, 0.5)] {
            let q = 1.0 - p;
            let m = ((n as f64 + 1.0) * p).floor();
            for k in [0u64, 1, 3, 9, 10, 11, m as u64, m as u64 + 17, (2.0 * m) as u64 + 5] {
                if k > n {
                    continue;
                }
                let exact = ln_binom_pmf(n, k, p, q) - ln_binom_pmf(n, m as u64, p, q);
                let fast = ln_pmf_ratio(n as f64, k as f64, m, p / q);
                assert!((fast - exact).abs() < 1e-9 * (1.0 + exact.abs()), "n={n} p={p} k={k}: {fast} vs {exact}");
            }
        }
    }

    #[test]
    fn floor_nonnegative_is_the_u64_truncation() {
        let mut rng = rand_xoshiro::Xoshiro256PlusPlus::seed_from_u64(3);
        let mut xs =
            vec![0.0, -0.0, 0.5, 1.0, 1.0 - f64::EPSILON, 4503599627370495.5, 4503599627370496.0, 9.3e18, 1.8e19];
        for _ in 0..100_000 {
            // Random magnitudes from 2^-10 to 2^64, and values just around integers.
            let e: f64 = rng.random_range(-10.0..64.0);
            let x = 2f64.powf(e) * rng.random::<f64>();
            xs.extend([x, x.floor(), f64::from_bits(x.floor().to_bits().saturating_sub(1))]);
        }
        for x in xs {
            assert_eq!(floor_nonnegative(x).to_bits(), ((x as u64) as f64).to_bits(), "x = {x:e}");
        }
    }

    #[test]
    fn edges() {
        let mut rng = rand_xoshiro::Xoshiro256PlusPlus::seed_from_u64(1);
        assert_eq!(sample(0, 0.5, &mut rng), 0);
        assert_eq!(sample(10, 0.0, &mut rng), 0);
        assert_eq!(sample(10, 1.0, &mut rng), 10);
        assert_eq!(sample(10, f64::NAN, &mut rng), 0);
        for _ in 0..1000 {
            assert!(sample(7, 0.6, &mut rng) <= 7);
        }
    }
}
