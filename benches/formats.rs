//! Quantize-dequantize throughput of the number formats (values per second).
//!
//! Run: `cargo bench --bench formats`. The slice is 64 heads × 128 dims (one indexer query), the
//! size the vector indexer quantizes at a time, refilled from a pristine copy every iteration
//! (the copy is part of the measured time, as it is in the indexer). `DSA_SIM_SIMD=baseline` or
//! `avx2` caps the instruction set (the default is the best the CPU has).

use criterion::{black_box, criterion_group, criterion_main, Criterion, Throughput};
use dsa_sim::formats::{cap_simd_level, simd_level, Format, SimdLevel};

fn inputs(n: usize) -> Vec<f32> {
    // Deterministic, spread values with a few outliers.
    let mut state = 0x2545_F491_4F6C_DD1Du64;
    (0..n)
        .map(|i| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            let u = (state >> 40) as f32 / (1u64 << 24) as f32 - 0.5;
            if i % 97 == 0 {
                u * 40.0
            } else {
                u * 2.0
            }
        })
        .collect()
}

fn bench(c: &mut Criterion) {
    match std::env::var("DSA_SIM_SIMD").as_deref() {
        Ok("baseline") => cap_simd_level(Some(SimdLevel::Baseline)),
        Ok("avx2") => cap_simd_level(Some(SimdLevel::Avx2)),
        _ => cap_simd_level(None),
    }
    eprintln!("instruction set: {:?}", simd_level());
    let n = 64 * 128;
    let src = inputs(n);
    let mut buf = src.clone();
    let mut group = c.benchmark_group("quantize");
    group.throughput(Throughput::Elements(n as u64));
    for spec in ["fp4-e2m1:32:ue8m0", "fp8-e4m3:128:fp32", "mxfp4", "nvfp4", "bf16", "fp8-e4m3"] {
        let fmt: Format = spec.parse().unwrap();
        group.bench_function(spec, |b| {
            b.iter(|| {
                buf.copy_from_slice(&src);
                fmt.quantize_dequantize_in_place(black_box(&mut buf)).unwrap();
            })
        });
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
