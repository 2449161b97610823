//! `plan` (docs/model.md#planning): the information design on constructed predictions (trials go
//! where the hypotheses disagree, never where they agree), its expected information against an
//! exact sum, the simulated right-call probability against an exact binomial sum, and the k the
//! deployment's kernel runs.

use dsa_sim::calibrate::Dataset;
use dsa_sim::diagnosis::plan::{
    candidate_k, candidates, information_design, Meaning, RuleHypothesis, RuleOnPlan, RIGHT_CALL_TABLES,
};
use dsa_sim::measured::Observation;
use dsa_sim::verdict::Call;
use dsa_sim::Scenario;
use std::process::Command;

fn chosen_cells(d: &dsa_sim::diagnosis::plan::Design) -> Vec<usize> {
    d.chosen.iter().map(|c| c.0).collect()
}

#[test]
fn trials_go_where_the_hypotheses_disagree_and_nowhere_they_agree() {
    // A and B agree at every cell but 9 and 10; C is A everywhere (A and C cannot be told apart
    // anywhere: a maximin over pairs is 0 at every cell and may spend the budget anywhere, such
    // as cell 0 where all three predict 0).
    let a = vec![0.0, 0.0, 0.5, 0.5, 1.0, 0.3, 0.7, 0.2, 0.9, 0.6, 0.4];
    let mut b = a.clone();
    b[9] = 0.2;
    b[10] = 0.9;
    let c = a.clone();
    let preds = vec![a, b, c];
    for prior in [[1.0 / 3.0; 3], [0.6, 0.3, 0.1], [0.05, 0.9, 0.05]] {
        let d = information_design(&prior, &preds, 1000, 7);
        let total: u64 = d.chosen.iter().map(|c| c.1).sum();
        assert!(total > 0 && total <= 1000, "{d:?}");
        for c in chosen_cells(&d) {
            assert!(c == 9 || c == 10, "prior {prior:?}: trials at cell {c}, where all hypotheses agree: {d:?}");
        }
        assert!(d.chosen.iter().all(|c| c.2 > 0.0), "{d:?}");
        // What the design can learn is at most which of {A or C, B}: the entropy of that split.
        let pb = prior[1];
        let h_split = -(pb * pb.ln() + (1.0 - pb) * (1.0 - pb).ln());
        let info = d.prior_entropy - d.posterior_entropy;
        assert!(info > 0.0 && info <= h_split + 1e-9, "info {info} > {h_split}");
    }
}

#[test]
fn each_region_of_disagreement_gets_trials() {
    // B differs from A only at cell 3, C only at cell 7: both cells are needed to tell the three
    // apart, and no other cell carries information.
    let a = vec![0.5; 10];
    let mut b = a.clone();
    b[3] = 0.1;
    let mut c = a.clone();
    c[7] = 0.9;
    let d = information_design(&[1.0 / 3.0; 3], &[a, b, c], 1000, 3);
    let mut cells = chosen_cells(&d);
    cells.sort_unstable();
    assert_eq!(cells, vec![3, 7], "{d:?}");
}

#[test]
fn all_agreeing_everywhere_plans_nothing() {
    let a = vec![0.0, 0.5, 1.0];
    let d = information_design(&[0.5, 0.5], &[a.clone(), a], 1000, 1);
    assert!(d.chosen.is_empty(), "{d:?}");
}

fn ln_pmf(n: u64, y: u64, p: f64) -> f64 {
    use statrs::function::gamma::ln_gamma;
    ln_gamma(n as f64 + 1.0) - ln_gamma(y as f64 + 1.0) - ln_gamma((n - y) as f64 + 1.0)
        + if y > 0 { y as f64 * p.ln() } else { 0.0 }
        + if n > y { (n - y) as f64 * (1.0 - p).ln() } else { 0.0 }
}

#[test]
fn one_chunk_information_is_the_exact_mutual_information() {
    // Budget 80: one chunk of 80 trials, whose outcomes are summed exactly. The design's
    // information must equal I(H; Y) = Σ_h π_h Σ_y P(y|h) ln(P(y|h)/P(y)) at the best cell,
    // and the best cell is the one with the largest exact I.
    let preds = vec![vec![0.5, 0.3, 0.9, 0.02], vec![0.6, 0.1, 0.9, 0.2]];
    let prior = [0.7, 0.3];
    let n = 80u64;
    let mi = |c: usize| -> f64 {
        let mut i = 0.0;
        for y in 0..=n {
            let l: Vec<f64> = (0..2).map(|h| ln_pmf(n, y, preds[h][c]).exp()).collect();
            let py: f64 = (0..2).map(|h| prior[h] * l[h]).sum();
            for h in 0..2 {
                if l[h] > 0.0 {
                    i += prior[h] * l[h] * (l[h] / py).ln();
                }
            }
        }
        i
    };
    let exact: Vec<f64> = (0..4).map(mi).collect();
    let best = (0..4).max_by(|&x, &y| exact[x].total_cmp(&exact[y])).unwrap();
    let d = information_design(&prior, &preds, n, 5);
    assert_eq!(d.chosen.len(), 1);
    assert_eq!(d.chosen[0].0, best, "exact MI per cell {exact:?}");
    assert_eq!(d.chosen[0].1, n);
    let info = d.prior_entropy - d.posterior_entropy;
    assert!((info - exact[best]).abs() < 1e-9, "design {info} exact {}", exact[best]);
    assert!((d.chosen[0].2 - exact[best]).abs() < 1e-9);
}

#[test]
fn simulated_right_call_matches_the_exact_binomial_sum() {
    // One planned cell of n trials, a working indexer A (coverage-limited) against a defect B.
    // The rule calls B (implementation-suspect, class B) iff the defect evidence
    // D(y) = AIC_A(y) − AIC_B(y) exceeds τ, with AIC_h(y) = table AIC − 2 ln P(y | h); A's call
    // at the same standard the other way, when the defect is ruled out: D(y) < −τ (the table
    // measures two k, so k's effect is shown); otherwise undecided. P(right | A) = Σ_y Bin(y; n,
    // pA)·[D(y) < −τ], P(right | B) = Σ_y Bin(y; n, pB)·[D(y) > τ].
    let (n, pa, pb, aic_a, aic_b, tau) = (40u64, 0.5, 0.35, 10.0, 11.0, 2.5);
    let hyp = |name: &str, aic: f64, meaning: Meaning, working: bool, p: f64| RuleHypothesis {
        hypothesis: dsa_sim::calibrate::Hypothesis::from_name(name).unwrap(),
        table_aic: aic,
        meaning,
        working,
        at_cells: vec![p],
    };
    let rule = RuleOnPlan {
        hypotheses: vec![
            hyp("discrimination", aic_a, Meaning::Physical(Call::CoverageLimited), true, pa),
            hyp("effective-k", aic_b, Meaning::Defect, false, pb),
        ],
        truths: 2,
        trials: vec![n],
        threshold: tau,
        false_alarm: 0.05,
        floor: None,
        table_hits: vec![],
        table_exact: false,
        table_read: false,
        k_matters: true,
    };
    let evidence = |y: u64| (aic_a - 2.0 * ln_pmf(n, y, pa)) - (aic_b - 2.0 * ln_pmf(n, y, pb));
    let exact_a: f64 = (0..=n).filter(|&y| evidence(y) < -tau).map(|y| ln_pmf(n, y, pa).exp()).sum();
    let exact_b: f64 = (0..=n).filter(|&y| evidence(y) > tau).map(|y| ln_pmf(n, y, pb).exp()).sum();
    let sim = rule.p_right(11, RIGHT_CALL_TABLES);
    for (s, e) in sim.iter().zip([exact_a, exact_b]) {
        // 4.5 binomial standard errors of RIGHT_CALL_TABLES draws (plus one table).
        let sd = (e * (1.0 - e) / RIGHT_CALL_TABLES as f64).sqrt();
        assert!(
            (s - e).abs() <= 4.5 * sd + 1.0 / RIGHT_CALL_TABLES as f64,
            "simulated {sim:?}, exact {exact_a} {exact_b}"
        );
    }
    assert!(
        exact_a > 0.02 && exact_a < 0.98 && exact_b > 0.02 && exact_b < 0.98,
        "a case that tests something: {exact_a} {exact_b}"
    );
    // The same seed gives the same tables.
    assert_eq!(sim, rule.p_right(11, RIGHT_CALL_TABLES));
    // A false-alarm rate above 10% on the design turns the defect call into undecided: B is
    // never called right.
    let undecided = RuleOnPlan { false_alarm: 0.2, ..rule.clone() };
    assert_eq!(undecided.p_right(11, RIGHT_CALL_TABLES)[1], 0.0);
    // A table that already shows an exact defect signature is implementation-suspect whatever
    // the planned cells show: a working truth is never called right.
    let exact = RuleOnPlan { table_exact: true, ..rule };
    assert_eq!(exact.p_right(11, RIGHT_CALL_TABLES)[0], 0.0);
}

fn empty() -> Dataset {
    Dataset {
        source: "t".into(),
        rows: vec![],
        notes: vec![],
        provenance: None,
        transcribed: false,
        condition_columns: vec![],
    }
}

#[test]
fn candidates_are_the_kernels_k_only() {
    let sg = Scenario::preset("deepseek-v4-flash-sglang").unwrap();
    assert_eq!(candidate_k(&sg, &empty()), vec![512, 1024], "sglang-v1 runs k 512 and 1024 only");
    let c = candidates(&sg, &empty());
    assert!(!c.is_empty());
    assert!(c.iter().all(|o| o.index_topk == 512 || o.index_topk == 1024));
    let mut any = Scenario::preset("deepseek-v4-flash").unwrap();
    any.max_topk = 768;
    let ks = candidate_k(&any, &empty());
    assert!(!ks.is_empty() && ks.iter().all(|&k| k <= 768), "{ks:?}");
    assert!(candidates(&any, &empty()).iter().all(|o| o.index_topk <= 768 && o.context_len <= 64_000));
}

/// Lengths beyond 64,000 are proposed only up to the table's longest measured length (which the
/// deployment ran), doubling from 128,000, and never beyond it.
#[test]
fn candidate_lengths_reach_the_longest_measured_length_and_no_further() {
    let sg = Scenario::preset("deepseek-v4-flash-sglang").unwrap();
    let lengths = |data: &Dataset| {
        let mut l: Vec<u64> = candidates(&sg, data).iter().map(|o| o.context_len).collect();
        l.sort_unstable();
        l.dedup();
        l
    };
    let short = Dataset::of_rows("t", vec![Observation::cell(16_000, 512, None, 10, 3, 2)]);
    assert_eq!(lengths(&short).last(), Some(&64_000));
    let long = Dataset::of_rows(
        "t",
        vec![Observation::cell(16_000, 512, None, 10, 3, 2), Observation::cell(500_000, 512, None, 10, 0, 3)],
    );
    let l = lengths(&long);
    for want in [64_000, 128_000, 256_000, 256_003, 500_000] {
        assert!(l.contains(&want), "{want} missing from {l:?}");
    }
    assert_eq!(l.last(), Some(&500_000), "L + 3 of the longest is beyond it: {l:?}");
    assert!(!l.contains(&512_000), "{l:?}");
}

fn dsa(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_dsa-sim")).args(args).output().unwrap()
}

#[test]
fn plan_on_the_sglang_kernel_reports_the_right_call_and_its_seed() {
    let seed_table = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/dsv4_seed_observations.csv");
    let o = dsa(&[
        "plan",
        "--preset",
        "deepseek-v4-flash-sglang",
        "--stack",
        "none",
        "--context-len",
        "16000",
        "--data",
        seed_table,
        "--budget",
        "600",
        "--seed",
        "5",
        "--json",
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let j: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(j["candidate_k"], serde_json::json!([512, 1024]));
    let cells = j["cells"].as_array().unwrap();
    assert!(!cells.is_empty());
    let mut total = 0;
    for c in cells {
        let k = c["index_topk"].as_u64().unwrap();
        assert!(k == 512 || k == 1024, "{c}");
        // Only cells where the leading hypotheses disagree.
        let p: Vec<f64> = c["predicted"].as_object().unwrap().values().map(|v| v.as_f64().unwrap()).collect();
        let spread =
            p.iter().cloned().fold(f64::NEG_INFINITY, f64::max) - p.iter().cloned().fold(f64::INFINITY, f64::min);
        assert!(spread > 1e-9, "{c}");
        total += c["trials"].as_u64().unwrap();
    }
    assert!(total <= 600 && total == j["total_trials"].as_u64().unwrap());
    assert_eq!(j["seed"], 5);
    let rc = &j["right_call"];
    assert_eq!(rc["seed"], 5);
    assert_eq!(rc["tables"], RIGHT_CALL_TABLES);
    let hs = rc["hypotheses"].as_array().unwrap();
    assert_eq!(hs.len(), j["leading_hypotheses"].as_array().unwrap().len());
    let overall: f64 = hs.iter().map(|h| h["prior"].as_f64().unwrap() * h["p_right"].as_f64().unwrap()).sum();
    assert!((overall - rc["overall"].as_f64().unwrap()).abs() < 1e-12);
    let prior: f64 = hs.iter().map(|h| h["prior"].as_f64().unwrap()).sum();
    assert!((prior - 1.0).abs() < 1e-12);
    for h in hs {
        let p = h["p_right"].as_f64().unwrap();
        assert!((0.0..=1.0).contains(&p));
        assert!(h["right_call"].is_string());
    }
    let info = &j["information"];
    assert_eq!(info["criterion"], "mutual_information");
    let bits = info["information_bits"].as_f64().unwrap();
    assert!(bits > 0.0 && bits <= info["prior_entropy_bits"].as_f64().unwrap() + 1e-9);
    // The same seed plans the same cells and the same probabilities.
    let again = dsa(&[
        "plan",
        "--preset",
        "deepseek-v4-flash-sglang",
        "--stack",
        "none",
        "--context-len",
        "16000",
        "--data",
        seed_table,
        "--budget",
        "600",
        "--seed",
        "5",
        "--json",
        "--threads",
        "1",
    ]);
    assert!(again.status.success(), "{}", String::from_utf8_lossy(&again.stderr));
    let k: serde_json::Value = serde_json::from_slice(&again.stdout).unwrap();
    assert_eq!(j["cells"], k["cells"]);
    assert_eq!(j["right_call"], k["right_call"]);
}
