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
    let named: Vec<&str> = v["conditions"].as_array().unwrap().iter().filter(|c| c["significant"] == true).map(|c| c["column"].as_str().unwrap()).collect();
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
    assert!(!["implementation-suspect", "undecided"].contains(&call(&v)), "{}: {:?}\n{}", call(&v), signatures(&v), v["explanation"]);
}
