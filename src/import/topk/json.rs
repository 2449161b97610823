//! A streaming scanner for server replies (SGLang `/generate`, vLLM completions) that finds every
//! `"indexer_topk": "…"` string and hands its characters to the caller as a [`Read`], without
//! ever holding the string.
//!
//! Why purpose-written: one reply to a 128K-token prompt carries a base64 string of several
//! gigabytes (rows × layers × index_topk × 4 bytes, × 4/3). serde_json (also its `StreamDeserializer`)
//! materialises every string value it deserialises, so it cannot stream a single huge string;
//! this scanner keeps only the nesting stack (at most [`MAX_DEPTH`] levels) and the current key
//! (at most `MAX_KEY` bytes), so memory is bounded whatever the reply's size. It checks the
//! structure (brackets, strings, colons, commas, no control characters in strings) and skips
//! scalars (numbers, `true`, `false`, `null`) by their characters; it is not a full validator,
//! and does not need to be: the capture strings are checked by the base64 decoder and the shape.
//!
//! A file may hold one reply, a JSON array of replies, or several replies one after another
//! (JSONL): every top-level value is scanned in turn.

use std::io::{self, BufRead, Read};

/// Deepest nesting accepted (replies nest 3 or 4 levels).
pub(crate) const MAX_DEPTH: usize = 256;
/// Longest key remembered; a longer key never matches (`indexer_topk` is 12 bytes).
const MAX_KEY: usize = 64;

/// The key whose string values are captures.
pub(crate) const CAPTURE_KEY: &[u8] = b"indexer_topk";

/// Where a capture string sits in its reply, which tells the layout of its bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Origin {
    /// Inside an object under a `meta_info` key: SGLang (raw little-endian int32).
    MetaInfo,
    /// Inside an array under a `choices` key: vLLM (the bytes of a `.npy` file).
    Choices,
    /// Elsewhere: decided by the decoded bytes (`.npy` magic or raw).
    Unknown,
}

/// A structural error of the JSON text, at a byte offset.
#[derive(Debug)]
pub(crate) struct ScanError {
    /// Byte offset in the file.
    pub(crate) offset: u64,
    /// What is wrong.
    pub(crate) message: String,
    /// The underlying I/O error when reading failed (not a JSON problem).
    pub(crate) io: Option<io::Error>,
}

impl ScanError {
    fn at(offset: u64, message: impl Into<String>) -> ScanError {
        ScanError { offset, message: message.into(), io: None }
    }
}

enum Frame {
    /// In an object; the key of the value being read (None until read), and whether this
    /// object sits under a `meta_info` key.
    Object { key: Option<Vec<u8>>, meta: bool },
    /// In an array; whether it sits under a `choices` key.
    Array { choices: bool },
}

/// The scanner over a buffered reader.
pub(crate) struct Scanner<R: BufRead> {
    r: R,
    offset: u64,
}

/// The characters of one JSON string, up to its closing quote, as a byte stream. `\/` is read
/// as `/` (some serialisers escape slashes; base64 uses them); any other escape, or a control
/// character, is an error (`InvalidData`), since base64 has none.
pub(crate) struct StringChars<'a, R: BufRead> {
    s: &'a mut Scanner<R>,
    done: bool,
    start: u64,
}

impl<R: BufRead> Read for StringChars<'_, R> {
    fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
        if self.done || out.is_empty() {
            return Ok(0);
        }
        let mut n = 0;
        while n < out.len() {
            let buf = self.s.r.fill_buf()?;
            if buf.is_empty() {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    format!(
                        "the string starting at byte {} is not closed (the file ends inside it: truncated?)",
                        self.start
                    ),
                ));
            }
            let avail = &buf[..buf.len().min(out.len() - n)];
            match memchr::memchr2(b'"', b'\\', avail) {
                None => {
                    let m = avail.len();
                    if let Some(i) = avail.iter().position(|&b| b < 0x20) {
                        return Err(self.control(i));
                    }
                    out[n..n + m].copy_from_slice(avail);
                    self.s.bump(m);
                    n += m;
                }
                Some(i) => {
                    if let Some(j) = avail[..i].iter().position(|&b| b < 0x20) {
                        return Err(self.control(j));
                    }
                    out[n..n + i].copy_from_slice(&avail[..i]);
                    let quote = avail[i] == b'"';
                    self.s.bump(i + 1);
                    n += i;
                    if quote {
                        self.done = true;
                        return Ok(n);
                    }
                    match self.s.peek()? {
                        Some(b'/') => {
                            self.s.bump(1);
                            out[n] = b'/';
                            n += 1;
                        }
                        other => {
                            let what = other.map_or("the end of the file".to_string(), |b| {
                                format!("`\\{}`", char::from(b).escape_default())
                            });
                            return Err(io::Error::new(
                                io::ErrorKind::InvalidData,
                                format!(
                                    "escape {what} at byte {} inside the indexer_topk string (base64 has no escapes)",
                                    self.s.offset - 1
                                ),
                            ));
                        }
                    }
                }
            }
        }
        Ok(n)
    }
}

impl<R: BufRead> StringChars<'_, R> {
    fn control(&self, i: usize) -> io::Error {
        io::Error::new(
            io::ErrorKind::InvalidData,
            format!(
                "control character at byte {} inside the indexer_topk string (not allowed in JSON)",
                self.s.offset + i as u64
            ),
        )
    }

    /// Whether the closing quote has been read.
    pub(crate) fn finished(&self) -> bool {
        self.done
    }
}

impl<R: BufRead> Scanner<R> {
    /// A scanner at the start of `r`.
    pub(crate) fn new(r: R) -> Scanner<R> {
        Scanner { r, offset: 0 }
    }

    fn bump(&mut self, n: usize) {
        self.r.consume(n);
        self.offset += n as u64;
    }

    fn peek(&mut self) -> io::Result<Option<u8>> {
        Ok(self.r.fill_buf()?.first().copied())
    }

    fn io_err(&self, e: io::Error) -> ScanError {
        ScanError { offset: self.offset, message: e.to_string(), io: Some(e) }
    }

    fn peek_or(&mut self) -> Result<Option<u8>, ScanError> {
        self.peek().map_err(|e| self.io_err(e))
    }

    /// The next byte after whitespace, not consumed.
    fn next_token(&mut self) -> Result<Option<u8>, ScanError> {
        loop {
            let buf = self.r.fill_buf().map_err(|e| ScanError {
                offset: self.offset,
                message: e.to_string(),
                io: Some(e),
            })?;
            if buf.is_empty() {
                return Ok(None);
            }
            match buf.iter().position(|b| !matches!(b, b' ' | b'\t' | b'\n' | b'\r')) {
                Some(i) => {
                    let b = buf[i];
                    self.bump(i);
                    return Ok(Some(b));
                }
                None => {
                    let n = buf.len();
                    self.bump(n);
                }
            }
        }
    }

    /// Skips a string whose opening quote has been consumed; keeps its first [`MAX_KEY`] bytes
    /// in `keep` when given (longer keys are marked by a byte no key of interest has).
    fn skip_string(&mut self, mut keep: Option<&mut Vec<u8>>) -> Result<(), ScanError> {
        let start = self.offset - 1;
        loop {
            let buf = self.r.fill_buf().map_err(|e| ScanError {
                offset: self.offset,
                message: e.to_string(),
                io: Some(e),
            })?;
            if buf.is_empty() {
                return Err(ScanError::at(
                    start,
                    "a string starting here is not closed (the file ends inside it: truncated?)",
                ));
            }
            let i = memchr::memchr2(b'"', b'\\', buf);
            let upto = i.unwrap_or(buf.len());
            if let Some(j) = buf[..upto].iter().position(|&b| b < 0x20) {
                return Err(ScanError::at(
                    self.offset + j as u64,
                    "control character inside a string (not allowed in JSON)",
                ));
            }
            if let Some(k) = keep.as_deref_mut() {
                let room = (MAX_KEY + 1).saturating_sub(k.len());
                k.extend_from_slice(&buf[..upto.min(room)]);
            }
            match i {
                None => {
                    let n = buf.len();
                    self.bump(n);
                }
                Some(i) => {
                    let quote = buf[i] == b'"';
                    self.bump(i + 1);
                    if quote {
                        return Ok(());
                    }
                    // An escape: skip the escaped byte (a \uXXXX's digits are plain bytes).
                    if self.peek_or()?.is_none() {
                        return Err(ScanError::at(
                            start,
                            "a string starting here is not closed (the file ends inside it: truncated?)",
                        ));
                    }
                    if let Some(k) = keep.as_deref_mut() {
                        // Keys with escapes are never `indexer_topk`: poison the key.
                        k.push(0);
                    }
                    self.bump(1);
                }
            }
        }
    }

    /// Skips a number or literal (the bytes it may consist of).
    fn skip_scalar(&mut self) -> Result<(), ScanError> {
        let start = self.offset;
        let mut len = 0u64;
        loop {
            let buf = self.r.fill_buf().map_err(|e| ScanError {
                offset: self.offset,
                message: e.to_string(),
                io: Some(e),
            })?;
            let n = buf.iter().take_while(|b| b.is_ascii_alphanumeric() || matches!(b, b'+' | b'-' | b'.')).count();
            let end = n < buf.len() || buf.is_empty();
            self.bump(n);
            len += n as u64;
            if end {
                break;
            }
            if len > 1024 {
                return Err(ScanError::at(start, "a scalar longer than 1024 bytes (not a number or literal)"));
            }
        }
        if len == 0 {
            let b = self.peek_or()?.unwrap_or(b' ');
            return Err(ScanError::at(
                start,
                format!("unexpected `{}`: expected a JSON value", char::from(b).escape_default()),
            ));
        }
        Ok(())
    }

    /// Scans every top-level value of the file; for each capture string (the value of an
    /// `indexer_topk` key) calls `on_capture` with its ordinal (from 0), its origin and a
    /// reader of its characters. Whatever the callback leaves unread is skipped. Returns the
    /// number of captures.
    pub(crate) fn scan<E>(
        &mut self,
        mut on_capture: impl FnMut(u64, Origin, &mut StringChars<'_, R>) -> Result<(), E>,
        wrap: impl Fn(ScanError) -> E,
    ) -> Result<u64, E> {
        let mut stack: Vec<Frame> = Vec::new();
        let mut captures = 0u64;
        // Whether a value is expected next (vs a separator or a closing bracket).
        let mut want_value = true;
        let mut top_values = 0u64;
        loop {
            let Some(b) = self.next_token().map_err(&wrap)? else {
                if let Some(f) = stack.last() {
                    let what = if matches!(f, Frame::Object { .. }) { "an object" } else { "an array" };
                    return Err(wrap(ScanError::at(self.offset, format!("the file ends inside {what} (truncated?)"))));
                }
                if top_values == 0 {
                    return Err(wrap(ScanError::at(0, "no JSON value in the file")));
                }
                return Ok(captures);
            };
            let offset = self.offset;
            // In an object before a key: a key or `}`.
            if let Some(Frame::Object { key: None, .. }) = stack.last() {
                if b == b'}' && want_value {
                    // `{}` or a trailing `,}` (the latter refused below by `want_value`).
                    self.bump(1);
                    stack.pop();
                    want_value = false;
                    if stack.is_empty() {
                        top_values += 1;
                    }
                    continue;
                }
                if b != b'"' {
                    return Err(wrap(ScanError::at(
                        offset,
                        format!("expected a key string, found `{}`", char::from(b).escape_default()),
                    )));
                }
                self.bump(1);
                let mut k = Vec::new();
                self.skip_string(Some(&mut k)).map_err(&wrap)?;
                match self.next_token().map_err(&wrap)? {
                    Some(b':') => self.bump(1),
                    _ => return Err(wrap(ScanError::at(self.offset, "expected `:` after a key"))),
                }
                if let Some(Frame::Object { key, .. }) = stack.last_mut() {
                    *key = Some(k);
                }
                want_value = true;
                continue;
            }
            if want_value {
                match b {
                    b'{' | b'[' => {
                        if stack.len() >= MAX_DEPTH {
                            return Err(wrap(ScanError::at(offset, format!("nesting deeper than {MAX_DEPTH} levels"))));
                        }
                        self.bump(1);
                        let under = match stack.last() {
                            Some(Frame::Object { key: Some(k), .. }) => k.as_slice(),
                            _ => b"",
                        };
                        let frame = if b == b'{' {
                            let meta =
                                under == b"meta_info" || matches!(stack.last(), Some(Frame::Object { meta: true, .. }));
                            Frame::Object { key: None, meta }
                        } else {
                            Frame::Array { choices: under == b"choices" }
                        };
                        stack.push(frame);
                        // `[]` is allowed: the check below accepts `]` when a value is wanted
                        // only right after `[`.
                        if b == b'[' && self.next_token().map_err(&wrap)? == Some(b']') {
                            self.bump(1);
                            stack.pop();
                            self.after_value(&mut stack, &mut want_value, &mut top_values);
                        }
                        continue;
                    }
                    b'"' => {
                        self.bump(1);
                        let is_capture = matches!(stack.last(), Some(Frame::Object { key: Some(k), .. }) if k.as_slice() == CAPTURE_KEY);
                        if is_capture {
                            let origin = if stack.iter().any(|f| matches!(f, Frame::Object { meta: true, .. })) {
                                Origin::MetaInfo
                            } else if stack.iter().any(|f| matches!(f, Frame::Array { choices: true })) {
                                Origin::Choices
                            } else {
                                Origin::Unknown
                            };
                            let mut chars = StringChars { s: self, done: false, start: offset };
                            on_capture(captures, origin, &mut chars)?;
                            let done = chars.finished();
                            captures += 1;
                            if !done {
                                self.skip_string(None).map_err(&wrap)?;
                            }
                        } else {
                            self.skip_string(None).map_err(&wrap)?;
                        }
                    }
                    b'}' | b']' | b',' | b':' => {
                        return Err(wrap(ScanError::at(
                            offset,
                            format!("unexpected `{}`: expected a value", char::from(b)),
                        )));
                    }
                    _ => self.skip_scalar().map_err(&wrap)?,
                }
                self.after_value(&mut stack, &mut want_value, &mut top_values);
                continue;
            }
            // After a value: a separator or a closing bracket.
            match (b, stack.last()) {
                (b',', Some(Frame::Object { .. })) => {
                    self.bump(1);
                    if let Some(Frame::Object { key, .. }) = stack.last_mut() {
                        *key = None;
                    }
                    want_value = true;
                    // A `}` right after `,` is refused: the key branch sees want_value with `}`
                    // only right after `{` (checked here by peeking).
                    if self.next_token().map_err(&wrap)? == Some(b'}') {
                        return Err(wrap(ScanError::at(self.offset, "a `,` before `}` (trailing comma)")));
                    }
                }
                (b',', Some(Frame::Array { .. })) => {
                    self.bump(1);
                    want_value = true;
                    if self.next_token().map_err(&wrap)? == Some(b']') {
                        return Err(wrap(ScanError::at(self.offset, "a `,` before `]` (trailing comma)")));
                    }
                }
                (b'}', Some(Frame::Object { .. })) | (b']', Some(Frame::Array { .. })) => {
                    self.bump(1);
                    stack.pop();
                    self.after_value(&mut stack, &mut want_value, &mut top_values);
                }
                (_, None) => {
                    // Another top-level value (JSONL, or replies one after another).
                    want_value = true;
                }
                (b, _) => {
                    return Err(wrap(ScanError::at(
                        offset,
                        format!("unexpected `{}` after a value", char::from(b).escape_default()),
                    )));
                }
            }
        }
    }

    /// A value ended: a separator or closing bracket comes next. (In an object the member's
    /// key is kept until `,` resets it.)
    fn after_value(&self, stack: &mut [Frame], want_value: &mut bool, top_values: &mut u64) {
        *want_value = false;
        if stack.is_empty() {
            *top_values += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn captures(text: &str) -> Result<Vec<(Origin, String)>, String> {
        let mut out = Vec::new();
        let mut s = Scanner::new(io::BufReader::with_capacity(7, text.as_bytes()));
        s.scan(
            |_, o, r| {
                let mut t = String::new();
                r.read_to_string(&mut t).map_err(|e| e.to_string())?;
                out.push((o, t));
                Ok::<(), String>(())
            },
            |e| format!("{} at {}", e.message, e.offset),
        )?;
        Ok(out)
    }

    #[test]
    fn finds_sglang_vllm_and_jsonl_captures() {
        let t = r#"{"text":"a \"q\" b","meta_info":{"id":"x","indexer_topk":"AAAA\/w==","n":[1,2.5e3,true,null,{}]}}
{"choices":[{"index":0,"indexer_topk":"k05V"},{"indexer_topk":null}],"usage":{}} [] {"indexer_topk":"QQ=="}"#;
        let got = captures(t).unwrap();
        assert_eq!(
            got,
            [
                (Origin::MetaInfo, "AAAA/w==".to_string()),
                (Origin::Choices, "k05V".into()),
                (Origin::Unknown, "QQ==".into())
            ]
        );
    }

    #[test]
    fn structural_errors_are_refused() {
        for (t, want) in [
            ("", "no JSON value"),
            ("{\"a\":1", "ends inside an object"),
            ("{\"a\" 1}", "expected `:`"),
            ("{\"a\":1,}", "trailing comma"),
            ("[1,]", "trailing comma"),
            ("{\"indexer_topk\":\"AAAA", "not closed"),
            ("{\"a\":\"x\ny\"}", "control character"),
            ("{\"indexer_topk\":\"AA\\nA\"}", "escape"),
            ("{1:2}", "expected a key"),
            ("[1 2]", "after a value"),
            ("]", "expected a value"),
        ] {
            let e = captures(t).unwrap_err();
            assert!(e.contains(want), "{t:?}: {e}");
        }
        let deep = "[".repeat(MAX_DEPTH + 1);
        assert!(captures(&deep).unwrap_err().contains("nesting deeper"));
    }
}
