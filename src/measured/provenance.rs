//! Provenance of a table from a `README.md` beside it: the paragraph that names the file.

use std::path::Path;

/// Words in a provenance text that mark a table as transcribed rather than measured.
const TRANSCRIBED_WORDS: &[&str] = &["transcribed", "not measured", "illustrative"];

/// Whether a provenance text says the counts are transcribed, not measured.
pub(super) fn says_transcribed(text: &str) -> bool {
    let low = text.to_lowercase();
    TRANSCRIBED_WORDS.iter().any(|w| low.contains(w))
}

/// The paragraph of the `README.md` beside `table` that names the table's file, if there is
/// such a README (a regular file, read with the input size bound: a FIFO, a device or a huge
/// file there is ignored rather than waited on or read without end) and such a paragraph.
pub(super) fn from_readme(table: &Path) -> Option<String> {
    let file = table.file_name()?.to_str()?;
    let readme = table.parent()?.join("README.md");
    let doc = crate::input::read_regular_file(&readme).ok()??;
    paragraph(&doc, file)
}

/// The README paragraph (a bullet and its continuation lines) that names `file`.
fn paragraph(doc: &str, file: &str) -> Option<String> {
    let mut cur = String::new();
    for line in doc.lines() {
        let t = line.trim();
        let starts_new = t.is_empty()
            || t.starts_with("- ")
            || t.starts_with("* ")
            || t.starts_with('#')
            || t.starts_with('|')
            || cur.starts_with('|');
        if starts_new && !cur.is_empty() {
            if cur.contains(file) {
                return Some(cur);
            }
            cur.clear();
        }
        if !t.is_empty() {
            if !cur.is_empty() {
                cur.push(' ');
            }
            cur.push_str(t.trim_start_matches("- ").trim_start_matches("* "));
        }
    }
    (!cur.is_empty() && cur.contains(file)).then_some(cur)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paragraph_found() {
        let doc = "# T\n\n- `a.csv` — first\n  more text, transcribed.\n- `b.csv` — measured\n";
        assert_eq!(paragraph(doc, "a.csv").unwrap(), "`a.csv` — first more text, transcribed.");
        assert_eq!(paragraph(doc, "b.csv").unwrap(), "`b.csv` — measured");
        assert!(paragraph(doc, "c.csv").is_none());
        assert!(says_transcribed("TRANSCRIBED, not measured") && !says_transcribed("measured"));
    }

    #[cfg(unix)]
    #[test]
    fn a_fifo_readme_is_ignored_without_waiting() {
        let d = tempfile::tempdir().unwrap();
        let table = d.path().join("t.csv");
        std::fs::write(&table, "context_len,index_topk,trials,hits\n1000,512,10,5\n").unwrap();
        let st = std::process::Command::new("mkfifo").arg(d.path().join("README.md")).status();
        if !st.is_ok_and(|s| s.success()) {
            return;
        }
        let start = std::time::Instant::now();
        let ds = super::super::load_csv(&table).unwrap();
        assert!(ds.provenance.is_none() && start.elapsed().as_secs() < 2);
    }
}

/// The provenance a table carries in its own comment header: the text after `# provenance:` in
/// the comment lines before the header (continued by the comment lines that follow it), so
/// that a copied table stays labelled without the README beside it.
pub(super) fn from_header(text: &str) -> Option<String> {
    let mut out: Option<String> = None;
    for line in text.lines() {
        let t = line.trim();
        if t.is_empty() {
            continue;
        }
        let Some(c) = t.strip_prefix('#') else { break };
        let c = c.trim();
        match &mut out {
            Some(o) if !c.is_empty() && !starts_with_key(c) => {
                o.push(' ');
                o.push_str(c);
            }
            Some(_) => {}
            None => {
                if c.len() >= 11 && c[..11].eq_ignore_ascii_case("provenance:") {
                    out = Some(c[11..].trim().to_string());
                }
            }
        }
    }
    out.filter(|o| !o.is_empty())
}

/// `key: …` (an identifier then a colon): the start of another header comment, not a continuation.
fn starts_with_key(c: &str) -> bool {
    let key: String = c.chars().take_while(|ch| ch.is_ascii_alphanumeric() || *ch == '_' || *ch == '-').collect();
    !key.is_empty() && c[key.len()..].starts_with(':')
}

#[cfg(test)]
mod header_tests {
    use super::*;

    #[test]
    fn header_provenance_with_continuation() {
        let t = "# provenance: TRANSCRIBED from notes\n# (a report), not measured: illustrative\n# seed: 3\ncontext_len,index_topk,trials,hits\n1,1,1,1\n# provenance: not this\n";
        let p = from_header(t).unwrap();
        assert_eq!(p, "TRANSCRIBED from notes (a report), not measured: illustrative");
        assert!(says_transcribed(&p));
        assert_eq!(from_header("# lab run 3\ncontext_len\n"), None);
    }
}
