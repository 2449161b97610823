//! The checks behind every fuzz target, shared by the libFuzzer binaries (fuzz/fuzz_targets/)
//! and by `tests/fuzz_corpus.rs`, which replays the committed corpus under a plain `cargo test`.
//!
//! Each function takes arbitrary bytes and panics only when dsa-sim breaks a promise: a parser
//! that panics, an error message that is not one printable line, a value accepted that does not
//! validate or does not round-trip, an engine result outside [0, 1].

#![allow(dead_code)]

use dsa_sim::engine::analytic::Analytic;
use dsa_sim::engine::montecarlo::{simulate, McPath};
use dsa_sim::scenario::Scenario;
use dsa_sim::sweep::{Axis, Grid, MAX_RANGE_POINTS};

/// Largest context the engine part of [`scenario_toml`] evaluates (larger ones are shrunk).
pub const ENGINE_CONTEXT_CAP: u64 = 4096;

/// An error message must say something and, as the CLI prints it, be one printable line.
pub fn assert_one_line(what: &str, msg: &str) {
    assert!(!msg.trim().is_empty(), "{what}: empty error message");
    let printed = dsa_sim::error::one_line(msg);
    assert!(!printed.chars().any(|c| c.is_control()), "{what}: not one printable line: {printed:?}");
}

/// Scenario TOML: parse + validate; accepted scenarios round-trip through TOML and JSON and are
/// evaluated cheaply by the analytic engine (and 32 Monte Carlo trials) with the context capped.
pub fn scenario_toml(data: &[u8]) {
    // The CLI reads scenario files with read_to_string: bytes that are not UTF-8 are refused
    // before they reach the parser (the hostile-input tests check that message).
    let Ok(text) = std::str::from_utf8(data) else { return };
    let s = match Scenario::from_toml_str(text) {
        Ok(s) => s,
        Err(e) => {
            assert_one_line("scenario TOML", &e.to_string());
            return;
        }
    };
    s.validate().expect("an accepted scenario validates");
    let back = Scenario::from_toml_str(&s.to_toml_string()).expect("the TOML of an accepted scenario parses");
    assert_eq!(back, s, "TOML round trip");
    let json = serde_json::to_string(&s).expect("a scenario serialises to JSON");
    assert_eq!(Scenario::from_json_str(&json).expect("its JSON parses"), s, "JSON round trip");
    evaluate_small(s);
}

/// Shrinks a scenario to at most [`ENGINE_CONTEXT_CAP`] tokens and checks the engines on it.
fn evaluate_small(mut s: Scenario) {
    if s.context_len > ENGINE_CONTEXT_CAP {
        s.context_len = ENGINE_CONTEXT_CAP;
    }
    s.repeat = s.repeat.min(256);
    s.layers = s.layers.min(64);
    if s.model == dsa_sim::scenario::Model::Vector {
        // The vector model costs heads × head_dim per entry: keep it small.
        s.heads = s.heads.min(4);
        s.head_dim = s.head_dim.min(64);
        s.outlier_channels = s.outlier_channels.min(s.head_dim);
        if s.validate().is_err() {
            return;
        }
        let run = dsa_sim::indexer::simulate(&s, 3, 7);
        assert!(run.successes <= run.trials && run.trials == 3, "vector Monte Carlo counts for {s:?}");
        return;
    }
    if s.validate().is_err() {
        return;
    }
    let n = s.n_candidates();
    if let Ok(a) = Analytic::new(&s) {
        let r = a.recall();
        assert!(r.is_finite() && (0.0..=1.0).contains(&r), "analytic recall {r} for {s:?}");
        let mut last = 0.0;
        for j in [1, s.index_topk.min(n), n] {
            if j == 0 {
                continue;
            }
            let c = a.rank_cdf(j);
            assert!(c.is_finite() && (0.0..=1.0).contains(&c), "P(rank <= {j}) = {c} for {s:?}");
            assert!(c >= last - 1e-6, "rank CDF decreases at j = {j}: {c} < {last} for {s:?}");
            last = c;
        }
        if let Some(q) = a.rank_quantile(0.5) {
            assert!(q >= 1 && q <= n.max(1), "median rank {q} outside 1..={n} for {s:?}");
        }
    }
    let run = simulate(&s, 32, 7, McPath::Auto).expect("Monte Carlo runs any small scenario");
    assert!(run.successes <= run.trials && run.trials == 32, "Monte Carlo counts for {s:?}");
}

/// Measured-data CSV through the one reader ([`dsa_sim::measured::parse_csv`]) that
/// `dsa-sim calibrate` / `verdict` and the `dsa-sim run` overlays share.
pub fn measured_csv(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else { return };
    calibration_csv(text);
}

/// A sweep axis (`--vary FIELD=SPEC`): accepted axes have at most [`MAX_RANGE_POINTS`] values,
/// each of which sets the field; a grid over it either builds with every point valid or is
/// refused with one line.
pub fn sweep_axis(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let axis = match Axis::parse(text) {
        Ok(a) => a,
        Err(e) => {
            assert_one_line("sweep axis", &e.to_string());
            return;
        }
    };
    assert!(!axis.values.is_empty() && axis.values.len() <= MAX_RANGE_POINTS, "{} values", axis.values.len());
    let mut probe = Scenario::default();
    assert_eq!(axis.values.len(), axis.texts.len());
    for (v, t) in axis.values.iter().zip(&axis.texts) {
        probe.set(axis.field, *v).expect("every value of an accepted axis sets its field");
        probe.set_text(axis.field, t).expect("every text of an accepted axis parses");
        assert_eq!(probe.get(axis.field), *v, "an axis value is its text parsed");
    }
    match Grid::new(Scenario::default(), vec![axis], false) {
        Ok(g) => {
            for i in 0..g.len() {
                g.scenario(i).expect("every point of a built grid validates");
            }
        }
        Err(e) => assert_one_line("sweep grid", &e.to_string()),
    }
}

/// The calibration loader: accepted rows are well-formed counts, and each either applies to a
/// scenario that validates or is refused with one line.
fn calibration_csv(text: &str) {
    match dsa_sim::measured::parse_csv(text, "fuzz.csv") {
        Err(e) => assert_one_line("calibration CSV", &e.to_string()),
        Ok(ds) => {
            assert!(!ds.rows.is_empty(), "a loaded table has rows");
            for note in &ds.notes {
                assert_one_line("calibration CSV note", note);
            }
            let base = Scenario::default();
            for r in &ds.rows {
                assert!(r.trials >= 1 && r.hits <= r.trials, "{r:?}");
                assert!(r.context_len >= 1 && r.index_topk >= 1, "{r:?}");
                let p = r.observed();
                assert!((0.0..=1.0).contains(&p), "{r:?}");
                let (lo, hi) = r.interval();
                assert!(0.0 <= lo && lo <= p + 1e-12 && p <= hi + 1e-12 && hi <= 1.0, "{r:?}: [{lo}, {hi}]");
                if let Some(d) = r.depth {
                    assert!((0.0..=1.0).contains(&d), "{r:?}");
                }
                match r.apply(&base) {
                    Ok(s) => s.validate().expect("an applied row validates"),
                    Err(e) => assert_one_line("calibration row", &e.to_string()),
                }
            }
        }
    }
}

/// `dsa-sim quantize`: the first line holds the flags as `FORMAT|BLOCK|SCALE|AMAX_FLOOR` (later
/// parts optional), the rest is stdin. Accepted input gives one value per number, in text and
/// in JSON alike; element formats (no block) are idempotent and monotone.
pub fn quantize_input(data: &[u8]) {
    use dsa_sim::error::{Classify, ErrorKind};
    use dsa_sim::formats::text::{quantize_text, QuantizeRequest};
    let Ok(text) = std::str::from_utf8(data) else { return };
    let (head, body) = text.split_once('\n').unwrap_or((text, ""));
    let mut parts = head.split('|').map(str::to_string);
    let mut args = QuantizeRequest {
        format: parts.next(),
        block: parts.next().filter(|b| !b.is_empty()),
        scale: parts.next().filter(|b| !b.is_empty()),
        amax_floor: parts.next().filter(|b| !b.is_empty()),
        json: false,
    };
    let out = match quantize_text(&args, body) {
        Ok(out) => out,
        Err(e) => {
            assert_eq!(e.kind(), ErrorKind::Input, "quantize: bad input must exit 2: {e}");
            assert_one_line("quantize", &e.to_string());
            return;
        }
    };
    let n = body.split_whitespace().count();
    let values: Vec<f32> = out.lines().map(|l| l.parse::<f32>().expect("every output line is a number")).collect();
    assert_eq!(values.len(), n, "one value per input number");
    args.json = true;
    let json = quantize_text(&args, body).expect("JSON output succeeds where text output does");
    let v: serde_json::Value = serde_json::from_str(&json).expect("quantize --json prints one JSON object");
    assert_eq!(v["count"].as_u64(), Some(n as u64));
    let element = args.block.is_none() && !args.format.as_deref().unwrap_or("").contains(':');
    let fmt = args.format.as_deref().unwrap_or("").trim().to_ascii_lowercase();
    let integer = fmt.starts_with("int");
    if element && !integer && !["mxfp4", "nvfp4"].contains(&fmt.as_str()) && args.scale.is_none() && args.amax_floor.is_none() {
        // Idempotent: the dequantized values are representable.
        args.json = false;
        let again_in: String = values.iter().map(|x| format!("{} ", dsa_sim::formats::Shortest(*x))).collect();
        let again = quantize_text(&args, &again_in).expect("dequantized values quantize again");
        let twice: Vec<f32> = again.lines().map(|l| l.parse::<f32>().unwrap()).collect();
        for (a, b) in values.iter().zip(&twice) {
            assert!(a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan()), "not idempotent: {a} -> {b}");
        }
        // Monotone: a larger input never gives a smaller value.
        let inputs: Vec<f32> = body.split_whitespace().map(|t| t.parse::<f32>().unwrap()).collect();
        for i in 0..n {
            for j in 0..n {
                if inputs[i] < inputs[j] && !values[i].is_nan() && !values[j].is_nan() {
                    assert!(values[i] <= values[j], "not monotone: {} -> {}, {} -> {}", inputs[i], values[i], inputs[j], values[j]);
                }
            }
        }
    }
}
