//! Engine throughput: the performance targets of the foundation issue.
//!
//! - analytic recall point, N = 2^20, k = 4096, one thread (target ≤ 50 µs);
//! - exact-sampling Monte Carlo, iid normal distractors, N = 2^18, all cores (target ≥ 2e7 trials/s);
//! - materialising Monte Carlo, N = 2^18, all cores (target ≥ 4e8 candidate scores/s);
//! - issue 23's scenario, exact sampling at N = 2^18, dprime 2, 4M trials, all cores (the run
//!   `benches/numpy_vs_scalar_mc.py` times as a whole process against NumPy);
//! - the exact trial's parts, one thread: the normal tail at random points (against libm's
//!   erfc, which it replaced) and a binomial draw at the benchmark's typical (n, p).

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
        (
            "N=2^20,k=4096,dprime=1",
            Scenario { context_len: 1 << 20, index_topk: 4096, dprime: 1.0, ..Scenario::default() },
        ),
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
    // Issue 23's comparison with NumPy: dprime 2 puts the needle's tail probability near 0.02,
    // so the binomial's mean is in the thousands (at dprime 3, in the hundreds).
    let s2 = Scenario { dprime: 2.0, ..s.clone() };
    let trials = 4_000_000;
    g.throughput(Throughput::Elements(trials));
    g.bench_function("exact_sampling_trials,N=2^18,dprime=2,4M", |b| {
        b.iter(|| simulate(black_box(&s2), trials, 1, McPath::Exact).unwrap().successes)
    });
    let trials = 40;
    g.throughput(Throughput::Elements(trials * (1 << 18)));
    g.bench_function("materialising_candidate_scores,N=2^18", |b| {
        b.iter(|| simulate(black_box(&s), trials, 1, McPath::Materialise).unwrap().successes)
    });
    g.finish();
}

fn parts(c: &mut Criterion) {
    use dsa_sim::engine::binomial;
    use rand::{Rng, SeedableRng};
    let mut g = c.benchmark_group("exact_trial_parts");
    g.measurement_time(Duration::from_secs(3));
    // Needle scores of the benchmark scenario: Normal(3, 1), in random order (a sorted sweep
    // would flatter any branchy implementation).
    let mut rng = rand_xoshiro::Xoshiro256PlusPlus::seed_from_u64(5);
    let ys: Vec<f64> = (0..4096).map(|_| 3.0 + rng.sample::<f64, _>(rand_distr::StandardNormal)).collect();
    g.throughput(Throughput::Elements(ys.len() as u64));
    g.bench_function("norm_sf,4096 random points", |b| {
        b.iter(|| ys.iter().map(|&y| dsa_sim::stats::norm_sf(black_box(y))).sum::<f64>())
    });
    g.bench_function("libm_erfc,4096 random points", |b| {
        b.iter(|| ys.iter().map(|&y| 0.5 * libm::erfc(black_box(y) * std::f64::consts::FRAC_1_SQRT_2)).sum::<f64>())
    });
    let ps: Vec<f64> = ys.iter().map(|&y| dsa_sim::stats::norm_sf(y)).collect();
    g.bench_function("binomial,n=2^18-1,4096 draws", |b| {
        b.iter(|| ps.iter().map(|&p| binomial::sample(262_143, black_box(p), &mut rng)).sum::<u64>())
    });
    // Issue 23's scenario: p = Q(Normal(2, 1)).
    let ps2: Vec<f64> = ys.iter().map(|&y| dsa_sim::stats::norm_sf(y - 1.0)).collect();
    g.bench_function("binomial,n=2^18-1,dprime=2,4096 draws", |b| {
        b.iter(|| ps2.iter().map(|&p| binomial::sample(262_143, black_box(p), &mut rng)).sum::<u64>())
    });
    g.finish();
}

criterion_group!(benches, analytic, montecarlo, parts);
criterion_main!(benches);
