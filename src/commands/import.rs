//! `import topk`, `import scores` and `import niah`: measurements brought in from captures and
//! harness results. `topk` and `niah` read files and write the measured table (replacing only a
//! file an import wrote); `scores` reads a capture of indexer scores and returns its ranks, tail
//! and predictions. Each returns a result with `to_json()` and `to_text()`.

use super::{outln, scenario_json, CommandError, ScenarioSpec};
use crate::calibrate::parse_predict_specs;
use crate::calibrate::predict::{at_point, grid_points};
use crate::import::scores::{self as cs, PredictOptions};
use crate::output::{OutputError, OutputLock};
use crate::progress::Progress;
use crate::scenario::Scenario;
use serde_json::json;
use std::path::{Path, PathBuf};

pub use crate::import::niah::DEFAULT_MIN_SCORE;
pub use crate::import::scores::TailChoice;

/// Most tail classes of queries per layer (`--tail-classes`, the default).
pub const MAX_TAIL_CLASSES: usize = cs::classes::MAX_CLASSES;

/// Most bootstrap resamples of `import scores`.
pub(crate) const MAX_RESAMPLES: usize = 100_000;

fn output_error(e: OutputError) -> CommandError {
    if e.is_input() {
        CommandError::input(e.to_string())
    } else {
        CommandError::failure(e.to_string())
    }
}

/// Writes `text` to `out` atomically under its lock, replacing an existing file only when it
/// is one dsa-sim wrote: its first line is `ours` (an import's own first line).
fn write_owned(out: &Path, ours: &str, text: &str) -> Result<(), CommandError> {
    if let Ok(m) = std::fs::metadata(out) {
        if m.is_file() {
            let mut first = String::new();
            let f =
                std::fs::File::open(out).map_err(|e| CommandError::input(format!("--out {}: {e}", out.display())))?;
            use std::io::{BufRead, Read};
            let _ = std::io::BufReader::new(f.take(4096)).read_line(&mut first);
            if !first.trim_end().starts_with(ours) {
                return Err(CommandError::input(format!(
                    "--out {}: the file exists and was not written by dsa-sim import (its first line is not `{ours}`): refusing to replace it; choose another --out or remove it yourself",
                    out.display()
                )));
            }
        }
    }
    crate::output::check_regular_target(out).map_err(output_error)?;
    let dir = out.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    if !dir.is_dir() {
        return Err(CommandError::input(format!(
            "--out {}: the folder {} does not exist",
            out.display(),
            dir.display()
        )));
    }
    let _lock = OutputLock::acquire(out, out).map_err(output_error)?;
    crate::output::remove_stale_temporaries(out);
    crate::output::write_file_atomic(out, text.as_bytes()).map_err(output_error)
}

/// The inputs of `import topk`, as its flags give them.
#[derive(Debug, Clone)]
pub struct TopkRequest<'a> {
    /// The manifest: `file,row,context_len,needle_start,needle_tokens[,request][,label]`.
    pub manifest: &'a Path,
    /// Indexer layers in each capture.
    pub layers: u64,
    /// Indices per row and layer.
    pub index_topk: u64,
    /// Tokens per entry.
    pub compress_ratio: u64,
    /// Overlapping compression.
    pub overlap: bool,
    /// Where selections.csv is written.
    pub out: &'a Path,
}

/// What `import topk` imported and wrote.
#[derive(Debug, Clone)]
pub struct TopkImported {
    /// The selections.
    pub(crate) import: crate::import::topk::Import,
    /// The file written.
    pub(crate) out: PathBuf,
    /// Indexer layers per selection.
    pub(crate) layers: u64,
}

/// Imports captured top-k indices and writes selections.csv (read back with the measured
/// reader first, request names made unique).
pub fn topk(req: &TopkRequest) -> Result<TopkImported, CommandError> {
    let options = crate::import::topk::Options {
        layers: req.layers,
        index_topk: req.index_topk,
        compress_ratio: req.compress_ratio,
        overlap: req.overlap,
    };
    let import = crate::import::topk::import(req.manifest, &options)?;
    // Read back with the one reader before it is written (request names made unique first).
    let csv = import.checked_csv(&req.out.display().to_string())?;
    write_owned(req.out, crate::import::topk::CSV_HEADER_PREFIX, &csv)?;
    Ok(TopkImported { import, out: req.out.to_path_buf(), layers: req.layers })
}

impl TopkImported {
    /// The `import topk --json` object.
    pub fn to_json(&self) -> serde_json::Value {
        let mut j = self.import.json();
        j["out"] = json!(self.out.display().to_string());
        j
    }

    /// The summary `import topk` prints.
    pub fn to_text(&self) -> String {
        let mut t = self.import.text();
        t.push_str(&format!(
            "wrote {} ({} rows)\n",
            self.out.display(),
            self.import.selections.len() as u64 * self.layers
        ));
        t
    }
}

/// The inputs of `import niah`, as its flags give them.
#[derive(Debug, Clone)]
pub struct NiahRequest<'a> {
    /// Result folders or files.
    pub paths: &'a [PathBuf],
    /// gkamradt: a score of at least this counts as a hit.
    pub min_score: f64,
    /// The table's index_topk column.
    pub index_topk: u64,
    /// Where the table is written; `None`: it is the output.
    pub out: Option<&'a Path>,
}

/// What `import niah` imported (and wrote, with an `out`).
#[derive(Debug, Clone)]
pub struct NiahImported {
    /// The trials per cell.
    pub(crate) import: crate::import::niah::Import,
    /// The measured table, checked with the measured reader.
    pub(crate) csv: String,
    /// The file written, if any.
    pub(crate) out: Option<PathBuf>,
}

/// Imports needle-in-a-haystack results as a measured table, written to `out` when given.
pub fn niah(req: &NiahRequest) -> Result<NiahImported, CommandError> {
    let options = crate::import::niah::Options { min_score: req.min_score, index_topk: req.index_topk };
    let import = crate::import::niah::import(req.paths, &options)?;
    // The table must be one that calibrate and verdict accept: checked with the one reader.
    let name = req.out.map_or_else(|| "stdout".to_string(), |o| o.display().to_string());
    let csv = import.checked_csv(&name)?;
    if let Some(out) = req.out {
        write_owned(out, "# provenance: dsa-sim import niah", &csv)?;
    }
    Ok(NiahImported { import, csv, out: req.out.map(Path::to_path_buf) })
}

impl NiahImported {
    /// The `import niah --json` object: with no `out`, the table as `csv`.
    pub fn to_json(&self) -> serde_json::Value {
        let mut j = self.import.json();
        match &self.out {
            None => {
                j["out"] = serde_json::Value::Null;
                j["csv"] = json!(self.csv);
            }
            Some(out) => j["out"] = json!(out.display().to_string()),
        }
        j
    }

    /// What `import niah` prints: the table itself without an `out`, else a summary.
    pub fn to_text(&self) -> String {
        let Some(out) = &self.out else { return self.csv.clone() };
        let imp = &self.import;
        let trials: u64 = imp.cells.iter().map(|c| c.trials).sum();
        let hits: u64 = imp.cells.iter().map(|c| c.hits).sum();
        let mut t = format!(
            "{} results: {} trials, {} hits, {} cells (context_len, depth, needle)\n",
            imp.format_name(),
            trials,
            hits,
            imp.cells.len()
        );
        if imp.skipped > 0 {
            t.push_str(&format!("{} file(s) matched no format and were skipped\n", imp.skipped));
        }
        for n in &imp.notes {
            t.push_str(&format!("note: {n}\n"));
        }
        t.push_str(&format!("wrote {}\n", out.display()));
        t
    }
}

/// The inputs of `import scores`, as its flags give them.
#[derive(Debug, Clone)]
pub struct ScoresRequest<'a> {
    /// The capture (.npz).
    pub file: &'a Path,
    /// What-if axes `FIELD=VALUES` (the grid is their product).
    pub predict: &'a [String],
    /// Bootstrap resamples for the prediction band.
    pub resamples: usize,
    /// Seed of the bootstrap.
    pub seed: u64,
    /// Most tail classes of queries per layer (1..=[`MAX_TAIL_CLASSES`]).
    pub tail_classes: usize,
    /// The tail models that compete for each layer.
    pub tail_model: TailChoice,
}

/// A `--tail-model` name (`auto`, `classes`, `query-top`) as the request takes it.
pub fn tail_choice(name: &str) -> Result<TailChoice, CommandError> {
    match name {
        "auto" => Ok(TailChoice::Auto),
        "classes" => Ok(TailChoice::Classes),
        "query-top" => Ok(TailChoice::QueryTop),
        _ => Err(CommandError::input(format!("--tail-model {name:?}: expected auto, classes or query-top"))),
    }
}

/// What `import scores` found in a capture: the needle's ranks and the distractors' tail per
/// layer, and the predictions at the `predict` grid with the tail models behind them.
#[derive(Debug, Clone)]
pub struct ScoresReport {
    /// The capture file.
    pub(crate) file: PathBuf,
    /// Queries in the capture.
    pub(crate) queries: usize,
    /// Layers in the capture.
    pub(crate) layers: usize,
    /// The needle's rank per layer.
    pub(crate) ranks: Vec<cs::RankSummary>,
    /// The distractors' tail per layer.
    pub(crate) tails: Vec<cs::TailSummary>,
    /// One per cell of the grid (none without `predict`).
    pub(crate) predictions: Vec<cs::Prediction>,
    /// The tail classes of each layer that used them.
    pub(crate) classes: Vec<cs::LayerClasses>,
    /// The tail model each layer used and why.
    pub(crate) tail_models: Vec<cs::LayerTail>,
    /// The request's most tail classes.
    pub(crate) max_tail_classes: usize,
    /// Bootstrap resamples.
    pub(crate) resamples: usize,
    /// Bootstrap seed.
    pub(crate) seed: u64,
    /// The resolved scenario.
    pub(crate) scenario: Scenario,
}

/// Reads a capture of indexer scores and summarises it: ranks, tail and, for every cell of the
/// `predict` grid, recall predicted with a bootstrap band (resamples reported to `progress`).
pub fn scores(spec: &ScenarioSpec, req: &ScoresRequest, progress: &dyn Progress) -> Result<ScoresReport, CommandError> {
    let base = spec.resolve()?;
    let specs = parse_predict_specs(req.predict)?;
    if req.resamples > MAX_RESAMPLES {
        return Err(CommandError::input(format!("--resamples {}: at most {MAX_RESAMPLES}", req.resamples)));
    }
    if !(1..=MAX_TAIL_CLASSES).contains(&req.tail_classes) {
        return Err(CommandError::input(format!(
            "--tail-classes {}: allowed 1..={MAX_TAIL_CLASSES}",
            req.tail_classes
        )));
    }
    let cells: Vec<Scenario> = if specs.is_empty() {
        Vec::new()
    } else {
        grid_points(&specs)
            .iter()
            .map(|pt| at_point(base.clone(), &specs, pt).map_err(CommandError::from))
            .collect::<Result<_, CommandError>>()?
    };
    let capture = cs::read_file(req.file)?;
    let ks: Vec<u64> = {
        let mut v = vec![1, base.index_topk, base.max_topk];
        v.extend(cells.iter().map(|s| s.index_topk));
        v.sort_unstable();
        v.dedup();
        v
    };
    let ranks = cs::rank_summary(&capture, &ks);
    let tails: Vec<cs::TailSummary> = capture
        .layers
        .iter()
        .map(|l| {
            cs::tail::summarise(l, &cs::tail::standardised(l))
                .map_err(|e| CommandError::input(format!("{}: {e}", req.file.display())))
        })
        .collect::<Result<_, _>>()?;
    let opts = PredictOptions {
        resamples: req.resamples,
        seed: req.seed,
        max_classes: req.tail_classes,
        tail_model: req.tail_model,
    };
    let (predictions, classes, tail_models) = if cells.is_empty() {
        (Vec::new(), Vec::new(), Vec::new())
    } else {
        let r = cs::predict_report(&capture, &cells, opts, progress)
            .map_err(|e| CommandError::input(format!("{}: {e}", req.file.display())))?;
        (r.predictions, r.classes, r.tails)
    };
    Ok(ScoresReport {
        file: req.file.to_path_buf(),
        queries: capture.queries(),
        layers: capture.layers.len(),
        ranks,
        tails,
        predictions,
        classes,
        tail_models,
        max_tail_classes: req.tail_classes,
        resamples: req.resamples,
        seed: req.seed,
        scenario: base,
    })
}

fn model_json(m: &cs::TailModel) -> serde_json::Value {
    match m {
        cs::TailModel::Classes => json!({"model": "classes"}),
        cs::TailModel::QueryTop(f) => json!({"model": "query-top", "top_fraction": f}),
    }
}

impl ScoresReport {
    /// The `import scores --json` object.
    pub fn to_json(&self) -> serde_json::Value {
        json!({
            "file": self.file.display().to_string(),
            "queries": self.queries,
            "layers": self.layers,
            "ranks": self.ranks.iter().map(|r| json!({
                "layer": r.layer,
                "queries": r.queries,
                "median_candidates": r.median_candidates,
                "quantiles": r.quantiles.iter().map(|(p, v)| json!({"p": p, "rank": v})).collect::<Vec<_>>(),
                "cdf": r.cdf.iter().map(|(j, p)| json!({"j": j, "p": p})).collect::<Vec<_>>(),
            })).collect::<Vec<_>>(),
            "tail": self.tails.iter().map(|t| json!({
                "layer": t.layer,
                "pooled": t.pooled,
                "threshold": t.threshold,
                "exceedances": t.exceedances,
                "gpd": {"xi": t.gpd.xi, "sigma": t.gpd.sigma},
                "quantiles": t.quantiles.iter().map(|(p, q, n)| json!({"p": p, "observed": q, "normal": n})).collect::<Vec<_>>(),
                "exceedance": t.exceedance.iter().map(|(z, o, n)| json!({"z": z, "observed": o, "normal": n, "ratio": o / n})).collect::<Vec<_>>(),
            })).collect::<Vec<_>>(),
            "predictions": self.predictions.iter().map(|p| json!({
                "context_len": p.context_len,
                "index_topk": p.index_topk,
                "n_candidates": p.n_candidates,
                "recall": p.recall,
                "low": p.low,
                "high": p.high,
                "recall_empirical": p.recall_empirical,
            })).collect::<Vec<_>>(),
            "tail_classes": self.classes.iter().map(|l| json!({
                "layer": l.layer,
                "classes": l.classes().iter().map(|c| json!({"weight": c.weight, "p_u": c.p_u, "xi": c.gpd.xi, "sigma": c.gpd.sigma})).collect::<Vec<_>>(),
                "heldout": l.choice.heldout.iter().map(|(k, ll)| json!({"classes": k, "loglik": ll})).collect::<Vec<_>>(),
            })).collect::<Vec<_>>(),
            "tail_models": self.tail_models.iter().map(|t| json!({
                "layer": t.layer,
                "chosen": model_json(&t.model),
                "scale_law": t.top_prior.map(|p| json!({"xi": p.xi, "ln_sigma_mean": p.mu, "ln_sigma_sd": p.tau})),
                "mixture": t.mixture.iter().map(|(m, w)| json!({"candidate": model_json(m), "weight": w})).collect::<Vec<_>>(),
                "validation": t.validation.iter().map(|v| json!({
                    "candidate": model_json(&v.model),
                    "errors": v.errors.as_ref().zip(v.standard_errors.as_ref()).map(|(e, se)| cs::predict::VALIDATION_KS.iter().zip(e).zip(se).map(|((k, e), se)| json!({"k": k, "error": e, "se": se})).collect::<Vec<_>>()),
                    "score": v.score(),
                })).collect::<Vec<_>>(),
            })).collect::<Vec<_>>(),
            "max_tail_classes": self.max_tail_classes,
            "resamples": self.resamples,
            "seed": self.seed,
            "scenario": scenario_json(&self.scenario),
            "version": env!("CARGO_PKG_VERSION"),
        })
    }

    /// The summary `import scores` prints.
    pub fn to_text(&self) -> String {
        let mut out = String::new();
        outln!(
            out,
            "captured scores: {} ({} layer{}, {} queries)",
            self.file.display(),
            self.layers,
            if self.layers == 1 { "" } else { "s" },
            self.queries
        );
        for (r, t) in self.ranks.iter().zip(&self.tails) {
            outln!(out, "layer {} (median {} candidates per query):", r.layer, r.median_candidates);
            let q: Vec<String> = r.quantiles.iter().map(|(p, v)| format!("{:.0}% {v}", p * 100.0)).collect();
            outln!(out, "  needle rank quantiles: {}", q.join(", "));
            let c: Vec<String> = r.cdf.iter().map(|(j, p)| format!("k={j}: {p:.3}")).collect();
            outln!(out, "  P(rank <= k): {}", c.join(", "));
            outln!(
                out,
                "  distractor tail: threshold u = {:.3} sd ({} of {} standardised scores above), generalised Pareto xi = {:.3}, sigma = {:.3}{}",
                t.threshold,
                t.exceedances,
                t.pooled,
                t.gpd.xi,
                t.gpd.sigma,
                if t.gpd.xi > 0.05 { " (heavier than normal)" } else if t.gpd.xi < -0.2 { " (bounded)" } else { " (light: normal-like)" }
            );
            for (p, o, n) in &t.quantiles {
                outln!(out, "    quantile {p}: {o:.3} sd (normal {n:.3})");
            }
            for (z, o, n) in &t.exceedance {
                outln!(out, "    P(Z > {z}): {o:.3e} (normal {n:.3e}, ratio {:.2})", o / n);
            }
        }
        if !self.tail_models.is_empty() {
            outln!(
                out,
                "tail model (fitted on half of every query's distractors, {} halvings, predicted − measured recall of the whole capture at k = {} (standard error); the classes unless an error of theirs exceeds {} standard errors, else the smallest sum of squared errors among the classes and the fractions not so biased themselves; where that is a query-top fraction, every fraction mixed with weights ∝ exp(−½ Σ_k (error / mean se at k)²)):",
                cs::predict::SPLITS,
                cs::predict::VALIDATION_KS.map(|k| k.to_string()).join(", "),
                cs::predict::SWITCH_SE
            );
            for t in &self.tail_models {
                let how = match (&t.model, t.top_prior) {
                    (cs::TailModel::QueryTop(_), Some(p)) => format!(
                        " (shared shape xi = {:.3}; the queries' scales, in sd units: ln sigma ~ N({:.3}, {:.3}^2))",
                        p.xi, p.mu, p.tau
                    ),
                    _ => String::new(),
                };
                outln!(out, "  layer {}: {}{how}", t.layer, t.model);
                if t.mixture.len() > 1 {
                    let w: Vec<String> = t.mixture.iter().map(|(m, w)| format!("{m} {w:.3}")).collect();
                    outln!(out, "    mixed: {}", w.join(", "));
                }
                for v in &t.validation {
                    let e = v.errors.as_ref().zip(v.standard_errors.as_ref()).map_or(
                        "could not be fitted on a half".to_string(),
                        |(e, se)| {
                            e.iter().zip(se).map(|(x, se)| format!("{x:+.4} ({se:.4})")).collect::<Vec<_>>().join(" ")
                        },
                    );
                    outln!(out, "    {:<16} {e}", v.model.to_string());
                }
            }
        }
        if !self.classes.is_empty() {
            outln!(
                out,
                "tail classes (at most {}, the count chosen by {}-fold held-out log-likelihood over queries):",
                self.max_tail_classes,
                cs::classes::FOLDS
            );
            for l in &self.classes {
                let h: Vec<String> = l
                    .choice
                    .heldout
                    .iter()
                    .map(|(k, ll)| {
                        format!("{k}: {}", ll.map_or("too few exceedances".to_string(), |v| format!("{v:.1}")))
                    })
                    .collect();
                outln!(
                    out,
                    "  layer {}: {} class{} (held-out {})",
                    l.layer,
                    l.classes().len(),
                    if l.classes().len() == 1 { "" } else { "es" },
                    h.join(", ")
                );
                if l.classes().len() > 1 {
                    for (i, c) in l.classes().iter().enumerate() {
                        outln!(
                            out,
                            "    class {}: weight {:.3}, P(Z > u) = {:.2e}, xi = {:.3}, sigma = {:.3}",
                            i + 1,
                            c.weight,
                            c.p_u,
                            c.gpd.xi,
                            c.gpd.sigma
                        );
                    }
                }
            }
        }
        if !self.predictions.is_empty() {
            outln!(out, "predicted recall ({} bootstrap resamples, seed {}):", self.resamples, self.seed);
            outln!(
                out,
                "  {:>12} {:>10} {:>12} {:>8} {:>19} {:>16}",
                "context_len",
                "index_topk",
                "candidates",
                "recall",
                "95% band",
                "empirical alone"
            );
            for p in &self.predictions {
                outln!(
                    out,
                    "  {:>12} {:>10} {:>12} {:>8.4} {:>19} {:>16.4}",
                    p.context_len,
                    p.index_topk,
                    p.n_candidates,
                    p.recall,
                    format!("[{:.4}, {:.4}]", p.low, p.high),
                    p.recall_empirical
                );
            }
        }
        out
    }
}
