//! Element (scalar) number formats and their round-to-nearest-even kernels.
//!
//! Every kernel maps an `f32` to the nearest value of the format (ties to even) and back to
//! `f32`; finite values beyond the largest finite value saturate to it
//! (docs/model.md#number-formats). What each format does with NaN and ±infinity is listed on
//! [`ElementFormat`].
//!
//! # How the rounding is done
//! The formats other than bf16 are "grids": within one binade `[2^e, 2^(e+1))` of the format its
//! values are the multiples of a quantum `u = 2^(e − m)` (`m` mantissa bits), and below the
//! smallest normal binade the quantum stays that of the smallest binade (subnormals). For a
//! magnitude `a` with `a < 2^23·u`, the f32 sum `a + 2^23·u` lies in a binade whose f32 spacing is
//! exactly `u`, so the hardware's round-to-nearest-even addition rounds `a` to the grid and
//! subtracting `2^23·u` again is exact. The quantum follows from `a`'s f32 exponent clamped to the
//! format's exponent range; the integers are the grid with a constant quantum 1. bf16 is rounded
//! on the f32 bit pattern (add `0x7FFF` plus the lowest kept bit, truncate). No branch depends on
//! the format inside a loop: the caller picks the kernel once per slice.

use super::error::FormatError;

/// An element number format: the type of one stored value.
///
/// Quantize-dequantize rounds to nearest, ties to even, and saturates finite values beyond the
/// largest finite value to it (so it never produces an infinity from a finite input).
///
/// Non-finite inputs, used alone (not block-scaled), follow the `ml_dtypes` casts except where a
/// format has no encoding for NaN:
///
/// | format | NaN | ±inf |
/// | --- | --- | --- |
/// | bf16, fp16, fp8-e5m2 | NaN (quiet, sign kept) | ±inf |
/// | fp8-e4m3 (e4m3fn: no inf) | NaN (quiet, sign kept) | NaN with the sign of the input (as `ml_dtypes`) |
/// | fp4-e2m1 (no NaN, no inf) | error [`FormatError::NonFinite`] | ±6 (as `ml_dtypes`) |
/// | int8, int4 | error [`FormatError::NonFinite`] | ±127, ±7 |
///
/// NaN outputs are always the canonical quiet NaN `0x7FC00000` with the input's sign bit.
/// (`ml_dtypes` turns NaN into −0 / +0 for fp4-e2m1, an artefact of a format without NaN; this
/// crate refuses NaN there instead.) Block-scaled formats refuse every non-finite input.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ElementFormat {
    /// bfloat16: 8 exponent bits, 7 mantissa bits, max 3.3895314e38.
    Bf16,
    /// IEEE binary16: 5 exponent bits, 10 mantissa bits, max 65504.
    Fp16,
    /// FP8 e4m3fn (OCP): 4 exponent bits, 3 mantissa bits, max 448, NaN but no infinity.
    Fp8E4m3,
    /// FP8 e5m2 (OCP): 5 exponent bits, 2 mantissa bits, max 57344, with infinities.
    Fp8E5m2,
    /// FP4 e2m1 (OCP): values ±{0, 0.5, 1, 1.5, 2, 3, 4, 6}; no NaN, no infinity.
    Fp4E2m1,
    /// Symmetric 8-bit integer: −127..=127.
    Int8,
    /// Symmetric 4-bit integer: −7..=7.
    Int4,
}

/// Parameters of a grid format (every element format except bf16); see the module docs.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Grid {
    /// Smallest biased f32 exponent whose quantum applies (the format's subnormal quantum).
    lo: u32,
    /// Largest biased f32 exponent of the format.
    hi: u32,
    /// Mantissa bits.
    m: u32,
    /// Largest finite value.
    pub(crate) max: f32,
}

impl Grid {
    const fn new(emin: i32, emax: i32, m: u32, max: f32) -> Grid {
        Grid { lo: (emin + 127) as u32, hi: (emax + 127) as u32, m, max }
    }
}

const FP16: Grid = Grid::new(-14, 15, 10, 65504.0);
const E4M3: Grid = Grid::new(-6, 8, 3, 448.0);
const E5M2: Grid = Grid::new(-14, 15, 2, 57344.0);
const E2M1: Grid = Grid::new(0, 2, 1, 6.0);
// Integers: quantum 1 everywhere (emin = emax = 0, no mantissa bits).
const INT8: Grid = Grid::new(0, 0, 0, 127.0);
const INT4: Grid = Grid::new(0, 0, 0, 7.0);
/// The largest finite bf16 value, as f32 bits.
const BF16_MAX_BITS: u32 = 0x7F7F_0000;
const QNAN: u32 = 0x7FC0_0000;
const INF: u32 = 0x7F80_0000;

/// The e4m3 grid, used by the e4m3 scale kind.
pub(crate) const E4M3_GRID: Grid = E4M3;

impl ElementFormat {
    /// Every element format, in the order of the names list.
    pub(crate) const ALL: [ElementFormat; 7] = [
        ElementFormat::Bf16,
        ElementFormat::Fp16,
        ElementFormat::Fp8E4m3,
        ElementFormat::Fp8E5m2,
        ElementFormat::Fp4E2m1,
        ElementFormat::Int8,
        ElementFormat::Int4,
    ];

    /// The format's name as the command line spells it (`fp8-e4m3`, `int8`, …).
    pub(crate) fn name(self) -> &'static str {
        match self {
            ElementFormat::Bf16 => "bf16",
            ElementFormat::Fp16 => "fp16",
            ElementFormat::Fp8E4m3 => "fp8-e4m3",
            ElementFormat::Fp8E5m2 => "fp8-e5m2",
            ElementFormat::Fp4E2m1 => "fp4-e2m1",
            ElementFormat::Int8 => "int8",
            ElementFormat::Int4 => "int4",
        }
    }

    /// The format with this name (exact, lower case), if any.
    pub(crate) fn from_name(name: &str) -> Option<ElementFormat> {
        ElementFormat::ALL.into_iter().find(|f| f.name() == name)
    }

    /// Bits of storage per value.
    pub(crate) fn bits(self) -> u32 {
        match self {
            ElementFormat::Bf16 | ElementFormat::Fp16 => 16,
            ElementFormat::Fp8E4m3 | ElementFormat::Fp8E5m2 | ElementFormat::Int8 => 8,
            ElementFormat::Fp4E2m1 | ElementFormat::Int4 => 4,
        }
    }

    /// The largest finite value (448 for e4m3, 6 for e2m1, 127 for int8, …).
    #[cfg(test)]
    pub(crate) fn max_finite(self) -> f32 {
        match self {
            ElementFormat::Bf16 => f32::from_bits(BF16_MAX_BITS),
            _ => self.grid().max,
        }
    }

    /// `floor(log2(max_finite))`: the exponent of the largest binade (`emax` of the OCP MX
    /// specification: 2 for e2m1, 8 for e4m3, 15 for e5m2; 6 and 2 for int8 and int4).
    pub(crate) fn max_exponent(self) -> i32 {
        match self {
            ElementFormat::Bf16 => 127,
            ElementFormat::Fp16 | ElementFormat::Fp8E5m2 => 15,
            ElementFormat::Fp8E4m3 => 8,
            ElementFormat::Fp4E2m1 | ElementFormat::Int4 => 2,
            ElementFormat::Int8 => 6,
        }
    }

    /// Whether the format is a symmetric integer.
    pub(crate) fn is_integer(self) -> bool {
        matches!(self, ElementFormat::Int8 | ElementFormat::Int4)
    }

    /// Whether the format can be the element of a block-scaled format (fp8, fp4 and the
    /// integers; bf16 and fp16 have range enough not to need it).
    pub(crate) fn is_block_element(self) -> bool {
        !matches!(self, ElementFormat::Bf16 | ElementFormat::Fp16)
    }

    /// Whether the format has a NaN encoding (otherwise NaN input is an error).
    pub(crate) fn has_nan(self) -> bool {
        matches!(self, ElementFormat::Bf16 | ElementFormat::Fp16 | ElementFormat::Fp8E4m3 | ElementFormat::Fp8E5m2)
    }

    /// Whether the format has infinities.
    pub(crate) fn has_inf(self) -> bool {
        matches!(self, ElementFormat::Bf16 | ElementFormat::Fp16 | ElementFormat::Fp8E5m2)
    }

    /// Quantize-dequantize one value (see the type's table for NaN and infinities).
    #[cfg(test)]
    pub(crate) fn quantize_dequantize(self, x: f32) -> Result<f32, FormatError> {
        let mut one = [x];
        self.quantize_dequantize_in_place(&mut one)?;
        Ok(one[0])
    }

    /// Quantize-dequantize every value of `xs` in place, with no allocation.
    ///
    /// Fails only for a NaN given to a format without NaN (fp4-e2m1, int8, int4); then `xs` is
    /// left unchanged and the error names the first NaN's index.
    pub(crate) fn quantize_dequantize_in_place(self, xs: &mut [f32]) -> Result<(), FormatError> {
        match self {
            ElementFormat::Bf16 => bf16_slice(xs),
            _ => {
                if !self.has_nan() {
                    if let Some(index) = xs.iter().position(|x| x.is_nan()) {
                        return Err(FormatError::NonFinite {
                            value: "NaN".into(),
                            index,
                            format: self.name().into(),
                            allowed: "this format has no NaN; give numbers (±inf saturate)",
                        });
                    }
                }
                let g = self.grid();
                // What ±inf becomes: inf, NaN (e4m3fn, as ml_dtypes) or the max (no inf).
                let inf_out = if self.has_inf() {
                    INF
                } else if self.has_nan() {
                    QNAN
                } else {
                    g.max.to_bits()
                };
                grid_slice(xs, g, inf_out);
            }
        }
        Ok(())
    }

    /// The grid of a format other than bf16.
    pub(crate) fn grid(self) -> Grid {
        match self {
            // bf16 is never rounded through a grid; this arm only serves max_finite's callers
            // that never reach it.
            ElementFormat::Bf16 => Grid::new(-126, 127, 7, f32::from_bits(BF16_MAX_BITS)),
            ElementFormat::Fp16 => FP16,
            ElementFormat::Fp8E4m3 => E4M3,
            ElementFormat::Fp8E5m2 => E5M2,
            ElementFormat::Fp4E2m1 => E2M1,
            ElementFormat::Int8 => INT8,
            ElementFormat::Int4 => INT4,
        }
    }
}

impl std::fmt::Display for ElementFormat {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Rounds `a` (finite, `0 ≤ a ≤ g.max`, possibly −0) to the grid, ties to even.
#[inline(always)]
pub(crate) fn round_grid(a: f32, g: Grid) -> f32 {
    // max/min rather than clamp: clamp asserts lo <= hi, a branch in the hot loop.
    let e = (a.to_bits() >> 23).max(g.lo).min(g.hi);
    let c = f32::from_bits((e + 23 - g.m) << 23);
    (a + c) - c
}

/// Quantize-dequantize a scaled value `y` (finite or ±inf, not NaN): saturate to `±g.max`,
/// round to the grid, keep the sign (so −0 stays −0).
#[inline(always)]
pub(crate) fn saturate_round(y: f32, g: Grid) -> f32 {
    let a = f32::from_bits(y.to_bits() & 0x7FFF_FFFF);
    let a = if a < g.max { a } else { g.max };
    f32::from_bits(round_grid(a, g).to_bits() | (y.to_bits() & 0x8000_0000))
}

simd_versions! {
    /// Every value through a grid format ([`grid_scalar`]).
    fn grid_slice(xs: &mut [f32], g: Grid, inf_out: u32) -> () = grid_slice_kernel;
}

simd_versions! {
    /// Every value through bf16 ([`bf16_scalar`]).
    fn bf16_slice(xs: &mut [f32]) -> () = bf16_slice_kernel;
}

#[inline(always)]
fn grid_slice_kernel(xs: &mut [f32], g: Grid, inf_out: u32) {
    xs.iter_mut().for_each(|x| *x = grid_scalar(*x, g, inf_out));
}

#[inline(always)]
fn bf16_slice_kernel(xs: &mut [f32]) {
    xs.iter_mut().for_each(|x| *x = bf16_scalar(*x));
}

/// One value through a grid format, with the non-finite rules of [`ElementFormat`]:
/// NaN → quiet NaN with the sign kept, ±inf → `inf_out` with the sign kept.
#[inline(always)]
fn grid_scalar(x: f32, g: Grid, inf_out: u32) -> f32 {
    let bits = x.to_bits();
    let sign = bits & 0x8000_0000;
    let abs = bits & 0x7FFF_FFFF;
    let a = f32::from_bits(abs);
    // NaN compares false and becomes max here; the select below replaces it.
    let a = if a < g.max { a } else { g.max };
    let r = round_grid(a, g).to_bits();
    let special = if abs > INF { QNAN } else { inf_out };
    f32::from_bits(if abs >= INF { special } else { r } | sign)
}

/// One value through bf16: round the f32 bit pattern to its upper 16 bits, ties to even,
/// saturating finite values; NaN → quiet NaN, ±inf → ±inf, signs kept.
#[inline(always)]
fn bf16_scalar(x: f32) -> f32 {
    let bits = x.to_bits();
    let sign = bits & 0x8000_0000;
    let abs = bits & 0x7FFF_FFFF;
    // abs ≤ 0x7FFF_FFFF, so the sum fits in u32.
    let r = (abs + 0x7FFF + ((abs >> 16) & 1)) & 0xFFFF_0000;
    let r = r.min(BF16_MAX_BITS);
    let special = if abs > INF { QNAN } else { INF };
    f32::from_bits(if abs >= INF { special } else { r } | sign)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q(f: ElementFormat, x: f32) -> f32 {
        f.quantize_dequantize(x).unwrap()
    }

    #[test]
    fn e2m1_grid_and_ties() {
        let f = ElementFormat::Fp4E2m1;
        let cases = [
            (0.25f32, 0.0f32),
            (0.26, 0.5),
            (0.75, 1.0),
            (1.25, 1.0),
            (1.75, 2.0),
            (2.5, 2.0),
            (3.5, 4.0),
            (5.0, 4.0),
            (5.01, 6.0),
            (7.0, 6.0),
            (1e30, 6.0),
            (f32::INFINITY, 6.0),
            (-0.1, -0.0),
        ];
        for (x, want) in cases {
            let got = q(f, x);
            assert_eq!(got.to_bits(), want.to_bits(), "e2m1({x}) = {got}, want {want}");
        }
        assert!(f.quantize_dequantize(f32::NAN).is_err());
    }

    #[test]
    fn e4m3_saturates_and_maps_inf_to_nan() {
        let f = ElementFormat::Fp8E4m3;
        assert_eq!(q(f, 463.9), 448.0);
        assert_eq!(q(f, 1e9), 448.0);
        assert_eq!(q(f, -1e9), -448.0);
        assert_eq!(q(f, f32::INFINITY).to_bits(), QNAN);
        assert_eq!(q(f, f32::NEG_INFINITY).to_bits(), QNAN | 0x8000_0000);
        // Smallest subnormal 2^-9; half of it ties to 0, a bit more rounds up.
        assert_eq!(q(f, 2f32.powi(-10)), 0.0);
        assert_eq!(q(f, 2f32.powi(-10) * 1.0001), 2f32.powi(-9));
    }

    #[test]
    fn bf16_and_fp16_keep_inf_and_saturate_finite() {
        assert_eq!(q(ElementFormat::Bf16, f32::MAX), ElementFormat::Bf16.max_finite());
        assert_eq!(q(ElementFormat::Bf16, f32::INFINITY), f32::INFINITY);
        assert_eq!(q(ElementFormat::Fp16, 1e6), 65504.0);
        assert_eq!(q(ElementFormat::Fp16, -f32::INFINITY), -f32::INFINITY);
        assert_eq!(q(ElementFormat::Bf16, 1.0 + 2f32.powi(-8)), 1.0);
        assert_eq!(q(ElementFormat::Bf16, 1.0 + 3.0 * 2f32.powi(-8)), 1.0 + 2f32.powi(-6));
    }

    #[test]
    fn integers_round_half_even() {
        assert_eq!(q(ElementFormat::Int8, 2.5), 2.0);
        assert_eq!(q(ElementFormat::Int8, 3.5), 4.0);
        assert_eq!(q(ElementFormat::Int8, -126.5), -126.0);
        assert_eq!(q(ElementFormat::Int8, 300.0), 127.0);
        assert_eq!(q(ElementFormat::Int4, -7.6), -7.0);
        assert_eq!(q(ElementFormat::Int4, 0.5).to_bits(), 0);
    }
}
