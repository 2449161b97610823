//! Output safety (the rules of `dsa_sim::output`): dsa-sim deletes or replaces only what it
//! created, never writes over a device, FIFO or socket, lets one run at a time write an output,
//! refuses colliding output names before any work, and leaves no stray temporaries. And the one
//! measured-data reader: `run` and `calibrate` accept and reject the same tables with the same
//! messages, in linear time.

use crate::common;
use common::snapshot;
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_dsa-sim"))
}

fn dsa(dir: &Path, args: &[&str]) -> Output {
    bin().args(args).current_dir(dir).stdin(Stdio::null()).output().unwrap()
}

/// The command failed with exit 2 and one `error:` line containing every needle; returns it.
fn refused(o: &Output, needles: &[&str]) -> String {
    let e = String::from_utf8_lossy(&o.stderr).into_owned();
    assert_eq!(o.status.code(), Some(2), "exit code: {e}");
    assert!(e.starts_with("error: ") && e.ends_with('\n') && e.lines().count() == 1, "not one error line: {e:?}");
    for n in needles {
        assert!(e.contains(n), "{n:?} not in {e:?}");
    }
    assert!(o.stdout.is_empty(), "stdout: {}", String::from_utf8_lossy(&o.stdout));
    e
}

fn succeeded(o: &Output) {
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
}

const OBS: &str = "context_len,index_topk,trials,hits\n4096,512,10,4\n16384,512,10,1\n";

const EXP: &str = r#"name = "small"
seed = 2
[scenario]
preset = "deepseek-v4-flash"
[[data]]
name = "obs"
file = "obs.csv"
[[figure]]
name = "curves"
kind = "recall_curves"
x = "context_len=1024..65536:x4"
data = "obs"
"#;

/// A calibration experiment that refuses or runs in well under a second.
const CAL: &str = r#"name = "cal"
data = "obs.csv"
fit = "dprime"
target = 0.9
[scenario]
preset = "deepseek-v4-flash"
context_len = 16000
"#;

fn setup() -> tempfile::TempDir {
    let d = tempfile::tempdir().unwrap();
    std::fs::write(d.path().join("exp.toml"), EXP).unwrap();
    std::fs::write(d.path().join("cal.toml"), CAL).unwrap();
    std::fs::write(d.path().join("obs.csv"), OBS).unwrap();
    d
}

#[test]
fn a_user_folder_is_never_replaced() {
    let d = setup();
    let dir = d.path();
    std::fs::create_dir_all(dir.join("mydocs/sub")).unwrap();
    std::fs::write(dir.join("mydocs/thesis.txt"), "years of work").unwrap();
    std::fs::write(dir.join("mydocs/sub/notes.txt"), "more").unwrap();
    let before = snapshot(dir);
    refused(&dsa(dir, &["run", "exp.toml", "--out", "mydocs"]), &["mydocs", "not a dsa-sim result"]);
    assert_eq!(before, snapshot(dir), "run changed the folder");
    refused(
        &dsa(dir, &["calibrate", "--experiment", "cal.toml", "--out", "mydocs"]),
        &["mydocs", "not a dsa-sim result"],
    );
    assert_eq!(before, snapshot(dir), "calibrate changed the folder");
    refused(&dsa(dir, &["run", "cal.toml", "--out", "mydocs"]), &["mydocs"]);
    // `--out .` is the working folder: refused before any work, nothing left behind.
    refused(&dsa(dir, &["run", "exp.toml", "--out", "."]), &["holds this run's input"]);
    assert_eq!(before, snapshot(dir));
    // An empty folder holds nothing to lose; a dsa-sim result is replaced.
    std::fs::create_dir(dir.join("empty")).unwrap();
    succeeded(&dsa(dir, &["run", "exp.toml", "--out", "empty", "-q"]));
    assert!(dir.join("empty/.dsa-sim-result").is_file() && dir.join("empty/report.md").is_file());
    succeeded(&dsa(dir, &["run", "exp.toml", "--out", "empty", "-q"]));
    succeeded(&dsa(dir, &["calibrate", "--experiment", "cal.toml", "--out", "empty"]));
    assert!(dir.join("empty/.dsa-sim-result").is_file() && dir.join("empty/calibrate.json").is_file());
}

#[test]
fn the_experiments_own_folder_is_never_replaced() {
    let d = setup();
    let dir = d.path();
    std::fs::create_dir(dir.join("proj")).unwrap();
    std::fs::write(dir.join("proj/exp.toml"), EXP).unwrap();
    std::fs::write(dir.join("proj/obs.csv"), OBS).unwrap();
    std::fs::write(dir.join("proj/cal.toml"), CAL).unwrap();
    let before = snapshot(dir);
    refused(&dsa(dir, &["run", "proj/exp.toml", "--out", "proj"]), &["proj", "holds this run's input"]);
    refused(
        &dsa(dir, &["calibrate", "--experiment", "proj/cal.toml", "--out", "proj"]),
        &["proj", "holds this run's input"],
    );
    assert_eq!(before, snapshot(dir));
    // Even a dsa-sim result is kept when the run reads its input from it: the copy of the
    // experiment inside a result folder, run onto that folder.
    succeeded(&dsa(dir, &["run", "exp.toml", "--out", "res", "-q"]));
    std::fs::write(dir.join("res/obs.csv"), OBS).unwrap();
    let before = snapshot(dir);
    refused(&dsa(dir, &["run", "res/experiment.toml", "--out", "res"]), &["res", "res/experiment.toml"]);
    assert_eq!(before, snapshot(dir));
}

/// Runs `sweep --out target` and checks it is refused and `target` is still what it was.
fn sweep_refuses(dir: &Path, target: &str, kind: &str) {
    let before = std::fs::symlink_metadata(dir.join(target)).map(|m| m.file_type());
    let o = dsa(dir, &["sweep", "--vary", "depth=0,1", "--no-rank", "--out", target]);
    refused(&o, &[target, kind]);
    let after = std::fs::symlink_metadata(dir.join(target)).map(|m| m.file_type());
    assert_eq!(before.ok(), after.ok(), "{target} was replaced");
    let stray: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| n.starts_with('.') || n.ends_with(".partial"))
        .collect();
    assert!(stray.is_empty(), "left behind: {stray:?}");
}

#[cfg(unix)]
#[test]
fn sweeps_write_only_over_regular_files() {
    let d = tempfile::tempdir().unwrap();
    let dir = d.path();
    assert!(Command::new("mkfifo").arg(dir.join("fifo.csv")).status().unwrap().success());
    sweep_refuses(dir, "fifo.csv", "FIFO");
    // A FIFO where the partial file goes is not read (it would block) nor replaced.
    let sub = dir.join("sub");
    std::fs::create_dir(&sub).unwrap();
    assert!(Command::new("mkfifo").arg(sub.join("p.csv.partial")).status().unwrap().success());
    let o = dsa(&sub, &["sweep", "--vary", "depth=0,1", "--no-rank", "--out", "p.csv", "--resume"]);
    refused(&o, &["p.csv.partial", "FIFO"]);
    assert_eq!(std::fs::read_dir(&sub).unwrap().count(), 1);
    let _sock = std::os::unix::net::UnixListener::bind(dir.join("sock.csv")).unwrap();
    sweep_refuses(dir, "sock.csv", "socket");
    // A character device: made in the temporary folder when allowed (as root), so that the
    // system's own devices are never at stake; /dev/null itself only when not root.
    let made = Command::new("mknod").arg(dir.join("null.csv")).args(["c", "1", "3"]).stderr(Stdio::null()).status();
    if made.is_ok_and(|s| s.success()) {
        sweep_refuses(dir, "null.csv", "character device");
    }
    let root = std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|t| t.lines().find_map(|l| l.strip_prefix("Uid:").map(|u| u.split_whitespace().next() == Some("0"))))
        .unwrap_or(true);
    if !root {
        let o = dsa(dir, &["sweep", "--vary", "depth=0,1", "--no-rank", "--out", "/dev/null"]);
        refused(&o, &["/dev/null", "character device"]);
    }
    // A run's --out on a FIFO is not a folder.
    std::fs::write(dir.join("exp.toml"), EXP).unwrap();
    std::fs::write(dir.join("obs.csv"), OBS).unwrap();
    refused(&dsa(dir, &["run", "exp.toml", "--out", "fifo.csv"]), &["fifo.csv", "not a folder"]);
}

/// A run slow enough to be caught in the act: Monte Carlo on the materialising path, one thread.
const SLOW: &str = r#"name = "slow"
seed = 4
trials = 4000
engine = "montecarlo"
[scenario]
preset = "deepseek-v4-flash"
pooling = "mean"
context_len = 16384
[[figure]]
name = "curves"
kind = "recall_curves"
x = "dprime=0..4:5"
series = ["index_topk=64,128"]
"#;

fn wait_for(child: &mut Child, what: &str, cond: impl Fn() -> bool) {
    let start = Instant::now();
    while !cond() {
        assert!(child.try_wait().unwrap().is_none(), "finished before {what}");
        assert!(start.elapsed() < Duration::from_secs(60), "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(3));
    }
}

#[test]
fn a_second_run_on_the_same_output_fails_with_one_line() {
    let d = tempfile::tempdir().unwrap();
    let dir = d.path();
    std::fs::write(dir.join("slow.toml"), SLOW).unwrap();
    let mut first = bin()
        .args(["run", "slow.toml", "--out", "res", "-q", "--threads", "1"])
        .current_dir(dir)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let stage = dir.join(".res.partial");
    wait_for(&mut first, "the first row", || {
        std::fs::read_to_string(stage.join("data/curves.csv.partial")).is_ok_and(|t| t.lines().count() >= 3)
    });
    let staged = snapshot(&stage);
    let e = refused(&dsa(dir, &["run", "slow.toml", "--out", "res", "-q"]), &["res", "another dsa-sim run"]);
    assert!(e.contains(".res.lock"), "{e}");
    refused(&dsa(dir, &["run", "slow.toml", "--out", "res", "--resume"]), &["another dsa-sim run"]);
    // The first run's rows are untouched (rows may have been added meanwhile, none removed).
    let now = snapshot(&stage);
    assert!(staged.keys().all(|k| now.contains_key(k)), "the second run removed files of the first");
    // Killed, the first run leaves a lock nobody holds: the next run takes it over and finishes.
    first.kill().unwrap();
    first.wait().unwrap();
    succeeded(&dsa(dir, &["run", "slow.toml", "--out", "res", "-q", "--resume"]));
    let mut names: Vec<String> =
        std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap()).collect();
    names.sort();
    assert_eq!(names, ["res", "slow.toml"], "stray files");

    // Two sweeps on one file likewise.
    let sweep = [
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
        "--vary",
        "dprime=0..4:9",
        "--no-rank",
        "--threads",
        "1",
        "--quiet",
        "--out",
        "s.csv",
    ];
    let mut first = bin().args(sweep).current_dir(dir).stdout(Stdio::null()).stderr(Stdio::null()).spawn().unwrap();
    wait_for(&mut first, "a sweep row", || {
        std::fs::read_to_string(dir.join("s.csv.partial")).is_ok_and(|t| t.lines().count() >= 3)
    });
    refused(&dsa(dir, &sweep), &["s.csv", "another dsa-sim run"]);
    first.kill().unwrap();
    first.wait().unwrap();
}

#[test]
fn colliding_output_names_are_refused_before_any_work() {
    let d = setup();
    let dir = d.path();
    std::fs::create_dir_all(dir.join("a")).unwrap();
    std::fs::create_dir_all(dir.join("b")).unwrap();
    std::fs::write(dir.join("a/obs.csv"), OBS).unwrap();
    std::fs::write(dir.join("b/obs.csv"), OBS).unwrap();
    let figure = EXP.replace("name = \"curves\"", "name = \"measured-obs\"");
    let two_tables = EXP.replace(
        "[[data]]\nname = \"obs\"\nfile = \"obs.csv\"",
        "[[data]]\nname = \"obs\"\nfile = \"a/obs.csv\"\n[[data]]\nname = \"obs2\"\nfile = \"b/obs.csv\"",
    );
    let curves =
        CAL.replace("target = 0.9", "target = 0.9\ncurves = [\"index_topk=256,512\", \"index_topk=1024,2048\"]");
    std::fs::write(dir.join("figure.toml"), figure).unwrap();
    std::fs::write(dir.join("two.toml"), two_tables).unwrap();
    std::fs::write(dir.join("curves.toml"), curves).unwrap();
    let before = snapshot(dir);
    refused(
        &dsa(dir, &["run", "figure.toml", "--out", "res"]),
        &["collision", "data/measured-obs.csv", "figure `measured-obs`", "data `obs`"],
    );
    refused(
        &dsa(dir, &["run", "two.toml", "--out", "res"]),
        &["collision", "data/measured-obs.csv", "a/obs.csv", "b/obs.csv"],
    );
    refused(
        &dsa(dir, &["calibrate", "--experiment", "curves.toml", "--out", "res"]),
        &["collision", "curve-index_topk.csv"],
    );
    assert_eq!(before, snapshot(dir));
}

#[test]
fn stray_temporaries_are_cleaned() {
    let d = setup();
    let dir = d.path();
    // What killed sweeps leave beside their output: temporaries of the final and partial writes.
    for f in [".s.csv.tmp-4242", ".s.csv.partial.tmp-77", ".s.csv.meta.json.tmp-5"] {
        std::fs::write(dir.join(f), "half-written").unwrap();
    }
    succeeded(&dsa(dir, &["sweep", "--vary", "depth=0,1", "--no-rank", "--out", "s.csv", "-q"]));
    // A killed calibration experiment's staging folder, and a result a killed swap moved aside.
    succeeded(&dsa(dir, &["calibrate", "--experiment", "cal.toml", "--out", "res"]));
    std::fs::create_dir(dir.join(".res.partial")).unwrap();
    std::fs::write(dir.join(".res.partial/.experiment-fingerprint"), "dsa-sim 0.0.0 calibration experiment\n").unwrap();
    std::fs::write(dir.join(".res.partial/calibrate.json"), "{").unwrap();
    let old = dir.join(".res.old-4242");
    std::fs::create_dir(&old).unwrap();
    std::fs::write(old.join(".dsa-sim-result"), "x").unwrap();
    succeeded(&dsa(dir, &["calibrate", "--experiment", "cal.toml", "--out", "res"]));
    // A `.NAME.partial` folder that dsa-sim did not make is neither used nor removed.
    std::fs::create_dir(dir.join(".mine.partial")).unwrap();
    std::fs::write(dir.join(".mine.partial/keep.txt"), "mine").unwrap();
    refused(&dsa(dir, &["run", "exp.toml", "--out", "mine"]), &[".mine.partial", "not a dsa-sim result"]);
    let mut names: Vec<String> =
        std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap()).collect();
    names.sort();
    assert_eq!(names, [".mine.partial", "cal.toml", "exp.toml", "obs.csv", "res", "s.csv", "s.csv.meta.json"]);
}

// ---------------------------------------------------------------------------------------------
// One measured-data reader.

/// (label, table, accepted) — accepted tables must pass both commands, the others fail both
/// with the same message.
fn tables() -> Vec<(&'static str, String, bool)> {
    let h = "context_len,index_topk,trials,hits";
    vec![
        ("plain", format!("{h}\n4096,512,10,4\n"), true),
        ("duplicate column", "context_len,index_topk,trials,hits,hits\n4096,512,10,4,4\n".into(), false),
        (
            "duplicate column in another case",
            "context_len,index_topk,trials,hits,HITS\n4096,512,10,4,4\n".into(),
            false,
        ),
        ("ragged row, one field too many", format!("{h}\n4096,512,10,4,9\n"), false),
        ("ragged row, one field short", format!("{h}\n4096,512,10,4\n8192,512,10\n"), false),
        ("leading comment", format!("# measured 2024-05-01\n{h}\n4096,512,10,4\n"), true),
        ("comments between rows", format!("{h}\n# run 1\n4096,512,10,4\n# run 2\n8192,512,10,1\n"), true),
        ("CRLF", format!("{h}\r\n4096,512,10,4\r\n8192,512,10,1\r\n"), true),
        ("byte-order mark", format!("\u{feff}{h}\n4096,512,10,4\n"), true),
        ("extra columns", "context_len,index_topk,trials,hits,notes,gpu\n4096,512,10,4,x,h100\n".into(), true),
        ("blank lines", format!("\n{h}\n\n4096,512,10,4\n   \n"), true),
        ("only a comment", "# nothing\n".into(), false),
        ("header spelled with dashes", "context-len,index-topk,trials,hits\n4096,512,10,4\n".into(), true),
        ("hits above trials", format!("{h}\n4096,512,10,11\n"), false),
        ("repeat zero", "context_len,index_topk,trials,hits,repeat\n4096,512,10,4,0\n".into(), false),
        ("compress_ratio zero", "context_len,index_topk,trials,hits,compress_ratio\n4096,512,10,4,0\n".into(), false),
        (
            "trials summing past 2^64",
            format!("{h}\n4096,512,17000000000000000000,4\n8192,512,17000000000000000000,4\n"),
            false,
        ),
        ("unbalanced quote", format!("{h}\n\"4096,512,10,4\n"), false),
    ]
}

fn exp_over(file: &str) -> String {
    EXP.replace("file = \"obs.csv\"", &format!("file = \"{file}\""))
}

#[test]
fn run_and_calibrate_accept_and_reject_the_same_tables() {
    let d = tempfile::tempdir().unwrap();
    let dir = d.path();
    let mut failures = Vec::new();
    for (label, table, accepted) in tables() {
        std::fs::write(dir.join("t.csv"), &table).unwrap();
        std::fs::write(dir.join("exp.toml"), exp_over("t.csv")).unwrap();
        let run = dsa(dir, &["run", "exp.toml", "--out", "res", "-q"]);
        let cal = dsa(
            dir,
            &["calibrate", "--data", "t.csv", "--fit", "dprime", "--preset", "deepseek-v4-flash", "--stack", "none"],
        );
        let (re, ce) =
            (String::from_utf8_lossy(&run.stderr).into_owned(), String::from_utf8_lossy(&cal.stderr).into_owned());
        if accepted {
            if !run.status.success() || !cal.status.success() {
                failures.push(format!("{label}: should be accepted: run {re:?}, calibrate {ce:?}"));
            }
        } else if run.status.code() != Some(2) || cal.status.code() != Some(2) || re != ce || re.lines().count() != 1 {
            failures.push(format!(
                "{label}: should be refused alike: run {:?} {re:?}, calibrate {:?} {ce:?}",
                run.status.code(),
                cal.status.code()
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn a_large_table_with_a_bad_last_row_is_refused_quickly_by_both() {
    let d = tempfile::tempdir().unwrap();
    let dir = d.path();
    let mut t = String::from("context_len,index_topk,trials,hits\n");
    for i in 0..100_000u64 {
        t.push_str(&format!("{},512,10,{}\n", 1024 + i % 64, i % 11));
    }
    t.push_str("4096,512,10,11\n");
    std::fs::write(dir.join("big.csv"), &t).unwrap();
    std::fs::write(dir.join("exp.toml"), exp_over("big.csv")).unwrap();
    for args in [
        vec!["run", "exp.toml", "--out", "res", "-q"],
        vec!["calibrate", "--data", "big.csv", "--fit", "dprime"],
        vec!["verdict", "--data", "big.csv", "--fit", "dprime"],
    ] {
        let start = Instant::now();
        let o = dsa(dir, &args);
        let took = start.elapsed();
        refused(&o, &["big.csv: row 100001 (line 100002), column `hits`"]);
        assert!(took < Duration::from_secs(2), "{args:?} took {took:?}");
    }
}

#[test]
fn identical_rows_are_fitted_at_the_cost_of_distinct_rows() {
    // 20,000 rows over 4 distinct cells: the model is evaluated once per cell.
    let d = tempfile::tempdir().unwrap();
    let dir = d.path();
    let cells = ["4096,512,10,4", "8192,512,10,2", "16384,512,10,1", "16384,1024,10,2"];
    let mut big = String::from("context_len,index_topk,trials,hits\n");
    for i in 0..20_000 {
        big.push_str(cells[i % 4]);
        big.push('\n');
    }
    std::fs::write(dir.join("big.csv"), &big).unwrap();
    let start = Instant::now();
    let o = dsa(
        dir,
        &[
            "calibrate",
            "--data",
            "big.csv",
            "--fit",
            "dprime",
            "--preset",
            "deepseek-v4-flash",
            "--stack",
            "none",
            "--json",
        ],
    );
    let took = start.elapsed();
    succeeded(&o);
    let j: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    // Residuals and the deviance's degrees of freedom stay per row of the file.
    assert_eq!(j["rows"].as_array().unwrap().len(), 20_000);
    assert!(took < Duration::from_secs(30), "took {took:?}");
}

#[test]
fn a_shard_never_replaces_a_users_file_in_its_folder() {
    // `run --shard` writes DIR/data/NAME.csv: a user's file of that name is left as it was, the
    // run refused with one line before it writes anything; a part dsa-sim wrote is rerun over.
    let d = setup();
    let dir = d.path();
    std::fs::create_dir_all(dir.join("part/data")).unwrap();
    std::fs::write(dir.join("part/data/curves.csv"), "my own notes\n").unwrap();
    let before = snapshot(dir);
    let o = dsa(dir, &["run", "exp.toml", "--shard", "0/2", "--out", "part", "-q"]);
    refused(&o, &["curves.csv", "not a sweep file dsa-sim wrote"]);
    assert_eq!(snapshot(dir), before, "the folder changed");
    std::fs::remove_file(dir.join("part/data/curves.csv")).unwrap();
    succeeded(&dsa(dir, &["run", "exp.toml", "--shard", "0/2", "--out", "part", "-q"]));
    let first = std::fs::read(dir.join("part/data/curves.csv")).unwrap();
    succeeded(&dsa(dir, &["run", "exp.toml", "--shard", "0/2", "--out", "part", "-q"]));
    assert_eq!(std::fs::read(dir.join("part/data/curves.csv")).unwrap(), first);
}
