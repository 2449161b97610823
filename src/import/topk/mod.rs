//! Measured indexer selections (`dsa-sim import topk`): which of an indexer's top-k entries a
//! real server selected at a needle query, read from captures (docs/capture.md).
//!
//! A **manifest** (CSV: `file,row,context_len,needle_start,needle_tokens[,request][,label]`)
//! names, for each needle query, the capture file, the capture in it (`request`, the n-th
//! `indexer_topk` string of a JSON/JSONL file, from 0), the row (the selection made at query
//! token `row`) and where the needle lies. Each capture is an array (rows, layers, index_topk)
//! of entry indices, −1 padding unused slots (`read`: `.npz`, `.npy`, SGLang and vLLM
//! replies, detected by content). For every manifest line and layer the needle is **selected**
//! when one of the entries that pool a needle token (`crate::geometry::covering_entries`: c
//! tokens per entry, 2c with overlap) is among that layer's indices.
//!
//! Every file is read once, as a stream, in bounded memory (one row, one read buffer): a
//! multi-gigabyte reply is scanned by `json::Scanner` and decoded in chunks; only the rows the
//! manifest names are checked. Every problem is bad input naming the file, the capture and row,
//! and the manifest row: an index outside 0..N (N = floor(context_len / c) entries) or below −1,
//! a shape that is not (rows, --layers, --index-topk), base64 that does not decode, a row or
//! capture the file does not have.

pub(crate) mod json;
mod manifest;
pub(crate) mod read;

pub(crate) use manifest::ManifestLine;
pub use read::{FileInfo, Layout, Shape};

use crate::error::{Classify, ErrorKind};
use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::ops::Range;
use std::path::Path;

/// A capture that cannot be imported: one line naming the file, the row and the problem.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CaptureError {
    kind: ErrorKind,
    /// The message.
    pub(crate) message: String,
}

impl CaptureError {
    /// Bad input.
    pub(crate) fn input(message: impl Into<String>) -> CaptureError {
        CaptureError { kind: ErrorKind::Input, message: message.into() }
    }

    /// An I/O error on a named file: its kind decides ([`crate::error::io_kind`]).
    pub(crate) fn io(message: impl Into<String>, e: &std::io::Error) -> CaptureError {
        CaptureError { kind: crate::error::io_kind(e), message: message.into() }
    }
}

impl fmt::Display for CaptureError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for CaptureError {}

impl Classify for CaptureError {
    fn kind(&self) -> ErrorKind {
        self.kind
    }
}

/// Most layers × index_topk per row (a row buffer stays ≤ 16 MiB of i64).
pub(crate) const MAX_ROW_VALUES: u64 = 1 << 21;

/// Most indices of queries given in memory ([`import_arrays`]: queries × layers × index_topk),
/// 1 GiB as i64; the Python package checks an array's shape against it before copying it.
pub const MAX_ARRAY_VALUES: u64 = 1 << 27;

/// How the captures were made: their shape and the compression geometry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Options {
    /// Indexer layers in every capture.
    pub layers: u64,
    /// Indices per row and layer.
    pub index_topk: u64,
    /// Tokens per compressed entry (1: token-level, DeepSeek-V3.2; 4: V4 CSA).
    pub compress_ratio: u64,
    /// V4's overlapping compression: entry i pools tokens (i−1)·c..i·c+c−1.
    pub overlap: bool,
}

impl Options {
    /// Checks the ranges (before any file is read).
    pub fn check(&self) -> Result<(), CaptureError> {
        // The selection table's reader takes at most this many layers: a larger capture would
        // be imported into a table that calibrate refuses.
        let max_layers = crate::measured::MAX_SELECTION_LAYERS;
        if self.layers == 0 || self.layers > max_layers {
            return Err(CaptureError::input(format!("--layers {}: allowed 1..={max_layers}", self.layers)));
        }
        if self.index_topk == 0 || self.index_topk > 1 << 20 {
            return Err(CaptureError::input(format!("--index-topk {}: allowed 1..=1048576", self.index_topk)));
        }
        if self.layers * self.index_topk > MAX_ROW_VALUES {
            return Err(CaptureError::input(format!(
                "--layers {} × --index-topk {} = {} indices per row: at most {MAX_ROW_VALUES}",
                self.layers,
                self.index_topk,
                self.layers * self.index_topk
            )));
        }
        if self.compress_ratio == 0 || self.compress_ratio > 1 << 20 {
            return Err(CaptureError::input(format!("--compress-ratio {}: allowed 1..=1048576", self.compress_ratio)));
        }
        Ok(())
    }

    fn shape(&self) -> Shape {
        Shape { layers: self.layers as usize, index_topk: self.index_topk as usize }
    }
}

/// The outcome for one manifest line.
#[derive(Debug, Clone, PartialEq)]
pub struct Selection {
    /// The manifest line.
    pub line: ManifestLine,
    /// Entries at this context: N = floor(context_len / c).
    pub n_entries: u64,
    /// The entries that pool a needle token.
    pub needle_entries: Range<u64>,
    /// Per layer: whether a needle entry was among the layer's indices.
    pub selected: Vec<bool>,
    /// The request's name in outputs: the line's label (else `row N`), made unique and safe by
    /// `assign_names`.
    pub name: String,
}

impl Selection {
    /// A manifest line's needle entries at its context (a warning when no entry pools it).
    fn new(line: ManifestLine, options: &Options, name: &str, warnings: &mut Vec<String>) -> Selection {
        let c = options.compress_ratio;
        let n = line.context_len / c;
        let needle_entries = crate::geometry::covering_entries(
            line.needle_start,
            line.needle_start + line.needle_tokens,
            c,
            options.overlap,
            n,
        );
        if needle_entries.is_empty() {
            warnings.push(format!(
                "{name}: row {}: no entry pools the needle (tokens {}..{} lie past the last complete block of {c} tokens): never selected",
                line.row_no,
                line.needle_start,
                line.needle_start + line.needle_tokens
            ));
        }
        let name = line.name();
        Selection { line, n_entries: n, needle_entries, selected: Vec::new(), name }
    }

    /// Records, per layer, whether one of `vals` (layers × k entry indices of capture row `row`,
    /// −1 for unused slots) pools the needle; an index outside the context's entries is refused.
    fn select(&mut self, vals: &[i64], row: u64, k: usize, c: u64, name: &str) -> Result<(), CaptureError> {
        let mut sel = Vec::with_capacity(vals.len() / k.max(1));
        for (layer, chunk) in vals.chunks_exact(k).enumerate() {
            let mut hit = false;
            for &v in chunk {
                if v == -1 {
                    continue;
                }
                if v < -1 || v as u64 >= self.n_entries {
                    return Err(CaptureError::input(format!(
                        "row {row}, layer {layer}: index {v} outside 0..{} (the entries of context_len {} at compress_ratio {c}; −1 pads unused slots) (manifest {name} row {})",
                        self.n_entries, self.line.context_len, self.line.row_no
                    )));
                }
                hit |= self.needle_entries.contains(&(v as u64));
            }
            sel.push(hit);
        }
        self.selected = sel;
        Ok(())
    }
}

/// One needle query given in memory (the Python package's `import_topk`): its layers × k entry
/// indices and the needle.
#[derive(Debug, Clone, PartialEq)]
pub struct ArrayQuery {
    /// layers × index_topk entry indices, row-major; −1 pads unused slots.
    pub indices: Vec<i64>,
    /// Tokens before the query.
    pub context_len: u64,
    /// First needle token.
    pub needle_start: u64,
    /// Needle length in tokens.
    pub needle_tokens: u64,
    /// Names the query in outputs (default `row N`, 1-based).
    pub label: Option<String>,
}

/// [`import`] of queries given in memory, checked as a manifest's lines are; `source` names them
/// in messages and in the result. The result is the one a manifest naming the same rows gives,
/// but for `files`, which is empty.
pub fn import_arrays(queries: &[ArrayQuery], options: &Options, source: &str) -> Result<Import, CaptureError> {
    options.check()?;
    let per = options.layers as usize * options.index_topk as usize;
    if (queries.len() as u64).checked_mul(per as u64).is_none_or(|t| t > MAX_ARRAY_VALUES) {
        return Err(CaptureError::input(format!(
            "{source}: {} queries × {per} indices exceed the bound of {MAX_ARRAY_VALUES} indices in all (import the queries in batches)",
            queries.len()
        )));
    }
    let mut warnings = Vec::new();
    let mut selections = Vec::with_capacity(queries.len());
    for (i, q) in queries.iter().enumerate() {
        let row_no = i + 1;
        let at = |m: String| CaptureError::input(format!("{source}: query {i}: {m}"));
        if q.indices.len() != per {
            return Err(at(format!(
                "{} indices where layers × index_topk = {} × {} = {per}",
                q.indices.len(),
                options.layers,
                options.index_topk
            )));
        }
        if q.needle_tokens == 0 {
            return Err(at("needle_tokens 0: allowed ≥ 1".into()));
        }
        if q.needle_start.checked_add(q.needle_tokens).is_none_or(|end| end > q.context_len) {
            return Err(at(format!(
                "the needle (tokens {}..{}) does not lie inside the context of {} tokens",
                q.needle_start,
                q.needle_start.saturating_add(q.needle_tokens),
                q.context_len
            )));
        }
        let line = ManifestLine {
            file: source.to_string(),
            path: std::path::PathBuf::from(source),
            request: 0,
            row: i as u64,
            context_len: q.context_len,
            needle_start: q.needle_start,
            needle_tokens: q.needle_tokens,
            label: q.label.clone(),
            row_no,
            line: row_no as u64 + 1,
        };
        let mut s = Selection::new(line, options, source, &mut warnings);
        s.select(&q.indices, i as u64, options.index_topk as usize, options.compress_ratio, source)?;
        selections.push(s);
    }
    if selections.is_empty() {
        return Err(CaptureError::input(format!("{source}: no query")));
    }
    assign_names(&mut selections, source, "query", &mut warnings);
    Ok(Import { manifest: source.to_string(), options: *options, selections, files: Vec::new(), warnings })
}

/// A whole import: every manifest line's selections, and what was read.
#[derive(Debug, Clone)]
pub struct Import {
    /// The manifest as given.
    pub manifest: String,
    /// The options used.
    pub options: Options,
    /// One per manifest line, in manifest order.
    pub selections: Vec<Selection>,
    /// Each file read: its name as written in the manifest and what it held.
    pub files: Vec<(String, FileInfo)>,
    /// Notes for the user (needles no entry pools).
    pub warnings: Vec<String>,
}

/// The header of `selections.csv`: the selection of each (request, layer), then the facts of
/// the request the import used to find the needle's entries (its exact first token and length,
/// and the geometry assumed), which calibrate, verdict and plan apply to the request's row
/// scenario (docs/capture.md#the-manifest).
pub(crate) const CSV_HEADER: &str =
    "request,context_len,depth,layer,index_topk,selected,needle_start,needle_tokens,compress_ratio,overlap";

/// The first columns of every selections.csv dsa-sim has written (older versions wrote only
/// these): what marks a file as one `import topk` may replace.
pub(crate) const CSV_HEADER_PREFIX: &str = "request,context_len,depth,layer,index_topk,selected";

/// Reads the manifest and every capture it names. Nothing is written; every check happens
/// here, so a caller that writes only on success writes nothing for bad input.
pub fn import(manifest: &Path, options: &Options) -> Result<Import, CaptureError> {
    options.check()?;
    let name = manifest.display().to_string();
    let text = crate::input::read_to_string(manifest)
        .map_err(|e| CaptureError::io(format!("{name}: cannot read: {e}"), &e))?;
    let dir = manifest.parent().unwrap_or(Path::new("."));
    let mut warnings = Vec::new();
    let lines = manifest::parse(&text, &name, dir, &mut warnings)?;
    let c = options.compress_ratio;
    let mut selections: Vec<Selection> =
        lines.into_iter().map(|line| Selection::new(line, options, &name, &mut warnings)).collect();
    assign_names(&mut selections, &name, "row", &mut warnings);

    // Files in order of first mention; each read once.
    let mut by_file: BTreeMap<usize, (String, std::path::PathBuf, read::Wants)> = BTreeMap::new();
    let mut first_of: HashMap<std::path::PathBuf, usize> = HashMap::new();
    for (i, s) in selections.iter().enumerate() {
        let first = *first_of.entry(s.line.path.clone()).or_insert(i);
        by_file
            .entry(first)
            .or_insert_with(|| (s.line.file.clone(), s.line.path.clone(), HashMap::new()))
            .2
            .entry((s.line.request, s.line.row))
            .or_default()
            .push(i);
    }
    let shape = options.shape();
    let k = options.index_topk as usize;
    let mut files = Vec::new();
    for (file, path, wants) in by_file.values() {
        let mut on_row = |idx: &[usize], _request: u64, row: u64, vals: &[i64]| -> Result<(), CaptureError> {
            for &i in idx {
                selections[i].select(vals, row, k, c, &name)?;
            }
            Ok(())
        };
        let info = read::read_file(path, file, shape, wants, &mut on_row)?;
        // Every wanted (request, row) must exist.
        let mut missing: Vec<(&(u64, u64), &Vec<usize>)> =
            wants.iter().filter(|((q, r), _)| info.rows.get(*q as usize).is_none_or(|n| r >= n)).collect();
        missing.sort();
        if let Some(((q, r), idx)) = missing.first() {
            let line = &selections[idx[0]].line;
            let why = match info.rows.get(*q as usize) {
                None => format!(
                    "request {q} does not exist: the file holds {} capture(s) (requests 0..{})",
                    info.rows.len(),
                    info.rows.len()
                ),
                Some(n) => format!("row {r} of request {q} does not exist: it has {n} rows (0..{n})"),
            };
            return Err(CaptureError::input(format!(
                "{file}: {why} (manifest {name} row {}, line {})",
                line.row_no, line.line
            )));
        }
        files.push((file.clone(), info));
    }
    Ok(Import { manifest: name, options: *options, selections, files, warnings })
}

/// Most renamed requests listed in the note about them.
const RENAMES_SHOWN: usize = 5;

/// Gives every selection a request name that selections.csv keeps apart and reads back as
/// written: the label (else `row N`) with control characters as spaces and the ends trimmed (the
/// reader trims them), `row N` when nothing is left, and ` (2)`, ` (3)`, … after a name an
/// earlier line already has (two answer rows of one needle under one label, a label equal to
/// another line's `row N`). A table with one name twice would be refused by the reader (a
/// request's layer twice), so each change is reported in one note. `what` names a line in it.
fn assign_names(selections: &mut [Selection], source: &str, what: &str, warnings: &mut Vec<String>) {
    let mut taken: std::collections::HashSet<String> = std::collections::HashSet::with_capacity(selections.len());
    let mut renamed: Vec<String> = Vec::new();
    for s in selections.iter_mut() {
        let given = s.line.name();
        let clean: String = given.chars().map(|c| if c.is_control() { ' ' } else { c }).collect();
        let clean = clean.trim();
        let base = if clean.is_empty() { format!("row {}", s.line.row_no) } else { clean.to_string() };
        let mut name = base.clone();
        let mut n = 1u64;
        while taken.contains(&name) {
            n += 1;
            name = format!("{base} ({n})");
        }
        if name != given {
            renamed.push(format!(
                "{what} {} `{}` → `{}`",
                s.line.row_no,
                crate::input::echo(&given.escape_debug().to_string()),
                crate::input::echo(&name)
            ));
        }
        taken.insert(name.clone());
        s.name = name;
    }
    if !renamed.is_empty() {
        let more = if renamed.len() > RENAMES_SHOWN {
            format!(", and {} more", renamed.len() - RENAMES_SHOWN)
        } else {
            String::new()
        };
        warnings.push(format!(
            "{source}: {} request name(s) changed so that each request has one name of its own that selections.csv reads back as written (repeated labels numbered, control characters and surrounding spaces removed): {}{more}",
            renamed.len(),
            renamed[..renamed.len().min(RENAMES_SHOWN)].join(", ")
        ));
    }
}

/// Per-layer selection counts, Wilson intervals, per-request fractions and cross-layer
/// agreement of an import.
impl Import {
    /// `selections.csv`: one row per (manifest line, layer).
    pub fn csv(&self) -> String {
        let mut w = csv::WriterBuilder::new().has_headers(false).from_writer(Vec::new());
        let mut out = String::from(CSV_HEADER);
        out.push('\n');
        for s in &self.selections {
            for (layer, &hit) in s.selected.iter().enumerate() {
                let _ = w.write_record([
                    // A name starting with `#` would begin its line and read as a comment: the
                    // reader trims the space again.
                    if s.name.starts_with('#') { format!(" {}", s.name) } else { s.name.clone() },
                    s.line.context_len.to_string(),
                    s.line.depth().to_string(),
                    layer.to_string(),
                    self.options.index_topk.to_string(),
                    u8::from(hit).to_string(),
                    s.line.needle_start.to_string(),
                    s.line.needle_tokens.to_string(),
                    self.options.compress_ratio.to_string(),
                    self.options.overlap.to_string(),
                ]);
            }
        }
        out.push_str(&String::from_utf8_lossy(&w.into_inner().unwrap_or_default()));
        out
    }

    /// [`Import::csv`], read back with the one reader of selection tables
    /// ([`crate::measured::parse_csv`]) and checked to hold every request and layer: the table
    /// an importer writes is one `calibrate --data` takes as written. A table that does not read
    /// back is a failure of the importer, not of its input.
    pub fn checked_csv(&self, out: &str) -> Result<String, CaptureError> {
        let text = self.csv();
        let internal = |m: String| CaptureError {
            kind: ErrorKind::Failure,
            message: format!("internal: {out}: the selection table does not read back: {m}"),
        };
        let d = crate::measured::parse_csv(&text, out).map_err(|e| internal(e.to_string()))?;
        let layers = self.options.layers as usize;
        if d.total_trials() != self.selections.len() as u64
            || d.rows.iter().any(|r| r.layer_counts.as_ref().is_none_or(|c| c.len() != layers + 1))
        {
            return Err(internal(format!(
                "{} requests × {layers} layers written, {} requests read",
                self.selections.len(),
                d.total_trials()
            )));
        }
        Ok(text)
    }

    /// Selections per layer: (selected, trials).
    pub(crate) fn per_layer(&self) -> Vec<(u64, u64)> {
        let mut v = vec![(0u64, 0u64); self.options.layers as usize];
        for s in &self.selections {
            for (l, &hit) in s.selected.iter().enumerate() {
                v[l].0 += u64::from(hit);
                v[l].1 += 1;
            }
        }
        v
    }

    /// Cross-layer agreement: (mean pairwise agreement, Fleiss' kappa), `None` with one layer.
    ///
    /// Each request is rated selected / not by every layer. The **mean pairwise agreement** is,
    /// averaged over requests, the fraction of layer pairs that agree (1: every layer makes the
    /// same call on every request). **Fleiss' kappa** corrects it for the agreement expected by
    /// chance from the overall selection rate p, p² + (1 − p)²: 0 when layers agree no more
    /// than independent layers would, 1 for perfect agreement; `None` (null) when every call is
    /// the same (chance agreement 1: nothing to correct).
    pub fn agreement(&self) -> Option<(f64, Option<f64>)> {
        let n = self.options.layers;
        if n < 2 || self.selections.is_empty() {
            return None;
        }
        let pairs = (n * (n - 1)) as f64;
        let mut p_bar = 0.0;
        let mut total_sel = 0u64;
        for s in &self.selections {
            let a = s.selected.iter().filter(|&&x| x).count() as u64;
            let b = n - a;
            total_sel += a;
            p_bar += (a * a.saturating_sub(1) + b * b.saturating_sub(1)) as f64 / pairs;
        }
        let m = self.selections.len() as f64;
        p_bar /= m;
        let p = total_sel as f64 / (m * n as f64);
        let p_e = p * p + (1.0 - p) * (1.0 - p);
        let kappa = (p_e < 1.0).then(|| (p_bar - p_e) / (1.0 - p_e));
        Some((p_bar, kappa))
    }

    /// Trials and selections per (context_len, layer), in that order.
    pub fn by_context(&self) -> Vec<ContextLayer> {
        let mut by_ctx: BTreeMap<(u64, usize), (u64, u64)> = BTreeMap::new();
        for s in &self.selections {
            for (l, &hit) in s.selected.iter().enumerate() {
                let e = by_ctx.entry((s.line.context_len, l)).or_default();
                e.0 += 1;
                e.1 += u64::from(hit);
            }
        }
        by_ctx
            .iter()
            .map(|(&(context_len, layer), &(trials, selected))| ContextLayer { context_len, layer, trials, selected })
            .collect()
    }

    /// Each layer's selection rate with its Wilson 95% interval.
    pub fn layer_rates(&self) -> Vec<LayerRate> {
        self.per_layer()
            .iter()
            .enumerate()
            .map(|(layer, &(selected, trials))| {
                let (ci_low, ci_high) = crate::stats::wilson(selected, trials, crate::stats::Z95);
                let rate = if trials > 0 { selected as f64 / trials as f64 } else { 0.0 };
                LayerRate { layer, trials, selected, rate, ci_low, ci_high }
            })
            .collect()
    }

    /// Each request's fraction of layers that selected the needle, in manifest order.
    pub fn per_request(&self) -> Vec<RequestFraction> {
        self.selections
            .iter()
            .map(|s| {
                let a = s.selected.iter().filter(|&&x| x).count();
                RequestFraction {
                    request: s.name.clone(),
                    context_len: s.line.context_len,
                    depth: s.line.depth(),
                    layers_selected: a,
                    fraction: a as f64 / s.selected.len().max(1) as f64,
                }
            })
            .collect()
    }
}

/// Trials and selections of one (context_len, layer): [`Import::by_context`].
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct ContextLayer {
    /// The requests' context length.
    pub context_len: u64,
    /// The indexer layer.
    pub layer: usize,
    /// Requests of that length.
    pub trials: u64,
    /// Of them, the ones whose selection pooled the needle.
    pub selected: u64,
}

/// One layer's selection rate: [`Import::layer_rates`].
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct LayerRate {
    /// The indexer layer.
    pub layer: usize,
    /// Requests.
    pub trials: u64,
    /// Requests whose selection pooled the needle.
    pub selected: u64,
    /// selected / trials (0 without trials).
    pub rate: f64,
    /// Wilson 95% interval, low end.
    pub ci_low: f64,
    /// Wilson 95% interval, high end.
    pub ci_high: f64,
}

/// One request's fraction of selecting layers: [`Import::per_request`].
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct RequestFraction {
    /// The request's (unique) name.
    pub request: String,
    /// Its context length.
    pub context_len: u64,
    /// The needle's depth.
    pub depth: f64,
    /// Layers that selected the needle.
    pub layers_selected: usize,
    /// layers_selected / layers.
    pub fraction: f64,
}
