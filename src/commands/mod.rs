//! What each command computes, from its inputs as text to its result: shared by the command line
//! (`src/cli/`, which parses flags into these inputs and prints the results) and the Python
//! package (`python/`, which takes them as keyword arguments). One function per command, so the
//! two front ends resolve the scenario, check the input and build the JSON object the same way:
//! their results are equal to the last digit and their errors carry the same message.
//!
//! A result type offers `to_json()` (the `--json` object of docs/cli.md#output) and `to_text()`
//! (the summary the command prints); only the front ends print.
//!
//! Adding a command is one function here returning a result type, one file in `src/cli/` and
//! one function in `python/src/lib.rs`.

pub mod calibrate;
pub mod estimate;
pub mod formats;
pub mod import;
pub mod plan;
pub mod presets;
pub mod probe;
pub mod probe_loop;
pub mod quantize;
pub mod run;
pub mod sweep;
pub(crate) mod table;
pub mod verdict;

use crate::engine::{EngineChoice, EngineModel, RunOptions, MAX_TRIALS};
/// The defaults of the engine inputs (`--seed`, the calibrating commands' `--trials`).
pub use crate::engine::{DEFAULT_FIT_TRIALS, DEFAULT_SEED};
use crate::error::{Classify, ErrorKind};
use crate::indexer::device::Device;
use crate::scenario::{Field, Scenario};
use std::path::PathBuf;

/// A command's failure: its kind (bad input or a failure, which decides the exit code of the
/// command line and the exception of the Python package) and its message (one line).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommandError {
    /// Bad input or a failure.
    pub kind: ErrorKind,
    /// One-line description naming what was wrong.
    pub message: String,
}

impl CommandError {
    /// Bad input.
    pub fn input(message: impl Into<String>) -> CommandError {
        CommandError { kind: ErrorKind::Input, message: message.into() }
    }
    /// A failure to compute or write.
    pub fn failure(message: impl Into<String>) -> CommandError {
        CommandError { kind: ErrorKind::Failure, message: message.into() }
    }
}

impl std::fmt::Display for CommandError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

/// Every library error becomes a command error of its own kind. (`CommandError` itself does not
/// implement [`Classify`], which would make this conversion overlap the identity.)
impl<E: Classify> From<E> for CommandError {
    fn from(e: E) -> Self {
        CommandError { kind: e.kind(), message: e.to_string() }
    }
}

/// A scenario as the commands take it: a preset, a TOML file, and fields as text (applied in
/// that order, later wins), named by the field table.
#[derive(Debug, Clone, Default)]
pub struct ScenarioSpec {
    /// Start from a named preset.
    pub preset: Option<String>,
    /// Read scenario fields from a TOML file.
    pub file: Option<PathBuf>,
    /// Fields with their text. `ScenarioSpec::resolve` applies them in table order, so the
    /// first bad one in that order is the one reported, however they were given.
    pub fields: Vec<(Field, String)>,
}

impl ScenarioSpec {
    /// Builds the validated scenario: defaults, then the preset, then the file, then the fields.
    /// A field's error names it as its command-line flag (`--depth: …`), as the command line
    /// reports it.
    pub(crate) fn resolve(&self) -> Result<Scenario, CommandError> {
        self.resolve_given().map(|(s, _)| s)
    }

    /// [`ScenarioSpec::resolve`], with the fields the user gave: as flags (keywords) or in the
    /// scenario file, not the preset's. The verdict on a table answers at the table's own length
    /// and k where the user gave none ([`crate::diagnosis::numbers_scenario`]).
    pub(crate) fn resolve_given(&self) -> Result<(Scenario, Vec<Field>), CommandError> {
        self.resolve_all().map(|(s, given, _)| (s, given))
    }

    /// [`ScenarioSpec::resolve`], with the scenario file's `device` key (`device = "cuda"`:
    /// where `recall`, `rank` and `sweep` run the vector model's trials unless the engine names
    /// a device; see [`EngineSpec::options`]). Every command checks the key's syntax; only these
    /// three use it.
    pub(crate) fn resolve_with_device(&self) -> Result<(Scenario, Option<Device>), CommandError> {
        self.resolve_all().map(|(s, _, device)| (s, device))
    }

    fn resolve_all(&self) -> Result<(Scenario, Vec<Field>, Option<Device>), CommandError> {
        let mut given: Vec<Field> = self.fields.iter().map(|(f, _)| *f).collect();
        let mut device = None;
        let mut s = match &self.preset {
            Some(name) => Scenario::preset(name)?,
            None => Scenario::default(),
        };
        if let Some(path) = &self.file {
            let text = crate::input::read_to_string(path)
                .map_err(|e| CommandError::input(format!("--scenario {}: {}", path.display(), e)))?;
            let mut table: toml::Table = toml::from_str(&text).map_err(|e| {
                CommandError::input(format!(
                    "--scenario {}: {}",
                    path.display(),
                    crate::scenario::one_line(e.message(), e.span(), &text)
                ))
            })?;
            if let Some(p) = table.get("preset") {
                if self.preset.is_some() {
                    return Err(CommandError::input(format!(
                        "--preset conflicts with `preset = {p}` in {}: give one of them",
                        path.display()
                    )));
                }
                let name = p.as_str().ok_or_else(|| {
                    CommandError::input(format!(
                        "--scenario {}: preset = {p}: expected a preset name string",
                        path.display()
                    ))
                })?;
                s = Scenario::preset(name)?;
            }
            if let Some(d) = table.remove("device") {
                let text = d.as_str().ok_or_else(|| {
                    CommandError::input(format!(
                        "--scenario {}: device = {d}: expected a string (cpu, cuda, cuda:N or cuda:N,M,…)",
                        path.display()
                    ))
                })?;
                device = Some(
                    text.parse::<Device>()
                        .map_err(|e| CommandError::input(format!("--scenario {}: {e}", path.display())))?,
                );
            }
            s.apply_toml_table(&table)
                .map_err(|e| CommandError::input(format!("--scenario {}: {e}", path.display())))?;
            given.extend(crate::scenario::fields_in_table(&table));
        }
        let mut fields: Vec<&(Field, String)> = self.fields.iter().collect();
        fields.sort_by_key(|(f, _)| *f);
        for (field, value) in fields {
            s.set_text(*field, value).map_err(|e| CommandError::input(format!("--{}: {e}", field.flag())))?;
        }
        s.validate()?;
        Ok((s, given, device))
    }
}

/// Engine, trials, seed and threads of the evaluating commands (`recall`, `rank`, `sweep`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EngineSpec {
    /// auto, analytic or montecarlo.
    pub engine: EngineChoice,
    /// Monte Carlo trials; `None`: the scenario's model decides (`crate::engine::default_trials`).
    pub trials: Option<u64>,
    /// Monte Carlo seed.
    pub seed: u64,
    /// Worker threads; `None`: all cores.
    pub threads: Option<usize>,
    /// Where the vector model's trials run (`--device`); `None`: the scenario file's `device`
    /// key, else the CPU.
    pub device: Option<Device>,
}

/// The defaults of the command line: the auto engine, trials by model, the default seed.
impl Default for EngineSpec {
    fn default() -> Self {
        EngineSpec { engine: EngineChoice::Auto, trials: None, seed: DEFAULT_SEED, threads: None, device: None }
    }
}

impl EngineSpec {
    /// Engine options for a scenario (whose model sets the default trials) and its file's
    /// `device` key ([`ScenarioSpec::resolve_with_device`]): the device is the engine's, else
    /// the file's, else the CPU, checked here before any work.
    pub(crate) fn options(&self, s: &Scenario, file_device: Option<Device>) -> Result<RunOptions, CommandError> {
        let trials = self.trials.unwrap_or(crate::engine::default_trials(s.model));
        check_trials(trials)?;
        crate::engine::check_threads(self.threads)?;
        let device = self.device.or(file_device).unwrap_or_default();
        device.check().map_err(crate::engine::EngineError::from)?;
        Ok(RunOptions {
            engine: self.engine,
            trials,
            seed: self.seed,
            trials_by_model: self.trials.is_none(),
            device,
            ..RunOptions::default()
        })
    }

    /// Runs `f` on a pool of `threads` workers (or the default pool).
    pub(crate) fn in_pool<T: Send>(&self, f: impl FnOnce() -> T + Send) -> Result<T, CommandError> {
        Ok(crate::engine::in_pool(self.threads, f)?)
    }
}

/// Engine settings of the calibrating commands (`calibrate`, `verdict`, `plan`): fewer Monte
/// Carlo trials per evaluation by default than `recall`, as a fit evaluates the model hundreds
/// of times.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FitEngineSpec {
    /// auto, analytic or montecarlo.
    pub engine: EngineChoice,
    /// Monte Carlo trials per model evaluation.
    pub trials: u64,
    /// Monte Carlo seed, shared by every evaluation (common random numbers).
    pub seed: u64,
    /// Worker threads; `None`: all cores.
    pub threads: Option<usize>,
}

impl Default for FitEngineSpec {
    fn default() -> Self {
        FitEngineSpec { engine: EngineChoice::Auto, trials: DEFAULT_FIT_TRIALS, seed: DEFAULT_SEED, threads: None }
    }
}

/// Observes a fit's progress: called with the number of model evaluations so far (the command
/// line draws a spinner from it).
pub(crate) type Evaluations<'a> = &'a (dyn Fn(u64) + Send + Sync);

impl FitEngineSpec {
    /// The engine-backed recall model.
    pub(crate) fn model(&self) -> Result<EngineModel, CommandError> {
        check_trials(self.trials)?;
        crate::engine::check_threads(self.threads)?;
        Ok(EngineModel::new(self.engine, self.trials, self.seed))
    }

    /// Checks that the engine accepts `s` (an analytic-only request on a scenario without a
    /// closed form, a Monte Carlo scenario too large to draw) before any fitting starts, so that
    /// such input is refused as bad input rather than failing mid-way.
    pub(crate) fn check(&self, s: &Scenario) -> Result<(), CommandError> {
        let opts = RunOptions { engine: self.engine, trials: self.trials, seed: self.seed, ..Default::default() };
        Ok(crate::engine::check(s, &opts)?)
    }

    /// Runs `f` on `threads` workers with `model` behind a memo (each distinct scenario
    /// evaluated once: exact, the engines being deterministic) that reports its evaluations to
    /// `observe`.
    pub(crate) fn in_pool_cached<T: Send>(
        &self,
        model: &EngineModel,
        observe: Evaluations,
        f: impl FnOnce(&crate::calibrate::cache::CachedModel) -> T + Send,
    ) -> Result<T, CommandError> {
        self.in_pool(|| f(&crate::calibrate::cache::CachedModel::new(model).with_observer(observe)))
    }

    /// Runs `f` on `threads` workers.
    pub(crate) fn in_pool<T: Send>(&self, f: impl FnOnce() -> T + Send) -> Result<T, CommandError> {
        Ok(crate::engine::in_pool(self.threads, f)?)
    }
}

/// Checks a `--trials` value: 1..=[`MAX_TRIALS`].
pub(crate) fn check_trials(trials: u64) -> Result<(), CommandError> {
    if trials == 0 || trials > MAX_TRIALS {
        return Err(CommandError::input(format!("--trials {trials}: allowed 1..={MAX_TRIALS}")));
    }
    Ok(())
}

/// Writes a command's output file atomically (`plan --out`): the whole file or nothing.
pub fn write_file(path: &std::path::Path, text: &str) -> Result<(), CommandError> {
    crate::output::write_file_atomic(path, text.as_bytes()).map_err(|e| {
        if e.is_input() {
            CommandError::input(e.to_string())
        } else {
            CommandError::failure(e.to_string())
        }
    })
}

/// The scenario as a JSON object.
pub(crate) fn scenario_json(s: &Scenario) -> serde_json::Value {
    serde_json::to_value(s).unwrap_or(serde_json::Value::Null)
}

/// Appends one formatted line to a String buffer.
macro_rules! outln {
    ($buf:expr, $($arg:tt)*) => {{
        use std::fmt::Write as _;
        let _ = writeln!($buf, $($arg)*);
    }};
}
pub(crate) use outln;
