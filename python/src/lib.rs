//! The Python module `dsa_sim`: the commands of the dsa-sim command line as functions.
//!
//! Each function turns its keyword arguments into the inputs of one function of
//! `dsa_sim::commands` (the scenario's fields as the text a flag would carry) and converts the
//! result's JSON object, the one `--json` prints, into Python objects, adding numpy arrays where
//! a notebook wants them. The computing and the checking are the library's, so a result equals
//! the command line's to the last digit and an error carries the command line's message. Adding
//! a command is one `#[pyfunction]` here, registered in `dsa_sim_module`, and its stub in
//! `dsa_sim.pyi`.

use dsa_sim::commands::{self, estimate::Estimated, import, CommandError, EngineSpec, FitEngineSpec, ScenarioSpec};
use dsa_sim::engine::{EngineChoice, DEFAULT_FIT_TRIALS, DEFAULT_SEED};
use dsa_sim::error::{one_line, ErrorKind};
use dsa_sim::formats::text::QuantizeRequest;
use dsa_sim::progress::Silent;
use dsa_sim::scenario::Field;
use numpy::{PyArray1, PyArrayMethods, PyUntypedArrayMethods};
use pyo3::exceptions::{PyRuntimeError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyDict, PyFloat, PyInt, PyList, PyString, PyTuple};
use serde_json::Value;
use std::path::PathBuf;

/// A command's error as the Python exception: bad input is `ValueError`, a failure to compute
/// `RuntimeError`; the message is the line the command line prints after `error: `.
fn py_err(e: CommandError) -> PyErr {
    let message = one_line(&e.message);
    match e.kind {
        ErrorKind::Input => PyValueError::new_err(message),
        ErrorKind::Failure => PyRuntimeError::new_err(message),
    }
}

/// A JSON value as Python objects: objects as dicts (in the command line's key order), arrays
/// as lists, integers as int, reals as float (the same f64), null as None.
fn to_py(py: Python<'_>, v: &Value) -> PyResult<Py<PyAny>> {
    Ok(match v {
        Value::Null => py.None(),
        Value::Bool(b) => PyBool::new(py, *b).to_owned().into_any().unbind(),
        Value::Number(n) => {
            if let Some(u) = n.as_u64() {
                u.into_pyobject(py)?.into_any().unbind()
            } else if let Some(i) = n.as_i64() {
                i.into_pyobject(py)?.into_any().unbind()
            } else {
                n.as_f64().unwrap_or(f64::NAN).into_pyobject(py)?.into_any().unbind()
            }
        }
        Value::String(s) => PyString::new(py, s).into_any().unbind(),
        Value::Array(a) => {
            let items = a.iter().map(|x| to_py(py, x)).collect::<PyResult<Vec<_>>>()?;
            PyList::new(py, items)?.into_any().unbind()
        }
        Value::Object(m) => {
            let d = PyDict::new(py);
            for (k, x) in m {
                d.set_item(k, to_py(py, x)?)?;
            }
            d.into_any().unbind()
        }
    })
}

/// The text a field's flag would carry for a Python value: bool as `true`/`false`, int, float
/// and str as `str()` writes them (a float in shortest round-trip form, so the field gets the
/// same f64), a numpy scalar as its Python value; None means "not given".
fn field_text(field: Field, v: &Bound<'_, PyAny>) -> PyResult<Option<String>> {
    if v.is_none() {
        return Ok(None);
    }
    if let Ok(b) = v.cast::<PyBool>() {
        return Ok(Some(if b.is_true() { "true" } else { "false" }.to_string()));
    }
    if v.is_instance_of::<PyInt>() || v.is_instance_of::<PyFloat>() || v.is_instance_of::<PyString>() {
        return Ok(Some(v.str()?.to_string()));
    }
    // numpy scalars (np.float64, np.int64, np.bool_) have .item(), their Python value.
    if v.hasattr("dtype")? && v.hasattr("item")? && v.getattr("ndim").and_then(|n| n.extract::<usize>()).ok() == Some(0)
    {
        return field_text(field, &v.call_method0("item")?);
    }
    let type_name = v.get_type().name()?.to_string();
    Err(PyTypeError::new_err(format!(
        "{} = {}: expected an int, float, bool or str (a {type_name}; to vary a field, give sweep(vary=…))",
        field.name(),
        one_line(&v.repr()?.to_string())
    )))
}

/// The scenario of a call: `preset`, `scenario` (a TOML file) and the scenario fields given as
/// keyword arguments, named as the field table names them.
fn scenario_spec(
    preset: Option<String>,
    scenario: Option<PathBuf>,
    fields: Option<&Bound<'_, PyDict>>,
) -> PyResult<ScenarioSpec> {
    let mut spec = ScenarioSpec { preset, file: scenario, fields: Vec::new() };
    if let Some(d) = fields {
        for (k, v) in d.iter() {
            let name: String = k.extract()?;
            let field = Field::from_name(&name).map_err(|e| py_err(e.into()))?;
            if let Some(text) = field_text(field, &v)? {
                spec.fields.push((field, text));
            }
        }
    }
    Ok(spec)
}

/// A non-negative integer argument, refused as the command line refuses its flag.
fn uint(name: &str, v: &Bound<'_, PyAny>) -> PyResult<u64> {
    if v.is_instance_of::<PyBool>() || !(v.is_instance_of::<PyInt>() || v.hasattr("__index__")?) {
        return Err(PyTypeError::new_err(format!("{name} = {}: expected an int", one_line(&v.repr()?.to_string()))));
    }
    v.extract::<u64>().map_err(|_| {
        // A negative or too large int: the range the command line states for the flag.
        let allowed = match name {
            "trials" => format!("1..={}", dsa_sim::engine::MAX_TRIALS),
            "threads" => format!("1..={}", dsa_sim::engine::MAX_THREADS),
            "budget" => format!("1..={} trials", dsa_sim::commands::plan::MAX_BUDGET),
            _ => format!("0..={}", u64::MAX),
        };
        PyValueError::new_err(format!(
            "--{name} {}: allowed {allowed}",
            v.str().map(|s| s.to_string()).unwrap_or_default()
        ))
    })
}

fn opt_uint(name: &str, v: Option<&Bound<'_, PyAny>>) -> PyResult<Option<u64>> {
    match v {
        Some(x) if !x.is_none() => uint(name, x).map(Some),
        _ => Ok(None),
    }
}

fn engine_choice(engine: &str) -> PyResult<EngineChoice> {
    engine.parse().map_err(|e: dsa_sim::engine::EngineError| py_err(e.into()))
}

fn threads_of(threads: Option<&Bound<'_, PyAny>>) -> PyResult<Option<usize>> {
    Ok(opt_uint("threads", threads)?.map(|t| usize::try_from(t).unwrap_or(usize::MAX)))
}

fn engine_spec(
    engine: &str,
    trials: Option<&Bound<'_, PyAny>>,
    seed: Option<&Bound<'_, PyAny>>,
    threads: Option<&Bound<'_, PyAny>>,
    device: Option<&str>,
) -> PyResult<EngineSpec> {
    Ok(EngineSpec {
        engine: engine_choice(engine)?,
        trials: opt_uint("trials", trials)?,
        seed: opt_uint("seed", seed)?.unwrap_or(DEFAULT_SEED),
        threads: threads_of(threads)?,
        // Parsed here, checked (driver, ordinals) by the command before any work, as on the
        // command line; `None`: the scenario file's `device`, else the CPU.
        device: device
            .map(|d| d.parse().map_err(|e: dsa_sim::indexer::device::DeviceError| PyValueError::new_err(e.0)))
            .transpose()?,
    })
}

fn fit_engine_spec(
    engine: &str,
    trials: Option<&Bound<'_, PyAny>>,
    seed: Option<&Bound<'_, PyAny>>,
    threads: Option<&Bound<'_, PyAny>>,
) -> PyResult<FitEngineSpec> {
    Ok(FitEngineSpec {
        engine: engine_choice(engine)?,
        trials: opt_uint("trials", trials)?.unwrap_or(DEFAULT_FIT_TRIALS),
        seed: opt_uint("seed", seed)?.unwrap_or(DEFAULT_SEED),
        threads: threads_of(threads)?,
    })
}

/// A value's text inside a list of values (`FIELD=V1,V2,…`).
fn item_text(v: &Bound<'_, PyAny>) -> PyResult<String> {
    if let Ok(b) = v.cast::<PyBool>() {
        return Ok(if b.is_true() { "true" } else { "false" }.to_string());
    }
    if v.hasattr("dtype")? && v.hasattr("item")? && v.getattr("ndim").and_then(|n| n.extract::<usize>()).ok() == Some(0)
    {
        return item_text(&v.call_method0("item")?);
    }
    Ok(v.str()?.to_string())
}

/// Axes as `--vary` / `--predict` take them: a `FIELD=VALUES` string, a list of them, or a dict
/// {field: values}, the values a string in the command line's syntax (`1Ki..1Mi:x2`) or a
/// sequence of values.
fn axes(name: &str, v: Option<&Bound<'_, PyAny>>) -> PyResult<Vec<String>> {
    let Some(v) = v.filter(|v| !v.is_none()) else { return Ok(Vec::new()) };
    if let Ok(s) = v.cast::<PyString>() {
        return Ok(vec![s.to_string()]);
    }
    if let Ok(d) = v.cast::<PyDict>() {
        let mut out = Vec::new();
        for (k, vals) in d.iter() {
            let field: String = k.extract()?;
            let values = if let Ok(s) = vals.cast::<PyString>() {
                s.to_string()
            } else if vals.hasattr("__iter__")? {
                vals.try_iter()?.map(|x| item_text(&x?)).collect::<PyResult<Vec<_>>>()?.join(",")
            } else {
                item_text(&vals)?
            };
            out.push(format!("{field}={values}"));
        }
        return Ok(out);
    }
    if v.is_instance_of::<PyList>() || v.is_instance_of::<PyTuple>() {
        return v.try_iter()?.map(|x| x?.extract::<String>()).collect::<PyResult<Vec<_>>>().map_err(|_| {
            PyTypeError::new_err(format!("{name}: expected strings FIELD=VALUES (or a dict {{field: values}})"))
        });
    }
    Err(PyTypeError::new_err(format!("{name}: expected FIELD=VALUES, a list of them, or a dict {{field: values}}")))
}

/// `fit=`: `"dprime,needle_sd=0.1:5"` or a list of the same items.
fn fit_text(v: Option<&Bound<'_, PyAny>>) -> PyResult<Option<String>> {
    let Some(v) = v.filter(|v| !v.is_none()) else { return Ok(None) };
    if let Ok(s) = v.cast::<PyString>() {
        return Ok(Some(s.to_string()));
    }
    let items = v
        .try_iter()
        .and_then(|it| it.map(|x| x?.extract::<String>()).collect::<PyResult<Vec<_>>>())
        .map_err(|_| PyTypeError::new_err("fit: expected \"FIELD[=LO:HI],…\" or a list of such items"))?;
    Ok(Some(items.join(",")))
}

fn estimate(py: Python<'_>, spec: ScenarioSpec, engine: EngineSpec) -> PyResult<Estimated> {
    py.detach(|| commands::estimate::estimate(&spec, &engine, &Silent)).map_err(py_err)
}

/// Recall of a needle, exact (analytic engine) or Monte Carlo with a 95% Wilson interval.
///
/// Keyword arguments: `preset` (a preset name), `scenario` (a TOML scenario file), `engine`
/// ("auto", "analytic", "montecarlo"), `trials`, `seed`, `threads`, `device` ("cpu", "cuda",
/// "cuda:N,M,…"; None: the scenario file's `device`, else "cpu"), and every scenario field by
/// its name (`context_len=131072`, `dprime=3.0`, `pooling="mean"`, `context_len="128Ki"`).
/// Precedence as on the command line: defaults, preset, file, fields.
///
/// Returns the dict `dsa-sim recall --json` prints: recall, ci_low, ci_high, engine, trials,
/// seed, not_exact, n_candidates, coverage_horizon_tokens, rank {quantiles, cdf}, scenario,
/// version. Bad input raises ValueError with the command line's message.
#[pyfunction]
#[pyo3(signature = (*, preset=None, scenario=None, engine="auto", trials=None, seed=None, threads=None, device=None, **fields))]
#[allow(clippy::too_many_arguments)]
fn recall(
    py: Python<'_>,
    preset: Option<String>,
    scenario: Option<PathBuf>,
    engine: &str,
    trials: Option<&Bound<'_, PyAny>>,
    seed: Option<&Bound<'_, PyAny>>,
    threads: Option<&Bound<'_, PyAny>>,
    device: Option<&str>,
    fields: Option<&Bound<'_, PyDict>>,
) -> PyResult<Py<PyAny>> {
    let spec = scenario_spec(preset, scenario, fields)?;
    let r = estimate(py, spec, engine_spec(engine, trials, seed, threads, device)?)?;
    to_py(py, &r.recall_json())
}

/// The needle's rank distribution: quantiles and P(rank ≤ j).
///
/// Keyword arguments as for `recall`. Returns the dict `dsa-sim rank --json` prints
/// (layer, selecting_layers, not_in_rank, n_candidates, quantiles {"0.05": j, …}, cdf [[j, P], …], engine, trials, seed, scenario,
/// version) and, as numpy arrays: `cdf_j` (uint64) and `cdf_p` (float64), the cdf's columns;
/// `quantile_p` (0.05, 0.5, 0.9, 0.95) and `quantile_j` (float64, the smallest j with
/// P(rank ≤ j) ≥ p; inf where never reached).
#[pyfunction]
#[pyo3(signature = (*, preset=None, scenario=None, engine="auto", trials=None, seed=None, threads=None, device=None, **fields))]
#[allow(clippy::too_many_arguments)]
fn rank(
    py: Python<'_>,
    preset: Option<String>,
    scenario: Option<PathBuf>,
    engine: &str,
    trials: Option<&Bound<'_, PyAny>>,
    seed: Option<&Bound<'_, PyAny>>,
    threads: Option<&Bound<'_, PyAny>>,
    device: Option<&str>,
    fields: Option<&Bound<'_, PyDict>>,
) -> PyResult<Py<PyAny>> {
    let spec = scenario_spec(preset, scenario, fields)?;
    let r = estimate(py, spec, engine_spec(engine, trials, seed, threads, device)?)?;
    let out = to_py(py, &r.rank_json())?;
    let d = out.bind(py).cast::<PyDict>()?;
    let cdf = &r.estimate.rank.cdf;
    d.set_item("cdf_j", PyArray1::from_vec(py, cdf.iter().map(|(j, _)| *j).collect::<Vec<u64>>()))?;
    d.set_item("cdf_p", PyArray1::from_vec(py, cdf.iter().map(|(_, p)| *p).collect::<Vec<f64>>()))?;
    let pairs = r.estimate.rank.quantiles.pairs();
    d.set_item("quantile_p", PyArray1::from_vec(py, pairs.iter().map(|(p, _)| *p).collect::<Vec<f64>>()))?;
    d.set_item(
        "quantile_j",
        PyArray1::from_vec(py, pairs.iter().map(|(_, j)| j.map_or(f64::INFINITY, |j| j as f64)).collect::<Vec<f64>>()),
    )?;
    Ok(out)
}

/// The column of a sweep as a numpy array: rank quantiles and trials as float64 (inf where the
/// needle is never selectable, NaN where the result is exact and no trials ran), other numbers
/// as uint64 when all are counts, else float64; booleans as bool; text as an object array.
fn column_array<'py>(py: Python<'py>, name: &str, values: &[&Value]) -> PyResult<Bound<'py, PyAny>> {
    let nullable_fill = if name.starts_with("rank_p") {
        Some(f64::INFINITY)
    } else if name == "trials" {
        Some(f64::NAN)
    } else {
        None
    };
    if let Some(fill) = nullable_fill {
        let v: Vec<f64> = values.iter().map(|x| x.as_f64().unwrap_or(fill)).collect();
        return Ok(PyArray1::from_vec(py, v).into_any());
    }
    if values.iter().all(|x| x.is_u64()) {
        return Ok(PyArray1::from_vec(py, values.iter().filter_map(|x| x.as_u64()).collect::<Vec<u64>>()).into_any());
    }
    if values.iter().all(|x| x.is_number()) {
        return Ok(PyArray1::from_vec(py, values.iter().filter_map(|x| x.as_f64()).collect::<Vec<f64>>()).into_any());
    }
    if values.iter().all(|x| x.is_boolean()) {
        return Ok(PyArray1::from_vec(py, values.iter().filter_map(|x| x.as_bool()).collect::<Vec<bool>>()).into_any());
    }
    let objs = values.iter().map(|x| to_py(py, x)).collect::<PyResult<Vec<Py<PyAny>>>>()?;
    Ok(PyArray1::from_vec(py, objs).into_any())
}

/// Recall and rank quantiles over a grid of scenario fields.
///
/// `vary`: the axes, as `--vary` takes them: "FIELD=V1,V2,…" (ranges `A..B:xF`, `A..B:N`,
/// `A..B:+S`), a list of such strings, or a dict {field: "1Ki..1Mi:x2" or [values]}; the first
/// axis is outermost. `rank=False` leaves out the rank quantiles (as `--no-rank`). Other keyword
/// arguments as for `recall`.
///
/// Returns the dict `dsa-sim sweep --json` prints (run, base_scenario, axes, columns, rows,
/// dsa_sim_version), whose `rows` (one dict per grid point) `pandas.DataFrame` accepts, and
/// `arrays`: {column: numpy array} (rank quantiles as float64 with inf for "never selectable",
/// trials as float64 with NaN where exact).
#[pyfunction]
#[pyo3(signature = (vary, *, rank=true, preset=None, scenario=None, engine="auto", trials=None, seed=None, threads=None, device=None, **fields))]
#[allow(clippy::too_many_arguments)]
fn sweep(
    py: Python<'_>,
    vary: &Bound<'_, PyAny>,
    rank: bool,
    preset: Option<String>,
    scenario: Option<PathBuf>,
    engine: &str,
    trials: Option<&Bound<'_, PyAny>>,
    seed: Option<&Bound<'_, PyAny>>,
    threads: Option<&Bound<'_, PyAny>>,
    device: Option<&str>,
    fields: Option<&Bound<'_, PyDict>>,
) -> PyResult<Py<PyAny>> {
    let spec = scenario_spec(preset, scenario, fields)?;
    let engine = engine_spec(engine, trials, seed, threads, device)?;
    let vary = axes("vary", Some(vary))?;
    let doc = py
        .detach(|| {
            let p = commands::sweep::prepare(&spec, &engine, &vary, rank)?;
            commands::sweep::sweep_json(&p, engine.threads, &Silent)
        })
        .map_err(py_err)?;
    let out = to_py(py, &doc)?;
    let out_dict = out.bind(py).cast::<PyDict>()?;
    let columns: Vec<&str> = doc["columns"].as_array().into_iter().flatten().filter_map(|c| c.as_str()).collect();
    let rows: &[Value] = doc["rows"].as_array().map_or(&[], |r| r.as_slice());
    // The JSON object's keys are sorted; a row dict in the columns' order makes
    // pandas.DataFrame(rows) show the columns as the CSV has them.
    let row_dicts = PyList::empty(py);
    for r in rows {
        let d = PyDict::new(py);
        for &c in &columns {
            d.set_item(c, to_py(py, &r[c])?)?;
        }
        row_dicts.append(d)?;
    }
    out_dict.set_item("rows", row_dicts)?;
    let arrays = PyDict::new(py);
    for &name in &columns {
        let values: Vec<&Value> = rows.iter().map(|r| &r[name]).collect();
        arrays.set_item(name, column_array(py, name, &values)?)?;
    }
    out_dict.set_item("arrays", arrays)?;
    Ok(out)
}

/// Fits scenario fields to measured recall by maximum binomial likelihood.
///
/// `data`: the measured table (a CSV path: context_len,index_topk,trials,hits, optional
/// depth,repeat,compress_ratio,window,needle_tokens,label). `fit`: "dprime,needle_sd=0.1:5" or a list of such
/// items. `compare=True` also fits the named hypotheses and ranks them by AIC; `predict`: what-if
/// axes (as `vary` of `sweep`). `trials` (default 4000 per model evaluation), `seed`, `engine`,
/// `threads`, `preset`, `scenario` and the fields as for `recall`.
///
/// Returns the dict `dsa-sim calibrate --json` prints (estimates, loglik, aic, deviance, df,
/// gof_p, rows, hypotheses, predictions, data, engine, interval_method, band_method, warnings).
#[pyfunction]
#[pyo3(signature = (data, fit, *, compare=false, predict=None, scores=None, preset=None, scenario=None, engine="auto", trials=None, seed=None, threads=None, **fields))]
#[allow(clippy::too_many_arguments)]
fn calibrate(
    py: Python<'_>,
    data: PathBuf,
    fit: &Bound<'_, PyAny>,
    compare: bool,
    predict: Option<&Bound<'_, PyAny>>,
    scores: Option<PathBuf>,
    preset: Option<String>,
    scenario: Option<PathBuf>,
    engine: &str,
    trials: Option<&Bound<'_, PyAny>>,
    seed: Option<&Bound<'_, PyAny>>,
    threads: Option<&Bound<'_, PyAny>>,
    fields: Option<&Bound<'_, PyDict>>,
) -> PyResult<Py<PyAny>> {
    let spec = scenario_spec(preset, scenario, fields)?;
    let engine = fit_engine_spec(engine, trials, seed, threads)?;
    let fit = fit_text(Some(fit))?;
    let predict = axes("predict", predict)?;
    let report = py
        .detach(|| {
            let req = commands::calibrate::CalibrateRequest {
                data: Some(&data),
                fit: fit.as_deref(),
                compare,
                predict: &predict,
                scores: scores.as_deref(),
            };
            commands::calibrate::calibrate(&spec, &engine, &req, &|_| {}).map(|r| r.to_json())
        })
        .map_err(py_err)?;
    to_py(py, &report)
}

/// Coverage- or discrimination-limited? The call, with the k, dprime and noise that would meet
/// the target.
///
/// `target`: the recall to reach (default 0.9, in (0, 1)). `data`: a measured table to diagnose
/// (row checks and every named hypothesis decide the call); with `fit` as well, those fields are
/// calibrated first and every number carries its 95% range. Engine and scenario keyword
/// arguments as for `calibrate`.
///
/// Returns the dict `dsa-sim verdict --json` prints (call, target, recall_now, recall_2k, k_2x,
/// recall_max_k, k_needed, dprime_needed_now, …, explanation, notes; more with `data`).
#[pyfunction]
#[pyo3(signature = (*, target=0.9, data=None, fit=None, preset=None, scenario=None, engine="auto", trials=None, seed=None, threads=None, **fields))]
#[allow(clippy::too_many_arguments)]
fn verdict(
    py: Python<'_>,
    target: f64,
    data: Option<&Bound<'_, PyAny>>,
    fit: Option<&Bound<'_, PyAny>>,
    preset: Option<String>,
    scenario: Option<PathBuf>,
    engine: &str,
    trials: Option<&Bound<'_, PyAny>>,
    seed: Option<&Bound<'_, PyAny>>,
    threads: Option<&Bound<'_, PyAny>>,
    fields: Option<&Bound<'_, PyDict>>,
) -> PyResult<Py<PyAny>> {
    let spec = scenario_spec(preset, scenario, fields)?;
    let engine = fit_engine_spec(engine, trials, seed, threads)?;
    let fit = fit_text(fit)?;
    let tables: Vec<PathBuf> = match data.filter(|d| !d.is_none()) {
        None => Vec::new(),
        Some(d) => match d.extract::<PathBuf>() {
            Ok(p) => vec![p],
            Err(_) => d
                .extract::<Vec<PathBuf>>()
                .map_err(|_| PyTypeError::new_err("data: a path or a list of paths (several tables are joined)"))?,
        },
    };
    let v = py
        .detach(|| {
            let refs: Vec<&std::path::Path> = tables.iter().map(PathBuf::as_path).collect();
            commands::verdict::verdict_tables(&spec, &engine, target, &refs, fit.as_deref(), &|_| {})
                .map(|v| v.to_json())
        })
        .map_err(py_err)?;
    to_py(py, &v)
}

/// A value spec as a flag would carry it: a string as it is, a number, or a list of them
/// joined with commas.
fn spec_text(name: &str, v: &Bound<'_, PyAny>) -> PyResult<String> {
    if let Ok(s) = v.cast::<PyString>() {
        return Ok(s.to_string());
    }
    if v.is_instance_of::<PyBool>() {
        return Err(PyTypeError::new_err(format!("{name}: expected a number, a string or a list of them")));
    }
    if v.is_instance_of::<PyInt>() || v.is_instance_of::<PyFloat>() {
        return Ok(v.str()?.to_string());
    }
    if v.is_instance_of::<PyList>() || v.is_instance_of::<PyTuple>() {
        let items: Vec<String> = v.try_iter()?.map(|x| x.and_then(|x| spec_text(name, &x))).collect::<PyResult<_>>()?;
        return Ok(items.join(","));
    }
    Err(PyTypeError::new_err(format!("{name}: expected a number, a string or a list of them")))
}

/// Measures a live server: needle prompts of exact token lengths (the server's own count) to
/// an OpenAI-compatible server (`/v1/completions`, `chat=True` for chat completions) or SGLang's
/// `/generate` (`generate=True`), scored with RULER's string_match_all, written to the folder
/// `out` (measured.csv, transcript.jsonl, and with `capture=True` captures/ and manifest.csv).
///
/// Cells: `context_len` ("2K..64K:x2" or a list), `depth`, `repeat`, `trials`, or `cells` (a
/// `plan --out` file). Conditions: `labels` ({"build": "fork"} or ["build=fork"]),
/// `concurrency` ([1, 8]), `prefix_cache_twice`. Requests: `max_inflight`, `timeout`,
/// `retries`, `backoff` (seconds), `api_key_env`. `tokenizer`: the served model's
/// tokenizer.json, counting prompts locally (the server's usage still recorded; more than 1%
/// apart raises ValueError before the budget is spent). `dry_run=True` sends nothing and returns
/// the cells, the requests and the tokens.
///
/// Returns the dict `dsa-sim probe --json` prints (out, measured, transcript, manifest, server,
/// model, token_count, requests_sent, requests_resumed, rows, trials, hits, captures, …).
#[pyfunction]
#[pyo3(signature = (url, out=None, *, context_len=None, depth=None, repeat=None, trials=None, cells=None, chat=false, generate=false, model=None, index_topk=512, labels=None, concurrency=None, prefix_cache_twice=false, seed=None, max_inflight=4, timeout=600.0, retries=5, backoff=0.5, max_tokens=32, haystack=None, api_key_env="OPENAI_API_KEY", capture=false, token_count="auto", tokenizer=None, resume=false, dry_run=false, spread=None, template=None, until_decided=false, preset="deepseek-v4-flash", scenario=None, set=None, budget=3000, max_rounds=6, restart_cmd=None, ready_timeout=600.0, data=None))]
#[allow(clippy::too_many_arguments)]
fn probe(
    py: Python<'_>,
    url: String,
    out: Option<PathBuf>,
    context_len: Option<&Bound<'_, PyAny>>,
    depth: Option<&Bound<'_, PyAny>>,
    repeat: Option<&Bound<'_, PyAny>>,
    trials: Option<u64>,
    cells: Option<PathBuf>,
    chat: bool,
    generate: bool,
    model: Option<String>,
    index_topk: u64,
    labels: Option<&Bound<'_, PyAny>>,
    concurrency: Option<&Bound<'_, PyAny>>,
    prefix_cache_twice: bool,
    seed: Option<u64>,
    max_inflight: u32,
    timeout: f64,
    retries: u32,
    backoff: f64,
    max_tokens: u32,
    haystack: Option<PathBuf>,
    api_key_env: &str,
    capture: bool,
    token_count: &str,
    tokenizer: Option<PathBuf>,
    resume: bool,
    dry_run: bool,
    spread: Option<u64>,
    template: Option<String>,
    until_decided: bool,
    preset: &str,
    scenario: Option<PathBuf>,
    set: Option<&Bound<'_, PyAny>>,
    budget: u64,
    max_rounds: u32,
    restart_cmd: Option<String>,
    ready_timeout: f64,
    data: Option<Vec<PathBuf>>,
) -> PyResult<Py<PyAny>> {
    let mut spec = commands::probe::ProbeSpec {
        spread,
        template,
        url,
        out,
        trials,
        cells,
        chat,
        generate,
        model,
        index_topk,
        prefix_cache_twice,
        max_inflight,
        timeout,
        retries,
        backoff,
        max_tokens,
        haystack,
        capture,
        tokenizer,
        resume,
        ..Default::default()
    };
    spec.api_key_env = api_key_env.to_string();
    spec.token_count = token_count.to_string();
    if let Some(s) = seed {
        spec.seed = s;
    }
    spec.context_len = context_len.filter(|v| !v.is_none()).map(|v| spec_text("context_len", v)).transpose()?;
    if let Some(d) = depth.filter(|v| !v.is_none()) {
        spec.depth = spec_text("depth", d)?;
    }
    if let Some(r) = repeat.filter(|v| !v.is_none()) {
        spec.repeat = spec_text("repeat", r)?;
    }
    spec.concurrency = concurrency.filter(|v| !v.is_none()).map(|v| spec_text("concurrency", v)).transpose()?;
    if let Some(l) = labels.filter(|v| !v.is_none()) {
        spec.labels = if let Ok(d) = l.cast::<PyDict>() {
            d.iter().map(|(k, v)| Ok(format!("{}={}", k.str()?, v.str()?))).collect::<PyResult<_>>()?
        } else {
            l.extract::<Vec<String>>()
                .map_err(|_| PyTypeError::new_err("labels: a dict {name: value} or a list of \"name=value\""))?
        };
    }
    if until_decided && !dry_run {
        let mut fields = Vec::new();
        if let Some(d) = set.filter(|v| !v.is_none()) {
            let d = d
                .cast::<PyDict>()
                .map_err(|_| PyTypeError::new_err("set: a dict {field: value}, e.g. {\"stack\": \"none\"}"))?;
            for (k, v) in d.iter() {
                let name = k.str()?.to_string();
                let f = dsa_sim::scenario::Field::from_name(&name)
                    .map_err(|e| PyValueError::new_err(format!("set: {e}")))?;
                fields.push((f, v.str()?.to_string()));
            }
        }
        let l = commands::probe_loop::LoopSpec {
            probe: spec,
            scenario: commands::ScenarioSpec { preset: Some(preset.to_string()), file: scenario, fields },
            engine: commands::FitEngineSpec::default(),
            budget,
            max_rounds,
            restart_cmd,
            ready_timeout,
            data: data.unwrap_or_default(),
        };
        let j = py.detach(|| l.run(&Silent).map(|r| r.to_json())).map_err(py_err)?;
        return to_py(py, &j);
    }
    let j = py
        .detach(|| if dry_run { spec.dry_run().map(|d| d.to_json()) } else { spec.run(&Silent).map(|p| p.to_json()) })
        .map_err(py_err)?;
    to_py(py, &j)
}

/// The cells to measure next that best separate the leading hypotheses, within a trial budget.
///
/// `data`: the measured table the hypotheses are fitted to; the deployment's scenario must be
/// given (`preset`, `scenario` or field keyword arguments). `budget`: total trials (default 1000); `hypotheses`: names of
/// the hypotheses to separate instead of the leading ones; `target`: the verdict's target recall
/// for a physical hypothesis's call (default 0.9, as `--target`). Engine keyword arguments as for
/// `calibrate`.
///
/// Returns the dict `dsa-sim plan --json` prints (cells, budget, total_trials,
/// candidate_k, leading_hypotheses, information, right_call, seed, warnings).
#[pyfunction]
#[pyo3(signature = (data, *, budget=None, hypotheses=None, target=0.9, preset=None, scenario=None, engine="auto", trials=None, seed=None, threads=None, **fields))]
#[allow(clippy::too_many_arguments)]
fn plan(
    py: Python<'_>,
    data: PathBuf,
    budget: Option<&Bound<'_, PyAny>>,
    hypotheses: Option<Vec<String>>,
    target: f64,
    preset: Option<String>,
    scenario: Option<PathBuf>,
    engine: &str,
    trials: Option<&Bound<'_, PyAny>>,
    seed: Option<&Bound<'_, PyAny>>,
    threads: Option<&Bound<'_, PyAny>>,
    fields: Option<&Bound<'_, PyDict>>,
) -> PyResult<Py<PyAny>> {
    let spec = scenario_spec(preset, scenario, fields)?;
    let engine = fit_engine_spec(engine, trials, seed, threads)?;
    let budget = opt_uint("budget", budget)?.unwrap_or(1000);
    let hypotheses = hypotheses.unwrap_or_default();
    let p = py
        .detach(|| {
            let req = commands::plan::PlanRequest {
                data: Some(&data),
                also: &[],
                budget,
                hypotheses: &hypotheses,
                target: Some(target),
            };
            commands::plan::plan(&spec, &engine, &req, &|_| {}).map(|p| p.to_json())
        })
        .map_err(py_err)?;
    to_py(py, &p)
}

/// Quantize-dequantizes numbers with a number format, bit-exactly as `dsa-sim quantize` does.
///
/// `values`: a numpy array (or anything numpy.asarray takes) of any shape; values are converted
/// to float32 first (round to nearest even, as numpy's astype does; a finite value beyond
/// float32's range is refused, as the command line refuses it). `format`: fp32, bf16, fp16,
/// fp8-e4m3, fp8-e5m2, fp4-e2m1, int8, int4, mxfp4, nvfp4, or NAME:BLOCK:SCALE[:floor=F];
/// `block`, `scale` (fp32, ue8m0, e8m0, e4m3) and `amax_floor` as the flags. Blocks run over the
/// values in C order (with block=32 and shape (n, 128), each row holds four blocks).
///
/// Returns a float32 array of the input's shape. Bad input raises ValueError with the command
/// line's message (which speaks of its input as "stdin").
#[pyfunction]
#[pyo3(signature = (values, format, *, block=None, scale=None, amax_floor=None))]
fn quantize<'py>(
    py: Python<'py>,
    values: &Bound<'py, PyAny>,
    format: String,
    block: Option<&Bound<'py, PyAny>>,
    scale: Option<String>,
    amax_floor: Option<&Bound<'py, PyAny>>,
) -> PyResult<Bound<'py, PyAny>> {
    let np = py.import("numpy")?;
    let kw = PyDict::new(py);
    kw.set_item("dtype", "float64")?;
    // float64 holds float16, float32 and the integers up to 2^53 exactly; the conversion to f32
    // below is then the only rounding, with the command line's range check.
    let arr = np.call_method("asarray", (values,), Some(&kw))?;
    let arr = arr.cast::<numpy::PyArrayDyn<f64>>()?.readonly();
    let shape: Vec<usize> = arr.shape().to_vec();
    let view = arr.as_array();
    let mut xs: Vec<f32> = Vec::with_capacity(view.len());
    for (i, &x) in view.iter().enumerate() {
        let y = x as f32;
        if x.is_finite() && y.is_infinite() {
            return Err(PyValueError::new_err(format!(
                "stdin: `{x}` (value {}) is outside the f32 range: allowed magnitudes up to 3.4028235e38",
                i + 1
            )));
        }
        xs.push(y);
    }
    let text = |v: Option<&Bound<'py, PyAny>>| -> PyResult<Option<String>> {
        match v {
            Some(x) if !x.is_none() => Ok(Some(item_text(x)?)),
            _ => Ok(None),
        }
    };
    let req = QuantizeRequest {
        format: Some(format),
        block: text(block)?,
        scale,
        amax_floor: text(amax_floor)?,
        json: false,
    };
    py.detach(|| commands::quantize::quantize(&req, &mut xs)).map_err(py_err)?;
    PyArray1::from_vec(py, xs).reshape(shape).map(|a| a.into_any())
}

/// Per-layer needle selections from captured top-k indices held in memory, as
/// `dsa-sim import topk` computes them from files.
///
/// `topk` is an integer array of shape (queries, layers, index_topk): for each needle query the
/// entries each indexer layer selected (the row a capture script keeps: row P − 1 of a prompt of
/// P tokens), −1 for unused slots. `context_len`, `needle_start` and `needle_tokens` are one int
/// for every query or a sequence of one per query. Returns the dict `import topk --json` prints
/// (requests, by_context, layers with Wilson intervals, per_request, agreement; `files` empty),
/// plus `selected`, a bool array (queries, layers), and `csv`, the selections.csv text that
/// `calibrate(data=…)` reads once written to a file. Bad input raises ValueError.
#[pyfunction]
#[pyo3(signature = (topk, *, context_len, needle_start, needle_tokens, compress_ratio, overlap, labels=None))]
#[allow(clippy::too_many_arguments)]
fn import_topk<'py>(
    py: Python<'py>,
    topk: &Bound<'py, PyAny>,
    context_len: &Bound<'py, PyAny>,
    needle_start: &Bound<'py, PyAny>,
    needle_tokens: &Bound<'py, PyAny>,
    compress_ratio: &Bound<'py, PyAny>,
    overlap: bool,
    labels: Option<Vec<String>>,
) -> PyResult<Py<PyAny>> {
    let np = py.import("numpy")?;
    // No dtype here: asarray converts nothing (a broadcast view stays a view), so the shape and
    // the dtype are checked before a single index is copied.
    let arr = np.call_method1("asarray", (topk,))?;
    let shape: Vec<usize> = arr.getattr("shape")?.extract()?;
    if shape.len() != 3 {
        return Err(PyValueError::new_err(format!("topk: shape {shape:?}: expected (queries, layers, index_topk)")));
    }
    let (n, layers, k) = (shape[0], shape[1], shape[2]);
    let options = dsa_sim::import::topk::Options {
        layers: layers as u64,
        index_topk: k as u64,
        compress_ratio: uint("compress_ratio", compress_ratio)?,
        overlap,
    };
    options.check().map_err(|e| py_err(CommandError::from(e)))?;
    let total = (n as u64).checked_mul(layers as u64 * k as u64);
    if total.is_none_or(|t| t > dsa_sim::import::topk::MAX_ARRAY_VALUES) {
        return Err(PyValueError::new_err(format!(
            "topk: shape {shape:?}: {n} queries × {layers} layers × {k} indices exceed the bound of {} indices in all (import the queries in batches)",
            dsa_sim::import::topk::MAX_ARRAY_VALUES
        )));
    }
    let unsigned64 = integer_dtype("topk", &arr)?;
    // One copy, query by query, into the rows the import reads (strides and broadcasting as
    // numpy has them).
    let mut rows: Vec<Vec<i64>> = Vec::with_capacity(n);
    if unsigned64 {
        // uint64 past i64::MAX is no entry index: kept as i64::MAX, refused as out of range
        // (asarray to int64 would wrap 2^64 − 1 to −1, padding).
        let a = np.call_method1("asarray", (&arr, "uint64"))?;
        let a = a.cast::<numpy::PyArrayDyn<u64>>()?.readonly();
        let v = a.as_array();
        for i in 0..n {
            rows.push(
                v.index_axis(numpy::ndarray::Axis(0), i)
                    .iter()
                    .map(|&x| i64::try_from(x).unwrap_or(i64::MAX))
                    .collect(),
            );
        }
    } else {
        let a = np.call_method1("asarray", (&arr, "int64"))?;
        let a = a.cast::<numpy::PyArrayDyn<i64>>()?.readonly();
        let v = a.as_array();
        for i in 0..n {
            rows.push(v.index_axis(numpy::ndarray::Axis(0), i).iter().copied().collect());
        }
    }
    let per_query = |name: &str, v: &Bound<'py, PyAny>| -> PyResult<Vec<u64>> {
        if v.is_instance_of::<PyInt>() && !v.is_instance_of::<PyBool>() {
            return per_query_scalar(name, v, n);
        }
        let a = np.call_method1("asarray", (v,))?;
        let dims: Vec<usize> = a.getattr("shape")?.extract()?;
        if dims.is_empty() {
            // A numpy scalar: an integer one, as its Python int.
            integer_dtype(name, &a)?;
            return per_query_scalar(name, &a.call_method0("item")?, n);
        }
        if dims.len() != 1 || dims[0] != n {
            return Err(PyValueError::new_err(format!("{name}: expected one integer, or one per query ({n})")));
        }
        if integer_dtype(name, &a)? {
            let a = np.call_method1("asarray", (&a, "uint64"))?;
            let a = a.cast::<numpy::PyArrayDyn<u64>>()?.readonly();
            return Ok(a.as_array().iter().copied().collect());
        }
        let a = np.call_method1("asarray", (&a, "int64"))?;
        let a = a.cast::<numpy::PyArrayDyn<i64>>()?.readonly();
        let xs: Vec<i64> = a.as_array().iter().copied().collect();
        xs.into_iter()
            .map(|x| u64::try_from(x).map_err(|_| PyValueError::new_err(format!("{name}: {x} is negative"))))
            .collect()
    };
    let (ls, ss, ms) = (
        per_query("context_len", context_len)?,
        per_query("needle_start", needle_start)?,
        per_query("needle_tokens", needle_tokens)?,
    );
    if labels.as_ref().is_some_and(|l| l.len() != n) {
        return Err(PyValueError::new_err(format!("labels: expected one per query ({n})")));
    }
    let queries: Vec<dsa_sim::import::topk::ArrayQuery> = rows
        .into_iter()
        .enumerate()
        .map(|(i, indices)| dsa_sim::import::topk::ArrayQuery {
            indices,
            context_len: ls[i],
            needle_start: ss[i],
            needle_tokens: ms[i],
            label: labels.as_ref().map(|l| l[i].clone()),
        })
        .collect();
    let imp = py
        .detach(|| dsa_sim::import::topk::import_arrays(&queries, &options, "topk"))
        .map_err(|e| py_err(CommandError::from(e)))?;
    let d = to_py(py, &imp.json())?;
    let d = d.bind(py).cast::<PyDict>()?.clone();
    let selected: Vec<bool> = imp.selections.iter().flat_map(|s| s.selected.iter().copied()).collect();
    d.set_item("selected", PyArray1::from_vec(py, selected).reshape([n, layers])?)?;
    // The table is read back with the one reader before it is handed out, as the command
    // line does before writing it.
    let csv = imp.checked_csv("topk").map_err(|e| py_err(CommandError::from(e)))?;
    d.set_item("csv", csv)?;
    Ok(d.into_any().unbind())
}

/// One Python int for every one of `n` queries; one of any size out of range is a ValueError
/// (not OverflowError), as every other bad value.
fn per_query_scalar(name: &str, v: &Bound<'_, PyAny>, n: usize) -> PyResult<Vec<u64>> {
    let x = v.extract::<u64>().map_err(|_| {
        PyValueError::new_err(format!(
            "{name} = {}: allowed 0..={}",
            one_line(&v.str().map(|s| s.to_string()).unwrap_or_default()),
            u64::MAX
        ))
    })?;
    Ok(vec![x; n])
}

/// Checks that `a` is an integer array (indices and token counts are integers: a float array
/// would be truncated, as the command line refuses float captures); true when it is uint64,
/// whose values past i64::MAX need care.
fn integer_dtype(name: &str, a: &Bound<'_, PyAny>) -> PyResult<bool> {
    let dtype = a.getattr("dtype")?;
    let kind: String = dtype.getattr("kind")?.extract()?;
    let size: usize = dtype.getattr("itemsize")?.extract()?;
    match kind.as_str() {
        "i" => Ok(false),
        "u" => Ok(size == 8),
        _ => Err(PyValueError::new_err(format!(
            "{name}: dtype {}: expected integers (entry indices and token counts; a float array is refused, not truncated)",
            dtype.str().map(|s| s.to_string()).unwrap_or_default()
        ))),
    }
}

/// Captured indexer scores (.npz): the needle's exact rank, the distractors' tail, and recall
/// predicted at other context lengths and k, as `dsa-sim import scores` computes them.
///
/// `file`: the capture (`scores` and `needle_index`, or `indexer_scores_0`, … per layer).
/// `predict`: what-if axes (as `vary` of `sweep`; the grid is their product). `resamples`
/// (default 200) and `seed`: the bootstrap of the prediction band. `tail_classes`: most tail
/// classes per layer (default and at most 8); `tail_model`: "auto", "classes" or "query-top".
/// `preset`, `scenario` and the fields as for `recall`.
///
/// Returns the dict `dsa-sim import scores --json` prints (file, queries, layers, ranks, tail,
/// predictions, tail_classes, tail_models, max_tail_classes, resamples, seed, scenario,
/// version). Bad input raises ValueError with the command line's message.
#[pyfunction]
#[pyo3(signature = (file, *, predict=None, resamples=None, seed=None, tail_classes=None, tail_model="auto", preset=None, scenario=None, **fields))]
#[allow(clippy::too_many_arguments)]
fn import_scores(
    py: Python<'_>,
    file: PathBuf,
    predict: Option<&Bound<'_, PyAny>>,
    resamples: Option<&Bound<'_, PyAny>>,
    seed: Option<&Bound<'_, PyAny>>,
    tail_classes: Option<&Bound<'_, PyAny>>,
    tail_model: &str,
    preset: Option<String>,
    scenario: Option<PathBuf>,
    fields: Option<&Bound<'_, PyDict>>,
) -> PyResult<Py<PyAny>> {
    let spec = scenario_spec(preset, scenario, fields)?;
    let predict = axes("predict", predict)?;
    let size = |name: &str, v: Option<&Bound<'_, PyAny>>, default: usize| -> PyResult<usize> {
        Ok(opt_uint(name, v)?.map_or(default, |n| usize::try_from(n).unwrap_or(usize::MAX)))
    };
    let req = import::ScoresRequest {
        file: &file,
        predict: &predict,
        resamples: size("resamples", resamples, 200)?,
        seed: opt_uint("seed", seed)?.unwrap_or(DEFAULT_SEED),
        tail_classes: size("tail_classes", tail_classes, import::MAX_TAIL_CLASSES)?,
        tail_model: import::tail_choice(tail_model).map_err(py_err)?,
    };
    let report = py.detach(|| import::scores(&spec, &req, &Silent).map(|r| r.to_json())).map_err(py_err)?;
    to_py(py, &report)
}

/// What each number format does to the vector indexer, every format on the same random queries
/// and keys as fp32, as `dsa-sim formats` computes it.
///
/// `format`: a format or a list of them (default: fp32, bf16, fp16, fp8 and fp4 variants, int8,
/// int4), each applied to queries and keys alike. `trials` (default 40) random queries and key
/// sets per format, `seed`, `threads`. Without `preset` or `scenario` the geometry is
/// deepseek-v4-flash at 131072 tokens; the fields as for `recall` (the model is always the
/// vector model).
///
/// Returns the dict `dsa-sim formats --json` prints (formats, fp32_effective, top_k, trials,
/// seed, n_candidates, scenario, version). Bad input raises ValueError.
#[pyfunction]
#[pyo3(signature = (*, format=None, trials=None, seed=None, threads=None, preset=None, scenario=None, **fields))]
#[allow(clippy::too_many_arguments)]
fn formats(
    py: Python<'_>,
    format: Option<&Bound<'_, PyAny>>,
    trials: Option<&Bound<'_, PyAny>>,
    seed: Option<&Bound<'_, PyAny>>,
    threads: Option<&Bound<'_, PyAny>>,
    preset: Option<String>,
    scenario: Option<PathBuf>,
    fields: Option<&Bound<'_, PyDict>>,
) -> PyResult<Py<PyAny>> {
    let spec = scenario_spec(preset, scenario, fields)?;
    let formats: Vec<String> = match format.filter(|v| !v.is_none()) {
        None => Vec::new(),
        Some(v) => match v.cast::<PyString>() {
            Ok(s) => vec![s.to_string()],
            Err(_) => v
                .try_iter()
                .and_then(|it| it.map(|x| x?.extract::<String>()).collect::<PyResult<Vec<_>>>())
                .map_err(|_| PyTypeError::new_err("format: expected a format name or a list of them"))?,
        },
    };
    let req = commands::formats::FormatsRequest {
        formats: &formats,
        trials: opt_uint("trials", trials)?.unwrap_or(commands::formats::DEFAULT_FORMATS_TRIALS),
        seed: opt_uint("seed", seed)?.unwrap_or(DEFAULT_SEED),
        threads: threads_of(threads)?,
    };
    let report = py.detach(|| commands::formats::formats(&spec, &req).map(|r| r.to_json())).map_err(py_err)?;
    to_py(py, &report)
}

/// dsa-sim: sparse-attention needle retrieval (DeepSeek DSA / V4 CSA and relatives), to tell a
/// coverage failure (raise index_topk) from a discrimination failure (the indexer's precision
/// must improve). Functions mirror the command line's commands: recall, rank, sweep, calibrate,
/// verdict, plan, quantize, import_topk, import_scores, formats; results equal
/// `dsa-sim COMMAND --json` to the last digit.
#[pymodule(name = "dsa_sim")]
fn dsa_sim_module(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add("FIELDS", PyTuple::new(m.py(), Field::ALL.iter().map(|f| f.name()))?)?;
    m.add_function(wrap_pyfunction!(recall, m)?)?;
    m.add_function(wrap_pyfunction!(rank, m)?)?;
    m.add_function(wrap_pyfunction!(sweep, m)?)?;
    m.add_function(wrap_pyfunction!(calibrate, m)?)?;
    m.add_function(wrap_pyfunction!(verdict, m)?)?;
    m.add_function(wrap_pyfunction!(plan, m)?)?;
    m.add_function(wrap_pyfunction!(quantize, m)?)?;
    m.add_function(wrap_pyfunction!(import_topk, m)?)?;
    m.add_function(wrap_pyfunction!(import_scores, m)?)?;
    m.add_function(wrap_pyfunction!(formats, m)?)?;
    m.add_function(wrap_pyfunction!(probe, m)?)?;
    Ok(())
}
