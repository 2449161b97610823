//! `recall` and `rank`: one estimate of one scenario, as JSON and as the summary text.

use super::{outln, scenario_json, CommandError, EngineSpec, ScenarioSpec};
use crate::engine::{estimate_observed, Estimate};
use crate::geometry::Geometry;
use crate::progress::Progress;
use crate::scenario::Scenario;
use serde_json::json;

/// One scenario's estimate: what `recall` and `rank` report.
#[derive(Debug, Clone)]
pub struct Estimated {
    /// The resolved scenario.
    pub scenario: Scenario,
    /// Recall and the rank distribution.
    pub estimate: Estimate,
    /// The Monte Carlo seed (reported even when the result is exact).
    pub seed: u64,
}

/// Resolves the scenario and estimates it (Monte Carlo trials reported to `progress`).
pub fn estimate(spec: &ScenarioSpec, engine: &EngineSpec, progress: &dyn Progress) -> Result<Estimated, CommandError> {
    let (s, device) = spec.resolve_with_device()?;
    let opts = engine.options(&s, device)?;
    let e = engine.in_pool(|| estimate_observed(&s, &opts, progress))??;
    Ok(Estimated { scenario: s, estimate: e, seed: opts.seed })
}

/// What the rank of one layer leaves out and recall adds (docs/model.md#rank-and-recall).
pub(crate) const NOT_IN_RANK: [&str; 5] = ["window", "sink", "p_read", "p_guess", "readout"];

/// The line `rank` prints on which layer it reports and what the rank leaves out.
fn rank_scope(s: &Scenario) -> String {
    let n = s.selecting_layers();
    let layer =
        if n == 1 { "the one selecting layer".to_string() } else { format!("the first of {n} selecting layers") };
    format!("  in {layer}; the window, sink, p_read, p_guess and readout do not enter the rank (recall adds them)")
}

fn rank_text(v: Option<u64>) -> String {
    v.map_or("never".into(), |r| r.to_string())
}

/// One line on where the needle stands relative to the window, for the summaries.
pub(crate) fn placement_note(s: &Scenario) -> Option<String> {
    let g = Geometry::new(s);
    if g.always_attended {
        Some("the needle lies inside the sliding window or sink: always attended".into())
    } else if g.needle_entries.is_empty() {
        Some("the needle lies in no complete block and outside the window: never selectable".into())
    } else {
        None
    }
}

impl Estimated {
    /// The `recall --json` object (docs/cli.md#output).
    pub fn recall_json(&self) -> serde_json::Value {
        let (s, e) = (&self.scenario, &self.estimate);
        json!({
            "recall": e.recall,
            "ci_low": e.ci_low,
            "ci_high": e.ci_high,
            "engine": e.engine,
            "trials": e.trials,
            "seed": self.seed,
            "not_exact": e.not_exact,
            "n_candidates": e.rank.n_candidates,
            "coverage_horizon_tokens": s.coverage_horizon_tokens(),
            "rank": { "quantiles": e.rank.quantiles.to_json(), "cdf": e.rank.cdf },
            "scenario": scenario_json(s),
            "version": env!("CARGO_PKG_VERSION"),
        })
    }

    /// The `rank --json` object (docs/cli.md#output).
    pub fn rank_json(&self) -> serde_json::Value {
        let e = &self.estimate;
        json!({
            "layer": 0,
            "selecting_layers": self.scenario.selecting_layers(),
            "not_in_rank": NOT_IN_RANK,
            "n_candidates": e.rank.n_candidates,
            "quantiles": e.rank.quantiles.to_json(),
            "cdf": e.rank.cdf,
            "engine": e.engine,
            "trials": e.trials,
            "seed": self.seed,
            "scenario": scenario_json(&self.scenario),
            "version": env!("CARGO_PKG_VERSION"),
        })
    }

    /// The summary `recall` prints.
    pub fn recall_text(&self) -> String {
        let (s, e) = (&self.scenario, &self.estimate);
        let mut out = String::new();
        match e.trials {
            None => outln!(out, "recall {:.6}  (exact, analytic engine)", e.recall),
            Some(t) => outln!(
                out,
                "recall {:.4}  95% CI [{:.4}, {:.4}]  (Monte Carlo, {t} trials, seed {})",
                e.recall,
                e.ci_low,
                e.ci_high,
                self.seed
            ),
        }
        if let Some(why) = &e.not_exact {
            outln!(out, "  analytic engine not exact here: {why}");
        }
        outln!(
            out,
            "context {} tokens -> {} candidates (c = {}); index_topk {}; coverage horizon {} tokens",
            s.context_len,
            e.rank.n_candidates,
            s.compress_ratio,
            s.index_topk,
            s.coverage_horizon_tokens()
        );
        outln!(
            out,
            "needle rank: median {}, 90th percentile {} (selected when rank <= {})",
            rank_text(e.rank.quantiles.p50),
            rank_text(e.rank.quantiles.p90),
            s.index_topk.min(e.rank.n_candidates)
        );
        if let Some(note) = placement_note(s) {
            outln!(out, "note: {note}");
        }
        out
    }

    /// The table `rank` prints.
    pub fn rank_text(&self) -> String {
        let (s, e) = (&self.scenario, &self.estimate);
        let mut out = String::new();
        outln!(
            out,
            "needle rank among {} candidates ({} engine{})",
            e.rank.n_candidates,
            e.engine,
            e.trials.map_or(String::new(), |t| format!(", {t} trials, seed {}", self.seed))
        );
        outln!(out, "{}", rank_scope(s));
        for (p, v) in e.rank.quantiles.pairs() {
            outln!(out, "  {:>4.0}% quantile: {}", p * 100.0, rank_text(v));
        }
        outln!(out, "  P(rank <= j):");
        for (j, p) in &e.rank.cdf {
            let mark = if *j == s.index_topk {
                "  <- index_topk"
            } else if *j == s.max_topk {
                "  <- max_topk"
            } else {
                ""
            };
            outln!(out, "    j = {j:>12}  {p:.6}{mark}");
        }
        if let Some(note) = placement_note(s) {
            outln!(out, "note: {note}");
        }
        out
    }
}
