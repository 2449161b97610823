//! Distractor token score laws, standardised to mean 0 and variance 1.

use crate::scenario::Distractor;
use crate::stats::{ln_norm_cdf, ln_norm_pdf, ln_norm_sf, norm_cdf, norm_sf};
use rand::Rng;
use rand_distr::{Distribution, StandardNormal};
use statrs::function::beta::beta_reg;
use statrs::function::gamma::ln_gamma;

/// Euler–Mascheroni constant (the mean of a standard Gumbel).
const EULER_GAMMA: f64 = 0.577_215_664_901_532_9;

/// A distractor token law with its distribution functions, ready to evaluate and sample.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum TokenLaw {
    /// Standard normal.
    Normal,
    /// Student's t with `df` degrees of freedom scaled by `scale` = √((df − 2)/df) to unit variance.
    StudentT {
        /// Degrees of freedom (> 2).
        df: f64,
        /// Multiplier from a standard t variate to the standardised one.
        scale: f64,
        /// ln of the t density's normalising constant.
        ln_norm: f64,
    },
    /// Gumbel(μ, β) with β = √6/π and μ = −γβ: mean 0, variance 1.
    Gumbel {
        /// Location μ.
        mu: f64,
        /// Scale β.
        beta: f64,
    },
}

impl TokenLaw {
    /// The law of a scenario's distractor field.
    pub fn new(d: Distractor) -> TokenLaw {
        match d {
            Distractor::Normal => TokenLaw::Normal,
            Distractor::StudentT(df) => TokenLaw::StudentT {
                df,
                scale: ((df - 2.0) / df).sqrt(),
                ln_norm: ln_gamma((df + 1.0) / 2.0) - ln_gamma(df / 2.0) - 0.5 * (df * std::f64::consts::PI).ln(),
            },
            Distractor::Gumbel => {
                let beta = 6f64.sqrt() / std::f64::consts::PI;
                TokenLaw::Gumbel { mu: -EULER_GAMMA * beta, beta }
            }
        }
    }

    /// P(X > x).
    pub fn sf(&self, x: f64) -> f64 {
        match *self {
            TokenLaw::Normal => norm_sf(x),
            TokenLaw::StudentT { df, scale, .. } => t_sf(x / scale, df),
            TokenLaw::Gumbel { mu, beta } => -(-(-(x - mu) / beta).exp()).exp_m1(),
        }
    }

    /// P(X ≤ x).
    pub fn cdf(&self, x: f64) -> f64 {
        match *self {
            TokenLaw::Normal => norm_cdf(x),
            TokenLaw::StudentT { df, scale, .. } => t_sf(-x / scale, df),
            TokenLaw::Gumbel { mu, beta } => (-(-(x - mu) / beta).exp()).exp(),
        }
    }

    /// ln P(X ≤ x), accurate when the probability is close to 1 or tiny.
    pub(crate) fn ln_cdf(&self, x: f64) -> f64 {
        match *self {
            TokenLaw::Normal => ln_norm_cdf(x),
            TokenLaw::Gumbel { mu, beta } => -(-(x - mu) / beta).exp(),
            TokenLaw::StudentT { .. } => {
                let s = self.sf(x);
                if s < 0.5 {
                    (-s).ln_1p()
                } else {
                    self.cdf(x).ln()
                }
            }
        }
    }

    /// ln P(X > x).
    pub(crate) fn ln_sf(&self, x: f64) -> f64 {
        match *self {
            TokenLaw::Normal => ln_norm_sf(x),
            _ => {
                let c = self.cdf(x);
                if c < 0.5 {
                    (-c).ln_1p()
                } else {
                    self.sf(x).ln()
                }
            }
        }
    }

    /// ln of the density at x.
    pub fn ln_pdf(&self, x: f64) -> f64 {
        match *self {
            TokenLaw::Normal => ln_norm_pdf(x),
            TokenLaw::StudentT { df, scale, ln_norm } => {
                let t = x / scale;
                ln_norm - (df + 1.0) / 2.0 * (t * t / df).ln_1p() - scale.ln()
            }
            TokenLaw::Gumbel { mu, beta } => {
                let z = (x - mu) / beta;
                -(z + (-z).exp()) - beta.ln()
            }
        }
    }

    /// Draws one score.
    #[inline]
    pub(crate) fn sample<R: Rng + ?Sized>(&self, rng: &mut R) -> f64 {
        match *self {
            TokenLaw::Normal => rng.sample(StandardNormal),
            TokenLaw::StudentT { df, scale, .. } => {
                // t = Z / sqrt(V/df), V ~ χ²(df) = 2·Gamma(df/2).
                let z: f64 = rng.sample(StandardNormal);
                let g = rand_distr::Gamma::new(df / 2.0, 2.0).map(|g| g.sample(rng)).unwrap_or(df);
                scale * z / (g / df).sqrt()
            }
            TokenLaw::Gumbel { mu, beta } => {
                // Inverse CDF on (0, 1): x = μ − β ln(−ln u).
                let u: f64 = rng.random::<f64>();
                let u = if u == 0.0 { f64::MIN_POSITIVE } else { u };
                mu - beta * (-(u.ln())).ln()
            }
        }
    }

    /// Whether every distribution function above is in closed form (no numerical convolution).
    pub(crate) fn is_normal(&self) -> bool {
        matches!(self, TokenLaw::Normal)
    }
}

/// Survival of the standard Student t: P(T > t) = ½ I_{df/(df+t²)}(df/2, ½) for t ≥ 0.
fn t_sf(t: f64, df: f64) -> f64 {
    if t.is_nan() {
        return f64::NAN;
    }
    let x = df / (df + t * t);
    let tail = 0.5 * beta_reg(df / 2.0, 0.5, x);
    if t >= 0.0 {
        tail
    } else {
        1.0 - tail
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::quadrature::integrate;

    fn laws() -> Vec<TokenLaw> {
        vec![
            TokenLaw::new(Distractor::Normal),
            TokenLaw::new(Distractor::StudentT(3.5)),
            TokenLaw::new(Distractor::StudentT(30.0)),
            TokenLaw::new(Distractor::Gumbel),
        ]
    }

    #[test]
    fn standardised_moments_and_consistency() {
        for law in laws() {
            let (lo, hi) = (-200.0, 200.0);
            let pdf = |x: f64| law.ln_pdf(x).exp();
            let bps = [-5.0, -1.0, 0.0, 1.0, 5.0];
            let m0 = integrate(pdf, lo, hi, &bps, 1e-12);
            let m1 = integrate(|x| x * pdf(x), lo, hi, &bps, 1e-12);
            let m2 = integrate(|x| x * x * pdf(x), lo, hi, &bps, 1e-12);
            assert!((m0 - 1.0).abs() < 1e-7, "{law:?} mass {m0}");
            assert!(m1.abs() < 1e-6, "{law:?} mean {m1}");
            // Student t(3.5) has a heavy tail beyond ±200: allow for it.
            let tol = if matches!(law, TokenLaw::StudentT { df, .. } if df < 4.0) { 3e-3 } else { 1e-6 };
            assert!((m2 - 1.0).abs() < tol, "{law:?} variance {m2}");
            for &x in &[-3.0, -0.7, 0.0, 0.4, 2.5, 6.0] {
                let c = integrate(pdf, lo, x, &bps, 1e-13);
                assert!((law.cdf(x) - c).abs() < 1e-8, "{law:?} cdf({x}) {} vs {c}", law.cdf(x));
                assert!((law.cdf(x) + law.sf(x) - 1.0).abs() < 1e-14);
                assert!((law.ln_cdf(x) - law.cdf(x).ln()).abs() < 1e-10);
                assert!((law.ln_sf(x) - law.sf(x).ln()).abs() < 1e-10);
            }
        }
    }

    #[test]
    fn sampling_matches_cdf() {
        use rand::SeedableRng;
        let mut rng = rand_xoshiro::Xoshiro256PlusPlus::seed_from_u64(7);
        for law in laws() {
            let n = 200_000;
            for &x in &[-1.0, 0.0, 1.5] {
                let hits = (0..n).filter(|_| law.sample(&mut rng) <= x).count() as f64;
                let p = law.cdf(x);
                let sd = (p * (1.0 - p) / n as f64).sqrt();
                // 6 sd: a false alarm has probability ~1e-9 per check.
                assert!((hits / n as f64 - p).abs() < 6.0 * sd, "{law:?} at {x}");
            }
        }
    }
}
