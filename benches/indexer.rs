//! Vector-indexer benchmarks: the FMA peak of this machine, the scoring kernel (H = 64, d = 128)
//! against it, and one vector trial at 128K tokens (V4 geometry, FP4 q and keys).
//!
//! Run: `cargo bench --bench indexer`. FLOPs of scoring: 2·H·d per key (one FMA per head and
//! channel); the ReLU and the weighted head sum are not counted.

use criterion::{black_box, criterion_group, criterion_main, Criterion, Throughput};
use dsa_sim::indexer::{kernel, Scratch, VectorModel};
use dsa_sim::progress::Silent;
use dsa_sim::trials::{self, Tally};
use dsa_sim::Scenario;
use rayon::prelude::*;
use std::time::Instant;

/// f32 FMA peak of one core, measured: 16 independent accumulator chains of 512-bit (or
/// 256-bit) FMAs, enough to cover latency × throughput on current cores. Returns GFLOP/s.
#[cfg(target_arch = "x86_64")]
fn fma_peak_one_core(iters: u64) -> (f64, &'static str) {
    use std::arch::x86_64::*;
    #[target_feature(enable = "avx512f")]
    unsafe fn run512(iters: u64) -> f32 {
        let a = _mm512_set1_ps(0.999_999);
        let b = _mm512_set1_ps(1e-7);
        let mut acc = [_mm512_set1_ps(1.0); 16];
        for _ in 0..iters {
            for r in acc.iter_mut() {
                *r = _mm512_fmadd_ps(*r, a, b);
            }
        }
        let mut s = _mm512_setzero_ps();
        for r in acc {
            s = _mm512_add_ps(s, r);
        }
        _mm512_reduce_add_ps(s)
    }
    #[target_feature(enable = "avx2,fma")]
    unsafe fn run256(iters: u64) -> f32 {
        let a = _mm256_set1_ps(0.999_999);
        let b = _mm256_set1_ps(1e-7);
        let mut acc = [_mm256_set1_ps(1.0); 16];
        for _ in 0..iters {
            for r in acc.iter_mut() {
                *r = _mm256_fmadd_ps(*r, a, b);
            }
        }
        let mut s = _mm256_setzero_ps();
        for r in acc {
            s = _mm256_add_ps(s, r);
        }
        let mut out = [0f32; 8];
        _mm256_storeu_ps(out.as_mut_ptr(), s);
        out.iter().sum()
    }
    let t = Instant::now();
    if std::arch::is_x86_feature_detected!("avx512f") {
        // SAFETY: feature checked.
        black_box(unsafe { run512(iters) });
        (iters as f64 * 16.0 * 16.0 * 2.0 / t.elapsed().as_secs_f64() / 1e9, "avx512")
    } else {
        // SAFETY: AVX2 + FMA assumed on x86-64 benchmark hosts.
        black_box(unsafe { run256(iters) });
        (iters as f64 * 16.0 * 8.0 * 2.0 / t.elapsed().as_secs_f64() / 1e9, "avx2")
    }
}

fn v4_fp4(context: u64) -> Scenario {
    let mut s = Scenario::preset("deepseek-v4-flash").unwrap();
    s.model = dsa_sim::scenario::Model::Vector;
    s.context_len = context;
    s.validate().unwrap();
    s
}

fn report_peak() {
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    let (one, isa) = fma_peak_one_core(200_000_000);
    let t = Instant::now();
    let both: Vec<f64> = (0..2).into_par_iter().map(|_| fma_peak_one_core(200_000_000).0).collect();
    let two: f64 = both.iter().sum();
    eprintln!(
        "FMA peak ({isa}): one core {one:.1} GFLOP/s, two cores {two:.1} GFLOP/s ({:.2} s); loadavg {}",
        t.elapsed().as_secs_f64(),
        load.trim()
    );
    // Kernel throughput on 2 threads, outside criterion for a direct % of peak.
    let (hp, d, n) = (64usize, 128usize, 32_768usize);
    let qt: Vec<f32> = (0..d * hp).map(|i| ((i * 7919) % 1000) as f32 / 1000.0 - 0.5).collect();
    let w = vec![0.01f32; hp];
    let keys: Vec<f32> = (0..n * d).map(|i| ((i * 104_729) % 1000) as f32 / 1000.0 - 0.5).collect();
    let mut out = vec![0f32; n];
    let reps = 40;
    let t = Instant::now();
    for _ in 0..reps {
        out.par_chunks_mut(1024).zip(keys.par_chunks(1024 * d)).for_each(|(o, k)| kernel::score(&qt, &w, hp, d, k, o));
    }
    let gflops = reps as f64 * n as f64 * 2.0 * hp as f64 * d as f64 / t.elapsed().as_secs_f64() / 1e9;
    eprintln!(
        "scoring kernel ({}), 2 threads: {gflops:.1} GFLOP/s = {:.0}% of the measured 2-core peak",
        kernel::kernel_name(),
        100.0 * gflops / two
    );
    // Trial throughput at 128K tokens on 2 threads.
    let s = v4_fp4(131_072);
    let model = VectorModel::new(&s);
    let trials = 64;
    let t = Instant::now();
    let run = trials::run(&model, trials, 1, &Silent);
    let per = t.elapsed().as_secs_f64() / trials as f64;
    eprintln!(
        "vector trial, 128K tokens (N = {}), FP4 q and keys, 2 threads: {:.2} ms per trial (throughput); recall {:.3}",
        model.n_entries(),
        per * 1e3,
        run.successes as f64 / trials as f64
    );
}

fn bench(c: &mut Criterion) {
    report_peak();
    let (hp, d, n) = (64usize, 128usize, 4096usize);
    let qt: Vec<f32> = (0..d * hp).map(|i| ((i * 7919) % 1000) as f32 / 1000.0 - 0.5).collect();
    let w = vec![0.01f32; hp];
    let keys: Vec<f32> = (0..n * d).map(|i| ((i * 104_729) % 1000) as f32 / 1000.0 - 0.5).collect();
    let mut out = vec![0f32; n];
    let mut g = c.benchmark_group("indexer_score");
    g.throughput(Throughput::Elements((n * 2 * hp * d) as u64));
    g.bench_function("one_thread_4096_keys", |b| b.iter(|| kernel::score(black_box(&qt), &w, hp, d, &keys, &mut out)));
    g.finish();

    let s = v4_fp4(131_072);
    let model = VectorModel::new(&s);
    let mut sc = Scratch::default();
    let mut tally = Tally::default();
    let mut g = c.benchmark_group("indexer_trial_128k_fp4");
    g.sample_size(20);
    let mut i = 0u64;
    g.bench_function("one_thread", |b| {
        b.iter(|| {
            i += 1;
            model.trial(7, i, &mut sc, &mut tally);
            black_box(tally.successes)
        })
    });
    g.bench_function("two_threads_8_trials", |b| b.iter(|| black_box(trials::run(&model, 8, 7, &Silent))));
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
