//! Monte Carlo on stacked presets (issue 23): the score-noise search of the Quest verdict
//! (`verdict --preset quest-16 --data experiments/quest_passkey_10k.csv`): one
//! `verdict::verdict` of a quest-16 row at 10K tokens on the Monte Carlo engine (its noise
//! levels answered by one noise replay), against the same search by one materialising run per
//! level (`with_replay_budget(0)`, what it cost before the replay). 1000 trials instead of the
//! fit default's 4000 to keep `cargo bench --bench stacked_mc` within minutes; the
//! whole-command figures are timed with the binary (docs/benchmarks.md).
//!
//! The verdict runs that search twice, at the row's k and at the kernel maximum: one noise
//! replay kept at both k answers both (`quest_noise_search/both searches, …`). The mean-pooling
//! verdict with a fit (`verdict --preset deepseek-v4-flash --context-len 16000 --pooling mean
//! --data experiments/dsv4_seed_observations.csv --fit dprime`) is the whole command's library
//! call, `commands::verdict::verdict` (its replays built once per row, siblings in k at their first
//! request, never twice for one key).
//!
//! `replay_several_k`: the seed table measures k = 512 and 1024 at 8000 tokens and the verdict
//! asks for the kernel maximum 2048 at its length; one replay of a V4-Flash stack (mean pooling)
//! kept for all three k against one replay per k (1000 trials).
//!
//! `rank_records_together`: the verdict with a fit asks for the k-curves at the estimate and at
//! the two ends of its likelihood region, three needles of one V4-Flash stack at 16000 tokens
//! (mean pooling); their rank records from one run against one run each (300 trials).

use criterion::{criterion_group, criterion_main, Criterion};
use dsa_sim::commands::verdict::verdict;
use dsa_sim::commands::{FitEngineSpec, ScenarioSpec};
use dsa_sim::engine::montecarlo::{NoiseReplay, RankRecord, Replay};
use dsa_sim::engine::{with_noise, EngineChoice, EngineModel, RecallModel};
use dsa_sim::scenario::{Field, Scenario};
use std::hint::black_box;
use std::path::Path;

fn quest_row() -> Scenario {
    let s = Scenario { context_len: 10_000, index_topk: 4, dprime: 2.0, ..Scenario::preset("quest-16").unwrap() };
    s.validate().unwrap();
    s
}

fn noise_search(c: &mut Criterion) {
    let mut g = c.benchmark_group("quest_noise_search");
    g.sample_size(10);
    let s = quest_row();
    let levels = [100.0, 50.0, 25.0, 12.5, 6.25, 3.125, 1.5625, 0.78125];
    g.bench_function("8 noise levels, one noise replay", |b| {
        b.iter(|| {
            let model = EngineModel::new(EngineChoice::Auto, 1000, 7);
            let curve = model.recall_in_noise(black_box(&s)).unwrap();
            levels.iter().map(|&v| curve(v).unwrap()).sum::<f64>()
        })
    });
    g.bench_function("8 noise levels, one run each", |b| {
        b.iter(|| {
            let model = EngineModel::new(EngineChoice::Auto, 1000, 7).with_replay_budget(0);
            levels.iter().map(|&v| model.recall(&with_noise(black_box(&s), v).unwrap()).unwrap()).sum::<f64>()
        })
    });
    let smax = Scenario { index_topk: s.max_topk, ..s.clone() };
    g.bench_function("both searches (k and max k), 8 levels each, one shared noise replay", |b| {
        b.iter(|| {
            let model = EngineModel::new(EngineChoice::Auto, 1000, 7);
            [&s, &smax]
                .iter()
                .map(|at| {
                    let curve = model.recall_in_noise(black_box(at)).unwrap();
                    levels.iter().map(|&v| curve(v).unwrap()).sum::<f64>()
                })
                .sum::<f64>()
        })
    });
    g.bench_function("both searches (k and max k), 8 levels each, one noise replay per k", |b| {
        b.iter(|| {
            [&s, &smax]
                .iter()
                .map(|at| {
                    let replay = NoiseReplay::new(&with_noise(at, 1.0).unwrap(), 1000, 7).unwrap();
                    levels
                        .iter()
                        .map(|&v| replay.tally(&with_noise(at, v).unwrap()).unwrap().successes as f64)
                        .sum::<f64>()
                })
                .sum::<f64>()
        })
    });
    let replay = NoiseReplay::new(&with_noise(&s, 1.0).unwrap(), 1000, 7).unwrap();
    g.bench_function("one level from a built noise replay", |b| {
        b.iter(|| replay.tally(&with_noise(black_box(&s), 0.3).unwrap()))
    });
    g.finish();
}

fn no_progress(_: u64) {}

/// The mean-pooling Monte Carlo verdict with a fit, as the command line runs it (4000 trials,
/// the fit engine's defaults).
fn mean_pooling_fit_verdict(c: &mut Criterion) {
    let mut g = c.benchmark_group("mean_pooling_fit_verdict");
    g.sample_size(10).measurement_time(std::time::Duration::from_secs(60));
    let spec = ScenarioSpec {
        preset: Some("deepseek-v4-flash".into()),
        file: None,
        fields: vec![(Field::ContextLen, "16000".into()), (Field::Pooling, "mean".into())],
    };
    let engine = FitEngineSpec::default();
    let data = Path::new(env!("CARGO_MANIFEST_DIR")).join("experiments/dsv4_seed_observations.csv");
    g.bench_function("verdict deepseek-v4-flash, 16000 tokens, mean pooling, --fit dprime", |b| {
        b.iter(|| verdict(black_box(&spec), &engine, 0.9, Some(&data), Some("dprime"), &no_progress).unwrap())
    });
    g.finish();
}

/// One materialising run kept for three k against one run per k.
fn replay_several_k(c: &mut Criterion) {
    let mut g = c.benchmark_group("replay_several_k");
    g.sample_size(10);
    let s = Scenario {
        context_len: 8000,
        pooling: dsa_sim::scenario::Pooling::Mean,
        ..Scenario::preset("deepseek-v4-flash").unwrap()
    };
    s.validate().unwrap();
    let topks = [512u64, 1024, 2048];
    g.bench_function("V4-Flash stack, 8000 tokens, mean pooling: one replay kept for k = 512, 1024, 2048", |b| {
        b.iter(|| Replay::for_topks(black_box(&s), &topks, 1000, 7).unwrap())
    });
    g.bench_function("V4-Flash stack, 8000 tokens, mean pooling: one replay per k (3)", |b| {
        b.iter(|| topks.map(|k| Replay::new(&Scenario { index_topk: k, ..black_box(&s).clone() }, 1000, 7).unwrap()))
    });
    g.finish();
}

/// Three needles' rank records from one run against one run each.
fn rank_records_together(c: &mut Criterion) {
    let mut g = c.benchmark_group("rank_records_together");
    g.sample_size(10);
    let s = Scenario {
        context_len: 16_000,
        pooling: dsa_sim::scenario::Pooling::Mean,
        ..Scenario::preset("deepseek-v4-flash").unwrap()
    };
    let ss: Vec<Scenario> = [1.2, 0.9, 1.5].iter().map(|&dprime| Scenario { dprime, ..s.clone() }).collect();
    for s in &ss {
        s.validate().unwrap();
    }
    g.bench_function("V4-Flash stack, 16000 tokens, mean pooling: 3 needles, one run", |b| {
        b.iter(|| RankRecord::for_needles(black_box(&ss), 300, 7).unwrap().unwrap())
    });
    g.bench_function("V4-Flash stack, 16000 tokens, mean pooling: 3 needles, one run each", |b| {
        b.iter(|| black_box(&ss).iter().map(|s| RankRecord::new(s, 300, 7).unwrap()).collect::<Vec<_>>())
    });
    g.finish();
}

criterion_group!(benches, noise_search, mean_pooling_fit_verdict, replay_several_k, rank_records_together);
criterion_main!(benches);
