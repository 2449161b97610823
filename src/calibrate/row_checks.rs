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
use std::sync::OnceLock;

/// Family-wise level of the row tests (Bonferroni over the rows).
pub(crate) const ROW_ALPHA: f64 = 0.01;

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
    pub(crate) rows: usize,
    /// Their hits.
    pub(crate) hits: u64,
    /// Their trials.
    pub(crate) trials: u64,
    /// Expected hits at the floor, at the worst-case ρ.
    pub(crate) expected: f64,
    /// The worst-case layer_corr (the one giving the largest p-value).
    pub(crate) layer_corr: f64,
    /// P(H ≤ hits) at the floor, at the worst case: the one-sided joint p-value.
    pub(crate) p_value: f64,
    /// p_value < [`JOINT_ALPHA`].
    pub(crate) below_floor: bool,
    /// The rows tested (indices into the table).
    #[serde(skip)]
    pub(crate) tested: Vec<usize>,
    /// Their (trials, floor) at each layer_corr tried.
    #[serde(skip)]
    pub(crate) laws: Vec<Vec<(u64, f64)>>,
    /// `laws`' exact CDFs, tabulated by the first [`rejects`](Self::rejects).
    #[serde(skip)]
    cdfs: CdfTables,
}

impl JointFloor {
    /// Whether the tested rows with these hits (indexed like the table's rows) lie below the
    /// floor at every layer_corr tried: the test's rule, for tables other than the one it was
    /// computed on (the error-rate simulation and the plan, hundreds of tables each).
    ///
    /// P(H ≤ h) at each law is `sum_of_binomials_cdf``(h, law)`, bit for bit: read from the
    /// law's table (`exact_cdfs`, made once) where the exact convolution applies, computed
    /// otherwise (and for laws changed since the tables were made).
    pub fn rejects(&self, hits: &[u64]) -> bool {
        let h: u64 = self.tested.iter().map(|&i| hits[i]).sum();
        let (laws, tables) =
            self.cdfs.0.get_or_init(|| (self.laws.clone(), self.laws.iter().map(|law| exact_cdfs(law)).collect()));
        if *laws != self.laws {
            return self.laws.iter().all(|law| sum_of_binomials_cdf(h, law) < JOINT_ALPHA);
        }
        self.laws.iter().zip(tables).all(|(law, table)| {
            let p = usize::try_from(h).ok().and_then(|h| table.get(h).copied());
            p.unwrap_or_else(|| sum_of_binomials_cdf(h, law)) < JOINT_ALPHA
        })
    }
}

/// A [`JointFloor`]'s laws and each law's [`exact_cdfs`], made once; not part of the result (a
/// clone starts empty, and two floors compare equal whatever their tables).
#[derive(Default)]
struct CdfTables(OnceLock<(Vec<Law>, Vec<Vec<f64>>)>);

/// (trials, floor) of each tested row.
type Law = Vec<(u64, f64)>;

impl Clone for CdfTables {
    fn clone(&self) -> CdfTables {
        CdfTables::default()
    }
}

impl PartialEq for CdfTables {
    fn eq(&self, _: &CdfTables) -> bool {
        true
    }
}

impl std::fmt::Debug for CdfTables {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("CdfTables")
    }
}

/// Level of the joint floor test.
pub(crate) const JOINT_ALPHA: f64 = 0.01;
/// The layer_corr values the joint floor test tries (with several selecting layers).
pub(crate) const JOINT_LAYER_CORR: &[f64] = &[0.0, 0.25, 0.5, 0.75, 0.9, 1.0];
/// Most multiply-adds the exact law of the total hits may take; beyond, a continuity-corrected
/// normal approximation.
const JOINT_EXACT_WORK: u64 = 50_000_000;

/// Multiply-adds of the exact law of Σ X_i truncated at h.
fn exact_work(h: u64, rows: &[(u64, f64)]) -> u64 {
    rows.iter().map(|&(n, _)| (h + 1).saturating_mul(n.min(h) + 1)).fold(0u64, |a, b| a.saturating_add(b))
}

/// P(Σ X_i ≤ h), X_i ~ Bin(n_i, p_i) independent: the exact convolution truncated at h, or a
/// continuity-corrected normal approximation when that would exceed `JOINT_EXACT_WORK`.
pub(crate) fn sum_of_binomials_cdf(h: u64, rows: &[(u64, f64)]) -> f64 {
    let total: u64 = rows.iter().map(|r| r.0).sum();
    if h >= total {
        return 1.0;
    }
    let work = exact_work(h, rows);
    if work > JOINT_EXACT_WORK {
        let mean: f64 = rows.iter().map(|&(n, p)| n as f64 * p).sum();
        let var: f64 = rows.iter().map(|&(n, p)| n as f64 * p * (1.0 - p)).sum();
        if var <= 0.0 {
            return if (h as f64) >= mean { 1.0 } else { 0.0 };
        }
        return crate::stats::norm_cdf((h as f64 + 0.5 - mean) / var.sqrt());
    }
    convolution(h as usize, rows).iter().sum::<f64>().min(1.0)
}

/// P(Σ X_i = s) for s = 0..=h: the exact convolution truncated at h. Its term s is the same
/// number whatever h ≥ s it is truncated at (the same products, added in the same order).
fn convolution(h: usize, rows: &[(u64, f64)]) -> Vec<f64> {
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
    dist
}

/// [`sum_of_binomials_cdf`]`(h, rows)` for h = 0, 1, … up to the last h it computes exactly (below
/// the total trials, within `JOINT_EXACT_WORK`), bit for bit, from one convolution truncated
/// there: its terms up to each h are those of the convolution truncated at h, and their running
/// sum adds them in the order `sum_of_binomials_cdf` does (from zero; every term is ≥ 0).
fn exact_cdfs(rows: &[(u64, f64)]) -> Vec<f64> {
    let total: u64 = rows.iter().map(|r| r.0).sum();
    let mut reach = None;
    let mut h = 0u64;
    while h < total && exact_work(h, rows) <= JOINT_EXACT_WORK {
        reach = Some(h);
        h += 1;
    }
    let Some(reach) = reach.and_then(|r| usize::try_from(r).ok()) else { return Vec::new() };
    let mut sum = 0.0;
    convolution(reach, rows)
        .into_iter()
        .map(|d| {
            sum += d;
            f64::min(sum, 1.0)
        })
        .collect()
}

impl RowChecks {
    /// Whether the table shows `below_random_floor`: a row below the floor, or the rows jointly.
    pub(crate) fn any_below_floor(&self) -> bool {
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
    pub(crate) fn text(&self) -> String {
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
                cdfs: CdfTables::default(),
            });
        }
        laws.push(law);
    }
    Ok(worst.map(|w| JointFloor { tested, laws, ..w }))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The tables `rejects` reads are `sum_of_binomials_cdf` at every h, bit for bit, up to where
    /// the exact convolution stops (then the direct computation answers).
    #[test]
    fn exact_cdfs_are_sum_of_binomials_cdf_bit_for_bit() {
        let laws: Vec<Vec<(u64, f64)>> = vec![
            vec![(200, 0.1)],
            vec![(40, 0.02), (40, 0.5), (200, 0.3), (7, 0.9), (1, 0.25)],
            (0..16).map(|i| (200, 0.01 + 0.06 * i as f64)).collect(),
            vec![(3, 0.0), (5, 1.0), (0, 0.5)],
            // Past the exact branch's work bound at the larger h.
            (0..12).map(|i| (4000, 0.2 + 0.05 * i as f64)).collect(),
        ];
        for law in &laws {
            let t = exact_cdfs(law);
            let total: u64 = law.iter().map(|r| r.0).sum();
            // Every h to 64, then every 61st, and both sides of the table's end and of the total
            // (a convolution per h: all of them would take minutes on the largest laws).
            let end = t.len() as u64;
            let mut hs: Vec<u64> = (0..64).chain((64..total).step_by(61)).collect();
            hs.extend((end.saturating_sub(3)..end + 3).chain(total.saturating_sub(2)..total + 3));
            for h in hs {
                let direct = sum_of_binomials_cdf(h, law);
                if let Some(&p) = t.get(h as usize) {
                    assert_eq!(p.to_bits(), direct.to_bits(), "h {h}, law {law:?}");
                } else {
                    assert!(h >= total || exact_work(h, law) > JOINT_EXACT_WORK, "h {h} missing, law {law:?}");
                }
            }
        }
        // rejects agrees with the rule computed afresh, also after `laws` changes.
        let mut j = JointFloor {
            rows: 3,
            hits: 0,
            trials: 0,
            expected: 0.0,
            layer_corr: f64::NAN,
            p_value: 0.0,
            below_floor: false,
            tested: vec![0, 2, 3],
            laws: laws[..3].iter().map(|l| l[..3.min(l.len())].to_vec()).collect(),
            cdfs: CdfTables::default(),
        };
        for round in 0..2 {
            for a in 0..40 {
                for b in [0, 1, 5, 30] {
                    let hits = [a, 99, b, a / 2];
                    let h = a + b + a / 2;
                    let fresh = j.laws.iter().all(|law| sum_of_binomials_cdf(h, law) < JOINT_ALPHA);
                    assert_eq!(j.rejects(&hits), fresh, "round {round}, hits {hits:?}");
                }
            }
            j.laws[0][0].1 = 0.4;
        }
    }
}
