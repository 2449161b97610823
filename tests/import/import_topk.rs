//! `dsa-sim import topk` on the committed fixtures (tests/fixtures/make_captures.py): exact
//! per-layer counts known by construction, the same selections.csv from all three layouts, and
//! captures written here byte by byte (the NPY format, base64 by hand) without numpy.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use crate::common;

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/captures")
}

fn dsa(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_dsa-sim")).args(args).output().unwrap()
}

fn import(manifest: &Path, out: &Path, extra: &[&str]) -> Output {
    let mut a = vec![
        "import",
        "topk",
        "--manifest",
        manifest.to_str().unwrap(),
        "--layers",
        "3",
        "--index-topk",
        "8",
        "--compress-ratio",
        "4",
        "--overlap",
        "true",
        "--out",
        out.to_str().unwrap(),
    ];
    a.extend_from_slice(extra);
    dsa(&a)
}

#[test]
fn three_layouts_give_the_same_selections_and_the_constructed_counts() {
    let expected: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(fixtures().join("expected.json")).unwrap()).unwrap();
    let d = tempfile::tempdir().unwrap();
    let mut csvs = Vec::new();
    for layout in ["npz", "sglang", "vllm"] {
        let out = d.path().join(format!("{layout}.csv"));
        let o = import(&fixtures().join(layout).join("manifest.csv"), &out, &["--json"]);
        assert!(o.status.success(), "{layout}: {}", String::from_utf8_lossy(&o.stderr));
        let j: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        assert_eq!(j["requests"], 8);
        let sel: Vec<u64> = j["layers"].as_array().unwrap().iter().map(|l| l["selected"].as_u64().unwrap()).collect();
        let trials: Vec<u64> = j["layers"].as_array().unwrap().iter().map(|l| l["trials"].as_u64().unwrap()).collect();
        assert_eq!(serde_json::json!(sel), expected["selected_per_layer"], "{layout}");
        // The counts by construction (also hard-coded: the generator's REQUESTS table).
        assert_eq!(sel, [5, 4, 4], "{layout}");
        assert_eq!(trials, [8, 8, 8]);
        let per: Vec<Vec<u64>> = std::fs::read_to_string(&out)
            .unwrap()
            .lines()
            .skip(1)
            .collect::<Vec<_>>()
            .chunks(3)
            .map(|c| c.iter().map(|l| l.split(',').nth(5).unwrap().parse().unwrap()).collect())
            .collect();
        assert_eq!(serde_json::json!(per), expected["per_request"], "{layout}");
        let layout_name = j["files"][0]["layout"].as_str().unwrap().to_string();
        assert_eq!(layout_name, layout);
        // Wilson interval of layer 0 (5/8) from the one stats::wilson.
        let (lo, hi) = dsa_sim::stats::wilson(5, 8, dsa_sim::stats::Z95);
        assert_eq!(j["layers"][0]["ci_low"].as_f64().unwrap(), lo);
        assert_eq!(j["layers"][0]["ci_high"].as_f64().unwrap(), hi);
        // Per-request fraction and agreement (q0: every layer; q2: none).
        assert_eq!(j["per_request"][0]["fraction"], 1.0);
        assert_eq!(j["per_request"][2]["layers_selected"], 0);
        // Mean pairwise agreement: per request 1 if all layers agree, 1/3 otherwise.
        // Agreeing requests: q0, q2, q5 (3 of 8): (3 + 5/3) / 8.
        let p = j["agreement"]["mean_pairwise"].as_f64().unwrap();
        assert!((p - (3.0 + 5.0 / 3.0) / 8.0).abs() < 1e-12, "{p}");
        csvs.push(std::fs::read(&out).unwrap());
    }
    assert_eq!(csvs[0], csvs[1]);
    assert_eq!(csvs[0], csvs[2]);
    let text = String::from_utf8(csvs[0].clone()).unwrap();
    // Each row carries the facts the import used: the manifest's needle_start and
    // needle_tokens, and --compress-ratio 4 --overlap true.
    assert!(
        text.starts_with("request,context_len,depth,layer,index_topk,selected,needle_start,needle_tokens,compress_ratio,overlap\nq0,256,0,0,8,1,0,3,4,true\n"),
        "{text}"
    );
    // depth = needle_start / (context_len − needle_tokens): q1 = 101 / 250.
    assert!(text.contains("\nq1,256,0.404,0,8,1,101,6,4,true\n"), "{text}");
    assert_eq!(text.lines().count(), 1 + 8 * 3);
}

fn i32s(v: &[i32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

/// Standard base64 with padding, written out here so the test does not depend on the crate
/// the reader uses.
fn b64(bytes: &[u8]) -> String {
    const A: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut s = String::new();
    for c in bytes.chunks(3) {
        let n =
            (u32::from(c[0]) << 16) | (u32::from(*c.get(1).unwrap_or(&0)) << 8) | u32::from(*c.get(2).unwrap_or(&0));
        for i in 0..4 {
            if i <= c.len() {
                s.push(A[(n >> (18 - 6 * i) & 63) as usize] as char);
            } else {
                s.push('=');
            }
        }
    }
    s
}

#[test]
fn npy_written_by_hand_and_the_same_array_as_sglang_and_vllm_replies() {
    // Two rows, 2 layers, k = 3, c = 1 (token-level, V3.2), no overlap, context 100.
    // Row 1 is the query: layer 0 picks token 41 (the needle is 40..43), layer 1 does not.
    let vals: Vec<i32> = vec![0, 1, 2, 3, 4, 5, 41, 7, -1, 9, 10, 99];
    let d = tempfile::tempdir().unwrap();
    std::fs::write(d.path().join("a.npy"), common::npy("<i4", &[2, 2, 3], &i32s(&vals))).unwrap();
    let v64: Vec<u8> = vals.iter().flat_map(|x| i64::from(*x).to_le_bytes()).collect();
    std::fs::write(d.path().join("b.npy"), common::npy("<i8", &[2, 2, 3], &v64)).unwrap();
    let raw = b64(&i32s(&vals));
    std::fs::write(
        d.path().join("c.json"),
        format!("{{\"text\":\"\",\"meta_info\":{{\"indexer_topk\":\"{}\"}}}}", raw.replace('/', "\\/")),
    )
    .unwrap();
    let np = b64(&common::npy("<i4", &[2, 2, 3], &i32s(&vals)));
    std::fs::write(d.path().join("d.json"), format!("{{\"choices\":[{{\"index\":0,\"indexer_topk\":\"{np}\"}}]}}"))
        .unwrap();
    let mut m = String::from("file,row,context_len,needle_start,needle_tokens\n");
    for f in ["a.npy", "b.npy", "c.json", "d.json"] {
        m.push_str(&format!("{f},1,100,40,3\n"));
    }
    std::fs::write(d.path().join("m.csv"), m).unwrap();
    let out = d.path().join("sel.csv");
    let o = dsa(&[
        "import",
        "topk",
        "--manifest",
        d.path().join("m.csv").to_str().unwrap(),
        "--layers",
        "2",
        "--index-topk",
        "3",
        "--compress-ratio",
        "1",
        "--overlap",
        "false",
        "--out",
        out.to_str().unwrap(),
        "--json",
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let j: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(j["layers"][0]["selected"], 4);
    assert_eq!(j["layers"][1]["selected"], 0);
    assert_eq!(j["agreement"]["mean_pairwise"], 0.0);
    let layouts: Vec<&str> = j["files"].as_array().unwrap().iter().map(|f| f["layout"].as_str().unwrap()).collect();
    assert_eq!(layouts, ["npy", "npy", "sglang", "vllm"]);
    let text = std::fs::read_to_string(&out).unwrap();
    assert_eq!(text.lines().filter(|l| l.split(',').nth(5) == Some("1")).count(), 4, "{text}");
}

#[test]
fn overlap_decides_which_entries_pool_the_needle() {
    // c = 4, needle token 8 (block 2). Without overlap only entry 2 pools it; with overlap
    // entry 3 (blocks 2 and 3) too. Layer 0 selects entry 3 only.
    let vals: Vec<i32> = vec![3, 0];
    let d = tempfile::tempdir().unwrap();
    std::fs::write(d.path().join("a.npy"), common::npy("<i4", &[1, 1, 2], &i32s(&vals))).unwrap();
    std::fs::write(d.path().join("m.csv"), "file,row,context_len,needle_start,needle_tokens\na.npy,0,64,8,1\n")
        .unwrap();
    for (overlap, want) in [("true", 1), ("false", 0)] {
        let out = d.path().join(format!("{overlap}.csv"));
        let o = dsa(&[
            "import",
            "topk",
            "--manifest",
            d.path().join("m.csv").to_str().unwrap(),
            "--layers",
            "1",
            "--index-topk",
            "2",
            "--compress-ratio",
            "4",
            "--overlap",
            overlap,
            "--out",
            out.to_str().unwrap(),
            "--json",
        ]);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let j: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        assert_eq!(j["layers"][0]["selected"], want, "overlap {overlap}");
        assert_eq!(j["agreement"]["mean_pairwise"], serde_json::Value::Null);
    }
}

#[test]
fn output_replaced_only_when_dsa_sim_wrote_it() {
    let d = tempfile::tempdir().unwrap();
    let out = d.path().join("sel.csv");
    let m = fixtures().join("npz/manifest.csv");
    assert!(import(&m, &out, &[]).status.success());
    let first = std::fs::read(&out).unwrap();
    // Ours: replaced.
    assert!(import(&m, &out, &[]).status.success());
    assert_eq!(std::fs::read(&out).unwrap(), first);
    // Someone else's: refused with exit 2, untouched.
    std::fs::write(&out, "my notes\n").unwrap();
    let o = import(&m, &out, &[]);
    assert_eq!(o.status.code(), Some(2));
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(e.contains("not written by dsa-sim") && e.lines().count() == 1, "{e}");
    assert_eq!(std::fs::read(&out).unwrap(), b"my notes\n");
    // Only the output (and no temporaries or lock left but the lock file itself).
    let names: Vec<String> = common::files(d.path()).keys().cloned().collect();
    assert!(names.iter().all(|n| n == "sel.csv" || n == ".sel.csv.lock"), "{names:?}");
}

#[test]
fn help_teaches_the_manifest_and_the_layouts() {
    let o = dsa(&["import", "topk", "--help"]);
    let t = String::from_utf8_lossy(&o.stdout);
    for w in [
        "file,row,context_len,needle_start,needle_tokens",
        "SGLang",
        "vLLM",
        ".npz",
        "-1",
        "--overlap",
        "docs/capture.md",
        "Example",
    ] {
        assert!(t.contains(w), "missing {w}: {t}");
    }
    let o = dsa(&["import", "niah", "--help"]);
    let t = String::from_utf8_lossy(&o.stdout);
    for w in ["gkamradt", "RULER", "lm-eval", "NeedleBench", "--min-score", "provenance"] {
        assert!(t.contains(w), "missing {w}: {t}");
    }
}
