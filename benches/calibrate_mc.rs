//! Monte Carlo calibration (issue 11, item 6): a 2-parameter fit (dprime, needle_sd) with
//! profile intervals on the 10 rows of the seed table, V4-Flash geometry with mean pooling
//! (overlapping blocks: no closed form, so every evaluation is common-random-number Monte
//! Carlo on the materialising path), through the calibration memo. Each sample builds a fresh
//! model, so it pays for the replays (one materialising run per row) as well as the hundreds
//! of evaluations answered from them. Target: ≤ 20 s on 2 cores at the fit default of 4000
//! trials per evaluation.
//!
//! `cargo bench --bench calibrate_mc` (one sample is one whole fit, a few seconds).

use criterion::{criterion_group, criterion_main, Criterion};
use dsa_sim::calibrate::cache::CachedModel;
use dsa_sim::calibrate::{calibrate, load_csv, parse_fit_spec};
use dsa_sim::engine::{EngineChoice, EngineModel};
use dsa_sim::Scenario;
use std::time::Duration;

fn fit(c: &mut Criterion) {
    let data =
        load_csv(std::path::Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/experiments/dsv4_seed_observations.csv")))
            .unwrap();
    let base = Scenario {
        context_len: 16000,
        pooling: "mean".parse().unwrap(),
        ..Scenario::preset("deepseek-v4-flash").unwrap()
    };
    let mut g = c.benchmark_group("calibrate_montecarlo");
    g.sample_size(10);
    g.measurement_time(Duration::from_secs(30));
    for trials in [1000u64, 4000] {
        g.bench_function(format!("dprime,needle_sd; 10 rows; {trials} trials/evaluation; profile intervals"), |b| {
            b.iter(|| {
                let engine = EngineModel::new(EngineChoice::Auto, trials, 1);
                let model = CachedModel::new(&engine);
                let free = parse_fit_spec("dprime,needle_sd", Some(&data)).unwrap();
                calibrate(&data, &base, free, &model, true, false).unwrap()
            })
        });
    }
    g.finish();
}

criterion_group!(benches, fit);
criterion_main!(benches);
