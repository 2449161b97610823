//! Escaping of user text (experiment titles, captions, descriptions, labels, data file names)
//! for the two text formats of a result folder, one place per format:
//!
//! - **SVG**: [`svg_document`] is applied once to every drawn SVG document (by
//!   `figure::save_figure`). plotters already escapes `<`, `>`, `&`, `"` and `'`; this replaces
//!   the characters XML 1.0 cannot hold at all, even as references (C0 controls other than tab,
//!   line feed and carriage return, U+FFFE, U+FFFF), so every title, label, legend entry and note
//!   gives well-formed XML.
//! - **markdown** (report.md): every user string goes through one of [`md_text`] (free markdown
//!   written by the experiment's author: descriptions, captions), [`md_line`] (plain text on one
//!   line: headings, labels, table cells), [`md_link_text`] (the text of a link or an image),
//!   [`md_code`] (a code span) or [`md_url`] (a link destination), so no value can end a heading,
//!   split a table row or cell, open raw HTML, end a link, or leave a code span.
//!
//! Control characters that cannot be kept are shown as their Unicode control pictures (U+2400 +
//! code: `\u{1}` → `␁`, DEL → `␡`), C1 controls and the non-characters U+FFFE / U+FFFF as U+FFFD,
//! so the text stays visible and the substitution is recognisable. Text without any of these
//! characters is returned unchanged.

use std::borrow::Cow;

/// The visible stand-in of a character no text output should carry raw, or `None` to keep it.
/// Tab, line feed and carriage return are kept here: each caller decides about them.
fn stand_in(c: char) -> Option<char> {
    match c {
        '\t' | '\n' | '\r' => None,
        '\0'..='\u{1F}' => char::from_u32(0x2400 + c as u32),
        '\u{7F}' => Some('\u{2421}'),
        '\u{80}'..='\u{9F}' | '\u{FFFE}' | '\u{FFFF}' => Some('\u{FFFD}'),
        _ => None,
    }
}

/// `s` with `map` applied to each character (`None`: keep it); borrowed when nothing changes.
fn map_chars(
    s: &str,
    map: impl Fn(char) -> Option<&'static str>,
    stand: impl Fn(char) -> Option<char>,
) -> Cow<'_, str> {
    let needs = |c: char| map(c).is_some() || stand(c).is_some();
    if !s.chars().any(needs) {
        return Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() + 16);
    for c in s.chars() {
        if let Some(r) = map(c) {
            out.push_str(r);
        } else if let Some(p) = stand(c) {
            out.push(p);
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

/// An SVG document with every character XML 1.0 cannot hold replaced by its stand-in (see the
/// module docs). The markup plotters writes has none of them, so only text content changes.
pub(crate) fn svg_document(svg: &str) -> Cow<'_, str> {
    map_chars(svg, |_| None, stand_in)
}

/// Free markdown by the experiment's author (a description, a caption): kept as markdown
/// (emphasis, code spans, lists), with control characters shown as stand-ins, line ends
/// normalised to `\n` and `<` outside code spans written `&lt;`, so no raw HTML (a `<!--` would
/// hide the rest of the report) gets through. Inside a code span `<` is literal already.
pub(crate) fn md_text(s: &str) -> String {
    let s: String = s.replace("\r\n", "\n").replace('\r', "\n").chars().map(|c| stand_in(c).unwrap_or(c)).collect();
    let mut out = String::with_capacity(s.len());
    let mut rest = s.as_str();
    while let Some(i) = rest.find(['<', '`']) {
        out.push_str(&rest[..i]);
        rest = &rest[i..];
        if rest.starts_with('<') {
            out.push_str("&lt;");
            rest = &rest[1..];
            continue;
        }
        // A run of n backticks opens a code span closed by the next run of exactly n (CommonMark);
        // without a closer the run is literal text.
        let n = rest.bytes().take_while(|&b| b == b'`').count();
        let mut end = None;
        let mut j = n;
        while let Some(k) = rest[j..].find('`') {
            let start = j + k;
            let m = rest[start..].bytes().take_while(|&b| b == b'`').count();
            if m == n {
                end = Some(start + m);
                break;
            }
            j = start + m;
        }
        let take = end.unwrap_or(n);
        out.push_str(&rest[..take]);
        rest = &rest[take..];
    }
    out.push_str(rest);
    out
}

/// Plain text on one markdown line (a heading, a label, a table cell): line ends and tabs become
/// spaces, control characters stand-ins, and `\ | < > &` are escaped, so the text shows as
/// written and cannot end the line, split a table cell or open raw HTML.
pub(crate) fn md_line(s: &str) -> String {
    md_escaped(s, false)
}

/// [`md_line`] for the text of a link or an image (`[TEXT](…)`, `![TEXT](…)`): brackets are
/// escaped too, so an unbalanced one cannot end the text early.
pub(crate) fn md_link_text(s: &str) -> String {
    md_escaped(s, true)
}

fn md_escaped(s: &str, brackets: bool) -> String {
    let map = |c: char| match c {
        '\n' | '\r' | '\t' => Some(" "),
        '\\' => Some("\\\\"),
        '|' => Some("\\|"),
        '[' if brackets => Some("\\["),
        ']' if brackets => Some("\\]"),
        '<' => Some("&lt;"),
        '>' => Some("&gt;"),
        '&' => Some("&amp;"),
        _ => None,
    };
    map_chars(s, map, stand_in).into_owned()
}

/// `s` as one inline code span (backticks included): the fence is one backtick longer than any
/// run of backticks inside, padded with spaces when `s` starts or ends with one; line ends become
/// spaces and control characters stand-ins. Not for table cells (GFM splits cells on `|` even
/// inside code spans).
pub(crate) fn md_code(s: &str) -> String {
    let body = map_chars(s, |c| matches!(c, '\n' | '\r' | '\t').then_some(" "), stand_in);
    let mut longest = 0;
    let mut run = 0;
    for c in body.chars() {
        run = if c == '`' { run + 1 } else { 0 };
        longest = longest.max(run);
    }
    let fence = "`".repeat(longest + 1);
    let pad = if body.starts_with('`') || body.ends_with('`') { " " } else { "" };
    format!("{fence}{pad}{body}{pad}{fence}")
}

/// A relative path as a markdown link destination: every byte outside the unreserved URL
/// characters (`A-Z a-z 0-9 - . _ ~`) and `/` is percent-encoded, so spaces, parentheses, `<`,
/// `>` and control characters cannot end the link.
pub(crate) fn md_url(path: &str) -> String {
    let mut out = String::with_capacity(path.len());
    for b in path.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~' | b'/') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_text_is_unchanged() {
        let t = "Recall vs context length, V4-Flash geometry, one curve per index_topk — k·c ≈ 2K (TRANSCRIBED)";
        assert!(matches!(svg_document(t), Cow::Borrowed(_)));
        assert_eq!(md_line(t), t);
        assert_eq!(md_text(t), t);
        assert_eq!(md_code("dsv4_seed_observations.csv"), "`dsv4_seed_observations.csv`");
        assert_eq!(md_url("data/measured-dsv4_seed_observations.csv"), "data/measured-dsv4_seed_observations.csv");
    }

    #[test]
    fn svg_loses_only_what_xml_cannot_hold() {
        assert_eq!(
            svg_document("<text>a\u{1}b\u{0}\u{1b}[31m\tc\n\u{7f}\u{85}\u{FFFF}</text>"),
            "<text>a␁b␀␛[31m\tc\n␡\u{FFFD}\u{FFFD}</text>"
        );
    }

    #[test]
    fn markdown_lines_cannot_break_tables_or_open_markup() {
        assert_eq!(md_line("a|b\nc\r\td"), "a\\|b c  d");
        assert_eq!(md_line("x\\|y"), "x\\\\\\|y");
        assert_eq!(md_line("<!-- [-10, 15] &amp;"), "&lt;!-- [-10, 15] &amp;amp;");
        assert_eq!(md_link_text("a]b[c\\"), "a\\]b\\[c\\\\");
        assert_eq!(md_line("bell\u{7}"), "bell␇");
        assert_eq!(md_text("para\r\n\r\nnext\u{1b}"), "para\n\nnext␛");
        assert_eq!(md_text("*a* <!-- `<b>` ``x`<y`` `<z"), "*a* &lt;!-- `<b>` ``x`<y`` `&lt;z");
    }

    #[test]
    fn code_spans_and_urls_hold_anything() {
        assert_eq!(md_code("a`b"), "``a`b``");
        assert_eq!(md_code("`x``"), "``` `x`` ```");
        assert_eq!(md_code("two\nlines"), "`two lines`");
        assert_eq!(md_url("data/measured-my file (1).csv"), "data/measured-my%20file%20%281%29.csv");
        assert_eq!(md_url("é\n"), "%C3%A9%0A");
    }
}
