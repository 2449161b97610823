//! Reading captured scores from `.npz` archives (docs/capture.md#captured-scores).
//!
//! Two layouts, told apart by the arrays' names:
//! - **one layer**: `scores` (float32 or float64, queries × candidates: one row per query, that
//!   query's candidates) and `needle_index` (any integer type, one per query);
//! - **per layer** (what HF transformers' DeepSeek-V3.2 returns with `output_indexer_scores`,
//!   one tensor per layer, saved one array per layer): `indexer_scores_0`, `indexer_scores_1`, …
//!   (each queries × candidates, a leading batch axis of 1 allowed) and `needle_index`, shared
//!   by the layers.
//!
//! The archive is opened with the `zip` crate and each member parsed by `npyz`; nothing is
//! parsed by hand. Arrays are checked against [`MAX_SCORES`] from their headers before any data
//! is read, so a forged shape cannot make the reader allocate beyond it.

use super::{CapturedScores, LayerScores, QueryScores, ScoresError};
use npyz::{DType, NpyFile, Order, TypeChar};
use std::io::Read;
use std::path::Path;

/// Most scores a capture may hold (all layers): 2^26, half a gigabyte as f64.
pub const MAX_SCORES: u64 = 1 << 26;

/// An array read from the archive: its shape and values.
struct Array<T> {
    shape: Vec<u64>,
    values: Vec<T>,
}

fn err(path: &Path, msg: impl std::fmt::Display) -> ScoresError {
    ScoresError(format!("{}: {msg}", path.display()))
}

/// The member `name` of the archive, parsed as an .npy file.
fn member<'a, R: Read + std::io::Seek>(
    path: &Path,
    zip: &'a mut zip::ZipArchive<R>,
    name: &str,
) -> Result<Option<NpyFile<zip::read::ZipFile<'a, R>>>, ScoresError> {
    let file = match zip.by_name(&format!("{name}.npy")) {
        Ok(f) => f,
        Err(zip::result::ZipError::FileNotFound) => return Ok(None),
        Err(e) => {
            return Err(err(
                path,
                format!("{name}.npy: {}: save the capture with numpy.savez or numpy.savez_compressed (stored or deflate members)", crate::error::one_line(&e.to_string())),
            ))
        }
    };
    // The header goes through the capture reader's checks first (its size, its nesting, a
    // shape whose element count overflows: npyz would allocate or multiply unchecked).
    let mut file = file;
    let header = crate::import::topk::read::npy_header(&mut file)
        .map_err(|e| err(path, format!("{name}: not a valid .npy member ({e})")))?;
    let npy = NpyFile::with_header(header, file);
    if npy.order() == Order::Fortran {
        return Err(err(path, format!("{name}: Fortran-ordered array; save it C-ordered (np.ascontiguousarray)")));
    }
    Ok(Some(npy))
}

fn type_of(dtype: &DType) -> Option<(TypeChar, u64)> {
    match dtype {
        DType::Plain(t) => Some((t.type_char(), t.size_field())),
        _ => None,
    }
}

fn floats<R: Read>(path: &Path, name: &str, npy: NpyFile<R>, budget: &mut u64) -> Result<Array<f64>, ScoresError> {
    let shape = npy.shape().to_vec();
    let len = npy.len();
    if len > *budget {
        return Err(err(path, format!("{name}: {len} scores exceed the reader's bound of {MAX_SCORES} in all")));
    }
    *budget -= len;
    let values: Vec<f64> = match type_of(&npy.dtype()) {
        Some((TypeChar::Float, 4)) => npy.into_vec::<f32>().map(|v| v.into_iter().map(f64::from).collect()),
        Some((TypeChar::Float, 8)) => npy.into_vec::<f64>(),
        _ => return Err(err(path, format!("{name}: dtype {} is not float32 or float64", npy.dtype().descr()))),
    }
    .map_err(|e| err(path, format!("{name}: truncated or unreadable data ({e})")))?;
    Ok(Array { shape, values })
}

fn integers<R: Read>(path: &Path, name: &str, npy: NpyFile<R>) -> Result<Array<i64>, ScoresError> {
    let shape = npy.shape().to_vec();
    if npy.len() > MAX_SCORES {
        return Err(err(path, format!("{name}: {} values exceed the reader's bound", npy.len())));
    }
    let e = |e: std::io::Error| err(path, format!("{name}: truncated or unreadable data ({e})"));
    let widen = |v: Vec<u64>| -> Vec<i64> { v.into_iter().map(|x| i64::try_from(x).unwrap_or(i64::MAX)).collect() };
    let values = match type_of(&npy.dtype()) {
        Some((TypeChar::Int, 1)) => npy.into_vec::<i8>().map_err(e)?.into_iter().map(i64::from).collect(),
        Some((TypeChar::Int, 2)) => npy.into_vec::<i16>().map_err(e)?.into_iter().map(i64::from).collect(),
        Some((TypeChar::Int, 4)) => npy.into_vec::<i32>().map_err(e)?.into_iter().map(i64::from).collect(),
        Some((TypeChar::Int, 8)) => npy.into_vec::<i64>().map_err(e)?,
        Some((TypeChar::Uint, 1)) => npy.into_vec::<u8>().map_err(e)?.into_iter().map(i64::from).collect(),
        Some((TypeChar::Uint, 2)) => npy.into_vec::<u16>().map_err(e)?.into_iter().map(i64::from).collect(),
        Some((TypeChar::Uint, 4)) => npy.into_vec::<u32>().map_err(e)?.into_iter().map(i64::from).collect(),
        Some((TypeChar::Uint, 8)) => widen(npy.into_vec::<u64>().map_err(e)?),
        _ => return Err(err(path, format!("{name}: dtype {} is not an integer type", npy.dtype().descr()))),
    };
    Ok(Array { shape, values })
}

/// (queries, candidates) of a scores array: 2-D, or 3-D with a batch axis of 1.
fn rows_cols(path: &Path, name: &str, shape: &[u64]) -> Result<(usize, usize), ScoresError> {
    match shape {
        [q, c] | [1, q, c] => Ok((*q as usize, *c as usize)),
        _ => {
            Err(err(path, format!("{name}: shape {shape:?} is not (queries, candidates) or (1, queries, candidates)")))
        }
    }
}

/// Reads a capture of scores.
pub fn read_file(path: &Path) -> Result<CapturedScores, ScoresError> {
    let file = std::fs::File::open(path).map_err(|e| err(path, e))?;
    let mut zip = zip::ZipArchive::new(std::io::BufReader::new(file))
        .map_err(|e| err(path, format!("not an .npz archive ({e}); save the capture with numpy.savez")))?;
    let mut budget = MAX_SCORES;
    let needle = member(path, &mut zip, "needle_index")?
        .ok_or_else(|| err(path, "no `needle_index` array (one integer per query: the needle's candidate)"))?;
    let needle = integers(path, "needle_index", needle)?;
    if needle.shape.len() != 1 {
        return Err(err(path, format!("needle_index: shape {:?} is not (queries,)", needle.shape)));
    }
    let mut names: Vec<String> = Vec::new();
    if zip.file_names().any(|n| n == "scores.npy") {
        names.push("scores".into());
    } else {
        // A layer number is looked up as it is spelled here (`indexer_scores_{i}`), so a name
        // that parses to one but is spelled otherwise (`_00`, `_+1`) is refused, not guessed at.
        let mut per_layer: Vec<(usize, String)> = Vec::new();
        for n in zip.file_names() {
            let Some(digits) = n.strip_suffix(".npy").and_then(|m| m.strip_prefix("indexer_scores_")) else { continue };
            let numeric = digits.trim_start_matches(['+', '-']);
            if numeric.is_empty() || !numeric.bytes().all(|b| b.is_ascii_digit()) {
                continue; // another array (indexer_scores_meta): not a layer
            }
            match digits.parse::<usize>() {
                Ok(i) if i.to_string() == digits => per_layer.push((i, format!("indexer_scores_{i}"))),
                _ => {
                    return Err(err(
                        path,
                        format!(
                            "{}: not a per-layer array name: layers are named indexer_scores_0, indexer_scores_1, … (decimal, no sign or leading zeros)",
                            crate::input::echo(n)
                        ),
                    ))
                }
            }
        }
        per_layer.sort();
        if per_layer.is_empty() {
            return Err(err(
                path,
                "no `scores` array and no per-layer `indexer_scores_0`, `indexer_scores_1`, … arrays",
            ));
        }
        if let Some((i, _)) = per_layer.iter().enumerate().find(|(i, (l, _))| i != l) {
            return Err(err(
                path,
                format!("indexer_scores_{i} is missing (layers must be numbered 0, 1, … without gaps)"),
            ));
        }
        names = per_layer.into_iter().map(|(_, n)| n).collect();
    }
    let mut layers = Vec::with_capacity(names.len());
    for (l, name) in names.iter().enumerate() {
        let npy = member(path, &mut zip, name)?
            .ok_or_else(|| err(path, format!("{name}: listed in the archive but not readable by that name")))?;
        let a = floats(path, name, npy, &mut budget)?;
        let (rows, cols) = rows_cols(path, name, &a.shape)?;
        if cols < 3 {
            return Err(err(
                path,
                format!("{name}: {cols} candidates per query; a rank needs the needle and at least 2 distractors"),
            ));
        }
        if rows != needle.values.len() {
            return Err(err(path, format!("{name}: {rows} queries but needle_index has {}", needle.values.len())));
        }
        let mut queries = Vec::with_capacity(rows);
        for (q, row) in a.values.chunks_exact(cols.max(1)).take(rows).enumerate() {
            let ni = needle.values[q];
            let where_ = format!("{}: {name}, query {q}", path.display());
            if ni < 0 {
                return Err(ScoresError(format!("{where_}: needle_index {ni} is negative")));
            }
            queries.push(QueryScores::from_row(row, ni as usize, &where_)?);
        }
        if rows == 0 {
            return Err(err(path, format!("{name}: no queries")));
        }
        layers.push(LayerScores { layer: l, queries });
    }
    Ok(CapturedScores { layers })
}
