//! Tail classes: a finite mixture of tail laws over a layer's queries, each query's tail drawn
//! from one latent class, the number of classes chosen by held-out likelihood.
//!
//! Why. Standardising each query by its own mean and sd removes location and scale, not tail
//! weight: a capture whose queries differ in how heavy their distractors' upper tail is (a few
//! near-duplicates for some queries, none for others) pools into one law that is too heavy for
//! some queries and too light for others. Recall is not linear in the tail: at k = 1 a needle
//! at standardised score x beats N − 1 distractors with probability (1 − Q(x))^(N − 1) ≈
//! exp(−N·Q(x)), convex in Q, so averaging the tails first (the pooled law) and then taking the
//! recall under-predicts it (Jensen); the gap is largest at k = 1, where recall hangs on the
//! single largest distractor, and shrinks as k grows and the binomial's step softens. The cure
//! is to mix at the recall level: each class has its own tail, each query is predicted under
//! each class's tail and the predictions are averaged with the query's posterior class weights.
//!
//! The model, per layer, above the pooled threshold u (the body below u is not modelled: the
//! prediction takes each class's body as its queries' pooled sample, weighted by their
//! responsibilities). Query q has n_q distractors, m_q excesses y_qj = z_qj − u and a
//! standardised needle score x_q; class c has a weight π_c, an exceedance probability p_c, a
//! GPD(ξ_c, σ_c) of the excess and a Normal(μ_c, τ_c²) of the needle score:
//!
//!   L_q(c) = p_c^m_q (1 − p_c)^(n_q − m_q) Π_j gpd_c(y_qj) · φ((x_q − μ_c)/τ_c)/τ_c.
//!
//! A query's excesses belong to its class together (the responsibility is per query, not per
//! excess: a query's tail is one law). The needle term is there because what the prediction
//! needs is P(class | everything seen of the query), and the needle is part of it: with ~20
//! exceedances per query (2,000 candidates, u at the pooled 99th percentile) the distractors
//! alone classify a query only roughly, and where needles sit further out in their own sd in
//! heavy-tailed queries (as they do when a query's near-duplicates and its needle are both a
//! property of the query), weighting a query's classes without its needle pairs light-tail
//! needles with heavy tails and back (in the three-tail test, when every distractor was drawn from the
//! fitted law: −3.9 points at 8,000 candidates and k = 16 without the term, −1.4 with it). Where the needle carries no class information
//! the classes' needle laws coincide and the term cancels from the responsibilities. It does not
//! enter the recall: a query's own needle score is what is predicted with.
//!
//! Expectation–maximisation fits it: responsibilities r_qc ∝ π_c L_q(c); then π_c, p_c = Σ r m
//! / Σ r n, the needle law's weighted mean and sd, and a weighted GPD fit per class
//! (`super::tail::fit_gpd_weighted`, Newton-refined from the previous iterate). EM starts
//! from the queries split into C groups by their mean excess per distractor (Σ_j y_qj / n_q,
//! light to heavy), so it is deterministic.
//!
//! The number of classes is chosen by `FOLDS`-fold cross-validation over queries (query q in
//! fold q mod FOLDS): a C-class fit on the other folds scores each held-out query by the
//! marginal log-likelihood of its distractors' tail, ln Σ_c π_c L_q(c) without the needle term. C + 1 classes replace C only if the held-out
//! log-likelihood rises by more than twice its standard error over queries (the paired
//! differences' sd times √queries), so a capture whose queries share one tail keeps one class,
//! and one class is exactly the pooled law and tail the prediction used before classes.

use super::tail::{fit_gpd_weighted, gpd_ln_pdf, refine_gpd_weighted, Gpd, MIN_EXCEEDANCES};
use super::ScoresError;

/// Most classes tried.
pub const MAX_CLASSES: usize = 4;

/// Cross-validation folds over queries.
pub(crate) const FOLDS: usize = 5;

/// Held-out scoring floors a single excess's log-density here: a held-out excess beyond a
/// bounded class's end (density 0) is very unlikely under that class, not impossible.
const LN_PDF_FLOOR: f64 = -50.0;

/// The smallest needle sd a class takes (standardised units): a class of a few queries whose
/// needles coincide would otherwise have an unbounded likelihood.
const NEEDLE_SD_FLOOR: f64 = 0.05;

/// EM iterations at most, and the relative change in log-likelihood that ends them.
const MAX_ITER: usize = 500;
const TOL: f64 = 1e-10;

/// One query's tail: its distractor count and its excesses over the layer's threshold.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct QueryTail {
    /// Distractors (below and above u).
    pub(crate) n: usize,
    /// Excesses z − u > 0.
    pub(crate) y: Vec<f64>,
    /// The query's standardised needle score.
    pub(crate) needle: f64,
}

/// One tail class.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TailClass {
    /// Its share of the queries, π_c.
    pub(crate) weight: f64,
    /// P(a distractor of its queries exceeds u), p_c.
    pub(crate) p_u: f64,
    /// The GPD of its excesses.
    pub(crate) gpd: Gpd,
    /// Its queries' standardised needle scores: mean and sd of a normal.
    pub(crate) needle_mean: f64,
    /// See `needle_mean`.
    pub(crate) needle_sd: f64,
}

/// A fitted mixture.
#[derive(Debug, Clone, PartialEq)]
pub struct Mixture {
    /// The classes, lightest tail first at the start of EM (EM may reorder their meaning).
    pub(crate) classes: Vec<TailClass>,
    /// Per query, its posterior class weights r_qc (every query, also those of weight 0 in the
    /// fit).
    pub(crate) resp: Vec<Vec<f64>>,
    /// The fit's log-likelihood (weighted by the queries' multiplicities).
    pub(crate) loglik: f64,
}

/// The class count chosen for a layer, with the evidence.
#[derive(Debug, Clone, PartialEq)]
pub struct ClassChoice {
    /// The mixture of the chosen count fitted on every query.
    pub mixture: Mixture,
    /// (C, held-out log-likelihood summed over queries), for every C tried; None where the
    /// C-class fit failed in some fold (a class with fewer than `MIN_EXCEEDANCES` effective
    /// exceedances).
    pub heldout: Vec<(usize, Option<f64>)>,
}

impl ClassChoice {
    /// The chosen number of classes.
    pub(crate) fn classes(&self) -> usize {
        self.mixture.classes.len()
    }
}

/// ln L_q(c), the per-excess log-density floored at `floor`; without the needle's term where
/// `needle` is false (the distractors' tail alone).
fn ln_lik(q: &QueryTail, c: &TailClass, floor: f64, needle: bool) -> f64 {
    let m = q.y.len() as f64;
    let mut l = m * c.p_u.ln() + (q.n as f64 - m) * (-c.p_u).ln_1p();
    for &y in &q.y {
        l += gpd_ln_pdf(&c.gpd, y).max(floor);
    }
    if !needle {
        return l;
    }
    let e = (q.needle - c.needle_mean) / c.needle_sd;
    l - 0.5 * e * e - c.needle_sd.ln()
}

/// ln Σ exp(a), shifted by the largest term (−∞ when every term is).
pub(crate) fn log_sum_exp(a: &[f64]) -> f64 {
    let m = a.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
    if m == f64::NEG_INFINITY {
        return m;
    }
    m + a.iter().map(|v| (v - m).exp()).sum::<f64>().ln()
}

/// Responsibilities and each query's marginal log-likelihood under `classes` (of the needle
/// too where `needle`).
fn e_step(tails: &[QueryTail], classes: &[TailClass], floor: f64, needle: bool) -> (Vec<Vec<f64>>, Vec<f64>) {
    let mut resp = Vec::with_capacity(tails.len());
    let mut marg = Vec::with_capacity(tails.len());
    for q in tails {
        let a: Vec<f64> = classes.iter().map(|c| c.weight.ln() + ln_lik(q, c, floor, needle)).collect();
        let l = log_sum_exp(&a);
        resp.push(if l.is_finite() {
            a.iter().map(|v| (v - l).exp()).collect()
        } else {
            vec![1.0 / classes.len() as f64; classes.len()]
        });
        marg.push(l);
    }
    (resp, marg)
}

/// Every query's excesses in one array, with the query each belongs to.
struct Flat {
    y: Vec<f64>,
    owner: Vec<usize>,
}

impl Flat {
    fn new(tails: &[QueryTail]) -> Flat {
        let mut y = Vec::new();
        let mut owner = Vec::new();
        for (q, t) in tails.iter().enumerate() {
            y.extend_from_slice(&t.y);
            owner.extend(std::iter::repeat_n(q, t.y.len()));
        }
        Flat { y, owner }
    }
}

/// The classes that maximise the expected log-likelihood given the responsibilities; each
/// class's GPD refined from `prev`'s where given, else fitted from scratch.
fn m_step(
    tails: &[QueryTail],
    flat: &Flat,
    mult: &[f64],
    resp: &[Vec<f64>],
    prev: Option<&[TailClass]>,
) -> Result<Vec<TailClass>, ScoresError> {
    let k = resp.first().map_or(0, Vec::len);
    let total: f64 = mult.iter().sum();
    (0..k)
        .map(|c| {
            // A responsibility below 1e-10 is a query the class has let go of: dropping it keeps
            // an excess the class cannot reach (beyond a bounded tail's end) out of its domain.
            let wq: Vec<f64> = resp.iter().zip(mult).map(|(r, &m)| if r[c] < 1e-10 { 0.0 } else { m * r[c] }).collect();
            let wsum: f64 = wq.iter().sum();
            let exceed: f64 = tails.iter().zip(&wq).map(|(t, &w)| w * t.y.len() as f64).sum();
            let n: f64 = tails.iter().zip(&wq).map(|(t, &w)| w * t.n as f64).sum();
            if !(exceed >= MIN_EXCEEDANCES as f64) || !(n > exceed) {
                return Err(ScoresError(format!(
                    "a tail class holds {exceed:.0} exceedances: a tail fit needs at least {MIN_EXCEEDANCES}"
                )));
            }
            let w: Vec<f64> = flat.owner.iter().map(|&q| wq[q]).collect();
            let gpd = match prev {
                Some(p) => refine_gpd_weighted(&flat.y, &w, p[c].gpd)?,
                None => fit_gpd_weighted(&flat.y, &w)?,
            };
            let needle_mean = tails.iter().zip(&wq).map(|(t, &w)| w * t.needle).sum::<f64>() / wsum;
            let var = tails.iter().zip(&wq).map(|(t, &w)| w * (t.needle - needle_mean).powi(2)).sum::<f64>() / wsum;
            Ok(TailClass {
                weight: wsum / total,
                p_u: exceed / n,
                gpd,
                needle_mean,
                needle_sd: var.sqrt().max(NEEDLE_SD_FLOOR),
            })
        })
        .collect()
}

/// The starting responsibilities of a `k`-class fit: the queries of positive multiplicity split
/// into k groups of (weighted) equal size by their mean excess per distractor.
fn initial_resp(tails: &[QueryTail], mult: &[f64], k: usize) -> Vec<Vec<f64>> {
    let heaviness: Vec<f64> = tails.iter().map(|t| t.y.iter().sum::<f64>() / t.n as f64).collect();
    let mut order: Vec<usize> = (0..tails.len()).filter(|&q| mult[q] > 0.0).collect();
    order.sort_by(|&a, &b| heaviness[a].total_cmp(&heaviness[b]).then(a.cmp(&b)));
    let total: f64 = mult.iter().sum();
    let mut resp = vec![vec![1.0 / k as f64; k]; tails.len()];
    let mut before = 0.0;
    for q in order {
        let g = ((k as f64 * (before + 0.5 * mult[q]) / total).floor() as usize).min(k - 1);
        resp[q] = (0..k).map(|c| if c == g { 1.0 } else { 0.0 }).collect();
        before += mult[q];
    }
    resp
}

/// How EM starts.
pub(crate) enum Start<'a> {
    /// From scratch with this many classes (`initial_resp`).
    Classes(usize),
    /// From a fitted mixture's classes (a bootstrap resample's warm start).
    From(&'a [TailClass]),
}

/// Fits a mixture by EM to the queries, query q counted `mult[q]` times (0: left out, as a
/// held-out fold or a query a bootstrap resample did not draw).
pub(crate) fn fit(tails: &[QueryTail], mult: &[f64], start: Start) -> Result<Mixture, ScoresError> {
    let flat = Flat::new(tails);
    let mut classes = match start {
        Start::Classes(k) => {
            let resp = initial_resp(tails, mult, k.max(1));
            m_step(tails, &flat, mult, &resp, None)?
        }
        Start::From(c) => c.to_vec(),
    };
    let mut last = f64::NEG_INFINITY;
    for it in 0..MAX_ITER {
        let (resp, marg) = e_step(tails, &classes, f64::NEG_INFINITY, true);
        let ll: f64 = marg.iter().zip(mult).filter(|(_, &m)| m > 0.0).map(|(l, m)| l * m).sum();
        // One class: the first M-step is the answer (its GPD is the unweighted fit's, bit for
        // bit, so one class predicts what the pooled law always did).
        if classes.len() == 1 || (it > 0 && (ll - last).abs() <= TOL * ll.abs()) {
            return Ok(Mixture { classes, resp, loglik: ll });
        }
        last = ll;
        classes = m_step(tails, &flat, mult, &resp, Some(&classes))?;
    }
    let (resp, marg) = e_step(tails, &classes, f64::NEG_INFINITY, true);
    let ll = marg.iter().zip(mult).map(|(l, m)| l * m).sum();
    Ok(Mixture { classes, resp, loglik: ll })
}

/// Chooses the number of classes by held-out likelihood and fits it on every query.
/// At most `max_classes` (at least 1).
pub(crate) fn choose(tails: &[QueryTail], max_classes: usize) -> Result<ClassChoice, ScoresError> {
    let n = tails.len();
    let all = vec![1.0; n];
    let one = fit(tails, &all, Start::Classes(1))?;
    // Held-out per-query log-likelihoods of each C.
    let heldout_of = |k: usize| -> Option<Vec<f64>> {
        let mut h = vec![0.0; n];
        for f in 0..FOLDS {
            let mult: Vec<f64> = (0..n).map(|q| if q % FOLDS == f { 0.0 } else { 1.0 }).collect();
            if mult.iter().all(|&m| m > 0.0) {
                continue; // fewer queries than folds: an empty fold
            }
            let m = fit(tails, &mult, Start::Classes(k)).ok()?;
            // Held-out queries are scored by their distractors' tail alone, the needle
            // marginalised out: more classes must predict held-out tails better. (A needle law
            // that is not one normal, e.g. needles found and needles lost, would otherwise buy
            // classes whose tails are the same, each fitted on fewer queries.)
            let (_, marg) = e_step(tails, &m.classes, LN_PDF_FLOOR, false);
            for q in (0..n).filter(|q| q % FOLDS == f) {
                h[q] = marg[q];
            }
        }
        Some(h)
    };
    let mut heldout = Vec::new();
    let mut best_k = 1;
    let mut best = heldout_of(1);
    heldout.push((1, best.as_ref().map(|h| h.iter().sum())));
    let mut best_fit = one;
    if n >= 2 * FOLDS {
        for k in 2..=max_classes {
            let h = heldout_of(k);
            heldout.push((k, h.as_ref().map(|h| h.iter().sum())));
            let (Some(hk), Some(hb)) = (&h, &best) else { break };
            let d: Vec<f64> = hk.iter().zip(hb).map(|(a, b)| a - b).collect();
            let mean = d.iter().sum::<f64>() / n as f64;
            let var = d.iter().map(|v| (v - mean) * (v - mean)).sum::<f64>() / (n - 1) as f64;
            let gain = mean * n as f64;
            let se = (var * n as f64).sqrt();
            if !(gain > 2.0 * se && gain > 0.0) {
                break;
            }
            match fit(tails, &all, Start::Classes(k)) {
                Ok(m) => {
                    best_k = k;
                    best = h;
                    best_fit = m;
                }
                Err(_) => break,
            }
        }
    }
    debug_assert_eq!(best_fit.classes.len(), best_k);
    Ok(ClassChoice { mixture: best_fit, heldout })
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;
    use rand_distr::{Distribution, Uniform};

    /// A query of n distractors whose m excesses are GPD(xi, sigma) draws.
    fn query(n: usize, p: f64, xi: f64, sigma: f64, rng: &mut rand_xoshiro::Xoshiro256PlusPlus) -> QueryTail {
        let u = Uniform::new(0.0f64, 1.0).unwrap();
        let mut y = Vec::new();
        for _ in 0..n {
            if u.sample(rng) < p {
                let v: f64 = 1.0 - u.sample(rng);
                y.push(if xi == 0.0 { -sigma * v.ln() } else { sigma / xi * (v.powf(-xi) - 1.0) });
            }
        }
        QueryTail { n, y, needle: 0.0 }
    }

    #[test]
    fn two_tail_classes_are_found_and_one_is_kept() {
        let mut rng = rand_xoshiro::Xoshiro256PlusPlus::seed_from_u64(3);
        // 300 queries: 60% light (ξ = −0.1, σ = 0.35, p = 0.008), 40% heavy (ξ = 0.3, σ = 0.6,
        // p = 0.013).
        let tails: Vec<QueryTail> = (0..300)
            .map(|q| {
                if q % 5 < 3 {
                    query(2000, 0.008, -0.1, 0.35, &mut rng)
                } else {
                    query(2000, 0.013, 0.3, 0.6, &mut rng)
                }
            })
            .collect();
        let c = choose(&tails, MAX_CLASSES).unwrap();
        assert_eq!(c.classes(), 2, "{:?}", c.heldout);
        let mut cl = c.mixture.classes.clone();
        cl.sort_by(|a, b| a.gpd.xi.total_cmp(&b.gpd.xi));
        assert!(
            (cl[0].weight - 0.6).abs() < 0.08 && (cl[0].gpd.xi + 0.1).abs() < 0.12 && (cl[1].gpd.xi - 0.3).abs() < 0.15,
            "{cl:?}"
        );
        // One law for every query: one class.
        let same: Vec<QueryTail> = (0..300).map(|_| query(2000, 0.01, 0.1, 0.5, &mut rng)).collect();
        let c = choose(&same, MAX_CLASSES).unwrap();
        assert_eq!(c.classes(), 1, "{:?}", c.heldout);
        // One class is the unweighted fit of every excess, to the bit.
        let y: Vec<f64> = same.iter().flat_map(|t| t.y.iter().cloned()).collect();
        assert_eq!(c.mixture.classes[0].gpd, super::super::tail::fit_gpd(&y).unwrap());
    }

    #[test]
    fn newton_refinement_lands_on_the_grid_fit() {
        let mut rng = rand_xoshiro::Xoshiro256PlusPlus::seed_from_u64(8);
        for &(xi, sigma) in &[(-0.2, 0.5), (0.05, 0.4), (0.4, 1.0)] {
            let t = query(200_000, 0.02, xi, sigma, &mut rng);
            let w: Vec<f64> = (0..t.y.len()).map(|i| 0.2 + (i % 7) as f64 / 7.0).collect();
            let grid = fit_gpd_weighted(&t.y, &w).unwrap();
            let newton = refine_gpd_weighted(&t.y, &w, Gpd { xi: grid.xi + 0.05, sigma: grid.sigma * 1.1 }).unwrap();
            assert!(
                (grid.xi - newton.xi).abs() < 1e-6 && (grid.sigma / newton.sigma - 1.0).abs() < 1e-6,
                "{grid:?} {newton:?}"
            );
        }
    }
}
