//! The field table: the one declaration every scenario field comes from.
//!
//! Each row of [`scenario_fields!`] gives a field's name (the TOML key; the flag is its
//! kebab-case), its Rust type and default, which score model reads it, its valid range, whether
//! and within which bounds it can be fitted, how figures label it, and its help text. From the
//! table come the [`Scenario`] struct (with serde), its `Default`, the [`Field`] enum, the
//! per-field [`FieldSpec`]s, typed access ([`Scenario::get`] / [`Scenario::set`]) and the one
//! text parser ([`Scenario::set_text`]) that every front end (flags, TOML, CSV columns, sweep
//! axes) goes through. Adding a field is one row here plus its tests.

use super::{
    num, Compressor, Distractor, Model, Pooling, Readout, RepeatLayout, ScenarioError, Stack, TopkKernel,
    MAX_CONTEXT_LEN,
};
use crate::formats::Format;
use crate::vector_fields::{HeadWeights, RopeAt};
use serde::{Deserialize, Serialize};
use std::fmt;

/// Which score model reads a field.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    /// Both models (geometry, selection, readout).
    Both,
    /// Only the scalar score model.
    Scalar,
    /// Only the vector (lightning-indexer) model.
    Vector,
}

impl Scope {
    /// Whether a scenario of model `m` reads a field of this scope.
    pub(crate) fn read_by(self, m: Model) -> bool {
        match self {
            Scope::Both => true,
            Scope::Scalar => m == Model::Scalar,
            Scope::Vector => m == Model::Vector,
        }
    }
}

/// The type of a field's values.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A non-negative integer (u64).
    Count,
    /// A non-negative integer below 2^32 (u32).
    SmallCount,
    /// A real number.
    Real,
    /// true / false.
    Flag,
    /// A keyword (distractor law, pooling, …) or a number format.
    Keyword,
}

/// How a field's numbers read on a figure axis.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unit {
    /// A span of tokens: log2 axis when wide, values of whole KiB shown as `64K`.
    TokenSpan,
    /// A count of tokens or candidates: log2 axis when wide.
    TokenCount,
    /// Anything else.
    Plain,
}

/// The range a field's value must lie in, on its own (constraints between fields are checked by
/// [`super::Scenario::validate`]).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Bounds {
    /// No single-field constraint beyond the type (or only cross-field ones).
    Any,
    /// An integer in `min..=max` (`max: None`: any value of the type).
    Count {
        /// Smallest allowed value.
        min: u64,
        /// Largest allowed value.
        max: Option<u64>,
    },
    /// A finite real in `[min, max]` (or `(min, max]` when `open_min`).
    Real {
        /// Lower end.
        min: f64,
        /// Upper end.
        max: f64,
        /// Whether `min` itself is excluded.
        open_min: bool,
        /// The allowed range as error messages state it (`""`: `min..=max`).
        text: &'static str,
    },
}

impl Bounds {
    const fn count(min: u64, max: u64) -> Bounds {
        Bounds::Count { min, max: Some(max) }
    }
    const fn at_least(min: u64) -> Bounds {
        Bounds::Count { min, max: None }
    }
    const fn real(min: f64, max: f64) -> Bounds {
        Bounds::Real { min, max, open_min: false, text: "" }
    }
    const fn real_text(min: f64, max: f64, open_min: bool, text: &'static str) -> Bounds {
        Bounds::Real { min, max, open_min, text }
    }

    /// The allowed range as error messages state it (`allowed …`).
    pub(crate) fn allowed(&self) -> String {
        match *self {
            Bounds::Any => "any value".to_string(),
            Bounds::Count { min, max: None } => format!("allowed ≥ {min}"),
            Bounds::Count { min, max: Some(max) } => format!("allowed {min}..={max}"),
            Bounds::Real { text, .. } if !text.is_empty() => format!("allowed {text}"),
            Bounds::Real { min, max, .. } => format!("allowed {min}..={max}"),
        }
    }

    fn check(&self, field: Field, v: &Value) -> Result<(), ScenarioError> {
        let bad = |shown: String| {
            Err(ScenarioError::OutOfRange { field: field.name(), value: shown, allowed: self.allowed() })
        };
        match (*self, v) {
            (Bounds::Count { min, max }, Value::Count(x)) if *x < min || max.is_some_and(|m| *x > m) => {
                bad(x.to_string())
            }
            (Bounds::Real { min, max, open_min, .. }, Value::Real(x)) => {
                let above = if open_min { *x > min } else { *x >= min };
                if x.is_finite() && above && *x <= max {
                    Ok(())
                } else {
                    bad(num(*x))
                }
            }
            _ => Ok(()),
        }
    }
}

/// How a field can be fitted to measured recall: its default search range, and which ends are
/// physical limits (an estimate there is legitimate) rather than arbitrary search bounds (an
/// estimate there means the likelihood still improves beyond it).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct FitBounds {
    /// Lower end of the default search range.
    pub(crate) lo: f64,
    /// Upper end of the default search range.
    pub(crate) hi: f64,
    /// Whether `lo` is a physical limit of the field.
    pub(crate) lo_physical: bool,
    /// Whether `hi` is a physical limit of the field.
    pub(crate) hi_physical: bool,
}

const fn fit(lo: f64, hi: f64, lo_physical: bool, hi_physical: bool) -> Option<FitBounds> {
    Some(FitBounds { lo, hi, lo_physical, hi_physical })
}

/// Everything the table says about one field.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct FieldSpec {
    /// The field.
    pub field: Field,
    /// snake_case name: the TOML key.
    pub name: &'static str,
    /// Its value type.
    pub kind: Kind,
    /// Which model reads it.
    pub scope: Scope,
    /// Its single-field range.
    pub bounds: Bounds,
    /// How figure axes show it.
    pub unit: Unit,
    /// Default search range when fitted (`None`: not fittable).
    pub fit: Option<FitBounds>,
    /// Short symbol in value labels (`k = 512`); `""`: the name.
    pub symbol: &'static str,
    /// Axis title; `""`: the name (with `(tokens)` for token units).
    pub title: &'static str,
    /// The flag's help text (also the struct field's documentation).
    pub help: &'static str,
}

/// A typed field value.
#[derive(Debug, Clone, Copy, PartialEq)]
// A `Stack` is a fixed array (every value is `Copy`), so this enum is ~450 bytes; values are
// built when a field is read or set, never in a trial's loop, so the size costs nothing.
#[allow(clippy::large_enum_variant)]
pub enum Value {
    /// An integer (count) field.
    Count(u64),
    /// A real field.
    Real(f64),
    /// A boolean field.
    Flag(bool),
    /// `distractor`.
    Distractor(Distractor),
    /// `pooling`.
    Pooling(Pooling),
    /// `repeat_layout`.
    RepeatLayout(RepeatLayout),
    /// `readout`.
    Readout(Readout),
    /// `model`.
    Model(Model),
    /// `q_format`, `k_format`.
    Format(Format),
    /// `compressor`.
    Compressor(Compressor),
    /// `topk_kernel`.
    TopkKernel(TopkKernel),
    /// `stack`.
    Stack(Stack),
    /// `head_weights`.
    HeadWeights(HeadWeights),
    /// `rope_at`.
    RopeAt(RopeAt),
}

impl Value {
    /// The value as a number, for count and real fields.
    pub(crate) fn as_f64(&self) -> Option<f64> {
        match *self {
            Value::Count(x) => Some(x as f64),
            Value::Real(x) => Some(x),
            _ => None,
        }
    }

    /// The value as JSON (numbers as numbers, keywords and formats as strings).
    pub(crate) fn to_json(self) -> serde_json::Value {
        match self {
            Value::Count(x) => serde_json::Value::from(x),
            Value::Real(x) => serde_json::Value::from(x),
            Value::Flag(b) => serde_json::Value::Bool(b),
            // The stack is a list of entries in JSON and TOML, its text form elsewhere.
            Value::Stack(st) => serde_json::to_value(st).unwrap_or_default(),
            _ => serde_json::Value::String(self.to_string()),
        }
    }
}

/// The canonical text: what TOML and JSON write, strings unquoted (`1e6` given on the command
/// line shows as `1000000`; reals in shortest round-trip form, `1.0` for one).
impl fmt::Display for Value {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Value::Count(x) => write!(f, "{x}"),
            // serde_json's float form (shortest round trip, always with a `.` or exponent),
            // which the committed result files use.
            Value::Real(x) => write!(f, "{}", serde_json::Value::from(*x)),
            Value::Flag(b) => write!(f, "{b}"),
            Value::Distractor(v) => write!(f, "{v}"),
            Value::Pooling(v) => write!(f, "{v}"),
            Value::RepeatLayout(v) => write!(f, "{v}"),
            Value::Readout(v) => write!(f, "{v}"),
            Value::Model(v) => write!(f, "{v}"),
            Value::Format(v) => write!(f, "{v}"),
            Value::Compressor(v) => write!(f, "{v}"),
            Value::TopkKernel(v) => write!(f, "{v}"),
            Value::Stack(v) => write!(f, "{v}"),
            Value::HeadWeights(v) => write!(f, "{v}"),
            Value::RopeAt(v) => write!(f, "{v}"),
        }
    }
}

fn parse_err(field: Field, text: &str, expected: impl Into<String>) -> ScenarioError {
    ScenarioError::Parse { field: field.name().to_string(), value: text.to_string(), expected: expected.into() }
}

/// A type a field can have: how its text parses and how it converts to and from [`Value`].
trait FieldType: Sized {
    const KIND: Kind;
    fn parse(field: Field, text: &str) -> Result<Self, ScenarioError>;
    fn into_value(self) -> Value;
    fn from_value(field: Field, v: Value) -> Result<Self, ScenarioError>;
}

fn mismatch(field: Field, v: Value) -> ScenarioError {
    let expected = match field.spec().kind {
        Kind::Count | Kind::SmallCount => "expected a non-negative integer",
        Kind::Real => "expected a number",
        Kind::Flag => "expected true or false",
        Kind::Keyword => "expected the field's keyword",
    };
    parse_err(field, &v.to_string(), expected)
}

/// Token-count suffixes, exactly: `K` (or `k`) = 10^3, `M` = 10^6, `G` = 10^9 (decimal, SI);
/// `Ki` = 2^10, `Mi` = 2^20, `Gi` = 2^30 (binary, IEC). So `16K` = 16000, `16Ki` = 16384,
/// `128Ki` = 131072, `1M` = 1000000, `1Mi` = 1048576; a decimal mantissa is allowed when the
/// product is whole (`1.5K` = 1500, `0.5Mi` = 524288, `1.5Ki` = 1536; `1.0001K` is an error).
pub const COUNT_SUFFIXES: &[(&str, u64)] = &[
    ("Ki", 1 << 10),
    ("Mi", 1 << 20),
    ("Gi", 1 << 30),
    ("K", 1_000),
    ("k", 1_000),
    ("M", 1_000_000),
    ("G", 1_000_000_000),
];

/// A count written with a suffix of [`COUNT_SUFFIXES`] (`16K`, `1Mi`, `1.5M`; underscores and
/// surrounding spaces ignored): `None` when `text` has no such suffix, else the exact value or
/// why it is not one (a phrase without the value, for the caller's message).
pub fn parse_suffixed_count(text: &str) -> Option<Result<u64, String>> {
    let t = text.trim().replace('_', "");
    let (mantissa, mult) =
        COUNT_SUFFIXES.iter().find_map(|(suf, m)| t.strip_suffix(suf).map(|rest| (rest.trim_end(), *m)))?;
    let (int, frac) = mantissa.split_once('.').unwrap_or((mantissa, ""));
    let digits = |d: &str| d.bytes().all(|b| b.is_ascii_digit());
    if int.is_empty() && frac.is_empty() || !digits(int) || !digits(frac) || frac.len() > 18 || int.len() > 20 {
        return Some(Err(
            "expected a count: digits with a suffix K, M, G (10^3, 10^6, 10^9) or Ki, Mi, Gi (2^10, 2^20, 2^30), e.g. 16K or 128Ki"
                .to_string(),
        ));
    }
    let scale = 10u128.pow(frac.len() as u32);
    let num = int.parse::<u128>().unwrap_or(0) * scale + frac.parse::<u128>().unwrap_or(0);
    let total = num * mult as u128;
    if !total.is_multiple_of(scale) {
        return Some(Err("not a whole number".to_string()));
    }
    Some(u64::try_from(total / scale).map_err(|_| "too large (at most 2^64 - 1)".to_string()))
}

fn parse_count(field: Field, v: &str) -> Result<u64, ScenarioError> {
    let t = v.trim().replace('_', "");
    if let Ok(x) = t.parse::<u64>() {
        return Ok(x);
    }
    if let Some(r) = parse_suffixed_count(&t) {
        return r.map_err(|why| parse_err(field, v, why));
    }
    // Accept integral floats such as 1e6 or 65536.0 (spreadsheets write them).
    match t.parse::<f64>() {
        Ok(x) if x.is_finite() && x >= 0.0 && x.fract() == 0.0 && x < 1.8e19 => Ok(x as u64),
        _ => Err(parse_err(field, v, "expected a non-negative integer")),
    }
}

fn parse_real(field: Field, v: &str) -> Result<f64, ScenarioError> {
    v.trim().parse::<f64>().map_err(|_| parse_err(field, v, "expected a number"))
}

fn parse_flag(field: Field, v: &str) -> Result<bool, ScenarioError> {
    match v.trim() {
        "true" | "1" | "yes" => Ok(true),
        "false" | "0" | "no" => Ok(false),
        _ => Err(parse_err(field, v, "expected true or false")),
    }
}

fn parse_keyword<T: std::str::FromStr>(field: Field, v: &str) -> Result<T, ScenarioError>
where
    T::Err: fmt::Display,
{
    v.parse().map_err(|e| parse_err(field, v, format!("{e}")))
}

/// `FieldType` for a type stored in its own [`Value`] variant, with its text parser.
macro_rules! field_type {
    ($($t:ty => $variant:ident, $kind:ident, $parse:expr;)*) => {$(
        impl FieldType for $t {
            const KIND: Kind = Kind::$kind;
            fn parse(field: Field, v: &str) -> Result<$t, ScenarioError> {
                $parse(field, v)
            }
            fn into_value(self) -> Value {
                Value::$variant(self)
            }
            fn from_value(field: Field, v: Value) -> Result<$t, ScenarioError> {
                match v {
                    Value::$variant(x) => Ok(x),
                    other => Err(mismatch(field, other)),
                }
            }
        }
    )*};
}
field_type! {
    u64 => Count, Count, parse_count;
    f64 => Real, Real, parse_real;
    bool => Flag, Flag, parse_flag;
    Distractor => Distractor, Keyword, parse_keyword;
    Pooling => Pooling, Keyword, parse_keyword;
    RepeatLayout => RepeatLayout, Keyword, parse_keyword;
    Readout => Readout, Keyword, parse_keyword;
    Model => Model, Keyword, parse_keyword;
    Format => Format, Keyword, parse_keyword;
    Compressor => Compressor, Keyword, parse_keyword;
    TopkKernel => TopkKernel, Keyword, parse_keyword;
    Stack => Stack, Keyword, parse_keyword;
    HeadWeights => HeadWeights, Keyword, parse_keyword;
    RopeAt => RopeAt, Keyword, parse_keyword;
}

/// u32 fields share [`Value::Count`] with u64 ones and are range-checked on the way in.
impl FieldType for u32 {
    const KIND: Kind = Kind::SmallCount;
    fn parse(field: Field, v: &str) -> Result<u32, ScenarioError> {
        u32::try_from(parse_count(field, v)?).map_err(|_| parse_err(field, v, "expected an integer below 2^32"))
    }
    fn into_value(self) -> Value {
        Value::Count(self as u64)
    }
    fn from_value(field: Field, v: Value) -> Result<u32, ScenarioError> {
        match v {
            Value::Count(x) => {
                u32::try_from(x).map_err(|_| parse_err(field, &x.to_string(), "expected an integer below 2^32"))
            }
            other => Err(mismatch(field, other)),
        }
    }
}

/// Declares the scenario's fields. One row per field:
///
/// `name / Variant: Type = default; scope S, bounds B, unit U, fit F, symbol "…", title "…",
/// help "…";`
macro_rules! scenario_fields {
    ($(
        $name:ident / $variant:ident : $ty:ty = $default:expr ;
        scope $scope:ident , bounds $bounds:expr , unit $unit:ident , fit $fit:expr ,
        symbol $symbol:literal , title $title:literal , help $help:literal ;
    )*) => {
        /// One retrieval scenario. Field names are the TOML keys and, in kebab-case, the
        /// command-line flags. Build with [`Scenario::default`], [`Scenario::preset`],
        /// [`Scenario::from_toml_str`] or [`Scenario::set`]; all paths end in
        /// [`Scenario::validate`].
        ///
        /// ```
        /// use dsa_sim::scenario::{Field, Scenario, Value};
        ///
        /// let mut s = Scenario::preset("deepseek-v4-flash").unwrap();
        /// s.set(Field::ContextLen, Value::Count(131_072)).unwrap();
        /// s.set_text(Field::Dprime, "2.5").unwrap(); // text is parsed once, here
        /// s.validate().unwrap();
        /// assert_eq!(s.get(Field::Dprime), Value::Real(2.5));
        /// assert_eq!(s.n_candidates(), 32_768); // c = 4
        /// assert!(s.set(Field::Depth, Value::Flag(true)).is_err()); // wrong type
        /// ```
        #[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
        #[serde(default, deny_unknown_fields)]
        pub struct Scenario {
            // A field's help is the plain text of its `--help` line too, where brackets are the
            // command line's notation (`NAME[:BLOCK[:SCALE]]`), not links to resolve.
            $( #[doc = $help] #[allow(rustdoc::broken_intra_doc_links)] pub $name: $ty, )*
        }

        impl Default for Scenario {
            fn default() -> Self {
                Scenario { $( $name: $default, )* }
            }
        }

        /// A scenario field. [`Field::spec`] says everything the table knows about it.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum Field {
            // As the struct's fields: the help is `--help` text, its brackets no links.
            $( #[doc = $help] #[allow(rustdoc::broken_intra_doc_links)] $variant, )*
        }

        static SPECS: &[FieldSpec] = &[
            $( FieldSpec {
                field: Field::$variant,
                name: stringify!($name),
                kind: <$ty as FieldType>::KIND,
                scope: Scope::$scope,
                bounds: $bounds,
                unit: Unit::$unit,
                fit: $fit,
                symbol: $symbol,
                title: $title,
                help: $help,
            }, )*
        ];

        impl Field {
            /// Every field, in declaration (and TOML) order.
            pub const ALL: &'static [Field] = &[ $( Field::$variant, )* ];

            /// The value of this field in `s`.
            fn read(self, s: &Scenario) -> Value {
                match self { $( Field::$variant => s.$name.clone().into_value(), )* }
            }

            fn write(self, s: &mut Scenario, v: Value) -> Result<(), ScenarioError> {
                match self { $( Field::$variant => s.$name = <$ty as FieldType>::from_value(self, v)?, )* }
                Ok(())
            }

            fn parse_into(self, s: &mut Scenario, text: &str) -> Result<(), ScenarioError> {
                match self { $( Field::$variant => s.$name = <$ty as FieldType>::parse(self, text)?, )* }
                Ok(())
            }
        }
    };
}

scenario_fields! {
    context_len / ContextLen: u64 = 65_536;
        scope Both, bounds Bounds::count(1, MAX_CONTEXT_LEN), unit TokenSpan, fit None,
        symbol "L", title "context length L (tokens)",
        help "Tokens before the query (default 65536).";
    window / Window: u64 = 0;
        scope Both, bounds Bounds::count(0, MAX_CONTEXT_LEN), unit TokenSpan, fit None,
        symbol "", title "",
        help "Sliding window of W positions ending at (and including) the query token: the last W − 1 tokens are always attended (default 0; V4: 128).";
    sink / Sink: u64 = 0;
        scope Both, bounds Bounds::count(0, MAX_CONTEXT_LEN), unit TokenSpan, fit None,
        symbol "", title "",
        help "Attention sink: the first S tokens are always attended (default 0).";
    compress_ratio / CompressRatio: u64 = 1;
        scope Both, bounds Bounds::count(1, 1 << 20), unit TokenCount, fit None,
        symbol "", title "",
        help "Tokens per candidate entry, c (default 1 = token-level; V4 CSA: 4).";
    overlap / Overlap: bool = false;
        scope Both, bounds Bounds::Any, unit Plain, fit None,
        symbol "", title "",
        help "true: entry i also pools the previous block (V4 CSA). Default false.";
    index_topk / IndexTopk: u64 = 2048;
        scope Both, bounds Bounds::at_least(1), unit TokenCount, fit None,
        symbol "k", title "index_topk k (selected candidates)",
        help "k: candidates the indexer selects (default 2048).";
    max_topk / MaxTopk: u64 = 2048;
        scope Both, bounds Bounds::at_least(1), unit TokenCount, fit None,
        symbol "", title "",
        help "Largest k the top-k kernel supports (default 2048; set by topk_kernel when that is not any).";
    min_topk / MinTopk: u64 = 0;
        scope Both, bounds Bounds::Any, unit TokenCount, fit None,
        symbol "", title "",
        help "Fewest candidates selected whatever index_topk is (default 0; Quest's evaluation: 3 pages).";
    topk_kernel / TopkKernel: TopkKernel = TopkKernel::Any;
        scope Both, bounds Bounds::Any, unit Plain, fit None,
        symbol "", title "",
        help "The serving stack's top-k kernel: any (k up to max_topk), sglang-v1 (k 512 or 1024), sglang-v2 (k ≤ 2048) or aiter (k ≤ 2048); sets max_topk. Default any.";
    needle_tokens / NeedleTokens: u64 = 1;
        scope Both, bounds Bounds::Any, unit TokenCount, fit None,
        symbol "", title "",
        help "Consecutive tokens of one needle copy (default 1).";
    depth / Depth: f64 = 0.5;
        scope Both, bounds Bounds::real(0.0, 1.0), unit Plain, fit fit(0.0, 1.0, true, true),
        symbol "", title "needle depth (0 = start of context, 1 = end)",
        help "Needle position, 0 = start, 1 = end of the context (default 0.5).";
    distractor / Distractor: Distractor = Distractor::Normal;
        scope Scalar, bounds Bounds::Any, unit Plain, fit None,
        symbol "", title "",
        help "Distractor score law: normal, gumbel or student_t:DF (default normal).";
    hard_negatives / HardNegatives: f64 = 0.0;
        scope Both, bounds Bounds::Any, unit Plain, fit fit(0.0, 0.95, true, false),
        symbol "", title "",
        help "Look-alike distractors: a count ≥ 1 or a fraction of the candidates in (0, 1) (default 0).";
    hard_mean / HardMean: f64 = 2.0;
        scope Scalar, bounds Bounds::real_text(-1e3, 1e3, false, "a finite number in [-1000, 1000]"), unit Plain,
        fit fit(-5.0, 15.0, false, false),
        symbol "", title "",
        help "Mean score of a hard negative, in distractor sd (default 2).";
    dprime / Dprime: f64 = 3.0;
        scope Scalar, bounds Bounds::real_text(-1e3, 1e3, false, "a finite number in [-1000, 1000]"), unit Plain,
        fit fit(-10.0, 15.0, false, false),
        symbol "", title "dprime: needle score separation (distractor sd units)",
        help "Needle's mean score above a typical distractor, in distractor sd (default 3).";
    needle_sd / NeedleSd: f64 = 1.0;
        scope Scalar, bounds Bounds::real(0.0, 1e3), unit Plain, fit fit(0.05, 10.0, false, false),
        symbol "", title "",
        help "Spread of the needle's score from trial to trial (default 1).";
    pooling / Pooling: Pooling = Pooling::None;
        scope Scalar, bounds Bounds::Any, unit Plain, fit None,
        symbol "", title "",
        help "Entry score from its tokens: none, mean or max (default none).";
    score_noise / ScoreNoise: f64 = 0.0;
        scope Scalar, bounds Bounds::real(0.0, 1e3), unit Plain, fit fit(0.0, 10.0, true, false),
        symbol "σ_q", title "score_noise σ_q (distractor sd units)",
        help "sd of noise added to every entry score: quantization / implementation error (default 0).";
    repeat / Repeat: u32 = 1;
        scope Both, bounds Bounds::at_least(1), unit Plain, fit None,
        symbol "", title "needle copies",
        help "Copies of the needle; success if any is attended (default 1).";
    repeat_layout / RepeatLayout: RepeatLayout = RepeatLayout::Spread;
        scope Both, bounds Bounds::Any, unit Plain, fit None,
        symbol "", title "",
        help "spread (copies over the context) or adjacent (one after another from depth). Default spread.";
    layers / Layers: u32 = 1;
        scope Both, bounds Bounds::count(1, 4096), unit Plain, fit None,
        symbol "", title "",
        help "Indexer layers (default 1).";
    layer_corr / LayerCorr: f64 = 0.0;
        scope Scalar, bounds Bounds::real(0.0, 1.0), unit Plain, fit fit(0.0, 1.0, true, true),
        symbol "", title "",
        help "Fraction of the needle's score variance shared across layers, tokens and copies, 0..1 (default 0).";
    readout / Readout: Readout = Readout::Any;
        scope Both, bounds Bounds::Any, unit Plain, fit None,
        symbol "", title "",
        help "Layers that must attend the needle: any, all or at_least:M (default any).";
    p_read / PRead: f64 = 1.0;
        scope Both, bounds Bounds::real(0.0, 1.0), unit Plain, fit fit(0.0, 1.0, true, true),
        symbol "", title "",
        help "P(correct answer | needle attended) (default 1).";
    p_guess / PGuess: f64 = 0.0;
        scope Both, bounds Bounds::real(0.0, 1.0), unit Plain, fit fit(0.0, 1.0, true, true),
        symbol "", title "",
        help "P(correct answer | needle not attended) (default 0).";
    stack / Stack: Stack = Stack::default();
        scope Both, bounds Bounds::Any, unit Plain, fit None,
        symbol "", title "layer stack",
        help "The model's layers, TYPE:COUNT[:FIELD=VALUE],… with types csa, dsa (selecting), hca, swa, dense, e.g. csa:21,hca:20,swa:2 (V4-Flash); none (default): `layers` selecting layers.";
    diluted_read / DilutedRead: f64 = 0.0;
        scope Both, bounds Bounds::real(0.0, 1.0), unit Plain, fit fit(0.0, 1.0, true, true),
        symbol "", title "",
        help "P(one hca or dense layer delivers a needle outside its window), independent per layer (default 0: only selecting layers retrieve).";
    model / Model: Model = Model::Scalar;
        scope Both, bounds Bounds::Any, unit Plain, fit None,
        symbol "", title "",
        help "scalar (the scalar score model, analytic or Monte Carlo) or vector (the lightning indexer, Monte Carlo only; ignores distractor, hard_mean, dprime, needle_sd, pooling, score_noise, layer_corr). Default scalar.";
    heads / Heads: u32 = 64;
        scope Vector, bounds Bounds::count(1, 1024), unit Plain, fit None,
        symbol "", title "",
        help "Vector model: indexer heads H (default 64).";
    head_dim / HeadDim: u32 = 128;
        scope Vector, bounds Bounds::count(1, 4096), unit Plain, fit None,
        symbol "", title "",
        help "Vector model: head dimension d (default 128; a power of two with --hadamard true).";
    alignment / Alignment: f64 = 0.35;
        scope Vector, bounds Bounds::real_text(-1.0, 1.0, false, "-1..=1 (a cosine)"), unit Plain, fit None,
        symbol "", title "",
        help "Vector model: cosine of the needle key with the query direction, -1..1 (default 0.35).";
    hard_alignment / HardAlignment: f64 = 0.25;
        scope Vector, bounds Bounds::real_text(-1.0, 1.0, false, "-1..=1 (a cosine)"), unit Plain, fit None,
        symbol "", title "",
        help "Vector model: cosine of a hard-negative key with the query direction (default 0.25).";
    outlier_channels / OutlierChannels: u32 = 0;
        scope Vector, bounds Bounds::Any, unit Plain, fit None,
        symbol "", title "",
        help "Vector model: channels of q and keys scaled by --outlier-scale (default 0).";
    outlier_scale / OutlierScale: f64 = 8.0;
        scope Vector, bounds Bounds::real_text(0.0, 1e4, true, "(0, 10000]"), unit Plain, fit None,
        symbol "", title "",
        help "Vector model: scale of the outlier channels (default 8).";
    hadamard / Hadamard: bool = true;
        scope Vector, bounds Bounds::Any, unit Plain, fit None,
        symbol "", title "",
        help "Vector model: orthonormal Hadamard rotation of q and keys before quantization (default true).";
    key_norm / KeyNorm: bool = true;
        scope Vector, bounds Bounds::Any, unit Plain, fit None,
        symbol "", title "",
        help "Vector model: RMS-normalise entry keys after pooling (default true).";
    q_format / QFormat: Format = Format::F32;
        scope Vector, bounds Bounds::Any, unit Plain, fit None,
        symbol "", title "",
        help "Vector model: query format, NAME[:BLOCK[:SCALE]], e.g. fp32, bf16, fp8-e4m3:128:fp32, fp4-e2m1:32:ue8m0, mxfp4, nvfp4 (default fp32).";
    k_format / KFormat: Format = Format::F32;
        scope Vector, bounds Bounds::Any, unit Plain, fit None,
        symbol "", title "",
        help "Vector model: indexer key-cache format, as --q-format (default fp32).";
    compressor / Compressor: Compressor = Compressor::Gated;
        scope Vector, bounds Bounds::Any, unit Plain, fit None,
        symbol "", title "",
        help "Vector model: token keys to entry keys, mean, gated (per-channel softmax, V4) or quest (page max/min keys, one head). Default gated.";
    head_weights / HeadWeights: HeadWeights = HeadWeights::Signed;
        scope Vector, bounds Bounds::Any, unit Plain, fit None,
        symbol "", title "",
        help "Vector model: indexer head weights, signed (per query: w_h = z_h H^-1/2 d^-1/2, z_h ~ N(0, 1) per layer and trial, as weights_proj(x)) or fixed (the model's log-normal positive constants). Default signed.";
    rope_dims / RopeDims: u32 = 64;
        scope Vector, bounds Bounds::count(0, 4096), unit Plain, fit None,
        symbol "", title "",
        help "Vector model: head dimensions rotated by RoPE (default 64 as V3.2 and V4; 0 = no RoPE; clipped to head_dim and rounded down to an even count).";
    rope_at / RopeAt: RopeAt = RopeAt::Last;
        scope Vector, bounds Bounds::Any, unit Plain, fit None,
        symbol "", title "",
        help "Vector model: which dimensions RoPE rotates, last (V4: the last rope_dims, interleaved pairs 2i, 2i+1) or first (V3.2: the first rope_dims, pairs i, i + rope_dims/2). Default last.";
    rope_theta / RopeTheta: f64 = 160_000.0;
        scope Vector, bounds Bounds::real_text(1.0, 1e12, true, "(1, 1e12]"), unit Plain, fit None,
        symbol "", title "",
        help "Vector model: RoPE base θ (default 160000, V4's compress_rope_theta; V3.2: 10000).";
    rope_factor / RopeFactor: f64 = 16.0;
        scope Vector, bounds Bounds::real_text(1.0, 1e6, false, "1..=1000000"), unit Plain, fit None,
        symbol "", title "",
        help "Vector model: YaRN frequency-interpolation factor (default 16 as V4; V3.2: 40; 1 = plain RoPE).";
    rope_orig_len / RopeOrigLen: u64 = 65_536;
        scope Vector, bounds Bounds::count(0, MAX_CONTEXT_LEN), unit TokenSpan, fit None,
        symbol "", title "",
        help "Vector model: YaRN's original training length (default 65536 as V4; V3.2: 4096; 0 = plain RoPE).";
    key_gain_sd / KeyGainSd: f64 = 0.0;
        scope Vector, bounds Bounds::real(0.0, 10.0), unit Plain, fit None,
        symbol "", title "",
        help "Vector model: spread σ of the key norm's learned per-channel gain g_j = exp(σ z_j), drawn per layer and trial (default 0: gain 1, the initial value; the trained gains are in the checkpoint: calibrate).";
    gate_pos_sd / GatePosSd: f64 = 1.0;
        scope Vector, bounds Bounds::real(0.0, 100.0), unit Plain, fit None,
        symbol "", title "",
        help "Vector model: sd of the gated compressor's positional gate logits (V4's ape), per (position, channel), drawn per layer and trial (default 1).";
    gate_token_sd / GateTokenSd: f64 = 0.0;
        scope Vector, bounds Bounds::real(0.0, 100.0), unit Plain, fit None,
        symbol "", title "",
        help "Vector model: sd of the gate logits' token-dependent part wgate(x_t), iid per token and channel (default 0 = positional gate only; a value to calibrate; > 0 is about 20× slower).";
}

impl Field {
    /// Everything the table says about this field.
    pub const fn spec(self) -> &'static FieldSpec {
        &SPECS[self as usize]
    }

    /// snake_case name: the TOML key, the CSV column, the sweep axis name.
    pub const fn name(self) -> &'static str {
        self.spec().name
    }

    /// The command-line flag without dashes (kebab-case name).
    pub fn flag(self) -> String {
        self.name().replace('_', "-")
    }

    /// The field named `text` (snake or kebab case, surrounding space ignored).
    pub fn from_name(text: &str) -> Result<Field, ScenarioError> {
        let t = text.trim().replace('-', "_");
        Field::ALL.iter().copied().find(|f| f.name() == t).ok_or_else(|| ScenarioError::UnknownField(text.to_string()))
    }

    /// Whether the field holds a real number (can be fitted or varied continuously).
    pub(crate) fn is_real(self) -> bool {
        self.spec().kind == Kind::Real
    }

    /// Whether the field holds an integer.
    pub fn is_integer(self) -> bool {
        matches!(self.spec().kind, Kind::Count | Kind::SmallCount)
    }

    /// The fields that can be fitted, in table order.
    pub(crate) fn fittable() -> impl Iterator<Item = Field> {
        Field::ALL.iter().copied().filter(|f| f.spec().fit.is_some())
    }

    /// Whether `v` is a physical limit of this field (score_noise = 0, a probability of 0 or 1,
    /// …) rather than an arbitrary search bound.
    pub(crate) fn is_physical_limit(self, v: f64) -> bool {
        match self.spec().fit {
            Some(b) => (b.lo_physical && v == b.lo) || (b.hi_physical && v == b.hi),
            None => false,
        }
    }

    /// Short symbol for value labels (`k`, `L`, `σ_q`, else the name).
    pub(crate) fn symbol(self) -> &'static str {
        let s = self.spec().symbol;
        if s.is_empty() {
            self.name()
        } else {
            s
        }
    }

    /// Axis title (without the scale).
    pub(crate) fn axis_title(self) -> String {
        let spec = self.spec();
        match (spec.title, spec.unit) {
            ("", Unit::Plain) => spec.name.to_string(),
            ("", _) => format!("{} (tokens)", spec.name),
            (t, _) => t.to_string(),
        }
    }

    /// Checks the field's single-field range on its value in `s`.
    pub(super) fn check_bounds(self, s: &Scenario) -> Result<(), ScenarioError> {
        self.spec().bounds.check(self, &self.read(s))
    }
}

/// The name; width and alignment flags apply (`{:<16}`).
impl fmt::Display for Field {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(self.name())
    }
}

/// A field serialises as its name (`"context_len"`), as TOML and JSON key it.
impl Serialize for Field {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.name())
    }
}

impl std::str::FromStr for Field {
    type Err = ScenarioError;
    fn from_str(s: &str) -> Result<Field, ScenarioError> {
        Field::from_name(s)
    }
}

impl Scenario {
    /// The typed value of a field.
    pub fn get(&self, field: Field) -> Value {
        field.read(self)
    }

    /// Sets a field to a typed value (a value of another type is an error naming the field).
    /// Does not validate: call [`Scenario::validate`] when done.
    pub fn set(&mut self, field: Field, value: Value) -> Result<(), ScenarioError> {
        field.write(self, value)?;
        self.follow_kernel(field);
        Ok(())
    }

    /// A top-k kernel other than `any` fixes `max_topk` (its largest k).
    fn follow_kernel(&mut self, field: Field) {
        if field == Field::TopkKernel {
            if let Some(max) = self.topk_kernel.max_k() {
                self.max_topk = max;
            }
        }
    }

    /// Sets a field from text (a flag's argument, a TOML scalar, a CSV cell, a sweep value):
    /// the one place where a field's text is parsed. Does not validate.
    pub fn set_text(&mut self, field: Field, text: &str) -> Result<(), ScenarioError> {
        field.parse_into(self, text)?;
        self.follow_kernel(field);
        Ok(())
    }

    /// The field's value as a number (count and real fields; `None` for the others).
    pub fn number(&self, field: Field) -> Option<f64> {
        self.get(field).as_f64()
    }

    /// Sets a real field (fits, bisections). Panics never: a non-real field is an error.
    pub fn set_real(&mut self, field: Field, x: f64) -> Result<(), ScenarioError> {
        self.set(field, Value::Real(x))
    }

    /// The canonical text of a field's value (see [`Value`]'s `Display`).
    pub(crate) fn text(&self, field: Field) -> String {
        self.get(field).to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_order_matches_serialisation_and_names_round_trip() {
        let s = Scenario::default();
        let v = serde_json::to_value(&s).unwrap();
        let keys: Vec<&str> = v.as_object().unwrap().keys().map(String::as_str).collect();
        let mut names: Vec<&str> = Field::ALL.iter().map(|f| f.name()).collect();
        names.sort_unstable();
        let mut sorted = keys.clone();
        sorted.sort_unstable();
        assert_eq!(sorted, names);
        let toml_keys: Vec<String> =
            s.to_toml_string().lines().filter_map(|l| l.split_once(" = ").map(|(k, _)| k.to_string())).collect();
        let ordered: Vec<String> = Field::ALL.iter().map(|f| f.name().to_string()).collect();
        assert_eq!(toml_keys, ordered, "TOML writes fields in table order");
        for (i, f) in Field::ALL.iter().enumerate() {
            assert_eq!(*f as usize, i);
            assert_eq!(Field::from_name(f.name()).unwrap(), *f);
            assert_eq!(Field::from_name(&format!(" {} ", f.flag())).unwrap(), *f);
        }
        assert!(Field::from_name("nope").is_err());
    }

    #[test]
    fn token_count_suffixes_are_exact() {
        let mut s = Scenario::default();
        for (text, want) in [
            ("16K", 16_000u64),
            ("16k", 16_000),
            ("16Ki", 16_384),
            ("128Ki", 131_072),
            ("1M", 1_000_000),
            ("1Mi", 1_048_576),
            ("1G", 1_000_000_000),
            ("1Gi", 1 << 30),
            ("1.5K", 1_500),
            ("1.5Ki", 1_536),
            ("0.5Mi", 524_288),
            (" 64 Ki ", 65_536),
            ("1_000K", 1_000_000),
        ] {
            s.set_text(Field::ContextLen, text).unwrap();
            assert_eq!(s.context_len, want, "{text}");
        }
        s.set_text(Field::IndexTopk, "2Ki").unwrap();
        assert_eq!(s.index_topk, 2048);
        assert_eq!(s.text(Field::IndexTopk), "2048", "the canonical text has no suffix");
        for (text, why) in [
            ("1.0001K", "not a whole number"),
            ("-1K", "expected a count"),
            ("K", "expected a count"),
            ("1e3K", "expected a count"),
            ("1KiB", "expected a non-negative integer"),
            ("1m", "expected a non-negative integer"),
            ("20000000000G", "too large"),
        ] {
            let e = s.set_text(Field::ContextLen, text).unwrap_err().to_string();
            assert!(e.contains("context_len") && e.contains(why), "{text}: {e}");
        }
        // Bounds apply to the value: 2048Gi = 2^41 tokens is beyond the largest context (2^40).
        s.set_text(Field::ContextLen, "2048Gi").unwrap();
        assert!(s.validate().is_err());
    }

    #[test]
    fn canonical_text_is_the_json_form() {
        let mut s = Scenario::preset("deepseek-v4-flash").unwrap();
        s.set_text(Field::ContextLen, "1e6").unwrap();
        s.set_text(Field::Distractor, "student_t:5").unwrap();
        s.set_text(Field::Stack, "csa:21,hca:20:window=64,swa:2").unwrap();
        let json = serde_json::to_value(&s).unwrap();
        for &f in Field::ALL {
            let expected = match &json[f.name()] {
                serde_json::Value::String(t) => t.clone(),
                // The stack is a list in JSON; its text is the entries joined.
                serde_json::Value::Array(_) if f == Field::Stack => "csa:21,hca:20:window=64,swa:2".to_string(),
                other => other.to_string(),
            };
            assert_eq!(s.text(f), expected, "{f}");
            assert_eq!(s.get(f).to_json(), json[f.name()], "{f}");
        }
    }

    #[test]
    fn typed_set_get_and_text_agree() {
        let mut s = Scenario::default();
        for &f in Field::ALL {
            // Every field takes back its own value, typed and as text.
            let v = s.get(f);
            s.set(f, v).unwrap();
            let t = s.text(f);
            s.set_text(f, &t).unwrap();
            assert_eq!(s.get(f), v, "{f}");
        }
        assert!(s.set(Field::Layers, Value::Count(1 << 40)).is_err());
        assert!(s.set(Field::Pooling, Value::Real(1.0)).is_err());
        s.set_real(Field::Dprime, 1.25).unwrap();
        assert_eq!(s.dprime, 1.25);
        assert!(s.set_real(Field::ContextLen, 3.0).is_err());
    }

    #[test]
    fn fit_bounds_and_physical_limits() {
        let fittable: Vec<&str> = Field::fittable().map(Field::name).collect();
        assert_eq!(
            fittable,
            [
                "depth",
                "hard_negatives",
                "hard_mean",
                "dprime",
                "needle_sd",
                "score_noise",
                "layer_corr",
                "p_read",
                "p_guess",
                "diluted_read"
            ]
        );
        assert!(Field::ScoreNoise.is_physical_limit(0.0));
        assert!(!Field::ScoreNoise.is_physical_limit(10.0));
        assert!(Field::PRead.is_physical_limit(1.0));
        assert!(!Field::Dprime.is_physical_limit(-10.0));
        for f in Field::fittable() {
            assert!(f.is_real(), "{f}");
        }
    }

    #[test]
    fn bounds_messages() {
        assert_eq!(Field::ContextLen.spec().bounds.allowed(), format!("allowed 1..={MAX_CONTEXT_LEN}"));
        assert_eq!(Field::IndexTopk.spec().bounds.allowed(), "allowed ≥ 1");
        assert_eq!(Field::Depth.spec().bounds.allowed(), "allowed 0..=1");
        assert_eq!(Field::OutlierScale.spec().bounds.allowed(), "allowed (0, 10000]");
        let mut s = Scenario { outlier_scale: 0.0, ..Scenario::default() };
        assert!(Field::OutlierScale.check_bounds(&s).is_err());
        s.depth = f64::NAN;
        let e = Field::Depth.check_bounds(&s).unwrap_err().to_string();
        assert_eq!(e, "depth = NaN: allowed 0..=1");
    }
}
