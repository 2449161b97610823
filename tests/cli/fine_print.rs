//! The scalar model's fine print (docs/model.md), each rule pinned through the command line by
//! an observable that only the documented rule produces: where adjacent copies of a repeated
//! needle start, what `rank` reports, how a hard-negative fraction becomes a count, which way
//! the Gumbel law is oriented, and that a needle in the incomplete tail block is in no entry.

use std::process::Command;

fn dsa(args: &[&str]) -> serde_json::Value {
    let o = Command::new(env!("CARGO_BIN_EXE_dsa-sim")).args(args).output().unwrap();
    assert!(o.status.success(), "{args:?}: {}", String::from_utf8_lossy(&o.stderr));
    serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("{args:?}: {e}"))
}

fn text(args: &[&str]) -> String {
    let o = Command::new(env!("CARGO_BIN_EXE_dsa-sim")).args(args).output().unwrap();
    assert!(o.status.success(), "{args:?}: {}", String::from_utf8_lossy(&o.stderr));
    String::from_utf8(o.stdout).unwrap()
}

fn recall(args: &[&str]) -> f64 {
    let mut a = vec!["recall", "--json", "--engine", "analytic"];
    a.extend_from_slice(args);
    dsa(&a)["recall"].as_f64().unwrap()
}

/// The median rank (`rank --json` quantile 0.5), None when never selectable.
fn median_rank(args: &[&str]) -> Option<u64> {
    let mut a = vec!["rank", "--json", "--engine", "analytic"];
    a.extend_from_slice(args);
    dsa(&a)["quantiles"]["0.5"].as_u64()
}

#[test]
fn adjacent_copies_start_at_floor_depth_times_l_minus_r_m() {
    // L = 1000, m = 10, r = 3, depth 0.5: p = floor(0.5 · 970) = 485, the last copy's last token
    // 514. A window of W positions holds tokens L − W + 1 .. L − 1: W = 486 starts at 515 (the
    // needle is outside it), W = 487 at 514 (its last token is inside). A needle at dprime −1000
    // is never selected, so recall is 0 or 1 by the window alone. The single-copy rule
    // floor(0.5 · 990) = 495 would put the last token at 524, inside both windows.
    let base = [
        "--context-len",
        "1000",
        "--needle-tokens",
        "10",
        "--repeat",
        "3",
        "--repeat-layout",
        "adjacent",
        "--depth",
        "0.5",
        "--dprime",
        "-1000",
        "--index-topk",
        "1",
    ];
    let at = |w: &str| {
        let mut a = base.to_vec();
        a.extend(["--window", w]);
        recall(&a)
    };
    assert!(at("486") < 1e-12);
    assert_eq!(at("487"), 1.0);
    // The first copy starts at 485: a sink of 485 tokens (0..484) misses it, 486 holds token 485.
    let sink = |s: &str| {
        let mut a = base.to_vec();
        a.extend(["--sink", s]);
        recall(&a)
    };
    assert!(sink("485") < 1e-12);
    assert_eq!(sink("486"), 1.0);
    // Spread ignores depth: the last copy starts at floor(2.5/3 · 990) = 825 (tokens 825..834).
    let spread = |w: &str, depth: &str| {
        recall(&[
            "--context-len",
            "1000",
            "--needle-tokens",
            "10",
            "--repeat",
            "3",
            "--depth",
            depth,
            "--dprime",
            "-1000",
            "--index-topk",
            "1",
            "--window",
            w,
        ])
    };
    // W = 166 holds 835..999 (misses), W = 167 holds 834.. (the last token).
    for depth in ["0", "0.5", "1"] {
        assert!(spread("166", depth) < 1e-12, "depth {depth}");
        assert_eq!(spread("167", depth), 1.0, "depth {depth}");
    }
}

#[test]
fn rank_is_the_first_selecting_layers_and_leaves_out_window_sink_and_reading() {
    let base =
        ["--context-len", "65536", "--compress-ratio", "4", "--index-topk", "512", "--dprime", "2", "--depth", "1"];
    let json = |extra: &[&str]| {
        let mut a = vec!["rank", "--json"];
        a.extend_from_slice(&base);
        a.extend_from_slice(extra);
        dsa(&a)
    };
    let plain = json(&[]);
    assert_eq!(plain["layer"], 0);
    assert_eq!(plain["selecting_layers"], 1);
    assert_eq!(plain["not_in_rank"], serde_json::json!(["window", "sink", "p_read", "p_guess", "readout"]));
    // The needle at depth 1 sits in a 128-token window: recall becomes p_read, the rank does not move.
    for extra in [
        &["--window", "128"][..],
        &["--p-read", "0.5", "--p-guess", "0.2"],
        &["--window", "128", "--p-read", "0.7"],
        &["--readout", "all"],
    ] {
        assert_eq!(json(extra)["cdf"], plain["cdf"], "{extra:?}");
        assert_eq!(json(extra)["quantiles"], plain["quantiles"], "{extra:?}");
    }
    let mut a = vec!["--window", "128", "--p-read", "0.7"];
    a.extend_from_slice(&base);
    assert!((recall(&a) - 0.7).abs() < 1e-12);
    // A needle at depth 0 in a one-token sink: the same rank as without the sink.
    let front = |extra: &[&str]| {
        let mut a = vec![
            "rank",
            "--json",
            "--context-len",
            "65536",
            "--compress-ratio",
            "4",
            "--index-topk",
            "512",
            "--dprime",
            "2",
            "--depth",
            "0",
        ];
        a.extend_from_slice(extra);
        dsa(&a)
    };
    assert_eq!(front(&["--sink", "1"])["cdf"], front(&[])["cdf"]);
    let mut a = vec!["--sink", "1"];
    a.extend_from_slice(&base[..8]);
    a.extend(["--depth", "0"]);
    assert_eq!(recall(&a), 1.0);
    // 21 selecting layers sharing the needle's difficulty: the rank is still one layer's, the one
    // `--layers 1` gives, and the output names the layer it reports.
    let many = json(&["--layers", "21", "--layer-corr", "0.6", "--readout", "all"]);
    assert_eq!(many["selecting_layers"], 21);
    assert_eq!(many["layer"], 0);
    let one = json(&["--layer-corr", "0.6"]);
    let close = |a: &serde_json::Value, b: &serde_json::Value| {
        a.as_array()
            .unwrap()
            .iter()
            .zip(b.as_array().unwrap())
            .all(|(x, y)| x[0] == y[0] && (x[1].as_f64().unwrap() - y[1].as_f64().unwrap()).abs() < 2e-6)
    };
    assert!(close(&many["cdf"], &one["cdf"]), "{}\n{}", many["cdf"], one["cdf"]);
    let mut a = vec!["rank"];
    a.extend_from_slice(&base);
    a.extend(["--layers", "21"]);
    let t = text(&a);
    let second = t.lines().nth(1).unwrap();
    assert_eq!(second, "  in the first of 21 selecting layers; the window, sink, p_read, p_guess and readout do not enter the rank (recall adds them)");
    let mut a = vec!["rank"];
    a.extend_from_slice(&base);
    assert!(text(&a).lines().nth(1).unwrap().starts_with("  in the one selecting layer; the window, sink"));
}

#[test]
fn a_hard_negative_fraction_rounds_half_away_from_zero_then_clamps() {
    // Hard negatives at Normal(1000, 1), the needle at Normal(500, 1), the other distractors
    // Normal(0, 1): the needle ranks exactly 1 + (hard negatives), every time.
    let rank = |l: &str, h: &str| {
        median_rank(&[
            "--context-len",
            l,
            "--hard-negatives",
            h,
            "--hard-mean",
            "1000",
            "--dprime",
            "500",
            "--index-topk",
            "1",
        ])
    };
    assert_eq!(rank("1001", "0.5"), Some(502), "round(0.5 · 1001 = 500.5) = 501");
    assert_eq!(rank("1000", "0.25"), Some(251));
    assert_eq!(rank("1000", "0.0004"), Some(1), "round(0.4) = 0");
    assert_eq!(rank("1000", "0.0015"), Some(3), "round(1.5) = 2");
    assert_eq!(rank("1000", "0.3337"), Some(335), "round(333.7) = 334");
    assert_eq!(rank("1000", "5000"), Some(1000), "clamped to the 999 distractor entries");
    assert_eq!(rank("1000", "7"), Some(8));
    let o = Command::new(env!("CARGO_BIN_EXE_dsa-sim")).args(["recall", "--hard-negatives", "2.5"]).output().unwrap();
    assert_eq!(o.status.code(), Some(2));
}

/// ∫ φ(y) F(y) dy by composite Simpson over [−12, 12]: the documented Gumbel CDF, integrated here.
fn needle_beats_one_gumbel(dprime: f64) -> f64 {
    let beta = 6f64.sqrt() / std::f64::consts::PI;
    let mu = -0.577_215_664_901_532_9 * beta;
    let cdf = |x: f64| (-(-(x - mu) / beta).exp()).exp();
    let phi = |y: f64| (-(y - dprime) * (y - dprime) / 2.0).exp() / (2.0 * std::f64::consts::PI).sqrt();
    let (a, b, n) = (dprime - 12.0, dprime + 12.0, 20_000);
    let h = (b - a) / n as f64;
    (0..=n)
        .map(|i| {
            let y = a + i as f64 * h;
            let w = if i == 0 || i == n {
                1.0
            } else if i % 2 == 1 {
                4.0
            } else {
                2.0
            };
            w * phi(y) * cdf(y)
        })
        .sum::<f64>()
        * h
        / 3.0
}

#[test]
fn the_gumbel_law_is_the_maximums_heavy_upper_tail() {
    // Two candidates (L = 2, c = 1), k = 1: recall = P(needle > the one distractor).
    for dprime in [0.0, 1.0, -1.0] {
        let d = format!("{dprime}");
        let r = recall(&["--context-len", "2", "--index-topk", "1", "--distractor", "gumbel", "--dprime", &d]);
        let want = needle_beats_one_gumbel(dprime);
        assert!((r - want).abs() < 2e-6, "dprime {dprime}: {r} vs {want}");
    }
    let r0 = recall(&["--context-len", "2", "--index-topk", "1", "--distractor", "gumbel", "--dprime", "0"]);
    assert!((r0 - 0.5231).abs() < 1e-4, "{r0}: the mirrored law gives 0.4769");
    // Against many distractors the heavy upper tail costs recall that the normal keeps (the
    // mirrored law, light above, would keep more): 10^4 candidates, k = 8, dprime 3.
    let args =
        |law: &'static str| ["--context-len", "10000", "--index-topk", "8", "--dprime", "3", "--distractor", law];
    assert!(recall(&args("gumbel")) < recall(&args("normal")));
}

#[test]
fn a_needle_in_the_incomplete_tail_block_is_in_no_entry() {
    // L = 1002, c = 4: N = 250 entries over tokens 0..999; at depth 1 the needle is token 1001.
    for overlap in ["false", "true"] {
        let base = [
            "--context-len",
            "1002",
            "--compress-ratio",
            "4",
            "--overlap",
            overlap,
            "--depth",
            "1",
            "--dprime",
            "50",
            "--index-topk",
            "1",
        ];
        let with = |extra: &[&'static str]| -> Vec<&'static str> {
            let mut a = base.to_vec();
            a.extend_from_slice(extra);
            a
        };
        // A perfect indexer (dprime 50) would select any covered needle; this one is covered by none.
        assert!(recall(&with(&[])) < 1e-12, "overlap {overlap}");
        assert_eq!(recall(&with(&["--p-guess", "0.25"])), 0.25);
        assert_eq!(median_rank(&with(&[])), None);
        let mut a = vec!["recall"];
        a.extend(with(&[]));
        assert!(
            text(&a).contains("note: the needle lies in no complete block and outside the window: never selectable")
        );
        // Only the window attends it: W = 2 holds token 1001 alone.
        assert_eq!(recall(&with(&["--window", "2"])), 1.0);
        assert_eq!(recall(&with(&["--window", "2", "--p-read", "0.8"])), 0.8);
        // In the last complete block (depth 0.998: token floor(0.998 · 1001) = 998, block 249 of
        // tokens 996..999) the same indexer selects it.
        let mut a = base.to_vec();
        a[7] = "0.998";
        assert!(recall(&a) > 0.999, "overlap {overlap}");
    }
}
