//! `plan`: the cells to measure next, and the table they would be measured against.

use super::table::{prepare, Prepared};
use super::{CommandError, Evaluations, FitEngineSpec, ScenarioSpec};
use crate::calibrate::Dataset;
use crate::diagnosis::plan::Plan;
use std::path::Path;

/// "Nothing to plan" as a result: the one line `plan` prints (exit 0) when no cell the kernel
/// can run separates the leading hypotheses, so the verdict stands; `None` for another error.
pub fn nothing_to_plan(e: &CommandError) -> Option<String> {
    (e.kind == crate::error::ErrorKind::Input && crate::diagnosis::plan::is_nothing_to_plan(&e.message)).then(|| {
        format!("nothing to plan: the verdict stands ({})", crate::diagnosis::plan::nothing_to_plan_reason(&e.message))
    })
}

/// The JSON of `plan --json` when there is nothing to plan (`line`: [`nothing_to_plan`]'s).
pub fn nothing_to_plan_json(line: &str) -> serde_json::Value {
    serde_json::json!({"nothing_to_plan": true, "message": line, "cells": []})
}

/// A plan and the table it was made from.
#[derive(Debug, Clone)]
pub struct Planned {
    /// The cells and what they separate.
    pub(crate) plan: Plan,
    /// The measured table.
    pub(crate) data: Dataset,
}

/// What `plan` asks for besides the scenario and the engine.
#[derive(Debug, Clone, Default)]
pub struct PlanRequest<'a> {
    /// The measured table (`--data`).
    pub data: Option<&'a Path>,
    /// More measured tables joined to it (`crate::measured::join`; `probe --until-decided`'s
    /// rounds).
    pub also: &'a [&'a Path],
    /// Total trials to spend (`--budget`).
    pub budget: u64,
    /// The hypotheses to separate instead of the leading ones (`--hypotheses`).
    pub hypotheses: &'a [String],
    /// The verdict's target recall for a physical hypothesis's call (`--target`; None: 0.9).
    pub target: Option<f64>,
}

/// Largest `plan --budget`: far more trials than a live measurement spends, and a plan of it
/// still finishes (in tens of seconds).
pub const MAX_BUDGET: u64 = 1_000_000;

/// The cells to measure next that tell most about which leading hypothesis is true, and the
/// simulated probability of the right call after them (docs/model.md#planning).
pub fn plan(
    spec: &ScenarioSpec,
    engine: &FitEngineSpec,
    req: &PlanRequest,
    observe: Evaluations,
) -> Result<Planned, CommandError> {
    let Some(path) = req.data else {
        return Err(CommandError::input(
            "plan: --data FILE.csv is required (the measured table the hypotheses are fitted to)",
        ));
    };
    if spec.preset.is_none() && spec.file.is_none() && spec.fields.is_empty() {
        return Err(CommandError::input(
            "plan: give the deployment's scenario: --preset NAME, --scenario FILE.toml or its field flags (e.g. --compress-ratio 4 --index-topk 512)",
        ));
    }
    // Checked before anything is planned: the plan's simulated tables hold counts per trial
    // chunk and its time grows with the budget (10^6 trials take tens of seconds; 10^12 aborted
    // on a terabyte allocation, u64::MAX overflowed a capacity).
    if req.budget == 0 || req.budget > MAX_BUDGET {
        return Err(CommandError::input(format!(
            "--budget {}: allowed 1..={MAX_BUDGET} trials (a plan spends at most a million measurements)",
            req.budget
        )));
    }
    let only = req.hypotheses.iter().map(|n| crate::calibrate::check_name(n)).collect::<Result<Vec<_>, _>>()?;
    let paths: Vec<&Path> = std::iter::once(path).chain(req.also.iter().copied()).collect();
    // The hypotheses' physical calls at the length the verdict on this table uses.
    let Prepared { data, at, model, opts: verdict, .. } =
        prepare(spec, engine, req.target.unwrap_or(0.9), &paths, None)?;
    let opts = crate::diagnosis::plan::PlanOptions { budget: req.budget, seed: engine.seed, only: &only, verdict };
    let p =
        engine.in_pool_cached(&model, observe, |m| crate::diagnosis::plan::plan_with(&data, &at, &[], m, &opts))??;
    Ok(Planned { plan: p, data })
}

impl Planned {
    /// The `plan --json` object (docs/cli.md#output).
    pub fn to_json(&self) -> serde_json::Value {
        let mut j = crate::present::plan::plan_json(&self.plan);
        j["warnings"] = serde_json::json!(self.data.transcribed_warning().into_iter().collect::<Vec<_>>());
        j
    }

    /// The cells as the CSV a harness runs (`plan --out`): the plan's columns, then the
    /// table's condition columns (each with the values the table has, `|`-separated, so that
    /// `probe --cells` measures under the same conditions: `prefix_cache` miss|hit sends each
    /// prompt twice, `concurrency` 1|8 runs each phase, any other a label). When every row of
    /// the table has one residue of context_len (mod 8, 4 or c: `Planned::spread`), each
    /// cell's trials are spread over L, L + 1, … (every residue mod 4, or mod 8), so that a
    /// length-periodic defect can show.
    pub fn csv(&self) -> String {
        let plain = self.plan.csv(&self.data.source);
        let provenance = plain.lines().next().unwrap_or("").to_string();
        let conditions = self.conditions();
        let spread = self.spread();
        let mut s = provenance;
        if spread > 1 {
            s.push_str(&format!(
                "; every row of the table has one residue of context_len mod {spread}: each cell's trials spread over L..L+{}",
                spread - 1
            ));
        }
        s.push('\n');
        s.push_str("context_len,index_topk,depth,repeat,trials");
        for (c, _) in &conditions {
            s.push(',');
            s.push_str(&csv_field(c));
        }
        s.push('\n');
        let tail: String = conditions.iter().map(|(_, v)| format!(",{}", csv_field(&v.join("|")))).collect();
        for c in &self.plan.cells {
            for r in 0..spread {
                let t = c.trials / spread + u64::from(r < c.trials % spread);
                if t == 0 {
                    continue;
                }
                s.push_str(&format!("{},{},{},{},{t}{tail}\n", c.context_len + r, c.index_topk, c.depth, c.repeat));
            }
        }
        s
    }

    /// The table's condition columns with their distinct non-empty values, in the table's order.
    pub(crate) fn conditions(&self) -> Vec<(String, Vec<String>)> {
        self.data
            .condition_columns
            .iter()
            .enumerate()
            .map(|(i, name)| {
                let mut vals: Vec<String> = Vec::new();
                for r in &self.data.rows {
                    if let Some(v) = r.conditions.get(i).filter(|v| !v.is_empty()) {
                        if !vals.contains(v) {
                            vals.push(v.clone());
                        }
                    }
                }
                (name.clone(), vals)
            })
            .filter(|(_, v)| !v.is_empty())
            .collect()
    }

    /// Consecutive lengths each planned cell's trials spread over, for a recall table whose rows
    /// share one residue of context_len: 8 when they share one mod 8 (so also mod 64: a
    /// `1Ki..64Ki:x2` grid), 4 when they share one mod 4 or mod the compression ratio, else 1.
    pub(crate) fn spread(&self) -> u64 {
        if self.data.is_selection() {
            return 1;
        }
        let one = |m: u64| {
            let mut res: Vec<u64> = self.data.rows.iter().map(|r| r.context_len % m.max(1)).collect();
            res.sort_unstable();
            res.dedup();
            res.len() == 1
        };
        let c = self.data.rows.iter().find_map(|r| r.compress_ratio).unwrap_or(4);
        if one(8) {
            8
        } else if one(4) || (c > 1 && one(c)) {
            4
        } else {
            1
        }
    }

    /// The summary `plan` prints (the warning, the table).
    pub fn to_text(&self) -> String {
        let mut t = String::new();
        if let Some(w) = self.data.transcribed_warning() {
            t.push_str(&w);
            t.push('\n');
        }
        t.push_str(&crate::present::plan::plan_text(&self.plan));
        t
    }
}

/// One CSV field, quoted when it holds a comma, a quote or a line break.
fn csv_field(v: &str) -> String {
    if v.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", v.replace('"', "\"\""))
    } else {
        v.to_string()
    }
}
