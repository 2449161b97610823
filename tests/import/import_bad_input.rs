//! Bad input to `dsa-sim import topk` and `import niah`: exit 2, one line on stderr naming the
//! file, the row and the problem, and nothing written.

use std::path::Path;
use std::process::Command;

use crate::common;

/// Runs the import in `dir` (the output `out.csv` there) and checks the refusal: exit 2, one
/// line containing every one of `want`, the folder unchanged.
fn refused(dir: &Path, args: &[&str], want: &[&str]) {
    let before = common::snapshot(dir);
    let out = dir.join("out.csv");
    let o = Command::new(env!("CARGO_BIN_EXE_dsa-sim"))
        .args(args)
        .args(["--out", out.to_str().unwrap()])
        .current_dir(dir)
        .output()
        .unwrap();
    let e = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{args:?}: {e}");
    assert_eq!(e.lines().count(), 1, "{e}");
    assert!(e.starts_with("error: "), "{e}");
    for w in want {
        assert!(e.contains(w), "{args:?}: missing `{w}` in {e}");
    }
    assert!(o.stdout.is_empty());
    // Nothing written: no output, no temporary (the lock is taken only after the checks).
    assert_eq!(common::snapshot(dir), before, "{args:?}");
}

fn topk(dir: &Path, files: &[(&str, &[u8])], manifest: &str, want: &[&str]) {
    topk_with(
        dir,
        files,
        manifest,
        &["--layers", "2", "--index-topk", "3", "--compress-ratio", "4", "--overlap", "true"],
        want,
    )
}

fn topk_with(dir: &Path, files: &[(&str, &[u8])], manifest: &str, opts: &[&str], want: &[&str]) {
    for (n, b) in files {
        std::fs::write(dir.join(n), b).unwrap();
    }
    std::fs::write(dir.join("m.csv"), manifest).unwrap();
    let mut a = vec!["import", "topk", "--manifest", "m.csv"];
    a.extend_from_slice(opts);
    refused(dir, &a, want);
}

fn i32s(v: &[i32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

const M1: &str = "file,row,context_len,needle_start,needle_tokens\n";

#[test]
fn base64_that_does_not_decode() {
    let d = tempfile::tempdir().unwrap();
    let reply = br#"{"meta_info":{"indexer_topk":"AAAA!!!!AAAA"}}"#;
    topk(
        d.path(),
        &[("r.json", reply)],
        &format!("{M1}r.json,0,64,8,2\n"),
        &["r.json", "request 0", "base64 does not decode"],
    );
}

#[test]
fn a_shape_that_does_not_match_the_flags() {
    let d = tempfile::tempdir().unwrap();
    // 5 int32 values: not a multiple of 2 layers × 3.
    let reply = format!(r#"{{"meta_info":{{"indexer_topk":"{}"}}}}"#, "AAAAAAAAAAAAAAAAAAAAAAAAAAA=");
    topk(
        d.path(),
        &[("r.json", reply.as_bytes())],
        &format!("{M1}r.json,0,64,8,2\n"),
        &["r.json", "not a multiple of layers × index_topk", "--layers"],
    );
    let d = tempfile::tempdir().unwrap();
    let a = common::npy("<i4", &[1, 3, 3], &i32s(&[0; 9]));
    topk(
        d.path(),
        &[("a.npy", &a)],
        &format!("{M1}a.npy,0,64,8,2\n"),
        &["a.npy", "shape (1, 3, 3) does not match --layers 2 --index-topk 3"],
    );
}

#[test]
fn an_index_beyond_the_entries_of_the_context() {
    let d = tempfile::tempdir().unwrap();
    // Context 64 at c = 4: 16 entries (0..16); index 16 in row 1, layer 1.
    let a = common::npy("<i4", &[2, 2, 3], &i32s(&[0, 1, 2, 3, 4, 5, 1, 2, -1, 3, 16, 0]));
    topk(
        d.path(),
        &[("a.npy", &a)],
        &format!("{M1}a.npy,1,64,8,2\n"),
        &["a.npy", "row 1, layer 1", "index 16 outside 0..16", "manifest m.csv row 1"],
    );
    let d = tempfile::tempdir().unwrap();
    let a = common::npy("<i4", &[1, 2, 3], &i32s(&[0, 1, -2, 3, 4, 5]));
    topk(d.path(), &[("a.npy", &a)], &format!("{M1}a.npy,0,64,8,2\n"), &["a.npy", "row 0, layer 0", "index -2"]);
}

#[test]
fn a_needle_outside_the_context() {
    let d = tempfile::tempdir().unwrap();
    let a = common::npy("<i4", &[1, 2, 3], &i32s(&[0; 6]));
    topk(
        d.path(),
        &[("a.npy", &a)],
        &format!("{M1}a.npy,0,64,8,2\na.npy,0,64,60,8\n"),
        &["m.csv", "row 2 (line 3)", "needle span 60..68 lies outside the context"],
    );
}

#[test]
fn a_manifest_naming_a_missing_file() {
    let d = tempfile::tempdir().unwrap();
    topk(d.path(), &[], &format!("{M1}gone.npz,0,64,8,2\n"), &["m.csv", "row 1", "gone.npz", "No such file"]);
}

#[test]
fn a_truncated_npz_and_truncated_replies() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/captures/npz/req0.npz");
    let whole = std::fs::read(&src).unwrap();
    let d = tempfile::tempdir().unwrap();
    let opts = ["--layers", "3", "--index-topk", "8", "--compress-ratio", "4", "--overlap", "true"];
    topk_with(
        d.path(),
        &[("t.npz", &whole[..whole.len() / 2])],
        &format!("{M1}t.npz,2,256,0,3\n"),
        &opts,
        &["t.npz", "not a complete .npz", "truncated"],
    );
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/captures/sglang/replies.jsonl");
    let whole = std::fs::read(&src).unwrap();
    let first_line = &whole[..whole.iter().position(|&b| b == b'\n').unwrap()];
    let d = tempfile::tempdir().unwrap();
    topk_with(
        d.path(),
        &[("t.json", &first_line[..first_line.len() / 2])],
        &format!("{M1}t.json,2,256,0,3\n"),
        &opts,
        &["t.json", "request 0", "truncated"],
    );
    // A .npy cut inside its data.
    let d = tempfile::tempdir().unwrap();
    let a = common::npy("<i4", &[2, 2, 3], &i32s(&[0; 12]));
    topk(d.path(), &[("a.npy", &a[..a.len() - 5])], &format!("{M1}a.npy,0,64,8,2\n"), &["a.npy", "row 1", "truncated"]);
}

#[test]
fn rows_and_requests_the_file_does_not_have() {
    let d = tempfile::tempdir().unwrap();
    let a = common::npy("<i4", &[2, 2, 3], &i32s(&[0; 12]));
    topk(
        d.path(),
        &[("a.npy", &a)],
        &format!("{M1}a.npy,5,64,8,2\n"),
        &["a.npy", "row 5 of request 0 does not exist: it has 2 rows", "manifest m.csv row 1"],
    );
    let d = tempfile::tempdir().unwrap();
    topk(
        d.path(),
        &[("a.npy", &a)],
        "file,request,row,context_len,needle_start,needle_tokens\na.npy,3,0,64,8,2\n",
        &["a.npy", "request 3 does not exist: the file holds 1 capture"],
    );
}

#[test]
fn not_a_capture_and_bad_flags() {
    let d = tempfile::tempdir().unwrap();
    topk(
        d.path(),
        &[("x.bin", b"hello")],
        &format!("{M1}x.bin,0,64,8,2\n"),
        &["x.bin", "not a recognised capture", "68 65 6c 6c 6f"],
    );
    let d = tempfile::tempdir().unwrap();
    topk(
        d.path(),
        &[("r.json", br#"{"meta_info":{"id":"x"}}"#)],
        &format!("{M1}r.json,0,64,8,2\n"),
        &["r.json", "without an `indexer_topk` string"],
    );
    let d = tempfile::tempdir().unwrap();
    let a = common::npy("<i4", &[1, 2, 3], &i32s(&[0; 6]));
    topk_with(
        d.path(),
        &[("a.npy", &a)],
        &format!("{M1}a.npy,0,64,8,2\n"),
        &["--layers", "0", "--index-topk", "3", "--compress-ratio", "4", "--overlap", "true"],
        &["--layers 0"],
    );
    let d = tempfile::tempdir().unwrap();
    topk(
        d.path(),
        &[("a.npy", &a)],
        "file,row,context_len\na.npy,0,64\n",
        &["m.csv", "missing column(s) needle_start,needle_tokens"],
    );
}

#[test]
fn a_harness_folder_with_no_recognisable_file() {
    let d = tempfile::tempdir().unwrap();
    let res = d.path().join("results");
    std::fs::create_dir(&res).unwrap();
    std::fs::write(res.join("notes.json"), r#"{"hello": 1}"#).unwrap();
    std::fs::write(res.join("log.txt"), "nothing").unwrap();
    refused(d.path(), &["import", "niah", "results"], &["results", "no recognisable harness result among 2 file(s)"]);
    // A recognised format with a bad value names the file and the field.
    std::fs::write(
        res.join("m_len_1000_depth_0_results.json"),
        r#"{"context_length": 1000, "depth_percent": 150, "score": 10}"#,
    )
    .unwrap();
    refused(d.path(), &["import", "niah", "results"], &["m_len_1000_depth_0_results.json", "depth_percent"]);
    std::fs::remove_file(res.join("m_len_1000_depth_0_results.json")).unwrap();
    let pred = d.path().join("r/m/synthetic/4096/pred");
    std::fs::create_dir_all(&pred).unwrap();
    std::fs::write(pred.join("niah.jsonl"), "{\"pred\":\"1\",\"outputs\":[\"1\"],\"input\":\"1\"}\n{\"pred\": 3}\n")
        .unwrap();
    refused(d.path(), &["import", "niah", "r"], &["niah.jsonl", "line 2", "no string `pred`"]);
    refused(d.path(), &["import", "niah", "missing-folder"], &["missing-folder"]);
}
