//! The probe's parts through the library's public API: cells (`2K..64K:x2`, plan files), the
//! exact-length search, string_match_all scoring, the backoff and Retry-After, and the
//! transcript read back after a kill (a cut-off last line dropped, nothing else lost).

use dsa_sim::import::niah::string_match_all;
use dsa_sim::probe::cells::{grid, parse_cells_csv, parse_counts, parse_depths, parse_lengths};
use dsa_sim::probe::client::{parse_retry_after, RetryPolicy};
use dsa_sim::probe::prompt::{build, search, within, Haystack, Needle};
use dsa_sim::probe::transcript::{read, Record, Writer};
use dsa_sim::probe::ProbeError;
use std::time::Duration;

#[test]
fn cells_from_ranges_and_from_plan_files() {
    assert_eq!(parse_lengths("2K..64K:x2").unwrap(), [2000, 4000, 8000, 16000, 32000, 64000]);
    assert_eq!(parse_lengths("4Ki..16Ki:x2").unwrap(), [4096, 8192, 16384]);
    assert_eq!(parse_lengths("4000,4003").unwrap(), [4000, 4003]);
    let g = grid(
        &parse_lengths("2K..8K:x2").unwrap(),
        &parse_depths("0.1,0.5,0.9").unwrap(),
        &parse_counts("--repeat", "1,8", 64).unwrap(),
        5,
    )
    .unwrap();
    assert_eq!(g.len(), 3 * 3 * 2);
    assert_eq!((g[1].context_len, g[1].depth, g[1].repeat, g[1].trials), (2000, 0.1, 8, 5));
    for bad in ["", "2K..", "1..64K:x2", "x"] {
        let e = parse_lengths(bad).unwrap_err();
        assert!(e.message.contains("--context-len") || e.message.contains("context_len"), "{bad}: {e}");
    }
    // What `dsa-sim plan --out` writes.
    let planned = "# provenance: planned by dsa-sim plan from run1/measured.csv (budget 600); cells to measure, no results yet: add a hits column\ncontext_len,index_topk,depth,repeat,trials\n16000,512,0.9,1,100\n8003,1024,0.5,1,50\n";
    let c = parse_cells_csv(planned, "cells.csv", None).unwrap();
    assert_eq!(c.len(), 2);
    assert_eq!((c[1].context_len, c[1].index_topk, c[1].trials), (8003, Some(1024), 50));
    let e = parse_cells_csv("context_len,index_topk,depth,repeat,trials\n16000,512,2,1,100\n", "cells.csv", None)
        .unwrap_err();
    assert!(e.message.contains("row 1") && e.message.contains("depth"), "{e}");
}

#[test]
fn the_search_reaches_the_servers_count() {
    let hay = Haystack::noise();
    let needle = Needle::draw(3, 0);
    // A tokenizer of ~1.4 tokens a word plus a chat template's 3.
    let tok = |t: &str| 3 + t.split_whitespace().map(|w| (w.len() as u64).div_ceil(4)).sum::<u64>();
    for target in [2000u64, 4003, 16000, 65536] {
        let mut n = 0;
        let f = search(target, 100, &mut |w, s| {
            n += 1;
            Ok(tok(&dsa_sim::probe::prompt::build_from(&hay, s, w, 0.5, 1, &needle).text))
        })
        .unwrap();
        assert_eq!(f.tokens, target, "{target}: {f:?}");
        assert!(n <= 40, "{n} counts");
        let p = dsa_sim::probe::prompt::build_from(&hay, f.skip, f.words, 0.5, 1, &needle);
        assert_eq!(tok(&p.text), target);
        let at = tok(p.before_needle()) as f64 / target as f64;
        assert!((at - 0.5).abs() < 0.01, "{at}");
    }
    // No count within ±1%: an error, not a wrong prompt.
    let e = search(1000, 10, &mut |w, _| Ok(w as u64 * 300)).unwrap_err();
    assert!(e.message.contains("cannot build a prompt of 1000 tokens"), "{e}");
    assert!(within(1010, 1000) && !within(1011, 1000));
    let p = build(&hay, 400, 0.0, 3, &needle);
    assert_eq!(p.text.matches(needle.sentence().as_str()).count(), 3);
}

#[test]
fn string_match_all_scores_answers() {
    assert!(string_match_all(" The special magic number is 1234567.", &["1234567"]));
    assert!(!string_match_all(" 123456", &["1234567"]));
    assert!(string_match_all("ABC-def", &["abc-DEF"]));
    assert!(!string_match_all("anything", &[]));
}

#[test]
fn backoff_doubles_to_its_cap_and_retry_after_wins() {
    let p = RetryPolicy { retries: 5, base: Duration::from_millis(500), max: Duration::from_secs(4) };
    let waits: Vec<Duration> = (1..=6).map(|n| p.wait(n, None)).collect();
    assert_eq!(waits, [500, 1000, 2000, 4000, 4000, 4000].map(Duration::from_millis));
    assert_eq!(p.wait(1, parse_retry_after("3")), Duration::from_secs(3));
    assert_eq!(p.wait(1, parse_retry_after("120")), Duration::from_secs(4));
    assert_eq!(parse_retry_after("soon"), None);
}

fn record(i: u64) -> Record {
    Record {
        id: format!("c0-t{i}"),
        cell: 0,
        target_tokens: 2000,
        target_depth: 0.5,
        repeat: 1,
        trial: i,
        seed: 1,
        concurrency: None,
        prefix_cache: None,
        key: "amber-basil".into(),
        value: "1234567".into(),
        words: 1400,
        skip: 0,
        prompt_tokens: 2000,
        local_tokens: None,
        needle_start: 990,
        needle_tokens: 16,
        depth: 0.5,
        positions: "tokenize".into(),
        answer: " 1234567.".into(),
        hit: true,
        ms: 12,
        attempts: 1,
        capture: None,
        discarded: None,
        at: 0,
    }
}

#[test]
fn a_transcript_cut_by_a_kill_reads_back_its_complete_lines() {
    let d = tempfile::tempdir().unwrap();
    let p = d.path().join("transcript.jsonl");
    let mut w = Writer::open(&p).unwrap();
    for i in 0..3 {
        w.append(&record(i)).unwrap();
    }
    drop(w);
    // A kill in the middle of the fourth line.
    let line = serde_json::to_string(&record(3)).unwrap();
    std::fs::OpenOptions::new()
        .append(true)
        .open(&p)
        .and_then(|mut f| std::io::Write::write_all(&mut f, &line.as_bytes()[..40]))
        .unwrap();
    let back = read(&p).unwrap();
    assert_eq!(back, (0..3).map(record).collect::<Vec<_>>());
    // The cut line is gone, so appending continues on a line of its own.
    let mut w = Writer::open(&p).unwrap();
    w.append(&record(3)).unwrap();
    assert_eq!(read(&p).unwrap().len(), 4);
    std::fs::write(&p, "not json\n").unwrap();
    let e: ProbeError = read(&p).unwrap_err();
    assert!(e.message.contains("line 1") && e.message.contains("--resume"), "{e}");
}
