//! Measured recall tables (DESIGN.md §5): one row per measured cell, loaded from CSV as notebooks
//! and spreadsheets write it.
//!
//! Required columns: `context_len,index_topk,trials,hits`. Optional: `depth,repeat,
//! compress_ratio,window,label`. The header may come in any order, with any case and surrounding
//! spaces; LF or CRLF line ends; lines starting with `#` are comments; other columns are ignored
//! with a note. Every error names the row (and its line in the file) and the column.

use crate::scenario::{Scenario, ScenarioError};
use std::fmt;
use std::path::Path;

/// The columns a table must have.
pub const REQUIRED_COLUMNS: &[&str] = &["context_len", "index_topk", "trials", "hits"];
/// The columns a table may have; each overrides the base scenario for its row.
pub const OPTIONAL_COLUMNS: &[&str] = &["depth", "repeat", "compress_ratio", "window", "label"];

/// A table that could not be loaded: one line naming the file, row, column and what is allowed.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum DataError {
    /// The file could not be read.
    #[error("{path}: cannot read: {reason}")]
    Io {
        /// The file.
        path: String,
        /// The operating system's reason.
        reason: String,
    },
    /// No header, or a header but no rows.
    #[error("{0}")]
    Empty(String),
    /// Required columns are absent from the header.
    #[error("{source_name}: missing column(s) {missing} (the header has: {found}; required: context_len,index_topk,trials,hits)")]
    MissingColumns {
        /// The file.
        source_name: String,
        /// The missing names, comma-separated.
        missing: String,
        /// The header as read.
        found: String,
    },
    /// A column appears twice.
    #[error("{source_name}: column `{column}` appears more than once in the header")]
    DuplicateColumn {
        /// The file.
        source_name: String,
        /// The repeated column.
        column: String,
    },
    /// A bad cell.
    #[error("{source_name}: row {row} (line {line}), column `{column}`: {message}")]
    Cell {
        /// The file.
        source_name: String,
        /// 1-based data row (the header is not counted).
        row: usize,
        /// 1-based line in the file.
        line: u64,
        /// The column.
        column: String,
        /// What is wrong and what is allowed.
        message: String,
    },
    /// A row that the CSV reader rejects (wrong number of fields, bad quoting).
    #[error("{source_name}: line {line}: {message}")]
    Malformed {
        /// The file.
        source_name: String,
        /// 1-based line in the file.
        line: u64,
        /// The reader's message.
        message: String,
    },
}

impl crate::error::Classify for DataError {
    /// Always bad input: a measured table that cannot be read or does not parse.
    fn kind(&self) -> crate::error::ErrorKind {
        crate::error::ErrorKind::Input
    }
}

/// One measured cell: `hits` successes out of `trials` needle queries.
#[derive(Debug, Clone, PartialEq)]
pub struct Observation {
    /// Tokens before the query.
    pub context_len: u64,
    /// Candidates selected by the indexer (entries, e.g. pages for Quest).
    pub index_topk: u64,
    /// Number of queries.
    pub trials: u64,
    /// Successful retrievals, ≤ trials.
    pub hits: u64,
    /// Needle depth, if the table gives it.
    pub depth: Option<f64>,
    /// Needle copies, if the table gives them.
    pub repeat: Option<u32>,
    /// Tokens per candidate entry, if the table gives it.
    pub compress_ratio: Option<u64>,
    /// Sliding window, if the table gives it.
    pub window: Option<u64>,
    /// Free-text label.
    pub label: Option<String>,
    /// 1-based line of the row in its file (for messages).
    pub line: u64,
}

impl Observation {
    /// Observed recall hits / trials.
    pub fn observed(&self) -> f64 {
        self.hits as f64 / self.trials as f64
    }

    /// The scenario of this row: `base` with the row's own context_len, index_topk and optional
    /// columns substituted, validated.
    pub fn apply(&self, base: &Scenario) -> Result<Scenario, ScenarioError> {
        let mut s = base.clone();
        s.context_len = self.context_len;
        s.index_topk = self.index_topk;
        if let Some(d) = self.depth {
            s.depth = d;
        }
        if let Some(r) = self.repeat {
            s.repeat = r;
        }
        if let Some(c) = self.compress_ratio {
            s.compress_ratio = c;
        }
        if let Some(w) = self.window {
            s.window = w;
        }
        s.validate()?;
        Ok(s)
    }
}

/// A loaded table with the notes produced while reading it.
#[derive(Debug, Clone, PartialEq)]
pub struct Dataset {
    /// Where the rows came from (a path or `<memory>`).
    pub source: String,
    /// The rows, in file order.
    pub rows: Vec<Observation>,
    /// Informational notes (ignored columns, provenance).
    pub notes: Vec<String>,
    /// Provenance text from a README.md next to the file that describes it, if any.
    pub provenance: Option<String>,
    /// True when that provenance says the counts are transcribed / not measured: every output
    /// that uses the table must say so.
    pub transcribed: bool,
}

impl Dataset {
    /// Which optional columns the table has (so they are fixed by the data).
    pub fn has_column(&self, name: &str) -> bool {
        self.rows.iter().any(|r| match name {
            "depth" => r.depth.is_some(),
            "repeat" => r.repeat.is_some(),
            "compress_ratio" => r.compress_ratio.is_some(),
            "window" => r.window.is_some(),
            "context_len" | "index_topk" => true,
            _ => false,
        })
    }

    /// The warning that must accompany any result computed from a transcribed table.
    pub fn transcribed_warning(&self) -> Option<String> {
        self.transcribed.then(|| {
            format!(
                "WARNING: {} is TRANSCRIBED from qualitative statements, not measured: its counts are illustrative, so fits, intervals and verdicts from it are illustrative too",
                self.source
            )
        })
    }

    /// Total trials over all rows.
    pub fn total_trials(&self) -> u64 {
        self.rows.iter().map(|r| r.trials).sum()
    }
}

impl fmt::Display for Observation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "L={} k={} {}/{}", self.context_len, self.index_topk, self.hits, self.trials)
    }
}

/// Reads a table from a file, attaching provenance from a `README.md` in the same directory that
/// mentions the file by name.
pub fn load_csv(path: &Path) -> Result<Dataset, DataError> {
    let name = path.display().to_string();
    let text = crate::input::read_to_string(path)
        .map_err(|e| DataError::Io { path: name.clone(), reason: e.to_string() })?;
    let mut ds = parse_csv(&text, &name)?;
    if let Some(file) = path.file_name().and_then(|f| f.to_str()) {
        let readme = path.parent().map(|p| p.join("README.md"));
        if let Some(Ok(doc)) = readme.map(std::fs::read_to_string) {
            if let Some(par) = provenance_paragraph(&doc, file) {
                let low = par.to_lowercase();
                ds.transcribed = ["transcribed", "not measured", "illustrative"].iter().any(|w| low.contains(w));
                ds.notes.push(format!("provenance (README.md): {par}"));
                ds.provenance = Some(par);
            }
        }
    }
    Ok(ds)
}

/// The README paragraph (a bullet and its continuation lines) that names `file`.
fn provenance_paragraph(doc: &str, file: &str) -> Option<String> {
    let mut paragraphs: Vec<String> = Vec::new();
    let mut cur = String::new();
    for line in doc.lines() {
        let t = line.trim();
        let starts_new =
            t.is_empty() || t.starts_with("- ") || t.starts_with("* ") || t.starts_with('#') || t.starts_with('|') || cur.starts_with('|');
        if starts_new && !cur.is_empty() {
            paragraphs.push(std::mem::take(&mut cur));
        }
        if !t.is_empty() {
            if !cur.is_empty() {
                cur.push(' ');
            }
            cur.push_str(t.trim_start_matches("- ").trim_start_matches("* "));
        }
    }
    if !cur.is_empty() {
        paragraphs.push(cur);
    }
    paragraphs.into_iter().find(|p| p.contains(file))
}

/// Parses CSV text (see the module docs). `source` names it in messages.
pub fn parse_csv(text: &str, source: &str) -> Result<Dataset, DataError> {
    let src = source.to_string();
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    if text.lines().all(|l| l.trim().is_empty() || l.trim_start().starts_with('#')) {
        return Err(DataError::Empty(format!(
            "{src}: empty file: expected a header with context_len,index_topk,trials,hits and at least one row"
        )));
    }
    let mut rdr = csv::ReaderBuilder::new()
        .has_headers(true)
        .trim(csv::Trim::All)
        .comment(Some(b'#'))
        .flexible(false)
        .from_reader(text.as_bytes());
    let header: Vec<String> = rdr
        .headers()
        .map_err(|e| DataError::Malformed { source_name: src.clone(), line: 1, message: e.to_string() })?
        .iter()
        .map(|h| h.trim().to_lowercase().replace(['-', ' '], "_"))
        .collect();
    let mut notes = Vec::new();
    let index = |name: &str| header.iter().position(|h| h == name);
    for (i, h) in header.iter().enumerate() {
        if header[..i].contains(h) {
            return Err(DataError::DuplicateColumn { source_name: src.clone(), column: h.clone() });
        }
    }
    let missing: Vec<&str> = REQUIRED_COLUMNS.iter().copied().filter(|c| index(c).is_none()).collect();
    if !missing.is_empty() {
        return Err(DataError::MissingColumns {
            source_name: src.clone(),
            missing: missing.join(","),
            found: header.join(","),
        });
    }
    let extra: Vec<&String> = header
        .iter()
        .filter(|h| !REQUIRED_COLUMNS.contains(&h.as_str()) && !OPTIONAL_COLUMNS.contains(&h.as_str()))
        .collect();
    if !extra.is_empty() {
        notes.push(format!(
            "ignored column(s) {} (known: {},{})",
            extra.iter().map(|s| format!("`{s}`")).collect::<Vec<_>>().join(", "),
            REQUIRED_COLUMNS.join(","),
            OPTIONAL_COLUMNS.join(",")
        ));
    }
    let col = |name: &str| header.iter().position(|h| h == name);
    let (i_l, i_k, i_t, i_h) =
        (col("context_len").unwrap(), col("index_topk").unwrap(), col("trials").unwrap(), col("hits").unwrap());
    let (i_d, i_r, i_c, i_w, i_lab) =
        (col("depth"), col("repeat"), col("compress_ratio"), col("window"), col("label"));

    let mut rows = Vec::new();
    for (n, rec) in rdr.records().enumerate() {
        let row = n + 1;
        let rec = rec.map_err(|e| {
            let line = e.position().map(|p| line_of(text, p.byte() as usize)).unwrap_or(0);
            DataError::Malformed { source_name: src.clone(), line, message: one_line_csv_error(&e) }
        })?;
        let line = rec.position().map(|p| line_of(text, p.byte() as usize)).unwrap_or(row as u64 + 1);
        if rec.iter().all(|f| f.is_empty()) {
            continue;
        }
        let cell_err = |column: &str, message: String| DataError::Cell {
            source_name: src.clone(),
            row,
            line,
            column: column.to_string(),
            message,
        };
        let req_int = |i: usize, name: &str| -> Result<u64, DataError> {
            let v = rec.get(i).unwrap_or("");
            if v.is_empty() {
                return Err(cell_err(name, "empty: a non-negative integer is required".into()));
            }
            parse_int(v).map_err(|m| cell_err(name, m))
        };
        let opt_int = |i: Option<usize>, name: &str| -> Result<Option<u64>, DataError> {
            match i.map(|i| rec.get(i).unwrap_or("")) {
                None | Some("") => Ok(None),
                Some(v) => parse_int(v).map(Some).map_err(|m| cell_err(name, m)),
            }
        };
        let context_len = req_int(i_l, "context_len")?;
        let index_topk = req_int(i_k, "index_topk")?;
        let trials = req_int(i_t, "trials")?;
        let hits = req_int(i_h, "hits")?;
        if context_len == 0 {
            return Err(cell_err("context_len", "0: allowed ≥ 1".into()));
        }
        if index_topk == 0 {
            return Err(cell_err("index_topk", "0: allowed ≥ 1".into()));
        }
        if trials == 0 {
            return Err(cell_err("trials", "0: allowed ≥ 1 (a row without trials carries no information)".into()));
        }
        if hits > trials {
            return Err(cell_err("hits", format!("{hits} > trials ({trials}): allowed 0..=trials")));
        }
        let depth = match i_d.map(|i| rec.get(i).unwrap_or("")) {
            None | Some("") => None,
            Some(v) => {
                let d: f64 = v.parse().map_err(|_| cell_err("depth", format!("`{v}` is not a number (allowed 0..=1)")))?;
                if !(d.is_finite() && (0.0..=1.0).contains(&d)) {
                    return Err(cell_err("depth", format!("{v}: allowed 0..=1")));
                }
                Some(d)
            }
        };
        let repeat = match opt_int(i_r, "repeat")? {
            None => None,
            Some(0) => return Err(cell_err("repeat", "0: allowed ≥ 1".into())),
            Some(r) => Some(u32::try_from(r).map_err(|_| cell_err("repeat", format!("{r}: allowed below 2^32")))?),
        };
        let compress_ratio = opt_int(i_c, "compress_ratio")?;
        if compress_ratio == Some(0) {
            return Err(cell_err("compress_ratio", "0: allowed ≥ 1".into()));
        }
        let window = opt_int(i_w, "window")?;
        let label = i_lab.and_then(|i| rec.get(i)).filter(|s| !s.is_empty()).map(str::to_string);
        rows.push(Observation { context_len, index_topk, trials, hits, depth, repeat, compress_ratio, window, label, line });
    }
    if rows.is_empty() {
        return Err(DataError::Empty(format!("{src}: no data rows after the header")));
    }
    Ok(Dataset { source: src, rows, notes, provenance: None, transcribed: false })
}

/// 1-based line of the record starting at byte `b` (the reader's own line counts miss CRLF and
/// blank lines): skips line ends and blanks before the record's first character.
fn line_of(text: &str, b: usize) -> u64 {
    let bytes = text.as_bytes();
    let mut b = b.min(bytes.len());
    let mut line = 1 + bytes[..b].iter().filter(|&&c| c == b'\n').count() as u64;
    while b < bytes.len() && matches!(bytes[b], b'\r' | b'\n' | b' ' | b'\t') {
        if bytes[b] == b'\n' {
            line += 1;
        }
        b += 1;
    }
    line
}

fn one_line_csv_error(e: &csv::Error) -> String {
    match e.kind() {
        csv::ErrorKind::UnequalLengths { expected_len, len, .. } => {
            format!("{len} fields where the header has {expected_len}")
        }
        _ => e.to_string().replace('\n', " "),
    }
}

fn parse_int(v: &str) -> Result<u64, String> {
    if let Ok(x) = v.parse::<u64>() {
        return Ok(x);
    }
    match v.parse::<f64>() {
        Ok(x) if x.is_finite() && x < 0.0 => Err(format!("{v} is negative: a non-negative integer is required")),
        Ok(x) if x.is_finite() && x.fract() == 0.0 && x < 1.8e19 => Ok(x as u64),
        Ok(_) => Err(format!("{v} is not a whole number: a non-negative integer is required")),
        Err(_) => Err(format!("`{v}` is not a number: a non-negative integer is required")),
    }
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
    fn errors_name_row_and_column() {
        let e = parse_csv("context_len,index_topk,trials\n1,2,3\n", "a.csv").unwrap_err().to_string();
        assert!(e.contains("missing column") && e.contains("hits"), "{e}");
        let e = parse_csv("context_len,index_topk,trials,hits\n1000,2,3,2\n1000,2,3,4\n", "a.csv").unwrap_err().to_string();
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
    fn row_overrides_the_base() {
        let d = parse_csv("context_len,index_topk,trials,hits,repeat,compress_ratio\n16000,512,10,9,8,\n", "a").unwrap();
        let base = Scenario::preset("deepseek-v4-flash").unwrap();
        let s = d.rows[0].apply(&base).unwrap();
        assert_eq!((s.context_len, s.index_topk, s.repeat, s.compress_ratio), (16000, 512, 8, 4));
    }

    #[test]
    fn provenance_paragraph_found() {
        let doc = "# T\n\n- `a.csv` — first\n  more text, transcribed.\n- `b.csv` — measured\n";
        assert_eq!(provenance_paragraph(doc, "a.csv").unwrap(), "`a.csv` — first more text, transcribed.");
        assert!(provenance_paragraph(doc, "c.csv").is_none());
    }
}
