//! `run --shard I/N` and `run --merge DIR…`: an experiment's grids split over machines.
//!
//! A shard run computes, for every figure, the grid points i with i mod N = I
//! ([`crate::sweep::Shard`]) into `DIR/data/NAME.csv` with its sidecar
//! (`DIR/data/NAME.csv.meta.json`, [`crate::sweep::merge`]); it draws no figures and writes no
//! report. A merge run reads every figure's parts from the shard folders, checks that they are
//! this experiment's grids with its seed, engine, trials and dsa-sim version, and then runs the
//! experiment as usual with an evaluator that returns the parts' results instead of computing
//! them: the result folder is byte-identical to an unsharded run.

use super::{Experiment, RunSettings};
use crate::engine::EngineError;
use crate::progress::Progress;
use crate::scenario::Scenario;
use crate::sweep::{merge, run_grid, Format, Output, PointResult, Shard, SweepError, SweepOptions};
use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// The run metadata of a figure's part: the experiment's, plus whether rows carry ranks.
fn part_meta(exp: &Experiment, rank: bool) -> serde_json::Value {
    serde_json::json!({
        "experiment": exp.name, "engine": exp.engine.to_string(), "trials": exp.trials, "seed": exp.seed, "rank": rank,
    })
}

/// Computes shard `shard` of every figure's grid into `folder/data/NAME.csv` (and sidecars).
/// Returns the points computed and the files written.
pub(crate) fn run_shard(
    exp: &Experiment,
    folder: &Path,
    shard: Shard,
    eval: &(dyn Fn(&Scenario, bool) -> Result<PointResult, EngineError> + Sync),
    settings: &RunSettings,
    progress: &dyn Progress,
) -> Result<(usize, usize), SweepError> {
    let data = folder.join("data");
    // A shard refused before it wrote anything (a lock held, another shard's partial file)
    // leaves no folders behind.
    let created = crate::output::missing_ancestors(&data);
    std::fs::create_dir_all(&data).map_err(|e| SweepError::write(&data, &e))?;
    let done = shard_grids(exp, &data, shard, eval, settings, progress);
    if done.is_err() {
        crate::output::remove_empty_dirs(&created);
    }
    done
}

fn shard_grids(
    exp: &Experiment,
    data: &Path,
    shard: Shard,
    eval: &(dyn Fn(&Scenario, bool) -> Result<PointResult, EngineError> + Sync),
    settings: &RunSettings,
    progress: &dyn Progress,
) -> Result<(usize, usize), SweepError> {
    let (mut points, mut files) = (0, 0);
    for fig in &exp.figures {
        let rank = fig.grid.rank;
        let meta = part_meta(exp, rank);
        let opts = SweepOptions {
            threads: settings.threads,
            resume: settings.resume,
            limit: None,
            format: Format::Csv,
            fingerprint: format!("{} shard {shard}\n{}", fig.spec.name, exp.source),
            meta: meta.clone(),
            shard,
            sidecar: Some(merge::sidecar(&fig.grid, &meta, shard)),
            // DIR/data/NAME.csv may be a user's file (DIR is the user's --out): a shard replaces
            // only a part dsa-sim wrote there, never anything else.
            replace_only_ours: true,
        };
        let out = data.join(format!("{}.csv", fig.spec.name));
        let (rows, _) = run_grid(&fig.grid, |s: &Scenario| eval(s, rank), &Output::File(out), &opts, progress)?;
        points += rows.len();
        files += 2;
    }
    Ok((points, files))
}

/// An evaluator that answers every point of every figure from the shard folders `dirs`, after
/// checking that the parts are this experiment's (grids, seed, engine, trials, version).
pub(crate) fn merged_evaluator(
    exp: &Experiment,
    dirs: &[PathBuf],
) -> Result<impl Fn(&Scenario, bool) -> Result<PointResult, EngineError> + Sync, SweepError> {
    let mut results: HashMap<(String, bool), PointResult> = HashMap::new();
    for fig in &exp.figures {
        let parts: Vec<PathBuf> = dirs.iter().map(|d| d.join("data").join(format!("{}.csv", fig.spec.name))).collect();
        let joined = merge::join(&parts)?;
        let expected = merge::sidecar(&fig.grid, &part_meta(exp, fig.grid.rank), Shard::WHOLE);
        if merge::sidecar(&joined.grid, &joined.run, Shard::WHOLE) != expected {
            return Err(SweepError::Input(format!(
                "{}: not figure `{}` of {} as it runs now (its grid, seed, engine, trials or dsa-sim version differ): \
                 rerun the shards with this experiment file",
                joined.first.display(),
                fig.spec.name,
                exp.path.display()
            )));
        }
        for row in joined.rows {
            let key = (serde_json::to_string(&row.scenario).unwrap_or_default(), fig.grid.rank);
            results.insert(key, row.result);
        }
    }
    Ok(move |s: &Scenario, rank: bool| {
        let key = (serde_json::to_string(s).unwrap_or_default(), rank);
        results
            .get(&key)
            .cloned()
            .ok_or_else(|| EngineError::TooLarge("run --merge: a grid point is missing from the shard folders".into()))
    })
}
