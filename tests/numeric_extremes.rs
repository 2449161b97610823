//! Numbers a user can type never abort, panic or hang (issue 42): every argument of every command
//! that takes a value (files and fixed choices aside) is given each of the extremes 0, 1, 2^53,
//! 2^63, u64::MAX, 1e308, -0, NaN, inf, -1, on top of a small valid invocation of its command.
//! Each run must end within [`LIMIT`] with exit 0 or 2 (or the base invocation's own status)
//! and, when it fails, one line on stderr.
//!
//! The arguments come from the command line's clap definition itself (the `cli` module of the
//! binary, compiled into this test), so a new flag or command is covered without editing this
//! file; a new command that takes values needs a base invocation in [`base`], and the test says
//! so.

#![allow(dead_code)]

// The binary's command-line module reaches the library's modules as `crate::NAME` (as in
// src/main.rs).
#[allow(unused_imports)]
use dsa_sim::{commands, engine, error, indexer, progress, scenario};

#[path = "../src/cli/mod.rs"]
#[allow(unused)]
mod cli;

use clap::CommandFactory;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Longest one invocation may take: far above what any of them needs on a loaded 2-core machine,
/// far below a hang.
const LIMIT: Duration = Duration::from_secs(20);

const EXTREMES: &[&str] =
    &["0", "1", "9007199254740992", "9223372036854775808", "18446744073709551615", "1e308", "-0", "NaN", "inf", "-1"];

const OBS: &str = "context_len,index_topk,trials,hits,label\n4096,512,10,7,a\n8192,512,10,3,b\n";

/// A small experiment: one figure of two points, one data set.
const EXPERIMENT: &str = r#"name = "extremes"
title = "numeric extremes"
seed = 3
trials = 200
engine = "auto"

[scenario]
preset = "deepseek-v4-flash"

[[data]]
name = "obs"
file = "obs.csv"

[[figure]]
name = "curves"
kind = "recall_curves"
x = "context_len=1024,2048"
series = ["index_topk=512"]
data = "obs"
"#;

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests")
}

/// A command's arguments, the standard input it reads and its exit status.
type Invocation = (Vec<String>, Option<&'static [u8]>, i32);

/// A valid, fast invocation of each command (by its path, `import topk` as "import topk"), the
/// standard input it reads, and the exit status it has by itself (`probe` against a closed
/// loopback port fails as a server failure, 1).
fn base(path: &str) -> Option<Invocation> {
    let f = fixtures();
    let s = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    Some(match path {
        "recall" => (s(&["recall", "--trials", "200"]), None, 0),
        "rank" => (s(&["rank", "--trials", "200"]), None, 0),
        "verdict" => (s(&["verdict", "--trials", "200"]), None, 0),
        "calibrate" => (s(&["calibrate", "--data", "obs.csv", "--fit", "dprime", "--trials", "200"]), None, 0),
        "plan" => (s(&["plan", "--preset", "deepseek-v4-flash", "--data", "obs.csv", "--budget", "100"]), None, 0),
        "sweep" => (s(&["sweep", "--vary", "index_topk=16,32", "--trials", "200", "--out", "s.csv"]), None, 0),
        "run" => (s(&["run", "exp.toml", "--out", "runout", "--quiet"]), None, 0),
        "formats" => (s(&["formats", "--trials", "2", "--context-len", "1024", "--format", "bf16"]), None, 0),
        "quantize" => (s(&["quantize", "--format", "fp8-e4m3"]), Some(b"1 2.5 -3\n"), 0),
        "import topk" => {
            let m = f.join("fixtures/captures/sglang/manifest.csv");
            let m = m.to_str().unwrap();
            (
                s(&[
                    "import",
                    "topk",
                    "--manifest",
                    m,
                    "--layers",
                    "3",
                    "--index-topk",
                    "8",
                    "--compress-ratio",
                    "4",
                    "--overlap",
                    "true",
                    "--out",
                    "sel.csv",
                ]),
                None,
                0,
            )
        }
        "import scores" => {
            (s(&["import", "scores", f.join("data/scores/demo.npz").to_str().unwrap(), "--resamples", "20"]), None, 0)
        }
        "import niah" => {
            (s(&["import", "niah", f.join("fixtures/niah/ruler").to_str().unwrap(), "--out", "m.csv"]), None, 0)
        }
        // Port 9 (discard) on loopback: nothing listens there in a test environment, so the
        // connection is refused at once; one attempt, short waits.
        "probe" => (
            s(&[
                "probe",
                "--url",
                "http://127.0.0.1:9",
                "--context-len",
                "1K",
                "--trials",
                "1",
                "--retries",
                "0",
                "--timeout",
                "2",
                "--backoff",
                "0.01",
                "--model",
                "m",
                "--out",
                "p",
            ]),
            None,
            1,
        ),
        "probe --dry-run" => {
            (s(&["probe", "--url", "http://127.0.0.1:9", "--context-len", "1K", "--trials", "1", "--dry-run"]), None, 0)
        }
        _ => return None,
    })
}

/// Arguments of `cmd` that take a value a user could type a number into: not files (PathBuf),
/// not fixed choices (clap refuses a number there itself), not help.
fn value_args(cmd: &clap::Command) -> Vec<(String, bool)> {
    let mut out = Vec::new();
    for a in cmd.get_arguments() {
        if !a.get_action().takes_values() {
            continue;
        }
        let parser = a.get_value_parser();
        if parser.type_id() == clap::builder::ValueParser::path_buf().type_id() || !a.get_possible_values().is_empty() {
            continue;
        }
        match a.get_long() {
            Some(l) => out.push((format!("--{l}"), false)),
            None => out.push((a.get_id().to_string(), true)),
        }
    }
    out
}

/// Every command (by path) with the arguments it takes values in.
fn commands() -> Vec<(String, Vec<(String, bool)>)> {
    let root = cli::Cli::command();
    let mut out = Vec::new();
    for sub in root.get_subcommands() {
        let inner: Vec<&clap::Command> = sub.get_subcommands().filter(|s| s.get_name() != "help").collect();
        if inner.is_empty() {
            out.push((sub.get_name().to_string(), value_args(sub)));
        } else {
            for i in inner {
                out.push((format!("{} {}", sub.get_name(), i.get_name()), value_args(i)));
            }
        }
    }
    out.retain(|(_, a)| !a.is_empty());
    out
}

/// `args` with `flag` set to `value`: replaced where the base gives it, else appended; `--flag=V`
/// so that a value starting with `-` is taken as the value.
fn with_value(args: &[String], flag: &str, positional: bool, value: &str) -> Vec<String> {
    let mut v = args.to_vec();
    if positional {
        return v; // handled by the caller (positional values are files or names)
    }
    if let Some(i) = v.iter().position(|a| a == flag) {
        v.remove(i + 1);
        v.remove(i);
    }
    v.push(format!("{flag}={value}"));
    v
}

struct Outcome {
    code: Option<i32>,
    stderr: String,
    elapsed: Duration,
    timed_out: bool,
}

fn run(dir: &Path, args: &[String], stdin: Option<&[u8]>) -> Outcome {
    let t0 = Instant::now();
    let mut child = Command::new(env!("CARGO_BIN_EXE_dsa-sim"))
        .args(args)
        .current_dir(dir)
        .stdin(if stdin.is_some() { Stdio::piped() } else { Stdio::null() })
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    if let Some(b) = stdin {
        let _ = child.stdin.take().unwrap().write_all(b);
    }
    // stderr is read on its own thread so that a child writing a lot cannot block on the pipe.
    let mut err = child.stderr.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut s = Vec::new();
        let _ = std::io::Read::read_to_end(&mut err, &mut s);
        s
    });
    let mut timed_out = false;
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if t0.elapsed() > LIMIT {
            let _ = child.kill();
            timed_out = true;
            break child.wait().unwrap();
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    let stderr = String::from_utf8_lossy(&reader.join().unwrap()).into_owned();
    Outcome { code: status.code(), stderr, elapsed: t0.elapsed(), timed_out }
}

fn setup(dir: &Path) {
    std::fs::write(dir.join("obs.csv"), OBS).unwrap();
    std::fs::write(dir.join("exp.toml"), EXPERIMENT).unwrap();
}

#[test]
fn every_value_flag_of_every_command_takes_the_extremes() {
    let cmds = commands();
    // The probe is run twice: sending (against a closed port) and with --dry-run.
    type Job = (String, Vec<String>, Option<&'static [u8]>, i32);
    let mut jobs: Vec<Job> = Vec::new();
    let mut missing = Vec::new();
    let mut flags_covered = 0usize;
    for (path, args) in &cmds {
        let bases: Vec<_> =
            if path == "probe" { vec![base("probe"), base("probe --dry-run")] } else { vec![base(path)] };
        if bases.iter().any(Option::is_none) {
            missing.push(path.clone());
            continue;
        }
        for (b, stdin, code) in bases.into_iter().flatten() {
            jobs.push((format!("{path} (base)"), b.clone(), stdin, code));
            for (flag, positional) in args {
                if *positional {
                    continue;
                }
                flags_covered += 1;
                for v in EXTREMES {
                    jobs.push((format!("{path} {flag}={v}"), with_value(&b, flag, false, v), stdin, code));
                }
            }
        }
    }
    assert!(
        missing.is_empty(),
        "commands taking values without a base invocation in tests/numeric_extremes.rs: {missing:?}"
    );
    assert!(flags_covered > 100, "only {flags_covered} flags found: is the clap walk broken?");

    let jobs = Mutex::new(jobs.into_iter().enumerate().collect::<Vec<_>>());
    let failures = Mutex::new(Vec::new());
    let slowest = Mutex::new((Duration::ZERO, String::new()));
    let total = Instant::now();
    let workers = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(2).clamp(2, 8);
    std::thread::scope(|s| {
        for _ in 0..workers {
            s.spawn(|| loop {
                let Some((i, (label, args, stdin, base_code))) = jobs.lock().unwrap().pop() else { break };
                let d = tempfile::tempdir().unwrap();
                setup(d.path());
                let o = run(d.path(), &args, stdin);
                {
                    let mut sl = slowest.lock().unwrap();
                    if o.elapsed > sl.0 {
                        *sl = (o.elapsed, label.clone());
                    }
                }
                let is_base = label.ends_with("(base)");
                let lines = o.stderr.lines().count();
                let problem = if o.timed_out {
                    Some(format!("no end within {LIMIT:?} (a hang)"))
                } else {
                    match o.code {
                        Some(101) => Some("panicked (exit 101)".into()),
                        Some(134) | None => Some(format!("aborted (exit {:?})", o.code)),
                        Some(c) if is_base && c != base_code => {
                            Some(format!("the base invocation exits {c}, not {base_code}"))
                        }
                        Some(c) if c != 0 && c != 2 && c != base_code => {
                            Some(format!("exit {c}: neither success nor bad input"))
                        }
                        Some(0) => None,
                        Some(_) if lines != 1 || !o.stderr.starts_with("error: ") => {
                            Some(format!("not one `error:` line on stderr ({lines} lines)"))
                        }
                        Some(_) => None,
                    }
                };
                if let Some(p) = problem {
                    let e: String = o.stderr.chars().take(400).collect();
                    failures.lock().unwrap().push(format!("#{i} {label}: {p}; stderr: {e:?}"));
                }
            });
        }
    });
    let failures = failures.into_inner().unwrap();
    let (t, which) = slowest.into_inner().unwrap();
    eprintln!("numeric extremes: {flags_covered} flags, {:.1?} in all, slowest {which} {t:.1?}", total.elapsed());
    assert!(failures.is_empty(), "{} failure(s):\n{}", failures.len(), failures.join("\n"));
}
