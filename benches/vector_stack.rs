//! The vector model's full stack: a 21-layer DeepSeek-V4-Flash trial at 128K tokens (N = 32768
//! entries, FP4 q and keys, the vector mechanisms at their defaults: signed per-query head
//! weights, RoPE with YaRN), per trial, on 2 threads; and one layer on one thread.
//!
//! Run: `cargo bench --bench vector_stack`. Besides criterion's figures it prints the median and
//! range of the per-trial time over repeated 8-trial runs (8 trials = 2 work items of 4, one per
//! thread).

use criterion::{black_box, criterion_group, criterion_main, Criterion, Throughput};
use dsa_sim::indexer::{Draws, Scratch, VectorModel};
use dsa_sim::progress::Silent;
use dsa_sim::trials;
use dsa_sim::Scenario;
use std::time::Instant;

fn v4_flash(layers: u32) -> Scenario {
    let mut s = Scenario::preset("deepseek-v4-flash").unwrap();
    s.model = dsa_sim::scenario::Model::Vector;
    s.context_len = 131_072;
    // The preset's stack (csa:21,hca:20,swa:2) has the 21 selecting layers; one layer alone
    // without a stack.
    if layers != 21 {
        s.set_text("stack".parse().unwrap(), "none").unwrap();
        s.layers = layers;
    }
    s.validate().unwrap();
    s
}

fn bench(c: &mut Criterion) {
    let pool = rayon::ThreadPoolBuilder::new().num_threads(2).build().unwrap();
    let model = VectorModel::new(&v4_flash(21));
    // Direct figures: median and range of the per-trial time.
    let mut per: Vec<f64> = (0..7)
        .map(|r| {
            let t = Instant::now();
            black_box(pool.install(|| trials::run(&model, 8, 100 + r, &Silent)));
            t.elapsed().as_secs_f64() / 8.0
        })
        .collect();
    per.sort_by(f64::total_cmp);
    eprintln!(
        "21-layer V4-Flash vector trial, 128K tokens, 2 threads: median {:.3} s per trial (range {:.3}–{:.3}, 7 runs of 8 trials); loadavg {}",
        per[3],
        per[0],
        per[6],
        std::fs::read_to_string("/proc/loadavg").unwrap_or_default().trim()
    );
    let one = VectorModel::new(&v4_flash(1));
    let mut sc = Scratch::default();
    let mut layer: Vec<f64> = (0..15)
        .map(|i| {
            let dr = Draws::new(3, i, 0);
            let t = Instant::now();
            black_box(one.layer_rank(&dr, &mut sc));
            t.elapsed().as_secs_f64()
        })
        .collect();
    layer.sort_by(f64::total_cmp);
    eprintln!(
        "one layer, one thread: median {:.1} ms (range {:.1}–{:.1})",
        layer[7] * 1e3,
        layer[0] * 1e3,
        layer[14] * 1e3
    );

    let mut g = c.benchmark_group("vector_stack_128k");
    g.sample_size(10);
    g.measurement_time(std::time::Duration::from_secs(20));
    g.throughput(Throughput::Elements(8));
    g.bench_function("v4_flash_21_layers_2_threads_per_trial", |b| {
        let mut seed = 0u64;
        b.iter(|| {
            seed += 1;
            black_box(pool.install(|| trials::run(&model, 8, seed, &Silent)))
        })
    });
    g.finish();
    let mut g = c.benchmark_group("vector_layer_128k");
    g.sample_size(30);
    g.bench_function("v4_flash_one_layer_one_thread", |b| {
        let mut i = 0u64;
        b.iter(|| {
            i += 1;
            black_box(one.layer_rank(&Draws::new(9, i, 0), &mut sc))
        })
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
