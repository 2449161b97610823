//! Recall predicted from captured scores at other candidate counts and k.
//!
//! Each query keeps its own needle score x, standardised by its own distractors' mean and sd.
//! At a scenario with N candidates the needle competes with N − 1 fresh distractors from its
//! query's distractor law, so it is selected with probability P[Binomial(N − 1, Q(x)) ≤ k_eff
//! − 1]. The law is location-scale across the queries of one tail class ([`super::classes`]):
//! Q(x) is the exceedance fraction of the class's standardised distractors (its queries' pooled
//! sample, weighted by their responsibilities) while x lies below the tail threshold u, and
//! above it the class's fraction beyond u times its generalised-Pareto survival of the excess.
//! A query's prediction is the average of its class predictions with its posterior class
//! weights: mixing at the recall level, not the tail level, because recall is convex in Q
//! (see [`super::classes`] for why that matters most at k = 1). With one class (the count is
//! chosen by held-out likelihood, and one class is kept unless more are supported) this is the
//! pooled law of every query with one tail fit, as before classes. (A query's own 2,000
//! distractors alone would put a few samples near a needle at k/N ~ 10^-3, and the binomial's
//! steep step turns that noise into bias.) A query's layers resample independently, so with
//! several layers the needle is attended unless every layer misses it (readout `any`).
//! Recall = p_guess + (p_read − p_guess) · P(attended); a needle in the window or sink is
//! attended. The band is a 95% percentile bootstrap over queries, the tail (with several
//! classes: the mixture, by EM warm-started from the capture's fit, the class count held) refitted
//! in every resample, each resample's randomness from (seed, resample) alone.

use super::classes::{self, ClassChoice, QueryTail, Start, TailClass};
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
    /// Most tail classes per layer ([`super::classes`]); the count is chosen by held-out
    /// likelihood up to this. 1: one pooled law and tail for every query.
    pub max_classes: usize,
}

impl Default for PredictOptions {
    fn default() -> Self {
        PredictOptions { resamples: 200, seed: crate::engine::DEFAULT_SEED, max_classes: classes::MAX_CLASSES }
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
    /// Each query's excesses over u, for the tail classes.
    tails: Vec<QueryTail>,
}

/// Per query, its (class weight, Q of its needle under that class) pairs.
type Survival = Vec<Vec<(f64, f64)>>;

impl LayerModel {
    fn new(c: &CapturedScores, l: usize) -> LayerModel {
        let layer = &c.layers[l];
        let z = standardised(layer);
        let needle: Vec<f64> = layer
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
        let tails = z.iter().zip(&needle).map(|(zq, &x)| QueryTail { n: zq.len(), y: zq.iter().take_while(|&&v| v > u).map(|v| v - u).collect(), needle: x }).collect();
        LayerModel { z, pooled, u, needle, grid, counts, tails }
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

    /// Every query's (weight, Q) pairs under a fitted mixture: class c's body is its queries'
    /// exact exceedance fraction weighted by their responsibilities, its tail p_c times its GPD.
    /// One class is [`LayerModel::survival`] exactly.
    fn class_survival(&self, m: &classes::Mixture) -> Survival {
        if m.classes.len() == 1 {
            let g = m.classes[0].gpd;
            return (0..self.z.len()).map(|q| vec![(1.0, self.survival(q, Some(&g)))]).collect();
        }
        let ncls = m.classes.len();
        let denom: Vec<f64> = (0..ncls).map(|c| self.z.iter().zip(&m.resp).map(|(zq, r)| r[c] * zq.len() as f64).sum()).collect();
        (0..self.z.len())
            .map(|q| {
                let x = self.needle[q];
                (0..ncls)
                    .map(|c| {
                        let cl = &m.classes[c];
                        let sf = if x > self.u {
                            cl.p_u * cl.gpd.sf(x - self.u)
                        } else {
                            self.z.iter().zip(&m.resp).map(|(zq, r)| r[c] * zq.partition_point(|&v| v > x) as f64).sum::<f64>() / denom[c]
                        };
                        (m.resp[q][c], sf)
                    })
                    .collect()
            })
            .collect()
    }

    /// Q at `x` from a survival tabulated on the grid (linear between points) below u and
    /// `at_u` times the tail above (no tail: 0).
    fn on_grid(&self, sf: &[f64], x: f64, gpd: Option<&Gpd>) -> f64 {
        if x > self.u {
            return match gpd {
                Some(g) => sf[GRID - 1] * g.sf(x - self.u),
                None => 0.0,
            };
        }
        let step = (self.grid[GRID - 1] - self.grid[0]) / (GRID - 1) as f64;
        let t = ((x - self.grid[0]) / step).max(0.0);
        let i = (t.floor() as usize).min(GRID - 2);
        let f = (t - i as f64).clamp(0.0, 1.0);
        if x <= self.grid[0] {
            1.0
        } else {
            sf[i] + f * (sf[i + 1] - sf[i])
        }
    }

    /// The survival on the grid of the queries weighted by `w` (multiplicity × responsibility).
    fn grid_sf(&self, w: impl Fn(usize) -> f64) -> Vec<f64> {
        let mut total = 0.0;
        let mut sf = vec![0.0f64; GRID];
        for (q, cq) in self.counts.iter().enumerate() {
            let wq = w(q);
            if wq > 0.0 {
                total += wq * self.z[q].len() as f64;
                for (s, &c) in sf.iter_mut().zip(cq) {
                    *s += wq * c as f64;
                }
            }
        }
        sf.iter_mut().for_each(|s| *s /= total);
        sf
    }

    /// [`LayerModel::survival`] of every query under a bootstrap resample: the pooled law of
    /// the resampled queries on the grid (linear between points), their refitted tail above u.
    fn resampled_survival(&self, weights: &[u32], gpd: Option<&Gpd>) -> Survival {
        let sf = self.grid_sf(|q| weights[q] as f64);
        self.needle.iter().map(|&x| vec![(1.0, self.on_grid(&sf, x, gpd))]).collect()
    }

    /// [`LayerModel::class_survival`] under a bootstrap resample: the mixture refitted by EM on
    /// the resampled queries (warm-started from the capture's classes), each class's body on
    /// the grid from the resampled queries weighted by their new responsibilities.
    fn resampled_class_survival(&self, m: &classes::Mixture, weights: &[u32]) -> Survival {
        let ncls = m.classes.len();
        let sfs: Vec<Vec<f64>> = (0..ncls).map(|c| self.grid_sf(|q| weights[q] as f64 * m.resp[q][c])).collect();
        (0..self.z.len())
            .map(|q| {
                let x = self.needle[q];
                (0..ncls).map(|c| (m.resp[q][c], self.on_grid(&sfs[c], x, Some(&m.classes[c].gpd)))).collect()
            })
            .collect()
    }
}

/// Mean recall over the queries (weighted by `weights`, or all once) for every scenario, given
/// each layer's (class weight, Q) pairs per query.
fn mean_recall(survival: &[Survival], weights: Option<&[u32]>, cells: &[(Scenario, Geometry)]) -> Vec<f64> {
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
                        // A query's layers resample independently: missed only if all miss. In
                        // a layer the query's class is unknown: its miss probability is the
                        // posterior-weighted average of the classes' (recall mixes, not tails).
                        let miss: f64 = survival.iter().map(|sl| sl[q].iter().map(|&(r, sf)| r * (1.0 - binom_cdf(d, k_eff - 1, sf))).sum::<f64>()).product();
                        w(q) * (1.0 - miss)
                    })
                    .sum::<f64>()
                    / total
            };
            g.answer_probability(s.p_read, s.p_guess, attended)
        })
        .collect()
}

/// One layer's tail classes as the prediction chose them.
#[derive(Debug, Clone, PartialEq)]
pub struct LayerClasses {
    /// The layer.
    pub layer: usize,
    /// The classes (weight, exceedance probability at u, GPD), and the held-out likelihood of
    /// every class count tried.
    pub choice: ClassChoice,
}

impl LayerClasses {
    /// The classes.
    pub fn classes(&self) -> &[TailClass] {
        &self.choice.mixture.classes
    }
}

/// Predictions with the tail classes they used.
#[derive(Debug, Clone, PartialEq)]
pub struct Report {
    /// One per scenario, in order.
    pub predictions: Vec<Prediction>,
    /// One per layer.
    pub classes: Vec<LayerClasses>,
}

fn choose_layer(m: &LayerModel, layer: usize, max_classes: usize) -> Result<ClassChoice, ScoresError> {
    classes::choose(&m.tails, max_classes).map_err(|e| ScoresError(format!("layer {layer}: {}", e.0)))
}

/// The tail classes of every layer (what [`predict`] chooses), without predicting.
pub fn tail_classes(c: &CapturedScores, max_classes: usize) -> Result<Vec<LayerClasses>, ScoresError> {
    if c.queries() == 0 {
        return Err(ScoresError("the capture holds no query".into()));
    }
    (0..c.layers.len())
        .map(|l| {
            let m = LayerModel::new(c, l);
            Ok(LayerClasses { layer: c.layers[l].layer, choice: choose_layer(&m, c.layers[l].layer, max_classes)? })
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
    Ok(predict_report(c, cells, opts, progress)?.predictions)
}

/// [`predict_observed`], with the tail classes each layer's prediction used.
pub fn predict_report(
    c: &CapturedScores,
    cells: &[Scenario],
    opts: PredictOptions,
    progress: &dyn crate::progress::Progress,
) -> Result<Report, ScoresError> {
    let n = c.queries();
    if n == 0 {
        return Err(ScoresError("the capture holds no query".into()));
    }
    let models: Vec<LayerModel> = (0..c.layers.len()).map(|l| LayerModel::new(c, l)).collect();
    let fit = |m: &LayerModel, idx: &mut dyn Iterator<Item = usize>| fit_gpd(&excesses(&m.z, m.u, idx));
    // One class is the pooled fit of every query's excesses (the first M-step is that fit, bit
    // for bit); more classes only where held-out likelihood supports them.
    let choices: Vec<ClassChoice> = models.iter().zip(&c.layers).map(|(m, l)| choose_layer(m, l.layer, opts.max_classes)).collect::<Result<_, _>>()?;
    let cells: Vec<(Scenario, Geometry)> = cells.iter().map(|s| (s.clone(), Geometry::new(s))).collect();
    let point_sf: Vec<Survival> = models.iter().zip(&choices).map(|(m, ch)| m.class_survival(&ch.mixture)).collect();
    let empirical_sf: Vec<Survival> = models.iter().map(|m| (0..n).map(|q| vec![(1.0, m.survival(q, None))]).collect()).collect();
    let point = mean_recall(&point_sf, None, &cells);
    let empirical = mean_recall(&empirical_sf, None, &cells);
    // The bootstrap: resample queries (as needles and as distractor samples alike), refit each
    // layer's tail on them (one class: the pooled tail; several: the mixture by EM with the
    // count held at the capture's choice), predict again.
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
            let sf: Vec<Survival> = models
                .iter()
                .zip(&choices)
                .map(|(m, ch)| {
                    if ch.classes() > 1 {
                        let mult: Vec<f64> = weights.iter().map(|&w| w as f64).collect();
                        // A resample in which a class falls below the fewest exceedances a fit
                        // accepts is refitted with one class: the pooled tail of the resample.
                        if let Ok(mix) = classes::fit(&m.tails, &mult, Start::From(&ch.mixture.classes)) {
                            return m.resampled_class_survival(&mix, &weights);
                        }
                    }
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
    let predictions = cells
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
        .collect();
    let classes = choices.into_iter().zip(&c.layers).map(|(choice, l)| LayerClasses { layer: l.layer, choice }).collect();
    Ok(Report { predictions, classes })
}
