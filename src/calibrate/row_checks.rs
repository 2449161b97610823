//! The row checks of a measured table (docs/model.md#verdict): per row the random-indexer floor
//! (dprime = 0, every other field as given; with several selecting layers the lowest of it at
//! layer_corr 0, as given and 1) with a one-sided binomial test of whether the row lies below it;
//! all rows together against the floor for every admissible sharing of the layers
//! ([`JointFloor`]); and the rows where every candidate is selected yet the needle is missed.
//! They are evidence: what they mean for the call is decided in [`crate::diagnosis`].

use super::hypotheses::NEVER_SELECTED_DPRIME;
use super::likelihood::set_field;
use super::{CalibError, RecallModel};
use crate::measured::Dataset;
use crate::scenario::{Field, Scenario};
use statrs::distribution::{Binomial, DiscreteCDF};

/// Family-wise level of the row tests (Bonferroni over the rows).
pub const ROW_ALPHA: f64 = 0.01;

/// The checks of one measured row.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct RowCheck {
    /// Row number in the table (1-based).
    pub row: usize,
    /// Line in the file.
    pub line: u64,
    /// Context length.
    pub context_len: u64,
    /// k.
    pub index_topk: u64,
    /// Hits.
    pub hits: u64,
    /// Trials.
    pub trials: u64,
    /// Random-indexer recall for the row's geometry (dprime = 0; p_read as given, lowered to the
    /// read rate seen where every candidate is selected when there is such a row).
    pub floor: f64,
    /// P(X ≤ hits) for X ~ Binomial(trials, floor): the one-sided p-value of "below the floor".
    pub p_below_floor: f64,
    /// The row lies below the floor (p_below_floor · rows < ROW_ALPHA), and not every candidate
    /// is selected there.
    pub below_floor: bool,
    /// Every candidate is selected whatever the scores (N ≤ k, or the needle in the window or
    /// the sink): selection cannot explain a miss here.
    pub all_selected: bool,
    /// Recall the scenario predicts there whatever the indexer does.
    pub recall_if_selected: f64,
    /// P(X ≤ hits) at that recall.
    pub p_miss: f64,
    /// Misses that no selection explains (all selected and p_miss · rows < ROW_ALPHA).
    pub selection_independent_miss: bool,
}

/// The checks of every row.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct RowChecks {
    /// Per row.
    pub rows: Vec<RowCheck>,
    /// Pooled hits / trials over the rows where every candidate is selected, with its Wilson
    /// 95% upper end: the read rate the floor uses (None when there is no such row).
    pub read_rate: Option<(f64, f64)>,
    /// All rows together against the floor (None when no row can be tested).
    pub joint: Option<JointFloor>,
}

/// All rows tested together against the random-indexer floor: the total hits H of the rows
/// where not every candidate is selected, against their law Σ Bin(trials_i, floor_i(ρ)) when
/// the indexer picks at random, for every admissible sharing ρ = layer_corr of the selecting
/// layers (recall does not say what they share): the p-value is the largest, the worst case.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct JointFloor {
    /// Rows tested.
    pub rows: usize,
    /// Their hits.
    pub hits: u64,
    /// Their trials.
    pub trials: u64,
    /// Expected hits at the floor, at the worst-case ρ.
    pub expected: f64,
    /// The worst-case layer_corr (the one giving the largest p-value).
    pub layer_corr: f64,
    /// P(H ≤ hits) at the floor, at the worst case: the one-sided joint p-value.
    pub p_value: f64,
    /// p_value < [`JOINT_ALPHA`].
    pub below_floor: bool,
    /// The rows tested (indices into the table).
    #[serde(skip)]
    pub tested: Vec<usize>,
    /// Their (trials, floor) at each layer_corr tried.
    #[serde(skip)]
    pub laws: Vec<Vec<(u64, f64)>>,
}

impl JointFloor {
    /// Whether the tested rows with these hits (indexed like the table's rows) lie below the
    /// floor at every layer_corr tried: the test's rule, for tables other than the one it was
    /// computed on (the error-rate simulation).
    pub fn rejects(&self, hits: &[u64]) -> bool {
        let h: u64 = self.tested.iter().map(|&i| hits[i]).sum();
        self.laws.iter().all(|law| sum_of_binomials_cdf(h, law) < JOINT_ALPHA)
    }
}

/// Level of the joint floor test.
pub const JOINT_ALPHA: f64 = 0.01;
/// The layer_corr values the joint floor test tries (with several selecting layers).
pub const JOINT_LAYER_CORR: &[f64] = &[0.0, 0.25, 0.5, 0.75, 0.9, 1.0];
/// Most multiply-adds the exact law of the total hits may take; beyond, a continuity-corrected
/// normal approximation.
const JOINT_EXACT_WORK: u64 = 50_000_000;

/// P(Σ X_i ≤ h), X_i ~ Bin(n_i, p_i) independent: the exact convolution truncated at h, or a
/// continuity-corrected normal approximation when that would exceed `JOINT_EXACT_WORK`.
pub fn sum_of_binomials_cdf(h: u64, rows: &[(u64, f64)]) -> f64 {
    let total: u64 = rows.iter().map(|r| r.0).sum();
    if h >= total {
        return 1.0;
    }
    let work: u64 =
        rows.iter().map(|&(n, _)| (h + 1).saturating_mul(n.min(h) + 1)).fold(0u64, |a, b| a.saturating_add(b));
    if work > JOINT_EXACT_WORK {
        let mean: f64 = rows.iter().map(|&(n, p)| n as f64 * p).sum();
        let var: f64 = rows.iter().map(|&(n, p)| n as f64 * p * (1.0 - p)).sum();
        if var <= 0.0 {
            return if (h as f64) >= mean { 1.0 } else { 0.0 };
        }
        return crate::stats::norm_cdf((h as f64 + 0.5 - mean) / var.sqrt());
    }
    let h = h as usize;
    let mut dist = vec![0.0; h + 1];
    dist[0] = 1.0;
    let mut pmf = Vec::new();
    for &(n, p) in rows {
        let top = (n as usize).min(h);
        pmf.clear();
        pmf.extend((0..=top).map(|x| crate::stats::ln_binom_pmf(n, x as u64, p, 1.0 - p).exp()));
        for s in (0..=h).rev() {
            let mut v = 0.0;
            for x in 0..=top.min(s) {
                v += dist[s - x] * pmf[x];
            }
            dist[s] = v;
        }
    }
    dist.iter().sum::<f64>().min(1.0)
}

impl RowChecks {
    /// Whether the table shows `below_random_floor`: a row below the floor, or the rows jointly.
    pub fn any_below_floor(&self) -> bool {
        !self.below_floor().is_empty() || self.joint.as_ref().is_some_and(|j| j.below_floor)
    }
    /// Rows below the random-indexer floor.
    pub fn below_floor(&self) -> Vec<&RowCheck> {
        self.rows.iter().filter(|r| r.below_floor).collect()
    }
    /// Rows with misses no selection explains.
    pub fn selection_independent_misses(&self) -> Vec<&RowCheck> {
        self.rows.iter().filter(|r| r.selection_independent_miss).collect()
    }
    /// Plain-text summary (one line per finding, with the row numbers).
    pub fn text(&self) -> String {
        let mut s = String::new();
        let nums = |v: &[&RowCheck]| v.iter().map(|r| r.row.to_string()).collect::<Vec<_>>().join(", ");
        if let Some(j) = &self.joint {
            let rho = if j.layer_corr.is_nan() {
                String::new()
            } else {
                format!(", worst case over layer_corr at {}", j.layer_corr)
            };
            s.push_str(&format!(
                "random-indexer floor, all {} tested rows together: {}/{} found where a random indexer would find {:.1}{rho}: P(≤ {} | floor) = {:.2e}{}\n",
                j.rows,
                j.hits,
                j.trials,
                j.expected,
                j.hits,
                j.p_value,
                if j.below_floor { " — BELOW THE FLOOR: an imprecise but working indexer cannot get there" } else { "" }
            ));
        }
        let below = self.below_floor();
        if below.is_empty() {
            s.push_str("random-indexer floor: no row lies significantly below it on its own\n");
        } else {
            s.push_str(&format!(
                "BELOW THE RANDOM-INDEXER FLOOR: rows {} — a random pick (dprime 0) would find the needle more often than measured; an imprecise but working indexer cannot get there\n",
                nums(&below)
            ));
            for r in &below {
                s.push_str(&format!(
                    "  row {} (L = {}, k = {}): {}/{} found, random floor {:.3}, P(≤ {} | floor) = {:.2e}\n",
                    r.row, r.context_len, r.index_topk, r.hits, r.trials, r.floor, r.hits, r.p_below_floor
                ));
            }
        }
        let miss = self.selection_independent_misses();
        if !miss.is_empty() {
            s.push_str(&format!(
                "SELECTION-INDEPENDENT MISSES: rows {} select every candidate (N ≤ k, or the needle in the window/sink) yet miss: p_read < 1 or a bug, not the indexer's ranking\n",
                nums(&miss)
            ));
            for r in &miss {
                s.push_str(&format!(
                    "  row {} (L = {}, k = {}): {}/{} found where the model gives {:.3} whatever the indexer does\n",
                    r.row, r.context_len, r.index_topk, r.hits, r.trials, r.recall_if_selected
                ));
            }
        }
        s
    }
}

fn binom_cdf(y: u64, n: u64, p: f64) -> f64 {
    if y >= n {
        return 1.0;
    }
    if p >= 1.0 {
        return 0.0;
    }
    if p <= 0.0 {
        return 1.0;
    }
    Binomial::new(p, n).map_or(1.0, |b| b.cdf(y))
}

/// The row checks of `data` under `base` (with `nuisance` fields at their scenario values).
pub fn row_checks(data: &Dataset, base: &Scenario, model: &dyn RecallModel) -> Result<RowChecks, CalibError> {
    let recall = |s: &Scenario| model.recall(s).map_err(CalibError::Model);
    let n_rows = data.rows.len().max(1) as f64;
    let mut pre = Vec::with_capacity(data.rows.len());
    for (i, r) in data.rows.iter().enumerate() {
        let mut s = r
            .apply(base)
            .map_err(|e| CalibError::Input(format!("{}: row {} (line {}): {e}", data.source, i + 1, r.line)))?;
        if let Some(c) = &r.layer_counts {
            // Selection rows: the rate is P(some layer's indexer selects), window and reading aside.
            super::likelihood::selection_scenario(&mut s, c.len() - 1)?;
        }
        let mut never = s.clone();
        set_field(&mut never, Field::Dprime, NEVER_SELECTED_DPRIME)?;
        let mut sel = never.clone();
        set_field(&mut sel, Field::PRead, 1.0)?;
        set_field(&mut sel, Field::PGuess, 0.0)?;
        let all_selected = recall(&sel)? >= 1.0 - 1e-9;
        let recall_if_selected = if all_selected { recall(&never)? } else { f64::NAN };
        pre.push((s, all_selected, recall_if_selected));
    }
    let (mut h, mut n) = (0u64, 0u64);
    for (r, p) in data.rows.iter().zip(&pre) {
        if p.1 {
            h += r.hits;
            n += r.trials;
        }
    }
    let read_rate = (n > 0).then(|| {
        let (_, hi) = crate::stats::wilson(h, n, 1.959_963_984_540_054);
        (h as f64 / n as f64, hi)
    });
    let mut rows = Vec::with_capacity(data.rows.len());
    let mut floor_scenarios = Vec::with_capacity(data.rows.len());
    for (i, (r, (s, all_selected, ris))) in data.rows.iter().zip(pre).enumerate() {
        let mut f = s.clone();
        set_field(&mut f, Field::Dprime, 0.0)?;
        if let Some((_, hi)) = read_rate {
            if hi < f.p_read {
                set_field(&mut f, Field::PRead, hi)?;
            }
        }
        floor_scenarios.push(f.clone());
        let mut floor = recall(&f)?;
        if f.selecting_layers() > 1 && model.shares_across_layers() {
            // How much the selecting layers share the needle's difficulty is not known from
            // recall: the floor is the lowest over layer_corr's limits (independent layers, and
            // layers that see one needle score), so a row below it is below whatever they share.
            for rho in [0.0, 1.0] {
                let mut g = f.clone();
                set_field(&mut g, Field::LayerCorr, rho)?;
                floor = floor.min(recall(&g)?);
            }
        }
        let p_below = binom_cdf(r.hits, r.trials, floor);
        let p_miss = if all_selected { binom_cdf(r.hits, r.trials, ris) } else { 1.0 };
        rows.push(RowCheck {
            row: i + 1,
            line: r.line,
            context_len: r.context_len,
            index_topk: r.index_topk,
            hits: r.hits,
            trials: r.trials,
            floor,
            p_below_floor: p_below,
            below_floor: !all_selected && p_below * n_rows < ROW_ALPHA,
            all_selected,
            recall_if_selected: if all_selected { ris } else { f64::NAN },
            p_miss,
            selection_independent_miss: all_selected && p_miss * n_rows < ROW_ALPHA,
        });
    }
    let shares = model.shares_across_layers() && floor_scenarios.iter().any(|f| f.selecting_layers() > 1);
    let floors_at = |rho: Option<f64>| -> Result<Vec<f64>, CalibError> {
        floor_scenarios
            .iter()
            .map(|f| match rho {
                Some(r) if f.selecting_layers() > 1 => {
                    let mut g = f.clone();
                    set_field(&mut g, Field::LayerCorr, r)?;
                    recall(&g)
                }
                _ => recall(f),
            })
            .collect()
    };
    let joint = joint_floor(data, &rows, shares, &floors_at)?;
    Ok(RowChecks { rows, read_rate, joint })
}

/// The joint floor test of the rows (see [`JointFloor`]), `floors_at(ρ)` giving each row's
/// floor at layer_corr ρ (`None`: one value only).
fn joint_floor(
    data: &Dataset,
    rows: &[RowCheck],
    shares: bool,
    floors_at: &dyn Fn(Option<f64>) -> Result<Vec<f64>, CalibError>,
) -> Result<Option<JointFloor>, CalibError> {
    let tested: Vec<usize> = (0..rows.len()).filter(|&i| !rows[i].all_selected).collect();
    if tested.is_empty() {
        return Ok(None);
    }
    let hits: u64 = tested.iter().map(|&i| data.rows[i].hits).sum();
    let trials: u64 = tested.iter().map(|&i| data.rows[i].trials).sum();
    let rhos: Vec<Option<f64>> = if shares { JOINT_LAYER_CORR.iter().map(|&r| Some(r)).collect() } else { vec![None] };
    let mut worst: Option<JointFloor> = None;
    let mut laws = Vec::with_capacity(rhos.len());
    for rho in rhos {
        let floors = floors_at(rho)?;
        let law: Vec<(u64, f64)> = tested.iter().map(|&i| (data.rows[i].trials, floors[i].clamp(0.0, 1.0))).collect();
        let p = sum_of_binomials_cdf(hits, &law);
        let expected = law.iter().map(|&(n, f)| n as f64 * f).sum();
        if worst.as_ref().is_none_or(|w| p > w.p_value) {
            worst = Some(JointFloor {
                rows: tested.len(),
                hits,
                trials,
                expected,
                layer_corr: rho.unwrap_or(f64::NAN),
                p_value: p,
                below_floor: p < JOINT_ALPHA,
                tested: Vec::new(),
                laws: Vec::new(),
            });
        }
        laws.push(law);
    }
    Ok(worst.map(|w| JointFloor { tested, laws, ..w }))
}
