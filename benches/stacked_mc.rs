//! Monte Carlo on stacked presets (issue 23): the score-noise search of the Quest verdict
//! (`verdict --preset quest-16 --data experiments/quest_passkey_10k.csv`): one
//! `verdict::verdict` of a quest-16 row at 10K tokens on the Monte Carlo engine (its noise
//! levels answered by one noise replay), against the same search by one materialising run per
//! level (`with_replay_budget(0)`, what it cost before the replay). 1000 trials instead of the
//! fit default's 4000 to keep `cargo bench --bench stacked_mc` within minutes; the
//! whole-command figures are timed with the binary (README's benchmark table).

use criterion::{criterion_group, criterion_main, Criterion};
use dsa_sim::engine::montecarlo::NoiseReplay;
use dsa_sim::engine::{with_noise, EngineChoice, EngineModel, RecallModel};
use dsa_sim::scenario::Scenario;
use std::hint::black_box;

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
    let replay = NoiseReplay::new(&with_noise(&s, 1.0).unwrap(), 1000, 7).unwrap();
    g.bench_function("one level from a built noise replay", |b| b.iter(|| replay.tally(&with_noise(black_box(&s), 0.3).unwrap())));
    g.finish();
}

criterion_group!(benches, noise_search);
criterion_main!(benches);
