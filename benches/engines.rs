//! Engine throughput: the performance targets of the foundation issue.
//!
//! - analytic recall point, N = 2^20, k = 4096, one thread (target ≤ 50 µs);
//! - exact-sampling Monte Carlo, iid normal distractors, N = 2^18, all cores (target ≥ 2e7 trials/s);
//! - materialising Monte Carlo, N = 2^18, all cores (target ≥ 4e8 candidate scores/s).

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use dsa_sim::engine::analytic::Analytic;
use dsa_sim::engine::montecarlo::{simulate, McPath};
use dsa_sim::Scenario;
use std::hint::black_box;
use std::time::Duration;

fn analytic(c: &mut Criterion) {
    let mut g = c.benchmark_group("analytic_recall_point");
    g.measurement_time(Duration::from_secs(3));
    for (name, s) in [
        ("N=2^20,k=4096", Scenario { context_len: 1 << 20, index_topk: 4096, ..Scenario::default() }),
        ("N=2^16,k=2048", Scenario::default()),
        ("N=2^20,k=4096,dprime=1", Scenario { context_len: 1 << 20, index_topk: 4096, dprime: 1.0, ..Scenario::default() }),
        ("V4-Flash 1M", Scenario { context_len: 1 << 20, ..Scenario::preset("deepseek-v4-flash").unwrap() }),
    ] {
        g.bench_function(name, |b| b.iter(|| Analytic::new(black_box(&s)).unwrap().recall()));
    }
    g.finish();
}

fn montecarlo(c: &mut Criterion) {
    let s = Scenario { context_len: 1 << 18, index_topk: 2048, ..Scenario::default() };
    let mut g = c.benchmark_group("montecarlo");
    g.sample_size(10);
    g.measurement_time(Duration::from_secs(5));
    let trials = 1_000_000;
    g.throughput(Throughput::Elements(trials));
    g.bench_function("exact_sampling_trials,N=2^18", |b| {
        b.iter(|| simulate(black_box(&s), trials, 1, McPath::Exact).unwrap().successes)
    });
    let trials = 40;
    g.throughput(Throughput::Elements(trials * (1 << 18)));
    g.bench_function("materialising_candidate_scores,N=2^18", |b| {
        b.iter(|| simulate(black_box(&s), trials, 1, McPath::Materialise).unwrap().successes)
    });
    g.finish();
}

criterion_group!(benches, analytic, montecarlo);
criterion_main!(benches);
