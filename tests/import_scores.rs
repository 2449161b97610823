//! `dsa-sim import scores`: ranks, tails and predictions on captures whose truth is known,
//! written here as `.npz` archives (NPY format 1.0 members in a zip, as numpy.savez writes them).

mod common;

use dsa_sim::captured_scores::{self as cs, PredictOptions};
use dsa_sim::Scenario;
use rand::SeedableRng;
use rand_distr::{Distribution, Normal, StudentT};
use statrs::distribution::{Binomial, ContinuousCDF, DiscreteCDF};
use std::io::Write;
use std::path::Path;
use std::process::Command;

/// One array: its name, NPY descr, shape and little-endian data.
struct Arr {
    name: String,
    descr: &'static str,
    shape: Vec<usize>,
    data: Vec<u8>,
}

fn f64s(name: &str, shape: Vec<usize>, v: &[f64]) -> Arr {
    Arr { name: name.into(), descr: "<f8", shape, data: v.iter().flat_map(|x| x.to_le_bytes()).collect() }
}
fn f32s(name: &str, shape: Vec<usize>, v: &[f64]) -> Arr {
    Arr { name: name.into(), descr: "<f4", shape, data: v.iter().flat_map(|x| (*x as f32).to_le_bytes()).collect() }
}
fn i32s(name: &str, v: &[i64]) -> Arr {
    Arr { name: name.into(), descr: "<i4", shape: vec![v.len()], data: v.iter().flat_map(|x| (*x as i32).to_le_bytes()).collect() }
}

fn write_npz(path: &Path, arrays: &[Arr]) {
    let mut z = zip::ZipWriter::new(std::fs::File::create(path).unwrap());
    for a in arrays {
        z.start_file(format!("{}.npy", a.name), zip::write::SimpleFileOptions::default()).unwrap();
        z.write_all(&common::npy(a.descr, &a.shape, &a.data)).unwrap();
    }
    z.finish().unwrap();
}

/// A capture: `queries` rows of `cands` candidates, the needle at a position varying by row.
struct Truth {
    rows: Vec<Vec<f64>>,
    needle_index: Vec<i64>,
    needle_scores: Vec<f64>,
}

fn draw(queries: usize, cands: usize, seed: u64, distractor: &dyn Fn(&mut rand_xoshiro::Xoshiro256PlusPlus) -> f64, needle: &dyn Fn(&mut rand_xoshiro::Xoshiro256PlusPlus) -> f64) -> Truth {
    let mut rng = rand_xoshiro::Xoshiro256PlusPlus::seed_from_u64(seed);
    let mut t = Truth { rows: vec![], needle_index: vec![], needle_scores: vec![] };
    for q in 0..queries {
        let mut row: Vec<f64> = (0..cands).map(|_| distractor(&mut rng)).collect();
        let ni = (q * 7919) % cands;
        let x = needle(&mut rng);
        row[ni] = x;
        t.rows.push(row);
        t.needle_index.push(ni as i64);
        t.needle_scores.push(x);
    }
    t
}

fn one_layer(t: &Truth, path: &Path) {
    let flat: Vec<f64> = t.rows.iter().flatten().cloned().collect();
    write_npz(path, &[f64s("scores", vec![t.rows.len(), t.rows[0].len()], &flat), i32s("needle_index", &t.needle_index)]);
}

/// Token-level scenario cells with N = context_len candidates, no window.
fn cell(n: u64, k: u64) -> Scenario {
    Scenario { context_len: n, index_topk: k, max_topk: k.max(2048), compress_ratio: 1, overlap: false, window: 0, sink: 0, needle_tokens: 1, ..Scenario::default() }
}

/// The truth's recall at (N, k): each query's needle against N − 1 fresh draws of the true law.
fn true_recall(t: &Truth, n: u64, k: u64, sf: &dyn Fn(f64) -> f64) -> f64 {
    t.needle_scores.iter().map(|&x| Binomial::new(sf(x).clamp(0.0, 1.0), n - 1).unwrap().cdf(k - 1)).sum::<f64>() / t.needle_scores.len() as f64
}

/// The truth within 1.5 half-widths of the prediction's 95% band (≈ 2.9 sd), printed.
fn assert_truth_in_band(pr: &cs::Prediction, s: &Scenario, truth: f64) {
    let half = 0.5 * (pr.high - pr.low);
    eprintln!("N={} k={}: truth {truth:.4} predicted {:.4} [{:.4}, {:.4}] empirical {:.4}", s.context_len, s.index_topk, pr.recall, pr.low, pr.high, pr.recall_empirical);
    assert!((pr.recall - truth).abs() <= 1.5 * half + 1e-9, "N={} k={}: truth {truth} vs {pr:?}", s.context_len, s.index_topk);
}

#[test]
fn ranks_are_exact_counts() {
    let dir = tempfile::tempdir().unwrap();
    let n01 = Normal::new(0.0, 1.0).unwrap();
    let t = draw(50, 300, 11, &|r| n01.sample(r), &|r| 2.0 + n01.sample(r));
    let p = dir.path().join("c.npz");
    one_layer(&t, &p);
    let c = cs::read_file(&p).unwrap();
    assert_eq!(c.queries(), 50);
    for (q, row) in c.layers[0].queries.iter().zip(&t.rows) {
        let direct = 1 + row.iter().filter(|&&v| v > q.needle).count() as u64;
        assert_eq!(q.rank(), direct);
    }
    // float32 gives the same ranks as the float32-rounded float64 data.
    let rounded: Vec<f64> = t.rows.iter().flatten().map(|v| *v as f32 as f64).collect();
    let p32 = dir.path().join("c32.npz");
    write_npz(&p32, &[f32s("scores", vec![50, 300], &rounded), i32s("needle_index", &t.needle_index)]);
    let c32 = cs::read_file(&p32).unwrap();
    for (q, row) in c32.layers[0].queries.iter().zip(&t.rows) {
        let direct = 1 + row.iter().filter(|&&v| (v as f32 as f64) > q.needle).count() as u64;
        assert_eq!(q.rank(), direct);
    }
}

#[test]
fn the_empirical_region_is_an_exact_binomial() {
    // Needles well inside the sample (below the tail threshold): Q is the exceedance fraction
    // of the pooled standardised distractors, and the prediction that binomial, against statrs.
    let dir = tempfile::tempdir().unwrap();
    let n01 = Normal::new(0.0, 1.0).unwrap();
    let t = draw(40, 2000, 3, &|r| n01.sample(r), &|r| 0.5 * n01.sample(r));
    let p = dir.path().join("c.npz");
    one_layer(&t, &p);
    let c = cs::read_file(&p).unwrap();
    // Standardise independently of the library: sample mean, n − 1 sd.
    let stats: Vec<(f64, f64)> = c.layers[0]
        .queries
        .iter()
        .map(|q| {
            let n = q.distractors.len() as f64;
            let m = q.distractors.iter().sum::<f64>() / n;
            (m, (q.distractors.iter().map(|d| (d - m).powi(2)).sum::<f64>() / (n - 1.0)).sqrt())
        })
        .collect();
    let mut pooled: Vec<f64> = c.layers[0].queries.iter().zip(&stats).flat_map(|(q, (m, sd))| q.distractors.iter().map(move |d| (d - m) / sd)).collect();
    pooled.sort_by(|a, b| b.total_cmp(a));
    let u = pooled[(pooled.len() as f64 * cs::tail::TAIL_FRACTION) as usize];
    let cells = [cell(5000, 100), cell(20_000, 500)];
    let pred = cs::predict(&c, &cells, PredictOptions { resamples: 0, seed: 1, ..Default::default() }).unwrap();
    for (pr, s) in pred.iter().zip(&cells) {
        let direct: f64 = c.layers[0]
            .queries
            .iter()
            .zip(&stats)
            .map(|(q, (m, sd))| {
                let z = (q.needle - m) / sd;
                assert!(z < u, "the construction puts every needle below the threshold");
                let qx = pooled.iter().filter(|&&v| v > z).count() as f64 / pooled.len() as f64;
                Binomial::new(qx, s.context_len - 1).unwrap().cdf(s.index_topk - 1)
            })
            .sum::<f64>()
            / 40.0;
        assert!((pr.recall - direct).abs() < 1e-10, "{} vs {direct}", pr.recall);
        assert_eq!(pr.recall, pr.recall_empirical);
    }
}

#[test]
fn normal_truth_is_predicted_where_the_sample_runs_out() {
    let dir = tempfile::tempdir().unwrap();
    let n01 = Normal::new(0.0, 1.0).unwrap();
    let t = draw(400, 2000, 7, &|r| n01.sample(r), &|r| 3.5 + 0.5 * n01.sample(r));
    let p = dir.path().join("c.npz");
    one_layer(&t, &p);
    let c = cs::read_file(&p).unwrap();
    let tail = cs::tail::summarise(&c.layers[0], &cs::tail::standardised(&c.layers[0])).unwrap();
    // A normal tail: light. The GPD limit of the normal is ξ = 0, approached from below as
    // the threshold rises (the penultimate shape at a 95% threshold is about −0.1).
    assert!(tail.gpd.xi < 0.0 && tail.gpd.xi > -0.25, "{:?}", tail.gpd);
    for (z, o, n) in &tail.exceedance {
        assert!((o / n - 1.0).abs() < 0.25, "z = {z}: {o} vs {n}");
    }
    let cells = [cell(100_000, 1), cell(100_000, 64), cell(1_000_000, 64), cell(1_000_000, 512), cell(10_000_000, 2048)];
    let pred = cs::predict(&c, &cells, PredictOptions { resamples: 200, seed: 5, ..Default::default() }).unwrap();
    let sf = |x: f64| dsa_sim::stats::norm_sf(x);
    for (pr, s) in pred.iter().zip(&cells) {
        let truth = true_recall(&t, s.context_len, s.index_topk, &sf);
        assert_truth_in_band(pr, s, truth);
    }
}

#[test]
fn the_tail_fit_corrects_the_empirical_law_beyond_the_sample() {
    // Needles at 5 sd against 400,000 pooled distractors (maximum about 4.7 sd), predicted at
    // 10^7 candidates and k = 1: the empirical law alone finds every needle above the sample's
    // maximum; the truth and the tail fit do not.
    let dir = tempfile::tempdir().unwrap();
    let n01 = Normal::new(0.0, 1.0).unwrap();
    let t = draw(200, 2000, 17, &|r| n01.sample(r), &|r| 5.0 + 0.5 * n01.sample(r));
    let p = dir.path().join("c.npz");
    one_layer(&t, &p);
    let c = cs::read_file(&p).unwrap();
    let cells = [cell(10_000_000, 1), cell(10_000_000, 8)];
    let pred = cs::predict(&c, &cells, PredictOptions { resamples: 200, seed: 5, ..Default::default() }).unwrap();
    let sf = |x: f64| dsa_sim::stats::norm_sf(x);
    for (pr, s) in pred.iter().zip(&cells) {
        let truth = true_recall(&t, s.context_len, s.index_topk, &sf);
        assert_truth_in_band(pr, s, truth);
        if s.index_topk == 1 {
            // Empirical 0.45 against a truth of 0.27 here (seeded): the gap is the point.
            assert!(pr.recall_empirical - truth > 0.1, "empirical {} vs truth {truth}", pr.recall_empirical);
            // docs/capture.md quotes the pair: it must be this build's.
            let doc = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/capture.md")).unwrap().replace("\n  ", " ");
            let quoted = format!("the empirical law {:.2} against a truth of {:.2}", pr.recall_empirical, truth);
            assert!(doc.contains(&quoted), "docs/capture.md should quote: {quoted}");
        }
    }
}

#[test]
fn a_heavy_tail_is_fitted_and_predicted() {
    let dir = tempfile::tempdir().unwrap();
    let t4 = StudentT::new(4.0).unwrap();
    let n01 = Normal::new(0.0, 1.0).unwrap();
    // Student-t(4) distractors (variance 2), needles far out in their tail.
    let t = draw(400, 2000, 13, &|r| t4.sample(r), &|r| 6.0 + 0.5 * n01.sample(r));
    let p = dir.path().join("c.npz");
    one_layer(&t, &p);
    let c = cs::read_file(&p).unwrap();
    let tail = cs::tail::summarise(&c.layers[0], &cs::tail::standardised(&c.layers[0])).unwrap();
    // The t(ν) tail has ξ = 1/ν = 0.25; a 95% threshold is not yet the limit: ±0.1.
    assert!((tail.gpd.xi - 0.25).abs() < 0.1, "{:?}", tail.gpd);
    // Far more mass beyond 4 sd than a normal.
    let (_, o, n) = tail.exceedance.iter().find(|e| e.0 == 4.0).copied().unwrap();
    assert!(o / n > 5.0, "{o} vs {n}");
    let st = statrs::distribution::StudentsT::new(0.0, 1.0, 4.0).unwrap();
    let sf = |x: f64| st.sf(x);
    let cells = [cell(10_000, 1), cell(10_000, 16), cell(100_000, 256), cell(1_000_000, 2048)];
    let pred = cs::predict(&c, &cells, PredictOptions { resamples: 200, seed: 5, ..Default::default() }).unwrap();
    for (pr, s) in pred.iter().zip(&cells) {
        let truth = true_recall(&t, s.context_len, s.index_topk, &sf);
        assert_truth_in_band(pr, s, truth);
    }
}

#[test]
fn layers_combine_as_independent_resamples() {
    // Per-layer layout with two identical layers, every query identical: P(any) = 1 − (1 − p)².
    let dir = tempfile::tempdir().unwrap();
    let row: Vec<f64> = (0..1000).map(|j| -(j as f64) / 300.0).collect();
    let mut rows = Vec::new();
    for _ in 0..30 {
        let mut r = row.clone();
        r[999] = -0.2; // the needle: 61 distractors above it (scores 0 .. −0.2 exclusive of the tie)
        rows.extend(r);
    }
    let ni = vec![999i64; 30];
    let one = dir.path().join("one.npz");
    write_npz(&one, &[f64s("scores", vec![30, 1000], &rows), i32s("needle_index", &ni)]);
    let two = dir.path().join("two.npz");
    write_npz(&two, &[f64s("indexer_scores_0", vec![1, 30, 1000], &rows), f64s("indexer_scores_1", vec![30, 1000], &rows), i32s("needle_index", &ni)]);
    let (c1, c2) = (cs::read_file(&one).unwrap(), cs::read_file(&two).unwrap());
    assert_eq!(c2.layers.len(), 2);
    assert_eq!(c1.layers[0].queries[0].rank(), 61);
    let cells = [cell(4000, 200)];
    let o = PredictOptions { resamples: 0, seed: 1, ..Default::default() };
    let (p1, p2) = (cs::predict(&c1, &cells, o).unwrap()[0].recall, cs::predict(&c2, &cells, o).unwrap()[0].recall);
    assert!((p2 - (1.0 - (1.0 - p1) * (1.0 - p1))).abs() < 1e-12, "{p1} {p2}");
}

fn dsa_sim(args: &[&str]) -> (i32, String, String) {
    let o = Command::new(env!("CARGO_BIN_EXE_dsa-sim")).args(args).output().unwrap();
    (o.status.code().unwrap_or(-1), String::from_utf8_lossy(&o.stdout).into(), String::from_utf8_lossy(&o.stderr).into())
}

#[test]
fn cli_json_and_bad_input() {
    let dir = tempfile::tempdir().unwrap();
    let n01 = Normal::new(0.0, 1.0).unwrap();
    let t = draw(100, 2000, 21, &|r| n01.sample(r), &|r| 3.0 + 0.5 * n01.sample(r));
    let p = dir.path().join("c.npz");
    one_layer(&t, &p);
    let ps = p.to_str().unwrap();
    let (code, out, err) = dsa_sim(&["import", "scores", ps, "--compress-ratio", "1", "--overlap", "false", "--window", "0", "--predict", "context_len=10K,1M", "--predict", "index_topk=1,64", "--resamples", "50", "--json"]);
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["queries"], 100);
    assert_eq!(v["seed"], dsa_sim::engine::DEFAULT_SEED);
    let preds = v["predictions"].as_array().unwrap();
    assert_eq!(preds.len(), 4);
    assert_eq!(preds[3]["context_len"], 1_000_000);
    assert_eq!(preds[3]["index_topk"], 64);
    // The same through the library, to the last digit.
    let c = cs::read_file(&p).unwrap();
    let lib = cs::predict(&c, &[cell(1_000_000, 64)], PredictOptions { resamples: 50, seed: dsa_sim::engine::DEFAULT_SEED, ..Default::default() }).unwrap();
    assert_eq!(preds[3]["recall"].as_f64().unwrap(), lib[0].recall);
    // Text output runs too, and repeats exactly.
    let (code, a, _) = dsa_sim(&["import", "scores", ps, "--predict", "context_len=1M", "--resamples", "20"]);
    let (_, b, _) = dsa_sim(&["import", "scores", ps, "--predict", "context_len=1M", "--resamples", "20"]);
    assert_eq!(code, 0);
    assert_eq!(a, b);
    assert!(a.contains("needle rank quantiles") && a.contains("generalised Pareto"), "{a}");

    // Bad input: one line naming the file and the problem, exit 2.
    let mut rows: Vec<f64> = t.rows.iter().flatten().cloned().collect();
    rows[3 * 2000 + 17] = f64::NAN;
    let nan = dir.path().join("nan.npz");
    write_npz(&nan, &[f64s("scores", vec![100, 2000], &rows), i32s("needle_index", &t.needle_index)]);
    let (code, _, err) = dsa_sim(&["import", "scores", nan.to_str().unwrap()]);
    assert_eq!(code, 2);
    assert!(err.contains("nan.npz") && err.contains("query 3") && err.contains("candidate 17") && err.trim().lines().count() == 1, "{err}");

    let bytes = std::fs::read(&p).unwrap();
    let cut = dir.path().join("cut.npz");
    std::fs::write(&cut, &bytes[..bytes.len() / 2]).unwrap();
    let (code, _, err) = dsa_sim(&["import", "scores", cut.to_str().unwrap()]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("cut.npz") && err.trim().lines().count() == 1, "{err}");

    let no_needle = dir.path().join("nn.npz");
    write_npz(&no_needle, &[f64s("scores", vec![2, 3], &[0.0; 6])]);
    let (code, _, err) = dsa_sim(&["import", "scores", no_needle.to_str().unwrap()]);
    assert_eq!(code, 2);
    assert!(err.contains("needle_index"), "{err}");

    let mismatch = dir.path().join("mm.npz");
    write_npz(&mismatch, &[f64s("scores", vec![2, 3], &[0.0; 6]), i32s("needle_index", &[0, 1, 2])]);
    let (code, _, err) = dsa_sim(&["import", "scores", mismatch.to_str().unwrap()]);
    assert_eq!(code, 2);
    assert!(err.contains("2 queries but needle_index has 3"), "{err}");

    let out_of_row = dir.path().join("oor.npz");
    write_npz(&out_of_row, &[f64s("scores", vec![2, 3], &[0.0, 1.0, 2.0, 0.0, 1.0, 2.0]), i32s("needle_index", &[0, 5])]);
    let (code, _, err) = dsa_sim(&["import", "scores", out_of_row.to_str().unwrap()]);
    assert_eq!(code, 2);
    assert!(err.contains("query 1") && err.contains("needle_index 5"), "{err}");

    let missing = dir.path().join("absent.npz");
    let (code, _, err) = dsa_sim(&["import", "scores", missing.to_str().unwrap()]);
    assert_eq!(code, 2, "{err}");
}

#[test]
fn the_committed_fixtures_read_in_both_layouts() {
    // tests/fixtures/make_scores.py: per-layer.npz's layer 0 is demo.npz's scores (float32),
    // with a batch axis and an int64 needle index; layer 1 has Student-t(4) distractors.
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/scores");
    let demo = cs::read_file(&root.join("demo.npz")).unwrap();
    let per = cs::read_file(&root.join("per-layer.npz")).unwrap();
    assert_eq!((demo.layers.len(), demo.queries()), (1, 60));
    assert_eq!((per.layers.len(), per.queries()), (2, 60));
    assert_eq!(per.layers[0].queries, demo.layers[0].queries);
    assert!(demo.layers[0].queries.iter().all(|q| q.distractors.len() == 999));
    let heavy = cs::tail::summarise(&per.layers[1], &cs::tail::standardised(&per.layers[1])).unwrap();
    let light = cs::tail::summarise(&demo.layers[0], &cs::tail::standardised(&demo.layers[0])).unwrap();
    assert!(heavy.gpd.xi > 0.1 && light.gpd.xi < 0.05, "{:?} {:?}", heavy.gpd, light.gpd);
}

/// A capture whose queries come from three tail classes (normal, Student-t(6), Student-t(3)
/// distractors, each query at its own location and scale), the needle of a query drawn in its
/// own law's sd units from its class's needle law. Returns the capture's truth and, per query,
/// (class, location, scale).
fn mixture_capture(queries: usize, cands: usize, seed: u64, weights: [f64; 3], needle: [f64; 3]) -> (Truth, Vec<(usize, f64, f64)>) {
    let mut rng = rand_xoshiro::Xoshiro256PlusPlus::seed_from_u64(seed);
    let n01 = Normal::new(0.0, 1.0).unwrap();
    let unif = rand_distr::Uniform::new(0.0f64, 1.0).unwrap();
    let t6 = StudentT::new(6.0).unwrap();
    let t3 = StudentT::new(3.0).unwrap();
    let mut t = Truth { rows: vec![], needle_index: vec![], needle_scores: vec![] };
    let mut who = Vec::new();
    for q in 0..queries {
        let v = unif.sample(&mut rng);
        let class = if v < weights[0] { 0 } else if v < weights[0] + weights[1] { 1 } else { 2 };
        let loc = -1.0 + 2.0 * unif.sample(&mut rng);
        let scale = 0.5 + 1.5 * unif.sample(&mut rng);
        let mut row: Vec<f64> = (0..cands)
            .map(|_| {
                let e = match class {
                    0 => n01.sample(&mut rng),
                    1 => t6.sample(&mut rng),
                    _ => t3.sample(&mut rng),
                };
                loc + scale * e
            })
            .collect();
        let ni = (q * 7919) % cands;
        let x = loc + scale * MIX_SD[class] * (needle[class] + MIX_NEEDLE_SD * n01.sample(&mut rng));
        row[ni] = x;
        t.rows.push(row);
        t.needle_index.push(ni as i64);
        t.needle_scores.push(x);
        who.push((class, loc, scale));
    }
    (t, who)
}

const MIX_WEIGHTS: [f64; 3] = [0.5, 0.3, 0.2];
/// The classes' distractor sds (normal, t(6), t(3)) and needle means in those units.
const MIX_SD: [f64; 3] = [1.0, 1.224_744_871_391_589, 1.732_050_807_568_877_2];
const MIX_NEEDLE: [f64; 3] = [3.8, 4.6, 6.0];
const MIX_NEEDLE_SD: f64 = 0.5;

/// P(a class's unit distractor exceeds e).
fn mix_sf(class: usize, e: f64) -> f64 {
    match class {
        0 => dsa_sim::stats::norm_sf(e),
        1 => statrs::distribution::StudentsT::new(0.0, 1.0, 6.0).unwrap().sf(e),
        _ => statrs::distribution::StudentsT::new(0.0, 1.0, 3.0).unwrap().sf(e),
    }
}

/// The captured queries' own recall at (N, k): each needle against N − 1 fresh draws of its
/// query's true law.
fn mix_recall_of_captured(t: &Truth, who: &[(usize, f64, f64)], n: u64, k: u64) -> f64 {
    t.needle_scores.iter().zip(who).map(|(&x, &(c, loc, scale))| dsa_sim::stats::binom_cdf(n - 1, k - 1, mix_sf(c, (x - loc) / scale))).sum::<f64>() / who.len() as f64
}

/// The population's recall at (N, k): a new query's class, needle and N − 1 distractors drawn
/// from the truth, integrated exactly over the needle's normal law.
fn mix_recall_of_population(n: u64, k: u64, weights: [f64; 3], needle: [f64; 3]) -> f64 {
    (0..3)
        .map(|c| {
            let f = |e: f64| {
                let z = MIX_SD[c] * (needle[c] + MIX_NEEDLE_SD * e);
                (-0.5 * e * e).exp() / (2.0 * std::f64::consts::PI).sqrt() * dsa_sim::stats::binom_cdf(n - 1, k - 1, mix_sf(c, z))
            };
            weights[c] * dsa_sim::quadrature::integrate(f, -9.0, 9.0, &[], 1e-10)
        })
        .sum()
}

#[test]
fn a_mixture_of_query_tails_is_predicted_at_k_1() {
    // 400 queries × 2,000 candidates (seeded), predicted at the captured 2,000 and at 8,000 and
    // 13,500 candidates, k = 1 … 64. First: half normal, 30% Student-t(6), 20% Student-t(3)
    // tails, the needles further out (in their own sd) the heavier the tail. Second: 60% normal,
    // 40% Student-t(6), every needle drawn alike (3.8 ± 0.5 own sd), so only the distractors
    // tell the classes apart. Two truths: the captured queries' own needles against N − 1
    // fresh draws of each query's true law (exact binomial: what the distractor model
    // controls), and a new population of queries (class, needle and distractors all fresh;
    // exact over the needle's law: what the band must also cover, since it resamples queries).
    let dir = tempfile::tempdir().unwrap();
    for (weights, needle, seed, expect_classes, pooled_gap) in [(MIX_WEIGHTS, MIX_NEEDLE, 31u64, 3usize, 0.15), ([0.6, 0.4, 0.0], [3.8, 3.8, 0.0], 47, 2, 0.15)] {
        let (t, who) = mixture_capture(400, 2000, seed, weights, needle);
        let p = dir.path().join("mix.npz");
        one_layer(&t, &p);
        let c = cs::read_file(&p).unwrap();
        let classes = cs::tail_classes(&c, cs::classes::MAX_CLASSES).unwrap();
        eprintln!("{weights:?}: held-out log-likelihood by class count: {:?}", classes[0].choice.heldout);
        for cl in classes[0].classes() {
            eprintln!("  {cl:?}");
        }
        // As many classes chosen as the truth has tails (one more does not raise the held-out
        // likelihood by two standard errors, or does not fit in every fold).
        assert_eq!(classes[0].classes().len(), expect_classes);
        let cells: Vec<Scenario> = [2000u64, 8000, 13_500].iter().flat_map(|&n| [1u64, 4, 16, 64].map(move |k| cell(n, k))).collect();
        let pred = cs::predict(&c, &cells, PredictOptions { resamples: 200, seed: 5, ..Default::default() }).unwrap();
        let pooled = cs::predict(&c, &cells, PredictOptions { resamples: 0, seed: 5, max_classes: 1 }).unwrap();
        for ((pr, s), po) in pred.iter().zip(&cells).zip(&pooled) {
            let own = mix_recall_of_captured(&t, &who, s.context_len, s.index_topk);
            let pop = mix_recall_of_population(s.context_len, s.index_topk, weights, needle);
            eprintln!("N={} k={}: captured truth {own:.4} population {pop:.4} predicted {:.4} [{:.4}, {:.4}] one pooled class {:.4}", s.context_len, s.index_topk, pr.recall, pr.low, pr.high, po.recall);
            assert!((pr.recall - own).abs() <= 0.02, "N={} k={}: predicted {} vs truth {own}", s.context_len, s.index_topk, pr.recall);
            // (1e-9: rounding where recall is 1 to 13 digits.)
            assert!(pr.low - 1e-9 <= own && own <= pr.high + 1e-9, "N={} k={}: truth {own} outside {pr:?}", s.context_len, s.index_topk);
            // The population differs from the captured queries by their needles' sampling (1.6
            // points at N = 2,000, k = 4 in the first, seeded): the file's band rule (1.5
            // half-widths, ≈ 2.9 sd), and where every resample predicts 1 (a band of no width)
            // one query's share, 1/400: a capture of 400 needles cannot see a rarer miss.
            let half = 0.5 * (pr.high - pr.low);
            assert!((pr.recall - pop).abs() <= (1.5 * half).max(1.0 / 400.0), "N={} k={}: population {pop} vs {pr:?}", s.context_len, s.index_topk);
            if s.index_topk == 1 {
                // What the classes correct: one pooled law under-predicts k = 1 by 20 points
                // and more here (0.27 against 0.48 at the captured 2,000 candidates in the
                // first, 0.28 against 0.48 in the second).
                assert!(own - po.recall > pooled_gap, "N={}: pooled {} vs truth {own}", s.context_len, po.recall);
                if expect_classes == 2 && s.context_len == 8000 {
                    // README.md quotes this cell: it must be this build's.
                    let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md")).unwrap().replace('\n', " ");
                    let quoted = format!("at {:.3} against a truth of {:.3}, where one pooled law says {:.3}", pr.recall, own, po.recall);
                    assert!(readme.contains(&quoted), "README.md should quote: {quoted}");
                }
            }
        }
    }
}

#[test]
fn a_homogeneous_capture_keeps_one_class() {
    // Every query normal (location and scale vary; tails do not): one class, and the prediction
    // is the pooled law's to the last bit, band included.
    let dir = tempfile::tempdir().unwrap();
    let (t, who) = mixture_capture(400, 2000, 7, [1.0, 0.0, 0.0], MIX_NEEDLE);
    let p = dir.path().join("normal.npz");
    one_layer(&t, &p);
    let c = cs::read_file(&p).unwrap();
    let classes = cs::tail_classes(&c, cs::classes::MAX_CLASSES).unwrap();
    assert_eq!(classes[0].classes().len(), 1, "{:?}", classes[0].choice.heldout);
    let cells: Vec<Scenario> = [2000u64, 13_500].iter().flat_map(|&n| [1u64, 4, 16].map(move |k| cell(n, k))).collect();
    let o = PredictOptions { resamples: 50, seed: 5, ..Default::default() };
    let pred = cs::predict(&c, &cells, o).unwrap();
    assert_eq!(pred, cs::predict(&c, &cells, PredictOptions { max_classes: 1, ..o }).unwrap());
    for (pr, s) in pred.iter().zip(&cells) {
        let own = mix_recall_of_captured(&t, &who, s.context_len, s.index_topk);
        eprintln!("N={} k={}: truth {own:.4} predicted {:.4} [{:.4}, {:.4}]", s.context_len, s.index_topk, pr.recall, pr.low, pr.high);
        assert!(pr.low <= own && own <= pr.high, "N={} k={}: truth {own} outside {pr:?}", s.context_len, s.index_topk);
    }
    // Needles of two kinds (found far out, lost in the bulk) over one normal tail: the class
    // count is chosen on the distractors' tail alone, so the needles buy no class.
    let unif = rand_distr::Uniform::new(0.0f64, 1.0).unwrap();
    let n01 = Normal::new(0.0, 1.0).unwrap();
    let t2 = draw(400, 2000, 9, &|r| n01.sample(r), &|r| if unif.sample(r) < 0.5 { 2.0 } else { 4.5 } + 0.3 * n01.sample(r));
    let p2 = dir.path().join("bimodal.npz");
    one_layer(&t2, &p2);
    let c2 = cs::read_file(&p2).unwrap();
    let l2 = cs::tail_classes(&c2, cs::classes::MAX_CLASSES).unwrap();
    assert_eq!(l2[0].classes().len(), 1, "{:?}", l2[0].choice.heldout);
    // The committed demo capture and both layers of the per-layer one keep one class too.
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/scores");
    for f in ["demo.npz", "per-layer.npz"] {
        let c = cs::read_file(&root.join(f)).unwrap();
        for l in cs::tail_classes(&c, cs::classes::MAX_CLASSES).unwrap() {
            assert_eq!(l.classes().len(), 1, "{f} layer {}: {:?}", l.layer, l.choice.heldout);
        }
    }
}

