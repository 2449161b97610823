//! Calibration performance (issue 5): two parameters (dprime, needle_sd) on a 20-row table of a
//! DeepSeek-V4-Flash geometry with the analytic engine, profile-likelihood intervals included.
//! Target: ≤ 2 s on 2 cores.

use criterion::{criterion_group, criterion_main, Criterion};
use dsa_sim::calibrate::{calibrate, parse_fit_spec, Dataset, Observation};
use dsa_sim::engine::{EngineChoice, EngineModel, RecallModel};
use dsa_sim::Scenario;
use rand::SeedableRng;
use rand_distr::{Binomial, Distribution};
use std::time::Duration;

fn table(model: &EngineModel) -> (Dataset, Scenario) {
    let base = Scenario::preset("deepseek-v4-flash").unwrap();
    let truth = Scenario { dprime: 2.5, needle_sd: 1.5, ..base.clone() };
    let mut rng = rand_xoshiro::Xoshiro256PlusPlus::seed_from_u64(5);
    let mut rows = Vec::new();
    for l in [4096u64, 8192, 16384, 32768, 65536] {
        for k in [256u64, 512, 1024, 2048] {
            let s = Scenario { context_len: l, index_topk: k, ..truth.clone() };
            let p = model.recall(&s).unwrap();
            let hits = Binomial::new(100, p).unwrap().sample(&mut rng);
            rows.push(Observation {
                context_len: l,
                index_topk: k,
                trials: 100,
                hits,
                depth: None,
                repeat: None,
                compress_ratio: None,
                window: None,
                label: None,
                needle: None,
                needle_tokens: None,
                overlap: None,
                layer_counts: None,
                conditions: vec![],
                line: 0,
            });
        }
    }
    (
        Dataset {
            source: "bench".into(),
            rows,
            notes: vec![],
            provenance: None,
            transcribed: false,
            condition_columns: vec![],
        },
        base,
    )
}

fn bench(c: &mut Criterion) {
    let model = EngineModel::new(EngineChoice::Analytic, 1, 1);
    let (data, base) = table(&model);
    let free = parse_fit_spec("dprime,needle_sd", Some(&data)).unwrap();
    let pool = rayon::ThreadPoolBuilder::new().num_threads(2).build().unwrap();
    let mut g = c.benchmark_group("calibrate");
    g.sample_size(10).measurement_time(Duration::from_secs(20));
    g.bench_function("fit_2_params_20_rows_profile_intervals", |b| {
        b.iter(|| pool.install(|| calibrate(&data, &base, free.clone(), &model, true, false).unwrap()))
    });
    g.bench_function("fit_2_params_20_rows_profile_and_region", |b| {
        b.iter(|| pool.install(|| calibrate(&data, &base, free.clone(), &model, true, true).unwrap()))
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
