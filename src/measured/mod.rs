//! Measured recall tables (DESIGN.md §5): the one reader of the measured-data format, used by
//! calibration (`calibrate --data`, `verdict --data`, calibration experiments) and by the
//! measured overlays of experiment figures (`[[data]]` in `dsa-sim run`). Both therefore accept
//! and reject exactly the same tables, with the same messages.
//!
//! # The format
//!
//! One row per measured cell, a header first.
//!
//! - Required columns: `context_len,index_topk,trials,hits`. Optional: `depth,repeat,
//!   compress_ratio,window,needle_tokens,label`; each optional column a row gives overrides the
//!   base scenario for that row (`dsa-sim probe` writes `needle_tokens`: the needle's length as
//!   counted, so the verdict models the needle that was sent). `needle` or `sample` (`INFORMATIONAL_COLUMNS`) names the needle whose
//!   trials the row counts: calibration then fits needle-level overdispersion. Any other column
//!   is a **condition** ([`Dataset::condition_columns`], [`Observation::conditions`]): a
//!   setting the model does not see (`build`, `backend`, `concurrency`, `batch`, `prefix_cache`,
//!   …), kept per row as text and compared across its values at identical cells
//!   (`diagnosis::conditions`); an empty value is a row that does not record it. A column named
//!   as a scenario field that a row cannot set (`dprime`, `q_format`, …) is an error: its values
//!   would be compared as if they changed nothing. The columns dsa-sim's own row output adds
//!   (`DERIVED_COLUMNS`: computed from the counts) are ignored with a note. A table with `request`, `layer` and `selected` columns is selection
//!   data (`dsa-sim import topk`), read per cell with its layer counts.
//! - The header may come in any order, with any case, surrounding spaces, `-` or ` ` for `_`.
//!   A column named twice is an error.
//! - LF or CRLF line ends; a UTF-8 byte-order mark is skipped; spaces around values are trimmed.
//! - Lines starting with `#` are comments, before the header as well as between rows. Blank
//!   lines (and lines whose fields are all empty) are skipped.
//! - Every other row must have exactly as many fields as the header (a ragged row is an error,
//!   naming its line).
//! - Counts are non-negative integers (`1e3` is accepted as 1000); `trials ≥ 1`, `hits ≤
//!   trials`, `context_len ≥ 1`, `index_topk ≥ 1`, `depth` in 0..=1, `repeat` in 1..2^32,
//!   `compress_ratio ≥ 1`, `needle_tokens ≥ 1`; the trials of all rows must sum below 2^64.
//!
//! Every error is one line naming the file, the row and its line, and the column. Reading is
//! linear in the size of the file, which is bounded like every input file
//! (`crate::input::MAX_INPUT_BYTES`).
//!
//! A `# provenance: …` comment line before the header is the table's own provenance, and travels
//! with every copy; a `README.md` next to a table that names it supplies one too ([`Dataset::provenance`]);
//! when that says the counts are transcribed or not measured, every output using the table says
//! so (`Dataset::transcribed_warning`). The README is read only if it is a regular file, with
//! the same size bound.
//!
//! ```
//! use dsa_sim::measured::parse_csv;
//!
//! let t = "# lab run 3\ncontext_len,index_topk,trials,hits,label\n4096,512,20,19,ok\n65536,512,20,4,lost\n";
//! let d = parse_csv(t, "lab.csv").unwrap();
//! assert_eq!(d.rows.len(), 2);
//! assert_eq!(d.rows[1].observed(), 0.2);
//! assert_eq!(d.rows[1].line, 4);
//! let e = parse_csv("context_len,index_topk,trials,hits,hits\n1,1,1,1,1\n", "x.csv").unwrap_err();
//! assert!(e.to_string().contains("more than once"));
//! ```

mod parse;
mod provenance;
mod records;
mod selections;

pub use parse::parse_csv;
pub(crate) use selections::MAX_LAYERS as MAX_SELECTION_LAYERS;

use crate::scenario::{Field, Scenario, ScenarioError};
use std::collections::HashMap;
use std::fmt;
use std::path::Path;

/// The columns a table must have.
pub(crate) const REQUIRED_COLUMNS: &[&str] = &[Field::ContextLen.name(), Field::IndexTopk.name(), "trials", "hits"];
/// The columns a table may have; each overrides the base scenario for its row.
pub(crate) const OPTIONAL_COLUMNS: &[&str] = &[
    Field::Depth.name(),
    Field::Repeat.name(),
    Field::CompressRatio.name(),
    Field::Window.name(),
    Field::NeedleTokens.name(),
    "label",
];

/// Columns that say which needle (or sample) a row's trials measured (`dsa-sim import niah`
/// writes `needle`): a row with one is a cluster of correlated trials, and calibration fits a
/// needle-level overdispersion for such rows (a beta-binomial per row) instead of treating
/// every trial as independent (docs/model.md#overdispersion).
pub(crate) const INFORMATIONAL_COLUMNS: &[&str] = &["needle", "sample"];

/// Columns computed from a row's counts or from a fit (`calibrate`'s row output): a table read
/// back from it ignores them (as conditions they would predict the counts they come from).
pub(crate) const DERIVED_COLUMNS: &[&str] = &["observed", "fitted", "pearson_residual", "deviance_residual"];

/// A table that could not be loaded: one line naming the file, row, column and what is allowed.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum MeasuredError {
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
        /// The header as read (shortened when long).
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
    /// A column named as a scenario field that a row cannot set (as a condition, rows differing
    /// in it would be compared as if at the same scenario).
    #[error("{source_name}: column `{column}` is a scenario field, which a measured row cannot set (a row sets context_len, index_topk, depth, repeat, compress_ratio, window, needle_tokens): give it as {flag} with one table per value, or rename the column if it records something else (any other column is a condition)")]
    FieldColumn {
        /// The file.
        source_name: String,
        /// The field's name.
        column: String,
        /// Its flag (`--dprime`).
        flag: String,
    },
    /// A row that the CSV reader rejects (wrong number of fields, bad quoting).
    #[error("{source_name}: line {line}: {message}")]
    Malformed {
        /// The file.
        source_name: String,
        /// 1-based line in the file.
        line: u64,
        /// What is wrong.
        message: String,
    },
}

impl crate::error::Classify for MeasuredError {
    /// Always bad input: a table that cannot be read or does not parse is the user's to fix.
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
    /// Which needle (or sample) the row's trials measured (`needle` or `sample` column): rows
    /// with one are clusters of correlated trials, and calibration allows for needle-level
    /// variation between them (docs/model.md#overdispersion).
    pub needle: Option<String>,
    /// Needle length in tokens, if the table gives it (`import topk`'s selections.csv, `probe`'s
    /// measured.csv).
    pub needle_tokens: Option<u64>,
    /// Overlapping compression, if the table gives it (`import topk`'s selections.csv).
    pub overlap: Option<bool>,
    /// Selection data (`dsa-sim import topk`): entry m is the number of requests in which
    /// exactly m of the layers selected the needle (length layers + 1); `trials` is the
    /// number of requests and `hits` those selected by at least one layer.
    pub layer_counts: Option<Vec<u64>>,
    /// The row's value of each condition column ([`Dataset::condition_columns`], in that
    /// order; "" where the row does not record it). Empty for tables without condition columns.
    pub conditions: Vec<String>,
    /// 1-based line of the row in its file (for messages).
    pub line: u64,
}

/// The scenario overrides of a row: two rows with the same key describe the same scenario. The
/// key leaves out the needle and the conditions, which the model does not see: rows that differ
/// only in them are evaluated once, each with its own counts in the likelihood.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct RowKey {
    context_len: u64,
    index_topk: u64,
    depth_bits: Option<u64>,
    repeat: Option<u32>,
    compress_ratio: Option<u64>,
    window: Option<u64>,
    needle_tokens: Option<u64>,
    overlap: Option<bool>,
}

impl Observation {
    /// A recall cell: `hits` of `trials` at (context_len, index_topk, depth), every other column
    /// absent (the scenario's), at `line` of its file (the header is line 1).
    pub fn cell(
        context_len: u64,
        index_topk: u64,
        depth: Option<f64>,
        trials: u64,
        hits: u64,
        line: u64,
    ) -> Observation {
        Observation {
            context_len,
            index_topk,
            trials,
            hits,
            depth,
            repeat: None,
            compress_ratio: None,
            window: None,
            label: None,
            needle: None,
            needle_tokens: None,
            overlap: None,
            layer_counts: None,
            conditions: Vec::new(),
            line,
        }
    }

    /// Observed recall hits / trials.
    pub fn observed(&self) -> f64 {
        self.hits as f64 / self.trials as f64
    }

    /// The Wilson 95% interval of the observed recall.
    pub fn interval(&self) -> (f64, f64) {
        crate::stats::wilson(self.hits, self.trials, crate::stats::Z95)
    }

    /// The row's scenario overrides (everything [`Observation::apply`] substitutes).
    pub(crate) fn key(&self) -> RowKey {
        RowKey {
            context_len: self.context_len,
            index_topk: self.index_topk,
            depth_bits: self.depth.map(f64::to_bits),
            repeat: self.repeat,
            compress_ratio: self.compress_ratio,
            window: self.window,
            needle_tokens: self.needle_tokens,
            overlap: self.overlap,
        }
    }

    /// The scenario of this row: `base` with the row's own context_len, index_topk and optional
    /// columns substituted (a selection table's needle_tokens and overlap too), validated.
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
        if let Some(m) = self.needle_tokens {
            s.needle_tokens = m;
        }
        if let Some(o) = self.overlap {
            s.overlap = o;
        }
        s.validate()?;
        Ok(s)
    }
}

impl fmt::Display for Observation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "L={} k={} {}/{}", self.context_len, self.index_topk, self.hits, self.trials)
    }
}

/// The rows of a table grouped by their scenario overrides (`Observation::key`): rows in one
/// group have the same scenario for any base, so a model needs evaluating once per group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Groups {
    /// For each row, the index of its group.
    pub of_row: Vec<usize>,
    /// For each group, its first row (groups are numbered in order of first appearance).
    pub first_row: Vec<usize>,
}

impl Groups {
    /// Number of distinct groups.
    pub(crate) fn len(&self) -> usize {
        self.first_row.len()
    }

    /// Whether there are no groups (no rows).
    pub fn is_empty(&self) -> bool {
        self.first_row.is_empty()
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
    /// The condition columns (header order, names as normalised): every column that is not a
    /// required, optional, needle or derived one. Each row's values are
    /// [`Observation::conditions`], aligned with this list.
    pub condition_columns: Vec<String>,
}

impl Dataset {
    /// The (context_len, index_topk) a fit or verdict on this table asks its model for: the
    /// rows', then, with the verdict's numbers scenario `at`, its own k and its kernel maximum
    /// at its length. Given to `EngineModel::expecting_topks`, so that one replay serves the rows
    /// of a length at every k.
    pub(crate) fn topks_asked(&self, at: Option<&Scenario>) -> Vec<(u64, u64)> {
        let numbers = at.into_iter().flat_map(|s| [(s.context_len, s.index_topk), (s.context_len, s.max_topk)]);
        self.rows.iter().map(|r| (r.context_len, r.index_topk)).chain(numbers).collect()
    }

    /// A table of `rows` from `source` with no notes, provenance or condition column (cells a
    /// program made: candidate or planned cells, simulated tables).
    pub fn of_rows(source: &str, rows: Vec<Observation>) -> Dataset {
        Dataset {
            source: source.to_string(),
            rows,
            notes: Vec::new(),
            provenance: None,
            transcribed: false,
            condition_columns: Vec::new(),
        }
    }

    /// Whether some row carries a needle (or sample) id: its trials are one needle's, and
    /// calibration allows for needle-level overdispersion (selection data excepted: their
    /// requests are patterns, not trials of one needle).
    pub(crate) fn has_needles(&self) -> bool {
        !self.is_selection() && self.rows.iter().any(|r| r.needle.is_some())
    }

    /// Whether the rows are selection data (`dsa-sim import topk`): their likelihood is that of
    /// the layers' patterns ([`Observation::layer_counts`]).
    pub(crate) fn is_selection(&self) -> bool {
        self.rows.first().is_some_and(|r| r.layer_counts.is_some())
    }

    /// Whether the table sets `field` per row (context_len and index_topk always; an optional
    /// column when at least one row gives it).
    pub(crate) fn has_column(&self, field: Field) -> bool {
        self.rows.iter().any(|r| match field {
            Field::Depth => r.depth.is_some(),
            Field::Repeat => r.repeat.is_some(),
            Field::CompressRatio => r.compress_ratio.is_some(),
            Field::Window => r.window.is_some(),
            Field::NeedleTokens => r.needle_tokens.is_some(),
            Field::ContextLen | Field::IndexTopk => true,
            _ => false,
        })
    }

    /// The warning that must accompany any result computed from a transcribed table.
    pub(crate) fn transcribed_warning(&self) -> Option<String> {
        self.transcribed.then(|| {
            format!(
                "WARNING: {} is TRANSCRIBED from qualitative statements, not measured: its counts are illustrative, so fits, intervals and verdicts from it are illustrative too",
                self.source
            )
        })
    }

    /// Total trials over all rows (a loaded table's total fits in a u64; saturating otherwise).
    pub fn total_trials(&self) -> u64 {
        self.rows.iter().fold(0u64, |a, r| a.saturating_add(r.trials))
    }

    /// The rows grouped by their scenario overrides, in one pass.
    pub fn groups(&self) -> Groups {
        let mut index: HashMap<RowKey, usize> = HashMap::with_capacity(self.rows.len());
        let mut of_row = Vec::with_capacity(self.rows.len());
        let mut first_row = Vec::new();
        for (i, r) in self.rows.iter().enumerate() {
            let g = *index.entry(r.key()).or_insert_with(|| {
                first_row.push(i);
                first_row.len() - 1
            });
            of_row.push(g);
        }
        Groups { of_row, first_row }
    }

    /// Marks the table as transcribed when `note` says so (`transcribed`, `not measured`,
    /// `illustrative`).
    pub(crate) fn mark_if_transcribed(&mut self, note: &str) {
        self.transcribed |= provenance::says_transcribed(note);
    }
}

/// Several tables as one (`verdict --data a.csv --data b.csv`): their rows in order, the union
/// of their condition columns (a row that does not record one has "" there), their notes and
/// provenance joined; transcribed if any is. Selection tables join only with selection tables.
pub(crate) fn join(tables: Vec<Dataset>) -> Result<Dataset, MeasuredError> {
    let mut it = tables.into_iter();
    let Some(first) = it.next() else { return Err(MeasuredError::Empty("no table given".into())) };
    let rest: Vec<Dataset> = it.collect();
    if rest.is_empty() {
        return Ok(first);
    }
    let all: Vec<Dataset> = std::iter::once(first).chain(rest).collect();
    if all.iter().any(|d| d.is_selection()) && !all.iter().all(|d| d.is_selection()) {
        let sel: Vec<&str> = all.iter().filter(|d| d.is_selection()).map(|d| d.source.as_str()).collect();
        return Err(MeasuredError::Empty(format!(
            "{}: a selection table (import topk) cannot be joined with recall tables; give them to separate runs",
            sel.join(", ")
        )));
    }
    let mut cols: Vec<String> = Vec::new();
    for d in &all {
        for c in &d.condition_columns {
            if !cols.contains(c) {
                cols.push(c.clone());
            }
        }
    }
    let source = all.iter().map(|d| d.source.as_str()).collect::<Vec<_>>().join(" + ");
    let mut out = Dataset {
        source,
        rows: Vec::new(),
        notes: Vec::new(),
        provenance: None,
        transcribed: false,
        condition_columns: cols.clone(),
    };
    let mut prov = Vec::new();
    for d in all {
        out.transcribed |= d.transcribed;
        if let Some(p) = &d.provenance {
            prov.push(format!("{}: {p}", d.source));
        }
        out.notes.extend(d.notes.iter().map(|n| format!("{}: {n}", d.source)));
        for mut r in d.rows {
            r.conditions = cols
                .iter()
                .map(|c| {
                    d.condition_columns.iter().position(|x| x == c).map(|i| r.conditions[i].clone()).unwrap_or_default()
                })
                .collect();
            out.rows.push(r);
        }
    }
    out.provenance = (!prov.is_empty()).then(|| prov.join("; "));
    Ok(out)
}

/// Reads a table from a file (bounded: `crate::input::read_to_string`), attaching provenance
/// from a `README.md` in the same folder that mentions the file by name.
pub fn load_csv(path: &Path) -> Result<Dataset, MeasuredError> {
    let name = path.display().to_string();
    let text = crate::input::read_to_string(path)
        .map_err(|e| MeasuredError::Io { path: name.clone(), reason: e.to_string() })?;
    let mut ds = parse_csv(&text, &name)?;
    if let Some(par) = provenance::from_readme(path) {
        ds.transcribed |= provenance::says_transcribed(&par);
        ds.notes.push(format!("provenance (README.md): {par}"));
        // The table's own header comes first: it travels with every copy.
        if ds.provenance.is_none() {
            ds.provenance = Some(par);
        }
    }
    Ok(ds)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn groups_rows_with_the_same_overrides() {
        let t = "context_len,index_topk,trials,hits,repeat,label\n1000,512,10,9,,a\n2000,512,10,5,,b\n1000,512,20,19,,c\n1000,512,20,19,2,d\n2000,512,1,0,,e\n";
        let d = parse_csv(t, "t").unwrap();
        let g = d.groups();
        assert_eq!(g.of_row, [0, 1, 0, 2, 1]);
        assert_eq!(g.first_row, [0, 1, 3]);
        assert_eq!(g.len(), 3);
    }

    #[test]
    fn interval_is_the_wilson_interval() {
        let d = parse_csv("context_len,index_topk,trials,hits\n1000,512,10,0\n1000,512,10,10\n", "t").unwrap();
        let (lo, hi) = d.rows[0].interval();
        assert!(lo == 0.0 && (hi - 0.2775).abs() < 1e-3, "{hi}");
        assert_eq!(d.rows[1].interval().1, 1.0);
    }

    #[test]
    fn tables_join_with_the_union_of_their_conditions() {
        let a = parse_csv("context_len,index_topk,trials,hits,build\n1000,512,10,9,main\n", "a.csv").unwrap();
        let b =
            parse_csv("# provenance: x\ncontext_len,index_topk,trials,hits,concurrency\n1000,512,10,5,8\n", "b.csv")
                .unwrap();
        let j = join(vec![a, b]).unwrap();
        assert_eq!(j.source, "a.csv + b.csv");
        assert_eq!(j.condition_columns, ["build", "concurrency"]);
        assert_eq!(j.rows[0].conditions, ["main", ""]);
        assert_eq!(j.rows[1].conditions, ["", "8"]);
        assert_eq!(j.provenance.as_deref(), Some("b.csv: x"));
    }

    #[test]
    fn row_overrides_the_base() {
        let d =
            parse_csv("context_len,index_topk,trials,hits,repeat,compress_ratio\n16000,512,10,9,8,\n", "a").unwrap();
        let base = Scenario::preset("deepseek-v4-flash").unwrap();
        let s = d.rows[0].apply(&base).unwrap();
        assert_eq!((s.context_len, s.index_topk, s.repeat, s.compress_ratio), (16000, 512, 8, 4));
    }
}
