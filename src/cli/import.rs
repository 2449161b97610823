//! `dsa-sim import topk` (measured indexer selections from captures), `dsa-sim import scores`
//! (captured indexer scores: ranks, tail, predictions) and `dsa-sim import niah`
//! (needle-in-a-haystack harness results as a measured table).

use super::{emit, outln, print_json, scenario_json, CliError, ScenarioArgs};
use crate::calibrate::parse_predict_specs;
use crate::calibrate::predict::grid_points;
use crate::captured_scores::{self as cs, PredictOptions};
use crate::scenario::Scenario;
use dsa_sim::output::{OutputError, OutputLock};
use serde_json::json;
use std::path::{Path, PathBuf};

/// Arguments of `dsa-sim import`.
#[derive(clap::Args, Debug)]
pub struct ImportArgs {
    /// What to import.
    #[command(subcommand)]
    pub what: ImportCommand,
}

/// The importers.
#[derive(clap::Subcommand, Debug)]
pub enum ImportCommand {
    /// Which layers' indexers selected the needle: captured top-k indices (SGLang, vLLM, .npz, .npy) to selections.csv.
    Topk(TopkArgs),
    /// Captured indexer scores (.npz): the needle's exact rank, the distractors' tail, and recall predicted at other context lengths and k.
    Scores(ScoresArgs),
    /// Needle-in-a-haystack results (gkamradt, RULER, lm-eval, NeedleBench) to a measured table for calibrate and verdict.
    Niah(NiahArgs),
}

const TOPK_HELP: &str = "The manifest (CSV) has one line per needle query: \
file,row,context_len,needle_start,needle_tokens, optional request and label. `file` is relative to \
the manifest's folder; `row` is the row of the capture (the selection made at query token `row`); \
`request` (default 0) picks the n-th indexer_topk string of a JSON/JSONL file. Each file is \
recognised by its content: .npz (array `topk_index`), .npy, SGLang replies (meta_info.indexer_topk, \
base64 of int32), vLLM replies (choices[i].indexer_topk, base64 of .npy bytes); every array is \
(rows, layers, index_topk) of entry indices, -1 for unused slots.

For each line and layer the needle counts as selected when an entry that pools one of its tokens \
is among the indices (entry i pools tokens i*c..i*c+c-1, with --overlap true also the c before). \
selections.csv has one row per line and layer: request,context_len,depth,layer,index_topk,selected, \
then the facts the import used: needle_start,needle_tokens,compress_ratio,overlap (depth = \
needle_start / (context_len - needle_tokens), as the depth field). calibrate, verdict and plan \
apply each request's facts to its own row; a flag that contradicts them is refused. Request names are \
made unique (a repeated label becomes `LABEL (2)`, with a note) and the table is read back with the \
measured reader before it is written. Files are streamed: a \
multi-gigabyte reply is read in bounded memory. Any bad input (a missing file, a shape other than \
(rows, --layers, --index-topk), base64 that does not decode, an index outside the context's \
entries, a needle outside the context) stops with one line and writes nothing. Formats: \
docs/capture.md.

Example (DeepSeek-V4-Flash: c = 4 with overlap, k = 512):
  dsa-sim import topk --manifest caps/manifest.csv --layers 21 --index-topk 512 \\
      --compress-ratio 4 --overlap true --out selections.csv";

/// Arguments of `dsa-sim import topk`.
#[derive(clap::Args, Debug)]
#[command(after_help = TOPK_HELP)]
pub struct TopkArgs {
    /// The manifest: file,row,context_len,needle_start,needle_tokens[,request][,label].
    #[arg(long, value_name = "M.csv")]
    pub manifest: PathBuf,
    /// Indexer layers in each capture (the array's second axis).
    #[arg(long, value_name = "N")]
    pub layers: u64,
    /// Indices per row and layer (the array's third axis).
    #[arg(long, value_name = "K")]
    pub index_topk: u64,
    /// Tokens per entry: 1 for token-level DSA (DeepSeek-V3.2), 4 for V4's compressed sparse attention.
    #[arg(long, value_name = "C")]
    pub compress_ratio: u64,
    /// Overlapping compression (V4 CSA): entry i also pools the c tokens before its block.
    #[arg(long, value_name = "BOOL", action = clap::ArgAction::Set)]
    pub overlap: bool,
    /// Where to write selections.csv (replaced only if dsa-sim wrote it).
    #[arg(long, short = 'o', value_name = "selections.csv")]
    pub out: PathBuf,
    /// Print one JSON object (requests, by_context, layers with Wilson intervals, per_request, agreement) instead of the summary.
    #[arg(long)]
    pub json: bool,
}

const NIAH_HELP: &str = "PATH is a result folder (walked recursively) or a file; each file is \
recognised by its content:
  gkamradt     *_results.json with context_length, depth_percent (0-100), score (1-10)
  RULER        {root}/{model}/{bench}/{seq}/pred/{task}.jsonl: pred, outputs, input, length
  lm-eval      samples_*.jsonl of --log_samples (ruler tasks): doc.input, doc.outputs, doc.max_length
  NeedleBench  OpenCompass predictions {dataset}.json, the dataset named Length{L}Depth{D}...

Trials are counted per (context_len, depth, needle): a gkamradt trial is a hit when score >= \
--min-score (default 10: the evaluator's rubric gives 10 only to a completely correct answer); \
RULER, lm-eval and NeedleBench trials when every expected answer occurs in the prediction \
(case-insensitive, RULER's string_match_all). Depth is in [0, 1]; RULER and lm-eval record none, \
so it is recovered from where the answer sits in the prompt (rounded to tenths), or left empty. \
The table starts with a `# provenance:` line naming the format and paths; calibrate --data and \
verdict --data read it as written (with --out; without it the table is printed on stdout). A gkamradt \
score outside 1-10 is refused; files that cannot be read as text (binary, larger than 64 MiB) are \
skipped with a note. A folder with no recognisable file is refused.

Example:
  dsa-sim import niah results/ --index-topk 512 --out measured.csv
  dsa-sim verdict --preset deepseek-v4-flash --data measured.csv";

/// Arguments of `dsa-sim import niah`.
#[derive(clap::Args, Debug)]
#[command(after_help = NIAH_HELP)]
pub struct NiahArgs {
    /// Result folders or files.
    #[arg(value_name = "PATH", required = true)]
    pub paths: Vec<PathBuf>,
    /// gkamradt: a score of at least S (1-10) counts as a hit.
    #[arg(long, value_name = "S", default_value_t = dsa_sim::harness::DEFAULT_MIN_SCORE)]
    pub min_score: f64,
    /// The index_topk column of the table: the deployment's k.
    #[arg(long, value_name = "K", default_value_t = 512)]
    pub index_topk: u64,
    /// Where to write the measured table (replaced only if dsa-sim wrote it); without it the table is printed on stdout.
    #[arg(long, short = 'o', value_name = "measured.csv")]
    pub out: Option<PathBuf>,
    /// Print one JSON object (format, cells, and the table as `csv` when there is no --out) instead of the summary.
    #[arg(long)]
    pub json: bool,
}

/// Runs `dsa-sim import …`.
pub fn run(args: &ImportArgs) -> Result<(), CliError> {
    match &args.what {
        ImportCommand::Topk(a) => topk(a),
        ImportCommand::Scores(a) => scores(a),
        ImportCommand::Niah(a) => niah(a),
    }
}

fn output_error(e: OutputError) -> CliError {
    if e.is_input() {
        CliError::input(e.to_string())
    } else {
        CliError::failure(e.to_string())
    }
}

/// Writes `text` to `out` atomically under its lock, replacing an existing file only when it
/// is one dsa-sim wrote: its first line is `ours` (an import's own first line).
fn write_owned(out: &Path, ours: &str, text: &str) -> Result<(), CliError> {
    if let Ok(m) = std::fs::metadata(out) {
        if m.is_file() {
            let mut first = String::new();
            let f = std::fs::File::open(out).map_err(|e| CliError::input(format!("--out {}: {e}", out.display())))?;
            use std::io::{BufRead, Read};
            let _ = std::io::BufReader::new(f.take(4096)).read_line(&mut first);
            if !first.trim_end().starts_with(ours) {
                return Err(CliError::input(format!(
                    "--out {}: the file exists and was not written by dsa-sim import (its first line is not `{ours}`): refusing to replace it; choose another --out or remove it yourself",
                    out.display()
                )));
            }
        }
    }
    dsa_sim::output::check_regular_target(out).map_err(output_error)?;
    let dir = out.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    if !dir.is_dir() {
        return Err(CliError::input(format!("--out {}: the folder {} does not exist", out.display(), dir.display())));
    }
    let _lock = OutputLock::acquire(out, out).map_err(output_error)?;
    dsa_sim::output::remove_stale_temporaries(out);
    dsa_sim::output::write_file_atomic(out, text.as_bytes()).map_err(output_error)
}

fn topk(a: &TopkArgs) -> Result<(), CliError> {
    let options = dsa_sim::capture::Options {
        layers: a.layers,
        index_topk: a.index_topk,
        compress_ratio: a.compress_ratio,
        overlap: a.overlap,
    };
    let imp = dsa_sim::capture::import(&a.manifest, &options)?;
    // Read back with the one reader before it is written (request names made unique first).
    let csv = imp.checked_csv(&a.out.display().to_string())?;
    write_owned(&a.out, dsa_sim::capture::CSV_HEADER_PREFIX, &csv)?;
    if a.json {
        let mut j = imp.json();
        j["out"] = serde_json::json!(a.out.display().to_string());
        return print_json(&j);
    }
    let mut t = imp.text();
    t.push_str(&format!("wrote {} ({} rows)\n", a.out.display(), imp.selections.len() as u64 * a.layers));
    emit(&t)
}

fn niah(a: &NiahArgs) -> Result<(), CliError> {
    let options = dsa_sim::harness::Options { min_score: a.min_score, index_topk: a.index_topk };
    let imp = dsa_sim::harness::import(&a.paths, &options)?;
    // The table must be one that calibrate and verdict accept: checked with the one reader.
    let name = a.out.as_ref().map_or_else(|| "stdout".to_string(), |o| o.display().to_string());
    let csv = imp.checked_csv(&name)?;
    let Some(out) = &a.out else {
        // No --out: the table itself is the output (`import niah DIR > measured.csv`), or,
        // with --json, one object that carries it as `csv`.
        if a.json {
            let mut j = imp.json();
            j["out"] = serde_json::Value::Null;
            j["csv"] = serde_json::json!(csv);
            return print_json(&j);
        }
        return emit(&csv);
    };
    write_owned(out, "# provenance: dsa-sim import niah", &csv)?;
    if a.json {
        let mut j = imp.json();
        j["out"] = serde_json::json!(out.display().to_string());
        return print_json(&j);
    }
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
    emit(&t)
}

/// Arguments of `dsa-sim import scores`.
#[derive(clap::Args, Debug)]
#[command(after_help = "Layouts (numpy.savez):\n  \
one layer:  scores (float32/float64, queries x candidates), needle_index (integer, one per query)\n  \
per layer:  indexer_scores_0, indexer_scores_1, ... (each queries x candidates), needle_index\n\
A candidate scored -inf is masked (no candidate). The rank is 1 + the candidates scoring strictly \
above the needle's. Predictions resample each query's own distractors at the scenario's candidate \
count (context_len / compress_ratio) with the upper tail from a generalised-Pareto fit: either one per \
tail class of queries standardised by their mean and sd (the class count chosen by held-out \
likelihood), or one pooled shape over each query's tail located and scaled by its own top scores, \
whichever, fitted on half of every query's distractors, best predicts the recall the whole capture \
measures; the band is a 95% bootstrap over queries. Reference: docs/capture.md.\n\nExample:\n  \
dsa-sim import scores capture.npz --preset deepseek-v4-flash \\\n      \
--predict context_len=16K,64K,256K --predict index_topk=512,1024,2048")]
pub struct ScoresArgs {
    /// The capture (.npz).
    #[arg(value_name = "FILE.npz")]
    pub file: PathBuf,
    #[command(flatten)]
    #[allow(missing_docs)]
    pub scenario: ScenarioArgs,
    /// A what-if axis FIELD=VALUES (repeatable; the grid is their product), e.g. context_len=16K,64K.
    #[arg(long, value_name = "FIELD=VALUES")]
    pub predict: Vec<String>,
    /// Bootstrap resamples for the prediction band.
    #[arg(long, default_value_t = 200, value_name = "N")]
    pub resamples: usize,
    /// Seed of the bootstrap: resample i draws only from (seed, i).
    #[arg(long, default_value_t = crate::engine::DEFAULT_SEED, value_name = "S")]
    pub seed: u64,
    /// Most tail classes of queries per layer (the count is chosen by 5-fold held-out
    /// likelihood up to this); 1 pools every query's tail into one law.
    #[arg(long, default_value_t = cs::classes::MAX_CLASSES, value_name = "N", value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=(cs::classes::MAX_CLASSES as u64)))]
    pub tail_classes: usize,
    /// The tail models that compete for each layer: auto (the classes and the query-top model,
    /// the one that best predicts the capture's own held-out half; the query-top model's
    /// fractions mixed by how well each predicts it), classes, or query-top.
    #[arg(long, value_enum, default_value_t = TailModelArg::Auto, value_name = "MODEL")]
    pub tail_model: TailModelArg,
    /// Print one JSON object on stdout instead of the summary.
    #[arg(long)]
    pub json: bool,
}

/// `--tail-model`.
#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum TailModelArg {
    /// The classes and the query-top model compete; validation on the capture chooses.
    Auto,
    /// Queries standardised by their mean and sd, pooled in tail classes.
    Classes,
    /// Each query's tail located by its own top scores, its scale drawn from a law shared by the
    /// queries (one shape), each query averaged over its posterior scale.
    QueryTop,
}

/// Most bootstrap resamples.
const MAX_RESAMPLES: usize = 100_000;

fn scores(args: &ScoresArgs) -> Result<(), CliError> {
    let base = args.scenario.resolve()?;
    let specs = parse_predict_specs(&args.predict)?;
    if args.resamples > MAX_RESAMPLES {
        return Err(CliError::input(format!("--resamples {}: at most {MAX_RESAMPLES}", args.resamples)));
    }
    let cells: Vec<Scenario> = if specs.is_empty() {
        Vec::new()
    } else {
        grid_points(&specs)
            .iter()
            .map(|pt| crate::calibrate::predict::at_point(base.clone(), &specs, pt).map_err(CliError::from))
            .collect::<Result<_, CliError>>()?
    };
    let capture = cs::read_file(&args.file)?;
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
                .map_err(|e| CliError::input(format!("{}: {e}", args.file.display())))
        })
        .collect::<Result<_, _>>()?;
    let opts = PredictOptions {
        resamples: args.resamples,
        seed: args.seed,
        max_classes: args.tail_classes,
        tail_model: match args.tail_model {
            TailModelArg::Auto => cs::TailChoice::Auto,
            TailModelArg::Classes => cs::TailChoice::Classes,
            TailModelArg::QueryTop => cs::TailChoice::QueryTop,
        },
    };
    let (predictions, classes, tail_models) = if cells.is_empty() {
        (Vec::new(), Vec::new(), Vec::new())
    } else {
        let r = cs::predict_report(&capture, &cells, opts, &super::progress::Bar::resamples(!args.json))
            .map_err(|e| CliError::input(format!("{}: {e}", args.file.display())))?;
        (r.predictions, r.classes, r.tails)
    };
    let model_json = |m: &cs::TailModel| match m {
        cs::TailModel::Classes => json!({"model": "classes"}),
        cs::TailModel::QueryTop(f) => json!({"model": "query-top", "top_fraction": f}),
    };
    if args.json {
        return print_json(&json!({
            "file": args.file.display().to_string(),
            "queries": capture.queries(),
            "layers": capture.layers.len(),
            "ranks": ranks.iter().map(|r| json!({
                "layer": r.layer,
                "queries": r.queries,
                "median_candidates": r.median_candidates,
                "quantiles": r.quantiles.iter().map(|(p, v)| json!({"p": p, "rank": v})).collect::<Vec<_>>(),
                "cdf": r.cdf.iter().map(|(j, p)| json!({"j": j, "p": p})).collect::<Vec<_>>(),
            })).collect::<Vec<_>>(),
            "tail": tails.iter().map(|t| json!({
                "layer": t.layer,
                "pooled": t.pooled,
                "threshold": t.threshold,
                "exceedances": t.exceedances,
                "gpd": {"xi": t.gpd.xi, "sigma": t.gpd.sigma},
                "quantiles": t.quantiles.iter().map(|(p, q, n)| json!({"p": p, "observed": q, "normal": n})).collect::<Vec<_>>(),
                "exceedance": t.exceedance.iter().map(|(z, o, n)| json!({"z": z, "observed": o, "normal": n, "ratio": o / n})).collect::<Vec<_>>(),
            })).collect::<Vec<_>>(),
            "predictions": predictions.iter().map(|p| json!({
                "context_len": p.context_len,
                "index_topk": p.index_topk,
                "n_candidates": p.n_candidates,
                "recall": p.recall,
                "low": p.low,
                "high": p.high,
                "recall_empirical": p.recall_empirical,
            })).collect::<Vec<_>>(),
            "tail_classes": classes.iter().map(|l| json!({
                "layer": l.layer,
                "classes": l.classes().iter().map(|c| json!({"weight": c.weight, "p_u": c.p_u, "xi": c.gpd.xi, "sigma": c.gpd.sigma})).collect::<Vec<_>>(),
                "heldout": l.choice.heldout.iter().map(|(k, ll)| json!({"classes": k, "loglik": ll})).collect::<Vec<_>>(),
            })).collect::<Vec<_>>(),
            "tail_models": tail_models.iter().map(|t| json!({
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
            "max_tail_classes": args.tail_classes,
            "resamples": args.resamples,
            "seed": args.seed,
            "scenario": scenario_json(&base),
            "version": env!("CARGO_PKG_VERSION"),
        }));
    }
    let mut out = String::new();
    outln!(
        out,
        "captured scores: {} ({} layer{}, {} queries)",
        args.file.display(),
        capture.layers.len(),
        if capture.layers.len() == 1 { "" } else { "s" },
        capture.queries()
    );
    for (r, t) in ranks.iter().zip(&tails) {
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
    if !tail_models.is_empty() {
        outln!(
            out,
            "tail model (fitted on half of every query's distractors, {} halvings, predicted − measured recall of the whole capture at k = {} (standard error); the classes unless an error of theirs exceeds {} standard errors, else the smallest sum of squared errors among the classes and the fractions not so biased themselves; where that is a query-top fraction, every fraction mixed with weights ∝ exp(−½ Σ_k (error / mean se at k)²)):",
            cs::predict::SPLITS,
            cs::predict::VALIDATION_KS.map(|k| k.to_string()).join(", "),
            cs::predict::SWITCH_SE
        );
        for t in &tail_models {
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
    if !classes.is_empty() {
        outln!(
            out,
            "tail classes (at most {}, the count chosen by {}-fold held-out log-likelihood over queries):",
            args.tail_classes,
            cs::classes::FOLDS
        );
        for l in &classes {
            let h: Vec<String> = l
                .choice
                .heldout
                .iter()
                .map(|(k, ll)| format!("{k}: {}", ll.map_or("too few exceedances".to_string(), |v| format!("{v:.1}"))))
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
    if !predictions.is_empty() {
        outln!(out, "predicted recall ({} bootstrap resamples, seed {}):", args.resamples, args.seed);
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
        for p in &predictions {
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
    emit(&out)
}
