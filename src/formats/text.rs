//! Quantize-dequantize numbers given as text: what `dsa-sim quantize` prints for its stdin
//! (the fuzz target and the tests call [`quantize_text`] directly).

use super::{BlockScaled, ElementFormat, Format, FormatError, ScaleKind, Shortest};
use serde::ser::{Serialize, Serializer};

/// What to quantize with, as the command line gives it (each part optional text).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct QuantizeRequest {
    /// Number format: a name (fp4-e2m1, int8, mxfp4, …) or a full specification NAME:BLOCK:SCALE.
    pub format: Option<String>,
    /// Values per shared scale.
    pub block: Option<String>,
    /// Scale of each block: fp32, ue8m0, e8m0 or e4m3.
    pub scale: Option<String>,
    /// Lower bound on each block's amax before its scale is computed.
    pub amax_floor: Option<String>,
    /// One JSON object (format, count, values) instead of one value per line.
    pub json: bool,
}

/// Why numbers could not be quantized.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum QuantizeError {
    /// A flag, a number or a count of numbers the format does not accept.
    #[error("{0}")]
    Input(String),
    /// The output could not be produced.
    #[error("{0}")]
    Output(String),
}

impl crate::error::Classify for QuantizeError {
    fn kind(&self) -> crate::error::ErrorKind {
        match self {
            QuantizeError::Input(_) => crate::error::ErrorKind::Input,
            QuantizeError::Output(_) => crate::error::ErrorKind::Failure,
        }
    }
}

fn input(message: impl Into<String>) -> QuantizeError {
    QuantizeError::Input(message.into())
}

/// How the format was asked for: complete, or an integer format whose single block is the
/// whole input (known once stdin is read).
enum Plan {
    Ready(Format),
    PerTensor { element: ElementFormat, scale: ScaleKind, floor: f32 },
}

/// What `dsa-sim quantize` prints for `text` on stdin.
pub fn quantize_text(args: &QuantizeRequest, text: &str) -> Result<String, QuantizeError> {
    let plan = plan(args)?;
    let mut values = parse_numbers(text)?;
    let format = quantize_planned(plan, &mut values)?;
    if args.json {
        let out = JsonOut {
            format: format.to_string(),
            element: match format {
                Format::F32 => None,
                Format::Element(e) => Some(e.name()),
                Format::Block(b) => Some(b.element().name()),
            },
            block: format.block(),
            scale: match format {
                Format::Block(b) => Some(b.scale().name()),
                _ => None,
            },
            amax_floor: match format {
                Format::Block(b) if b.amax_floor() > 0.0 => Some(JsonF32(b.amax_floor())),
                _ => None,
            },
            bits_per_value: format.bits_per_value(),
            count: values.len(),
            values: values.iter().map(|&x| JsonF32(x)).collect(),
        };
        let text = serde_json::to_string_pretty(&out).map_err(|e| QuantizeError::Output(e.to_string()))?;
        return Ok(text + "\n");
    }
    let mut out = String::with_capacity(values.len() * 12);
    for &x in &values {
        use std::fmt::Write as _;
        let _ = writeln!(out, "{}", Shortest(x));
    }
    Ok(out)
}

/// Quantize-dequantizes `values` in place as `dsa-sim quantize` does the numbers on its stdin
/// (the same checks, in the same order, with the same messages), and returns the format used:
/// the Python package's `quantize`, which has its numbers as f32 already.
pub(crate) fn quantize_values(args: &QuantizeRequest, values: &mut [f32]) -> Result<Format, QuantizeError> {
    let plan = plan(args)?;
    if values.is_empty() {
        return Err(empty_input());
    }
    quantize_planned(plan, values)
}

/// The format of `plan` (an integer format's single block is the whole input) applied to `values`.
fn quantize_planned(plan: Plan, values: &mut [f32]) -> Result<Format, QuantizeError> {
    let format = match plan {
        Plan::Ready(f) => f,
        Plan::PerTensor { element, scale, floor } => Format::Block(
            BlockScaled::new(element, values.len(), scale)
                .and_then(|b| b.with_amax_floor(floor))
                .map_err(|e| input(e.to_string()))?,
        ),
    };
    format.quantize_dequantize_in_place(values).map_err(|e| input_error(e, &format, values.len()))?;
    Ok(format)
}

fn empty_input() -> QuantizeError {
    input("stdin is empty: give the numbers to quantize, separated by spaces or newlines")
}

/// Checks the request alone (before any input is read).
pub(crate) fn check_request(args: &QuantizeRequest) -> Result<(), QuantizeError> {
    plan(args).map(|_| ())
}

/// Resolves the flags into a format (or an integer format awaiting the input's length).
fn plan(args: &QuantizeRequest) -> Result<Plan, QuantizeError> {
    let flag = |name: &str, e: FormatError| input(format!("{name}: {e}"));
    let block = match args.block.as_deref().map(str::trim) {
        None => None,
        Some(b) => match b.parse::<usize>() {
            Ok(0) => return Err(flag("--block 0", FormatError::ZeroBlock)),
            Ok(n) => Some(n),
            Err(_) => return Err(flag("--block", FormatError::BadBlock { value: b.into() })),
        },
    };
    let scale = match args.scale.as_deref() {
        None => None,
        Some(s) => Some(s.parse::<ScaleKind>().map_err(|e| flag("--scale", e))?),
    };
    let floor = match args.amax_floor.as_deref().map(str::trim) {
        None => None,
        Some(t) => match t.parse::<f32>() {
            Ok(x) if x.is_finite() && x >= 0.0 => Some(x),
            _ => return Err(flag("--amax-floor", FormatError::BadAmaxFloor { value: t.into() })),
        },
    };
    let spec = args
        .format
        .as_deref()
        .ok_or_else(|| input(format!("--format is required: one of {}", super::FORMAT_NAMES)))?
        .trim();
    if spec.contains(':') {
        if block.is_some() || scale.is_some() || floor.is_some() {
            return Err(input(format!(
                "--format {spec} already gives the block and scale: drop --block/--scale/--amax-floor or use a bare format name"
            )));
        }
        return spec.parse().map(Plan::Ready).map_err(|e| flag("--format", e));
    }
    if let Some(element) = ElementFormat::from_name(&spec.to_ascii_lowercase()).filter(|e| e.is_integer()) {
        if block.is_none() {
            return Ok(Plan::PerTensor {
                element,
                scale: scale.unwrap_or(ScaleKind::Fp32),
                floor: floor.unwrap_or(0.0),
            });
        }
    }
    Format::from_parts(spec, block, scale, floor).map(Plan::Ready).map_err(|e| {
        let name = match e {
            FormatError::UnknownFormat { .. }
            | FormatError::NotBlockScalable { .. }
            | FormatError::FixedFormat { .. } => "--format",
            FormatError::ScaleWithoutBlock { .. } => "--scale",
            _ => "--format",
        };
        flag(name, e)
    })
}

/// Parses whitespace-separated numbers; names the first bad token and its position.
fn parse_numbers(text: &str) -> Result<Vec<f32>, QuantizeError> {
    let mut values = Vec::new();
    for (i, token) in text.split_whitespace().enumerate() {
        let x: f32 = token.parse().map_err(|_| {
            input(format!(
                "stdin: `{}` (value {}) is not a number: give decimal numbers separated by spaces or newlines",
                shorten(token),
                i + 1
            ))
        })?;
        if x.is_infinite() && !token.to_ascii_lowercase().contains("inf") {
            return Err(input(format!(
                "stdin: `{}` (value {}) is outside the f32 range: allowed magnitudes up to 3.4028235e38",
                shorten(token),
                i + 1
            )));
        }
        values.push(x);
    }
    if values.is_empty() {
        return Err(empty_input());
    }
    Ok(values)
}

/// A token cut to a readable length for an error message.
fn shorten(token: &str) -> String {
    if token.chars().count() > 40 {
        format!("{}…", token.chars().take(40).collect::<String>())
    } else {
        token.to_string()
    }
}

/// A quantization error as one line about the input.
fn input_error(e: FormatError, format: &Format, n: usize) -> QuantizeError {
    match e {
        FormatError::NonFinite { value, index, allowed, .. } => {
            input(format!("stdin: value {} is {value}, which {format} does not accept: {allowed}", index + 1))
        }
        FormatError::BlockDoesNotDivide { block, len } => input(format!(
            "stdin has {len} values, not a whole number of blocks of {block} ({format}): give a multiple of {block} values"
        )),
        other => input(format!("{other} ({n} values)")),
    }
}

/// An f32 in JSON: a number in shortest round-trip form, or the string `NaN`, `inf`, `-inf`.
struct JsonF32(f32);

impl Serialize for JsonF32 {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        if self.0.is_finite() {
            s.serialize_f32(self.0)
        } else {
            s.serialize_str(&Shortest(self.0).to_string())
        }
    }
}

#[derive(serde::Serialize)]
struct JsonOut {
    format: String,
    element: Option<&'static str>,
    block: Option<usize>,
    scale: Option<&'static str>,
    amax_floor: Option<JsonF32>,
    bits_per_value: f64,
    count: usize,
    values: Vec<JsonF32>,
}
