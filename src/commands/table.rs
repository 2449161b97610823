//! What the commands on measured data share: reading a table (several joined into one), checking
//! its rows against the engine, and the base scenario with what the table records of how it was
//! measured ([`read`]); for `verdict` and `plan`, all that and the numbers' scenario in one step
//! ([`prepare`]).

use super::{CommandError, FitEngineSpec, ScenarioSpec};
use crate::calibrate::{load_csv, parse_fit_spec, CalibError, Dataset, FreeParam};
use crate::diagnosis::{pipeline, GivenFields, NumbersAt};
use crate::engine::EngineModel;
use crate::scenario::{Field, Scenario};
use crate::verdict::VerdictOptions;
use std::path::Path;

/// What a verdict starts from, with or without a table ([`setup`]).
pub(super) struct Setup {
    /// The resolved scenario.
    pub(super) base: Scenario,
    /// Which of context_len and index_topk the user gave.
    pub(super) given: GivenFields,
    /// The verdict's target and the scenario's kernel maximum k, validated.
    pub(super) opts: VerdictOptions,
    /// The engine's model.
    pub(super) model: EngineModel,
}

/// The scenario resolved (with the fields the user gave), the verdict's options at `target`
/// validated, the engine's model, and the engine's check of the scenario, in that order.
pub(super) fn setup(spec: &ScenarioSpec, engine: &FitEngineSpec, target: f64) -> Result<Setup, CommandError> {
    let (base, given) = spec.resolve_given()?;
    let opts = VerdictOptions { target, max_topk: base.max_topk };
    opts.validate()?;
    let model = engine.model()?;
    engine.check(&base)?;
    Ok(Setup { base, given: given_fields(&given), opts, model })
}

/// What `verdict --data` and `plan` compute from ([`prepare`]).
pub(super) struct Prepared {
    /// The tables joined into one.
    pub(super) data: Dataset,
    /// The resolved scenario with the table's facts ([`with_table_facts`]).
    pub(super) base: Scenario,
    /// The scenario the numbers are at ([`pipeline::numbers`]).
    pub(super) at: Scenario,
    /// Where the numbers' context length and k come from.
    pub(super) length: NumbersAt,
    /// The engine's model, expecting the k the table's rows ask at the numbers' length.
    pub(super) model: EngineModel,
    /// The verdict's options.
    pub(super) opts: VerdictOptions,
    /// The fields to fit (`--fit`), parsed against the table; `None` without `--fit`.
    pub(super) free: Option<Vec<FreeParam>>,
}

/// The one preparation of a verdict or plan on measured tables: [`setup`], the tables read
/// with their facts and rows checked ([`read`]), `fit` parsed against them, then the numbers'
/// scenario and the model for it ([`pipeline::numbers`]).
pub(super) fn prepare(
    spec: &ScenarioSpec,
    engine: &FitEngineSpec,
    target: f64,
    paths: &[&Path],
    fit: Option<&str>,
) -> Result<Prepared, CommandError> {
    let Setup { base, given, opts, model } = setup(spec, engine, target)?;
    let (data, base) = read(spec, engine, base, paths)?;
    let free = fit.map(|f| parse_fit_spec(f, Some(&data))).transpose()?;
    let (at, length, model) = pipeline::numbers(&data, &base, given, model)?;
    Ok(Prepared { data, base, at, length, model, opts, free })
}

/// The tables at `paths` read and joined ([`load_all`]), `base` with their facts
/// ([`with_table_facts`]) and every row checked with the engine ([`check_rows`]).
pub(super) fn read(
    spec: &ScenarioSpec,
    engine: &FitEngineSpec,
    base: Scenario,
    paths: &[&Path],
) -> Result<(Dataset, Scenario), CommandError> {
    let data = load_all(paths)?;
    let base = with_table_facts(spec, base, &data)?;
    check_rows(&data, &base, engine)?;
    Ok((data, base))
}

/// Checks every row of a table, applied to the base scenario, with the engine (see
/// [`FitEngineSpec::check`]); rows that do not apply are left to the fit's own message.
fn check_rows(data: &Dataset, base: &Scenario, engine: &FitEngineSpec) -> Result<(), CommandError> {
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
fn with_table_facts(spec: &ScenarioSpec, base: Scenario, data: &Dataset) -> Result<Scenario, CommandError> {
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
