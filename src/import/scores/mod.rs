//! Captured indexer scores: the needle's exact rank per query and layer, the empirical law of
//! the distractors beside it, that law's upper tail against the normal and a generalised-Pareto
//! fit of it, and the recall each query's own sample predicts at other candidate counts and k.
//!
//! A capture holds, per layer, one row per query: the indexer's score of every candidate that
//! query could select and which candidate is the needle's. The rank is the model's definition
//! (1 + the candidates scoring strictly above the needle's); a candidate scored −∞ is masked
//! (not a candidate: a causal mask, a padded slot) and counts for nothing.
//!
//! Prediction (docs/capture.md#captured-scores): at N candidates a query whose needle scored x
//! and was beaten by a of its n captured distractors is selected with probability
//! P[Hypergeometric(n, a, N − 1) ≤ k − 1] while N − 1 ≤ n (its own sample, subsampled: no
//! fitted law), and P[a + Binomial(N − 1 − n, Q(x)) ≤ k − 1] beyond (its own draw kept, only
//! the rest drawn), Q the survival of its distractor law. The empirical law alone says Q(x) = 0
//! once x beats the whole sample, which over-predicts recall as soon as N outgrows the sample;
//! above a threshold Q comes from a generalised-Pareto tail fitted to the pooled standardised
//! exceedances ([`tail`]), one per tail class of queries where the capture's queries differ in
//! tail weight ([`classes`]: a mixture fitted by EM, the class count chosen by held-out
//! likelihood, the recall of each query averaged over its class probabilities), or, where the
//! classes are biased on the capture's own halves, from each query's own top scores, its scale
//! drawn from a law shared by the queries ([`top`], chosen in [`mod@predict`]).

pub mod classes;
pub(crate) mod law;
pub mod predict;
pub(crate) mod read;
pub mod tail;
pub mod top;

use crate::error::{Classify, ErrorKind};

pub use classes::{ClassChoice, TailClass};
pub use law::{EmpiricalLaw, EmpiricalModel};
pub use predict::{
    predict, predict_observed, predict_report, tail_classes, LayerClasses, LayerTail, PredictOptions, Prediction,
    Report, TailChoice, TailModel, Validation,
};
pub use read::{read_file, MAX_SCORES};
pub use tail::{fit_gpd, Gpd, TailSummary};

/// Why a capture could not be read or used: always the user's file, so always bad input.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ScoresError(pub String);

impl Classify for ScoresError {
    fn kind(&self) -> ErrorKind {
        ErrorKind::Input
    }
}

/// One query of one layer: the needle's score and the distractors' scores, sorted from the
/// highest down (masked candidates dropped).
#[derive(Debug, Clone, PartialEq)]
pub struct QueryScores {
    /// The needle candidate's score.
    pub needle: f64,
    /// Every other unmasked candidate's score, highest first.
    pub distractors: Vec<f64>,
}

impl QueryScores {
    /// Builds a query from its row of scores and the needle's index in it. `where_` names the
    /// row in error messages ("FILE: layer 0, query 3").
    pub fn from_row(row: &[f64], needle_index: usize, where_: &str) -> Result<QueryScores, ScoresError> {
        if needle_index >= row.len() {
            return Err(ScoresError(format!(
                "{where_}: needle_index {needle_index} is outside the row's {} candidates",
                row.len()
            )));
        }
        let mut distractors = Vec::with_capacity(row.len().saturating_sub(1));
        for (j, &v) in row.iter().enumerate() {
            if v.is_nan() || v == f64::INFINITY {
                return Err(ScoresError(format!(
                    "{where_}: candidate {j} scores {v} (scores must be finite; −inf marks a masked candidate)"
                )));
            }
            if j != needle_index && v != f64::NEG_INFINITY {
                distractors.push(v);
            }
        }
        let needle = row[needle_index];
        if needle == f64::NEG_INFINITY {
            return Err(ScoresError(format!("{where_}: the needle candidate {needle_index} is masked (−inf)")));
        }
        if distractors.len() < 2 {
            return Err(ScoresError(format!("{where_}: fewer than 2 unmasked distractors; nothing to rank against")));
        }
        distractors.sort_unstable_by(|a, b| b.total_cmp(a));
        Ok(QueryScores { needle, distractors })
    }

    /// 1 + the number of distractors scoring strictly above the needle.
    pub fn rank(&self) -> u64 {
        1 + self.above(self.needle) as u64
    }

    /// The number of distractors scoring strictly above `x` (the sample is sorted).
    pub(crate) fn above(&self, x: f64) -> usize {
        self.distractors.partition_point(|&d| d > x)
    }

    /// The distractors' sample mean and standard deviation (n − 1 denominator).
    pub(crate) fn mean_sd(&self) -> (f64, f64) {
        let n = self.distractors.len() as f64;
        let mean = self.distractors.iter().sum::<f64>() / n;
        let var = self.distractors.iter().map(|d| (d - mean) * (d - mean)).sum::<f64>() / (n - 1.0);
        (mean, var.sqrt())
    }
}

/// One layer's queries.
#[derive(Debug, Clone, PartialEq)]
pub struct LayerScores {
    /// The layer's index in the capture (0-based, in file order).
    pub layer: usize,
    /// Its queries, in file order.
    pub queries: Vec<QueryScores>,
}

/// A whole capture: every layer holds the same queries, in the same order.
#[derive(Debug, Clone, PartialEq)]
pub struct CapturedScores {
    /// The layers, in file order.
    pub layers: Vec<LayerScores>,
}

impl CapturedScores {
    /// The number of queries (the same in every layer).
    pub fn queries(&self) -> usize {
        self.layers.first().map_or(0, |l| l.queries.len())
    }
}

/// The ranks of one layer's needles: their quantiles and P(rank ≤ j) at chosen j.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct RankSummary {
    /// The layer.
    pub(crate) layer: usize,
    /// Queries.
    pub(crate) queries: usize,
    /// Median number of candidates per query (distractors + the needle).
    pub(crate) median_candidates: usize,
    /// (p, rank) for p in [`RANK_PROBS`]: the smallest rank r with P(rank ≤ r) ≥ p.
    pub(crate) quantiles: Vec<(f64, u64)>,
    /// (j, fraction of queries with rank ≤ j).
    pub(crate) cdf: Vec<(u64, f64)>,
}

/// The rank quantiles reported.
pub(crate) const RANK_PROBS: [f64; 5] = [0.1, 0.25, 0.5, 0.75, 0.9];

/// The ranks of every layer, P(rank ≤ j) at `js` (and at powers of two up to the largest
/// candidate count when `js` is empty).
pub(crate) fn rank_summary(c: &CapturedScores, js: &[u64]) -> Vec<RankSummary> {
    c.layers
        .iter()
        .map(|l| {
            let mut ranks: Vec<u64> = l.queries.iter().map(QueryScores::rank).collect();
            ranks.sort_unstable();
            let n = ranks.len();
            let quantiles = RANK_PROBS
                .iter()
                .map(|&p| {
                    // The smallest r with #{rank ≤ r} ≥ p·n: the ⌈p·n⌉-th smallest rank.
                    let i = ((p * n as f64).ceil() as usize).clamp(1, n) - 1;
                    (p, ranks[i])
                })
                .collect();
            let mut cands: Vec<usize> = l.queries.iter().map(|q| q.distractors.len() + 1).collect();
            cands.sort_unstable();
            let median_candidates = cands[(n - 1) / 2];
            let grid: Vec<u64> = if js.is_empty() {
                let top = *cands.last().expect("a layer has queries (read_file refuses one without)") as u64;
                std::iter::successors(Some(1u64), |&j| (j < top).then(|| (j * 2).min(top))).collect()
            } else {
                js.to_vec()
            };
            let cdf = grid.iter().map(|&j| (j, ranks.partition_point(|&r| r <= j) as f64 / n as f64)).collect();
            RankSummary { layer: l.layer, queries: n, median_candidates, quantiles, cdf }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranks_count_strictly_higher_unmasked_distractors() {
        let row = [0.5, 2.0, f64::NEG_INFINITY, 1.0, 1.0, 3.0];
        let q = QueryScores::from_row(&row, 3, "t").unwrap();
        assert_eq!(q.distractors, vec![3.0, 2.0, 1.0, 0.5]);
        // 3.0 and 2.0 beat the needle's 1.0; the tie at 1.0 does not; −inf is no candidate.
        assert_eq!(q.rank(), 3);
        assert!(QueryScores::from_row(&[1.0, f64::NAN, 0.0], 0, "f.npz: layer 0, query 2")
            .unwrap_err()
            .0
            .contains("query 2: candidate 1 scores NaN"));
        assert!(QueryScores::from_row(&[1.0, 2.0, 0.0], 3, "t").is_err());
        assert!(QueryScores::from_row(&[f64::NEG_INFINITY, 2.0, 0.0], 0, "t").unwrap_err().0.contains("masked"));
    }

    #[test]
    fn rank_quantiles_and_cdf() {
        // Ranks 1..=10 (needle at 10 − r + ... ): query r has r − 1 distractors above.
        let queries = (1..=10)
            .map(|r| {
                let mut row: Vec<f64> = (0..12).map(|j| -(j as f64)).collect();
                // The needle sits just below the first r − 1 candidates.
                row.push(-(r as f64 - 1.0) + 0.5);
                QueryScores::from_row(&row, 12, "t").unwrap()
            })
            .collect();
        let c = CapturedScores { layers: vec![LayerScores { layer: 0, queries }] };
        let s = &rank_summary(&c, &[1, 5, 10])[0];
        assert_eq!(s.cdf, vec![(1, 0.1), (5, 0.5), (10, 1.0)]);
        assert_eq!(s.quantiles, vec![(0.1, 1), (0.25, 3), (0.5, 5), (0.75, 8), (0.9, 9)]);
        assert_eq!(s.median_candidates, 13);
    }
}
