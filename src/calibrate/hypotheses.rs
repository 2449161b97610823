//! Named hypotheses about why the needle is lost (docs/model.md#calibration), each a way of
//! mapping a few free parameters onto every row's scenario, fitted to the same table by maximum
//! binomial likelihood and ranked by AIC with Akaike weights.
//!
//! The hypotheses themselves (names, meanings, families) are [`Hypothesis`]; `length-periodic` is
//! fitted only when the rows' context lengths differ modulo the compression ratio, and
//! `candidate-count-limit` only where the rows' candidate counts leave a threshold to find.

use super::fit::chi2_sf;
use super::hypothesis::Hypothesis;
use super::likelihood::{binom_loglik, evaluate_distinct, set_field, unit_deviance};
use super::optimize::{minimize_bounded, NmOptions};
use super::{default_param, CalibError, FreeParam, RecallModel};
use crate::measured::Dataset;
use crate::scenario::{Field, Scenario};
use rayon::prelude::*;

/// The fields the named hypotheses are about; any other `--fit` field (score_noise, …) is a
/// nuisance parameter, free in every hypothesis.
pub(crate) const HYPOTHESIS_FIELDS: &[Field] =
    &[Field::Dprime, Field::NeedleSd, Field::HardNegatives, Field::HardMean, Field::PRead];

/// The name of the needle-level overdispersion among a hypothesis's estimates (rows with needle
/// ids: free in every hypothesis).
pub(crate) const OVERDISPERSION: &str = "overdispersion";

/// The name of `candidate-count-limit`'s threshold N0 among its estimates (candidates).
pub(crate) const CANDIDATE_LIMIT: &str = "candidate_limit";

/// The dprime used for "the indexer never selects the needle" (the bottom of the search range:
/// below every distractor, so only the window, the sink or N ≤ k bring it in).
pub(crate) const NEVER_SELECTED_DPRIME: f64 = -10.0;

/// The name of `read-decline`'s log10 L50 among its estimates (tokens).
pub(crate) const READ_L50: &str = "log10_read_l50";

/// The steepest fall of `read-decline`'s read rate searched: at s = 40 the rate is above 0.99
/// at 0.89·L50 and below 0.01 at 1.12·L50, a step between any two lengths a report measures.
pub(crate) const READ_SLOPE_MAX: f64 = 40.0;

/// `read-decline`'s factor on the read rate at context length `l`: 1 / (1 + (l/L50)^s).
fn read_factor(l: u64, log10_l50: f64, slope: f64) -> f64 {
    let x = slope * ((l.max(1) as f64).log10() - log10_l50) * std::f64::consts::LN_10;
    // 1 / (1 + e^x), without overflow for large x.
    if x > 0.0 {
        let e = (-x).exp();
        e / (1.0 + e)
    } else {
        1.0 / (1.0 + x.exp())
    }
}

/// Width, in decades of distance, of the positional hypothesis's change of separation.
const POSITIONAL_WIDTH_DECADES: f64 = 0.1;

/// A hypothesis's fit.
#[derive(Debug, Clone, PartialEq)]
pub struct HypothesisResult {
    /// Which hypothesis (its name and one-line meaning: [`Hypothesis::name`], `Hypothesis::description`).
    pub hypothesis: Hypothesis,
    /// Fields fixed by the hypothesis, with their values.
    pub fixed: Vec<(Field, f64)>,
    /// Free parameters with their estimates (scenario field names, or the hypothesis's own
    /// parameters: `dprime_near`, `dprime_far`, `log10_d0`, `log10_k_eff`, `broken_fraction`,
    /// `residue`).
    pub estimates: Vec<(String, f64)>,
    /// The free parameters whose estimate sits on an arbitrary search bound (not a physical limit).
    pub on_bound: Vec<String>,
    /// Maximised log-likelihood.
    pub loglik: f64,
    /// Number of free parameters.
    pub k: usize,
    /// AIC.
    pub aic: f64,
    /// AIC − min AIC.
    pub delta_aic: f64,
    /// Akaike weight.
    pub weight: f64,
    /// Deviance.
    pub deviance: f64,
    /// Goodness-of-fit p-value.
    pub gof_p: Option<f64>,
    /// Fitted recall per row of the table.
    pub fitted: Vec<f64>,
}

impl HypothesisResult {
    /// The estimate of a parameter by name.
    pub fn estimate(&self, name: &str) -> Option<f64> {
        self.estimates.iter().find(|(n, _)| n == name).map(|(_, v)| *v)
    }
    /// Whether the hypothesis points to a broken implementation.
    pub(crate) fn is_implementation(&self) -> bool {
        self.hypothesis.is_implementation()
    }
    /// The scenario this hypothesis's fit describes, when it is a plain scenario (its parameters
    /// are scenario fields): `base` with the fixed values and the estimates substituted.
    pub(crate) fn scenario(&self, base: &Scenario) -> Option<Scenario> {
        if self.is_implementation() {
            // A defect is not a scenario, whatever its estimates are named.
            return None;
        }
        let mut s = base.clone();
        for (f, v) in &self.fixed {
            s.set_real(*f, *v).ok()?;
        }
        for (n, v) in &self.estimates {
            if n == OVERDISPERSION {
                // A property of the measurement, not of the scenario.
                continue;
            }
            let f = Field::from_name(n).ok()?;
            s.set_real(f, *v).ok()?;
        }
        s.validate().ok()?;
        Some(s)
    }
}

/// A parameter of a hypothesis.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Param {
    /// A scenario field.
    Field(Field),
    /// Positional: dprime within distance d0 of the query.
    DprimeNear,
    /// Positional: dprime beyond d0.
    DprimeFar,
    /// Positional: log10 of d0 in tokens.
    Log10D0,
    /// Effective-k: log10 of the k the kernel really selects.
    Log10K,
    /// Broken-fraction / length-periodic: the fraction that never selects the needle.
    Broken,
    /// Read-decline: log10 of the context length L50 at which the read rate has halved.
    Log10L50,
    /// Read-decline: the steepness s of the read rate's fall, 1 / (1 + (L/L50)^s).
    ReadSlope,
}

impl Param {
    fn name(self) -> String {
        match self {
            Param::Field(f) => f.name().to_string(),
            Param::DprimeNear => "dprime_near".into(),
            Param::DprimeFar => "dprime_far".into(),
            Param::Log10D0 => "log10_d0".into(),
            Param::Log10K => "log10_k_eff".into(),
            Param::Broken => "broken_fraction".into(),
            Param::Log10L50 => READ_L50.into(),
            Param::ReadSlope => "read_slope".into(),
        }
    }
    /// Whether `v` is a physical limit of the parameter (not an arbitrary search bound).
    fn physical(self, v: f64) -> bool {
        match self {
            Param::Field(f) => f.is_physical_limit(v),
            Param::Broken => true,
            // The steepest fall searched is a step (a context-window ceiling): a limit of the
            // model, not an arbitrary bound.
            Param::ReadSlope => v >= READ_SLOPE_MAX,
            _ => false,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    RandomIndexer,
    Discrimination,
    Spread,
    HardNegatives,
    Positional,
    EffectiveK,
    BrokenFraction,
    ReadFailure,
    LengthPeriodic(u64),
    /// Rows with more candidates than the threshold (the surface's `residue`) select nothing.
    CandidateLimit,
    /// The first k_eff entries by position are selected whatever their scores.
    FirstKUnscored,
    /// The model's own read rate falls with context length: p_read · 1 / (1 + (L/L50)^s).
    ReadDecline,
}

struct Spec {
    hypothesis: Hypothesis,
    kind: Kind,
    params: Vec<Param>,
}

fn specs() -> Vec<Spec> {
    use Param::Field as F;
    vec![
        Spec { hypothesis: Hypothesis::RandomIndexer, kind: Kind::RandomIndexer, params: vec![] },
        Spec { hypothesis: Hypothesis::Discrimination, kind: Kind::Discrimination, params: vec![F(Field::Dprime)] },
        Spec {
            hypothesis: Hypothesis::DiscriminationWithSpread,
            kind: Kind::Spread,
            params: vec![F(Field::Dprime), F(Field::NeedleSd)],
        },
        Spec {
            hypothesis: Hypothesis::HardNegatives,
            kind: Kind::HardNegatives,
            params: vec![F(Field::Dprime), F(Field::HardNegatives), F(Field::HardMean)],
        },
        Spec {
            hypothesis: Hypothesis::Positional,
            kind: Kind::Positional,
            params: vec![Param::DprimeNear, Param::DprimeFar, Param::Log10D0],
        },
        Spec {
            hypothesis: Hypothesis::EffectiveK,
            kind: Kind::EffectiveK,
            params: vec![Param::Log10K, F(Field::Dprime)],
        },
        Spec {
            hypothesis: Hypothesis::BrokenFraction,
            kind: Kind::BrokenFraction,
            params: vec![Param::Broken, F(Field::Dprime)],
        },
        Spec { hypothesis: Hypothesis::FirstKUnscored, kind: Kind::FirstKUnscored, params: vec![] },
        Spec {
            hypothesis: Hypothesis::ReadFailure,
            kind: Kind::ReadFailure,
            params: vec![F(Field::PRead), F(Field::Dprime)],
        },
        Spec {
            hypothesis: Hypothesis::ReadDecline,
            kind: Kind::ReadDecline,
            params: vec![Param::Log10L50, Param::ReadSlope, F(Field::Dprime)],
        },
    ]
}

fn bounds_of(p: Param, user_free: &[FreeParam]) -> Result<(f64, f64), CalibError> {
    Ok(match p {
        Param::Field(f) => match user_free.iter().find(|q| q.field == f) {
            Some(q) => (q.lo, q.hi),
            None => {
                let d = default_param(f).ok_or_else(|| CalibError::Input(format!("{f} cannot be fitted")))?;
                (d.lo, d.hi)
            }
        },
        Param::DprimeNear | Param::DprimeFar => {
            let d = default_param(Field::Dprime)
                .expect("Field::Dprime's spec has fit bounds (a constant of the field table)");
            match user_free.iter().find(|q| q.field == Field::Dprime) {
                Some(q) => (q.lo, q.hi),
                None => (d.lo, d.hi),
            }
        }
        Param::Log10D0 => (1.0, 7.0),
        Param::Log10K => (0.0, 6.0),
        Param::Broken => (0.0, 1.0),
        Param::Log10L50 => (2.0, 7.0),
        Param::ReadSlope => (0.5, READ_SLOPE_MAX),
    })
}

/// The needle's distance from the query in tokens: (1 − depth) · context_len (at least 1).
pub(crate) fn distance_from_query(s: &Scenario) -> f64 {
    ((1.0 - s.depth) * s.context_len as f64).max(1.0)
}

/// Whether one of the needle's covering entries is among the first k_eff entries by position
/// (the `first-k-unscored` defect selects exactly those).
fn first_k_covers(s: &Scenario) -> bool {
    let g = crate::geometry::Geometry::new(s);
    g.needle_entries.iter().any(|e| e.index < g.k_eff)
}

/// The distinct candidate counts of the rows but the largest: the thresholds of
/// `candidate-count-limit` (rows with more candidates select nothing). Empty when all rows have
/// the same count.
fn candidate_thresholds(data: &Dataset, base: &Scenario) -> Vec<u64> {
    let mut n: Vec<u64> = data.rows.iter().filter_map(|r| r.apply(base).ok()).map(|s| s.n_candidates()).collect();
    n.sort_unstable();
    n.dedup();
    n.pop();
    n
}

/// The rows' context lengths modulo c take at least two values (c > 1): `length-periodic`
/// applies. Returns c.
fn periodic_modulus(data: &Dataset, base: &Scenario) -> Option<u64> {
    let mut by_c: std::collections::BTreeMap<u64, std::collections::BTreeSet<u64>> = Default::default();
    for r in &data.rows {
        let c = r.compress_ratio.unwrap_or(base.compress_ratio);
        if c > 1 {
            by_c.entry(c).or_default().insert(r.context_len % c);
        }
    }
    by_c.into_iter().find(|(_, res)| res.len() >= 2).map(|(c, _)| c)
}

/// One hypothesis's likelihood surface.
struct Surface<'a> {
    data: &'a Dataset,
    kind: Kind,
    params: Vec<Param>,
    nuisance: Vec<FreeParam>,
    /// Per distinct row: the base scenario with the row's columns (and the hypothesis's fixed
    /// values) substituted.
    row_base: Vec<Scenario>,
    group_of_row: Vec<usize>,
    model: &'a dyn RecallModel,
    /// For length-periodic: the failing residue.
    residue: u64,
}

impl Surface<'_> {
    fn recall(&self, s: &Scenario) -> Result<f64, CalibError> {
        self.model.recall(s).map_err(CalibError::Model)
    }

    /// The scenario of distinct row `g` under the hypothesis at `theta`, and the fraction of
    /// queries that never select the needle.
    fn row_setup(&self, g: usize, theta: &[f64]) -> Result<(Scenario, f64), CalibError> {
        let mut s = self.row_base[g].clone();
        let np = self.params.len();
        for (p, &v) in self.nuisance.iter().zip(&theta[np..]) {
            set_field(&mut s, p.field, v)?;
        }
        let mut broken = 0.0;
        for (p, &v) in self.params.iter().zip(theta) {
            match p {
                Param::Field(f) => set_field(&mut s, *f, v)?,
                Param::Broken => broken = v,
                Param::Log10K => s.index_topk = (10f64.powf(v).round() as u64).clamp(1, s.n_candidates().max(1)),
                _ => {}
            }
        }
        if self.kind == Kind::Positional {
            let (near, far, l0) = (theta[0], theta[1], theta[2]);
            let x = (distance_from_query(&s).log10() - l0) / POSITIONAL_WIDTH_DECADES;
            let w = 1.0 / (1.0 + (-x).exp());
            set_field(&mut s, Field::Dprime, near + (far - near) * w)?;
        }
        let broken = match self.kind {
            Kind::BrokenFraction => broken,
            Kind::LengthPeriodic(c) if s.context_len % c == self.residue => broken,
            Kind::CandidateLimit if s.n_candidates() > self.residue => 1.0,
            Kind::FirstKUnscored if !first_k_covers(&s) => 1.0,
            _ => 0.0,
        };
        Ok((s, broken))
    }

    fn row_recall(&self, g: usize, theta: &[f64]) -> Result<f64, CalibError> {
        let (s, broken) = self.row_setup(g, theta)?;
        if self.kind == Kind::ReadDecline {
            // Recall is affine in p_read (Geometry::answer_probability), so the row's recall at
            // read rate m·p_read is r(0) + m·(r(p_read) − r(0)): the two ends do not depend on
            // L50 or s and stay in the model's memo while those two move.
            let m = read_factor(s.context_len, theta[0], theta[1]);
            let r1 = self.recall(&s)?;
            if m >= 1.0 {
                return Ok(r1);
            }
            let mut unread = s.clone();
            set_field(&mut unread, Field::PRead, 0.0)?;
            let r0 = self.recall(&unread)?;
            return Ok(r0 + m * (r1 - r0));
        }
        if self.kind == Kind::FirstKUnscored && broken == 0.0 {
            // Selected whatever the scores: the answer as when every selecting layer attends.
            let geo = crate::geometry::Geometry::new(&s);
            return Ok(geo.answer_probability(s.p_read, s.p_guess, 1.0));
        }
        // A row where every query is broken is the never-selected recall alone ((1 − 1)·r + r0
        // is r0 exactly): its modelled recall is not evaluated.
        let r = if broken < 1.0 { self.recall(&s)? } else { 0.0 };
        if broken > 0.0 {
            let mut never = s.clone();
            set_field(&mut never, Field::Dprime, NEVER_SELECTED_DPRIME)?;
            let r0 = self.recall(&never)?;
            return Ok((1.0 - broken) * r + broken * r0);
        }
        Ok(r)
    }

    /// Selection data: P(exactly m layers select) of distinct row `g` (a broken query selects
    /// in no layer).
    fn row_pmf(&self, g: usize, theta: &[f64]) -> Result<Vec<f64>, CalibError> {
        let (s, broken) = self.row_setup(g, theta)?;
        if self.kind == Kind::FirstKUnscored && broken == 0.0 {
            // Every layer selects it.
            let n = s.selecting_layers() as usize;
            let mut pmf = vec![0.0; n + 1];
            pmf[n] = 1.0;
            return Ok(pmf);
        }
        let n = s.selecting_layers() as usize;
        // As in `row_recall`: a row broken for every query is the never-selected pmf alone.
        let mut pmf =
            if broken < 1.0 { self.model.layer_count_pmf(&s).map_err(CalibError::Model)? } else { vec![0.0; n + 1] };
        if broken > 0.0 {
            let mut never = s.clone();
            set_field(&mut never, Field::Dprime, NEVER_SELECTED_DPRIME)?;
            let p0 = self.model.layer_count_pmf(&never).map_err(CalibError::Model)?;
            pmf.iter_mut().zip(&p0).for_each(|(p, q)| *p = (1.0 - broken) * *p + broken * q);
        }
        Ok(pmf)
    }

    /// `one` at each distinct row, evaluated once per result the model tells apart (with the
    /// row's broken fraction: [`evaluate_distinct`]).
    fn per_row<T: Send + Clone>(
        &self,
        theta: &[f64],
        one: impl Fn(usize) -> Result<T, CalibError> + Sync,
    ) -> Result<Vec<T>, CalibError> {
        let key = |g: usize| -> Result<String, CalibError> {
            let (s, broken) = self.row_setup(g, theta)?;
            Ok(format!("{}|broken {broken:?}", self.model.evaluation_key(&s)))
        };
        evaluate_distinct(self.model, &self.row_base, key, one)
    }

    fn fitted(&self, theta: &[f64]) -> Result<Vec<f64>, CalibError> {
        let distinct = self.per_row(theta, |g| self.row_recall(g, theta))?;
        Ok(self.group_of_row.iter().map(|&g| distinct[g]).collect())
    }

    fn loglik(&self, theta: &[f64]) -> Result<f64, CalibError> {
        if self.data.is_selection() {
            let pmfs: Vec<Vec<f64>> = self.per_row(theta, |g| self.row_pmf(g, theta))?;
            return Ok(self
                .data
                .rows
                .iter()
                .zip(&self.group_of_row)
                .map(|(r, &g)| super::likelihood::pattern_loglik(r.layer_counts.as_deref().unwrap_or(&[]), &pmfs[g]))
                .sum());
        }
        let p = self.fitted(theta)?;
        // Rows with needle ids: the overdispersion is the last coordinate (after the nuisance).
        let rho = if self.data.has_needles() { theta.last().copied().unwrap_or(0.0) } else { 0.0 };
        Ok(self
            .data
            .rows
            .iter()
            .zip(&p)
            .map(|(r, &p)| {
                if r.needle.is_some() {
                    super::likelihood::betabinom_loglik(r.hits, r.trials, p, rho)
                } else {
                    binom_loglik(r.hits, r.trials, p)
                }
            })
            .sum())
    }
}

/// Log-likelihood within which [`least_separation`] counts a point as fitting as well as the
/// fit: the fit's own tolerance (the polish's `ftol`).
const SAME_FIT_LOGLIK: f64 = 1e-6;

/// Moves `hard-negatives`' fit down its ridge — dprime (coordinate 0) and hard_mean (coordinate
/// `mean`) together, their gap held — to the least dprime that fits as well (within
/// [`SAME_FIT_LOGLIK`] of the better of the fit and the ridge's far end, where dprime or
/// hard_mean reaches its box); returns it and its log-likelihood. Once the needle is far above
/// the regular distractors none of them outranks it, and only the gap to the hard negatives
/// matters: the likelihood is flat along the ridge from there on (to 1e-12 on quest-16's probe
/// table from dprime 10.6 to 13.6), and where a fit stopped on that plateau is an accident of
/// its path (there: 12.6, one start's coarse pass 5.4). The data say only that the separation
/// is at least so much, and the least value is the one they support: a verdict that judged the
/// hypothesis by a dprime beyond what an indexer reaches would judge the optimiser's path.
/// Bisection between the ridge's lower end in the box and the fit or the far end (≤ 17
/// evaluations: to 1e-3, the estimates' printed precision, over a box of width ≤ 32).
fn least_separation(
    surface: &Surface,
    theta: Vec<f64>,
    ll: f64,
    mean: usize,
    (lo, hi): (&[f64], &[f64]),
) -> Result<(Vec<f64>, f64), CalibError> {
    let gap = theta[mean] - theta[0];
    let at = |d: f64| -> Result<(Vec<f64>, f64), CalibError> {
        let mut x = theta.clone();
        x[0] = d;
        x[mean] = d + gap;
        let l = surface.loglik(&x)?;
        Ok((x, l))
    };
    // The ridge within the box: dprime in its box, hard_mean = dprime + gap in its own.
    let (d_lo, d_hi) = (lo[0].max(lo[mean] - gap), hi[0].min(hi[mean] - gap));
    let mut b = (theta.clone(), ll);
    if d_hi > theta[0] {
        let end = at(d_hi)?;
        if end.1 > ll {
            b = end;
        }
    }
    let reference = b.1;
    let as_good = |l: f64| l >= reference - SAME_FIT_LOGLIK;
    if !(d_lo < b.0[0]) {
        return Ok(b);
    }
    let lowest = at(d_lo)?;
    if as_good(lowest.1) {
        return Ok(lowest);
    }
    // Invariant: `a` fits worse, `b` as well.
    let mut a = d_lo;
    while b.0[0] - a > 1e-3 {
        let mid = 0.5 * (a + b.0[0]);
        let m = at(mid)?;
        if as_good(m.1) {
            b = m;
        } else {
            a = mid;
        }
    }
    Ok(b)
}

/// The base scenario of every distinct row, with `fixed` substituted.
fn row_bases(
    data: &Dataset,
    base: &Scenario,
    fixed: &[(Field, f64)],
) -> Result<(Vec<Scenario>, Vec<usize>), CalibError> {
    let groups = data.groups();
    let mut out = Vec::with_capacity(groups.len());
    for &i in &groups.first_row {
        let r = &data.rows[i];
        let mut s = r
            .apply(base)
            .map_err(|e| CalibError::Input(format!("{}: row {} (line {}): {e}", data.source, i + 1, r.line)))?;
        if let Some(c) = &r.layer_counts {
            super::likelihood::selection_scenario(&mut s, c.len() - 1)?;
        }
        for (f, v) in fixed {
            set_field(&mut s, *f, *v)?;
        }
        out.push(s);
    }
    Ok((out, groups.of_row))
}

/// Fits one surface: (theta, loglik).
fn fit_surface(surface: &Surface, lo: &[f64], hi: &[f64], starts: &[Vec<f64>]) -> Result<(Vec<f64>, f64), CalibError> {
    if lo.is_empty() {
        return Ok((vec![], surface.loglik(&[])?));
    }
    let err: std::cell::RefCell<Option<CalibError>> = std::cell::RefCell::new(None);
    let mut f = |x: &[f64]| match surface.loglik(x) {
        Ok(l) => -l,
        Err(e) => {
            err.borrow_mut().get_or_insert(e);
            f64::INFINITY
        }
    };
    let m = minimize_bounded(&mut f, lo, hi, starts, 2, NmOptions { ftol: 1e-6, xtol: 1e-4, max_evals: 800 });
    if let Some(e) = err.borrow_mut().take() {
        return Err(e);
    }
    if !m.fx.is_finite() {
        return Err(CalibError::Fit("the likelihood is not finite anywhere in the search box".into()));
    }
    Ok((m.x, -m.fx))
}

/// Starts of `read-decline` at a step (s = 20) between each pair of neighbouring measured
/// lengths where the pooled recall falls, the three largest falls first (`start`'s other values).
fn decline_starts(data: &Dataset, start: &[f64]) -> Vec<Vec<f64>> {
    let mut by_len: std::collections::BTreeMap<u64, (u64, u64)> = Default::default();
    for r in &data.rows {
        let e = by_len.entry(r.context_len).or_default();
        e.0 += r.hits;
        e.1 += r.trials;
    }
    let pooled: Vec<(u64, f64)> = by_len.into_iter().map(|(l, (h, n))| (l, h as f64 / n.max(1) as f64)).collect();
    let mut falls: Vec<(f64, f64)> = pooled
        .windows(2)
        .filter(|w| w[1].1 < w[0].1)
        .map(|w| (w[0].1 - w[1].1, 0.5 * ((w[0].0 as f64).log10() + (w[1].0 as f64).log10())))
        .collect();
    falls.sort_by(|a, b| b.0.total_cmp(&a.0));
    falls
        .into_iter()
        .take(3)
        .map(|(_, mid)| {
            let mut x = start.to_vec();
            x[0] = mid.clamp(2.0, 7.0);
            x[1] = 20.0;
            x
        })
        .collect()
}

/// `spec`'s parameter vector at which it predicts what the fitted `discrimination` does (its
/// dprime and nuisance estimates; no hard negatives, no broken queries, p_read, needle_sd and
/// k as `base` has them, dprime_near = dprime_far; `start`'s value where a parameter does not
/// matter there, d0), or `None` for a hypothesis that does not contain discrimination.
fn nested_start(
    spec: &Spec,
    disc: &HypothesisResult,
    base: &Scenario,
    start: &[f64],
    lo: &[f64],
    hi: &[f64],
) -> Option<Vec<f64>> {
    if matches!(spec.kind, Kind::RandomIndexer | Kind::FirstKUnscored | Kind::Discrimination) {
        return None;
    }
    let dprime = disc.estimate(Field::Dprime.name())?;
    // Discrimination's parameter vector: dprime, then the nuisance parameters and the
    // overdispersion, in the order every hypothesis shares.
    let shared = disc.estimates.iter().skip(1).map(|(_, v)| *v);
    let own = spec.params.iter().enumerate().map(|(i, p)| match p {
        Param::Field(Field::Dprime) | Param::DprimeNear | Param::DprimeFar => dprime,
        Param::Field(f) => base.number(*f).unwrap_or(start[i]),
        Param::Log10K => (base.index_topk.max(1) as f64).log10(),
        Param::Log10D0 | Param::ReadSlope => start[i],
        Param::Broken => 0.0,
        // L50 beyond every length: the read rate as given at every row.
        Param::Log10L50 => hi[i],
    });
    let x: Vec<f64> = own.chain(shared).zip(lo.iter().zip(hi)).map(|(v, (a, b))| v.clamp(*a, *b)).collect();
    (x.len() == start.len()).then_some(x)
}

/// The recall a fitted hypothesis predicts for every row of `cells` (which need no hits: only
/// their geometry is used), for planning what to measure next.
pub(crate) fn hypothesis_recall(
    h: &HypothesisResult,
    cells: &Dataset,
    base: &Scenario,
    user_free: &[FreeParam],
    model: &dyn RecallModel,
) -> Result<Vec<f64>, CalibError> {
    let mut nuisance: Vec<FreeParam> =
        user_free.iter().filter(|p| !HYPOTHESIS_FIELDS.contains(&p.field)).cloned().collect();
    // A hypothesis fitted on selection data carries layer_corr (see compare_hypotheses).
    if h.estimates.iter().any(|(n, _)| n == Field::LayerCorr.name())
        && !nuisance.iter().any(|p| p.field == Field::LayerCorr)
    {
        nuisance.extend(default_param(Field::LayerCorr));
    }
    let (kind, params) = match h.hypothesis {
        Hypothesis::LengthPeriodic => {
            let c = cells.rows.iter().find_map(|r| r.compress_ratio).unwrap_or(base.compress_ratio).max(1);
            (Kind::LengthPeriodic(c), vec![Param::Broken, Param::Field(Field::Dprime)])
        }
        Hypothesis::CandidateCountLimit => (Kind::CandidateLimit, vec![Param::Field(Field::Dprime)]),
        other => {
            let spec = specs()
                .into_iter()
                .find(|s| s.hypothesis == other)
                .expect("specs() lists every hypothesis but the two conditional ones, matched above");
            (spec.kind, spec.params)
        }
    };
    let theta: Vec<f64> =
        h.estimates.iter().filter(|(n, _)| n != "residue" && n != CANDIDATE_LIMIT).map(|(_, v)| *v).collect();
    let residue = h.estimate("residue").or(h.estimate(CANDIDATE_LIMIT)).unwrap_or(0.0) as u64;
    let (row_base, group_of_row) = row_bases(cells, base, &h.fixed)?;
    let surface = Surface { data: cells, kind, params, nuisance, row_base, group_of_row, model, residue };
    surface.fitted(&theta)
}

/// Fits every named hypothesis (plus `nuisance` parameters, free in all) and ranks them by AIC.
pub fn compare_hypotheses(
    data: &Dataset,
    base: &Scenario,
    user_free: &[FreeParam],
    model: &dyn RecallModel,
) -> Result<Vec<HypothesisResult>, CalibError> {
    compare(data, base, user_free, model, false, None)
}

/// [`compare_hypotheses`]; with `full_scan`, `candidate-count-limit` fits every threshold
/// instead of only those its likelihood bound leaves in play ([`limit_bounds`]: the same fit);
/// with `only`, that hypothesis alone (the tests compare the two scans).
fn compare(
    data: &Dataset,
    base: &Scenario,
    user_free: &[FreeParam],
    model: &dyn RecallModel,
    full_scan: bool,
    only: Option<Hypothesis>,
) -> Result<Vec<HypothesisResult>, CalibError> {
    let mut nuisance: Vec<FreeParam> =
        user_free.iter().filter(|p| !HYPOTHESIS_FIELDS.contains(&p.field)).cloned().collect();
    let shared = base.selecting_layers() > 1 && model.shares_across_layers();
    if (data.is_selection() || shared) && !nuisance.iter().any(|p| p.field == Field::LayerCorr) {
        // Per-layer patterns measure how the layers agree: layer_corr is free in every
        // hypothesis (without it, a shared difficulty looks like broken queries). With several
        // selecting layers (a preset's stack) recall alone depends on it as much as on dprime:
        // 21 independent layers retrieve what one layer misses, 21 that share the needle's
        // difficulty do not. Fixing it at a guess would decide the call; it is fitted instead.
        nuisance.extend(default_param(Field::LayerCorr));
    }
    let mut all = specs();
    if data.is_selection() {
        // Selections are observed directly: whether a selected needle is read does not enter.
        all.retain(|sp| !matches!(sp.kind, Kind::ReadFailure | Kind::ReadDecline));
    }
    if let Some(c) = periodic_modulus(data, base) {
        all.push(Spec {
            hypothesis: Hypothesis::LengthPeriodic,
            kind: Kind::LengthPeriodic(c),
            params: vec![Param::Broken, Param::Field(Field::Dprime)],
        });
    }
    let thresholds = candidate_thresholds(data, base);
    if !thresholds.is_empty() {
        all.push(Spec {
            hypothesis: Hypothesis::CandidateCountLimit,
            kind: Kind::CandidateLimit,
            params: vec![Param::Field(Field::Dprime)],
        });
    }
    all.retain(|sp| only.is_none_or(|h| h == sp.hypothesis));
    // The hypotheses are fitted concurrently (each fit is a deterministic function of the table,
    // and the memo and T_j's tables return the same values whoever computes them first): a
    // fit's distinct rows are few (a table's lengths), too few alone to keep both cores busy.
    let fit_one = |spec: Spec, nested: Option<&HypothesisResult>| -> Result<HypothesisResult, CalibError> {
        let fixed: Vec<(Field, f64)> = match spec.kind {
            Kind::RandomIndexer => vec![(Field::Dprime, 0.0)],
            _ => vec![],
        };
        let (row_base, group_of_row) = row_bases(data, base, &fixed)?;
        let mut lo = Vec::new();
        let mut hi = Vec::new();
        for p in &spec.params {
            let (mut a, b) = bounds_of(*p, user_free)?;
            // A candidate-count limit is one defect: a working indexer (dprime ≥ 0) up to N0.
            // Below 0 it would be two (a cliff and an anti-selecting indexer), and a table fitted
            // as well by the first alone would be credited to the pair.
            if matches!(spec.kind, Kind::CandidateLimit) && *p == Param::Field(Field::Dprime) {
                a = a.max(0.0).min(b);
            }
            lo.push(a);
            hi.push(b);
        }
        for p in &nuisance {
            lo.push(p.lo);
            hi.push(p.hi);
        }
        let od = data.has_needles();
        if od {
            lo.push(0.0);
            hi.push(super::likelihood::MAX_OVERDISPERSION);
        }
        let start: Vec<f64> = spec
            .params
            .iter()
            .map(|p| match p {
                Param::Field(f) => base.number(*f).unwrap_or(0.0),
                Param::DprimeNear | Param::DprimeFar => base.dprime,
                Param::Log10D0 => (base.context_len.max(2) as f64 / 2.0).log10(),
                Param::Log10K => (base.index_topk.max(1) as f64).log10(),
                Param::Broken => 0.1,
                Param::Log10L50 => (base.context_len.max(2) as f64).log10(),
                Param::ReadSlope => 4.0,
            })
            .chain(nuisance.iter().map(|p| base.number(p.field).unwrap_or(p.lo)))
            .chain(od.then_some(super::likelihood::START_OVERDISPERSION))
            .zip(lo.iter().zip(&hi))
            .map(|(v, (a, b))| v.clamp(*a, *b))
            .collect();
        // The discrimination fit as a start: every hypothesis but the random indexer's and the
        // unscored kernel's contains discrimination (no hard negatives, no broken queries,
        // p_read and needle_sd as given, dprime_near = dprime_far, k_eff = k), so started
        // there its fit is at least as good (a fit that missed it would rank a hypothesis
        // below one of its own special cases).
        let mut starts: Vec<Vec<f64>> = std::iter::once(start.clone())
            .chain(nested.and_then(|h| nested_start(&spec, h, base, &start, &lo, &hi)))
            .collect();
        if spec.kind == Kind::ReadDecline {
            // A steep fall's likelihood is flat between two measured lengths: the simplex is
            // also started at a step between each pair of neighbouring lengths where recall falls.
            starts.extend(decline_starts(data, &start));
        }
        let residues: Vec<u64> = match spec.kind {
            Kind::LengthPeriodic(c) => {
                let mut r: Vec<u64> = data.rows.iter().map(|o| o.context_len % c).collect();
                r.sort_unstable();
                r.dedup();
                r
            }
            Kind::CandidateLimit => thresholds.clone(),
            _ => vec![0],
        };
        // One fit per residue (a candidate-count limit has one per distinct N), concurrently;
        // the first of the best is kept, as a sequential scan would.
        let fit_at = |res: u64| {
            let surface = Surface {
                data,
                kind: spec.kind,
                params: spec.params.clone(),
                nuisance: nuisance.clone(),
                row_base: row_base.clone(),
                group_of_row: group_of_row.clone(),
                model,
                residue: res,
            };
            fit_surface(&surface, &lo, &hi, &starts).map(|(theta, ll)| (theta, ll, res))
        };
        let bounds = match spec.kind {
            Kind::CandidateLimit if !full_scan => {
                limit_bounds(data, &row_base, &group_of_row, &residues, &nuisance, model)?
            }
            _ => None,
        };
        let fits: Vec<(Vec<f64>, f64, u64)> = match bounds {
            Some(bounds) => branch_and_bound(&residues, &bounds, fit_at)?,
            None => residues.par_iter().map(|&res| fit_at(res)).collect::<Result<_, _>>()?,
        };
        let mut best: Option<(Vec<f64>, f64, u64)> = None;
        for fit in fits {
            if best.as_ref().is_none_or(|b| fit.1 > b.1) {
                best = Some(fit);
            }
        }
        // Every kind has a residue (0; two or more for length-periodic; the thresholds, not
        // empty, for a candidate limit), and branch and bound fits its first batch whatever the bounds.
        let (theta, ll, residue) = best.expect("at least one residue is fitted");
        let surface = Surface {
            data,
            kind: spec.kind,
            params: spec.params.clone(),
            nuisance: nuisance.clone(),
            row_base,
            group_of_row,
            model,
            residue,
        };
        let mean = spec.params.iter().position(|p| *p == Param::Field(Field::HardMean));
        let (theta, ll) = match mean {
            Some(mean) if spec.kind == Kind::HardNegatives && spec.params[0] == Param::Field(Field::Dprime) => {
                least_separation(&surface, theta, ll, mean, (&lo, &hi))?
            }
            _ => (theta, ll),
        };
        let fitted = surface.fitted(&theta)?;
        let deviance: f64 = if data.is_selection() {
            (2.0 * (super::likelihood::saturated_pattern_loglik(data) - ll)).max(0.0)
        } else {
            data.rows.iter().zip(&fitted).map(|(r, &p)| unit_deviance(r.hits, r.trials, p)).sum()
        };
        let periodic = matches!(spec.kind, Kind::LengthPeriodic(_));
        let limited = spec.kind == Kind::CandidateLimit;
        let k = theta.len() + usize::from(periodic || limited);
        let mut estimates: Vec<(String, f64)> = spec
            .params
            .iter()
            .map(|p| p.name())
            .chain(nuisance.iter().map(|p| p.field.name().to_string()))
            .chain(od.then(|| OVERDISPERSION.to_string()))
            .zip(theta.iter().copied())
            .collect();
        let mut on_bound = Vec::new();
        let all_params: Vec<Param> =
            spec.params.iter().copied().chain(nuisance.iter().map(|p| Param::Field(p.field))).collect();
        for (j, p) in all_params.iter().enumerate() {
            let eps = 1e-6 * (hi[j] - lo[j]);
            let v = theta[j];
            // Within eps of a bound that is a physical limit (layer_corr 0, p_read 1) is that
            // limit, not a search bound, whatever the last digits the simplex stopped at.
            let at_lo = (v - lo[j]).abs() <= eps;
            let at_hi = (hi[j] - v).abs() <= eps;
            if (at_lo && !p.physical(lo[j])) || (at_hi && !p.physical(hi[j])) {
                on_bound.push(p.name());
            }
        }
        if periodic {
            estimates.push(("residue".into(), residue as f64));
        }
        if limited {
            estimates.push((CANDIDATE_LIMIT.into(), residue as f64));
        }
        let df = super::likelihood::observations(data) - k as i64;
        Ok(HypothesisResult {
            hypothesis: spec.hypothesis,
            fixed,
            estimates,
            on_bound,
            loglik: ll,
            k,
            aic: -2.0 * ll + 2.0 * k as f64,
            delta_aic: 0.0,
            weight: 0.0,
            deviance,
            gof_p: chi2_sf(deviance, df),
            fitted,
        })
    };
    // Discrimination first: the others start from its fit as well.
    let first = all.iter().position(|sp| sp.kind == Kind::Discrimination);
    let nested = first.map(|i| fit_one(all.remove(i), None)).transpose()?;
    let mut out: Vec<HypothesisResult> =
        all.into_par_iter().map(|sp| fit_one(sp, nested.as_ref())).collect::<Result<_, _>>()?;
    if let (Some(i), Some(h)) = (first, nested) {
        out.insert(i, h);
    }
    akaike_weights(&mut out);
    prefer_plausible(&mut out);
    Ok(out)
}

/// The recall the engine promises (docs/model.md): a computed never-selected recall is within
/// this of the model's, which [`limit_bounds`] allows for.
const ENGINE_RECALL_TOLERANCE: f64 = 1e-6;

/// Upper bounds on `candidate-count-limit`'s maximised log-likelihood at each threshold of
/// `thresholds`, or `None` where no bound is proved (the caller then fits every threshold).
///
/// At threshold N0 a row with at most N0 candidates has the modelled recall and one with more
/// has r0, the never-selected recall (dprime at [`NEVER_SELECTED_DPRIME`]). A row of the first
/// kind contributes at most its saturated log-likelihood (the binomial's at hits/trials); one
/// of the second at most the largest over the values r0 takes, an interval [r0(ρ_hi),
/// r0(ρ_lo)] over the box of layer_corr: with every needle token's score Normal(dprime,
/// needle_sd²) and equicorrelated (ρ) across tokens and layers, whatever ρ, the event that no
/// layer selects the needle is a lower orthant of those scores (given the distractors,
/// independent of them), whose probability does not decrease in ρ (Slepian's inequality), so
/// P(some layer selects) and with it r0 (affine in it) are monotone in ρ. The proof needs: the
/// readout `any`; each needle entry a monotone function of one needle token (no pooling, or one
/// needle token per entry: pooling several makes the entry's variance depend on ρ); layer_corr
/// the only free parameter besides dprime; binomial rows (no needle ids: a beta-binomial row
/// has no such interval bound); and the exact engine's values (within
/// [`ENGINE_RECALL_TOLERANCE`], by which the interval is widened).
fn limit_bounds(
    data: &Dataset,
    row_base: &[Scenario],
    group_of_row: &[usize],
    thresholds: &[u64],
    nuisance: &[FreeParam],
    model: &dyn RecallModel,
) -> Result<Option<Vec<f64>>, CalibError> {
    use crate::scenario::{Pooling, Readout};
    if data.is_selection() || data.has_needles() || nuisance.iter().any(|p| p.field != Field::LayerCorr) {
        return Ok(None);
    }
    let one_token = |s: &Scenario| {
        s.pooling == Pooling::None
            || crate::geometry::Geometry::new(s).needle_entries.iter().all(|e| e.needle_tokens <= 1)
    };
    if !row_base.iter().all(|s| s.readout == Readout::Any && one_token(s)) {
        return Ok(None);
    }
    // Per distinct row: its candidate count and the range of r0 over the box.
    let ends: Vec<f64> = match nuisance.first() {
        Some(p) => vec![p.lo, p.hi],
        None => vec![f64::NAN],
    };
    let mut rows = Vec::with_capacity(row_base.len());
    for s in row_base {
        let (mut lo, mut hi) = (f64::INFINITY, f64::NEG_INFINITY);
        for &rho in &ends {
            let mut never = s.clone();
            if !rho.is_nan() {
                set_field(&mut never, Field::LayerCorr, rho)?;
            }
            set_field(&mut never, Field::Dprime, NEVER_SELECTED_DPRIME)?;
            if !model.is_exact(&never) {
                return Ok(None);
            }
            let r0 = model.recall(&never).map_err(CalibError::Model)?;
            if !(0.0..=1.0).contains(&r0) {
                return Ok(None);
            }
            lo = lo.min(r0);
            hi = hi.max(r0);
        }
        rows.push((s.n_candidates(), lo - ENGINE_RECALL_TOLERANCE, hi + ENGINE_RECALL_TOLERANCE));
    }
    Ok(Some(
        thresholds
            .iter()
            .map(|&n0| {
                data.rows
                    .iter()
                    .zip(group_of_row)
                    .map(|(r, &g)| {
                        let (n, lo, hi) = rows[g];
                        // The binomial log-likelihood is unimodal in p, largest at hits/trials (the
                        // saturated model's).
                        let p = if n <= n0 { r.observed() } else { r.observed().clamp(lo.max(0.0), hi.min(1.0)) };
                        binom_loglik(r.hits, r.trials, p)
                    })
                    .sum()
            })
            .collect(),
    ))
}

/// The fits at the thresholds whose bound can still beat the best fit found: in order of
/// decreasing bound, a batch (one per thread) at a time, until the next bound is below the best
/// log-likelihood fitted. A threshold left out has a fit no better than its bound, below one
/// fitted, so the best of these fits (the first of the best in threshold order) is the full
/// scan's.
fn branch_and_bound(
    thresholds: &[u64],
    bounds: &[f64],
    fit_at: impl Fn(u64) -> Result<(Vec<f64>, f64, u64), CalibError> + Sync,
) -> Result<Vec<(Vec<f64>, f64, u64)>, CalibError> {
    let mut order: Vec<usize> = (0..thresholds.len()).collect();
    // Stable: equal bounds keep threshold order.
    order.sort_by(|&a, &b| bounds[b].total_cmp(&bounds[a]));
    let batch = rayon::current_num_threads().max(1);
    type Fit = (Vec<f64>, f64, u64);
    let mut fitted: Vec<(usize, Fit)> = Vec::new();
    let mut best = f64::NEG_INFINITY;
    let mut at = 0;
    while at < order.len() {
        let next: Vec<usize> = order[at..].iter().copied().take(batch).take_while(|&i| !(bounds[i] < best)).collect();
        if next.is_empty() {
            break;
        }
        at += next.len();
        let fits: Vec<(Vec<f64>, f64, u64)> =
            next.par_iter().map(|&i| fit_at(thresholds[i])).collect::<Result<_, _>>()?;
        for (i, fit) in next.into_iter().zip(fits) {
            best = best.max(fit.1);
            fitted.push((i, fit));
        }
    }
    fitted.sort_by_key(|f| f.0);
    Ok(fitted.into_iter().map(|f| f.1).collect())
}

/// ΔAIC within which hypotheses are equally supported by the data (Burnham & Anderson's
/// "substantial support"): among them the order follows plausibility, not the last digits of AIC.
pub(crate) const AIC_TIE: f64 = 2.0;

/// Whether a fit's estimates are values the data could come from: none on a search bound, and no
/// separation below 0 (an indexer ranking the needle below a typical distractor is a defect of
/// its own, not the hypothesis as stated).
fn plausible(h: &HypothesisResult) -> bool {
    h.on_bound.is_empty() && h.estimates.iter().filter(|(n, _)| n.starts_with("dprime")).all(|(_, v)| *v >= 0.0)
}

/// Orders hypotheses by AIC, except that among those within [`AIC_TIE`] of the lowest the
/// plausible fits ([`plausible`]) come first, each group in AIC order: on a table that several
/// hypotheses fit alike (a perfect-then-zero report is fitted exactly by a candidate-count limit
/// and by a needle of no score noise at a median distractor's score), the preferred hypothesis is
/// the one that needs no parameter beyond what an indexer can have.
pub(crate) fn prefer_plausible(h: &mut [HypothesisResult]) {
    h.sort_by(|a, b| a.aic.total_cmp(&b.aic));
    let Some(min) = h.first().map(|x| x.aic) else { return };
    // Δ ≤ 2 (a rounding's worth over, for fits that are exact: two perfect fits whose parameter
    // counts differ by one differ by exactly 2).
    let tied = h.iter().take_while(|x| x.aic <= min + AIC_TIE + 1e-9).count();
    h[..tied].sort_by_key(|x| !plausible(x));
}

/// The hypothesis an option names (one clear error listing the names otherwise).
pub fn check_name(name: &str) -> Result<Hypothesis, CalibError> {
    Hypothesis::from_name(name).ok_or_else(|| {
        let known: Vec<&str> = Hypothesis::ALL.iter().map(|h| h.name()).collect();
        CalibError::Input(format!("hypothesis `{name}`: unknown (known: {})", known.join(", ")))
    })
}

/// Fills ΔAIC and the Akaike weights exp(−Δ/2) / Σ exp(−Δ/2).
pub(crate) fn akaike_weights(h: &mut [HypothesisResult]) {
    let min = h.iter().map(|x| x.aic).fold(f64::INFINITY, f64::min);
    let total: f64 = h.iter().map(|x| (-(x.aic - min) / 2.0).exp()).sum();
    for x in h.iter_mut() {
        x.delta_aic = x.aic - min;
        x.weight = (-(x.delta_aic) / 2.0).exp() / total;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::calibrate::cache::CachedModel;
    use crate::engine::{EngineChoice, EngineModel};
    use crate::measured::Observation;

    /// One row per context length at depth 0.5, k 512, 10 trials.
    fn table(cells: &[(u64, u64)]) -> Dataset {
        let rows = cells
            .iter()
            .enumerate()
            .map(|(i, &(l, h))| Observation::cell(l, 512, Some(0.5), 10, h, i as u64 + 2))
            .collect();
        Dataset::of_rows("constructed", rows)
    }

    /// A hypothesis that contains discrimination (no hard negatives, no broken queries, p_read
    /// and needle_sd as given, dprime_near = dprime_far, k_eff = k) never fits worse than it:
    /// each starts from discrimination's fit. Before that start, `hard-negatives` fitted the
    /// 30-length table 0.17 log-likelihood units worse than discrimination.
    #[test]
    fn no_hypothesis_fits_worse_than_the_discrimination_it_contains() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
        let tables = [
            ("benches/data/lengths30_v4_flash_vllm_fp8.csv", "deepseek-v4-flash-vllm-fp8"),
            ("experiments/dsv4_seed_observations.csv", "deepseek-v4-flash-sglang"),
        ];
        let free = vec![default_param(Field::LayerCorr).unwrap()];
        for (path, preset) in tables {
            let data = crate::measured::load_csv(&root.join(path)).unwrap();
            let base = Scenario::preset(preset).unwrap();
            let engine = EngineModel::new(EngineChoice::Analytic, 1000, 1);
            let model = CachedModel::new(&engine);
            let h = compare(&data, &base, &free, &model, false, None).unwrap();
            let disc = h.iter().find(|x| x.hypothesis == Hypothesis::Discrimination).unwrap().loglik;
            let mut checked = 0;
            for x in &h {
                use Hypothesis::*;
                if [RandomIndexer, FirstKUnscored, CandidateCountLimit, Discrimination].contains(&x.hypothesis) {
                    continue;
                }
                assert!(x.loglik >= disc - 1e-9, "{path}: {} {} < discrimination {disc}", x.hypothesis, x.loglik);
                checked += 1;
            }
            assert!(checked >= 6, "{path}: {checked} hypotheses checked");
        }
    }

    /// A recall with hard-negatives' plateau: below dprime 6 the regular distractors outrank the
    /// needle half the time, from 6 on never (the likelihood is the same at every dprime ≥ 6 for
    /// a fixed gap hard_mean − dprime), and it is lost to a hard negative with probability
    /// hard_negatives · (1 − Φ(dprime − hard_mean)^(L/4000)) (one of the L/4000 blocks' hard
    /// negatives outranks it: the hard fraction is the limit, the gap sets the approach to it).
    fn plateau_recall(s: &Scenario) -> f64 {
        let reach = if s.dprime >= 6.0 { 1.0 } else { 0.5 };
        let stays = crate::stats::norm_cdf(s.dprime - s.hard_mean).powf(s.context_len as f64 / 4000.0);
        reach * (1.0 - s.hard_negatives * (1.0 - stays))
    }

    /// On a likelihood flat in dprime from 6 on (at a fixed gap hard_mean − dprime),
    /// `hard-negatives` reports the least dprime that fits as well — 6, to the bisection's 1e-3 —
    /// from starts at dprime 3 and 13 alike, its log-likelihood the plateau's, and 0.01 below it
    /// the fit is worse. Before, the fit stopped wherever its path met the plateau (12.6 on a
    /// Quest probe table, judged beyond what an indexer reaches).
    #[test]
    fn hard_negatives_reports_the_least_separation_that_fits_as_well() {
        use crate::engine::FnModel;
        let model = FnModel(plateau_recall as fn(&Scenario) -> f64, "plateau (unit test)");
        let truth = Scenario {
            dprime: 12.0,
            hard_negatives: 0.3,
            hard_mean: 12.8,
            ..Scenario::preset("deepseek-v4-flash").unwrap().one_layer()
        };
        // Expected hits of 40 trials at eight lengths (no sampling).
        let rows = (0..8u64)
            .map(|i| {
                let l = 4000 * (i + 1);
                let p = plateau_recall(&Scenario { context_len: l, ..truth.clone() });
                Observation::cell(l, 512, Some(0.5), 40, (40.0 * p).round() as u64, i + 2)
            })
            .collect();
        let data = Dataset::of_rows("plateau", rows);
        // The log-likelihood at dprime d on the fit's ridge (its gap and hard fraction).
        let loglik = |d: f64, est: &HypothesisResult| -> f64 {
            let s = Scenario {
                dprime: d,
                hard_negatives: est.estimate("hard_negatives").unwrap(),
                hard_mean: est.estimate("hard_mean").unwrap() - est.estimate("dprime").unwrap() + d,
                ..truth.clone()
            };
            data.rows
                .iter()
                .map(|r| {
                    binom_loglik(
                        r.hits,
                        r.trials,
                        plateau_recall(&Scenario { context_len: r.context_len, ..s.clone() }),
                    )
                })
                .sum()
        };
        for start in [3.0, 13.0] {
            let base = Scenario { dprime: start, hard_mean: start + 1.0, ..truth.clone() };
            let h = compare(&data, &base, &[], &model, false, Some(Hypothesis::HardNegatives)).unwrap();
            let hn = h.into_iter().find(|x| x.hypothesis == Hypothesis::HardNegatives).unwrap();
            let d = hn.estimate("dprime").unwrap();
            assert!((6.0..=6.0 + 1.1e-3).contains(&d), "start {start}: dprime {d}");
            assert_eq!(loglik(d, &hn), hn.loglik, "start {start}: the reported loglik is the estimate's");
            assert_eq!(loglik(14.0, &hn), hn.loglik, "start {start}: the plateau's");
            assert!(loglik(d - 0.01, &hn) < hn.loglik - 1.0, "start {start}: below the plateau");
            assert!(hn.on_bound.is_empty(), "start {start}: {:?}", hn.on_bound);
        }
    }

    /// candidate-count-limit fitted at the thresholds its bound leaves in play is the fit of
    /// every threshold (estimates, log-likelihood, fitted recall: all equal), on a table that
    /// declines with length (the bound leaves out most thresholds, checked), a cliff to zero and
    /// a cliff to a partial recall, on a V4 stack.
    #[test]
    fn the_bound_leaves_the_candidate_limit_fit_unchanged() {
        let declining: Vec<(u64, u64)> = [10, 10, 9, 9, 8, 8, 7, 6, 6, 5, 5, 4]
            .iter()
            .enumerate()
            .map(|(i, &h)| (2000 * (i as u64 + 1), h))
            .collect();
        let cliff: Vec<(u64, u64)> = (1..=10u64).map(|i| (2000 * i, if i <= 3 { 10 } else { 0 })).collect();
        let partial: Vec<(u64, u64)> = (1..=10u64).map(|i| (2000 * i, if i <= 4 { 10 } else { 2 })).collect();
        let base = Scenario::preset("deepseek-v4-flash").unwrap();
        let free = vec![default_param(Field::LayerCorr).unwrap()];
        for (name, cells, least_pruned) in [("declining", declining, 5), ("cliff", cliff, 0), ("partial", partial, 5)] {
            let data = table(&cells);
            let engine = EngineModel::new(EngineChoice::Analytic, 1000, 1);
            let model = CachedModel::new(&engine);
            let bounded = compare(&data, &base, &free, &model, false, Some(Hypothesis::CandidateCountLimit)).unwrap();
            let full = compare(&data, &base, &free, &model, true, Some(Hypothesis::CandidateCountLimit)).unwrap();
            assert_eq!(bounded, full, "{name}");
            let (row_base, group_of_row) = row_bases(&data, &base, &[]).unwrap();
            let thresholds = candidate_thresholds(&data, &base);
            let bounds = limit_bounds(&data, &row_base, &group_of_row, &thresholds, &free, &model)
                .unwrap()
                .expect("a bound on this stack");
            let pruned = bounds.iter().filter(|&&b| b < full[0].loglik).count();
            assert!(
                pruned >= least_pruned,
                "{name}: {pruned} of {} thresholds bounded below the fit",
                thresholds.len()
            );
            // A bound is a bound: at the chosen threshold it is at least the fit.
            let at = thresholds.iter().position(|&t| Some(t as f64) == full[0].estimate(CANDIDATE_LIMIT)).unwrap();
            assert!(bounds[at] >= full[0].loglik, "{name}: bound {} below the fit {}", bounds[at], full[0].loglik);
        }
    }
}
