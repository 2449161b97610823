//! Condition dependence (docs/model.md#verdict): whether recall differs between the values of a
//! condition column (`build`, `backend`, `batch`, … — any column of the measured table that is
//! not a scenario column, [`crate::measured::Dataset::condition_columns`]) at identical cells.
//! The model sees no condition, so the same cell measured under two conditions has one
//! predicted recall; a difference is a defect signature, not a property of the indexer.
//!
//! **The test.** A cell is a row's scenario columns (context_len, index_topk, depth, repeat,
//! compress_ratio, window) and its needle (`needle` / `sample`, when the table has one); the other
//! condition columns are not part of it. For two sides A and B, within each cell measured under
//! both, given the cell's total hits m and each side's trials n_A and n_B, A's hits are
//! hypergeometric (m draws … of n_A + n_B trials of which n_A are A's) when the condition makes no
//! difference. The statistic is A's hits summed over the shared cells; its exact null
//! distribution is the convolution of the cells' hypergeometrics (the exact conditional test of a
//! common odds ratio 1, stratified over cells). The two-sided p-value is the probability of the
//! outcomes no more likely than the observed one (relative tolerance 1e-7, as Fisher's exact
//! test). Cells measured under one side only carry no information: they are skipped and counted.
//! Rows whose value is empty do not record the condition and take no part in its test.
//!
//! With two values the sides are the two values; with m ≥ 3, each value against all the others
//! (Bonferroni: each p-value times m, capped at 1), and the most significant is reported. A
//! column is significant when that p-value is below [`CONDITION_ALPHA`].
//!
//! **Not ruled out.** A column whose p-value is not significant may still be one the design
//! cannot settle: with a trial or two a cell, a build that loses every needle it can differs from
//! one that finds them at p ≈ 0.1–0.4. Such a column is [`ConditionTest::favoured`] when a model
//! with its own recall per value in each shared cell beats one shared recall per cell by AIC
//! (likelihood-ratio statistic above twice the extra rates): the data then favour a difference the
//! test cannot confirm, and no physical call may rest on the condition not mattering.
//!
//! Work is bounded: when the convolution would cost more than `EXACT_WORK_MAX` multiply-adds
//! (hundreds of thousands of trials), the p-value is the normal approximation of the same
//! statistic (mean and variance summed over the cells, continuity-corrected) and
//! [`ConditionTest::exact`] says so.

use crate::measured::{Dataset, RowKey};
use std::collections::HashMap;

/// Level below which a condition column's p-value is significant (after Bonferroni over its
/// values when it has three or more).
pub const CONDITION_ALPHA: f64 = 0.01;

/// Multiply-adds beyond which the null distribution is approximated (normal, continuity-corrected)
/// instead of convolved exactly.
pub(crate) const EXACT_WORK_MAX: f64 = 2e8;

/// Condition columns that name the workload — the task, its dataset, benchmark or prompt — not the
/// build: tasks differ in difficulty (a multi-key task is harder than a single needle), so recall
/// differing between them is the model's physics, not a defect signature. Their test is reported
/// but never significant.
pub(crate) const WORKLOAD_COLUMNS: &[&str] =
    &["task", "dataset", "benchmark", "needle_type", "question", "prompt", "template"];

/// Whether `column` names the workload ([`WORKLOAD_COLUMNS`], case-insensitive).
pub(crate) fn is_workload(column: &str) -> bool {
    WORKLOAD_COLUMNS.iter().any(|w| w.eq_ignore_ascii_case(column.trim()))
}

/// Relative tolerance of "no more likely than the observed outcome" (as R's fisher.test).
const TIE_TOLERANCE: f64 = 1e-7;

/// The test of one condition column.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct ConditionTest {
    /// The column.
    pub column: String,
    /// Its distinct non-empty values, in order of first appearance.
    pub values: Vec<String>,
    /// The side with the lower recall at the shared cells (one value; with three or more values,
    /// either the tested value or all the others).
    pub worse: Vec<String>,
    /// The other side.
    pub better: Vec<String>,
    /// Hits of the worse side, pooled over the shared cells.
    pub worse_hits: u64,
    /// Its trials there.
    pub worse_trials: u64,
    /// Hits of the better side, pooled over the shared cells.
    pub better_hits: u64,
    /// Its trials there.
    pub better_trials: u64,
    /// Cells measured under both sides.
    pub shared_cells: usize,
    /// Cells measured under one side only (no information; skipped).
    pub skipped_cells: usize,
    /// Rows in those cells.
    pub skipped_rows: usize,
    /// Rows with an empty value (the condition not recorded; not tested).
    pub missing_rows: usize,
    /// Two-sided p-value (Bonferroni-adjusted with three or more values); 1 without a shared cell.
    pub p_value: f64,
    /// Whether the null distribution was convolved exactly (false: normal approximation).
    pub exact: bool,
    /// `p_value < CONDITION_ALPHA`, on a column that is not a workload column.
    pub significant: bool,
    /// The column names the workload (`WORKLOAD_COLUMNS`): a difference is physics.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub workload: bool,
    /// A recall per value beats one recall per cell by AIC (`favours_values`) on a column that
    /// is not a workload column: the data favour a difference, significant or not.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub favoured: bool,
}

impl ConditionTest {
    /// One line: the column, the sides, their counts, the cells and the p-value.
    pub fn text(&self) -> String {
        let side = |v: &[String]| v.iter().map(|s| format!("`{s}`")).collect::<Vec<_>>().join(" or ");
        if self.shared_cells == 0 {
            return format!(
                "condition `{}` ({} values): not tested, no cell is measured under two of its values ({} under one only)\n",
                self.column,
                self.values.len(),
                if self.skipped_cells == 1 { "1 cell".to_string() } else { format!("{} cells", self.skipped_cells) }
            );
        }
        let plural = |n: usize, what: &str| format!("{n} {what}{}", if n == 1 { "" } else { "s" });
        let skipped = if self.skipped_cells > 0 {
            format!(
                ", {} ({}) under one value only skipped",
                plural(self.skipped_cells, "cell"),
                plural(self.skipped_rows, "row")
            )
        } else {
            String::new()
        };
        let missing = if self.missing_rows > 0 {
            format!(", {} without a value", plural(self.missing_rows, "row"))
        } else {
            String::new()
        };
        let adj = if self.values.len() > 2 {
            format!(", Bonferroni over {} values", self.values.len())
        } else {
            String::new()
        };
        let method = if self.exact { "exact stratified test" } else { "stratified test, normal approximation" };
        let finding = if self.workload {
            if self.p_value < CONDITION_ALPHA {
                "recall differs between tasks, which differ in difficulty: not evidence of a defect".to_string()
            } else {
                "no significant difference between tasks".to_string()
            }
        } else if self.significant {
            format!("RECALL DIFFERS (p < {CONDITION_ALPHA})")
        } else {
            format!("no significant difference at {CONDITION_ALPHA}")
        };
        format!(
            "condition `{}`: {} found {}/{} vs {} {}/{} at {}{skipped}{missing}; {method}{adj}: p = {:.2e} — {finding}\n",
            self.column,
            side(&self.worse),
            self.worse_hits,
            self.worse_trials,
            side(&self.better),
            self.better_hits,
            self.better_trials,
            plural(self.shared_cells, "identical cell"),
            self.p_value
        )
    }
}

/// The text of every test, one line each ("" without condition columns).
pub(crate) fn conditions_text(tests: &[ConditionTest]) -> String {
    tests.iter().map(ConditionTest::text).collect()
}

/// The hypergeometric distribution of the first side's hits in one cell: `draws` = its trials,
/// `successes` = the cell's hits, `total` = the cell's trials. Returns (lowest outcome, pmf over
/// lowest..=highest).
pub fn hypergeometric_pmf(total: u64, successes: u64, draws: u64) -> (u64, Vec<f64>) {
    assert!(successes <= total && draws <= total, "hypergeometric({total}, {successes}, {draws})");
    let lo = (successes + draws).saturating_sub(total);
    let hi = successes.min(draws);
    let (n, k, d) = (total as f64, successes as f64, draws as f64);
    // The mode, then the ratio P(x+1)/P(x) = (k−x)(d−x) / ((x+1)(n−k−d+x+1)) in both directions
    // (every term positive, so normalising by the sum is exact to rounding).
    let mode = (((d + 1.0) * (k + 1.0) / (n + 2.0)).floor() as u64).clamp(lo, hi);
    let len = (hi - lo + 1) as usize;
    let mut p = vec![0.0; len];
    let m = (mode - lo) as usize;
    p[m] = 1.0;
    for i in m..len - 1 {
        let x = (lo + i as u64) as f64;
        p[i + 1] = p[i] * (k - x) * (d - x) / ((x + 1.0) * (n - k - d + x + 1.0));
    }
    for i in (1..=m).rev() {
        let x = (lo + i as u64) as f64;
        // P(x−1) = P(x) · x (n−k−d+x) / ((k−x+1)(d−x+1)).
        p[i - 1] = p[i] * x * (n - k - d + x) / ((k - x + 1.0) * (d - x + 1.0));
    }
    let sum: f64 = p.iter().sum();
    p.iter_mut().for_each(|v| *v /= sum);
    (lo, p)
}

/// One cell of a comparison: trials and hits of side A and of side B.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stratum {
    /// Side A's trials.
    pub trials_a: u64,
    /// Side A's hits.
    pub hits_a: u64,
    /// Side B's trials.
    pub trials_b: u64,
    /// Side B's hits.
    pub hits_b: u64,
}

/// The stratified test of side A against side B: (two-sided p-value, exact, A's hits below
/// their null expectation). Strata with no trials on either side are left out.
pub fn stratified_test(strata: &[Stratum]) -> (f64, bool, bool) {
    let cells: Vec<(u64, u64, u64)> = strata
        .iter()
        .filter(|s| s.trials_a > 0 && s.trials_b > 0)
        .map(|s| (s.trials_a + s.trials_b, s.hits_a + s.hits_b, s.trials_a))
        .collect();
    let observed: u64 = strata.iter().filter(|s| s.trials_a > 0 && s.trials_b > 0).map(|s| s.hits_a).sum();
    let (mut mean, mut var) = (0.0, 0.0);
    let mut work = 0.0;
    let mut width = 1.0;
    for &(n, k, d) in &cells {
        let (nf, kf, df) = (n as f64, k as f64, d as f64);
        mean += df * kf / nf;
        if n > 1 {
            var += df * kf * (nf - kf) * (nf - df) / (nf * nf * (nf - 1.0));
        }
        let w = (k.min(d) - (k + d).saturating_sub(n) + 1) as f64;
        work += width * w;
        width += w - 1.0;
    }
    let below = (observed as f64) < mean;
    if cells.is_empty() {
        return (1.0, true, false);
    }
    if work > EXACT_WORK_MAX {
        if var <= 0.0 {
            return (1.0, false, below);
        }
        let z = (((observed as f64) - mean).abs() - 0.5).max(0.0) / var.sqrt();
        return ((2.0 * crate::stats::norm_sf(z)).min(1.0), false, below);
    }
    // The null distribution of A's total hits: the cells' pmfs convolved.
    let mut lo_total = 0u64;
    let mut dist = vec![1.0f64];
    for &(n, k, d) in &cells {
        let (lo, p) = hypergeometric_pmf(n, k, d);
        let mut next = vec![0.0; dist.len() + p.len() - 1];
        for (i, &a) in dist.iter().enumerate() {
            if a == 0.0 {
                continue;
            }
            for (j, &b) in p.iter().enumerate() {
                next[i + j] += a * b;
            }
        }
        dist = next;
        lo_total += lo;
    }
    let at = dist[(observed - lo_total) as usize];
    let p: f64 = dist.iter().filter(|&&q| q <= at * (1.0 + TIE_TOLERANCE)).sum();
    (p.min(1.0), true, below)
}

/// The cell of a row: its scenario overrides and its needle.
type Cell = (RowKey, Option<String>);

/// One cell's pooled (trials, hits) per value index.
pub(crate) type CellCounts = HashMap<usize, (u64, u64)>;

/// Pooled (trials, hits) per cell and value index of one column, cells in order of first
/// appearance; and the number of rows with an empty value.
fn tabulate(data: &Dataset, col: usize, values: &mut Vec<String>) -> (Vec<CellCounts>, Vec<usize>, usize) {
    let mut cell_index: HashMap<Cell, usize> = HashMap::new();
    let mut cells: Vec<CellCounts> = Vec::new();
    let mut rows_in: Vec<usize> = Vec::new();
    let mut value_index: HashMap<String, usize> = HashMap::new();
    let mut missing = 0;
    for r in &data.rows {
        let v = r.conditions.get(col).map_or("", String::as_str);
        if v.is_empty() {
            missing += 1;
            continue;
        }
        let vi = *value_index.entry(v.to_string()).or_insert_with(|| {
            values.push(v.to_string());
            values.len() - 1
        });
        let c = *cell_index.entry((r.key(), r.needle.clone())).or_insert_with(|| {
            cells.push(HashMap::new());
            rows_in.push(0);
            cells.len() - 1
        });
        let e = cells[c].entry(vi).or_insert((0, 0));
        e.0 += r.trials;
        e.1 += r.hits;
        rows_in[c] += 1;
    }
    (cells, rows_in, missing)
}

/// Whether a recall per value in each cell measured under two or more values beats one recall per
/// cell by AIC: the likelihood-ratio statistic 2 Σ (ℓ(per value) − ℓ(pooled)) exceeds 2 × the
/// extra rates (one per value beyond the first in each such cell).
pub(crate) fn favours_values(cells: &[CellCounts]) -> bool {
    // Each value's deviance from the cell's pooled rate is 2(ℓ at its own rate − ℓ at the pooled).
    let (mut lr, mut extra) = (0.0, 0usize);
    for cell in cells.iter().filter(|c| c.len() >= 2) {
        let (t, h) = cell.values().fold((0, 0), |a, &(t, h)| (a.0 + t, a.1 + h));
        let pooled = h as f64 / t.max(1) as f64;
        lr += cell.values().map(|&(t, h)| crate::calibrate::likelihood::unit_deviance(h, t, pooled)).sum::<f64>();
        extra += cell.len() - 1;
    }
    extra > 0 && lr > 2.0 * extra as f64 + 1e-9
}

/// The test of every condition column with two or more distinct non-empty values (docs/model.md#verdict).
pub fn condition_tests(data: &Dataset) -> Vec<ConditionTest> {
    let mut out = Vec::new();
    for (col, name) in data.condition_columns.iter().enumerate() {
        let mut values = Vec::new();
        let (cells, rows_in, missing_rows) = tabulate(data, col, &mut values);
        let m = values.len();
        if m < 2 {
            continue;
        }
        let workload = is_workload(name);
        let favoured = !workload && favours_values(&cells);
        // Side A: value a (two values: the first; more: each in turn); side B: the others.
        let candidates: Vec<usize> = if m == 2 { vec![0] } else { (0..m).collect() };
        let mut best: Option<ConditionTest> = None;
        for a in candidates {
            let mut strata = Vec::new();
            let (mut skipped_cells, mut skipped_rows) = (0, 0);
            for (cell, &nrows) in cells.iter().zip(&rows_in) {
                let (mut s, mut others) = (Stratum { trials_a: 0, hits_a: 0, trials_b: 0, hits_b: 0 }, 0);
                for (&v, &(t, h)) in cell {
                    if v == a {
                        s.trials_a += t;
                        s.hits_a += h;
                    } else {
                        s.trials_b += t;
                        s.hits_b += h;
                        others += 1;
                    }
                }
                if s.trials_a > 0 && others > 0 {
                    strata.push(s);
                } else {
                    skipped_cells += 1;
                    skipped_rows += nrows;
                }
            }
            let (p, exact, a_below) = stratified_test(&strata);
            let p = (p * if m > 2 { m as f64 } else { 1.0 }).min(1.0);
            let sum = |f: fn(&Stratum) -> u64| strata.iter().map(f).sum::<u64>();
            let (ta, ha, tb, hb) = (sum(|s| s.trials_a), sum(|s| s.hits_a), sum(|s| s.trials_b), sum(|s| s.hits_b));
            let side_a = vec![values[a].clone()];
            let side_b: Vec<String> = (0..m).filter(|&v| v != a).map(|v| values[v].clone()).collect();
            let (worse, better, wh, wt, bh, bt) =
                if a_below { (side_a, side_b, ha, ta, hb, tb) } else { (side_b, side_a, hb, tb, ha, ta) };
            let t = ConditionTest {
                column: name.clone(),
                values: values.clone(),
                worse,
                better,
                worse_hits: wh,
                worse_trials: wt,
                better_hits: bh,
                better_trials: bt,
                shared_cells: strata.len(),
                skipped_cells,
                skipped_rows,
                missing_rows,
                p_value: p,
                exact,
                significant: p < CONDITION_ALPHA && !workload,
                workload,
                favoured,
            };
            if best.as_ref().is_none_or(|b| t.p_value < b.p_value || (b.shared_cells == 0 && t.shared_cells > 0)) {
                best = Some(t);
            }
        }
        out.extend(best);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pmf_sums_to_one_and_has_the_right_support() {
        let (lo, p) = hypergeometric_pmf(20, 12, 15);
        assert_eq!(lo, 7);
        assert_eq!(p.len(), 6);
        assert!((p.iter().sum::<f64>() - 1.0).abs() < 1e-14);
        let (lo, p) = hypergeometric_pmf(5, 0, 3);
        assert_eq!((lo, p), (0, vec![1.0]));
    }

    #[test]
    fn one_fisher_table() {
        // 3/3 vs 0/3: P = 2 · 1/20 (the two tables as extreme), as Fisher's exact test.
        let (p, exact, below) = stratified_test(&[Stratum { trials_a: 3, hits_a: 3, trials_b: 3, hits_b: 0 }]);
        assert!(exact && !below);
        assert!((p - 0.1).abs() < 1e-12, "{p}");
    }

    /// The AIC comparison against the closed form 2·(ℓ(own rates) − ℓ(pooled rate)), with
    /// ℓ(h, t) = h ln(h/t) + (t − h) ln(1 − h/t): 1/3 against 3/3 in one cell gives
    /// 2·(−1.9095 + 0 + 3.8191) = 3.82 > 2 (favoured, though Fisher's p is 0.4); 3/3 against 3/3
    /// and 0/3 against 0/3 give 0; 19/20 against 20/20 gives about 1.03.
    #[test]
    fn favoured_by_aic() {
        let cell = |a: (u64, u64), b: (u64, u64)| -> CellCounts { [(0, a), (1, b)].into_iter().collect() };
        assert!(favours_values(&[cell((3, 1), (3, 3))]));
        assert!(!favours_values(&[cell((3, 3), (3, 3))]));
        assert!(!favours_values(&[cell((3, 3), (3, 3)), cell((3, 0), (3, 0))]));
        let l = |h: f64, t: f64| if h == 0.0 || h == t { 0.0 } else { h * (h / t).ln() + (t - h) * (1.0 - h / t).ln() };
        assert!((2.0 * (l(1.0, 3.0) - l(4.0, 6.0)) - 3.8191).abs() < 1e-3);
        let lr = 2.0 * (l(19.0, 20.0) + l(20.0, 20.0) - l(39.0, 40.0));
        assert_eq!(favours_values(&[cell((20, 19), (20, 20))]), lr > 2.0, "lr {lr}");
        assert!(lr < 2.0, "19/20 vs 20/20 is no evidence of a difference: lr {lr}");
        // A cell measured under one value adds nothing.
        let one: CellCounts = [(0, (3, 0))].into_iter().collect();
        assert!(!favours_values(&[one]));
    }
}
