//! A file or line over a reader's bound is refused naming that bound (issue 42): the user is
//! told the line was too long, not that the file holds nothing recognisable.

use std::path::Path;
use std::process::{Command, Output};

fn dsa(dir: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_dsa-sim")).args(args).current_dir(dir).output().unwrap()
}

/// Exit 2, one `error:` line holding every one of `want`.
fn refused(o: &Output, want: &[&str]) {
    let e = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{e}");
    assert!(e.starts_with("error: ") && e.lines().count() == 1, "{e}");
    for w in want {
        assert!(e.contains(w), "missing `{w}` in {e}");
    }
}

/// A RULER prediction line whose `input` is `len` bytes of filler.
fn ruler_line(index: u64, len: usize) -> Vec<u8> {
    let mut l = format!(
        "{{\"index\": {index}, \"pred\": \"1234567\", \"outputs\": [\"1234567\"], \"length\": 4096, \"input\": \""
    )
    .into_bytes();
    l.extend(std::iter::repeat_n(b'x', len));
    l.extend_from_slice(b" 1234567.\"}\n");
    l
}

const OVER: usize = 68_000_000; // 68 MB: over the 64 MiB (67,108,864 bytes) bound

#[test]
fn ruler_line_over_the_line_bound_is_named() {
    let d = tempfile::tempdir().unwrap();
    let pred = d.path().join("res/synthetic/4096/pred");
    std::fs::create_dir_all(&pred).unwrap();
    // One line of 68 MB: the only file, so nothing is imported, and the message says why.
    std::fs::write(pred.join("niah_single_1.jsonl"), ruler_line(0, OVER)).unwrap();
    refused(
        &dsa(d.path(), &["import", "niah", "res", "--out", "m.csv"]),
        &["niah_single_1.jsonl", "64 MiB line bound"],
    );
    refused(
        &dsa(d.path(), &["import", "niah", "res/synthetic/4096/pred/niah_single_1.jsonl", "--out", "m.csv"]),
        &["64 MiB line bound"],
    );
    // A good first line, then one over the bound: refused naming the line.
    let mut two = ruler_line(0, 100);
    two.extend(ruler_line(1, OVER));
    std::fs::write(pred.join("niah_single_1.jsonl"), two).unwrap();
    refused(&dsa(d.path(), &["import", "niah", "res", "--out", "m.csv"]), &["line 2", "64 MiB line bound"]);
    assert!(!d.path().join("m.csv").exists());
}

#[test]
fn files_over_the_input_bound_are_named() {
    let d = tempfile::tempdir().unwrap();
    // A CSV of a valid header and then more rows than 64 MiB holds.
    let mut big = b"context_len,index_topk,trials,hits\n".to_vec();
    let row = b"4096,512,10,7\n";
    while big.len() <= 64 << 20 {
        big.extend_from_slice(row);
    }
    std::fs::write(d.path().join("big.csv"), &big).unwrap();
    refused(
        &dsa(d.path(), &["calibrate", "--data", "big.csv", "--fit", "dprime"]),
        &["big.csv", "64 MiB input-file bound"],
    );
    refused(&dsa(d.path(), &["verdict", "--data", "big.csv"]), &["big.csv", "64 MiB input-file bound"]);
    refused(
        &dsa(
            d.path(),
            &[
                "import",
                "topk",
                "--manifest",
                "big.csv",
                "--layers",
                "1",
                "--index-topk",
                "8",
                "--compress-ratio",
                "4",
                "--overlap",
                "true",
                "--out",
                "s.csv",
            ],
        ),
        &["big.csv", "64 MiB input-file bound"],
    );
    refused(
        &dsa(d.path(), &["probe", "--url", "http://127.0.0.1:9", "--cells", "big.csv", "--dry-run"]),
        &["big.csv", "64 MiB input-file bound"],
    );
    // A JSON result file past the bound, alone in its folder.
    let res = d.path().join("res");
    std::fs::create_dir_all(&res).unwrap();
    let mut j = b"{\n\"a\": \"".to_vec();
    j.extend(std::iter::repeat_n(b'x', OVER));
    j.extend_from_slice(b"\"\n}\n");
    std::fs::write(res.join("needle_results.json"), &j).unwrap();
    refused(
        &dsa(d.path(), &["import", "niah", "res", "--out", "m.csv"]),
        &["needle_results.json", "64 MiB file bound"],
    );
}
