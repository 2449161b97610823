//! The validated [`Scenario`]: every parameter of the scalar and vector models
//! (docs/model.md), its defaults, loading from TOML / JSON, typed access by [`Field`], and the
//! named presets.
//!
//! Every field is declared once, in the table of `fields` ([`Field`], [`FieldSpec`]): the
//! struct, its defaults, its names, kinds, ranges, fit bounds, flag help and axis labels all come
//! from there. One text parser serves every front end: TOML keys, command-line flags, CSV
//! columns and sweep axes all go through [`Scenario::set_text`], then [`Scenario::validate`], so
//! an invalid value is reported the same way wherever it came from. The keyword-valued fields
//! (distractor law, pooling, readout, …) live in `keywords`, the presets in `presets`.

mod fields;
mod keywords;
mod presets;
mod stack;

pub use fields::{
    parse_suffixed_count, Bounds, Field, FieldSpec, FitBounds, Kind, Scenario, Scope, Unit, Value, COUNT_SUFFIXES,
};
pub(crate) use keywords::Compressor;
pub use keywords::{Distractor, Model, Pooling, Readout, RepeatLayout, TopkKernel};
pub(crate) use presets::{find_preset, preset_values, SOURCES};
pub use presets::{PRESETS, PRESET_NAMES};
pub(crate) use stack::LayerKind;
pub use stack::{Stack, StackEntry, HCA_DEFAULT_RATIO};

use std::fmt;

/// Why a scenario could not be built: always names the field, the value and what is allowed.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ScenarioError {
    /// A value outside the field's allowed range.
    #[error("{field} = {}: {allowed}", crate::input::echo(.value))]
    OutOfRange {
        /// The field's name, as in TOML.
        field: &'static str,
        /// The offending value, as given.
        value: String,
        /// What the field accepts.
        allowed: String,
    },
    /// A field name that the scenario does not have.
    #[error("unknown field `{}` (known fields: {known})", crate::input::echo(.0), known = field_names().join(", "))]
    UnknownField(String),
    /// A value that does not parse as the field's type.
    #[error("{} = {}: {}", crate::input::echo(.field), crate::input::echo_quoted(.value), crate::input::cap_line(.expected))]
    Parse {
        /// The field's name.
        field: String,
        /// The text that did not parse.
        value: String,
        /// What was expected.
        expected: String,
    },
    /// An unknown preset name.
    #[error("unknown preset `{}` (known presets: {known})", crate::input::echo(.0), known = PRESET_NAMES.join(", "))]
    UnknownPreset(String),
    /// A scenario document (TOML or JSON) that is malformed.
    #[error("{}", crate::input::cap_line(.0))]
    Document(String),
}

impl crate::error::Classify for ScenarioError {
    /// Always bad input: a scenario that does not parse or validate.
    fn kind(&self) -> crate::error::ErrorKind {
        crate::error::ErrorKind::Input
    }
}

/// Largest Student-t degrees of freedom accepted. The t law's normalising constant and tail
/// functions lose accuracy as df grows (at df = 10^16 the analytic engine returned recall 0 for
/// a needle the normal law retrieves 87% of the time); at 10^6 the law is within 10^-6 of the
/// normal one, which is what larger df mean.
pub(crate) const MAX_STUDENT_T_DF: f64 = 1e6;

/// Most candidate entries a vector-model scenario may have: a trial holds one f32 score per
/// entry per thread (1 GiB here; its keys are streamed). `formats`, which keeps every key to
/// compare formats on the same draws, has its own, lower limit.
pub(crate) const MAX_VECTOR_ENTRIES: u64 = 1 << 28;

/// Largest context the model accepts (tokens). The exact paths never allocate per candidate,
/// so this is a sanity bound, not a memory one.
pub(crate) const MAX_CONTEXT_LEN: u64 = 1 << 40;

/// A real number as an error message shows it: shortest decimal form, exponent notation for very
/// large or very small magnitudes (`1e300`, not three hundred digits).
fn num(x: f64) -> String {
    if x.is_finite() && x != 0.0 && !(1e-5..1e15).contains(&x.abs()) {
        format!("{x:e}")
    } else {
        format!("{x}")
    }
}

/// Every field name, in declaration order.
pub fn field_names() -> Vec<&'static str> {
    Field::ALL.iter().map(|f| f.name()).collect()
}

fn parse_err(field: &str, value: &str, expected: impl Into<String>) -> ScenarioError {
    ScenarioError::Parse { field: field.to_string(), value: value.to_string(), expected: expected.into() }
}

fn range_err(field: Field, value: impl fmt::Display, allowed: impl Into<String>) -> ScenarioError {
    ScenarioError::OutOfRange { field: field.name(), value: value.to_string(), allowed: allowed.into() }
}

impl Scenario {
    /// Checks every field (its range from the field table) and the constraints between fields.
    pub fn validate(&self) -> Result<(), ScenarioError> {
        for f in Field::ALL {
            f.check_bounds(self)?;
        }
        let s = self;
        if s.needle_tokens == 0 || s.needle_tokens > s.context_len {
            return Err(range_err(
                Field::NeedleTokens,
                s.needle_tokens,
                format!("allowed 1..=context_len ({})", s.context_len),
            ));
        }
        let h = s.hard_negatives;
        if !(h.is_finite() && h >= 0.0 && (h < 1.0 || h.fract() == 0.0)) {
            return Err(range_err(
                Field::HardNegatives,
                num(h),
                "allowed 0 (none), a fraction of the candidates in (0, 1), or an integer count ≥ 1",
            ));
        }
        if let Distractor::StudentT(df) = s.distractor {
            if !(df.is_finite() && df > 2.0 && df <= MAX_STUDENT_T_DF) {
                return Err(range_err(
                    Field::Distractor,
                    s.distractor,
                    "student_t needs 2 < df (finite variance) ≤ 1000000 (beyond, use normal)",
                ));
            }
        }
        let span = (s.repeat as u64).saturating_mul(s.needle_tokens);
        if s.repeat_layout == RepeatLayout::Adjacent && span > s.context_len {
            return Err(range_err(
                Field::Repeat,
                s.repeat,
                format!(
                    "adjacent copies need repeat × needle_tokens ≤ context_len ({} × {} > {})",
                    s.repeat, s.needle_tokens, s.context_len
                ),
            ));
        }
        if span > 1 << 24 {
            return Err(range_err(
                Field::Repeat,
                s.repeat,
                format!("repeat × needle_tokens must be at most 16777216 ({} × {})", s.repeat, s.needle_tokens),
            ));
        }
        if let Readout::AtLeast(m) = s.readout {
            let n = s.selecting_layers();
            if m == 0 || m > n {
                return Err(range_err(
                    Field::Readout,
                    s.readout,
                    format!("at_least:M needs 1 ≤ M ≤ the selecting layers ({n})"),
                ));
            }
        }
        s.validate_stack()?;
        s.validate_vector()
    }

    /// Checks the layer stack and the top-k kernel against the other fields.
    fn validate_stack(&self) -> Result<(), ScenarioError> {
        let s = self;
        if let Some(max) = s.topk_kernel.max_k() {
            if s.max_topk != max {
                return Err(range_err(
                    Field::MaxTopk,
                    s.max_topk,
                    format!(
                        "the {} top-k kernel supports at most k = {max} ({}); set topk_kernel = any to choose another maximum",
                        s.topk_kernel,
                        s.topk_kernel.supported_text()
                    ),
                ));
            }
        }
        if s.stack.is_empty() {
            return Ok(());
        }
        if s.layers != 1 {
            return Err(range_err(
                Field::Layers,
                s.layers,
                format!("with a stack ({}) the selecting layers are counted there: set the csa/dsa count in the stack, or stack = none", s.stack),
            ));
        }
        if s.stack.mixed_selecting_kinds() {
            return Err(range_err(
                Field::Stack,
                s.stack,
                "csa and dsa layers in one stack: the selecting layers share the scenario's one geometry",
            ));
        }
        let dsa = s.stack.entries().iter().any(|e| e.kind == LayerKind::Dsa);
        if dsa && (s.compress_ratio != 1 || s.overlap) {
            return Err(range_err(
                Field::Stack,
                s.stack,
                format!(
                    "dsa layers select tokens: compress_ratio must be 1 and overlap false (compress_ratio = {}, overlap = {}); use csa for compressed entries",
                    s.compress_ratio, s.overlap
                ),
            ));
        }
        Ok(())
    }

    /// The layers that select with an indexer: the stack's csa and dsa layers, or `layers`
    /// without a stack. They are the layers of the readout and of captured selections.
    pub fn selecting_layers(&self) -> u32 {
        self.stack.selecting_layers().unwrap_or(self.layers)
    }

    /// The scenario as one selecting layer (the stack cleared, `layers` = 1): what one indexer
    /// does, the per-layer question a stack's readout combines.
    ///
    /// ```
    /// use dsa_sim::Scenario;
    /// let s = Scenario::preset("deepseek-v4-flash").unwrap();
    /// assert_eq!((s.selecting_layers(), s.one_layer().selecting_layers()), (21, 1));
    /// ```
    pub fn one_layer(&self) -> Scenario {
        Scenario { stack: Stack::default(), layers: 1, ..self.clone() }
    }

    /// Sets the selecting layers to `n` (the stack's selecting count, or `layers`).
    pub(crate) fn set_selecting_layers(&mut self, n: u32) {
        if self.stack.is_empty() {
            self.layers = n;
        } else {
            self.stack = self.stack.with_selecting_layers(n);
        }
    }

    /// Checks the vector model's cross-field constraints (always, so a file is valid whichever
    /// model it picks).
    fn validate_vector(&self) -> Result<(), ScenarioError> {
        let s = self;
        if s.hadamard && !s.head_dim.is_power_of_two() {
            return Err(range_err(
                Field::HeadDim,
                s.head_dim,
                "the Hadamard rotation needs a power of two (or set hadamard = false)",
            ));
        }
        if s.outlier_channels > s.head_dim {
            return Err(range_err(
                Field::OutlierChannels,
                s.outlier_channels,
                format!("allowed 0..=head_dim ({})", s.head_dim),
            ));
        }
        for (name, f) in [(Field::QFormat, s.q_format), (Field::KFormat, s.k_format)] {
            if let Some(b) = f.block() {
                if !(s.head_dim as usize).is_multiple_of(b) {
                    return Err(range_err(
                        name,
                        f,
                        format!(
                            "its block ({b}) must divide head_dim ({}): values are scaled per head vector",
                            s.head_dim
                        ),
                    ));
                }
            }
        }
        if s.compressor == Compressor::Quest && s.overlap {
            return Err(range_err(
                Field::Compressor,
                s.compressor,
                "quest pages pool their own block only: set overlap = false",
            ));
        }
        if s.model == Model::Vector {
            let n = s.n_candidates();
            if n > MAX_VECTOR_ENTRIES {
                return Err(range_err(
                    Field::ContextLen,
                    s.context_len,
                    format!(
                        "the vector model scores every entry (one f32 per entry per thread, keys streamed); \
                         {n} entries is over {MAX_VECTOR_ENTRIES} (2^28, 1 GiB): lower context_len or raise compress_ratio"
                    ),
                ));
            }
        }
        Ok(())
    }

    /// Parses a TOML scenario document. A top-level `preset = "NAME"` starts from that preset;
    /// every other key overrides a field. Unknown keys are rejected.
    pub fn from_toml_str(text: &str) -> Result<Scenario, ScenarioError> {
        let table: toml::Table =
            toml::from_str(text).map_err(|e| ScenarioError::Document(one_line(e.message(), e.span(), text)))?;
        Scenario::from_toml_table(&table)
    }

    /// Builds a scenario from an already parsed TOML table (see [`Scenario::from_toml_str`]).
    pub(crate) fn from_toml_table(table: &toml::Table) -> Result<Scenario, ScenarioError> {
        let mut s = match table.get("preset") {
            Some(toml::Value::String(name)) => Scenario::preset(name)?,
            Some(other) => return Err(parse_err("preset", &other.to_string(), "expected a preset name string")),
            None => Scenario::default(),
        };
        s.apply_toml_table(table)?;
        s.validate()?;
        Ok(s)
    }

    /// Sets every field named in a TOML table (a `preset` key is skipped) without validating,
    /// so that later overrides can still fix a cross-field constraint.
    pub(crate) fn apply_toml_table(&mut self, table: &toml::Table) -> Result<(), ScenarioError> {
        let s = self;
        for (key, value) in table {
            if key == "preset" {
                continue;
            }
            if let (Ok(Field::Stack), toml::Value::Array(items)) = (Field::from_name(key), value) {
                s.stack = Stack::from_toml_array(items).map_err(|why| parse_err("stack", &value.to_string(), why))?;
                continue;
            }
            let text = match value {
                toml::Value::String(t) => t.clone(),
                toml::Value::Integer(i) => i.to_string(),
                toml::Value::Float(x) => x.to_string(),
                toml::Value::Boolean(b) => b.to_string(),
                other => return Err(parse_err(key, &other.to_string(), "expected a number, string or boolean")),
            };
            s.set_text(Field::from_name(key)?, &text)?;
        }
        Ok(())
    }

    /// Parses a JSON scenario object (every field optional, unknown fields rejected).
    pub fn from_json_str(text: &str) -> Result<Scenario, ScenarioError> {
        let s: Scenario = serde_json::from_str(text).map_err(|e| ScenarioError::Document(e.to_string()))?;
        s.validate()?;
        Ok(s)
    }

    /// The scenario as a TOML document (every field, resolved).
    pub fn to_toml_string(&self) -> String {
        // Serialising plain fields to TOML cannot fail.
        toml::to_string(self).unwrap_or_default()
    }

    /// Number of candidate entries N = floor(L / c).
    pub fn n_candidates(&self) -> u64 {
        self.context_len / self.compress_ratio
    }

    /// The coverage horizon in tokens, k·c: up to about this context every entry is selected.
    pub(crate) fn coverage_horizon_tokens(&self) -> u64 {
        self.index_topk.saturating_mul(self.compress_ratio)
    }
}

/// Formats a TOML error as one line: `line L, column C: message`.
pub(crate) fn one_line(message: &str, span: Option<std::ops::Range<usize>>, text: &str) -> String {
    let msg = crate::input::cap_line(message.replace('\n', " ").trim()).into_owned();
    match span {
        Some(r) => {
            let before = &text[..r.start.min(text.len())];
            let line = before.matches('\n').count() + 1;
            let col = before.len() - before.rfind('\n').map(|i| i + 1).unwrap_or(0) + 1;
            format!("line {line}, column {col}: {msg}")
        }
        None => msg,
    }
}

/// The fields a scenario TOML table sets (its keys that name a field, by any accepted name):
/// what a scenario file or an experiment's `[scenario]` gives, as against its preset.
pub(crate) fn fields_in_table(table: &toml::Table) -> impl Iterator<Item = Field> + '_ {
    table.keys().filter_map(|k| Field::from_name(k).ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_and_presets_validate() {
        Scenario::default().validate().unwrap();
        for name in PRESET_NAMES {
            Scenario::preset(name).unwrap().validate().unwrap();
        }
    }

    #[test]
    fn toml_round_trip_and_preset_override() {
        let s = Scenario::from_toml_str("preset = \"deepseek-v4-flash\"\ncontext_len = 8000\nreadout = \"at_least:1\"")
            .unwrap();
        assert_eq!(s.compress_ratio, 4);
        assert!(s.overlap);
        assert_eq!(s.context_len, 8000);
        let back = Scenario::from_toml_str(&s.to_toml_string()).unwrap();
        assert_eq!(back, s);
        let json = serde_json::to_string(&s).unwrap();
        assert_eq!(Scenario::from_json_str(&json).unwrap(), s);
    }

    #[test]
    fn unknown_fields_and_bad_values_are_named() {
        let e = Scenario::from_toml_str("contxt_len = 5").unwrap_err().to_string();
        assert!(e.contains("contxt_len"), "{e}");
        let e = Scenario::from_json_str("{\"contxt_len\": 5}").unwrap_err().to_string();
        assert!(e.contains("contxt_len"), "{e}");
        let e = Scenario::from_toml_str("depth = 1.5").unwrap_err().to_string();
        assert!(e.contains("depth") && e.contains("1.5") && e.contains("0..=1"), "{e}");
        let e = Scenario::from_toml_str("layers = 2\nreadout = \"at_least:3\"").unwrap_err().to_string();
        assert!(e.contains("readout") && e.contains("at_least:3"), "{e}");
        let e = Scenario::from_toml_str("dprime = nan").unwrap_err().to_string();
        assert!(e.contains("dprime"), "{e}");
        let e = Scenario::from_toml_str("context_len = -3").unwrap_err().to_string();
        assert!(e.contains("context_len"), "{e}");
        let e = Scenario::from_toml_str("context_len = [1").unwrap_err().to_string();
        assert!(e.contains("line 1"), "{e}");
        assert!(Scenario::from_toml_str("hard_negatives = 2.5").is_err());
        assert!(Scenario::from_toml_str("distractor = \"student_t:2\"").is_err());
        assert!(Scenario::from_toml_str("distractor = \"student_t:4\"").is_ok());
        assert!(Scenario::from_toml_str("distractor = \"student_t:1e6\"").is_ok());
        let e = Scenario::from_toml_str("distractor = \"student_t:1e16\"").unwrap_err().to_string();
        assert!(e.contains("student_t:1e16") && e.contains("1000000"), "{e}");
    }

    #[test]
    fn set_text_by_name() {
        let mut s = Scenario::default();
        s.set_text(Field::from_name("score-noise").unwrap(), "0.25").unwrap();
        s.set_text(Field::ContextLen, "1e6").unwrap();
        assert_eq!(s.get(Field::ScoreNoise), Value::Real(0.25));
        assert_eq!(s.context_len, 1_000_000);
        assert!(matches!(Field::from_name("nope"), Err(ScenarioError::UnknownField(_))));
        assert!(s.set_text(Field::Repeat, "abc").is_err());
        let v = toml::Value::try_from(&s).unwrap();
        for f in Field::ALL {
            assert!(v.get(f.name()).is_some(), "{f} missing from serialisation");
        }
    }
}
