//! `run` and `calibrate --experiment`: an experiment file run into a result folder (data,
//! figures, report), with what was written as the command's result.

use super::CommandError;
use crate::experiment::{run_file, ExperimentKind, RunSettings, RunSummary};
use crate::progress::Progress;
use crate::sweep::Shard;
use std::path::{Path, PathBuf};

/// The inputs of `run`, as its flags give them.
#[derive(Debug, Clone)]
pub struct RunRequest<'a> {
    /// The experiment file.
    pub file: &'a Path,
    /// The result folder (default `results/NAME`).
    pub out: Option<&'a Path>,
    /// Worker threads; `None`: all cores.
    pub threads: Option<usize>,
    /// Finish a run that was killed.
    pub resume: bool,
    /// `I/N` or `auto`: compute one shard of every figure's grid.
    pub shard: Option<&'a str>,
    /// Result folders of the shards to join.
    pub merge: &'a [PathBuf],
    /// Replaces the experiment's seed.
    pub seed: Option<u64>,
    /// Where the vector model's trials run, replacing the file's `device` (None: the file's).
    pub device: Option<crate::indexer::device::Device>,
}

/// What `run` wrote.
#[derive(Debug, Clone)]
pub struct RunDone {
    /// The experiment file.
    pub(crate) file: PathBuf,
    /// What was written.
    pub(crate) summary: RunSummary,
    /// The shard computed, if any.
    pub(crate) shard: Option<Shard>,
    /// Whether the run resumed.
    pub(crate) resumed: bool,
}

/// Runs an experiment file (every grid point reported to `progress`).
pub fn run(req: &RunRequest, progress: &dyn Progress) -> Result<RunDone, CommandError> {
    let shard = req.shard.map(Shard::parse).transpose()?;
    let settings = RunSettings {
        threads: req.threads,
        resume: req.resume,
        seed: req.seed,
        shard,
        merge: req.merge.to_vec(),
        device: req.device,
    };
    let summary = run_file(req.file, req.out, &settings, progress)?;
    Ok(RunDone { file: req.file.to_path_buf(), summary, shard, resumed: req.resume })
}

impl RunDone {
    /// The `run --json` object.
    pub fn to_json(&self) -> serde_json::Value {
        let done = &self.summary;
        let kind = match done.kind {
            ExperimentKind::Calibration => "calibration",
            ExperimentKind::Figures => "figures",
        };
        serde_json::json!({
            "experiment": done.name,
            "kind": kind,
            "folder": done.folder.display().to_string(),
            "report": if self.shard.is_some() { serde_json::Value::Null } else { done.folder.join("report.md").display().to_string().into() },
            "shard": self.shard.map(|s| s.to_string()),
            "figures": done.figures,
            "points": done.points,
            "files": done.files,
            "seed": done.seed,
            "resumed": self.resumed,
            "dsa_sim_version": env!("CARGO_PKG_VERSION"),
        })
    }

    /// The line `run` prints, given the seconds the run took.
    pub fn to_text(&self, secs: f64) -> String {
        let done = &self.summary;
        if let Some(sh) = self.shard {
            return format!(
                "{}: shard {sh}: {} points of {} figures in {}; join the shards with dsa-sim run {} --merge DIR…\n",
                done.name,
                done.points,
                done.figures,
                done.folder.join("data").display(),
                self.file.display()
            );
        }
        let report = done.folder.join("report.md");
        match done.kind {
            ExperimentKind::Calibration => {
                format!("wrote {} ({secs:.1} s); open {}\n", done.folder.display(), report.display())
            }
            ExperimentKind::Figures => format!(
                "{}: {} figures, {} points, {} files in {} ({secs:.1} s); open {}\n",
                done.name,
                done.figures,
                done.points,
                done.files,
                done.folder.display(),
                report.display()
            ),
        }
    }
}

/// `calibrate --experiment FILE.toml`: the calibration experiment run into `out` (default
/// `results/NAME`) on `threads` workers; returns the folder written.
pub fn calibration_experiment(
    file: &Path,
    out: Option<&Path>,
    threads: Option<usize>,
) -> Result<PathBuf, CommandError> {
    Ok(crate::engine::in_pool(threads, || crate::experiment::calibration::run_experiment(file, out))??)
}
