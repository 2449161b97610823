//! The commands on measured data: `calibrate` (fit), `verdict` (the call, optionally from a
//! measured table) and `plan` (the cells to measure next).

use super::{CommandError, Evaluations, FitEngineSpec, ScenarioSpec};
use crate::calibrate::report::CalibrationReport;
use crate::calibrate::{load_csv, parse_fit_spec, parse_predict_specs, run_calibration, CalibError, Dataset};
use crate::diagnosis::plan::Plan;
use crate::diagnosis::{calibrated_call, diagnose, numbers_scenario, CalibratedCall, Diagnosis, GivenFields};
use crate::engine::RecallModel;
use crate::present::verdict as present;
use crate::scenario::{Field, Scenario};
use crate::verdict::{Verdict, VerdictOptions};
use std::path::Path;

/// Checks every row of a table, applied to the base scenario, with the engine (see
/// [`FitEngineSpec::check`]); rows that do not apply are left to the fit's own message.
pub fn check_rows(data: &Dataset, base: &Scenario, engine: &FitEngineSpec) -> Result<(), CommandError> {
    for r in &data.rows {
        if let Ok(s) = r.apply(base) {
            engine
                .check(&s)
                .map_err(|e| CommandError::input(format!("{}: line {}: {}", data.source, r.line, e.message)))?;
        }
    }
    Ok(())
}

fn load(path: &Path) -> Result<Dataset, CommandError> {
    Ok(load_csv(path).map_err(CalibError::from)?)
}

/// Several tables read and joined into one ([`crate::measured::join`]).
fn load_all(paths: &[&Path]) -> Result<Dataset, CommandError> {
    let tables = paths.iter().map(|p| load(p)).collect::<Result<Vec<_>, _>>()?;
    Ok(crate::measured::join(tables).map_err(CalibError::from)?)
}

/// The base scenario with what a table says of its rows: a selection table's `import topk`
/// facts (needle_tokens, compress_ratio and overlap, docs/capture.md#the-manifest), a recall
/// table's needle_tokens (`probe` writes the needle's length as counted). Each row's own values
/// already make its row scenario ([`crate::measured::Observation::apply`]); here a field flag
/// that contradicts a row is refused (one line, bad input), and the base takes the table's
/// value, so that the predictions, the verdict and the planned cells answer for the needle and
/// geometry measured: a selection table's value where every row shares it, a recall table's
/// needle_tokens as the lower median over its rows weighted by their trials (the shared value
/// when they share one). A table without these columns is returned unchanged.
pub fn with_table_facts(spec: &ScenarioSpec, base: Scenario, data: &Dataset) -> Result<Scenario, CommandError> {
    let selection = data.is_selection();
    type Fact = fn(&crate::measured::Observation) -> Option<String>;
    let facts: [(Field, Fact); 3] = [
        (Field::NeedleTokens, |r| r.needle_tokens.map(|v| v.to_string())),
        (Field::CompressRatio, |r| r.compress_ratio.map(|v| v.to_string())),
        (Field::Overlap, |r| r.overlap.map(|v| v.to_string())),
    ];
    let mut out = base.clone();
    let mut changed = false;
    for (field, of) in facts {
        // A recall table's compress_ratio column is a row override as it always was; only its
        // needle_tokens is a fact of how the table was measured.
        if !selection && field != Field::NeedleTokens {
            continue;
        }
        let flagged = spec.fields.iter().any(|(f, _)| *f == field);
        let given = base.text(field);
        let mut shared: Option<Option<String>> = None;
        for r in &data.rows {
            let v = of(r);
            if let Some(v) = &v {
                if flagged && *v != given {
                    let what = if selection { "what import topk used" } else { "the needle's length as measured" };
                    return Err(CommandError::input(format!(
                        "--{} {given} contradicts {}: line {} says {} = {v} ({what}); leave the flag out, each row's own value is used",
                        field.flag(),
                        data.source,
                        r.line,
                        field.name()
                    )));
                }
            }
            shared = match shared {
                None => Some(v),
                Some(s) if s == v => Some(s),
                Some(_) => Some(None),
            };
        }
        let value = if selection {
            shared.flatten()
        } else {
            weighted_lower_median(data.rows.iter().filter_map(|r| r.needle_tokens.map(|m| (m, r.trials))))
                .map(|m| m.to_string())
        };
        if let Some(v) = value {
            out.set_text(field, &v).map_err(|e| CommandError::input(format!("{}: {e}", data.source)))?;
            changed = true;
        }
    }
    if changed {
        out.validate().map_err(|e| CommandError::input(format!("{}: {e}", data.source)))?;
    }
    Ok(out)
}

/// The lower median of values weighted by counts (`None` for none): the smallest value whose
/// cumulative count reaches half the total. Linear after one sort.
fn weighted_lower_median(values: impl Iterator<Item = (u64, u64)>) -> Option<u64> {
    let mut v: Vec<(u64, u64)> = values.collect();
    v.sort_unstable();
    let total: u128 = v.iter().map(|&(_, w)| w as u128).sum();
    let mut run = 0u128;
    v.into_iter()
        .find(|&(_, w)| {
            run += w as u128;
            2 * run >= total
        })
        .map(|(m, _)| m)
}

/// Which of the fields the verdict's numbers on a table depend on the user gave (`given`:
/// [`ScenarioSpec::resolve_given`]).
fn given_fields(given: &[Field]) -> GivenFields {
    GivenFields { context_len: given.contains(&Field::ContextLen), index_topk: given.contains(&Field::IndexTopk) }
}

/// What `calibrate` asks for besides the scenario and the engine.
#[derive(Debug, Clone, Default)]
pub struct CalibrateRequest<'a> {
    /// The measured table (`--data`).
    pub data: Option<&'a Path>,
    /// The fields to fit, `FIELD[=LO:HI],…` (`--fit`).
    pub fit: Option<&'a str>,
    /// Also fit and rank the named hypotheses (`--compare`).
    pub compare: bool,
    /// What-if axes, `FIELD=V1,V2,…` each (`--predict`).
    pub predict: &'a [String],
    /// Captured indexer scores (`--scores FILE.npz`): their distractor law replaces the
    /// scenario's own in every evaluation ([`crate::import::scores::EmpiricalModel`]).
    pub scores: Option<&'a Path>,
}

/// Fits the scenario's fields to the measured table: the report `calibrate` prints
/// ([`CalibrationReport::to_json`], [`CalibrationReport::to_text`]).
pub fn calibrate(
    spec: &ScenarioSpec,
    engine: &FitEngineSpec,
    req: &CalibrateRequest,
    observe: Evaluations,
) -> Result<CalibrationReport, CommandError> {
    let data_path =
        req.data.ok_or_else(|| CommandError::input("--data FILE.csv is required (or --experiment FILE.toml)"))?;
    let fit = req.fit.ok_or_else(|| CommandError::input("--fit FIELD,… is required (for example --fit dprime)"))?;
    let base = spec.resolve()?;
    let model = engine.model()?;
    let data = load(data_path)?;
    let base = with_table_facts(spec, base, &data)?;
    let model = model.expecting_topks(data.topks_asked(None));
    check_rows(&data, &base, engine)?;
    let free = parse_fit_spec(fit, Some(&data))?;
    let specs = parse_predict_specs(req.predict)?;
    if let Some(path) = req.scores {
        let capture = crate::import::scores::read_file(path)?;
        let law = crate::import::scores::EmpiricalLaw::new(&capture, &path.display().to_string())?;
        let emp = crate::import::scores::EmpiricalModel::new(law);
        let report = engine.in_pool(|| {
            let cached = crate::calibrate::cache::CachedModel::new(&emp).with_observer(observe);
            run_calibration(&data, &base, free, &cached, req.compare, &specs, || emp.describe())
        })??;
        return Ok(report);
    }
    let report = engine.in_pool(|| {
        let cached = engine.cached(&model, observe);
        run_calibration(&data, &base, free, &cached, req.compare, &specs, || model.describe())
    })??;
    Ok(report)
}

/// What `verdict` found: the call on the scenario alone, on a diagnosed table (`--data`), or on
/// a calibrated fit (`--data --fit`).
#[derive(Debug, Clone)]
pub enum VerdictResult {
    /// The scenario alone.
    Scenario {
        /// The call and its numbers.
        verdict: Box<Verdict>,
        /// The resolved scenario.
        scenario: Box<Scenario>,
    },
    /// A measured table diagnosed (row checks, every hypothesis).
    Diagnosed {
        /// The diagnosis.
        diagnosis: Box<Diagnosis>,
        /// The table.
        data: Dataset,
    },
    /// Fitted fields first, every number with its 95% range.
    Calibrated {
        /// The calibration behind it.
        report: Box<CalibrationReport>,
        /// The verdict at the estimate and over the likelihood region, with the call the
        /// decision rule makes from the fit's signatures.
        call: Box<CalibratedCall>,
        /// The table.
        data: Dataset,
    },
}

/// The call (docs/model.md#verdict): `target` recall; with `data`, the table diagnosed, or with
/// `fit` as well, calibrated first.
pub fn verdict(
    spec: &ScenarioSpec,
    engine: &FitEngineSpec,
    target: f64,
    data: Option<&Path>,
    fit: Option<&str>,
    observe: Evaluations,
) -> Result<VerdictResult, CommandError> {
    let tables: Vec<&Path> = data.into_iter().collect();
    verdict_tables(spec, engine, target, &tables, fit, observe)
}

/// [`verdict`] on several measured tables joined into one (`verdict --data a.csv --data b.csv`:
/// rows in order, condition columns united; [`crate::measured::join`]).
pub fn verdict_tables(
    spec: &ScenarioSpec,
    engine: &FitEngineSpec,
    target: f64,
    tables: &[&Path],
    fit: Option<&str>,
    observe: Evaluations,
) -> Result<VerdictResult, CommandError> {
    let data = (!tables.is_empty()).then_some(tables);
    let (base, given) = spec.resolve_given()?;
    let opts = VerdictOptions { target, max_topk: base.max_topk };
    opts.validate()?;
    let model = engine.model()?;
    engine.check(&base)?;
    match (data, fit) {
        (Some(paths), Some(fit)) => {
            let data = load_all(paths)?;
            let base = with_table_facts(spec, base, &data)?;
            check_rows(&data, &base, engine)?;
            let free = parse_fit_spec(fit, Some(&data))?;
            let (at, length) = numbers_scenario(&data, &base, given_fields(&given))?;
            let model = model.expecting_topks(data.topks_asked(Some(&at)));
            engine.in_pool(|| -> Result<_, CommandError> {
                let cached = engine.cached(&model, observe);
                let model = &cached;
                let mut report = run_calibration(&data, &base, free, model, false, &[], String::new)?;
                if report.fit.region.is_empty() {
                    let problem = crate::calibrate::Problem::new(&data, &base, report.free.clone(), model)?;
                    report.fit = crate::calibrate::fit::fit(&problem, true, true)?;
                }
                let call = calibrated_call(&data, &at, &report, model, opts)?.numbers_at(length);
                Ok(VerdictResult::Calibrated { report: Box::new(report), call: Box::new(call), data: data.clone() })
            })?
        }
        (Some(paths), None) => {
            let data = load_all(paths)?;
            let base = with_table_facts(spec, base, &data)?;
            check_rows(&data, &base, engine)?;
            let (at, length) = numbers_scenario(&data, &base, given_fields(&given))?;
            let model = model.expecting_topks(data.topks_asked(Some(&at)));
            let d = engine
                .in_pool(|| diagnose(&data, &at, &[], &engine.cached(&model, observe), opts))??
                .numbers_at(length);
            Ok(VerdictResult::Diagnosed { diagnosis: Box::new(d), data })
        }
        (None, Some(_)) => Err(CommandError::input("--fit needs --data FILE.csv: the measured table to fit")),
        (None, None) => {
            let v = engine.in_pool(|| crate::verdict::verdict(&base, &model, opts))??;
            Ok(VerdictResult::Scenario { verdict: Box::new(v), scenario: Box::new(base) })
        }
    }
}

impl VerdictResult {
    /// The `verdict --json` object (docs/cli.md#output).
    pub fn to_json(&self) -> serde_json::Value {
        match self {
            VerdictResult::Scenario { verdict, scenario } => present::verdict_json(verdict, scenario),
            VerdictResult::Diagnosed { diagnosis: d, data } => present::diagnosis_json(d, data),
            VerdictResult::Calibrated { report, call, .. } => present::calibrated_report_json(report, call),
        }
    }

    /// The summary `verdict` prints.
    pub fn to_text(&self) -> String {
        match self {
            VerdictResult::Scenario { verdict, .. } => present::verdict_text(verdict, None),
            VerdictResult::Diagnosed { diagnosis: d, data } => present::diagnosis_text(d, data),
            VerdictResult::Calibrated { report, call, data } => present::calibrated_report_text(report, call, data),
        }
    }
}

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
    pub plan: Plan,
    /// The measured table.
    pub data: Dataset,
}

/// What `plan` asks for besides the scenario and the engine.
#[derive(Debug, Clone, Default)]
pub struct PlanRequest<'a> {
    /// The measured table (`--data`).
    pub data: Option<&'a Path>,
    /// More measured tables joined to it ([`crate::measured::join`]; `probe --until-decided`'s
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
    let (base, given) = spec.resolve_given()?;
    let verdict = VerdictOptions { target: req.target.unwrap_or(0.9), max_topk: base.max_topk };
    verdict.validate()?;
    let model = engine.model()?;
    engine.check(&base)?;
    let data = if req.also.is_empty() {
        load(path)?
    } else {
        load_all(&std::iter::once(path).chain(req.also.iter().copied()).collect::<Vec<_>>())?
    };
    let base = with_table_facts(spec, base, &data)?;
    check_rows(&data, &base, engine)?;
    // The hypotheses' physical calls at the length the verdict on this table uses.
    let (base, _) = numbers_scenario(&data, &base, given_fields(&given))?;
    let model = model.expecting_topks(data.topks_asked(Some(&base)));
    let opts = crate::diagnosis::plan::PlanOptions { budget: req.budget, seed: engine.seed, only: &only, verdict };
    let p = engine
        .in_pool(|| crate::diagnosis::plan::plan_with(&data, &base, &[], &engine.cached(&model, observe), &opts))??;
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
    /// the table has one residue of context_len (mod 8, 4 or c: [`Planned::spread`]), each
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
    pub fn conditions(&self) -> Vec<(String, Vec<String>)> {
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
    pub fn spread(&self) -> u64 {
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
