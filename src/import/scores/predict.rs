//! Recall predicted from captured scores at other candidate counts and k.
//!
//! Each query keeps its own needle score x and its own captured draw: its n distractors, a of
//! which score above the needle. At a scenario with N candidates the needle competes with N − 1
//! distractors of its query's law. At N − 1 ≤ n they are a random N − 1 of the captured ones,
//! and the needle is selected with probability P[Hypergeometric(n, a, N − 1) ≤ k_eff − 1]:
//! exact, unbiased whatever the query's law, and no fitted law enters (at the captured count it
//! is the measured P(rank ≤ k)). At N − 1 > n the captured n are the first of them (a longer
//! context of the same texts keeps the texts it had): the a that beat the needle count against
//! k, and only the N − 1 − n not captured are drawn from the fitted law,
//! P[a + Binomial(N − 1 − n, Q(x)) ≤ k_eff − 1]. Why: recall at k = 1 hangs on the single
//! largest distractor, and drawing all N − 1 from a fitted law replaces the query's measured
//! a by the law's average, which is where pooling queries of different tail weight biased
//! k = 1 by several points; keeping a confines the fitted law to the extrapolation.
//!
//! Q is standardised by the query's own mean and sd and is location-scale across the queries of
//! one tail class ([`super::classes`]): the exceedance fraction of the class's standardised
//! distractors (its queries' pooled sample, weighted by their responsibilities) while x lies
//! below the tail threshold u, and above it the class's fraction beyond u times its
//! generalised-Pareto survival of the excess. A query's prediction is the average of its class
//! predictions with its posterior class weights: mixing at the recall level, not the tail
//! level, because recall is convex in Q. With one class (the count is chosen by held-out
//! likelihood, and one class is kept unless more are supported) this is the pooled law of every
//! query with one tail fit. A query's layers resample independently, so with several layers the
//! needle is attended unless every layer misses it (readout `any`). Recall = p_guess + (p_read
//! − p_guess) · P(attended); a needle in the window or sink is attended. The band is a 95%
//! percentile bootstrap over queries (each with its own draw), the tail (with several classes:
//! the mixture, by EM warm-started from the capture's fit, the class count held) refitted in
//! every resample, each resample's randomness from (seed, resample) alone.
//! Where the classes are biased on the capture itself (fitted on random halves of every
//! query's distractors, they mispredict the recall the whole capture measures by more than 3
//! standard errors at some k), the query-top model ([`super::top`]: each query's tail located
//! by its own top scores, its scale drawn from a law shared by the queries, averaged over its
//! posterior) replaces them where it predicts the halvings better and is not biased there
//! itself, every fraction mixed at the recall level with weights by how well each
//! predicts them ([`Validation::ln_weight`]); the band holds the chosen model and weights fixed.
//! `recall_empirical` is the pooled empirical law alone with every one of the N − 1 drawn from
//! it (no tail, no own draw): what the tail fit corrects beyond the sample.

use super::classes::{self, ClassChoice, QueryTail, Start, TailClass};
use super::tail::{excesses, fit_gpd, standardised, threshold_rank, Gpd};
use super::top::{self, QueryTop, TopFit, TopPrior};
use super::{CapturedScores, LayerScores, QueryScores, ScoresError};
use crate::geometry::Geometry;
use crate::scenario::Scenario;
use crate::stats::binom_cdf;
use rand::Rng;
use rayon::prelude::*;
use statrs::function::gamma::ln_gamma;

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
    /// Which tail models compete for each layer ([`TailChoice`]).
    pub tail_model: TailChoice,
}

impl Default for PredictOptions {
    fn default() -> Self {
        PredictOptions {
            resamples: 200,
            seed: crate::engine::DEFAULT_SEED,
            max_classes: classes::MAX_CLASSES,
            tail_model: TailChoice::Auto,
        }
    }
}

/// How a layer's distractor law beyond the capture is modelled.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum TailModel {
    /// Each query standardised by its mean and sd, the queries pooled in tail classes
    /// ([`super::classes`]).
    Classes,
    /// Each query's tail located by its own top scores (the threshold leaving this fraction of
    /// its distractors above it), its scale drawn from a law shared by the queries
    /// ([`super::top`]).
    QueryTop(f64),
}

impl std::fmt::Display for TailModel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            TailModel::Classes => write!(f, "classes"),
            TailModel::QueryTop(fr) => write!(f, "query-top {}%", fr * 100.0),
        }
    }
}

/// Which tail models compete for a layer, each fitted on halves of every query's distractors
/// and scored on the recall the whole capture measures (`validate_layer`): the classes stay
/// unless biased there ([`Validation::biased`]), else the best score wins (`fit_layer`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TailChoice {
    /// The classes and the query-top model at every fraction of [`top::TOP_FRACTIONS`].
    Auto,
    /// The classes alone (no validation).
    Classes,
    /// The query-top model, its fraction chosen among [`top::TOP_FRACTIONS`].
    QueryTop,
}

impl TailChoice {
    fn candidates(self) -> Vec<TailModel> {
        let tops = top::TOP_FRACTIONS.iter().map(|&f| TailModel::QueryTop(f));
        match self {
            TailChoice::Auto => std::iter::once(TailModel::Classes).chain(tops).collect(),
            TailChoice::Classes => vec![TailModel::Classes],
            TailChoice::QueryTop => tops.collect(),
        }
    }
}

/// Random halvings of every query's distractors the tail models are validated on.
pub(crate) const SPLITS: usize = 4;

/// The k at which validation compares predicted and measured recall.
pub(crate) const VALIDATION_KS: [u64; 4] = [1, 4, 16, 64];

/// Keeps the validation's halvings apart from the bootstrap's resamples of the same seed.
const VALIDATION_STREAM: u64 = 0x7661_6c69_6461_7465;

/// One candidate tail model's validation on a layer.
#[derive(Debug, Clone, PartialEq)]
pub struct Validation {
    /// The model.
    pub model: TailModel,
    /// Per k of `VALIDATION_KS`, predicted minus measured recall at the captured count from
    /// half the distractors, averaged over the `SPLITS` halvings; None where the model could
    /// not be fitted on some half (too few exceedances).
    pub errors: Option<Vec<f64>>,
    /// Per k, the standard error of that mean error over queries (each query's prediction
    /// averaged over the halvings first, its measured outcome fixed).
    pub standard_errors: Option<Vec<f64>>,
}

/// How many standard errors a validation error of the classes must reach at some k before
/// another model may replace them.
pub(crate) const SWITCH_SE: f64 = 3.0;

/// The smallest standard error a validation error is divided by in [`Validation::ln_weight`]:
/// at a k where every query is certain the standard error is ~0, and an error of rounding size
/// would otherwise decide the weights.
pub(crate) const SE_FLOOR: f64 = 1e-3 / SWITCH_SE;

impl Validation {
    /// The sum over k of the squared mean error (the smallest is chosen).
    pub fn score(&self) -> Option<f64> {
        self.errors.as_ref().map(|e| e.iter().map(|v| v * v).sum())
    }

    /// The validation's pseudo-log-likelihood, −½ Σ_k (error_k / s_k)², with `scale` the s_k
    /// ([`common_scale`]: one per k for every candidate, so a model is not favoured for being
    /// noisier; the k treated as independent, which they are not: recall at k = 4 and 16 share
    /// queries); None where the model could not be fitted on some half. Query-top fractions are
    /// mixed with weights proportional to its exponential.
    pub fn ln_weight(&self, scale: &[f64]) -> Option<f64> {
        let e = self.errors.as_ref()?;
        Some(-0.5 * e.iter().zip(scale).map(|(e, s)| (e / s).powi(2)).sum::<f64>())
    }

    /// Whether the error at some k exceeds `SWITCH_SE` standard errors (a model that fits
    /// within its noise at every k is not replaced).
    pub fn biased(&self) -> bool {
        match (&self.errors, &self.standard_errors) {
            // (An error under a tenth of a point is no bias worth a switch, and keeps a k where
            // every query is certain, se ≈ 0, from switching on rounding.)
            (Some(e), Some(se)) => e.iter().zip(se).any(|(e, se)| e.abs() > (SWITCH_SE * se).max(1e-3)),
            _ => false,
        }
    }
}

/// Per k, the mean of the fitted candidates' standard errors, floored at `SE_FLOOR`: the scale
/// every candidate's [`Validation::ln_weight`] divides its errors by (empty: none fitted).
pub fn common_scale(validation: &[Validation]) -> Vec<f64> {
    let se: Vec<&Vec<f64>> = validation.iter().filter_map(|v| v.standard_errors.as_ref()).collect();
    if se.is_empty() {
        return Vec::new();
    }
    (0..VALIDATION_KS.len()).map(|k| (se.iter().map(|s| s[k]).sum::<f64>() / se.len() as f64).max(SE_FLOOR)).collect()
}

/// The tail model each layer's prediction used, with the evidence.
#[derive(Debug, Clone, PartialEq)]
pub struct LayerTail {
    /// The layer.
    pub layer: usize,
    /// The model chosen (where the query-top fractions are mixed, the one of largest weight).
    pub model: TailModel,
    /// The query-top model's fitted law at that fraction (shared shape, log-normal law of the
    /// queries' scales), where it was chosen.
    pub top_prior: Option<TopPrior>,
    /// Where the query-top model replaced the classes: every fraction that could be fitted,
    /// with its weight in the mixture (they sum to 1); empty where the classes are used.
    pub mixture: Vec<(TailModel, f64)>,
    /// Every candidate's validation (empty where one candidate alone was allowed).
    pub validation: Vec<Validation>,
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
    /// Each query's own draw: (its distractors, those scoring strictly above its needle).
    own: Vec<Own>,
    /// Each query's distractors scoring exactly its needle's score (an atom of its law that
    /// a continuous tail smooths across the needle: [`super::top`]'s note on ties; the
    /// query-top model corrects for it, the classes do not).
    ties: Vec<usize>,
}

/// A query's captured distractors n and how many of them score above its needle, a (its rank
/// − 1): the part of a larger candidate set the capture has already drawn.
pub(crate) type Own = (u64, u64);

/// Per query, its (class weight, Q of its needle under that class) pairs.
type Survival = Vec<Vec<(f64, f64)>>;

impl LayerModel {
    fn new(c: &CapturedScores, l: usize) -> LayerModel {
        let layer = &c.layers[l];
        let z = standardised(layer);
        let ls: Vec<(f64, f64)> = layer
            .queries
            .iter()
            .map(|q| {
                let (m, sd) = q.mean_sd();
                (m, if sd > 0.0 { sd } else { 1.0 })
            })
            .collect();
        let needle: Vec<f64> = layer.queries.iter().zip(&ls).map(|(q, &(m, s))| (q.needle - m) / s).collect();
        let mut pooled: Vec<f64> = z.iter().flatten().cloned().collect();
        pooled.sort_unstable_by(|a, b| b.total_cmp(a));
        let u = pooled[threshold_rank(pooled.len())];
        let lo = *pooled.last().expect("pooled is not empty: pooled[threshold_rank(..)] just above read it");
        let grid: Vec<f64> = (0..GRID).map(|i| lo + (u - lo) * i as f64 / (GRID - 1) as f64).collect();
        let counts = z.iter().map(|zq| grid.iter().map(|&g| zq.partition_point(|&v| v > g) as u32).collect()).collect();
        let tails = z
            .iter()
            .zip(&needle)
            .map(|(zq, &x)| QueryTail {
                n: zq.len(),
                y: zq.iter().take_while(|&&v| v > u).map(|v| v - u).collect(),
                needle: x,
            })
            .collect();
        let own = layer.queries.iter().map(|q| (q.distractors.len() as u64, q.above(q.needle) as u64)).collect();
        let ties = layer.queries.iter().map(|q| q.distractors.iter().filter(|&&d| d == q.needle).count()).collect();
        LayerModel { z, pooled, u, needle, grid, counts, tails, own, ties }
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
        let denom: Vec<f64> =
            (0..ncls).map(|c| self.z.iter().zip(&m.resp).map(|(zq, r)| r[c] * zq.len() as f64).sum()).collect();
        (0..self.z.len())
            .map(|q| {
                let x = self.needle[q];
                (0..ncls)
                    .map(|c| {
                        let cl = &m.classes[c];
                        let sf = if x > self.u {
                            cl.p_u * cl.gpd.sf(x - self.u)
                        } else {
                            self.z
                                .iter()
                                .zip(&m.resp)
                                .map(|(zq, r)| r[c] * zq.partition_point(|&v| v > x) as f64)
                                .sum::<f64>()
                                / denom[c]
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

    /// Every query's top at `fraction` ([`QueryTop`]), of its standardised distractors (the
    /// model is location-scale invariant per query, so raw scores give the same).
    fn tops(&self, fraction: f64) -> Vec<QueryTop> {
        self.z.iter().map(|zq| QueryTop::new(zq, fraction)).collect()
    }

    /// The hierarchical fit of the tops ([`top::fit_prior`]), query q counted `mult[q]` times.
    fn top_fit(&self, tops: &[QueryTop], mult: Option<&[f64]>) -> Result<TopFit, ScoresError> {
        let sorted: Vec<&[f64]> = self.z.iter().map(Vec::as_slice).collect();
        top::fit_prior(tops, &sorted, mult)
    }

    /// One fraction of the query-top model fitted: per query its posterior nodes, empty where
    /// the needle lies at or below the query's threshold (or the query has no top): there Q is
    /// the query's own exceedance fraction, whatever the scale; and per query the nodes of the
    /// mass its Q scales ([`top::mass_nodes`]).
    fn top_part(&self, weight: f64, tops: Vec<QueryTop>, fit: TopFit) -> TopPart {
        let post = fit.posteriors(None);
        let nodes = post
            .into_iter()
            .enumerate()
            .map(|(q, p)| if self.needle[q] > tops[q].u && tops[q].above > 0 { p } else { Vec::new() })
            .collect();
        let mut cache = std::collections::HashMap::new();
        let mass = tops
            .iter()
            .enumerate()
            .map(|(q, t)| {
                *cache
                    .entry((t.mass_count(self.needle[q], self.own[q].1 as usize), t.n))
                    .or_insert_with_key(|&(s, n)| top::mass_nodes(s, n))
            })
            .collect();
        TopPart { weight, tops, fit, nodes, mass }
    }

    /// Query q's Q under part `p` at grid node g (None: the node-free value) and mass node i.
    fn top_q(&self, p: &TopPart, q: usize, g: Option<usize>, i: usize) -> f64 {
        let gpd = g.map_or(Gpd { xi: 0.0, sigma: 1.0 }, |g| p.fit.gpd(g));
        p.tops[q].survival_with(self.needle[q], self.ties[q], &gpd, p.mass[q][i])
    }

    /// Every query's (weight, Q) pairs under a mixture of query-top fractions, each averaged
    /// over the query's posterior scale and its mass nodes: mixed at the recall level, as the
    /// classes are.
    fn tops_survival(&self, parts: &[TopPart]) -> Survival {
        let mw = 1.0 / top::MASS_NODES as f64;
        (0..self.z.len())
            .map(|q| {
                let mut pairs = Vec::new();
                for p in parts {
                    for i in 0..top::MASS_NODES {
                        if p.nodes[q].is_empty() {
                            pairs.push((p.weight * mw, self.top_q(p, q, None, i)));
                        } else {
                            pairs.extend(
                                p.nodes[q].iter().map(|&(g, w)| (p.weight * w * mw, self.top_q(p, q, Some(g), i))),
                            );
                        }
                    }
                }
                pairs
            })
            .collect()
    }
}

/// One query-top fraction as fitted on the whole capture: its mixture weight, every query's
/// top, the hierarchical fit, every query's posterior nodes and mass nodes (see
/// `LayerModel::top_part`).
struct TopPart {
    weight: f64,
    tops: Vec<QueryTop>,
    fit: TopFit,
    nodes: Vec<Vec<(usize, f64)>>,
    mass: Vec<[f64; top::MASS_NODES]>,
}

/// Per query, P(selected in this layer) at every cell from its (weight, Q) pairs and, where
/// given, its own draw ([`selected`]); 0 for queries of weight 0 and for cells where the
/// needle is always attended or there is no candidate (those do not read it).
fn layer_selection(
    sf: &Survival,
    own: Option<&[Own]>,
    weights: Option<&[u32]>,
    cells: &[(Scenario, Geometry)],
) -> Vec<Vec<f64>> {
    (0..sf.len())
        .map(|q| {
            cells
                .iter()
                .map(|(_, g)| {
                    if weights.is_some_and(|w| w[q] == 0) {
                        0.0
                    } else {
                        cell_selection(g, &sf[q], own.map(|o| o[q]))
                    }
                })
                .collect()
        })
        .collect()
}

/// A query's P(selected in this layer) at a cell of geometry `g` from its (weight, Q) pairs
/// and, where given, its own draw ([`selected`]); 0 where the needle is always attended or there
/// is no candidate (those cells do not read the selection).
fn cell_selection(g: &Geometry, pairs: &[(f64, f64)], own: Option<Own>) -> f64 {
    if g.always_attended || g.n_candidates == 0 {
        0.0
    } else {
        selected(g.n_candidates - 1, g.k_eff, pairs, own)
    }
}

/// The query-top model's per-query, per-cell selection probability at every posterior node of
/// every fraction (the node-free value where a query has no nodes), computed once: a bootstrap
/// resample moves only the posterior weights, so it reads these instead of recomputing them.
struct TopTable {
    /// Per part, per query, per node (or the one node-free value), per cell.
    sel: Vec<Vec<Vec<Vec<f64>>>>,
}

impl TopTable {
    fn new(m: &LayerModel, parts: &[TopPart], cells: &[(Scenario, Geometry)]) -> TopTable {
        // Averaged over the query's mass nodes: they do not move with a resample.
        let one = |p: &TopPart, q: usize, node: Option<usize>| -> Vec<f64> {
            let pairs: Vec<(f64, f64)> =
                (0..top::MASS_NODES).map(|i| (1.0 / top::MASS_NODES as f64, m.top_q(p, q, node, i))).collect();
            cells.iter().map(|(_, g)| cell_selection(g, &pairs, Some(m.own[q]))).collect()
        };
        let sel = parts
            .iter()
            .map(|p| {
                (0..m.z.len())
                    .into_par_iter()
                    .map(|q| {
                        if p.nodes[q].is_empty() {
                            vec![one(p, q, None)]
                        } else {
                            p.nodes[q].iter().map(|&(g, _)| one(p, q, Some(g))).collect()
                        }
                    })
                    .collect()
            })
            .collect();
        TopTable { sel }
    }

    /// Per query and cell, P(selected) under the scale laws refitted on a resample (each
    /// part's (mu, tau)), the posterior over each query's nodes reweighted by them.
    fn resampled(&self, parts: &[TopPart], laws: &[(f64, f64)], weights: &[u32], cells: usize) -> Vec<Vec<f64>> {
        let n = self.sel.first().map_or(0, Vec::len);
        let mut out = vec![vec![0.0; cells]; n];
        for ((p, sel), &(mu, tau)) in parts.iter().zip(&self.sel).zip(laws) {
            for q in (0..n).filter(|&q| weights[q] > 0) {
                let w: Vec<f64> = if p.nodes[q].is_empty() {
                    vec![1.0]
                } else {
                    let a: Vec<f64> = p.nodes[q]
                        .iter()
                        .map(|&(g, _)| p.fit.loglik[q][g] - 0.5 * ((p.fit.ln_sigma[g] - mu) / tau).powi(2))
                        .collect();
                    let top = a.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
                    let e: Vec<f64> = a.iter().map(|v| (v - top).exp()).collect();
                    let s: f64 = e.iter().sum();
                    e.into_iter().map(|v| v / s).collect()
                };
                for (wi, row) in w.iter().zip(&sel[q]) {
                    for (o, v) in out[q].iter_mut().zip(row) {
                        *o += p.weight * wi * v;
                    }
                }
            }
        }
        out
    }
}

/// Each candidate model fitted on [`SPLITS`] random halves of every query's distractors (query
/// q's half in split r drawn only from (seed, r · queries + q)) and scored by the recall it
/// predicts at the captured count, where the capture measures it: each query keeps its half's
/// own draw and the other half is what the model extrapolates to, a doubling, as predicting
/// beyond the capture extrapolates. A random half of i.i.d. draws is i.i.d. draws, so the
/// measured recall is what a capture of half the candidates would have been extended to.
fn validate_layer(layer: &LayerScores, models: &[TailModel], max_classes: usize, seed: u64) -> Vec<Validation> {
    let nq = layer.queries.len();
    let k_of = |q: &QueryScores, k: u64| k.min(q.distractors.len() as u64 + 1);
    // Per halving, per model, per k: every query's predicted probability of ranking within k.
    let per_split: Vec<Vec<Option<Vec<Vec<f64>>>>> = (0..SPLITS)
        .into_par_iter()
        .map(|r| {
            let half: Vec<QueryScores> = layer
                .queries
                .iter()
                .enumerate()
                .map(|(q, qs)| {
                    let mut rng = crate::trials::trial_rng(seed ^ VALIDATION_STREAM, (r * nq + q) as u64);
                    let n = qs.distractors.len();
                    let mut idx = rand::seq::index::sample(&mut rng, n, n / 2).into_vec();
                    idx.sort_unstable();
                    QueryScores { needle: qs.needle, distractors: idx.iter().map(|&i| qs.distractors[i]).collect() }
                })
                .collect();
            let c = CapturedScores { layers: vec![LayerScores { layer: layer.layer, queries: half }] };
            let m = LayerModel::new(&c, 0);
            models
                .iter()
                .map(|model| {
                    let sf = match model {
                        TailModel::Classes => {
                            classes::choose(&m.tails, max_classes).map(|ch| m.class_survival(&ch.mixture))
                        }
                        TailModel::QueryTop(f) => {
                            let tops = m.tops(*f);
                            m.top_fit(&tops, None).map(|fit| m.tops_survival(&[m.top_part(1.0, tops, fit)]))
                        }
                    }
                    .ok()?;
                    Some(
                        VALIDATION_KS
                            .iter()
                            .map(|&k| {
                                layer
                                    .queries
                                    .iter()
                                    .enumerate()
                                    .map(|(q, qs)| {
                                        selected(qs.distractors.len() as u64, k_of(qs, k), &sf[q], Some(m.own[q]))
                                    })
                                    .collect()
                            })
                            .collect(),
                    )
                })
                .collect()
        })
        .collect();
    models
        .iter()
        .enumerate()
        .map(|(i, &model)| {
            let fitted: Option<Vec<&Vec<Vec<f64>>>> = per_split.iter().map(|split| split[i].as_ref()).collect();
            let Some(fitted) = fitted else { return Validation { model, errors: None, standard_errors: None } };
            let (mut errors, mut ses) = (Vec::new(), Vec::new());
            for (ki, &k) in VALIDATION_KS.iter().enumerate() {
                // Each query's prediction averaged over the halvings, minus its measured outcome.
                let d: Vec<f64> = layer
                    .queries
                    .iter()
                    .enumerate()
                    .map(|(q, qs)| {
                        let p = fitted.iter().map(|f| f[ki][q]).sum::<f64>() / SPLITS as f64;
                        p - if (qs.above(qs.needle) as u64) < k_of(qs, k) { 1.0 } else { 0.0 }
                    })
                    .collect();
                let mean = d.iter().sum::<f64>() / nq as f64;
                let var =
                    if nq > 1 { d.iter().map(|v| (v - mean) * (v - mean)).sum::<f64>() / (nq - 1) as f64 } else { 0.0 };
                errors.push(mean);
                ses.push((var / nq as f64).sqrt());
            }
            Validation { model, errors: Some(errors), standard_errors: Some(ses) }
        })
        .collect()
}

/// The fewest distractors every query needs for the halves of [`validate_layer`] to hold a
/// threshold, its top scores and a bulk below.
const MIN_VALIDATION_DISTRACTORS: usize = 4 * top::MIN_TOP + 4;

/// A layer's tail model as fitted on the whole capture: the classes, or the query-top model at
/// one or more fractions, each with its mixture weight, every query's top and the hierarchical fit.
enum Fitted {
    Classes(ClassChoice),
    Tops(Vec<TopPart>),
}

/// Chooses a layer's tail model among `opts.tail_model`'s candidates and fits it.
fn fit_layer(m: &LayerModel, layer: &LayerScores, opts: &PredictOptions) -> Result<(LayerTail, Fitted), ScoresError> {
    let candidates = opts.tail_model.candidates();
    let enough = layer.queries.iter().all(|q| q.distractors.len() >= MIN_VALIDATION_DISTRACTORS);
    let validation = if candidates.len() > 1 && enough {
        validate_layer(layer, &candidates, opts.max_classes, opts.seed)
    } else {
        Vec::new()
    };
    // The classes stay unless their validation error is beyond SWITCH_SE standard errors at
    // some k: the query-top model is an estimator chosen for what it predicts, not a likelihood
    // (super::top), so it replaces the classes only on evidence that they are biased, not on a
    // score that query sampling alone could order; then the smallest score wins among the
    // classes and the fractions that are not biased by the same rule themselves, ties to the
    // earlier candidate (the classes). (A replacement that fails the test the classes failed
    // has shown only that it errs less at a doubling: on a normal capture predicted 5,000
    // times beyond it, both err at k = 1 on the halves, and the query-top model's shape, fitted
    // on every query's few top scores, extrapolates worse.)
    let classes_hold = validation.iter().any(|v| v.model == TailModel::Classes && v.errors.is_some() && !v.biased());
    let best = validation
        .iter()
        .filter(|v| v.model == TailModel::Classes || (!classes_hold && !v.biased()))
        .filter_map(|v| v.score().map(|s| (v.model, s)))
        .fold(None, |b: Option<(TailModel, f64)>, (m, s)| match b {
            Some((_, bs)) if bs <= s => b,
            _ => Some((m, s)),
        })
        .map(|b| b.0);
    // Where a query-top fraction wins, every fraction enters, mixed at the recall level with
    // weights ∝ exp(ln_weight): the halvings order the fractions only within their noise (on
    // the real BM25 capture the two best differ by 0.1 in pseudo-log-likelihood), and of two
    // fractions that validate alike one's extrapolation can err one way and the other's the
    // other way (BM25: 0.25% high at k = 1, 0.5% low at k = 4 and 16).
    let mixture: Vec<(TailModel, f64)> = if matches!(best, Some(TailModel::QueryTop(_))) {
        let scale = common_scale(&validation);
        let weighted: Vec<(TailModel, f64)> = validation
            .iter()
            .filter(|v| v.model != TailModel::Classes)
            .filter_map(|v| v.ln_weight(&scale).map(|l| (v.model, l)))
            .collect();
        let top = weighted.iter().map(|w| w.1).fold(f64::NEG_INFINITY, f64::max);
        let total: f64 = weighted.iter().map(|(_, l)| (l - top).exp()).sum();
        weighted.iter().map(|&(m, l)| (m, (l - top).exp() / total)).collect()
    } else {
        Vec::new()
    };
    let model = match (best, opts.tail_model) {
        (Some(m), _) => m,
        (None, TailChoice::QueryTop) if candidates.len() > 1 => {
            return Err(ScoresError(format!(
                "layer {}: the query-top tail model could not be validated (every query needs at least {MIN_VALIDATION_DISTRACTORS} distractors, and half of them at least {} exceedances pooled)",
                layer.layer,
                super::tail::MIN_EXCEEDANCES
            )))
        }
        (None, _) => candidates[0],
    };
    let (fitted, top_prior, mixture) = match model {
        TailModel::Classes => (Fitted::Classes(choose_layer(m, layer.layer, opts.max_classes)?), None, Vec::new()),
        TailModel::QueryTop(f) => {
            // (A fraction that was fitted on every half fits on the whole.)
            let mixture = if mixture.is_empty() { vec![(model, 1.0)] } else { mixture };
            let mut parts = Vec::new();
            let mut top_prior = None;
            for &(mm, w) in &mixture {
                let TailModel::QueryTop(fm) = mm else { continue };
                let tops = m.tops(fm);
                let fit = m.top_fit(&tops, None).map_err(|e| ScoresError(format!("layer {}: {}", layer.layer, e.0)))?;
                if fm == f {
                    top_prior = Some(fit.prior);
                }
                parts.push(m.top_part(w, tops, fit));
            }
            (Fitted::Tops(parts), top_prior, mixture)
        }
    };
    Ok((LayerTail { layer: layer.layer, model, top_prior, mixture, validation }, fitted))
}

/// P(at most `j` of `m` distractors drawn without replacement from `n`, `a` of which score
/// above the needle, score above it): a query's own sample subsampled to m ≤ n candidates.
/// Exactly unbiased for P[Binomial(m, Q) ≤ j] whatever the query's law, because the n captured
/// distractors are i.i.d. draws of it and a random m of them are m i.i.d. draws too.
///
/// Written here rather than taken from statrs's `Hypergeometric::cdf` (against which it is
/// tested): that sums from 0 with two `ln_binomial`s (six `ln_gamma`s) per term, and this runs
/// per query, cell and bootstrap resample; here one term's logarithm starts the sum at the
/// support's lower end and each further term is a ratio of its neighbour.
pub(crate) fn hypergeom_cdf(n: u64, a: u64, m: u64, j: u64) -> f64 {
    debug_assert!(a <= n && m <= n);
    if j >= a.min(m) {
        return 1.0;
    }
    let lo = (m + a).saturating_sub(n);
    if j < lo {
        return 0.0;
    }
    let ln_choose =
        |n: u64, r: u64| ln_gamma(n as f64 + 1.0) - ln_gamma(r as f64 + 1.0) - ln_gamma((n - r) as f64 + 1.0);
    // ln P(X = lo), then the ratio of consecutive terms; summed in logs (the first terms can be
    // far below the last).
    let mut lp = ln_choose(a, lo) + ln_choose(n - a, m - lo) - ln_choose(n, m);
    let mut total = lp;
    for x in lo..j {
        let (xf, af, mf, nf) = (x as f64, a as f64, m as f64, n as f64);
        lp += ((af - xf) * (mf - xf)).ln() - ((xf + 1.0) * (nf - af - mf + xf + 1.0)).ln();
        let (hi, low) = if lp > total { (lp, total) } else { (total, lp) };
        total = hi + (low - hi).exp().ln_1p();
    }
    total.exp().clamp(0.0, 1.0)
}

/// P(a query's needle ranks within k_eff among `d` distractors) in one layer, from its class
/// (weight, Q) pairs and, where given, its own captured draw (n, a). With its own draw, the
/// capture's n distractors are the first n of the d: at d ≤ n the probability is the
/// subsample's, exact and free of any fitted law ([`hypergeom_cdf`]); at d > n the needle has
/// already met its n and a of them beat it, so only the d − n not captured are drawn from the
/// fitted law: P[a + Binomial(d − n, Q) ≤ k_eff − 1]. Without it (the empirical law alone), all
/// d are drawn from the law.
fn selected(d: u64, k_eff: u64, pairs: &[(f64, f64)], own: Option<Own>) -> f64 {
    let j = k_eff - 1;
    match own {
        Some((n, a)) if d <= n => hypergeom_cdf(n, a, d, j),
        Some((_, a)) if a > j => 0.0,
        Some((n, a)) => pairs.iter().map(|&(r, sf)| r * binom_cdf(d - n, j - a, sf)).sum(),
        None => pairs.iter().map(|&(r, sf)| r * binom_cdf(d, j, sf)).sum(),
    }
}

/// Mean recall over the queries (weighted by `weights`, or all once) for every scenario, given
/// each layer's (class weight, Q) pairs per query and, where given, each layer's own draws per
/// query ([`selected`]).
fn mean_recall(
    survival: &[Survival],
    own: Option<&[Vec<Own>]>,
    weights: Option<&[u32]>,
    cells: &[(Scenario, Geometry)],
) -> Vec<f64> {
    let sel: Vec<Vec<Vec<f64>>> = survival
        .iter()
        .enumerate()
        .map(|(l, sl)| layer_selection(sl, own.map(|o| o[l].as_slice()), weights, cells))
        .collect();
    mean_selected(&sel, weights, cells)
}

/// Mean recall over the queries (weighted by `weights`, or all once) for every scenario, given
/// each layer's per-query, per-cell selection probability ([`layer_selection`]).
fn mean_selected(sel: &[Vec<Vec<f64>>], weights: Option<&[u32]>, cells: &[(Scenario, Geometry)]) -> Vec<f64> {
    let n = sel[0].len();
    let w = |q: usize| weights.map_or(1.0, |w| w[q] as f64);
    let total: f64 = (0..n).map(w).sum();
    cells
        .iter()
        .enumerate()
        .map(|(c, (s, g))| {
            let attended = if g.always_attended {
                1.0
            } else if g.n_candidates == 0 {
                0.0
            } else {
                (0..n)
                    .filter(|&q| w(q) > 0.0)
                    .map(|q| {
                        // A query's layers resample independently: missed only if all miss. In
                        // a layer the query's class is unknown: its miss probability is the
                        // posterior-weighted average of the classes' (recall mixes, not tails).
                        let miss: f64 = sel.iter().map(|sl| 1.0 - sl[q][c]).product();
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
    /// One per layer whose prediction used the tail classes.
    pub classes: Vec<LayerClasses>,
    /// One per layer: the tail model it used and why.
    pub tails: Vec<LayerTail>,
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
    let fits: Vec<(LayerTail, Fitted)> =
        models.iter().zip(&c.layers).map(|(m, l)| fit_layer(m, l, &opts)).collect::<Result<_, _>>()?;
    let cells: Vec<(Scenario, Geometry)> = cells.iter().map(|s| (s.clone(), Geometry::new(s))).collect();
    let own: Vec<Vec<Own>> = models.iter().map(|m| m.own.clone()).collect();
    // The query-top layers' selection probabilities at every posterior node, once.
    let top_tables: Vec<Option<TopTable>> = models
        .iter()
        .zip(&fits)
        .map(|(m, (_, f))| if let Fitted::Tops(parts) = f { Some(TopTable::new(m, parts, &cells)) } else { None })
        .collect();
    let all = vec![1u32; n];
    let point_sel: Vec<Vec<Vec<f64>>> = models
        .iter()
        .zip(&fits)
        .zip(&top_tables)
        .enumerate()
        .map(|(l, ((m, (_, f)), table))| match (f, table) {
            (Fitted::Tops(parts), Some(table)) => table.resampled(
                parts,
                &parts.iter().map(|p| (p.fit.prior.mu, p.fit.prior.tau)).collect::<Vec<_>>(),
                &all,
                cells.len(),
            ),
            (Fitted::Classes(ch), _) => layer_selection(&m.class_survival(&ch.mixture), Some(&own[l]), None, &cells),
            (Fitted::Tops(_), None) => unreachable!("every query-top layer has its table"),
        })
        .collect();
    let empirical_sf: Vec<Survival> =
        models.iter().map(|m| (0..n).map(|q| vec![(1.0, m.survival(q, None))]).collect()).collect();
    let point = mean_selected(&point_sel, None, &cells);
    let empirical = mean_recall(&empirical_sf, None, None, &cells);
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
            let sel: Vec<Vec<Vec<f64>>> = models
                .iter()
                .zip(&fits)
                .zip(&top_tables)
                .enumerate()
                .map(|(l, ((m, (_, f)), table))| {
                    let ch = match (f, table) {
                        (Fitted::Classes(ch), _) => ch,
                        (Fitted::Tops(parts), Some(table)) => {
                            // The query-top model: each query's top and its likelihood at every
                            // scale are its own; each fraction's law of the scales is refitted
                            // on the resampled queries (EM from the capture's, the shape and
                            // the mixture weights held) and each query's posterior reweighted.
                            let mult: Vec<f64> = weights.iter().map(|&w| w as f64).collect();
                            let laws: Vec<(f64, f64)> = parts
                                .iter()
                                .map(|p| {
                                    let (mu, tau, _) = top::fit_scale_law(
                                        &p.fit.loglik,
                                        &p.fit.ln_sigma,
                                        &mult,
                                        (p.fit.prior.mu, p.fit.prior.tau),
                                    );
                                    (mu, tau)
                                })
                                .collect();
                            return table.resampled(parts, &laws, &weights, cells.len());
                        }
                        (Fitted::Tops(_), None) => unreachable!("every query-top layer has its table"),
                    };
                    let sf = 'sf: {
                        if ch.classes() > 1 {
                            let mult: Vec<f64> = weights.iter().map(|&w| w as f64).collect();
                            // A resample in which a class falls below the fewest exceedances a
                            // fit accepts is refitted with one class: the pooled tail of the
                            // resample.
                            if let Ok(mix) = classes::fit(&m.tails, &mult, Start::From(&ch.mixture.classes)) {
                                break 'sf m.resampled_class_survival(&mix, &weights);
                            }
                        }
                        let g = fit(m, &mut idx.iter().cloned()).ok();
                        m.resampled_survival(&weights, g.as_ref())
                    };
                    layer_selection(&sf, Some(&own[l]), Some(&weights), &cells)
                })
                .collect();
            let r = mean_selected(&sel, Some(&weights), &cells);
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
            let at = |p: f64| {
                if v.is_empty() {
                    point[i]
                } else {
                    v[((p * (v.len() - 1) as f64).round() as usize).min(v.len() - 1)]
                }
            };
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
    let mut classes = Vec::new();
    let mut tails = Vec::new();
    for (t, f) in fits {
        if let Fitted::Classes(choice) = f {
            classes.push(LayerClasses { layer: t.layer, choice });
        }
        tails.push(t);
    }
    Ok(Report { predictions, classes, tails })
}

#[cfg(test)]
mod tests {
    use super::*;
    use statrs::distribution::{DiscreteCDF, Hypergeometric};

    #[test]
    fn the_subsample_law_is_the_hypergeometric() {
        // Against statrs' Hypergeometric (population n, a successes, m draws), at small and
        // capture-sized populations, both ends of the support and far tails.
        for &(n, a, m) in &[
            (10u64, 3u64, 4u64),
            (50, 20, 45),
            (1999, 0, 999),
            (1999, 7, 999),
            (1999, 40, 1999),
            (1999, 300, 120),
            (1999, 1500, 1000),
        ] {
            let h = Hypergeometric::new(n, a, m).unwrap();
            for j in 0..=m.min(a) + 1 {
                let (ours, theirs) = (hypergeom_cdf(n, a, m, j), h.cdf(j));
                assert!(
                    (ours - theirs).abs() < 1e-11 * theirs.max(1e-300).max(1e-3),
                    "n={n} a={a} m={m} j={j}: {ours} vs {theirs}"
                );
            }
        }
    }

    #[test]
    fn a_query_s_own_draw_is_kept_and_only_the_rest_is_drawn() {
        // (n, a) = (1999, 2): within the capture the subsample's law; beyond it the two already
        // above count against k, and 0 when they exceed k − 1.
        let pairs = [(0.25, 1e-4), (0.75, 3e-4)];
        assert_eq!(selected(1000, 3, &pairs, Some((1999, 2))), hypergeom_cdf(1999, 2, 1000, 2));
        assert_eq!(selected(1999, 2, &pairs, Some((1999, 2))), 0.0);
        assert_eq!(selected(1999, 3, &pairs, Some((1999, 2))), 1.0);
        assert_eq!(selected(9999, 2, &pairs, Some((1999, 2))), 0.0);
        let direct = 0.25 * binom_cdf(8000, 1, 1e-4) + 0.75 * binom_cdf(8000, 1, 3e-4);
        assert!((selected(9999, 4, &pairs, Some((1999, 2))) - direct).abs() < 1e-15);
        assert!(
            (selected(9999, 4, &pairs, None) - (0.25 * binom_cdf(9999, 3, 1e-4) + 0.75 * binom_cdf(9999, 3, 3e-4)))
                .abs()
                < 1e-15
        );
    }
}
