//! `--tokenizer tokenizer.json`: the served model's Hugging Face tokenizer, counted locally
//! (the `tokenizers` crate; the file is read from disk, nothing is fetched). The length search
//! then asks no server for a count, and the needle's token position comes from the tokens'
//! offsets in one encoding of the whole prompt (not from counting a prefix separately, whose
//! last token may merge differently at the cut).

use super::ProbeError;
use std::io::Read;
use std::path::Path;

/// Largest tokenizer.json read (the biggest published ones are about 35 MB).
pub(crate) const MAX_TOKENIZER_BYTES: u64 = 256 << 20;

/// A prompt's tokens as the local tokenizer counts them, and where the needle sits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Located {
    /// Tokens of the whole prompt, special tokens (BOS) included as the server adds them.
    pub(crate) tokens: u64,
    /// Index of the needle's first token in the prompt's tokens.
    pub(crate) needle_start: u64,
    /// Tokens the needle's text spans.
    pub(crate) needle_tokens: u64,
}

/// A Hugging Face tokenizer read from a `tokenizer.json`.
pub(crate) struct LocalTokenizer {
    inner: tokenizers::Tokenizer,
    /// The file as given (for messages and the provenance).
    pub(crate) name: String,
    digest: String,
}

impl std::fmt::Debug for LocalTokenizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LocalTokenizer").field("name", &self.name).field("digest", &self.digest).finish()
    }
}

/// The first line of an error, clipped: the crate's messages may be long or span lines.
fn one_line(e: &dyn std::fmt::Display) -> String {
    let s = e.to_string();
    let line = s.lines().next().unwrap_or("").trim();
    match line.char_indices().nth(200) {
        Some((i, _)) => format!("{}…", &line[..i]),
        None => line.to_string(),
    }
}

impl LocalTokenizer {
    /// Reads `path` (bad input, one line, when it cannot be read or is not a tokenizer.json).
    pub(crate) fn from_file(path: &Path) -> Result<LocalTokenizer, ProbeError> {
        let name = path.display().to_string();
        let bad = |m: String| ProbeError::input(format!("--tokenizer {name}: {m}"));
        let file = std::fs::File::open(path).map_err(|e| bad(format!("cannot read: {e}")))?;
        if file.metadata().is_ok_and(|m| m.is_dir()) {
            return Err(bad("a folder, not a file: give the tokenizer.json inside it".into()));
        }
        let mut bytes = Vec::new();
        file.take(MAX_TOKENIZER_BYTES + 1).read_to_end(&mut bytes).map_err(|e| bad(format!("cannot read: {e}")))?;
        if bytes.len() as u64 > MAX_TOKENIZER_BYTES {
            return Err(bad(format!("larger than {} MiB: not a tokenizer.json", MAX_TOKENIZER_BYTES >> 20)));
        }
        LocalTokenizer::from_bytes(&bytes, &name)
    }

    /// A tokenizer from the bytes of a tokenizer.json (`name` for messages).
    pub(crate) fn from_bytes(bytes: &[u8], name: &str) -> Result<LocalTokenizer, ProbeError> {
        let bad = |m: String| ProbeError::input(format!("--tokenizer {name}: {m}"));
        let mut inner = tokenizers::Tokenizer::from_bytes(bytes)
            .map_err(|e| bad(format!("not a Hugging Face tokenizer.json ({})", one_line(&*e))))?;
        // The server tokenizes a prompt whole: a file's truncation (BERT's 512) or padding
        // settings are for training batches, not for counting a prompt.
        inner.with_truncation(None).map_err(|e| bad(one_line(&*e)))?;
        inner.with_padding(None);
        let t = LocalTokenizer { inner, name: name.to_string(), digest: fnv(bytes) };
        // A file that parses but cannot encode (a model with no vocabulary) fails here, once.
        t.count("The grass is green.").map_err(|e| bad(format!("cannot encode a test sentence ({})", e.message)))?;
        Ok(t)
    }

    /// A fingerprint of the file (FNV-1a of its bytes), so that `--resume` refuses another.
    pub(crate) fn digest(&self) -> &str {
        &self.digest
    }

    /// Tokens of `text` as the server counts a prompt: the tokenizer's special tokens added
    /// (a BOS where its post-processor adds one, as vLLM and SGLang do for a completion).
    pub(crate) fn count(&self, text: &str) -> Result<u64, ProbeError> {
        let e = self
            .inner
            .encode_fast(text, true)
            .map_err(|e| ProbeError::failure(format!("--tokenizer {}: {}", self.name, one_line(&*e))))?;
        Ok(e.len() as u64)
    }

    /// Tokens of `text` and the tokens the byte range `needle` (start, length) of it spans:
    /// the first token ending past its start up to the first starting at or past its end,
    /// special tokens (whose offsets point nowhere) skipped.
    pub(crate) fn locate(&self, text: &str, needle: (usize, usize)) -> Result<Located, ProbeError> {
        let e = self
            .inner
            .encode(text, true)
            .map_err(|e| ProbeError::failure(format!("--tokenizer {}: {}", self.name, one_line(&*e))))?;
        let (from, to) = (needle.0, needle.0 + needle.1);
        let special = e.get_special_tokens_mask();
        let ordinary = |i: &usize| special.get(*i).is_none_or(|&s| s == 0);
        let offsets = e.get_offsets();
        let start = (0..offsets.len()).filter(ordinary).find(|&i| offsets[i].1 > from).unwrap_or(offsets.len());
        let end = (start..offsets.len()).filter(ordinary).find(|&i| offsets[i].0 >= to).unwrap_or(offsets.len());
        Ok(Located { tokens: e.len() as u64, needle_start: start as u64, needle_tokens: (end - start).max(1) as u64 })
    }
}

fn fnv(bytes: &[u8]) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in bytes {
        h ^= b as u64;
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    format!("{h:016x}")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A word-level tokenizer.json: every whitespace-separated word one token (unknown words
    /// included), punctuation split off, and a BOS added.
    fn words_and_punctuation() -> String {
        serde_json::json!({
            "version": "1.0", "truncation": {"direction": "Right", "max_length": 8, "strategy": "LongestFirst", "stride": 0}, "padding": null,
            "added_tokens": [
                {"id": 0, "content": "<unk>", "single_word": false, "lstrip": false, "rstrip": false, "normalized": false, "special": true},
                {"id": 1, "content": "<s>", "single_word": false, "lstrip": false, "rstrip": false, "normalized": false, "special": true}
            ],
            "normalizer": null,
            "pre_tokenizer": {"type": "Sequence", "pretokenizers": [{"type": "WhitespaceSplit"}, {"type": "Punctuation", "behavior": "Isolated"}]},
            "post_processor": {"type": "TemplateProcessing",
                "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
                "pair": [{"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}, {"Sequence": {"id": "B", "type_id": 1}}],
                "special_tokens": {"<s>": {"id": "<s>", "ids": [1], "tokens": ["<s>"]}}},
            "decoder": null,
            "model": {"type": "WordLevel", "vocab": {"<unk>": 0, "<s>": 1, "the": 2, ".": 3}, "unk_token": "<unk>"}
        })
        .to_string()
    }

    #[test]
    fn counts_and_locates_by_offsets() {
        let t = LocalTokenizer::from_bytes(words_and_punctuation().as_bytes(), "t.json").unwrap();
        // BOS + 4 words + "." — the file's truncation to 8 is not applied.
        assert_eq!(t.count("The grass is green.").unwrap(), 6);
        let long = "a b c d e f g h i j k l";
        assert_eq!(t.count(long).unwrap(), 13);
        let text = "Hay hay. One of the numbers is: 42. More hay.";
        let at = text.find(" One").unwrap();
        let len = " One of the numbers is: 42.".len();
        let l = t.locate(text, (at, len)).unwrap();
        // <s> Hay hay . | One of the numbers is : 42 . | More hay .
        assert_eq!((l.tokens, l.needle_start, l.needle_tokens), (15, 4, 8));
        assert_eq!(l.tokens, t.count(text).unwrap());
    }

    #[test]
    fn bad_files_are_one_line_input_errors() {
        let e = LocalTokenizer::from_bytes(b"{\"not\": \"a tokenizer\"}", "x.json").unwrap_err();
        assert_eq!(e.kind, crate::error::ErrorKind::Input);
        assert!(e.message.starts_with("--tokenizer x.json: not a Hugging Face tokenizer.json"), "{}", e.message);
        assert_eq!(e.message.lines().count(), 1);
        let e = LocalTokenizer::from_bytes(b"\xff\xfe", "y.json").unwrap_err();
        assert!(e.message.contains("not a Hugging Face tokenizer.json"), "{}", e.message);
        let d = std::env::temp_dir();
        let e = LocalTokenizer::from_file(&d).unwrap_err();
        assert!(e.message.contains("a folder"), "{}", e.message);
        let e = LocalTokenizer::from_file(&d.join("dsa-sim-no-such-tokenizer.json")).unwrap_err();
        assert!(e.message.contains("cannot read"), "{}", e.message);
    }
}
