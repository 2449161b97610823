//! Analytic engine against Monte Carlo wherever both apply, and the exact regimes.
//!
//! Policy: every comparison is seeded, and passes when the Monte Carlo count is not in the far
//! tail of Binomial(trials, analytic value): an exact two-sided binomial test at level 1e-9
//! (~1e-7 false alarms over the whole file), so the tests never flake and still catch a bias of
//! a few thousandths at these trial counts. An exact test rather than a Wilson interval because
//! the interesting values sit near 0 and 1, where Wilson's normal approximation excludes
//! outcomes that are merely unusual (one miss in 60,000 when 0.01 are expected).

use dsa_sim::engine::analytic::Analytic;
use dsa_sim::engine::montecarlo::{simulate, McPath};
use dsa_sim::scenario::{Distractor, Pooling, Readout, RepeatLayout, Scenario};
use dsa_sim::stats::wilson;
use statrs::distribution::{Binomial, DiscreteCDF};

const Z_FAR: f64 = 5.5;
const P_FAR: f64 = 1e-9;

fn scenarios() -> Vec<(&'static str, Scenario)> {
    let b = Scenario { context_len: 65_536, index_topk: 1024, ..Scenario::default() };
    vec![
        ("default", b.clone()),
        ("dprime 1", Scenario { dprime: 1.0, ..b.clone() }),
        ("dprime 5, k 64", Scenario { dprime: 5.0, index_topk: 64, ..b.clone() }),
        ("needle_sd 0.3", Scenario { needle_sd: 0.3, dprime: 2.5, ..b.clone() }),
        ("needle_sd 2", Scenario { needle_sd: 2.0, ..b.clone() }),
        ("needle_sd 0", Scenario { needle_sd: 0.0, dprime: 2.9, ..b.clone() }),
        ("score_noise 0.5", Scenario { score_noise: 0.5, ..b.clone() }),
        ("score_noise 1.5", Scenario { score_noise: 1.5, dprime: 4.0, ..b.clone() }),
        ("hard negatives 50", Scenario { hard_negatives: 50.0, hard_mean: 3.0, ..b.clone() }),
        ("hard fraction 5%", Scenario { hard_negatives: 0.05, hard_mean: 1.0, ..b.clone() }),
        ("student_t 3", Scenario { distractor: Distractor::StudentT(3.0), dprime: 4.0, ..b.clone() }),
        ("student_t 10", Scenario { distractor: Distractor::StudentT(10.0), ..b.clone() }),
        ("gumbel", Scenario { distractor: Distractor::Gumbel, ..b.clone() }),
        (
            "mean c8 m3",
            Scenario {
                compress_ratio: 8,
                pooling: Pooling::Mean,
                needle_tokens: 3,
                dprime: 4.0,
                index_topk: 128,
                ..b.clone()
            },
        ),
        (
            "mean c16 noise",
            Scenario {
                compress_ratio: 16,
                pooling: Pooling::Mean,
                dprime: 8.0,
                score_noise: 0.1,
                index_topk: 64,
                ..b.clone()
            },
        ),
        ("max c16", Scenario { compress_ratio: 16, pooling: Pooling::Max, index_topk: 64, dprime: 4.5, ..b.clone() }),
        (
            "max c4 gumbel",
            Scenario {
                compress_ratio: 4,
                pooling: Pooling::Max,
                distractor: Distractor::Gumbel,
                index_topk: 256,
                ..b.clone()
            },
        ),
        (
            "max c8 t5 m2",
            Scenario {
                compress_ratio: 8,
                pooling: Pooling::Max,
                distractor: Distractor::StudentT(5.0),
                needle_tokens: 2,
                index_topk: 128,
                dprime: 4.0,
                ..b.clone()
            },
        ),
        ("repeat 4 spread", Scenario { repeat: 4, dprime: 2.0, ..b.clone() }),
        (
            "repeat 8 adjacent mean",
            Scenario {
                repeat: 8,
                repeat_layout: RepeatLayout::Adjacent,
                compress_ratio: 4,
                pooling: Pooling::Mean,
                dprime: 3.0,
                index_topk: 256,
                ..b.clone()
            },
        ),
        ("layers 4 independent", Scenario { layers: 4, dprime: 2.0, ..b.clone() }),
        ("layers 4 corr 0.7", Scenario { layers: 4, layer_corr: 0.7, dprime: 2.0, ..b.clone() }),
        ("layers 3 all corr 0.5", Scenario { layers: 3, layer_corr: 0.5, readout: Readout::All, ..b.clone() }),
        (
            "layers 5 at_least 3",
            Scenario { layers: 5, layer_corr: 0.3, readout: Readout::AtLeast(3), dprime: 2.5, ..b.clone() },
        ),
        ("layers 2 corr 1", Scenario { layers: 2, layer_corr: 1.0, dprime: 2.5, ..b.clone() }),
        ("p_read / p_guess", Scenario { p_read: 0.9, p_guess: 0.1, dprime: 2.0, ..b.clone() }),
        (
            "overlap, pooling none",
            Scenario { compress_ratio: 4, overlap: true, index_topk: 256, dprime: 2.5, ..b.clone() },
        ),
        ("copies share z", Scenario { repeat: 3, layer_corr: 0.5, dprime: 2.0, ..b.clone() }),
        (
            "mean m3 shared z",
            Scenario {
                compress_ratio: 8,
                pooling: Pooling::Mean,
                needle_tokens: 3,
                layer_corr: 0.4,
                dprime: 4.0,
                index_topk: 128,
                ..b.clone()
            },
        ),
        (
            "hard + layers + noise",
            Scenario {
                hard_negatives: 20.0,
                hard_mean: 2.5,
                layers: 3,
                layer_corr: 0.5,
                score_noise: 0.3,
                ..b.clone()
            },
        ),
        ("N = 10^9", Scenario { context_len: 1_000_000_000, index_topk: 2048, dprime: 5.5, ..b.clone() }),
        (
            "V4-Flash preset 128K",
            Scenario { context_len: 131_072, ..Scenario::preset("deepseek-v4-flash").unwrap().one_layer() },
        ),
    ]
}

/// Two-sided exact binomial p-value of `successes` out of `trials` at success probability p.
fn binomial_p_value(successes: u64, trials: u64, p: f64) -> f64 {
    if p <= 0.0 {
        return if successes == 0 { 1.0 } else { 0.0 };
    }
    if p >= 1.0 {
        return if successes == trials { 1.0 } else { 0.0 };
    }
    let b = Binomial::new(p, trials).unwrap();
    let lower = b.cdf(successes);
    let upper = if successes == 0 { 1.0 } else { b.sf(successes - 1) };
    (2.0 * lower.min(upper)).min(1.0)
}

fn assert_inside(name: &str, analytic: f64, successes: u64, trials: u64) {
    let pv = binomial_p_value(successes, trials, analytic);
    let (lo, hi) = wilson(successes, trials, Z_FAR);
    assert!(
        pv >= P_FAR,
        "{name}: analytic {analytic:.8} vs Monte Carlo {successes}/{trials} (Wilson z=5.5 [{lo:.6}, {hi:.6}]): p-value {pv:.2e}"
    );
}

#[test]
fn exact_sampling_monte_carlo_agrees_with_analytic() {
    let list = scenarios();
    assert!(list.len() >= 30);
    for (i, (name, s)) in list.iter().enumerate() {
        s.validate().unwrap();
        let a = Analytic::new(s).unwrap_or_else(|e| panic!("{name}: {e}"));
        let run = simulate(s, 60_000, 1000 + i as u64, McPath::Exact).unwrap();
        assert_inside(name, a.recall(), run.successes, run.trials);
        // The rank distribution too, at k and at a quarter of k.
        for j in [s.index_topk, (s.index_topk / 4).max(1)] {
            let hits = (run.ranks.cdf(j) * run.trials as f64).round() as u64;
            assert_inside(&format!("{name} P(rank <= {j})"), a.rank_cdf(j), hits, run.trials);
        }
    }
}

#[test]
fn materialising_monte_carlo_agrees_with_analytic() {
    // Smaller contexts: this path draws every candidate's score.
    for (i, (name, s)) in scenarios().into_iter().enumerate() {
        let s = Scenario { context_len: s.context_len.min(8192), index_topk: s.index_topk.min(256), ..s };
        let a = Analytic::new(&s).unwrap();
        let run = simulate(&s, 3000, 77 + i as u64, McPath::Materialise).unwrap();
        assert_inside(&format!("{name} (materialised)"), a.recall(), run.successes, run.trials);
    }
}

#[test]
fn exact_regimes() {
    // N ≤ k: everything is selected.
    let s = Scenario { context_len: 2000, index_topk: 2048, dprime: -3.0, ..Scenario::default() };
    assert_eq!(Analytic::new(&s).unwrap().recall(), 1.0);
    let s = Scenario { context_len: 4 * 512, ..Scenario::preset("deepseek-v4-flash").unwrap().one_layer() };
    assert_eq!(Analytic::new(&s).unwrap().recall(), 1.0);
    // Needle inside the window.
    let s = Scenario { window: 128, depth: 1.0, dprime: -5.0, context_len: 1 << 20, ..Scenario::default() };
    assert_eq!(Analytic::new(&s).unwrap().recall(), 1.0);
    // Needle in the sink.
    let s = Scenario { sink: 4, depth: 0.0, dprime: -5.0, ..Scenario::default() };
    assert_eq!(Analytic::new(&s).unwrap().recall(), 1.0);
    // Very large dprime.
    let s = Scenario { dprime: 40.0, context_len: 1 << 30, index_topk: 1, ..Scenario::default() };
    assert!((Analytic::new(&s).unwrap().recall() - 1.0).abs() < 1e-12);
    // No information: dprime 0, needle_sd 1, pooling none, no hard negatives: k/N for one copy.
    for (l, k, c) in [(65_536u64, 2048u64, 1u64), (1 << 20, 512, 4), (1_000_000_000, 1024, 1), (5000, 1, 1)] {
        let s = Scenario { context_len: l, index_topk: k, compress_ratio: c, dprime: 0.0, ..Scenario::default() };
        let n = (l / c) as f64;
        let r = Analytic::new(&s).unwrap().recall();
        assert!((r - k as f64 / n).abs() < 1e-9, "L={l} k={k} c={c}: {r} vs {}", k as f64 / n);
        // The rank is uniform on 1..=N: P(rank ≤ j) = j/N.
        let a = Analytic::new(&s).unwrap();
        assert!((a.rank_cdf(7) - 7.0 / n).abs() < 1e-9);
    }
    // Monte Carlo is exact in the same regimes.
    let s = Scenario { context_len: 2000, index_topk: 2048, ..Scenario::default() };
    assert_eq!(simulate(&s, 1000, 1, McPath::Auto).unwrap().successes, 1000);
}

#[test]
fn fast_path_matches_materialising_path_in_distribution() {
    // Two independent Monte Carlo paths: a two-sample test of proportions at 5.5 sd.
    for (name, s) in [
        ("default 8K", Scenario { context_len: 8192, index_topk: 256, dprime: 2.0, ..Scenario::default() }),
        (
            "hard negatives",
            Scenario {
                context_len: 8192,
                index_topk: 128,
                hard_negatives: 30.0,
                hard_mean: 3.0,
                ..Scenario::default()
            },
        ),
        (
            "max pooling",
            Scenario {
                context_len: 8192,
                compress_ratio: 8,
                pooling: Pooling::Max,
                index_topk: 64,
                dprime: 4.0,
                ..Scenario::default()
            },
        ),
    ] {
        let n = 4000;
        let a = simulate(&s, n, 5, McPath::Exact).unwrap();
        let b = simulate(&s, n, 6, McPath::Materialise).unwrap();
        let (pa, pb) = (a.successes as f64 / n as f64, b.successes as f64 / n as f64);
        let p = 0.5 * (pa + pb);
        let sd = (2.0 * p * (1.0 - p) / n as f64).sqrt().max(1e-4);
        assert!((pa - pb).abs() < Z_FAR * sd, "{name}: exact {pa} vs materialised {pb}");
    }
}

#[test]
fn monte_carlo_is_identical_across_thread_counts() {
    let cases = [
        Scenario::default(),
        Scenario { pooling: Pooling::Mean, ..Scenario::preset("deepseek-v4-flash").unwrap().one_layer() },
        Scenario { layers: 3, layer_corr: 0.5, hard_negatives: 10.0, ..Scenario::default() },
    ];
    for s in cases {
        let s = Scenario { context_len: s.context_len.min(16_384), ..s };
        let run = |threads: usize| {
            let pool = rayon::ThreadPoolBuilder::new().num_threads(threads).build().unwrap();
            pool.install(|| simulate(&s, 10_000, 42, McPath::Auto).unwrap())
        };
        let one = run(1);
        assert_eq!(one, run(2));
        assert_eq!(one, run(3));
        assert_eq!(one, run(1));
    }
}

#[test]
fn the_comparison_has_power() {
    // The same check rejects an analytic value from a slightly different scenario (dprime off by
    // 0.1, a recall error of about 0.01): the tolerance is not loose enough to hide a real bias.
    let s = Scenario { context_len: 65_536, index_topk: 1024, ..Scenario::default() };
    let run = simulate(&s, 60_000, 1, McPath::Exact).unwrap();
    let wrong = Analytic::new(&Scenario { dprime: s.dprime + 0.1, ..s.clone() }).unwrap().recall();
    assert!(binomial_p_value(run.successes, run.trials, wrong) < P_FAR);
    let right = Analytic::new(&s).unwrap().recall();
    assert!(binomial_p_value(run.successes, run.trials, right) >= P_FAR);
}
