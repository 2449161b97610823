//! `dsa-sim run` on experiment files, as a user runs it.

use crate::common;
use common::files;
use std::path::Path;
use std::process::{Command, Output};

fn dsa(args: &[&str], dir: &Path) -> Output {
    Command::new(env!("CARGO_BIN_EXE_dsa-sim")).args(args).current_dir(dir).output().unwrap()
}

const EXP: &str = r#"
name = "tiny"
title = "Tiny experiment"
description = "For the tests."
seed = 5
trials = 2000

[scenario]
preset = "deepseek-v4-flash"
stack = "none"
dprime = 1.0

[[data]]
name = "obs"
file = "obs.csv"
label = "TRANSCRIBED, not measured"

[[figure]]
name = "curves"
kind = "recall_curves"
x = "context_len=1024..65536:x4"
series = ["index_topk=512,1024"]
data = "obs"

[[figure]]
name = "heat"
kind = "heatmap"
x = "context_len=1024..65536:x4"
y = "depth=0..1:3"

[[figure]]
name = "ranks"
kind = "rank_band"
x = "context_len=1024..65536:x4"
k_lines = [512]

[[figure]]
name = "regimes"
kind = "regime_map"
x = "context_len=1024..65536:x4"
y = "dprime=0..4:3"
k = [512, 1024]

[[figure]]
name = "noise"
kind = "recall_curves"
x = "score_noise=0..1:3"
series = ["index_topk=512,1024"]
set = { engine_unused = 1 }
"#;

const OBS: &str =
    "context_len,index_topk,trials,hits,repeat,label\r\n4000, 512,10,2,1,lost\r\n8000,1024,10,1,1,lost\r\n";

fn setup(exp: &str) -> tempfile::TempDir {
    let d = tempfile::tempdir().unwrap();
    std::fs::write(d.path().join("exp.toml"), exp).unwrap();
    std::fs::write(d.path().join("obs.csv"), OBS).unwrap();
    d
}

fn good_exp() -> String {
    EXP.replace("set = { engine_unused = 1 }", "set = { context_len = 16384 }")
}

#[test]
fn run_writes_data_figures_scenario_and_report() {
    let d = setup(&good_exp());
    let o = dsa(&["run", "exp.toml", "--out", "res", "--quiet"], d.path());
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let r = d.path().join("res");
    for f in ["curves", "heat", "ranks", "regimes", "noise"] {
        for p in
            [format!("data/{f}.csv"), format!("data/{f}.json"), format!("figures/{f}.svg"), format!("figures/{f}.png")]
        {
            let meta = std::fs::metadata(r.join(&p)).unwrap_or_else(|_| panic!("{p} missing"));
            assert!(meta.len() > 100, "{p} too small");
        }
        let png = std::fs::read(r.join(format!("figures/{f}.png"))).unwrap();
        assert_eq!(&png[1..4], b"PNG");
    }
    let report = std::fs::read_to_string(r.join("report.md")).unwrap();
    assert!(report.contains("![") && report.contains("figures/curves.png"));
    assert!(report.contains("seed: 5") && report.contains(env!("CARGO_PKG_VERSION")));
    assert!(report.contains("TRANSCRIBED, not measured"));
    for f in dsa_sim::scenario::field_names() {
        assert!(report.contains(&format!("`{f}`")), "report misses {f}");
    }
    let scen = dsa_sim::Scenario::from_toml_str(&std::fs::read_to_string(r.join("scenario.toml")).unwrap()).unwrap();
    assert_eq!((scen.compress_ratio, scen.dprime), (4, 1.0));
    let svg = std::fs::read_to_string(r.join("figures/curves.svg")).unwrap();
    assert!(svg.contains("TRANSCRIBED") && svg.contains("k·c"));
    // Nothing but the result folder is left behind.
    let names: Vec<String> =
        std::fs::read_dir(d.path()).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap()).collect();
    assert_eq!(names.len(), 3, "{names:?}");
    // A rerun gives the same data and report.
    let first = std::fs::read(r.join("data/curves.csv")).unwrap();
    assert!(dsa(&["run", "exp.toml", "--out", "res", "-q", "--threads", "1"], d.path()).status.success());
    assert_eq!(first, std::fs::read(r.join("data/curves.csv")).unwrap());
    assert_eq!(report, std::fs::read_to_string(r.join("report.md")).unwrap());
}

#[test]
fn bad_experiments_exit_2_with_one_line_and_leave_nothing() {
    for (text, obs, needle) in [
        (EXP.to_string(), OBS, "engine_unused"),
        (good_exp().replace("y = \"depth=0..1:3\"", "y = \"depth=0..1:x\""), OBS, "depth"),
        (good_exp().replace("k = [512, 1024]", "k = []"), OBS, "regime_map needs"),
        (good_exp().replace("dprime = 1.0", "dprime = \"high\""), OBS, "dprime"),
        (good_exp(), "context_len,index_topk,trials,hits\n4000,512,10,12\n", "line 2"),
        (good_exp().replace("kind = \"heatmap\"", "kind = \"pie\""), OBS, "pie"),
    ] {
        let d = setup(&text);
        std::fs::write(d.path().join("obs.csv"), obs).unwrap();
        let o = dsa(&["run", "exp.toml", "--out", "res"], d.path());
        assert_eq!(o.status.code(), Some(2), "{needle}");
        let e = String::from_utf8(o.stderr).unwrap();
        assert!(e.starts_with("error: ") && e.trim_end().lines().count() == 1 && e.contains(needle), "{needle}: {e}");
        assert!(!d.path().join("res").exists());
        assert_eq!(std::fs::read_dir(d.path()).unwrap().count(), 2, "{needle}: something was left behind");
    }
    // An output folder that cannot be created.
    let d = setup(&good_exp());
    std::fs::write(d.path().join("file"), "x").unwrap();
    let o = dsa(&["run", "exp.toml", "--out", "file/res"], d.path());
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("file/res"));
    let o = dsa(&["run", "nope.toml"], d.path());
    assert_eq!(o.status.code(), Some(2));
}

#[test]
fn shipped_experiments_parse() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("experiments");
    let mut n = 0;
    for e in std::fs::read_dir(&root).unwrap() {
        let p = e.unwrap().path();
        let calibration =
            std::fs::read_to_string(&p).is_ok_and(|t| dsa_sim::experiment::calibration::is_calibration_experiment(&t));
        if p.extension().is_some_and(|x| x == "toml") && !calibration {
            let exp = dsa_sim::experiment::Experiment::load(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
            assert!(!exp.figures.is_empty());
            assert!(
                Path::new(env!("CARGO_MANIFEST_DIR")).join("results").join(&exp.name).join("report.md").exists(),
                "results of {} not committed",
                exp.name
            );
            n += 1;
        }
    }
    assert!(n >= 3);
}

#[test]
fn run_json_summary_and_seed_override() {
    let d = setup(&good_exp());
    let o = dsa(&["run", "exp.toml", "--out", "a", "--json"], d.path());
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["experiment"], "tiny");
    assert_eq!(v["kind"], "figures");
    assert_eq!(v["figures"], 5);
    assert_eq!(v["seed"], 5, "the file's seed");
    assert_eq!(v["dsa_sim_version"], env!("CARGO_PKG_VERSION"));
    assert!(v["folder"].as_str().unwrap().ends_with('a') && v["report"].as_str().unwrap().ends_with("report.md"));
    assert!(v["files"].as_u64().unwrap() >= 20 && v["points"].as_u64().unwrap() > 0);
    let o = dsa(&["run", "exp.toml", "--out", "b", "--json", "--seed", "9"], d.path());
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["seed"], 9);
    let report = std::fs::read_to_string(d.path().join("b/report.md")).unwrap();
    assert!(report.contains("seed: 9"), "the report states the seed used");
    // The heatmap is Monte Carlo (montecarlo rows depend on the seed): another seed, other rows.
    let data = |dir: &str| std::fs::read_to_string(d.path().join(dir).join("data/noise.json")).unwrap();
    assert!(data("b").contains("\"seed\": 9"));
    // The same seed as the file's gives the same folder as no --seed.
    let o = dsa(&["run", "exp.toml", "--out", "c", "-q", "--seed", "5"], d.path());
    assert!(o.status.success());
    assert_eq!(
        std::fs::read(d.path().join("a/data/curves.csv")).unwrap(),
        std::fs::read(d.path().join("c/data/curves.csv")).unwrap()
    );
}

#[test]
fn sharded_runs_merge_into_the_unsharded_folder() {
    let d = setup(&good_exp());
    let dir = d.path();
    let o = dsa(&["run", "exp.toml", "--out", "whole", "-q"], dir);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let whole = files(&dir.join("whole"));
    for n in [2usize, 3, 20] {
        let mut merge_args: Vec<String> =
            vec!["run".into(), "exp.toml".into(), "--out".into(), format!("merged{n}"), "-q".into(), "--merge".into()];
        for i in 0..n {
            let part = format!("shard{n}-{i}");
            let o = dsa(&["run", "exp.toml", "--shard", &format!("{i}/{n}"), "--out", &part, "--json"], dir);
            assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
            let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
            assert_eq!(v["shard"], format!("{i}/{n}"));
            assert!(!dir.join(&part).join("report.md").exists(), "a shard draws no report");
            merge_args.push(part);
        }
        let args: Vec<&str> = merge_args.iter().map(String::as_str).collect();
        let o = dsa(&args, dir);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let merged = files(&dir.join(format!("merged{n}")));
        assert_eq!(merged.keys().collect::<Vec<_>>(), whole.keys().collect::<Vec<_>>(), "N = {n}");
        for (k, v) in &whole {
            assert!(&merged[k] == v, "N = {n}: {k} differs");
        }
    }
    // Parts of another seed, or a missing shard, are refused, naming the part.
    let o = dsa(&["run", "exp.toml", "--shard", "1/2", "--seed", "6", "--out", "other"], dir);
    assert!(o.status.success());
    let o = dsa(&["run", "exp.toml", "--out", "bad", "--merge", "shard2-0", "other"], dir);
    assert_eq!(o.status.code(), Some(2));
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(e.contains("other") && e.contains("seed"), "{e}");
    let o = dsa(&["run", "exp.toml", "--out", "bad", "--merge", "shard3-0", "shard3-2"], dir);
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("shard 1/3 is missing"));
    assert!(!dir.join("bad").exists());
    // A shard needs --out.
    assert_eq!(dsa(&["run", "exp.toml", "--shard", "0/2"], dir).status.code(), Some(2));
}
