//! Hardening (issue 15): one test per class of hostile input fixed there, through the binary.
//!
//! - an endless stdin for `quantize` is refused after 64 MiB, like an input file;
//! - block-scaled quantize keeps finite values finite near the f32 maximum;
//! - control characters, markup and table syntax in experiment strings and data file names give
//!   well-formed SVG (checked with an XML parser) and markdown whose tables keep their shape;
//! - a regime map needs two distinct values of k;
//! - a 10 MB value (a flag, a TOML file, a sweep axis) gives a short one-line error.
//!
//! Every failure must exit 2 with one line on stderr starting `error: `.

use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Runs the binary in `dir` with `stdin` (None: /dev/null); returns (exit code, stdout, stderr).
fn exec_in(dir: &Path, args: &[&str], stdin: Stdin) -> (Option<i32>, Vec<u8>, String) {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_dsa-sim"));
    cmd.args(args).current_dir(dir).stdout(Stdio::piped()).stderr(Stdio::piped());
    match &stdin {
        Stdin::Null => cmd.stdin(Stdio::null()),
        Stdin::Bytes(_) => cmd.stdin(Stdio::piped()),
        Stdin::File(p) => cmd.stdin(std::fs::File::open(p).unwrap()),
    };
    let mut child = cmd.spawn().unwrap();
    let writer = match stdin {
        Stdin::Bytes(b) => {
            let mut w = child.stdin.take().unwrap();
            Some(std::thread::spawn(move || {
                let _ = w.write_all(&b);
            }))
        }
        _ => None,
    };
    let start = Instant::now();
    while child.try_wait().unwrap().is_none() {
        if start.elapsed() > Duration::from_secs(60) {
            let _ = child.kill();
            panic!("{args:?} did not finish within 60 s");
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    let o = child.wait_with_output().unwrap();
    if let Some(w) = writer {
        let _ = w.join();
    }
    (o.status.code(), o.stdout, String::from_utf8_lossy(&o.stderr).into_owned())
}

enum Stdin {
    Null,
    Bytes(Vec<u8>),
    File(&'static str),
}

/// The failure contract: exit 2, nothing on stdout, one line on stderr starting `error: `,
/// containing `needle`, and shorter than `max_len` bytes.
fn assert_one_line_error(
    what: &str,
    (code, stdout, stderr): &(Option<i32>, Vec<u8>, String),
    needle: &str,
    max_len: usize,
) {
    let shown: String = stderr.chars().take(300).collect();
    assert_eq!(*code, Some(2), "{what}: exit code; stderr {shown:?}");
    assert!(stdout.is_empty(), "{what}: stdout not empty");
    assert!(stderr.starts_with("error: ") && stderr.ends_with('\n'), "{what}: {shown:?}");
    assert_eq!(stderr.lines().count(), 1, "{what}: {shown:?}");
    assert!(stderr.len() < max_len, "{what}: {} bytes on stderr: {shown:?}", stderr.len());
    assert!(stderr.contains(needle), "{what}: `{needle}` not in {shown:?}");
    assert!(!stderr.contains("panicked"), "{what}: {shown:?}");
}

// ---------------------------------------------------------------------------------------------
// quantize: stdin is bounded.

#[test]
fn quantize_refuses_an_endless_stdin_after_64_mib() {
    let d = tempfile::tempdir().unwrap();
    let start = Instant::now();
    let out = exec_in(d.path(), &["quantize", "--format", "fp8-e4m3"], Stdin::File("/dev/zero"));
    assert_one_line_error("quantize < /dev/zero", &out, "64 MiB", 300);
    assert!(start.elapsed() < Duration::from_secs(20), "took {:?}", start.elapsed());
    // 64 MiB + 1 byte of valid numbers is refused the same way; 64 MiB exactly would be read.
    let mut big = b"1 ".repeat(32 << 20);
    big.push(b'\n');
    let out = exec_in(d.path(), &["quantize", "--format", "bf16"], Stdin::Bytes(big));
    assert_one_line_error("quantize < 64 MiB + 1", &out, "64 MiB", 300);
}

#[test]
fn quantize_keeps_the_f32_max_finite_under_every_block_scale() {
    let d = tempfile::tempdir().unwrap();
    for format in ["fp8-e4m3", "fp8-e5m2", "fp4-e2m1", "int8", "int4"] {
        for scale in ["fp32", "ue8m0", "e8m0", "e4m3"] {
            let input = b"3.4028235e38 -3.4028235e38 3.4e38 1\n".to_vec();
            let (code, stdout, stderr) = exec_in(
                d.path(),
                &["quantize", "--format", format, "--block", "2", "--scale", scale],
                Stdin::Bytes(input),
            );
            assert_eq!(code, Some(0), "{format} {scale}: {stderr}");
            let text = String::from_utf8(stdout).unwrap();
            let values: Vec<f32> = text.lines().map(|l| l.parse().unwrap()).collect();
            assert_eq!(values.len(), 4, "{format} {scale}: {text}");
            assert!(values.iter().all(|v| v.is_finite()), "{format} {scale}: {text}");
            assert!(values[0] > 1e38 && values[1] < -1e38, "{format} {scale}: {text}");
        }
    }
}

// ---------------------------------------------------------------------------------------------
// SVG and markdown hold any text: control characters, markup and table syntax in experiment
// strings and data file names.

/// A title, label or note no text format can hold raw: C0 controls, DEL, a C1 control, XML
/// markup, an HTML comment opener, table pipes, brackets, a backslash and line ends.
const HOSTILE: &str = r"T\u0001i\u001Bt\u007F\u0085le <b>&amp;</b> <!-- | pipe \\| [x] `tick`\nsecond line\r\tend";

/// A data file name with spaces, a pipe, a backtick, parentheses, brackets and a control character.
const HOSTILE_FILE: &str = "ob|s `x` (1) [2]\u{1}.csv";

/// Every `.svg` under `dir` parses as XML.
fn assert_svgs_well_formed(dir: &Path) -> usize {
    // The parser does catch what the escaping removes.
    assert!(roxmltree::Document::parse("<svg><text>a\u{1}b</text></svg>").is_err());
    let mut n = 0;
    for e in std::fs::read_dir(dir.join("figures")).unwrap() {
        let p = e.unwrap().path();
        if p.extension().is_some_and(|x| x == "svg") {
            let text = std::fs::read_to_string(&p).unwrap();
            if let Err(err) = roxmltree::Document::parse(&text) {
                panic!("{} is not well-formed XML: {err}", p.display());
            }
            n += 1;
        }
    }
    n
}

/// The number of cell delimiters of a markdown table row: `|` not escaped by a backslash.
fn pipes(line: &str) -> usize {
    let mut n = 0;
    let mut backslashes = 0;
    for c in line.chars() {
        if c == '|' && backslashes % 2 == 0 {
            n += 1;
        }
        backslashes = if c == '\\' { backslashes + 1 } else { 0 };
    }
    n
}

/// report.md holds no control character but line feeds and tabs (kept in free text), every table row has the cells of its
/// header, and every heading is one line; returns the report.
fn assert_markdown_intact(dir: &Path) -> String {
    let md = std::fs::read_to_string(dir.join("report.md")).unwrap();
    assert!(
        !md.chars().any(|c| (c.is_control() && c != '\n' && c != '\t') || c == '\u{FFFE}'),
        "control characters in report.md: {:?}",
        md.chars().filter(|c| c.is_control() && *c != '\n' && *c != '\t').collect::<Vec<_>>()
    );
    let lines: Vec<&str> = md.lines().collect();
    let mut i = 0;
    let mut tables = 0;
    while i < lines.len() {
        // A table: a header line and a delimiter row (a free-text line starting with `|` is not).
        if lines[i].starts_with('|') && lines.get(i + 1).is_some_and(|l| l.starts_with("|---")) {
            let header = pipes(lines[i]);
            while i < lines.len() && lines[i].starts_with('|') {
                assert_eq!(pipes(lines[i]), header, "report.md line {}: {:?}", i + 1, lines[i]);
                i += 1;
            }
            tables += 1;
        } else {
            i += 1;
        }
    }
    assert!(tables >= 2, "{tables} tables in report.md");
    // The hostile strings are there, escaped: no raw markup, no comment opener.
    assert!(!md.contains("<!--") && !md.contains("<b>"), "raw HTML in report.md");
    assert!(md.contains("T␁i␛t␡\u{FFFD}le &lt;b&gt;&amp;amp;&lt;/b&gt; &lt;!-- \\| pipe \\\\\\| [x]"), "{md}");
    md
}

#[test]
fn hostile_strings_give_well_formed_svg_and_intact_markdown() {
    let d = tempfile::tempdir().unwrap();
    let dir = d.path();
    std::fs::write(
        dir.join(HOSTILE_FILE),
        "context_len,index_topk,trials,hits,label\n1024,512,10,9,\"a|b <i>\u{1} [c]\"\n4096,512,10,3,\"x\\y|\"\n",
    )
    .unwrap();
    let file = HOSTILE_FILE.replace('\u{1}', "\\u0001");
    let exp = format!(
        r#"name = "hostile"
title = "{HOSTILE}"
description = "{HOSTILE}\n\n| not | a table |"
seed = 1
trials = 200
engine = "auto"

[scenario]
preset = "deepseek-v4-flash"
dprime = 1.0

[[data]]
name = "{HOSTILE}"
file = "{file}"
label = "{HOSTILE}"

[[figure]]
name = "curves ( |x| )"
kind = "recall_curves"
title = "{HOSTILE}"
caption = "{HOSTILE}"
x = "context_len=1024,4096"
series = ["index_topk=512,1024"]
data = "{HOSTILE}"

[[figure]]
name = "heat"
kind = "heatmap"
title = "{HOSTILE}"
x = "context_len=1024,4096"
y = "dprime=1,2"

[[figure]]
name = "regime"
kind = "regime_map"
title = "{HOSTILE}"
x = "context_len=1024,4096"
y = "dprime=1,2"
k = [512, 1024]
"#
    );
    std::fs::write(dir.join("hostile.toml"), exp).unwrap();
    let (code, _, stderr) = exec_in(dir, &["run", "hostile.toml", "--out", "out", "--quiet"], Stdin::Null);
    assert_eq!(code, Some(0), "{stderr}");
    let out = dir.join("out");
    assert_eq!(assert_svgs_well_formed(&out), 3);
    let md = assert_markdown_intact(&out);
    // The copied data file's link is percent-encoded; its code span holds the backticks.
    assert!(md.contains("(data/measured-ob%7Cs%20%60x%60%20%281%29%20%5B2%5D%01.csv)"), "{md}");
    assert!(md.contains("``ob|s `x` (1) [2]␁.csv``"), "{md}");
}

#[test]
fn hostile_strings_in_a_calibration_experiment() {
    let d = tempfile::tempdir().unwrap();
    let dir = d.path();
    std::fs::write(
        dir.join(HOSTILE_FILE),
        "context_len,index_topk,trials,hits,label\n1024,512,40,36,\"a|b <i>\u{1} [c]\"\n8192,512,40,12,\"x\\y|\"\n32768,512,40,4,z\n",
    )
    .unwrap();
    let file = HOSTILE_FILE.replace('\u{1}', "\\u0001");
    let exp = format!(
        r#"name = "hostile-cal"
title = "{HOSTILE}"
description = "{HOSTILE}"
data = "{file}"
data_note = "{HOSTILE}"
fit = "dprime"
curves = ["index_topk=256,512,1024"]
target = 0.9
trials = 200
seed = 1

[scenario]
preset = "deepseek-v4-flash"
"#
    );
    std::fs::write(dir.join("cal.toml"), exp).unwrap();
    let (code, _, stderr) = exec_in(dir, &["calibrate", "--experiment", "cal.toml", "--out", "out"], Stdin::Null);
    assert_eq!(code, Some(0), "{stderr}");
    let out = dir.join("out");
    assert_eq!(assert_svgs_well_formed(&out), 1);
    assert_markdown_intact(&out);
}

// ---------------------------------------------------------------------------------------------
// A regime map compares at least two distinct k.

#[test]
fn a_regime_map_needs_two_distinct_k() {
    let d = tempfile::tempdir().unwrap();
    let exp = |k: &str| {
        format!(
            "[scenario]\npreset = \"deepseek-v4-flash\"\n[[figure]]\nname = \"r\"\nkind = \"regime_map\"\nx = \"context_len=1024,4096\"\ny = \"dprime=1,2\"\nk = {k}\n"
        )
    };
    for k in ["[16, 16, 16]", "[512]", "[]"] {
        std::fs::write(d.path().join("r.toml"), exp(k)).unwrap();
        let out = exec_in(d.path(), &["run", "r.toml", "--out", "out"], Stdin::Null);
        assert_one_line_error(&format!("k = {k}"), &out, "at least two distinct values", 400);
        assert!(!d.path().join("out").exists());
    }
    std::fs::write(d.path().join("r.toml"), exp("[16, 32, 16]")).unwrap();
    let (code, _, stderr) = exec_in(d.path(), &["run", "r.toml", "--out", "out", "--quiet"], Stdin::Null);
    assert_eq!(code, Some(0), "{stderr}");
}

// ---------------------------------------------------------------------------------------------
// A huge value gives a short error line.

/// 10 MB: the size of value the issue found echoed twice into a 20 MB error line.
const HUGE: usize = 10_000_000;

/// The largest single argument Linux passes to a program is 128 KiB (MAX_ARG_STRLEN), so values
/// through flags are tested at just under that; files and experiment axes carry the full 10 MB.
const ARG_MAX: usize = 120_000;

#[test]
fn a_huge_value_gives_a_short_error_line() {
    let d = tempfile::tempdir().unwrap();
    let dir = d.path();
    let a = "A".repeat(ARG_MAX);
    let nine = "9".repeat(ARG_MAX);
    let spaced = "A ".repeat(ARG_MAX / 2);
    let flag_cases: Vec<(String, Vec<String>)> = vec![
        ("--distractor".into(), vec!["recall".into(), "--distractor".into(), a.clone()]),
        ("--distractor with spaces".into(), vec!["recall".into(), "--distractor".into(), spaced.clone()]),
        ("--context-len".into(), vec!["rank".into(), "--context-len".into(), nine.clone()]),
        ("--q-format".into(), vec!["recall".into(), "--q-format".into(), a.clone()]),
        ("--preset".into(), vec!["verdict".into(), "--preset".into(), a.clone()]),
        ("--vary value".into(), vec!["sweep".into(), "--vary".into(), format!("distractor={a}")]),
        ("--vary range".into(), vec!["sweep".into(), "--vary".into(), format!("context_len=1..{nine}:x2")]),
        ("--vary field".into(), vec!["sweep".into(), "--vary".into(), format!("{a}=1")]),
        ("quantize --format".into(), vec!["quantize".into(), "--format".into(), a.clone()]),
    ];
    for (what, args) in &flag_cases {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let out = exec_in(dir, &args, Stdin::Bytes(b"1 2\n".to_vec()));
        assert_one_line_error(what, &out, "bytes)", 1024);
    }

    let big = "A".repeat(HUGE);
    let files: Vec<(&str, String, &[&str])> = vec![
        ("a string field", format!("distractor = \"{big}\"\n"), &["recall", "--scenario", "s.toml"]),
        ("an integer field as a string", format!("context_len = \"{}\"\n", "9".repeat(HUGE)), &["recall", "--scenario", "s.toml"]),
        ("an unknown key", format!("{big} = 1\n"), &["recall", "--scenario", "s.toml"]),
        ("a preset", format!("preset = \"{big}\"\n"), &["sweep", "--scenario", "s.toml", "--vary", "dprime=1,2"]),
        ("a format", format!("k_format = \"{big}\"\n"), &["formats", "--scenario", "s.toml"]),
        (
            "an experiment axis",
            format!("[[figure]]\nname = \"f\"\nkind = \"recall_curves\"\nx = \"distractor={big}\"\n"),
            &["run", "s.toml", "--out", "out"],
        ),
        (
            "an experiment figure name",
            format!("[[figure]]\nname = \"{big}\"\nkind = \"recall_curves\"\nx = \"dprime=-99\"\n"),
            &["run", "s.toml", "--out", "out"],
        ),
        (
            "an experiment set value",
            format!("[[figure]]\nname = \"f\"\nkind = \"recall_curves\"\nx = \"dprime=1\"\nset = {{ pooling = \"{big}\" }}\n"),
            &["run", "s.toml", "--out", "out"],
        ),
        ("a calibration experiment's fit", format!("data = \"d.csv\"\nfit = \"{big}\"\n"), &["calibrate", "--experiment", "s.toml"]),
        ("malformed TOML", format!("title = \"{big}\n"), &["run", "s.toml", "--out", "out"]),
    ];
    std::fs::write(dir.join("d.csv"), "context_len,index_topk,trials,hits\n1024,512,10,5\n").unwrap();
    for (what, text, args) in files {
        std::fs::write(dir.join("s.toml"), text).unwrap();
        let start = Instant::now();
        let out = exec_in(dir, args, Stdin::Null);
        assert_one_line_error(what, &out, "error: ", 1024);
        assert!(start.elapsed() < Duration::from_secs(10), "{what}: {:?}", start.elapsed());
    }
}

// ---------------------------------------------------------------------------------------------
// Found while fuzzing experiment files: refused before any work, with one line.

#[test]
fn experiment_names_and_grids_that_could_not_be_written_are_refused_up_front() {
    let d = tempfile::tempdir().unwrap();
    let dir = d.path();
    let figure = |name: &str, x: &str, series: &str| {
        format!("[[figure]]\nname = \"{name}\"\nkind = \"recall_curves\"\nx = \"{x}\"\nseries = [{series}]\n")
    };
    let long_data = format!("{}.csv", "d".repeat(246));
    std::fs::write(dir.join(&long_data), "context_len,index_topk,trials,hits\n1024,512,10,5\n").unwrap();
    let cases = [
        ("a NUL in a figure name", figure("a\\u0000b", "context_len=1024,2048", ""), "NUL"),
        ("a 300-byte figure name", figure(&"n".repeat(300), "context_len=1024,2048", ""), "at most 200 bytes"),
        (
            "a data file name too long for its copy",
            format!("[[data]]\nname = \"d\"\nfile = \"{long_data}\"\n{}", figure("f", "context_len=1024,2048", "")),
            "longer than 200 bytes",
        ),
        (
            // 65536^4 = 2^64 points wrapped to a grid of 0 points, which ran and wrote an empty figure.
            "a grid of 2^64 points",
            figure("f", "dprime=0..1:65536", "\"depth=0..1:65536\", \"needle_sd=0.5..1:65536\", \"p_read=0..1:65536\""),
            "65536 × 65536 × 65536 × 65536 points",
        ),
    ];
    for (what, text, needle) in cases {
        std::fs::write(dir.join("e.toml"), text).unwrap();
        let start = Instant::now();
        let out = exec_in(dir, &["run", "e.toml", "--out", "out"], Stdin::Null);
        assert_one_line_error(what, &out, needle, 1024);
        assert!(start.elapsed() < Duration::from_secs(5), "{what}: {:?}", start.elapsed());
        assert!(!dir.join("out").exists(), "{what}");
    }
    let vary: Vec<String> = ["dprime=0..1:65536", "depth=0..1:65536", "needle_sd=0.5..1:65536", "p_read=0..1:65536"]
        .iter()
        .flat_map(|v| ["--vary".to_string(), v.to_string()])
        .collect();
    let mut args = vec!["sweep"];
    args.extend(vary.iter().map(String::as_str));
    let out = exec_in(dir, &args, Stdin::Null);
    assert_one_line_error("sweep over 2^64 points", &out, "points (at most 10000000)", 1024);
}
