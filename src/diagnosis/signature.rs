//! The signatures: patterns in measured data that point at something other than k or the
//! indexer's precision, each with what it means and what to check (docs/model.md#signatures)
//! (the signatures a calibrated fit shows by itself are [`super::FitSignatures`]).

use crate::calibrate::{Hypothesis, HypothesisResult};

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
    pub(crate) fn of_hypothesis(h: Hypothesis) -> Option<Signature> {
        Some(match h {
            Hypothesis::Positional => Signature::Positional,
            Hypothesis::EffectiveK => Signature::EffectiveK,
            Hypothesis::LengthPeriodic => Signature::LengthPeriodic,
            Hypothesis::BrokenFraction => Signature::BrokenFraction,
            Hypothesis::CandidateCountLimit => Signature::CandidateCountLimit,
            Hypothesis::FirstKUnscored => Signature::FirstKUnscored,
            Hypothesis::RandomIndexer
            | Hypothesis::Discrimination
            | Hypothesis::DiscriminationWithSpread
            | Hypothesis::HardNegatives
            | Hypothesis::ReadFailure
            | Hypothesis::ReadDecline => return None,
        })
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
    pub(crate) fn explanation(self) -> &'static str {
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
    pub(crate) fn check(self) -> &'static str {
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
pub(crate) fn worse_than_random(hypotheses: &[HypothesisResult]) -> Option<f64> {
    let disc = hypotheses.iter().find(|h| h.hypothesis == Hypothesis::Discrimination)?;
    let rand = hypotheses.iter().find(|h| h.hypothesis == Hypothesis::RandomIndexer)?;
    let d = disc.estimate("dprime")?;
    (d < 0.0 && 2.0 * (disc.loglik - rand.loglik) > CHI2_1_99).then_some(d)
}
