//! `sweep`: the grid of a sweep (base scenario, axes, engine options and the run metadata every
//! output records), and the whole sweep computed in memory as its `--json` document.

use super::{CommandError, EngineSpec, ScenarioSpec};
use crate::engine::RunOptions;
use crate::progress::Progress;
use crate::sweep::{engine_evaluator, json_doc, merge, run_grid, Axis, Format, Grid, Output, Shard, SweepOptions};
use std::path::{Path, PathBuf};

/// A sweep ready to run: checked before any point is computed.
#[derive(Debug, Clone)]
pub struct PreparedSweep {
    /// The grid.
    pub(crate) grid: Grid,
    /// Engine options of every point.
    pub(crate) opts: RunOptions,
    /// The `run` metadata (engine, trials, seed, rank) every output of the sweep records.
    pub(crate) meta: serde_json::Value,
}

/// Resolves the base scenario, parses the axes (`FIELD=VALUES`, as `--vary` takes them) and
/// checks every point against the engine (a point it refuses is bad input, before any work).
pub fn prepare(
    spec: &ScenarioSpec,
    engine: &EngineSpec,
    vary: &[String],
    rank: bool,
) -> Result<PreparedSweep, CommandError> {
    let (base, device) = spec.resolve_with_device()?;
    let opts = engine.options(&base, device)?;
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

/// The inputs of a sweep written to a file or stdout (`sweep` without `--json` in memory), as
/// its flags give them.
#[derive(Debug, Clone)]
pub struct SweepRequest<'a> {
    /// The file written; `None`: stdout.
    pub out: Option<&'a Path>,
    /// JSON instead of CSV.
    pub json: bool,
    /// Finish a partial file.
    pub resume: bool,
    /// Compute at most this many points now.
    pub limit: Option<usize>,
    /// `I/N` or `auto`: one shard of the grid.
    pub shard: Option<&'a str>,
    /// Worker threads; `None`: all cores.
    pub threads: Option<usize>,
}

/// What a written sweep did.
#[derive(Debug, Clone)]
pub struct SweepDone {
    /// Points written.
    pub(crate) rows: usize,
    /// Whether the sweep (or its shard) is complete.
    pub(crate) complete: bool,
    /// Points of the whole grid.
    pub(crate) grid_len: usize,
    /// The shard computed ([`Shard::WHOLE`] when none was asked for).
    pub(crate) shard: Shard,
    /// Whether a shard was asked for.
    pub(crate) sharded: bool,
    /// The file written, if any.
    pub(crate) out: Option<PathBuf>,
}

/// Runs the sweep into `req.out` (or stdout), points reported to `progress`; an existing file is
/// replaced only if a sweep wrote it, and a killed run keeps its finished rows for `resume`.
pub fn sweep_to(p: PreparedSweep, req: &SweepRequest, progress: &dyn Progress) -> Result<SweepDone, CommandError> {
    let PreparedSweep { grid, opts, meta } = p;
    let rank = grid.rank;
    let format = match (req.out, req.json) {
        (_, true) => Format::Json,
        (Some(p), false) => Format::from_path(p),
        (None, false) => Format::Csv,
    };
    if let Some(p) = req.out {
        if req.json && p.extension().is_some_and(|e| e.eq_ignore_ascii_case("csv")) {
            return Err(CommandError::input(format!(
                "--json conflicts with --out {}: the file would hold JSON; name it .json or drop --json",
                p.display()
            )));
        }
        if p.is_dir() {
            return Err(CommandError::input(format!(
                "--out {}: is a folder; give a file name (.csv or .json)",
                p.display()
            )));
        }
    }
    let shard = match req.shard {
        Some(t) => Shard::parse(t)?,
        None => Shard::WHOLE,
    };
    if req.shard.is_some() {
        match req.out {
            None => {
                return Err(CommandError::input(
                    "--shard needs --out FILE.csv (one file per shard, joined by `dsa-sim merge`)",
                ))
            }
            Some(_) if format == Format::Json => return Err(CommandError::input(
                "--shard writes CSV parts (--out FILE.csv); `dsa-sim merge PARTS… --out FILE.json` makes the JSON file",
            )),
            Some(_) => {}
        }
    }
    let mut fingerprint = serde_json::json!({
        "version": env!("CARGO_PKG_VERSION"),
        "base": grid.base,
        "axes": grid.axes.iter().map(|a| serde_json::json!([a.field.name(), a.texts])).collect::<Vec<_>>(),
        "run": meta,
        "format": format.to_string(),
    });
    if !shard.is_whole() {
        fingerprint["shard"] = shard.to_string().into();
    }
    let fingerprint = fingerprint.to_string();
    let sidecar = (req.out.is_some() && format == Format::Csv).then(|| merge::sidecar(&grid, &meta, shard));
    let out = match req.out {
        Some(p) => Output::File(p.to_path_buf()),
        None => Output::Stdout,
    };
    let options = SweepOptions {
        threads: req.threads,
        resume: req.resume,
        limit: req.limit,
        format,
        fingerprint,
        meta,
        shard,
        sidecar,
        // As merge and the importers: an existing --out is replaced only if a sweep wrote it.
        replace_only_ours: req.out.is_some(),
    };
    let eval = engine_evaluator(opts);
    let (rows, complete) = run_grid(&grid, |s| eval(s, rank), &out, &options, progress)?;
    Ok(SweepDone {
        rows: rows.len(),
        complete,
        grid_len: grid.len(),
        shard,
        sharded: req.shard.is_some(),
        out: req.out.map(Path::to_path_buf),
    })
}

impl SweepDone {
    /// The line a sweep written to a file reports on stderr (none for stdout).
    pub fn to_text(&self) -> Option<String> {
        let p = self.out.as_ref()?;
        Some(if self.complete {
            if self.sharded {
                format!("shard {}: {} of {} points written to {}", self.shard, self.rows, self.grid_len, p.display())
            } else {
                format!("{} points written to {}", self.rows, p.display())
            }
        } else {
            format!(
                "{} of {} points done, kept in {}: rerun with --resume to finish",
                self.rows,
                self.shard.len(self.grid_len),
                crate::sweep::partial_path(p).display()
            )
        })
    }
}

/// What `merge` joined and wrote.
#[derive(Debug, Clone)]
pub struct MergeDone {
    /// What the merge read and wrote.
    pub(crate) merged: merge::Merged,
    /// The file written.
    pub(crate) out: PathBuf,
}

/// Joins the parts of a sharded sweep into the file an unsharded sweep writes.
pub fn merge_parts(parts: &[PathBuf], out: &Path) -> Result<MergeDone, CommandError> {
    Ok(MergeDone { merged: merge::merge(parts, out)?, out: out.to_path_buf() })
}

impl MergeDone {
    /// The `merge --json` object.
    pub fn to_json(&self) -> serde_json::Value {
        let m = &self.merged;
        let files: Vec<String> = m.files.iter().map(|f| f.display().to_string()).collect();
        serde_json::json!({
            "points": m.points, "parts": m.parts, "shards": m.shards, "files": files,
        })
    }

    /// The line `merge` reports on stderr.
    pub fn to_text(&self) -> String {
        format!("{} points from {} shards written to {}", self.merged.points, self.merged.shards, self.out.display())
    }
}
