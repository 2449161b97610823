//! Condition dependence (issue 20, item 4): a measured table's extra columns are conditions, and
//! recall that differs between a condition's values at identical cells is a defect signature.
//! The exact stratified test is checked against brute-force enumeration of every placement of
//! the hits among a cell's trials (and the per-cell law against statrs' hypergeometric); its
//! power and size on seeded tables drawn from a one-layer V4-Flash truth; the CLI's call on a
//! table with a build that loses needles.

use dsa_sim::calibrate::parse_csv;
use dsa_sim::diagnosis::conditions::{condition_tests, hypergeometric_pmf, stratified_test, Stratum, CONDITION_ALPHA};
use dsa_sim::engine::{EngineChoice, EngineModel, RecallModel};
use dsa_sim::Scenario;
use rand::{Rng, SeedableRng};
use rand_distr::{Binomial, Distribution};
use statrs::distribution::{Discrete, Hypergeometric};
use statrs::function::factorial::ln_binomial;
use std::fmt::Write;
use std::process::Command;

// ---------------------------------------------------------------------------------------------
// The exact test against brute force.

/// How many of the C(n, m) placements of m hits among a cell's n trials put exactly x of them
/// among side A's first `na` trials, for each x: by enumerating every subset of the trials.
fn placements(na: u32, nb: u32, m: u32) -> Vec<u128> {
    let n = na + nb;
    let mut count = vec![0u128; (na + 1) as usize];
    for mask in 0u32..(1 << n) {
        if mask.count_ones() == m {
            count[(mask & ((1 << na) - 1)).count_ones() as usize] += 1;
        }
    }
    count
}

/// The two-sided p-value by enumerating every joint outcome of the cells: the probability of the
/// totals no more likely than the observed one, as an exact ratio of placement counts.
fn brute_force_p(strata: &[Stratum]) -> f64 {
    // Distribution of the total as integer counts (the cells' placements multiplied).
    let mut dist: Vec<u128> = vec![1];
    let mut observed = 0usize;
    for s in strata {
        let c = placements(s.trials_a as u32, s.trials_b as u32, (s.hits_a + s.hits_b) as u32);
        let mut next = vec![0u128; dist.len() + c.len() - 1];
        for (i, &a) in dist.iter().enumerate() {
            for (j, &b) in c.iter().enumerate() {
                next[i + j] += a * b;
            }
        }
        dist = next;
        observed += s.hits_a as usize;
    }
    let total: u128 = dist.iter().sum();
    let at = dist[observed];
    // "No more likely" compared exactly in integers (the library's 1e-7 tolerance only merges
    // probabilities equal up to rounding, which integer counts do not have).
    let tail: u128 = dist.iter().filter(|&&c| c <= at).sum();
    tail as f64 / total as f64
}

#[test]
fn exact_test_equals_brute_force_enumeration() {
    let mut rng = rand_xoshiro::Xoshiro256PlusPlus::seed_from_u64(20);
    for case in 0..300 {
        let cells = rng.random_range(1..=3);
        let strata: Vec<Stratum> = (0..cells)
            .map(|_| {
                let (ta, tb) = (rng.random_range(1..=6u64), rng.random_range(1..=6u64));
                Stratum {
                    trials_a: ta,
                    hits_a: rng.random_range(0..=ta),
                    trials_b: tb,
                    hits_b: rng.random_range(0..=tb),
                }
            })
            .collect();
        let (p, exact, _) = stratified_test(&strata);
        let want = brute_force_p(&strata);
        assert!(exact);
        assert!(
            (p - want).abs() <= 1e-12 * want.max(1e-300) + 1e-15,
            "case {case} {strata:?}: {p} vs brute force {want}"
        );
    }
    // Fisher's classic tea-tasting table: 3/4 vs 1/4, two-sided p = 34/70.
    let (p, _, below) = stratified_test(&[Stratum { trials_a: 4, hits_a: 3, trials_b: 4, hits_b: 1 }]);
    assert!((p - 34.0 / 70.0).abs() < 1e-14 && !below, "{p}");
}

#[test]
fn per_cell_law_is_the_hypergeometric() {
    for &(n, k, d) in &[(10u64, 4u64, 3u64), (50, 25, 20), (500, 400, 250), (2000, 37, 1500), (7, 7, 3), (9, 0, 4)] {
        let (lo, p) = hypergeometric_pmf(n, k, d);
        let h = Hypergeometric::new(n, k, d).unwrap();
        for (i, &q) in p.iter().enumerate() {
            let x = lo + i as u64;
            // statrs' pmf multiplies binomial coefficients (NaN once they overflow); its log
            // binomials give the same law at any size.
            let ln = ln_binomial(k, x) + ln_binomial(n - k, d - x) - ln_binomial(n, d);
            let want = if n <= 500 { h.pmf(x) } else { ln.exp() };
            assert!((q - want).abs() <= 1e-9 * want + 1e-300, "H({n},{k},{d}) at {x}: {q} vs {want}");
            assert!((q - ln.exp()).abs() <= 1e-9 * q + 1e-300, "H({n},{k},{d}) at {x}: {q} vs {}", ln.exp());
        }
        // The support ends where the law does.
        if n <= 500 {
            assert!(lo == 0 || h.pmf(lo - 1) == 0.0);
            assert_eq!(h.pmf(lo + p.len() as u64), 0.0);
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Seeded tables from a one-layer V4-Flash truth.

fn truth_recall(context_len: u64, depth: f64, dprime: f64) -> f64 {
    let s = Scenario {
        context_len,
        depth,
        index_topk: 512,
        dprime,
        ..Scenario::preset("deepseek-v4-flash").unwrap().one_layer()
    };
    EngineModel::new(EngineChoice::Analytic, 1, 1).recall(&s).unwrap()
}

/// 8 cells (4 lengths × 2 depths, k 512): each cell's truth recall.
fn cells(dprime: f64) -> Vec<(u64, f64, f64)> {
    let mut c = Vec::new();
    for &l in &[4000u64, 8000, 16000, 32000] {
        for &d in &[0.1, 0.9] {
            c.push((l, d, truth_recall(l, d, dprime)));
        }
    }
    c
}

/// A table of `trials` per cell under each build; build `b`'s recall is `scale_b` times the truth.
fn table(cells: &[(u64, f64, f64)], builds: &[(&str, f64)], trials: u64, seed: u64) -> String {
    let mut rng = rand_xoshiro::Xoshiro256PlusPlus::seed_from_u64(seed);
    let mut t = String::from("context_len,index_topk,depth,build,trials,hits\n");
    for &(l, d, r) in cells {
        for &(b, scale) in builds {
            let hits = Binomial::new(trials, (r * scale).clamp(0.0, 1.0)).unwrap().sample(&mut rng);
            let _ = writeln!(t, "{l},512,{d},{b},{trials},{hits}");
        }
    }
    t
}

#[test]
fn a_build_losing_a_quarter_of_needles_is_found() {
    // dprime 3 at k 512: recall ≈ 1 at every cell, so build b finds about 60 of 80 where build
    // a finds about 80: z ≈ 20 / 3.9 ≈ 5 on average, power ≈ 1 at 0.01.
    let c = cells(3.0);
    let mut found = 0;
    for seed in 1..=10 {
        let d = parse_csv(&table(&c, &[("a", 1.0), ("b", 0.75)], 10, seed), "t.csv").unwrap();
        let t = condition_tests(&d);
        assert_eq!(t.len(), 1, "{t:?}");
        let t = &t[0];
        assert_eq!((t.column.as_str(), t.shared_cells, t.skipped_cells), ("build", 8, 0));
        assert_eq!((t.worse_trials, t.better_trials), (80, 80));
        if t.significant {
            assert_eq!(
                (t.worse.as_slice(), t.better.as_slice()),
                (&["b".to_string()][..], &["a".to_string()][..]),
                "{t:?}"
            );
            assert!(t.worse_hits < t.better_hits && t.exact);
            found += 1;
        }
    }
    assert!(found >= 9, "found in {found} of 10");
}

#[test]
fn builds_that_do_not_differ_are_rarely_flagged() {
    // dprime 1.2: recall from about 0.6 (32K) to 0.99 (4K) across the cells, so most per-cell
    // laws are not degenerate. The conditional test's size is at most 0.01 (discreteness makes it
    // conservative); P(≥ 3 of 20 false positives) ≤ C(20,3)·0.01³ ≈ 1.1e-3 (P(≥ 2) ≈ 1.7e-2 is
    // not a far tail, hence at most 2).
    let c = cells(1.2);
    assert!(c.iter().any(|x| x.2 < 0.7) && c.iter().all(|x| x.2 < 0.995), "{c:?}");
    let mut flagged = 0;
    for seed in 100..120 {
        let d = parse_csv(&table(&c, &[("a", 1.0), ("b", 1.0)], 10, seed), "t.csv").unwrap();
        let t = &condition_tests(&d)[0];
        assert!(t.p_value > 0.0 && t.p_value <= 1.0);
        flagged += t.significant as usize;
    }
    assert!(flagged <= 2, "{flagged} of 20 flagged");
}

#[test]
fn three_builds_each_against_the_rest_with_bonferroni() {
    let c = cells(3.0);
    let d = parse_csv(&table(&c, &[("a", 1.0), ("b", 1.0), ("c", 0.6)], 10, 7), "t.csv").unwrap();
    let t = &condition_tests(&d)[0];
    assert_eq!(t.values, ["a", "b", "c"]);
    assert_eq!(t.worse, ["c"]);
    assert_eq!(t.better, ["a", "b"]);
    assert!(t.significant, "{t:?}");
    assert_eq!((t.worse_trials, t.better_trials), (80, 160));
    // The p-value is 3 × that of c against a and b pooled per cell.
    let mut strata = Vec::new();
    for r in d.rows.chunks(3) {
        let (ab_t, ab_h) = (r[0].trials + r[1].trials, r[0].hits + r[1].hits);
        strata.push(Stratum { trials_a: r[2].trials, hits_a: r[2].hits, trials_b: ab_t, hits_b: ab_h });
    }
    let (p, _, below) = stratified_test(&strata);
    assert!(below);
    assert!((t.p_value - (3.0 * p).min(1.0)).abs() <= 1e-12 * t.p_value, "{} vs 3 × {p}", t.p_value);
}

#[test]
fn one_value_no_test_and_one_sided_cells_skipped() {
    // A constant column is a condition with nothing to compare.
    let t = "context_len,index_topk,trials,hits,gpu\n4000,512,10,9,h100\n8000,512,10,7,h100\n";
    let d = parse_csv(t, "t.csv").unwrap();
    assert_eq!(d.condition_columns, ["gpu"]);
    assert!(d.notes.iter().any(|n| n.contains("column `gpu` is a condition")), "{:?}", d.notes);
    assert!(condition_tests(&d).is_empty());
    // Two shared cells, two cells under build a only (3 rows), one row without a build.
    let t = "context_len,index_topk,trials,hits,build\n\
             4000,512,10,10,a\n4000,512,10,4,b\n8000,512,10,10,a\n8000,512,10,3,b\n\
             16000,512,10,2,a\n16000,512,10,9,a\n32000,512,10,1,a\n4000,512,10,0,\n";
    let d = parse_csv(t, "t.csv").unwrap();
    let t = &condition_tests(&d)[0];
    assert_eq!((t.shared_cells, t.skipped_cells, t.skipped_rows, t.missing_rows), (2, 2, 3, 1));
    assert_eq!((t.worse_hits, t.worse_trials, t.better_hits, t.better_trials), (7, 20, 20, 20));
    // Only the shared cells count: the test of those two cells alone.
    let (p, _, _) = stratified_test(&[
        Stratum { trials_a: 10, hits_a: 10, trials_b: 10, hits_b: 4 },
        Stratum { trials_a: 10, hits_a: 10, trials_b: 10, hits_b: 3 },
    ]);
    assert_eq!(t.p_value, p);
    assert!(t.significant && t.p_value < CONDITION_ALPHA);
    // A column with two values but no shared cell: reported, not tested.
    let d =
        parse_csv("context_len,index_topk,trials,hits,build\n4000,512,10,10,a\n8000,512,10,3,b\n", "t.csv").unwrap();
    let t = &condition_tests(&d)[0];
    assert_eq!((t.shared_cells, t.skipped_cells, t.p_value, t.significant), (0, 2, 1.0, false));
    assert!(t.text().contains("not tested"), "{}", t.text());
}

#[test]
fn needles_are_part_of_the_cell() {
    // Build b is measured on another needle at the same scenario cell: nothing is shared.
    let t = "context_len,index_topk,needle,trials,hits,build\n4000,512,n1,10,10,a\n4000,512,n2,10,2,b\n";
    let d = parse_csv(t, "t.csv").unwrap();
    assert_eq!(d.condition_columns, ["build"]);
    assert_eq!(condition_tests(&d)[0].shared_cells, 0);
}

// ---------------------------------------------------------------------------------------------
// The command line.

fn dsa(args: &[&str]) -> (i32, String, String) {
    let o = Command::new(env!("CARGO_BIN_EXE_dsa-sim")).args(args).output().unwrap();
    (
        o.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&o.stdout).into(),
        String::from_utf8_lossy(&o.stderr).into(),
    )
}

#[test]
fn verdict_calls_a_build_that_loses_needles_implementation_suspect() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("builds.csv");
    std::fs::write(&path, table(&cells(3.0), &[("a", 1.0), ("b", 0.75)], 10, 1)).unwrap();
    let p = path.to_str().unwrap();
    let base = ["verdict", "--preset", "deepseek-v4-flash", "--stack", "none", "--context-len", "16000", "--data", p];
    let (code, out, err) = dsa(&[&base[..], &["--json"]].concat());
    assert_eq!(code, 0, "{err}");
    let j: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(j["call"], "implementation-suspect", "{j}");
    let sig: Vec<&str> = j["signatures"].as_array().unwrap().iter().map(|s| s["name"].as_str().unwrap()).collect();
    assert!(sig.contains(&"condition_dependent"), "{sig:?}");
    let c = &j["conditions"][0];
    assert_eq!(
        (c["column"].as_str(), c["worse"][0].as_str(), c["better"][0].as_str()),
        (Some("build"), Some("b"), Some("a")),
        "{c}"
    );
    assert_eq!((c["significant"].as_bool(), c["shared_cells"].as_u64()), (Some(true), Some(8)));
    let (code, out, _) = dsa(&base);
    assert_eq!(code, 0);
    let line = out.lines().find(|l| l.starts_with("condition `build`")).unwrap_or_else(|| panic!("{out}"));
    assert!(
        line.contains("`b` found")
            && line.contains("vs `a`")
            && line.contains("8 identical cells")
            && line.contains("RECALL DIFFERS"),
        "{line}"
    );
}

#[test]
fn a_scenario_field_as_a_column_is_refused_with_one_line() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("d.csv");
    std::fs::write(&path, "context_len,index_topk,trials,hits,dprime\n4000,512,10,9,1\n4000,512,10,2,0\n").unwrap();
    let (code, out, err) =
        dsa(&["verdict", "--preset", "deepseek-v4-flash", "--stack", "none", "--data", path.to_str().unwrap()]);
    assert_eq!(code, 2, "{out}{err}");
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert!(err.contains("column `dprime` is a scenario field") && err.contains("--dprime"), "{err}");
}

#[test]
fn large_tables_use_the_normal_approximation_of_the_same_statistic() {
    // 60 cells of 20 000 trials a side: convolving exactly would take ~1e12 multiply-adds.
    // The approximation is the Mantel–Haenszel statistic, written out here from its textbook
    // form: sum over cells of (a − n_A m / N), variance n_A n_B m (N − m) / (N² (N − 1)).
    let mh = |strata: &[Stratum]| {
        let (mut dev, mut var) = (0.0, 0.0);
        for s in strata {
            let (na, nb) = (s.trials_a as f64, s.trials_b as f64);
            let (n, m) = (na + nb, (s.hits_a + s.hits_b) as f64);
            dev += s.hits_a as f64 - na * m / n;
            var += na * nb * m * (n - m) / (n * n * (n - 1.0));
        }
        let z = (dev.abs() - 0.5).max(0.0) / var.sqrt();
        2.0 * 0.5 * libm::erfc(z / std::f64::consts::SQRT_2)
    };
    for (loss, significant) in [(0u64, false), (200, true)] {
        let strata: Vec<Stratum> = (0..60)
            .map(|i| Stratum {
                trials_a: 20_000,
                hits_a: 10_000 + i,
                trials_b: 20_000,
                hits_b: 10_000 + i - loss.min(10_000),
            })
            .collect();
        let (p, exact, below) = stratified_test(&strata);
        assert!(!exact);
        let want = mh(&strata);
        assert!((p - want).abs() <= 1e-9 * want + 1e-300, "{p} vs {want}");
        assert_eq!(p < CONDITION_ALPHA, significant, "{p}");
        assert!(!below);
    }
}
