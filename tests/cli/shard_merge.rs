//! Sharded sweeps (`sweep --shard I/N`) and `dsa-sim merge`, as a cluster user runs them: the
//! merged file is byte-identical to the unsharded sweep's, and parts of other sweeps are refused.

use std::path::Path;
use std::process::{Command, Output};

fn dsa_env(args: &[&str], dir: &Path, env: &[(&str, &str)]) -> Output {
    let mut c = Command::new(env!("CARGO_BIN_EXE_dsa-sim"));
    c.args(args).current_dir(dir);
    for k in [
        "SLURM_ARRAY_TASK_ID",
        "SLURM_ARRAY_TASK_COUNT",
        "SLURM_ARRAY_TASK_MIN",
        "SLURM_ARRAY_TASK_STEP",
        "JOB_COMPLETION_INDEX",
        "DSA_SIM_SHARD_COUNT",
    ] {
        c.env_remove(k);
    }
    for (k, v) in env {
        c.env(k, v);
    }
    c.output().unwrap()
}

fn dsa(args: &[&str], dir: &Path) -> Output {
    dsa_env(args, dir, &[])
}

fn ok(o: &Output) {
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
}

fn bad(o: &Output) -> String {
    assert_eq!(
        o.status.code(),
        Some(2),
        "stdout {} stderr {}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    let e = String::from_utf8_lossy(&o.stderr).to_string();
    assert!(e.starts_with("error: ") && e.lines().count() == 1, "{e}");
    e
}

/// 7 × 2 = 14 points, Monte Carlo so that every row depends on the seed.
const SWEEP: &[&str] = &[
    "sweep",
    "--preset",
    "deepseek-v4-flash",
    "--stack",
    "none",
    "--vary",
    "context_len=1Ki..64Ki:x2",
    "--vary",
    "index_topk=512,1024",
    "--engine",
    "montecarlo",
    "--trials",
    "500",
    "--dprime",
    "2",
    "-q",
];

fn sweep(dir: &Path, extra: &[&str]) {
    let args: Vec<&str> = SWEEP.iter().copied().chain(extra.iter().copied()).collect();
    ok(&dsa(&args, dir));
}

fn read(p: &Path) -> Vec<u8> {
    std::fs::read(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

#[test]
fn merged_parts_are_byte_identical_for_several_shard_counts() {
    let d = tempfile::tempdir().unwrap();
    let dir = d.path();
    sweep(dir, &["--out", "full.csv"]);
    sweep(dir, &["--out", "full.json"]);
    let full_csv = read(&dir.join("full.csv"));
    let full_meta = read(&dir.join("full.csv.meta.json"));
    let meta: serde_json::Value = serde_json::from_slice(&full_meta).unwrap();
    assert_eq!(meta["run"]["seed"], 20251201);
    assert_eq!(meta["dsa_sim_version"], env!("CARGO_PKG_VERSION"));
    assert_eq!(meta["base_scenario"]["compress_ratio"], 4);
    assert_eq!(meta["points"], 14);
    assert!(meta["shard"].is_null());
    for n in [1usize, 2, 3, 5, 14, 20] {
        let mut parts = Vec::new();
        // Written in reverse and passed shuffled: order does not matter.
        for i in (0..n).rev() {
            let name = format!("n{n}-p{i}.csv");
            sweep(dir, &["--shard", &format!("{i}/{n}"), "--out", &name, "--threads", "1"]);
            let m: serde_json::Value = serde_json::from_slice(&read(&dir.join(format!("{name}.meta.json")))).unwrap();
            if n == 1 {
                assert!(m["shard"].is_null(), "0/1 is the whole grid");
            } else {
                assert_eq!(m["shard"]["index"], i);
                assert_eq!(m["shard"]["points"], (14usize.saturating_sub(i)).div_ceil(n));
            }
            parts.push(name);
        }
        parts.rotate_left(n / 2);
        let out_csv = format!("m{n}.csv");
        let out_json = format!("m{n}.json");
        let mut args = vec!["merge"];
        args.extend(parts.iter().map(String::as_str));
        let mut a = args.clone();
        a.extend(["--out", &out_csv]);
        ok(&dsa(&a, dir));
        assert!(read(&dir.join(&out_csv)) == full_csv, "N = {n}: CSV differs");
        assert!(read(&dir.join(format!("{out_csv}.meta.json"))) == full_meta, "N = {n}: sidecar differs");
        let mut a = args.clone();
        a.extend(["--out", &out_json]);
        ok(&dsa(&a, dir));
        assert!(read(&dir.join(&out_json)) == read(&dir.join("full.json")), "N = {n}: JSON differs");
    }
    // A shard with no points (N > points) is a header-only file.
    let empty = String::from_utf8(read(&dir.join("n20-p17.csv"))).unwrap();
    assert_eq!(empty.lines().count(), 1, "{empty}");
}

#[test]
fn a_merge_refuses_parts_of_other_sweeps_naming_the_part() {
    let d = tempfile::tempdir().unwrap();
    let dir = d.path();
    for i in 0..3 {
        sweep(dir, &["--shard", &format!("{i}/3"), "--out", &format!("p{i}.csv")]);
    }
    sweep(dir, &["--shard", "1/3", "--out", "seed.csv", "--seed", "7"]);
    sweep(dir, &["--shard", "1/3", "--out", "grid.csv", "--window", "64"]);
    sweep(dir, &["--shard", "1/3", "--out", "trials.csv", "--no-rank"]);
    sweep(dir, &["--shard", "1/4", "--out", "four.csv"]);
    let m = |parts: &[&str]| {
        let mut a = vec!["merge"];
        a.extend(parts);
        a.extend(["--out", "out.csv"]);
        bad(&dsa(&a, dir))
    };
    let e = m(&["p0.csv", "seed.csv", "p2.csv"]);
    assert!(e.contains("seed.csv") && e.contains("seed 7"), "{e}");
    let e = m(&["p0.csv", "grid.csv", "p2.csv"]);
    assert!(e.contains("grid.csv") && e.contains("different grid"), "{e}");
    let e = m(&["p0.csv", "trials.csv", "p2.csv"]);
    assert!(e.contains("trials.csv") && e.contains("run options"), "{e}");
    let e = m(&["p0.csv", "four.csv", "p2.csv"]);
    assert!(e.contains("four.csv") && e.contains("1/4"), "{e}");
    let e = m(&["p0.csv", "p2.csv"]);
    assert!(e.contains("shard 1/3 is missing"), "{e}");
    let e = m(&["p0.csv", "p1.csv", "p1.csv", "p2.csv"]);
    assert!(e.contains("both shard 1/3"), "{e}");
    // Another version.
    std::fs::copy(dir.join("p1.csv"), dir.join("old.csv")).unwrap();
    let meta = std::fs::read_to_string(dir.join("p1.csv.meta.json")).unwrap();
    let old = meta
        .replace(&format!("\"dsa_sim_version\": \"{}\"", env!("CARGO_PKG_VERSION")), "\"dsa_sim_version\": \"0.0.1\"");
    assert_ne!(old, meta);
    std::fs::write(dir.join("old.csv.meta.json"), old).unwrap();
    let e = m(&["p0.csv", "old.csv", "p2.csv"]);
    assert!(e.contains("old.csv") && e.contains("version"), "{e}");
    // A part without its sidecar, and a part cut short.
    std::fs::copy(dir.join("p1.csv"), dir.join("bare.csv")).unwrap();
    let e = m(&["p0.csv", "bare.csv", "p2.csv"]);
    assert!(e.contains("bare.csv") && e.contains("meta.json"), "{e}");
    std::fs::copy(dir.join("p1.csv.meta.json"), dir.join("short.csv.meta.json")).unwrap();
    let text = std::fs::read_to_string(dir.join("p1.csv")).unwrap();
    let cut: Vec<&str> = text.lines().collect();
    std::fs::write(dir.join("short.csv"), cut[..cut.len() - 1].join("\n") + "\n").unwrap();
    let e = m(&["p0.csv", "short.csv", "p2.csv"]);
    assert!(e.contains("short.csv") && e.contains("did not finish"), "{e}");
    // A row edited by hand.
    std::fs::copy(dir.join("p1.csv.meta.json"), dir.join("edit.csv.meta.json")).unwrap();
    std::fs::write(dir.join("edit.csv"), text.replacen("\n1024,1024,", "\n1024,512,", 1)).unwrap();
    let e = m(&["p0.csv", "edit.csv", "p2.csv"]);
    assert!(e.contains("edit.csv") && e.contains("line"), "{e}");
    assert!(!dir.join("out.csv").exists(), "nothing written");
    // The output may not be a part.
    let e = bad(&dsa(&["merge", "p0.csv", "p1.csv", "p2.csv", "--out", "p1.csv"], dir));
    assert!(e.contains("also a part"), "{e}");
}

#[test]
fn shard_auto_reads_slurm_and_kubernetes_variables() {
    let d = tempfile::tempdir().unwrap();
    let dir = d.path();
    let args: Vec<&str> = SWEEP.iter().copied().chain(["--shard", "auto", "--out", "a.csv"]).collect();
    ok(&dsa_env(
        &args,
        dir,
        &[("SLURM_ARRAY_TASK_ID", "2"), ("SLURM_ARRAY_TASK_COUNT", "3"), ("SLURM_ARRAY_TASK_MIN", "1")],
    ));
    let m: serde_json::Value = serde_json::from_slice(&read(&dir.join("a.csv.meta.json"))).unwrap();
    assert_eq!((m["shard"]["index"].clone(), m["shard"]["count"].clone()), (1.into(), 3.into()));
    let args: Vec<&str> = SWEEP.iter().copied().chain(["--shard", "auto", "--out", "k.csv"]).collect();
    ok(&dsa_env(&args, dir, &[("JOB_COMPLETION_INDEX", "4"), ("DSA_SIM_SHARD_COUNT", "5")]));
    let m: serde_json::Value = serde_json::from_slice(&read(&dir.join("k.csv.meta.json"))).unwrap();
    assert_eq!((m["shard"]["index"].clone(), m["shard"]["count"].clone()), (4.into(), 5.into()));
    let e = bad(&dsa(&args, dir));
    assert!(e.contains("SLURM_ARRAY_TASK_ID"), "{e}");
    let e = bad(&dsa_env(&args, dir, &[("JOB_COMPLETION_INDEX", "4")]));
    assert!(e.contains("DSA_SIM_SHARD_COUNT"), "{e}");
}

#[test]
fn shard_flag_errors_and_resume_of_a_shard() {
    let d = tempfile::tempdir().unwrap();
    let dir = d.path();
    for (extra, needle) in [
        (vec!["--shard", "3/3", "--out", "x.csv"], "--shard 3/3"),
        (vec!["--shard", "1/0", "--out", "x.csv"], "--shard 1/0"),
        (vec!["--shard", "0/2"], "--out"),
        (vec!["--shard", "0/2", "--out", "x.json"], "CSV"),
    ] {
        let args: Vec<&str> = SWEEP.iter().copied().chain(extra.iter().copied()).collect();
        let e = bad(&dsa(&args, dir));
        assert!(e.contains(needle), "{extra:?}: {e}");
    }
    sweep(dir, &["--shard", "1/2", "--out", "whole.csv"]);
    sweep(dir, &["--shard", "1/2", "--out", "resumed.csv", "--limit", "3"]);
    assert!(!dir.join("resumed.csv").exists() && dir.join("resumed.csv.partial").exists());
    // The partial file of shard 1/2 is refused for shard 0/2.
    let args: Vec<&str> = SWEEP.iter().copied().chain(["--shard", "0/2", "--out", "resumed.csv", "--resume"]).collect();
    assert!(bad(&dsa(&args, dir)).contains("different sweep"));
    sweep(dir, &["--shard", "1/2", "--out", "resumed.csv", "--resume"]);
    assert!(read(&dir.join("whole.csv")) == read(&dir.join("resumed.csv")));
    assert!(read(&dir.join("whole.csv.meta.json")) == read(&dir.join("resumed.csv.meta.json")));
}
