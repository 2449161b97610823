//! The signatures: patterns in measured data that point at something other than k or the
//! indexer's precision, each with what it means and what to check (docs/model.md#signatures),
//! and the signatures a calibrated fit shows by itself ([`FitSignatures`]).

use crate::calibrate::likelihood::set_field;
use crate::calibrate::{CalibError, FreeParam, HypothesisResult, RowChecks};
use crate::engine::RecallModel;
use crate::measured::Dataset;
use crate::scenario::{Field, Scenario};
use crate::verdict::Call;

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
    /// The best plausible explanation is the model's own read rate falling with length.
    ReadDecline,
}

impl Signature {
    /// The signature a preferred hypothesis shows (the defect classes; None for a hypothesis of
    /// a working indexer).
    pub fn of_hypothesis(name: &str) -> Option<Signature> {
        Some(match name {
            "positional" => Signature::Positional,
            "effective-k" => Signature::EffectiveK,
            "length-periodic" => Signature::LengthPeriodic,
            "broken-fraction" => Signature::BrokenFraction,
            "candidate-count-limit" => Signature::CandidateCountLimit,
            "first-k-unscored" => Signature::FirstKUnscored,
            _ => return None,
        })
    }
    /// The text line of a signature with its explanation (`explanation`, which may name the
    /// table's columns) and what to check: `- name: explanation. Check: ….`
    pub fn line(self, explanation: &str) -> String {
        format!("- {}: {explanation}. Check: {}.", self.name(), self.check())
    }
    /// The JSON object of a signature: `{"name", "explanation", "check"}`.
    pub fn json(self, explanation: &str) -> serde_json::Value {
        serde_json::json!({"name": self.name(), "explanation": explanation, "check": self.check()})
    }
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
            Signature::ReadDecline => "read_decline",
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
            Signature::ReadDecline => "the model's own read rate falls with context length (a steep fall is a context-window ceiling): selected or not, the needle is not used beyond about L50, which no k and no indexer precision changes",
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
            Signature::ReadDecline => "measure the failing lengths with every candidate selected (dense attention, or k ≥ N): if those lose the needle too it is the model's own limit, not sparse attention; compare the length with the trained context window (rope_orig_len × rope_factor)",
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
/// same rules as [`super::diagnose`] on the same evidence, so that adding `--fit` cannot turn a
/// defect into a prescription.
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
        self.signatures.iter().map(|g| g.line(g.explanation()) + "\n").collect()
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
        j["signatures"] = serde_json::Value::Array(self.signatures.iter().map(|g| g.json(g.explanation())).collect());
        j["random_indexer_lr"] = serde_json::json!(self.random_indexer_lr);
    }
}

/// [`FitSignatures`] of a calibration of `data` on `base` with `free` fitted to `fit`.
pub fn fit_signatures(
    data: &Dataset,
    base: &Scenario,
    free: &[FreeParam],
    fit: &crate::calibrate::FitResult,
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
        let base = &crate::calibrate::answer_scenario(data, base);
        let mut at0 = base.clone();
        set_field(&mut at0, Field::Dprime, 0.0)?;
        let rest: Vec<FreeParam> = free.iter().filter(|p| p.field != Field::Dprime).cloned().collect();
        let problem = crate::calibrate::Problem::new(data, &at0, rest, model)?;
        let l0 = if problem.dim() == 0 {
            problem.loglik(&[])?
        } else {
            crate::calibrate::fit::fit(&problem, false, false)?.loglik
        };
        let stat = 2.0 * (fit.loglik - l0);
        lr = Some(stat);
        if stat > CHI2_1_99 {
            sig.push(Signature::WorseThanRandom);
        }
    }
    if checks.is_some_and(|c| !c.selection_independent_misses().is_empty()) {
        sig.push(Signature::MissesWhenAllSelected);
    }
    let forced_call = super::rule::overriding_call(&sig);
    Ok(FitSignatures { signatures: sig, forced_call, random_indexer_lr: lr })
}
