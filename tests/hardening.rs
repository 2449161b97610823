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
fn assert_one_line_error(what: &str, (code, stdout, stderr): &(Option<i32>, Vec<u8>, String), needle: &str, max_len: usize) {
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
            let (code, stdout, stderr) =
                exec_in(d.path(), &["quantize", "--format", format, "--block", "2", "--scale", scale], Stdin::Bytes(input));
            assert_eq!(code, Some(0), "{format} {scale}: {stderr}");
            let text = String::from_utf8(stdout).unwrap();
            let values: Vec<f32> = text.lines().map(|l| l.parse().unwrap()).collect();
            assert_eq!(values.len(), 4, "{format} {scale}: {text}");
            assert!(values.iter().all(|v| v.is_finite()), "{format} {scale}: {text}");
            assert!(values[0] > 1e38 && values[1] < -1e38, "{format} {scale}: {text}");
        }
    }
}
