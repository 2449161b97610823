//! `dsa-sim plan` (docs/model.md#planning): the cells to measure next that best separate the
//! leading hypotheses. Each leading hypothesis (Akaike weight ≥ 1%, at most four, at least two)
//! predicts recall for every candidate cell; the expected log-likelihood ratio per trial between
//! two hypotheses at a cell is the Kullback–Leibler divergence of their binomial predictions, and
//! the plan spends the budget greedily, chunk by chunk, on the cell that most raises the smallest
//! pairwise expected log-likelihood ratio (a maximin design). How decisive it is expected to be is
//! simulated: counts drawn from each leading hypothesis at the planned cells, and the fraction of
//! draws in which that hypothesis then has the lowest AIC over the table plus the new cells.

use super::hypotheses::{compare_hypotheses, hypothesis_recall, HypothesisResult};
use super::likelihood::binom_loglik;
use super::{CalibError, FreeParam, RecallModel};
use crate::measured::{Dataset, Observation};
use crate::scenario::Scenario;
use rand::SeedableRng;
use rand_distr::{Binomial, Distribution};

/// One planned cell.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct PlanCell {
    /// Context length.
    pub context_len: u64,
    /// k.
    pub index_topk: u64,
    /// Needle depth.
    pub depth: f64,
    /// Needle copies.
    pub repeat: u32,
    /// Trials to run.
    pub trials: u64,
    /// Each leading hypothesis's predicted recall there.
    pub predicted: Vec<(String, f64)>,
}

/// A plan.
#[derive(Debug, Clone, PartialEq)]
pub struct Plan {
    /// The cells, in the order chosen.
    pub cells: Vec<PlanCell>,
    /// The budget.
    pub budget: u64,
    /// The leading hypotheses and their current Akaike weights.
    pub leading: Vec<(String, f64)>,
    /// Expected log-likelihood ratio of each pair over the planned trials (the smaller of the two
    /// directions).
    pub pair_llr: Vec<(String, String, f64)>,
    /// For each leading hypothesis: the simulated probability that, if it is true, it has the
    /// lowest AIC once the planned cells are measured.
    pub p_correct: Vec<(String, f64)>,
}

impl Plan {
    /// Total trials.
    pub fn total(&self) -> u64 {
        self.cells.iter().map(|c| c.trials).sum()
    }
    /// The CSV a harness can run (with a provenance header).
    pub fn csv(&self, source: &str) -> String {
        let mut s = format!(
            "# provenance: planned by dsa-sim plan from {source} (budget {}); cells to measure, no results yet: add a hits column\n",
            self.budget
        );
        s.push_str("context_len,index_topk,depth,repeat,trials\n");
        for c in &self.cells {
            s.push_str(&format!("{},{},{},{},{}\n", c.context_len, c.index_topk, c.depth, c.repeat, c.trials));
        }
        s
    }
    /// The JSON of `dsa-sim plan --json`.
    pub fn json(&self) -> serde_json::Value {
        serde_json::json!({
            "cells": self.cells.iter().map(|c| serde_json::json!({
                "context_len": c.context_len, "index_topk": c.index_topk, "depth": c.depth,
                "repeat": c.repeat, "trials": c.trials,
                "predicted": c.predicted.iter().map(|(n, p)| (n.clone(), serde_json::json!(p))).collect::<serde_json::Map<_, _>>(),
            })).collect::<Vec<_>>(),
            "budget": self.budget,
            "total_trials": self.total(),
            "leading_hypotheses": self.leading.iter().map(|(n, w)| serde_json::json!({"name": n, "weight": w})).collect::<Vec<_>>(),
            "expected_llr": self.pair_llr.iter().map(|(a, b, l)| serde_json::json!({"a": a, "b": b, "llr": l})).collect::<Vec<_>>(),
            "p_correct": self.p_correct.iter().map(|(n, p)| (n.clone(), serde_json::json!(p))).collect::<serde_json::Map<_, _>>(),
        })
    }
    /// A text table.
    pub fn text(&self) -> String {
        let mut s = String::new();
        let names: Vec<&str> = self.leading.iter().map(|(n, _)| n.as_str()).collect();
        s.push_str(&format!(
            "leading hypotheses: {}\n",
            self.leading.iter().map(|(n, w)| format!("{n} (weight {w:.3})")).collect::<Vec<_>>().join(", ")
        ));
        s.push_str(&format!("planned cells ({} of {} trials):\n", self.total(), self.budget));
        s.push_str(&format!("  {:>9} {:>6} {:>6} {:>6} {:>7}  predicted recall: {}\n", "L", "k", "depth", "repeat", "trials", names.join(" / ")));
        for c in &self.cells {
            let p: Vec<String> = c.predicted.iter().map(|(_, p)| format!("{p:.3}")).collect();
            s.push_str(&format!("  {:>9} {:>6} {:>6} {:>6} {:>7}  {}\n", c.context_len, c.index_topk, c.depth, c.repeat, c.trials, p.join(" / ")));
        }
        s.push_str("expected log-likelihood ratio over the planned trials (the weaker direction):\n");
        for (a, b, l) in &self.pair_llr {
            s.push_str(&format!("  {a} vs {b}: {l:.1}\n"));
        }
        s.push_str("decisiveness (simulated: if this hypothesis is true, the chance it then has the lowest AIC):\n");
        for (n, p) in &self.p_correct {
            s.push_str(&format!("  {n}: {p:.2}\n"));
        }
        s
    }
}

fn kl(p: f64, q: f64) -> f64 {
    let c = |x: f64| x.clamp(1e-9, 1.0 - 1e-9);
    let (p, q) = (c(p), c(q));
    p * (p / q).ln() + (1.0 - p) * ((1.0 - p) / (1.0 - q)).ln()
}

/// The candidate cells: context lengths 1K–64K (and L + 3 when the compression ratio exceeds 1,
/// to probe the length modulo c), k at half, once and the kernel maximum, depths 0.1, 0.5, 0.9.
fn candidates(base: &Scenario) -> Vec<Observation> {
    let mut ls: Vec<u64> = vec![1000, 2000, 4000, 8000, 16000, 32000, 64000];
    if base.compress_ratio > 1 {
        let extra: Vec<u64> = ls.iter().map(|l| l + 3).collect();
        ls.extend(extra);
    }
    let mut ks = vec![(base.index_topk / 2).max(1), base.index_topk, base.max_topk];
    ks.sort_unstable();
    ks.dedup();
    let mut out = Vec::new();
    for &l in &ls {
        for &k in &ks {
            for &d in &[0.1, 0.5, 0.9] {
                out.push(Observation {
                    context_len: l,
                    index_topk: k,
                    trials: 1,
                    hits: 0,
                    depth: Some(d),
                    repeat: Some(base.repeat),
                    compress_ratio: None,
                    window: None,
                    label: None,
                    needle: None,
                    needle_tokens: None,
                    overlap: None,
                    layer_counts: None,
                    conditions: Vec::new(),
                    line: out.len() as u64 + 2,
                });
            }
        }
    }
    out
}

/// Plans the next measurements.
pub fn plan(
    data: &Dataset,
    base: &Scenario,
    user_free: &[FreeParam],
    model: &dyn RecallModel,
    budget: u64,
    seed: u64,
    only: &[String],
) -> Result<Plan, CalibError> {
    for n in only {
        super::hypotheses::check_name(n)?;
    }
    if budget == 0 {
        return Err(CalibError::Input("--budget 0: allowed ≥ 1 trial".into()));
    }
    let hyps = compare_hypotheses(data, base, user_free, model)?;
    let lmax = hyps.iter().map(|h| h.loglik).fold(f64::NEG_INFINITY, f64::max);
    let lmin = hyps.iter().map(|h| h.loglik).fold(f64::INFINITY, f64::min);
    if lmax - lmin < 1e-9 {
        return Err(CalibError::Input(format!(
            "{}: no row can separate any two hypotheses (every hypothesis predicts the same recall for every row): nothing to plan from",
            data.source
        )));
    }
    let mut leading: Vec<&HypothesisResult> = hyps.iter().filter(|h| h.weight >= 0.01).take(4).collect();
    if leading.len() < 2 {
        leading = hyps.iter().take(2).collect();
    }
    if !only.is_empty() {
        leading = hyps.iter().filter(|h| only.contains(&h.name)).collect();
        if leading.len() < 2 {
            return Err(CalibError::Input(format!(
                "--hypotheses {}: name at least two hypotheses that apply to this table",
                only.join(",")
            )));
        }
    }
    let cand = candidates(base);
    let cells_ds = Dataset { source: "candidates".into(), rows: cand.clone(), notes: vec![], provenance: None, transcribed: false, condition_columns: vec![] };
    let preds: Vec<Vec<f64>> =
        leading.iter().map(|h| hypothesis_recall(h, &cells_ds, base, user_free, model)).collect::<Result<_, _>>()?;
    let m = leading.len();
    let pairs: Vec<(usize, usize)> = (0..m).flat_map(|a| (a + 1..m).map(move |b| (a, b))).collect();
    // Per-trial information of each candidate for each pair (the weaker direction).
    let info: Vec<Vec<f64>> = (0..cand.len())
        .map(|c| pairs.iter().map(|&(a, b)| kl(preds[a][c], preds[b][c]).min(kl(preds[b][c], preds[a][c]))).collect())
        .collect();
    if info.iter().all(|v| v.iter().all(|&x| x < 1e-12)) {
        return Err(CalibError::Input("no candidate cell separates the leading hypotheses: nothing to plan".into()));
    }
    let chunks = (budget / 50).clamp(1, 8);
    let per = budget / chunks;
    let mut acc = vec![0.0; pairs.len()];
    let mut chosen: Vec<(usize, u64)> = Vec::new();
    for _ in 0..chunks {
        let score = |c: usize| -> f64 {
            acc.iter().zip(&info[c]).map(|(a, i)| a + per as f64 * i).fold(f64::INFINITY, f64::min)
        };
        let best = (0..cand.len()).max_by(|&x, &y| score(x).total_cmp(&score(y))).expect("candidates");
        for (a, i) in acc.iter_mut().zip(&info[best]) {
            *a += per as f64 * i;
        }
        match chosen.iter_mut().find(|(c, _)| *c == best) {
            Some((_, t)) => *t += per,
            None => chosen.push((best, per)),
        }
    }
    let cells: Vec<PlanCell> = chosen
        .iter()
        .map(|&(c, t)| PlanCell {
            context_len: cand[c].context_len,
            index_topk: cand[c].index_topk,
            depth: cand[c].depth.unwrap_or(base.depth),
            repeat: cand[c].repeat.unwrap_or(base.repeat),
            trials: t,
            predicted: leading.iter().zip(&preds).map(|(h, p)| (h.name.clone(), p[c])).collect(),
        })
        .collect();
    let pair_llr = pairs.iter().zip(&acc).map(|(&(a, b), l)| (leading[a].name.clone(), leading[b].name.clone(), *l)).collect();
    // Decisiveness: counts drawn from each leading hypothesis at the planned cells; the existing
    // table's log-likelihood and the parameter penalty of each hypothesis carried over.
    let mut rng = rand_xoshiro::Xoshiro256PlusPlus::seed_from_u64(seed);
    let reps = 400;
    let mut p_correct = Vec::new();
    for (t, ht) in leading.iter().enumerate() {
        let mut wins = 0;
        for _ in 0..reps {
            let ys: Vec<u64> = chosen
                .iter()
                .map(|&(c, n)| Binomial::new(n, preds[t][c].clamp(0.0, 1.0)).map_or(0, |b| b.sample(&mut rng)))
                .collect();
            let aic = |h: usize| -> f64 {
                let ll: f64 = chosen.iter().zip(&ys).map(|(&(c, n), &y)| binom_loglik(y, n, preds[h][c])).sum();
                leading[h].aic - 2.0 * ll
            };
            let at = aic(t);
            if (0..m).all(|h| h == t || aic(h) > at) {
                wins += 1;
            }
        }
        p_correct.push((ht.name.clone(), wins as f64 / reps as f64));
    }
    Ok(Plan {
        cells,
        budget,
        leading: leading.iter().map(|h| (h.name.clone(), h.weight)).collect(),
        pair_llr,
        p_correct,
    })
}
