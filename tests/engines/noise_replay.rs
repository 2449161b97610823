//! The noise replay (`montecarlo::NoiseReplay`, the verdict's score-noise search) against the
//! materialising run it replaces: for the same seed and trials, the same hit and attendance
//! counts, exactly, at every positive noise level, on pooled scenarios that exercise every
//! branch of the materialising trial (mean and max pooling, overlap on and off, several needle
//! entries and copies, hard negatives, non-normal tokens, stacks with a shared component,
//! readouts, the window, k ≥ N, k = 1, a needle in no entry). Equality, not closeness: the replay
//! answers from rounded crossing points only where the rounding provably cannot decide, and runs
//! the trial again elsewhere.

use dsa_sim::engine::montecarlo::{simulate, McPath, NoiseReplay};
use dsa_sim::engine::{with_noise, EngineChoice, EngineModel, RecallModel};
use dsa_sim::scenario::{Distractor, Pooling, Readout, RepeatLayout, Scenario};

fn scenarios() -> Vec<(&'static str, Scenario)> {
    let v4 = Scenario {
        context_len: 3000,
        pooling: Pooling::Mean,
        score_noise: 0.3,
        ..Scenario::preset("deepseek-v4-flash").unwrap().one_layer()
    };
    let quest = Scenario { context_len: 3000, score_noise: 0.5, ..Scenario::preset("quest-16").unwrap() };
    vec![
        ("quest-16 at 3000 tokens (30 layers, max pooling)", quest.clone()),
        ("quest-16, k 8, dprime 1.5", Scenario { index_topk: 8, dprime: 1.5, ..quest.clone() }),
        ("v4 mean overlap", v4.clone()),
        ("max pooling overlap", Scenario { pooling: Pooling::Max, ..v4.clone() }),
        (
            "max pooling, gumbel, 5 tokens",
            Scenario { pooling: Pooling::Max, needle_tokens: 5, distractor: Distractor::Gumbel, ..v4.clone() },
        ),
        ("9 needle tokens across blocks", Scenario { needle_tokens: 9, depth: 0.7, ..v4.clone() }),
        ("repeat 8 spread", Scenario { repeat: 8, ..v4.clone() }),
        (
            "repeat 3 adjacent, 2 tokens",
            Scenario { repeat: 3, repeat_layout: RepeatLayout::Adjacent, needle_tokens: 2, depth: 0.2, ..v4.clone() },
        ),
        ("hard negatives 30", Scenario { hard_negatives: 30.0, hard_mean: 1.0, ..v4.clone() }),
        (
            "3 layers, shared component, at least 2, p_read",
            Scenario {
                layers: 3,
                layer_corr: 0.5,
                readout: Readout::AtLeast(2),
                p_read: 0.9,
                p_guess: 0.1,
                ..v4.clone()
            },
        ),
        ("2 layers, all", Scenario { layers: 2, readout: Readout::All, needle_tokens: 3, ..v4.clone() }),
        ("needle in the window", Scenario { depth: 0.99, ..v4.clone() }),
        ("needle in no entry", Scenario { context_len: 3003, depth: 1.0, window: 0, ..v4.clone() }),
        ("k ≥ N", Scenario { context_len: 1500, ..v4.clone() }),
        ("k = 1", Scenario { index_topk: 1, ..v4.clone() }),
        ("no overlap, student t", Scenario { overlap: false, distractor: Distractor::StudentT(5.0), ..v4.clone() }),
        ("weak needle (dprime 0)", Scenario { dprime: 0.0, ..v4 }),
    ]
}

/// Noise levels: tiny, around the needle's separation, and the verdict's cap and halvings.
const SIGMAS: [f64; 9] = [1e-4, 0.05, 0.3, 1.0, 2.5, 6.25, 12.5, 50.0, 100.0];

#[test]
fn noise_replay_counts_equal_the_materialising_path() {
    let (trials, seed) = (200, 23);
    let mut varied = 0;
    for (name, s) in scenarios() {
        s.validate().unwrap_or_else(|e| panic!("{name}: {e}"));
        assert!(NoiseReplay::covers(&s), "{name}");
        let replay = NoiseReplay::new(&s, trials, seed).unwrap();
        let mut seen = std::collections::BTreeSet::new();
        for sigma in SIGMAS {
            let at = with_noise(&s, sigma).unwrap();
            assert!(replay.applies(&at, trials, seed), "{name}: σ {sigma}");
            let fast = replay.tally(&at).unwrap();
            let slow = simulate(&at, trials, seed, McPath::Materialise).unwrap();
            assert_eq!(
                (fast.successes, fast.attended, fast.trials),
                (slow.successes, slow.attended, slow.trials),
                "{name}: σ {sigma}"
            );
            seen.insert(slow.successes);
        }
        varied += (seen.len() > 1) as u32;
        // Another field than the noise is another replay.
        assert!(replay.tally(&Scenario { dprime: s.dprime + 1.0, ..s.clone() }).is_none(), "{name}");
        assert!(replay.tally(&with_noise(&s, 0.0).unwrap()).is_none(), "{name}: noise 0 draws no noise");
    }
    // The comparisons mean something: most scenarios' recall moves with the noise.
    assert!(varied >= 10, "only {varied} scenarios vary with the noise");
}

#[test]
fn noise_replay_is_identical_across_thread_counts() {
    let s = Scenario { context_len: 3000, score_noise: 0.5, index_topk: 8, ..Scenario::preset("quest-16").unwrap() };
    let pool = |n| rayon::ThreadPoolBuilder::new().num_threads(n).build().unwrap();
    let one = pool(1).install(|| NoiseReplay::new(&s, 5000, 3).unwrap());
    let three = pool(3).install(|| NoiseReplay::new(&s, 5000, 3).unwrap());
    for sigma in [0.2, 1.0, 4.0] {
        let at = with_noise(&s, sigma).unwrap();
        assert_eq!(one.tally(&at), three.tally(&at));
    }
}

/// The engine's noise curve is its recall at every level, on and off the materialising path
/// (noise 0 on Quest is analytic).
#[test]
fn engine_noise_curve_equals_recall_at_each_level() {
    let s = Scenario { context_len: 2000, index_topk: 6, dprime: 2.0, ..Scenario::preset("quest-16").unwrap() };
    let model = EngineModel::new(EngineChoice::Auto, 300, 11);
    let reference = EngineModel::new(EngineChoice::Auto, 300, 11).with_replay_budget(0);
    let curve = model.recall_in_noise(&s).unwrap();
    for sigma in [0.0, 100.0, 50.0, 25.0, 0.7, 1e-3] {
        assert_eq!(curve(sigma).unwrap(), reference.recall(&with_noise(&s, sigma).unwrap()).unwrap(), "σ {sigma}");
    }
    assert_eq!(model.replays_built(), 1);
}

/// One replay kept at several k (the verdict's searches at the scenario's k and at the kernel
/// maximum) answers each of them with the materialising run's counts at that k, and no other k.
#[test]
fn a_replay_at_several_k_equals_the_run_at_each() {
    let (trials, seed) = (200, 31);
    let quest = Scenario {
        context_len: 3000,
        score_noise: 0.5,
        index_topk: 4,
        dprime: 1.5,
        ..Scenario::preset("quest-16").unwrap()
    };
    let v4 = Scenario {
        context_len: 3000,
        pooling: Pooling::Mean,
        score_noise: 0.3,
        ..Scenario::preset("deepseek-v4-flash").unwrap().one_layer()
    };
    for s in [quest, v4] {
        s.validate().unwrap();
        // k = 1 below the kernel's floor, a middle k, the maximum, and k ≥ N.
        let topks = [1, s.index_topk, s.max_topk, 100_000];
        let replay = NoiseReplay::for_topks(&s, &topks, trials, seed).unwrap();
        let mut seen = std::collections::BTreeSet::new();
        for k in topks {
            for sigma in [0.05, 1.0, 6.25, 100.0] {
                let at = with_noise(&Scenario { index_topk: k, ..s.clone() }, sigma).unwrap();
                assert!(replay.applies(&at, trials, seed), "k {k} σ {sigma}");
                let fast = replay.tally(&at).unwrap();
                let slow = simulate(&at, trials, seed, McPath::Materialise).unwrap();
                assert_eq!((fast.successes, fast.attended), (slow.successes, slow.attended), "k {k} σ {sigma}");
                seen.insert(slow.successes);
            }
        }
        assert!(seen.len() > 3, "{seen:?}");
        // A k whose k_eff was not kept is not answered.
        let other = with_noise(&Scenario { index_topk: 37, ..s.clone() }, 1.0).unwrap();
        assert!(!replay.applies(&other, trials, seed) && replay.tally(&other).is_none());
    }
}

/// The verdict's two noise searches, at k and at the kernel maximum, build one replay between
/// them, and each curve is the recall at every level.
#[test]
fn the_noise_curves_at_k_and_at_the_maximum_share_one_replay() {
    let s = Scenario { context_len: 2000, index_topk: 6, dprime: 2.0, ..Scenario::preset("quest-16").unwrap() };
    let smax = Scenario { index_topk: s.max_topk, ..s.clone() };
    let model = EngineModel::new(EngineChoice::Auto, 300, 11);
    let reference = EngineModel::new(EngineChoice::Auto, 300, 11).with_replay_budget(0);
    for at in [&s, &smax] {
        let curve = model.recall_in_noise(at).unwrap();
        for sigma in [100.0, 3.0, 0.7] {
            assert_eq!(
                curve(sigma).unwrap(),
                reference.recall(&with_noise(at, sigma).unwrap()).unwrap(),
                "k {} σ {sigma}",
                at.index_topk
            );
        }
    }
    assert_eq!(model.replays_built(), 1);
}
