//! The validated [`Scenario`]: every parameter of the scalar model (DESIGN.md §2.1–2.2), its
//! defaults, loading from TOML / JSON, setting a field by name, and the named presets (§2.4).
//!
//! One setter path serves every front end: TOML keys, command-line flags, sweep axes and
//! calibration parameters all go through [`Scenario::set`] or serde, then [`Scenario::validate`],
//! so an invalid value is reported the same way wherever it came from. The keyword-valued
//! fields (distractor law, pooling, readout, …) live in `keywords`, the presets in `presets`.

mod keywords;
mod presets;

pub use keywords::{Compressor, Distractor, Model, Pooling, Readout, RepeatLayout};
pub use presets::{fp4_indexer, fp8_indexer, PRESET_NAMES};

use crate::formats::Format;
use serde::{Deserialize, Serialize};
use std::fmt;

/// Why a scenario could not be built: always names the field, the value and what is allowed.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ScenarioError {
    /// A value outside the field's allowed range.
    #[error("{field} = {value}: {allowed}")]
    OutOfRange {
        /// The field's name, as in TOML.
        field: &'static str,
        /// The offending value, as given.
        value: String,
        /// What the field accepts.
        allowed: String,
    },
    /// A field name that the scenario does not have.
    #[error("unknown field `{0}` (known fields: {known})", known = FIELD_NAMES.join(", "))]
    UnknownField(String),
    /// A value that does not parse as the field's type.
    #[error("{field} = {value:?}: {expected}")]
    Parse {
        /// The field's name.
        field: String,
        /// The text that did not parse.
        value: String,
        /// What was expected.
        expected: String,
    },
    /// An unknown preset name.
    #[error("unknown preset `{0}` (known presets: {known})", known = PRESET_NAMES.join(", "))]
    UnknownPreset(String),
    /// A scenario document (TOML or JSON) that is malformed.
    #[error("{0}")]
    Document(String),
}

impl crate::error::Classify for ScenarioError {
    /// Always bad input: a scenario that does not parse or validate.
    fn kind(&self) -> crate::error::ErrorKind {
        crate::error::ErrorKind::Input
    }
}

/// One retrieval scenario of the scalar model. Field names are the TOML keys and, in kebab-case,
/// the command-line flags. Build with [`Scenario::default`], [`Scenario::preset`],
/// [`Scenario::from_toml_str`] or [`Scenario::set`]; all paths end in [`Scenario::validate`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Scenario {
    /// L: tokens before the query (positions 0..L-1).
    pub context_len: u64,
    /// W: the last W tokens are always attended (sliding window).
    pub window: u64,
    /// S: the first S tokens are always attended (attention sink).
    pub sink: u64,
    /// c: tokens per candidate entry (1 = token-level selection).
    pub compress_ratio: u64,
    /// Whether entry i also pools the previous block (DeepSeek-V4 CSA: 2c tokens per entry).
    pub overlap: bool,
    /// k: candidates the indexer selects.
    pub index_topk: u64,
    /// The top-k kernel's largest supported k (the ceiling for "raise k").
    pub max_topk: u64,
    /// m: consecutive tokens of one needle copy.
    pub needle_tokens: u64,
    /// Needle position as a fraction of the context: start p = floor(depth·(L − m)).
    pub depth: f64,
    /// Law of distractor token scores.
    pub distractor: Distractor,
    /// Look-alike distractors: 0 none, a fraction of N in (0, 1), or an integer count ≥ 1.
    pub hard_negatives: f64,
    /// Mean score of a hard-negative candidate (its sd is 1).
    pub hard_mean: f64,
    /// Mean needle token score, in units of the distractor sd.
    pub dprime: f64,
    /// Standard deviation of a needle token score.
    pub needle_sd: f64,
    /// Entry score from token scores.
    pub pooling: Pooling,
    /// σ_q: sd of independent Normal noise added to every entry score.
    pub score_noise: f64,
    /// r: needle copies; retrieval succeeds if any copy is attended.
    pub repeat: u32,
    /// Placement of the copies.
    pub repeat_layout: RepeatLayout,
    /// n: indexer layers.
    pub layers: u32,
    /// ρ: fraction of the needle's score variance shared across layers (and across its tokens
    /// and copies: the needle's per-trial difficulty).
    pub layer_corr: f64,
    /// How many layers must attend the needle.
    pub readout: Readout,
    /// P(correct answer | needle attended).
    pub p_read: f64,
    /// P(correct answer | needle not attended).
    pub p_guess: f64,
    /// Score model: `scalar` (§2.2) or `vector` (the lightning indexer, §2.3). The vector model
    /// ignores the scalar-only fields distractor, hard_mean, dprime, needle_sd, pooling,
    /// score_noise and layer_corr (layers are independent draws).
    pub model: Model,
    /// Vector model: indexer heads H.
    pub heads: u32,
    /// Vector model: head dimension d (a power of two when `hadamard`).
    pub head_dim: u32,
    /// Vector model: cosine of the needle token's key with the query direction.
    pub alignment: f64,
    /// Vector model: cosine of a hard-negative token's key with the query direction.
    pub hard_alignment: f64,
    /// Vector model: channels (the first ones) of queries and keys scaled by `outlier_scale`.
    pub outlier_channels: u32,
    /// Vector model: the scale of the outlier channels.
    pub outlier_scale: f64,
    /// Vector model: orthonormal Hadamard rotation of queries and keys before quantization.
    pub hadamard: bool,
    /// Vector model: RMS-normalise each entry key after pooling (V3.2 / V4 normalise keys).
    pub key_norm: bool,
    /// Vector model: number format of the queries (see [`crate::formats::Format`]).
    pub q_format: Format,
    /// Vector model: number format of the entry keys in the indexer cache.
    pub k_format: Format,
    /// Vector model: pooling of token keys into entry keys, `mean` or `gated`.
    pub compressor: Compressor,
}

impl Default for Scenario {
    fn default() -> Self {
        Scenario {
            context_len: 65_536,
            window: 0,
            sink: 0,
            compress_ratio: 1,
            overlap: false,
            index_topk: 2048,
            max_topk: 2048,
            needle_tokens: 1,
            depth: 0.5,
            distractor: Distractor::Normal,
            hard_negatives: 0.0,
            hard_mean: 2.0,
            dprime: 3.0,
            needle_sd: 1.0,
            pooling: Pooling::None,
            score_noise: 0.0,
            repeat: 1,
            repeat_layout: RepeatLayout::Spread,
            layers: 1,
            layer_corr: 0.0,
            readout: Readout::Any,
            p_read: 1.0,
            p_guess: 0.0,
            model: Model::Scalar,
            heads: 64,
            head_dim: 128,
            alignment: 0.35,
            hard_alignment: 0.25,
            outlier_channels: 0,
            outlier_scale: 8.0,
            hadamard: true,
            key_norm: true,
            q_format: Format::F32,
            k_format: Format::F32,
            compressor: Compressor::Gated,
        }
    }
}

/// Every field name, in declaration order.
pub const FIELD_NAMES: &[&str] = &[
    "context_len",
    "window",
    "sink",
    "compress_ratio",
    "overlap",
    "index_topk",
    "max_topk",
    "needle_tokens",
    "depth",
    "distractor",
    "hard_negatives",
    "hard_mean",
    "dprime",
    "needle_sd",
    "pooling",
    "score_noise",
    "repeat",
    "repeat_layout",
    "layers",
    "layer_corr",
    "readout",
    "p_read",
    "p_guess",
    "model",
    "heads",
    "head_dim",
    "alignment",
    "hard_alignment",
    "outlier_channels",
    "outlier_scale",
    "hadamard",
    "key_norm",
    "q_format",
    "k_format",
    "compressor",
];

/// The fields read only by the scalar model (the vector model ignores them).
pub const SCALAR_ONLY_FIELDS: &[&str] =
    &["distractor", "hard_mean", "dprime", "needle_sd", "pooling", "score_noise", "layer_corr"];

/// The fields read only by the vector model.
pub const VECTOR_ONLY_FIELDS: &[&str] = &[
    "heads",
    "head_dim",
    "alignment",
    "hard_alignment",
    "outlier_channels",
    "outlier_scale",
    "hadamard",
    "key_norm",
    "q_format",
    "k_format",
    "compressor",
];

/// The fields that hold a real number and can be fitted or varied continuously.
pub const REAL_FIELDS: &[&str] = &[
    "depth",
    "hard_negatives",
    "hard_mean",
    "dprime",
    "needle_sd",
    "score_noise",
    "layer_corr",
    "p_read",
    "p_guess",
    "alignment",
    "hard_alignment",
    "outlier_scale",
];

/// Largest Student-t degrees of freedom accepted. The t law's normalising constant and tail
/// functions lose accuracy as df grows (at df = 10^16 the analytic engine returned recall 0 for
/// a needle the normal law retrieves 87% of the time); at 10^6 the law is within 10^-6 of the
/// normal one, which is what larger df mean.
pub const MAX_STUDENT_T_DF: f64 = 1e6;

/// Most candidate entries a vector-model scenario may have: a trial holds one f32 score per
/// entry per thread (1 GiB here; its keys are streamed). `formats`, which keeps every key to
/// compare formats on the same draws, has its own, lower limit.
pub const MAX_VECTOR_ENTRIES: u64 = 1 << 28;

/// Largest context the model accepts (tokens). The exact paths never allocate per candidate,
/// so this is a sanity bound, not a memory one.
pub const MAX_CONTEXT_LEN: u64 = 1 << 40;

fn parse_err(field: &str, value: &str, expected: impl Into<String>) -> ScenarioError {
    ScenarioError::Parse { field: field.to_string(), value: value.to_string(), expected: expected.into() }
}

fn parse_u64(field: &str, v: &str) -> Result<u64, ScenarioError> {
    let t = v.trim().replace('_', "");
    if let Ok(x) = t.parse::<u64>() {
        return Ok(x);
    }
    // Accept integral floats such as 1e6 or 65536.0 (spreadsheets write them).
    match t.parse::<f64>() {
        Ok(x) if x.is_finite() && x >= 0.0 && x.fract() == 0.0 && x < 1.8e19 => Ok(x as u64),
        _ => Err(parse_err(field, v, "expected a non-negative integer")),
    }
}

fn parse_f64(field: &str, v: &str) -> Result<f64, ScenarioError> {
    v.trim().parse::<f64>().map_err(|_| parse_err(field, v, "expected a number"))
}

fn parse_u32(field: &str, v: &str) -> Result<u32, ScenarioError> {
    u32::try_from(parse_u64(field, v)?).map_err(|_| parse_err(field, v, "expected an integer below 2^32"))
}

fn parse_bool(field: &str, v: &str) -> Result<bool, ScenarioError> {
    match v.trim() {
        "true" | "1" | "yes" => Ok(true),
        "false" | "0" | "no" => Ok(false),
        _ => Err(parse_err(field, v, "expected true or false")),
    }
}

/// A real number as an error message shows it: shortest decimal form, exponent notation for very
/// large or very small magnitudes (`1e300`, not three hundred digits).
fn num(x: f64) -> String {
    if x.is_finite() && x != 0.0 && !(1e-5..1e15).contains(&x.abs()) {
        format!("{x:e}")
    } else {
        format!("{x}")
    }
}

fn range_err(field: &'static str, value: impl fmt::Display, allowed: impl Into<String>) -> ScenarioError {
    ScenarioError::OutOfRange { field, value: value.to_string(), allowed: allowed.into() }
}

impl Scenario {
    /// Sets one field from its textual value (a TOML scalar, a flag's argument, a sweep point).
    /// Does not validate cross-field constraints: call [`Scenario::validate`] afterwards.
    pub fn set(&mut self, field: &str, value: &str) -> Result<(), ScenarioError> {
        let f = field.trim().replace('-', "_");
        match f.as_str() {
            "context_len" => self.context_len = parse_u64(&f, value)?,
            "window" => self.window = parse_u64(&f, value)?,
            "sink" => self.sink = parse_u64(&f, value)?,
            "compress_ratio" => self.compress_ratio = parse_u64(&f, value)?,
            "overlap" => self.overlap = parse_bool(&f, value)?,
            "index_topk" => self.index_topk = parse_u64(&f, value)?,
            "max_topk" => self.max_topk = parse_u64(&f, value)?,
            "needle_tokens" => self.needle_tokens = parse_u64(&f, value)?,
            "depth" => self.depth = parse_f64(&f, value)?,
            "distractor" => self.distractor = value.parse().map_err(|e| parse_err(&f, value, e))?,
            "hard_negatives" => self.hard_negatives = parse_f64(&f, value)?,
            "hard_mean" => self.hard_mean = parse_f64(&f, value)?,
            "dprime" => self.dprime = parse_f64(&f, value)?,
            "needle_sd" => self.needle_sd = parse_f64(&f, value)?,
            "pooling" => self.pooling = value.parse().map_err(|e| parse_err(&f, value, e))?,
            "score_noise" => self.score_noise = parse_f64(&f, value)?,
            "repeat" => {
                self.repeat = u32::try_from(parse_u64(&f, value)?)
                    .map_err(|_| parse_err(&f, value, "expected an integer below 2^32"))?
            }
            "repeat_layout" => self.repeat_layout = value.parse().map_err(|e| parse_err(&f, value, e))?,
            "layers" => {
                self.layers = u32::try_from(parse_u64(&f, value)?)
                    .map_err(|_| parse_err(&f, value, "expected an integer below 2^32"))?
            }
            "layer_corr" => self.layer_corr = parse_f64(&f, value)?,
            "readout" => self.readout = value.parse().map_err(|e| parse_err(&f, value, e))?,
            "p_read" => self.p_read = parse_f64(&f, value)?,
            "p_guess" => self.p_guess = parse_f64(&f, value)?,
            "model" => self.model = value.parse().map_err(|e| parse_err(&f, value, e))?,
            "heads" => self.heads = parse_u32(&f, value)?,
            "head_dim" => self.head_dim = parse_u32(&f, value)?,
            "alignment" => self.alignment = parse_f64(&f, value)?,
            "hard_alignment" => self.hard_alignment = parse_f64(&f, value)?,
            "outlier_channels" => self.outlier_channels = parse_u32(&f, value)?,
            "outlier_scale" => self.outlier_scale = parse_f64(&f, value)?,
            "hadamard" => self.hadamard = parse_bool(&f, value)?,
            "key_norm" => self.key_norm = parse_bool(&f, value)?,
            "q_format" => self.q_format = value.parse().map_err(|e: crate::formats::FormatError| parse_err(&f, value, e.to_string()))?,
            "k_format" => self.k_format = value.parse().map_err(|e: crate::formats::FormatError| parse_err(&f, value, e.to_string()))?,
            "compressor" => self.compressor = value.parse().map_err(|e| parse_err(&f, value, e))?,
            _ => return Err(ScenarioError::UnknownField(field.to_string())),
        }
        Ok(())
    }

    /// The value of a real-valued field (see [`REAL_FIELDS`]) or of an integer field as f64.
    pub fn get(&self, field: &str) -> Result<f64, ScenarioError> {
        let f = field.trim().replace('-', "_");
        Ok(match f.as_str() {
            "context_len" => self.context_len as f64,
            "window" => self.window as f64,
            "sink" => self.sink as f64,
            "compress_ratio" => self.compress_ratio as f64,
            "index_topk" => self.index_topk as f64,
            "max_topk" => self.max_topk as f64,
            "needle_tokens" => self.needle_tokens as f64,
            "depth" => self.depth,
            "hard_negatives" => self.hard_negatives,
            "hard_mean" => self.hard_mean,
            "dprime" => self.dprime,
            "needle_sd" => self.needle_sd,
            "score_noise" => self.score_noise,
            "repeat" => self.repeat as f64,
            "layers" => self.layers as f64,
            "layer_corr" => self.layer_corr,
            "p_read" => self.p_read,
            "p_guess" => self.p_guess,
            "heads" => self.heads as f64,
            "head_dim" => self.head_dim as f64,
            "alignment" => self.alignment,
            "hard_alignment" => self.hard_alignment,
            "outlier_channels" => self.outlier_channels as f64,
            "outlier_scale" => self.outlier_scale,
            _ if FIELD_NAMES.contains(&f.as_str()) => {
                return Err(parse_err(&f, "", "this field is not numeric"))
            }
            _ => return Err(ScenarioError::UnknownField(field.to_string())),
        })
    }

    /// Checks every field and the constraints between fields.
    pub fn validate(&self) -> Result<(), ScenarioError> {
        let s = self;
        if s.context_len == 0 || s.context_len > MAX_CONTEXT_LEN {
            return Err(range_err("context_len", s.context_len, format!("allowed 1..={MAX_CONTEXT_LEN}")));
        }
        if s.compress_ratio == 0 || s.compress_ratio > 1 << 20 {
            return Err(range_err("compress_ratio", s.compress_ratio, "allowed 1..=1048576"));
        }
        if s.index_topk == 0 {
            return Err(range_err("index_topk", s.index_topk, "allowed ≥ 1"));
        }
        if s.max_topk == 0 {
            return Err(range_err("max_topk", s.max_topk, "allowed ≥ 1"));
        }
        if s.window > MAX_CONTEXT_LEN {
            return Err(range_err("window", s.window, format!("allowed 0..={MAX_CONTEXT_LEN}")));
        }
        if s.sink > MAX_CONTEXT_LEN {
            return Err(range_err("sink", s.sink, format!("allowed 0..={MAX_CONTEXT_LEN}")));
        }
        if s.needle_tokens == 0 || s.needle_tokens > s.context_len {
            return Err(range_err(
                "needle_tokens",
                s.needle_tokens,
                format!("allowed 1..=context_len ({})", s.context_len),
            ));
        }
        if !(s.depth.is_finite() && (0.0..=1.0).contains(&s.depth)) {
            return Err(range_err("depth", num(s.depth), "allowed 0..=1"));
        }
        let h = s.hard_negatives;
        if !(h.is_finite() && h >= 0.0 && (h < 1.0 || h.fract() == 0.0)) {
            return Err(range_err(
                "hard_negatives",
                num(h),
                "allowed 0 (none), a fraction of the candidates in (0, 1), or an integer count ≥ 1",
            ));
        }
        for (name, v) in [("hard_mean", s.hard_mean), ("dprime", s.dprime)] {
            if !(v.is_finite() && v.abs() <= 1e3) {
                let name = if name == "hard_mean" { "hard_mean" } else { "dprime" };
                return Err(range_err(name, num(v), "allowed a finite number in [-1000, 1000]"));
            }
        }
        if !(s.needle_sd.is_finite() && (0.0..=1e3).contains(&s.needle_sd)) {
            return Err(range_err("needle_sd", num(s.needle_sd), "allowed 0..=1000"));
        }
        if !(s.score_noise.is_finite() && (0.0..=1e3).contains(&s.score_noise)) {
            return Err(range_err("score_noise", num(s.score_noise), "allowed 0..=1000"));
        }
        if let Distractor::StudentT(df) = s.distractor {
            if !(df.is_finite() && df > 2.0 && df <= MAX_STUDENT_T_DF) {
                return Err(range_err(
                    "distractor",
                    s.distractor,
                    "student_t needs 2 < df (finite variance) ≤ 1000000 (beyond, use normal)",
                ));
            }
        }
        if s.repeat == 0 {
            return Err(range_err("repeat", s.repeat, "allowed ≥ 1"));
        }
        let span = (s.repeat as u64).saturating_mul(s.needle_tokens);
        if s.repeat_layout == RepeatLayout::Adjacent && span > s.context_len {
            return Err(range_err(
                "repeat",
                s.repeat,
                format!(
                    "adjacent copies need repeat × needle_tokens ≤ context_len ({} × {} > {})",
                    s.repeat, s.needle_tokens, s.context_len
                ),
            ));
        }
        if span > 1 << 24 {
            return Err(range_err(
                "repeat",
                s.repeat,
                format!("repeat × needle_tokens must be at most 16777216 ({} × {})", s.repeat, s.needle_tokens),
            ));
        }
        if s.layers == 0 || s.layers > 4096 {
            return Err(range_err("layers", s.layers, "allowed 1..=4096"));
        }
        if !(s.layer_corr.is_finite() && (0.0..=1.0).contains(&s.layer_corr)) {
            return Err(range_err("layer_corr", num(s.layer_corr), "allowed 0..=1"));
        }
        if let Readout::AtLeast(m) = s.readout {
            if m == 0 || m > s.layers {
                return Err(range_err("readout", s.readout, format!("at_least:M needs 1 ≤ M ≤ layers ({})", s.layers)));
            }
        }
        for (name, v) in [("p_read", s.p_read), ("p_guess", s.p_guess)] {
            if !(v.is_finite() && (0.0..=1.0).contains(&v)) {
                let name = if name == "p_read" { "p_read" } else { "p_guess" };
                return Err(range_err(name, num(v), "allowed 0..=1"));
            }
        }
        s.validate_vector()
    }

    /// Checks the vector model's fields (always, so a file is valid whichever model it picks).
    fn validate_vector(&self) -> Result<(), ScenarioError> {
        let s = self;
        if s.heads == 0 || s.heads > 1024 {
            return Err(range_err("heads", s.heads, "allowed 1..=1024"));
        }
        if s.head_dim == 0 || s.head_dim > 4096 {
            return Err(range_err("head_dim", s.head_dim, "allowed 1..=4096"));
        }
        if s.hadamard && !s.head_dim.is_power_of_two() {
            return Err(range_err(
                "head_dim",
                s.head_dim,
                "the Hadamard rotation needs a power of two (or set hadamard = false)",
            ));
        }
        for (name, v) in [("alignment", s.alignment), ("hard_alignment", s.hard_alignment)] {
            if !(v.is_finite() && (-1.0..=1.0).contains(&v)) {
                let name = if name == "alignment" { "alignment" } else { "hard_alignment" };
                return Err(range_err(name, num(v), "allowed -1..=1 (a cosine)"));
            }
        }
        if s.outlier_channels > s.head_dim {
            return Err(range_err(
                "outlier_channels",
                s.outlier_channels,
                format!("allowed 0..=head_dim ({})", s.head_dim),
            ));
        }
        if !(s.outlier_scale.is_finite() && s.outlier_scale > 0.0 && s.outlier_scale <= 1e4) {
            return Err(range_err("outlier_scale", num(s.outlier_scale), "allowed (0, 10000]"));
        }
        for (name, f) in [("q_format", s.q_format), ("k_format", s.k_format)] {
            if let Some(b) = f.block() {
                if !(s.head_dim as usize).is_multiple_of(b) {
                    let name = if name == "q_format" { "q_format" } else { "k_format" };
                    return Err(range_err(
                        name,
                        f,
                        format!("its block ({b}) must divide head_dim ({}): values are scaled per head vector", s.head_dim),
                    ));
                }
            }
        }
        if s.model == Model::Vector {
            let n = s.n_candidates();
            if n > MAX_VECTOR_ENTRIES {
                return Err(range_err(
                    "context_len",
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
    pub fn from_toml_table(table: &toml::Table) -> Result<Scenario, ScenarioError> {
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
    pub fn apply_toml_table(&mut self, table: &toml::Table) -> Result<(), ScenarioError> {
        let s = self;
        for (key, value) in table {
            if key == "preset" {
                continue;
            }
            let text = match value {
                toml::Value::String(t) => t.clone(),
                toml::Value::Integer(i) => i.to_string(),
                toml::Value::Float(x) => x.to_string(),
                toml::Value::Boolean(b) => b.to_string(),
                other => {
                    return Err(parse_err(key, &other.to_string(), "expected a number, string or boolean"))
                }
            };
            s.set(key, &text)?;
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
    pub fn coverage_horizon_tokens(&self) -> u64 {
        self.index_topk.saturating_mul(self.compress_ratio)
    }
}

/// Formats a TOML error as one line: `line L, column C: message`.
pub fn one_line(message: &str, span: Option<std::ops::Range<usize>>, text: &str) -> String {
    let msg = message.replace('\n', " ").trim().to_string();
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
        let s = Scenario::from_toml_str("preset = \"deepseek-v4-flash\"\ncontext_len = 8000\nreadout = \"at_least:1\"").unwrap();
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
    fn set_and_get_by_name() {
        let mut s = Scenario::default();
        s.set("score-noise", "0.25").unwrap();
        s.set("context_len", "1e6").unwrap();
        assert_eq!(s.get("score_noise").unwrap(), 0.25);
        assert_eq!(s.context_len, 1_000_000);
        assert!(matches!(s.set("nope", "1"), Err(ScenarioError::UnknownField(_))));
        assert!(s.set("repeat", "abc").is_err());
        for f in FIELD_NAMES {
            let v = toml::Value::try_from(&s).unwrap();
            assert!(v.get(f).is_some(), "{f} missing from serialisation");
        }
    }
}
