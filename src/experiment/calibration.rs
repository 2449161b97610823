//! Calibration experiments: a TOML file naming a measured table, the fit, hypotheses, what-if
//! curves and a verdict target; `run_experiment` writes the result folder (JSON, CSV, report.md)
//! atomically (a temporary folder renamed into place, so never a partial result).
//!
//! ```toml
//! name = "calibrate-dsv4-observations"
//! title = "..."
//! description = "..."
//! data = "dsv4_seed_observations.csv"      # relative to the experiment file
//! data_note = "transcribed, not measured"  # provenance; "transcribed" marks every output
//! fit = "dprime,needle_sd"
//! compare = true
//! curves = ["index_topk=256,512,1024,2048", "score_noise=0,0.5,1"]   # one what-if curve each
//! target = 0.9
//! engine = "auto"   # trials, seed: Monte Carlo where the analytic engine is not exact
//! [scenario]
//! preset = "deepseek-v4-flash"
//! context_len = 16000
//! ```

use crate::calibrate::predict::{parse_predict_specs, predict_grid};
use crate::calibrate::report::CalibrationReport;
use crate::calibrate::{load_csv, parse_fit_spec, CalibError, Problem};
use crate::engine::{EngineChoice, EngineModel, RecallModel, DEFAULT_FIT_TRIALS, DEFAULT_SEED, MAX_TRIALS};
use crate::output::escape::{md_code, md_line, md_text};
use crate::output::{StageOptions, StagedDir};
use crate::present::calibrate::{point_value, BAND_METHOD};
use crate::present::verdict as present;
use crate::scenario::{Field, Scenario};
use crate::verdict::VerdictOptions;
use serde::Deserialize;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

/// A calibration experiment file.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct CalibrationExperiment {
    /// Result folder name.
    #[serde(default)]
    pub(crate) name: Option<String>,
    /// Report title.
    #[serde(default)]
    pub(crate) title: Option<String>,
    /// Report description.
    #[serde(default)]
    pub(crate) description: Option<String>,
    /// The measured table, relative to the experiment file.
    pub(crate) data: String,
    /// Provenance of the table; containing "transcribed" or "not measured" marks every output.
    #[serde(default)]
    pub(crate) data_note: Option<String>,
    /// Fields to fit (`--fit` syntax).
    pub(crate) fit: String,
    /// Compare the named hypotheses.
    #[serde(default)]
    pub(crate) compare: bool,
    /// What-if curves, one `FIELD=V1,V2,…` each.
    #[serde(default)]
    pub(crate) curves: Vec<String>,
    /// Verdict target.
    #[serde(default = "default_target")]
    pub(crate) target: f64,
    /// Engine choice (default auto).
    #[serde(default)]
    pub(crate) engine: EngineChoice,
    /// Monte Carlo trials per evaluation.
    #[serde(default)]
    pub(crate) trials: Option<u64>,
    /// Monte Carlo seed.
    #[serde(default)]
    pub(crate) seed: Option<u64>,
    /// Base scenario (a preset plus overrides).
    #[serde(default)]
    pub(crate) scenario: Option<toml::Table>,
}

fn default_target() -> f64 {
    0.9
}

/// Whether a TOML document is a calibration experiment (it has `data` and `fit` at top level).
pub fn is_calibration_experiment(text: &str) -> bool {
    toml::from_str::<toml::Table>(text).map(|t| t.contains_key("fit") && t.contains_key("data")).unwrap_or(false)
}

/// Runs the experiment at `path`, writing into `out` (default `results/<name>`). Returns the
/// folder written.
pub(crate) fn run_experiment(path: &Path, out: Option<&Path>) -> Result<PathBuf, CalibError> {
    let text = crate::input::read_to_string(path)
        .map_err(|e| CalibError::Input(format!("{}: cannot read: {e}", path.display())))?;
    run_experiment_text(path, &text, out)
}

/// [`run_experiment`] on the text of the file at `path`, already read.
pub(crate) fn run_experiment_text(path: &Path, text: &str, out: Option<&Path>) -> Result<PathBuf, CalibError> {
    let exp: CalibrationExperiment = toml::from_str(text).map_err(|e| {
        CalibError::Input(format!("{}: {}", path.display(), crate::scenario::one_line(e.message(), e.span(), text)))
    })?;
    let name = exp
        .name
        .clone()
        .unwrap_or_else(|| path.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or("calibration".into()));
    // The folder's staging name and lock must be file names too (as for figures experiments).
    if name.is_empty()
        || name.contains(['/', '\\', '\0'])
        || name.starts_with('.')
        || name.len() > super::MAX_NAME_BYTES
    {
        return Err(CalibError::Input(format!(
            "{}: name = {}: a folder name without slashes or NUL, not starting with '.', at most {} bytes",
            path.display(),
            crate::input::echo_quoted(&name),
            super::MAX_NAME_BYTES
        )));
    }
    if let Some(t) = exp.trials {
        if t == 0 || t > MAX_TRIALS {
            return Err(CalibError::Input(format!("{}: trials = {t}: allowed 1..={MAX_TRIALS}", path.display())));
        }
    }
    let out = out.map(Path::to_path_buf).unwrap_or_else(|| PathBuf::from("results").join(&name));
    let base = match &exp.scenario {
        Some(t) => Scenario::from_toml_table(t)
            .map_err(|e| CalibError::Input(format!("{}: [scenario]: {e}", path.display())))?,
        None => Scenario::default(),
    };
    let dir = path.parent().unwrap_or(Path::new("."));
    let mut data = load_csv(&dir.join(&exp.data))?;
    if let Some(note) = &exp.data_note {
        data.mark_if_transcribed(note);
        data.notes.push(format!("provenance (experiment): {note}"));
        data.provenance.get_or_insert_with(|| note.clone());
    }
    // The verdict's numbers and the curves at the [scenario]'s context_len and index_topk, else at
    // the table's longest measured length and the k every row shares (a preset's default is a
    // length nobody measured, and perhaps another deployment's k).
    let sets = |f: Field| exp.scenario.as_ref().is_some_and(|t| crate::scenario::fields_in_table(t).any(|g| g == f));
    let given =
        crate::diagnosis::GivenFields { context_len: sets(Field::ContextLen), index_topk: sets(Field::IndexTopk) };
    let model =
        EngineModel::new(exp.engine, exp.trials.unwrap_or(DEFAULT_FIT_TRIALS), exp.seed.unwrap_or(DEFAULT_SEED));
    let (base, length, model) = crate::diagnosis::pipeline::numbers(&data, &base, given, model)?;
    let free = parse_fit_spec(&exp.fit, Some(&data))?;
    let opts = VerdictOptions { target: exp.target, max_topk: base.max_topk };
    opts.validate()?;
    // The fit, hypotheses, and the likelihood region (needed by every curve).
    let all_specs: Vec<_> =
        exp.curves.iter().map(|c| parse_predict_specs(std::slice::from_ref(c))).collect::<Result<_, _>>()?;
    let first: Vec<_> = all_specs.first().cloned().unwrap_or_default();
    // Every output name, checked before any work: two curves over one field would write the
    // same files.
    let mut names: Vec<(String, String)> = [
        "calibrate.json",
        "verdict.json",
        "verdict.txt",
        "calibrate.txt",
        "rows.csv",
        "hypotheses.csv",
        "diagnosis.json",
        "diagnosis.txt",
        "experiment.toml",
        "report.md",
    ]
    .iter()
    .map(|f| (f.to_string(), format!("the calibration's {f}")))
    .collect();
    for (c, specs) in exp.curves.iter().zip(&all_specs) {
        let f = &specs[0].field;
        for n in [format!("curve-{f}.csv"), format!("figures/curve-{f}.svg"), format!("figures/curve-{f}.png")] {
            names.push((n, format!("curve `{c}`")));
        }
    }
    crate::output::check_collisions(names).map_err(|e| CalibError::Input(format!("{}: {e}", path.display())))?;
    // The rows and the scenario are checked (a row that is no valid scenario, a vector model)
    // before the output folder is looked at.
    Problem::new(&data, &base, free.clone(), &model)?;
    // The output folder is checked and locked before the (long) computation; dropped on an
    // error, the staging folder goes with it.
    let fingerprint = format!("dsa-sim {} calibration experiment\n{text}", env!("CARGO_PKG_VERSION"));
    let data_path = dir.join(&exp.data);
    let inputs: [&Path; 2] = [path, &data_path];
    let staged = StagedDir::begin(&out, &StageOptions { resume: false, fingerprint: &fingerprint, inputs: &inputs })
        .map_err(output_error)?;
    let tmp = staged.path().to_path_buf();
    // The one pipeline (as `verdict --data --fit`): the fit with its hypotheses and first curve
    // and the likelihood region every curve needs, the curves, then the call; here `base` is
    // already the numbers' scenario, so the fit and the call are both at it.
    let req = crate::diagnosis::pipeline::FitRequest { compare: exp.compare, predict: &first };
    let mut report = crate::diagnosis::pipeline::fit(&data, &base, free.clone(), &model, req, || model.describe())?;
    let problem = Problem::new(&data, &base, free.clone(), &model)?;
    let mut curves = Vec::new();
    for specs in &all_specs {
        curves.push((specs[0].field, predict_grid(&problem, &report.fit, &base, specs)?));
    }
    report.predictions = curves.iter().flat_map(|c| c.1.clone()).collect();
    report.engine = model.describe();
    let call = crate::diagnosis::pipeline::call(&data, (&base, length), &report, &model, opts)?;
    // The diagnosis (row checks, every named hypothesis, the call with its signatures) when the
    // experiment compares hypotheses.
    let diagnosis = if exp.compare {
        Some(crate::diagnosis::pipeline::diagnosed(&data, (&base, length), &free, &model, opts)?)
    } else {
        None
    };

    // Write everything into the staging folder, then move it into place; a failure removes it.
    let written = (|| -> Result<(), CalibError> {
        let w = |f: &str, body: &str| -> Result<(), CalibError> {
            std::fs::write(tmp.join(f), body).map_err(|e| CalibError::Output(format!("{}: {e}", tmp.join(f).display())))
        };
        let mut cal_json = report.to_json();
        cal_json["curves"] = serde_json::json!(curves
            .iter()
            .map(|(f, p)| serde_json::json!({"field": f, "points": p.iter().map(|q| serde_json::json!({"value": point_value(&q.point[0].1), "recall": q.recall, "ci_low": q.ci_low, "ci_high": q.ci_high})).collect::<Vec<_>>()}))
            .collect::<Vec<_>>());
        w("calibrate.json", &(serde_json::to_string_pretty(&cal_json).unwrap_or_default() + "\n"))?;
        w(
            "verdict.json",
            &(serde_json::to_string_pretty(&present::calibrated_json(&call)).unwrap_or_default() + "\n"),
        )?;
        let vtext = present::calibrated_text(&call);
        w("verdict.txt", &vtext)?;
        w("calibrate.txt", &report.to_text())?;
        if let Some(d) = &diagnosis {
            w(
                "diagnosis.json",
                &(serde_json::to_string_pretty(&present::diagnosis_json(d, &data)).unwrap_or_default() + "\n"),
            )?;
            w("diagnosis.txt", &present::diagnosis_text(d, &data))?;
        }
        // The copy of the table keeps its provenance in its own header (`# provenance: …`).
        let mut rows = String::new();
        if let Some(p) =
            report.data.provenance.as_deref().or(report.data.transcribed.then_some("TRANSCRIBED, not measured"))
        {
            let _ = writeln!(rows, "# provenance: {}", p.replace(['\n', '\r'], " "));
        }
        rows.push_str(
            "context_len,index_topk,trials,hits,repeat,label,observed,fitted,pearson_residual,deviance_residual\n",
        );
        for r in &report.fit.rows {
            let o = &r.obs;
            let _ = writeln!(
                rows,
                "{},{},{},{},{},\"{}\",{:.6},{:.6},{},{:.4}",
                o.context_len,
                o.index_topk,
                o.trials,
                o.hits,
                o.repeat.map_or(String::new(), |x| x.to_string()),
                o.label.clone().unwrap_or_default().replace('"', "'"),
                o.observed(),
                r.fitted,
                if r.pearson.is_nan() { String::new() } else { format!("{:.4}", r.pearson) },
                r.deviance_residual
            );
        }
        w("rows.csv", &rows)?;
        if let Some(h) = &report.hypotheses {
            let mut t = String::from("name,k,aic,delta_aic,weight,loglik,deviance,gof_p,estimates\n");
            for x in h {
                let est: Vec<String> = x.estimates.iter().map(|(f, v)| format!("{f}={v:.4}")).collect();
                let _ = writeln!(
                    t,
                    "{},{},{:.4},{:.4},{:.6},{:.4},{:.4},{},{}",
                    x.hypothesis,
                    x.k,
                    x.aic,
                    x.delta_aic,
                    x.weight,
                    x.loglik,
                    x.deviance,
                    x.gof_p.map_or(String::new(), |p| format!("{p:.6}")),
                    est.join(" ")
                );
            }
            w("hypotheses.csv", &t)?;
        }
        for (f, pts) in &curves {
            let mut t = format!("{f},recall,ci_low,ci_high\n");
            for p in pts {
                let _ = writeln!(t, "{},{:.6},{:.6},{:.6}", p.point[0].1, p.recall, p.ci_low, p.ci_high);
            }
            w(&format!("curve-{f}.csv"), &t)?;
        }
        w("experiment.toml", text)?;
        let figures = draw_curves(&tmp.join("figures"), &curves, &report, &base, exp.target, &model)?;
        w("report.md", &markdown(&exp, &name, &report, &curves, &vtext, &base, &figures, diagnosis.as_ref()))?;
        Ok(())
    })();
    written?;
    staged.commit().map_err(output_error)?;
    Ok(out)
}

/// A refused output folder is bad input (exit 2), a failed write a failure (exit 1).
fn output_error(e: crate::output::OutputError) -> CalibError {
    if e.is_input() {
        CalibError::Input(e.to_string())
    } else {
        CalibError::Output(e.to_string())
    }
}

// The report draws on every part of the run; a struct of them would only rename the arguments.
#[allow(clippy::too_many_arguments)]
fn markdown(
    exp: &CalibrationExperiment,
    name: &str,
    report: &CalibrationReport,
    curves: &[(Field, Vec<crate::calibrate::Prediction>)],
    vtext: &str,
    base: &Scenario,
    figures: &[String],
    diagnosis: Option<&crate::diagnosis::Diagnosis>,
) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "# {}\n", md_line(exp.title.as_deref().unwrap_or(name)));
    for w in report.warnings() {
        let _ = writeln!(s, "> **{}**\n", md_line(&w));
    }
    if let Some(d) = &exp.description {
        let _ = writeln!(s, "{}\n", md_text(d));
    }
    let _ = writeln!(s, "Data: {} ({} rows, {} trials). Engine: {}. Fit: `{}`. Base scenario: preset/overrides in `experiment.toml` (context_len {}, index_topk {}, max_topk {}, compress_ratio {}, window {}).\n",
        md_code(&report.data.source), report.data.rows.len(), report.data.total_trials(), report.engine, exp.fit, base.context_len, base.index_topk, base.max_topk, base.compress_ratio, base.window);
    let _ = writeln!(s, "## Fit\n\n| parameter | estimate | 95% profile interval | flags |\n|---|---|---|---|");
    for e in &report.fit.estimates {
        let mut flags = Vec::new();
        if e.value_at_bound {
            flags.push("estimate on the search bound");
        }
        if !e.identifiable {
            flags.push("unidentifiable (flat profile)");
        }
        if e.low_at_bound {
            flags.push("lower end at the bound");
        }
        if e.high_at_bound {
            flags.push("upper end at the bound");
        }
        let _ = writeln!(
            s,
            "| {} | {:.4} | [{:.4}, {:.4}] | {} |",
            e.field,
            e.value,
            e.ci_low,
            e.ci_high,
            flags.join("; ")
        );
    }
    let _ = writeln!(
        s,
        "\nGoodness of fit: deviance {:.3} on {} df, p = {}.\n",
        report.fit.deviance,
        report.fit.df,
        report.fit.gof_p.map_or("n/a".into(), |p| format!("{p:.4}"))
    );
    let _ = writeln!(s, "| L | k | repeat | hits/trials | observed | fitted | Pearson residual | label |\n|---|---|---|---|---|---|---|---|");
    for r in &report.fit.rows {
        let o = &r.obs;
        let pearson = if r.pearson.is_nan() { "—".to_string() } else { format!("{:.2}", r.pearson) };
        let _ = writeln!(
            s,
            "| {} | {} | {} | {}/{} | {:.3} | {:.3} | {} | {} |",
            o.context_len,
            o.index_topk,
            o.repeat.map_or("-".into(), |x| x.to_string()),
            o.hits,
            o.trials,
            o.observed(),
            r.fitted,
            pearson,
            md_line(o.label.as_deref().unwrap_or_default())
        );
    }
    if let Some(h) = &report.hypotheses {
        let _ = writeln!(s, "\n## Hypotheses (AIC, Akaike weights)\n\n| hypothesis | free | AIC | ΔAIC | weight | estimates | deviance | GOF p |\n|---|---|---|---|---|---|---|---|");
        for x in h {
            let est: Vec<String> = x.estimates.iter().map(|(f, v)| format!("{f} = {v:.3}")).collect();
            let _ = writeln!(
                s,
                "| {} | {} | {:.2} | {:.2} | {:.4} | {} | {:.2} | {} |",
                x.hypothesis,
                x.k,
                x.aic,
                x.delta_aic,
                x.weight,
                est.join(", "),
                x.deviance,
                x.gof_p.map_or("n/a".into(), |p| format!("{p:.4}"))
            );
        }
        let _ = writeln!(
            s,
            "\nHypotheses: {}.",
            h.iter()
                .map(|x| format!("*{}*: {}", x.hypothesis, x.hypothesis.description()))
                .collect::<Vec<_>>()
                .join("; ")
        );
    }
    let _ = writeln!(s, "\n## What-if curves\n\nBand: {BAND_METHOD}. Data: `curve-<field>.csv`; figures: `figures/curve-<field>.svg|png`.\n");
    for (f, pts) in curves {
        let _ = writeln!(s, "### recall vs {f}\n");
        if figures.iter().any(|x| x == f.name()) {
            let _ = writeln!(s, "![recall vs {f}](figures/curve-{f}.png)\n");
        }
        let _ = writeln!(s, "| {f} | recall | 95% band |\n|---|---|---|");
        for p in pts {
            let _ = writeln!(s, "| {} | {:.4} | [{:.4}, {:.4}] |", p.point[0].1, p.recall, p.ci_low, p.ci_high);
        }
        s.push('\n');
    }
    if let Some(d) = diagnosis {
        let _ = writeln!(
            s,
            "## Diagnosis: {}\n\nThe call from the row checks and the preferred hypothesis (`dsa-sim verdict --data` without `--fit`; `diagnosis.json`, `diagnosis.txt`).\n\n```\n{}```\n",
            d.call,
            present::diagnosis_text(d, &report.data)
        );
    }
    let _ = writeln!(s, "## Verdict at the `fit` estimate (target {})\n\n```\n{}```", exp.target, vtext);
    s
}

/// Draws each what-if curve with its 95% band (the project's plotting), the target as a
/// horizontal line, the current and maximum k as vertical lines on a k axis, and on a context
/// axis the table's rows that match the base scenario's k and repeat (Wilson 95% intervals).
/// Returns the fields drawn.
fn draw_curves(
    dir: &Path,
    curves: &[(Field, Vec<crate::calibrate::Prediction>)],
    report: &CalibrationReport,
    base: &Scenario,
    target: f64,
    model: &dyn crate::engine::RecallModel,
) -> Result<Vec<String>, CalibError> {
    use crate::figure::plot::{LineChart, PointSet, RefLine, Series};
    use crate::figure::{save_figure, Scale};
    std::fs::create_dir_all(dir).map_err(|e| CalibError::Output(format!("{}: {e}", dir.display())))?;
    let mut drawn = Vec::new();
    for (f, pts) in curves {
        let xy: Vec<(f64, f64, f64, f64)> = pts
            .iter()
            .filter_map(|p| p.point[0].1.parse::<f64>().ok().map(|x| (x, p.recall, p.ci_low, p.ci_high)))
            .collect();
        if xy.len() < 2 {
            continue;
        }
        let scale = if matches!(f, Field::IndexTopk | Field::ContextLen | Field::MaxTopk) {
            Scale::Log2
        } else {
            Scale::Linear
        };
        let mut chart = LineChart {
            title: format!("Predicted recall vs {f} (fitted model, 95% band)"),
            subtitle: format!(
                "fit: {}",
                report
                    .fit
                    .estimates
                    .iter()
                    .map(|e| format!("{} = {:.2} [{:.2}, {:.2}]", e.field, e.value, e.ci_low, e.ci_high))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            x_label: f.name().to_string(),
            y_label: "recall".into(),
            x_scale: scale,
            y_range: Some((0.0, 1.0)),
            series: vec![Series {
                label: "predicted recall (profile-likelihood 95% band)".into(),
                color: 0,
                points: xy.iter().map(|p| (p.0, p.1)).collect(),
                band: xy.iter().map(|p| (p.0, p.2, p.3)).collect(),
                ..Series::default()
            }],
            hlines: vec![RefLine { at: target, label: format!("target {target}"), color: 3 }],
            note: report.data.transcribed_warning().unwrap_or_default(),
            ..LineChart::default()
        };
        if *f == Field::IndexTopk {
            chart.vlines = vec![
                RefLine { at: base.index_topk as f64, label: format!("k now {}", base.index_topk), color: 1 },
                RefLine { at: base.max_topk as f64, label: format!("kernel max {}", base.max_topk), color: 2 },
            ];
        }
        if *f == Field::ContextLen {
            let obs: Vec<(f64, f64, f64, f64)> = report
                .data
                .rows
                .iter()
                .filter(|r| r.index_topk == base.index_topk && r.repeat.unwrap_or(base.repeat) == base.repeat)
                .map(|r| {
                    let (lo, hi) = r.interval();
                    (r.context_len as f64, r.observed(), lo, hi)
                })
                .collect();
            if !obs.is_empty() {
                chart.points = vec![PointSet {
                    label: format!("table rows at k = {} (Wilson 95%)", base.index_topk),
                    color: 1,
                    points: obs,
                }];
            }
            // The random-indexer floor (dprime 0, everything else as in the base): data below it
            // are what no working indexer produces.
            let floor: Vec<(f64, f64)> = xy
                .iter()
                .filter_map(|p| {
                    let s = Scenario { context_len: p.0 as u64, dprime: 0.0, ..base.clone() };
                    model.recall(&s).ok().map(|r| (p.0, r))
                })
                .collect();
            if floor.len() == xy.len() {
                chart.series.push(Series {
                    label: "random-indexer floor (dprime 0)".into(),
                    color: 4,
                    dashed: true,
                    points: floor,
                    ..Series::default()
                });
            }
        }
        save_figure(&chart, dir, &format!("curve-{f}"), (1000, 640)).map_err(|e| CalibError::Output(e.to_string()))?;
        drawn.push(f.name().to_string());
    }
    Ok(drawn)
}
