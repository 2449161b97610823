//! The decision rule (docs/model.md#verdict): the one place a call is made from the evidence —
//! the signatures, the preferred hypothesis, the rule's simulated error rates — and, when the
//! evidence does not override it, the call a working indexer's numbers give
//! ([`crate::verdict::verdict`]: saturated, coverage- or discrimination-limited).
//!
//! In order:
//! 1. **Exact signatures** decide by themselves (each is a test at a stated level, not a model
//!    comparison): recall differing between conditions at identical cells, rows jointly below
//!    the random-indexer floor, a fitted separation significantly below 0, or a preferred fit
//!    that is both poor and on a search bound → `implementation-suspect`.
//! 2. **A defect preferred by the hypotheses** counts only through the simulated threshold τ:
//!    the defect's evidence (ΔAIC against the best working indexer) must exceed what tables from
//!    a working indexer reach 5% of the time. If it does but the procedure's false-alarm rate on
//!    tables like the user's exceeds [`MAX_FALSE_ALARM`] → `undecided`; otherwise
//!    `implementation-suspect`.
//! 3. **Misses where every candidate is selected** (or a preferred read-failure) → `read-limited`.
//! 4. A physical call is made only when the preferred defect is ruled out: a defect that this
//!    design would find, and whose tables show evidence as low as the data's at least
//!    [`super::error_rates::MAX_DEFECT_P`] of the time, leaves the call `undecided`.

use super::error_rates::ErrorRates;
use super::signature::Signature;
use crate::verdict::Call;

/// Goodness-of-fit p-value below which the preferred hypothesis fits poorly.
pub const POOR_FIT_P: f64 = 0.001;
/// Largest false-alarm rate (a working indexer called implementation-suspect on tables like the
/// user's) at which an implementation-suspect call is made.
pub const MAX_FALSE_ALARM: f64 = 0.10;
/// Smallest power (a defect like the preferred one found on tables like the user's) the issue's
/// targets ask of the procedure; reported beside the call, see [`ErrorRates::meets_targets`].
pub const MIN_POWER: f64 = 0.90;

/// The defect evidence of the hypotheses and what the simulation at the table's design says of
/// it ([`ErrorRates`]; the plan's simulated tables give their own).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct DefectEvidence {
    /// AIC(best working indexer) − AIC(best defect).
    pub evidence: f64,
    /// τ: the evidence the rule needs.
    pub threshold: f64,
    /// The rule's false-alarm rate at the design.
    pub false_alarm: f64,
    /// The data leave the preferred defect plausible ([`ErrorRates::defect_not_ruled_out`]).
    pub defect_not_ruled_out: bool,
}

impl From<&ErrorRates> for DefectEvidence {
    fn from(r: &ErrorRates) -> Self {
        DefectEvidence { evidence: r.evidence, threshold: r.threshold, false_alarm: r.false_alarm, defect_not_ruled_out: r.defect_not_ruled_out() }
    }
}

/// What the rule decides from.
#[derive(Debug, Clone, Copy)]
pub struct Evidence<'a> {
    /// The signatures found.
    pub signatures: &'a [Signature],
    /// The preferred hypothesis (None on a calibrated fit, which compares none).
    pub preferred: Option<&'a str>,
    /// The defect evidence with its simulated threshold (recall tables; None without).
    pub error_rates: Option<DefectEvidence>,
}

/// Signatures that decide by themselves.
fn exact(sig: &[Signature]) -> bool {
    let has = |s: Signature| sig.contains(&s);
    has(Signature::ConditionDependent)
        || has(Signature::WorseThanRandom)
        || has(Signature::BelowRandomFloor)
        || (has(Signature::PoorFit) && has(Signature::ParameterOnBound))
}

/// The call the evidence makes whatever a working indexer's numbers say (`None`: the numbers'
/// call stands).
pub fn overriding_call(e: &Evidence) -> Option<Call> {
    let has = |s: Signature| e.signatures.contains(&s);
    let exact = exact(e.signatures);
    let preferred_defect = e.preferred.is_some_and(|n| crate::calibrate::hypotheses::IMPLEMENTATION_HYPOTHESES.contains(&n));
    let by_evidence = match e.error_rates {
        Some(r) => r.evidence > r.threshold,
        None => preferred_defect,
    };
    if exact || by_evidence {
        return Some(match e.error_rates {
            Some(r) if !exact && r.false_alarm > MAX_FALSE_ALARM => Call::Undecided,
            _ => Call::ImplementationSuspect,
        });
    }
    if has(Signature::MissesWhenAllSelected) || e.preferred == Some("read-failure") {
        return Some(Call::ReadLimited);
    }
    match e.error_rates {
        Some(r) if r.defect_not_ruled_out => Some(Call::Undecided),
        _ => None,
    }
}

/// The call: the evidence's, or else `physical` (the call of a working indexer's numbers).
pub fn decide(e: &Evidence, physical: Call) -> Call {
    overriding_call(e).unwrap_or(physical)
}
