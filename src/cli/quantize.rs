//! `dsa-sim quantize`: numbers in on stdin, their quantize-dequantized values out.

use super::{emit, CliError};
use crate::formats::{BlockScaled, ElementFormat, Format, FormatError, ScaleKind, Shortest};
use serde::ser::{Serialize, Serializer};

/// Arguments of `dsa-sim quantize`.
#[derive(clap::Args, Debug)]
#[command(after_help = "Reads numbers separated by spaces or newlines on stdin and prints each one's \
quantize-dequantize value, one per line, in shortest round-trip form.\n\n\
Element formats round to nearest even and saturate finite values at the format's max. NaN and inf: \
bf16, fp16 and fp8-e5m2 keep them; fp8-e4m3 (no inf) turns inf into NaN; fp4-e2m1 saturates inf \
to ±6 and refuses NaN; int8 and int4 refuse NaN. Block-scaled formats refuse NaN and inf.\n\n\
Block scaling (fp8-e4m3, fp8-e5m2, fp4-e2m1, int8, int4): --block B values share one scale, \
--scale fp32 (amax/max, the default), ue8m0 (2^ceil(log2(amax/max)), DeepSeek), e8m0 \
(2^(floor(log2 amax) - emax), OCP MX) or e4m3 (NVFP4-style, under one f32 scale for the whole \
input). The input must be whole blocks. int8/int4 without --block use one scale for the whole input. \
mxfp4 = fp4-e2m1 --block 32 --scale e8m0; nvfp4 = fp4-e2m1 --block 16 --scale e4m3.\n\n\
Examples:\n  echo 0.3 0.75 5 7 | dsa-sim quantize --format fp4-e2m1\n  \
seq 1 32 | dsa-sim quantize --format fp4-e2m1 --block 32 --scale ue8m0\n  \
printf '0.1 -2.5 1e-3 7\\n' | dsa-sim quantize --format fp8-e4m3 --block 4 --json")]
pub struct QuantizeArgs {
    /// Number format (required): fp32, bf16, fp16, fp8-e4m3, fp8-e5m2, fp4-e2m1, int8, int4, mxfp4,
    /// nvfp4, or a full specification NAME:BLOCK:SCALE[:floor=F] such as fp4-e2m1:32:ue8m0.
    #[arg(long, value_name = "FMT")]
    pub format: Option<String>,
    /// Values per shared scale (block-scaled fp8, fp4 and int formats).
    #[arg(long, value_name = "B", allow_hyphen_values = true)]
    pub block: Option<String>,
    /// Scale of each block: fp32 (default), ue8m0, e8m0 or e4m3.
    #[arg(long, value_name = "KIND")]
    pub scale: Option<String>,
    /// Raise each block's amax to at least F before computing its scale (DeepSeek FP8: 1e-4).
    #[arg(long, value_name = "F", allow_hyphen_values = true)]
    pub amax_floor: Option<String>,
    /// Print one JSON object (format, count, values) instead of one value per line.
    #[arg(long)]
    pub json: bool,
}

/// How the format was asked for: complete, or an integer format whose single block is the
/// whole input (known once stdin is read).
enum Plan {
    Ready(Format),
    PerTensor { element: ElementFormat, scale: ScaleKind, floor: f32 },
}

/// Runs `dsa-sim quantize`.
pub fn run(args: &QuantizeArgs) -> Result<(), CliError> {
    // The flags are checked before stdin is read.
    plan(args)?;
    let text = crate::input::read_stdin_to_string()
        .map_err(|e| CliError::input(format!("cannot read stdin as text: {e}")))?;
    emit(&quantize_text(args, &text)?)
}

/// What `dsa-sim quantize` prints for `text` on stdin (the fuzz target and tests call it
/// directly).
pub fn quantize_text(args: &QuantizeArgs, text: &str) -> Result<String, CliError> {
    let plan = plan(args)?;
    let mut values = parse_numbers(text)?;
    let format = match plan {
        Plan::Ready(f) => f,
        Plan::PerTensor { element, scale, floor } => Format::Block(
            BlockScaled::new(element, values.len(), scale)
                .and_then(|b| b.with_amax_floor(floor))
                .map_err(|e| CliError::input(e.to_string()))?,
        ),
    };
    format.quantize_dequantize_in_place(&mut values).map_err(|e| input_error(e, &format, values.len()))?;
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
        let text = serde_json::to_string_pretty(&out).map_err(|e| CliError::failure(e.to_string()))?;
        return Ok(text + "\n");
    }
    let mut out = String::with_capacity(values.len() * 12);
    for &x in &values {
        use std::fmt::Write as _;
        let _ = writeln!(out, "{}", Shortest(x));
    }
    Ok(out)
}

/// Resolves the flags into a format (or an integer format awaiting the input's length).
fn plan(args: &QuantizeArgs) -> Result<Plan, CliError> {
    let flag = |name: &str, e: FormatError| CliError::input(format!("{name}: {e}"));
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
        .ok_or_else(|| CliError::input(format!("--format is required: one of {}", crate::formats::FORMAT_NAMES)))?
        .trim();
    if spec.contains(':') {
        if block.is_some() || scale.is_some() || floor.is_some() {
            return Err(CliError::input(format!(
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
            FormatError::UnknownFormat { .. } | FormatError::NotBlockScalable { .. } | FormatError::FixedFormat { .. } => {
                "--format"
            }
            FormatError::ScaleWithoutBlock { .. } => "--scale",
            _ => "--format",
        };
        flag(name, e)
    })
}

/// Parses whitespace-separated numbers; names the first bad token and its position.
fn parse_numbers(text: &str) -> Result<Vec<f32>, CliError> {
    let mut values = Vec::new();
    for (i, token) in text.split_whitespace().enumerate() {
        let x: f32 = token.parse().map_err(|_| {
            CliError::input(format!(
                "stdin: `{}` (value {}) is not a number: give decimal numbers separated by spaces or newlines",
                shorten(token),
                i + 1
            ))
        })?;
        if x.is_infinite() && !token.to_ascii_lowercase().contains("inf") {
            return Err(CliError::input(format!(
                "stdin: `{}` (value {}) is outside the f32 range: allowed magnitudes up to 3.4028235e38",
                shorten(token),
                i + 1
            )));
        }
        values.push(x);
    }
    if values.is_empty() {
        return Err(CliError::input(
            "stdin is empty: give the numbers to quantize, separated by spaces or newlines",
        ));
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
fn input_error(e: FormatError, format: &Format, n: usize) -> CliError {
    match e {
        FormatError::NonFinite { value, index, allowed, .. } => {
            CliError::input(format!("stdin: value {} is {value}, which {format} does not accept: {allowed}", index + 1))
        }
        FormatError::BlockDoesNotDivide { block, len } => CliError::input(format!(
            "stdin has {len} values, not a whole number of blocks of {block} ({format}): give a multiple of {block} values"
        )),
        other => CliError::input(format!("{other} ({n} values)")),
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
