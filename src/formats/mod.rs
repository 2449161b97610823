//! Number formats and block scaling (docs/model.md#number-formats), bit-exact.
//!
//! A [`Format`] quantizes `f32` values and dequantizes them back to `f32` (the value the
//! serving stack computes with), in place and without allocation:
//!
//! ```
//! use dsa_sim::formats::Format;
//! let fmt: Format = "fp4-e2m1:32:ue8m0".parse().unwrap();
//! let mut xs = vec![0.3f32; 32];
//! xs[0] = 5.5;
//! fmt.quantize_dequantize_in_place(&mut xs).unwrap();
//! assert_eq!(xs[0], 6.0); // scale 2^ceil(log2(5.5/6)) = 1; 5 would tie to 4
//! assert_eq!(xs[1], 0.5);
//! ```
//!
//! - Element formats (`ElementFormat`): bf16, fp16, fp8-e4m3 (e4m3fn), fp8-e5m2, fp4-e2m1,
//!   int8, int4; round to nearest even, finite values saturate to the largest finite value.
//!   NaN and infinities: see the table on `ElementFormat`.
//! - Block-scaled formats (`BlockScaled`): fp8, fp4 or integer elements, `block` consecutive
//!   values sharing one scale of a `ScaleKind` (fp32, ue8m0, e8m0, e4m3); `mxfp4` and `nvfp4`
//!   are named instances. Non-finite input is an error.
//! - `fp32` is the identity (the unquantized reference).
//!
//! Format specifications (command line, scenario files): `NAME[:BLOCK[:SCALE[:floor=F]]]`,
//! e.g. `bf16`, `fp8-e4m3:128:fp32`, `fp4-e2m1:32:ue8m0`, `fp8-e4m3:128:ue8m0:floor=0.0001`,
//! `mxfp4`, `nvfp4`. The scale defaults to fp32 when a block is given. Test vectors generated
//! with `ml_dtypes` and NumPy (tests/data/formats/) pin every format bit for bit.

#[macro_use]
mod simd;
mod block;
mod element;
mod error;
mod scale;
pub mod text;

pub(crate) use block::BlockScaled;
pub(crate) use element::ElementFormat;
pub(crate) use error::{FormatError, FORMAT_NAMES};
pub(crate) use scale::ScaleKind;
pub use simd::{cap_simd_level, simd_level, SimdLevel};

use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

/// A number format: identity, an element format alone, or a block-scaled format.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Format {
    /// f32 itself: quantize-dequantize is the identity.
    F32,
    /// One element format applied value by value.
    Element(ElementFormat),
    /// A block-scaled format.
    Block(BlockScaled),
}

impl Format {
    /// Builds a format from its parts as the command line gives them: a name (one of
    /// [`FORMAT_NAMES`]), an optional block size, scale kind and amax floor.
    ///
    /// A block without a scale uses the fp32 scale. `mxfp4` and `nvfp4` accept only their own
    /// block and scale (32/e8m0 and 16/e4m3). A scale or floor needs a block; bf16, fp16 and
    /// fp32 take no block. Each violation is a [`FormatError`] naming the value and what is
    /// allowed.
    pub(crate) fn from_parts(
        name: &str,
        block: Option<usize>,
        scale: Option<ScaleKind>,
        amax_floor: Option<f32>,
    ) -> Result<Format, FormatError> {
        let name = name.trim();
        let lower = name.to_ascii_lowercase();
        let fixed = match lower.as_str() {
            "mxfp4" => Some(("mxfp4", BlockScaled::mxfp4())),
            "nvfp4" => Some(("nvfp4", BlockScaled::nvfp4())),
            _ => None,
        };
        if let Some((fname, f)) = fixed {
            let mut what = Vec::new();
            if let Some(b) = block.filter(|&b| b != f.block()) {
                what.push(format!("block {b}"));
            }
            if let Some(s) = scale.filter(|&s| s != f.scale()) {
                what.push(format!("scale {s}"));
            }
            if let Some(fl) = amax_floor.filter(|&fl| fl != 0.0) {
                what.push(format!("amax floor {fl}"));
            }
            if !what.is_empty() {
                return Err(FormatError::FixedFormat {
                    format: fname,
                    block: f.block(),
                    scale: f.scale().name(),
                    what: what.join(", "),
                });
            }
            return Ok(Format::Block(f));
        }
        let element = if lower == "fp32" {
            None
        } else {
            Some(ElementFormat::from_name(&lower).ok_or_else(|| FormatError::UnknownFormat { name: name.into() })?)
        };
        match (element, block) {
            (Some(e), Some(b)) => {
                let f = BlockScaled::new(e, b, scale.unwrap_or(ScaleKind::Fp32))?;
                let f = match amax_floor {
                    Some(fl) => f.with_amax_floor(fl)?,
                    None => f,
                };
                Ok(Format::Block(f))
            }
            (e, None) => {
                if let Some(s) = scale {
                    return Err(FormatError::ScaleWithoutBlock { scale: s.name().into() });
                }
                if amax_floor.is_some() {
                    return Err(FormatError::Malformed {
                        spec: name.into(),
                        reason: "an amax floor needs a block size".into(),
                    });
                }
                Ok(e.map_or(Format::F32, Format::Element))
            }
            (None, Some(_)) => Err(FormatError::NotBlockScalable { format: "fp32".into() }),
        }
    }

    /// Quantize-dequantize `xs` in place, with no allocation: each value becomes the `f32` its
    /// stored form stands for. The format is dispatched once per call, not per value.
    ///
    /// Errors leave `xs` unchanged: NaN for a format without NaN, any non-finite value for a
    /// block-scaled format, a length that is not a multiple of the block.
    pub fn quantize_dequantize_in_place(&self, xs: &mut [f32]) -> Result<(), FormatError> {
        match self {
            Format::F32 => Ok(()),
            Format::Element(e) => e.quantize_dequantize_in_place(xs),
            Format::Block(b) => b.quantize_dequantize_in_place(xs),
        }
    }

    /// The block size, when block-scaled.
    pub fn block(&self) -> Option<usize> {
        match self {
            Format::Block(b) => Some(b.block()),
            _ => None,
        }
    }

    /// Storage bits per value, block scales included (32 for fp32).
    pub(crate) fn bits_per_value(&self) -> f64 {
        match self {
            Format::F32 => 32.0,
            Format::Element(e) => e.bits() as f64,
            Format::Block(b) => b.bits_per_value(),
        }
    }
}

impl fmt::Display for Format {
    /// The canonical specification, which [`FromStr`] parses back to the same format:
    /// `fp32`, an element name, `mxfp4`, `nvfp4`, or `ELEMENT:BLOCK:SCALE[:floor=F]`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Format::F32 => f.write_str("fp32"),
            Format::Element(e) => f.write_str(e.name()),
            Format::Block(b) if *b == BlockScaled::mxfp4() => f.write_str("mxfp4"),
            Format::Block(b) if *b == BlockScaled::nvfp4() => f.write_str("nvfp4"),
            Format::Block(b) => {
                write!(f, "{}:{}:{}", b.element(), b.block(), b.scale())?;
                if b.amax_floor() > 0.0 {
                    write!(f, ":floor={}", Shortest(b.amax_floor()))?;
                }
                Ok(())
            }
        }
    }
}

impl FromStr for Format {
    type Err = FormatError;

    /// Parses `NAME[:BLOCK[:SCALE[:floor=F]]]` (see the module docs).
    fn from_str(spec: &str) -> Result<Format, FormatError> {
        let malformed = |reason: &str| FormatError::Malformed { spec: spec.into(), reason: reason.into() };
        let mut parts = spec.trim().split(':').map(str::trim);
        let name = parts.next().unwrap_or("");
        if name.is_empty() {
            return Err(FormatError::UnknownFormat { name: spec.into() });
        }
        let block = match parts.next() {
            None => None,
            Some(b) => {
                let b = b.strip_prefix('b').unwrap_or(b);
                Some(b.parse::<usize>().map_err(|_| FormatError::BadBlock { value: b.into() })?)
            }
        };
        let scale = parts.next().map(str::parse::<ScaleKind>).transpose()?;
        let floor = match parts.next() {
            None => None,
            Some(fl) => {
                let v = fl.strip_prefix("floor=").ok_or_else(|| malformed("the fourth part must be floor=F"))?;
                let x: f32 = v.parse().map_err(|_| FormatError::BadAmaxFloor { value: v.into() })?;
                Some(x)
            }
        };
        if parts.next().is_some() {
            return Err(malformed("expected NAME[:BLOCK[:SCALE[:floor=F]]]"));
        }
        if block == Some(0) {
            return Err(FormatError::ZeroBlock);
        }
        Format::from_parts(name, block, scale, floor)
    }
}

/// Displays an `f32` in its shortest round-trip form: plain digits for `1e-4 ≤ |x| < 1e16`
/// (`0.5`, `448`, `-0`), scientific notation outside (`7.052966e-38`, `3.4028235e38`), and
/// `NaN`, `inf`, `-inf`. Parsing the text as f32 gives back the same value.
#[derive(Clone, Copy, Debug)]
pub struct Shortest(pub f32);

impl fmt::Display for Shortest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let x = self.0;
        let a = x.abs();
        if x.is_finite() && a != 0.0 && !(1e-4..1e16).contains(&a) {
            write!(f, "{x:e}")
        } else {
            write!(f, "{x}")
        }
    }
}

impl Serialize for Format {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.to_string())
    }
}

impl<'de> Deserialize<'de> for Format {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for spec in [
            "fp32",
            "bf16",
            "fp16",
            "fp8-e4m3",
            "fp8-e5m2",
            "fp4-e2m1",
            "int8",
            "int4",
            "mxfp4",
            "nvfp4",
            "fp8-e4m3:128:fp32",
            "fp4-e2m1:32:ue8m0",
            "int8:64:e8m0",
            "fp8-e4m3:128:ue8m0:floor=0.0001",
        ] {
            let f: Format = spec.parse().unwrap();
            assert_eq!(f.to_string(), spec);
        }
        assert_eq!("fp4-e2m1:32:e8m0".parse::<Format>().unwrap().to_string(), "mxfp4");
        assert_eq!("fp8-e4m3:128".parse::<Format>().unwrap().to_string(), "fp8-e4m3:128:fp32");
        assert_eq!("mxfp4:32".parse::<Format>().unwrap(), Format::Block(BlockScaled::mxfp4()));
        let f = "fp8-e4m3:128:ue8m0:floor=0.0001".parse::<Format>().unwrap();
        assert_eq!(f, Format::Block(BlockScaled::deepseek_fp8(ScaleKind::Ue8m0)));
        let f = "fp4-e2m1:32:ue8m0:floor=7.052966e-38".parse::<Format>().unwrap();
        assert_eq!(f, Format::Block(BlockScaled::deepseek_fp4()));
        assert_eq!(Format::Block(BlockScaled::deepseek_fp4()).to_string(), "fp4-e2m1:32:ue8m0:floor=7.052966e-38");
    }

    #[test]
    fn bad_names_say_what_is_allowed() {
        let e = "fp7".parse::<Format>().unwrap_err().to_string();
        assert!(e.contains("`fp7`") && e.contains("fp8-e4m3") && e.contains("nvfp4"), "{e}");
        let e = "fp8-e4m3:32:ue9".parse::<Format>().unwrap_err().to_string();
        assert!(e.contains("`ue9`") && e.contains("ue8m0"), "{e}");
        assert_eq!("int8:0".parse::<Format>(), Err(FormatError::ZeroBlock));
        let e = "bf16:32".parse::<Format>().unwrap_err().to_string();
        assert!(e.contains("bf16") && e.contains("fp4-e2m1"), "{e}");
        let e = "mxfp4:16".parse::<Format>().unwrap_err().to_string();
        assert!(e.contains("block 16") && e.contains("32"), "{e}");
        let e = Format::from_parts("fp8-e4m3", None, Some(ScaleKind::Ue8m0), None).unwrap_err().to_string();
        assert!(e.contains("ue8m0") && e.contains("block"), "{e}");
        assert!("int8:x".parse::<Format>().is_err());
        assert!("".parse::<Format>().is_err());
        assert!("int8:8:fp32:floor=-1".parse::<Format>().is_err());
    }

    #[test]
    fn shortest_round_trips() {
        for (x, text) in [
            (0.5f32, "0.5"),
            (448.0, "448"),
            (-0.0, "-0"),
            (1e-4, "0.0001"),
            (1e-5, "1e-5"),
            (f32::MAX, "3.4028235e38"),
            (f32::from_bits(1), "1e-45"),
            (0.1, "0.1"),
            (f32::NAN, "NaN"),
            (f32::NEG_INFINITY, "-inf"),
        ] {
            assert_eq!(Shortest(x).to_string(), text);
            if !x.is_nan() {
                assert_eq!(text.parse::<f32>().unwrap().to_bits(), x.to_bits());
            }
        }
    }

    #[test]
    fn serde_as_string() {
        let f: Format = serde_json::from_str("\"nvfp4\"").unwrap();
        assert_eq!(f, Format::Block(BlockScaled::nvfp4()));
        assert_eq!(serde_json::to_string(&f).unwrap(), "\"nvfp4\"");
        assert!(serde_json::from_str::<Format>("\"fp9\"").is_err());
    }
}
