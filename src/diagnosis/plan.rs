//! `dsa-sim plan` (docs/model.md#planning): the cells to measure next that tell most about which
//! hypothesis is true, and how often the diagnosis would then make the right call.
//!
//! The leading hypotheses (Akaike weight ≥ 1%, at most four, at least two; or those named) each
//! predict recall at every candidate cell the deployment can run (its top-k kernel's k, context
//! lengths within reach). The prior over them is their Akaike weights renormalised over the
//! leading set (the table's own evidence), each floored at 1% so that a named hypothesis is still
//! tested. The budget is spent greedily, chunk by chunk, on the cell whose next chunk of trials
//! most reduces the expected entropy of the posterior over the hypotheses given the outcomes of
//! the chunks planned before it: the mutual information between the hypothesis and the planned
//! outcomes, summed exactly over the new chunk's binomial counts and, for the earlier chunks'
//! outcomes, over seeded draws (sample s from (seed, s); the first chunk is exact). A cell where
//! every leading hypothesis predicts the same recall carries no information and gets no trials.
//!
//! Then, for each leading hypothesis as the truth, tables are simulated (table i from (seed, i)):
//! the planned cells' counts drawn from it and joined to the measured table, and the diagnosis's
//! call rule applied to each ([`RuleOnPlan`]: the hypotheses scored at their fitted predictions,
//! not refitted). The fraction of tables on which the call is the one the truth implies is the
//! probability of the right call.

use super::error_rates::{error_rates, working_indexer};
use super::rule::{self, DefectEvidence, Evidence};
use super::signature::{worse_than_random, Signature};
use crate::calibrate::hypotheses::{compare_hypotheses, hypothesis_recall, HypothesisResult};
use crate::calibrate::likelihood::binom_loglik;
use crate::calibrate::{row_checks, CalibError, Family, FreeParam, Hypothesis, JointFloor};
use crate::engine::RecallModel;
use crate::measured::{Dataset, Observation};
use crate::scenario::Scenario;
use crate::verdict::{Call, VerdictOptions};
use rayon::prelude::*;
use std::collections::BTreeMap;

/// Draws of the earlier chunks' outcomes per leading hypothesis in the information estimate.
pub(crate) const INFORMATION_SAMPLES: usize = 256;
/// Simulated tables per leading hypothesis in the right-call estimate.
pub const RIGHT_CALL_TABLES: u64 = 400;
/// Predictions closer than this at a cell count as agreeing (no information there).
pub(crate) const AGREE: f64 = 1e-9;
/// Smallest prior a leading hypothesis is given (before renormalising).
pub(crate) const PRIOR_FLOOR: f64 = 0.01;
/// Expected information (bits) below which a further chunk buys nothing the fitted hypotheses can
/// tell apart: the plan stops there, under budget.
pub(crate) const MIN_GAIN_BITS: f64 = 1e-3;
/// Longest context length proposed (see [`candidates`]).
pub(crate) const MAX_PLANNED_CONTEXT: u64 = 64_000;
/// The budget of the plan an undecided diagnosis comes with (`plan`'s default `--budget`).
pub const UNDECIDED_BUDGET: u64 = 1000;

/// Whether a planning error is "nothing to plan" (no cell the kernel can run separates the
/// leading hypotheses): a result, under which the verdict stands, not bad input.
pub(crate) fn is_nothing_to_plan(message: &str) -> bool {
    message.contains("nothing to plan")
}

/// The reason of a "nothing to plan" message, without the words themselves.
pub(crate) fn nothing_to_plan_reason(message: &str) -> String {
    let m = message.trim_end_matches(": nothing to plan from").trim_end_matches(": nothing to plan");
    m.to_string()
}

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
    pub predicted: Vec<(Hypothesis, f64)>,
    /// Expected information (bits) its chunks add to the plan's, in the order chosen.
    pub information_bits: f64,
}

/// How often the diagnosis makes the right call after the planned cells, with one hypothesis
/// as the truth.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct RightCall {
    /// The true hypothesis.
    pub(crate) hypothesis: Hypothesis,
    /// Its prior weight.
    pub(crate) prior: f64,
    /// The call it implies: a physical truth's own call (the verdict at its fit), or
    /// implementation-suspect for a defect.
    pub(crate) right_call: Call,
    /// The defect class the right call names (defect truths).
    pub(crate) right_class: Option<Hypothesis>,
    /// Fraction of simulated tables on which the call (and class) is right.
    pub(crate) p_right: f64,
}

/// A plan.
#[derive(Debug, Clone, PartialEq)]
pub struct Plan {
    /// The cells, in the order first chosen.
    pub cells: Vec<PlanCell>,
    /// The budget.
    pub budget: u64,
    /// The leading hypotheses: name, Akaike weight (over every hypothesis) and prior.
    pub leading: Vec<(Hypothesis, f64, f64)>,
    /// The k values the cells could take (the kernel's).
    pub candidate_k: Vec<u64>,
    /// Entropy of the prior (bits).
    pub prior_entropy_bits: f64,
    /// Expected entropy of the posterior after the planned cells (bits).
    pub posterior_entropy_bits: f64,
    /// Draws per hypothesis behind the information estimate.
    pub information_samples: usize,
    /// The seed of both simulations.
    pub seed: u64,
    /// Simulated tables per hypothesis behind the right-call estimate.
    pub tables: u64,
    /// Per leading hypothesis as the truth.
    pub right_calls: Vec<RightCall>,
    /// Σ prior · p_right.
    pub p_right_overall: f64,
    /// The defect evidence (ΔAIC) the rule needs on the joined design (τ).
    pub threshold: f64,
    /// What a restart at another k would buy, when the best cells are at another k.
    pub restart: Option<Restart>,
}

/// The deployment's k against a restart: the information of the best plan at the deployment's
/// k alone and of the best plan at any k the kernel runs.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Restart {
    /// The k the deployment runs now.
    pub(crate) deployment_k: u64,
    /// The other k the unrestricted plan measures at.
    pub(crate) other_k: Vec<u64>,
    /// Expected information (bits) of the best plan at the deployment's k alone.
    pub(crate) local_bits: f64,
    /// Expected information (bits) of the best plan at any k.
    pub(crate) restart_bits: f64,
    /// Whether the plan takes the restart (it tells more than [`RESTART_WORTH`] times as much).
    pub(crate) chosen: bool,
}

impl Plan {
    /// Total trials.
    pub fn total(&self) -> u64 {
        self.cells.iter().map(|c| c.trials).sum()
    }
    /// Expected information of the plan about the hypothesis (bits).
    pub(crate) fn information_bits(&self) -> f64 {
        self.prior_entropy_bits - self.posterior_entropy_bits
    }
    /// The CSV a harness can run (with a provenance header).
    pub(crate) fn csv(&self, source: &str) -> String {
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
}

/// The k values the deployment's top-k kernel runs among index_topk/2, index_topk, max_topk
/// and the table's own k: at most max_topk and supported by `topk_kernel` (sglang-v1: 512 and
/// 1024 only).
pub fn candidate_k(base: &Scenario, data: &Dataset) -> Vec<u64> {
    let mut ks = vec![(base.index_topk / 2).max(1), base.index_topk, base.max_topk];
    ks.extend(data.rows.iter().map(|r| r.index_topk));
    ks.retain(|&k| k >= 1 && k <= base.max_topk && base.topk_kernel.supports(k));
    ks.sort_unstable();
    ks.dedup();
    ks
}

/// The candidate cells: context lengths 1000–64000 (and L + 3 when the compression ratio
/// exceeds 1, to probe the length modulo c), the kernel's k ([`candidate_k`]), depths 0.1, 0.5
/// and 0.9, each a valid scenario on `base`. The scenario has no context-window field: the
/// lengths stop at `MAX_PLANNED_CONTEXT`, within the window of every model the presets
/// describe, or at the table's longest measured length when that is longer (the deployment ran
/// it), doubling from 128,000 up to it.
pub fn candidates(base: &Scenario, data: &Dataset) -> Vec<Observation> {
    let mut ls: Vec<u64> = vec![1000, 2000, 4000, 8000, 16000, 32000, MAX_PLANNED_CONTEXT];
    let longest = data.rows.iter().map(|r| r.context_len).max().unwrap_or(0);
    let top = longest.max(MAX_PLANNED_CONTEXT);
    let mut l = 2 * MAX_PLANNED_CONTEXT;
    while l < longest {
        ls.push(l);
        l *= 2;
    }
    if longest > MAX_PLANNED_CONTEXT {
        ls.push(longest);
    }
    if base.compress_ratio > 1 {
        let extra: Vec<u64> = ls.iter().map(|l| l + 3).filter(|&l| l <= top).collect();
        ls.extend(extra);
    }
    let mut out = Vec::new();
    for &l in &ls {
        for &k in &candidate_k(base, data) {
            for &d in &[0.1, 0.5, 0.9] {
                let o = Observation {
                    repeat: Some(base.repeat),
                    ..Observation::cell(l, k, Some(d), 1, 0, out.len() as u64 + 2)
                };
                if o.apply(base).is_ok_and(|s| s.validate().is_ok()) {
                    out.push(o);
                }
            }
        }
    }
    out
}

/// Trials per chunk and number of chunks: up to 8 equal chunks of at least 50 trials (one chunk
/// of the whole budget below 100), so the total never exceeds the budget.
pub(crate) fn chunking(budget: u64) -> (u64, u64) {
    let chunks = (budget / 50).clamp(1, 8);
    (chunks, budget / chunks)
}

/// The greedy information design over given predictions.
#[derive(Debug, Clone, PartialEq)]
pub struct Design {
    /// (candidate, trials, expected information in nats its chunks added), in the order first
    /// chosen.
    pub chosen: Vec<(usize, u64, f64)>,
    /// Entropy of the prior (nats).
    pub prior_entropy: f64,
    /// Expected entropy of the posterior after the chosen trials (nats).
    pub posterior_entropy: f64,
}

fn entropy(w: &[f64]) -> f64 {
    w.iter().filter(|&&x| x > 0.0).map(|&x| -x * x.ln()).sum()
}

/// The normalised posterior and its logarithm from unnormalised log weights.
fn normalise(lnw: &[f64], w: &mut [f64], lw: &mut [f64]) {
    let mx = lnw.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let z: f64 = lnw.iter().map(|&l| (l - mx).exp()).sum();
    let lz = mx + z.ln();
    for ((a, b), &l) in w.iter_mut().zip(lw.iter_mut()).zip(lnw) {
        *b = l - lz;
        *a = b.exp();
    }
}

/// Spends `budget` trials over candidate cells, greedily in `chunking`'s chunks, each on the
/// cell whose chunk most reduces the expected posterior entropy over the hypotheses given the
/// chunks before it. `preds[h][c]` is hypothesis h's recall at candidate c; `prior` their prior.
/// The new chunk's counts are summed exactly (every y with a binomial mass above 1e-300); the
/// earlier chunks' outcomes are `INFORMATION_SAMPLES` draws per hypothesis (draw s from
/// (seed, s)), merged when their outcomes coincide. A cell where all predictions agree within
/// `AGREE` is never chosen; the design stops early when no cell adds `MIN_GAIN_BITS`.
pub fn information_design(prior: &[f64], preds: &[Vec<f64>], budget: u64, seed: u64) -> Design {
    let m = prior.len();
    let nc = preds.first().map_or(0, Vec::len);
    let (chunks, n) = chunking(budget);
    let p = |h: usize, c: usize| preds[h][c].clamp(0.0, 1.0);
    let informative: Vec<usize> = (0..nc)
        .filter(|&c| {
            let (lo, hi) =
                (0..m).map(|h| p(h, c)).fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), x| (a.min(x), b.max(x)));
            hi - lo > AGREE
        })
        .collect();
    let ln_prior: Vec<f64> = prior.iter().map(|&x| x.ln()).collect();
    // Per draw: its truth, its generator and the outcomes drawn so far.
    let s_per = INFORMATION_SAMPLES;
    let mut rngs: Vec<_> = (0..m * s_per).map(|s| crate::trials::trial_rng(seed, s as u64)).collect();
    let mut history: Vec<Vec<u64>> = vec![Vec::new(); m * s_per];
    let mut loglik: Vec<Vec<f64>> = vec![vec![0.0; m]; m * s_per];
    let mut chosen: Vec<(usize, u64, f64)> = Vec::new();
    let prior_entropy = entropy(prior);
    // Distinct outcome histories with their probability weights and posteriors: the
    // log-likelihoods depend on the outcomes only, not on which truth drew them (a BTreeMap: a
    // fixed order of summation).
    let groups = |history: &[Vec<u64>], loglik: &[Vec<f64>]| -> Vec<(f64, Vec<f64>, Vec<f64>)> {
        let mut g: BTreeMap<&Vec<u64>, (f64, usize)> = BTreeMap::new();
        for (s, hs) in history.iter().enumerate() {
            g.entry(hs).or_insert((0.0, s)).0 += prior[s / s_per] / s_per as f64;
        }
        g.into_values()
            .map(|(wt, s)| {
                let lnw: Vec<f64> = (0..m).map(|h| ln_prior[h] + loglik[s][h]).collect();
                let mut w = vec![0.0; m];
                let mut lw = vec![0.0; m];
                normalise(&lnw, &mut w, &mut lw);
                (wt, w, lw)
            })
            .collect()
    };
    let mut posterior_entropy = prior_entropy;
    for _ in 0..chunks {
        let gs = groups(&history, &loglik);
        let now: f64 = gs.iter().map(|(wt, w, _)| wt * entropy(w)).sum();
        posterior_entropy = now;
        // Expected posterior entropy after a chunk of n trials at candidate c.
        let expected = |c: usize| -> f64 {
            let lp: Vec<Vec<f64>> = (0..m)
                .map(|h| (0..=n).map(|y| crate::stats::ln_binom_pmf(n, y, p(h, c), 1.0 - p(h, c))).collect())
                .collect();
            let ys: Vec<usize> = (0..=n as usize).filter(|&y| lp.iter().any(|l| l[y] > -690.0)).collect();
            let mut total = 0.0;
            for (wt, w, lw) in &gs {
                let mut acc = 0.0;
                for &y in &ys {
                    let (mut py, mut sal) = (0.0, 0.0);
                    for h in 0..m {
                        let l = lw[h] + lp[h][y];
                        if w[h] > 0.0 && l > -690.0 {
                            let a = l.exp();
                            py += a;
                            sal += a * l;
                        }
                    }
                    if py > 0.0 {
                        // P(y)·H(posterior | y) = P ln P − Σ a ln a.
                        acc += py * py.ln() - sal;
                    }
                }
                total += wt * acc;
            }
            total
        };
        let scores: Vec<f64> = informative.par_iter().map(|&c| expected(c)).collect();
        let Some((best, eh)) = informative.iter().zip(&scores).min_by(|a, b| a.1.total_cmp(b.1)).map(|(&c, &e)| (c, e))
        else {
            break;
        };
        let gain = now - eh;
        if gain < MIN_GAIN_BITS * std::f64::consts::LN_2 {
            break;
        }
        posterior_entropy = eh;
        for s in 0..m * s_per {
            let t = s / s_per;
            let y = crate::engine::binomial::sample(n, p(t, best), &mut rngs[s]);
            history[s].push(y);
            for (h, ll) in loglik[s].iter_mut().enumerate().take(m) {
                *ll += crate::stats::ln_binom_pmf(n, y, p(h, best), 1.0 - p(h, best));
            }
        }
        match chosen.iter_mut().find(|(c, _, _)| *c == best) {
            Some((_, t, g)) => {
                *t += n;
                *g += gain;
            }
            None => chosen.push((best, n, gain)),
        }
    }
    Design { chosen, prior_entropy, posterior_entropy }
}

/// What a hypothesis means for the call.
#[derive(Debug, Clone, PartialEq)]
pub enum Meaning {
    /// A working (or random) indexer: the call the verdict makes at its fit.
    Physical(Call),
    /// A physical hypothesis whose fitted separation is below 0: an indexer worse than random,
    /// which the diagnosis calls implementation-suspect (`worse_than_random`), whatever class.
    WorseThanRandom,
    /// A defect class: implementation-suspect, naming it.
    Defect,
}

/// One leading hypothesis as the rule sees it on a simulated table.
#[derive(Debug, Clone, PartialEq)]
pub struct RuleHypothesis {
    /// Which hypothesis.
    pub hypothesis: Hypothesis,
    /// AIC on the measured table.
    pub table_aic: f64,
    /// What it means for the call.
    pub meaning: Meaning,
    /// A working indexer's hypothesis (the null of the defect evidence: a physical hypothesis
    /// with dprime ≥ 0, or the random indexer).
    pub working: bool,
    /// Its predicted recall at each planned cell.
    pub at_cells: Vec<f64>,
}

/// The diagnosis's decision rule (`super::rule`, as [`super::diagnose`] applies it) applied to the measured table joined
/// with simulated counts at the planned cells, the hypotheses scored at their fitted predictions
/// (a refit of every hypothesis per simulated table would cost hundreds of fits): a table is
/// implementation-suspect when its rows lie jointly below the random-indexer floor, when the
/// measured table already shows an exact defect signature (worse than random, a condition
/// column that matters), or when the defect evidence AIC(best working) − AIC(best defect)
/// exceeds τ (undecided instead when the design's false-alarm rate exceeds
/// `rule::MAX_FALSE_ALARM`); otherwise read-limited when the table shows misses with every
/// candidate selected or read-failure has the lowest AIC; otherwise the physical call of the
/// lowest-AIC plain-scenario hypothesis. The diagnosis's other undecided case (the data leave
/// the preferred defect plausible) is not simulated.
#[derive(Debug, Clone, PartialEq)]
pub struct RuleOnPlan {
    /// The leading hypotheses (the truths simulated), then the random indexer when no working
    /// indexer's hypothesis leads (the null of the defect evidence).
    pub hypotheses: Vec<RuleHypothesis>,
    /// How many of them are truths of the simulation (the leading ones).
    pub truths: usize,
    /// Trials at each planned cell.
    pub trials: Vec<u64>,
    /// τ.
    pub threshold: f64,
    /// The design's false-alarm rate of the evidence rule.
    pub false_alarm: f64,
    /// The joint floor test over the joined design (`hits` of the table rows first).
    pub floor: Option<JointFloor>,
    /// The measured table's hits (the joined design's first rows).
    pub table_hits: Vec<u64>,
    /// The measured table already forces implementation-suspect.
    pub table_exact: bool,
    /// The measured table shows misses where every candidate is selected.
    pub table_read: bool,
    /// The table joined with the planned cells measures more than one k.
    pub k_matters: bool,
}

impl RuleOnPlan {
    /// The call and the defect class it names on a table whose planned cells found `ys`.
    pub(crate) fn call(&self, ys: &[u64], joined_hits: &mut Vec<u64>) -> (Call, Option<Hypothesis>) {
        let aic: Vec<f64> = self
            .hypotheses
            .iter()
            .map(|h| {
                h.table_aic
                    - 2.0
                        * ys.iter()
                            .zip(&self.trials)
                            .zip(&h.at_cells)
                            .map(|((&y, &n), &p)| binom_loglik(y, n, p))
                            .sum::<f64>()
            })
            .collect();
        let argmin = |f: &dyn Fn(&RuleHypothesis) -> bool| -> Option<usize> {
            (0..aic.len()).filter(|&i| f(&self.hypotheses[i])).min_by(|&a, &b| aic[a].total_cmp(&aic[b]))
        };
        let is_defect = |h: &RuleHypothesis| h.meaning == Meaning::Defect;
        let best =
            argmin(&|_| true).expect("rule_on_plan keeps every leading hypothesis, and plan() leads with at least two");
        let best_defect = argmin(&is_defect);
        let floor = self.floor.as_ref().is_some_and(|f| {
            joined_hits.clear();
            joined_hits.extend_from_slice(&self.table_hits);
            joined_hits.extend_from_slice(ys);
            f.rejects(joined_hits)
        });
        // The evidence as the diagnosis states it, decided by the one rule (a fixed-size list:
        // no allocation per simulated table).
        let mut sig = [Signature::BelowRandomFloor; 3];
        let mut n = 0;
        for (found, g) in [
            (floor, Signature::BelowRandomFloor),
            (self.table_exact, Signature::WorseThanRandom),
            (self.table_read, Signature::MissesWhenAllSelected),
        ] {
            if found {
                sig[n] = g;
                n += 1;
            }
        }
        let evidence = match (argmin(&|h| h.working), best_defect) {
            (Some(w), Some(d)) => aic[w] - aic[d],
            _ => f64::NEG_INFINITY,
        };
        // The symmetric standard on simulated tables: a physical call needs the best working
        // hypothesis to beat the best defect by τ (the diagnosis simulates each competitor; a
        // plan's thousands of tables take τ for both directions).
        let defect = DefectEvidence {
            evidence,
            threshold: self.threshold,
            false_alarm: self.false_alarm,
            defect_not_ruled_out: best_defect.is_some() && -evidence < self.threshold,
            defect_poor_fit: false,
        };
        let best_physical = argmin(&|h| !is_defect(h));
        let physical = match best_physical.map(|i| &self.hypotheses[i].meaning) {
            Some(Meaning::Physical(c)) => *c,
            // Without the exact signature on this table the diagnosis takes the numbers of the
            // best plain scenario: the verdict's call there, which is not a defect call.
            Some(Meaning::WorseThanRandom) => Call::DiscriminationLimited,
            _ => Call::Undecided,
        };
        let explanation = best_physical.filter(|&i| self.hypotheses[i].working).map(|i| {
            if self.hypotheses[i].meaning == Meaning::Physical(Call::ReadLimited) {
                rule::Explanation::Read
            } else {
                rule::Explanation::Working
            }
        });
        let e = Evidence {
            signatures: &sig[..n],
            all_found: false,
            condition_p: None,
            condition_open: false,
            defect_preferred: is_defect(&self.hypotheses[best]),
            explanation,
            floor_explained: false,
            error_rates: Some(defect),
            k_matters: self.k_matters,
            dense: None,
        };
        let (call, reason) = rule::decide(&e, physical);
        let of = |i: usize| self.hypotheses[i].hypothesis;
        (call, rule::named_defect(call, reason, of(best), best_defect.map(of)))
    }

    /// The call a hypothesis implies when it is the truth.
    pub(crate) fn truth_call(h: &RuleHypothesis) -> (Call, Option<Hypothesis>) {
        match h.meaning {
            Meaning::Physical(c) => (c, None),
            Meaning::WorseThanRandom => (Call::ImplementationSuspect, None),
            Meaning::Defect => (Call::ImplementationSuspect, Some(h.hypothesis)),
        }
    }

    /// Whether a call is the one a truth implies: the same call, and the same defect class when
    /// the truth names one.
    pub(crate) fn is_right(call: &(Call, Option<Hypothesis>), truth: &(Call, Option<Hypothesis>)) -> bool {
        call.0 == truth.0 && (truth.1.is_none() || call.1 == truth.1)
    }

    /// For each hypothesis as the truth: the fraction of `tables` simulated tables (table i of
    /// truth t drawn from (seed, t · tables + i)) on which the call is the truth's.
    pub fn p_right(&self, seed: u64, tables: u64) -> Vec<f64> {
        (0..self.truths)
            .into_par_iter()
            .map(|t| {
                let truth = &self.hypotheses[t];
                let right = Self::truth_call(truth);
                let mut ys = vec![0u64; self.trials.len()];
                let mut joined = Vec::with_capacity(self.table_hits.len() + ys.len());
                let mut hits = 0u64;
                for i in 0..tables {
                    let mut rng = crate::trials::trial_rng(seed, t as u64 * tables + i);
                    for ((y, &n), &p) in ys.iter_mut().zip(&self.trials).zip(&truth.at_cells) {
                        *y = crate::engine::binomial::sample(n, p.clamp(0.0, 1.0), &mut rng);
                    }
                    if Self::is_right(&self.call(&ys, &mut joined), &right) {
                        hits += 1;
                    }
                }
                hits as f64 / tables as f64
            })
            .collect()
    }
}

/// The verdict's options for the physical calls: target recall, the kernel maximum.
#[derive(Debug, Clone)]
pub(crate) struct PlanOptions<'a> {
    /// Trials to spend.
    pub(crate) budget: u64,
    /// Seed of the simulations.
    pub(crate) seed: u64,
    /// Hypotheses to separate instead of the leading ones.
    pub(crate) only: &'a [Hypothesis],
    /// The verdict's options (a physical truth's call).
    pub(crate) verdict: VerdictOptions,
}

/// Plans the next measurements with the verdict's default target (0.9).
pub fn plan(
    data: &Dataset,
    base: &Scenario,
    user_free: &[FreeParam],
    model: &dyn RecallModel,
    budget: u64,
    seed: u64,
    only: &[Hypothesis],
) -> Result<Plan, CalibError> {
    let opts = PlanOptions { budget, seed, only, verdict: VerdictOptions { target: 0.9, max_topk: base.max_topk } };
    plan_with(data, base, user_free, model, &opts)
}

/// Plans the next measurements.
pub(crate) fn plan_with(
    data: &Dataset,
    base: &Scenario,
    user_free: &[FreeParam],
    model: &dyn RecallModel,
    opts: &PlanOptions,
) -> Result<Plan, CalibError> {
    let budget = opts.budget;
    if budget == 0 {
        return Err(CalibError::Input("--budget 0: allowed ≥ 1 trial".into()));
    }
    let base = &crate::calibrate::answer_scenario(data, base);
    let hyps = compare_hypotheses(data, base, user_free, model)?;
    plan_from(data, base, &hyps, user_free, model, opts)
}

/// [`plan_with`] from hypotheses already fitted to `data` on `base` (the answer scenario), as
/// the diagnosis has them: an undecided call comes with the cells that would decide it.
pub(crate) fn plan_from(
    data: &Dataset,
    base: &Scenario,
    hyps: &[HypothesisResult],
    user_free: &[FreeParam],
    model: &dyn RecallModel,
    opts: &PlanOptions,
) -> Result<Plan, CalibError> {
    let (budget, seed, only) = (opts.budget, opts.seed, opts.only);
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
        leading = hyps.iter().filter(|h| only.contains(&h.hypothesis)).collect();
        if leading.len() < 2 {
            let why: Vec<String> = only
                .iter()
                .filter(|&&n| !hyps.iter().any(|h| h.hypothesis == n))
                .map(|&n| format!("`{n}` does not apply: {}", not_applicable(n, data, base)))
                .collect();
            let why = if why.is_empty() { "name two different hypotheses".to_string() } else { why.join("; ") };
            let named: Vec<&str> = only.iter().map(|h| h.name()).collect();
            return Err(CalibError::Input(format!(
                "--hypotheses {}: name at least two hypotheses that apply to this table ({why})",
                named.join(",")
            )));
        }
    }
    // The prior: Akaike weights over the leading set (from their AIC, so that named hypotheses
    // of negligible weight keep their ratios), floored at PRIOR_FLOOR, renormalised.
    let amin = leading.iter().map(|h| h.aic).fold(f64::INFINITY, f64::min);
    let raw: Vec<f64> = leading.iter().map(|h| (-(h.aic - amin) / 2.0).exp()).collect();
    let z: f64 = raw.iter().sum();
    let floored: Vec<f64> = raw.iter().map(|w| (w / z).max(PRIOR_FLOOR)).collect();
    let z: f64 = floored.iter().sum();
    let prior: Vec<f64> = floored.iter().map(|w| w / z).collect();

    let candidate_k = candidate_k(base, data);
    if candidate_k.is_empty() {
        return Err(CalibError::Input(format!(
            "the {} top-k kernel runs no k among index_topk/2, index_topk, max_topk and the table's k ({}): nothing to plan",
            base.topk_kernel,
            base.topk_kernel.supported_text()
        )));
    }
    let cand = candidates(base, data);
    let cells_ds = Dataset::of_rows("candidates", cand.clone());
    let preds: Vec<Vec<f64>> =
        leading.iter().map(|h| hypothesis_recall(h, &cells_ds, base, user_free, model)).collect::<Result<_, _>>()?;
    let full = information_design(&prior, &preds, budget, seed);
    // The deployment's k first: a cell at another k costs a restart of the server. The cells
    // at another k are planned only when they tell much more than the deployment's k alone.
    let here = deployment_k(base, data);
    let local_idx: Vec<usize> = (0..cand.len()).filter(|&c| cand[c].index_topk == here).collect();
    let mut restart = None;
    let design = if full.chosen.iter().any(|c| cand[c.0].index_topk != here) && !local_idx.is_empty() {
        let sub: Vec<Vec<f64>> = preds.iter().map(|p| local_idx.iter().map(|&c| p[c]).collect()).collect();
        let mut local = information_design(&prior, &sub, budget, seed);
        for c in &mut local.chosen {
            c.0 = local_idx[c.0];
        }
        let bits = |d: &Design| (d.prior_entropy - d.posterior_entropy).max(0.0) / std::f64::consts::LN_2;
        let (lb, fb) = (bits(&local), bits(&full));
        let worth = local.chosen.is_empty() || fb > RESTART_WORTH * lb + RESTART_MIN_BITS;
        let mut other: Vec<u64> = full.chosen.iter().map(|c| cand[c.0].index_topk).filter(|&k| k != here).collect();
        other.sort_unstable();
        other.dedup();
        restart = Some(Restart { deployment_k: here, other_k: other, local_bits: lb, restart_bits: fb, chosen: worth });
        if worth {
            full
        } else {
            local
        }
    } else {
        full
    };
    if design.chosen.is_empty() {
        return Err(CalibError::Input("no candidate cell separates the leading hypotheses (they predict the same recall at every cell the kernel can run): nothing to plan".into()));
    }
    let cells: Vec<PlanCell> = design
        .chosen
        .iter()
        .map(|&(c, t, g)| PlanCell {
            context_len: cand[c].context_len,
            index_topk: cand[c].index_topk,
            depth: cand[c].depth.unwrap_or(base.depth),
            repeat: cand[c].repeat.unwrap_or(base.repeat),
            trials: t,
            predicted: leading.iter().zip(&preds).map(|(h, p)| (h.hypothesis, p[c])).collect(),
            information_bits: g / std::f64::consts::LN_2,
        })
        .collect();
    let rule = rule_on_plan(data, base, model, hyps, &leading, &preds, &design, &cand, opts.verdict)?;
    let p_right = rule.p_right(seed, RIGHT_CALL_TABLES);
    let right_calls: Vec<RightCall> = rule
        .hypotheses
        .iter()
        .zip(&prior)
        .zip(&p_right)
        .map(|((h, &pr), &p)| {
            let (call, class) = RuleOnPlan::truth_call(h);
            RightCall { hypothesis: h.hypothesis, prior: pr, right_call: call, right_class: class, p_right: p }
        })
        .collect();
    let p_right_overall = right_calls.iter().map(|r| r.prior * r.p_right).sum();
    Ok(Plan {
        cells,
        budget,
        leading: leading.iter().zip(&prior).map(|(h, &p)| (h.hypothesis, h.weight, p)).collect(),
        candidate_k,
        prior_entropy_bits: design.prior_entropy / std::f64::consts::LN_2,
        posterior_entropy_bits: design.posterior_entropy / std::f64::consts::LN_2,
        information_samples: INFORMATION_SAMPLES,
        seed,
        tables: RIGHT_CALL_TABLES,
        right_calls,
        p_right_overall,
        threshold: rule.threshold,
        restart,
    })
}

/// A plan at another k must tell this many times as much as one at the deployment's k alone
/// (plus [`RESTART_MIN_BITS`]) to be worth restarting the server.
pub(crate) const RESTART_WORTH: f64 = 1.5;
/// See [`RESTART_WORTH`].
pub(crate) const RESTART_MIN_BITS: f64 = 0.05;

/// The k the deployment runs now: the scenario's index_topk when the table has rows at it, else
/// the k of most of the table's trials.
pub(crate) fn deployment_k(base: &Scenario, data: &Dataset) -> u64 {
    if data.rows.iter().any(|r| r.index_topk == base.index_topk) || data.rows.is_empty() {
        return base.index_topk;
    }
    let mut by: BTreeMap<u64, u64> = BTreeMap::new();
    for r in &data.rows {
        *by.entry(r.index_topk).or_default() += r.trials;
    }
    by.into_iter().max_by_key(|&(k, t)| (t, std::cmp::Reverse(k))).map_or(base.index_topk, |(k, _)| k)
}

/// Why hypothesis `h` is not fitted to `data` (one [`compare_hypotheses`] left out).
pub(crate) fn not_applicable(h: Hypothesis, data: &Dataset, base: &Scenario) -> String {
    match h {
        Hypothesis::LengthPeriodic => {
            let c = data.rows.iter().find_map(|r| r.compress_ratio).unwrap_or(base.compress_ratio);
            if c <= 1 {
                "it needs a compression ratio above 1 (a residue of the length modulo c)".to_string()
            } else {
                let mut res: Vec<u64> = data.rows.iter().map(|r| r.context_len % c).collect();
                res.sort_unstable();
                res.dedup();
                format!(
                    "every row's context_len is ≡ {} mod {c}, so no residue can be compared with another; measure lengths of at least two residues mod {c} (`probe` spreads each cell's trials over 4 consecutive lengths by default)",
                    res.first().copied().unwrap_or(0)
                )
            }
        }
        Hypothesis::CandidateCountLimit => {
            "every row has the same number of candidates: measure at least two context lengths".to_string()
        }
        Hypothesis::ReadFailure | Hypothesis::ReadDecline => {
            "a selection table observes selection directly: whether a selected needle is read does not enter"
                .to_string()
        }
        _ => "it is not fitted to this table".to_string(),
    }
}

/// The call rule on the table joined with the planned cells ([`RuleOnPlan`]).
#[allow(clippy::too_many_arguments)]
fn rule_on_plan(
    data: &Dataset,
    base: &Scenario,
    model: &dyn RecallModel,
    all: &[HypothesisResult],
    leading: &[&HypothesisResult],
    preds: &[Vec<f64>],
    design: &Design,
    cand: &[Observation],
    opts: VerdictOptions,
) -> Result<RuleOnPlan, CalibError> {
    let trials: Vec<u64> = design.chosen.iter().map(|c| c.1).collect();
    let mut hypotheses = Vec::with_capacity(leading.len());
    for (h, p) in leading.iter().zip(preds) {
        let meaning = if h.is_implementation() {
            Meaning::Defect
        } else if h.estimates.iter().any(|(n, v)| n.starts_with("dprime") && *v < 0.0) {
            Meaning::WorseThanRandom
        } else if h.hypothesis.family() == Family::Read {
            Meaning::Physical(Call::ReadLimited)
        } else {
            let s = h
                .scenario(base)
                .ok_or_else(|| CalibError::Fit(format!("hypothesis `{}` gives no valid scenario", h.hypothesis)))?;
            let v = crate::verdict::verdict(&s, model, opts)?;
            Meaning::Physical(v.call)
        };
        let working = h.hypothesis == Hypothesis::RandomIndexer || working_indexer(h);
        hypotheses.push(RuleHypothesis {
            hypothesis: h.hypothesis,
            table_aic: h.aic,
            meaning,
            working,
            at_cells: design.chosen.iter().map(|c| p[c.0]).collect(),
        });
    }
    if !hypotheses.iter().any(|h| h.working) {
        // The evidence's null when no working indexer leads: the random indexer (as the
        // diagnosis's error rates take it), scored but never a truth of the simulation.
        if let Some(r) = all.iter().find(|h| h.hypothesis == Hypothesis::RandomIndexer) {
            let cells = Dataset::of_rows("planned", design.chosen.iter().map(|c| cand[c.0].clone()).collect());
            let s = r.scenario(base).ok_or_else(|| CalibError::Fit("random-indexer gives no valid scenario".into()))?;
            let v = crate::verdict::verdict(&s, model, opts)?;
            hypotheses.push(RuleHypothesis {
                hypothesis: r.hypothesis,
                table_aic: r.aic,
                meaning: Meaning::Physical(v.call),
                working: true,
                at_cells: hypothesis_recall(r, &cells, base, &[], model)?,
            });
        }
    }
    let table_exact =
        worse_than_random(all).is_some() || super::conditions::condition_tests(data).iter().any(|c| c.significant);
    let (mut threshold, mut false_alarm, mut floor, mut table_read) = (2.0, 0.0, None, false);
    if !data.is_selection() {
        // The joined design: the table's rows, then the planned cells (hits at the table's read
        // rate where it has one, so that the floor's read rate stays the table's).
        let checks = row_checks(data, base, model)?;
        table_read = !checks.selection_independent_misses().is_empty();
        let read = checks.read_rate.map_or(1.0, |r| r.0);
        let mut rows: Vec<Observation> = data
            .rows
            .iter()
            .cloned()
            .map(|mut r| {
                r.conditions.clear();
                r
            })
            .collect();
        for (&(c, t, _), i) in design.chosen.iter().zip(0..) {
            let mut o = cand[c].clone();
            o.trials = t;
            o.hits = (read * t as f64).round() as u64;
            o.line = data.rows.len() as u64 + i + 2;
            rows.push(o);
        }
        let joined = Dataset { transcribed: data.transcribed, ..Dataset::of_rows(&data.source, rows) };
        floor = row_checks(&joined, base, model)?.joint;
        // τ and the false-alarm rate of the evidence rule on the joined design, from the leading
        // hypotheses' fits extended to the planned cells.
        let extended: Vec<HypothesisResult> = hypotheses
            .iter()
            .filter_map(|r| {
                let mut x = all.iter().find(|h| h.hypothesis == r.hypothesis)?.clone();
                x.fitted.extend_from_slice(&r.at_cells);
                Some(x)
            })
            .collect();
        let explains: Vec<bool> = extended
            .iter()
            .map(|x| {
                x.hypothesis != Hypothesis::RandomIndexer
                    && hypotheses.iter().any(|h| h.hypothesis == x.hypothesis && h.working)
            })
            .collect();
        if let Some(r) = error_rates(&joined, &extended, &explains, floor.as_ref()) {
            threshold = r.threshold;
            false_alarm = r.false_alarm;
        }
    }
    let mut ks: Vec<u64> =
        data.rows.iter().map(|r| r.index_topk).chain(design.chosen.iter().map(|c| cand[c.0].index_topk)).collect();
    ks.sort_unstable();
    ks.dedup();
    let k_matters = data.is_selection() || ks.len() >= 2;
    Ok(RuleOnPlan {
        hypotheses,
        truths: leading.len(),
        trials,
        threshold,
        false_alarm,
        floor,
        table_hits: data.rows.iter().map(|r| r.hits).collect(),
        table_exact,
        table_read,
        k_matters,
    })
}
