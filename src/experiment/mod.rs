//! Experiment files: [`run_file`] reads one, tells its kind (`ExperimentKind`) and runs it.
//!
//! A figures experiment has a base scenario, the figures to draw (each with its own sweep grid)
//! and optional measured data to overlay. [`run`] computes every grid and writes the result
//! folder: `data/` (CSV and JSON per figure), `figures/` (SVG and PNG), `scenario.toml`,
//! `experiment.toml` (a copy of the input) and `report.md`. A calibration experiment (top-level
//! `data` and `fit`) is run by [`calibration`].
//!
//! ```toml
//! name = "my-study"                 # result folder name (default: the file's stem)
//! title = "Recall of a deep needle"
//! description = "Free text for the report."
//! seed = 1                          # Monte Carlo seed
//! trials = 20000                    # Monte Carlo trials where the exact engine cannot be used
//! engine = "auto"                   # auto | analytic | montecarlo
//! device = "cpu"                    # where vector-model trials run: cpu | cuda | cuda:N,… (same results)
//!
//! [scenario]                        # the base scenario: a preset plus any field overrides
//! preset = "deepseek-v4-flash"
//! dprime = 2.5
//!
//! [[data]]                          # measured recall to overlay (docs/cli.md#measured-data-csv)
//! name = "lab"
//! file = "measured.csv"             # relative to the experiment file
//! label = "measured"                # how points are labelled in figures and the report
//!
//! [[figure]]
//! name = "recall-vs-context"        # file stem of the figure and its data
//! kind = "recall_curves"            # recall_curves | heatmap | rank_band | regime_map
//! title = "Recall vs context length"
//! x = "context_len=1024..1048576:x2"
//! series = ["index_topk=512,1024,2048"]   # one curve per combination (optional)
//! set = { repeat = 1 }              # overrides for this figure only (optional)
//! data = "lab"                      # overlay (optional)
//! ```
//!
//! Heatmaps take `y` (and optionally `facet`, one panel per value); `rank_band` takes `k_lines`;
//! `regime_map` takes `y`, `k = [512, 1024, 2048]` and `target` (default 0.9).

pub mod calibration;
mod render;
mod report;
mod shard;

pub use render::{run, RunSettings};

use crate::engine::{EngineChoice, MAX_TRIALS};
use crate::scenario::{Field, Scenario};
use crate::sweep::{Axis, Grid, SweepError};
use serde::Deserialize;
use std::path::{Path, PathBuf};

/// What a figure shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FigureKind {
    /// Recall vs the x field, one curve per series combination.
    RecallCurves,
    /// Recall over x × y (one panel per facet value).
    Heatmap,
    /// Median needle rank and its 5–95% band vs x, with horizontal k lines.
    RankBand,
    /// Which k (of `k`) first reaches the target recall over x × y.
    RegimeMap,
}

/// One figure of an experiment file.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FigureSpec {
    /// File stem of the figure and of its data.
    pub name: String,
    /// What to draw.
    pub kind: FigureKind,
    /// Title (default: from the kind).
    #[serde(default)]
    pub title: Option<String>,
    /// Caption paragraph in the report.
    #[serde(default)]
    pub caption: Option<String>,
    /// The x axis, `FIELD=SPEC`.
    pub x: String,
    /// The y axis (heatmap, regime_map).
    #[serde(default)]
    pub y: Option<String>,
    /// Series axes (recall_curves, rank_band).
    #[serde(default)]
    pub series: Vec<String>,
    /// Panel axis (heatmap).
    #[serde(default)]
    pub facet: Option<String>,
    /// Field overrides for this figure.
    #[serde(default)]
    pub set: toml::Table,
    /// Name of a `[[data]]` table to overlay.
    #[serde(default)]
    pub data: Option<String>,
    /// Force a log (true) or linear (false) x axis; default: log for token counts.
    #[serde(default)]
    pub log_x: Option<bool>,
    /// Horizontal reference ranks (rank_band).
    #[serde(default)]
    pub k_lines: Vec<u64>,
    /// The k values compared (regime_map).
    #[serde(default)]
    pub k: Vec<u64>,
    /// Target recall (regime_map).
    #[serde(default)]
    pub target: Option<f64>,
}

/// A measured table declared by an experiment.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DataSpec {
    /// Name figures refer to.
    pub name: String,
    /// CSV path, relative to the experiment file.
    pub file: PathBuf,
    /// Provenance label shown in figures and the report.
    #[serde(default)]
    pub label: Option<String>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawExperiment {
    name: Option<String>,
    title: Option<String>,
    #[serde(default)]
    description: String,
    #[serde(default = "default_seed")]
    seed: u64,
    #[serde(default = "default_trials")]
    trials: u64,
    #[serde(default)]
    engine: EngineChoice,
    #[serde(default)]
    device: Option<String>,
    #[serde(default)]
    scenario: toml::Table,
    #[serde(default)]
    data: Vec<DataSpec>,
    #[serde(default)]
    figure: Vec<FigureSpec>,
}

fn default_seed() -> u64 {
    1
}
fn default_trials() -> u64 {
    20_000
}

/// A measured table declared by the experiment, loaded.
#[derive(Debug, Clone)]
pub struct Dataset {
    /// Its declaration.
    pub spec: DataSpec,
    /// Resolved path.
    pub path: PathBuf,
    /// The table, read by the one measured-data reader ([`crate::measured::load_csv`]).
    pub table: crate::measured::Dataset,
}

/// A figure with its grid built.
#[derive(Debug, Clone)]
pub struct PreparedFigure {
    /// The declaration.
    pub spec: FigureSpec,
    /// The grid (axes: x, then y / series…, then facet or k).
    pub grid: Grid,
}

/// A parsed, validated experiment.
#[derive(Debug, Clone)]
pub struct Experiment {
    /// Result folder name.
    pub name: String,
    /// Title.
    pub title: String,
    /// Description.
    pub description: String,
    /// Monte Carlo seed.
    pub seed: u64,
    /// Monte Carlo trials.
    pub trials: u64,
    /// Engine choice.
    pub engine: EngineChoice,
    /// Where the vector model's trials run (`device`; the results do not depend on it).
    pub device: crate::indexer::device::Device,
    /// The base scenario.
    pub base: Scenario,
    /// Measured tables.
    pub data: Vec<Dataset>,
    /// Figures, in file order.
    pub figures: Vec<PreparedFigure>,
    /// The experiment file's text.
    pub source: String,
    /// The experiment file's path.
    pub path: PathBuf,
}

/// Longest figure name and data file name (bytes): their outputs and temporaries
/// (`.measured-NAME.tmp-PID`, `NAME.csv.partial`) must stay within a file system's 255.
pub(crate) const MAX_NAME_BYTES: usize = 200;

fn input(msg: String) -> SweepError {
    SweepError::Input(msg)
}

impl Experiment {
    /// Reads and validates an experiment file (every grid point is validated; data files are
    /// loaded and checked).
    pub fn load(path: &Path) -> Result<Experiment, SweepError> {
        let source =
            crate::input::read_to_string(path).map_err(|e| input(format!("cannot read {}: {e}", path.display())))?;
        Experiment::parse(&source, path)
    }

    /// Parses an experiment from its text; `path` locates relative data files and names errors.
    pub fn parse(source: &str, path: &Path) -> Result<Experiment, SweepError> {
        let at = path.display();
        let raw: RawExperiment = toml::from_str(source)
            .map_err(|e| input(format!("{at}: {}", crate::scenario::one_line(e.message(), e.span(), source))))?;
        let name = match raw.name {
            Some(n) => n,
            None => path.file_stem().and_then(|s| s.to_str()).unwrap_or("experiment").to_string(),
        };
        // The folder's staging name and lock (`.NAME.partial`, `.NAME.lock`) must be file names
        // too: a longer name is refused here, before anything is created.
        if name.is_empty() || name.contains(['/', '\\', '\0']) || name.starts_with('.') || name.len() > MAX_NAME_BYTES {
            return Err(input(format!(
                "{at}: name = {}: a folder name without slashes or NUL, not starting with '.', at most {MAX_NAME_BYTES} bytes",
                crate::input::echo_quoted(&name)
            )));
        }
        let engine = raw.engine;
        let device = match &raw.device {
            Some(d) => d.parse().map_err(|e: crate::indexer::device::DeviceError| input(format!("{at}: {e}")))?,
            None => crate::indexer::device::Device::Cpu,
        };
        if raw.trials == 0 || raw.trials > MAX_TRIALS {
            return Err(input(format!("{at}: trials = {}: allowed 1..={MAX_TRIALS}", raw.trials)));
        }
        let base = Scenario::from_toml_table(&raw.scenario).map_err(|e| input(format!("{at}: [scenario]: {e}")))?;
        let dir = path.parent().unwrap_or(Path::new("."));
        let mut data = Vec::new();
        for d in raw.data {
            let p = dir.join(&d.file);
            // The copy data/measured-NAME (and its temporary) must be a valid file name too.
            if p.file_name().is_some_and(|n| n.len() > MAX_NAME_BYTES) {
                return Err(input(format!(
                    "{at}: data `{}`: the file name is longer than {MAX_NAME_BYTES} bytes: too long for its copy data/measured-NAME",
                    d.name
                )));
            }
            let table = crate::measured::load_csv(&p).map_err(|e| input(e.to_string()))?;
            if data.iter().any(|x: &Dataset| x.spec.name == d.name) {
                return Err(input(format!("{at}: data `{}` is declared twice", d.name)));
            }
            data.push(Dataset { spec: d, path: p, table });
        }
        if raw.figure.is_empty() {
            return Err(input(format!("{at}: no [[figure]] tables: nothing to compute")));
        }
        let mut figures: Vec<PreparedFigure> = Vec::new();
        for f in raw.figure {
            let ctx = format!("{at}: figure `{}`", f.name);
            let fail = |e: SweepError| input(format!("{ctx}: {e}"));
            if f.name.is_empty()
                || f.name.contains(['/', '\\', '\0'])
                || f.name.starts_with('.')
                || f.name.len() > MAX_NAME_BYTES
            {
                return Err(input(format!(
                    "{ctx}: name: a file stem without slashes or NUL, not starting with '.', at most {MAX_NAME_BYTES} bytes"
                )));
            }
            if figures.iter().any(|g| g.spec.name == f.name) {
                return Err(input(format!("{ctx}: the name is used twice")));
            }
            if let Some(d) = &f.data {
                if !data.iter().any(|x| &x.spec.name == d) {
                    return Err(input(format!("{ctx}: data = {d:?} is not a [[data]] name")));
                }
            }
            let mut fbase = base.clone();
            for (k, v) in &f.set {
                let text = match v {
                    toml::Value::String(t) => t.clone(),
                    other => other.to_string(),
                };
                Field::from_name(k)
                    .and_then(|f| fbase.set_text(f, &text))
                    .map_err(|e| input(format!("{ctx}: set: {e}")))?;
            }
            fbase.validate().map_err(|e| input(format!("{ctx}: set: {e}")))?;
            let mut axes = vec![Axis::parse(&f.x).map_err(fail)?];
            let need_y = matches!(f.kind, FigureKind::Heatmap | FigureKind::RegimeMap);
            match (&f.y, need_y) {
                (Some(y), true) => axes.push(Axis::parse(y).map_err(fail)?),
                (None, true) => return Err(input(format!("{ctx}: this kind needs `y = \"FIELD=…\"`"))),
                (Some(_), false) => return Err(input(format!("{ctx}: `y` only applies to heatmap and regime_map"))),
                (None, false) => {}
            }
            if !f.series.is_empty() && need_y {
                return Err(input(format!("{ctx}: `series` does not apply to this kind (use `facet` for panels)")));
            }
            for s in &f.series {
                axes.push(Axis::parse(s).map_err(fail)?);
            }
            if let Some(fc) = &f.facet {
                if f.kind != FigureKind::Heatmap {
                    return Err(input(format!("{ctx}: `facet` only applies to heatmap")));
                }
                axes.push(Axis::parse(fc).map_err(fail)?);
            }
            if f.kind == FigureKind::RegimeMap {
                let mut ks = f.k.clone();
                ks.sort_unstable();
                ks.dedup();
                if ks.len() < 2 {
                    return Err(input(format!(
                        "{ctx}: k holds {} distinct value(s) {ks:?}: regime_map needs `k = [K1, K2, …]` with at least two distinct values",
                        ks.len()
                    )));
                }
                if axes.iter().any(|a| a.field == Field::IndexTopk) {
                    return Err(input(format!(
                        "{ctx}: regime_map varies index_topk through `k`; do not use it as an axis"
                    )));
                }
                axes.push(
                    Axis::from_texts(Field::IndexTopk, ks.iter().map(|k| k.to_string()).collect()).map_err(fail)?,
                );
            }
            if let Some(t) = f.target {
                if !(t > 0.0 && t < 1.0) {
                    return Err(input(format!("{ctx}: target = {t}: allowed 0 < target < 1")));
                }
            }
            let rank = f.kind == FigureKind::RankBand;
            let grid = Grid::new(fbase, axes, rank).map_err(fail)?;
            figures.push(PreparedFigure { spec: f, grid });
        }
        let exp = Experiment {
            name,
            title: raw.title.unwrap_or_default(),
            description: raw.description,
            seed: raw.seed,
            trials: raw.trials,
            engine,
            device,
            base,
            data,
            figures,
            source: source.to_string(),
            path: path.to_path_buf(),
        };
        // Two figures, or a figure and a copied data file, must not write the same file.
        crate::output::check_collisions(render::output_names(&exp)).map_err(|e| input(format!("{at}: {e}")))?;
        Ok(exp)
    }

    /// Total number of grid points over all figures.
    pub fn points(&self) -> usize {
        self.figures.iter().map(|f| f.grid.len()).sum()
    }
}

/// What an experiment file asks for, told apart by its top-level keys.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ExperimentKind {
    /// Figures over sweep grids ([`Experiment`]).
    Figures,
    /// A calibration against a measured table: fit, hypotheses, what-if curves and a verdict
    /// ([`calibration`]; the file has top-level `data` and `fit`).
    Calibration,
}

impl ExperimentKind {
    /// The kind of the experiment file whose text is `source` (figures when it does not parse:
    /// the figures parser then names the error).
    pub(crate) fn of(source: &str) -> ExperimentKind {
        if calibration::is_calibration_experiment(source) {
            ExperimentKind::Calibration
        } else {
            ExperimentKind::Figures
        }
    }
}

/// Why [`run_file`] failed.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ExperimentError {
    /// A figures experiment failed (reading, a grid, an engine refusal, writing).
    #[error(transparent)]
    Figures(#[from] SweepError),
    /// A calibration experiment failed.
    #[error(transparent)]
    Calibration(#[from] crate::calibrate::CalibError),
    /// The worker threads were refused or could not start.
    #[error(transparent)]
    Engine(#[from] crate::engine::EngineError),
}

impl crate::error::Classify for ExperimentError {
    fn kind(&self) -> crate::error::ErrorKind {
        match self {
            ExperimentError::Figures(e) => e.kind(),
            ExperimentError::Calibration(e) => e.kind(),
            ExperimentError::Engine(e) => e.kind(),
        }
    }
}

/// What [`run_file`] wrote.
#[derive(Debug, Clone, PartialEq)]
pub struct RunSummary {
    /// The kind of experiment.
    pub(crate) kind: ExperimentKind,
    /// The experiment's name.
    pub(crate) name: String,
    /// The result folder.
    pub(crate) folder: PathBuf,
    /// Figures computed (figures experiments; 0 for a calibration).
    pub(crate) figures: usize,
    /// Grid points computed (figures experiments; 0 for a calibration).
    pub(crate) points: usize,
    /// Files written (figures experiments; 0 for a calibration).
    pub(crate) files: usize,
    /// The seed the grids ran with (figures experiments; None for a calibration).
    pub(crate) seed: Option<u64>,
}

/// Runs the experiment file at `path`, whichever its kind (`ExperimentKind::of`), into `out`
/// (default `results/NAME`), on `settings.threads` workers, reporting each figure's grid to
/// `progress`. A figures experiment checks every grid point with the engine before anything is
/// computed or written.
pub fn run_file(
    path: &Path,
    out: Option<&Path>,
    settings: &RunSettings,
    progress: &dyn crate::progress::Progress,
) -> Result<RunSummary, ExperimentError> {
    crate::engine::check_threads(settings.threads)?;
    let source =
        crate::input::read_to_string(path).map_err(|e| input(format!("cannot read {}: {e}", path.display())))?;
    match ExperimentKind::of(&source) {
        ExperimentKind::Calibration => {
            if settings.shard.is_some() || !settings.merge.is_empty() {
                return Err(input(format!(
                    "--shard / --merge: {} is a calibration experiment, which runs on one machine",
                    path.display()
                ))
                .into());
            }
            if settings.seed.is_some() {
                return Err(input(format!(
                    "--seed: {} is a calibration experiment, which takes no seed override: set its seed in the file",
                    path.display()
                ))
                .into());
            }
            if settings.device.is_some_and(|d| d != crate::indexer::device::Device::Cpu) {
                return Err(input(format!(
                    "--device: {} is a calibration experiment, whose fits run on the CPU",
                    path.display()
                ))
                .into());
            }
            let folder =
                crate::engine::in_pool(settings.threads, || calibration::run_experiment_text(path, &source, out))??;
            let name = folder.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
            Ok(RunSummary {
                kind: ExperimentKind::Calibration,
                name,
                folder,
                figures: 0,
                points: 0,
                files: 0,
                seed: None,
            })
        }
        ExperimentKind::Figures => {
            let mut exp = Experiment::parse(&source, path)?;
            if let Some(seed) = settings.seed {
                exp.seed = seed;
            }
            let device = settings.device.unwrap_or(exp.device);
            device.check().map_err(crate::engine::EngineError::from)?;
            let opts = crate::engine::RunOptions {
                engine: exp.engine,
                trials: exp.trials,
                seed: exp.seed,
                device,
                ..Default::default()
            };
            for fig in &exp.figures {
                fig.grid
                    .check(&opts)
                    .map_err(|e| input(format!("{}: figure `{}`: {e}", path.display(), fig.spec.name)))?;
            }
            let eval = crate::sweep::engine_evaluator(opts);
            let folder = out.map(Path::to_path_buf).unwrap_or_else(|| PathBuf::from("results").join(&exp.name));
            if let Some(sh) = settings.shard {
                let (points, files) = shard::run_shard(&exp, &folder, sh, &eval, settings, progress)?;
                return Ok(RunSummary {
                    kind: ExperimentKind::Figures,
                    name: exp.name.clone(),
                    folder,
                    figures: exp.figures.len(),
                    points,
                    files,
                    seed: Some(exp.seed),
                });
            }
            let files = if settings.merge.is_empty() {
                run(&exp, &folder, &eval, settings, progress)?
            } else {
                let merged = shard::merged_evaluator(&exp, &settings.merge)?;
                run(&exp, &folder, &merged, settings, progress)?
            };
            Ok(RunSummary {
                kind: ExperimentKind::Figures,
                name: exp.name.clone(),
                folder,
                figures: exp.figures.len(),
                points: exp.points(),
                files: files.len(),
                seed: Some(exp.seed),
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = r#"
title = "t"
seed = 7
[scenario]
preset = "deepseek-v4-flash"
[[figure]]
name = "a"
kind = "recall_curves"
x = "context_len=1024..8192:x2"
series = ["index_topk=512,1024"]
set = { repeat = 2 }
[[figure]]
name = "b"
kind = "regime_map"
x = "context_len=1024,4096"
y = "dprime=1..3:3"
k = [1024, 512]
"#;

    #[test]
    fn parses_and_builds_grids() {
        let e = Experiment::parse(GOOD, Path::new("exp/x.toml")).unwrap();
        assert_eq!(e.name, "x");
        assert_eq!(e.seed, 7);
        assert_eq!(e.base.compress_ratio, 4);
        assert_eq!(e.figures[0].grid.len(), 8);
        assert_eq!(e.figures[0].grid.base.repeat, 2);
        let last = e.figures[1].grid.axes.last().unwrap();
        assert_eq!(last.texts, ["512", "1024"]);
        assert_eq!(e.points(), 8 + 12);
    }

    #[test]
    fn bad_files_are_input_errors_naming_the_place() {
        for (text, needle) in [
            (GOOD.replace("x = \"context_len=1024,4096\"", "x = \"contxt=1\""), "unknown field `contxt`"),
            (GOOD.replace("k = [1024, 512]", ""), "needs `k"),
            (GOOD.replace("k = [1024, 512]", "k = [16, 16, 16]"), "at least two distinct"),
            (GOOD.replace("seed = 7", "sed = 7"), "sed"),
            (GOOD.replace("preset = \"deepseek-v4-flash\"", "preset = \"nope\""), "nope"),
            (GOOD.replace("set = { repeat = 2 }", "set = { repeat = 0 }"), "repeat"),
            (GOOD.replace("kind = \"regime_map\"", "kind = \"pie\""), "pie"),
            (GOOD.replace("series = [\"index_topk=512,1024\"]", "series = [\"index_topk=\"]"), "no values"),
        ] {
            let e = Experiment::parse(&text, Path::new("x.toml")).unwrap_err();
            assert!(matches!(e, SweepError::Input(_)));
            let m = e.to_string();
            assert!(m.contains(needle) && m.contains("x.toml") && !m.contains('\n'), "{m}");
        }
    }
}
