//! Calibration on the two shared tables (copied to tests/data with their README): Quest's
//! published passkey table (measured, trials a stand-in) and the DeepSeek-V4 observations
//! TRANSCRIBED from qualitative statements (not measured: every output must say so).

use std::process::Command;

fn run_json(args: &[&str]) -> serde_json::Value {
    let o = Command::new(env!("CARGO_BIN_EXE_dsa-sim")).args(args).output().unwrap();
    assert!(o.status.success(), "{args:?}: {}", String::from_utf8_lossy(&o.stderr));
    serde_json::from_str(&String::from_utf8_lossy(&o.stdout)).unwrap()
}

const DSV4: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/dsv4_seed_observations.csv");
const QUEST: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/quest_passkey_10k.csv");

#[test]
fn dsv4_transcribed_observations() {
    let j = run_json(&[
        "calibrate",
        "--data",
        DSV4,
        "--fit",
        "dprime",
        "--preset",
        "deepseek-v4-flash",
        "--stack",
        "none",
        "--context-len",
        "16000",
        "--compare",
        "--predict",
        "index_topk=512,1024,2048",
        "--json",
    ]);
    assert_eq!(j["data"]["transcribed"], true);
    assert!(j["warnings"][0].as_str().unwrap().contains("TRANSCRIBED"), "{}", j["warnings"]);
    let d = &j["estimates"]["dprime"];
    let (v, lo, hi) = (d["value"].as_f64().unwrap(), d["ci_low"].as_f64().unwrap(), d["ci_high"].as_f64().unwrap());
    // The needle is lost where chance alone (dprime = 0) would find it half the time: dprime < 0.
    assert!(lo <= v && v <= hi && hi < 0.0, "{d}");
    assert_eq!(j["rows"].as_array().unwrap().len(), 10);
    for r in j["rows"].as_array().unwrap() {
        assert!(r["observed"].is_number() && r["fitted"].is_number() && r["pearson_residual"].is_number());
    }
    let h = j["hypotheses"].as_array().unwrap();
    // Eleven hypotheses: the seed's context lengths are all ≡ 0 mod 4 (no length-periodic); the
    // rows' candidate counts differ (candidate-count-limit); read-decline.
    assert_eq!(h.len(), 11);
    let pos = |n: &str| h.iter().position(|x| x["name"] == n).unwrap();
    for physical in ["discrimination", "discrimination-with-spread", "hard-negatives", "read-failure"] {
        assert!(pos(physical) < pos("random-indexer"), "{h:?}");
    }
    let wsum: f64 = h.iter().map(|x| x["weight"].as_f64().unwrap()).sum();
    assert!((wsum - 1.0).abs() < 1e-9);
    let p = j["predictions"].as_array().unwrap();
    assert_eq!(p.len(), 3);
    // Raising k within the kernel limit does not rescue it: recall stays far below 0.9.
    assert!(p[1]["ci_high"].as_f64().unwrap() < 0.5, "{p:?}");
    eprintln!(
        "DSV4: dprime {v:.3} [{lo:.3}, {hi:.3}]; deviance {} gof_p {}; best hypothesis {}",
        j["deviance"], j["gof_p"], h[0]["name"]
    );
}

#[test]
fn quest_passkey_table() {
    let j = run_json(&[
        "calibrate",
        "--data",
        QUEST,
        "--fit",
        "dprime,needle_sd,p_read",
        "--preset",
        "quest-16",
        "--context-len",
        "10000",
        "--json",
    ]);
    assert_eq!(j["data"]["transcribed"], false);
    assert!(!j["warnings"].to_string().contains("TRANSCRIBED"));
    let d = j["estimates"]["dprime"]["value"].as_f64().unwrap();
    assert!(d > 2.0 && d < 8.0, "{}", j["estimates"]);
    let pr = &j["estimates"]["p_read"];
    assert!(pr["value"].as_f64().unwrap() > 0.97, "{pr}");
    // The fitted recall follows the table: 65% at 2 pages, ~99% from 4 pages on.
    let rows = j["rows"].as_array().unwrap();
    assert!((rows[0]["fitted"].as_f64().unwrap() - 0.65).abs() < 0.1, "{rows:?}");
    assert!(rows[1]["fitted"].as_f64().unwrap() > 0.95);
    assert!(j["gof_p"].as_f64().unwrap() > 0.01, "{}", j["gof_p"]);
    eprintln!("Quest: {} deviance {} gof_p {}", j["estimates"], j["deviance"], j["gof_p"]);
}

#[test]
fn text_predictions_say_which_scenario_they_start_from() {
    // The table's rows carry their own context; predictions start from the command line's.
    let o = Command::new(env!("CARGO_BIN_EXE_dsa-sim"))
        .args([
            "calibrate",
            "--data",
            QUEST,
            "--fit",
            "dprime",
            "--preset",
            "quest-16",
            "--context-len",
            "10000",
            "--predict",
            "index_topk=4,8",
        ])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let text = String::from_utf8_lossy(&o.stdout);
    let line = text.lines().find(|l| l.contains("from the command-line scenario")).expect("no base line");
    assert!(line.contains("context_len=10000") && line.contains("compress_ratio=16"), "{line}");
    // The grid's own field is not repeated as a fixed value.
    assert!(!line.contains("index_topk="), "{line}");
}

#[test]
fn transcribed_label_travels_with_a_copy() {
    // Copied away from its README, the table still says it is transcribed (its own header).
    let dir = tempfile::tempdir().unwrap();
    let copy = dir.path().join("copy.csv");
    std::fs::copy(DSV4, &copy).unwrap();
    let j = run_json(&[
        "calibrate",
        "--data",
        copy.to_str().unwrap(),
        "--fit",
        "dprime",
        "--preset",
        "deepseek-v4-flash",
        "--stack",
        "none",
        "--json",
    ]);
    assert_eq!(j["data"]["transcribed"], true, "{}", j["data"]);
    assert!(j["warnings"][0].as_str().unwrap().contains("TRANSCRIBED"));
}
