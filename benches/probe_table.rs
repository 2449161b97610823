//! Issue 40's bound: the verdict on a table of `probe`'s shape (72 rows: 2K..64K × 4 residues ×
//! 3 depths, 5 trials each; benches/data/gen_probe_table.py) with a needle of 16 tokens on every
//! row, or 15–18 varying by row, on the presets whose needle makes it expensive: Quest's pages
//! (max pooling, k 64), DeepSeek-V3.2 (61 layers, k 2048) and DeepSeek-V4-Flash (k 512).
//!
//! Each iteration is `commands::verdict::verdict`, the call `dsa-sim verdict --preset P --data T`
//! makes. T_j's tables are kept for the process, so after the first iteration some are reused
//! (a hard-negatives fit's are made anew at each evaluation either way): these figures are the
//! warm cost; docs/benchmarks.md gives the command's, cold, beside them.

use criterion::{criterion_group, criterion_main, Criterion};
use dsa_sim::commands::verdict::verdict;
use dsa_sim::commands::{FitEngineSpec, ScenarioSpec};
use std::hint::black_box;
use std::path::Path;
use std::time::Duration;

fn no_progress(_: u64) {}

fn probe_table(c: &mut Criterion) {
    let engine = FitEngineSpec::default();
    let mut g = c.benchmark_group("issue_40");
    g.sample_size(10).measurement_time(Duration::from_secs(60)).warm_up_time(Duration::from_secs(1));
    for (preset, table) in [
        ("quest-16", "probe72_k64_t16.csv"),
        ("deepseek-v3.2", "probe72_k2048_t16.csv"),
        ("deepseek-v3.2", "probe72_k2048_var.csv"),
        ("deepseek-v4-flash", "probe72_k512_t16.csv"),
    ] {
        let spec = ScenarioSpec { preset: Some(preset.to_string()), file: None, fields: Vec::new() };
        let data = Path::new(env!("CARGO_MANIFEST_DIR")).join("benches/data").join(table);
        g.bench_function(format!("verdict {preset} {table}"), |b| {
            b.iter(|| verdict(black_box(&spec), &engine, 0.9, Some(&data), None, &no_progress).unwrap())
        });
    }
    g.finish();
}

criterion_group!(benches, probe_table);
criterion_main!(benches);
