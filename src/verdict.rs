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

impl Call {
    /// What a scenario's numbers say, before any evidence is weighed: `saturated` when the
    /// recall at the configured k meets the target, `coverage-limited` when it does at the
    /// kernel's maximum k, `discrimination-limited` otherwise. The input of
    /// `diagnosis::rule::decide` (its `physical` call), which alone turns evidence into a call.
    pub(crate) fn of_numbers(recall_now: f64, recall_max_k: f64, target: f64) -> Call {
        if recall_now >= target {
            Call::Saturated
        } else if recall_max_k >= target {
            Call::CoverageLimited
        } else {
            Call::DiscriminationLimited
        }
    }
}

/// Largest dprime searched; a target not met there is reported unreachable by dprime.
pub(crate) const DPRIME_SEARCH: (f64, f64) = (-10.0, 50.0);
/// Largest score noise searched; if the target holds there, noise does not matter and this cap
/// is reported.
pub(crate) const NOISE_CAP: f64 = 100.0;
/// Most token or block scores the noise search may draw ([`RecallModel::noise_curve_draws`]):
/// about 20 s of one core. Beyond it (page pooling over 30 layers at 128K tokens, at 4,000
/// trials, draws 1.5·10^10) the two "score noise allowed" figures are not searched and the
/// verdict says so: they are the only figures that need a Monte Carlo run of their own, and a
/// verdict that answers in minutes for two figures is one nobody waits for.
pub(crate) const NOISE_SEARCH_MAX_DRAWS: u64 = 4_000_000_000;

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
    pub(crate) fn validate(&self) -> Result<(), VerdictError> {
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
    let call = Call::of_numbers(recall_now, recall_max_k, t);
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

/// A verdict computed at the fitted estimate and over the fit's 95% likelihood region.
#[derive(Debug, Clone, PartialEq)]
pub struct CalibratedVerdict {
    /// At the estimate.
    pub(crate) at_estimate: Verdict,
    /// At every boundary point of the 95% region.
    pub(crate) region: Vec<Verdict>,
}

/// A 95% range over the region: (low, high); `None` ends mean unbounded/unreachable.
pub(crate) type Range = (Option<f64>, Option<f64>);

impl CalibratedVerdict {
    fn all(&self) -> impl Iterator<Item = &Verdict> {
        std::iter::once(&self.at_estimate).chain(self.region.iter())
    }
    /// Range of a numeric quantity over the region.
    pub(crate) fn range(&self, f: impl Fn(&Verdict) -> f64) -> Range {
        let v: Vec<f64> = self.all().map(f).collect();
        (v.iter().cloned().reduce(f64::min), v.iter().cloned().reduce(f64::max))
    }
    /// Range of an optional quantity where None means +∞ (k_needed, dprime_needed).
    pub(crate) fn range_inf_high(&self, f: impl Fn(&Verdict) -> Option<f64>) -> Range {
        let v: Vec<Option<f64>> = self.all().map(f).collect();
        let some: Vec<f64> = v.iter().flatten().cloned().collect();
        let lo = some.iter().cloned().reduce(f64::min);
        let hi = if v.iter().any(Option::is_none) { None } else { some.iter().cloned().reduce(f64::max) };
        (lo, hi)
    }
    /// Range of an optional quantity where None means "not even 0" (score_noise_allowed).
    pub(crate) fn range_none_low(&self, f: impl Fn(&Verdict) -> Option<f64>) -> Range {
        let v: Vec<Option<f64>> = self.all().map(f).collect();
        let some: Vec<f64> = v.iter().flatten().cloned().collect();
        let lo = if v.iter().any(Option::is_none) { None } else { some.iter().cloned().reduce(f64::min) };
        (lo, some.iter().cloned().reduce(f64::max))
    }
    /// The calls reached anywhere in the region.
    pub(crate) fn calls(&self) -> Vec<Call> {
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
pub(crate) fn calibrated_verdict(
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
