//! Needle-in-a-haystack harness results (`dsa-sim import niah`) as a measured table
//! ([`crate::measured`]): trials and hits per (context_len, depth, needle).
//!
//! Formats, each recognised by its content (the file's name only supplies what the format keeps
//! there):
//!
//! - **gkamradt** (LLMTest_NeedleInAHaystack): one JSON object per trial,
//!   `…_len_{L}_depth_{D}_results.json`, with `context_length`, `depth_percent` (0–100) and
//!   `score` (1–10, the evaluator's rubric); a hit when score ≥ `--min-score`.
//! - **RULER** (NVIDIA): `pred/{task}.jsonl`, one sample per line with `pred`, `outputs`,
//!   `input` (absent in some versions), `length`; a hit when every `outputs` string occurs in `pred` (case-insensitive,
//!   RULER's string_match_all); context_len is the `{seq}` folder of
//!   `{root}/{model}/{bench}/{seq}/pred/` when it is a number, else the sample's `length`.
//! - **lm-eval** (lm-evaluation-harness `--log_samples` of its ruler tasks): one sample per line
//!   with `doc` (`input`, `outputs`, `max_length`) and `filtered_resps`; the same hit rule.
//! - **NeedleBench** (OpenCompass): a predictions file `{dataset_abbr}.json`, an object of
//!   samples with `prediction` and `gold`, whose dataset name carries `Length{L}Depth{D}`; a hit
//!   when `gold` occurs in `prediction` (case-insensitive).
//!
//! Depth is in [0, 1] (percent / 100). RULER and lm-eval samples have no depth field: it is
//! recovered as the byte offset of the first expected answer in `input` over the input's
//! length, rounded to tenths (the needle's position in the prompt, template included), and left
//! empty when the answer does not occur in the input. The `needle` column groups trials by what
//! was hidden: the task (RULER, lm-eval), the needle text (gkamradt, clipped) or the dataset
//! (NeedleBench).
//!
//! Checked against: gkamradt `needlehaystack/llm_needle_haystack_tester.py` (the results dict and
//! `{model}_len_{L}_depth_{int(D*100)}_results.json`) and `evaluators/openai.py` (the rubric:
//! 10 "completely accurate", 7 "aligns … minor omissions", hence the default `--min-score` 10);
//! RULER's `scripts/pred/call_api.py` (the prediction record); lm-evaluation-harness
//! `lm_eval/tasks/ruler/common_utils.py` (`process_results`, `string_match_all`,
//! `doc["max_length"]`); OpenCompass `configs/datasets/needlebench` (the `abbr` names).
//!
//! Reading is bounded: JSON files at 64 MiB (`crate::input::read_to_string`), JSONL line by
//! line with each line at most 64 MiB, folders walked without following symbolic links, at
//! most `MAX_FILES` files.

use crate::error::{Classify, ErrorKind};
use std::collections::BTreeMap;
use std::fmt;
use std::io::BufRead;
use std::path::{Path, PathBuf};

/// Most files looked at under the given paths.
pub(crate) const MAX_FILES: usize = 1_000_000;
/// Longest JSONL line read (one sample with a 1M-token prompt is a few MB).
pub(crate) const MAX_LINE: usize = 64 << 20;
/// Default `--min-score` for gkamradt results: 10, the rubric's "completely accurate" answer.
pub const DEFAULT_MIN_SCORE: f64 = 10.0;

/// A harness result that cannot be imported (bad input), or a read that failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HarnessError {
    kind: ErrorKind,
    /// One line naming the file, the line or sample, and the problem.
    pub(crate) message: String,
}

impl HarnessError {
    fn input(message: impl Into<String>) -> HarnessError {
        HarnessError { kind: ErrorKind::Input, message: message.into() }
    }
    fn io(message: impl Into<String>, e: &std::io::Error) -> HarnessError {
        HarnessError { kind: crate::error::io_kind(e), message: message.into() }
    }
}

impl fmt::Display for HarnessError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for HarnessError {}

impl Classify for HarnessError {
    fn kind(&self) -> ErrorKind {
        self.kind
    }
}

/// A harness format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Format {
    /// gkamradt LLMTest_NeedleInAHaystack.
    Gkamradt,
    /// NVIDIA RULER predictions.
    Ruler,
    /// lm-evaluation-harness sample logs.
    LmEval,
    /// OpenCompass NeedleBench predictions.
    NeedleBench,
}

impl Format {
    /// The name in outputs.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Format::Gkamradt => "gkamradt",
            Format::Ruler => "ruler",
            Format::LmEval => "lm-eval",
            Format::NeedleBench => "needlebench",
        }
    }
}

/// One trial.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Trial {
    /// Context length in tokens.
    pub(crate) context_len: u64,
    /// Depth in [0, 1], if known.
    pub(crate) depth: Option<f64>,
    /// What was hidden (task, needle text, dataset).
    pub(crate) needle: String,
    /// Whether the answer was retrieved.
    pub(crate) hit: bool,
}

/// Options of an import.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Options {
    /// gkamradt: a score ≥ this is a hit.
    pub min_score: f64,
    /// The `index_topk` column of the table (the deployment's k).
    pub index_topk: u64,
}

/// A finished import: the aggregated cells and where they came from.
#[derive(Debug, Clone)]
pub struct Import {
    /// Formats found, sorted.
    pub formats: Vec<Format>,
    /// The files read, per format.
    pub files: BTreeMap<Format, Vec<PathBuf>>,
    /// (context_len, depth bits, needle) → (trials, hits), in that order.
    pub cells: Vec<Cell>,
    /// Options used.
    pub options: Options,
    /// The paths as given.
    pub paths: Vec<String>,
    /// Files that matched no format (skipped).
    pub skipped: usize,
    /// Notes for the user: the files skipped because they could not be read as text (not UTF-8,
    /// larger than the 64 MiB bound), with the reason.
    pub notes: Vec<String>,
}

/// Most skipped files named in the note about them.
const SKIPS_SHOWN: usize = 5;

/// One aggregated cell.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Cell {
    /// Context length.
    pub context_len: u64,
    /// Depth in [0, 1], or unknown.
    pub depth: Option<f64>,
    /// The needle id.
    pub needle: String,
    /// Trials.
    pub trials: u64,
    /// Hits.
    pub hits: u64,
}

/// Reads every path (files, or folders walked recursively) and aggregates the trials.
pub fn import(paths: &[PathBuf], options: &Options) -> Result<Import, HarnessError> {
    if !(options.min_score.is_finite() && (0.0..=10.0).contains(&options.min_score)) {
        return Err(HarnessError::input(format!(
            "--min-score {}: allowed 0..=10 (gkamradt scores are 1–10)",
            options.min_score
        )));
    }
    if options.index_topk == 0 {
        return Err(HarnessError::input("--index-topk 0: allowed ≥ 1"));
    }
    if paths.is_empty() {
        return Err(HarnessError::input("import niah: give at least one result folder or file"));
    }
    let mut trials: Vec<Trial> = Vec::new();
    let mut files: BTreeMap<Format, Vec<PathBuf>> = BTreeMap::new();
    let mut skipped = 0;
    let mut unreadable: Vec<String> = Vec::new();
    for root in paths {
        let list = walk(root)?;
        let mut found = 0;
        let unreadable_before = unreadable.len();
        for f in &list {
            if let Some(fmt) = read_file(f, options, &mut trials, &mut unreadable)? {
                files.entry(fmt).or_default().push(f.clone());
                found += 1;
            } else {
                skipped += 1;
            }
        }
        if found == 0 {
            // A file skipped for a bound (a line or a whole file too long) or for not being text
            // is named with that reason first: it is the likelier cause than a wrong format.
            let why = &unreadable[unreadable_before..];
            let unread = if why.is_empty() {
                String::new()
            } else {
                let shown: Vec<&str> = why.iter().take(SKIPS_SHOWN).map(String::as_str).collect();
                let more = if why.len() > SKIPS_SHOWN {
                    format!(" and {} more", why.len() - SKIPS_SHOWN)
                } else {
                    String::new()
                };
                format!(", and {}{more} could not be read", shown.join(", "))
            };
            return Err(HarnessError::input(format!(
                "{}: no recognisable harness result among {} file(s){unread}; expected gkamradt *_results.json, RULER pred/*.jsonl, lm-eval samples_*.jsonl or NeedleBench predictions",
                root.display(),
                list.len()
            )));
        }
    }
    if trials.is_empty() {
        return Err(HarnessError::input("import niah: the files hold no trials"));
    }
    let mut agg: BTreeMap<(u64, Option<u64>, String), (u64, u64)> = BTreeMap::new();
    for t in &trials {
        let e = agg.entry((t.context_len, t.depth.map(f64::to_bits), t.needle.clone())).or_default();
        e.0 += 1;
        e.1 += u64::from(t.hit);
    }
    let cells = agg
        .into_iter()
        .map(|((context_len, d, needle), (trials, hits))| Cell {
            context_len,
            depth: d.map(f64::from_bits),
            needle,
            trials,
            hits,
        })
        .collect();
    let mut notes = Vec::new();
    if !unreadable.is_empty() {
        let more = if unreadable.len() > SKIPS_SHOWN {
            format!(", and {} more", unreadable.len() - SKIPS_SHOWN)
        } else {
            String::new()
        };
        notes.push(format!(
            "{} file(s) skipped as no harness result (not readable as one): {}{more}",
            unreadable.len(),
            unreadable[..unreadable.len().min(SKIPS_SHOWN)].join("; ")
        ));
    }
    Ok(Import {
        formats: files.keys().copied().collect(),
        files,
        cells,
        options: *options,
        paths: paths.iter().map(|p| p.display().to_string()).collect(),
        skipped,
        notes,
    })
}

/// The regular files under `root` (itself if a file), sorted, symbolic links not followed.
fn walk(root: &Path) -> Result<Vec<PathBuf>, HarnessError> {
    let m = std::fs::metadata(root).map_err(|e| HarnessError::io(format!("{}: {e}", root.display()), &e))?;
    if m.is_file() {
        return Ok(vec![root.to_path_buf()]);
    }
    if !m.is_dir() {
        return Err(HarnessError::input(format!("{}: not a file or folder", root.display())));
    }
    let mut out = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(d) = stack.pop() {
        let rd = std::fs::read_dir(&d).map_err(|e| HarnessError::io(format!("{}: {e}", d.display()), &e))?;
        for e in rd.flatten() {
            let Ok(t) = e.file_type() else { continue };
            if t.is_dir() {
                stack.push(e.path());
            } else if t.is_file() {
                out.push(e.path());
                if out.len() > MAX_FILES {
                    return Err(HarnessError::input(format!(
                        "{}: more than {MAX_FILES} files: give the result folders themselves",
                        root.display()
                    )));
                }
            }
        }
    }
    out.sort();
    Ok(out)
}

/// Reads one file if its content is a known format, appending its trials. A file that cannot be
/// read as text before its format is known (not UTF-8, a first line or a whole JSON file past
/// the 64 MiB bound: a binary file or an unrelated dump beside the results) is no harness
/// result: skipped, its reason added to `unreadable`.
fn read_file(
    path: &Path,
    o: &Options,
    trials: &mut Vec<Trial>,
    unreadable: &mut Vec<String>,
) -> Result<Option<Format>, HarnessError> {
    let name = path.display().to_string();
    let f = std::fs::File::open(path).map_err(|e| HarnessError::io(format!("{name}: cannot open: {e}"), &e))?;
    let mut r = std::io::BufReader::with_capacity(1 << 16, f);
    let head = r.fill_buf().map_err(|e| HarnessError::io(format!("{name}: cannot read: {e}"), &e))?;
    let first = head.iter().find(|b| !b.is_ascii_whitespace()).copied();
    if first != Some(b'{') {
        return Ok(None);
    }
    // A JSONL file has a complete object on its first line; a JSON file is one object.
    let mut first_line = Vec::new();
    match read_line(&mut r, &mut first_line, &name, 1) {
        Ok(_) => {}
        Err(_) if first_line.len() > MAX_LINE => {
            unreadable.push(format!("{name} (its first line is longer than the 64 MiB line bound)"));
            return Ok(None);
        }
        Err(e) => return Err(e),
    }
    let v: Option<serde_json::Value> = serde_json::from_slice(&first_line).ok();
    match v.as_ref().and_then(jsonl_kind) {
        Some(kind) => {
            parse_jsonl(path, &name, kind, v.unwrap_or_default(), r, trials)?;
            Ok(Some(kind))
        }
        None => {
            drop(r);
            let text = match crate::input::read_to_string(path) {
                Ok(t) => t,
                Err(e) if e.kind() == std::io::ErrorKind::InvalidData => {
                    let why = if e.to_string().contains("UTF-8") {
                        "not UTF-8 text"
                    } else {
                        "larger than the 64 MiB file bound"
                    };
                    unreadable.push(format!("{name} ({why})"));
                    return Ok(None);
                }
                Err(e) => return Err(HarnessError::io(format!("{name}: cannot read: {e}"), &e)),
            };
            let Ok(v) = serde_json::from_str::<serde_json::Value>(&text) else { return Ok(None) };
            parse_json(path, &name, &v, o, trials)
        }
    }
}

/// Reads one line (without its end) into `buf`, bounded by [`MAX_LINE`]. Returns false at the end.
fn read_line(r: &mut impl BufRead, buf: &mut Vec<u8>, name: &str, line: u64) -> Result<bool, HarnessError> {
    buf.clear();
    let n = std::io::Read::take(r, MAX_LINE as u64 + 1)
        .read_until(b'\n', buf)
        .map_err(|e| HarnessError::io(format!("{name}: line {line}: cannot read: {e}"), &e))?;
    if buf.len() > MAX_LINE {
        return Err(HarnessError::input(format!("{name}: line {line} is longer than the 64 MiB line bound")));
    }
    while buf.last().is_some_and(|b| *b == b'\n' || *b == b'\r') {
        buf.pop();
    }
    Ok(n > 0)
}

/// The JSONL format a first line belongs to, if any.
fn jsonl_kind(v: &serde_json::Value) -> Option<Format> {
    let o = v.as_object()?;
    // RULER's call_api.py writes index, pred, input, outputs, others, truncation, length; some
    // versions leave `input` out (then the depth is unknown).
    if o.contains_key("pred")
        && o.contains_key("outputs")
        && (o.contains_key("input") || o.contains_key("index") || o.contains_key("length"))
    {
        return Some(Format::Ruler);
    }
    if o.contains_key("doc_id")
        && o.contains_key("doc")
        && (o.contains_key("filtered_resps") || o.contains_key("resps"))
    {
        return Some(Format::LmEval);
    }
    None
}

fn parse_jsonl(
    path: &Path,
    name: &str,
    kind: Format,
    first: serde_json::Value,
    mut r: impl BufRead,
    trials: &mut Vec<Trial>,
) -> Result<(), HarnessError> {
    // RULER: context_len from the {seq} folder of {root}/{model}/{bench}/{seq}/pred/{task}.jsonl.
    let seq: Option<u64> = path
        .parent()
        .filter(|p| p.file_name().is_some_and(|n| n == "pred"))
        .and_then(|p| p.parent())
        .and_then(|p| p.file_name())
        .and_then(|n| n.to_str())
        .and_then(|n| n.parse().ok());
    let stem = path.file_stem().and_then(|s| s.to_str()).unwrap_or("");
    // lm-eval names its logs samples_{task}_{timestamp}.jsonl: the task is the needle id.
    let task = match stem.strip_prefix("samples_").and_then(|t| t.rsplit_once('_')) {
        Some((t, ts)) if kind == Format::LmEval && ts.starts_with(|c: char| c.is_ascii_digit()) => t.to_string(),
        _ => stem.to_string(),
    };
    let mut line_no = 1u64;
    let mut v = first;
    let mut buf = Vec::new();
    loop {
        let at = |m: String| HarnessError::input(format!("{name}: line {line_no}: {m}"));
        let t = match kind {
            Format::Ruler => {
                let pred = str_field(&v, "pred").ok_or_else(|| at("no string `pred`".into()))?;
                let outputs = strings(&v, "outputs").ok_or_else(|| at("`outputs` is not a list of strings".into()))?;
                let input = str_field(&v, "input").unwrap_or("");
                let context_len =
                    match seq {
                        Some(s) => s,
                        // RULER writes length −1 when the dataset had none.
                        None => v.get("length").and_then(serde_json::Value::as_u64).filter(|&l| l >= 1).ok_or_else(
                            || at("no positive integer `length` (and the folder is not {seq}/pred)".into()),
                        )?,
                    };
                Trial {
                    context_len,
                    depth: locate(input, &outputs),
                    needle: task.clone(),
                    hit: string_match_all(pred, &outputs),
                }
            }
            _ => {
                let doc = v.get("doc").ok_or_else(|| at("no `doc`".into()))?;
                let outputs =
                    strings(doc, "outputs").ok_or_else(|| at("`doc.outputs` is not a list of strings".into()))?;
                let context_len = doc
                    .get("max_length")
                    .and_then(serde_json::Value::as_u64)
                    .ok_or_else(|| at("no integer `doc.max_length`".into()))?;
                let resp = v
                    .get("filtered_resps")
                    .or_else(|| v.get("resps"))
                    .ok_or_else(|| at("no `filtered_resps`".into()))?;
                let pred = first_string(resp).ok_or_else(|| at("`filtered_resps` holds no string".into()))?;
                let input = str_field(doc, "input").unwrap_or("");
                Trial {
                    context_len,
                    depth: locate(input, &outputs),
                    needle: task.clone(),
                    hit: string_match_all(pred, &outputs),
                }
            }
        };
        if t.context_len == 0 {
            return Err(at("context length 0".into()));
        }
        trials.push(t);
        // The next non-blank line.
        loop {
            line_no += 1;
            if !read_line(&mut r, &mut buf, name, line_no)? {
                return Ok(());
            }
            if !buf.iter().all(u8::is_ascii_whitespace) {
                break;
            }
        }
        v = serde_json::from_slice(&buf)
            .map_err(|e| HarnessError::input(format!("{name}: line {line_no}: not JSON: {e}")))?;
    }
}

fn parse_json(
    path: &Path,
    name: &str,
    v: &serde_json::Value,
    o: &Options,
    trials: &mut Vec<Trial>,
) -> Result<Option<Format>, HarnessError> {
    let Some(obj) = v.as_object() else { return Ok(None) };
    if obj.contains_key("context_length") && obj.contains_key("depth_percent") && obj.contains_key("score") {
        let at = |m: &str| HarnessError::input(format!("{name}: {m}"));
        let context_len =
            count(&obj["context_length"]).ok_or_else(|| at("`context_length` is not a positive integer"))?;
        let pct = obj["depth_percent"]
            .as_f64()
            .filter(|d| (0.0..=100.0).contains(d))
            .ok_or_else(|| at("`depth_percent` is not a number in 0..=100"))?;
        let score = obj["score"].as_f64().ok_or_else(|| at("`score` is not a number (a failed evaluation?)"))?;
        // The evaluator's rubric scores 1 to 10: anything else is not a score it gave.
        if !(1.0..=10.0).contains(&score) {
            return Err(at(&format!("`score` {score}: outside the evaluator's scale 1..=10")));
        }
        let needle = obj.get("needle").and_then(|n| n.as_str()).map(clip_needle).unwrap_or_default();
        trials.push(Trial { context_len, depth: Some(pct / 100.0), needle, hit: score >= o.min_score });
        return Ok(Some(Format::Gkamradt));
    }
    // NeedleBench predictions: {"0": {"prediction", "gold", …}, …}, dataset name in the file name.
    let samples: Vec<&serde_json::Map<String, serde_json::Value>> =
        obj.values().filter_map(|s| s.as_object()).collect();
    if !samples.is_empty()
        && samples.len() == obj.len()
        && samples.iter().all(|s| s.contains_key("prediction") && s.contains_key("gold"))
    {
        let stem = path.file_stem().and_then(|s| s.to_str()).unwrap_or("");
        // The dataset abbreviation carries the cell (opencompass/configs/datasets/needlebench:
        // `Length{L}Depth{D}_origin_en_…`, `…_{n}needle_en_…`); the parallel datasets
        // (`Length{L}_parallel_…`) hide several needles at several depths at once, not one
        // cell: skipped.
        let Some((l, d)) = length_depth(stem) else { return Ok(None) };
        if l == 0 || d > 100 {
            return Err(HarnessError::input(format!("{name}: Length{l}Depth{d}: allowed length ≥ 1, depth 0..=100")));
        }
        for (key, s) in obj {
            let pred = s.get("prediction").and_then(|p| p.as_str()).unwrap_or("");
            let gold: Vec<String> = match s.get("gold") {
                Some(serde_json::Value::String(g)) => vec![g.clone()],
                Some(serde_json::Value::Array(a)) => a.iter().filter_map(|x| x.as_str().map(str::to_string)).collect(),
                _ => {
                    return Err(HarnessError::input(format!(
                        "{name}: sample {}: `gold` is not a string",
                        crate::input::echo(key)
                    )))
                }
            };
            let gold: Vec<&str> = gold.iter().map(String::as_str).collect();
            trials.push(Trial {
                context_len: l,
                depth: Some(d as f64 / 100.0),
                needle: stem.to_string(),
                hit: string_match_all(pred, &gold),
            });
        }
        return Ok(Some(Format::NeedleBench));
    }
    Ok(None)
}

/// `Length{L}Depth{D}` in a dataset name.
fn length_depth(s: &str) -> Option<(u64, u64)> {
    let i = s.find("Length")?;
    let rest = &s[i + 6..];
    let l: String = rest.chars().take_while(char::is_ascii_digit).collect();
    let rest = rest[l.len()..].strip_prefix("Depth")?;
    let d: String = rest.chars().take_while(char::is_ascii_digit).collect();
    Some((l.parse().ok()?, d.parse().ok()?))
}

fn count(v: &serde_json::Value) -> Option<u64> {
    v.as_u64()
        .or_else(|| v.as_f64().filter(|x| x.fract() == 0.0 && *x >= 1.0 && *x < 1.8e19).map(|x| x as u64))
        .filter(|&x| x >= 1)
}

fn str_field<'a>(v: &'a serde_json::Value, k: &str) -> Option<&'a str> {
    v.get(k)?.as_str()
}

fn strings<'a>(v: &'a serde_json::Value, k: &str) -> Option<Vec<&'a str>> {
    match v.get(k)? {
        serde_json::Value::String(s) => Some(vec![s.as_str()]),
        serde_json::Value::Array(a) => a.iter().map(|x| x.as_str()).collect(),
        _ => None,
    }
}

fn first_string(v: &serde_json::Value) -> Option<&str> {
    match v {
        serde_json::Value::String(s) => Some(s),
        serde_json::Value::Array(a) => a.first().and_then(first_string),
        _ => None,
    }
}

/// RULER's string_match_all for one sample: every expected string occurs in the prediction,
/// case-insensitively (and there is at least one). `dsa-sim probe` scores its answers with it.
pub fn string_match_all(pred: &str, outputs: &[&str]) -> bool {
    let p = pred.to_lowercase();
    !outputs.is_empty() && outputs.iter().all(|o| p.contains(&o.to_lowercase()))
}

/// Depth of the first expected answer in the prompt: its byte offset over the prompt's length,
/// rounded to tenths; `None` when absent.
fn locate(input: &str, outputs: &[&str]) -> Option<f64> {
    let o = outputs.first().filter(|o| !o.is_empty())?;
    let at = input.find(o)?;
    Some((at as f64 / input.len() as f64 * 10.0).round() / 10.0)
}

/// A needle's text as an id: one line, at most 60 characters.
fn clip_needle(s: &str) -> String {
    let one: String = s.split_whitespace().collect::<Vec<_>>().join(" ");
    match one.char_indices().nth(60) {
        Some((i, _)) => format!("{}…", &one[..i]),
        None => one,
    }
}

/// The header of the measured table (the `needle` column is accepted by the reader).
pub(crate) const CSV_HEADER: &str = "context_len,index_topk,depth,needle,trials,hits";

impl Import {
    /// The format(s) as one name (`a+b` when several).
    pub(crate) fn format_name(&self) -> String {
        self.formats.iter().map(|f| f.name()).collect::<Vec<_>>().join("+")
    }

    /// `Import::csv`, read back with the one reader ([`crate::measured::parse_csv`]) and
    /// checked to hold every cell's trials and hits: `calibrate --data` takes the table as
    /// written. A table that does not read back is a failure of the importer.
    pub fn checked_csv(&self, out: &str) -> Result<String, HarnessError> {
        let text = self.csv();
        let internal = |m: String| HarnessError {
            kind: ErrorKind::Failure,
            message: format!("internal: {out}: the imported table does not read back: {m}"),
        };
        let d = crate::measured::parse_csv(&text, out).map_err(|e| internal(e.to_string()))?;
        let (t, h): (u64, u64) = self.cells.iter().fold((0, 0), |(t, h), c| (t + c.trials, h + c.hits));
        let read_hits: u64 = d.rows.iter().map(|r| r.hits).sum();
        if d.rows.len() != self.cells.len() || d.total_trials() != t || read_hits != h {
            return Err(internal(format!(
                "{} cells, {t} trials, {h} hits written; {} rows, {} trials, {read_hits} hits read",
                self.cells.len(),
                d.rows.len(),
                d.total_trials()
            )));
        }
        Ok(text)
    }

    /// The measured table: a `# provenance:` header naming the format and the paths, then one
    /// row per cell.
    pub(crate) fn csv(&self) -> String {
        let mut out = format!(
            "# provenance: dsa-sim import niah, {} results from {} ({} file(s){}); index_topk {} as given to the import{}\n",
            self.format_name(),
            self.paths.iter().map(|p| p.replace(['\n', '\r'], " ")).collect::<Vec<_>>().join(", "),
            self.files.values().map(Vec::len).sum::<usize>(),
            if self.skipped > 0 { format!(", {} other file(s) skipped", self.skipped) } else { String::new() },
            self.options.index_topk,
            if self.formats.contains(&Format::Gkamradt) { format!("; gkamradt hit = score >= {}", self.options.min_score) } else { String::new() },
        );
        out.push_str(CSV_HEADER);
        out.push('\n');
        let mut w = csv::WriterBuilder::new().has_headers(false).from_writer(Vec::new());
        for c in &self.cells {
            let _ = w.write_record([
                c.context_len.to_string(),
                self.options.index_topk.to_string(),
                c.depth.map(|d| d.to_string()).unwrap_or_default(),
                // A needle starting with `#` would read as a comment line: quote-proof it.
                if c.needle.starts_with('#') { format!(" {}", c.needle) } else { c.needle.clone() },
                c.trials.to_string(),
                c.hits.to_string(),
            ]);
        }
        out.push_str(&String::from_utf8_lossy(&w.into_inner().unwrap_or_default()));
        out
    }

    /// Trials and hits per (context_len, depth), summed over needles, in that order.
    pub fn by_cell(&self) -> Vec<CellTotal> {
        let mut by: BTreeMap<(u64, Option<u64>), (u64, u64)> = BTreeMap::new();
        for c in &self.cells {
            let e = by.entry((c.context_len, c.depth.map(f64::to_bits))).or_default();
            e.0 += c.trials;
            e.1 += c.hits;
        }
        by.iter()
            .map(|(&(context_len, d), &(trials, hits))| CellTotal {
                context_len,
                depth: d.map(f64::from_bits),
                trials,
                hits,
            })
            .collect()
    }
}

/// One (context_len, depth) summed over needles: [`Import::by_cell`].
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct CellTotal {
    /// Context length.
    pub context_len: u64,
    /// Depth, if the results have one.
    pub depth: Option<f64>,
    /// Trials.
    pub trials: u64,
    /// Hits.
    pub hits: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn helpers() {
        assert_eq!(length_depth("Length4000Depth50_origin_en_4k"), Some((4000, 50)));
        assert_eq!(length_depth("needlebench_x"), None);
        assert!(
            string_match_all("The Number is 123 and 456", &["123", "456"])
                && !string_match_all("123", &["123", "9"])
                && !string_match_all("x", &[])
        );
        assert_eq!(locate("aaaaaaaaa 42", &["42"]), Some(0.8));
        assert_eq!(locate("abc", &["42"]), None);
        assert_eq!(clip_needle("a\nb  c"), "a b c");
    }
}
