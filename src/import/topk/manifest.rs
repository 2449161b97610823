//! The manifest of an indexer capture: which row of which file is the query of which needle.

use super::CaptureError;
use std::path::{Path, PathBuf};

/// One manifest line: a needle query whose selections are in row `row` of capture `request`
/// of `file`.
#[derive(Debug, Clone, PartialEq)]
pub struct ManifestLine {
    /// The file as written in the manifest.
    pub(crate) file: String,
    /// The file, resolved against the manifest's folder.
    pub(crate) path: PathBuf,
    /// Which capture in the file (the n-th `indexer_topk` string of a JSON/JSONL file; 0 for
    /// `.npy` / `.npz`).
    pub(crate) request: u64,
    /// Row of that capture (the selection made at query token `row`).
    pub(crate) row: u64,
    /// Tokens before the query.
    pub(crate) context_len: u64,
    /// First needle token.
    pub(crate) needle_start: u64,
    /// Needle length in tokens.
    pub(crate) needle_tokens: u64,
    /// Free text naming the line in outputs.
    pub(crate) label: Option<String>,
    /// 1-based data row of the manifest (the header is not counted).
    pub(crate) row_no: usize,
    /// 1-based line of the manifest file.
    pub(crate) line: u64,
}

impl ManifestLine {
    /// The name of this line in outputs: its label, else `row N` of the manifest.
    pub(crate) fn name(&self) -> String {
        self.label.clone().unwrap_or_else(|| format!("row {}", self.row_no))
    }

    /// The needle's depth as the scenario field defines it (docs/model.md#geometry: a needle
    /// at depth d starts at floor(d · (L − m))): needle_start / (context_len − needle_tokens),
    /// 0 when the needle fills the context.
    pub(crate) fn depth(&self) -> f64 {
        let room = self.context_len - self.needle_tokens;
        if room == 0 {
            0.0
        } else {
            self.needle_start as f64 / room as f64
        }
    }
}

const COLUMNS: &[&str] = &["file", "row", "context_len", "needle_start", "needle_tokens"];

/// Parses a manifest's text (`name` for messages; files resolve against `dir`). Every line is
/// checked before any capture is read: counts, the needle span inside the context, files that
/// exist.
/// A column the manifest does not use (a misspelt `lable`) is named in a note in `notes`, as the
/// measured reader names a table's.
pub(crate) fn parse(
    text: &str,
    name: &str,
    dir: &Path,
    notes: &mut Vec<String>,
) -> Result<Vec<ManifestLine>, CaptureError> {
    let err = |m: String| CaptureError::input(format!("{name}: {m}"));
    let mut rdr =
        csv::ReaderBuilder::new().comment(Some(b'#')).flexible(true).trim(csv::Trim::All).from_reader(text.as_bytes());
    let header: Vec<String> = rdr
        .headers()
        .map_err(|e| err(format!("cannot read the header: {e}")))?
        .iter()
        .map(|h| h.trim_start_matches('\u{feff}').to_ascii_lowercase().replace(['-', ' '], "_"))
        .collect();
    if header.iter().all(|h| h.is_empty()) {
        return Err(err(
            "empty manifest: a header `file,row,context_len,needle_start,needle_tokens[,request][,label]` is required"
                .into(),
        ));
    }
    let col = |n: &str| header.iter().position(|h| h == n);
    let missing: Vec<&str> = COLUMNS.iter().copied().filter(|c| col(c).is_none()).collect();
    if !missing.is_empty() {
        return Err(err(format!(
            "missing column(s) {} (required: {}; optional: request, label)",
            missing.join(","),
            COLUMNS.join(",")
        )));
    }
    for (i, h) in header.iter().enumerate() {
        if header[..i].contains(h) {
            return Err(err(format!("column `{}` appears more than once in the header", crate::input::echo(h))));
        }
    }
    let extra: Vec<String> = header
        .iter()
        .filter(|h| !h.is_empty() && !COLUMNS.contains(&h.as_str()) && !["request", "label"].contains(&h.as_str()))
        .take(8)
        .map(|h| format!("`{}`", crate::input::echo(h)))
        .collect();
    if !extra.is_empty() {
        notes.push(format!(
            "{name}: ignored column(s) {} (known: {},request,label)",
            extra.join(", "),
            COLUMNS.join(",")
        ));
    }
    let (i_f, i_r, i_l, i_s, i_m) = (
        col("file").unwrap_or(0),
        col("row").unwrap_or(0),
        col("context_len").unwrap_or(0),
        col("needle_start").unwrap_or(0),
        col("needle_tokens").unwrap_or(0),
    );
    let (i_q, i_lab) = (col("request"), col("label"));
    let mut out = Vec::new();
    for (n, rec) in rdr.records().enumerate() {
        let row_no = n + 1;
        let rec = rec.map_err(|e| err(format!("row {row_no}: {}", crate::error::one_line(&e.to_string()))))?;
        let line = rec.position().map_or(row_no as u64 + 1, |p| p.line());
        if rec.iter().all(|f| f.is_empty()) {
            continue;
        }
        let at = |m: String| err(format!("row {row_no} (line {line}): {m}"));
        if rec.len() != header.len() {
            return Err(at(format!("{} fields where the header has {}", rec.len(), header.len())));
        }
        let int = |i: usize, c: &str| -> Result<u64, CaptureError> {
            let v = rec.get(i).unwrap_or("");
            if v.is_empty() {
                return Err(at(format!("column `{c}` is empty: a non-negative integer is required")));
            }
            count(v).map_err(|m| at(format!("column `{c}`: {m}")))
        };
        let file = rec.get(i_f).unwrap_or("").to_string();
        if file.is_empty() {
            return Err(at("column `file` is empty: name a capture file (relative to the manifest's folder)".into()));
        }
        let context_len = int(i_l, "context_len")?;
        let needle_start = int(i_s, "needle_start")?;
        let needle_tokens = int(i_m, "needle_tokens")?;
        let row = int(i_r, "row")?;
        let request = match i_q.map(|i| rec.get(i).unwrap_or("")) {
            None | Some("") => 0,
            Some(_) => int(i_q.unwrap_or(0), "request")?,
        };
        if context_len == 0 {
            return Err(at("context_len = 0: allowed ≥ 1".into()));
        }
        if needle_tokens == 0 {
            return Err(at("needle_tokens = 0: allowed ≥ 1".into()));
        }
        if needle_start.checked_add(needle_tokens).is_none_or(|end| end > context_len) {
            return Err(at(format!(
                "the needle span {needle_start}..{} lies outside the context (context_len {context_len}: tokens 0..{context_len})",
                needle_start.saturating_add(needle_tokens)
            )));
        }
        let path = dir.join(&file);
        match std::fs::metadata(&path) {
            Ok(m) if m.is_file() => {}
            Ok(_) => return Err(at(format!("file `{}` is not a regular file", crate::input::echo(&file)))),
            Err(e) => return Err(at(format!("file `{}` ({}): {e}", crate::input::echo(&file), path.display()))),
        }
        let label = i_lab.and_then(|i| rec.get(i)).filter(|s| !s.is_empty()).map(str::to_string);
        out.push(ManifestLine {
            file,
            path,
            request,
            row,
            context_len,
            needle_start,
            needle_tokens,
            label,
            row_no,
            line,
        });
    }
    if out.is_empty() {
        return Err(err("no data rows after the header".into()));
    }
    Ok(out)
}

/// A count: digits, or a token-count suffix as the scenario fields take them (`16K`, `128Ki`).
fn count(v: &str) -> Result<u64, String> {
    if let Ok(x) = v.parse::<u64>() {
        return Ok(x);
    }
    let q = crate::input::echo(v);
    match crate::scenario::parse_suffixed_count(v) {
        Some(r) => r.map_err(|why| format!("`{q}`: {why}")),
        None => Err(format!("`{q}` is not a non-negative integer")),
    }
}
