//! Running an experiment: every figure's grid, its data files, the figures and the report, staged
//! in a temporary folder and moved into place at the end.

use super::report::Spread;
use super::{Dataset, Experiment, FigureKind, PreparedFigure};
use crate::diagnosis::rule;
use crate::engine::EngineError;
use crate::figure::{
    binary_label, save_figure, CellColors, Corner, Heatmap, LineChart, Panel, PointSet, RefLine, Scale, Series,
};
use crate::output::{StageOptions, StagedDir, STAGE_MARKER};
use crate::progress::Progress;
use crate::scenario::{Field, Scenario, Unit};
use crate::sweep::{run_grid, to_json, Format, Grid, Output, PointResult, Row, SweepError, SweepOptions};
use crate::verdict::Call;
use plotters::style::RGBColor;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

/// How to run an experiment.
#[derive(Debug, Clone, Default)]
pub struct RunSettings {
    /// Worker threads for the grids.
    pub threads: Option<usize>,
    /// Continue the staging folder left by an interrupted run of the same experiment: figures
    /// already computed are read back, a figure cut short resumes from its partial file.
    pub resume: bool,
    /// Replaces the experiment file's seed (figures experiments).
    pub seed: Option<u64>,
    /// Compute only this shard of every figure's grid, into `OUT/data/` (figures experiments).
    pub shard: Option<crate::sweep::Shard>,
    /// Take every point's result from these shard folders instead of computing it.
    pub merge: Vec<PathBuf>,
    /// Replaces the experiment file's `device` (figures experiments; the results do not depend
    /// on it).
    pub device: Option<crate::indexer::device::Device>,
}

/// Figure size in pixels (SVG and PNG).
pub(crate) const FIGURE_SIZE: (u32, u32) = (1000, 640);

/// Before a resume: keeps only the rows (data/*.csv and data/*.csv.partial) and the marker of
/// a staging folder. Figures, JSON and report are rewritten from the rows, and the temporary
/// files of a write that was cut short (`.NAME.tmp-PID`, lock files) must not reach the result.
fn clean_stage(stage: &Path) {
    let _ = std::fs::remove_dir_all(stage.join("figures"));
    for dir in [stage.to_path_buf(), stage.join("data")] {
        let Ok(entries) = std::fs::read_dir(&dir) else { continue };
        for e in entries.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            let rows =
                dir != stage && !name.starts_with('.') && (name.ends_with(".csv") || name.ends_with(".csv.partial"));
            if !rows && name != STAGE_MARKER && e.file_type().is_ok_and(|t| t.is_file()) {
                let _ = std::fs::remove_file(e.path());
            }
        }
    }
}

/// Every file an experiment writes into its folder (relative path, what writes it), in the
/// order [`run`] writes them, temporaries included: the list checked for collisions.
pub(crate) fn output_names(exp: &Experiment) -> Vec<(String, String)> {
    let mut names = Vec::new();
    for f in &exp.figures {
        let n = &f.spec.name;
        let what = format!("figure `{n}`");
        for p in [
            format!("data/{n}.csv"),
            format!("data/{n}.csv.partial"),
            format!("data/{n}.json"),
            format!("figures/{n}.svg"),
            format!("figures/{n}.png"),
        ] {
            names.push((p, what.clone()));
        }
    }
    for d in &exp.data {
        let name = data_copy_name(d);
        names.push((
            format!("data/measured-{name}"),
            format!("the copy of data `{}` ({})", d.spec.name, d.path.display()),
        ));
    }
    for f in ["scenario.toml", "experiment.toml", "report.md"] {
        names.push((f.to_string(), format!("the run's {f}")));
    }
    names
}

fn data_copy_name(d: &Dataset) -> &str {
    d.path.file_name().and_then(|n| n.to_str()).unwrap_or("measured.csv")
}

/// Runs `exp` with `eval(scenario, with_rank)` and writes the result folder `out`, reporting
/// each figure's grid to `progress`. Returns the files written, relative to `out`.
///
/// The folder is written by the one staged-folder writer ([`crate::output::StagedDir`]): it is
/// built in `.NAME.partial` next to `out` and moved into place when complete; an existing `out`
/// is replaced only if it is a dsa-sim result that holds none of the experiment's inputs, and a
/// second run on the same `out` is refused while this one runs. A failure removes the staging
/// folder; a run killed part-way leaves it, with every finished row, and `settings.resume`
/// continues it.
pub fn run(
    exp: &Experiment,
    out: &Path,
    eval: &(dyn Fn(&Scenario, bool) -> Result<PointResult, EngineError> + Sync),
    settings: &RunSettings,
    progress: &dyn Progress,
) -> Result<Vec<PathBuf>, SweepError> {
    crate::output::check_collisions(output_names(exp))?;
    let mut fingerprint = format!("dsa-sim {} experiment\n{}", env!("CARGO_PKG_VERSION"), exp.source);
    if let Some(seed) = settings.seed {
        // `run --seed`: a staging folder of another seed is not resumed.
        fingerprint.push_str(&format!("\nseed override {seed}"));
    }
    let inputs: Vec<&Path> =
        std::iter::once(exp.path.as_path()).chain(exp.data.iter().map(|d| d.path.as_path())).collect();
    let staged =
        StagedDir::begin(out, &StageOptions { resume: settings.resume, fingerprint: &fingerprint, inputs: &inputs })?;
    let stage = staged.path().to_path_buf();
    let resume = staged.resumed();
    if resume {
        clean_stage(&stage);
    }
    for d in ["data", "figures"] {
        std::fs::create_dir_all(stage.join(d)).map_err(|e| crate::output::OutputError::write(&stage.join(d), e))?;
    }
    // On an error `staged` is dropped, which removes the staging folder.
    let files = write_all(exp, &stage, eval, &RunSettings { resume, ..settings.clone() }, progress)?;
    staged.commit()?;
    Ok(files)
}

fn write_all(
    exp: &Experiment,
    stage: &Path,
    eval: &(dyn Fn(&Scenario, bool) -> Result<PointResult, EngineError> + Sync),
    settings: &RunSettings,
    progress: &dyn Progress,
) -> Result<Vec<PathBuf>, SweepError> {
    let mut files = Vec::new();
    let meta = serde_json::json!({"experiment": exp.name, "engine": exp.engine.to_string(), "trials": exp.trials, "seed": exp.seed});
    let mut sections = Vec::new();
    let mut spreads = Vec::new();
    for fig in &exp.figures {
        let rank = fig.grid.rank;
        let csv = stage.join("data").join(format!("{}.csv", fig.spec.name));
        if settings.resume {
            crate::sweep::adopt_finished(&csv, &fig.spec.name)?;
        }
        let opts = SweepOptions {
            threads: settings.threads,
            resume: settings.resume,
            limit: None,
            format: Format::Csv,
            fingerprint: fig.spec.name.clone(),
            meta: meta.clone(),
            shard: crate::sweep::Shard::WHOLE,
            sidecar: None,
            replace_only_ours: false,
        };
        let (rows, _) = run_grid(&fig.grid, |s: &Scenario| eval(s, rank), &Output::File(csv), &opts, progress)?;
        let json = stage.join("data").join(format!("{}.json", fig.spec.name));
        crate::sweep::write_atomic(&json, to_json(&fig.grid, &rows, &meta).as_bytes())?;
        files.push(PathBuf::from(format!("data/{}.csv", fig.spec.name)));
        files.push(PathBuf::from(format!("data/{}.json", fig.spec.name)));
        let data = fig.spec.data.as_ref().and_then(|n| exp.data.iter().find(|d| &d.spec.name == n));
        let figure_dir = stage.join("figures");
        let (table, saved) = match fig.spec.kind {
            FigureKind::RecallCurves | FigureKind::RankBand => {
                let chart = line_chart(exp, fig, &rows, data);
                (curve_table(fig, &rows), save_figure(&chart, &figure_dir, &fig.spec.name, FIGURE_SIZE))
            }
            FigureKind::Heatmap => {
                (String::new(), save_figure(&heatmap(fig, &rows), &figure_dir, &fig.spec.name, FIGURE_SIZE))
            }
            FigureKind::RegimeMap => {
                let (map, table) = regime_map(fig, &rows);
                (table, save_figure(&map, &figure_dir, &fig.spec.name, FIGURE_SIZE))
            }
        };
        saved.map_err(|e| SweepError::Output(format!("figure `{}`: {e}", fig.spec.name)))?;
        files.push(PathBuf::from(format!("figures/{}.svg", fig.spec.name)));
        files.push(PathBuf::from(format!("figures/{}.png", fig.spec.name)));
        let spread = largest_spread(fig, &rows);
        sections.push(super::report::figure_section(exp, fig, data, &table, spread.as_ref()));
        if let Some(sp) = spread {
            spreads.push((fig.spec.title.clone().unwrap_or_else(|| fig.spec.name.clone()), fig.grid.axes[0].field, sp));
        }
    }
    for d in &exp.data {
        let name = data_copy_name(d);
        let dest = stage.join("data").join(format!("measured-{name}"));
        let bytes =
            std::fs::read(&d.path).map_err(|e| SweepError::Input(format!("cannot read {}: {e}", d.path.display())))?;
        crate::sweep::write_atomic(&dest, &bytes)?;
        files.push(PathBuf::from(format!("data/measured-{name}")));
    }
    let scen = format!(
        "# Base scenario of experiment `{}`, fully resolved (dsa-sim {}).\n# Figures may override fields (see report.md).\n{}",
        exp.name,
        env!("CARGO_PKG_VERSION"),
        exp.base.to_toml_string()
    );
    crate::sweep::write_atomic(&stage.join("scenario.toml"), scen.as_bytes())?;
    crate::sweep::write_atomic(&stage.join("experiment.toml"), exp.source.as_bytes())?;
    files.push("scenario.toml".into());
    files.push("experiment.toml".into());
    let report = super::report::report_md(exp, &sections, &spreads);
    crate::sweep::write_atomic(&stage.join("report.md"), report.as_bytes())?;
    files.push("report.md".into());
    Ok(files)
}

/// A short label for a field's value: `k = 512`, `repeat = 8`, `L = 64K`.
pub(crate) fn value_label(field: Field, text: &str) -> String {
    let v = match text.parse::<f64>() {
        Ok(x) if field.spec().unit == Unit::TokenSpan && x >= 1024.0 && x % 1024.0 == 0.0 => binary_label(x),
        _ => text.to_string(),
    };
    format!("{} = {v}", field.symbol())
}

fn x_scale(fig: &PreparedFigure) -> Scale {
    let ax = &fig.grid.axes[0];
    let xs: Vec<f64> = ax.texts.iter().filter_map(|v| v.parse().ok()).collect();
    let lo = xs.iter().cloned().fold(f64::INFINITY, f64::min);
    let hi = xs.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
    let wide = lo > 0.0 && hi / lo >= 16.0;
    let tokens = ax.field.spec().unit != Unit::Plain;
    match fig.spec.log_x {
        Some(true) if tokens => Scale::Log2,
        Some(true) => Scale::Log10,
        Some(false) => Scale::Linear,
        None if wide && tokens => Scale::Log2,
        None => Scale::Linear,
    }
}

fn axis_title(field: Field, scale: Scale) -> String {
    let base = field.axis_title();
    if scale.is_log() {
        format!("{base}, log scale")
    } else {
        base
    }
}

/// One-line summary of the scenario fields that shape the figure (not the varied ones).
pub(crate) fn scenario_summary(grid: &Grid) -> String {
    let s = &grid.base;
    let d = Scenario::default();
    let varied = |f: Field| grid.axes.iter().any(|a| a.field == f);
    let mut parts = Vec::new();
    // Only the fields the scenario's model reads: a vector scenario's dprime is not a parameter.
    let discrimination = match s.model {
        crate::scenario::Model::Vector => Field::Alignment,
        _ => Field::Dprime,
    };
    let always =
        [Field::ContextLen, Field::IndexTopk, Field::CompressRatio, Field::Overlap, Field::Window, discrimination];
    for &f in Field::ALL {
        if varied(f) || !f.spec().scope.read_by(s.model) {
            continue;
        }
        let v = s.text(f);
        if always.contains(&f) || v != d.text(f) {
            parts.push(value_label(f, &v));
        }
    }
    parts.join(", ")
}

fn xy(row: &Row) -> f64 {
    row.values[0].parse().unwrap_or(f64::NAN)
}

/// Rows grouped by the series axes (all axes after x), in grid order: (coords, label, rows).
fn group_series<'a>(fig: &PreparedFigure, rows: &'a [Row]) -> Vec<(Vec<usize>, String, Vec<&'a Row>)> {
    let g = &fig.grid;
    let mut groups: Vec<(Vec<usize>, String, Vec<&Row>)> = Vec::new();
    for r in rows {
        let c = g.coords(r.index)[1..].to_vec();
        if let Some(gr) = groups.iter_mut().find(|gr| gr.0 == c) {
            gr.2.push(r);
        } else {
            let label: Vec<String> =
                g.axes[1..].iter().zip(&r.values[1..]).map(|(a, v)| value_label(a.field, v)).collect();
            groups.push((c, label.join(", "), vec![r]));
        }
    }
    groups
}

fn num(s: &str) -> Option<f64> {
    s.parse().ok()
}

fn line_chart(exp: &Experiment, fig: &PreparedFigure, rows: &[Row], data: Option<&Dataset>) -> LineChart {
    let g = &fig.grid;
    let xf = g.axes[0].field;
    let scale = x_scale(fig);
    let rank = fig.spec.kind == FigureKind::RankBand;
    let groups = group_series(fig, rows);
    let mut series = Vec::new();
    for (c, label, rs) in &groups {
        let color = c.first().copied().unwrap_or(0);
        let dashed = c.get(1).is_some_and(|&i| i > 0);
        let mut s = Series { label: label.clone(), color, dashed, ..Default::default() };
        for r in rs {
            let x = xy(r);
            if rank {
                let q = r.result.rank.unwrap_or_default();
                if let Some(m) = q.p50 {
                    s.points.push((x, m as f64));
                }
                if let (Some(a), Some(b)) = (q.p05, q.p95) {
                    s.band.push((x, a as f64, b as f64));
                }
            } else {
                s.points.push((x, r.result.recall));
                if r.result.ci_high > r.result.ci_low {
                    s.band.push((x, r.result.ci_low, r.result.ci_high));
                }
            }
        }
        if rank && s.label.is_empty() {
            s.label = "median rank (band: 5–95%)".into();
        } else if rank {
            s.label = format!("{}: median (band 5–95%)", s.label);
        }
        series.push(s);
    }
    let mut chart = LineChart {
        title: fig
            .spec
            .title
            .clone()
            .unwrap_or_else(|| if rank { "Needle rank".into() } else { "Needle recall".into() }),
        subtitle: scenario_summary(g),
        x_label: axis_title(xf, scale),
        y_label: if rank { "needle rank among candidates (1 = top; log scale)".into() } else { "needle recall".into() },
        x_scale: scale,
        y_scale: if rank { Scale::Log10 } else { Scale::Linear },
        y_range: if rank { None } else { Some((0.0, 1.0)) },
        series,
        legend: if rank { Corner::UpperLeft } else { Corner::UpperRight },
        ..Default::default()
    };
    if !rank {
        // Rising curves leave the lower right empty, falling ones the upper right.
        let (mut a, mut b) = (0.0, 0.0);
        for (_, _, rs) in &groups {
            a += rs.first().map_or(0.0, |r| r.result.recall);
            b += rs.last().map_or(0.0, |r| r.result.recall);
        }
        if b > a {
            chart.legend = Corner::LowerRight;
        }
    }
    // Coverage horizons k·c when x is the context length; the kernel limit when x is k.
    if xf == Field::ContextLen && !rank {
        let kpos = g.axes.iter().position(|a| a.field == Field::IndexTopk);
        let ks: Vec<(u64, usize)> = match kpos {
            Some(p) => g.axes[p]
                .texts
                .iter()
                .enumerate()
                .filter_map(|(i, v)| v.parse().ok().map(|k| (k, if p == 1 { i } else { 6 })))
                .collect(),
            None => vec![(g.base.index_topk, 6)],
        };
        for (k, color) in ks {
            let h = k.saturating_mul(g.base.compress_ratio);
            chart.vlines.push(RefLine { at: h as f64, label: format!("k·c = {}", binary_label(h as f64)), color });
        }
    }
    if xf == Field::IndexTopk && !rank {
        chart.vlines.push(RefLine {
            at: g.base.max_topk as f64,
            label: format!("kernel max k = {}", g.base.max_topk),
            color: 6,
        });
    }
    if rank {
        for (i, k) in fig.spec.k_lines.iter().enumerate() {
            chart.hlines.push(RefLine {
                at: *k as f64,
                label: format!("k = {k}: selected below this line"),
                color: 1 + i,
            });
        }
    }
    if let (Some(d), false) = (data, rank) {
        let provenance = d.spec.label.clone().unwrap_or_else(|| "measured".into());
        let mut sets: Vec<(Vec<Option<usize>>, PointSet)> = Vec::new();
        for m in &d.table.rows {
            let Some(c) = match_measured(g, m) else { continue };
            let x = match xf {
                Field::ContextLen => m.context_len as f64,
                Field::IndexTopk => m.index_topk as f64,
                Field::Depth => m.depth.unwrap_or(f64::NAN),
                Field::Repeat => m.repeat.map_or(f64::NAN, |v| v as f64),
                _ => f64::NAN,
            };
            if !x.is_finite() {
                continue;
            }
            let (lo, hi) = m.interval();
            let color = c.first().copied().flatten().unwrap_or(6);
            match sets.iter_mut().find(|s| s.0 == c) {
                Some(s) => s.1.points.push((x, m.observed(), lo, hi)),
                None => {
                    let what: Vec<String> = g.axes[1..]
                        .iter()
                        .zip(&c)
                        .filter_map(|(a, i)| i.map(|i| value_label(a.field, &a.texts[i])))
                        .collect();
                    let label =
                        if what.is_empty() { provenance.clone() } else { format!("{provenance}: {}", what.join(", ")) };
                    sets.push((c, PointSet { label, color, points: vec![(x, m.observed(), lo, hi)] }));
                }
            }
        }
        chart.points = sets.into_iter().map(|s| s.1).collect();
        chart.note = format!("Squares: {provenance} ({}), bars: Wilson 95% intervals.", data_file_name(d));
        if !rank && xf == Field::ContextLen {
            chart.note.push_str(" Dashed verticals: coverage horizons k·c.");
        }
    }
    let _ = exp;
    chart
}

fn data_file_name(d: &Dataset) -> String {
    d.path.file_name().and_then(|n| n.to_str()).unwrap_or("data").to_string()
}

/// Which series (coords of the axes after x) a measured row belongs to, if it fits the figure:
/// columns it gives must equal a series value or, for fixed fields, the base scenario.
fn match_measured(g: &Grid, m: &crate::measured::Observation) -> Option<Vec<Option<usize>>> {
    let given: [(Field, Option<f64>); 6] = [
        (Field::ContextLen, Some(m.context_len as f64)),
        (Field::IndexTopk, Some(m.index_topk as f64)),
        (Field::Depth, m.depth),
        (Field::Repeat, m.repeat.map(|v| v as f64)),
        (Field::CompressRatio, m.compress_ratio.map(|v| v as f64)),
        (Field::Window, m.window.map(|v| v as f64)),
    ];
    let mut coords = vec![None; g.axes.len() - 1];
    for (f, v) in given {
        let Some(v) = v else { continue };
        if g.axes[0].field == f {
            continue;
        }
        if let Some(p) = g.axes.iter().position(|a| a.field == f) {
            let i = g.axes[p].texts.iter().position(|t| num(t) == Some(v))?;
            coords[p - 1] = Some(i);
        } else if f != Field::Depth && g.base.number(f) != Some(v) {
            return None;
        }
    }
    Some(coords)
}

fn fmt3(x: f64) -> String {
    format!("{x:.3}")
}

/// The [`Spread`] of a recall-curves figure with at least two curves (first largest wins ties).
pub(crate) fn largest_spread(fig: &PreparedFigure, rows: &[Row]) -> Option<Spread> {
    if fig.spec.kind != FigureKind::RecallCurves {
        return None;
    }
    let groups = group_series(fig, rows);
    if groups.len() < 2 {
        return None;
    }
    let nx = fig.grid.axes[0].values.len();
    let mut best: Option<Spread> = None;
    for xi in 0..nx {
        let at: Vec<(&str, &Row)> =
            groups.iter().filter_map(|(_, l, rs)| rs.get(xi).map(|r| (l.as_str(), *r))).collect();
        let hi = at.iter().copied().reduce(|a, b| if b.1.result.recall > a.1.result.recall { b } else { a });
        let lo = at.iter().copied().reduce(|a, b| if b.1.result.recall < a.1.result.recall { b } else { a });
        let (Some(hi), Some(lo)) = (hi, lo) else { continue };
        let delta = hi.1.result.recall - lo.1.result.recall;
        if best.as_ref().is_none_or(|b| delta > b.delta) {
            let side = |(l, r): (&str, &Row)| (l.to_string(), r.result.recall, r.result.ci_low, r.result.ci_high);
            best = Some(Spread { delta, x: fig.grid.axes[0].texts[xi].clone(), high: side(hi), low: side(lo) });
        }
    }
    best
}

/// A markdown table of the curves: one row per x, one column per series.
fn curve_table(fig: &PreparedFigure, rows: &[Row]) -> String {
    let g = &fig.grid;
    let nx = g.axes[0].values.len();
    if nx > 40 {
        return String::new();
    }
    let groups = group_series(fig, rows);
    let rank = fig.spec.kind == FigureKind::RankBand;
    let mut t = String::new();
    let xf = &g.axes[0].field;
    let _ = write!(t, "| {xf} |");
    for (_, label, _) in &groups {
        let l = if label.is_empty() {
            if rank {
                "median rank [5%, 95%]"
            } else {
                "recall"
            }
        } else {
            label
        };
        let _ = write!(t, " {l} |");
    }
    t.push_str("\n|---|");
    t.push_str(&"---|".repeat(groups.len()));
    t.push('\n');
    for xi in 0..nx {
        let _ = write!(t, "| {} |", g.axes[0].texts[xi]);
        for (_, _, rs) in &groups {
            let cell = rs.get(xi).map_or(String::new(), |r| {
                if rank {
                    let q = r.result.rank.unwrap_or_default();
                    let f = |v: Option<u64>| v.map_or("never".to_string(), |v| v.to_string());
                    format!("{} [{}, {}]", f(q.p50), f(q.p05), f(q.p95))
                } else if r.result.ci_high > r.result.ci_low {
                    format!("{} [{}, {}]", fmt3(r.result.recall), fmt3(r.result.ci_low), fmt3(r.result.ci_high))
                } else {
                    fmt3(r.result.recall)
                }
            });
            let _ = write!(t, " {cell} |");
        }
        t.push('\n');
    }
    t
}

fn cat_label(field: Field, text: &str) -> String {
    match text.parse::<f64>() {
        Ok(x) if field.spec().unit != Unit::Plain && x >= 1024.0 && x % 1024.0 == 0.0 => binary_label(x),
        _ => text.to_string(),
    }
}

fn heatmap(fig: &PreparedFigure, rows: &[Row]) -> Heatmap {
    let g = &fig.grid;
    let (nx, ny) = (g.axes[0].values.len(), g.axes[1].values.len());
    let nf = g.axes.get(2).map_or(1, |a| a.values.len());
    let mut panels: Vec<Panel> = (0..nf)
        .map(|f| Panel {
            title: g.axes.get(2).map_or(String::new(), |a| value_label(a.field, &a.texts[f])),
            values: vec![vec![None; nx]; ny],
        })
        .collect();
    for r in rows {
        let c = g.coords(r.index);
        panels[c.get(2).copied().unwrap_or(0)].values[c[1]][c[0]] = Some(r.result.recall);
    }
    Heatmap {
        title: fig.spec.title.clone().unwrap_or_else(|| "Needle recall".into()),
        x_label: axis_title(g.axes[0].field, Scale::Linear),
        y_label: axis_title(g.axes[1].field, Scale::Linear),
        x_cats: g.axes[0].texts.iter().map(|v| cat_label(g.axes[0].field, v)).collect(),
        y_cats: g.axes[1].texts.iter().map(|v| cat_label(g.axes[1].field, v)).collect(),
        panels,
        colors: CellColors::Continuous { label: "recall".into(), lo: 0.0, hi: 1.0 },
        annotate: nx * nf <= 14,
        note: scenario_summary(g),
    }
}

const REGIME_COLORS: [RGBColor; 5] =
    [RGBColor(0, 158, 115), RGBColor(240, 228, 66), RGBColor(230, 159, 0), RGBColor(213, 94, 0), RGBColor(120, 28, 60)];

fn regime_map(fig: &PreparedFigure, rows: &[Row]) -> (Heatmap, String) {
    let g = &fig.grid;
    let target = fig.spec.target.unwrap_or(0.9);
    let ks: Vec<&String> = g.axes[2].texts.iter().collect();
    let (nx, ny, nk) = (g.axes[0].values.len(), g.axes[1].values.len(), ks.len());
    // A cell's category: the first k of the list reaching the target (nk: none does).
    let mut best = vec![vec![nk; nx]; ny];
    for r in rows {
        let c = g.coords(r.index);
        if r.result.recall >= target && c[2] < best[c[1]][c[0]] {
            best[c[1]][c[0]] = c[2];
        }
    }
    // A category's call is the rule's on a given scenario (as `verdict` without `--data` makes
    // it) whose recall reaches the target from the category's k on: its numbers at the first k
    // (the configured one) and at the largest k within the kernel maximum.
    let kmax = g.base.max_topk;
    let beyond = |k: &str| k.parse::<u64>().is_ok_and(|k| k > kmax);
    let call_of = |rs: &[f64]| {
        let within = rs.iter().zip(&ks).filter(|(_, k)| !beyond(k)).map(|(r, _)| *r).fold(0.0, f64::max);
        let now = if beyond(ks[0]) { 0.0 } else { rs[0] };
        rule::on_scenario(Call::of_numbers(now, within, target))
    };
    let mut cats: Vec<(String, RGBColor)> = Vec::new();
    for (i, k) in ks.iter().enumerate() {
        let mut rs = vec![0.0; nk];
        rs[i..].iter_mut().for_each(|r| *r = 1.0);
        let text = match call_of(&rs) {
            Call::Saturated => format!("k = {k} suffices"),
            Call::CoverageLimited => format!("needs k = {k}"),
            c => format!("needs k = {k} > kernel max {kmax}: {c}"),
        };
        let color = if beyond(k) {
            RGBColor(170, 68, 110)
        } else {
            REGIME_COLORS[(i * (REGIME_COLORS.len() - 2) / (nk - 1).max(1)).min(REGIME_COLORS.len() - 2)]
        };
        cats.push((text, color));
    }
    cats.push((format!("no k ≤ {} reaches {target}", ks[nk - 1]), REGIME_COLORS[REGIME_COLORS.len() - 1]));
    let mut counts = vec![0usize; nk + 1];
    for row in &best {
        for &b in row {
            counts[b] += 1;
        }
    }
    let mut table = format!("Cells by regime (target recall {target}):\n\n| regime | cells |\n|---|---|\n");
    for (c, n) in cats.iter().zip(&counts) {
        let _ = writeln!(table, "| {} | {n} |", c.0);
    }
    let map = Heatmap {
        title: fig.spec.title.clone().unwrap_or_else(|| format!("Smallest k reaching recall {target}")),
        x_label: axis_title(g.axes[0].field, Scale::Linear),
        y_label: axis_title(g.axes[1].field, Scale::Linear),
        x_cats: g.axes[0].texts.iter().map(|v| cat_label(g.axes[0].field, v)).collect(),
        y_cats: g.axes[1].texts.iter().map(|v| cat_label(g.axes[1].field, v)).collect(),
        panels: vec![Panel { title: scenario_summary(g), values: best.iter().map(|r| r.iter().map(|&b| Some(b as f64)).collect()).collect() }],
        colors: CellColors::Categorical(cats),
        annotate: false,
        note: format!("Green: saturated at the smallest k. Yellow/orange: coverage-limited (a larger k within the kernel maximum {kmax} fixes it). Dark: discrimination-limited (only a k beyond the kernel maximum, or none, reaches the target)."),
    };
    (map, table)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sweep::Grid;

    #[test]
    fn summary_lists_only_the_fields_the_model_reads() {
        let scalar = Scenario::preset("deepseek-v4-flash").unwrap();
        let vector = Scenario { model: crate::scenario::Model::Vector, alignment: 0.12, ..scalar.clone() };
        let summary = |s: &Scenario| scenario_summary(&Grid { base: s.clone(), axes: vec![], rank: false });
        let (sc, ve) = (summary(&scalar), summary(&vector));
        assert!(sc.contains("dprime") && !sc.contains("alignment"), "{sc}");
        assert!(ve.contains("alignment") && !ve.contains("dprime"), "{ve}");
        assert!(ve.contains("L = ") && ve.contains("k = "), "{ve}");
    }
}
