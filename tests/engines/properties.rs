//! Property tests of the model's invariants over random scenarios (proptest with a fixed RNG
//! seed and no persisted failures, so every run checks the same cases and never flakes).
//!
//! The analytic engine's promise is 1e-6 absolute, so monotonicity is asserted up to 2e-6.

use dsa_sim::engine::analytic::Analytic;
use dsa_sim::engine::montecarlo::{simulate, McPath};
use dsa_sim::scenario::{Distractor, Pooling, Scenario};
use proptest::prelude::*;
use proptest::test_runner::{Config, RngSeed};
use statrs::distribution::{Binomial, DiscreteCDF};

const SLACK: f64 = 2e-6;

fn config(cases: u32) -> Config {
    Config { cases, rng_seed: RngSeed::Fixed(0xD5A), failure_persistence: None, ..Config::default() }
}

fn distractor() -> impl Strategy<Value = Distractor> {
    prop_oneof![Just(Distractor::Normal), Just(Distractor::Gumbel), (2.5f64..30.0).prop_map(Distractor::StudentT),]
}

/// Exact scenarios spread over the feature space (no window or sink: the needle is ranked).
fn scenario() -> impl Strategy<Value = Scenario> {
    (
        (10u32..24, prop_oneof![Just(1u64), Just(4), Just(16)], 1u64..5000, 1u64..4),
        (-1.0f64..6.0, 0.0f64..2.5, 0.0f64..1.0, distractor()),
        (prop_oneof![Just(Pooling::None), Just(Pooling::Mean), Just(Pooling::Max)], 0.0f64..1.0, 0u32..3),
        (1u32..4, 1u32..4, 0.0f64..1.0, prop_oneof![Just(0.0f64), 1.0f64..40.0], -1.0f64..4.0),
    )
        .prop_map(
            |(
                (l2, c, k, m),
                (dprime, needle_sd, depth, d),
                (pooling, noise, noise_on),
                (rep, layers, rho, hard, hmean),
            )| {
                let mut s = Scenario {
                    context_len: 1u64 << l2,
                    compress_ratio: c,
                    index_topk: k,
                    needle_tokens: m,
                    dprime,
                    needle_sd,
                    depth,
                    distractor: d,
                    pooling,
                    repeat: rep,
                    layers,
                    layer_corr: rho,
                    hard_negatives: hard.floor(),
                    hard_mean: hmean,
                    ..Scenario::default()
                };
                // Score noise only where the analytic engine has a closed form.
                if noise_on == 0 && d == Distractor::Normal && pooling != Pooling::Max {
                    s.score_noise = noise;
                }
                if pooling == Pooling::Mean {
                    s.distractor = Distractor::Normal;
                }
                s
            },
        )
        .prop_filter("valid", |s| s.validate().is_ok())
}

fn recall(s: &Scenario) -> f64 {
    Analytic::new(s).expect("exact scenario").recall()
}

proptest! {
    #![proptest_config(config(48))]

    #[test]
    fn recall_is_monotone_in_k_dprime_and_window(s in scenario()) {
        let r = recall(&s);
        prop_assert!((0.0..=1.0).contains(&r));
        let more_k = Scenario { index_topk: s.index_topk * 2, ..s.clone() };
        prop_assert!(recall(&more_k) >= r - SLACK, "k: {} -> {}", r, recall(&more_k));
        let more_d = Scenario { dprime: s.dprime + 0.5, ..s.clone() };
        prop_assert!(recall(&more_d) >= r - SLACK, "dprime: {} -> {}", r, recall(&more_d));
        let wider = Scenario { window: s.context_len / 2, ..s.clone() };
        prop_assert!(recall(&wider) >= r - SLACK, "window: {} -> {}", r, recall(&wider));
    }

    #[test]
    fn recall_is_monotone_in_repeat(s in scenario()) {
        // Under pooling none every covering entry draws its own score, so more copies mean at
        // least as many chances (copies may share an entry, never fewer entries).
        let s = Scenario { pooling: Pooling::None, ..s };
        let r = recall(&s);
        let more = Scenario { repeat: s.repeat + 2, ..s.clone() };
        if more.validate().is_ok() {
            prop_assert!(recall(&more) >= r - SLACK, "repeat: {} -> {}", r, recall(&more));
        }
    }

    #[test]
    fn recall_falls_with_context_at_fixed_k(s in scenario()) {
        let s = Scenario { dprime: s.dprime.abs(), pooling: Pooling::None, hard_negatives: 0.0, ..s };
        let longer = Scenario { context_len: s.context_len * 4, ..s.clone() };
        prop_assert!(recall(&longer) <= recall(&s) + SLACK, "{} -> {}", recall(&s), recall(&longer));
    }

    #[test]
    fn rank_distribution_is_a_proper_cdf(s in scenario()) {
        let a = Analytic::new(&s).unwrap();
        let n = s.n_candidates();
        let mut prev = 0.0;
        let mut js = vec![1, 2, 5, 17, 100, 1000, 10_000, n / 2, n];
        js.retain(|&j| j >= 1 && j <= n);
        js.sort_unstable();
        for j in js {
            let p = a.rank_cdf(j);
            prop_assert!((-SLACK..=1.0 + SLACK).contains(&p), "P(rank <= {j}) = {p}");
            prop_assert!(p >= prev - SLACK, "CDF decreasing at {j}: {prev} -> {p}");
            prev = p;
        }
        prop_assert!((a.rank_cdf(n) - 1.0).abs() < SLACK, "P(rank <= N) = {}", a.rank_cdf(n));
    }
}

proptest! {
    #![proptest_config(config(16))]

    #[test]
    fn analytic_and_monte_carlo_agree(s in scenario(), seed in 0u64..1000) {
        let a = recall(&s);
        let n = 20_000;
        let run = simulate(&s, n, seed, McPath::Exact).unwrap();
        // Exact two-sided binomial test at level 1e-9 (see tests/engines/cross_engine.rs).
        let pv = if a <= 0.0 {
            if run.successes == 0 { 1.0 } else { 0.0 }
        } else if a >= 1.0 {
            if run.successes == n { 1.0 } else { 0.0 }
        } else {
            let b = Binomial::new(a, n).unwrap();
            let upper = if run.successes == 0 { 1.0 } else { b.sf(run.successes - 1) };
            (2.0 * b.cdf(run.successes).min(upper)).min(1.0)
        };
        prop_assert!(pv >= 1e-9, "analytic {a} vs {}/{n}: p-value {pv:e}", run.successes);
    }
}
