//! `dsa-sim rank`: the needle's rank distribution.

use super::progress::Bar;
use super::recall::placement_note;
use super::{emit, outln, print_json, scenario_json, CliError, RunArgs, ScenarioArgs};
use crate::engine::estimate_observed;
use serde_json::json;

/// Arguments of `dsa-sim rank`.
#[derive(clap::Args, Debug)]
#[command(after_help = "The rank is 1 + the number of candidates scoring above the needle's best entry in one \
layer; the needle is selected when rank <= index_topk.\n\nExample:\n  dsa-sim rank --preset deepseek-v4-flash --context-len 65536 --dprime 2.5")]
pub struct RankArgs {
    #[command(flatten)]
    #[allow(missing_docs)]
    pub scenario: ScenarioArgs,
    #[command(flatten)]
    #[allow(missing_docs)]
    pub run: RunArgs,
}

/// Runs `dsa-sim rank`.
pub fn run(args: &RankArgs) -> Result<(), CliError> {
    let s = args.scenario.resolve()?;
    let opts = args.run.options(&s)?;
    let e = args.run.in_pool(|| estimate_observed(&s, &opts, &Bar::trials(!args.run.json)))??;
    let mut out = String::new();
    if args.run.json {
        let quantiles = e.rank.quantiles.to_json();
        return print_json(&json!({
            "n_candidates": e.rank.n_candidates,
            "quantiles": quantiles,
            "cdf": e.rank.cdf,
            "engine": e.engine,
            "trials": e.trials,
            "seed": opts.seed,
            "scenario": scenario_json(&s),
            "version": env!("CARGO_PKG_VERSION"),
        }));
    }
    outln!(out, 
        "needle rank among {} candidates ({} engine{})",
        e.rank.n_candidates,
        e.engine,
        e.trials.map_or(String::new(), |t| format!(", {t} trials, seed {}", opts.seed))
    );
    for (p, v) in e.rank.quantiles.pairs() {
        outln!(out, "  {:>4.0}% quantile: {}", p * 100.0, v.map_or("never".into(), |r| r.to_string()));
    }
    outln!(out, "  P(rank <= j):");
    for (j, p) in &e.rank.cdf {
        let mark = if *j == s.index_topk { "  <- index_topk" } else if *j == s.max_topk { "  <- max_topk" } else { "" };
        outln!(out, "    j = {j:>12}  {p:.6}{mark}");
    }
    if let Some(note) = placement_note(&s) {
        outln!(out, "note: {note}");
    }
    emit(&out)
}
