//! The vector model on a CUDA device gives the CPU build's trials (`--features cuda`; on a
//! machine without a GPU every test here says so and passes, as CI has none).
//!
//! - **Equivalence** (issue 43's criterion): 2,000 trials of DeepSeek-V4-Flash at 128K tokens,
//!   8 selecting layers, every mechanism on, each layer's needle rank from the CPU build and
//!   from the GPU; ≥ 99.9 % of trials must agree in every layer. The report is printed and, with
//!   `DSA_SIM_EQUIVALENCE_OUT=FILE`, written to FILE (docs/benchmarks-gpu-equivalence.txt).
//! - **Each mechanism** switched on its own and in the V3.2 geometry, Quest, fixed weights, FP4
//!   and block-scaled formats, the token gate: ranks compared on fewer trials.
//! - **The shard rule**: `cuda:0`, `cuda:0,0` (two streams sharing the card, as two devices
//!   would) and the CPU give the same counts and rank histogram.
#![cfg(feature = "cuda")]

use dsa_sim::indexer::cuda::{device_count, equivalence};
use dsa_sim::indexer::device::Device;
use dsa_sim::progress::Silent;
use dsa_sim::Scenario;
use std::fmt::Write as _;

fn scenario(base: &str, fields: &[(&str, &str)]) -> Scenario {
    let mut s = Scenario::preset(base).unwrap();
    s.model = dsa_sim::scenario::Model::Vector;
    for (f, v) in fields {
        s.set_text(f.parse().unwrap(), v).unwrap();
    }
    s.validate().unwrap();
    s
}

fn gpu() -> bool {
    match device_count() {
        Ok(n) => n > 0,
        Err(why) => {
            eprintln!("no CUDA device here ({why}): not tested");
            false
        }
    }
}

#[test]
fn gpu_ranks_equal_the_cpu_ranks() {
    if !gpu() {
        return;
    }
    let mut report = String::new();
    let mut check = |name: &str, s: &Scenario, trials: u64, min_share: f64| {
        let t = std::time::Instant::now();
        let e = equivalence(s, trials, 20_251_201, 0).unwrap();
        let same = 1.0 - e.trials_differing as f64 / e.trials as f64;
        let _ = writeln!(
            report,
            "{name}: {} trials, {} layer ranks: {} trials differ ({} layer ranks); same ranks on {:.4} % of trials ({:.1} s){}",
            e.trials,
            e.layer_ranks,
            e.trials_differing,
            e.layer_ranks_differing,
            100.0 * same,
            t.elapsed().as_secs_f64(),
            if e.examples.is_empty() { String::new() } else { format!("; first: {:?}", e.examples) }
        );
        assert!(same >= min_share, "{name}: {e:?}");
    };
    // The criterion: 128K tokens, 8 selecting layers, 2,000 trials.
    check(
        "deepseek-v4-flash 128Ki, stack csa:8",
        &scenario("deepseek-v4-flash", &[("context_len", "128Ki"), ("stack", "csa:8")]),
        2000,
        0.999,
    );
    let one = |f: &[(&str, &str)]| {
        let mut v = vec![("context_len", "16Ki"), ("stack", "none"), ("hard_negatives", "8")];
        v.extend_from_slice(f);
        scenario("deepseek-v4-flash", &v)
    };
    for (name, s) in [
        ("v4 16Ki, every default mechanism, 8 hard negatives", one(&[])),
        ("+ token gate 1.5, key gain 0.5", one(&[("gate_token_sd", "1.5"), ("key_gain_sd", "0.5")])),
        (
            "fixed weights, no RoPE, no Hadamard, f32",
            one(&[
                ("head_weights", "fixed"),
                ("rope_dims", "0"),
                ("hadamard", "false"),
                ("q_format", "fp32"),
                ("k_format", "fp32"),
            ]),
        ),
        (
            "fp4 block-scaled q and k, 4 needle tokens",
            one(&[("q_format", "fp4-e2m1:32:ue8m0"), ("k_format", "nvfp4"), ("needle_tokens", "4")]),
        ),
        ("mean compressor, no overlap", one(&[("compressor", "mean"), ("overlap", "false")])),
        ("quest, c = 16", one(&[("compressor", "quest"), ("overlap", "false"), ("compress_ratio", "16")])),
        ("deepseek-v3.2 16Ki", scenario("deepseek-v3.2", &[("context_len", "16Ki"), ("stack", "none")])),
    ] {
        check(name, &s, 200, 0.99);
    }
    print!("{report}");
    if let Ok(path) = std::env::var("DSA_SIM_EQUIVALENCE_OUT") {
        std::fs::write(path, &report).unwrap();
    }
}

#[test]
fn two_streams_on_one_card_give_the_counts_of_one_device() {
    if !gpu() {
        return;
    }
    let s = scenario("deepseek-v4-flash", &[("context_len", "32Ki"), ("stack", "csa:4"), ("dprime", "2")]);
    let run = |d: &str| dsa_sim::indexer::simulate_on(&s, 96, 7, d.parse::<Device>().unwrap(), &Silent).unwrap();
    let one = run("cuda:0");
    let two = run("cuda:0,0");
    let three = run("cuda:0,0,0");
    assert_eq!(one, two);
    assert_eq!(one, three);
    // And the CPU's counts (the scores are the CPU's bit for bit).
    assert_eq!(one, run("cpu"));
    assert_eq!(one.trials, 96);
}
