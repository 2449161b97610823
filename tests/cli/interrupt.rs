//! Interruption: a sweep or an experiment run stopped by SIGINT or SIGKILL keeps its finished
//! rows, `--resume` finishes it, and the final files are byte-identical to an uninterrupted run.
//!
//! The commands run Monte Carlo on the materialising path (overlapping mean pooling) with one
//! thread, so that each grid point takes about a tenth of a second and the signal lands mid-way.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_dsa-sim"))
}

fn ok(dir: &Path, args: &[&str]) {
    let o = bin().args(args).current_dir(dir).output().unwrap();
    assert!(o.status.success(), "{args:?}: {}", String::from_utf8_lossy(&o.stderr));
}

/// Every file under `dir` with its bytes.
fn files(dir: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    fn walk(root: &Path, dir: &Path, out: &mut BTreeMap<PathBuf, Vec<u8>>) {
        for e in std::fs::read_dir(dir).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                walk(root, &p, out);
            } else {
                out.insert(p.strip_prefix(root).unwrap().to_path_buf(), std::fs::read(&p).unwrap());
            }
        }
    }
    let mut out = BTreeMap::new();
    walk(dir, dir, &mut out);
    out
}

#[derive(Clone, Copy, Debug)]
enum Signal {
    Int,
    Kill,
}

/// Whether this process (and so the children it spawns) ignores SIGINT: bit 2 of SigIgn.
fn sigint_ignored() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|t| t.lines().find_map(|l| l.strip_prefix("SigIgn:").map(|m| m.trim().to_string())))
        .and_then(|m| u64::from_str_radix(&m, 16).ok())
        .is_some_and(|mask| mask & (1 << (2 - 1)) != 0)
}

/// Sends `sig` to the child and waits for it; it must not have finished on its own.
fn stop(child: &mut Child, sig: Signal) {
    assert!(child.try_wait().unwrap().is_none(), "the command finished before it could be interrupted");
    match sig {
        Signal::Kill => child.kill().unwrap(),
        Signal::Int => {
            // A process started in the background by a non-interactive shell (as CI may run
            // this suite) inherits SIGINT *ignored*, and so do its children: Ctrl-C cannot reach
            // them. There SIGTERM, which also ends the process by default, stands in for it.
            let sig = if sigint_ignored() { "-TERM" } else { "-INT" };
            let st = Command::new("kill").args([sig, &child.id().to_string()]).status().unwrap();
            assert!(st.success());
        }
    }
    let status = child.wait().unwrap();
    assert!(!status.success(), "{sig:?}: the command was not stopped");
}

/// Waits until `cond` holds (polling), failing after 60 s.
fn wait_for(what: &str, child: &mut Child, cond: impl Fn() -> bool) {
    let start = Instant::now();
    while !cond() {
        assert!(child.try_wait().unwrap().is_none(), "the command finished before {what}");
        assert!(start.elapsed() < Duration::from_secs(60), "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(3));
    }
}

/// Data rows in a sweep partial file (the fingerprint and header lines excluded).
fn partial_rows(p: &Path) -> usize {
    std::fs::read_to_string(p).map(|t| t.matches('\n').count().saturating_sub(2)).unwrap_or(0)
}

const SWEEP: &[&str] = &[
    "sweep",
    "--preset",
    "deepseek-v4-flash",
    "--stack",
    "none",
    "--pooling",
    "mean",
    "--context-len",
    "16384",
    "--engine",
    "montecarlo",
    "--trials",
    "4000",
    "--seed",
    "11",
    "--vary",
    "dprime=0..5:6",
    "--vary",
    "index_topk=64,128,256",
    "--quiet",
];

fn sweep_case(sig: Signal, out: &str) {
    let d = tempfile::tempdir().unwrap();
    let dir = d.path();
    let full = format!("full-{out}");
    ok(dir, &[SWEEP, &["--out", &full, "--threads", "1"]].concat());
    let mut child = bin()
        .args([SWEEP, &["--out", out, "--threads", "1"]].concat())
        .current_dir(dir)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let partial = dir.join(format!("{out}.partial"));
    wait_for("three rows", &mut child, || partial_rows(&partial) >= 3);
    stop(&mut child, sig);
    let kept = partial_rows(&partial);
    assert!((3..18).contains(&kept), "{sig:?}: {kept} rows kept");
    assert!(!dir.join(out).exists(), "{sig:?}: a final file appeared before the sweep finished");
    // Resumed on two threads: the thread count must not matter either.
    ok(dir, &[SWEEP, &["--out", out, "--threads", "2", "--resume"]].concat());
    assert_eq!(
        std::fs::read(dir.join(&full)).unwrap(),
        std::fs::read(dir.join(out)).unwrap(),
        "{sig:?}: the resumed {out} differs from the uninterrupted one"
    );
    assert!(!partial.exists(), "{sig:?}: the partial file was left behind");
    let names: Vec<String> =
        std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap()).collect();
    // A CSV comes with its metadata sidecar (FILE.meta.json), the same as the uninterrupted one's.
    let csv = out.ends_with(".csv");
    if csv {
        assert_eq!(
            std::fs::read(dir.join(format!("{full}.meta.json"))).unwrap(),
            std::fs::read(dir.join(format!("{out}.meta.json"))).unwrap(),
            "{sig:?}: the resumed sidecar differs"
        );
    }
    assert_eq!(names.len(), if csv { 4 } else { 2 }, "{sig:?}: stray files {names:?}");
}

#[test]
fn sweep_stopped_by_sigint_resumes_to_the_same_csv() {
    sweep_case(Signal::Int, "s.csv");
}

#[test]
fn sweep_stopped_by_sigkill_resumes_to_the_same_json() {
    sweep_case(Signal::Kill, "s.json");
}

const EXPERIMENT: &str = r#"name = "slow"
title = "interrupted"
seed = 4
trials = 4000
engine = "montecarlo"

[scenario]
preset = "deepseek-v4-flash"
stack = "none"
pooling = "mean"
context_len = 16384

[[data]]
name = "obs"
file = "obs.csv"

[[figure]]
name = "curves"
kind = "recall_curves"
x = "dprime=0..4:5"
series = ["index_topk=64,128"]
data = "obs"

[[figure]]
name = "ranks"
kind = "rank_band"
x = "depth=0..1:5"
k_lines = [64]

[[figure]]
name = "heat"
kind = "heatmap"
x = "dprime=1,3"
y = "score_noise=0,0.5"
"#;

const OBS: &str = "context_len,index_topk,trials,hits\n4096,64,10,4\n";

/// Interrupts `run` once `ready` holds in the staging folder, resumes it, and compares every
/// file with an uninterrupted run.
fn run_case(sig: Signal, what: &str, ready: fn(&Path) -> bool) {
    let d = tempfile::tempdir().unwrap();
    let dir = d.path();
    std::fs::write(dir.join("exp.toml"), EXPERIMENT).unwrap();
    std::fs::write(dir.join("obs.csv"), OBS).unwrap();
    ok(dir, &["run", "exp.toml", "--out", "full", "-q", "--threads", "1"]);
    let mut child = bin()
        .args(["run", "exp.toml", "--out", "res", "-q", "--threads", "1"])
        .current_dir(dir)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let stage = dir.join(".res.partial");
    wait_for(what, &mut child, || ready(&stage));
    stop(&mut child, sig);
    assert!(!dir.join("res").exists(), "{sig:?}: the result folder appeared before the run finished");
    assert!(stage.join("data").is_dir(), "{sig:?}: the staging folder is gone");
    ok(dir, &["run", "exp.toml", "--out", "res", "-q", "--threads", "2", "--resume"]);
    let (a, b) = (files(&dir.join("full")), files(&dir.join("res")));
    assert_eq!(a.keys().collect::<Vec<_>>(), b.keys().collect::<Vec<_>>(), "{sig:?} {what}: different files");
    for (k, v) in &a {
        assert!(v == &b[k], "{sig:?} {what}: {} differs from the uninterrupted run", k.display());
    }
    assert!(!stage.exists(), "{sig:?}: the staging folder was left behind");
}

#[test]
fn run_stopped_by_sigkill_inside_the_first_figure_resumes_to_the_same_folder() {
    run_case(Signal::Kill, "rows of the first figure", |s| partial_rows(&s.join("data/curves.csv.partial")) >= 2);
}

#[test]
fn run_stopped_by_sigint_after_a_finished_figure_resumes_to_the_same_folder() {
    run_case(Signal::Int, "the second figure", |s| partial_rows(&s.join("data/ranks.csv.partial")) >= 1);
}

#[test]
fn resume_refuses_the_staging_folder_of_another_experiment() {
    let d = tempfile::tempdir().unwrap();
    let dir = d.path();
    std::fs::write(dir.join("exp.toml"), EXPERIMENT).unwrap();
    std::fs::write(dir.join("obs.csv"), OBS).unwrap();
    let mut child = bin()
        .args(["run", "exp.toml", "--out", "res", "-q", "--threads", "1"])
        .current_dir(dir)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let stage = dir.join(".res.partial");
    wait_for("a row", &mut child, || partial_rows(&stage.join("data/curves.csv.partial")) >= 1);
    stop(&mut child, Signal::Kill);
    std::fs::write(dir.join("exp.toml"), EXPERIMENT.replace("seed = 4", "seed = 5")).unwrap();
    let o = bin().args(["run", "exp.toml", "--out", "res", "--resume"]).current_dir(dir).output().unwrap();
    assert_eq!(o.status.code(), Some(2));
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(e.contains("different experiment") && e.lines().count() == 1, "{e}");
    assert!(stage.is_dir(), "the other run's rows are kept");
    // Without --resume the stale staging folder is replaced.
    ok(dir, &["run", "exp.toml", "--out", "res", "-q"]);
    assert!(!stage.exists() && dir.join("res/report.md").exists());
}
