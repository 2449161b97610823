//! The vector lightning-indexer model: its exact Gaussian shortcut against the explicit token
//! path, its agreement with the scalar analytic engine where the effective parameters are known
//! in closed form, the ordering of formats, and reproducibility across thread counts.
//!
//! Statistical checks use fixed seeds and far-tail bounds (|z| ≤ 4.5, two-sided p ≈ 7e-6), so a
//! correct model does not flake and a wrong one (e.g. a variance off by a pooling factor) fails.

use dsa_sim::engine::analytic;
use dsa_sim::formats::Format;
use dsa_sim::indexer::effective::{chi_mean, compare_formats, effective_params};
use dsa_sim::indexer::{simulate, VectorModel};
use dsa_sim::progress::Silent;
use dsa_sim::trials::{self, Tally};

use crate::common;
use common::vector_scenario as vector;

/// Two-proportion z statistic.
fn z_two(a: u64, b: u64, n: u64) -> f64 {
    let (pa, pb) = (a as f64 / n as f64, b as f64 / n as f64);
    let p = (pa + pb) / 2.0;
    let se = (2.0 * p * (1.0 - p) / n as f64).sqrt().max(1e-12);
    (pa - pb) / se
}

fn rank_le(run: &Tally, j: u64) -> u64 {
    (run.ranks.cdf(j) * run.trials as f64).round() as u64
}

#[test]
fn gaussian_shortcut_matches_the_token_path() {
    // V4-like: overlapping blocks of 4, gated pooling, outliers, Hadamard, key norm; and a mean,
    // non-overlapping variant with hard negatives. Needle rank distributions must agree.
    let cases = [
        vector(
            "deepseek-v4-flash",
            &[
                ("context_len", "4096"),
                ("q_format", "fp32"),
                ("k_format", "fp32"),
                ("alignment", "0.45"),
                ("outlier_channels", "3"),
                ("outlier_scale", "4"),
            ],
        ),
        vector(
            "",
            &[
                ("context_len", "4096"),
                ("compress_ratio", "4"),
                ("compressor", "mean"),
                ("alignment", "0.5"),
                ("hard_negatives", "20"),
                ("hard_alignment", "0.45"),
                ("index_topk", "16"),
                ("hadamard", "false"),
            ],
        ),
    ];
    for (ci, s) in cases.iter().enumerate() {
        let trials = 1200;
        let fast = trials::run(&VectorModel::new(s), trials, 11, &Silent);
        let slow = trials::run(&VectorModel::new(s).with_token_path(true), trials, 12, &Silent);
        let n = VectorModel::new(s).n_entries() as u64;
        for j in [1u64, 4, 16, 64, 256, n / 4] {
            let (a, b) = (rank_le(&fast, j), rank_le(&slow, j));
            let z = z_two(a, b, trials);
            assert!(
                z.abs() <= 4.5,
                "case {ci}: P(rank <= {j}) shortcut {a}/{trials} vs tokens {b}/{trials}: z = {z:.2}"
            );
        }
        // The check has power: the shortcut with the wrong per-entry variance (no pooling, i.e.
        // compress_ratio 1 for distractors) would put the needle far higher.
        assert!(fast.ranks.cdf(n / 4) < 0.999 && fast.ranks.cdf(1) < 0.9, "case {ci}: uninformative configuration");
    }
}

/// One head, no key normalisation, isotropic keys: the standardised distractor entry score is
/// exactly Normal(0, 1) above 0 and the needle token's score is α·χ_d, so the scalar model with
/// dprime = α E[χ_d], needle_sd = α sd(χ_d) (and the same pooling) must agree.
#[test]
fn unquantised_one_head_model_agrees_with_the_scalar_analytic_engine() {
    let d = 128.0;
    let (alpha, trials) = (0.17, 3000u64);
    let cm = chi_mean(d);
    let (dprime, needle_sd) = (alpha * cm, alpha * (d - cm * cm).sqrt());
    for (pooling, c, k) in [("none", "1", "64"), ("mean", "4", "16")] {
        let compressor = "mean";
        let s = vector(
            "",
            &[
                ("heads", "1"),
                ("key_norm", "false"),
                ("hadamard", "false"),
                ("compressor", compressor),
                ("compress_ratio", c),
                ("context_len", "2048"),
                ("index_topk", k),
                ("alignment", &alpha.to_string()),
                ("depth", "0.3"),
                // The exact case: a positive head weight, no position (RoPE rotates the needle
                // away from the query direction by its distance).
                ("head_weights", "fixed"),
                ("rope_dims", "0"),
            ],
        );
        let run = simulate(&s, trials, 5);
        let mut scalar = s.clone();
        scalar.model = dsa_sim::scenario::Model::Scalar;
        scalar.set_text(dsa_sim::scenario::Field::Pooling, pooling).unwrap();
        scalar.dprime = dprime;
        scalar.needle_sd = needle_sd;
        let exact = analytic::recall(&scalar).unwrap();
        let p = run.successes as f64 / trials as f64;
        let se = (exact * (1.0 - exact) / trials as f64).sqrt();
        assert!(
            (p - exact).abs() <= 4.5 * se + 0.005,
            "pooling {pooling}: vector {p:.4} vs scalar analytic {exact:.4} (dprime {dprime:.3}, needle_sd {needle_sd:.3})"
        );
        assert!(exact > 0.1 && exact < 0.9, "uninformative: {exact}");
    }
}

#[test]
fn effective_dprime_of_the_exact_case_is_alpha_chi_mean() {
    let alpha = 0.2;
    let s = vector(
        "",
        &[
            ("heads", "1"),
            ("key_norm", "false"),
            ("hadamard", "false"),
            ("context_len", "4096"),
            ("alignment", "0.2"),
            ("head_weights", "fixed"),
            ("rope_dims", "0"),
        ],
    );
    let e = effective_params(&s, 400, 3);
    let want = alpha * chi_mean(128.0);
    // The needle's entry score standardised by the trial's distractors: the distractor law is
    // ReLU(Normal), so standardise the exact value the same way.
    let phi = |x: f64| (-x * x / 2.0).exp() / (2.0 * std::f64::consts::PI).sqrt();
    let (m, v) = (phi(0.0), 0.5 - phi(0.0).powi(2));
    let want_z = (want - m) / v.sqrt();
    assert!((e.dprime - want_z).abs() < 4.5 * e.dprime_se + 0.02, "{} vs {want_z}", e.dprime);
    assert!(e.fit.upper_quantiles.iter().all(|q| q.1.is_finite()));
}

#[test]
fn chi_mean_is_right() {
    assert!((chi_mean(1.0) - (2.0 / std::f64::consts::PI).sqrt()).abs() < 1e-12);
    assert!((chi_mean(2.0) - (std::f64::consts::PI / 2.0).sqrt()).abs() < 1e-12);
    // E[χ_d] E[χ_{d+1}] = d (the Gamma ratios telescope), and E[χ_d] ≈ √(d − 1/2).
    for d in [3.0, 64.0, 128.0, 4096.0] {
        assert!((chi_mean(d) * chi_mean(d + 1.0) - d).abs() < 1e-9 * d);
    }
    assert!((chi_mean(128.0) - 127.5f64.sqrt()).abs() < 1e-3);
}

#[test]
fn topk_overlap_orders_fp32_bf16_fp8_fp4() {
    let s = vector("deepseek-v4-flash", &[("context_len", "16384")]);
    let formats: Vec<Format> =
        ["fp32", "bf16", "fp8-e4m3:128:fp32", "fp4-e2m1:32:ue8m0"].iter().map(|f| f.parse().unwrap()).collect();
    let rows = compare_formats(&s, &formats, 512, 6, 21);
    let j: Vec<f64> = rows.iter().map(|r| r.topk_jaccard).collect();
    assert_eq!(j[0], 1.0);
    assert!(j[0] >= j[1] && j[1] >= j[2] && j[2] >= j[3], "Jaccard {j:?}");
    assert!(j[3] < 0.95, "fp4 should visibly reorder the top 512: {j:?}");
    let noise: Vec<f64> = rows.iter().map(|r| r.score_noise).collect();
    assert!(noise[0] == 0.0 && noise[1] < noise[2] && noise[2] < noise[3], "noise {noise:?}");
}

#[test]
fn results_do_not_depend_on_the_thread_count() {
    let s = vector("deepseek-v4-flash", &[("context_len", "8192"), ("layers", "2"), ("hard_negatives", "5")]);
    let m = VectorModel::new(&s);
    let run_in = |threads| {
        rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()
            .unwrap()
            .install(|| trials::run(&m, 40, 99, &Silent))
    };
    let one = run_in(1);
    let two = run_in(2);
    let three = run_in(3);
    assert_eq!(one, two);
    assert_eq!(one, three);
    let f = |threads| {
        rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()
            .unwrap()
            .install(|| compare_formats(&s, &["fp4-e2m1:32:ue8m0".parse().unwrap()], 512, 5, 1))
    };
    assert_eq!(f(1), f(2));
}

/// A trial streams its keys a block at a time; the scores must be exactly those of drawing every
/// key first (the path `formats` uses), whatever the features and however the blocks fall.
#[test]
fn streamed_keys_score_exactly_as_drawing_them_all() {
    use dsa_sim::indexer::{Scratch, KEY_BLOCK};
    let cases = [
        // V4: overlap, gated compressor, FP4 q and keys, hard negatives, several blocks.
        vector("deepseek-v4-flash", &[("context_len", "20000"), ("needle_tokens", "8"), ("hard_negatives", "30")]),
        // V3.2: token-level entries, FP8, a needle in the last partial block.
        vector("deepseek-v3.2", &[("context_len", "5000"), ("depth", "0.97"), ("repeat", "3")]),
        // NVFP4 keys, mean compressor, outlier channels, no Hadamard.
        vector(
            "",
            &[
                ("context_len", "9000"),
                ("compress_ratio", "4"),
                ("compressor", "mean"),
                ("k_format", "nvfp4"),
                ("outlier_channels", "4"),
                ("hadamard", "false"),
            ],
        ),
        // Quest pages (max and min rows), FP8 page keys.
        vector(
            "",
            &[
                ("context_len", "9000"),
                ("compress_ratio", "4"),
                ("compressor", "quest"),
                ("k_format", "fp8-e4m3:128:fp32"),
            ],
        ),
    ];
    for s in &cases {
        for token_path in [false, true] {
            let m = VectorModel::new(s).with_token_path(token_path);
            assert!(m.n_entries() > KEY_BLOCK, "the case must span several blocks");
            let (mut streamed, mut whole) = (Scratch::default(), Scratch::default());
            let dr = dsa_sim::indexer::Draws::new(9, 0, 0);
            let rank = m.layer_rank(&dr, &mut streamed);
            m.draw(&dr, &mut whole);
            m.quantize(&m.q_format, &m.k_format, &mut whole);
            m.score(&mut whole);
            assert_eq!(rank, m.rank(&whole.scores));
            assert_eq!(streamed.scores.len(), whole.scores.len());
            let differ = streamed.scores.iter().zip(&whole.scores).filter(|(a, b)| a.to_bits() != b.to_bits()).count();
            assert_eq!(differ, 0, "{differ} scores differ ({s:?}, token path {token_path})");
            assert!(streamed.keys.len() <= 2 * KEY_BLOCK * m.head_dim()); // Quest: 2d per page
        }
    }
}
