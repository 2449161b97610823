//! Parameter sweeps: a grid over any scenario fields, run point by point with rows streamed to
//! disk in a fixed order, resumable after an interruption.
//!
//! The grid is the Cartesian product of its [`Axis`] values, the first axis outermost. Point `i`
//! always has the same scenario and (for a deterministic evaluator) the same result, whatever
//! the thread count, so a sweep's file is the same byte for byte however it was run.
//!
//! While a sweep with an output file runs, finished rows go, in grid order, to `FILE.partial`
//! (a first `#` line records what sweep it belongs to). When every point is done the final file
//! is written under a temporary name, renamed to FILE and the partial file removed: FILE is never
//! half-written, and a killed sweep keeps its finished rows for `--resume`.

mod axis;
pub(crate) mod merge;
mod runner;
mod shard;

pub use axis::{canonical_field, fmt_num, parse_values, Axis, MAX_RANGE_POINTS};
pub(crate) use runner::{adopt_finished, partial_path, run_grid, Output, SweepOptions};
pub use shard::Shard;
pub(crate) use shard::MAX_SHARDS;

/// The sidecar of a sweep's CSV file: `FILE.meta.json` beside `FILE` (see [`merge`]).
pub(crate) fn meta_path(path: &std::path::Path) -> std::path::PathBuf {
    let mut name = path.file_name().map(|n| n.to_os_string()).unwrap_or_default();
    name.push(".meta.json");
    path.with_file_name(name)
}

use crate::engine::{EngineError, RankQuantiles, RunOptions};
use crate::error::{io_kind, Classify, ErrorKind};
use crate::scenario::Scenario;
use std::fmt;

/// Why a sweep failed.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum SweepError {
    /// Bad input: an axis, a value, a point that does not validate or that the engine refuses,
    /// a partial file of another sweep, an output path that cannot be written.
    #[error("{0}")]
    Input(String),
    /// Evaluating a point failed once the sweep was running.
    #[error(transparent)]
    Engine(EngineError),
    /// The output could not be written (a full disk, standard output that fails, a figure that
    /// cannot be drawn): not bad input.
    #[error("{0}")]
    Output(String),
}

impl SweepError {
    /// A failed write to `path`: bad input when the path cannot be used (see
    /// [`crate::error::io_kind`]), else an output failure.
    pub(crate) fn write(path: &std::path::Path, e: &std::io::Error) -> SweepError {
        let message = format!("cannot write {}: {e}", path.display());
        match io_kind(e) {
            ErrorKind::Input => SweepError::Input(message),
            ErrorKind::Failure => SweepError::Output(message),
        }
    }
}

impl Classify for SweepError {
    /// Bad input, or a failure for evaluations and writes that fail while the sweep runs.
    fn kind(&self) -> ErrorKind {
        match self {
            SweepError::Input(_) => ErrorKind::Input,
            SweepError::Engine(_) | SweepError::Output(_) => ErrorKind::Failure,
        }
    }
}

/// What the evaluator reports for one grid point.
#[derive(Debug, Clone, PartialEq)]
pub struct PointResult {
    /// Estimated recall.
    pub recall: f64,
    /// Lower end of the 95% interval (= recall when exact).
    pub ci_low: f64,
    /// Upper end of the 95% interval (= recall when exact).
    pub ci_high: f64,
    /// `analytic` or `montecarlo`.
    pub engine: String,
    /// Monte Carlo trials, if any.
    pub trials: Option<u64>,
    /// Rank quantiles, when the sweep asks for ranks.
    pub rank: Option<RankQuantiles>,
}

/// One finished point: its index in the grid, the varied fields' values and the result.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Row {
    /// Index of the point in grid order.
    pub(crate) index: usize,
    /// Canonical text of each varied field's value, in axis order.
    pub(crate) values: Vec<String>,
    /// The point's scenario, fully resolved.
    pub(crate) scenario: Scenario,
    /// The evaluator's result.
    pub(crate) result: PointResult,
}

/// A grid of scenarios: a base scenario and the axes varied over it.
#[derive(Debug, Clone)]
pub struct Grid {
    /// The scenario every point starts from.
    pub base: Scenario,
    /// The varied fields, first outermost.
    pub axes: Vec<Axis>,
    /// Whether rows carry rank quantiles.
    pub rank: bool,
}

/// Output format of a sweep file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Format {
    /// Comma-separated values with a header line.
    Csv,
    /// One JSON object with the sweep's metadata and a `rows` array.
    Json,
}

impl Format {
    /// The format implied by a file name (`.json` → JSON, anything else CSV).
    pub(crate) fn from_path(path: &std::path::Path) -> Format {
        match path.extension().and_then(|e| e.to_str()) {
            Some(e) if e.eq_ignore_ascii_case("json") => Format::Json,
            _ => Format::Csv,
        }
    }
}

impl fmt::Display for Format {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Format::Csv => "csv",
            Format::Json => "json",
        })
    }
}

impl Grid {
    /// Builds a grid, rejecting repeated fields and checking that every point validates.
    pub fn new(base: Scenario, axes: Vec<Axis>, rank: bool) -> Result<Grid, SweepError> {
        if axes.is_empty() {
            return Err(SweepError::Input("a sweep needs at least one axis (--vary FIELD=V1,V2,…)".into()));
        }
        for (i, a) in axes.iter().enumerate() {
            if axes[..i].iter().any(|b| b.field == a.field) {
                return Err(SweepError::Input(format!("axis `{}` is given twice", a.field)));
            }
        }
        // The product is checked: axes of 65536 values each would wrap to a grid of 0 points.
        let sizes: Vec<String> = axes.iter().map(|a| a.values.len().to_string()).collect();
        let n = axes.iter().try_fold(1usize, |n, a| n.checked_mul(a.values.len())).filter(|&n| n <= 10_000_000);
        let Some(n) = n else {
            return Err(SweepError::Input(format!("the grid has {} points (at most 10000000)", sizes.join(" × "))));
        };
        let g = Grid { base, axes, rank };
        for i in 0..n {
            g.scenario(i)?;
        }
        Ok(g)
    }

    /// Number of points.
    pub fn len(&self) -> usize {
        self.axes.iter().map(|a| a.values.len()).product()
    }

    /// Whether the grid has no points (never, for a grid built by [`Grid::new`]).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The index of each axis's value at point `i` (first axis outermost).
    pub(crate) fn coords(&self, mut i: usize) -> Vec<usize> {
        let mut c = vec![0; self.axes.len()];
        for (k, a) in self.axes.iter().enumerate().rev() {
            c[k] = i % a.values.len();
            i /= a.values.len();
        }
        c
    }

    /// The validated scenario of point `i`.
    pub fn scenario(&self, i: usize) -> Result<Scenario, SweepError> {
        let mut s = self.base.clone();
        let coords = self.coords(i);
        for (a, &c) in self.axes.iter().zip(&coords) {
            s.set(a.field, a.values[c]).map_err(|e| SweepError::Input(format!("axis `{}`: {e}", a.field)))?;
        }
        s.validate().map_err(|e| {
            let at: Vec<String> =
                self.axes.iter().zip(&coords).map(|(a, &c)| format!("{}={}", a.field, a.texts[c])).collect();
            SweepError::Input(format!("grid point {} is invalid: {e}", at.join(" ")))
        })?;
        Ok(s)
    }

    /// Checks that the engine accepts every point under `opts` before anything is computed or
    /// written (an analytic-only sweep over a point without a closed form, a Monte Carlo point
    /// too large to draw), naming the first point it refuses.
    pub(crate) fn check(&self, opts: &RunOptions) -> Result<(), SweepError> {
        for i in 0..self.len() {
            let s = self.scenario(i)?;
            if let Err(e) = crate::engine::check(&s, opts) {
                let at: Vec<String> =
                    self.axes.iter().zip(self.values_of(&s)).map(|(a, v)| format!("{}={v}", a.field)).collect();
                return Err(SweepError::Input(format!("grid point {}: {e}", at.join(" "))));
            }
        }
        Ok(())
    }

    /// The canonical values of the varied fields at a scenario.
    pub(crate) fn values_of(&self, s: &Scenario) -> Vec<String> {
        self.axes.iter().map(|a| s.text(a.field)).collect()
    }

    /// Column names of the sweep's CSV.
    pub(crate) fn columns(&self) -> Vec<String> {
        let mut c: Vec<String> = self.axes.iter().map(|a| a.field.name().to_string()).collect();
        c.extend(["recall", "ci_low", "ci_high", "engine", "trials"].map(String::from));
        if self.rank {
            c.extend(["rank_p05", "rank_p50", "rank_p90", "rank_p95"].map(String::from));
        }
        c.extend(["n_candidates", "coverage_horizon_tokens"].map(String::from));
        c
    }
}

fn rank_text(r: Option<u64>) -> String {
    r.map_or_else(|| "inf".to_string(), |v| v.to_string())
}

/// The CSV fields of one row (see [`Grid::columns`]).
pub(crate) fn csv_record(grid: &Grid, row: &Row) -> Vec<String> {
    let r = &row.result;
    let mut out = row.values.clone();
    out.push(format!("{}", r.recall));
    out.push(format!("{}", r.ci_low));
    out.push(format!("{}", r.ci_high));
    out.push(r.engine.clone());
    out.push(r.trials.map(|t| t.to_string()).unwrap_or_default());
    if grid.rank {
        let q = r.rank.unwrap_or_default();
        for v in [q.p05, q.p50, q.p90, q.p95] {
            out.push(rank_text(v));
        }
    }
    out.push(row.scenario.n_candidates().to_string());
    out.push(row.scenario.coverage_horizon_tokens().to_string());
    out
}

/// Parses a CSV record written by [`csv_record`] back into a row of point `index`: `None` unless
/// it is that point's row with a result a sweep writes ([`check_result`]).
pub(crate) fn parse_record(grid: &Grid, index: usize, rec: &csv::StringRecord) -> Option<Row> {
    parse_record_unchecked(grid, index, rec).filter(|r| check_result(&r.result).is_ok())
}

/// [`parse_record`] without [`check_result`]: the row as written, to say what is wrong with it.
pub(crate) fn parse_record_unchecked(grid: &Grid, index: usize, rec: &csv::StringRecord) -> Option<Row> {
    let ncol = grid.columns().len();
    if rec.len() != ncol {
        return None;
    }
    let scenario = grid.scenario(index).ok()?;
    let values = grid.values_of(&scenario);
    let na = grid.axes.len();
    if (0..na).any(|k| rec.get(k) != Some(values[k].as_str())) {
        return None;
    }
    let f = |k: usize| rec.get(k).and_then(|t| t.parse::<f64>().ok());
    let rk = |k: usize| -> Option<Option<u64>> {
        match rec.get(k)? {
            "inf" => Some(None),
            t => t.parse().ok().map(Some),
        }
    };
    let trials = match rec.get(na + 4)? {
        "" => None,
        t => Some(t.parse().ok()?),
    };
    let rank = if grid.rank {
        Some(RankQuantiles { p05: rk(na + 5)?, p50: rk(na + 6)?, p90: rk(na + 7)?, p95: rk(na + 8)? })
    } else {
        None
    };
    let result = PointResult {
        recall: f(na)?,
        ci_low: f(na + 1)?,
        ci_high: f(na + 2)?,
        engine: rec.get(na + 3)?.to_string(),
        trials,
        rank,
    };
    Some(Row { index, values, scenario, result })
}

/// What every row a sweep computes satisfies, whatever its grid point: recall and its 95%
/// interval finite in [0, 1] with ci_low ≤ recall ≤ ci_high; an `analytic` row exact (no
/// trials, the interval collapsed on the recall), a `montecarlo` row with 1..=MAX_TRIALS trials;
/// rank quantiles at least 1 and non-decreasing (`inf` last). A row read back from a file
/// (a part being merged, a partial file being resumed) that breaks one was not written by a
/// sweep, and is refused rather than copied.
pub(crate) fn check_result(r: &PointResult) -> Result<(), String> {
    let unit = |x: f64| x.is_finite() && (0.0..=1.0).contains(&x);
    if !(unit(r.recall) && unit(r.ci_low) && unit(r.ci_high)) {
        return Err(format!("recall {} [{}, {}]: allowed 0..=1", r.recall, r.ci_low, r.ci_high));
    }
    if !(r.ci_low <= r.recall && r.recall <= r.ci_high) {
        return Err(format!("recall {} outside its interval [{}, {}]", r.recall, r.ci_low, r.ci_high));
    }
    match (r.engine.as_str(), r.trials) {
        ("analytic", None) if r.ci_low == r.recall && r.ci_high == r.recall => {}
        ("analytic", _) => return Err("an analytic row is exact: no trials, ci_low = recall = ci_high".into()),
        ("montecarlo", Some(t)) if (1..=crate::engine::MAX_TRIALS).contains(&t) => {}
        ("montecarlo", t) => {
            return Err(format!("a montecarlo row's trials {t:?}: allowed 1..={}", crate::engine::MAX_TRIALS))
        }
        (e, _) => return Err(format!("engine `{}`: allowed analytic, montecarlo", crate::input::echo(e))),
    }
    if let Some(q) = &r.rank {
        let v = [q.p05, q.p50, q.p90, q.p95].map(|x| x.unwrap_or(u64::MAX));
        if v[0] < 1 || v.windows(2).any(|w| w[0] > w[1]) {
            return Err(format!("rank quantiles {:?}: allowed ≥ 1 and non-decreasing", [q.p05, q.p50, q.p90, q.p95]));
        }
    }
    Ok(())
}

/// The whole CSV text of a finished sweep.
pub(crate) fn to_csv(grid: &Grid, rows: &[Row]) -> String {
    let mut w = csv::WriterBuilder::new().from_writer(Vec::new());
    // Writing to memory cannot fail.
    let _ = w.write_record(grid.columns());
    for r in rows {
        let _ = w.write_record(csv_record(grid, r));
    }
    String::from_utf8(w.into_inner().unwrap_or_default()).unwrap_or_default()
}

/// One row as a JSON object: varied fields typed as in the scenario, then the results.
pub(crate) fn row_json(grid: &Grid, row: &Row) -> serde_json::Value {
    let mut m = serde_json::Map::new();
    for a in &grid.axes {
        m.insert(a.field.name().to_string(), row.scenario.get(a.field).to_json());
    }
    let r = &row.result;
    m.insert("recall".into(), r.recall.into());
    m.insert("ci_low".into(), r.ci_low.into());
    m.insert("ci_high".into(), r.ci_high.into());
    m.insert("engine".into(), r.engine.clone().into());
    m.insert("trials".into(), r.trials.into());
    if grid.rank {
        let q = r.rank.unwrap_or_default();
        for (k, v) in [("rank_p05", q.p05), ("rank_p50", q.p50), ("rank_p90", q.p90), ("rank_p95", q.p95)] {
            m.insert(k.into(), v.into());
        }
    }
    m.insert("n_candidates".into(), row.scenario.n_candidates().into());
    m.insert("coverage_horizon_tokens".into(), row.scenario.coverage_horizon_tokens().into());
    serde_json::Value::Object(m)
}

/// The JSON document of a finished sweep: metadata (`meta`, e.g. seed and engine), the base
/// scenario, the axes and the rows.
pub(crate) fn json_doc(grid: &Grid, rows: &[Row], meta: &serde_json::Value) -> serde_json::Value {
    let axes: Vec<serde_json::Value> =
        grid.axes.iter().map(|a| serde_json::json!({"field": a.field.name(), "values": a.texts})).collect();
    serde_json::json!({
        "dsa_sim_version": env!("CARGO_PKG_VERSION"),
        "run": meta,
        "base_scenario": grid.base,
        "axes": axes,
        "columns": grid.columns(),
        "rows": rows.iter().map(|r| row_json(grid, r)).collect::<Vec<_>>(),
    })
}

/// [`json_doc`] as the text every JSON output of a sweep holds (pretty, one final newline).
pub(crate) fn to_json(grid: &Grid, rows: &[Row], meta: &serde_json::Value) -> String {
    let doc = json_doc(grid, rows, meta);
    let mut text = serde_json::to_string_pretty(&doc).unwrap_or_default();
    text.push('\n');
    text
}

/// Writes `bytes` to `path` atomically, only over a regular file
/// ([`crate::output::write_file_atomic`]).
pub(crate) fn write_atomic(path: &std::path::Path, bytes: &[u8]) -> Result<(), SweepError> {
    crate::output::write_file_atomic(path, bytes).map_err(SweepError::from)
}

impl From<crate::output::OutputError> for SweepError {
    /// A refused output is bad input; a failed write is an output failure.
    fn from(e: crate::output::OutputError) -> Self {
        if e.is_input() {
            SweepError::Input(e.to_string())
        } else {
            SweepError::Output(e.to_string())
        }
    }
}

/// The engine as a sweep evaluator: `eval(scenario, with_rank)` runs [`crate::engine::estimate`]
/// (with rank quantiles) or [`crate::engine::estimate_recall`] with the given options.
pub(crate) fn engine_evaluator(
    opts: RunOptions,
) -> impl Fn(&Scenario, bool) -> Result<PointResult, EngineError> + Sync {
    move |s: &Scenario, with_rank: bool| {
        let est = if with_rank { crate::engine::estimate(s, &opts) } else { crate::engine::estimate_recall(s, &opts) }?;
        let rank = with_rank.then_some(est.rank.quantiles);
        Ok(PointResult {
            recall: est.recall,
            ci_low: est.ci_low,
            ci_high: est.ci_high,
            engine: est.engine.to_string(),
            trials: est.trials,
            rank,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn grid() -> Grid {
        let axes = vec![Axis::parse("context_len=1e3,2000").unwrap(), Axis::parse("index_topk=1..3:+1").unwrap()];
        Grid::new(Scenario::default(), axes, true).unwrap()
    }

    #[test]
    fn grid_order_first_axis_outermost() {
        let g = grid();
        assert_eq!(g.len(), 6);
        let s = g.scenario(4).unwrap();
        assert_eq!((s.context_len, s.index_topk), (2000, 2));
        assert_eq!(g.values_of(&s), ["2000", "2"]);
        assert_eq!(g.values_of(&g.scenario(0).unwrap()), ["1000", "1"]);
    }

    #[test]
    fn invalid_points_and_repeated_axes_are_rejected() {
        let e = Grid::new(
            Scenario::default(),
            vec![Axis::parse("context_len=1,2").unwrap(), Axis::parse("needle_tokens=1,2").unwrap()],
            false,
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("context_len=1") && e.contains("needle_tokens"), "{e}");
        let e = Grid::new(
            Scenario::default(),
            vec![Axis::parse("depth=0").unwrap(), Axis::parse("depth=1").unwrap()],
            false,
        )
        .unwrap_err();
        assert!(e.to_string().contains("twice"));
        assert!(Grid::new(Scenario::default(), vec![], false).is_err());
    }

    #[test]
    fn csv_records_round_trip() {
        let g = grid();
        let s = g.scenario(3).unwrap();
        let row = Row {
            index: 3,
            values: g.values_of(&s),
            scenario: s,
            result: PointResult {
                recall: 0.1 + 0.2,
                ci_low: 0.25,
                ci_high: 1.0 / 3.0,
                engine: "montecarlo".into(),
                trials: Some(1000),
                rank: Some(RankQuantiles { p05: Some(1), p50: Some(7), p90: None, p95: None }),
            },
        };
        let rec = csv::StringRecord::from(csv_record(&g, &row));
        assert_eq!(parse_record(&g, 3, &rec), Some(row.clone()));
        assert_eq!(parse_record(&g, 2, &rec), None);
        let json = row_json(&g, &row);
        assert_eq!(json["context_len"], 2000);
        assert!(json["rank_p90"].is_null());
    }
}
