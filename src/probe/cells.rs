//! The cells a probe measures: a grid from `--context-len`, `--depth`, `--repeat` and `--trials`,
//! or the rows of a `dsa-sim plan --out` file.

use super::ProbeError;
use crate::scenario::{parse_suffixed_count, Field};

/// One cell: `trials` needle prompts of `context_len` tokens (the server's count, within ±1%),
/// the needle at `depth`, `repeat` copies of it.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Cell {
    /// Target prompt length in tokens (the server's own count).
    pub context_len: u64,
    /// Target needle depth in [0, 1] (docs/model.md#geometry).
    pub depth: f64,
    /// Needle copies.
    pub repeat: u32,
    /// Prompts to send.
    pub trials: u64,
    /// The k a planned cell was planned at (`plan --out`), if any.
    pub index_topk: Option<u64>,
}

/// Fewest tokens a cell may ask for (the question and the needle alone take about 60).
pub(crate) const MIN_CONTEXT: u64 = 256;
/// Most tokens a cell may ask for.
pub(crate) const MAX_CONTEXT: u64 = 1 << 24;
/// Most trials per cell.
pub(crate) const MAX_TRIALS: u64 = 1_000_000;
/// Most needle copies.
pub(crate) const MAX_REPEAT: u32 = 64;
/// Most cells.
pub(crate) const MAX_CELLS: usize = 100_000;

fn check_len(flag: &str, l: u64) -> Result<u64, ProbeError> {
    if !(MIN_CONTEXT..=MAX_CONTEXT).contains(&l) {
        return Err(ProbeError::input(format!("{flag} {l}: allowed {MIN_CONTEXT}..={MAX_CONTEXT} tokens")));
    }
    Ok(l)
}

/// Parses `--context-len`: a list and ranges as sweep axes take them (`2K..64K:x2`, `4096,8192`,
/// `1Ki..8Ki:4`); `K` is 1000, `Ki` 1024.
pub fn parse_lengths(spec: &str) -> Result<Vec<u64>, ProbeError> {
    let texts = crate::sweep::parse_values(Field::ContextLen, spec)
        .map_err(|e| ProbeError::input(format!("--context-len {spec}: {e}")))?;
    let mut out = Vec::with_capacity(texts.len());
    for t in texts {
        let v = match parse_suffixed_count(t.trim()) {
            Some(Ok(v)) => v,
            Some(Err(why)) => return Err(ProbeError::input(format!("--context-len {t}: {why}"))),
            None => t
                .trim()
                .parse::<f64>()
                .ok()
                .filter(|x| x.is_finite() && *x >= 0.0 && x.fract() == 0.0)
                .map(|x| x as u64)
                .ok_or_else(|| {
                    ProbeError::input(format!("--context-len {t}: expected a token count such as 4096 or 16K"))
                })?,
        };
        out.push(check_len("--context-len", v)?);
    }
    Ok(out)
}

/// Parses `--depth`: values and ranges in [0, 1] (`0.1,0.5,0.9`, `0..1:5`).
pub fn parse_depths(spec: &str) -> Result<Vec<f64>, ProbeError> {
    let texts = crate::sweep::parse_values(Field::Depth, spec)
        .map_err(|e| ProbeError::input(format!("--depth {spec}: {e}")))?;
    texts
        .iter()
        .map(|t| {
            let d: f64 =
                t.trim().parse().map_err(|_| ProbeError::input(format!("--depth {t}: expected a number in 0..=1")))?;
            if !(0.0..=1.0).contains(&d) {
                return Err(ProbeError::input(format!("--depth {t}: allowed 0..=1")));
            }
            Ok(d)
        })
        .collect()
}

/// Parses a comma-separated list of positive integers for `flag` (`--repeat 1,8`,
/// `--concurrency 1,8`), each at most `max`.
pub fn parse_counts(flag: &str, spec: &str, max: u64) -> Result<Vec<u64>, ProbeError> {
    let texts = crate::sweep::parse_values(Field::Repeat, spec)
        .map_err(|e| ProbeError::input(format!("{flag} {spec}: {e}")))?;
    let mut out = Vec::new();
    for t in texts {
        let v: u64 = t
            .trim()
            .parse()
            .map_err(|_| ProbeError::input(format!("{flag} {t}: expected a whole number 1..={max}")))?;
        if v == 0 || v > max {
            return Err(ProbeError::input(format!("{flag} {t}: allowed 1..={max}")));
        }
        if !out.contains(&v) {
            out.push(v);
        }
    }
    Ok(out)
}

/// The grid: every length × depth × repeat, `trials` each, in that order.
pub fn grid(lengths: &[u64], depths: &[f64], repeats: &[u64], trials: u64) -> Result<Vec<Cell>, ProbeError> {
    if trials == 0 || trials > MAX_TRIALS {
        return Err(ProbeError::input(format!("--trials {trials}: allowed 1..={MAX_TRIALS}")));
    }
    let n = lengths.len() * depths.len() * repeats.len();
    if n > MAX_CELLS {
        return Err(ProbeError::input(format!("{n} cells: at most {MAX_CELLS}")));
    }
    let mut cells = Vec::with_capacity(n);
    for &l in lengths {
        for &d in depths {
            for &r in repeats {
                cells.push(Cell { context_len: l, depth: d, repeat: r as u32, trials, index_topk: None });
            }
        }
    }
    Ok(cells)
}

/// A cells file's CSV reader over its text (comment lines removed).
type CellsReader = csv::Reader<std::io::Cursor<Vec<u8>>>;

/// A cells file's CSV reader past its header, and the header's names normalised (lower case,
/// `-` and spaces as `_`); `#` comment lines and a byte-order mark are skipped.
fn cells_reader(text: &str, name: &str) -> Result<(CellsReader, Vec<String>), ProbeError> {
    let body: String = text
        .trim_start_matches('\u{feff}')
        .lines()
        .filter(|l| !l.trim_start().starts_with('#'))
        .map(|l| format!("{l}\n"))
        .collect();
    let mut r = csv::ReaderBuilder::new()
        .trim(csv::Trim::All)
        .flexible(false)
        .from_reader(std::io::Cursor::new(body.into_bytes()));
    let header: Vec<String> = r
        .headers()
        .map_err(|e| ProbeError::input(format!("{name}: {e}")))?
        .iter()
        .map(|h| h.to_ascii_lowercase().replace(['-', ' '], "_"))
        .collect();
    Ok((r, header))
}

/// Reads the cells of a `dsa-sim plan --out` file: `context_len,index_topk,depth,repeat,trials`
/// (`#` comment lines, any column order; `index_topk`, `depth` and `repeat` optional, 0.5 and 1
/// by default; `trials` required unless `default_trials` is given).
pub fn parse_cells_csv(text: &str, name: &str, default_trials: Option<u64>) -> Result<Vec<Cell>, ProbeError> {
    let (mut r, header) = cells_reader(text, name)?;
    let col = |c: &str| header.iter().position(|h| h == c);
    let Some(ci) = col("context_len") else {
        return Err(ProbeError::input(format!("{name}: no context_len column (the header has: {}); expected the cells `dsa-sim plan --out` writes: context_len,index_topk,depth,repeat,trials", header.join(","))));
    };
    let (ki, di, ri, ti) = (col("index_topk"), col("depth"), col("repeat"), col("trials"));
    if ti.is_none() && default_trials.is_none() {
        return Err(ProbeError::input(format!("{name}: no trials column: give --trials N for every cell")));
    }
    let mut cells = Vec::new();
    for (i, rec) in r.records().enumerate() {
        let row = i + 1;
        let rec = rec.map_err(|e| ProbeError::input(format!("{name}: row {row}: {e}")))?;
        if rec.iter().all(|f| f.is_empty()) {
            continue;
        }
        let cell_err = |c: &str, m: String| ProbeError::input(format!("{name}: row {row}, column `{c}`: {m}"));
        let int = |c: &str, t: &str| -> Result<u64, ProbeError> {
            match parse_suffixed_count(t) {
                Some(Ok(v)) => Ok(v),
                Some(Err(why)) => Err(cell_err(c, why)),
                None => t.parse::<u64>().map_err(|_| cell_err(c, format!("`{t}` is not a whole number"))),
            }
        };
        let l = int("context_len", &rec[ci])?;
        check_len("context_len", l).map_err(|e| cell_err("context_len", e.message))?;
        let k = match ki.map(|k| &rec[k]).filter(|t| !t.is_empty()) {
            Some(t) => Some(int("index_topk", t)?)
                .filter(|&k| k > 0)
                .map(Some)
                .ok_or_else(|| cell_err("index_topk", "allowed ≥ 1".into()))?,
            None => None,
        };
        let d = match di.map(|d| &rec[d]).filter(|t| !t.is_empty()) {
            Some(t) => t
                .parse::<f64>()
                .ok()
                .filter(|d| (0.0..=1.0).contains(d))
                .ok_or_else(|| cell_err("depth", format!("`{t}`: allowed 0..=1")))?,
            None => 0.5,
        };
        let rep = match ri.map(|x| &rec[x]).filter(|t| !t.is_empty()) {
            Some(t) => {
                let v = int("repeat", t)?;
                if v == 0 || v > MAX_REPEAT as u64 {
                    return Err(cell_err("repeat", format!("{v}: allowed 1..={MAX_REPEAT}")));
                }
                v as u32
            }
            None => 1,
        };
        let trials = match (ti.map(|x| &rec[x]).filter(|t| !t.is_empty()), default_trials) {
            (_, Some(t)) if ti.is_none() => t,
            (Some(t), _) => int("trials", t)?,
            (None, Some(t)) => t,
            (None, None) => return Err(cell_err("trials", "empty: give a count".into())),
        };
        if trials == 0 || trials > MAX_TRIALS {
            return Err(cell_err("trials", format!("{trials}: allowed 1..={MAX_TRIALS}")));
        }
        cells.push(Cell { context_len: l, depth: d, repeat: rep, trials, index_topk: k });
        if cells.len() > MAX_CELLS {
            return Err(ProbeError::input(format!("{name}: more than {MAX_CELLS} cells")));
        }
    }
    if cells.is_empty() {
        return Err(ProbeError::input(format!("{name}: no cells (a header and no rows)")));
    }
    Ok(cells)
}

/// The columns of a cells file that are not a cell's own (context_len, index_topk, depth, repeat,
/// trials): the table's conditions `plan --out` carries over, each with the union of its rows'
/// `|`-separated values, in column order (`prefix_cache` miss|hit, `concurrency` 1|8, `build`
/// fork). Columns without a value are left out.
pub(crate) fn parse_cells_conditions(text: &str, name: &str) -> Result<Vec<(String, Vec<String>)>, ProbeError> {
    let (mut r, header) = cells_reader(text, name)?;
    const OWN: &[&str] = &["context_len", "index_topk", "depth", "repeat", "trials"];
    let cols: Vec<usize> = (0..header.len()).filter(|&i| !OWN.contains(&header[i].as_str())).collect();
    let mut out: Vec<(String, Vec<String>)> = cols.iter().map(|&i| (header[i].clone(), Vec::new())).collect();
    for (row, rec) in r.records().enumerate() {
        let rec = rec.map_err(|e| ProbeError::input(format!("{name}: row {}: {e}", row + 1)))?;
        for (j, &i) in cols.iter().enumerate() {
            for v in rec.get(i).unwrap_or("").split('|').map(str::trim).filter(|v| !v.is_empty()) {
                if !out[j].1.iter().any(|x| x == v) {
                    out[j].1.push(v.to_string());
                }
            }
        }
    }
    out.retain(|(_, v)| !v.is_empty());
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lengths_ranges_and_suffixes() {
        assert_eq!(parse_lengths("2K..64K:x2").unwrap(), [2000, 4000, 8000, 16000, 32000, 64000]);
        assert_eq!(parse_lengths("1Ki,4096").unwrap(), [1024, 4096]);
        assert!(parse_lengths("10").unwrap_err().message.contains("allowed"));
        assert!(parse_lengths("abc").is_err());
        assert_eq!(parse_depths("0.1,0.5,0.9").unwrap(), [0.1, 0.5, 0.9]);
        assert!(parse_depths("1.5").is_err());
        assert_eq!(parse_counts("--repeat", "1,8", 64).unwrap(), [1, 8]);
        assert!(parse_counts("--repeat", "0", 64).is_err());
    }

    #[test]
    fn plan_cells_read() {
        let t = "# provenance: planned by dsa-sim plan from x.csv (budget 10); cells to measure, no results yet: add a hits column\ncontext_len,index_topk,depth,repeat,trials\n16000,512,0.9,1,40\n4003,256,0.1,1,60\n";
        let c = parse_cells_csv(t, "cells.csv", None).unwrap();
        assert_eq!(c.len(), 2);
        assert_eq!(c[1], Cell { context_len: 4003, depth: 0.1, repeat: 1, trials: 60, index_topk: Some(256) });
        assert!(parse_cells_csv("context_len,depth\n1000,0.5\n", "c", None).unwrap_err().message.contains("trials"));
        assert!(parse_cells_csv("context_len,trials\n1000,x\n", "c", None).unwrap_err().message.contains("row 1"));
        let t = "context_len,index_topk,depth,repeat,trials,prefix_cache,build\n16000,512,0.9,1,40,miss|hit,fork\n";
        let c = parse_cells_conditions(t, "cells.csv").unwrap();
        assert_eq!(
            c,
            [
                ("prefix_cache".to_string(), vec!["miss".to_string(), "hit".to_string()]),
                ("build".to_string(), vec!["fork".to_string()])
            ]
        );
        assert!(parse_cells_conditions("context_len,trials\n1000,3\n", "c").unwrap().is_empty());
    }
}
