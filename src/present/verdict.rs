//! The verdict's presenter: the text and JSON of every verdict (`verdict` on a scenario, on a
//! table — [`Diagnosis`] — and on a calibrated fit — `CalibratedCall`), built here alone from
//! the typed results the domain returns. A diagnosis's text starts with the call, its one-line
//! reason (`crate::diagnosis::rule::Reason::sentence`, the one home of those sentences) and what
//! to do next; the tables follow.

use super::calibrate::{hypotheses_json, hypotheses_text};
use crate::calibrate::report::CalibrationReport;
use crate::diagnosis::{
    conditions, rule, CalibratedCall, Diagnosis, FitSignatures, NumbersAt, NumbersLength, NumbersTopk, Signature,
};
use crate::measured::Dataset;
use crate::scenario::Scenario;
use crate::verdict::{CalibratedVerdict, Call, Range, Verdict, DPRIME_SEARCH, NOISE_CAP};

// ---- a scenario's verdict (the numbers)

fn opt_num(v: Option<f64>) -> String {
    match v {
        Some(x) => format!("{x:.2}"),
        None => "unreachable".into(),
    }
}

/// Two or three plain sentences explaining the call.
pub fn explain(v: &Verdict) -> String {
    let t = v.target;
    match v.call {
        Call::Saturated => {
            let k = v.k_needed.map_or("?".into(), |k| k.to_string());
            let margin = match v.score_noise_allowed_now {
                _ if v.noise_not_searched.is_some() => format!("k could go down to {k} before recall drops below the target"),
                Some(n) if n >= NOISE_CAP => format!("k could go down to {k} before recall drops below the target, and score noise would not bring it there"),
                n => format!("k could go down to {k} and the score noise up to {} before recall drops below the target", opt_num(n)),
            };
            format!(
                "Recall is already {:.3} at k = {}, at or above the target {t}: nothing needs fixing for this scenario. For margin, {margin}.",
                v.recall_now, v.index_topk
            )
        }
        Call::CoverageLimited => format!(
            "Recall is {:.3} at k = {}, below the target {t}, but the needle ranks just outside the budget: raising k to {} \
             (within the kernel maximum {}) meets the target, so this is a coverage problem. \
             At the kernel maximum recall would be {:.3}.",
            v.recall_now,
            v.index_topk,
            v.k_needed.map_or("?".into(), |k| k.to_string()),
            v.max_topk,
            v.recall_max_k
        ),
        Call::DiscriminationLimited => {
            let k_part = match v.k_needed {
                Some(k) => format!("k would have to reach {k}, beyond the kernel maximum {}", v.max_topk),
                None => "no k at all would, even selecting every candidate".to_string(),
            };
            let fix = match (v.dprime_needed_max_k, v.score_noise_allowed_max_k) {
                _ if v.dprime_on_bound => format!(
                    "Improve the indexer's precision instead: at k = {} the needle's separation must reach dprime {}; the fitted dprime sits on its search bound, so how far it is from there is not known.",
                    v.max_topk,
                    v.dprime_needed_max_k.map_or("(unreachable)".into(), |d| format!("{d:.2}"))
                ),
                (Some(d), _) if v.noise_not_searched.is_some() => format!(
                    "Improve the indexer's precision instead: at k = {} the needle's separation must rise from dprime {:.2} to {:.2}.",
                    v.max_topk, v.dprime, d
                ),
                (Some(d), Some(sn)) => format!(
                    "Improve the indexer's precision instead: at k = {} the needle's separation must rise from dprime {:.2} to {:.2}, or the score noise fall from {:.2} to at most {:.2}.",
                    v.max_topk, v.dprime, d, v.score_noise, sn
                ),
                (Some(d), None) => format!(
                    "Improve the indexer's precision instead: at k = {} the needle's separation must rise from dprime {:.2} to {:.2}; removing score noise alone would not be enough.",
                    v.max_topk, v.dprime, d
                ),
                _ => "Neither k nor the indexer's precision alone reaches the target in this model (check p_read and the window).".to_string(),
            };
            format!(
                "Recall is {:.3} at k = {} and only {:.3} at the kernel maximum k = {}, below the target {t}: {k_part}, so the needle is not scored high enough — a discrimination problem. {fix}",
                v.recall_now, v.index_topk, v.recall_max_k, v.max_topk
            )
        }
        Call::ReadLimited => format!(
            "Recall is {:.3} at k = {}, below the target {t}, with misses that no selection explains: the needle is selected but not used. Raising k or the indexer's precision does not fix this; check how the selected entries are read.",
            v.recall_now, v.index_topk
        ),
        Call::ImplementationSuspect => format!(
            "Recall is {:.3} at k = {}, below the target {t}, in a pattern that neither the budget nor the indexer's precision explains: the implementation is suspect (see the signatures).",
            v.recall_now, v.index_topk
        ),
        Call::Undecided => format!(
            "Recall is {:.3} at k = {}; on this table no call meets its error-rate targets (see the error rates): measure the cells `dsa-sim plan` proposes before acting.",
            v.recall_now, v.index_topk
        ),
    }
}

fn opt_json(x: Option<f64>) -> serde_json::Value {
    x.filter(|v| v.is_finite()).map_or(serde_json::Value::Null, |v| serde_json::json!(v))
}

/// The JSON object of `dsa-sim verdict --json` for one scenario (docs/cli.md#output keys and more).
pub fn verdict_json(v: &Verdict, s: &Scenario) -> serde_json::Value {
    let mut j = serde_json::json!({
        "call": v.call,
        "target": v.target,
        "recall_now": v.recall_now,
        "recall_2k": v.recall_2k,
        "k_2x": v.k_2x,
        "recall_max_k": v.recall_max_k,
        "index_topk": v.index_topk,
        "max_topk": v.max_topk,
        "context_len": v.context_len,
        "n_candidates": v.n_candidates,
        "k_needed": v.k_needed,
        "dprime": v.dprime,
        "dprime_needed_now": opt_json(v.dprime_needed_now),
        "dprime_needed_max_k": opt_json(v.dprime_needed_max_k),
        "score_noise": v.score_noise,
        "score_noise_allowed_now": opt_json(v.score_noise_allowed_now),
        "score_noise_allowed_max_k": opt_json(v.score_noise_allowed_max_k),
        "coverage_horizon_tokens": v.coverage_horizon_tokens,
        "explanation": explain(v),
        "notes": [
            "recall_2k is recall at k = 2 × index_topk (k_2x)",
            "null k_needed / dprime_needed: unreachable (even selecting every candidate / up to dprime 50); dprime_needed = -10 (the search's lower end) means any dprime meets the target; null score_noise_allowed: not met even without noise; score_noise_allowed = 100 means noise does not matter"
        ],
        "scenario": serde_json::to_value(s).unwrap_or(serde_json::Value::Null),
    });
    if let Some(why) = &v.noise_not_searched {
        // Only where it applies, so that every other verdict's JSON is as it was.
        j["noise_not_searched"] = serde_json::json!(why);
    }
    j
}

/// A noise figure's range, null where the figure was not searched.
fn noise_range(cv: &CalibratedVerdict, f: impl Fn(&Verdict) -> Option<f64>) -> serde_json::Value {
    if cv.at_estimate.noise_not_searched.is_some() {
        serde_json::Value::Null
    } else {
        range_json(cv.range_none_low(f))
    }
}

fn range_json(r: Range) -> serde_json::Value {
    serde_json::json!([opt_json(r.0), opt_json(r.1)])
}

/// The verdict JSON with `intervals` (95% ranges over the fit's likelihood region:
/// docs/model.md#verdict) and the calls reached in it.
pub fn calibrated_verdict_json(cv: &CalibratedVerdict, s: &Scenario) -> serde_json::Value {
    let mut j = verdict_json(&cv.at_estimate, s);
    let intervals = serde_json::json!({
        "recall_now": range_json(cv.range(|v| v.recall_now)),
        "recall_2k": range_json(cv.range(|v| v.recall_2k)),
        "recall_max_k": range_json(cv.range(|v| v.recall_max_k)),
        "k_needed": range_json(cv.range_inf_high(|v| v.k_needed.map(|k| k as f64))),
        "dprime": range_json(cv.range(|v| v.dprime)),
        "dprime_needed_now": range_json(cv.range_inf_high(|v| v.dprime_needed_now)),
        "dprime_needed_max_k": range_json(cv.range_inf_high(|v| v.dprime_needed_max_k)),
        "score_noise_allowed_now": noise_range(cv, |v| v.score_noise_allowed_now),
        "score_noise_allowed_max_k": noise_range(cv, |v| v.score_noise_allowed_max_k),
    });
    j["intervals"] = intervals;
    j["interval_method"] = serde_json::json!("95%: range over the fit's likelihood-ratio region (profile likelihood); a null upper end of k_needed/dprime_needed means unreachable somewhere in the region; a null lower end of score_noise_allowed means not met even without noise somewhere in it");
    j["calls_in_region"] = serde_json::json!(cv.calls());
    j["region_points"] = serde_json::json!(cv.region.len());
    j
}

fn fmt_range(r: Range, digits: usize) -> String {
    if r.0.is_none() && r.1.is_none() {
        return "[unreachable throughout]".to_string();
    }
    let f = |x: Option<f64>, none: &str| x.map_or(none.to_string(), |v| format!("{v:.digits$}"));
    format!("[{}, {}]", f(r.0, "-"), f(r.1, "∞"))
}

/// Human-readable verdict (with ranges when calibrated).
pub fn verdict_text(v: &Verdict, cv: Option<&CalibratedVerdict>) -> String {
    use std::fmt::Write as _;
    let mut s = String::new();
    let r = |f: &dyn Fn(&CalibratedVerdict) -> Range, d: usize| {
        cv.map_or(String::new(), |c| format!("   95% {}", fmt_range(f(c), d)))
    };
    let o = |x: Option<f64>| x.map_or("unreachable".to_string(), |v| format!("{v:.3}"));
    let _ = writeln!(s, "call: {}   (target recall {})", v.call, v.target);
    // Labels padded to one column so the numbers line up whatever the k values.
    let mut line = |label: String, value: String| {
        let _ = writeln!(s, "  {label:<32} {value}");
    };
    line("context length:".into(), format!("{} tokens (N = {} candidates)", v.context_len, v.n_candidates));
    line(
        format!("recall now (k = {}):", v.index_topk),
        format!("{:.4}{}", v.recall_now, r(&|c| c.range(|v| v.recall_now), 4)),
    );
    line(
        format!("recall at 2k (k = {}):", v.k_2x),
        format!("{:.4}{}", v.recall_2k, r(&|c| c.range(|v| v.recall_2k), 4)),
    );
    line(
        format!("recall at max k (k = {}):", v.max_topk),
        format!("{:.4}{}", v.recall_max_k, r(&|c| c.range(|v| v.recall_max_k), 4)),
    );
    line(
        format!("k needed for {}:", v.target),
        format!(
            "{}{}",
            v.k_needed.map_or("none (not even selecting all candidates)".into(), |k| k.to_string()),
            r(&|c| c.range_inf_high(|v| v.k_needed.map(|k| k as f64)), 0)
        ),
    );
    let bound_note = if v.dprime_on_bound { " (on the search bound: not a value the data support)" } else { "" };
    line("dprime now:".into(), format!("{:.3}{}{bound_note}", v.dprime, r(&|c| c.range(|v| v.dprime), 3)));
    // A search end is no figure to act on: say what it means.
    let dn = |x: Option<f64>| match x {
        Some(d) if d <= DPRIME_SEARCH.0 => {
            format!("any (met even at dprime {:.0}, the search's lower end)", DPRIME_SEARCH.0)
        }
        _ => o(x),
    };
    let na = |x: Option<f64>| match x {
        Some(n) if n >= NOISE_CAP => format!("any (met even at {NOISE_CAP:.0}: noise does not matter)"),
        _ => o(x),
    };
    line(
        format!("dprime needed at k = {}:", v.index_topk),
        format!("{}{}", dn(v.dprime_needed_now), r(&|c| c.range_inf_high(|v| v.dprime_needed_now), 3)),
    );
    line(
        format!("dprime needed at k = {}:", v.max_topk),
        format!("{}{}", dn(v.dprime_needed_max_k), r(&|c| c.range_inf_high(|v| v.dprime_needed_max_k), 3)),
    );
    line("score noise now:".into(), format!("{:.3}", v.score_noise));
    if let Some(why) = &v.noise_not_searched {
        line(format!("score noise allowed, k = {}, {}:", v.index_topk, v.max_topk), why.clone());
    } else {
        line(
            format!("score noise allowed, k = {}:", v.index_topk),
            format!("{}{}", na(v.score_noise_allowed_now), r(&|c| c.range_none_low(|v| v.score_noise_allowed_now), 3)),
        );
        line(
            format!("score noise allowed, k = {}:", v.max_topk),
            format!(
                "{}{}",
                na(v.score_noise_allowed_max_k),
                r(&|c| c.range_none_low(|v| v.score_noise_allowed_max_k), 3)
            ),
        );
    }
    line("coverage horizon:".into(), format!("{} tokens", v.coverage_horizon_tokens));
    if let Some(c) = cv {
        let calls: Vec<String> = c.calls().iter().map(|c| c.to_string()).collect();
        let _ = writeln!(s, "  calls within the fit's 95% region: {}", calls.join(", "));
    }
    let _ = writeln!(s, "\n{}", explain(v));
    s
}

// ---- a table's diagnosis

/// What to do next, in one line.
pub fn next_step(d: &Diagnosis) -> String {
    let cols: Vec<String> = d
        .conditions
        .iter()
        .filter(|c| !c.workload && (c.p_value < rule::CONDITION_SUGGESTIVE || c.favoured))
        .map(|c| format!("`{}`", c.column))
        .collect();
    match (d.call, d.reason) {
        (_, rule::Reason::Condition | rule::Reason::ConditionSuggestive | rule::Reason::ConditionOpen) => format!(
            "rerun the failing cells under each value of {} (same prompts, same weights) and diff the indexer's top-k between them",
            cols.join(", ")
        ),
        (Call::ImplementationSuspect, _) => "check the implementation: the signatures below say what to capture and compare against a reference".into(),
        (Call::Undecided, _) => "measure the cells below (`dsa-sim plan` with this table as --data proposes them), then run the verdict on both tables".into(),
        (Call::ReadLimited, _) => "check that a selected needle is read: the signatures below say how; neither k nor the indexer's precision fixes this".into(),
        (Call::Saturated, _) => "nothing to fix on these cells".into(),
        (Call::CoverageLimited, _) => "raise index_topk (the numbers below say to what)".into(),
        (Call::DiscriminationLimited, _) => "improve the indexer's precision (the numbers below say by how much); raising k alone does not reach the target".into(),
    }
}

/// Plain sentences explaining the call from the signatures.
pub fn explanation(d: &Diagnosis) -> String {
    let best = &d.hypotheses[0];
    let mut s = format!("{}: {}.", d.call, d.reason.sentence());
    match d.call {
        Call::ImplementationSuspect | Call::Undecided | Call::ReadLimited => {
            s.push_str(&format!(" Best-fitting hypothesis: {} (Akaike weight {:.3}).", best.hypothesis, best.weight))
        }
        _ => s.push_str(&format!(
            " Best-fitting hypothesis: {} (Akaike weight {:.3}); the numbers come from {}. {}",
            best.hypothesis,
            best.weight,
            d.numbers_from,
            explain(&d.verdict)
        )),
    }
    if let Some(r) = &d.error_rates {
        s.push_str(&format!("\n{}.", r.sentence()));
    }
    for (name, why) in &d.implausible {
        s.push_str(&format!("\nnot a working explanation: {name} ({why})."));
    }
    for g in &d.signatures {
        s.push('\n');
        s.push_str(&g.line(&signature_explanation(d, *g)));
    }
    s
}

/// A signature's explanation, naming the significant condition columns for
/// `condition_dependent`.
fn signature_explanation(d: &Diagnosis, g: Signature) -> String {
    let cols: Vec<String> = d.conditions.iter().filter(|c| c.significant).map(|c| format!("`{}`", c.column)).collect();
    if g == Signature::ConditionDependent && !cols.is_empty() {
        g.explanation().replace("a condition column", &cols.join(", "))
    } else {
        g.explanation().to_string()
    }
}

/// The JSON of the signatures: `[{"name", "explanation", "check"}]`.
pub fn signatures_json(d: &Diagnosis) -> serde_json::Value {
    serde_json::Value::Array(d.signatures.iter().map(|g| g.json(&signature_explanation(d, *g))).collect())
}

/// The `verdict --data --json` object (docs/cli.md#output): the verdict's numbers at the
/// hypothesis they come from, the call, the explanation, signatures, error rates,
/// condition tests, row checks and every hypothesis.
pub fn diagnosis_json(d: &Diagnosis, data: &Dataset) -> serde_json::Value {
    let mut j = verdict_json(&d.verdict, &d.scenario);
    j["explanation"] = serde_json::json!(explanation(d));
    j["signatures"] = signatures_json(d);
    j["error_rates"] = serde_json::json!(d.error_rates);
    j["conditions"] = serde_json::json!(d.conditions);
    j["numbers_from"] = serde_json::json!(d.numbers_from);
    d.numbers_at.annotate(&mut j);
    j["row_checks"] = serde_json::json!(d.checks);
    j["hypotheses"] = hypotheses_json(&d.hypotheses);
    j["warnings"] = serde_json::json!(data.transcribed_warning().into_iter().collect::<Vec<_>>());
    j["plan"] = d.plan.as_ref().map_or(serde_json::Value::Null, super::plan::plan_json);
    j["reason"] = serde_json::json!(d.reason);
    j["reason_text"] = serde_json::json!(d.reason.sentence());
    j["next_step"] = serde_json::json!(next_step(d));
    j["not_working_explanations"] =
        serde_json::Value::Array(d.implausible.iter().map(|(n, w)| serde_json::json!({"name": n, "why": w})).collect());
    j["numbers_withheld"] = serde_json::json!(d.numbers_withheld);
    if d.numbers_withheld.is_some() {
        for key in [
            "k_needed",
            "dprime_needed_now",
            "dprime_needed_max_k",
            "score_noise_allowed_now",
            "score_noise_allowed_max_k",
        ] {
            j[key] = serde_json::Value::Null;
        }
    }
    j
}

/// The text `verdict --data` prints: the call, its reason and what to do next first; then
/// the table's warning, the row checks, the condition tests, the hypotheses, the numbers (or
/// why they are withheld) and the explanation.
pub fn diagnosis_text(d: &Diagnosis, data: &Dataset) -> String {
    let mut text = format!("call: {}\nwhy: {}\nnext: {}\n\n", d.call, d.reason.sentence(), next_step(d));
    if let Some(w) = data.transcribed_warning() {
        text.push_str(&w);
        text.push('\n');
    }
    text.push_str(&format!("diagnosed {} rows of {}\n", data.rows.len(), data.source));
    text.push_str(&d.checks.text());
    text.push_str(&conditions::conditions_text(&d.conditions));
    text.push_str(&hypotheses_text(&d.hypotheses));
    text.push_str(&format!("numbers at the fit of `{}`, {}:\n", d.numbers_from, d.numbers_at.describe(&d.verdict)));
    match &d.numbers_withheld {
        Some(why) => text.push_str(&format!("  withheld: {why}.\n")),
        None => {
            let body = verdict_text(&d.verdict, None);
            // The verdict's own explanation is replaced by the diagnosis's.
            let body = body.split("\n\n").next().unwrap_or("").to_string();
            text.push_str(&body);
            text.push('\n');
        }
    }
    text.push_str(&format!("\n{}\n", explanation(d)));
    if let Some(p) = &d.plan {
        text.push_str(&format!(
            "\nthe cells that would decide (`dsa-sim plan` with this table, budget {}):\n",
            p.budget
        ));
        text.push_str(&super::plan::plan_text(p));
    }
    text
}

// ---- a calibrated fit's call

/// Plain lines: one per signature, with what to check.
pub fn fit_signatures_text(f: &FitSignatures) -> String {
    f.signatures.iter().map(|g| g.line(g.explanation()) + "\n").collect()
}
/// The lines a calibrated verdict's text ends with when a call is forced (empty otherwise).
pub fn forced_text(f: &FitSignatures) -> String {
    if f.forced_call.is_none() {
        return String::new();
    }
    format!("the fitted numbers above describe the data, not a fix: the call is forced by\n{}", fit_signatures_text(f))
}
/// Adds `signatures` (`[{"name", "explanation", "check"}]`) and `random_indexer_lr` to a
/// calibrated verdict's JSON.
pub fn annotate_fit_signatures(f: &FitSignatures, j: &mut serde_json::Value) {
    j["signatures"] = serde_json::Value::Array(f.signatures.iter().map(|g| g.json(g.explanation())).collect());
    j["random_indexer_lr"] = serde_json::json!(f.random_indexer_lr);
}

/// The verdict's JSON (docs/cli.md#output) with `signatures` and `random_indexer_lr`.
pub fn calibrated_json(c: &CalibratedCall) -> serde_json::Value {
    let mut j = calibrated_verdict_json(&c.verdict, &c.scenarios[0]);
    annotate_fit_signatures(&c.signatures, &mut j);
    c.numbers_at.annotate(&mut j);
    j
}

/// The verdict's text: the random-indexer test when it was run, the numbers with their 95%
/// ranges and, when the rule overrides them, the signatures that force the call.
pub fn calibrated_text(c: &CalibratedCall) -> String {
    let mut text = String::new();
    if let Some(lr) = c.signatures.random_indexer_lr {
        text.push_str(&format!(
            "random indexer (dprime = 0) against the fitted dprime: 2·Δloglik = {lr:.2} ({} at level 0.01)\n",
            if c.signatures.signatures.contains(&Signature::WorseThanRandom) { "rejected" } else { "not rejected" }
        ));
    }
    text.push_str(&format!("numbers {}:\n", c.numbers_at.describe(&c.verdict.at_estimate)));
    text.push_str(&verdict_text(&c.verdict.at_estimate, Some(&c.verdict)));
    if c.signatures.forced_call.is_some() {
        text.push_str(&forced_text(&c.signatures));
        text.push_str("`verdict --data` without --fit ranks the defect hypotheses on this table.\n");
    }
    text
}

/// `verdict --data --fit --json`: the calibrated call's JSON with the calibration and its
/// warnings.
pub fn calibrated_report_json(report: &CalibrationReport, c: &CalibratedCall) -> serde_json::Value {
    let mut j = calibrated_json(c);
    j["calibration"] = report.to_json();
    j["warnings"] = serde_json::json!(report.warnings());
    j
}

/// `verdict --data --fit`: the table's warnings, the estimates with their 95% intervals, the row
/// checks, then the calibrated call's text.
pub fn calibrated_report_text(report: &CalibrationReport, c: &CalibratedCall, data: &Dataset) -> String {
    let mut text = String::new();
    for w in report.warnings() {
        text.push_str(&w);
        text.push('\n');
    }
    let est: Vec<String> = report
        .fit
        .estimates
        .iter()
        .map(|e| format!("{} = {:.3} [{:.3}, {:.3}]", e.field, e.value, e.ci_low, e.ci_high))
        .collect();
    text.push_str(&format!("calibrated on {}: {}\n", data.source, est.join(", ")));
    if let Some(checks) = &report.checks {
        text.push_str(&checks.text());
    }
    text.push_str(&calibrated_text(c));
    text
}

impl NumbersAt {
    /// The header of the numbers in text: `at context_len L (…)[, index_topk k (…)]`.
    pub fn describe(self, v: &Verdict) -> String {
        let mut s = format!(
            "at context_len {} ({})",
            v.context_len,
            match self.length {
                NumbersLength::Given => "as the scenario gives it",
                NumbersLength::LongestMeasured => "the longest measured; --context-len sets another",
            }
        );
        if self.topk == NumbersTopk::EveryRows {
            s.push_str(&format!(", index_topk {} (every row's; --index-topk sets another)", v.index_topk));
        }
        s
    }

    /// Adds `numbers_length` and `numbers_topk` to a verdict's JSON.
    pub fn annotate(self, j: &mut serde_json::Value) {
        j["numbers_length"] = serde_json::json!(self.length);
        j["numbers_topk"] = serde_json::json!(self.topk);
    }
}

impl Signature {
    /// The text line of a signature with its explanation (`explanation`, which may name the
    /// table's columns) and what to check: `- name: explanation. Check: ….`
    pub fn line(self, explanation: &str) -> String {
        format!("- {}: {explanation}. Check: {}.", self.name(), self.check())
    }
    /// The JSON object of a signature: `{"name", "explanation", "check"}`.
    pub fn json(self, explanation: &str) -> serde_json::Value {
        serde_json::json!({"name": self.name(), "explanation": explanation, "check": self.check()})
    }
}
