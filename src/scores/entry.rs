//! Entry score laws: what pooling makes of token scores (docs/model.md#scalar-score-model), in
//! the closed forms the analytic engine integrates and the exact-sampling Monte Carlo path inverts.

use super::distractor::TokenLaw;
use crate::stats::{ln_norm_cdf, ln_norm_pdf, ln_norm_sf};

/// The law of one candidate entry's score.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum EntryLaw {
    /// Normal(mean, sd²); sd = 0 is a point mass.
    Gauss {
        /// Mean.
        mean: f64,
        /// Standard deviation (≥ 0).
        sd: f64,
    },
    /// A distractor token law used directly (pooling `none`, no score noise).
    Token(TokenLaw),
    /// Max of `n_dist` distractor tokens and `n_needle` Normal(needle_mean, needle_sd²) tokens.
    Max {
        /// The distractor token law.
        token: TokenLaw,
        /// Distractor tokens pooled.
        n_dist: u64,
        /// Needle tokens pooled (0 for a distractor entry).
        n_needle: u64,
        /// Needle token mean.
        needle_mean: f64,
        /// Needle token sd (≥ 0).
        needle_sd: f64,
    },
}

fn ln_step_cdf(x: f64, at: f64) -> f64 {
    if x >= at {
        0.0
    } else {
        f64::NEG_INFINITY
    }
}

/// ln(1 − e^a) for a ≤ 0, accurate across the range.
pub(crate) fn ln1m_exp(a: f64) -> f64 {
    if a > -std::f64::consts::LN_2 {
        (-a.exp_m1()).ln()
    } else {
        (-a.exp()).ln_1p()
    }
}

impl EntryLaw {
    /// ln P(score ≤ x).
    pub(crate) fn ln_cdf(&self, x: f64) -> f64 {
        match *self {
            EntryLaw::Gauss { mean, sd } => {
                if sd > 0.0 {
                    ln_norm_cdf((x - mean) / sd)
                } else {
                    ln_step_cdf(x, mean)
                }
            }
            EntryLaw::Token(t) => t.ln_cdf(x),
            EntryLaw::Max { token, n_dist, n_needle, needle_mean, needle_sd } => {
                let mut v = 0.0;
                if n_dist > 0 {
                    v += n_dist as f64 * token.ln_cdf(x);
                }
                if n_needle > 0 {
                    let l = if needle_sd > 0.0 {
                        ln_norm_cdf((x - needle_mean) / needle_sd)
                    } else {
                        ln_step_cdf(x, needle_mean)
                    };
                    v += n_needle as f64 * l;
                }
                v
            }
        }
    }

    /// ln P(score > x).
    pub(crate) fn ln_sf(&self, x: f64) -> f64 {
        match *self {
            EntryLaw::Gauss { mean, sd } if sd > 0.0 => ln_norm_sf((x - mean) / sd),
            EntryLaw::Token(t) => t.ln_sf(x),
            _ => ln1m_exp(self.ln_cdf(x)),
        }
    }

    /// P(score > x).
    #[inline]
    pub fn sf(&self, x: f64) -> f64 {
        match *self {
            EntryLaw::Gauss { mean, sd } if sd > 0.0 => crate::stats::norm_sf((x - mean) / sd),
            EntryLaw::Token(t) => t.sf(x),
            _ => -self.ln_cdf(x).exp_m1(),
        }
    }

    /// (P(score > x), P(score ≤ x)), each accurate to relative precision (one erfc for a normal).
    #[inline]
    pub(crate) fn sf_cdf(&self, x: f64) -> (f64, f64) {
        match *self {
            EntryLaw::Gauss { mean, sd } if sd > 0.0 => {
                let z = (x - mean) / sd;
                if z > 0.0 {
                    let q = crate::stats::norm_sf(z);
                    (q, 1.0 - q)
                } else {
                    let f = crate::stats::norm_cdf(z);
                    (1.0 - f, f)
                }
            }
            EntryLaw::Max { .. } => {
                // ln_sf is ln1m_exp(ln_cdf) for a max: one ln_cdf serves both.
                let l = self.ln_cdf(x);
                (ln1m_exp(l).exp(), l.exp())
            }
            _ => (self.ln_sf(x).exp(), self.ln_cdf(x).exp()),
        }
    }

    /// ([`EntryLaw::sf_cdf`], [`EntryLaw::ln_pdf`]) at x, the same values; the max of distractor
    /// tokens (an order statistic's every density evaluation on Quest's pages) computes its
    /// token's ln_cdf once for the three.
    #[inline]
    pub(crate) fn sf_cdf_ln_pdf(&self, x: f64) -> (f64, f64, f64) {
        match *self {
            EntryLaw::Max { token, n_dist, n_needle: 0, .. } if n_dist > 0 => {
                let l = token.ln_cdf(x);
                // As ln_cdf sums it (from 0.0, which a −0 term does not change to −0).
                let mut ln_cdf = 0.0;
                ln_cdf += n_dist as f64 * l;
                let n = n_dist as f64;
                (ln1m_exp(ln_cdf).exp(), ln_cdf.exp(), n.ln() + (n - 1.0) * l + token.ln_pdf(x))
            }
            _ => {
                let (q, f) = self.sf_cdf(x);
                (q, f, self.ln_pdf(x))
            }
        }
    }

    /// ln of the density at x. Only for laws with a density: a point mass, or a max with a
    /// point-mass needle token, returns NaN (such laws are only ever needle laws).
    pub(crate) fn ln_pdf(&self, x: f64) -> f64 {
        match *self {
            EntryLaw::Gauss { mean, sd } => {
                if sd > 0.0 {
                    ln_norm_pdf((x - mean) / sd) - sd.ln()
                } else {
                    f64::NAN
                }
            }
            EntryLaw::Token(t) => t.ln_pdf(x),
            EntryLaw::Max { token, n_dist, n_needle, .. } => {
                if n_needle == 0 && n_dist > 0 {
                    let n = n_dist as f64;
                    n.ln() + (n - 1.0) * token.ln_cdf(x) + token.ln_pdf(x)
                } else {
                    f64::NAN
                }
            }
        }
    }

    /// Draws one score.
    #[inline]
    pub(crate) fn sample<R: rand::Rng + ?Sized>(&self, rng: &mut R) -> f64 {
        use rand_distr::StandardNormal;
        match *self {
            EntryLaw::Gauss { mean, sd } => mean + sd * rng.sample::<f64, _>(StandardNormal),
            EntryLaw::Token(t) => t.sample(rng),
            EntryLaw::Max { token, n_dist, n_needle, needle_mean, needle_sd } => {
                let mut m = f64::NEG_INFINITY;
                for _ in 0..n_dist {
                    m = m.max(token.sample(rng));
                }
                for _ in 0..n_needle {
                    m = m.max(needle_mean + needle_sd * rng.sample::<f64, _>(StandardNormal));
                }
                m
            }
        }
    }

    /// A point where the law's CDF has a jump or a kink worth splitting an integral at.
    pub(crate) fn breakpoint(&self) -> Option<f64> {
        match *self {
            EntryLaw::Gauss { mean, sd: 0.0 } => Some(mean),
            EntryLaw::Max { n_needle, needle_mean, needle_sd, .. } if n_needle > 0 && needle_sd == 0.0 => {
                Some(needle_mean)
            }
            _ => None,
        }
    }

    /// A central location of the law (for bracketing searches).
    pub fn location(&self) -> f64 {
        match *self {
            EntryLaw::Gauss { mean, .. } => mean,
            EntryLaw::Token(_) => 0.0,
            EntryLaw::Max { n_dist, n_needle, needle_mean, .. } => {
                let d = if n_dist > 1 { (2.0 * (n_dist as f64).ln()).sqrt() * 0.8 } else { 0.0 };
                if n_needle > 0 {
                    d.max(needle_mean)
                } else {
                    d
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::quadrature::integrate;
    use crate::scenario::Distractor;

    #[test]
    fn max_law_density_integrates_to_its_cdf() {
        for d in [Distractor::Normal, Distractor::Gumbel, Distractor::StudentT(5.0)] {
            let law =
                EntryLaw::Max { token: TokenLaw::new(d), n_dist: 16, n_needle: 0, needle_mean: 0.0, needle_sd: 1.0 };
            for &x in &[0.5, 1.7, 3.0] {
                let c = integrate(|t| law.ln_pdf(t).exp(), -60.0, x, &[0.0, 1.0], 1e-13);
                assert!((c - law.ln_cdf(x).exp()).abs() < 1e-9, "{d}: {c} vs {}", law.ln_cdf(x).exp());
                assert!((law.sf(x) - law.ln_sf(x).exp()).abs() < 1e-14);
            }
        }
    }

    /// The combined evaluation is the three separate ones, bit for bit, on every kind of law.
    #[test]
    fn sf_cdf_ln_pdf_is_the_separate_evaluations() {
        let mut laws = vec![EntryLaw::Gauss { mean: 0.3, sd: 1.2 }, EntryLaw::Token(TokenLaw::new(Distractor::Normal))];
        for d in [Distractor::Normal, Distractor::Gumbel, Distractor::StudentT(5.0)] {
            for (n_dist, n_needle) in [(16, 0), (1, 0), (15, 1), (0, 2)] {
                laws.push(EntryLaw::Max {
                    token: TokenLaw::new(d),
                    n_dist,
                    n_needle,
                    needle_mean: 2.0,
                    needle_sd: 0.5,
                });
            }
        }
        for law in laws {
            for i in -400..=400 {
                let x = i as f64 * 0.025;
                let (q, f, g) = law.sf_cdf_ln_pdf(x);
                let (q0, f0) = law.sf_cdf(x);
                let bits = |v: f64| v.to_bits();
                assert_eq!((bits(q), bits(f), bits(g)), (bits(q0), bits(f0), bits(law.ln_pdf(x))), "{law:?} at {x}");
                if let EntryLaw::Max { .. } = law {
                    assert_eq!(
                        (bits(q0), bits(f0)),
                        (bits(law.ln_sf(x).exp()), bits(law.ln_cdf(x).exp())),
                        "{law:?} at {x}"
                    );
                }
            }
        }
    }

    #[test]
    fn ln1m_exp_is_accurate() {
        for &a in &[-1e-20, -1e-8, -0.5, -0.7, -3.0, -50.0] {
            let direct = (1.0 - f64::exp(a)).ln();
            let v = ln1m_exp(a);
            if a < -1e-3 {
                assert!((v - direct).abs() < 1e-12, "{a}");
            }
        }
        assert!((ln1m_exp(-1e-20) - (1e-20f64).ln()).abs() < 1e-9);
    }
}
