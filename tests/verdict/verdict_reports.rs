//! The verdict on tables in the shape of public failure reports of DeepSeek-V4 deployments
//! (issue 20; tests/data/reports/, each CONSTRUCTED with its provenance line), on the
//! deployment's own preset, and on Quest's published passkey table: a defect is called
//! implementation-suspect with its class named, a healthy deployment and Quest are not.

use serde_json::Value;
use std::process::Command;

fn verdict(preset: &str, data: &str) -> Value {
    let out = Command::new(env!("CARGO_BIN_EXE_dsa-sim"))
        .args(["verdict", "--preset", preset, "--data", data, "--json"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .unwrap();
    assert!(out.status.success(), "{preset} {data}: {}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap()
}

fn call(v: &Value) -> &str {
    v["call"].as_str().unwrap()
}

fn preferred(v: &Value) -> &str {
    v["hypotheses"][0]["name"].as_str().unwrap()
}

fn signatures(v: &Value) -> Vec<&str> {
    v["signatures"].as_array().unwrap().iter().map(|s| s["name"].as_str().unwrap()).collect()
}

fn estimate(v: &Value, name: &str) -> Option<f64> {
    v["hypotheses"][0]["estimates"][name].as_f64()
}

#[test]
fn a_candidate_count_cliff_on_v4_flash_is_named() {
    let v = verdict("deepseek-v4-flash", "tests/data/reports/v4_flash_cliff.csv");
    assert_eq!(call(&v), "implementation-suspect", "{v}");
    assert_eq!(preferred(&v), "candidate-count-limit", "{}", v["hypotheses"]);
    assert!(signatures(&v).contains(&"candidate_count_limit"), "{:?}", signatures(&v));
    // The largest measured candidate count still modelled: 4000 tokens at compression 4.
    assert_eq!(estimate(&v, "candidate_limit"), Some(1000.0), "{}", v["hypotheses"][0]);
}

#[test]
fn the_same_cliff_on_v4_pro_is_named() {
    let v = verdict("deepseek-v4-pro", "tests/data/reports/v4_pro_cliff.csv");
    assert_eq!(call(&v), "implementation-suspect", "{v}");
    assert_eq!(preferred(&v), "candidate-count-limit", "{}", v["hypotheses"]);
    assert!(signatures(&v).contains(&"candidate_count_limit"), "{:?}", signatures(&v));
}

#[test]
fn a_build_that_loses_needles_is_named() {
    let v = verdict("deepseek-v4-flash", "tests/data/reports/v4_flash_two_builds.csv");
    assert_eq!(call(&v), "implementation-suspect", "{v}");
    assert!(signatures(&v).contains(&"condition_dependent"), "{:?}", signatures(&v));
    let named: Vec<&str> = v["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["significant"] == true)
        .map(|c| c["column"].as_str().unwrap())
        .collect();
    assert_eq!(named, ["build"], "{}", v["conditions"]);
}

#[test]
fn a_healthy_report_is_saturated() {
    let v = verdict("deepseek-v4-flash", "tests/data/reports/v4_flash_healthy.csv");
    assert_eq!(call(&v), "saturated", "{v}");
    assert!(signatures(&v).is_empty(), "{:?}", signatures(&v));
}

#[test]
// About 75 s CPU on 2 cores since one noise replay serves both noise searches (2 min with one per k,
// over 10 minutes before the noise replay): run in CI, the issue's "Quest's passkey table is not called
// suspect" checked on every change.
fn quests_passkey_table_is_not_suspect() {
    let v = verdict("quest-16", "tests/data/quest_passkey_10k.csv");
    // Not suspect. Undecided is allowed since issue 39: the table's 100 trials a cell are a
    // stand-in for unpublished counts, every hypothesis fits them badly (goodness of fit
    // p < 0.01), and a fit that matches the table badly supports no prescription.
    assert_ne!(call(&v), "implementation-suspect", "{:?}\n{}", signatures(&v), v["explanation"]);
}

/// The verdict on a table given as text (written to a temporary file).
fn verdict_on(preset: &str, table: &str) -> Value {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t.csv");
    std::fs::write(&path, table).unwrap();
    verdict(preset, path.to_str().unwrap())
}

#[test]
// Issue 39: the committed V4 cliff reduced to one depth (one needle a length, as reports carry
// it) was "improve precision"; a fix the data cannot support is never prescribed.
fn the_cliff_at_one_depth_gets_no_physical_call() {
    let text =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/reports/v4_flash_cliff.csv")).unwrap();
    let one: String = text
        .lines()
        .filter(|l| l.starts_with('#') || l.starts_with("context_len") || l.contains(",0.5,"))
        .map(|l| format!("{l}\n"))
        .collect();
    let v = verdict_on("deepseek-v4-flash", &one);
    assert!(["implementation-suspect", "undecided"].contains(&call(&v)), "{}", v["explanation"]);
    assert!(v["numbers_withheld"].is_string() && v["k_needed"].is_null() && v["dprime_needed_now"].is_null(), "{v}");
}

#[test]
// Issue 39 item 7: every valid table gets a call; a dense table where every needle is found was
// refused ("no row can separate any two hypotheses").
fn a_dense_table_that_finds_every_needle_is_saturated() {
    let v = verdict_on(
        "deepseek-v4-flash",
        "context_len,index_topk,trials,hits,attention\n8000,1000000,3,3,dense\n32000,1000000,3,3,dense\n",
    );
    assert_eq!(call(&v), "saturated", "{v}");
    assert_eq!(v["reason"], "all_found");
}

#[test]
// Issue 39 item 4: rows where every candidate is selected measure the model's own reading, the
// control arm of sparse attention, never evidence of its defect: a gradual decline of a dense
// model is read-limited; an abrupt collapse at 1K tokens of a model trained to 160K is a defect
// outside selection.
fn dense_tables_are_the_control_arm() {
    let gradual = "context_len,index_topk,trials,hits\n8000,1000000,4,4\n32000,1000000,4,3\n64000,1000000,4,3\n128000,1000000,4,1\n";
    let v = verdict_on("deepseek-v3.2", gradual);
    assert_eq!(call(&v), "read-limited", "{}", v["explanation"]);
    assert_eq!(v["reason"], "dense");
    let collapse = "context_len,index_topk,trials,hits\n800,1000000,1,1\n900,1000000,1,1\n1000,1000000,1,1\n1100,1000000,1,0\n1200,1000000,1,0\n1400,1000000,1,0\n";
    let v = verdict_on("deepseek-v3.2", collapse);
    assert_eq!(call(&v), "implementation-suspect", "{}", v["explanation"]);
    assert_eq!(v["reason"], "dense_collapse");
    // A collapse must be shown by the table: one lost needle at one length inside the window fits
    // any steepness and is the model's own miss until more say otherwise; ten lost at 4K tokens
    // reject a model that reads even half of them (P = 2^-10), and that is a collapse.
    let one = "context_len,index_topk,trials,hits\n8960,1000000,1,0\n";
    let v = verdict_on("deepseek-v3.2", one);
    assert_eq!(call(&v), "read-limited", "{}", v["explanation"]);
    let ten = "context_len,index_topk,depth,trials,hits\n4096,1000000,0.1,5,0\n4096,1000000,0.9,5,0\n";
    let v = verdict_on("deepseek-v3.2", ten);
    assert_eq!(call(&v), "implementation-suspect", "{}", v["explanation"]);
    assert_eq!(v["reason"], "dense_collapse");
}

#[test]
// A `task` column names the workload, not the build: tasks differ in difficulty (a multi-key
// needle is harder than a single one), so recall differing between them is reported and never
// read as a defect; the same difference under `build` is one.
fn a_task_column_is_physics_and_a_build_column_is_not() {
    let rows = "4096,1000000,20,20,A\n4096,1000000,20,19,B\n32768,1000000,20,19,A\n32768,1000000,20,6,B\n65536,1000000,20,18,A\n65536,1000000,20,4,B\n";
    let v = verdict_on("deepseek-v3.2", &format!("context_len,index_topk,trials,hits,task\n{rows}"));
    assert_eq!(call(&v), "read-limited", "{}", v["explanation"]);
    assert_eq!(v["conditions"][0]["workload"], true, "{}", v["conditions"]);
    assert_eq!(v["conditions"][0]["significant"], false, "{}", v["conditions"]);
    assert!(v["conditions"][0]["p_value"].as_f64().unwrap() < 1e-4, "{}", v["conditions"]);
    let v = verdict_on("deepseek-v3.2", &format!("context_len,index_topk,trials,hits,build\n{rows}"));
    assert_eq!(call(&v), "implementation-suspect", "{}", v["explanation"]);
    assert_eq!(v["reason"], "condition");
}

#[test]
// Issue 39 item 3: a condition column at 0.01 ≤ p < 0.05 rules every physical call out.
fn a_suggestive_condition_leaves_the_call_undecided() {
    // Three trials a cell: fork 0/3 and 1/3 where upstream finds 3/3 at two cells (the exact
    // stratified test gives p = 0.02).
    let t = "context_len,index_topk,depth,trials,hits,build\n4000,512,0.5,3,0,fork\n4000,512,0.5,3,3,upstream\n16000,512,0.5,3,1,fork\n16000,512,0.5,3,3,upstream\n";
    let v = verdict_on("deepseek-v4-flash", t);
    let p = v["conditions"][0]["p_value"].as_f64().unwrap();
    assert!((0.01..0.05).contains(&p), "p = {p}: the table must sit between the two levels");
    assert_eq!(call(&v), "undecided", "{}", v["explanation"]);
}

#[test]
// Issue 39 item 3, as reports carry it (found out of sample: a RoPE-scaling defect reported as
// one greedy probe per build and path): a `build` column at one trial a cell, `before` 1/3 against
// `after` 3/3, cannot reach significance (Fisher's p = 0.4), yet the data favour a difference by
// AIC, so a defect of the build is not ruled out and no physical call is made. Two builds that
// find and lose the same cells leave the physical call standing.
fn a_condition_too_thin_to_test_rules_the_physical_calls_out() {
    let thin = "context_len,index_topk,trials,hits,build,attention\n48000,1000000,1,0,before,dense\n48000,1000000,1,1,after,dense\n48000,1000000,1,0,before,dense\n48000,1000000,1,1,after,dense\n48000,1000000,1,1,before,dense\n48000,1000000,1,1,after,dense\n";
    let v = verdict_on("deepseek-v3.2", thin);
    let c = &v["conditions"][0];
    assert!(c["p_value"].as_f64().unwrap() > 0.05 && c["favoured"] == true, "{c}");
    assert_eq!(call(&v), "undecided", "{}", v["explanation"]);
    assert_eq!(v["reason"], "condition_open");
    assert!(v["next_step"].as_str().unwrap().contains("`build`"), "{}", v["next_step"]);
    let same: String = [(8000, 4), (32000, 3), (64000, 3), (128000, 1)]
        .iter()
        .flat_map(|(l, h)| ["a", "b"].map(|b| format!("{l},1000000,4,{h},{b}\n")))
        .collect();
    let v = verdict_on("deepseek-v3.2", &format!("context_len,index_topk,trials,hits,build\n{same}"));
    assert!(v["conditions"][0].get("favoured").is_none(), "{}", v["conditions"]);
    assert_eq!(call(&v), "read-limited", "{}", v["explanation"]);
    // One dense row losing some needles shows no collapse: the fitted L50 sits just past it.
    let one = "context_len,index_topk,trials,hits\n131072,1000000,40,25\n";
    let v = verdict_on("deepseek-v3.2", one);
    assert_eq!(call(&v), "read-limited", "{}", v["explanation"]);
}
