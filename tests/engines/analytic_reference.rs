//! The analytic engine against a brute-force reference integration.
//!
//! The reference uses the other form of the integral, over the needle's best entry score y:
//! P(rank ≤ j) = ∫ f_Y(y) · P[Bin(n_regular, Q(y)) + Bin(n_hard, Q_hard(y)) ≤ j − 1] dy,
//! with statrs' binomial CDF and a plain composite Simpson rule on a fine fixed grid: no code
//! shared with the engine's order-statistic quadrature. Required agreement: 1e-6 absolute.

use dsa_sim::engine::analytic::Analytic;
use dsa_sim::geometry::Geometry;
use dsa_sim::scenario::{Distractor, Pooling, Scenario};
use dsa_sim::scores::{EntryLaw, ScoreModel, TokenLaw};
use statrs::distribution::{Binomial, Discrete, DiscreteCDF};

fn simpson(f: impl Fn(f64) -> f64, a: f64, b: f64, n: usize) -> f64 {
    let n = n + n % 2;
    let h = (b - a) / n as f64;
    let mut s = f(a) + f(b);
    for i in 1..n {
        s += f(a + i as f64 * h) * if i % 2 == 1 { 4.0 } else { 2.0 };
    }
    s * h / 3.0
}

/// CDF and density of one needle entry law, by its formula (Gauss or max pooling).
fn needle_cdf_pdf(law: &EntryLaw, y: f64) -> (f64, f64) {
    let phi = |x: f64| (-0.5 * x * x).exp() / (2.0 * std::f64::consts::PI).sqrt();
    let big_phi = |x: f64| 0.5 * libm::erfc(-x / std::f64::consts::SQRT_2);
    match *law {
        EntryLaw::Gauss { mean, sd } => (big_phi((y - mean) / sd), phi((y - mean) / sd) / sd),
        EntryLaw::Max { token, n_dist, n_needle, needle_mean, needle_sd } => {
            let fd = token.cdf(y);
            let gd = token.ln_pdf(y).exp();
            let u = (y - needle_mean) / needle_sd;
            let (fn_, gn) = (big_phi(u), phi(u) / needle_sd);
            let (nd, nn) = (n_dist as i32, n_needle as i32);
            let cdf = fd.powi(nd) * fn_.powi(nn);
            let mut pdf = 0.0;
            if nd > 0 {
                pdf += nd as f64 * fd.powi(nd - 1) * gd * fn_.powi(nn);
            }
            if nn > 0 {
                pdf += nn as f64 * fn_.powi(nn - 1) * gn * fd.powi(nd);
            }
            (cdf, pdf)
        }
        EntryLaw::Token(_) => unreachable!("needle laws are Gauss or Max"),
    }
}

fn reference_rank_cdf(s: &Scenario, j: u64) -> f64 {
    let g = Geometry::new(s);
    let m = ScoreModel::new(s, &g).expect("exact scenario");
    assert!(!m.shared, "this reference handles scenarios without a shared component");
    reference_rank_cdf_given(&m, j, None, -14.0, 30.0, 40_000)
}

/// P(rank ≤ j | z) by the needle-side integral over [lo, hi] with `n` Simpson intervals.
fn reference_rank_cdf_given(m: &ScoreModel, j: u64, z: Option<f64>, lo: f64, hi: f64, n: usize) -> f64 {
    let laws: Vec<EntryLaw> = m.needle_entries.iter().map(|e| m.needle_law(e, z)).collect();
    let f_y = |y: f64| {
        let parts: Vec<(f64, f64)> = laws.iter().map(|l| needle_cdf_pdf(l, y)).collect();
        (0..parts.len())
            .map(|i| parts[i].1 * parts.iter().enumerate().filter(|(l, _)| *l != i).map(|(_, p)| p.0).product::<f64>())
            .sum::<f64>()
    };
    let count_le = |y: f64| {
        let qr = m.distractor.sf(y);
        let br = Binomial::new(qr, m.n_regular).unwrap();
        if m.n_hard == 0 {
            return br.cdf(j - 1);
        }
        let bh = Binomial::new(m.hard.sf(y), m.n_hard).unwrap();
        (0..=m.n_hard.min(j - 1)).map(|i| bh.pmf(i) * br.cdf(j - 1 - i)).sum()
    };
    simpson(|y| f_y(y) * count_le(y), lo, hi, n)
}

/// Recall with a shared needle component: E_z[readout(P(rank ≤ k | z))] by Simpson over z.
fn reference_recall_shared(s: &Scenario) -> f64 {
    let g = Geometry::new(s);
    let m = ScoreModel::new(s, &g).expect("exact scenario");
    assert!(m.shared);
    // The readout rule written out independently of the engine's.
    let n = s.layers as u64;
    let readout = |a: f64| match s.readout {
        dsa_sim::scenario::Readout::Any => 1.0 - (1.0 - a).powi(n as i32),
        dsa_sim::scenario::Readout::All => a.powi(n as i32),
        dsa_sim::scenario::Readout::AtLeast(m) => {
            let b = Binomial::new(a.clamp(0.0, 1.0), n).unwrap();
            (m as u64..=n).map(|i| b.pmf(i)).sum()
        }
    };
    let phi = |z: f64| (-0.5 * z * z).exp() / (2.0 * std::f64::consts::PI).sqrt();
    simpson(|z| phi(z) * readout(reference_rank_cdf_given(&m, g.k_eff, Some(z), -8.0, 14.0, 12_000)), -8.5, 8.5, 170)
}

fn scenarios() -> Vec<(&'static str, Scenario)> {
    let base = Scenario { context_len: 50_000, index_topk: 500, ..Scenario::default() };
    vec![
        ("default", base.clone()),
        ("low dprime", Scenario { dprime: 1.0, ..base.clone() }),
        ("narrow needle", Scenario { needle_sd: 0.05, dprime: 2.8, ..base.clone() }),
        ("wide needle", Scenario { needle_sd: 2.5, ..base.clone() }),
        ("score noise", Scenario { score_noise: 0.7, ..base.clone() }),
        ("k = 1", Scenario { index_topk: 1, dprime: 4.0, ..base.clone() }),
        ("k = 4096, N = 2^20", Scenario { context_len: 1 << 20, index_topk: 4096, ..base.clone() }),
        ("N = 10^9", Scenario { context_len: 1_000_000_000, index_topk: 2048, dprime: 5.0, ..base.clone() }),
        ("hard negatives", Scenario { hard_negatives: 40.0, hard_mean: 3.0, ..base.clone() }),
        ("hard fraction", Scenario { hard_negatives: 0.01, hard_mean: 1.5, ..base.clone() }),
        (
            "mean pooling",
            Scenario {
                compress_ratio: 8,
                pooling: Pooling::Mean,
                needle_tokens: 3,
                dprime: 4.0,
                index_topk: 64,
                ..base.clone()
            },
        ),
        (
            "mean straddle",
            Scenario {
                compress_ratio: 8,
                pooling: Pooling::Mean,
                needle_tokens: 2,
                depth: 0.0,
                dprime: 4.0,
                index_topk: 64,
                ..base.clone()
            },
        ),
        (
            "max pooling",
            Scenario { compress_ratio: 16, pooling: Pooling::Max, index_topk: 64, dprime: 4.0, ..base.clone() },
        ),
        (
            "max gumbel",
            Scenario {
                compress_ratio: 4,
                pooling: Pooling::Max,
                distractor: Distractor::Gumbel,
                index_topk: 64,
                ..base.clone()
            },
        ),
        ("student t", Scenario { distractor: Distractor::StudentT(4.0), dprime: 4.0, ..base.clone() }),
        ("gumbel", Scenario { distractor: Distractor::Gumbel, ..base.clone() }),
        ("repeat spread", Scenario { repeat: 4, ..base.clone() }),
        ("overlap none pooling", Scenario { compress_ratio: 4, overlap: true, index_topk: 64, ..base.clone() }),
        // Many needle entries of a few kinds (the engine groups alike entries; the reference
        // multiplies every entry's CDF).
        (
            "many copies, overlap",
            Scenario {
                compress_ratio: 4,
                overlap: true,
                repeat: 40,
                needle_tokens: 3,
                dprime: 0.5,
                index_topk: 64,
                ..base.clone()
            },
        ),
        (
            "long needle, mean pooling",
            Scenario {
                compress_ratio: 8,
                pooling: Pooling::Mean,
                needle_tokens: 45,
                dprime: 1.0,
                index_topk: 64,
                ..base.clone()
            },
        ),
        (
            "many copies, max pooling",
            Scenario {
                compress_ratio: 16,
                pooling: Pooling::Max,
                repeat: 12,
                needle_tokens: 5,
                dprime: 1.0,
                index_topk: 64,
                ..base.clone()
            },
        ),
    ]
}

#[test]
fn analytic_matches_brute_force_reference() {
    for (name, s) in scenarios() {
        s.validate().unwrap();
        let a = Analytic::new(&s).unwrap();
        let k = a.geometry().k_eff;
        let mut js = vec![k, 1, (k / 3).max(1), 3 * k];
        js.retain(|&j| j <= s.n_candidates());
        for j in js {
            let exact = a.rank_cdf(j);
            let reference = reference_rank_cdf(&s, j);
            assert!(
                (exact - reference).abs() < 1e-6,
                "{name}: P(rank <= {j}) analytic {exact} vs reference {reference}"
            );
        }
    }
}

#[test]
fn order_statistic_density_has_unit_mass() {
    // A needle that always wins (dprime huge, sd 0) turns P(rank ≤ j) into ∫ f_{T_j} = 1; a needle
    // that never wins gives 0. Both test the tails the engine cuts. Max pooling with a hopeless
    // needle token is the entry max of c − 1 distractor tokens against entries of c: its P(rank = 1)
    // is exactly (c−1) / ((c−1) + (N−1)·c) by exchangeability of the tokens.
    for (name, s) in scenarios() {
        let win = Scenario { dprime: 1000.0, needle_sd: 0.0, ..s.clone() };
        let lose = Scenario { dprime: -1000.0, needle_sd: 0.0, ..s.clone() };
        let (aw, al) = (Analytic::new(&win).unwrap(), Analytic::new(&lose).unwrap());
        for j in [1, 7, 300] {
            if j > s.n_candidates() / 2 {
                continue;
            }
            // Heavy-tailed distractors can still beat a needle at 1000: allow their whole chance.
            let beaten = s.n_candidates() as f64 * TokenLaw::new(s.distractor).sf(1000.0);
            assert!((aw.rank_cdf(j) - 1.0).abs() < 1e-9 + beaten, "{name} j={j}: {}", aw.rank_cdf(j));
            // Under mean/max pooling the needle's entry still holds distractor tokens, so a
            // hopeless needle token does not make a hopeless entry.
            if s.pooling == Pooling::None {
                assert!(al.rank_cdf(j).abs() < 1e-9, "{name} j={j}: {}", al.rank_cdf(j));
            }
        }
    }
    let s = Scenario {
        context_len: 50_000,
        compress_ratio: 16,
        pooling: Pooling::Max,
        dprime: -1000.0,
        needle_sd: 0.0,
        ..Scenario::default()
    };
    let n = s.n_candidates() as f64;
    let expected = 15.0 / (15.0 + (n - 1.0) * 16.0);
    let got = Analytic::new(&s).unwrap().rank_cdf(1);
    assert!((got - expected).abs() < 1e-9, "{got} vs {expected}");
}

#[test]
fn shared_component_matches_brute_force_reference() {
    let base = Scenario { context_len: 20_000, index_topk: 300, ..Scenario::default() };
    for (name, s) in [
        ("layers 4 any rho 0.7", Scenario { layers: 4, layer_corr: 0.7, dprime: 2.0, ..base.clone() }),
        (
            "layers 3 all rho 0.5",
            Scenario { layers: 3, layer_corr: 0.5, readout: dsa_sim::scenario::Readout::All, ..base.clone() },
        ),
        (
            "layers 5 at_least 3",
            Scenario {
                layers: 5,
                layer_corr: 0.3,
                readout: dsa_sim::scenario::Readout::AtLeast(3),
                dprime: 2.5,
                ..base.clone()
            },
        ),
        ("copies share z", Scenario { repeat: 3, layer_corr: 0.5, dprime: 1.5, ..base.clone() }),
    ] {
        let exact = Analytic::new(&s).unwrap().recall();
        let reference = reference_recall_shared(&s);
        assert!((exact - reference).abs() < 1e-6, "{name}: analytic {exact} vs reference {reference}");
    }
}
