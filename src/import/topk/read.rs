//! Reading the top-k indices of a capture file, whatever its layout, one row at a time.
//!
//! The layout is decided by the content, never by the file's name:
//!
//! - `PK\x03\x04` (a zip archive): a NumPy `.npz` whose `topk_index` entry is the array;
//! - `\x93NUMPY`: a `.npy` file;
//! - `{` or `[` (after whitespace): server replies (one JSON object, an array of them, or JSONL),
//!   whose `indexer_topk` strings are base64: raw little-endian int32 under `meta_info` (SGLang),
//!   the bytes of a `.npy` file under `choices` (vLLM), decided by the `.npy` magic elsewhere.
//!
//! Every array is (rows, layers, index_topk) of int32 (int64 is accepted from `.npy` too), read
//! row by row into one reused buffer: memory is one row whatever the file's size, and only the
//! rows the manifest names are converted and checked.

use super::json::{Origin, Scanner};
use super::CaptureError;
use base64::engine::general_purpose::STANDARD;
use std::collections::HashMap;
use std::io::{self, BufRead, BufReader, Read};
use std::path::Path;

/// The layout a file was read as.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Layout {
    /// NumPy `.npz` (key `topk_index`).
    Npz,
    /// NumPy `.npy`.
    Npy,
    /// SGLang replies (`meta_info.indexer_topk`, base64 of raw int32).
    Sglang,
    /// vLLM replies (`choices[i].indexer_topk`, base64 of `.npy` bytes).
    Vllm,
}

impl Layout {
    /// The name used in outputs.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Layout::Npz => "npz",
            Layout::Npy => "npy",
            Layout::Sglang => "sglang",
            Layout::Vllm => "vllm",
        }
    }
}

/// The shape every array must have: (rows, layers, index_topk).
#[derive(Debug, Clone, Copy)]
pub struct Shape {
    /// Indexer layers.
    pub(crate) layers: usize,
    /// Indices per row and layer.
    pub(crate) index_topk: usize,
}

/// What was found in a file: its layout and the rows of each capture.
#[derive(Debug, Clone)]
pub struct FileInfo {
    /// How it was read.
    pub(crate) layout: Layout,
    /// Rows of each capture, by request (a `.npy` / `.npz` holds one).
    pub(crate) rows: Vec<u64>,
}

/// Element type of the indices.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Elem {
    I32,
    I64,
}

impl Elem {
    fn size(self) -> usize {
        match self {
            Elem::I32 => 4,
            Elem::I64 => 8,
        }
    }
}

/// The callback of a wanted row: (manifest line indices, request, row, indices layer after layer).
pub(crate) type OnRow<'a> = dyn FnMut(&[usize], u64, u64, &[i64]) -> Result<(), CaptureError> + 'a;

/// The rows the manifest wants: (request, row) → manifest line indices.
pub(crate) type Wants = HashMap<(u64, u64), Vec<usize>>;

/// Buffered reads of a capture (and of the strings inside it) in large chunks.
const BUF: usize = 1 << 20;
/// Largest `.npy` header accepted (NumPy writes < 200 bytes; version 2 allows 4 GiB).
const MAX_NPY_HEADER: usize = 1 << 16;

/// Reads `path`, calling `on_row(lines, request, row, indices)` for every wanted row (the
/// indices as i64, layer after layer). `name` names the file in messages.
pub(crate) fn read_file(
    path: &Path,
    name: &str,
    shape: Shape,
    wants: &Wants,
    on_row: &mut OnRow<'_>,
) -> Result<FileInfo, CaptureError> {
    let f = std::fs::File::open(path).map_err(|e| CaptureError::io(format!("{name}: cannot open: {e}"), &e))?;
    let mut r = BufReader::with_capacity(BUF, f);
    let head = r.fill_buf().map_err(|e| CaptureError::io(format!("{name}: cannot read: {e}"), &e))?;
    if head.starts_with(b"PK\x03\x04") || head.starts_with(b"PK\x05\x06") {
        // The peek consumed nothing: the archive reads the same handle from its start.
        return read_npz(r, name, shape, wants, on_row);
    }
    if head.starts_with(b"\x93NUMPY") {
        let rows = read_npy(&mut r, shape, 0, wants, on_row).map_err(|m| m.in_file(name, None))?;
        return Ok(FileInfo { layout: Layout::Npy, rows: vec![rows] });
    }
    let first = head.iter().find(|b| !b.is_ascii_whitespace()).copied();
    if matches!(first, Some(b'{') | Some(b'[')) {
        return read_json(r, name, shape, wants, on_row);
    }
    let shown: String = head.iter().take(8).map(|b| format!("{b:02x}")).collect::<Vec<_>>().join(" ");
    Err(CaptureError::input(format!(
        "{name}: not a recognised capture (expected a .npz archive, a .npy file, or SGLang / vLLM replies in JSON or JSONL); it starts with bytes {}",
        if shown.is_empty() { "(none: the file is empty)".to_string() } else { shown }
    )))
}

/// A problem inside one array, before the file's name is attached.
#[derive(Debug)]
pub(crate) struct ArrayError {
    message: String,
    io: Option<io::Error>,
}

impl std::fmt::Display for ArrayError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl ArrayError {
    fn new(message: impl Into<String>) -> ArrayError {
        ArrayError { message: message.into(), io: None }
    }

    fn from_io(what: &str, e: io::Error) -> ArrayError {
        // A base64 error surfaces from the decoder as InvalidData wrapping DecodeError.
        if let Some(d) = e.get_ref().and_then(|x| x.downcast_ref::<base64::DecodeError>()) {
            return ArrayError::new(format!("base64 does not decode ({d})"));
        }
        let message = match e.kind() {
            io::ErrorKind::UnexpectedEof if e.get_ref().is_some() => format!("{what}: {e}"),
            io::ErrorKind::UnexpectedEof => format!("{what}: the data ends early (truncated?)"),
            io::ErrorKind::InvalidData => format!("{what}: {e}"),
            _ => return ArrayError { message: format!("{what}: {e}"), io: Some(e) },
        };
        ArrayError { message, io: None }
    }

    fn in_file(self, name: &str, request: Option<u64>) -> CaptureError {
        let msg = match request {
            Some(q) => format!("{name}: request {q}: {}", self.message),
            None => format!("{name}: {}", self.message),
        };
        match self.io {
            Some(e) => CaptureError::io(msg, &e),
            None => CaptureError::input(msg),
        }
    }
}

/// Reads a `.npy` stream (header then data) and checks it holds (rows, layers, index_topk) of
/// int32/int64 in C order, nothing after. Returns the rows.
fn read_npy(
    r: &mut impl Read,
    shape: Shape,
    request: u64,
    wants: &Wants,
    on_row: &mut OnRow<'_>,
) -> Result<u64, ArrayError> {
    let header = npy_header(r)?;
    let dtype = match header.dtype() {
        npyz::DType::Plain(t) => t.to_string(),
        other => {
            return Err(ArrayError::new(format!(
                "dtype {}: expected int32 ('<i4') or int64 ('<i8') indices",
                other.descr()
            )))
        }
    };
    let elem = match dtype.as_str() {
        "<i4" => Elem::I32,
        "<i8" => Elem::I64,
        d => {
            return Err(ArrayError::new(format!(
                "dtype '{d}': expected little-endian int32 ('<i4') or int64 ('<i8') indices"
            )))
        }
    };
    if header.order() != npyz::Order::C {
        return Err(ArrayError::new("the array is in Fortran order: expected C order (NumPy's default)"));
    }
    let dims = header.shape();
    if dims.len() != 3 || dims[1] != shape.layers as u64 || dims[2] != shape.index_topk as u64 {
        let shown = dims.iter().map(u64::to_string).collect::<Vec<_>>().join(", ");
        return Err(ArrayError::new(format!(
            "shape ({shown}) does not match --layers {} --index-topk {}: expected (rows, {}, {})",
            shape.layers, shape.index_topk, shape.layers, shape.index_topk
        )));
    }
    let rows = dims[0];
    let got = read_rows(r, elem, Some(rows), shape, request, wants, on_row)?;
    let mut extra = [0u8; 1];
    // Reading to the end also lets a zip entry check its CRC.
    match r.read(&mut extra) {
        Ok(0) => Ok(got),
        Ok(_) => Err(ArrayError::new(format!("more data after the {rows} rows the .npy header declares"))),
        Err(e) => Err(ArrayError::from_io("after the last row", e)),
    }
}

/// The `.npy` header, its size checked before npyz reads it: a version-2 header may declare
/// 4 GiB, which npyz would allocate at once.
pub(crate) fn npy_header(r: &mut impl Read) -> Result<npyz::NpyHeader, ArrayError> {
    let mut pre = [0u8; 12];
    r.read_exact(&mut pre[..8]).map_err(|e| ArrayError::from_io(".npy header", e))?;
    if &pre[..6] != b"\x93NUMPY" {
        return Err(ArrayError::new("not .npy bytes (no \\x93NUMPY magic)"));
    }
    let (pre_len, len) = match pre[6] {
        1 => {
            r.read_exact(&mut pre[8..10]).map_err(|e| ArrayError::from_io(".npy header", e))?;
            (10, u16::from_le_bytes([pre[8], pre[9]]) as usize)
        }
        2 | 3 => {
            r.read_exact(&mut pre[8..12]).map_err(|e| ArrayError::from_io(".npy header", e))?;
            (12, u32::from_le_bytes([pre[8], pre[9], pre[10], pre[11]]) as usize)
        }
        v => return Err(ArrayError::new(format!(".npy format version {v}: expected 1, 2 or 3"))),
    };
    if len > MAX_NPY_HEADER {
        return Err(ArrayError::new(format!(".npy header of {len} bytes: at most {MAX_NPY_HEADER} accepted")));
    }
    let mut text = vec![0u8; len];
    r.read_exact(&mut text).map_err(|e| ArrayError::from_io(".npy header", e))?;
    // The header is a Python dict literal; npyz's parser recurses on nesting, so deep nesting
    // (only ever in a damaged file) is refused here rather than risking the stack.
    if text.iter().filter(|b| matches!(b, b'(' | b'[' | b'{')).count() > 16 {
        return Err(ArrayError::new(".npy header is not a plain {'descr', 'fortran_order', 'shape'} dict"));
    }
    // npyz multiplies the dimensions unchecked (the element count and the strides): a shape
    // whose product overflows is refused before it gets there.
    if let Some(why) = shape_overflows(&text) {
        return Err(ArrayError::new(format!(".npy header: {why}")));
    }
    let whole = io::Cursor::new(pre[..pre_len].to_vec()).chain(io::Cursor::new(text));
    npyz::NpyHeader::from_reader(whole).map_err(|e| ArrayError::new(format!(".npy header: {e}")))
}

/// Why the `shape` tuple of a `.npy` header text is unusable: a dimension beyond u64 or a
/// product of dimensions beyond u64. `None` when it is fine or not found (npyz then decides).
fn shape_overflows(text: &[u8]) -> Option<String> {
    let t = std::str::from_utf8(text).ok()?;
    let at = t.find("'shape'").or_else(|| t.find("\"shape\""))?;
    let rest = &t[at..];
    let open = rest.find('(')?;
    let close = open + rest[open..].find(')')?;
    let mut product: u64 = 1;
    for d in rest[open + 1..close].split(',').map(str::trim).filter(|d| !d.is_empty()) {
        if !d.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        let Ok(v) = d.parse::<u64>() else {
            return Some(format!("shape dimension {} is too large", crate::input::echo(d)));
        };
        product = match product.checked_mul(v) {
            Some(p) => p,
            None => return Some("the shape's element count exceeds 2^64".to_string()),
        };
    }
    None
}

/// Reads rows of `shape` (a known number, or until the end for raw bytes), passing the wanted
/// ones to `on_row`. Returns the rows read.
fn read_rows(
    r: &mut impl Read,
    elem: Elem,
    rows: Option<u64>,
    shape: Shape,
    request: u64,
    wants: &Wants,
    on_row: &mut OnRow<'_>,
) -> Result<u64, ArrayError> {
    let per_row = shape.layers * shape.index_topk;
    let mut buf = vec![0u8; per_row * elem.size()];
    let mut vals: Vec<i64> = Vec::with_capacity(per_row);
    let mut row = 0u64;
    loop {
        if rows.is_some_and(|n| row >= n) {
            return Ok(row);
        }
        let got = fill(r, &mut buf).map_err(|e| ArrayError::from_io(&format!("row {row}"), e))?;
        if got < buf.len() {
            if rows.is_some() {
                return Err(ArrayError::new(format!("row {row}: the data ends early (truncated?)")));
            }
            if got == 0 {
                return Ok(row);
            }
            let values = (row as u128 * buf.len() as u128 + got as u128) as f64 / 4.0;
            return Err(ArrayError::new(format!(
                "{values} int32 values: not a multiple of layers × index_topk = {} × {} = {per_row} (shape (rows, layers, index_topk) expected; check --layers and --index-topk)",
                shape.layers, shape.index_topk
            )));
        }
        if let Some(lines) = wants.get(&(request, row)) {
            vals.clear();
            match elem {
                Elem::I32 => {
                    vals.extend(buf.chunks_exact(4).map(|c| i64::from(i32::from_le_bytes([c[0], c[1], c[2], c[3]]))))
                }
                Elem::I64 => vals.extend(
                    buf.chunks_exact(8).map(|c| i64::from_le_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]])),
                ),
            }
            on_row(lines, request, row, &vals).map_err(|e| ArrayError::new(e.message))?;
        }
        row += 1;
    }
}

/// Reads until `buf` is full or the stream ends; the bytes read.
fn fill(r: &mut impl Read, buf: &mut [u8]) -> io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match r.read(&mut buf[n..]) {
            Ok(0) => break,
            Ok(m) => n += m,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(n)
}

fn read_npz(
    r: BufReader<std::fs::File>,
    name: &str,
    shape: Shape,
    wants: &Wants,
    on_row: &mut OnRow<'_>,
) -> Result<FileInfo, CaptureError> {
    let mut zip = zip::ZipArchive::new(r)
        .map_err(|e| CaptureError::input(format!("{name}: not a complete .npz (zip) archive: {e} (truncated?)")))?;
    let names: Vec<String> = zip.file_names().take(9).map(str::to_string).collect();
    let entry = zip.by_name("topk_index.npy").map_err(|e| {
        if !matches!(e, zip::result::ZipError::FileNotFound) {
            // The member is there but cannot be opened: say why (a bzip2 or lzma member, which
            // np.savez never writes, reads "compression method not supported"), as import scores does.
            let why = crate::error::one_line(&e.to_string());
            return CaptureError::input(format!(
                "{name}: topk_index.npy: {why}: save the capture with np.savez or np.savez_compressed (stored or deflate members)"
            ));
        }
        let mut shown = names.iter().take(8).map(|n| crate::input::echo(n).into_owned()).collect::<Vec<_>>().join(", ");
        if names.len() > 8 {
            shown.push_str(", …");
        }
        CaptureError::input(format!("{name}: the .npz has no `topk_index` array (it holds: {})", if shown.is_empty() { "nothing" } else { &shown }))
    })?;
    let mut r = BufReader::with_capacity(BUF, entry);
    let rows =
        read_npy(&mut r, shape, 0, wants, on_row).map_err(|m| m.in_file(&format!("{name} (topk_index)"), None))?;
    Ok(FileInfo { layout: Layout::Npz, rows: vec![rows] })
}

fn read_json(
    r: BufReader<std::fs::File>,
    name: &str,
    shape: Shape,
    wants: &Wants,
    on_row: &mut OnRow<'_>,
) -> Result<FileInfo, CaptureError> {
    let mut scanner = Scanner::new(r);
    let mut rows: Vec<u64> = Vec::new();
    let mut layout: Option<Layout> = None;
    let n = scanner.scan(
        |request, origin, chars| {
            let mut dec = base64::read::DecoderReader::new(chars, &STANDARD);
            let mut head = [0u8; 6];
            let got =
                fill(&mut dec, &mut head).map_err(|e| ArrayError::from_io("start", e).in_file(name, Some(request)))?;
            let npy = match origin {
                Origin::MetaInfo => false,
                Origin::Choices => true,
                Origin::Unknown => &head[..got] == b"\x93NUMPY",
            };
            layout.get_or_insert(if npy { Layout::Vllm } else { Layout::Sglang });
            let mut whole = io::Cursor::new(&head[..got]).chain(dec);
            let n = if npy {
                read_npy(&mut whole, shape, request, wants, on_row)
            } else {
                read_rows(&mut whole, Elem::I32, None, shape, request, wants, on_row)
            }
            .map_err(|m| m.in_file(name, Some(request)))?;
            rows.push(n);
            Ok(())
        },
        |e| match e.io {
            Some(io) => CaptureError::io(format!("{name}: byte {}: {}", e.offset, e.message), &io),
            None => CaptureError::input(format!("{name}: byte {}: {} (not a JSON reply?)", e.offset, e.message)),
        },
    )?;
    if n == 0 {
        return Err(CaptureError::input(format!(
            "{name}: JSON without an `indexer_topk` string: not an SGLang reply (meta_info.indexer_topk; start the server with --enable-return-indexer-topk and send return_indexer_topk: true) or a vLLM reply (choices[i].indexer_topk)"
        )));
    }
    Ok(FileInfo { layout: layout.unwrap_or(Layout::Sglang), rows })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shapes_that_overflow_are_refused_before_npyz() {
        assert_eq!(shape_overflows(b"{'descr': '<i4', 'fortran_order': False, 'shape': (2, 3, 4), }"), None);
        assert!(shape_overflows(b"{'shape': (4294967296, 4294967296, 2), }").unwrap().contains("exceeds"));
        assert!(shape_overflows(b"{'shape': (99999999999999999999999,), }").unwrap().contains("too large"));
        assert_eq!(shape_overflows(b"{'descr': '<i4'}"), None);
    }
}
