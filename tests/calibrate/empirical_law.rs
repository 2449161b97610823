//! The captured distractor law as a recall model (`calibrate --scores`): against the analytic
//! engine's own Student-t law on a capture drawn from that law, and calibration on measured
//! recall whose truth has heavy-tailed distractors, where the normal law's fit is biased.

use dsa_sim::calibrate::{calibrate, parse_csv, parse_fit_spec};
use dsa_sim::engine::{EngineChoice, EngineModel, RecallModel};
use dsa_sim::import::scores::{CapturedScores, EmpiricalLaw, EmpiricalModel, LayerScores, QueryScores};
use dsa_sim::scenario::Distractor;
use dsa_sim::Scenario;
use rand::SeedableRng;
use rand_distr::{Binomial, Distribution, StudentT};

fn scen(l: u64, k: u64, d: f64) -> Scenario {
    Scenario {
        context_len: l,
        index_topk: k,
        compress_ratio: 1,
        overlap: false,
        window: 0,
        sink: 0,
        needle_tokens: 1,
        depth: 0.5,
        dprime: d,
        ..Scenario::default()
    }
}

/// 200 queries × 2000 Student-t(4) distractors (the needle's own score irrelevant to the law).
fn t4_capture(seed: u64) -> CapturedScores {
    let mut rng = rand_xoshiro::Xoshiro256PlusPlus::seed_from_u64(seed);
    let t = StudentT::new(4.0).unwrap();
    let queries = (0..200)
        .map(|_| {
            let mut row: Vec<f64> = (0..2001).map(|_| t.sample(&mut rng)).collect();
            row[0] = 10.0;
            QueryScores::from_row(&row, 0, "t4").unwrap()
        })
        .collect();
    CapturedScores { layers: vec![LayerScores { layer: 0, queries }] }
}

#[test]
fn the_law_survival_is_continuous_and_matches_its_sample() {
    let c = t4_capture(1);
    let law = EmpiricalLaw::new(&c, "t4").unwrap();
    let t = statrs::distribution::StudentsT::new(0.0, 0.5f64.sqrt(), 4.0).unwrap();
    use statrs::distribution::ContinuousCDF;
    // Standardised t(4): scale √(2/4) (variance 1).
    let mut last = 1.0;
    for i in 0..400 {
        let x = -6.0 + i as f64 * 0.04;
        let s = law.sf(x);
        assert!(s <= last + 1e-15 && (0.0..=1.0).contains(&s), "x {x}: {s} after {last}");
        last = s;
        // 400,000 samples: the body is within 0.005 of the truth.
        assert!((s - t.sf(x)).abs() < 0.005, "x {x}: {s} vs {}", t.sf(x));
    }
    // The tail: within 30% of the truth out to 10 sd (the GPD carries it past the sample).
    for x in [4.0, 6.0, 8.0, 10.0] {
        let (s, truth) = (law.sf(x), t.sf(x));
        assert!((s / truth - 1.0).abs() < 0.3, "x {x}: {s} vs {truth}");
    }
}

#[test]
fn recall_with_the_captured_law_is_the_analytic_recall_of_its_truth() {
    let model = EmpiricalModel::new(EmpiricalLaw::new(&t4_capture(2), "t4").unwrap());
    let exact = EngineModel::new(EngineChoice::Analytic, 1, 1);
    for (l, k, d, sd, layers) in [
        (100_000u64, 512u64, 3.0, 1.0, 1u32),
        (1_000_000, 2048, 5.0, 0.5, 1),
        (20_000, 16, 5.0, 1.0, 3),
        (5_000, 1, 7.0, 0.0, 1),
        (1_000_000, 64, 8.0, 1.0, 1),
    ] {
        let s = Scenario { needle_sd: sd, layers, ..scen(l, k, d) };
        let truth = exact.recall(&Scenario { distractor: Distractor::StudentT(4.0), ..s.clone() }).unwrap();
        let normal = exact.recall(&s).unwrap();
        let got = model.recall(&s).unwrap();
        eprintln!("L={l} k={k} d={d}: captured law {got:.4}, Student-t truth {truth:.4}, normal {normal:.4}");
        assert!((got - truth).abs() < 0.03, "L={l} k={k}: {got} vs {truth}");
    }
    // Scenarios the law cannot model are refused in one line.
    let e = model
        .recall(&Scenario { pooling: dsa_sim::scenario::Pooling::Mean, compress_ratio: 4, ..scen(10_000, 64, 3.0) })
        .unwrap_err();
    assert!(e.to_string().contains("pooling"), "{e}");
}

#[test]
fn calibration_with_the_captured_law_recovers_a_heavy_tailed_truth() {
    // Measured recall from Student-t(4) distractors at dprime 3.5: 4 cells × 400 trials.
    let exact = EngineModel::new(EngineChoice::Analytic, 1, 1);
    let mut rng = rand_xoshiro::Xoshiro256PlusPlus::seed_from_u64(9);
    let mut t = String::from("context_len,index_topk,trials,hits\n");
    for l in [8_000u64, 64_000, 512_000, 4_096_000] {
        let p = exact.recall(&Scenario { distractor: Distractor::StudentT(4.0), ..scen(l, 512, 3.5) }).unwrap();
        let hits = Binomial::new(400, p).unwrap().sample(&mut rng);
        t.push_str(&format!("{l},512,400,{hits}\n"));
    }
    let data = parse_csv(&t, "t4.csv").unwrap();
    let free = parse_fit_spec("dprime", Some(&data)).unwrap();
    let base = scen(8_000, 512, 3.0);
    let model = EmpiricalModel::new(EmpiricalLaw::new(&t4_capture(3), "t4").unwrap());
    let f = calibrate(&data, &base, free.clone(), &model, true, false).unwrap();
    let e = &f.estimates[0];
    eprintln!("captured law: dprime {} [{}, {}]", e.value, e.ci_low, e.ci_high);
    assert!(e.ci_low <= 3.5 && 3.5 <= e.ci_high, "{e:?}");
    // The normal law's fit of the same counts lands elsewhere and fits worse.
    let g = calibrate(&data, &base, free, &exact, true, false).unwrap();
    let n = &g.estimates[0];
    eprintln!(
        "normal law: dprime {} [{}, {}], deviance {} vs {}",
        n.value, n.ci_low, n.ci_high, g.deviance, f.deviance
    );
    assert!(!(n.ci_low <= 3.5 && 3.5 <= n.ci_high), "{n:?}");
    assert!(g.deviance > f.deviance);
    // The README quotes these figures: they must be this build's.
    let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md")).unwrap();
    let quoted = format!(
        "recovers {:.2} [{:.2}, {:.2}], where the normal law's\nfit says {:.2} [{:.2}, {:.2}] with a deviance of {:.0} against {:.1}",
        e.value, e.ci_low, e.ci_high, n.value, n.ci_low, n.ci_high, g.deviance, f.deviance
    );
    assert!(readme.contains(&quoted), "README.md should quote: {quoted}");
}
