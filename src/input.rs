//! Reading the files users name on the command line (scenarios, experiments, measured data) and
//! standard input with a size bound, so that a wrong path (a device such as /dev/zero, a
//! multi-gigabyte log) is refused instead of being read until memory runs out.

use std::io::Read;
use std::path::Path;

/// Largest input file accepted: 64 MiB (a measured table of a million rows is ~30 MB).
pub(crate) const MAX_INPUT_BYTES: u64 = 64 << 20;

/// The whole text of `path`, like [`std::fs::read_to_string`], but an error past
/// [`MAX_INPUT_BYTES`].
pub(crate) fn read_to_string(path: &Path) -> std::io::Result<String> {
    read_bounded(std::fs::File::open(path)?, "larger than the 64 MiB input-file bound")
}

/// The whole text of standard input (the numbers of `dsa-sim quantize`), bounded like
/// [`read_to_string`]: at most [`MAX_INPUT_BYTES`] + 1 bytes are read, so an endless stream
/// (`< /dev/zero`) is refused after 64 MiB instead of filling memory.
pub(crate) fn read_stdin_to_string() -> std::io::Result<String> {
    read_bounded(
        std::io::stdin().lock(),
        "larger than the 64 MiB input bound: give at most 64 MiB of numbers (split the input)",
    )
}

/// All of `reader` as UTF-8 text, or an error saying `too_large` past [`MAX_INPUT_BYTES`].
fn read_bounded(reader: impl Read, too_large: &'static str) -> std::io::Result<String> {
    let mut bytes = Vec::new();
    reader.take(MAX_INPUT_BYTES + 1).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > MAX_INPUT_BYTES {
        return Err(std::io::Error::new(std::io::ErrorKind::InvalidData, too_large));
    }
    String::from_utf8(bytes)
        .map_err(|_| std::io::Error::new(std::io::ErrorKind::InvalidData, "stream did not contain valid UTF-8"))
}

/// The text of a side file that dsa-sim reads on its own initiative (a README beside a data
/// file): `Ok(None)` when there is none or it is not a regular file (a FIFO would block the
/// open, a device never ends), otherwise bounded like [`read_to_string`]. The file type is
/// checked before opening and again on the opened handle.
pub(crate) fn read_regular_file(path: &Path) -> std::io::Result<Option<String>> {
    match std::fs::metadata(path) {
        Ok(m) if m.is_file() => {}
        Ok(_) => return Ok(None),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
    }
    let f = std::fs::File::open(path)?;
    if !f.metadata()?.is_file() {
        return Ok(None);
    }
    let mut bytes = Vec::new();
    f.take(MAX_INPUT_BYTES + 1).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > MAX_INPUT_BYTES {
        return Ok(None);
    }
    Ok(String::from_utf8(bytes).ok())
}

/// Most characters of a user's value that an error message echoes ([`echo`]).
pub(crate) const ECHO_MAX: usize = 200;

/// Most characters of a whole error line ([`cap_line`]).
pub(crate) const LINE_MAX: usize = 800;

/// A user's value as an error message echoes it: whole when at most [`ECHO_MAX`] characters,
/// otherwise its first [`ECHO_MAX`] characters and `…(N bytes)`, so a 10 MB value gives a short
/// line.
pub(crate) fn echo(value: &str) -> std::borrow::Cow<'_, str> {
    match value.char_indices().nth(ECHO_MAX) {
        None => std::borrow::Cow::Borrowed(value),
        Some((i, _)) => std::borrow::Cow::Owned(format!("{}…({} bytes)", &value[..i], value.len())),
    }
}

/// [`echo`] in quotes, as `{:?}` shows a string: `"abc"`, or `"abc…"…(N bytes)` when cut.
pub(crate) fn echo_quoted(value: &str) -> String {
    match value.char_indices().nth(ECHO_MAX) {
        None => format!("{value:?}"),
        Some((i, _)) => format!("{:?}…({} bytes)", &value[..i], value.len()),
    }
}

/// An error line with every run of more than [`ECHO_MAX`] + 40 characters without a space cut
/// as [`echo`] cuts a value (the margin leaves a value [`echo`] already cut, with its quotes and
/// size, as it is), and the whole line cut to about [`LINE_MAX`] characters (its start and end
/// kept, `…(N bytes)…` between): the final guard of every message that may quote user input.
pub(crate) fn cap_line(line: &str) -> std::borrow::Cow<'_, str> {
    let too_long = |w: &str| w.len() > ECHO_MAX + 40 && w.chars().count() > ECHO_MAX + 40;
    if !line.split(' ').any(too_long) && line.len() <= LINE_MAX {
        return std::borrow::Cow::Borrowed(line);
    }
    let mut out: String =
        line.split(' ').map(|w| if too_long(w) { echo(w) } else { w.into() }).collect::<Vec<_>>().join(" ");
    if out.chars().count() > LINE_MAX {
        let head: String = out.chars().take(LINE_MAX * 2 / 3).collect();
        let tail_start = out.char_indices().rev().nth(LINE_MAX / 4).map_or(0, |(i, _)| i);
        let tail_start = tail_start.max(head.len());
        out = format!("{head}…({} bytes)…{}", tail_start - head.len(), &out[tail_start..]);
    }
    std::borrow::Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn echoed_values_and_lines_are_capped() {
        assert_eq!(echo("short"), "short");
        let big = "é".repeat(5_000_000);
        let e = echo(&big);
        assert!(
            e.ends_with("…(10000000 bytes)") && e.chars().count() == ECHO_MAX + "…(10000000 bytes)".chars().count(),
            "{e}"
        );
        assert_eq!(echo_quoted("a\"b"), "\"a\\\"b\"");
        assert!(echo_quoted(&big).ends_with("\"…(10000000 bytes)"));
        assert_eq!(cap_line("depth = 1.5: allowed 0..=1"), "depth = 1.5: allowed 0..=1");
        let line = format!("field = {}: allowed 0..=1", "x".repeat(10_000_000));
        let c = cap_line(&line);
        assert!(c.len() < 300 && c.starts_with("field = xxx") && c.ends_with("…(10000001 bytes) allowed 0..=1"), "{c}");
        let spaced = format!("label = {}: allowed 0..=1", "a ".repeat(5_000_000));
        let c = cap_line(&spaced);
        // Idempotent on what echo already cut: the original size stays.
        let once = format!("x = {}: allowed", echo_quoted(&"y".repeat(1 << 20)));
        assert_eq!(cap_line(&once), once);
        assert!(
            c.chars().count() < LINE_MAX + 40 && c.starts_with("label = a a") && c.ends_with("a : allowed 0..=1"),
            "{c}"
        );
    }
}
