//! The parser of measured tables (format: see the module docs). One pass over the text: the
//! line of each record is found by counting line ends from the previous record, not from the
//! start of the file.

use super::records::{clip, for_each_record, list, one_line_csv_error, Lines, QUOTE_MAX};
use super::{
    Dataset, MeasuredError, Observation, DERIVED_COLUMNS, INFORMATIONAL_COLUMNS, OPTIONAL_COLUMNS, REQUIRED_COLUMNS,
};
use crate::scenario::Field;
use std::collections::HashSet;

// The scenario-field columns, named as the field table names them.
const CONTEXT_LEN: &str = Field::ContextLen.name();
const INDEX_TOPK: &str = Field::IndexTopk.name();
const DEPTH: &str = Field::Depth.name();
const REPEAT: &str = Field::Repeat.name();
const COMPRESS_RATIO: &str = Field::CompressRatio.name();
const WINDOW: &str = Field::Window.name();
const NEEDLE_TOKENS: &str = Field::NeedleTokens.name();

/// Parses CSV text (see the module docs). `source` names it in messages.
pub fn parse_csv(text: &str, source: &str) -> Result<Dataset, MeasuredError> {
    let src = source.to_string();
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    if text.lines().all(|l| l.trim().is_empty() || l.trim_start().starts_with('#')) {
        return Err(MeasuredError::Empty(format!(
            "{src}: empty file: expected a header with context_len,index_topk,trials,hits and at least one row"
        )));
    }
    // Flexible: a row's length is checked below, after blank rows are skipped, so that a line
    // of spaces counts as blank and every ragged row gets the same message.
    let mut rdr = csv::ReaderBuilder::new()
        .has_headers(true)
        .trim(csv::Trim::All)
        .comment(Some(b'#'))
        .flexible(true)
        .from_reader(text.as_bytes());
    let mut lines = Lines::new(text);
    let header_rec = rdr
        .headers()
        .map_err(|e| MeasuredError::Malformed { source_name: src.clone(), line: 1, message: one_line_csv_error(&e) })?
        .clone();
    let header: Vec<String> = header_rec.iter().map(|h| h.trim().to_lowercase().replace(['-', ' '], "_")).collect();
    let header_line = header_rec.position().map_or(1, |p| lines.at(p.byte() as usize));
    let mut seen = HashSet::with_capacity(header.len());
    for h in &header {
        if !seen.insert(h.as_str()) {
            return Err(MeasuredError::DuplicateColumn { source_name: src.clone(), column: clip(h, QUOTE_MAX) });
        }
    }
    let col = |name: &str| header.iter().position(|h| h == name);
    if col("layer").is_some() && col("selected").is_some() && col("trials").is_none() && col("hits").is_none() {
        // Per-request, per-layer selections (`dsa-sim import topk`): aggregated per cell.
        return super::selections::parse_records(text, &src, rdr, lines, &header, header_line);
    }
    let missing: Vec<&str> = REQUIRED_COLUMNS.iter().copied().filter(|c| col(c).is_none()).collect();
    if !missing.is_empty() {
        let found: Vec<&str> = header.iter().map(String::as_str).collect();
        return Err(MeasuredError::MissingColumns {
            source_name: src.clone(),
            missing: missing.join(","),
            found: list(&found, false),
        });
    }
    let known =
        |h: &str| REQUIRED_COLUMNS.contains(&h) || OPTIONAL_COLUMNS.contains(&h) || INFORMATIONAL_COLUMNS.contains(&h);
    // A scenario field a row cannot set is no condition: read as one, rows differing in it
    // would be compared as if at the same scenario.
    if let Some(f) = header.iter().filter(|h| !known(h)).find_map(|h| Field::from_name(h).ok()) {
        return Err(MeasuredError::FieldColumn {
            source_name: src.clone(),
            column: f.name().to_string(),
            flag: format!("--{}", f.flag()),
        });
    }
    let derived: Vec<&str> = header.iter().map(String::as_str).filter(|h| DERIVED_COLUMNS.contains(h)).collect();
    let conditions: Vec<usize> =
        (0..header.len()).filter(|&i| !known(&header[i]) && !DERIVED_COLUMNS.contains(&header[i].as_str())).collect();
    let mut notes = Vec::new();
    if !conditions.is_empty() {
        let names: Vec<&str> = conditions.iter().map(|&i| header[i].as_str()).collect();
        let (what, their) = if names.len() == 1 { ("column", "its") } else { ("columns", "their") };
        let verb = if names.len() == 1 { "is a condition" } else { "are conditions" };
        notes.push(format!(
            "{what} {} {verb}: rows are compared across {their} values at identical cells (scenario columns: {},{})",
            list(&names, true),
            REQUIRED_COLUMNS.join(","),
            OPTIONAL_COLUMNS.join(",")
        ));
    }
    if !derived.is_empty() {
        notes.push(format!("ignored column(s) {} (computed from the counts or a fit)", list(&derived, true)));
    }
    let req = |name: &str| col(name).unwrap_or(0);
    let (i_l, i_k, i_t, i_h) = (req(CONTEXT_LEN), req(INDEX_TOPK), req("trials"), req("hits"));
    let (i_d, i_r, i_c, i_w, i_lab) = (col(DEPTH), col(REPEAT), col(COMPRESS_RATIO), col(WINDOW), col("label"));
    let i_m = col(NEEDLE_TOKENS);
    let i_needle = col("needle").or(col("sample"));

    let mut rows = Vec::new();
    let mut total_trials = 0u64;
    for_each_record(rdr, &mut lines, header.len(), header_line, &src, |rec| {
        let cell_err = |column: &str, message: String| rec.err(column, message);
        let context_len = rec.int(i_l, CONTEXT_LEN)?;
        let index_topk = rec.int(i_k, INDEX_TOPK)?;
        let trials = rec.int(i_t, "trials")?;
        let hits = rec.int(i_h, "hits")?;
        if context_len == 0 {
            return Err(cell_err(CONTEXT_LEN, "0: allowed ≥ 1".into()));
        }
        if index_topk == 0 {
            return Err(cell_err(INDEX_TOPK, "0: allowed ≥ 1".into()));
        }
        if trials == 0 {
            return Err(cell_err("trials", "0: allowed ≥ 1 (a row without trials carries no information)".into()));
        }
        if hits > trials {
            return Err(cell_err("hits", format!("{hits} > trials ({trials}): allowed 0..=trials")));
        }
        total_trials = total_trials
            .checked_add(trials)
            .ok_or_else(|| cell_err("trials", format!("{trials}: the trials of all rows sum past 2^64 − 1")))?;
        let depth = rec.depth(i_d)?;
        let repeat = match rec.opt_int(i_r, REPEAT)? {
            None => None,
            Some(0) => return Err(cell_err(REPEAT, "0: allowed ≥ 1".into())),
            Some(r) => Some(u32::try_from(r).map_err(|_| cell_err(REPEAT, format!("{r}: allowed below 2^32")))?),
        };
        let compress_ratio = rec.opt_int(i_c, COMPRESS_RATIO)?;
        if compress_ratio == Some(0) {
            return Err(cell_err(COMPRESS_RATIO, "0: allowed ≥ 1".into()));
        }
        let window = rec.opt_int(i_w, WINDOW)?;
        let needle_tokens = rec.opt_int(i_m, NEEDLE_TOKENS)?;
        if needle_tokens == Some(0) {
            return Err(cell_err(NEEDLE_TOKENS, "0: allowed ≥ 1".into()));
        }
        let label = i_lab.map(|i| rec.get(i)).filter(|s| !s.is_empty()).map(str::to_string);
        let needle = i_needle.map(|i| rec.get(i)).filter(|s| !s.is_empty()).map(|s| clip(s, 200));
        let conditions = conditions.iter().map(|&i| clip(rec.get(i), 200)).collect();
        rows.push(Observation {
            context_len,
            index_topk,
            trials,
            hits,
            depth,
            repeat,
            compress_ratio,
            window,
            label,
            needle,
            needle_tokens,
            overlap: None,
            layer_counts: None,
            conditions,
            line: rec.line,
        });
        Ok(())
    })?;
    if rows.is_empty() {
        return Err(MeasuredError::Empty(format!("{src}: no data rows after the header")));
    }
    // Provenance carried in the table's own comment header (`# provenance: …`).
    let provenance = super::provenance::from_header(text);
    let transcribed = provenance.as_deref().is_some_and(super::provenance::says_transcribed);
    if let Some(p) = &provenance {
        notes.push(format!("provenance (header): {p}"));
    }
    let condition_columns = conditions.iter().map(|&i| header[i].clone()).collect();
    Ok(Dataset { source: src, rows, notes, provenance, transcribed, condition_columns })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn any_order_crlf_spaces_extra_columns() {
        let t = " hits , trials,context_len ,Index_TopK,notes\r\n 3, 10 ,4000,512, x\r\n\r\n10,10,1000,512,y\r\n";
        let d = parse_csv(t, "t.csv").unwrap();
        assert_eq!(d.rows.len(), 2);
        assert_eq!((d.rows[0].context_len, d.rows[0].index_topk, d.rows[0].trials, d.rows[0].hits), (4000, 512, 10, 3));
        assert_eq!(d.rows[1].line, 4);
        assert!(d.notes.iter().any(|n| n.contains("`notes`")), "{:?}", d.notes);
    }

    #[test]
    fn needle_columns_are_accepted_without_a_note() {
        let with = "# provenance: dsa-sim import niah\ncontext_len,index_topk,depth,needle,trials,hits\n4096,512,0.5,niah_single_1,10,9\n4096,512,0.5,niah_single_2,10,7\n";
        let d = parse_csv(with, "m.csv").unwrap();
        assert!(!d.notes.iter().any(|n| n.contains("ignored")), "{:?}", d.notes);
        assert_eq!(d.rows.len(), 2);
        // Same scenario overrides: one group, whatever the needle.
        assert_eq!(d.groups().len(), 1);
        let without = "context_len,index_topk,depth,trials,hits\n4096,512,0.5,10,9\n4096,512,0.5,10,7\n";
        let e = parse_csv(without, "m.csv").unwrap();
        let strip = |d: &Dataset| {
            d.rows.iter().map(|r| (r.context_len, r.index_topk, r.depth, r.trials, r.hits)).collect::<Vec<_>>()
        };
        assert_eq!(strip(&d), strip(&e));
    }

    #[test]
    fn other_columns_are_conditions() {
        let t =
            "context_len,index_topk,trials,hits,Build,backend,label\n4000,512,10,9,a,sglang,x\n4000,512,10,3,b,,y\n";
        let d = parse_csv(t, "t.csv").unwrap();
        assert_eq!(d.condition_columns, ["build", "backend"]);
        assert_eq!(d.rows[0].conditions, ["a", "sglang"]);
        assert_eq!(d.rows[1].conditions, ["b", ""]);
        assert_eq!(d.rows[1].label.as_deref(), Some("y"));
        let note =
            "columns `build`, `backend` are conditions: rows are compared across their values at identical cells";
        assert!(d.notes.iter().any(|n| n.starts_with(note)), "{:?}", d.notes);
        // Different conditions, same scenario: one group for the model.
        assert_eq!(d.groups().len(), 1);
        // calibrate's own row output read back: its computed columns are no conditions.
        let d =
            parse_csv("context_len,index_topk,trials,hits,observed,fitted\n4000,512,10,9,0.9,0.8\n", "t.csv").unwrap();
        assert!(d.condition_columns.is_empty() && d.rows[0].conditions.is_empty());
        assert!(d.notes.iter().any(|n| n.starts_with("ignored column(s) `observed`, `fitted`")), "{:?}", d.notes);
        // A scenario field a row cannot set is refused, naming its flag.
        let e = parse_csv("context_len,index_topk,trials,hits,Q-Format\n4000,512,10,9,bf16\n", "t.csv")
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("t.csv: column `q_format` is a scenario field") && e.contains("--q-format"), "{e}");
    }

    #[test]
    fn token_count_suffixes_as_in_scenario_fields() {
        let t = "context_len,index_topk,trials,hits\n16K,512,10,3\n128Ki,1Ki,1K,3\n1M,2Ki,10,3\n";
        let d = parse_csv(t, "t.csv").unwrap();
        let got: Vec<(u64, u64, u64)> = d.rows.iter().map(|r| (r.context_len, r.index_topk, r.trials)).collect();
        assert_eq!(got, [(16_000, 512, 10), (131_072, 1024, 1000), (1_000_000, 2048, 10)]);
        let e = parse_csv("context_len,index_topk,trials,hits\n1.0001K,512,10,3\n", "t.csv").unwrap_err().to_string();
        assert!(e.contains("row 1") && e.contains("context_len") && e.contains("not a whole number"), "{e}");
    }

    #[test]
    fn comments_before_the_header_and_between_rows() {
        let t = "\u{feff}# measured on 2024-05-01\n#\ncontext_len,index_topk,trials,hits\n# first\n1000,512,10,3\n\n  \n# second\n2000,512,10,4\n";
        let d = parse_csv(t, "t.csv").unwrap();
        assert_eq!(d.rows.iter().map(|r| r.line).collect::<Vec<_>>(), [5, 9]);
        let e =
            parse_csv("# c\ncontext_len,index_topk,trials,hits\n1000,512,10,30\n", "t.csv").unwrap_err().to_string();
        assert!(e.contains("row 1 (line 3)"), "{e}");
    }

    #[test]
    fn duplicate_columns_and_ragged_rows_are_errors() {
        let e = parse_csv("context_len,index_topk,trials,hits,Hits\n1,1,1,1,1\n", "a.csv").unwrap_err().to_string();
        assert!(e.contains("`hits` appears more than once"), "{e}");
        for (t, line, n) in [
            ("context_len,index_topk,trials,hits\n1000,512,10,3,7\n", 2, 5),
            ("context_len,index_topk,trials,hits\r\n1000,512,10,3\r\n\r\n1000,512,10\r\n", 4, 3),
        ] {
            let e = parse_csv(t, "a.csv").unwrap_err().to_string();
            assert_eq!(e, format!("a.csv: line {line}: {n} fields where the header has 4"));
        }
    }

    #[test]
    fn errors_name_row_and_column() {
        let e = parse_csv("context_len,index_topk,trials\n1,2,3\n", "a.csv").unwrap_err().to_string();
        assert!(e.contains("missing column") && e.contains("hits"), "{e}");
        let e =
            parse_csv("context_len,index_topk,trials,hits\n1000,2,3,2\n1000,2,3,4\n", "a.csv").unwrap_err().to_string();
        assert!(e.contains("row 2") && e.contains("`hits`") && e.contains("4 > trials (3)"), "{e}");
        let e = parse_csv("context_len,index_topk,trials,hits\n-5,2,3,2\n", "a.csv").unwrap_err().to_string();
        assert!(e.contains("row 1") && e.contains("context_len") && e.contains("negative"), "{e}");
        let e = parse_csv("context_len,index_topk,trials,hits\n5,abc,3,2\n", "a.csv").unwrap_err().to_string();
        assert!(e.contains("index_topk") && e.contains("not a number"), "{e}");
        let e = parse_csv("", "a.csv").unwrap_err().to_string();
        assert!(e.contains("empty file"), "{e}");
        let e = parse_csv("context_len,index_topk,trials,hits\r\n", "a.csv").unwrap_err().to_string();
        assert!(e.contains("no data rows"), "{e}");
        let e = parse_csv("context_len,index_topk,trials,hits,depth\n5,1,3,2,1.5\n", "a.csv").unwrap_err().to_string();
        assert!(e.contains("depth") && e.contains("0..=1"), "{e}");
        let e = parse_csv("context_len,index_topk,trials,hits\n5,1,3\n", "a.csv").unwrap_err().to_string();
        assert!(e.contains("line 2"), "{e}");
    }

    #[test]
    fn long_text_is_quoted_short() {
        let junk = "x".repeat(100_000);
        let e =
            parse_csv(&format!("context_len,index_topk,trials,hits\n{junk},1,1,1\n"), "a.csv").unwrap_err().to_string();
        assert!(e.len() < 300, "{} bytes", e.len());
        let header: Vec<String> = (0..10_000).map(|i| format!("c{i}")).collect();
        let e = parse_csv(&format!("{}\n", header.join(",")), "a.csv").unwrap_err().to_string();
        assert!(e.len() < 400 && e.contains("and 9992 more"), "{e}");
    }

    #[test]
    fn total_trials_must_fit() {
        let t =
            "context_len,index_topk,trials,hits\n1000,512,17000000000000000000,1\n1000,512,17000000000000000000,1\n";
        let e = parse_csv(t, "a.csv").unwrap_err().to_string();
        assert!(e.contains("row 2") && e.contains("sum past"), "{e}");
    }

    #[test]
    fn a_large_table_parses_in_linear_time() {
        let mut t = String::from("context_len,index_topk,trials,hits\n");
        for _ in 0..100_000 {
            t.push_str("1000,512,10,5\n");
        }
        t.push_str("1000,512,10,11\n");
        let start = std::time::Instant::now();
        let e = parse_csv(&t, "big.csv").unwrap_err().to_string();
        assert!(e.contains("row 100001 (line 100002)"), "{e}");
        // Quadratic line counting took about 20 s here; linear parsing takes milliseconds.
        assert!(start.elapsed().as_secs_f64() < 2.0, "{:?}", start.elapsed());
    }
}
