//! Sweep metadata sidecars and the merge of sharded sweeps.
//!
//! `dsa-sim sweep --out FILE.csv` writes `FILE.csv.meta.json` beside the CSV ([`sidecar`]):
//! the dsa-sim version, the run options (engine, trials, seed, rank), the base scenario, the
//! axes, the columns, the number of grid points and, for a shard, which one (`shard`:
//! `{index, count, points}`, else null). The CSV itself stays a plain table (no comment lines),
//! so any CSV reader takes it as is.
//!
//! [`merge`] reads the parts of a sharded sweep (each a CSV and its sidecar), checks that they
//! come from one sweep (same version, grid, seed and run options, every shard of one split
//! exactly once, each with all its rows) and writes the file, and its sidecar, that the unsharded
//! sweep writes, byte for byte: shard `I/N` holds the points `i ≡ I (mod N)` in grid order, so
//! the merge interleaves the parts' rows back into grid order and writes them with the sweep's
//! own writer.

use super::{
    meta_path, parse_record, parse_record_unchecked, to_csv, to_json, write_atomic, Axis, Format, Grid, Row, Shard,
    SweepError, MAX_SHARDS,
};
use crate::scenario::Scenario;
use serde_json::{json, Value};
use std::path::{Path, PathBuf};

/// The sidecar document of a sweep's CSV file (see the module docs). `run` is the run metadata
/// a JSON sweep file carries under `run`.
pub(crate) fn sidecar(grid: &Grid, run: &Value, shard: Shard) -> Value {
    let axes: Vec<Value> = grid.axes.iter().map(|a| json!({"field": a.field.name(), "values": a.texts})).collect();
    let shard = if shard.is_whole() {
        Value::Null
    } else {
        json!({"index": shard.index, "count": shard.count, "points": shard.len(grid.len())})
    };
    json!({
        "dsa_sim_version": env!("CARGO_PKG_VERSION"),
        "run": run,
        "base_scenario": grid.base,
        "axes": axes,
        "columns": grid.columns(),
        "points": grid.len(),
        "shard": shard,
    })
}

/// What a merge wrote.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Merged {
    /// Grid points in the merged file.
    pub(crate) points: usize,
    /// Parts read.
    pub(crate) parts: usize,
    /// Shards of the split.
    pub(crate) shards: usize,
    /// Files written (the output and, for CSV, its sidecar).
    pub(crate) files: Vec<PathBuf>,
}

/// One part as read: its path, sidecar, shard and CSV text.
struct Part {
    path: PathBuf,
    meta: Value,
    shard: Shard,
}

fn input(msg: String) -> SweepError {
    SweepError::Input(msg)
}

fn read_part(path: &Path) -> Result<Part, SweepError> {
    let mp = meta_path(path);
    let text = crate::input::read_to_string(&mp).map_err(|e| {
        input(if e.kind() == std::io::ErrorKind::NotFound {
            format!(
                "{}: no {} beside it: not a sweep file written by `dsa-sim sweep --out` (or a shard that has not finished)",
                path.display(),
                mp.display()
            )
        } else {
            format!("{}: cannot read {}: {e}", path.display(), mp.display())
        })
    })?;
    let meta: Value = serde_json::from_str(&text)
        .map_err(|e| input(format!("{}: {} is not valid JSON: {e}", path.display(), mp.display())))?;
    let bad = |what: &str| input(format!("{}: {} has no valid `{what}`", path.display(), mp.display()));
    for key in ["dsa_sim_version", "run", "base_scenario", "axes", "columns", "points"] {
        if meta.get(key).is_none() {
            return Err(bad(key));
        }
    }
    let shard = match meta.get("shard") {
        None | Some(Value::Null) => Shard::WHOLE,
        Some(s) => {
            let n = |k: &str| s.get(k).and_then(Value::as_u64).map(|x| x as usize);
            // The count sizes the merge's table of shards: bounded as the --shard flag is, before
            // anything is allocated from it.
            match (n("index"), n("count")) {
                (Some(index), Some(count)) if (1..=MAX_SHARDS).contains(&count) && index < count => {
                    Shard { index, count }
                }
                (_, Some(count)) if count > MAX_SHARDS => {
                    return Err(input(format!(
                        "{}: {} declares {count} shards: at most {MAX_SHARDS}",
                        path.display(),
                        mp.display()
                    )))
                }
                _ => return Err(bad("shard")),
            }
        }
    };
    Ok(Part { path: path.to_path_buf(), meta, shard })
}

/// Rebuilds the grid a sidecar describes.
fn grid_of(part: &Part) -> Result<Grid, SweepError> {
    let p = part.path.display();
    let bad = |what: String| input(format!("{p}: {}: {what}", meta_path(&part.path).display()));
    let base: Scenario =
        serde_json::from_value(part.meta["base_scenario"].clone()).map_err(|e| bad(format!("base_scenario: {e}")))?;
    base.validate().map_err(|e| bad(format!("base_scenario: {e}")))?;
    let axes = part.meta["axes"].as_array().ok_or_else(|| bad("axes is not a list".into()))?;
    let axes = axes
        .iter()
        .map(|a| {
            let field = a["field"].as_str().ok_or_else(|| bad("an axis without a field".into()))?;
            let values = a["values"].as_array().ok_or_else(|| bad(format!("axis {field} has no values")))?;
            let texts = values.iter().map(|v| v.as_str().map(String::from)).collect::<Option<Vec<_>>>();
            let texts = texts.ok_or_else(|| bad(format!("axis {field}: values must be strings")))?;
            Axis::from_values(field, texts).map_err(|e| bad(e.to_string()))
        })
        .collect::<Result<Vec<_>, _>>()?;
    let rank = part.meta["run"]["rank"].as_bool().ok_or_else(|| bad("run.rank is not true or false".into()))?;
    let grid = Grid::new(base, axes, rank).map_err(|e| bad(e.to_string()))?;
    if part.meta["columns"] != json!(grid.columns()) || part.meta["points"] != json!(grid.len()) {
        return Err(bad("its columns or point count do not match its grid".into()));
    }
    Ok(grid)
}

/// Checks that `part` belongs to the same sweep as `first`, naming the difference.
fn same_sweep(first: &Part, part: &Part) -> Result<(), SweepError> {
    let (a, b) = (&first.meta, &part.meta);
    let differs = |what: &str, x: &Value, y: &Value| {
        input(format!(
            "{} is from a different sweep than {}: {what} {y} vs {x}; merge only the parts of one sweep",
            part.path.display(),
            first.path.display()
        ))
    };
    if a["dsa_sim_version"] != b["dsa_sim_version"] {
        return Err(differs("dsa-sim version", &a["dsa_sim_version"], &b["dsa_sim_version"]));
    }
    if a["run"]["seed"] != b["run"]["seed"] {
        return Err(differs("seed", &a["run"]["seed"], &b["run"]["seed"]));
    }
    if a["run"] != b["run"] {
        return Err(differs("run options (engine, trials, rank)", &a["run"], &b["run"]));
    }
    if a["base_scenario"] != b["base_scenario"] || a["axes"] != b["axes"] || a["columns"] != b["columns"] {
        return Err(input(format!(
            "{} is from a different grid than {} (base scenario or axes differ); merge only the parts of one sweep",
            part.path.display(),
            first.path.display()
        )));
    }
    if first.shard.count != part.shard.count {
        return Err(input(format!(
            "{} is shard {} but {} is shard {}: the parts come from splits into different numbers of shards",
            part.path.display(),
            part.shard,
            first.path.display(),
            first.shard
        )));
    }
    Ok(())
}

/// Reads a part's rows: the header, then exactly the shard's points in order.
fn rows_of(part: &Part, grid: &Grid) -> Result<Vec<Row>, SweepError> {
    let p = part.path.display();
    let text = crate::input::read_to_string(&part.path).map_err(|e| input(format!("cannot read {p}: {e}")))?;
    let mut rdr = csv::ReaderBuilder::new().has_headers(false).flexible(true).from_reader(text.as_bytes());
    let mut records = rdr.records();
    let header = match records.next() {
        Some(Ok(h)) => h,
        _ => return Err(input(format!("{p}: no header line"))),
    };
    if header.iter().map(str::to_string).collect::<Vec<_>>() != grid.columns() {
        return Err(input(format!("{p}: its columns differ from those its sidecar names")));
    }
    let want = part.shard.len(grid.len());
    // Sized by what the file can hold, not by what its sidecar declares (a row is more than a
    // few bytes): a forged point count allocates nothing.
    let mut rows = Vec::with_capacity(want.min(text.len() / 8));
    for (pos, rec) in records.enumerate() {
        let line = pos + 2;
        let rec = rec.map_err(|e| input(format!("{p}: line {line}: {}", e.to_string().replace('\n', " "))))?;
        if pos >= want {
            return Err(input(format!("{p}: line {line}: more rows than shard {} has points ({want})", part.shard)));
        }
        let index = part.shard.point(pos);
        let row = parse_record(grid, index, &rec).ok_or_else(|| {
            // Name what is wrong when the row is its point's but its result is not one a sweep writes.
            let why = parse_record_unchecked(grid, index, &rec).and_then(|r| super::check_result(&r.result).err());
            match why {
                Some(why) => input(format!("{p}: line {line}: grid point {index}: {why}: not a row a sweep writes")),
                None => input(format!("{p}: line {line}: not the row of grid point {index} of shard {}", part.shard)),
            }
        })?;
        rows.push(row);
    }
    if rows.len() != want {
        return Err(input(format!(
            "{p}: {} rows where shard {} has {want}: the shard did not finish (rerun it with --resume)",
            rows.len(),
            part.shard
        )));
    }
    Ok(rows)
}

/// The parts of one sharded sweep, checked and joined: the grid, the run metadata and every
/// row in grid order (see [`merge`] for what is refused).
#[derive(Debug, Clone)]
pub(crate) struct Joined {
    /// The grid the parts' sidecars describe.
    pub(crate) grid: Grid,
    /// The run metadata (`run` of the sidecars).
    pub(crate) run: Value,
    /// Every point's row, in grid order.
    pub(crate) rows: Vec<Row>,
    /// Shards of the split.
    pub(crate) shards: usize,
    /// The first part given (to name in messages).
    pub(crate) first: PathBuf,
}

/// Reads and checks the parts of one sharded sweep and joins their rows in grid order.
pub(crate) fn join(parts: &[PathBuf]) -> Result<Joined, SweepError> {
    if parts.is_empty() {
        return Err(input("merge needs at least one part".into()));
    }
    let parts: Vec<Part> = parts.iter().map(|p| read_part(p)).collect::<Result<_, _>>()?;
    let first = &parts[0];
    for part in &parts[1..] {
        same_sweep(first, part)?;
    }
    if first.meta["dsa_sim_version"] != json!(env!("CARGO_PKG_VERSION")) {
        return Err(input(format!(
            "{} was written by dsa-sim {}, this is {}: merge with the version that ran the sweep",
            first.path.display(),
            first.meta["dsa_sim_version"],
            env!("CARGO_PKG_VERSION")
        )));
    }
    let count = first.shard.count;
    let mut by_index: Vec<Option<&Part>> = vec![None; count];
    for part in &parts {
        if let Some(prev) = by_index[part.shard.index] {
            return Err(input(format!(
                "{} and {} are both shard {}",
                prev.path.display(),
                part.path.display(),
                part.shard
            )));
        }
        by_index[part.shard.index] = Some(part);
    }
    if let Some(missing) = by_index.iter().position(Option::is_none) {
        let n = by_index.iter().filter(|p| p.is_none()).count();
        return Err(input(format!(
            "shard {missing}/{count} is missing ({n} of {count} shards not given): pass every part"
        )));
    }
    let grid = grid_of(first)?;
    let mut shards: Vec<std::vec::IntoIter<Row>> = Vec::with_capacity(count);
    for part in by_index.iter().flatten() {
        shards.push(rows_of(part, &grid)?.into_iter());
    }
    let rows: Vec<Row> = (0..grid.len()).filter_map(|i| shards[i % count].next()).collect();
    debug_assert_eq!(rows.len(), grid.len());
    Ok(Joined { grid, run: first.meta["run"].clone(), rows, shards: count, first: first.path.clone() })
}

/// Whether `a` and `b` name one file (the same path, or the same file through links or `..`).
fn same_file(a: &Path, b: &Path) -> bool {
    a == b || matches!((a.canonicalize(), b.canonicalize()), (Ok(x), Ok(y)) if x == y)
}

/// Whether the existing file `path` is one a sweep writes, and may be replaced: a sidecar (a JSON
/// object with `dsa_sim_version`, `columns` and `points`), a JSON sweep (`dsa_sim_version`,
/// `columns`, `rows`), or a CSV whose sidecar is one and whose header is the sidecar's columns.
fn is_sweep_file(path: &Path) -> bool {
    let doc = |p: &Path| {
        crate::input::read_regular_file(p).ok().flatten().and_then(|t| serde_json::from_str::<Value>(&t).ok())
    };
    let has = |v: &Value, keys: &[&str]| keys.iter().all(|k| v.get(k).is_some()) && v["dsa_sim_version"].is_string();
    let name = path.to_string_lossy();
    if name.ends_with(".meta.json") && doc(path).is_some_and(|v| has(&v, &["columns", "points"])) {
        return true;
    }
    match Format::from_path(path) {
        Format::Json => doc(path).is_some_and(|v| has(&v, &["columns", "rows"])),
        Format::Csv => {
            let Some(meta) = doc(&meta_path(path)).filter(|v| has(v, &["columns", "points"])) else { return false };
            // Only the header is read: a finished sweep may be larger than an input file.
            let mut header = String::new();
            let read = std::fs::File::open(path).and_then(|f| {
                use std::io::{BufRead, Read};
                std::io::BufReader::new(f.take(1 << 20)).read_line(&mut header)
            });
            if read.is_err() {
                return false;
            }
            let header = header.trim_end_matches(['\n', '\r']);
            let columns: Option<Vec<&str>> =
                meta["columns"].as_array().and_then(|c| c.iter().map(Value::as_str).collect());
            columns.is_some_and(|c| c.join(",") == header)
        }
    }
}

/// Refuses to write `path` (a sweep's or a merge's `out`, or its sidecar) over a file that is not
/// a sweep file: dsa-sim replaces only what it created (a user's notes.csv is never replaced).
pub(crate) fn check_replaceable(path: &Path, out: &Path) -> Result<(), SweepError> {
    match std::fs::symlink_metadata(path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Ok(m) if m.is_file() && !is_sweep_file(path) => {
            let what = if path == out { String::new() } else { format!(" (its sidecar {})", path.display()) };
            Err(input(format!(
                "--out {}{what}: the file exists and is not a sweep file dsa-sim wrote: refusing to replace it; choose another --out or remove it yourself",
                out.display()
            )))
        }
        // A folder, device or link is refused by the writer's own check, with its message.
        _ => Ok(()),
    }
}

/// Merges the parts of a sharded sweep into `out` (CSV with its sidecar, or JSON by the
/// extension), byte-identical to the unsharded sweep's file (see the module docs). Nothing is
/// written unless every part checks out.
pub(crate) fn merge(parts: &[PathBuf], out: &Path) -> Result<Merged, SweepError> {
    let format = Format::from_path(out);
    // Every file the merge writes (the output and, for CSV, its sidecar) against every file it
    // reads (each part and its sidecar): an input is never written over.
    let mut writes = vec![out.to_path_buf()];
    if format == Format::Csv {
        writes.push(meta_path(out));
    }
    for p in parts {
        for (read, what) in [(p.clone(), "a part"), (meta_path(p), "a part's sidecar")] {
            for w in &writes {
                if same_file(w, &read) {
                    let whose =
                        if w == out { String::new() } else { format!(" (its sidecar {} is {what})", w.display()) };
                    let what = if whose.is_empty() { format!(" is also {what} ({})", read.display()) } else { whose };
                    return Err(input(format!("--out {}{what}: write the merge to a new file", out.display())));
                }
            }
        }
    }
    for w in &writes {
        check_replaceable(w, out)?;
    }
    let Joined { grid, run, rows, shards: count, .. } = join(parts)?;
    let nparts = parts.len();
    crate::output::check_regular_target(out)?;
    let _lock = crate::output::OutputLock::acquire(out, out)?;
    let run = &run;
    let mut files = Vec::new();
    match format {
        Format::Csv => {
            let mut meta = serde_json::to_string_pretty(&sidecar(&grid, run, Shard::WHOLE)).unwrap_or_default();
            meta.push('\n');
            crate::output::check_regular_target(&meta_path(out))?;
            write_atomic(&meta_path(out), meta.as_bytes())?;
            write_atomic(out, to_csv(&grid, &rows).as_bytes())?;
            files.push(out.to_path_buf());
            files.push(meta_path(out));
        }
        Format::Json => {
            write_atomic(out, to_json(&grid, &rows, run).as_bytes())?;
            files.push(out.to_path_buf());
        }
    }
    Ok(Merged { points: grid.len(), parts: nparts, shards: count, files })
}
