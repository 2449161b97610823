//! Scale kinds of block-scaled formats and the arithmetic of one block's scale.
//!
//! All scale arithmetic is in f32, in the order written here; the committed test vectors
//! (tests/data/formats/) pin it bit for bit.

use super::error::FormatError;

/// How a block's shared scale is chosen from the block's largest magnitude `amax`.
///
/// `fmax` is the element format's largest finite value and `inv = f32(1/fmax)` its reciprocal
/// rounded to f32 (DeepSeek's kernels multiply by the reciprocal rather than divide:
/// `fp8_max_inv = 1 / fp8_max`, `fp4_max_inv = 1.0 / fp4_max`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum ScaleKind {
    /// `s = amax · inv` in f32 (DeepSeek `act_quant` with `scale_fmt = None`); values are
    /// stored as `element(x / s)` and dequantized as `element · s`.
    Fp32,
    /// `s = 2^ceil(log2(amax · inv))`: the smallest power of two with `amax / s ≤ fmax`
    /// (DeepSeek "ue8m0": `fast_round_scale` in `act_quant` with `scale_fmt = "ue8m0"` and in
    /// `fp4_act_quant`). Elements never saturate.
    Ue8m0,
    /// `s = 2^(floor(log2 amax) − emax)`, `emax = floor(log2 fmax)` (the OCP MX shared
    /// exponent; with fp4-e2m1 and block 32 this is MXFP4). Elements may exceed `fmax` and
    /// saturate.
    E8m0,
    /// Two-level, as NVFP4: a tensor scale `g = amax_tensor / (448 · fmax)` over the whole slice
    /// and a block scale `s = e4m3(amax / (fmax · g))`; values are `element(x / (s · g))`,
    /// dequantized as `element · (s · g)`.
    E4m3,
}

impl ScaleKind {
    /// Every scale kind.
    pub(crate) const ALL: [ScaleKind; 4] = [ScaleKind::Fp32, ScaleKind::Ue8m0, ScaleKind::E8m0, ScaleKind::E4m3];

    /// The kind's name as the command line spells it.
    pub(crate) fn name(self) -> &'static str {
        match self {
            ScaleKind::Fp32 => "fp32",
            ScaleKind::Ue8m0 => "ue8m0",
            ScaleKind::E8m0 => "e8m0",
            ScaleKind::E4m3 => "e4m3",
        }
    }

    /// Bits of storage per scale (the e4m3 kind's per-slice f32 scale is not counted).
    pub(crate) fn bits(self) -> u32 {
        match self {
            ScaleKind::Fp32 => 32,
            _ => 8,
        }
    }
}

impl std::fmt::Display for ScaleKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for ScaleKind {
    type Err = FormatError;
    fn from_str(s: &str) -> Result<Self, FormatError> {
        let t = s.trim();
        ScaleKind::ALL
            .into_iter()
            .find(|k| k.name().eq_ignore_ascii_case(t))
            .ok_or_else(|| FormatError::UnknownScale { name: s.to_string() })
    }
}

/// The E8M0 exponent range: scales are `2^e` with `e` in `-127..=127`.
const E8M0_MIN_EXP: i32 = -127;
const E8M0_MAX_EXP: i32 = 127;

/// `f32(1/fmax)`: the reciprocal computed in f64 and rounded to f32, as DeepSeek's Python
/// constant `1 / fp8_max` becomes an f32 kernel constant.
pub(crate) fn reciprocal(fmax: f32) -> f32 {
    (1.0f64 / fmax as f64) as f32
}

/// `2^e` for `e` in `-149..=127`, exact (subnormal below `2^-126`).
pub(crate) fn pow2(e: i32) -> f32 {
    debug_assert!((-149..=127).contains(&e));
    if e >= -126 {
        f32::from_bits(((e + 127) as u32) << 23)
    } else {
        f32::from_bits(1u32 << (e + 149))
    }
}

/// `floor(log2 t)` for a positive finite f32, subnormals included.
pub(crate) fn floor_log2(t: f32) -> i32 {
    let bits = t.to_bits() & 0x7FFF_FFFF;
    debug_assert!(bits != 0 && bits < 0x7F80_0000);
    let e = (bits >> 23) as i32;
    if e > 0 {
        e - 127
    } else {
        (31 - bits.leading_zeros() as i32) - 149
    }
}

/// `ceil(log2 t)` for a positive finite f32, subnormals included. For normal `t` this is
/// DeepSeek's `fast_log2_ceil` (exponent field − 127, plus one if any mantissa bit is set).
pub(crate) fn ceil_log2(t: f32) -> i32 {
    let bits = t.to_bits() & 0x7FFF_FFFF;
    let exact = if bits >= 0x0080_0000 { bits & 0x007F_FFFF == 0 } else { bits.is_power_of_two() };
    floor_log2(t) + i32::from(!exact)
}

/// The power-of-two scale of the ue8m0 kind, as `(s, 1/s)`, for `amax > 0`.
///
/// `t = amax · inv` in f32; `s = 2^ceil(log2 t)` (DeepSeek `fast_round_scale`). The exponent is
/// clamped to the E8M0 range `[-127, 127]`, which only matters when `t` is below `2^-127` (or
/// rounds to 0): DeepSeek's kernels never get there because they clamp `amax` first
/// (≥ 1e-4 for FP8, ≥ 6·2^-126 for FP4), and the clamp makes the result the nearest
/// representable scale instead of DeepSeek's bit trick's 0.
pub(crate) fn ue8m0_scale(amax: f32, inv: f32) -> (f32, f32) {
    let t = amax * inv;
    let e = if t > 0.0 { ceil_log2(t).clamp(E8M0_MIN_EXP, E8M0_MAX_EXP) } else { E8M0_MIN_EXP };
    (pow2(e), pow2(-e))
}

/// The power-of-two scale of the e8m0 (OCP MX) kind, as `(s, 1/s)`, for `amax > 0`:
/// `2^(floor(log2 amax) − emax)`, the exponent clamped to the E8M0 range `[-127, 127]`.
pub(crate) fn e8m0_scale(amax: f32, emax: i32) -> (f32, f32) {
    let e = (floor_log2(amax) - emax).clamp(E8M0_MIN_EXP, E8M0_MAX_EXP);
    (pow2(e), pow2(-e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn logs_of_normals_and_subnormals() {
        assert_eq!(floor_log2(1.0), 0);
        assert_eq!(ceil_log2(1.0), 0);
        assert_eq!(floor_log2(1.5), 0);
        assert_eq!(ceil_log2(1.5), 1);
        assert_eq!(floor_log2(f32::from_bits(1)), -149);
        assert_eq!(ceil_log2(f32::from_bits(1)), -149);
        assert_eq!(floor_log2(f32::from_bits(3)), -148);
        assert_eq!(ceil_log2(f32::from_bits(3)), -147);
        assert_eq!(ceil_log2(f32::MIN_POSITIVE), -126);
        assert_eq!(ceil_log2(f32::MAX), 128);
    }

    #[test]
    fn pow2_covers_subnormals() {
        assert_eq!(pow2(0), 1.0);
        assert_eq!(pow2(-127), f32::from_bits(0x0040_0000));
        assert_eq!(pow2(127), 2f32.powi(127));
        assert_eq!(pow2(-149), f32::from_bits(1));
    }

    #[test]
    fn ue8m0_matches_deepseek_examples() {
        // amax 5.1 with fp8: 5.1/448 ≈ 0.0114 → 2^-6.
        let (s, inv) = ue8m0_scale(5.1, reciprocal(448.0));
        assert_eq!(s, 2f32.powi(-6));
        assert_eq!(inv, 64.0);
        // amax exactly 448·2^k: the scale is exactly 2^k, no bump (1/448 rounds so that
        // 448 · f32(1/448) == 1 in f32).
        assert_eq!(ue8m0_scale(448.0 * 8.0, reciprocal(448.0)).0, 8.0);
        assert_eq!(ue8m0_scale(6.0 * 0.25, reciprocal(6.0)).0, 0.25);
        // DeepSeek's fp4 floor: amax 6·2^-126 gives 2^-126.
        assert_eq!(ue8m0_scale(6.0 * 2f32.powi(-126), reciprocal(6.0)).0, 2f32.powi(-126));
    }

    #[test]
    fn e8m0_is_ocp_shared_exponent() {
        // e2m1 (emax 2): amax 7 → 2^(2-2) = 1, and 7 saturates to 6.
        assert_eq!(e8m0_scale(7.0, 2).0, 1.0);
        assert_eq!(e8m0_scale(8.0, 2).0, 2.0);
        assert_eq!(e8m0_scale(f32::from_bits(1), 2).0, pow2(-127));
    }
}
