//! The stacked presets at the speed of one layer (issue 23): one analytic recall of a row on
//! `deepseek-v4-flash-sglang` at 16K tokens, one layer (`--stack none`) against the model as
//! built (21 selecting layers sharing the needle's component, layer_corr 0.5 and 0.95), and the
//! same stacked row at a second dprime (the tables of T_j already kept: what a fit's later
//! evaluations cost). The whole-command figures of the table are timed with the binary
//! (docs/benchmarks.md says how).

use criterion::{criterion_group, criterion_main, Criterion};
use dsa_sim::engine::analytic::Analytic;
use dsa_sim::scenario::{Field, Scenario};
use std::hint::black_box;
use std::time::Duration;

fn row(fields: &[(Field, &str)]) -> Scenario {
    let mut s = Scenario::preset("deepseek-v4-flash-sglang").unwrap();
    s.set_text(Field::ContextLen, "16000").unwrap();
    s.set_text(Field::Dprime, "1").unwrap();
    for (f, v) in fields {
        s.set_text(*f, v).unwrap();
    }
    s.validate().unwrap();
    s
}

fn stacked(c: &mut Criterion) {
    let mut g = c.benchmark_group("stacked_recall_row");
    g.measurement_time(Duration::from_secs(3));
    for (name, s) in [
        ("one layer", row(&[(Field::Stack, "none")])),
        ("21 layers, layer_corr 0.5", row(&[(Field::LayerCorr, "0.5")])),
        ("21 layers, layer_corr 0.95", row(&[(Field::LayerCorr, "0.95")])),
    ] {
        g.bench_function(name, |b| b.iter(|| Analytic::new(black_box(&s)).unwrap().recall()));
    }
    // A fit's later evaluation: another dprime of the same row (T_j's table kept).
    let mut dprime = 0.0;
    let base = row(&[(Field::LayerCorr, "0.5")]);
    g.bench_function("21 layers, layer_corr 0.5, new dprime each time", |b| {
        b.iter(|| {
            dprime = (dprime + 0.01) % 3.0;
            let s = Scenario { dprime, ..base.clone() };
            Analytic::new(black_box(&s)).unwrap().recall()
        })
    });
    g.finish();
}

criterion_group!(benches, stacked);
criterion_main!(benches);
