//! The decision rule (docs/model.md#verdict): the one place a call is made from the evidence.
//!
//! A call is a prescription a person acts on, so every call must be separated from the others
//! by the evidence at one standard, whichever way it points. In order:
//! 1. **Every needle found** → `saturated`, whatever the table's geometry.
//! 2. **A condition column** (recall differing between its values at identical cells; no
//!    physical hypothesis depends on the build) with p < [`super::CONDITION_ALPHA`] →
//!    `implementation-suspect` naming it; with p < [`CONDITION_SUGGESTIVE`] every physical call is
//!    ruled out and the call is `undecided` unless a defect call stands by itself; so it is when
//!    the column's values differ on too few trials for its test, the data favouring a difference
//!    by AIC (a defect of the build is then not ruled out).
//! 3. **Exact signatures** (rows jointly below the random-indexer floor, a separation
//!    significantly below 0, a poor fit on a search bound) → `implementation-suspect`, unless a
//!    plausible explanation that breaks the floor's premises fits about as well: the model not
//!    reading a selected needle, or look-alikes that outscore it (hard negatives).
//! 4. **Defect evidence**: AIC(best working explanation) − AIC(best defect) above τ, the 95th
//!    percentile of that evidence on tables from the working explanations → `implementation-
//!    suspect` (`undecided` where the design's false-alarm rate exceeds [`MAX_FALSE_ALARM`] or
//!    the defect's fit matches the table badly).
//! 5. A **physical call** (coverage-, discrimination-, read-limited) needs a plausible working
//!    explanation ([`super::plausible`]) and every competing defect ruled out at the same
//!    standard (its own tables show evidence as low as the data's less than 5% of the time);
//!    `coverage-limited` needs evidence that k matters (k varied in the table, or captured
//!    selections). Otherwise `undecided`, with the cells that would decide.
//!
//! [`decide`] returns the call with its [`Reason`]; the sentences of every reason live here.

use super::signature::Signature;
use crate::calibrate::Hypothesis;
use crate::verdict::Call;

/// Goodness-of-fit p-value below which the preferred hypothesis fits poorly.
pub(crate) const POOR_FIT_P: f64 = 0.001;
/// Largest false-alarm rate (a working indexer called implementation-suspect on tables like the
/// user's) at which an implementation-suspect call is made.
pub(crate) const MAX_FALSE_ALARM: f64 = 0.10;
/// Smallest power (a defect like the best competitor found on tables like the user's) the
/// procedure aims at; reported beside the call, see `ErrorRates::meets_targets`.
pub(crate) const MIN_POWER: f64 = 0.90;
/// A condition column's p-value below which no physical call is made (between this and
/// [`super::CONDITION_ALPHA`] the call is `undecided`).
pub(crate) const CONDITION_SUGGESTIVE: f64 = 0.05;

/// The defect evidence of the hypotheses and what the simulation at the table's design says of
/// it ([`super::error_rates::ErrorRates`]; the plan's simulated tables give their own).
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct DefectEvidence {
    /// AIC(best working explanation) − AIC(best defect).
    pub(crate) evidence: f64,
    /// τ: the evidence a defect call needs.
    pub(crate) threshold: f64,
    /// The rule's false-alarm rate at the design.
    pub(crate) false_alarm: f64,
    /// Some competing defect is not ruled out at the standard a defect call meets.
    pub(crate) defect_not_ruled_out: bool,
    /// The best defect's fit matches the table badly: its evidence supports no call.
    pub(crate) defect_poor_fit: bool,
}

/// What the rule decides from.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Evidence<'a> {
    /// The signatures found.
    pub(crate) signatures: &'a [Signature],
    /// Every needle of the table was found.
    pub(crate) all_found: bool,
    /// The smallest p-value of the table's condition columns (None without one).
    pub(crate) condition_p: Option<f64>,
    /// A condition column's values differ in a way its test cannot settle: the data favour a
    /// recall per value by AIC ([`super::ConditionTest::favoured`]), so a defect of the build is
    /// not ruled out.
    pub(crate) condition_open: bool,
    /// The best hypothesis overall is a defect (a calibrated fit compares none: false).
    pub(crate) defect_preferred: bool,
    /// The best plausible explanation ([`super::plausible`]), if any: whether it is the model's
    /// reading (read-limited) rather than a working indexer's numbers.
    pub(crate) explanation: Option<Explanation>,
    /// A plausible explanation that puts the needle below the floor without a defect (the
    /// model's reading, or look-alikes scoring above the needle: [`super::plausible::breaks_floor`])
    /// fits about as well as the best hypothesis: the floor's premises may not hold.
    pub(crate) floor_explained: bool,
    /// The defect evidence with its simulated thresholds (recall tables; None without).
    pub(crate) error_rates: Option<DefectEvidence>,
    /// The table shows that k matters (several k measured, or captured selections).
    pub(crate) k_matters: bool,
    /// Every row selects every candidate (dense attention, k ≥ N): what the table says of the
    /// model's own reading (None: some row tests selection).
    pub(crate) dense: Option<DenseReading>,
}

/// What a table whose every row selects every candidate says: it measures the model's own
/// reading and nothing of sparse attention.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum DenseReading {
    /// The recall at the longest measured length meets the target.
    MeetsTarget,
    /// It does not, and the read rate falls as models' do (gradually, or near the trained window).
    Declines,
    /// The read rate collapses far inside the trained window: a defect outside selection.
    CollapsesInsideWindow,
}

impl Evidence<'_> {
    /// Evidence that is only signatures (a calibrated fit's: no hypotheses compared, a plausible
    /// working fit assumed, k's effect taken from the fit).
    pub(crate) fn signatures_only(signatures: &[Signature]) -> Evidence<'_> {
        Evidence {
            signatures,
            all_found: false,
            condition_p: None,
            condition_open: false,
            defect_preferred: false,
            explanation: Some(Explanation::Working),
            floor_explained: false,
            error_rates: None,
            k_matters: true,
            dense: None,
        }
    }
}

/// The kind of the best plausible explanation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Explanation {
    /// A working indexer: the numbers' call.
    Working,
    /// The model's own reading: read-limited.
    Read,
}

/// Why the rule made its call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Reason {
    /// Every needle was found.
    AllFound,
    /// A condition column differs significantly at identical cells.
    Condition,
    /// A condition column differs at p < 0.05 but not below the defect level.
    ConditionSuggestive,
    /// A condition column's values differ, favoured by AIC, on too few trials for its test.
    ConditionOpen,
    /// An exact signature.
    Signature,
    /// The defect evidence exceeds τ.
    DefectEvidence,
    /// The defect evidence exceeds τ but the design's false-alarm rate is too high, or the
    /// defect's fit matches the table badly.
    DefectUnreliable,
    /// No plausible working explanation, and no defect called.
    NoExplanation,
    /// A competing defect is not ruled out.
    DefectNotRuledOut,
    /// Misses where every candidate is selected, or a plausible reading explanation.
    Reading,
    /// Every row selects every candidate: the misses are the model's own.
    Dense,
    /// Every row selects every candidate and the needle stops being read far inside the
    /// trained window.
    DenseCollapse,
    /// The numbers say raise k, but the table never showed that k matters.
    KNotShown,
    /// The working explanation's numbers.
    Numbers,
}

impl Reason {
    /// The one-line reason printed under the call.
    pub(crate) fn sentence(self) -> &'static str {
        match self {
            Reason::AllFound => "every needle of the table was found",
            Reason::Condition => "recall differs between the values of a condition column at identical cells, which no property of the indexer explains",
            Reason::ConditionSuggestive => "recall differs between the values of a condition column at identical cells (p < 0.05, not below the defect level 0.01): no physical call can be made while the condition may matter",
            Reason::ConditionOpen => "recall differs between the values of a condition column at identical cells, too few trials for the test to decide (the data favour a difference): a defect of the build is not ruled out, so no physical call can be made",
            Reason::Signature => "the data show a pattern no working indexer produces (see the signatures)",
            Reason::DefectEvidence => "a defect hypothesis explains the table better than any working indexer, beyond what working indexers reach on tables like this 95% of the time",
            Reason::DefectUnreliable => "a defect hypothesis is preferred, but on this design the procedure cannot separate it from a working indexer reliably enough to act on",
            Reason::NoExplanation => "no working indexer explains the table with plausible values, and the defect evidence does not reach the defect call's standard",
            Reason::DefectNotRuledOut => "a defect hypothesis that predicts these cells otherwise is not ruled out at the standard a defect call must meet: no fix can be prescribed yet",
            Reason::Reading => "the needle is lost where selection cannot explain it: the model does not read it",
            Reason::DenseCollapse => "every row selects every candidate, yet the needle stops being read abruptly far inside the model's trained window: a defect outside selection (prefill, the attention kernel, the cache), not the model's limit",
            Reason::Dense => "every row selects every candidate (dense attention, or k ≥ N): the misses are the model's own reading, not sparse attention, which these rows do not test",
            Reason::KNotShown => "the working explanation says raise k, but the table measured one k: that k matters is an extrapolation the data never tested",
            Reason::Numbers => "a plausible working explanation, every competing defect ruled out",
        }
    }
}

/// Signatures that decide by themselves (unless a plausible explanation breaks their premises).
fn exact(sig: &[Signature]) -> bool {
    let has = |s: Signature| sig.contains(&s);
    has(Signature::WorseThanRandom)
        || has(Signature::BelowRandomFloor)
        || (has(Signature::PoorFit) && has(Signature::ParameterOnBound))
}

/// The call and its reason: the evidence's, or else `physical` (the call of the best plausible
/// working explanation's numbers).
pub(crate) fn decide(e: &Evidence, physical: Call) -> (Call, Reason) {
    use Call::*;
    if e.all_found {
        return (Saturated, Reason::AllFound);
    }
    if e.signatures.contains(&Signature::ConditionDependent) {
        return (ImplementationSuspect, Reason::Condition);
    }
    if let Some(d) = e.dense {
        return match d {
            _ if e.condition_p.is_some_and(|p| p < CONDITION_SUGGESTIVE) => (Undecided, Reason::ConditionSuggestive),
            DenseReading::MeetsTarget | DenseReading::Declines if e.condition_open => {
                (Undecided, Reason::ConditionOpen)
            }
            DenseReading::CollapsesInsideWindow => (ImplementationSuspect, Reason::DenseCollapse),
            DenseReading::MeetsTarget => (Saturated, Reason::Dense),
            DenseReading::Declines => (ReadLimited, Reason::Dense),
        };
    }
    if exact(e.signatures) && !e.floor_explained {
        return (ImplementationSuspect, Reason::Signature);
    }
    let by_evidence = match e.error_rates {
        Some(r) => r.evidence > r.threshold,
        None => e.defect_preferred,
    };
    if by_evidence {
        let unreliable = e.error_rates.is_some_and(|r| r.false_alarm > MAX_FALSE_ALARM || r.defect_poor_fit);
        return if unreliable {
            (Undecided, Reason::DefectUnreliable)
        } else {
            (ImplementationSuspect, Reason::DefectEvidence)
        };
    }
    if e.condition_p.is_some_and(|p| p < CONDITION_SUGGESTIVE) {
        return (Undecided, Reason::ConditionSuggestive);
    }
    if e.condition_open {
        return (Undecided, Reason::ConditionOpen);
    }
    let Some(explanation) = e.explanation else {
        return (Undecided, Reason::NoExplanation);
    };
    if e.error_rates.is_some_and(|r| r.defect_not_ruled_out) {
        return (Undecided, Reason::DefectNotRuledOut);
    }
    if explanation == Explanation::Read || e.signatures.contains(&Signature::MissesWhenAllSelected) {
        return (ReadLimited, Reason::Reading);
    }
    if physical == CoverageLimited && !e.k_matters {
        return (Undecided, Reason::KNotShown);
    }
    (physical, Reason::Numbers)
}

/// The call on a scenario given rather than measured (`verdict` without `--data`, a regime
/// map's cells): nothing but its numbers speaks, so the rule makes the numbers' call
/// ([`Call::of_numbers`]).
pub(crate) fn on_scenario(physical: Call) -> Call {
    let known = Evidence { explanation: Some(Explanation::Working), ..Evidence::signatures_only(&[]) };
    decide(&known, physical).0
}

/// The defect class a call names: under a call resting on defect evidence the best defect's
/// (which need not be the best hypothesis), under the other implementation-suspect and
/// undecided calls the best hypothesis's when it is a defect, and none under a physical call
/// (every defect was ruled out).
pub(crate) fn named_defect(
    call: Call,
    reason: Reason,
    best: Hypothesis,
    best_defect: Option<Hypothesis>,
) -> Option<Hypothesis> {
    match (call, reason) {
        (_, Reason::DefectEvidence | Reason::DefectUnreliable) => best_defect,
        (Call::ImplementationSuspect | Call::Undecided, _) => best.is_implementation().then_some(best),
        _ => None,
    }
}

/// The call a calibrated fit's signatures force whatever its numbers say (None: the numbers'
/// call stands).
pub(crate) fn overriding_call(signatures: &[Signature]) -> Option<Call> {
    let e = Evidence::signatures_only(signatures);
    match decide(&e, Call::Saturated) {
        (Call::Saturated, Reason::Numbers) => None,
        (c, _) => Some(c),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn working() -> Evidence<'static> {
        Evidence {
            signatures: &[],
            all_found: false,
            condition_p: None,
            condition_open: false,
            defect_preferred: false,
            explanation: Some(Explanation::Working),
            floor_explained: false,
            error_rates: Some(DefectEvidence {
                evidence: -10.0,
                threshold: 3.0,
                false_alarm: 0.05,
                defect_not_ruled_out: false,
                defect_poor_fit: false,
            }),
            k_matters: true,
            dense: None,
        }
    }

    /// Each step of the rule, from a table whose evidence supports the numbers' call, changed in
    /// one thing at a time.
    #[test]
    fn each_step_of_the_rule() {
        use Call::*;
        let e = working();
        assert_eq!(decide(&e, DiscriminationLimited), (DiscriminationLimited, Reason::Numbers));
        assert_eq!(decide(&e, CoverageLimited), (CoverageLimited, Reason::Numbers));
        assert_eq!(decide(&Evidence { all_found: true, ..e }, DiscriminationLimited), (Saturated, Reason::AllFound));
        let cond = [Signature::ConditionDependent];
        assert_eq!(
            decide(&Evidence { signatures: &cond, condition_p: Some(0.001), ..e }, CoverageLimited),
            (ImplementationSuspect, Reason::Condition)
        );
        assert_eq!(
            decide(&Evidence { condition_p: Some(0.03), ..e }, CoverageLimited),
            (Undecided, Reason::ConditionSuggestive)
        );
        assert_eq!(
            decide(&Evidence { condition_p: Some(0.2), ..e }, CoverageLimited),
            (CoverageLimited, Reason::Numbers)
        );
        // A difference the test cannot settle rules the physical calls out too.
        assert_eq!(
            decide(&Evidence { condition_p: Some(0.4), condition_open: true, ..e }, CoverageLimited),
            (Undecided, Reason::ConditionOpen)
        );
        let floor = [Signature::BelowRandomFloor];
        assert_eq!(
            decide(&Evidence { signatures: &floor, ..e }, DiscriminationLimited),
            (ImplementationSuspect, Reason::Signature)
        );
        // The floor assumes a selected needle is read: a plausible reading explanation lifts it.
        assert_eq!(
            decide(
                &Evidence { signatures: &floor, floor_explained: true, explanation: Some(Explanation::Read), ..e },
                DiscriminationLimited
            ),
            (ReadLimited, Reason::Reading)
        );
        // Look-alikes above the needle (hard negatives) break it too: the working explanation's call.
        assert_eq!(
            decide(
                &Evidence { signatures: &floor, floor_explained: true, explanation: Some(Explanation::Working), ..e },
                DiscriminationLimited
            ),
            (DiscriminationLimited, Reason::Numbers)
        );
        let strong = DefectEvidence {
            evidence: 5.0,
            threshold: 3.0,
            false_alarm: 0.05,
            defect_not_ruled_out: true,
            defect_poor_fit: false,
        };
        assert_eq!(
            decide(&Evidence { error_rates: Some(strong), ..e }, DiscriminationLimited),
            (ImplementationSuspect, Reason::DefectEvidence)
        );
        let noisy = DefectEvidence { false_alarm: 0.2, ..strong };
        assert_eq!(
            decide(&Evidence { error_rates: Some(noisy), ..e }, DiscriminationLimited),
            (Undecided, Reason::DefectUnreliable)
        );
        let badly = DefectEvidence { defect_poor_fit: true, ..strong };
        assert_eq!(
            decide(&Evidence { error_rates: Some(badly), ..e }, DiscriminationLimited),
            (Undecided, Reason::DefectUnreliable)
        );
        // The symmetric half: a physical call needs every competing defect ruled out.
        let open = DefectEvidence {
            evidence: 0.0,
            threshold: 3.0,
            false_alarm: 0.05,
            defect_not_ruled_out: true,
            defect_poor_fit: false,
        };
        assert_eq!(
            decide(&Evidence { error_rates: Some(open), ..e }, DiscriminationLimited),
            (Undecided, Reason::DefectNotRuledOut)
        );
        assert_eq!(
            decide(&Evidence { explanation: None, ..e }, DiscriminationLimited),
            (Undecided, Reason::NoExplanation)
        );
        assert_eq!(decide(&Evidence { k_matters: false, ..e }, CoverageLimited), (Undecided, Reason::KNotShown));
        assert_eq!(
            decide(&Evidence { k_matters: false, ..e }, DiscriminationLimited),
            (DiscriminationLimited, Reason::Numbers)
        );
        assert_eq!(
            decide(&Evidence { explanation: Some(Explanation::Read), ..e }, CoverageLimited),
            (ReadLimited, Reason::Reading)
        );
        // Tables whose every row selects every candidate.
        assert_eq!(
            decide(&Evidence { dense: Some(DenseReading::Declines), ..e }, CoverageLimited),
            (ReadLimited, Reason::Dense)
        );
        assert_eq!(
            decide(&Evidence { dense: Some(DenseReading::MeetsTarget), ..e }, CoverageLimited),
            (Saturated, Reason::Dense)
        );
        assert_eq!(
            decide(&Evidence { dense: Some(DenseReading::CollapsesInsideWindow), ..e }, CoverageLimited),
            (ImplementationSuspect, Reason::DenseCollapse)
        );
        assert_eq!(
            decide(&Evidence { dense: Some(DenseReading::Declines), condition_p: Some(0.02), ..e }, CoverageLimited),
            (Undecided, Reason::ConditionSuggestive)
        );
        assert_eq!(
            decide(&Evidence { dense: Some(DenseReading::Declines), condition_open: true, ..e }, CoverageLimited),
            (Undecided, Reason::ConditionOpen)
        );
        assert_eq!(
            decide(
                &Evidence { dense: Some(DenseReading::CollapsesInsideWindow), condition_open: true, ..e },
                CoverageLimited
            ),
            (ImplementationSuspect, Reason::DenseCollapse)
        );
    }

    /// A scenario's numbers are its call; the class named follows the reason.
    #[test]
    fn scenario_calls_and_named_classes() {
        use Call::*;
        for c in [Saturated, CoverageLimited, DiscriminationLimited] {
            assert_eq!(on_scenario(c), c);
        }
        assert_eq!(Call::of_numbers(0.95, 0.99, 0.9), Saturated);
        assert_eq!(Call::of_numbers(0.5, 0.9, 0.9), CoverageLimited);
        assert_eq!(Call::of_numbers(0.5, 0.89, 0.9), DiscriminationLimited);
        let (p, e, d) = (Hypothesis::Positional, Hypothesis::EffectiveK, Hypothesis::Discrimination);
        assert_eq!(named_defect(ImplementationSuspect, Reason::DefectEvidence, d, Some(e)), Some(e));
        assert_eq!(named_defect(Undecided, Reason::DefectUnreliable, p, Some(e)), Some(e));
        assert_eq!(named_defect(ImplementationSuspect, Reason::Signature, p, Some(e)), Some(p));
        assert_eq!(named_defect(ImplementationSuspect, Reason::Signature, d, Some(e)), None);
        assert_eq!(named_defect(Undecided, Reason::DefectNotRuledOut, p, Some(p)), Some(p));
        assert_eq!(named_defect(DiscriminationLimited, Reason::Numbers, p, Some(p)), None);
        assert_eq!(named_defect(ReadLimited, Reason::Reading, p, Some(p)), None);
    }

    /// A calibrated fit's signatures force a call only where the rule's steps say so.
    #[test]
    fn overriding_calls_of_a_fit() {
        assert_eq!(overriding_call(&[]), None);
        assert_eq!(overriding_call(&[Signature::WorseThanRandom]), Some(Call::ImplementationSuspect));
        assert_eq!(overriding_call(&[Signature::MissesWhenAllSelected]), Some(Call::ReadLimited));
        assert_eq!(overriding_call(&[Signature::PoorFit]), None);
    }

    /// Every reason has its own sentence.
    #[test]
    fn every_reason_has_a_sentence() {
        use Reason::*;
        let all = [
            AllFound,
            Condition,
            ConditionSuggestive,
            ConditionOpen,
            Signature,
            DefectEvidence,
            DefectUnreliable,
            NoExplanation,
            DefectNotRuledOut,
            Reading,
            Dense,
            DenseCollapse,
            KNotShown,
            Numbers,
        ];
        let mut seen = std::collections::HashSet::new();
        for r in all {
            assert!(r.sentence().len() > 30, "{r:?}");
            assert!(seen.insert(r.sentence()), "{r:?} repeats a sentence");
        }
    }
}
