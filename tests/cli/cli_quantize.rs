//! `dsa-sim quantize` as a user runs it: numbers on stdin, values out, one-line errors.

use dsa_sim::formats::Format;
use std::io::Write;
use std::process::{Command, Output, Stdio};

fn quantize(args: &[&str], stdin: &str) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_dsa-sim"))
        .arg("quantize")
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("binary runs");
    // The command may refuse its flags before reading stdin: a closed pipe is fine.
    let _ = child.stdin.take().unwrap().write_all(stdin.as_bytes());
    child.wait_with_output().unwrap()
}

fn ok_lines(args: &[&str], stdin: &str) -> Vec<String> {
    let out = quantize(args, stdin);
    assert!(out.status.success(), "{args:?}: {}", String::from_utf8_lossy(&out.stderr));
    assert!(out.stderr.is_empty(), "{args:?}: stderr {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap().lines().map(String::from).collect()
}

/// Asserts exit code 2, nothing on stdout, one line on stderr containing every `needle`.
fn bad(args: &[&str], stdin: &str, needles: &[&str]) {
    let out = quantize(args, stdin);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{args:?} <{stdin}>: stderr {err}");
    assert!(out.stdout.is_empty(), "{args:?}: stdout {}", String::from_utf8_lossy(&out.stdout));
    assert_eq!(err.lines().count(), 1, "{args:?}: not one line: {err}");
    assert!(err.starts_with("error: "), "{err}");
    assert!(!err.contains("panicked"), "{err}");
    for n in needles {
        assert!(err.contains(n), "{args:?} <{stdin}>: `{n}` not in: {err}");
    }
}

#[test]
fn element_formats_round_ties_to_even_and_saturate() {
    assert_eq!(
        ok_lines(&["--format", "fp4-e2m1"], "0.25 0.75 5 7 -0 1e30 inf -inf -0.1\n"),
        ["0", "1", "4", "6", "-0", "6", "6", "-6", "-0"]
    );
    assert_eq!(
        ok_lines(&["--format", "fp8-e4m3"], "464 463.99 1e9 inf nan 0.001953125"),
        ["448", "448", "448", "NaN", "NaN", "0.001953125"]
    );
    assert_eq!(ok_lines(&["--format", "fp8-e5m2"], "inf -inf 1e9 nan"), ["inf", "-inf", "57344", "NaN"]);
    assert_eq!(ok_lines(&["--format", "bf16"], "0.1\n1.00390625\n3.4028235e38"), ["0.100097656", "1", "3.3895314e38"]);
    assert_eq!(ok_lines(&["--format", "fp16"], "1e-8 3e-8 70000"), ["0", "5.9604645e-8", "65504"]);
    assert_eq!(ok_lines(&["--format", "fp32"], "0.1 -0 1e-45"), ["0.1", "-0", "1e-45"]);
}

#[test]
fn block_formats() {
    // ue8m0 (DeepSeek): amax 32 → scale 2^ceil(log2(32/6)) = 8; values on the e2m1 grid × 8.
    let xs: Vec<String> = (1..=32).map(|i| i.to_string()).collect();
    let out = ok_lines(&["--format", "fp4-e2m1", "--block", "32", "--scale", "ue8m0"], &xs.join(" "));
    assert_eq!(&out[..6], ["0", "0", "4", "4", "4", "8"]);
    assert_eq!(out[31], "32");
    // The same through the library, value by value, for every block format.
    let input: Vec<f32> = (0..64).map(|i| ((i * 37 % 64) as f32 - 30.0) * 0.173).collect();
    let text: Vec<String> = input.iter().map(|x| x.to_string()).collect();
    for (flags, spec) in [
        (vec!["--format", "mxfp4"], "mxfp4"),
        (vec!["--format", "nvfp4"], "nvfp4"),
        (vec!["--format", "fp8-e4m3", "--block", "32"], "fp8-e4m3:32:fp32"),
        (
            vec!["--format", "fp8-e4m3", "--block", "64", "--scale", "ue8m0", "--amax-floor", "1e-4"],
            "fp8-e4m3:64:ue8m0:floor=0.0001",
        ),
        (vec!["--format", "int4", "--block", "16", "--scale", "e8m0"], "int4:16:e8m0"),
        (vec!["--format", "int8:8:e4m3"], "int8:8:e4m3"),
        (vec!["--format", "int8"], "int8:64:fp32"), // no --block: one scale for the whole input
    ] {
        let mut want = input.clone();
        spec.parse::<Format>().unwrap().quantize_dequantize_in_place(&mut want).unwrap();
        let got: Vec<f32> = ok_lines(&flags, &text.join("\n")).iter().map(|l| l.parse().unwrap()).collect();
        let same = got.iter().zip(&want).all(|(a, b)| a.to_bits() == b.to_bits());
        assert!(same && got.len() == 64, "{spec}: {got:?} vs {want:?}");
    }
}

#[test]
fn json_output() {
    let out = quantize(&["--format", "fp8-e4m3", "--block", "4", "--json"], "0.1 -2.5 1e-3 7");
    assert!(out.status.success());
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["format"], "fp8-e4m3:4:fp32");
    assert_eq!(v["element"], "fp8-e4m3");
    assert_eq!(v["block"], 4);
    assert_eq!(v["scale"], "fp32");
    assert_eq!(v["count"], 4);
    assert_eq!(v["values"][0].as_f64().unwrap(), 0.1015625);
    assert_eq!(v["values"][1].as_f64().unwrap(), -2.5);
    // Shortest f32 text, not the f64 expansion of the f32.
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains("0.1015625") && !text.contains("0.10156250"), "{text}");
    let v: serde_json::Value =
        serde_json::from_slice(&quantize(&["--format", "bf16", "--json"], "0.1 nan -inf").stdout).unwrap();
    assert_eq!(v["values"], serde_json::json!([0.100097656, "NaN", "-inf"]));
    assert!(v["block"].is_null() && v["scale"].is_null());
}

#[test]
fn bad_input_exits_2_with_one_line() {
    bad(&["--format", "fp7"], "1", &["`fp7`", "fp8-e4m3", "nvfp4"]);
    bad(&[], "1", &["--format", "fp4-e2m1"]);
    bad(&["--format", "fp8-e4m3", "--block", "0"], "1", &["block", "0", "positive"]);
    bad(&["--format", "fp8-e4m3", "--block", "x"], "1", &["`x`", "positive integer"]);
    bad(&["--format", "fp8-e4m3", "--block", "-3"], "1", &["`-3`"]);
    bad(&["--format", "fp8-e4m3", "--block", "2"], "1 2 3", &["3 values", "blocks of 2"]);
    bad(&["--format", "mxfp4"], "1 2", &["2 values", "32"]);
    bad(&["--format", "bf16"], "1 2 abc", &["`abc`", "value 3", "not a number"]);
    bad(&["--format", "bf16"], "1,2", &["`1,2`"]);
    bad(&["--format", "bf16"], "", &["empty"]);
    bad(&["--format", "bf16"], " \n\t \n", &["empty"]);
    bad(&["--format", "bf16"], "1e39", &["`1e39`", "f32 range"]);
    bad(&["--format", "fp4-e2m1"], "1 nan", &["value 2", "NaN", "fp4-e2m1"]);
    bad(&["--format", "int4"], "NaN 1", &["value 1", "NaN"]);
    bad(&["--format", "int8", "--block", "2"], "1 inf", &["value 2", "inf", "finite"]);
    bad(&["--format", "nvfp4"], &format!("{} -inf", "1 ".repeat(15)), &["value 16", "-inf", "nvfp4"]);
    bad(&["--format", "fp8-e4m3", "--block", "2", "--scale", "ue9"], "1 2", &["`ue9`", "ue8m0", "e4m3"]);
    bad(&["--format", "fp8-e4m3", "--scale", "ue8m0"], "1 2", &["--scale", "ue8m0", "block"]);
    bad(&["--format", "mxfp4", "--block", "16"], "1 2", &["mxfp4", "block 16", "32"]);
    bad(&["--format", "nvfp4", "--scale", "e8m0"], "1 2", &["nvfp4", "scale e8m0", "e4m3"]);
    bad(&["--format", "bf16", "--block", "2"], "1 2", &["bf16", "block"]);
    bad(&["--format", "fp8-e4m3", "--block", "2", "--amax-floor", "-1"], "1 2", &["`-1`", "≥ 0"]);
    bad(&["--format", "fp8-e4m3", "--block", "2", "--amax-floor", "nan"], "1 2", &["`nan`"]);
    bad(&["--format", "fp8-e4m3:2:fp32", "--block", "2"], "1 2", &["fp8-e4m3:2:fp32", "--block"]);
    bad(&["--format", "fp8-e4m3:0"], "1 2", &["block", "0"]);
    bad(&["--format", "fp8-e4m3:2:fp32:3"], "1 2", &["floor="]);
}

#[test]
fn large_input_round_trips() {
    let input: Vec<f32> = (0..100_000).map(|i| ((i as f32) * 0.618).sin() * 10f32.powi(i % 7 - 3)).collect();
    let text: String = input.iter().map(|x| format!("{x}\n")).collect();
    let got = ok_lines(&["--format", "fp4-e2m1", "--block", "32", "--scale", "ue8m0"], &text);
    let mut want = input.clone();
    "fp4-e2m1:32:ue8m0".parse::<Format>().unwrap().quantize_dequantize_in_place(&mut want).unwrap();
    assert_eq!(got.len(), want.len());
    for (g, w) in got.iter().zip(&want) {
        assert_eq!(g.parse::<f32>().unwrap().to_bits(), w.to_bits(), "{g} vs {w}");
    }
}
