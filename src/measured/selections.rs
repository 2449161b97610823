//! Selection tables: one row per (request, layer) saying whether that layer's indexer selected
//! the needle, as `dsa-sim import topk` writes them
//! (`request,context_len,depth,layer,index_topk,selected`). They are read into the same
//! [`Dataset`] as recall tables, one [`Observation`] per cell (context_len, index_topk, depth):
//! `trials` the requests, `hits` those selected by at least one layer, and `layer_counts` how
//! many requests had exactly m of their layers select the needle, which is what the exact
//! likelihood of the layers' patterns needs (docs/model.md#selection-data).
//!
//! The facts the import used to find the needle's entries travel with each request
//! (`needle_start,needle_tokens,compress_ratio,overlap`, optional, constant per request): they
//! become the cell's own overrides, so the request's row scenario has its needle length, its
//! geometry and a depth that places the needle at exactly `needle_start`
//! ([`exact_depth`]).

use super::records::{clip, for_each_record, list, Lines, QUOTE_MAX};
use super::{Dataset, MeasuredError, Observation};
use crate::scenario::Field;
use std::collections::HashMap;

/// The columns a selection table must have.
pub(crate) const SELECTION_COLUMNS: &[&str] =
    &["request", Field::ContextLen.name(), Field::IndexTopk.name(), "layer", "selected"];

/// Most layers a selection table may have (DeepSeek-V3.2 has 61 indexer layers).
pub(crate) const MAX_LAYERS: u64 = 1024;

/// The depth d whose placement floor(d · (L − m)) (docs/model.md#geometry, as
/// `geometry::copy_starts` computes it in f64) is exactly `start`: start / room, moved by
/// one ulp at a time when the division rounded it to the other side of the integer.
pub(crate) fn exact_depth(start: u64, room: u64) -> f64 {
    if room == 0 {
        return 0.0;
    }
    let at = |d: f64| ((d * room as f64).floor() as u64).min(room);
    let mut d = (start as f64 / room as f64).min(1.0);
    for _ in 0..64 {
        match at(d).cmp(&start) {
            std::cmp::Ordering::Less => d = f64::from_bits(d.to_bits() + 1).min(1.0),
            std::cmp::Ordering::Greater if d > 0.0 => d = f64::from_bits(d.to_bits() - 1),
            _ => break,
        }
    }
    d
}

/// The per-request facts of an import (`None` for a column the table does not have).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct Facts {
    needle_start: Option<u64>,
    needle_tokens: Option<u64>,
    compress_ratio: Option<u64>,
    overlap: Option<bool>,
}

struct Request {
    context_len: u64,
    index_topk: u64,
    depth: Option<f64>,
    facts: Facts,
    /// Per layer: None until its row is read.
    selected: Vec<Option<bool>>,
    line: u64,
}

/// Reads the records of a selection table whose header has been read.
pub(super) fn parse_records(
    text: &str,
    src: &str,
    rdr: csv::Reader<&[u8]>,
    mut lines: Lines,
    header: &[String],
    header_line: u64,
) -> Result<Dataset, MeasuredError> {
    let col = |name: &str| header.iter().position(|h| h == name);
    let missing: Vec<&str> = SELECTION_COLUMNS.iter().copied().filter(|c| col(c).is_none()).collect();
    if !missing.is_empty() {
        return Err(MeasuredError::MissingColumns {
            source_name: src.to_string(),
            missing: missing.join(","),
            found: header.join(","),
        });
    }
    let at = |name: &str| col(name).unwrap_or(0);
    let (i_req, i_l, i_k, i_layer, i_sel) =
        (at("request"), at(Field::ContextLen.name()), at(Field::IndexTopk.name()), at("layer"), at("selected"));
    let i_d = col(Field::Depth.name());
    let (i_start, i_m, i_c, i_o) = (
        col("needle_start"),
        col(Field::NeedleTokens.name()),
        col(Field::CompressRatio.name()),
        col(Field::Overlap.name()),
    );
    let mut requests: Vec<(String, Request)> = Vec::new();
    let mut index: HashMap<String, usize> = HashMap::new();
    for_each_record(rdr, &mut lines, header.len(), header_line, src, |rec| {
        let cell_err = |column: &str, message: String| rec.err(column, message);
        let request = rec.get(i_req).to_string();
        if request.is_empty() {
            return Err(cell_err("request", "empty: every row names its request".into()));
        }
        let context_len = rec.int(i_l, Field::ContextLen.name())?;
        let index_topk = rec.int(i_k, Field::IndexTopk.name())?;
        if context_len == 0 || index_topk == 0 {
            let c = if context_len == 0 { Field::ContextLen.name() } else { Field::IndexTopk.name() };
            return Err(cell_err(c, "0: allowed ≥ 1".into()));
        }
        let layer = rec.int(i_layer, "layer")?;
        if layer >= MAX_LAYERS {
            return Err(cell_err("layer", format!("{layer}: allowed 0..{MAX_LAYERS}")));
        }
        let selected = match rec.get(i_sel).to_ascii_lowercase().as_str() {
            "1" | "true" => true,
            "0" | "false" => false,
            v => return Err(cell_err("selected", format!("`{}`: allowed 0, 1, true, false", clip(v, QUOTE_MAX)))),
        };
        let mut depth = rec.depth(i_d)?;
        let facts = Facts {
            needle_start: rec.opt_int(i_start, "needle_start")?,
            needle_tokens: rec.opt_int(i_m, Field::NeedleTokens.name())?,
            compress_ratio: rec.opt_int(i_c, Field::CompressRatio.name())?,
            overlap: match i_o.map(|i| rec.get(i).to_ascii_lowercase()) {
                None => None,
                Some(v) if v.is_empty() => None,
                Some(v) => Some(match v.as_str() {
                    "1" | "true" => true,
                    "0" | "false" => false,
                    _ => {
                        return Err(cell_err(
                            Field::Overlap.name(),
                            format!("`{}`: allowed true, false, 1, 0", clip(&v, QUOTE_MAX)),
                        ))
                    }
                }),
            },
        };
        if facts.needle_tokens == Some(0) || facts.compress_ratio == Some(0) {
            let c =
                if facts.needle_tokens == Some(0) { Field::NeedleTokens.name() } else { Field::CompressRatio.name() };
            return Err(cell_err(c, "0: allowed ≥ 1".into()));
        }
        if let Some(start) = facts.needle_start {
            let m = facts.needle_tokens.ok_or_else(|| {
                cell_err("needle_start", "needs a needle_tokens column (the needle's length places it)".into())
            })?;
            if start.checked_add(m).is_none_or(|end| end > context_len) {
                return Err(cell_err(
                    "needle_start",
                    format!("{start} with needle_tokens {m} ends past context_len {context_len}: the needle must lie inside the context"),
                ));
            }
            let room = context_len - m;
            let exact = exact_depth(start, room);
            if let Some(d) = depth {
                // The depth column is needle_start / (context_len − needle_tokens) as written.
                if room > 0 && (d - start as f64 / room as f64).abs() > 1e-9 {
                    return Err(cell_err(
                        Field::Depth.name(),
                        format!("{d} does not place the needle at needle_start {start} (needle_start / (context_len − needle_tokens) = {})", start as f64 / room as f64),
                    ));
                }
            }
            depth = Some(exact);
        }
        let r = match index.get(&request) {
            Some(&i) => &mut requests[i].1,
            None => {
                let i = requests.len();
                index.insert(request.clone(), i);
                requests.push((
                    request.clone(),
                    Request { context_len, index_topk, depth, facts, selected: Vec::new(), line: rec.line },
                ));
                &mut requests[i].1
            }
        };
        if (r.context_len, r.index_topk, r.depth.map(f64::to_bits), r.facts)
            != (context_len, index_topk, depth.map(f64::to_bits), facts)
        {
            return Err(cell_err(
                "request",
                format!(
                    "request `{}` changes its context_len, index_topk, depth, needle_start, needle_tokens, compress_ratio or overlap from line {}",
                    clip(&request, QUOTE_MAX),
                    r.line
                ),
            ));
        }
        let l = layer as usize;
        if r.selected.len() <= l {
            r.selected.resize(l + 1, None);
        }
        if r.selected[l].replace(selected).is_some() {
            return Err(cell_err("layer", format!("request `{}` has layer {layer} twice", clip(&request, QUOTE_MAX))));
        }
        Ok(())
    })?;
    if requests.is_empty() {
        return Err(MeasuredError::Empty(format!("{src}: no data rows after the header")));
    }
    // Every request must have the same layers, 0..L−1, each once.
    let layers = requests.iter().map(|(_, r)| r.selected.len()).max().unwrap_or(0);
    for (name, r) in &requests {
        if let Some(l) = (0..layers).find(|&l| r.selected.get(l).copied().flatten().is_none()) {
            return Err(MeasuredError::Cell {
                source_name: src.to_string(),
                row: 0,
                line: r.line,
                column: "layer".into(),
                message: format!(
                    "request `{}` has no row for layer {l} (every request needs layers 0..{})",
                    clip(name, QUOTE_MAX),
                    layers - 1
                ),
            });
        }
    }
    // One observation per cell, in order of first appearance.
    let mut cells: Vec<Observation> = Vec::new();
    let mut cell_of: HashMap<(u64, u64, Option<u64>, Facts), usize> = HashMap::new();
    for (_, r) in &requests {
        // needle_start is in the depth; the rest are the cell's own overrides.
        let key = (r.context_len, r.index_topk, r.depth.map(f64::to_bits), Facts { needle_start: None, ..r.facts });
        let i = *cell_of.entry(key).or_insert_with(|| {
            cells.push(Observation {
                context_len: r.context_len,
                index_topk: r.index_topk,
                trials: 0,
                hits: 0,
                depth: r.depth,
                repeat: None,
                compress_ratio: r.facts.compress_ratio,
                window: None,
                label: None,
                needle: None,
                needle_tokens: r.facts.needle_tokens,
                overlap: r.facts.overlap,
                layer_counts: Some(vec![0; layers + 1]),
                conditions: Vec::new(),
                line: r.line,
            });
            cells.len() - 1
        });
        let m = r.selected.iter().filter(|s| **s == Some(true)).count();
        let c = &mut cells[i];
        c.trials += 1;
        c.hits += (m > 0) as u64;
        c.layer_counts.as_mut().expect("every cell is built above with layer counts")[m] += 1;
    }
    let provenance = super::provenance::from_header(text);
    let transcribed = provenance.as_deref().is_some_and(super::provenance::says_transcribed);
    // As recall tables do: a column the reader does not use is named, so a misspelt one
    // (`depht`) is not lost silently.
    let extra: Vec<&str> = header
        .iter()
        .map(String::as_str)
        .filter(|h| !SELECTION_COLUMNS.contains(h) && *h != Field::Depth.name())
        .collect();
    let mut notes = Vec::new();
    if !extra.is_empty() {
        notes.push(format!(
            "ignored column(s) {} (known: {},{})",
            list(&extra, true),
            SELECTION_COLUMNS.join(","),
            Field::Depth.name()
        ));
    }
    notes.push(format!(
        "selection data: {} requests × {layers} layers in {} cells, fitted by the exact likelihood of the layers' selection patterns; a row's recall counts the requests some layer selected; predictions and verdicts use {layers} layers (readout as given)",
        requests.len(),
        cells.len()
    ));
    if let Some(p) = &provenance {
        notes.push(format!("provenance (header): {p}"));
    }
    Ok(Dataset { source: src.to_string(), rows: cells, notes, provenance, transcribed, condition_columns: Vec::new() })
}

#[cfg(test)]
mod tests {
    use crate::measured::parse_csv;

    #[test]
    fn requests_aggregate_into_cells_with_layer_counts() {
        let t = "request,context_len,depth,layer,index_topk,selected\n\
                 0,4096,0.5,0,512,1\n0,4096,0.5,1,512,0\n0,4096,0.5,2,512,1\n\
                 1,4096,0.5,0,512,0\n1,4096,0.5,1,512,0\n1,4096,0.5,2,512,0\n\
                 2,8192,0.5,2,512,1\n2,8192,0.5,1,512,true\n2,8192,0.5,0,512,1\n";
        let d = parse_csv(t, "sel.csv").unwrap();
        assert_eq!(d.rows.len(), 2);
        let (a, b) = (&d.rows[0], &d.rows[1]);
        assert_eq!((a.context_len, a.trials, a.hits, a.layer_counts.clone()), (4096, 2, 1, Some(vec![1, 0, 1, 0])));
        assert_eq!((b.context_len, b.trials, b.hits, b.layer_counts.clone()), (8192, 1, 1, Some(vec![0, 0, 0, 1])));
        assert_eq!(a.line, 2);
        assert!(d.notes[0].contains("3 requests × 3 layers in 2 cells"), "{:?}", d.notes);
    }

    #[test]
    fn the_imports_facts_become_the_cells_overrides() {
        use super::exact_depth;
        let t =
            "request,context_len,depth,layer,index_topk,selected,needle_start,needle_tokens,compress_ratio,overlap\n\
                 a,1000,0.5,0,64,1,496,8,4,true\na,1000,0.5,1,64,0,496,8,4,true\n\
                 b,1000,0.5,0,64,1,496,8,4,true\nb,1000,0.5,1,64,1,496,8,4,true\n\
                 c,3008,0.1,0,64,0,300,8,4,true\nc,3008,0.1,1,64,0,300,8,4,true\n";
        let d = parse_csv(t, "sel.csv").unwrap();
        assert_eq!(d.rows.len(), 2);
        let r = &d.rows[0];
        assert_eq!((r.trials, r.needle_tokens, r.compress_ratio, r.overlap), (2, Some(8), Some(4), Some(true)));
        // The row scenario places the needle at needle_start exactly.
        let s = r.apply(&crate::scenario::Scenario::default()).unwrap();
        assert_eq!(crate::geometry::Geometry::new(&s).copy_starts, vec![496]);
        assert_eq!((s.needle_tokens, s.compress_ratio, s.overlap), (8, 4, true));
        let s = d.rows[1].apply(&crate::scenario::Scenario::default()).unwrap();
        assert_eq!(crate::geometry::Geometry::new(&s).copy_starts, vec![300]);
        // exact_depth inverts the placement wherever the division rounds the wrong way.
        for room in [3u64, 7, 10, 49, 99, 1001, 98_765, (1 << 40) - 3] {
            for start in [0, 1, room / 3, room / 2, room - 1, room] {
                let d = exact_depth(start, room);
                assert_eq!(((d * room as f64).floor() as u64).min(room), start, "{start}/{room}");
                assert!((0.0..=1.0).contains(&d));
            }
        }
        let h =
            "request,context_len,depth,layer,index_topk,selected,needle_start,needle_tokens,compress_ratio,overlap\n";
        let e = parse_csv(&format!("{h}a,1000,0.5,0,64,1,496,8,4,true\na,1000,0.5,1,64,1,496,8,1,true\n"), "s.csv")
            .unwrap_err()
            .to_string();
        assert!(e.contains("changes its") && e.contains("line 3"), "{e}");
        let e = parse_csv(&format!("{h}a,1000,0.5,0,64,1,996,8,4,true\n"), "s.csv").unwrap_err().to_string();
        assert!(e.contains("ends past context_len 1000"), "{e}");
        let e = parse_csv(&format!("{h}a,1000,0.25,0,64,1,496,8,4,true\n"), "s.csv").unwrap_err().to_string();
        assert!(e.contains("does not place the needle at needle_start 496"), "{e}");
        let e = parse_csv(&format!("{h}a,1000,0.5,0,64,1,496,8,4,maybe\n"), "s.csv").unwrap_err().to_string();
        assert!(e.contains("`maybe`: allowed true, false"), "{e}");
    }

    #[test]
    fn inconsistent_requests_are_refused_with_their_line() {
        let h = "request,context_len,depth,layer,index_topk,selected\n";
        let e = parse_csv(&format!("{h}0,4096,0.5,0,512,1\n0,4096,0.5,0,512,0\n"), "s.csv").unwrap_err().to_string();
        assert!(e.contains("line 3") && e.contains("layer 0 twice"), "{e}");
        let e = parse_csv(&format!("{h}0,4096,0.5,0,512,1\n0,8192,0.5,1,512,0\n"), "s.csv").unwrap_err().to_string();
        assert!(e.contains("changes its context_len"), "{e}");
        let e = parse_csv(&format!("{h}0,4096,0.5,0,512,1\n0,4096,0.5,1,512,0\n1,4096,0.5,1,512,0\n"), "s.csv")
            .unwrap_err()
            .to_string();
        assert!(e.contains("request `1` has no row for layer 0"), "{e}");
        let e = parse_csv(&format!("{h}0,4096,0.5,0,512,yes\n"), "s.csv").unwrap_err().to_string();
        assert!(e.contains("`yes`: allowed 0, 1, true, false"), "{e}");
        let e = parse_csv("request,context_len,layer,selected\n0,4096,0,1\n", "s.csv").unwrap_err().to_string();
        assert!(e.contains("missing column(s) index_topk"), "{e}");
    }
}
