//! `dsa-sim import`: real measurements in.

use super::{emit, outln, print_json, scenario_json, CliError, ScenarioArgs};
use crate::calibrate::parse_predict_specs;
use crate::calibrate::predict::grid_points;
use crate::captured_scores::{self as cs, PredictOptions};
use crate::scenario::Scenario;
use serde_json::json;
use std::path::PathBuf;

/// Arguments of `dsa-sim import`.
#[derive(clap::Args, Debug)]
pub struct ImportArgs {
    /// What to import.
    #[command(subcommand)]
    pub what: ImportCommand,
}

/// What `dsa-sim import` reads.
#[derive(clap::Subcommand, Debug)]
pub enum ImportCommand {
    /// Captured indexer scores (.npz): the needle's exact rank, the distractors' tail, and recall predicted at other context lengths and k.
    Scores(ScoresArgs),
}

/// Runs `dsa-sim import`.
pub fn run(args: &ImportArgs) -> Result<(), CliError> {
    match &args.what {
        ImportCommand::Scores(a) => scores(a),
    }
}

/// Arguments of `dsa-sim import scores`.
#[derive(clap::Args, Debug)]
#[command(after_help = "Layouts (numpy.savez):\n  \
one layer:  scores (float32/float64, queries x candidates), needle_index (integer, one per query)\n  \
per layer:  indexer_scores_0, indexer_scores_1, ... (each queries x candidates), needle_index\n\
A candidate scored -inf is masked (no candidate). The rank is 1 + the candidates scoring strictly \
above the needle's. Predictions resample each query's own distractors at the scenario's candidate \
count (context_len / compress_ratio) with the upper tail from a generalised-Pareto fit; the band is \
a 95% bootstrap over queries. Reference: docs/capture.md.\n\nExample:\n  \
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
    /// Print one JSON object on stdout instead of the summary.
    #[arg(long)]
    pub json: bool,
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
            .map(|pt| {
                let mut s = base.clone();
                for (a, &i) in specs.iter().zip(pt) {
                    s.set(a.field, a.values[i])?;
                }
                s.validate().map_err(|e| {
                    let at: Vec<String> = specs.iter().zip(pt).map(|(a, &i)| format!("{}={}", a.field, a.texts[i])).collect();
                    CliError::input(format!("--predict {}: {e}", at.join(" ")))
                })?;
                Ok(s)
            })
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
        .map(|l| cs::tail::summarise(l, &cs::tail::standardised(l)).map_err(|e| CliError::input(format!("{}: {e}", args.file.display()))))
        .collect::<Result<_, _>>()?;
    let opts = PredictOptions { resamples: args.resamples, seed: args.seed };
    let predictions = if cells.is_empty() {
        Vec::new()
    } else {
        cs::predict(&capture, &cells, opts).map_err(|e| CliError::input(format!("{}: {e}", args.file.display())))?
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
            "resamples": args.resamples,
            "seed": args.seed,
            "scenario": scenario_json(&base),
            "version": env!("CARGO_PKG_VERSION"),
        }));
    }
    let mut out = String::new();
    outln!(out, "captured scores: {} ({} layer{}, {} queries)", args.file.display(), capture.layers.len(), if capture.layers.len() == 1 { "" } else { "s" }, capture.queries());
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
    if !predictions.is_empty() {
        outln!(out, "predicted recall ({} bootstrap resamples, seed {}):", args.resamples, args.seed);
        outln!(out, "  {:>12} {:>10} {:>12} {:>8} {:>19} {:>16}", "context_len", "index_topk", "candidates", "recall", "95% band", "empirical alone");
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
