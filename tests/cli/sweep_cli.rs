//! `dsa-sim sweep` and `dsa-sim presets` as a user runs them.

use std::path::Path;
use std::process::{Command, Output};

fn dsa(args: &[&str], dir: &Path) -> Output {
    Command::new(env!("CARGO_BIN_EXE_dsa-sim")).args(args).current_dir(dir).output().unwrap()
}

fn ok(o: &Output) -> String {
    assert!(o.status.success(), "stderr: {}", String::from_utf8_lossy(&o.stderr));
    String::from_utf8(o.stdout.clone()).unwrap()
}

fn bad(o: &Output) -> String {
    assert_eq!(o.status.code(), Some(2), "stdout: {}", String::from_utf8_lossy(&o.stdout));
    let e = String::from_utf8(o.stderr.clone()).unwrap();
    assert_eq!(e.trim_end().lines().count(), 1, "one line: {e}");
    assert!(e.starts_with("error: "), "{e}");
    e
}

const GRID: &[&str] = &[
    "sweep",
    "--preset",
    "deepseek-v4-flash",
    "--stack",
    "none",
    "--dprime",
    "1.5",
    "--vary",
    "context_len=1024..262144:x4",
    "--vary",
    "index_topk=512,1024",
    "--vary",
    "depth=0.25,0.75",
];

#[test]
fn csv_to_stdout_has_one_row_per_point_in_grid_order() {
    let d = tempfile::tempdir().unwrap();
    let out = ok(&dsa(GRID, d.path()));
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(
        lines[0],
        "context_len,index_topk,depth,recall,ci_low,ci_high,engine,trials,rank_p05,rank_p50,rank_p90,rank_p95,n_candidates,coverage_horizon_tokens"
    );
    assert_eq!(lines.len(), 1 + 5 * 2 * 2);
    assert!(lines[1].starts_with("1024,512,0.25,"), "{}", lines[1]);
    assert!(lines[20].starts_with("262144,1024,0.75,"), "{}", lines[20]);
    // Below the coverage horizon everything is selected.
    assert!(lines[1].contains(",1,1,1,"), "{}", lines[1]);
}

#[test]
fn same_file_for_any_thread_count_and_json_output() {
    let d = tempfile::tempdir().unwrap();
    let mut a: Vec<&str> = GRID.to_vec();
    a.extend(["--out", "one.csv", "--threads", "1", "--engine", "montecarlo", "--trials", "3000", "--no-rank"]);
    ok(&dsa(&a, d.path()));
    let mut b: Vec<&str> = GRID.to_vec();
    b.extend(["--out", "two.csv", "--threads", "2", "--engine", "montecarlo", "--trials", "3000", "--no-rank"]);
    ok(&dsa(&b, d.path()));
    let one = std::fs::read(d.path().join("one.csv")).unwrap();
    assert_eq!(one, std::fs::read(d.path().join("two.csv")).unwrap());
    assert!(String::from_utf8(one).unwrap().contains("montecarlo,3000"));
    let mut j: Vec<&str> = GRID.to_vec();
    j.extend(["--out", "x.json"]);
    ok(&dsa(&j, d.path()));
    let v: serde_json::Value = serde_json::from_slice(&std::fs::read(d.path().join("x.json")).unwrap()).unwrap();
    let rows = v["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 20);
    assert_eq!(rows[0]["context_len"], 1024);
    assert!(rows[0]["rank_p50"].is_u64() && rows[0]["recall"].is_f64() || rows[0]["recall"].is_u64());
    assert_eq!(v["base_scenario"]["compress_ratio"], 4);
}

#[test]
fn resume_after_an_interruption_gives_the_uninterrupted_file() {
    let d = tempfile::tempdir().unwrap();
    let mut full: Vec<&str> = GRID.to_vec();
    full.extend(["--out", "full.csv", "--quiet"]);
    ok(&dsa(&full, d.path()));
    // Stop after 7 points: the rows are kept in part.csv.partial, part.csv does not exist yet.
    let mut part: Vec<&str> = GRID.to_vec();
    part.extend(["--out", "part.csv", "--limit", "7"]);
    let o = dsa(&part, d.path());
    ok(&o);
    assert!(String::from_utf8_lossy(&o.stderr).contains("--resume"));
    assert!(!d.path().join("part.csv").exists());
    let partial = std::fs::read_to_string(d.path().join("part.csv.partial")).unwrap();
    assert_eq!(partial.lines().count(), 1 + 1 + 7);
    // A kill in the middle of a line leaves a truncated last line: it is recomputed.
    std::fs::write(d.path().join("part.csv.partial"), format!("{partial}65536,1024,0.2")).unwrap();
    let mut resume: Vec<&str> = GRID.to_vec();
    resume.extend(["--out", "part.csv", "--resume", "--quiet"]);
    ok(&dsa(&resume, d.path()));
    assert_eq!(std::fs::read(d.path().join("full.csv")).unwrap(), std::fs::read(d.path().join("part.csv")).unwrap());
    assert!(!d.path().join("part.csv.partial").exists());
    // A partial file of a different sweep is refused.
    let mut p2: Vec<&str> = GRID.to_vec();
    p2.extend(["--out", "p2.csv", "--limit", "3", "--quiet"]);
    ok(&dsa(&p2, d.path()));
    let mut other: Vec<&str> = GRID.to_vec();
    other[6] = "2.5";
    other.extend(["--out", "p2.csv", "--resume"]);
    let e = bad(&dsa(&other, d.path()));
    assert!(e.contains("different sweep"), "{e}");
}

#[test]
fn bad_input_exits_2_with_one_line_and_writes_nothing() {
    let d = tempfile::tempdir().unwrap();
    for (vary, needle) in [
        ("contxt_len=1,2", "contxt_len"),
        ("context_len=", "no values"),
        ("context_len=1024..x2", "context_len"),
        ("depth=0..1:0", "0 points"),
        ("depth=2", "depth"),
        ("pooling=avg", "pooling"),
    ] {
        let e = bad(&dsa(&["sweep", "--vary", vary, "--out", "o.csv"], d.path()));
        assert!(e.contains(needle), "{vary}: {e}");
    }
    let e = bad(&dsa(&["sweep", "--vary", "depth=0,1", "--out", "missing/dir/o.csv"], d.path()));
    assert!(e.contains("missing/dir/o.csv"), "{e}");
    let e = bad(&dsa(&["sweep", "--preset", "nope", "--vary", "depth=0,1"], d.path()));
    assert!(e.contains("nope"), "{e}");
    let e = bad(&dsa(&["sweep", "--vary", "depth=0,1", "--resume"], d.path()));
    assert!(e.contains("--out"), "{e}");
    assert_eq!(std::fs::read_dir(d.path()).unwrap().count(), 0, "nothing written");
}

#[test]
fn presets_lists_every_preset_and_field() {
    let d = tempfile::tempdir().unwrap();
    let text = ok(&dsa(&["presets"], d.path()));
    for name in dsa_sim::scenario::PRESET_NAMES.iter().chain(&dsa_sim::scenario::field_names()) {
        assert!(text.contains(name), "{name} missing");
    }
    let v: serde_json::Value = serde_json::from_str(&ok(&dsa(&["presets", "--json"], d.path()))).unwrap();
    assert_eq!(v["presets"]["deepseek-v4-flash"]["compress_ratio"], 4);
    assert_eq!(v["presets"]["deepseek-v4-flash"]["window"], 128);
    for p in dsa_sim::scenario::PRESET_NAMES {
        for f in dsa_sim::scenario::field_names() {
            assert!(!v["presets"][p][f].is_null(), "{p}.{f}");
        }
    }
}

#[test]
fn presets_fit_100_columns_in_blocks_and_hide_format_floors() {
    let d = tempfile::tempdir().unwrap();
    let text = ok(&dsa(&["presets"], d.path()));
    for line in text.lines() {
        assert!(line.chars().count() <= 100, "{line:?} is wider than 100 columns");
        assert!(!line.contains(":floor="), "{line:?}");
    }
    for name in dsa_sim::scenario::PRESET_NAMES {
        assert!(text.lines().any(|l| l.starts_with(&format!("{name}  ("))), "a block for {name}");
    }
    assert!(text.contains("q_format         fp4-e2m1:32:ue8m0*"), "{text}");
    let wide = ok(&dsa(&["presets", "--wide"], d.path()));
    let header = wide.lines().next().unwrap();
    for name in dsa_sim::scenario::PRESET_NAMES {
        assert!(header.contains(name), "{header}");
    }
    assert!(!wide.contains(":floor="));
    let json = ok(&dsa(&["presets", "--json"], d.path()));
    assert!(json.contains(":floor="), "--json keeps the whole spec");
    assert_eq!(dsa(&["presets", "--wide", "--json"], d.path()).status.code(), Some(2));
}

/// A sweep whose stdout is closed (`| head`) stops instead of computing the rest of the grid:
/// this one would take minutes to finish.
#[test]
fn a_closed_stdout_ends_the_sweep() {
    use std::io::{BufRead, BufReader};
    use std::time::{Duration, Instant};
    let d = tempfile::tempdir().unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_dsa-sim"))
        .args(["sweep", "--engine", "montecarlo", "--trials", "1000000", "--vary", "dprime=0..4:5000", "-q"])
        .current_dir(d.path())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    assert!(lines.next().unwrap().unwrap().starts_with("dprime,recall"));
    assert!(lines.next().unwrap().unwrap().contains(",montecarlo,1000000,"));
    drop(lines);
    let closed = Instant::now();
    while child.try_wait().unwrap().is_none() {
        if closed.elapsed() > Duration::from_secs(60) {
            let _ = child.kill();
            panic!("the sweep kept computing after its stdout was closed");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let status = child.wait().unwrap();
    let mut err = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut err).unwrap();
    assert!(status.success() && err.is_empty(), "{status}: {err}");
}
