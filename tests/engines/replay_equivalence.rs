//! The Monte Carlo replay (`montecarlo::Replay`, the fast path of Monte Carlo calibration)
//! against the materialising path it replays: for the same seed and trials, the same hit and
//! attendance counts, exactly, at every needle parameter value, on scenarios that exercise
//! every branch of the materialising trial (poolings, overlap on and off, several needle
//! tokens and copies, both repeat layouts, block edges, hard negatives, noise, layers with a
//! shared component, readouts, the window and sink, k ≥ N and k at the distractor count,
//! needles in no entry, non-normal tokens). Equality, not closeness: the replay recomputes the
//! needle's scores with the same floating-point operations, so any drift is a bug.

use dsa_sim::engine::montecarlo::{replay_key, simulate, McPath, Replay};
use dsa_sim::scenario::{Distractor, Field, Pooling, Readout, RepeatLayout, Scenario};

/// Scenarios to replay, each with its name.
fn scenarios() -> Vec<(&'static str, Scenario)> {
    // V4-Flash with mean pooling at 3000 tokens: N = 750 > k = 512, overlapping blocks.
    let v4 = Scenario {
        context_len: 3000,
        pooling: Pooling::Mean,
        ..Scenario::preset("deepseek-v4-flash").unwrap().one_layer()
    };
    vec![
        ("v4 mean overlap", v4.clone()),
        ("depth 0 (entry 0 pools one block)", Scenario { depth: 0.0, ..v4.clone() }),
        ("depth 1 (last block), no window", Scenario { depth: 1.0, window: 0, ..v4.clone() }),
        (
            "needle in the trailing partial block: in no entry",
            Scenario { context_len: 3003, depth: 1.0, window: 0, ..v4.clone() },
        ),
        ("3 needle tokens across a block edge", Scenario { needle_tokens: 3, depth: 0.3, ..v4.clone() }),
        ("9 needle tokens", Scenario { needle_tokens: 9, depth: 0.7, ..v4.clone() }),
        ("repeat 8 spread", Scenario { repeat: 8, ..v4.clone() }),
        (
            "repeat 3 adjacent, 2 tokens",
            Scenario { repeat: 3, repeat_layout: RepeatLayout::Adjacent, needle_tokens: 2, depth: 0.2, ..v4.clone() },
        ),
        ("max pooling overlap", Scenario { pooling: Pooling::Max, ..v4.clone() }),
        (
            "max pooling, gumbel, 5 tokens",
            Scenario { pooling: Pooling::Max, needle_tokens: 5, distractor: Distractor::Gumbel, ..v4.clone() },
        ),
        ("hard negatives 30", Scenario { hard_negatives: 30.0, hard_mean: 1.0, ..v4.clone() }),
        ("hard negatives 5%", Scenario { hard_negatives: 0.05, hard_mean: 0.5, needle_tokens: 2, ..v4.clone() }),
        ("score noise", Scenario { score_noise: 0.3, ..v4.clone() }),
        ("max pooling with noise", Scenario { pooling: Pooling::Max, score_noise: 0.4, ..v4.clone() }),
        (
            "3 layers, shared component, at least 2",
            Scenario { layers: 3, layer_corr: 0.5, readout: Readout::AtLeast(2), ..v4.clone() },
        ),
        ("2 layers, independent, all", Scenario { layers: 2, readout: Readout::All, needle_tokens: 3, ..v4.clone() }),
        ("needle in the window", Scenario { depth: 0.99, ..v4.clone() }),
        ("needle in the sink", Scenario { sink: 8, depth: 0.0, ..v4.clone() }),
        ("k ≥ N", Scenario { context_len: 1500, ..v4.clone() }),
        ("k = distractors", Scenario { index_topk: 748, ..v4.clone() }),
        ("k = distractors − 1", Scenario { index_topk: 747, ..v4.clone() }),
        ("k = 1", Scenario { index_topk: 1, ..v4.clone() }),
        (
            "token level, overlap (pools 2)",
            Scenario { compress_ratio: 1, index_topk: 64, context_len: 2000, ..v4.clone() },
        ),
        ("no overlap, mean of gumbel", Scenario { overlap: false, distractor: Distractor::Gumbel, ..v4.clone() }),
        (
            "no overlap, student t with noise",
            Scenario { overlap: false, distractor: Distractor::StudentT(5.0), score_noise: 0.2, ..v4.clone() },
        ),
        ("quest-like: c 16, max", Scenario { context_len: 8000, ..Scenario::preset("quest-16").unwrap() }),
        (
            "unpooled gumbel with noise",
            Scenario { pooling: Pooling::None, distractor: Distractor::Gumbel, score_noise: 0.5, ..v4.clone() },
        ),
        (
            "unpooled normal (closed form, forced)",
            Scenario { pooling: Pooling::None, context_len: 9000, index_topk: 256, ..v4.clone() },
        ),
        (
            "unpooled, 2 layers, shared",
            Scenario { pooling: Pooling::None, layers: 2, layer_corr: 0.3, context_len: 9000, ..v4.clone() },
        ),
    ]
}

/// The needle-side values each replay is evaluated at: (dprime, needle_sd, layer_corr scale,
/// p_read, p_guess). layer_corr is scaled, never moved to or from 0 (that changes the draws).
const THETAS: [(f64, f64, f64, f64, f64); 7] = [
    (3.0, 1.0, 1.0, 1.0, 0.0),
    (-1.0, 0.3, 1.0, 1.0, 0.0),
    (0.8, 1.0, 0.5, 1.0, 0.0),
    (1.6, 2.5, 1.0, 1.0, 0.0),
    (2.2, 0.05, 1.5, 1.0, 0.0),
    (6.0, 4.0, 1.0, 1.0, 0.0),
    (1.4, 1.2, 1.0, 0.7, 0.2),
];

fn at(s: &Scenario, (dprime, needle_sd, corr, p_read, p_guess): (f64, f64, f64, f64, f64)) -> Scenario {
    Scenario { dprime, needle_sd, layer_corr: (s.layer_corr * corr).min(1.0), p_read, p_guess, ..s.clone() }
}

#[test]
fn replay_counts_equal_the_materialising_path() {
    let (trials, seed) = (300, 17);
    let mut uncertain = 0;
    let mut compared = 0;
    for (name, s) in scenarios() {
        s.validate().unwrap_or_else(|e| panic!("{name}: {e}"));
        let replay = Replay::new(&s, trials, seed).unwrap();
        let mut seen = std::collections::BTreeSet::new();
        for theta in THETAS {
            let st = at(&s, theta);
            st.validate().unwrap();
            assert!(replay.applies(&st, trials, seed), "{name}: {theta:?}");
            let fast = replay.tally(&st).unwrap();
            let slow = simulate(&st, trials, seed, McPath::Materialise).unwrap();
            assert_eq!(
                (fast.trials, fast.successes, fast.attended),
                (slow.trials, slow.successes, slow.attended),
                "{name} at {theta:?}"
            );
            seen.insert(slow.successes);
            uncertain += (0 < slow.successes && slow.successes < trials) as u32;
            compared += 1;
        }
        // Another k is refused unless it has the same k_eff (then its counts are the same run's).
        let other = Scenario { index_topk: s.index_topk + 1, ..s.clone() };
        let same_k_eff = dsa_sim::geometry::Geometry::new(&other).k_eff == dsa_sim::geometry::Geometry::new(&s).k_eff;
        match replay.tally(&other) {
            None => assert!(!same_k_eff, "{name}"),
            Some(t) => {
                assert!(same_k_eff, "{name}");
                assert_eq!(
                    t.successes,
                    simulate(&other, trials, seed, McPath::Materialise).unwrap().successes,
                    "{name}"
                );
            }
        }
        // A scenario whose draws differ is refused.
        assert!(replay.tally(&Scenario { context_len: s.context_len + 4, ..s.clone() }).is_none());
        assert!(!replay.applies(&s, trials + 1, seed) && !replay.applies(&s, trials, seed + 1));
        // The parameters move the counts wherever the needle's scores matter.
        let fixed =
            name.contains("window") || name.contains("sink") || name.contains("k ≥ N") || name.contains("no entry");
        assert!(
            fixed || seen.len() >= 2,
            "{name}: counts {seen:?} barely depend on the parameters: the comparison is weak"
        );
    }
    assert!(uncertain * 2 > compared, "only {uncertain} of {compared} comparisons have both hits and misses");
}

/// Trials across several parallel chunks (2048 trials each) and thread counts: the records are
/// per trial, so the chunking and the schedule change nothing.
#[test]
fn replay_is_identical_across_chunks_and_threads() {
    let s = Scenario {
        context_len: 1200,
        pooling: Pooling::Mean,
        needle_tokens: 2,
        ..Scenario::preset("deepseek-v4-flash").unwrap().one_layer()
    };
    let s = Scenario { index_topk: 100, ..s };
    let (trials, seed) = (2 * 2048 + 37, 5);
    let run = |threads: usize| {
        let pool = rayon::ThreadPoolBuilder::new().num_threads(threads).build().unwrap();
        pool.install(|| {
            let replay = Replay::new(&s, trials, seed).unwrap();
            THETAS.iter().map(|&t| replay.tally(&at(&s, t)).unwrap().successes).collect::<Vec<_>>()
        })
    };
    let one = run(1);
    assert_eq!(one, run(3));
    let slow: Vec<u64> =
        THETAS.iter().map(|&t| simulate(&at(&s, t), trials, seed, McPath::Materialise).unwrap().successes).collect();
    assert_eq!(one, slow);
}

/// The replay key: every field that can change a draw or the geometry changes it; the needle
/// parameters and the readout (which change no draw) do not. Walks the whole field table, so a
/// field added later is checked too (and lands in the key unless it is listed here).
#[test]
fn replay_key_keeps_every_field_that_changes_a_draw() {
    let neutral = [Field::Dprime, Field::NeedleSd, Field::PRead, Field::PGuess, Field::DilutedRead, Field::Readout];
    let base = Scenario {
        context_len: 3000,
        pooling: Pooling::Mean,
        layers: 2,
        ..Scenario::preset("deepseek-v4-flash").unwrap().one_layer()
    };
    let candidates = [
        "0.3",
        "0.7",
        "2",
        "3",
        "7",
        "true",
        "false",
        "gumbel",
        "max",
        "adjacent",
        "all",
        "vector",
        "bf16",
        "mean",
        "1000",
        "64",
        "fixed",
        "first",
        "sglang-v2",
        "csa:3,hca:2",
    ];
    for &f in Field::ALL {
        let mut changed = None;
        // A stack counts the selecting layers itself (layers must stay 1).
        let base = if f == Field::Stack { Scenario { layers: 1, ..base.clone() } } else { base.clone() };
        for text in candidates {
            let mut s = base.clone();
            if s.set_text(f, text).is_ok() && s.get(f) != base.get(f) && s.validate().is_ok() {
                changed = Some(s);
                break;
            }
        }
        let s = changed.unwrap_or_else(|| panic!("no other valid value found for {f:?}"));
        let same = replay_key(&s) == replay_key(&base);
        assert_eq!(same, neutral.contains(&f), "{f:?}: key {}", if same { "unchanged" } else { "changed" });
    }
    // layer_corr enters only as whether it is 0.
    let corr = |c: f64| replay_key(&Scenario { layer_corr: c, ..base.clone() });
    assert_eq!(corr(0.2), corr(0.9));
    assert_ne!(corr(0.0), corr(0.2));
}

/// The engine model calibration, the verdict and the plan evaluate: on materialising scenarios
/// its recall is the materialising run's, whether it replays (one replay per row scenario,
/// reused across needle parameters), evicts (a budget of one replay) or never replays (budget
/// 0).
#[test]
fn engine_model_recall_is_the_materialising_run_with_or_without_replays() {
    use dsa_sim::engine::{simulate_successes, EngineChoice, EngineModel, RecallModel};
    let (trials, seed) = (400, 3);
    let rows: Vec<Scenario> =
        scenarios().into_iter().map(|(_, s)| s).filter(dsa_sim::engine::montecarlo::materialises).take(8).collect();
    assert_eq!(rows.len(), 8);
    let one = Replay::values(&rows[0], trials).unwrap();
    for (budget, built) in [(u64::MAX, Some(rows.len() as u64)), (one, None), (0, Some(0))] {
        let model = EngineModel::new(EngineChoice::Auto, trials, seed).with_replay_budget(budget);
        for theta in THETAS {
            for s in &rows {
                let st = at(s, theta);
                let want = simulate_successes(&st, trials, seed).unwrap() as f64 / trials as f64;
                assert_eq!(model.recall(&st).unwrap(), want, "budget {budget}: {st:?}");
            }
        }
        if let Some(built) = built {
            assert_eq!(model.replays_built(), built, "budget {budget}");
        } else {
            // Evicting: every row's replay is rebuilt when it comes round again.
            assert!(model.replays_built() > rows.len() as u64, "budget {budget}: {}", model.replays_built());
        }
        assert_eq!(model.counts().0, 0);
    }
}

/// Where the laws have a closed form, calibration takes the exact engines and never the replay:
/// `auto` is analytic (no Monte Carlo evaluation at all), `montecarlo` samples exactly (the
/// recall of `McPath::Exact`). Without a closed form (mean pooling of overlapping blocks) the
/// fit replays, one replay per distinct row, and its result is the materialising fit's.
#[test]
fn calibration_uses_the_exact_path_where_it_applies_and_replays_elsewhere() {
    use dsa_sim::calibrate::{calibrate, load_csv, parse_fit_spec};
    use dsa_sim::engine::{EngineChoice, EngineModel, RecallModel};
    let data =
        load_csv(std::path::Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/experiments/dsv4_seed_observations.csv")))
            .unwrap();
    let v4 = Scenario { context_len: 16000, ..Scenario::preset("deepseek-v4-flash").unwrap().one_layer() };
    let fit = |model: &EngineModel, base: &Scenario| {
        let free = parse_fit_spec("dprime", Some(&data)).unwrap();
        calibrate(&data, base, free, model, false, false).unwrap()
    };

    // Overlap with pooling none: closed form.
    let auto = EngineModel::new(EngineChoice::Auto, 300, 9);
    fit(&auto, &v4);
    assert_eq!((auto.counts().1, auto.replays_built()), (0, 0), "auto on a closed form must stay analytic");
    assert!(auto.counts().0 > 0);
    let mc = EngineModel::new(EngineChoice::MonteCarlo, 300, 9);
    fit(&mc, &v4);
    assert!(mc.counts().1 > 0);
    assert_eq!((mc.counts().0, mc.replays_built()), (0, 0), "montecarlo on a closed form must sample exactly");
    for row in &data.rows {
        let s = row.apply(&Scenario { dprime: 1.3, ..v4.clone() }).unwrap();
        assert!(!dsa_sim::engine::montecarlo::materialises(&s));
        let exact = simulate(&s, 300, 9, McPath::Exact).unwrap().successes as f64 / 300.0;
        assert_eq!(mc.recall(&s).unwrap(), exact);
    }

    // Mean pooling of overlapping blocks: materialising, replayed.
    let mean = Scenario { pooling: Pooling::Mean, ..v4.clone() };
    let replayed = EngineModel::new(EngineChoice::Auto, 200, 9);
    let materialised = EngineModel::new(EngineChoice::Auto, 200, 9).with_replay_budget(0);
    let (a, b) = (fit(&replayed, &mean), fit(&materialised, &mean));
    assert_eq!(a, b);
    assert_eq!(replayed.replays_built(), data.groups().first_row.len() as u64);
    assert_eq!(materialised.replays_built(), 0);
}

/// When replays are built changes only the time: a fit over a distractor field (a new
/// `hard_mean` at every evaluation) stops building them after the first went unused, a scenario
/// asked for again is then replayed from its second request, and every recall is the
/// materialising run's throughout.
#[test]
fn replays_are_not_built_for_scenarios_asked_for_once() {
    use dsa_sim::engine::{simulate_successes, EngineChoice, EngineModel, RecallModel};
    let (trials, seed) = (200, 4);
    let s = Scenario {
        context_len: 3000,
        pooling: Pooling::Mean,
        hard_negatives: 20.0,
        ..Scenario::preset("deepseek-v4-flash").unwrap().one_layer()
    };
    let model = EngineModel::new(EngineChoice::Auto, trials, seed);
    let check = |s: &Scenario| {
        let want = simulate_successes(s, trials, seed).unwrap() as f64 / trials as f64;
        assert_eq!(model.recall(s).unwrap(), want, "{s:?}");
    };
    for i in 0..12 {
        check(&Scenario { hard_mean: 0.5 + 0.25 * i as f64, ..s.clone() });
    }
    assert_eq!(model.replays_built(), 1, "one replay before the family was seen to vary");
    // The same distractors at other needle parameters: built at the second request, then reused.
    for dprime in [1.0, 2.0, 3.0, 4.0] {
        check(&Scenario { hard_mean: 1.0, dprime, ..s.clone() });
    }
    assert_eq!(model.replays_built(), 2);
    // Reuse turned the family back: a new scenario of it is replayed from its first request.
    for dprime in [1.0, 2.0] {
        check(&Scenario { hard_mean: 7.0, dprime, ..s.clone() });
    }
    assert_eq!(model.replays_built(), 3);
}

/// A replay kept for several k answers each of them with the materialising run's counts at that
/// k, exactly (k beyond the candidates, k below the kernel's floor and k sharing one k_eff
/// included), and refuses a k it did not keep.
#[test]
fn a_replay_kept_for_several_k_is_the_run_at_each() {
    let (trials, seed) = (300, 23);
    let v4 = Scenario {
        context_len: 3000,
        pooling: Pooling::Mean,
        ..Scenario::preset("deepseek-v4-flash").unwrap().one_layer()
    };
    let cases = [
        ("v4 mean overlap", v4.clone()),
        (
            "3 layers, shared, at least 2",
            Scenario { layers: 3, layer_corr: 0.5, readout: Readout::AtLeast(2), ..v4.clone() },
        ),
        ("max pooling with noise", Scenario { pooling: Pooling::Max, score_noise: 0.4, ..v4.clone() }),
        ("unpooled gumbel", Scenario { pooling: Pooling::None, distractor: Distractor::Gumbel, ..v4.clone() }),
    ];
    // 750 candidates: 2000 and 5000 share k_eff 750.
    let topks = [512u64, 64, 2000, 1, 200, 5000];
    for (name, s) in cases {
        let replay = Replay::for_topks(&s, &topks, trials, seed).unwrap();
        assert_eq!(replay.k_effs().len(), 5, "{name}: {:?}", replay.k_effs());
        assert_eq!(Replay::values_for_topks(&s, &topks, trials).unwrap(), replay.len() as u64, "{name}");
        for &k in &topks {
            for theta in [THETAS[0], THETAS[2], THETAS[6]] {
                let st = at(&Scenario { index_topk: k, ..s.clone() }, theta);
                assert!(replay.applies(&st, trials, seed), "{name} k {k}");
                let fast = replay.tally(&st).unwrap();
                let slow = simulate(&st, trials, seed, McPath::Materialise).unwrap();
                assert_eq!((fast.successes, fast.attended), (slow.successes, slow.attended), "{name} k {k} {theta:?}");
            }
        }
        assert!(replay.tally(&Scenario { index_topk: 300, ..s.clone() }).is_none(), "{name}: k 300 was not kept");
        assert!(replay.tally(&Scenario { context_len: 3001, ..s.clone() }).is_none(), "{name}: another length");
    }
}

/// A model told which (length, k) it will be asked for keeps one replay per length for all of
/// them: the same recalls as a model that was not told (and as the materialising runs), from
/// fewer replays.
#[test]
fn a_model_expecting_several_k_replays_each_length_once() {
    use dsa_sim::engine::{simulate_successes, EngineChoice, EngineModel, RecallModel};
    let (trials, seed) = (200, 6);
    let v4 = Scenario { pooling: Pooling::Mean, ..Scenario::preset("deepseek-v4-flash").unwrap().one_layer() };
    let rows: Vec<(u64, u64)> = vec![(2000, 64), (2000, 256), (3000, 64), (3000, 128), (3000, 512)];
    let told =
        EngineModel::new(EngineChoice::Auto, trials, seed).expecting_topks(rows.iter().copied().chain([(9999, 7)]));
    let plain = EngineModel::new(EngineChoice::Auto, trials, seed);
    for dprime in [1.0, 2.5] {
        for &(context_len, index_topk) in &rows {
            let s = Scenario { context_len, index_topk, dprime, ..v4.clone() };
            let want = simulate_successes(&s, trials, seed).unwrap() as f64 / trials as f64;
            assert_eq!(told.recall(&s).unwrap(), want, "{s:?}");
            assert_eq!(plain.recall(&s).unwrap(), want, "{s:?}");
        }
    }
    assert_eq!(told.replays_built(), 2, "one replay per length");
    assert_eq!(plain.replays_built(), rows.len() as u64);
}

/// The model's k-curve answers every k with the run at that k, and a second curve of the same
/// scenario (the verdict asks for one several times) reuses the first one's rank record; another
/// needle value is another record.
#[test]
fn k_curves_of_one_scenario_share_a_rank_record() {
    use dsa_sim::engine::{simulate_successes, EngineChoice, EngineModel, RecallModel};
    let (trials, seed) = (300, 8);
    let s = Scenario {
        context_len: 3000,
        pooling: Pooling::Mean,
        layers: 2,
        layer_corr: 0.4,
        ..Scenario::preset("deepseek-v4-flash").unwrap().one_layer()
    };
    let model = EngineModel::new(EngineChoice::Auto, trials, seed);
    for (dprime, built) in [(1.5, 1), (1.5, 1), (2.5, 2)] {
        let s = Scenario { dprime, ..s.clone() };
        let curve = model.recall_in_k(&s).unwrap();
        for k in [1u64, 100, 512, 749, 750, 4000] {
            let want = simulate_successes(&Scenario { index_topk: k, ..s.clone() }, trials, seed).unwrap() as f64
                / trials as f64;
            assert_eq!(curve(k).unwrap(), want, "dprime {dprime} k {k}");
        }
        assert_eq!(model.rank_records_built(), built, "dprime {dprime}");
    }
}

/// A model told which scenarios' k-curves come next (the verdict at an estimate and at its
/// region's points, which differ in the needle's parameters) records them in one run: every
/// curve answers every k with the run at that k, and asking builds nothing more.
#[test]
fn k_curves_told_together_share_one_run() {
    use dsa_sim::engine::{simulate_successes, EngineChoice, EngineModel, RecallModel};
    let (trials, seed) = (300, 8);
    let base = Scenario {
        context_len: 3000,
        pooling: Pooling::Mean,
        layers: 2,
        layer_corr: 0.4,
        ..Scenario::preset("deepseek-v4-flash").unwrap().one_layer()
    };
    let ss: Vec<Scenario> = [(1.5, 1.0, 0.4), (0.5, 1.0, 0.4), (2.5, 1.3, 0.7)]
        .iter()
        .map(|&(dprime, needle_sd, layer_corr)| Scenario { dprime, needle_sd, layer_corr, ..base.clone() })
        .collect();
    let model = EngineModel::new(EngineChoice::Auto, trials, seed);
    model.expect_k_curves(&ss);
    assert_eq!(model.rank_records_built(), 1, "one run for the three needles");
    for s in &ss {
        let curve = model.recall_in_k(s).unwrap();
        for k in [1u64, 100, 512, 749, 750, 4000] {
            let want = simulate_successes(&Scenario { index_topk: k, ..s.clone() }, trials, seed).unwrap() as f64
                / trials as f64;
            assert_eq!(curve(k).unwrap(), want, "{s:?} k {k}");
        }
    }
    assert_eq!(model.rank_records_built(), 1, "the curves built no record of their own");
    // Told again, or of one scenario alone, it runs nothing.
    model.expect_k_curves(&ss);
    model.expect_k_curves(&[Scenario { dprime: 3.0, ..base.clone() }]);
    assert_eq!(model.rank_records_built(), 1);
}
