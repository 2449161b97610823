//! The diagnosis: why a needle is lost, decided in one place (docs/model.md#verdict).
//!
//! The evidence comes from below: the row checks against the random-indexer floor
//! ([`crate::calibrate::row_checks`](mod@crate::calibrate::row_checks)) and the named
//! hypotheses fitted and ranked by AIC (`crate::calibrate::hypotheses`, six of them defect
//! classes). Here they become a call:
//! `signature` names the patterns that point at a defect or a read failure, [`conditions`]
//! tests the table's condition columns, `error_rates` measures by simulation how often the
//! procedure is wrong on tables like the user's, and `rule` alone turns all of it, with the
//! verdict's numbers for a working indexer ([`crate::verdict`]), into the call. [`diagnose`]
//! diagnoses a table (`verdict --data`); `calibrated_call` a calibrated fit (`verdict --data
//! --fit`, calibration experiments); both return typed results, presented by
//! [`crate::present::verdict`] alone, so the command line, the Python package and the
//! experiments print one thing. [`plan`] proposes the measurement that would decide, and
//! simulates how often the rule (the same `rule::decide` and `rule::named_defect`) then
//! calls the truth right.

pub(crate) mod calibrated;
pub mod conditions;
pub(crate) mod error_rates;
pub(crate) mod pipeline;
pub mod plan;
pub(crate) mod plausible;
pub(crate) mod rule;
pub(crate) mod signature;

pub(crate) use calibrated::{calibrated_call, CalibratedCall};
pub use calibrated::{fit_signatures, FitSignatures};
pub use conditions::{condition_tests, ConditionTest, CONDITION_ALPHA};
pub use error_rates::ErrorRates;
pub(crate) use signature::worse_than_random;
pub use signature::{Signature, CHI2_1_99};

use crate::calibrate::{
    compare_hypotheses, row_checks, CalibError, Family, FreeParam, Hypothesis, HypothesisResult, RowChecks,
};
use crate::engine::RecallModel;
use crate::measured::Dataset;
use crate::scenario::Scenario;
use crate::verdict::{verdict, Call, Verdict, VerdictOptions};

/// Where the verdict's numbers on a measured table are computed (docs/model.md#verdict).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum NumbersLength {
    /// The context length the scenario gives (`--context-len`, a scenario file's or a
    /// calibration experiment's `context_len`): the user's own question.
    #[default]
    Given,
    /// The longest context length of the measured table: where the table says most about the
    /// loss, and a length the data speak for. A preset's default length (65,536 on the V4 and
    /// Quest presets) is a length nobody measured; the call must not rest on it.
    LongestMeasured,
}

/// Where the k of the verdict's "recall now" on a measured table comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum NumbersTopk {
    /// The scenario's index_topk (given by the user, or the preset's when the table's rows
    /// measured several k).
    #[default]
    Given,
    /// The one index_topk every row of the table was measured at: the deployment's k, where a
    /// preset's default may be another deployment's.
    EveryRows,
}

/// Where the verdict's numbers on a measured table are: `numbers_scenario`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct NumbersAt {
    /// Where the context length comes from.
    pub(crate) length: NumbersLength,
    /// Where the current k comes from.
    pub(crate) topk: NumbersTopk,
}

/// What the user gave of the scenario fields the numbers on a table depend on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct GivenFields {
    /// `context_len` was given (`--context-len`, a scenario file, an experiment's `[scenario]`).
    pub(crate) context_len: bool,
    /// `index_topk` was given.
    pub(crate) index_topk: bool,
}

/// The scenario the verdict's numbers on `data` are computed at: `base` at the table's longest
/// measured context length unless the user gave one, and at the one index_topk every row shares
/// unless the user gave one (several k in the table: the scenario's).
pub(crate) fn numbers_scenario(
    data: &Dataset,
    base: &Scenario,
    given: GivenFields,
) -> Result<(Scenario, NumbersAt), CalibError> {
    use crate::scenario::Field;
    let mut s = base.clone();
    let mut at = NumbersAt::default();
    let set = |s: &mut Scenario, f: Field, v: u64, what: &str| {
        s.set_text(f, &v.to_string())
            .and_then(|_| s.validate())
            .map_err(|e| CalibError::Input(format!("{}: {what}, {v}: {e}", data.source)))
    };
    if let (false, Some(l)) = (given.context_len, data.rows.iter().map(|r| r.context_len).max()) {
        set(&mut s, Field::ContextLen, l, "the longest measured context length")?;
        at.length = NumbersLength::LongestMeasured;
    }
    let mut ks = data.rows.iter().map(|r| r.index_topk);
    if let (false, Some(k)) = (given.index_topk, ks.next()) {
        if ks.all(|o| o == k) {
            set(&mut s, Field::IndexTopk, k, "the index_topk of every row")?;
            at.topk = NumbersTopk::EveryRows;
        }
    }
    Ok((s, at))
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
    pub numbers_from: Hypothesis,
    /// Where the numbers' context length and k come from (set by the caller that knows:
    /// `Diagnosis::numbers_at`).
    pub numbers_at: NumbersAt,
    /// The scenario the numbers come from.
    pub scenario: Scenario,
    /// The condition columns' tests (`diagnosis::conditions`).
    pub conditions: Vec<ConditionTest>,
    /// The rule's simulated error rates at this table's design (recall tables).
    pub error_rates: Option<ErrorRates>,
    /// With an undecided call: the cells that would decide it (`plan::plan_from` from the
    /// diagnosis's own hypotheses, budget [`plan::UNDECIDED_BUDGET`], seed
    /// `error_rates::SEED`; None when no cell the kernel runs separates them).
    pub plan: Option<plan::Plan>,
    /// Why the rule made the call.
    pub reason: rule::Reason,
    /// Why the numbers' "needed" figures are withheld (None: they are shown).
    pub numbers_withheld: Option<String>,
    /// The physical hypotheses that are not working explanations, with why.
    pub implausible: Vec<(Hypothesis, String)>,
}

/// Diagnoses `data`: row checks, every hypothesis, signatures, the call and the verdict's numbers.
pub fn diagnose(
    data: &Dataset,
    base: &Scenario,
    user_free: &[FreeParam],
    model: &dyn RecallModel,
    opts: VerdictOptions,
) -> Result<Diagnosis, CalibError> {
    let base = &crate::calibrate::answer_scenario(data, base);
    let checks = row_checks(data, base, model)?;
    let hypotheses = compare_hypotheses(data, base, user_free, model)?;
    let facts = plausible::TableFacts::of(base);
    let explains: Vec<bool> = hypotheses.iter().map(|h| plausible::is_explanation(h, &facts)).collect();
    let lmax = hypotheses.iter().map(|h| h.loglik).fold(f64::NEG_INFINITY, f64::max);
    let lmin = hypotheses.iter().map(|h| h.loglik).fold(f64::INFINITY, f64::min);
    let all_found = data.rows.iter().all(|r| r.hits == r.trials) && !data.is_selection();
    let separable = lmax - lmin >= 1e-9;
    let best = &hypotheses[0];
    let mut sig = Vec::new();
    if checks.any_below_floor() {
        sig.push(Signature::BelowRandomFloor);
    }
    // Fits about as well as the best hypothesis: log-likelihood within AIC_TIE / 2 (the question
    // is whether the data could come from it, so its extra parameters are not charged).
    let fits_as_well = |h: &HypothesisResult| h.loglik >= lmax - crate::calibrate::hypotheses::AIC_TIE / 2.0 - 1e-9;
    // The plain discrimination fit below 0 says no working indexer produces the table only when
    // no plausible explanation fits about as well: otherwise that fit is merely misspecified
    // (the needle's spread or the layers' sharing differ from the preset's).
    if worse_than_random(&hypotheses).is_some() && !hypotheses.iter().zip(&explains).any(|(h, &e)| e && fits_as_well(h))
    {
        sig.push(Signature::WorseThanRandom);
    }
    if !checks.selection_independent_misses().is_empty() {
        sig.push(Signature::MissesWhenAllSelected);
    }
    if !best.on_bound.is_empty() {
        sig.push(Signature::ParameterOnBound);
    }
    if best.gof_p.is_some_and(|p| p < rule::POOR_FIT_P) {
        sig.push(Signature::PoorFit);
    }
    sig.extend(Signature::of_hypothesis(best.hypothesis));
    let conditions = condition_tests(data);
    if conditions.iter().any(|c| c.significant) {
        sig.push(Signature::ConditionDependent);
    }
    // The best plausible explanation (hypotheses are in AIC order).
    let explanation = hypotheses.iter().zip(&explains).find(|(_, &e)| e).map(|(h, _)| h);
    // A plausible explanation that puts the needle below the floor without a defect and fits
    // about as well as the best: the floor's premises do not hold for this table.
    let floor_explained =
        hypotheses.iter().zip(&explains).any(|(h, &e)| e && plausible::breaks_floor(h) && fits_as_well(h));
    if explanation.is_some_and(|h| h.hypothesis == Hypothesis::ReadDecline) && !all_found {
        sig.push(Signature::ReadDecline);
    }
    // The numbers: at the best plausible working explanation that is a plain scenario, else at
    // the best plain scenario with every "needed" figure withheld.
    let plain = |only_plausible: bool| {
        hypotheses
            .iter()
            .zip(&explains)
            .filter(|(_, &e)| e || !only_plausible)
            .find_map(|(h, _)| h.scenario(base).map(|s| (h, s)))
    };
    let numbers_plausible = plain(true).is_some();
    let (from, scen) = plain(true)
        .or_else(|| plain(false))
        .ok_or_else(|| CalibError::Fit("no hypothesis gives a valid scenario".into()))?;
    let mut v = verdict(&scen, model, opts)?;
    v.dprime_on_bound = from.on_bound.iter().any(|n| n == "dprime");
    let rates = if separable && !all_found {
        error_rates::error_rates(data, &hypotheses, &explains, checks.joint.as_ref())
    } else {
        None
    };
    let k_matters = data.is_selection() || {
        let mut ks: Vec<u64> = data.rows.iter().map(|r| r.index_topk).collect();
        ks.sort_unstable();
        ks.dedup();
        ks.len() >= 2
    };
    let every_row_dense =
        !data.is_selection() && data.rows.iter().all(|r| r.apply(base).is_ok_and(|s| s.index_topk >= s.n_candidates()));
    let dense = every_row_dense.then(|| {
        // On such a table dprime is not identified (nothing is selected): only the read-decline's
        // shape and the recall at the longest length speak.
        let decline = hypotheses.iter().find(|h| h.hypothesis == Hypothesis::ReadDecline);
        // A collapse is called only where the table shows it: rows on both sides of the fitted L50
        // (most needles read before it, most lost beyond), or needles lost far inside the
        // window often enough that a model reading even half of them is rejected (p < 0.01). One
        // lost needle at one length fits any steepness and says nothing of where reading stopped.
        let collapse = decline.and_then(|h| {
            let l50 = 10f64.powf(h.estimate(crate::calibrate::hypotheses::READ_L50)?);
            // With one side only, the fit puts L50 anywhere past it.
            let both_sides =
                data.rows.iter().any(|r| (r.context_len as f64) < l50 && r.trials > 0 && 2 * r.hits > r.trials)
                    && data.rows.iter().any(|r| (r.context_len as f64) > l50 && r.trials > 0 && 2 * r.hits < r.trials);
            let inside = (plausible::MIN_L50_OF_WINDOW * facts.trained_window as f64) as u64;
            let (hits, trials) =
                data.rows.iter().filter(|r| r.context_len < inside).fold((0, 0), |a, r| (a.0 + r.hits, a.1 + r.trials));
            let lost_inside = trials > 0 && crate::stats::binom_cdf(trials, hits, 0.5) < plausible::COLLAPSE_ALPHA;
            if !(both_sides || lost_inside) {
                return None;
            }
            plausible::collapse_inside_window(l50, h.estimate("read_slope")?, &facts)
        });
        let longest = data.rows.iter().map(|r| r.context_len).max().unwrap_or(0);
        let (h, n) =
            data.rows.iter().filter(|r| r.context_len == longest).fold((0, 0), |a, r| (a.0 + r.hits, a.1 + r.trials));
        if collapse.is_some() {
            rule::DenseReading::CollapsesInsideWindow
        } else if n > 0 && h as f64 / n as f64 >= opts.target {
            rule::DenseReading::MeetsTarget
        } else {
            rule::DenseReading::Declines
        }
    });
    let evidence = rule::Evidence {
        signatures: &sig,
        all_found,
        condition_p: conditions.iter().filter(|c| !c.workload).map(|c| c.p_value).reduce(f64::min),
        condition_open: conditions.iter().any(|c| c.favoured),
        defect_preferred: best.is_implementation(),
        explanation: explanation.map(|h| {
            if h.hypothesis.family() == Family::Read {
                rule::Explanation::Read
            } else {
                rule::Explanation::Working
            }
        }),
        floor_explained,
        error_rates: rates.as_ref().map(rule::DefectEvidence::from),
        k_matters,
        dense,
    };
    let (call, reason) = if !separable && !all_found {
        (Call::Undecided, rule::Reason::NoExplanation)
    } else {
        rule::decide(&evidence, v.call)
    };
    v.call = call;
    // The defect class listed is the one the call names (the rule's [`rule::named_defect`]): the
    // best hypothesis's, listed with the signatures above, gives way to it.
    let best_defect = hypotheses.iter().find(|h| h.is_implementation()).map(|h| h.hypothesis);
    let named = rule::named_defect(call, reason, best.hypothesis, best_defect);
    if named != Some(best.hypothesis) {
        let class = Signature::of_hypothesis(best.hypothesis);
        sig.retain(|s| Some(*s) != class);
    }
    if let Some(s) = named.and_then(Signature::of_hypothesis) {
        if !sig.contains(&s) {
            sig.push(s);
        }
    }
    let numbers_withheld = if !numbers_plausible {
        Some(format!(
            "no working explanation with plausible values gives a scenario ({})",
            plausible::implausibility(from, &facts).unwrap_or_default()
        ))
    } else if !matches!(call, Call::Saturated | Call::CoverageLimited | Call::DiscriminationLimited | Call::ReadLimited)
    {
        Some(format!("no fix is prescribed on an {call} call"))
    } else {
        None
    };
    // "Undecided" is not a dead end: it comes with the measurement that would decide.
    let plan = if call == Call::Undecided && separable {
        let popts =
            plan::PlanOptions { budget: plan::UNDECIDED_BUDGET, seed: error_rates::SEED, only: &[], verdict: opts };
        match plan::plan_from(data, base, &hypotheses, user_free, model, &popts) {
            Ok(p) => Some(p),
            // Nothing to plan (no cell the kernel runs separates the hypotheses): no cells to
            // show. A model's failure stays a failure.
            Err(CalibError::Input(_)) => None,
            Err(e) => return Err(e),
        }
    } else {
        None
    };
    let numbers_from = from.hypothesis;
    let implausible = hypotheses
        .iter()
        .zip(&explains)
        .filter(|(h, &e)| !e && !h.is_implementation())
        .filter_map(|(h, _)| plausible::implausibility(h, &facts).map(|r| (h.hypothesis, r)))
        .collect();
    Ok(Diagnosis {
        checks,
        hypotheses,
        signatures: sig,
        call,
        verdict: v,
        numbers_from,
        numbers_at: NumbersAt::default(),
        scenario: scen,
        conditions,
        error_rates: rates,
        plan,
        reason,
        numbers_withheld,
        implausible,
    })
}

impl Diagnosis {
    /// The diagnosis with its numbers named as at `at` ([`numbers_scenario`]).
    pub(crate) fn numbers_at(mut self, at: NumbersAt) -> Self {
        self.numbers_at = at;
        self
    }
}
