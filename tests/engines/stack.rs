//! The layer stack: its exact limits, analytic against Monte Carlo, the vector model through it,
//! and the stack and top-k kernel as the CLI and scenario files take them.
//!
//! Limits (docs/model.md#layer-stack), with p₁ a selecting layer's own probability of selecting
//! the needle, n the selecting layers, d the diluted-read probability of each of h hca layers:
//! - ρ = 0: recall = 1 − (1 − p₁)^n (1 − d)^h;
//! - ρ = 1: the needle's score x is shared by every layer while distractors stay independent, so
//!   recall = 1 − E_x[(1 − B(x))^n] (1 − d)^h, B(x) = P[Bin(N − 1, Q(x)) ≤ k − 1], computed here
//!   by composite Simpson on a fine grid, independently of the engine's adaptive quadrature.

use dsa_sim::engine::analytic::Analytic;
use dsa_sim::engine::montecarlo::{simulate, McPath};
use dsa_sim::indexer;
use dsa_sim::scenario::{Field, Readout, Scenario, Stack, TopkKernel};
use dsa_sim::stats::{binom_cdf, ln_norm_pdf, norm_cdf};
use statrs::distribution::{Binomial, DiscreteCDF};
use std::process::Command;

/// Exact two-sided binomial p-value threshold: a seeded far-tail test (as tests/engines/cross_engine.rs).
const P_FAR: f64 = 1e-9;

fn p_value(successes: u64, trials: u64, p: f64) -> f64 {
    let b = Binomial::new(p.clamp(0.0, 1.0), trials).unwrap();
    let lower = b.cdf(successes);
    let upper = if successes == 0 { 1.0 } else { b.sf(successes - 1) };
    (2.0 * lower.min(upper)).min(1.0)
}

fn with_stack(s: &Scenario, text: &str) -> Scenario {
    let mut s = s.clone();
    s.set_text(Field::Stack, text).unwrap();
    s.validate().unwrap();
    s
}

fn base() -> Scenario {
    Scenario { context_len: 32_768, index_topk: 256, dprime: 2.2, needle_sd: 0.8, ..Scenario::default() }
}

#[test]
fn independent_layers_multiply_their_misses() {
    let one = Analytic::new(&base()).unwrap().recall();
    assert!(one > 0.2 && one < 0.8, "a layer that misses often enough to test: {one}");
    for (stack, n, h, d) in [
        ("csa:1", 1, 0, 0.0),
        ("csa:21", 21, 0, 0.0),
        ("csa:5,hca:3", 5, 3, 0.1),
        ("csa:21,hca:20,swa:2", 21, 20, 0.02),
    ] {
        let s = Scenario { diluted_read: d, ..with_stack(&base(), stack) };
        let want = 1.0 - (1.0 - one).powi(n) * (1.0 - d).powi(h);
        let got = Analytic::new(&s).unwrap().recall();
        assert!((got - want).abs() < 1e-9, "{stack} d={d}: {got} vs {want}");
    }
    // Without a diluted read the hca and swa layers change nothing.
    let a = Analytic::new(&with_stack(&base(), "csa:4,hca:9,swa:2")).unwrap().recall();
    let b = Analytic::new(&Scenario { layers: 4, ..base() }).unwrap().recall();
    assert_eq!(a, b);
}

/// 1 − E_x[(1 − B(x))^n] for x ~ Normal(mu, sd²), by composite Simpson over mu ± 12 sd.
fn shared_limit(s: &Scenario, n: i32) -> f64 {
    let big_n = s.n_candidates();
    let k = s.index_topk.min(big_n);
    let b = |x: f64| binom_cdf(big_n - 1, k - 1, 1.0 - norm_cdf(x));
    let (lo, hi, m) = (s.dprime - 12.0 * s.needle_sd, s.dprime + 12.0 * s.needle_sd, 20_000);
    let h = (hi - lo) / m as f64;
    let f = |x: f64| {
        let z = (x - s.dprime) / s.needle_sd;
        ln_norm_pdf(z).exp() / s.needle_sd * (1.0 - b(x)).powi(n)
    };
    let mut acc = f(lo) + f(hi);
    for i in 1..m {
        acc += f(lo + i as f64 * h) * if i % 2 == 1 { 4.0 } else { 2.0 };
    }
    1.0 - acc * h / 3.0
}

#[test]
fn fully_shared_needle_is_one_integral_over_the_stack() {
    for (stack, n, h, d) in [("csa:21", 21, 0, 0.0), ("csa:7,hca:4,swa:2", 7, 4, 0.05)] {
        let s = Scenario { layer_corr: 1.0, diluted_read: d, ..with_stack(&base(), stack) };
        let want = 1.0 - (1.0 - shared_limit(&s, n)) * (1.0 - d).powi(h);
        let got = Analytic::new(&s).unwrap().recall();
        assert!((got - want).abs() < 1e-6, "{stack}: {got} vs {want}");
    }
    // A fully shared needle makes 21 layers little better than one.
    let one = Analytic::new(&Scenario { layer_corr: 1.0, ..base() }).unwrap().recall();
    let many = Analytic::new(&Scenario { layer_corr: 1.0, ..with_stack(&base(), "csa:21") }).unwrap().recall();
    let independent = Analytic::new(&with_stack(&base(), "csa:21")).unwrap().recall();
    assert!(many > one && many < independent - 0.05, "one {one}, shared {many}, independent {independent}");
}

#[test]
fn analytic_stack_agrees_with_monte_carlo() {
    let cases = [
        ("csa:5,hca:3", 0.5, 0.1, 0.9, 0.05, Readout::Any),
        ("csa:21,hca:20,swa:2", 0.7, 0.01, 1.0, 0.0, Readout::Any),
        ("csa:6,dense:2", 0.3, 0.2, 1.0, 0.0, Readout::AtLeast(3)),
        ("csa:4,hca:2", 0.0, 0.3, 0.8, 0.1, Readout::All),
    ];
    for (i, (stack, rho, d, p_read, p_guess, readout)) in cases.into_iter().enumerate() {
        let s = Scenario {
            layer_corr: rho,
            diluted_read: d,
            p_read,
            p_guess,
            readout,
            dprime: 1.6,
            ..with_stack(&base(), stack)
        };
        s.validate().unwrap();
        let want = Analytic::new(&s).unwrap().recall();
        for path in [McPath::Exact, McPath::Materialise] {
            let trials = if path == McPath::Exact { 40_000 } else { 3_000 };
            let small = if path == McPath::Exact {
                s.clone()
            } else {
                Scenario { context_len: 4096, index_topk: 64, ..s.clone() }
            };
            let want = if path == McPath::Exact { want } else { Analytic::new(&small).unwrap().recall() };
            let run = simulate(&small, trials, 500 + i as u64, path).unwrap();
            let pv = p_value(run.successes, run.trials, want);
            assert!(
                pv >= P_FAR,
                "{stack} {path:?}: analytic {want:.6} vs {}/{} (p {pv:.1e})",
                run.successes,
                run.trials
            );
        }
    }
}

#[test]
fn non_selecting_windows_deliver_what_they_hold() {
    // The needle at the very end: outside the selecting layers' (zero) window, inside the swa
    // layer's own window of 64 → always delivered.
    let s = Scenario { depth: 1.0, dprime: -4.0, window: 0, ..base() };
    assert!(Analytic::new(&s).unwrap().recall() < 0.01);
    let swa = with_stack(&s, "csa:2,swa:1:window=64");
    assert_eq!(Analytic::new(&swa).unwrap().recall(), 1.0);
    let run = simulate(&swa, 2000, 3, McPath::Exact).unwrap();
    assert_eq!(run.successes, 2000);
    // Far from the end the swa window holds nothing; hca reads it with the diluted probability.
    let mid = Scenario { depth: 0.5, ..swa.clone() };
    assert!(Analytic::new(&mid).unwrap().recall() < 0.01);
    let hca = Scenario { diluted_read: 0.25, ..with_stack(&mid, "csa:2,hca:2") };
    let sel = Analytic::new(&Scenario { layers: 2, ..mid.clone() }).unwrap().recall();
    let want = 1.0 - (1.0 - sel) * 0.75 * 0.75;
    assert!((Analytic::new(&hca).unwrap().recall() - want).abs() < 1e-12);
}

#[test]
fn the_vector_model_runs_the_selecting_layers() {
    // hca and swa layers run no indexer: the stack's trials are those of its csa layers alone,
    // draw for draw.
    let s = Scenario {
        model: dsa_sim::scenario::Model::Vector,
        context_len: 8192,
        index_topk: 64,
        ..Scenario::preset("deepseek-v4-flash").unwrap()
    };
    let stacked = with_stack(&s, "csa:3,hca:2,swa:2");
    let plain = Scenario { layers: 3, ..with_stack(&s, "none") };
    let a = indexer::simulate(&stacked, 24, 9);
    let b = indexer::simulate(&plain, 24, 9);
    assert_eq!((a.successes, a.attended), (b.successes, b.attended));
    assert_eq!(a.ranks, b.ranks);
}

#[test]
fn scenario_checks_name_the_conflict() {
    let mut s = with_stack(&base(), "csa:21,hca:20");
    s.layers = 3;
    let e = s.validate().unwrap_err().to_string();
    assert!(e.contains("layers = 3") && e.contains("stack"), "{e}");
    let e = Scenario::from_toml_str("stack = \"dsa:61\"\ncompress_ratio = 4").unwrap_err().to_string();
    assert!(e.contains("dsa") && e.contains("compress_ratio must be 1"), "{e}");
    let e = Scenario::from_toml_str("stack = \"csa:2,dsa:2\"").unwrap_err().to_string();
    assert!(e.contains("csa and dsa"), "{e}");
    let e = Scenario::from_toml_str("stack = \"csa:2\"\nreadout = \"at_least:3\"").unwrap_err().to_string();
    assert!(e.contains("selecting layers (2)"), "{e}");
    let s = Scenario::from_toml_str(
        "stack = [{ type = \"csa\", count = 21 }, { type = \"hca\", count = 20 }, { type = \"swa\", count = 2 }]",
    )
    .unwrap();
    assert_eq!(s.stack, "csa:21,hca:20,swa:2".parse::<Stack>().unwrap());
    assert_eq!(s.selecting_layers(), 21);
    let back = Scenario::from_toml_str(&s.to_toml_string()).unwrap();
    assert_eq!(back, s);
    assert!(s.to_toml_string().contains("type = \"hca\""), "{}", s.to_toml_string());
    assert_eq!(Scenario::from_json_str(&serde_json::to_string(&s).unwrap()).unwrap(), s);
}

#[test]
fn the_kernel_fixes_the_largest_k() {
    let mut s = Scenario::default();
    s.set_text(Field::TopkKernel, "sglang-v1").unwrap();
    assert_eq!((s.topk_kernel, s.max_topk), (TopkKernel::SglangV1, 1024));
    s.validate().unwrap();
    s.set_text(Field::TopkKernel, "aiter").unwrap();
    assert_eq!(s.max_topk, 2048);
    assert!(TopkKernel::SglangV1.supports(512) && !TopkKernel::SglangV1.supports(2048));
    assert!(TopkKernel::SglangV2.supports(1536) && !TopkKernel::SglangV2.supports(4096));
    s.max_topk = 4096;
    let e = s.validate().unwrap_err().to_string();
    assert!(e.contains("aiter") && e.contains("2048"), "{e}");
    s.set_text(Field::TopkKernel, "any").unwrap();
    s.validate().unwrap();
    assert_eq!(s.max_topk, 4096, "any keeps the maximum given");
}

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_dsa-sim"))
}

#[test]
fn the_cli_takes_a_stack_flag_and_prints_it() {
    let out = bin()
        .args(["recall", "--context-len", "32768", "--index-topk", "256", "--dprime", "2.2", "--needle-sd", "0.8"])
        .args(["--stack", "csa:5,hca:3", "--diluted-read", "0.1", "--json"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let one = Analytic::new(&base()).unwrap().recall();
    let want = 1.0 - (1.0 - one).powi(5) * 0.9f64.powi(3);
    assert!((v["recall"].as_f64().unwrap() - want).abs() < 1e-9, "{v}");
    assert_eq!(v["scenario"]["stack"], serde_json::json!([{"type": "csa", "count": 5}, {"type": "hca", "count": 3}]));
    for bad in ["csa:0", "hca:2", "csa:2:index_topk=5", "xyz:1"] {
        let out = bin().args(["recall", "--stack", bad]).output().unwrap();
        assert_eq!(out.status.code(), Some(2), "{bad}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(err.trim_end().lines().count(), 1, "{bad}: {err}");
        assert!(err.contains("stack"), "{bad}: {err}");
    }
}
