//! `dsa-sim import niah` on the committed harness fixtures (tests/fixtures/make_captures.py):
//! trials and hits per cell as constructed, and a table that calibrate and verdict accept.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn niah() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/niah")
}

fn dsa(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_dsa-sim")).args(args).output().unwrap()
}

/// (context_len, depth or None) → (trials, hits) from the import's JSON `cells`.
fn cells(j: &serde_json::Value) -> BTreeMap<(u64, Option<String>), (u64, u64)> {
    j["cells"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            let d = c["depth"].as_f64().map(|d| format!("{d}"));
            ((c["context_len"].as_u64().unwrap(), d), (c["trials"].as_u64().unwrap(), c["hits"].as_u64().unwrap()))
        })
        .collect()
}

/// The generator's expected cells of one format, hits under `hits_key`.
fn expected(format: &str, hits_key: &str) -> BTreeMap<(u64, Option<String>), (u64, u64)> {
    let e: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(niah().join("expected.json")).unwrap()).unwrap();
    e[format]
        .as_object()
        .unwrap()
        .iter()
        .map(|(k, v)| {
            let (l, d) = k.split_once(',').unwrap();
            let d = (!d.is_empty()).then(|| format!("{}", d.parse::<f64>().unwrap()));
            ((l.parse().unwrap(), d), (v["trials"].as_u64().unwrap(), v[hits_key].as_u64().unwrap()))
        })
        .collect()
}

fn run(path: &str, extra: &[&str]) -> (serde_json::Value, String) {
    let d = tempfile::tempdir().unwrap();
    let out = d.path().join("measured.csv");
    let p = niah().join(path);
    let mut a = vec!["import", "niah", p.to_str().unwrap(), "--out", out.to_str().unwrap(), "--json"];
    a.extend_from_slice(extra);
    let o = dsa(&a);
    assert!(o.status.success(), "{path}: {}", String::from_utf8_lossy(&o.stderr));
    (serde_json::from_slice(&o.stdout).unwrap(), std::fs::read_to_string(&out).unwrap())
}

#[test]
fn every_format_counts_as_constructed() {
    for (path, format) in
        [("gkamradt", "gkamradt"), ("ruler", "ruler"), ("lm-eval", "lm-eval"), ("needlebench", "needlebench")]
    {
        let (j, csv) = run(path, &[]);
        assert_eq!(j["format"], format);
        assert_eq!(cells(&j), expected(format, "hits"), "{format}");
        assert!(csv.starts_with(&format!("# provenance: dsa-sim import niah, {format} results from ")), "{csv}");
        assert!(csv.lines().nth(1) == Some("context_len,index_topk,depth,needle,trials,hits"), "{csv}");
    }
    // --min-score 7 counts the rubric's 7s too.
    let (j, csv) = run("gkamradt", &["--min-score", "7"]);
    assert_eq!(cells(&j), expected("gkamradt", "hits_min7"));
    assert!(csv.contains("gkamradt hit = score >= 7"), "{csv}");
    // The README.txt beside the results is not a result: skipped, not an error.
    assert_eq!(j["skipped_files"], 1);
}

#[test]
fn ruler_context_from_the_seq_folder_and_needle_ids() {
    let (j, csv) = run("ruler", &["--index-topk", "1024"]);
    let lens: Vec<u64> = j["cells"].as_array().unwrap().iter().map(|c| c["context_len"].as_u64().unwrap()).collect();
    assert!(lens.iter().all(|l| *l == 4096 || *l == 8192), "{lens:?}");
    // The needle column is the task; an answer absent from the input leaves depth empty.
    assert!(csv.contains("\n4096,1024,,niah_single_1,1,1\n"), "{csv}");
    let (_, csv) = run("lm-eval", &[]);
    assert!(csv.contains(",niah_single_1,"), "{csv}");
}

#[test]
fn ruler_lines_without_input_have_no_depth() {
    // Some versions of RULER's call_api.py write no `input`; length −1 when the data had none.
    let d = tempfile::tempdir().unwrap();
    let pred = d.path().join("m/synthetic/16384/pred");
    std::fs::create_dir_all(&pred).unwrap();
    std::fs::write(
        pred.join("niah_multikey_1.jsonl"),
        "{\"index\": 0, \"pred\": \"A 7 b\", \"outputs\": [\"7\"], \"others\": {}, \"truncation\": -1, \"length\": -1}\n{\"index\": 1, \"pred\": \"no\", \"outputs\": [\"8\"], \"others\": {}, \"truncation\": -1, \"length\": -1}\n",
    )
    .unwrap();
    let out = d.path().join("t.csv");
    let o = dsa(&["import", "niah", d.path().join("m").to_str().unwrap(), "--out", out.to_str().unwrap()]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let t = std::fs::read_to_string(&out).unwrap();
    assert!(t.ends_with("context_len,index_topk,depth,needle,trials,hits\n16384,512,,niah_multikey_1,2,1\n"), "{t}");
}

#[test]
fn the_table_is_accepted_by_calibrate_and_verdict() {
    let d = tempfile::tempdir().unwrap();
    let out = d.path().join("m.csv");
    let paths: Vec<String> =
        ["gkamradt", "ruler", "lm-eval", "needlebench"].iter().map(|p| niah().join(p).display().to_string()).collect();
    let mut a: Vec<&str> = vec!["import", "niah"];
    a.extend(paths.iter().map(String::as_str));
    a.extend(["--out", out.to_str().unwrap()]);
    let o = dsa(&a);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let ds = dsa_sim::measured::load_csv(&out).unwrap();
    assert!(ds.provenance.as_deref().unwrap().contains("gkamradt+ruler+lm-eval+needlebench"), "{:?}", ds.provenance);
    assert!(!ds.notes.iter().any(|n| n.contains("ignored column")), "{:?}", ds.notes);
    let total: u64 = ds.rows.iter().map(|r| r.trials).sum();
    assert_eq!(total, 12 + 14 + 4 + 9);
    let o = dsa(&[
        "verdict",
        "--preset",
        "deepseek-v4-flash",
        "--stack",
        "none",
        "--data",
        out.to_str().unwrap(),
        "--json",
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let o = dsa(&[
        "calibrate",
        "--preset",
        "deepseek-v4-flash",
        "--stack",
        "none",
        "--data",
        out.to_str().unwrap(),
        "--fit",
        "dprime",
        "--json",
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    // A second import replaces the table (ours); a hand-written file is refused.
    assert!(dsa(&a).status.success());
    std::fs::write(&out, "context_len,index_topk,trials,hits\n1,1,1,1\n").unwrap();
    let o = dsa(&a);
    assert_eq!(o.status.code(), Some(2));
    assert_eq!(std::fs::read_to_string(&out).unwrap(), "context_len,index_topk,trials,hits\n1,1,1,1\n");
}

#[test]
fn without_out_the_table_goes_to_stdout() {
    // The table printed is the table --out writes, byte for byte; with --json it is the `csv`.
    let p = niah().join("gkamradt");
    let (j_out, written) = run("gkamradt", &[]);
    let o = dsa(&["import", "niah", p.to_str().unwrap()]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(String::from_utf8(o.stdout).unwrap(), written);
    let o = dsa(&["import", "niah", p.to_str().unwrap(), "--json"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let j: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(j["csv"].as_str(), Some(written.as_str()));
    assert!(j["out"].is_null());
    assert_eq!(j["cells"], j_out["cells"]);
    assert_eq!(cells(&j), expected("gkamradt", "hits"));
}
