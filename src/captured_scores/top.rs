//! A query's upper tail located and scaled by its own top scores: the threshold u_q is the
//! query's (m + 1)-th largest distractor (m a fixed fraction of its distractors), the scale s_q
//! the mean excess of the scores above it, and the standardised excesses (z − u_q)/s_q of every
//! query share one generalised-Pareto law, fitted pooled ([`super::tail::fit_gpd`]).
//!
//! Why beside the classes' standardisation by mean and sd ([`super::classes`]): a query's mean
//! and sd are set by the bulk of its candidates, and where that bulk is a different law from the
//! top (a lexical ranker scores most candidates 0 and a few far above; an embedding model's
//! near-duplicates sit apart from the rest), queries with the same sd have top tails of very
//! different widths. Recall at k = 1 beyond the capture is P(none of the new candidates beats
//! the needle), which hangs on the tail just above the query's own largest distractors: this
//! model measures each query's tail there, in its own units, and pools only the shape.
//!
//! The excesses are standardised by the very scale fitted to them, so the pooled law is that of
//! in-sample standardised excesses (each query's have mean 1): lighter than the law of a new
//! excess over the same scale. No likelihood argument makes that right; whether it predicts is
//! decided on the capture itself ([`mod@super::predict`]: each candidate tail model is fitted on half
//! of every query's distractors and scored by how well it predicts the recall the whole capture
//! measures), and it is used only where it predicts better than the classes, its fractions then
//! mixed by how well each predicts.

use super::tail::{fit_gpd, fit_gpd_weighted, Gpd};
use super::ScoresError;

/// The fractions of a query's distractors that the candidate thresholds leave above them.
pub const TOP_FRACTIONS: [f64; 4] = [0.0025, 0.005, 0.01, 0.02];

/// Fewest top scores a query's threshold leaves above it (before ties).
pub const MIN_TOP: usize = 3;

/// One query's top: its threshold, how many distractors exceed it, and their mean excess.
#[derive(Debug, Clone, PartialEq)]
pub struct QueryTop {
    /// The threshold u_q.
    pub u: f64,
    /// The query's distractors.
    pub n: usize,
    /// Its distractors strictly above u_q.
    pub above: usize,
    /// Their mean excess over u_q (0 when none is above: a query whose scores are all equal).
    pub scale: f64,
}

/// How many top scores a threshold at `fraction` leaves above it among n distractors.
pub fn top_count(n: usize, fraction: f64) -> usize {
    ((fraction * n as f64).round() as usize).max(MIN_TOP).min(n.saturating_sub(1))
}

impl QueryTop {
    /// The top of one query's distractors (sorted high first). u_q is the (m + 1)-th largest;
    /// where ties put the largest at u_q too, u_q moves down to the first score below the
    /// largest, so every query with two distinct scores has a tail.
    pub fn new(sorted: &[f64], fraction: f64) -> QueryTop {
        let n = sorted.len();
        let m = top_count(n, fraction);
        let mut u = sorted[m];
        if sorted[0] <= u {
            u = sorted.iter().copied().find(|&v| v < sorted[0]).unwrap_or(sorted[0]);
        }
        let above = sorted.partition_point(|&v| v > u);
        let scale = if above == 0 { 0.0 } else { sorted[..above].iter().map(|v| v - u).sum::<f64>() / above as f64 };
        QueryTop { u, n, above, scale }
    }

    /// The standardised excesses (z − u_q)/s_q of the query's top scores.
    pub fn excesses<'a>(&'a self, sorted: &'a [f64]) -> impl Iterator<Item = f64> + 'a {
        sorted[..self.above].iter().map(move |v| (v - self.u) / self.scale)
    }

    /// P(a distractor of this query scores above x): its own exceedance fraction at or below
    /// u_q (`own_above` = its distractors above x), the fraction above u_q times the pooled
    /// law of the standardised excess beyond it.
    pub fn survival(&self, x: f64, own_above: usize, gpd: &Gpd) -> f64 {
        if x <= self.u {
            return own_above as f64 / self.n as f64;
        }
        if self.above == 0 {
            return 0.0;
        }
        self.above as f64 / self.n as f64 * gpd.sf((x - self.u) / self.scale)
    }
}

/// The pooled law of every query's standardised excesses, query q counted `mult[q]` times (None:
/// once each, the unweighted fit to the last bit).
pub fn fit_pooled(tops: &[QueryTop], sorted: &[&[f64]], mult: Option<&[f64]>) -> Result<Gpd, ScoresError> {
    let mut y = Vec::new();
    let mut w = Vec::new();
    for (q, (t, s)) in tops.iter().zip(sorted).enumerate() {
        let m = mult.map_or(1.0, |m| m[q]);
        if m > 0.0 {
            y.extend(t.excesses(s));
            w.resize(y.len(), m);
        }
    }
    match mult {
        None => fit_gpd(&y),
        Some(_) => fit_gpd_weighted(&y, &w),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thresholds_step_below_ties_at_the_top() {
        // 2,000 scores 0..1999 descending: m = 5 at 0.25%, u the 6th largest.
        let s: Vec<f64> = (0..2000).rev().map(|v| v as f64).collect();
        let t = QueryTop::new(&s, 0.0025);
        assert_eq!((t.u, t.above, t.scale), (1994.0, 5, 3.0));
        assert_eq!(t.excesses(&s).collect::<Vec<_>>(), vec![5.0 / 3.0, 4.0 / 3.0, 1.0, 2.0 / 3.0, 1.0 / 3.0]);
        // The largest tied down past m: u moves to the first lower score.
        let mut tied = vec![9.0; 8];
        tied.extend([3.0, 1.0, 0.0, 0.0]);
        let t = QueryTop::new(&tied, 0.0025);
        assert_eq!((t.u, t.above, t.scale), (3.0, 8, 6.0));
        // All equal: no tail, nothing beats the largest.
        let flat = QueryTop::new(&[2.0; 10], 0.5);
        assert_eq!(flat.above, 0);
        assert_eq!(flat.survival(2.5, 0, &Gpd { xi: 0.0, sigma: 1.0 }), 0.0);
        // Below u: the query's own fraction; above: the fraction above u times the pooled law.
        let g = Gpd { xi: 0.0, sigma: 1.0 };
        let t = QueryTop::new(&s, 0.0025);
        assert_eq!(t.survival(1990.0, 9, &g), 9.0 / 2000.0);
        assert!((t.survival(1994.0 + 3.0 * 2.0, 0, &g) - 5.0 / 2000.0 * (-2.0f64).exp()).abs() < 1e-18);
    }
}
