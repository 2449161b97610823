//! Block-scaled formats: `block` consecutive values share one scale.
//!
//! Per block: `amax = max |x|` (raised to `amax_floor`), a scale `s` from [`ScaleKind`], each
//! value stored as `element(clamp(x / s, ±fmax))` (round to nearest even) and dequantized as
//! `element · s`, all in f32. This is DeepSeek's `act_quant` / `fp4_act_quant` in their
//! `inplace=True` (quantize-dequantize) mode (DeepSeek-V3.2-Exp and DeepSeek-V4
//! `inference/kernel.py`; the pure-torch reimplementation in AI-Hypercomputer/maxtext
//! `tests/utils/deepseek4_reference/kernel.py` spells out the same arithmetic), extended to
//! the OCP MX (`e8m0`) and NVFP4 (`e4m3`) scale kinds.
//!
//! Rules shared by every kind:
//! - a block whose (floored) amax is 0 is left as it is: zeros keep their signs;
//! - a block whose scale underflows to 0 in f32 (possible only without a floor, for amax
//!   near the bottom of the f32 range) dequantizes to zeros with the signs of its inputs;
//! - any NaN or infinity in the slice is an error and the slice is left unchanged;
//! - the slice length must be a multiple of the block size;
//! - the dequantized product `element · s` is an f32 multiplication that saturates at
//!   `±f32::MAX`: finite inputs give finite outputs. Only blocks whose amax is within a factor of
//!   about two of `f32::MAX` get there: the element may round up to a grid value whose product
//!   with the scale is not an f32 (3.4e38 in `fp8-e4m3:32:ue8m0` has scale 2^120 and rounds to
//!   256, and 256·2^120 = 2^128; in `fp4-e2m1:32:ue8m0` the scale is 2^126 and 4·2^126 = 2^128),
//!   where plain GPU arithmetic would give ±inf.
//!
//! For power-of-two scales `x / s` is computed as `x · (1/s)`, which is the same f32 value
//! (`1/s` is exact); the fp32 and e4m3 kinds divide, as the references do.

use super::element::{round_grid, saturate_round, ElementFormat, Grid, E4M3_GRID};
use super::error::FormatError;
use super::scale::{e8m0_scale, reciprocal, ue8m0_scale, ScaleKind};

/// A block-scaled format: element format, block size, scale kind and amax floor.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BlockScaled {
    element: ElementFormat,
    block: usize,
    scale: ScaleKind,
    amax_floor: f32,
}

impl BlockScaled {
    /// A block-scaled format with no amax floor.
    ///
    /// Fails for a block of 0 and for element formats that are not block-scaled (bf16, fp16).
    pub(crate) fn new(element: ElementFormat, block: usize, scale: ScaleKind) -> Result<BlockScaled, FormatError> {
        if !element.is_block_element() {
            return Err(FormatError::NotBlockScalable { format: element.name().into() });
        }
        if block == 0 {
            return Err(FormatError::ZeroBlock);
        }
        Ok(BlockScaled { element, block, scale, amax_floor: 0.0 })
    }

    /// The same format with each block's amax raised to at least `floor` before its scale is
    /// computed (DeepSeek: `amax.clamp(min=1e-4)` in `act_quant`, `6·2^-126` in
    /// `fp4_act_quant`). Fails unless `floor` is finite and ≥ 0.
    pub(crate) fn with_amax_floor(self, floor: f32) -> Result<BlockScaled, FormatError> {
        if !(floor.is_finite() && floor >= 0.0) {
            return Err(FormatError::BadAmaxFloor { value: floor.to_string() });
        }
        Ok(BlockScaled { amax_floor: floor, ..self })
    }

    /// OCP MXFP4: fp4-e2m1, block 32, e8m0 scale `2^(floor(log2 amax) − 2)`.
    pub(crate) fn mxfp4() -> BlockScaled {
        BlockScaled { element: ElementFormat::Fp4E2m1, block: 32, scale: ScaleKind::E8m0, amax_floor: 0.0 }
    }

    /// NVIDIA NVFP4: fp4-e2m1, block 16, e4m3 block scale under an f32 tensor scale.
    pub(crate) fn nvfp4() -> BlockScaled {
        BlockScaled { element: ElementFormat::Fp4E2m1, block: 16, scale: ScaleKind::E4m3, amax_floor: 0.0 }
    }

    /// DeepSeek's FP8 activation quantization `act_quant(x, 128, scale_fmt)`: fp8-e4m3,
    /// block 128, amax floor 1e-4, scale fp32 (`scale_fmt = None`) or ue8m0
    /// (`scale_fmt = "ue8m0"`, which DeepSeek-V3.2-Exp's `config_671B_v3.2.json` sets, so its
    /// indexer q and k use power-of-two scales).
    #[cfg(test)]
    pub(crate) fn deepseek_fp8(scale: ScaleKind) -> BlockScaled {
        BlockScaled { element: ElementFormat::Fp8E4m3, block: 128, scale, amax_floor: 1e-4 }
    }

    /// DeepSeek-V4's FP4 simulation of the indexer's q and compressed keys,
    /// `fp4_act_quant(x, 32, inplace=True)`: fp4-e2m1, block 32, ue8m0 scale, amax floor
    /// `6·2^-126`.
    #[cfg(test)]
    pub(crate) fn deepseek_fp4() -> BlockScaled {
        BlockScaled {
            element: ElementFormat::Fp4E2m1,
            block: 32,
            scale: ScaleKind::Ue8m0,
            amax_floor: 6.0 * f32::MIN_POSITIVE,
        }
    }

    /// The element format.
    pub(crate) fn element(&self) -> ElementFormat {
        self.element
    }

    /// The number of consecutive values sharing one scale.
    pub(crate) fn block(&self) -> usize {
        self.block
    }

    /// The scale kind.
    pub(crate) fn scale(&self) -> ScaleKind {
        self.scale
    }

    /// The amax floor (0 when none).
    pub(crate) fn amax_floor(&self) -> f32 {
        self.amax_floor
    }

    /// Storage bits per value, the block's scale included (the e4m3 kind's per-slice scale
    /// is not counted).
    pub(crate) fn bits_per_value(&self) -> f64 {
        self.element.bits() as f64 + self.scale.bits() as f64 / self.block as f64
    }

    /// Quantize-dequantize `xs` in place, block by block, with no allocation.
    ///
    /// Errors (the slice is then unchanged): the length is not a multiple of the block
    /// ([`FormatError::BlockDoesNotDivide`]), or a value is NaN or infinite
    /// ([`FormatError::NonFinite`], naming the first one). For the e4m3 kind the whole slice is
    /// the tensor whose amax sets the tensor scale.
    pub(crate) fn quantize_dequantize_in_place(&self, xs: &mut [f32]) -> Result<(), FormatError> {
        if !xs.len().is_multiple_of(self.block) {
            return Err(FormatError::BlockDoesNotDivide { block: self.block, len: xs.len() });
        }
        if !block_kernel(self, xs) {
            let index = xs.iter().position(|x| !x.is_finite()).unwrap_or(0);
            return Err(FormatError::NonFinite {
                value: show_nonfinite(xs[index]),
                index,
                format: super::Format::Block(*self).to_string(),
                allowed: "block-scaled formats need finite numbers",
            });
        }
        Ok(())
    }
}

simd_versions! {
    /// Quantize-dequantize validated input ([`block_kernel_body`]).
    fn block_kernel(f: &BlockScaled, xs: &mut [f32]) -> bool = block_kernel_body;
}

/// Quantize-dequantize a slice whose length is a multiple of the block. Returns false, with
/// the slice unchanged, when it holds a NaN or infinity. The scale kind is matched once per
/// block, never per value.
#[inline(always)]
fn block_kernel_body(f: &BlockScaled, xs: &mut [f32]) -> bool {
    let top_bits = max_abs_bits(xs);
    if top_bits >= 0x7F80_0000 {
        return false;
    }
    let g = f.element.grid();
    let floor = f.amax_floor;
    let inv = reciprocal(g.max);
    let emax = f.element.max_exponent();
    // e4m3 kind: tensor scale = amax_tensor / (448·fmax); 448·fmax is exact in f32 for every
    // element format (2688, 200704, 25690112, 56896, 3136).
    let tensor = f32::from_bits(top_bits) / (448.0 * g.max);
    let fmax_tensor = g.max * tensor;
    for blk in xs.chunks_exact_mut(f.block) {
        let amax = f32::from_bits(max_abs_bits(blk));
        let amax = if amax < floor { floor } else { amax };
        if amax == 0.0 {
            continue; // a zero block stays as it is, signs of zero included
        }
        match f.scale {
            ScaleKind::Fp32 => divide_round_multiply(blk, amax * inv, g),
            ScaleKind::Ue8m0 => {
                let (s, inv_s) = ue8m0_scale(amax, inv);
                pow2_round_multiply(blk, s, inv_s, g);
            }
            ScaleKind::E8m0 => {
                let (s, inv_s) = e8m0_scale(amax, emax);
                pow2_round_multiply(blk, s, inv_s, g);
            }
            ScaleKind::E4m3 => {
                // amax / 0 = inf saturates to 448; the scale s·tensor is then 0.
                let s_raw = amax / fmax_tensor;
                let s = round_grid(if s_raw < 448.0 { s_raw } else { 448.0 }, E4M3_GRID);
                divide_round_multiply(blk, s * tensor, g);
            }
        }
    }
    true
}

/// `NaN`, `inf` or `-inf`.
fn show_nonfinite(x: f32) -> String {
    if x.is_nan() {
        "NaN".into()
    } else if x > 0.0 {
        "inf".into()
    } else {
        "-inf".into()
    }
}

/// Values per step of the inner loops: a fixed width lets the compiler emit straight vector
/// code even for blocks of 16 or 32 (a loop over a runtime-length block would be unrolled past
/// the block and run in its scalar tail).
const LANES: usize = 16;

/// Applies `op` to every value, `LANES` at a time, then to the tail.
#[inline(always)]
fn map_values(blk: &mut [f32], op: impl Fn(f32) -> f32) {
    let mut chunks = blk.chunks_exact_mut(LANES);
    for c in &mut chunks {
        let c: &mut [f32; LANES] = c.try_into().expect("chunks_exact_mut yields LANES values");
        for x in c.iter_mut() {
            *x = op(*x);
        }
    }
    for x in chunks.into_remainder() {
        *x = op(*x);
    }
}

/// The bit pattern of `max |x|`: the integer max of the sign-cleared bits, which orders finite
/// values as their magnitudes; any NaN or infinity gives `≥ 0x7F800000`. (A plain reduction:
/// the compiler vectorizes it with contiguous loads; hand-unrolled lanes made it vectorize
/// across blocks with gathers instead.)
#[inline(always)]
fn max_abs_bits(xs: &[f32]) -> u32 {
    xs.iter().fold(0u32, |m, x| m.max(x.to_bits() & 0x7FFF_FFFF))
}

/// Whether `element · s` can pass `f32::MAX` for some element of the grid (`g.max · s` in
/// f64, exact): true only for blocks whose amax is within a factor of about two of `f32::MAX`,
/// which then take the saturating product.
#[inline(always)]
fn may_overflow(s: f32, g: Grid) -> bool {
    g.max as f64 * s as f64 > f32::MAX as f64
}

/// The dequantized product saturated to the finite f32 range (the inputs are finite, never NaN).
#[inline(always)]
fn saturate_f32(y: f32) -> f32 {
    y.clamp(-f32::MAX, f32::MAX)
}

/// `element(clamp(x / s)) · s` for every value, saturated at `±f32::MAX`; a zero scale gives
/// signed zeros.
#[inline(always)]
fn divide_round_multiply(blk: &mut [f32], s: f32, g: Grid) {
    if s == 0.0 {
        blk.iter_mut().for_each(|x| *x *= 0.0);
    } else if may_overflow(s, g) {
        map_values(blk, |x| saturate_f32(saturate_round(x / s, g) * s));
    } else {
        map_values(blk, |x| saturate_round(x / s, g) * s);
    }
}

/// `element(clamp(x · inv_s)) · s` for a power-of-two scale `s = 1 / inv_s`, saturated at
/// `±f32::MAX`.
#[inline(always)]
fn pow2_round_multiply(blk: &mut [f32], s: f32, inv_s: f32, g: Grid) {
    if may_overflow(s, g) {
        map_values(blk, |x| saturate_f32(saturate_round(x * inv_s, g) * s));
    } else {
        map_values(blk, |x| saturate_round(x * inv_s, g) * s);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(f: BlockScaled, xs: &[f32]) -> Vec<f32> {
        let mut v = xs.to_vec();
        f.quantize_dequantize_in_place(&mut v).unwrap();
        v
    }

    #[test]
    fn zero_blocks_stay_zero_with_signs() {
        for scale in ScaleKind::ALL {
            for floor in [0.0, 1e-4] {
                let f = BlockScaled::new(ElementFormat::Fp4E2m1, 4, scale).unwrap().with_amax_floor(floor).unwrap();
                let out = run(f, &[0.0, -0.0, 0.0, -0.0, 1.0, -0.0, 0.0, 2.0]);
                let bits: Vec<u32> = out.iter().map(|x| x.to_bits()).collect();
                assert_eq!(&bits[..4], &[0, 0x8000_0000, 0, 0x8000_0000], "{scale:?} floor {floor}");
                assert_eq!(bits[5], 0x8000_0000, "{scale:?} floor {floor}");
            }
        }
    }

    #[test]
    fn mxfp4_saturates_and_ue8m0_does_not() {
        // amax 7: e8m0 scale 1, 7 → 6; ue8m0 scale 2^ceil(log2(7/6)) = 2, 7 → 3.5 → 4·2 = 8.
        let xs = [7.0, 1.0, 0.5, -3.0];
        let mx = BlockScaled::new(ElementFormat::Fp4E2m1, 4, ScaleKind::E8m0).unwrap();
        assert_eq!(run(mx, &xs), vec![6.0, 1.0, 0.5, -3.0]);
        let ue = BlockScaled::new(ElementFormat::Fp4E2m1, 4, ScaleKind::Ue8m0).unwrap();
        assert_eq!(run(ue, &xs), vec![8.0, 1.0, 0.0, -3.0]);
    }

    #[test]
    fn fp32_scale_maps_amax_to_fmax() {
        let f = BlockScaled::new(ElementFormat::Fp8E4m3, 2, ScaleKind::Fp32).unwrap();
        let out = run(f, &[3.0, -1.0]);
        assert!((out[0] - 3.0).abs() < 1e-6 && (out[1] + 1.0).abs() < 0.04, "{out:?}");
        let i8 = BlockScaled::new(ElementFormat::Int8, 2, ScaleKind::Fp32).unwrap();
        let out = run(i8, &[127.0, 0.5]);
        let s = 127.0 * reciprocal(127.0);
        assert_eq!(out[0], (127.0f32 / s).round() * s);
        assert!(out[1] == 0.0 || out[1] == s, "{out:?}");
    }

    #[test]
    fn nvfp4_two_level() {
        let f = BlockScaled::nvfp4();
        let mut xs: Vec<f32> = (0..32).map(|i| (i as f32 - 10.0) * 0.37).collect();
        let orig = xs.clone();
        f.quantize_dequantize_in_place(&mut xs).unwrap();
        for (a, b) in xs.iter().zip(&orig) {
            assert!((a - b).abs() <= 0.5 * 7.8, "{a} vs {b}");
        }
    }

    #[test]
    fn rejects_non_finite_and_ragged_input_unchanged() {
        let f = BlockScaled::mxfp4();
        let mut xs = vec![1.0; 64];
        xs[40] = f32::NAN;
        let err = f.quantize_dequantize_in_place(&mut xs).unwrap_err();
        assert!(matches!(err, FormatError::NonFinite { index: 40, .. }), "{err}");
        assert!(xs[..40].iter().all(|&x| x == 1.0));
        let mut short = vec![1.0; 33];
        assert_eq!(
            f.quantize_dequantize_in_place(&mut short).unwrap_err(),
            FormatError::BlockDoesNotDivide { block: 32, len: 33 }
        );
        assert!(BlockScaled::new(ElementFormat::Bf16, 32, ScaleKind::Fp32).is_err());
        assert_eq!(BlockScaled::new(ElementFormat::Int8, 0, ScaleKind::Fp32), Err(FormatError::ZeroBlock));
        assert!(f.with_amax_floor(-1.0).is_err());
        assert!(f.with_amax_floor(f32::NAN).is_err());
    }
}
