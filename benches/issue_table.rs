//! The analytic rows of issue 23's table, each the library call its command makes
//! (`commands::verdict::verdict`, `commands::calibrate::calibrate`, `experiment::run_file`), on the tables
//! the issue names or constructed ones of the same shape:
//!
//! - the seed verdict on `deepseek-v4-flash-sglang` (experiments/dsv4_seed_observations.csv);
//! - 30-row verdicts on the constructed public-report tables (tests/data/reports/) on
//!   `deepseek-v4-flash-vllm-fp8` (the issue's slow preset) and `deepseek-v4-pro`;
//! - a 30-row verdict with no two rows at one length (benches/data/gen_lengths.py): every row its
//!   own evaluation, where the report tables' three depths per length cost one;
//! - the 9-cell selection fit (60 requests × 21 layers, `--fit dprime,layer_corr`) and a verdict
//!   on an 80-row selection table (40 requests × 2 layers), both drawn from the model by
//!   benches/data/gen_selections.py;
//! - `run experiments/calibrate-dsv4-observations.toml` into a temporary folder.
//!
//! The Monte Carlo rows (Quest, mean pooling, scalar MC against NumPy) are in their own bench.
//! T_j's tables are kept for the process (`engine::analytic`'s memo), so after criterion's
//! warm-up an iteration reuses the tables an earlier one made, where the command line starts
//! without them: these figures are the warm cost, docs/benchmarks.md gives the command's.

use criterion::{criterion_group, criterion_main, Criterion};
use dsa_sim::commands::calibrate::{calibrate, CalibrateRequest};
use dsa_sim::commands::verdict::verdict;
use dsa_sim::commands::{FitEngineSpec, ScenarioSpec};
use std::hint::black_box;
use std::path::{Path, PathBuf};
use std::time::Duration;

fn repo(p: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(p)
}

fn preset(name: &str) -> ScenarioSpec {
    ScenarioSpec { preset: Some(name.to_string()), file: None, fields: Vec::new() }
}

fn no_progress(_: u64) {}

fn issue_table(c: &mut Criterion) {
    let engine = FitEngineSpec::default();
    let mut g = c.benchmark_group("issue_23");
    g.sample_size(10).measurement_time(Duration::from_secs(20)).warm_up_time(Duration::from_secs(1));
    let verdicts = [
        (
            "seed verdict, deepseek-v4-flash-sglang",
            "deepseek-v4-flash-sglang",
            "experiments/dsv4_seed_observations.csv",
        ),
        (
            "30-row verdict (cliff), deepseek-v4-flash-vllm-fp8",
            "deepseek-v4-flash-vllm-fp8",
            "tests/data/reports/v4_flash_cliff.csv",
        ),
        (
            "30-row verdict (two builds), deepseek-v4-flash-vllm-fp8",
            "deepseek-v4-flash-vllm-fp8",
            "tests/data/reports/v4_flash_two_builds.csv",
        ),
        ("30-row verdict (cliff), deepseek-v4-pro", "deepseek-v4-pro", "tests/data/reports/v4_pro_cliff.csv"),
        (
            "30-row verdict (30 distinct lengths), deepseek-v4-flash-vllm-fp8",
            "deepseek-v4-flash-vllm-fp8",
            "benches/data/lengths30_v4_flash_vllm_fp8.csv",
        ),
        (
            "verdict on an 80-row selection table (2 layers), deepseek-v4-flash",
            "deepseek-v4-flash",
            "benches/data/selections_v4_flash_40x2.csv",
        ),
    ];
    for (name, p, table) in verdicts {
        let (spec, data) = (preset(p), repo(table));
        g.bench_function(name, |b| {
            b.iter(|| verdict(black_box(&spec), &engine, 0.9, Some(&data), None, &no_progress).unwrap())
        });
    }
    let sel = repo("benches/data/selections_v4_flash_60x21.csv");
    let spec = preset("deepseek-v4-flash");
    let req = CalibrateRequest {
        data: Some(&sel),
        fit: Some("dprime,layer_corr"),
        compare: false,
        predict: &[],
        scores: None,
    };
    g.bench_function("9-cell selection fit (60 requests x 21 layers), dprime,layer_corr", |b| {
        b.iter(|| calibrate(black_box(&spec), &engine, &req, &no_progress).unwrap())
    });
    let experiment = repo("experiments/calibrate-dsv4-observations.toml");
    let dir = tempfile::tempdir().unwrap();
    let settings = dsa_sim::experiment::RunSettings {
        threads: None,
        resume: false,
        seed: None,
        shard: None,
        merge: Vec::new(),
        device: None,
    };
    let mut i = 0u64;
    g.bench_function("run experiments/calibrate-dsv4-observations.toml", |b| {
        b.iter(|| {
            i += 1;
            let out = dir.path().join(format!("run{i}"));
            dsa_sim::experiment::run_file(&experiment, Some(&out), &settings, &dsa_sim::progress::Silent).unwrap()
        })
    });
    g.finish();
}

criterion_group!(benches, issue_table);
criterion_main!(benches);
