//! The verdict (docs/model.md#verdict): for a scenario and a target recall, is the lost needle a
//! *coverage* problem (some k within the top-k kernel's limit meets the target) or a
//! *discrimination* problem (none does: the indexer's precision must improve, by how much)?
//!
//! Every search relies on the model's monotonicity: recall increases with `index_topk` and
//! `dprime` and decreases with `score_noise` (for dprime > 0), so each "needed"/"allowed" number
//! is found by bisection.

use crate::engine::{with_topk, EngineError, RecallModel};
use crate::scenario::{Field, Scenario, ScenarioError};

/// Why a verdict could not be computed.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum VerdictError {
    /// Bad options (the target, the kernel maximum) or a scenario the verdict does not apply to.
    #[error("{0}")]
    Input(String),
    /// The scenario is invalid.
    #[error(transparent)]
    Scenario(#[from] ScenarioError),
    /// The recall model failed during the searches.
    #[error("recall model: {0}")]
    Model(EngineError),
}

impl crate::error::Classify for VerdictError {
    /// Bad input, or a failure of the recall model during the searches.
    fn kind(&self) -> crate::error::ErrorKind {
        match self {
            VerdictError::Model(_) => crate::error::ErrorKind::Failure,
            _ => crate::error::ErrorKind::Input,
        }
    }
}

/// The three calls.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Call {
    /// The target is already met.
    Saturated,
    /// Some k within the kernel limit meets the target.
    CoverageLimited,
    /// No feasible k does: improve precision.
    DiscriminationLimited,
    /// Misses that no selection explains: the needle is selected but not used (p_read < 1).
    ReadLimited,
    /// Neither k nor precision: the data lie below the random-indexer floor, or a positional /
    /// effective-k / length-periodic / broken-fraction hypothesis wins, or nothing smooth fits.
    ImplementationSuspect,
    /// No call meets its error-rate targets on this design: measure the cells the plan proposes.
    Undecided,
}

impl std::fmt::Display for Call {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Call::Saturated => "saturated",
            Call::CoverageLimited => "coverage-limited",
            Call::DiscriminationLimited => "discrimination-limited",
            Call::ReadLimited => "read-limited",
            Call::ImplementationSuspect => "implementation-suspect",
            Call::Undecided => "undecided",
        })
    }
}

/// Largest dprime searched; a target not met there is reported unreachable by dprime.
pub const DPRIME_SEARCH: (f64, f64) = (-10.0, 50.0);
/// Largest score noise searched; if the target holds there, noise does not matter and this cap
/// is reported.
pub const NOISE_CAP: f64 = 100.0;
/// Most token or block scores the noise search may draw ([`RecallModel::noise_curve_draws`]):
/// about 20 s of one core. Beyond it (page pooling over 30 layers at 128K tokens, at 4,000
/// trials, draws 1.5·10^10) the two "score noise allowed" figures are not searched and the
/// verdict says so: they are the only figures that need a Monte Carlo run of their own, and a
/// verdict that answers in minutes for two figures is one nobody waits for.
pub const NOISE_SEARCH_MAX_DRAWS: u64 = 4_000_000_000;

/// Options of [`verdict`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct VerdictOptions {
    /// Target recall in (0, 1).
    pub target: f64,
    /// Largest k the top-k kernel supports.
    pub max_topk: u64,
}

impl VerdictOptions {
    /// Checks the target and the kernel maximum.
    pub fn validate(&self) -> Result<(), VerdictError> {
        if !(self.target > 0.0 && self.target < 1.0) {
            return Err(VerdictError::Input(format!("--target {}: allowed 0 < target < 1", self.target)));
        }
        if self.max_topk == 0 {
            return Err(VerdictError::Input("--max-topk 0: allowed ≥ 1".into()));
        }
        Ok(())
    }
}

/// The verdict's numbers for one scenario.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Verdict {
    /// The call.
    pub call: Call,
    /// Target recall.
    pub target: f64,
    /// Current k.
    pub index_topk: u64,
    /// Kernel maximum k.
    pub max_topk: u64,
    /// The context length L (tokens) every number is computed at.
    pub context_len: u64,
    /// Candidates N = floor(L / c).
    pub n_candidates: u64,
    /// Recall at the current k.
    pub recall_now: f64,
    /// The doubled k used for `recall_2k`.
    pub k_2x: u64,
    /// Recall at k = 2 × index_topk.
    pub recall_2k: f64,
    /// Recall at k = max_topk.
    pub recall_max_k: f64,
    /// Smallest k (≤ N) meeting the target; None when even selecting every candidate does not.
    pub k_needed: Option<u64>,
    /// The scenario's dprime.
    pub dprime: f64,
    /// Smallest dprime meeting the target at the current k (None: unreachable by dprime alone).
    pub dprime_needed_now: Option<f64>,
    /// ... at k = max_topk.
    pub dprime_needed_max_k: Option<f64>,
    /// The scenario's score noise.
    pub score_noise: f64,
    /// Largest score noise still meeting the target at the current k (None: not even at 0).
    pub score_noise_allowed_now: Option<f64>,
    /// ... at k = max_topk.
    pub score_noise_allowed_max_k: Option<f64>,
    /// k·c: up to about this context every entry is selected.
    pub coverage_horizon_tokens: u64,
    /// The scenario's dprime is a fitted value on its search bound: no sentence rests on it.
    pub dprime_on_bound: bool,
    /// Why the score-noise figures were not searched (None: they were; both are then None).
    pub noise_not_searched: Option<String>,
}

/// The scenario with one real field (dprime or score_noise, the searches' fields) set to `v`.
fn with(s: &Scenario, field: Field, v: f64) -> Result<Scenario, VerdictError> {
    let mut t = s.clone();
    t.set_real(field, v)?;
    Ok(t)
}

fn recall_of(model: &dyn RecallModel, s: &Scenario) -> Result<f64, VerdictError> {
    model.recall(s).map_err(VerdictError::Model)
}

/// Smallest k in [1, hi] with recall ≥ target, given recall(hi) ≥ target.
fn bisect_k(r: impl Fn(u64) -> Result<f64, VerdictError>, target: f64, hi: u64) -> Result<u64, VerdictError> {
    if r(1)? >= target {
        return Ok(1);
    }
    let (mut lo, mut hi) = (1u64, hi); // recall(lo) < target ≤ recall(hi)
    while hi - lo > 1 {
        let mid = lo + (hi - lo) / 2;
        if r(mid)? >= target {
            hi = mid;
        } else {
            lo = mid;
        }
    }
    Ok(hi)
}

/// Smallest value of an increasing or largest of a decreasing recall curve `r` (of one field)
/// meeting the target, by bisection to `tol`.
fn bisect_field(
    r: impl Fn(f64) -> Result<f64, VerdictError>,
    target: f64,
    mut lo: f64,
    mut hi: f64,
    increasing: bool,
    tol: f64,
) -> Result<f64, VerdictError> {
    // Invariant (increasing): recall(lo) < target ≤ recall(hi); (decreasing): recall(lo) ≥ target > recall(hi).
    while hi - lo > tol {
        let mid = 0.5 * (lo + hi);
        let ok = r(mid)? >= target;
        if ok == increasing {
            hi = mid;
        } else {
            lo = mid;
        }
    }
    Ok(if increasing { hi } else { lo })
}

fn dprime_needed(model: &dyn RecallModel, s: &Scenario, target: f64) -> Result<Option<f64>, VerdictError> {
    let (lo, hi) = DPRIME_SEARCH;
    if recall_of(model, &with(s, Field::Dprime, hi)?)? < target {
        return Ok(None);
    }
    if recall_of(model, &with(s, Field::Dprime, lo)?)? >= target {
        return Ok(Some(lo));
    }
    bisect_field(|v| recall_of(model, &with(s, Field::Dprime, v)?), target, lo, hi, true, 1e-4).map(Some)
}

fn noise_allowed(model: &dyn RecallModel, s: &Scenario, target: f64) -> Result<Option<f64>, VerdictError> {
    // Every noise level of one scenario from one curve (Monte Carlo: one run answers every
    // positive level).
    let curve = model.recall_in_noise(s).map_err(VerdictError::Model)?;
    let r = |v: f64| curve(v).map_err(VerdictError::Model);
    if r(0.0)? < target {
        return Ok(None);
    }
    if r(NOISE_CAP)? >= target {
        return Ok(Some(NOISE_CAP));
    }
    bisect_field(r, target, 0.0, NOISE_CAP, false, 1e-4).map(Some)
}

/// Computes the verdict for `s`.
pub fn verdict(s: &Scenario, model: &dyn RecallModel, opts: VerdictOptions) -> Result<Verdict, VerdictError> {
    opts.validate()?;
    s.validate()?;
    if s.model == crate::scenario::Model::Vector {
        return Err(VerdictError::Input(
            "model = vector: the verdict searches the scalar model's dprime and score_noise, which the vector model \
             does not use; set model = scalar (dsa-sim formats gives a format's effective dprime and score_noise)"
                .into(),
        ));
    }
    let t = opts.target;
    // Every k of one scenario from one curve (Monte Carlo: one run answers every k).
    let curve = model.recall_in_k(s).map_err(VerdictError::Model)?;
    let rec = |k: u64| curve(k).map_err(VerdictError::Model);
    let recall_now = rec(s.index_topk)?;
    let k_2x = s.index_topk.saturating_mul(2);
    let recall_2k = rec(k_2x)?;
    let recall_max_k = rec(opts.max_topk)?;
    let n = s.n_candidates().max(1);
    let k_all = n.max(s.index_topk).max(opts.max_topk);
    let k_needed = if rec(k_all)? >= t { Some(bisect_k(rec, t, k_all)?) } else { None };
    let call = if recall_now >= t {
        Call::Saturated
    } else if recall_max_k >= t {
        Call::CoverageLimited
    } else {
        Call::DiscriminationLimited
    };
    let smax = with_topk(s, opts.max_topk);
    let draws = model.noise_curve_draws(s).max(model.noise_curve_draws(&smax));
    let noise_not_searched = (draws > NOISE_SEARCH_MAX_DRAWS).then(|| {
        format!(
            "not searched: it needs a Monte Carlo run of {draws:.1e} score draws (the limit is {:.0e}); \
             `dsa-sim recall --score-noise V` gives the recall at a noise level",
            NOISE_SEARCH_MAX_DRAWS as f64
        )
    });
    let searched = |s: &Scenario| match noise_not_searched {
        Some(_) => Ok(None),
        None => noise_allowed(model, s, t),
    };
    Ok(Verdict {
        call,
        target: t,
        index_topk: s.index_topk,
        max_topk: opts.max_topk,
        context_len: s.context_len,
        n_candidates: s.n_candidates(),
        recall_now,
        k_2x,
        recall_2k,
        recall_max_k,
        k_needed,
        dprime: s.dprime,
        dprime_needed_now: dprime_needed(model, s, t)?,
        dprime_needed_max_k: dprime_needed(model, &smax, t)?,
        score_noise: s.score_noise,
        score_noise_allowed_now: searched(s)?,
        score_noise_allowed_max_k: searched(&smax)?,
        coverage_horizon_tokens: s.coverage_horizon_tokens(),
        dprime_on_bound: false,
        noise_not_searched,
    })
}

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

/// A verdict computed at the fitted estimate and over the fit's 95% likelihood region.
#[derive(Debug, Clone, PartialEq)]
pub struct CalibratedVerdict {
    /// At the estimate.
    pub at_estimate: Verdict,
    /// At every boundary point of the 95% region.
    pub region: Vec<Verdict>,
}

/// A 95% range over the region: (low, high); `None` ends mean unbounded/unreachable.
pub type Range = (Option<f64>, Option<f64>);

impl CalibratedVerdict {
    fn all(&self) -> impl Iterator<Item = &Verdict> {
        std::iter::once(&self.at_estimate).chain(self.region.iter())
    }
    /// Range of a numeric quantity over the region.
    pub fn range(&self, f: impl Fn(&Verdict) -> f64) -> Range {
        let v: Vec<f64> = self.all().map(f).collect();
        (v.iter().cloned().reduce(f64::min), v.iter().cloned().reduce(f64::max))
    }
    /// Range of an optional quantity where None means +∞ (k_needed, dprime_needed).
    pub fn range_inf_high(&self, f: impl Fn(&Verdict) -> Option<f64>) -> Range {
        let v: Vec<Option<f64>> = self.all().map(f).collect();
        let some: Vec<f64> = v.iter().flatten().cloned().collect();
        let lo = some.iter().cloned().reduce(f64::min);
        let hi = if v.iter().any(Option::is_none) { None } else { some.iter().cloned().reduce(f64::max) };
        (lo, hi)
    }
    /// Range of an optional quantity where None means "not even 0" (score_noise_allowed).
    pub fn range_none_low(&self, f: impl Fn(&Verdict) -> Option<f64>) -> Range {
        let v: Vec<Option<f64>> = self.all().map(f).collect();
        let some: Vec<f64> = v.iter().flatten().cloned().collect();
        let lo = if v.iter().any(Option::is_none) { None } else { some.iter().cloned().reduce(f64::min) };
        (lo, some.iter().cloned().reduce(f64::max))
    }
    /// The calls reached anywhere in the region.
    pub fn calls(&self) -> Vec<Call> {
        let mut c: Vec<Call> = Vec::new();
        for v in self.all() {
            if !c.contains(&v.call) {
                c.push(v.call);
            }
        }
        c
    }
}

/// The verdict at each of `scenarios` (the estimate first, then the region's points), in parallel.
pub fn calibrated_verdict(
    scenarios: &[Scenario],
    model: &dyn RecallModel,
    opts: VerdictOptions,
) -> Result<CalibratedVerdict, VerdictError> {
    use rayon::prelude::*;
    // Their k-curves are asked for together (Monte Carlo: one run can record them all).
    model.expect_k_curves(scenarios);
    let mut all: Vec<Verdict> = scenarios.par_iter().map(|s| verdict(s, model, opts)).collect::<Result<Vec<_>, _>>()?;
    if all.is_empty() {
        return Err(VerdictError::Input("no scenario for the verdict".into()));
    }
    let at_estimate = all.remove(0);
    Ok(CalibratedVerdict { at_estimate, region: all })
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
