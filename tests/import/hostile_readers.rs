//! The importers, merge and the selection-table reader under hostile input (issue 24), one
//! section per class of failure: what an importer writes reads back as written; no panic or
//! abort whatever a file declares; bad input exits 2 (never 1) with one line naming the file;
//! values outside their documented range are refused; merge checks its parts' rows and never
//! writes over an input or a file dsa-sim did not write; a refused run creates nothing; messages
//! say what is wrong.

use std::path::Path;
use std::process::{Command, Output};

use crate::common;

fn dsa(dir: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_dsa-sim")).args(args).current_dir(dir).output().unwrap()
}

fn ok(o: &Output) -> String {
    assert!(o.status.success(), "stderr: {}", String::from_utf8_lossy(&o.stderr));
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// Exit 2, one line `error: …` holding every one of `want`, nothing on stdout, no panic.
fn refused(o: &Output, want: &[&str]) -> String {
    let e = String::from_utf8_lossy(&o.stderr).into_owned();
    assert_eq!(o.status.code(), Some(2), "stdout {} stderr {e}", String::from_utf8_lossy(&o.stdout));
    assert_eq!(e.lines().count(), 1, "{e}");
    assert!(e.starts_with("error: ") && !e.contains("panicked"), "{e}");
    for w in want {
        assert!(e.contains(w), "missing `{w}` in {e}");
    }
    assert!(o.stdout.is_empty());
    e
}

fn i32s(v: &[i32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

const TOPK: &[&str] = &["--layers", "2", "--index-topk", "3", "--compress-ratio", "4", "--overlap", "true"];

/// A capture of 4 rows × 2 layers × 3 indices (context 64: entries 0..16).
fn capture(dir: &Path) {
    let v: Vec<i32> = (0..24).map(|i| i % 16).collect();
    std::fs::write(dir.join("cap.npy"), common::npy("<i4", &[4, 2, 3], &i32s(&v))).unwrap();
}

fn import_topk(dir: &Path, manifest: &str) -> Output {
    std::fs::write(dir.join("m.csv"), manifest).unwrap();
    let mut a = vec!["import", "topk", "--manifest", "m.csv", "--out", "sel.csv"];
    a.extend_from_slice(TOPK);
    dsa(dir, &a)
}

/// The requests of a selection table as the one reader (calibrate's) reads them.
fn requests_read_back(path: &Path) -> u64 {
    let d =
        dsa_sim::measured::load_csv(path).unwrap_or_else(|e| panic!("{}: the reader refuses it: {e}", path.display()));
    d.total_trials()
}

// 1. The importer writes what its own reader takes, as written.

#[test]
fn repeated_and_colliding_labels_are_made_unique_and_read_back() {
    let d = tempfile::tempdir().unwrap();
    capture(d.path());
    let m = "file,row,context_len,needle_start,needle_tokens,label\n\
             cap.npy,0,64,8,2,needle-a\ncap.npy,1,64,8,2,needle-a\n\
             cap.npy,2,64,8,2,row 4\ncap.npy,3,64,8,2,\n";
    let out = ok(&import_topk(d.path(), m));
    assert!(out.contains("request name(s) changed"), "{out}");
    assert!(out.contains("`needle-a` → `needle-a (2)`") && out.contains("`row 4` → `row 4 (2)`"), "{out}");
    assert_eq!(requests_read_back(&d.path().join("sel.csv")), 4);
    let sel = std::fs::read_to_string(d.path().join("sel.csv")).unwrap();
    assert!(sel.contains("\nneedle-a (2),64,") && sel.contains("\nrow 4 (2),64,"), "{sel}");
}

#[test]
fn labels_that_would_read_as_comments_or_break_lines_read_back() {
    let d = tempfile::tempdir().unwrap();
    capture(d.path());
    let m = "file,row,context_len,needle_start,needle_tokens,label\n\
             cap.npy,0,64,8,2,#first\ncap.npy,1,64,8,2,\"two\nlines\"\ncap.npy,2,64,8,2,\"  padded \"\ncap.npy,3,64,8,2,padded\n";
    ok(&import_topk(d.path(), m));
    assert_eq!(requests_read_back(&d.path().join("sel.csv")), 4);
    let o = dsa(
        d.path(),
        &[
            "import",
            "topk",
            "--manifest",
            "m.csv",
            "--out",
            "sel.csv",
            "--json",
            "--layers",
            "2",
            "--index-topk",
            "3",
            "--compress-ratio",
            "4",
            "--overlap",
            "true",
        ],
    );
    let j: serde_json::Value = serde_json::from_str(&ok(&o)).unwrap();
    let names: Vec<&str> =
        j["per_request"].as_array().unwrap().iter().map(|r| r["request"].as_str().unwrap()).collect();
    assert_eq!(names, ["#first", "two lines", "padded", "padded (2)"]);
    assert!(
        j["warnings"].as_array().unwrap().iter().any(|w| w.as_str().unwrap().contains("request name(s) changed")),
        "{j}"
    );
}

#[test]
fn more_layers_than_the_selection_reader_takes_are_refused_before_reading() {
    let d = tempfile::tempdir().unwrap();
    capture(d.path());
    std::fs::write(d.path().join("m.csv"), "file,row,context_len,needle_start,needle_tokens\ncap.npy,0,64,8,2\n")
        .unwrap();
    let o = dsa(
        d.path(),
        &[
            "import",
            "topk",
            "--manifest",
            "m.csv",
            "--out",
            "sel.csv",
            "--layers",
            "2000",
            "--index-topk",
            "1",
            "--compress-ratio",
            "4",
            "--overlap",
            "true",
        ],
    );
    refused(&o, &["--layers 2000", "allowed 1..=1024"]);
}

// 2. No panic or abort, whatever a file declares.

/// A `.npz` of the given members (stored), written with the zip crate.
fn npz(path: &Path, members: &[(&str, Vec<u8>)]) {
    use std::io::Write;
    let mut z = zip::ZipWriter::new(std::fs::File::create(path).unwrap());
    for (name, bytes) in members {
        let o = zip::write::SimpleFileOptions::default().compression_method(zip::CompressionMethod::Stored);
        z.start_file(*name, o).unwrap();
        z.write_all(bytes).unwrap();
    }
    z.finish().unwrap();
}

fn f64s(v: &[f64]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

#[test]
fn per_layer_score_arrays_spelt_otherwise_are_refused_not_a_panic() {
    let d = tempfile::tempdir().unwrap();
    let scores = common::npy("<f8", &[2, 4], &f64s(&[3.0, 1.0, 0.5, 0.2, 2.0, 1.5, 0.1, 0.3]));
    let needle = common::npy("<i8", &[2], &[0i64, 1].iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<_>>());
    for bad in ["indexer_scores_00.npy", "indexer_scores_+1.npy", "indexer_scores_-0.npy"] {
        let p = d.path().join("s.npz");
        let mut members = vec![("needle_index.npy", needle.clone()), (bad, scores.clone())];
        if bad.contains('+') {
            members.push(("indexer_scores_0.npy", scores.clone()));
        }
        npz(&p, &members);
        let o = dsa(d.path(), &["import", "scores", "s.npz"]);
        refused(&o, &["s.npz", bad, "indexer_scores_0, indexer_scores_1"]);
    }
}

/// Shards 0/2 and 1/2 of a small analytic sweep as p0.csv, p1.csv (and their sidecars).
fn parts(dir: &Path) {
    for i in 0..2 {
        let shard = format!("{i}/2");
        let out = format!("p{i}.csv");
        ok(&dsa(dir, &["sweep", "--vary", "context_len=1000,2000,4000", "--shard", &shard, "--out", &out, "-q"]));
    }
}

fn edit_json(path: &Path, f: impl FnOnce(&mut serde_json::Value)) {
    let mut v: serde_json::Value = serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap();
    f(&mut v);
    std::fs::write(path, serde_json::to_vec_pretty(&v).unwrap()).unwrap();
}

#[test]
fn a_sidecar_declaring_a_huge_shard_count_is_refused_before_allocating() {
    for count in [serde_json::json!(1_000_000_000_000u64), serde_json::json!(u64::MAX), serde_json::json!(1_000_001)] {
        let d = tempfile::tempdir().unwrap();
        parts(d.path());
        for i in 0..2 {
            edit_json(&d.path().join(format!("p{i}.csv.meta.json")), |v| v["shard"]["count"] = count.clone());
        }
        let start = std::time::Instant::now();
        let o = dsa(d.path(), &["merge", "p0.csv", "p1.csv", "--out", "all.csv"]);
        refused(&o, &["p0.csv", "shards: at most 1000000"]);
        assert!(start.elapsed().as_secs_f64() < 10.0);
        assert!(!d.path().join("all.csv").exists());
    }
}

// 3. Bad input exits 2, and the harness skips what is no result.

#[test]
fn a_manifest_that_is_not_utf8_or_too_large_is_bad_input() {
    let d = tempfile::tempdir().unwrap();
    capture(d.path());
    let mut bytes = b"file,row,context_len,needle_start,needle_tokens,label\ncap.npy,0,64,8,2,".to_vec();
    bytes.extend_from_slice(b"\xff\xfe\n");
    std::fs::write(d.path().join("m.csv"), &bytes).unwrap();
    let mut a = vec!["import", "topk", "--manifest", "m.csv", "--out", "sel.csv"];
    a.extend_from_slice(TOPK);
    refused(&dsa(d.path(), &a), &["m.csv", "UTF-8"]);
    let f = std::fs::File::create(d.path().join("m.csv")).unwrap();
    f.set_len((64 << 20) + 1).unwrap();
    refused(&dsa(d.path(), &a), &["m.csv", "larger than the 64 MiB input-file bound"]);
    assert!(!d.path().join("sel.csv").exists());
}

fn gkamradt(score: &str) -> String {
    format!(
        r#"{{"model":"m","context_length":1000,"depth_percent":50,"version":1,"needle":"n","model_response":"x","score":{score},"test_duration_seconds":1}}"#
    )
}

#[test]
fn unreadable_files_beside_harness_results_are_skipped_with_a_note() {
    let d = tempfile::tempdir().unwrap();
    let res = d.path().join("res");
    std::fs::create_dir(&res).unwrap();
    std::fs::write(res.join("m_len_1000_depth_50_results.json"), gkamradt("10")).unwrap();
    let mut binary = b"{\x00\x01\xff\xfe\x80".to_vec();
    binary.extend(std::iter::repeat_n(0xffu8, 1000));
    std::fs::write(res.join("blob.json"), &binary).unwrap();
    // An unrelated dump past the 64 MiB bound, one line.
    let mut big = b"{\"a\":\"".to_vec();
    big.extend(std::iter::repeat_n(b'x', 65 << 20));
    big.extend_from_slice(b"\"}");
    std::fs::write(res.join("dump.json"), &big).unwrap();
    let out = ok(&dsa(d.path(), &["import", "niah", "res", "--out", "measured.csv"]));
    assert!(out.contains("note: 2 file(s) skipped"), "{out}");
    assert!(
        out.contains("blob.json (not UTF-8 text)")
            && out.contains("dump.json (its first line is longer than the 64 MiB line bound)"),
        "{out}"
    );
    // Pretty-printed, past the bound: skipped as too large.
    let mut pretty = b"{\n\"a\": \"".to_vec();
    pretty.extend(std::iter::repeat_n(b'x', 65 << 20));
    pretty.extend_from_slice(b"\"\n}\n");
    std::fs::write(res.join("dump.json"), &pretty).unwrap();
    let o = dsa(d.path(), &["import", "niah", "res", "--out", "measured.csv", "--json"]);
    let j: serde_json::Value = serde_json::from_str(&ok(&o)).unwrap();
    let notes = j["notes"].to_string();
    assert!(notes.contains("dump.json (larger than the 64 MiB file bound)"), "{notes}");
    assert_eq!(j["cells"][0]["trials"], 1);
}

// 4. Values outside their documented range are refused.

#[test]
fn gkamradt_scores_outside_one_to_ten_are_refused() {
    for score in ["11", "10.5", "-3", "0"] {
        let d = tempfile::tempdir().unwrap();
        std::fs::write(d.path().join("m_len_1000_depth_50_results.json"), gkamradt(score)).unwrap();
        let o = dsa(d.path(), &["import", "niah", ".", "--out", "measured.csv"]);
        refused(&o, &["m_len_1000_depth_50_results.json", "`score`", "1..=10"]);
        assert!(!d.path().join("measured.csv").exists());
    }
}

// 5. merge checks its parts' rows and never writes over an input or a user's file.

fn csv_edit(path: &Path, f: impl FnOnce(&mut Vec<Vec<String>>)) {
    let text = std::fs::read_to_string(path).unwrap();
    let mut rows: Vec<Vec<String>> = text.lines().map(|l| l.split(',').map(str::to_string).collect()).collect();
    f(&mut rows);
    let out: Vec<String> = rows.iter().map(|r| r.join(",")).collect();
    std::fs::write(path, out.join("\n") + "\n").unwrap();
}

#[test]
fn a_part_row_no_sweep_writes_is_refused() {
    let cases: Vec<(&str, &str, &str)> = vec![
        ("recall", "2.5", "allowed 0..=1"),
        ("recall", "NaN", "allowed 0..=1"),
        ("ci_high", "0", "outside its interval"),
        ("engine", "magic", "engine `magic`"),
        ("trials", "100", "an analytic row is exact"),
    ];
    for (column, value, want) in cases {
        let d = tempfile::tempdir().unwrap();
        parts(d.path());
        csv_edit(&d.path().join("p1.csv"), |rows| {
            let i = rows[0].iter().position(|c| c == column).unwrap();
            rows[1][i] = value.to_string();
        });
        let o = dsa(d.path(), &["merge", "p0.csv", "p1.csv", "--out", "all.csv"]);
        refused(&o, &["p1.csv", "line 2", want]);
        assert!(!d.path().join("all.csv").exists());
    }
}

#[test]
fn merge_never_writes_over_an_input_or_a_users_file() {
    let d = tempfile::tempdir().unwrap();
    let dir = d.path();
    parts(dir);
    let before = common::snapshot(dir);
    refused(
        &dsa(dir, &["merge", "p0.csv", "p1.csv", "--out", "p0.csv.meta.json"]),
        &["p0.csv.meta.json", "a part's sidecar"],
    );
    refused(&dsa(dir, &["merge", "p0.csv", "p1.csv", "--out", "p1.csv"]), &["p1.csv", "is also a part"]);
    std::fs::write(dir.join("notes.csv"), "my notes\n").unwrap();
    refused(
        &dsa(dir, &["merge", "p0.csv", "p1.csv", "--out", "notes.csv"]),
        &["notes.csv", "not a sweep file dsa-sim wrote"],
    );
    assert_eq!(std::fs::read(dir.join("notes.csv")).unwrap(), b"my notes\n");
    std::fs::write(dir.join("all.csv.meta.json"), "{\"mine\": 1}\n").unwrap();
    refused(
        &dsa(dir, &["merge", "p0.csv", "p1.csv", "--out", "all.csv"]),
        &["all.csv.meta.json", "not a sweep file dsa-sim wrote"],
    );
    std::fs::remove_file(dir.join("all.csv.meta.json")).unwrap();
    std::fs::write(dir.join("all.json"), "{\"mine\": 1}\n").unwrap();
    refused(
        &dsa(dir, &["merge", "p0.csv", "p1.csv", "--out", "all.json"]),
        &["all.json", "not a sweep file dsa-sim wrote"],
    );
    std::fs::remove_file(dir.join("all.json")).unwrap();
    std::fs::remove_file(dir.join("notes.csv")).unwrap();
    assert_eq!(common::snapshot(dir), before, "the inputs are untouched");
    // Its own earlier output, CSV and JSON, it replaces.
    for out in ["all.csv", "all.json"] {
        ok(&dsa(dir, &["merge", "p0.csv", "p1.csv", "--out", out, "-q"]));
        let first = std::fs::read(dir.join(out)).unwrap();
        ok(&dsa(dir, &["merge", "p0.csv", "p1.csv", "--out", out, "-q"]));
        assert_eq!(std::fs::read(dir.join(out)).unwrap(), first);
    }
}

// 6. A refused run creates nothing.

#[test]
fn an_experiment_refused_for_its_name_leaves_no_results_folder() {
    let d = tempfile::tempdir().unwrap();
    let name = "n".repeat(250);
    let exp = format!(
        "name = \"{name}\"\n[scenario]\ncontext_len = 4096\n[[figure]]\nname = \"f\"\nkind = \"recall_curves\"\nx = \"context_len=1024,2048\"\n"
    );
    std::fs::write(d.path().join("e.toml"), &exp).unwrap();
    let before = common::snapshot(d.path());
    refused(&dsa(d.path(), &["run", "e.toml", "-q"]), &["e.toml", "at most 200 bytes"]);
    assert!(!d.path().join("results").exists());
    assert_eq!(common::snapshot(d.path()), before);
    // A calibration experiment likewise.
    let cal = format!("name = \"{name}\"\ndata = \"d.csv\"\nfit = \"dprime\"\n");
    std::fs::write(d.path().join("c.toml"), cal).unwrap();
    std::fs::write(d.path().join("d.csv"), "context_len,index_topk,trials,hits\n4096,512,10,5\n").unwrap();
    let before = common::snapshot(d.path());
    refused(&dsa(d.path(), &["run", "c.toml", "-q"]), &["c.toml", "at most 200 bytes"]);
    assert_eq!(common::snapshot(d.path()), before);
}

#[test]
fn a_staged_output_refused_after_its_parent_was_made_removes_that_parent() {
    // A name the file system refuses (NAME_MAX is 255 bytes) under folders that do not exist.
    let d = tempfile::tempdir().unwrap();
    let out = d.path().join("a").join("b").join("x".repeat(300));
    let opts = dsa_sim::output::StageOptions { resume: false, fingerprint: "f", inputs: &[] };
    assert!(dsa_sim::output::StagedDir::begin(&out, &opts).is_err());
    assert!(!d.path().join("a").exists());
}

// 7. Messages that say what is wrong.

#[test]
fn a_bzip2_member_is_named_as_unsupported_compression() {
    let d = tempfile::tempdir().unwrap();
    let v: Vec<i32> = vec![0; 6];
    let p = d.path().join("cap.npz");
    npz(&p, &[("topk_index.npy", common::npy("<i4", &[1, 2, 3], &i32s(&v)))]);
    // Mark the member bzip2 (method 12) in its local and central headers.
    let mut b = std::fs::read(&p).unwrap();
    for (sig, off) in [(b"PK\x03\x04", 8), (b"PK\x01\x02", 10)] {
        let at = b.windows(4).position(|w| w == sig).unwrap();
        b[at + off..at + off + 2].copy_from_slice(&12u16.to_le_bytes());
    }
    std::fs::write(&p, &b).unwrap();
    std::fs::write(d.path().join("m.csv"), "file,row,context_len,needle_start,needle_tokens\ncap.npz,0,64,8,2\n")
        .unwrap();
    let mut a = vec!["import", "topk", "--manifest", "m.csv", "--out", "sel.csv"];
    a.extend_from_slice(TOPK);
    let e = refused(&dsa(d.path(), &a), &["cap.npz", "topk_index.npy", "not supported", "np.savez"]);
    assert!(!e.contains("has no `topk_index`"), "{e}");
    // import scores says the same of its members.
    let scores = common::npy("<f8", &[1, 3], &f64s(&[1.0, 2.0, 3.0]));
    let needle = common::npy("<i8", &[1], &0i64.to_le_bytes());
    let s = d.path().join("s.npz");
    npz(&s, &[("needle_index.npy", needle), ("scores.npy", scores)]);
    let mut b = std::fs::read(&s).unwrap();
    let mut at = 0;
    while let Some(i) = b[at..].windows(4).position(|w| w == b"PK\x03\x04" || w == b"PK\x01\x02") {
        let i = at + i;
        let off = if &b[i..i + 4] == b"PK\x03\x04" { 8 } else { 10 };
        b[i + off..i + off + 2].copy_from_slice(&12u16.to_le_bytes());
        at = i + 4;
    }
    std::fs::write(&s, &b).unwrap();
    refused(
        &dsa(d.path(), &["import", "scores", "s.npz"]),
        &["s.npz", "needle_index.npy", "not supported", "numpy.savez"],
    );
}

#[test]
fn unknown_columns_of_a_selection_table_get_the_recall_tables_note() {
    let t = "request,context_len,depth,layer,index_topk,selected,gpu,depht\n0,4096,0.5,0,512,1,h100,0.2\n0,4096,0.5,1,512,0,h100,0.2\n";
    let d = dsa_sim::measured::parse_csv(t, "sel.csv").unwrap();
    assert!(d.notes.iter().any(|n| n.contains("ignored column(s) `gpu`, `depht`")), "{:?}", d.notes);
    let plain = "request,context_len,depth,layer,index_topk,selected\n0,4096,0.5,0,512,1\n";
    let d = dsa_sim::measured::parse_csv(plain, "sel.csv").unwrap();
    assert!(!d.notes.iter().any(|n| n.contains("ignored")), "{:?}", d.notes);
}

#[test]
fn sweep_never_replaces_a_users_file_but_replaces_its_own() {
    let d = tempfile::tempdir().unwrap();
    let dir = d.path();
    let sweep = |out: &str| dsa(dir, &["sweep", "--vary", "context_len=1000,2000", "--out", out, "-q"]);
    for (name, bytes) in [("notes.csv", &b"my notes\n"[..]), ("notes.json", &b"{\"mine\": 1}\n"[..])] {
        std::fs::write(dir.join(name), bytes).unwrap();
        refused(&sweep(name), &[name, "not a sweep file dsa-sim wrote"]);
        assert_eq!(std::fs::read(dir.join(name)).unwrap(), bytes);
    }
    std::fs::write(dir.join("x.csv.meta.json"), "{}\n").unwrap();
    refused(&sweep("x.csv"), &["x.csv.meta.json", "not a sweep file dsa-sim wrote"]);
    assert!(!dir.join("x.csv").exists());
    for out in ["mine.csv", "mine.json"] {
        ok(&sweep(out));
        let first = std::fs::read(dir.join(out)).unwrap();
        ok(&sweep(out));
        assert_eq!(std::fs::read(dir.join(out)).unwrap(), first);
    }
}

#[test]
fn unknown_manifest_columns_are_named_in_a_note() {
    let d = tempfile::tempdir().unwrap();
    capture(d.path());
    let out = ok(&import_topk(d.path(), "file,row,context_len,needle_start,needle_tokens,lable\ncap.npy,0,64,8,2,x\n"));
    assert!(out.contains("note: m.csv: ignored column(s) `lable`"), "{out}");
}
