//! Recall predicted from captured scores at other candidate counts and k.
//!
//! Each query keeps its own needle score x, standardised by its own distractors' mean and sd.
//! At a scenario with N candidates the needle competes with N − 1 fresh distractors from the
//! layer's distractor law, so it is selected with probability P[Binomial(N − 1, Q(x)) ≤ k_eff
//! − 1]. The law is location-scale across queries: Q(x) is the exceedance fraction of the
//! pooled standardised distractors while x lies below the tail threshold u, and above it the
//! pooled fraction beyond u times the fitted generalised-Pareto survival of the excess
//! ([`super::tail`]). (A query's own 2,000 distractors alone would put a few samples near a
//! needle at k/N ~ 10^-3, and the binomial's steep step turns that noise into bias.) A query's layers resample independently, so with
//! several layers the needle is attended unless every layer misses it (readout `any`).
//! Recall = p_guess + (p_read − p_guess) · P(attended); a needle in the window or sink is
//! attended. The band is a 95% percentile bootstrap over queries, the tail refitted in every
//! resample, each resample's randomness from (seed, resample) alone.

use super::tail::{excesses, fit_gpd, standardised, threshold_rank, Gpd};
use super::{CapturedScores, ScoresError};
use crate::geometry::Geometry;
use crate::scenario::Scenario;
use crate::stats::binom_cdf;
use rand::Rng;
use rayon::prelude::*;

/// How predictions are made.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PredictOptions {
    /// Bootstrap resamples for the band.
    pub resamples: usize,
    /// The bootstrap's seed.
    pub seed: u64,
}

impl Default for PredictOptions {
    fn default() -> Self {
        PredictOptions { resamples: 200, seed: crate::engine::DEFAULT_SEED }
    }
}

/// The prediction for one scenario.
#[derive(Debug, Clone, PartialEq)]
pub struct Prediction {
    /// The scenario's context length.
    pub context_len: u64,
    /// Its index_topk.
    pub index_topk: u64,
    /// Candidates N at that context length.
    pub n_candidates: u64,
    /// Recall with the fitted tail.
    pub recall: f64,
    /// The 95% bootstrap band.
    pub low: f64,
    /// The 95% bootstrap band.
    pub high: f64,
    /// Recall from the empirical law alone (Q(x) = 0 once x beats the whole sample): what the
    /// tail fit corrects.
    pub recall_empirical: f64,
}

/// Grid points of the pooled survival below the threshold, for the bootstrap.
const GRID: usize = 512;

/// One layer's standardised capture: what a prediction needs of it.
struct LayerModel {
    /// Each query's standardised distractors, highest first.
    z: Vec<Vec<f64>>,
    /// Every standardised distractor of the layer, highest first.
    pooled: Vec<f64>,
    /// The tail threshold u.
    u: f64,
    /// Each query's standardised needle score.
    needle: Vec<f64>,
    /// Ascending grid from the pooled minimum to u, and per query the count above each point.
    grid: Vec<f64>,
    counts: Vec<Vec<u32>>,
}

impl LayerModel {
    fn new(c: &CapturedScores, l: usize) -> LayerModel {
        let layer = &c.layers[l];
        let z = standardised(layer);
        let needle = layer
            .queries
            .iter()
            .map(|q| {
                let (m, sd) = q.mean_sd();
                (q.needle - m) / if sd > 0.0 { sd } else { 1.0 }
            })
            .collect();
        let mut pooled: Vec<f64> = z.iter().flatten().cloned().collect();
        pooled.sort_unstable_by(|a, b| b.total_cmp(a));
        let u = pooled[threshold_rank(pooled.len())];
        let lo = *pooled.last().unwrap();
        let grid: Vec<f64> = (0..GRID).map(|i| lo + (u - lo) * i as f64 / (GRID - 1) as f64).collect();
        let counts = z.iter().map(|zq| grid.iter().map(|&g| zq.partition_point(|&v| v > g) as u32).collect()).collect();
        LayerModel { z, pooled, u, needle, grid, counts }
    }

    /// The pooled fraction of distractors above x (exact, from the pooled sample).
    fn pooled_sf(&self, x: f64) -> f64 {
        self.pooled.partition_point(|&v| v > x) as f64 / self.pooled.len() as f64
    }

    /// Q(x) of query `q`'s needle: the pooled law below u, the tail above it (None: the
    /// empirical law alone).
    fn survival(&self, q: usize, gpd: Option<&Gpd>) -> f64 {
        let x = self.needle[q];
        match gpd {
            Some(g) if x > self.u => self.pooled_sf(self.u) * g.sf(x - self.u),
            _ => self.pooled_sf(x),
        }
    }

    /// [`LayerModel::survival`] of every query under a bootstrap resample: the pooled law of
    /// the resampled queries on the grid (linear between points), their refitted tail above u.
    fn resampled_survival(&self, weights: &[u32], gpd: Option<&Gpd>) -> Vec<f64> {
        let total: f64 = self.z.iter().zip(weights).map(|(zq, &w)| w as f64 * zq.len() as f64).sum();
        let mut sf = vec![0.0f64; GRID];
        for (cq, &w) in self.counts.iter().zip(weights) {
            if w > 0 {
                for (s, &c) in sf.iter_mut().zip(cq) {
                    *s += w as f64 * c as f64;
                }
            }
        }
        sf.iter_mut().for_each(|s| *s /= total);
        let at_u = sf[GRID - 1];
        let step = (self.grid[GRID - 1] - self.grid[0]) / (GRID - 1) as f64;
        self.needle
            .iter()
            .map(|&x| {
                if x > self.u {
                    return match gpd {
                        Some(g) => at_u * g.sf(x - self.u),
                        None => 0.0,
                    };
                }
                let t = ((x - self.grid[0]) / step).max(0.0);
                let i = (t.floor() as usize).min(GRID - 2);
                let f = (t - i as f64).clamp(0.0, 1.0);
                if x <= self.grid[0] {
                    1.0
                } else {
                    sf[i] + f * (sf[i + 1] - sf[i])
                }
            })
            .collect()
    }
}

/// Mean recall over the queries (weighted by `weights`, or all once) for every scenario, given
/// each layer's Q per query.
fn mean_recall(survival: &[Vec<f64>], weights: Option<&[u32]>, cells: &[(Scenario, Geometry)]) -> Vec<f64> {
    let n = survival[0].len();
    let w = |q: usize| weights.map_or(1.0, |w| w[q] as f64);
    let total: f64 = (0..n).map(w).sum();
    cells
        .iter()
        .map(|(s, g)| {
            let attended = if g.always_attended {
                1.0
            } else if g.n_candidates == 0 {
                0.0
            } else {
                let k_eff = g.k_eff;
                let d = g.n_candidates - 1;
                (0..n)
                    .filter(|&q| w(q) > 0.0)
                    .map(|q| {
                        // A query's layers resample independently: missed only if all miss.
                        let miss: f64 = survival.iter().map(|sl| 1.0 - binom_cdf(d, k_eff - 1, sl[q])).product();
                        w(q) * (1.0 - miss)
                    })
                    .sum::<f64>()
                    / total
            };
            g.answer_probability(s.p_read, s.p_guess, attended)
        })
        .collect()
}

/// Predicts recall at every scenario of `cells` from the capture.
pub fn predict(c: &CapturedScores, cells: &[Scenario], opts: PredictOptions) -> Result<Vec<Prediction>, ScoresError> {
    predict_observed(c, cells, opts, &crate::progress::Silent)
}

/// [`predict`], reporting the bootstrap's resamples to `progress` as they finish.
pub fn predict_observed(
    c: &CapturedScores,
    cells: &[Scenario],
    opts: PredictOptions,
    progress: &dyn crate::progress::Progress,
) -> Result<Vec<Prediction>, ScoresError> {
    let n = c.queries();
    if n == 0 {
        return Err(ScoresError("the capture holds no query".into()));
    }
    let models: Vec<LayerModel> = (0..c.layers.len()).map(|l| LayerModel::new(c, l)).collect();
    let fit = |m: &LayerModel, idx: &mut dyn Iterator<Item = usize>| fit_gpd(&excesses(&m.z, m.u, idx));
    let tails: Vec<Gpd> = models
        .iter()
        .zip(&c.layers)
        .map(|(m, l)| fit(m, &mut (0..n)).map_err(|e| ScoresError(format!("layer {}: {}", l.layer, e.0))))
        .collect::<Result<_, _>>()?;
    let cells: Vec<(Scenario, Geometry)> = cells.iter().map(|s| (s.clone(), Geometry::new(s))).collect();
    let point_sf: Vec<Vec<f64>> = models.iter().zip(&tails).map(|(m, g)| (0..n).map(|q| m.survival(q, Some(g))).collect()).collect();
    let empirical_sf: Vec<Vec<f64>> = models.iter().map(|m| (0..n).map(|q| m.survival(q, None)).collect()).collect();
    let point = mean_recall(&point_sf, None, &cells);
    let empirical = mean_recall(&empirical_sf, None, &cells);
    // The bootstrap: resample queries (as needles and as distractor samples alike), refit each
    // layer's tail on them, predict again.
    progress.start(opts.resamples as u64, 0);
    let reps: Vec<Vec<f64>> = (0..opts.resamples)
        .into_par_iter()
        .map(|b| {
            let mut rng = crate::trials::trial_rng(opts.seed, b as u64);
            let mut weights = vec![0u32; n];
            let mut idx = Vec::with_capacity(n);
            for _ in 0..n {
                let q = rng.random_range(0..n);
                weights[q] += 1;
                idx.push(q);
            }
            let sf: Vec<Vec<f64>> = models
                .iter()
                .map(|m| {
                    let g = fit(m, &mut idx.iter().cloned()).ok();
                    m.resampled_survival(&weights, g.as_ref())
                })
                .collect();
            let r = mean_recall(&sf, Some(&weights), &cells);
            progress.advance(1);
            r
        })
        .collect();
    progress.finish();
    Ok(cells
        .iter()
        .enumerate()
        .map(|(i, (s, g))| {
            let mut v: Vec<f64> = reps.iter().map(|r| r[i]).collect();
            v.sort_by(|a, b| a.total_cmp(b));
            let at = |p: f64| if v.is_empty() { point[i] } else { v[((p * (v.len() - 1) as f64).round() as usize).min(v.len() - 1)] };
            Prediction {
                context_len: s.context_len,
                index_topk: s.index_topk,
                n_candidates: g.n_candidates,
                recall: point[i],
                low: at(0.025).min(point[i]),
                high: at(0.975).max(point[i]),
                recall_empirical: empirical[i],
            }
        })
        .collect())
}
