//! The binomial likelihood of a measured table under the model, as a function of the free
//! parameters.

use super::{CalibError, FreeParam, RecallModel};
use crate::measured::Dataset;
use crate::scenario::{Field, Scenario};
use rayon::prelude::*;
use statrs::function::factorial::ln_binomial;
use std::collections::HashMap;

/// Probabilities are kept inside [EPS, 1 − EPS] in logarithms: a model recall of exactly 1 (the
/// context within the coverage horizon) against an observed miss costs ln(1e-12) ≈ −27.6, a large
/// but finite penalty.
pub(crate) const EPS: f64 = 1e-12;

/// Binomial log-probability of `y` hits in `n` trials at recall `p`, with the binomial
/// coefficient (so AIC values are true log-likelihoods).
pub(crate) fn binom_loglik(y: u64, n: u64, p: f64) -> f64 {
    let p = p.clamp(EPS, 1.0 - EPS);
    ln_binomial(n, y) + y as f64 * p.ln() + (n - y) as f64 * (1.0 - p).ln()
}

/// Deviance contribution 2[ℓ_saturated − ℓ(p)] of one row (≥ 0).
pub(crate) fn unit_deviance(y: u64, n: u64, p: f64) -> f64 {
    let p = p.clamp(EPS, 1.0 - EPS);
    let (y, n) = (y as f64, n as f64);
    let mut d = 0.0;
    if y > 0.0 {
        d += y * (y / (n * p)).ln();
    }
    if n - y > 0.0 {
        d += (n - y) * ((n - y) / (n * (1.0 - p))).ln();
    }
    (2.0 * d).max(0.0)
}

/// A table, a base scenario, the free parameters and the recall model: the likelihood surface.
///
/// Rows with the same scenario overrides ([`crate::measured::Dataset::groups`]) share one
/// model evaluation, so the cost of a likelihood evaluation scales with the number of distinct
/// rows. The likelihood itself keeps one binomial term per row (the sum over a group equals the
/// grouped binomial up to the constant binomial coefficients), so log-likelihood, AIC, deviance,
/// its degrees of freedom (rows − parameters) and the residuals are per row, as in the file.
pub struct Problem<'a> {
    /// The table.
    pub(crate) data: &'a Dataset,
    /// The free parameters, in order.
    pub(crate) free: Vec<FreeParam>,
    /// Per distinct row (group): the base scenario with the row's own columns substituted.
    pub(crate) row_base: Vec<Scenario>,
    /// For each row of the table, its index in `row_base`.
    pub(crate) group_of_row: Vec<usize>,
    /// The scenario given by the user (for predictions and verdicts).
    pub(crate) base: Scenario,
    /// The recall model.
    pub(crate) model: &'a dyn RecallModel,
    /// The rows carry a needle (or sample) id: the trials of one row are one needle's, and a
    /// needle-level overdispersion ρ (the intra-needle correlation of trials, a beta-binomial
    /// per row) is one more parameter, after the free fields ([`Problem::dim`]).
    pub(crate) overdispersed: bool,
}

/// Largest needle-level overdispersion the fit searches (ρ = 1 would make every needle's trials
/// identical).
pub(crate) const MAX_OVERDISPERSION: f64 = 0.95;

/// Where the overdispersion's search starts: inside the box, so the simplex can move either way.
pub(crate) const START_OVERDISPERSION: f64 = 0.05;

/// ln P(y of n | p, ρ) for the beta-binomial with mean p and intra-cluster correlation ρ
/// (a = p(1 − ρ)/ρ, b = (1 − p)(1 − ρ)/ρ), the binomial at ρ = 0. With γ = ρ/(1 − ρ) the ratio
/// of beta functions is the product Π_{i<y}(p + iγ) Π_{i<n−y}(1 − p + iγ) / Π_{i<n}(1 + iγ),
/// exact and stable down to γ = 0; summed term by term up to 10^5 trials, through ln Γ above.
pub(crate) fn betabinom_loglik(y: u64, n: u64, p: f64, rho: f64) -> f64 {
    if rho <= 0.0 {
        return binom_loglik(y, n, p);
    }
    let p = p.clamp(EPS, 1.0 - EPS);
    let g = rho / (1.0 - rho);
    let lc = ln_binomial(n, y);
    if n <= 100_000 {
        let s1: f64 = (0..y).map(|i| (p + i as f64 * g).ln()).sum();
        let s2: f64 = (0..n - y).map(|i| (1.0 - p + i as f64 * g).ln()).sum();
        let s3: f64 = (0..n).map(|i| (i as f64 * g).ln_1p()).sum();
        return lc + s1 + s2 - s3;
    }
    use statrs::function::gamma::ln_gamma;
    let (a, b) = (p / g, (1.0 - p) / g);
    let lb = |x: f64, z: f64| ln_gamma(x) + ln_gamma(z) - ln_gamma(x + z);
    lc + lb(y as f64 + a, (n - y) as f64 + b) - lb(a, b)
}

impl<'a> Problem<'a> {
    /// Builds the problem; fails if a row does not make a valid scenario.
    pub fn new(
        data: &'a Dataset,
        base: &Scenario,
        free: Vec<FreeParam>,
        model: &'a dyn RecallModel,
    ) -> Result<Problem<'a>, CalibError> {
        if base.model == crate::scenario::Model::Vector {
            return Err(CalibError::Input(
                "model = vector: calibration fits the scalar model's parameters (dprime, needle_sd, score_noise, …), \
                 which the vector model does not use; set model = scalar"
                    .into(),
            ));
        }
        let groups = data.groups();
        let mut row_base = Vec::with_capacity(groups.len());
        for &i in &groups.first_row {
            let r = &data.rows[i];
            // Check the row with the free parameters at a valid value (their lower bounds).
            let mut s = r
                .apply(base)
                .map_err(|e| CalibError::Input(format!("{}: row {} (line {}): {e}", data.source, i + 1, r.line)))?;
            if let Some(counts) = &r.layer_counts {
                selection_scenario(&mut s, counts.len() - 1)?;
            }
            for p in &free {
                set_field(&mut s, p.field, p.lo)?;
            }
            s.validate()
                .map_err(|e| CalibError::Input(format!("{}: row {} (line {}): {e}", data.source, i + 1, r.line)))?;
            row_base.push(s);
        }
        let overdispersed = data.has_needles();
        Ok(Problem { data, free, row_base, group_of_row: groups.of_row, base: base.clone(), model, overdispersed })
    }

    /// Number of parameters: the free fields, and the overdispersion last when the rows carry
    /// needle ids.
    pub(crate) fn dim(&self) -> usize {
        self.free.len() + usize::from(self.overdispersed)
    }

    /// Lower and upper bounds.
    pub(crate) fn bounds(&self) -> (Vec<f64>, Vec<f64>) {
        let (mut lo, mut hi): (Vec<f64>, Vec<f64>) =
            (self.free.iter().map(|p| p.lo).collect(), self.free.iter().map(|p| p.hi).collect());
        if self.overdispersed {
            lo.push(0.0);
            hi.push(MAX_OVERDISPERSION);
        }
        (lo, hi)
    }

    /// The overdispersion at `theta` (0 when the rows carry no needle ids).
    pub(crate) fn rho(&self, theta: &[f64]) -> f64 {
        if self.overdispersed {
            theta.get(self.free.len()).copied().unwrap_or(0.0)
        } else {
            0.0
        }
    }

    /// The scenario of distinct row (group) `i` at parameters `theta`.
    pub(crate) fn row_scenario(&self, i: usize, theta: &[f64]) -> Result<Scenario, CalibError> {
        let mut s = self.row_base[i].clone();
        for (p, &v) in self.free.iter().zip(theta) {
            set_field(&mut s, p.field, v)?;
        }
        Ok(s)
    }

    /// `base` (or any scenario) with the free parameters set to `theta`.
    pub(crate) fn with_theta(&self, s: &Scenario, theta: &[f64]) -> Result<Scenario, CalibError> {
        let mut s = s.clone();
        for (p, &v) in self.free.iter().zip(theta) {
            set_field(&mut s, p.field, v)?;
        }
        s.validate().map_err(|e| CalibError::Input(e.to_string()))?;
        Ok(s)
    }

    /// The key of distinct row `i` at `theta` ([`RecallModel::evaluation_key`]).
    fn row_key(&self, i: usize, theta: &[f64]) -> Result<String, CalibError> {
        Ok(self.model.evaluation_key(&self.row_scenario(i, theta)?))
    }

    /// Model recall of every row at `theta` (evaluated once per result the model tells apart:
    /// `evaluate_distinct`).
    pub(crate) fn fitted(&self, theta: &[f64]) -> Result<Vec<f64>, CalibError> {
        let one = |i: usize| -> Result<f64, CalibError> {
            let s = self.row_scenario(i, theta)?;
            self.model.recall(&s).map_err(CalibError::Model)
        };
        let distinct = evaluate_distinct(self.model, &self.row_base, |i| self.row_key(i, theta), one)?;
        Ok(self.group_of_row.iter().map(|&g| distinct[g]).collect())
    }

    /// Log-likelihood at `theta`.
    pub fn loglik(&self, theta: &[f64]) -> Result<f64, CalibError> {
        if self.data.is_selection() {
            let pmfs = self.layer_pmfs(theta)?;
            return Ok(self
                .data
                .rows
                .iter()
                .zip(&self.group_of_row)
                .map(|(r, &g)| pattern_loglik(r.layer_counts.as_deref().unwrap_or(&[]), &pmfs[g]))
                .sum());
        }
        let p = self.fitted(theta)?;
        let rho = self.rho(theta);
        Ok(self
            .data
            .rows
            .iter()
            .zip(&p)
            .map(|(r, &p)| {
                if r.needle.is_some() {
                    betabinom_loglik(r.hits, r.trials, p, rho)
                } else {
                    binom_loglik(r.hits, r.trials, p)
                }
            })
            .sum())
    }

    /// Per distinct row, P(exactly m layers select the needle) at `theta` (selection data).
    pub(crate) fn layer_pmfs(&self, theta: &[f64]) -> Result<Vec<Vec<f64>>, CalibError> {
        let one = |i: usize| -> Result<Vec<f64>, CalibError> {
            let s = self.row_scenario(i, theta)?;
            self.model.layer_count_pmf(&s).map_err(CalibError::Model)
        };
        evaluate_distinct(self.model, &self.row_base, |i| self.row_key(i, theta), one)
    }

    /// Log-likelihood of the saturated model (each row its own recall; for selection data,
    /// each cell its own distribution of the number of selecting layers).
    pub(crate) fn saturated_loglik(&self) -> f64 {
        if self.data.is_selection() {
            return saturated_pattern_loglik(self.data);
        }
        self.data.rows.iter().map(|r| binom_loglik(r.hits, r.trials, r.observed())).sum()
    }

    /// Residual degrees of freedom at `k` parameters: rows − k, or for selection data cells ×
    /// layers − k (each cell's distribution of the number of selecting layers has `layers` free
    /// probabilities).
    pub(crate) fn residual_df(&self, k: usize) -> i64 {
        observations(self.data) - k as i64
    }
}

/// The number of free cell probabilities a table measures: its rows, or for selection data
/// cells × layers (each cell's distribution of the number of selecting layers).
pub(crate) fn observations(data: &Dataset) -> i64 {
    if data.is_selection() {
        data.rows.iter().map(|r| r.layer_counts.as_ref().map_or(1, |c| c.len() as i64 - 1)).sum()
    } else {
        data.rows.len() as i64
    }
}

/// The saturated log-likelihood of selection data: each cell its own distribution of the number
/// of selecting layers.
pub(crate) fn saturated_pattern_loglik(data: &Dataset) -> f64 {
    data.rows
        .iter()
        .map(|r| {
            let c = r.layer_counts.as_deref().unwrap_or(&[]);
            let total: u64 = c.iter().sum();
            let f: Vec<f64> = c.iter().map(|&x| x as f64 / total as f64).collect();
            pattern_loglik(c, &f)
        })
        .sum()
}

/// A selection row's scenario: `layers` indexer layers whose own selections were observed, so
/// the window, sink, read and guess probabilities do not enter (recall = P(some layer selects)).
pub(crate) fn selection_scenario(s: &mut Scenario, layers: usize) -> Result<(), CalibError> {
    // The captured layers are the selecting ones: the stack's other layers do not enter.
    s.stack = crate::scenario::Stack::default();
    s.layers = u32::try_from(layers).map_err(|_| CalibError::Input(format!("{layers} layers: too many")))?;
    s.readout = crate::scenario::Readout::Any;
    s.window = 0;
    s.sink = 0;
    s.p_read = 1.0;
    s.p_guess = 0.0;
    Ok(())
}

/// ln P(the observed selection patterns): each of the `counts[m]` requests in which exactly m
/// of the L layers selected the needle had one particular pattern, of probability
/// pmf[m] / C(L, m) (the layers are exchangeable).
pub(crate) fn pattern_loglik(counts: &[u64], pmf: &[f64]) -> f64 {
    let l = counts.len().saturating_sub(1) as u64;
    counts
        .iter()
        .zip(pmf)
        .enumerate()
        .filter(|(_, (&c, _))| c > 0)
        .map(|(m, (&c, &p))| c as f64 * (p.max(EPS * EPS).ln() - ln_binomial(l, m as u64)))
        .sum()
}

/// Sets a real field to a parameter value.
pub(crate) fn set_field(s: &mut Scenario, field: Field, v: f64) -> Result<(), CalibError> {
    s.set_real(field, v).map_err(|e| CalibError::Input(e.to_string()))
}

/// `one(i)` for each of the `rows` (by index i), evaluated once per distinct `key(i)` (the first i of each key
/// answers for the others), the distinct ones in parallel when the model asks for it. Rows that
/// differ only where the model does not look (the needle's depth beyond the window, for the
/// exact engine: [`RecallModel::evaluation_key`]) then cost one evaluation, and two threads
/// never compute the same one at once (the memo would only catch the second afterwards).
/// The parallel work goes largest row first (its candidate count: what its tables cost grows
/// with): in a table's own order, short rows to long as `probe` writes them, the longest came
/// last and one thread finished each evaluation alone (V3.2 `var`'s verdict 2% longer). Each
/// value is a function of its row alone, so the order changes no result.
pub(crate) fn evaluate_distinct<T: Send + Clone>(
    model: &dyn RecallModel,
    rows: &[Scenario],
    key: impl Fn(usize) -> Result<String, CalibError>,
    one: impl Fn(usize) -> Result<T, CalibError> + Sync,
) -> Result<Vec<T>, CalibError> {
    let n = rows.len();
    let mut firsts: Vec<usize> = Vec::new();
    let mut index: HashMap<String, usize> = HashMap::new();
    let mut of_row = Vec::with_capacity(n);
    for i in 0..n {
        let at = *index.entry(key(i)?).or_insert_with(|| {
            firsts.push(i);
            firsts.len() - 1
        });
        of_row.push(at);
    }
    let values: Vec<T> = if model.parallel_rows() && firsts.len() > 1 {
        // Largest first, stably; then back in the order of `firsts`.
        let mut order: Vec<usize> = (0..firsts.len()).collect();
        order.sort_by_key(|&k| std::cmp::Reverse(rows[firsts[k]].n_candidates()));
        let mut computed: Vec<(usize, T)> =
            order.par_iter().map(|&k| one(firsts[k]).map(|v| (k, v))).collect::<Result<_, _>>()?;
        computed.sort_unstable_by_key(|&(k, _)| k);
        computed.into_iter().map(|(_, v)| v).collect()
    } else {
        firsts.iter().map(|&i| one(i)).collect::<Result<_, _>>()?
    };
    Ok(of_row.iter().map(|&k| values[k].clone()).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Rows evaluated largest first come back in row order, each with its key's first row's
    /// value, whatever the sizes: as the rows in order one by one give them.
    #[test]
    fn distinct_rows_come_back_in_row_order_whatever_the_sizes() {
        let model = crate::engine::EngineModel::new(crate::engine::EngineChoice::Analytic, 1, 1);
        assert!(model.parallel_rows());
        let n = 23;
        let key = |i: usize| Ok::<_, CalibError>(format!("key {}", i % 7));
        let one = |i: usize| Ok::<_, CalibError>(vec![i as f64, (i * i) as f64]);
        let want: Vec<Vec<f64>> = (0..n).map(|i| vec![(i % 7) as f64, ((i % 7) * (i % 7)) as f64]).collect();
        let sizes: [&dyn Fn(usize) -> u64; 3] = [&|i| i as u64, &|_| 5, &|i| (i * 37 % 11) as u64];
        for size in sizes {
            let rows: Vec<Scenario> =
                (0..n).map(|i| Scenario { context_len: 1000 + 64 * size(i), ..Scenario::default() }).collect();
            let got = evaluate_distinct(&model, &rows, key, one).unwrap();
            assert_eq!(got, want);
        }
    }

    #[test]
    fn betabinomial_against_its_beta_function_form_and_the_binomial_limit() {
        use statrs::function::beta::ln_beta;
        for &(y, n, p, rho) in &[(3u64, 10u64, 0.4, 0.2), (0, 25, 0.1, 0.05), (25, 25, 0.9, 0.5), (7, 40, 0.3, 0.01)] {
            let (a, b) = (p * (1.0 - rho) / rho, (1.0 - p) * (1.0 - rho) / rho);
            let want = ln_binomial(n, y) + ln_beta(y as f64 + a, (n - y) as f64 + b) - ln_beta(a, b);
            let got = betabinom_loglik(y, n, p, rho);
            assert!((got - want).abs() < 1e-9, "{y}/{n} p={p} rho={rho}: {got} vs {want}");
        }
        // ρ → 0: the binomial.
        assert!((betabinom_loglik(3, 10, 0.4, 1e-12) - binom_loglik(3, 10, 0.4)).abs() < 1e-9);
        assert_eq!(betabinom_loglik(3, 10, 0.4, 0.0), binom_loglik(3, 10, 0.4));
        // Above 10^5 trials the ln Γ form: against the product written out.
        let (y, n, p, rho) = (40_001u64, 100_001u64, 0.41, 0.03);
        let g = rho / (1.0 - rho);
        let s1: f64 = (0..y).map(|i| (p + i as f64 * g).ln()).sum();
        let s2: f64 = (0..n - y).map(|i| (1.0 - p + i as f64 * g).ln()).sum();
        let s3: f64 = (0..n).map(|i| (i as f64 * g).ln_1p()).sum();
        let direct = ln_binomial(n, y) + s1 + s2 - s3;
        let big = betabinom_loglik(y, n, p, rho);
        assert!((big - direct).abs() < 1e-9 * direct.abs(), "{big} vs {direct}");
    }

    #[test]
    fn pattern_loglik_counts_each_particular_pattern() {
        // Two layers, P(m = 0, 1, 2) = (0.25, 0.5, 0.25): each single-layer pattern has 0.25.
        let pmf = [0.25, 0.5, 0.25];
        let ll = pattern_loglik(&[1, 2, 3], &pmf);
        assert!((ll - (0.25f64.ln() + 2.0 * 0.25f64.ln() + 3.0 * 0.25f64.ln())).abs() < 1e-12);
    }

    #[test]
    fn deviance_matches_loglik_difference() {
        for &(y, n, p) in &[(3u64, 10u64, 0.4), (0, 10, 0.2), (10, 10, 0.9), (5, 7, 1.0)] {
            let d = unit_deviance(y, n, p);
            let s = binom_loglik(y, n, y as f64 / n as f64);
            let l = binom_loglik(y, n, p);
            assert!((d - 2.0 * (s - l)).abs() < 1e-9, "{y} {n} {p}: {d} vs {}", 2.0 * (s - l));
        }
    }
}
