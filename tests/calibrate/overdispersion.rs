//! Needle-level overdispersion: rows that carry a needle id are clusters of correlated trials.
//! Data drawn from a known truth in which each needle has its own recall (a beta law around the
//! model's recall, intra-needle correlation ρ): the fit recovers ρ, and its intervals for dprime
//! cover the truth about as often as they claim, where the binomial fit of the same counts
//! (needle ids dropped) is far too sure of itself.

use dsa_sim::calibrate::{calibrate, parse_csv, parse_fit_spec};
use dsa_sim::engine::{EngineChoice, EngineModel};
use dsa_sim::Scenario;
use rand::SeedableRng;
use rand_distr::{Beta, Binomial, Distribution};

fn base() -> Scenario {
    Scenario {
        compress_ratio: 1,
        overlap: false,
        window: 0,
        sink: 0,
        needle_tokens: 1,
        depth: 0.5,
        index_topk: 512,
        ..Scenario::default()
    }
}

/// A table: 4 context lengths × `needles` needles × `trials` trials, truth dprime and ρ.
fn table(seed: u64, dprime: f64, rho: f64, needles: usize, trials: u64, with_ids: bool) -> String {
    let mut rng = rand_xoshiro::Xoshiro256PlusPlus::seed_from_u64(seed);
    let mut t = String::from(if with_ids {
        "context_len,index_topk,needle,trials,hits\n"
    } else {
        "context_len,index_topk,trials,hits\n"
    });
    for l in [8_000u64, 32_000, 128_000, 512_000] {
        let s = Scenario { context_len: l, dprime, ..base() };
        let p = dsa_sim::engine::analytic::recall(&s).unwrap();
        let beta = Beta::new(p * (1.0 - rho) / rho, (1.0 - p) * (1.0 - rho) / rho).unwrap();
        for j in 0..needles {
            let pj: f64 = beta.sample(&mut rng);
            let hits = Binomial::new(trials, pj.clamp(0.0, 1.0)).unwrap().sample(&mut rng);
            if with_ids {
                t.push_str(&format!("{l},512,n{j},{trials},{hits}\n"));
            } else {
                t.push_str(&format!("{l},512,{trials},{hits}\n"));
            }
        }
    }
    t
}

fn fit(text: &str) -> dsa_sim::calibrate::FitResult {
    let data = parse_csv(text, "sim.csv").unwrap();
    let model = EngineModel::new(EngineChoice::Analytic, 1, 1);
    let free = parse_fit_spec("dprime", Some(&data)).unwrap();
    calibrate(&data, &base(), free, &model, true, false).unwrap()
}

#[test]
fn overdispersion_is_recovered_and_reported() {
    let f = fit(&table(1, 3.0, 0.2, 30, 20, true));
    let o = f.overdispersion.clone().expect("needle ids: overdispersion fitted");
    assert!(o.ci_low <= 0.2 && 0.2 <= o.ci_high, "{o:?}");
    assert!(o.ci_low > 0.05, "clearly overdispersed: {o:?}");
    assert_eq!(o.mean_trials, 20.0);
    assert!((o.design_effect - (1.0 + 19.0 * o.rho)).abs() < 1e-12);
    let d = &f.estimates[0];
    assert!(d.ci_low <= 3.0 && 3.0 <= d.ci_high, "{d:?}");
    // Without needle ids: the binomial fit, no overdispersion.
    let g = fit(&table(1, 3.0, 0.2, 30, 20, false));
    assert!(g.overdispersion.is_none());
    let (wo, wb) = (d.ci_high - d.ci_low, g.estimates[0].ci_high - g.estimates[0].ci_low);
    // The naive interval is narrower by about √(design effect) ≈ 2.
    assert!(wo > 1.5 * wb, "overdispersed width {wo} vs binomial {wb}");
    // Independent needles (ρ = 0) with ids: ρ̂ near 0, dprime's interval as the binomial's.
    let h = fit(&table(2, 3.0, 1e-9, 30, 20, true));
    let oh = h.overdispersion.unwrap();
    assert!(oh.ci_low < 1e-6 && oh.rho < 0.05, "{oh:?}");
}

#[test]
fn intervals_cover_the_truth_where_the_binomial_ones_do_not() {
    // 20 seeded tables; the 95% interval should miss about once. P(≤ 14 of 20 | 0.95) = 0.0026.
    let (mut od, mut naive) = (0, 0);
    for seed in 100..120 {
        let f = fit(&table(seed, 3.0, 0.2, 12, 20, true));
        let g = fit(&table(seed, 3.0, 0.2, 12, 20, false));
        od += (f.estimates[0].ci_low <= 3.0 && 3.0 <= f.estimates[0].ci_high) as u32;
        naive += (g.estimates[0].ci_low <= 3.0 && 3.0 <= g.estimates[0].ci_high) as u32;
    }
    eprintln!("coverage: overdispersed {od}/20, binomial {naive}/20");
    assert!(od >= 15, "overdispersed fit covered {od}/20");
    // Design effect 4.8: the binomial interval is about 2.2 times too narrow and covers ~63%.
    assert!(naive < od && naive <= 16, "binomial fit covered {naive}/20");
    // docs/model.md quotes the counts: they must be this build's.
    let doc = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/model.md")).unwrap();
    let quoted =
        format!("covered the truth in {od} of\n  20 seeded tables, the binomial fit of the same counts in {naive}.");
    assert!(doc.contains(&quoted), "docs/model.md should quote: {quoted}");
}
