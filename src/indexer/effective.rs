//! Effective scalar parameters of the vector model, and the comparison of number formats.
//!
//! **Derivation.** In one trial (one query, N entry keys) the scalar model's unit is the sd of a
//! distractor entry's score. Let μ and σ be the mean and sd of the trial's distractor entry
//! scores (entries pooling no needle or hard-negative token). Each entry covering the needle gets
//! the standardised score z = (I_needle − μ) / σ. Over trials:
//! - `dprime` = mean of z over trials and needle entries, `needle_sd` = its sd: the scalar
//!   scenario with `pooling = none` (entry scores drawn directly, one draw per covering entry)
//!   and these two values reproduces the needle's standing against the distractors, *provided*
//!   the standardised distractor law is normal — which the fit diagnostics check: the
//!   Kolmogorov–Smirnov distance of the standardised distractor scores to Normal(0, 1) and their
//!   empirical upper quantiles (p = 0.99, 0.999 and 1 − k/N) against the normal ones. A heavier
//!   upper tail than normal makes the scalar scenario optimistic.
//! - For a quantized format F, on the same random draws as fp32 (shared seeds): the induced
//!   `score_noise` σ_q = sd(I_F − I_fp32) / σ_fp32 over distractor entries (the scalar model's
//!   additive entry noise, in distractor-sd units), and the *loss of effective dprime*
//!   dprime_fp32 − dprime_F where dprime_F standardises I_F with its own μ_F, σ_F.
//!   The scalar scenario of format F is then either (dprime_F, needle_sd_F, score_noise 0) or,
//!   equivalently to first order, (dprime_fp32, needle_sd_fp32, score_noise σ_q), since additive
//!   noise of sd σ_q shrinks the separation by √(1 + σ_q²).
//!
//! **Exact case.** With one head, no key normalisation and isotropic keys (no outliers), the
//! standardised distractor entry score (q·k / (‖q‖ sd_entry)) is exactly Normal(0, 1) above
//! zero (ReLU only zeroes scores below every needle score), and a needle token's score is
//! α‖g‖ with ‖g‖ ~ χ_d: dprime = α E\[χ_d\] = α √2 Γ((d+1)/2) / Γ(d/2) and
//! needle_sd = α √(d − E\[χ_d\]²) at token level, pooled by `mean` exactly as the scalar
//! model's `pooling = mean` pools token scores. [`chi_mean`] gives E\[χ_d\]; the test suite checks
//! the vector model against the analytic engine there.

use super::{Draws, Scratch, VectorModel};
use crate::formats::Format;
use crate::scenario::{Model, Pooling, Scenario};
use crate::stats::norm_cdf;
use rayon::prelude::*;
use serde::Serialize;

/// E\[χ_d\], the mean norm of a d-dimensional standard normal vector.
pub fn chi_mean(d: f64) -> f64 {
    (std::f64::consts::SQRT_2.ln() + libm::lgamma((d + 1.0) / 2.0) - libm::lgamma(d / 2.0)).exp()
}

/// Standard normal quantile (Acklam's rational approximation refined by one Newton step).
#[allow(clippy::excessive_precision)]
pub(crate) fn norm_quantile(p: f64) -> f64 {
    if p <= 0.0 {
        return f64::NEG_INFINITY;
    }
    if p >= 1.0 {
        return f64::INFINITY;
    }
    let a = [
        -3.969683028665376e1,
        2.209460984245205e2,
        -2.759285104469687e2,
        1.383577518672690e2,
        -3.066479806614716e1,
        2.506628277459239,
    ];
    let b =
        [-5.447609879822406e1, 1.615858368580409e2, -1.556989798598866e2, 6.680131188771972e1, -1.328068155288572e1];
    let c = [
        -7.784894002430293e-3,
        -3.223964580411365e-1,
        -2.400758277161838,
        -2.549732539343734,
        4.374664141464968,
        2.938163982698783,
    ];
    let dd = [7.784695709041462e-3, 3.224671290700398e-1, 2.445134137142996, 3.754408661907416];
    let pl = 0.02425;
    let x = if p < pl {
        let q = (-2.0 * p.ln()).sqrt();
        (((((c[0] * q + c[1]) * q + c[2]) * q + c[3]) * q + c[4]) * q + c[5])
            / ((((dd[0] * q + dd[1]) * q + dd[2]) * q + dd[3]) * q + 1.0)
    } else if p <= 1.0 - pl {
        let q = p - 0.5;
        let r = q * q;
        (((((a[0] * r + a[1]) * r + a[2]) * r + a[3]) * r + a[4]) * r + a[5]) * q
            / (((((b[0] * r + b[1]) * r + b[2]) * r + b[3]) * r + b[4]) * r + 1.0)
    } else {
        let q = (-2.0 * (1.0 - p).ln()).sqrt();
        -(((((c[0] * q + c[1]) * q + c[2]) * q + c[3]) * q + c[4]) * q + c[5])
            / ((((dd[0] * q + dd[1]) * q + dd[2]) * q + dd[3]) * q + 1.0)
    };
    let e = norm_cdf(x) - p;
    let u = e * (2.0 * std::f64::consts::PI).sqrt() * (x * x / 2.0).exp();
    x - u / (1.0 + x * u / 2.0)
}

/// How well the scalar (normal) distractor law fits the standardised distractor scores.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DistractorFit {
    /// Mean over trials of the Kolmogorov–Smirnov distance to Normal(0, 1).
    pub ks_distance: f64,
    /// Skewness of the standardised scores (0 for a normal law), mean over trials.
    pub skewness: f64,
    /// (p, empirical quantile, normal quantile) of the standardised scores, means over trials.
    pub upper_quantiles: Vec<(f64, f64, f64)>,
}

/// One format's figures against fp32 on the same draws.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FormatReport {
    /// The format (applied to queries and keys).
    pub format: String,
    /// Storage bits per value, scales included.
    pub bits_per_value: f64,
    /// ‖q̂ − q‖ / ‖q‖, mean over trials.
    pub q_rel_rms_error: f64,
    /// ‖k̂ − k‖ / ‖k‖ over all entry keys, mean over trials.
    pub k_rel_rms_error: f64,
    /// Pearson correlation of the entry scores with fp32's, mean over trials.
    pub score_corr: f64,
    /// Jaccard overlap of the top-k entry sets with fp32's, mean over trials.
    pub topk_jaccard: f64,
    /// Induced score noise σ_q (distractor-sd units).
    pub score_noise: f64,
    /// Effective dprime under this format.
    pub dprime: f64,
    /// Effective needle_sd under this format.
    pub needle_sd: f64,
    /// dprime_fp32 − dprime under this format.
    pub dprime_loss: f64,
    /// Fraction of trials whose needle ranks within k under this format.
    pub needle_in_topk: f64,
}

/// Effective scalar parameters of a vector scenario (with its own q/k formats).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct EffectiveParams {
    /// Trials used.
    pub trials: u64,
    /// Mean standardised needle entry score.
    pub dprime: f64,
    /// Its standard error.
    pub dprime_se: f64,
    /// Sd of the standardised needle entry score.
    pub needle_sd: f64,
    /// Fit of the normal distractor law.
    pub fit: DistractorFit,
}

impl EffectiveParams {
    /// The scalar scenario these parameters stand for: the same geometry, `pooling = none`,
    /// normal distractors, this dprime and needle_sd, no score noise.
    pub fn scalar_scenario(&self, s: &Scenario) -> Scenario {
        Scenario {
            model: Model::Scalar,
            pooling: Pooling::None,
            distractor: crate::scenario::Distractor::Normal,
            dprime: self.dprime,
            needle_sd: self.needle_sd,
            score_noise: 0.0,
            hard_negatives: 0.0,
            layer_corr: 0.0,
            ..s.clone()
        }
    }
}

/// Mean and sd of the distractor entries' scores (needle and hard entries left out).
fn distractor_moments(m: &VectorModel, scores: &[f32]) -> (f64, f64) {
    let (mut n, mut s1, mut s2) = (0u64, 0.0f64, 0.0f64);
    for (i, &x) in scores.iter().enumerate() {
        if m.is_needle_entry(i as u64) || m.is_hard_entry(i as u64) {
            continue;
        }
        n += 1;
        s1 += x as f64;
        s2 += (x as f64) * (x as f64);
    }
    let mean = s1 / n.max(1) as f64;
    let var = (s2 / n.max(1) as f64 - mean * mean).max(0.0) * n as f64 / (n.max(2) - 1) as f64;
    (mean, var.sqrt())
}

fn needle_zs(m: &VectorModel, scores: &[f32], mu: f64, sd: f64) -> Vec<f64> {
    m.geometry.needle_entries.iter().map(|e| (scores[e.index as usize] as f64 - mu) / sd.max(1e-300)).collect()
}

/// Per-trial distractor-fit figures: (KS distance, skewness, quantiles at `ps`).
fn fit_one(m: &VectorModel, scores: &[f32], mu: f64, sd: f64, ps: &[f64], buf: &mut Vec<f64>) -> (f64, f64, Vec<f64>) {
    buf.clear();
    for (i, &x) in scores.iter().enumerate() {
        if !(m.is_needle_entry(i as u64) || m.is_hard_entry(i as u64)) {
            buf.push((x as f64 - mu) / sd.max(1e-300));
        }
    }
    buf.sort_unstable_by(|a, b| a.total_cmp(b));
    let n = buf.len() as f64;
    let mut ks = 0.0f64;
    let mut skew = 0.0;
    for (i, &z) in buf.iter().enumerate() {
        let f = norm_cdf(z);
        ks = ks.max((f - i as f64 / n).abs()).max(((i + 1) as f64 / n - f).abs());
        skew += z * z * z;
    }
    let qs = ps.iter().map(|&p| buf[((p * n).floor() as usize).min(buf.len() - 1)]).collect();
    (ks, skew / n, qs)
}

/// Effective parameters of a vector scenario from `trials` trials (one layer each), seeded.
pub fn effective_params(s: &Scenario, trials: u64, seed: u64) -> EffectiveParams {
    let m = VectorModel::new(s);
    let n = m.n_entries().max(1) as f64;
    let k = s.index_topk as f64;
    let mut ps = vec![0.99, 0.999];
    if k < n {
        ps.push(1.0 - k / n);
    }
    let per: Vec<(Vec<f64>, f64, f64, Vec<f64>)> = (0..trials)
        .into_par_iter()
        .map_init(
            || (Scratch::default(), Vec::new()),
            |(sc, buf), i| {
                m.draw(&Draws::new(seed, i, 0), sc);
                m.quantize(&m.q_format, &m.k_format, sc);
                m.score(sc);
                let (mu, sd) = distractor_moments(&m, &sc.scores);
                let zs = needle_zs(&m, &sc.scores, mu, sd);
                let (ks, skew, qs) = fit_one(&m, &sc.scores, mu, sd, &ps, buf);
                (zs, ks, skew, qs)
            },
        )
        .collect();
    let zs: Vec<f64> = per.iter().flat_map(|t| t.0.iter().copied()).collect();
    let (dprime, needle_sd) = mean_sd(&zs);
    let t = per.len().max(1) as f64;
    let fit = DistractorFit {
        ks_distance: per.iter().map(|x| x.1).sum::<f64>() / t,
        skewness: per.iter().map(|x| x.2).sum::<f64>() / t,
        upper_quantiles: ps
            .iter()
            .enumerate()
            .map(|(j, &p)| (p, per.iter().map(|x| x.3[j]).sum::<f64>() / t, norm_quantile(p)))
            .collect(),
    };
    EffectiveParams { trials, dprime, dprime_se: needle_sd / (zs.len().max(1) as f64).sqrt(), needle_sd, fit }
}

fn mean_sd(xs: &[f64]) -> (f64, f64) {
    let n = xs.len().max(1) as f64;
    let mean = xs.iter().sum::<f64>() / n;
    let var = xs.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1.0).max(1.0);
    (mean, var.sqrt())
}

/// The formats `dsa-sim formats` compares by default.
pub(crate) fn default_formats() -> Vec<Format> {
    [
        "fp32",
        "bf16",
        "fp16",
        "fp8-e4m3:128:fp32",
        "fp8-e4m3:128:ue8m0",
        "fp8-e5m2:128:fp32",
        "int8:128:fp32",
        "mxfp4",
        "nvfp4",
        "fp4-e2m1:32:ue8m0",
        "int4:32:fp32",
    ]
    .iter()
    .map(|f| f.parse().expect("every built-in format name parses"))
    .collect()
}

fn top_mask(scores: &[f32], k: usize, idx: &mut Vec<u32>, mask: &mut Vec<bool>) {
    let n = scores.len();
    idx.clear();
    idx.extend(0..n as u32);
    mask.clear();
    mask.resize(n, false);
    let k = k.min(n);
    if k == 0 {
        return;
    }
    if k < n {
        // Ties broken by index, so the set is deterministic.
        idx.select_nth_unstable_by(k - 1, |&a, &b| scores[b as usize].total_cmp(&scores[a as usize]).then(a.cmp(&b)));
    }
    for &i in &idx[..k] {
        mask[i as usize] = true;
    }
}

fn rel_rms(a: &[f32], b: &[f32]) -> f64 {
    let (mut num, mut den) = (0.0f64, 0.0f64);
    for (x, y) in a.iter().zip(b) {
        num += ((x - y) as f64).powi(2);
        den += (*y as f64).powi(2);
    }
    (num / den.max(1e-300)).sqrt()
}

fn pearson(a: &[f32], b: &[f32]) -> f64 {
    let n = a.len().max(1) as f64;
    let ma = a.iter().map(|&x| x as f64).sum::<f64>() / n;
    let mb = b.iter().map(|&x| x as f64).sum::<f64>() / n;
    let (mut sab, mut saa, mut sbb) = (0.0, 0.0, 0.0);
    for (&x, &y) in a.iter().zip(b) {
        let (dx, dy) = (x as f64 - ma, y as f64 - mb);
        sab += dx * dy;
        saa += dx * dx;
        sbb += dy * dy;
    }
    if saa == 0.0 || sbb == 0.0 {
        return 1.0;
    }
    sab / (saa * sbb).sqrt()
}

/// Compares formats on shared draws (the scenario's own q/k formats are ignored: each format is
/// applied to both queries and keys). `topk` is the k of the Jaccard overlap and of
/// `needle_in_topk`. Rows in the order of `formats`; deterministic for any thread count.
pub fn compare_formats(s: &Scenario, formats: &[Format], topk: usize, trials: u64, seed: u64) -> Vec<FormatReport> {
    let m = VectorModel::new(s);
    // Per trial, per format: [q_err, k_err, corr, jaccard, noise, dprime (mean z), z count,
    // sum z², in_topk].
    let per: Vec<(Vec<[f64; 9]>, f64, f64)> = (0..trials)
        .into_par_iter()
        .map_init(
            || {
                (
                    Scratch::default(),
                    Vec::<f32>::new(),
                    Vec::<f32>::new(),
                    Vec::<f32>::new(),
                    Vec::new(),
                    Vec::new(),
                    Vec::new(),
                )
            },
            |(sc, q_raw, k_raw, ref_scores, idx, ref_mask, mask), i| {
                m.draw(&Draws::new(seed, i, 0), sc);
                q_raw.clone_from(&sc.q);
                k_raw.clone_from(&sc.keys);
                m.score(sc);
                ref_scores.clone_from(&sc.scores);
                let (mu0, sd0) = distractor_moments(&m, ref_scores);
                let z0 = needle_zs(&m, ref_scores, mu0, sd0);
                top_mask(ref_scores, topk, idx, ref_mask);
                let rows = formats
                    .iter()
                    .map(|f| {
                        sc.q.clone_from(q_raw);
                        sc.keys.clone_from(k_raw);
                        m.quantize(f, f, sc);
                        m.score(sc);
                        let q_err = rel_rms(&sc.q, q_raw);
                        let k_err = rel_rms(&sc.keys, k_raw);
                        let corr = pearson(&sc.scores, ref_scores);
                        top_mask(&sc.scores, topk, idx, mask);
                        let inter = mask.iter().zip(ref_mask.iter()).filter(|(a, b)| **a && **b).count();
                        let union = mask.iter().zip(ref_mask.iter()).filter(|(a, b)| **a || **b).count();
                        let jac = if union == 0 { 1.0 } else { inter as f64 / union as f64 };
                        let diffs: Vec<f64> = sc
                            .scores
                            .iter()
                            .zip(ref_scores.iter())
                            .enumerate()
                            .filter(|(j, _)| !(m.is_needle_entry(*j as u64) || m.is_hard_entry(*j as u64)))
                            .map(|(_, (a, b))| (*a - *b) as f64)
                            .collect();
                        let noise = mean_sd(&diffs).1 / sd0.max(1e-300);
                        let (mu, sd) = distractor_moments(&m, &sc.scores);
                        let zs = needle_zs(&m, &sc.scores, mu, sd);
                        let in_top = m.rank(&sc.scores).is_some_and(|r| r <= topk as u64) as u64 as f64;
                        [
                            q_err,
                            k_err,
                            corr,
                            jac,
                            noise,
                            zs.iter().sum::<f64>(),
                            zs.len() as f64,
                            zs.iter().map(|z| z * z).sum::<f64>(),
                            in_top,
                        ]
                    })
                    .collect();
                (rows, z0.iter().sum::<f64>(), z0.len() as f64)
            },
        )
        .collect();
    let t = per.len().max(1) as f64;
    let mut rows: Vec<FormatReport> = formats
        .iter()
        .enumerate()
        .map(|(fi, f)| {
            let sum = |j: usize| per.iter().map(|p| p.0[fi][j]).sum::<f64>();
            let (zsum, zn, zsq) = (sum(5), sum(6).max(1.0), sum(7));
            let dprime = zsum / zn;
            let needle_sd = ((zsq - zn * dprime * dprime) / (zn - 1.0).max(1.0)).max(0.0).sqrt();
            FormatReport {
                format: f.to_string(),
                bits_per_value: f.bits_per_value(),
                q_rel_rms_error: sum(0) / t,
                k_rel_rms_error: sum(1) / t,
                score_corr: sum(2) / t,
                topk_jaccard: sum(3) / t,
                score_noise: sum(4) / t,
                dprime,
                needle_sd,
                dprime_loss: 0.0,
                needle_in_topk: sum(8) / t,
            }
        })
        .collect();
    // The loss is against fp32 on the same draws (so fp32 need not be listed).
    let (zs, zn) = per.iter().fold((0.0, 0.0), |a, p| (a.0 + p.1, a.1 + p.2));
    let fp32 = zs / zn.max(1.0);
    for r in &mut rows {
        r.dprime_loss = fp32 - r.dprime;
    }
    rows
}
