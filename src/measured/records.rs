//! The record layer the measured readers share (the numbers table, `parse`, and the
//! selections table, `selections`): quoting user text in messages, line numbers of records,
//! integer cells and the record loop.

use super::MeasuredError;
use crate::scenario::Field;

const DEPTH: &str = Field::Depth.name();

/// Longest piece of user text (a cell, a header) quoted in a message.
pub(super) const QUOTE_MAX: usize = 60;
/// Most ignored column names listed in the note about them.
const LIST_MAX: usize = 8;

/// `s`, cut to at most `max` characters (with `…` when cut).
pub(super) fn clip(s: &str, max: usize) -> String {
    match s.char_indices().nth(max) {
        None => s.to_string(),
        Some((i, _)) => format!("{}…", &s[..i]),
    }
}

/// Names, comma-separated, the first [`LIST_MAX`] only.
pub(super) fn list(names: &[&str], quote: bool) -> String {
    let shown: Vec<String> = names
        .iter()
        .take(LIST_MAX)
        .map(|n| if quote { format!("`{}`", clip(n, QUOTE_MAX)) } else { clip(n, QUOTE_MAX) })
        .collect();
    let mut t = shown.join(if quote { ", " } else { "," });
    if names.len() > LIST_MAX {
        t.push_str(&format!(" … and {} more", names.len() - LIST_MAX));
    }
    t
}

/// Line numbers of records from their byte offsets, which the reader delivers in increasing
/// order: each call counts only the bytes since the previous one.
pub(super) struct Lines<'a> {
    bytes: &'a [u8],
    pos: usize,
    line: u64,
}

impl<'a> Lines<'a> {
    pub(super) fn new(text: &'a str) -> Self {
        Lines { bytes: text.as_bytes(), pos: 0, line: 1 }
    }

    /// 1-based line of the record starting at byte `b` (the reader's own line counts miss CRLF
    /// and blank lines, and its record position may be that of the comment lines before the
    /// record): line ends, blanks and comment lines before the record's first character are
    /// skipped.
    pub(super) fn at(&mut self, b: usize) -> u64 {
        let b = b.min(self.bytes.len());
        if b < self.pos {
            self.pos = 0;
            self.line = 1;
        }
        self.line += self.bytes[self.pos..b].iter().filter(|&&c| c == b'\n').count() as u64;
        self.pos = b;
        let mut line = self.line;
        let mut line_start = b == 0 || self.bytes[b - 1] == b'\n';
        let mut i = b;
        while i < self.bytes.len() {
            match self.bytes[i] {
                b'\n' => {
                    line += 1;
                    line_start = true;
                }
                b'\r' | b' ' | b'\t' => line_start = false,
                b'#' if line_start => {
                    while i < self.bytes.len() && self.bytes[i] != b'\n' {
                        i += 1;
                    }
                    continue;
                }
                _ => break,
            }
            i += 1;
        }
        line
    }
}

pub(super) fn one_line_csv_error(e: &csv::Error) -> String {
    match e.kind() {
        csv::ErrorKind::UnequalLengths { expected_len, len, .. } => {
            format!("{len} fields where the header has {expected_len}")
        }
        _ => e.to_string().replace(['\n', '\r'], " "),
    }
}

pub(super) fn parse_int(v: &str) -> Result<u64, String> {
    if let Ok(x) = v.parse::<u64>() {
        return Ok(x);
    }
    let q = clip(v, QUOTE_MAX);
    // Token counts as the scenario fields take them: 16K, 128Ki, 1M (crate::scenario::COUNT_SUFFIXES).
    if let Some(r) = crate::scenario::parse_suffixed_count(v) {
        return r.map_err(|why| format!("`{q}`: {why}"));
    }
    match v.parse::<f64>() {
        Ok(x) if x.is_finite() && x < 0.0 => Err(format!("{q} is negative: a non-negative integer is required")),
        Ok(x) if x.is_finite() && x.fract() == 0.0 && x < 1.8e19 => Ok(x as u64),
        Ok(_) => Err(format!("{q} is not a whole number: a non-negative integer is required")),
        Err(_) => Err(format!("`{q}` is not a number: a non-negative integer is required")),
    }
}

/// One data record of a table, with the cell parsers both tables' readers share (the same
/// accept/reject rules and messages, each naming the file, row, line and column).
pub(super) struct Record<'r> {
    src: &'r str,
    /// 1-based among the records.
    pub(crate) row: usize,
    /// The record's line in the file.
    pub(crate) line: u64,
    fields: &'r csv::StringRecord,
}

impl Record<'_> {
    /// The field at `i` ("" when absent).
    pub(crate) fn get(&self, i: usize) -> &str {
        self.fields.get(i).unwrap_or("")
    }

    /// A bad cell in `column`.
    pub(crate) fn err(&self, column: &str, message: String) -> MeasuredError {
        MeasuredError::Cell {
            source_name: self.src.to_string(),
            row: self.row,
            line: self.line,
            column: column.to_string(),
            message,
        }
    }

    /// A required non-negative integer.
    pub(crate) fn int(&self, i: usize, name: &str) -> Result<u64, MeasuredError> {
        let v = self.get(i);
        if v.is_empty() {
            return Err(self.err(name, "empty: a non-negative integer is required".into()));
        }
        parse_int(v).map_err(|m| self.err(name, m))
    }

    /// An optional non-negative integer (an absent column or an empty cell: None).
    pub(crate) fn opt_int(&self, i: Option<usize>, name: &str) -> Result<Option<u64>, MeasuredError> {
        match i.map(|i| self.get(i)) {
            None | Some("") => Ok(None),
            Some(v) => parse_int(v).map(Some).map_err(|m| self.err(name, m)),
        }
    }

    /// An optional depth in [0, 1].
    pub(crate) fn depth(&self, i: Option<usize>) -> Result<Option<f64>, MeasuredError> {
        match i.map(|i| self.get(i)) {
            None | Some("") => Ok(None),
            Some(v) => {
                let q = clip(v, QUOTE_MAX);
                let d: f64 =
                    v.parse().map_err(|_| self.err(DEPTH, format!("`{q}` is not a number (allowed 0..=1)")))?;
                if !(d.is_finite() && (0.0..=1.0).contains(&d)) {
                    return Err(self.err(DEPTH, format!("{q}: allowed 0..=1")));
                }
                Ok(Some(d))
            }
        }
    }
}

/// Calls `each(record)` for every data record after the header; blank records are skipped,
/// and a malformed record or one with another field count than the header's is refused with
/// its line. The one record loop of recall and selection tables.
pub(super) fn for_each_record(
    mut rdr: csv::Reader<&[u8]>,
    lines: &mut Lines,
    width: usize,
    header_line: u64,
    src: &str,
    mut each: impl FnMut(&Record) -> Result<(), MeasuredError>,
) -> Result<(), MeasuredError> {
    for (n, rec) in rdr.records().enumerate() {
        let row = n + 1;
        let rec = rec.map_err(|e| {
            let line = e.position().map_or(0, |p| lines.at(p.byte() as usize));
            MeasuredError::Malformed { source_name: src.to_string(), line, message: one_line_csv_error(&e) }
        })?;
        let line = rec.position().map_or(header_line + row as u64, |p| lines.at(p.byte() as usize));
        if rec.iter().all(|f| f.is_empty()) {
            continue;
        }
        if rec.len() != width {
            return Err(MeasuredError::Malformed {
                source_name: src.to_string(),
                line,
                message: format!("{} fields where the header has {}", rec.len(), width),
            });
        }
        each(&Record { src, row, line, fields: &rec })?;
    }
    Ok(())
}
