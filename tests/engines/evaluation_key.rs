//! The exact engine's evaluation key (`RecallModel::evaluation_key`): fits evaluate a table's
//! rows once per distinct key and the memo answers by it, so two scenarios sharing a key must
//! have the same recall and the same layer-count pmf, bit for bit. Checked by changing every
//! numeric field of several scenarios one at a time (and the needle's depth over the whole
//! context): wherever the key stays, the results stay; and rows that differ only in depth
//! beyond the window do share it (else the dedup saves nothing).

use dsa_sim::engine::{EngineChoice, EngineModel, RecallModel};
use dsa_sim::scenario::{Field, Scenario};

fn bases() -> Vec<(&'static str, Scenario)> {
    let mut v4 = Scenario::preset("deepseek-v4-flash").unwrap();
    v4.context_len = 16_000;
    v4.layer_corr = 0.6;
    v4.dprime = 2.0;
    let hard = Scenario {
        context_len: 4096,
        window: 128,
        sink: 4,
        dprime: 2.5,
        hard_negatives: 0.01,
        hard_mean: 1.5,
        ..Scenario::default()
    };
    hard.validate().unwrap();
    let mut pooled = Scenario::preset("deepseek-v4-flash").unwrap();
    pooled.context_len = 8000;
    pooled.needle_tokens = 6;
    pooled.pooling = dsa_sim::scenario::Pooling::Mean;
    // Without overlap every entry pools alike: the exact engine's case for mean pooling.
    pooled.overlap = false;
    pooled.repeat = 2;
    pooled.layer_corr = 0.3;
    vec![
        ("deepseek-v4-flash 16K", v4),
        ("one layer, hard negatives", hard),
        ("mean pooling, two 6-token copies", pooled),
    ]
}

/// The results the key stands for, bit for bit (`None` where the scenario is not exact).
fn results(m: &EngineModel, s: &Scenario) -> Option<(u64, Vec<u64>)> {
    let r = m.recall(s).ok()?;
    let pmf = m.layer_count_pmf(s).ok()?;
    Some((r.to_bits(), pmf.iter().map(|p| p.to_bits()).collect()))
}

#[test]
fn scenarios_that_share_a_key_share_every_result() {
    let m = EngineModel::new(EngineChoice::Analytic, 1, 1);
    let mut shared = 0;
    for (name, base) in bases() {
        let Some(want) = results(&m, &base) else { panic!("{name}: not exact") };
        let key = m.evaluation_key(&base);
        let mut variants: Vec<(String, Scenario)> = Vec::new();
        for &f in Field::ALL {
            let Some(x) = base.number(f) else { continue };
            // Integer fields take the rounded values (set_real refuses a fraction).
            for y in [x * 1.5, x + 1.0, x - 0.5, x * 0.5, 0.0, (x * 1.5).round(), x + 2.0, (x * 0.5).round()] {
                let mut s = base.clone();
                if s.set_real(f, y).is_ok() && s.validate().is_ok() && s != base {
                    variants.push((format!("{} = {y}", f.name()), s));
                }
            }
        }
        for i in 0..=40 {
            let mut s = base.clone();
            s.depth = i as f64 / 40.0;
            variants.push((format!("depth = {}", s.depth), s));
        }
        for (what, s) in variants {
            let Some(got) = results(&m, &s) else { continue };
            if m.evaluation_key(&s) == key {
                shared += 1;
                assert_eq!(got, want, "{name}, {what}: same key, different results");
            }
        }
    }
    // Depths beyond the window (most of the 41 per base) share the base's key.
    assert!(shared >= 60, "only {shared} variants share their base's key");
}

#[test]
fn a_needle_in_the_window_does_not_share_the_key_of_one_beyond_it() {
    let m = EngineModel::new(EngineChoice::Analytic, 1, 1);
    let (_, mut s) = bases().remove(0);
    s.depth = 0.5;
    let far = m.evaluation_key(&s);
    s.depth = 1.0;
    assert_ne!(m.evaluation_key(&s), far);
    assert_ne!(m.recall(&s).unwrap(), {
        s.depth = 0.5;
        m.recall(&s).unwrap()
    });
}

#[test]
fn monte_carlo_keys_on_the_whole_scenario() {
    let m = EngineModel::new(EngineChoice::MonteCarlo, 100, 1);
    let (_, mut s) = bases().remove(0);
    let a = m.evaluation_key(&s);
    s.depth = 0.25;
    assert_ne!(m.evaluation_key(&s), a);
}
