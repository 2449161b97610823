//! `sweep`: the grid of a sweep (base scenario, axes, engine options and the run metadata every
//! output records), and the whole sweep computed in memory as its `--json` document.

use super::{CommandError, EngineSpec, ScenarioSpec};
use crate::engine::RunOptions;
use crate::progress::Progress;
use crate::sweep::{engine_evaluator, json_doc, run_grid, Axis, Format, Grid, Output, Shard, SweepOptions};

/// A sweep ready to run: checked before any point is computed.
#[derive(Debug, Clone)]
pub struct PreparedSweep {
    /// The grid.
    pub grid: Grid,
    /// Engine options of every point.
    pub opts: RunOptions,
    /// The `run` metadata (engine, trials, seed, rank) every output of the sweep records.
    pub meta: serde_json::Value,
}

/// Resolves the base scenario, parses the axes (`FIELD=VALUES`, as `--vary` takes them) and
/// checks every point against the engine (a point it refuses is bad input, before any work).
pub fn prepare(
    spec: &ScenarioSpec,
    engine: &EngineSpec,
    vary: &[String],
    rank: bool,
) -> Result<PreparedSweep, CommandError> {
    let base = spec.resolve()?;
    let opts = engine.options(&base)?;
    let axes = vary.iter().map(|v| Axis::parse(v)).collect::<Result<Vec<_>, _>>()?;
    let grid = Grid::new(base, axes, rank)?;
    grid.check(&opts)?;
    let meta = serde_json::json!({
        "engine": engine.engine.to_string(), "trials": opts.trials, "seed": opts.seed, "rank": rank,
    });
    Ok(PreparedSweep { grid, opts, meta })
}

/// Runs the whole sweep in memory (points reported to `progress`) and returns the document
/// `sweep --json` prints: `run`, `base_scenario`, `axes`, `columns`, `rows`, `dsa_sim_version`.
pub fn sweep_json(
    p: &PreparedSweep,
    threads: Option<usize>,
    progress: &dyn Progress,
) -> Result<serde_json::Value, CommandError> {
    let options = SweepOptions {
        threads,
        resume: false,
        limit: None,
        format: Format::Json,
        // Only a partial file is checked against the fingerprint; memory has none.
        fingerprint: String::new(),
        meta: p.meta.clone(),
        shard: Shard::WHOLE,
        sidecar: None,
        replace_only_ours: false,
    };
    let rank = p.grid.rank;
    let eval = engine_evaluator(p.opts.clone());
    let (rows, _) = run_grid(&p.grid, |s| eval(s, rank), &Output::Memory, &options, progress)?;
    Ok(json_doc(&p.grid, &rows, &p.meta))
}
