//! Reading the files users name on the command line (scenarios, experiments, measured data) and
//! standard input with a size bound, so that a wrong path (a device such as /dev/zero, a
//! multi-gigabyte log) is refused instead of being read until memory runs out.

use std::io::Read;
use std::path::Path;

/// Largest input file accepted: 64 MiB (a measured table of a million rows is ~30 MB).
pub const MAX_INPUT_BYTES: u64 = 64 << 20;

/// The whole text of `path`, like [`std::fs::read_to_string`], but an error past
/// [`MAX_INPUT_BYTES`].
pub fn read_to_string(path: &Path) -> std::io::Result<String> {
    read_bounded(std::fs::File::open(path)?, "larger than 64 MiB: not a scenario, experiment or measured-data file")
}

/// The whole text of standard input (the numbers of `dsa-sim quantize`), bounded like
/// [`read_to_string`]: at most [`MAX_INPUT_BYTES`] + 1 bytes are read, so an endless stream
/// (`< /dev/zero`) is refused after 64 MiB instead of filling memory.
pub fn read_stdin_to_string() -> std::io::Result<String> {
    read_bounded(std::io::stdin().lock(), "larger than 64 MiB: give at most 64 MiB of numbers (split the input)")
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
pub fn read_regular_file(path: &Path) -> std::io::Result<Option<String>> {
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
