//! Row checks and the diagnosis (docs/model.md#verdict): per measured row the random-indexer
//! floor (dprime = 0, every other field as given; with several selecting layers the lowest of it
//! at layer_corr 0, as given and 1) with a one-sided binomial test of whether the
//! row lies below it, and the rows where every candidate is selected yet the needle is missed;
//! then, with the named hypotheses ranked by AIC, the call (`saturated`, `coverage-limited`,
//! `discrimination-limited`, `read-limited`, `implementation-suspect`) and its signatures.

use super::conditions::{condition_tests, ConditionTest};
use super::hypotheses::{compare_hypotheses, HypothesisResult, NEVER_SELECTED_DPRIME};
use super::likelihood::set_field;
use super::{CalibError, FreeParam, RecallModel};
use crate::measured::Dataset;
use crate::scenario::{Field, Scenario};
use crate::verdict::{verdict, Call, Verdict, VerdictOptions};
use statrs::distribution::{Binomial, DiscreteCDF};

/// Family-wise level of the row tests (Bonferroni over the rows).
pub const ROW_ALPHA: f64 = 0.01;
/// Goodness-of-fit p-value below which the preferred hypothesis fits poorly.
pub const POOR_FIT_P: f64 = 0.001;

/// The checks of one measured row.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct RowCheck {
    /// Row number in the table (1-based).
    pub row: usize,
    /// Line in the file.
    pub line: u64,
    /// Context length.
    pub context_len: u64,
    /// k.
    pub index_topk: u64,
    /// Hits.
    pub hits: u64,
    /// Trials.
    pub trials: u64,
    /// Random-indexer recall for the row's geometry (dprime = 0; p_read as given, lowered to the
    /// read rate seen where every candidate is selected when there is such a row).
    pub floor: f64,
    /// P(X ≤ hits) for X ~ Binomial(trials, floor): the one-sided p-value of "below the floor".
    pub p_below_floor: f64,
    /// The row lies below the floor (p_below_floor · rows < ROW_ALPHA), and not every candidate
    /// is selected there.
    pub below_floor: bool,
    /// Every candidate is selected whatever the scores (N ≤ k, or the needle in the window or
    /// the sink): selection cannot explain a miss here.
    pub all_selected: bool,
    /// Recall the scenario predicts there whatever the indexer does.
    pub recall_if_selected: f64,
    /// P(X ≤ hits) at that recall.
    pub p_miss: f64,
    /// Misses that no selection explains (all selected and p_miss · rows < ROW_ALPHA).
    pub selection_independent_miss: bool,
}

/// The checks of every row.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct RowChecks {
    /// Per row.
    pub rows: Vec<RowCheck>,
    /// Pooled hits / trials over the rows where every candidate is selected, with its Wilson
    /// 95% upper end: the read rate the floor uses (None when there is no such row).
    pub read_rate: Option<(f64, f64)>,
    /// All rows together against the floor (None when no row can be tested).
    pub joint: Option<JointFloor>,
}

/// All rows tested together against the random-indexer floor: the total hits H of the rows
/// where not every candidate is selected, against their law Σ Bin(trials_i, floor_i(ρ)) when
/// the indexer picks at random, for every admissible sharing ρ = layer_corr of the selecting
/// layers (recall does not say what they share): the p-value is the largest, the worst case.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct JointFloor {
    /// Rows tested.
    pub rows: usize,
    /// Their hits.
    pub hits: u64,
    /// Their trials.
    pub trials: u64,
    /// Expected hits at the floor, at the worst-case ρ.
    pub expected: f64,
    /// The worst-case layer_corr (the one giving the largest p-value).
    pub layer_corr: f64,
    /// P(H ≤ hits) at the floor, at the worst case: the one-sided joint p-value.
    pub p_value: f64,
    /// p_value < [`JOINT_ALPHA`].
    pub below_floor: bool,
    /// The rows tested (indices into the table).
    #[serde(skip)]
    pub tested: Vec<usize>,
    /// Their (trials, floor) at each layer_corr tried.
    #[serde(skip)]
    pub laws: Vec<Vec<(u64, f64)>>,
}

impl JointFloor {
    /// Whether the tested rows with these hits (indexed like the table's rows) lie below the
    /// floor at every layer_corr tried: the test's rule, for tables other than the one it was
    /// computed on (the error-rate simulation).
    pub fn rejects(&self, hits: &[u64]) -> bool {
        let h: u64 = self.tested.iter().map(|&i| hits[i]).sum();
        self.laws.iter().all(|law| sum_of_binomials_cdf(h, law) < JOINT_ALPHA)
    }
}

/// Level of the joint floor test.
pub const JOINT_ALPHA: f64 = 0.01;
/// The layer_corr values the joint floor test tries (with several selecting layers).
pub const JOINT_LAYER_CORR: &[f64] = &[0.0, 0.25, 0.5, 0.75, 0.9, 1.0];
/// Most multiply-adds the exact law of the total hits may take; beyond, a continuity-corrected
/// normal approximation.
const JOINT_EXACT_WORK: u64 = 50_000_000;

/// P(Σ X_i ≤ h), X_i ~ Bin(n_i, p_i) independent: the exact convolution truncated at h, or a
/// continuity-corrected normal approximation when that would exceed [`JOINT_EXACT_WORK`].
pub fn sum_of_binomials_cdf(h: u64, rows: &[(u64, f64)]) -> f64 {
    let total: u64 = rows.iter().map(|r| r.0).sum();
    if h >= total {
        return 1.0;
    }
    let work: u64 = rows.iter().map(|&(n, _)| (h + 1).saturating_mul(n.min(h) + 1)).fold(0u64, |a, b| a.saturating_add(b));
    if work > JOINT_EXACT_WORK {
        let mean: f64 = rows.iter().map(|&(n, p)| n as f64 * p).sum();
        let var: f64 = rows.iter().map(|&(n, p)| n as f64 * p * (1.0 - p)).sum();
        if var <= 0.0 {
            return if (h as f64) >= mean { 1.0 } else { 0.0 };
        }
        return crate::stats::norm_cdf((h as f64 + 0.5 - mean) / var.sqrt());
    }
    let h = h as usize;
    let mut dist = vec![0.0; h + 1];
    dist[0] = 1.0;
    let mut pmf = Vec::new();
    for &(n, p) in rows {
        let top = (n as usize).min(h);
        pmf.clear();
        pmf.extend((0..=top).map(|x| crate::stats::ln_binom_pmf(n, x as u64, p, 1.0 - p).exp()));
        for s in (0..=h).rev() {
            let mut v = 0.0;
            for x in 0..=top.min(s) {
                v += dist[s - x] * pmf[x];
            }
            dist[s] = v;
        }
    }
    dist.iter().sum::<f64>().min(1.0)
}

impl RowChecks {
    /// Whether the table shows `below_random_floor`: a row below the floor, or the rows jointly.
    pub fn any_below_floor(&self) -> bool {
        !self.below_floor().is_empty() || self.joint.as_ref().is_some_and(|j| j.below_floor)
    }
    /// Rows below the random-indexer floor.
    pub fn below_floor(&self) -> Vec<&RowCheck> {
        self.rows.iter().filter(|r| r.below_floor).collect()
    }
    /// Rows with misses no selection explains.
    pub fn selection_independent_misses(&self) -> Vec<&RowCheck> {
        self.rows.iter().filter(|r| r.selection_independent_miss).collect()
    }
    /// Plain-text summary (one line per finding, with the row numbers).
    pub fn text(&self) -> String {
        let mut s = String::new();
        let nums = |v: &[&RowCheck]| v.iter().map(|r| r.row.to_string()).collect::<Vec<_>>().join(", ");
        if let Some(j) = &self.joint {
            let rho = if j.layer_corr.is_nan() { String::new() } else { format!(", worst case over layer_corr at {}", j.layer_corr) };
            s.push_str(&format!(
                "random-indexer floor, all {} tested rows together: {}/{} found where a random indexer would find {:.1}{rho}: P(≤ {} | floor) = {:.2e}{}\n",
                j.rows,
                j.hits,
                j.trials,
                j.expected,
                j.hits,
                j.p_value,
                if j.below_floor { " — BELOW THE FLOOR: an imprecise but working indexer cannot get there" } else { "" }
            ));
        }
        let below = self.below_floor();
        if below.is_empty() {
            s.push_str("random-indexer floor: no row lies significantly below it on its own\n");
        } else {
            s.push_str(&format!(
                "BELOW THE RANDOM-INDEXER FLOOR: rows {} — a random pick (dprime 0) would find the needle more often than measured; an imprecise but working indexer cannot get there\n",
                nums(&below)
            ));
            for r in &below {
                s.push_str(&format!(
                    "  row {} (L = {}, k = {}): {}/{} found, random floor {:.3}, P(≤ {} | floor) = {:.2e}\n",
                    r.row, r.context_len, r.index_topk, r.hits, r.trials, r.floor, r.hits, r.p_below_floor
                ));
            }
        }
        let miss = self.selection_independent_misses();
        if !miss.is_empty() {
            s.push_str(&format!(
                "SELECTION-INDEPENDENT MISSES: rows {} select every candidate (N ≤ k, or the needle in the window/sink) yet miss: p_read < 1 or a bug, not the indexer's ranking\n",
                nums(&miss)
            ));
            for r in &miss {
                s.push_str(&format!(
                    "  row {} (L = {}, k = {}): {}/{} found where the model gives {:.3} whatever the indexer does\n",
                    r.row, r.context_len, r.index_topk, r.hits, r.trials, r.recall_if_selected
                ));
            }
        }
        s
    }
}

fn binom_cdf(y: u64, n: u64, p: f64) -> f64 {
    if y >= n {
        return 1.0;
    }
    if p >= 1.0 {
        return 0.0;
    }
    if p <= 0.0 {
        return 1.0;
    }
    Binomial::new(p, n).map_or(1.0, |b| b.cdf(y))
}

/// The row checks of `data` under `base` (with `nuisance` fields at their scenario values).
pub fn row_checks(data: &Dataset, base: &Scenario, model: &dyn RecallModel) -> Result<RowChecks, CalibError> {
    let recall = |s: &Scenario| model.recall(s).map_err(CalibError::Model);
    let n_rows = data.rows.len().max(1) as f64;
    let mut pre = Vec::with_capacity(data.rows.len());
    for (i, r) in data.rows.iter().enumerate() {
        let mut s = r
            .apply(base)
            .map_err(|e| CalibError::Input(format!("{}: row {} (line {}): {e}", data.source, i + 1, r.line)))?;
        if let Some(c) = &r.layer_counts {
            // Selection rows: the rate is P(some layer's indexer selects), window and reading aside.
            super::likelihood::selection_scenario(&mut s, c.len() - 1)?;
        }
        let mut never = s.clone();
        set_field(&mut never, Field::Dprime, NEVER_SELECTED_DPRIME)?;
        let mut sel = never.clone();
        set_field(&mut sel, Field::PRead, 1.0)?;
        set_field(&mut sel, Field::PGuess, 0.0)?;
        let all_selected = recall(&sel)? >= 1.0 - 1e-9;
        let recall_if_selected = if all_selected { recall(&never)? } else { f64::NAN };
        pre.push((s, all_selected, recall_if_selected));
    }
    let (mut h, mut n) = (0u64, 0u64);
    for (r, p) in data.rows.iter().zip(&pre) {
        if p.1 {
            h += r.hits;
            n += r.trials;
        }
    }
    let read_rate = (n > 0).then(|| {
        let (_, hi) = crate::stats::wilson(h, n, 1.959_963_984_540_054);
        (h as f64 / n as f64, hi)
    });
    let mut rows = Vec::with_capacity(data.rows.len());
    let mut floor_scenarios = Vec::with_capacity(data.rows.len());
    for (i, (r, (s, all_selected, ris))) in data.rows.iter().zip(pre).enumerate() {
        let mut f = s.clone();
        set_field(&mut f, Field::Dprime, 0.0)?;
        if let Some((_, hi)) = read_rate {
            if hi < f.p_read {
                set_field(&mut f, Field::PRead, hi)?;
            }
        }
        floor_scenarios.push(f.clone());
        let mut floor = recall(&f)?;
        if f.selecting_layers() > 1 && model.shares_across_layers() {
            // How much the selecting layers share the needle's difficulty is not known from
            // recall: the floor is the lowest over layer_corr's limits (independent layers, and
            // layers that see one needle score), so a row below it is below whatever they share.
            for rho in [0.0, 1.0] {
                let mut g = f.clone();
                set_field(&mut g, Field::LayerCorr, rho)?;
                floor = floor.min(recall(&g)?);
            }
        }
        let p_below = binom_cdf(r.hits, r.trials, floor);
        let p_miss = if all_selected { binom_cdf(r.hits, r.trials, ris) } else { 1.0 };
        rows.push(RowCheck {
            row: i + 1,
            line: r.line,
            context_len: r.context_len,
            index_topk: r.index_topk,
            hits: r.hits,
            trials: r.trials,
            floor,
            p_below_floor: p_below,
            below_floor: !all_selected && p_below * n_rows < ROW_ALPHA,
            all_selected,
            recall_if_selected: if all_selected { ris } else { f64::NAN },
            p_miss,
            selection_independent_miss: all_selected && p_miss * n_rows < ROW_ALPHA,
        });
    }
    let shares = model.shares_across_layers() && floor_scenarios.iter().any(|f| f.selecting_layers() > 1);
    let floors_at = |rho: Option<f64>| -> Result<Vec<f64>, CalibError> {
        floor_scenarios
            .iter()
            .map(|f| match rho {
                Some(r) if f.selecting_layers() > 1 => {
                    let mut g = f.clone();
                    set_field(&mut g, Field::LayerCorr, r)?;
                    recall(&g)
                }
                _ => recall(f),
            })
            .collect()
    };
    let joint = joint_floor(data, &rows, shares, &floors_at)?;
    Ok(RowChecks { rows, read_rate, joint })
}

/// The joint floor test of the rows (see [`JointFloor`]), `floors_at(ρ)` giving each row's
/// floor at layer_corr ρ (`None`: one value only).
fn joint_floor(
    data: &Dataset,
    rows: &[RowCheck],
    shares: bool,
    floors_at: &dyn Fn(Option<f64>) -> Result<Vec<f64>, CalibError>,
) -> Result<Option<JointFloor>, CalibError> {
    let tested: Vec<usize> = (0..rows.len()).filter(|&i| !rows[i].all_selected).collect();
    if tested.is_empty() {
        return Ok(None);
    }
    let hits: u64 = tested.iter().map(|&i| data.rows[i].hits).sum();
    let trials: u64 = tested.iter().map(|&i| data.rows[i].trials).sum();
    let rhos: Vec<Option<f64>> = if shares { JOINT_LAYER_CORR.iter().map(|&r| Some(r)).collect() } else { vec![None] };
    let mut worst: Option<JointFloor> = None;
    let mut laws = Vec::with_capacity(rhos.len());
    for rho in rhos {
        let floors = floors_at(rho)?;
        let law: Vec<(u64, f64)> = tested.iter().map(|&i| (data.rows[i].trials, floors[i].clamp(0.0, 1.0))).collect();
        let p = sum_of_binomials_cdf(hits, &law);
        let expected = law.iter().map(|&(n, f)| n as f64 * f).sum();
        if worst.as_ref().is_none_or(|w| p > w.p_value) {
            worst = Some(JointFloor {
                rows: tested.len(),
                hits,
                trials,
                expected,
                layer_corr: rho.unwrap_or(f64::NAN),
                p_value: p,
                below_floor: p < JOINT_ALPHA,
                tested: Vec::new(),
                laws: Vec::new(),
            });
        }
        laws.push(law);
    }
    Ok(worst.map(|w| JointFloor { tested, laws, ..w }))
}

/// A pattern in the data that points at something other than k or the indexer's precision.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Signature {
    /// Rows lie below the random-indexer floor.
    BelowRandomFloor,
    /// Misses where every candidate is selected.
    MissesWhenAllSelected,
    /// The preferred fit sits on a search bound.
    ParameterOnBound,
    /// The preferred hypothesis fits poorly.
    PoorFit,
    /// The positional hypothesis is preferred.
    Positional,
    /// The effective-k hypothesis is preferred.
    EffectiveK,
    /// The length-periodic hypothesis is preferred.
    LengthPeriodic,
    /// The broken-fraction hypothesis is preferred.
    BrokenFraction,
    /// Recall differs between the values of a condition column at identical cells.
    ConditionDependent,
    /// The indexer ranks the needle below a typical distractor (fitted dprime significantly < 0).
    WorseThanRandom,
    /// The candidate-count-limit hypothesis is preferred.
    CandidateCountLimit,
    /// The first-k-unscored hypothesis is preferred.
    FirstKUnscored,
}

impl Signature {
    /// The JSON name.
    pub fn name(self) -> &'static str {
        match self {
            Signature::BelowRandomFloor => "below_random_floor",
            Signature::MissesWhenAllSelected => "misses_when_all_selected",
            Signature::ParameterOnBound => "parameter_on_bound",
            Signature::PoorFit => "poor_fit",
            Signature::Positional => "positional",
            Signature::EffectiveK => "effective_k",
            Signature::LengthPeriodic => "length_periodic",
            Signature::BrokenFraction => "broken_fraction",
            Signature::ConditionDependent => "condition_dependent",
            Signature::WorseThanRandom => "worse_than_random",
            Signature::CandidateCountLimit => "candidate_count_limit",
            Signature::FirstKUnscored => "first_k_unscored",
        }
    }
    /// What it means.
    pub fn explanation(self) -> &'static str {
        match self {
            Signature::BelowRandomFloor => "the needle is found less often than a random indexer (dprime 0) would find it on the same geometry: the indexer ranks it below a typical distractor, which an imprecise but working indexer does not do",
            Signature::MissesWhenAllSelected => "the needle is missed in rows where every candidate is selected (N ≤ k, or the needle in the window or sink): no selection explains these misses",
            Signature::ParameterOnBound => "the preferred fit sits on a search bound: the data push the parameter beyond any plausible value, so no figure resting on it is given",
            Signature::PoorFit => "even the preferred hypothesis fits poorly (goodness-of-fit p < 0.001): no smooth model of the indexer explains the data",
            Signature::Positional => "the needle's separation depends on its distance from the query, not on the number of competitors",
            Signature::EffectiveK => "recall follows a k different from the configured index_topk: the kernel selects another number of candidates",
            Signature::LengthPeriodic => "failures concentrate in one residue class of the context length modulo the compression ratio",
            Signature::BrokenFraction => "a fraction of queries never selects the needle while the rest behave normally",
            Signature::ConditionDependent => "recall differs between values of a condition column at identical cells: the same model loses needles under one condition, which no property of the indexer explains",
            Signature::WorseThanRandom => "the fitted separation is significantly below 0 (the random-indexer hypothesis rejected in favour of it): the indexer ranks the needle below a typical distractor, which is not imprecision but a defect (scores of the wrong sign, a wrong query or key, positions swapped)",
            Signature::CandidateCountLimit => "recall follows the model up to a number of candidates N0 and falls to what the window holds beyond it: something stops at N0 candidates (a buffer, a kernel's tile count, a cache page limit)",
            Signature::FirstKUnscored => "the needle is found exactly when one of its entries is among the first k by position: the kernel returns the first k candidates unscored",
        }
    }
    /// What to check next.
    pub fn check(self) -> &'static str {
        match self {
            Signature::BelowRandomFloor => "compare the indexer's top-k against a reference implementation at a failing length (same prompt, same weights); capture the top-k and read the needle's rank",
            Signature::MissesWhenAllSelected => "check that the selected needle is read: capture the top-k at a short failing prompt and confirm the needle is in it; then check the attention over the selected entries (masking, cache layout)",
            Signature::ParameterOnBound => "read the needle's rank directly (capture the top-k) rather than infer it from recall",
            Signature::PoorFit => "capture the top-k at a failing length and compare against a reference implementation",
            Signature::Positional => "vary the needle's depth at a fixed context length and read the needle's rank; compare position handling (RoPE, compressed-block offsets) against a reference",
            Signature::EffectiveK => "log the number of entries the top-k kernel actually returns and compare with index_topk (a hard-coded k, a clamp to the kernel maximum)",
            Signature::LengthPeriodic => "vary the prompt length mod 4 (the compression ratio) at a fixed depth; check the compressor's padding and the indexer key cache layout for partial blocks",
            Signature::BrokenFraction => "rerun the failing prompts with and without prefix-cache hits and compare the indexer's top-k between them",
            Signature::ConditionDependent => "diff the two conditions (code base, backend, batch/concurrency, prefix cache): rerun a failing cell under each and compare the indexer's top-k",
            Signature::WorseThanRandom => "capture the indexer's scores at a failing length and check the needle's sign and rank against a reference implementation (same prompt, same weights); check q/k layouts, RoPE on the indexer path and the dequantisation scales",
            Signature::CandidateCountLimit => "measure just below and just above N0 candidates (N0 × compress_ratio tokens) and log how many candidates the indexer scores and the top-k kernel sees; a power of two points at a fixed-size buffer",
            Signature::FirstKUnscored => "capture the top-k at a failing length: indices 0..k−1 in order whatever the scores mean the scoring output is not reaching the top-k kernel",
        }
    }
}

/// χ²₁ quantile at 0.99: twice the log-likelihood gain of one free parameter that rejects the
/// simpler hypothesis at level 0.01.
pub const CHI2_1_99: f64 = 6.634_896_601_021_214;

/// The fitted separation of `discrimination` when it lies below 0 and the random-indexer
/// hypothesis (dprime = 0) is rejected in its favour by the likelihood-ratio test at level
/// 0.01: an indexer worse than random.
pub fn worse_than_random(hypotheses: &[HypothesisResult]) -> Option<f64> {
    let disc = hypotheses.iter().find(|h| h.name == "discrimination")?;
    let rand = hypotheses.iter().find(|h| h.name == "random-indexer")?;
    let d = disc.estimate("dprime")?;
    (d < 0.0 && 2.0 * (disc.loglik - rand.loglik) > CHI2_1_99).then_some(d)
}

/// The signatures a calibrated fit (`verdict --data --fit`) shows by itself, and the call they
/// force whatever the fitted numbers would say: rows jointly (or singly) below the
/// random-indexer floor and a fitted separation significantly below 0 are defects
/// (implementation-suspect); misses where every candidate is selected are read-limited. The
/// same rules as [`diagnose`] on the same evidence, so that adding `--fit` cannot turn a defect
/// into a prescription.
#[derive(Debug, Clone, PartialEq)]
pub struct FitSignatures {
    /// The signatures found.
    pub signatures: Vec<Signature>,
    /// The call they force (None: the fitted numbers decide).
    pub forced_call: Option<Call>,
    /// Twice the log-likelihood gain of the fitted dprime over dprime = 0 (the other fitted
    /// fields refitted there), when the fitted dprime is below 0 and the floor test has not
    /// already decided.
    pub random_indexer_lr: Option<f64>,
}

impl FitSignatures {
    /// Plain lines: one per signature, with what to check.
    pub fn text(&self) -> String {
        self.signatures.iter().map(|g| format!("- {}: {}. Check: {}.\n", g.name(), g.explanation(), g.check())).collect()
    }
    /// The lines a calibrated verdict's text ends with when a call is forced (empty otherwise).
    pub fn forced_text(&self) -> String {
        if self.forced_call.is_none() {
            return String::new();
        }
        format!("the fitted numbers above describe the data, not a fix: the call is forced by\n{}", self.text())
    }
    /// Adds `signatures` (`[{"name", "explanation", "check"}]`) and `random_indexer_lr` to a
    /// calibrated verdict's JSON.
    pub fn annotate(&self, j: &mut serde_json::Value) {
        j["signatures"] = serde_json::Value::Array(
            self.signatures
                .iter()
                .map(|g| serde_json::json!({"name": g.name(), "explanation": g.explanation(), "check": g.check()}))
                .collect(),
        );
        j["random_indexer_lr"] = serde_json::json!(self.random_indexer_lr);
    }
}

/// [`FitSignatures`] of a calibration of `data` on `base` with `free` fitted to `fit`.
pub fn fit_signatures(
    data: &Dataset,
    base: &Scenario,
    free: &[FreeParam],
    fit: &super::fit::FitResult,
    checks: Option<&RowChecks>,
    model: &dyn RecallModel,
) -> Result<FitSignatures, CalibError> {
    let mut sig = Vec::new();
    if checks.is_some_and(RowChecks::any_below_floor) {
        sig.push(Signature::BelowRandomFloor);
    }
    let d = fit.estimates.iter().find(|e| e.field == Field::Dprime).map(|e| e.value);
    // dprime < 0 is the only side on which the random indexer is the better-ranking null.
    let mut lr = None;
    // When the floor test has decided, the likelihood-ratio test would only repeat it (a refit of
    // every other field at dprime = 0 costs as much as the fit itself).
    let decided = sig.contains(&Signature::BelowRandomFloor);
    if d.is_some_and(|d| d < 0.0) && !decided {
        // The random indexer as the null: dprime = 0, every other fitted field refitted.
        let base = &super::answer_scenario(data, base);
        let mut at0 = base.clone();
        set_field(&mut at0, Field::Dprime, 0.0)?;
        let rest: Vec<FreeParam> = free.iter().filter(|p| p.field != Field::Dprime).cloned().collect();
        let problem = super::Problem::new(data, &at0, rest, model)?;
        let l0 = if problem.dim() == 0 { problem.loglik(&[])? } else { super::fit::fit(&problem, false, false)?.loglik };
        let stat = 2.0 * (fit.loglik - l0);
        lr = Some(stat);
        if stat > CHI2_1_99 {
            sig.push(Signature::WorseThanRandom);
        }
    }
    if checks.is_some_and(|c| !c.selection_independent_misses().is_empty()) {
        sig.push(Signature::MissesWhenAllSelected);
    }
    let forced_call = if sig.contains(&Signature::BelowRandomFloor) || sig.contains(&Signature::WorseThanRandom) {
        Some(Call::ImplementationSuspect)
    } else if sig.contains(&Signature::MissesWhenAllSelected) {
        Some(Call::ReadLimited)
    } else {
        None
    };
    Ok(FitSignatures { signatures: sig, forced_call, random_indexer_lr: lr })
}

/// A calibrated verdict (`verdict --data --fit`, a calibration experiment's verdict): the
/// verdict at the fit's estimate and over its 95% region, with the call the fit's own
/// signatures force ([`fit_signatures`]). The one place such a call is made.
#[derive(Debug, Clone)]
pub struct CalibratedCall {
    /// The verdict at the estimate and over the region (calls replaced by a forced call).
    pub verdict: crate::verdict::CalibratedVerdict,
    /// The scenarios at the estimate (first) and the region's points.
    pub scenarios: Vec<Scenario>,
    /// The signatures and the call they force.
    pub signatures: FitSignatures,
}

/// [`CalibratedCall`] of a calibration `report` of `data` on `base`.
pub fn calibrated_call(
    data: &Dataset,
    base: &Scenario,
    report: &super::output::CalibrationReport,
    model: &dyn RecallModel,
    opts: VerdictOptions,
) -> Result<CalibratedCall, CalibError> {
    let scenarios = super::fitted_scenarios(data, base, report, model)?;
    let mut cv = crate::verdict::calibrated_verdict(&scenarios, model, opts).map_err(|e| match e {
        crate::verdict::VerdictError::Model(m) => CalibError::Model(m),
        e => CalibError::Input(e.to_string()),
    })?;
    cv.at_estimate.dprime_on_bound = report.fit.estimates.iter().any(|e| e.field == Field::Dprime && e.value_at_bound);
    let signatures = fit_signatures(data, base, &report.free, &report.fit, report.checks.as_ref(), model)?;
    if let Some(call) = signatures.forced_call {
        // A defect is not a prescription: the fitted numbers stay, the call is the defect's.
        cv.at_estimate.call = call;
        cv.region.iter_mut().for_each(|v| v.call = call);
    }
    Ok(CalibratedCall { verdict: cv, scenarios, signatures })
}

/// The diagnosis of a table: row checks, ranked hypotheses, signatures and the call.
#[derive(Debug, Clone)]
pub struct Diagnosis {
    /// The row checks.
    pub checks: RowChecks,
    /// The hypotheses ranked by AIC.
    pub hypotheses: Vec<HypothesisResult>,
    /// The signatures found.
    pub signatures: Vec<Signature>,
    /// The call.
    pub call: Call,
    /// The verdict's numbers at the best hypothesis that is a plain scenario (with `call`
    /// replaced by the diagnosis's call).
    pub verdict: Verdict,
    /// The hypothesis the numbers come from.
    pub numbers_from: String,
    /// The scenario the numbers come from.
    pub scenario: Scenario,
    /// The condition columns' tests (`calibrate::conditions`).
    pub conditions: Vec<ConditionTest>,
    /// The rule's simulated error rates at this table's design (recall tables).
    pub error_rates: Option<super::error_rates::ErrorRates>,
}

/// Diagnoses `data`: row checks, every hypothesis, signatures, the call and the verdict's numbers.
pub fn diagnose(
    data: &Dataset,
    base: &Scenario,
    user_free: &[FreeParam],
    model: &dyn RecallModel,
    opts: VerdictOptions,
) -> Result<Diagnosis, CalibError> {
    let base = &super::answer_scenario(data, base);
    let checks = row_checks(data, base, model)?;
    let hypotheses = compare_hypotheses(data, base, user_free, model)?;
    let lmax = hypotheses.iter().map(|h| h.loglik).fold(f64::NEG_INFINITY, f64::max);
    let lmin = hypotheses.iter().map(|h| h.loglik).fold(f64::INFINITY, f64::min);
    if lmax - lmin < 1e-9 {
        return Err(CalibError::Input(format!(
            "{}: no row can separate any two hypotheses (every hypothesis predicts the same recall for every row, e.g. every row selects every candidate and finds the needle): measure longer contexts or smaller k",
            data.source
        )));
    }
    let best = &hypotheses[0];
    let mut sig = Vec::new();
    if checks.any_below_floor() {
        sig.push(Signature::BelowRandomFloor);
    }
    if worse_than_random(&hypotheses).is_some() {
        sig.push(Signature::WorseThanRandom);
    }
    if !checks.selection_independent_misses().is_empty() {
        sig.push(Signature::MissesWhenAllSelected);
    }
    if !best.on_bound.is_empty() {
        sig.push(Signature::ParameterOnBound);
    }
    if best.gof_p.is_some_and(|p| p < POOR_FIT_P) {
        sig.push(Signature::PoorFit);
    }
    match best.name.as_str() {
        "positional" => sig.push(Signature::Positional),
        "effective-k" => sig.push(Signature::EffectiveK),
        "length-periodic" => sig.push(Signature::LengthPeriodic),
        "broken-fraction" => sig.push(Signature::BrokenFraction),
        "candidate-count-limit" => sig.push(Signature::CandidateCountLimit),
        "first-k-unscored" => sig.push(Signature::FirstKUnscored),
        _ => {}
    }
    let conditions = condition_tests(data);
    if conditions.iter().any(|c| c.significant) {
        sig.push(Signature::ConditionDependent);
    }
    let has = |s: Signature| sig.contains(&s);
    let read = has(Signature::MissesWhenAllSelected) || best.name == "read-failure";
    let (from, scen) = hypotheses
        .iter()
        .find_map(|h| h.scenario(base).map(|s| (h, s)))
        .ok_or_else(|| CalibError::Fit("no hypothesis gives a valid scenario".into()))?;
    let mut v = verdict(&scen, model, opts).map_err(|e| match e {
        crate::verdict::VerdictError::Model(m) => CalibError::Model(m),
        e => CalibError::Input(e.to_string()),
    })?;
    v.dprime_on_bound = from.on_bound.iter().any(|n| n == "dprime");
    let rates = super::error_rates::error_rates(data, &hypotheses, checks.joint.as_ref());
    // The hypotheses' evidence decides only through the simulated threshold: a defect preferred
    // by a margin that tables from a working indexer reach more than 5% of the time is no call.
    let by_evidence = match &rates {
        Some(r) => r.evidence > r.threshold,
        None => best.is_implementation(),
    };
    let exact_signature = has(Signature::ConditionDependent)
        || has(Signature::WorseThanRandom)
        || has(Signature::BelowRandomFloor)
        || (has(Signature::PoorFit) && has(Signature::ParameterOnBound));
    let suspect = exact_signature || by_evidence;
    let call = if suspect {
        match &rates {
            Some(r) if !exact_signature && r.false_alarm > super::error_rates::MAX_FALSE_ALARM => Call::Undecided,
            _ => Call::ImplementationSuspect,
        }
    } else if read {
        Call::ReadLimited
    } else {
        match &rates {
            Some(r) if r.defect_not_ruled_out() => Call::Undecided,
            _ => v.call,
        }
    };
    v.call = call;
    Ok(Diagnosis { checks, hypotheses: hypotheses.clone(), signatures: sig, call, verdict: v, numbers_from: from.name.clone(), scenario: scen, conditions, error_rates: rates })
}

impl Diagnosis {
    /// Plain sentences explaining the call from the signatures.
    pub fn explanation(&self) -> String {
        let best = &self.hypotheses[0];
        let mut s = match self.call {
            Call::ImplementationSuspect => format!(
                "Neither raising k nor improving the indexer's precision explains these data: the implementation is suspect. Preferred hypothesis: {} (Akaike weight {:.3}).",
                best.name, best.weight
            ),
            Call::Undecided => format!(
                "Undecided: the preferred hypothesis is {} (Akaike weight {:.3}), but on tables like this one the procedure would not tell a working indexer from the preferred defect reliably enough to act on. Measure the cells `dsa-sim plan` proposes (with this table as --data), then run the verdict on both tables.",
                best.name, best.weight
            ),
            Call::ReadLimited => format!(
                "The needle is missed where selection cannot explain it: it is selected but not used (read-limited; preferred hypothesis {}, weight {:.3}). Raising k or the indexer's precision does not fix this.",
                best.name, best.weight
            ),
            _ => format!(
                "Preferred hypothesis: {} (Akaike weight {:.3}); the numbers below come from {}. {}",
                best.name,
                best.weight,
                self.numbers_from,
                crate::verdict::explain(&self.verdict)
            ),
        };
        if let Some(r) = &self.error_rates {
            s.push_str(&format!("\n{}.", r.sentence()));
        }
        for g in &self.signatures {
            s.push_str(&format!("\n- {}: {}. Check: {}.", g.name(), self.explain(*g), g.check()));
        }
        s
    }

    /// A signature's explanation, naming the significant condition columns for
    /// `condition_dependent`.
    fn explain(&self, g: Signature) -> String {
        let cols: Vec<String> = self.conditions.iter().filter(|c| c.significant).map(|c| format!("`{}`", c.column)).collect();
        if g == Signature::ConditionDependent && !cols.is_empty() {
            g.explanation().replace("a condition column", &cols.join(", "))
        } else {
            g.explanation().to_string()
        }
    }

    /// The JSON of the signatures: `[{"name", "explanation", "check"}]`.
    pub fn signatures_json(&self) -> serde_json::Value {
        serde_json::Value::Array(
            self.signatures
                .iter()
                .map(|g| serde_json::json!({"name": g.name(), "explanation": self.explain(*g), "check": g.check()}))
                .collect(),
        )
    }
}
