//! Measured recall tables to overlay on figures (docs/cli.md#measured-data-csv), with Wilson
//! intervals.

use std::path::Path;

/// One measured cell.
#[derive(Debug, Clone, PartialEq)]
pub struct MeasuredRow {
    /// Context length (tokens).
    pub context_len: u64,
    /// index_topk.
    pub index_topk: u64,
    /// Trials.
    pub trials: u64,
    /// Successes.
    pub hits: u64,
    /// Needle depth, if given.
    pub depth: Option<f64>,
    /// Needle copies, if given.
    pub repeat: Option<u64>,
    /// Compression ratio, if given.
    pub compress_ratio: Option<u64>,
    /// Window, if given.
    pub window: Option<u64>,
    /// Free text.
    pub label: String,
}

impl MeasuredRow {
    /// Observed recall hits / trials.
    pub fn recall(&self) -> f64 {
        self.hits as f64 / self.trials as f64
    }
    /// The Wilson 95% interval of the observed recall.
    pub fn interval(&self) -> (f64, f64) {
        wilson(self.hits, self.trials)
    }
}

/// Wilson score 95% interval for `hits` successes out of `trials`.
pub fn wilson(hits: u64, trials: u64) -> (f64, f64) {
    if trials == 0 {
        return (0.0, 1.0);
    }
    let z = 1.959_963_984_540_054_f64;
    let n = trials as f64;
    let p = hits as f64 / n;
    let d = 1.0 + z * z / n;
    let c = (p + z * z / (2.0 * n)) / d;
    let h = z * (p * (1.0 - p) / n + z * z / (4.0 * n * n)).sqrt() / d;
    ((c - h).max(0.0), (c + h).min(1.0))
}

/// Loads a measured table: a header in any column order (required `context_len, index_topk,
/// trials, hits`; optional `depth, repeat, compress_ratio, window, label`; others ignored), CRLF
/// or LF, spaces around values. Errors name the file, the line and the column.
pub fn load_measured(path: &Path) -> Result<Vec<MeasuredRow>, String> {
    let text = crate::input::read_to_string(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    parse_measured(&text).map_err(|e| format!("{}: {e}", path.display()))
}

/// Parses the text of a measured table (see [`load_measured`]).
pub fn parse_measured(text: &str) -> Result<Vec<MeasuredRow>, String> {
    let mut rdr = csv::ReaderBuilder::new().trim(csv::Trim::All).flexible(true).from_reader(text.as_bytes());
    let header: Vec<String> = rdr
        .headers()
        .map_err(|e| format!("bad header: {e}"))?
        .iter()
        .map(|h| h.trim().trim_start_matches('\u{feff}').to_ascii_lowercase())
        .collect();
    let col = |name: &str| header.iter().position(|h| h == name);
    let req = |name: &str| col(name).ok_or_else(|| format!("missing column `{name}` (required: context_len, index_topk, trials, hits)"));
    let (ci, ki, ti, hi) = (req("context_len")?, req("index_topk")?, req("trials")?, req("hits")?);
    let (di, ri, cri, wi, li) = (col("depth"), col("repeat"), col("compress_ratio"), col("window"), col("label"));
    let mut rows = Vec::new();
    for (n, rec) in rdr.records().enumerate() {
        let line = n + 2;
        let rec = rec.map_err(|e| format!("line {line}: {e}"))?;
        if rec.iter().all(|f| f.is_empty()) {
            continue;
        }
        let get = |i: usize| rec.get(i).unwrap_or("");
        let int = |i: usize, name: &str| -> Result<u64, String> {
            let t = get(i);
            t.parse::<u64>()
                .ok()
                .or_else(|| t.parse::<f64>().ok().filter(|x| *x >= 0.0 && x.fract() == 0.0 && *x < 1.8e19).map(|x| x as u64))
                .ok_or_else(|| format!("line {line}: {name} = {t:?}: expected a non-negative integer"))
        };
        let opt_int = |i: Option<usize>, name: &str| -> Result<Option<u64>, String> {
            match i {
                Some(i) if !get(i).is_empty() => int(i, name).map(Some),
                _ => Ok(None),
            }
        };
        let row = MeasuredRow {
            context_len: int(ci, "context_len")?,
            index_topk: int(ki, "index_topk")?,
            trials: int(ti, "trials")?,
            hits: int(hi, "hits")?,
            depth: match di {
                Some(i) if !get(i).is_empty() => {
                    let t = get(i);
                    Some(t.parse::<f64>().ok().filter(|d| (0.0..=1.0).contains(d)).ok_or_else(|| {
                        format!("line {line}: depth = {t:?}: expected a number in 0..=1")
                    })?)
                }
                _ => None,
            },
            repeat: opt_int(ri, "repeat")?,
            compress_ratio: opt_int(cri, "compress_ratio")?,
            window: opt_int(wi, "window")?,
            label: li.map(|i| get(i).to_string()).unwrap_or_default(),
        };
        if row.trials == 0 || row.hits > row.trials {
            return Err(format!(
                "line {line}: hits = {}, trials = {}: need trials ≥ 1 and hits ≤ trials",
                row.hits, row.trials
            ));
        }
        if row.context_len == 0 || row.index_topk == 0 {
            return Err(format!("line {line}: context_len and index_topk must be ≥ 1"));
        }
        rows.push(row);
    }
    if rows.is_empty() {
        return Err("no data rows".into());
    }
    Ok(rows)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_any_column_order_and_crlf() {
        let t = "hits, trials ,context_len,index_topk,label,extra\r\n 9,10,1000,512,ok,x\r\n\r\n0,10,8000,512,lost,y\r\n";
        let r = parse_measured(t).unwrap();
        assert_eq!(r.len(), 2);
        assert_eq!((r[0].context_len, r[0].hits, r[0].label.as_str()), (1000, 9, "ok"));
        let (lo, hi) = r[1].interval();
        assert!(lo == 0.0 && (hi - 0.2775).abs() < 1e-3, "{hi}");
    }

    #[test]
    fn bad_rows_name_the_line() {
        let e = parse_measured("context_len,index_topk,trials,hits\n1000,512,10,11\n").unwrap_err();
        assert!(e.contains("line 2"), "{e}");
        let e = parse_measured("context_len,index_topk,trials\n1000,512,10\n").unwrap_err();
        assert!(e.contains("hits"), "{e}");
        let e = parse_measured("context_len,index_topk,trials,hits\n1000,abc,10,1\n").unwrap_err();
        assert!(e.contains("index_topk") && e.contains("abc"), "{e}");
    }
}
