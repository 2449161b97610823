//! `dsa-sim recall`: P(correct answer) for one scenario.

use super::progress::Bar;
use super::{emit, outln, print_json, scenario_json, CliError, RunArgs, ScenarioArgs};
use crate::engine::{estimate_observed, Estimate};
use crate::geometry::Geometry;
use crate::scenario::Scenario;
use serde_json::json;

/// Arguments of `dsa-sim recall`.
#[derive(clap::Args, Debug)]
#[command(after_help = "Examples:\n  dsa-sim recall --preset deepseek-v4-flash --context-len 131072 --dprime 3\n  \
dsa-sim recall --context-len 1000000 --index-topk 1024 --dprime 4 --score-noise 0.5 --json\n  \
dsa-sim recall --preset deepseek-v4-flash --pooling mean --context-len 32768 \\\n      \
--engine montecarlo --trials 5000 --seed 7")]
pub struct RecallArgs {
    #[command(flatten)]
    #[allow(missing_docs)]
    pub scenario: ScenarioArgs,
    #[command(flatten)]
    #[allow(missing_docs)]
    pub run: RunArgs,
}

/// The JSON object of one estimate (docs/cli.md#output keys and more).
pub fn estimate_json(s: &Scenario, e: &Estimate, seed: u64) -> serde_json::Value {
    let quantiles = e.rank.quantiles.to_json();
    json!({
        "recall": e.recall,
        "ci_low": e.ci_low,
        "ci_high": e.ci_high,
        "engine": e.engine,
        "trials": e.trials,
        "seed": seed,
        "not_exact": e.not_exact,
        "n_candidates": e.rank.n_candidates,
        "coverage_horizon_tokens": s.coverage_horizon_tokens(),
        "rank": { "quantiles": quantiles, "cdf": e.rank.cdf },
        "scenario": scenario_json(s),
        "version": env!("CARGO_PKG_VERSION"),
    })
}

/// One line on where the needle stands relative to the window, for the summaries.
pub fn placement_note(s: &Scenario) -> Option<String> {
    let g = Geometry::new(s);
    if g.always_attended {
        Some("the needle lies inside the sliding window or sink: always attended".into())
    } else if g.needle_entries.is_empty() {
        Some("the needle lies in no complete block and outside the window: never selectable".into())
    } else {
        None
    }
}

fn rank_text(v: Option<u64>) -> String {
    v.map_or("never".into(), |r| r.to_string())
}

/// Runs `dsa-sim recall`.
pub fn run(args: &RecallArgs) -> Result<(), CliError> {
    let s = args.scenario.resolve()?;
    let opts = args.run.options(&s)?;
    let e = args.run.in_pool(|| estimate_observed(&s, &opts, &Bar::trials(!args.run.json)))??;
    let mut out = String::new();
    if args.run.json {
        return print_json(&estimate_json(&s, &e, opts.seed));
    }
    match e.trials {
        None => outln!(out, "recall {:.6}  (exact, analytic engine)", e.recall),
        Some(t) => outln!(out, 
            "recall {:.4}  95% CI [{:.4}, {:.4}]  (Monte Carlo, {t} trials, seed {})",
            e.recall, e.ci_low, e.ci_high, opts.seed
        ),
    }
    if let Some(why) = &e.not_exact {
        outln!(out, "  analytic engine not exact here: {why}");
    }
    outln!(out, 
        "context {} tokens -> {} candidates (c = {}); index_topk {}; coverage horizon {} tokens",
        s.context_len,
        e.rank.n_candidates,
        s.compress_ratio,
        s.index_topk,
        s.coverage_horizon_tokens()
    );
    outln!(out, 
        "needle rank: median {}, 90th percentile {} (selected when rank <= {})",
        rank_text(e.rank.quantiles.p50),
        rank_text(e.rank.quantiles.p90),
        s.index_topk.min(e.rank.n_candidates)
    );
    if let Some(note) = placement_note(&s) {
        outln!(out, "note: {note}");
    }
    emit(&out)
}
