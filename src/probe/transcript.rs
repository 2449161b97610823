//! The transcript: one JSON line per request (seed, cell, token count, answer, hit, timing),
//! appended and flushed as each request completes, so that a killed probe loses at most the
//! requests in flight; `--resume` reads it back.

use super::ProbeError;
use std::io::Write;
use std::path::Path;

/// One request's line.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Record {
    /// The request's id: `c{cell}-t{trial}[-n{concurrency}][-{miss|hit}]`.
    pub id: String,
    /// The cell (index into the run's cells).
    pub cell: usize,
    /// The cell's target length.
    pub target_tokens: u64,
    /// The cell's target depth.
    pub target_depth: f64,
    /// Needle copies.
    pub repeat: u32,
    /// The trial within the cell (its needle is drawn from (seed, trial)).
    pub trial: u64,
    /// The run's seed.
    pub seed: u64,
    /// Requests in flight at once in this request's phase, when `--concurrency` is given.
    pub concurrency: Option<u32>,
    /// `miss` (first send) or `hit` (the same prompt again) with `--prefix-cache-twice`.
    pub prefix_cache: Option<String>,
    /// The needle's key and value.
    pub key: String,
    /// The expected answer.
    pub value: String,
    /// Haystack words in the prompt.
    pub words: usize,
    /// The haystack's first word (the phase of the filler the length search chose).
    #[serde(default)]
    pub skip: usize,
    /// The server's count of the prompt's tokens (the local tokenizer's when the server
    /// reports none).
    pub prompt_tokens: u64,
    /// The local tokenizer's count of the prompt (`--tokenizer`), which positions are counted on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub local_tokens: Option<u64>,
    /// Where the first needle copy starts (tokens).
    pub needle_start: u64,
    /// The needle's length (tokens).
    pub needle_tokens: u64,
    /// needle_start / (prompt_tokens − needle_tokens).
    pub depth: f64,
    /// How the positions were counted: `tokenize` (the server's /tokenize), `tokenizer` (the
    /// offsets of the local tokenizer's tokens; depth on its count) or `estimate` (proportional
    /// to characters within the server's total count).
    pub positions: String,
    /// The answer's text.
    pub answer: String,
    /// RULER's string_match_all: the value occurs in the answer.
    pub hit: bool,
    /// Wall time of the successful attempt (ms).
    pub ms: u64,
    /// Attempts it took.
    pub attempts: u32,
    /// The saved reply with the indexer's top-k (relative to the output folder), if captured.
    pub capture: Option<String>,
    /// Set when the reply is not counted: `length` (the server counted a length outside ±1% of
    /// the cell's; the prompt was rebuilt and sent again).
    pub discarded: Option<String>,
    /// Seconds since the Unix epoch when the reply came.
    pub at: u64,
}

impl Record {
    /// Whether the record counts in the table.
    pub(crate) fn counts(&self) -> bool {
        self.discarded.is_none()
    }
}

/// The transcript's file name in the output folder.
pub(crate) const FILE: &str = "transcript.jsonl";

/// Reads a transcript (`--resume`): every complete line; a last line cut off by a kill is
/// dropped and the file truncated to the complete lines, so that appending continues cleanly.
pub fn read(path: &Path) -> Result<Vec<Record>, ProbeError> {
    read_lines(path, true)
}

/// Reads a transcript's complete lines, changing nothing (a finished run's).
pub(crate) fn read_only(path: &Path) -> Result<Vec<Record>, ProbeError> {
    read_lines(path, false)
}

fn read_lines(path: &Path, truncate: bool) -> Result<Vec<Record>, ProbeError> {
    let bytes = match std::fs::read(path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(ProbeError::failure(format!("{}: cannot read: {e}", path.display()))),
    };
    let complete = bytes.iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1);
    let mut out = Vec::new();
    for (i, line) in bytes[..complete].split(|&b| b == b'\n').enumerate() {
        if line.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        let r: Record = serde_json::from_slice(line).map_err(|e| {
            ProbeError::input(format!(
                "{}: line {}: not a probe transcript line ({e}): run without --resume",
                path.display(),
                i + 1
            ))
        })?;
        out.push(r);
    }
    if truncate && complete < bytes.len() {
        let f = std::fs::OpenOptions::new()
            .write(true)
            .open(path)
            .map_err(|e| ProbeError::failure(format!("{}: {e}", path.display())))?;
        f.set_len(complete as u64).map_err(|e| ProbeError::failure(format!("{}: {e}", path.display())))?;
    }
    Ok(out)
}

/// Appends records, one flushed line each.
pub struct Writer {
    file: std::fs::File,
    path: std::path::PathBuf,
}

impl Writer {
    /// Opens `path` for appending (created if absent).
    pub fn open(path: &Path) -> Result<Writer, ProbeError> {
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .map_err(|e| ProbeError::failure(format!("cannot write {}: {e}", path.display())))?;
        Ok(Writer { file, path: path.to_path_buf() })
    }

    /// Appends one line and flushes it to the file.
    pub fn append(&mut self, r: &Record) -> Result<(), ProbeError> {
        let mut line = serde_json::to_vec(r).map_err(|e| ProbeError::failure(e.to_string()))?;
        line.push(b'\n');
        self.file
            .write_all(&line)
            .and_then(|_| self.file.flush())
            .map_err(|e| ProbeError::failure(format!("cannot write {}: {e}", self.path.display())))
    }
}
