//! The vector model's random numbers: counter-based, so that any draw of a trial is a pure
//! function of where it sits and the CPU and a GPU produce the same values in any order.
//!
//! **Generator.** Philox4x32-10 (Salmon, Moraes, Dror, Shaw, "Parallel random numbers: as easy
//! as 1, 2, 3", SC 2011; the Random123 library): a 128-bit counter and a 64-bit key give four
//! 32-bit words through ten rounds of two 32×32→64 multiplications. It is written out here (20
//! lines) rather than taken from a crate: the crates that offer it (`philox` 0.0.0 of 2019,
//! small general-purpose RNG collections) are not maintained libraries this project could rely
//! on, and the very same lines must exist in CUDA C for the GPU build (`indexer::cuda`), where
//! no crate helps. The unit tests check it against Random123's published known-answer vectors
//! (`kat_vectors`, the three `philox4x32 10` lines).
//!
//! **Addressing.** Key = the two halves of SplitMix64(SplitMix64(seed) ⊕ i) for trial i (a
//! bijection of i for a given seed, so trials of one seed never share a key). Counter = (a, b,
//! layer, purpose): `purpose` names the kind of draw ([`QUERY`], [`KEY`], …), `a` its row
//! (entry, head, …), `b` the block of four values within the row. A draw is therefore fixed by
//! (seed, trial, layer, purpose, row, index) alone: entry j's key is the same whether entries
//! are drawn in order by one CPU thread or all at once by GPU threads.
//!
//! **Normals.** Box–Muller, no rejection: words (w0, w1) give r = √(−2 ln u) with u =
//! w0·2^-32 + 2^-33 ∈ (0, 1] (so |z| ≤ 6.8), and the angle 2π(w1·2^-32) − π/4, reduced exactly
//! to a quarter turn (the top two bits of w1) plus a ∈ [−π/4, π/4). ln, sin and cos are
//! Cephes' single-precision polynomials ([`ln`], [`sincos`]), evaluated in plain f32 additions
//! and multiplications in the written order (Rust never contracts them into FMAs; the CUDA
//! build compiles with `--fmad=false` and rounds each operation explicitly), so the normals are
//! the same bits on every CPU and GPU. Four words give four normals: (r₀cos, r₀sin, r₁cos,
//! r₁sin).

/// Draw purposes (the counter's last word).
pub(crate) const QUERY: u32 = 1;
/// Signed head weights (row 0, value h).
pub(crate) const WEIGHT: u32 = 2;
/// Positional gate logits (row 0: previous half, row 1: own half; value pos·d + channel).
pub(crate) const GATE_POS: u32 = 3;
/// Key-norm gains (row 0, value channel).
pub(crate) const GAIN: u32 = 4;
/// A shortcut entry's key (row = entry, value channel).
pub(crate) const KEY: u32 = 5;
/// A token-built entry's tokens (row = entry, value slot·4⌈d/4⌉ + channel; slot p < c is the
/// own block's p-th token, c + p the previous block's through the second projection).
pub(crate) const TOKEN: u32 = 6;
/// The token-dependent gate logits of an entry (row = entry; see [`gate_block`]).
pub(crate) const GATE_TOKEN: u32 = 7;

const M0: u64 = 0xD251_1F53;
const M1: u64 = 0xCD9E_8D57;
const W0: u32 = 0x9E37_79B9;
const W1: u32 = 0xBB67_AE85;

/// Philox4x32-10 of `ctr` under `key` (Random123's `philox4x32_R(10, ctr, key)`).
#[inline(always)]
pub(crate) fn philox4x32_10(ctr: [u32; 4], key: [u32; 2]) -> [u32; 4] {
    let (mut c, mut k) = (ctr, key);
    for r in 0..10 {
        if r > 0 {
            k[0] = k[0].wrapping_add(W0);
            k[1] = k[1].wrapping_add(W1);
        }
        let p0 = M0 * c[0] as u64;
        let p1 = M1 * c[2] as u64;
        c = [((p1 >> 32) as u32) ^ c[1] ^ k[0], p1 as u32, ((p0 >> 32) as u32) ^ c[3] ^ k[1], p0 as u32];
    }
    c
}

#[inline]
fn splitmix64(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

/// The Philox key of trial `i` of `seed`.
pub(crate) fn trial_key(seed: u64, i: u64) -> [u32; 2] {
    let k = splitmix64(splitmix64(seed) ^ i);
    [k as u32, (k >> 32) as u32]
}

/// One layer's draws of one trial: the key and the layer; every draw of the layer is addressed
/// from here (module docs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Draws {
    /// The trial's Philox key.
    pub(crate) key: [u32; 2],
    /// The layer.
    pub(crate) layer: u32,
}

impl Draws {
    /// Layer `layer` of trial `i` of `seed`.
    pub fn new(seed: u64, i: u64, layer: u32) -> Draws {
        Draws { key: trial_key(seed, i), layer }
    }

    /// Normals `4b .. 4b + 4` of row `a` of `purpose`.
    #[inline(always)]
    pub(crate) fn normals4(&self, purpose: u32, a: u32, b: u32) -> [f32; 4] {
        let w = philox4x32_10([a, b, self.layer, purpose], self.key);
        let (z0, z1) = box_muller(w[0], w[1]);
        let (z2, z3) = box_muller(w[2], w[3]);
        [z0, z1, z2, z3]
    }

    /// Normals `4·first ..` of row `a` of `purpose` into `out` (a multiple of 4 long, or the
    /// last block's unused values dropped).
    pub(crate) fn fill(&self, purpose: u32, a: u32, first: u32, out: &mut [f32]) {
        fill_dispatch(self, purpose, a, first, out);
    }
}

/// The gate block of the token gate: entry row, half (0 own block, 1 previous block), channel
/// j and position p give block (half·d + j)·⌈c/4⌉ + p/4, value p mod 4; so that one channel's
/// logits come from its own blocks (the GPU computes an entry channel by channel).
#[inline(always)]
pub(crate) fn gate_block(half: u32, j: u32, d: u32, c: u32, p: u32) -> (u32, usize) {
    ((half * d + j) * c.div_ceil(4) + p / 4, (p % 4) as usize)
}

/// √½ (the CUDA kernels spell it 0.707106781186547524f: the same f32).
const SQRTHF: f32 = std::f32::consts::FRAC_1_SQRT_2;
const TWO_M30: f32 = 1.0 / 1_073_741_824.0;
const TWO_M32: f32 = 1.0 / 4_294_967_296.0;
const TWO_M33: f32 = 0.5 / 4_294_967_296.0;

/// ln x for a positive normal f32 `x` (Cephes `logf`): x = m·2^e with m ∈ [√½, √2), a degree-8
/// polynomial in m − 1, and e·ln 2 in two parts.
#[inline(always)]
#[allow(clippy::excessive_precision)]
pub(crate) fn ln(x: f32) -> f32 {
    let bits = x.to_bits();
    let m = f32::from_bits((bits & 0x007F_FFFF) | 0x3F00_0000);
    // Branch-free (selects), so that the batched fill vectorises.
    let low = m < SQRTHF;
    let e = ((bits >> 23) as i32) - 126 - low as i32;
    let m = if low { (m + m) - 1.0 } else { m - 1.0 };
    let z = m * m;
    let mut y = 7.037_683_629_2E-2_f32;
    y = y * m - 1.151_461_031_0E-1;
    y = y * m + 1.167_699_874_0E-1;
    y = y * m - 1.242_014_084_6E-1;
    y = y * m + 1.424_932_278_7E-1;
    y = y * m - 1.666_805_766_5E-1;
    y = y * m + 2.000_071_476_5E-1;
    y = y * m - 2.499_999_399_3E-1;
    y = y * m + 3.333_333_117_4E-1;
    y = (y * m) * z;
    let ef = e as f32;
    y += ef * -2.121_944_40E-4;
    y -= 0.5 * z;
    let r = m + y;
    r + ef * 0.693_359_375
}

/// (sin a, cos a) for |a| ≤ π/4 (Cephes `sinf` / `cosf` polynomials).
#[inline(always)]
#[allow(clippy::excessive_precision)]
pub(crate) fn sincos(a: f32) -> (f32, f32) {
    let z = a * a;
    let mut s = -1.951_529_589_1E-4_f32 * z;
    s += 8.332_160_873_6E-3;
    s *= z;
    s -= 1.666_665_461_1E-1;
    s *= z;
    s *= a;
    s += a;
    let mut c = 2.443_315_711_809_948E-5_f32 * z;
    c -= 1.388_731_625_493_765E-3;
    c *= z;
    c += 4.166_664_568_298_827E-2;
    c *= z;
    c *= z;
    c -= 0.5 * z;
    c += 1.0;
    (s, c)
}

/// e^x for x ≤ 0 (Cephes `expf`: x = n ln 2 + r, a degree-5 polynomial in r, times 2^n as one
/// multiplication by the power of two, subnormal down to 2^-149; 0 below −103). For the token
/// gate's softmax, whose arguments are ≤ 0.
#[inline(always)]
#[allow(clippy::excessive_precision)]
pub(crate) fn exp_neg(x: f32) -> f32 {
    if x < -103.0 {
        return 0.0;
    }
    let n = (x * std::f32::consts::LOG2_E + 0.5).floor();
    let mut r = x - n * 0.693_359_375;
    r -= n * -2.121_944_40E-4;
    let z = r * r;
    let mut y = 1.987_569_150_0E-4_f32 * r;
    y += 1.398_199_950_7E-3;
    y *= r;
    y += 8.333_451_907_3E-3;
    y *= r;
    y += 4.166_579_589_4E-2;
    y *= r;
    y += 1.666_666_545_9E-1;
    y *= r;
    y += 5.000_000_120_1E-1;
    y *= z;
    y += r;
    y += 1.0;
    let n = n as i32;
    let p = if n >= -126 {
        f32::from_bits(((n + 127) as u32) << 23)
    } else if n >= -149 {
        f32::from_bits(1u32 << (n + 149))
    } else {
        0.0
    };
    y * p
}

/// Two standard normals from two words (module docs).
#[inline(always)]
pub(crate) fn box_muller(w0: u32, w1: u32) -> (f32, f32) {
    let u = (w0 as f32) * TWO_M32 + TWO_M33;
    let r = (ln(u) * -2.0).sqrt();
    let f = ((w1 & 0x3FFF_FFFF) as f32) * TWO_M30;
    let a = (f - 0.5) * std::f32::consts::FRAC_PI_2;
    let (s, c) = sincos(a);
    // A quarter turn q: (sin, cos) of a + qπ/2 = (s, c), (c, −s), (−s, −c), (−c, s), as a swap
    // and sign flips (branch-free, as above).
    let q = w1 >> 30;
    let (s, c) = if q & 1 == 1 { (c, s) } else { (s, c) };
    let s = f32::from_bits(s.to_bits() ^ ((q >> 1) << 31));
    let c = f32::from_bits(c.to_bits() ^ (((q ^ (q >> 1)) & 1) << 31));
    (r * c, r * s)
}

/// Blocks computed together by the batched fill (vectorised across blocks).
const LANES: usize = 8;

/// [`Draws::fill`]'s body: blocks `LANES` at a time as arrays, so that the compiler keeps each
/// step in vector registers (the same operations per value as [`Draws::normals4`]).
#[inline(always)]
fn fill_body(dr: &Draws, purpose: u32, a: u32, first: u32, out: &mut [f32]) {
    let blocks = out.len().div_ceil(4);
    let mut b = 0usize;
    while b + LANES <= blocks {
        let mut c0 = [a; LANES];
        let mut c1 = [0u32; LANES];
        let mut c2 = [dr.layer; LANES];
        let mut c3 = [purpose; LANES];
        for (l, v) in c1.iter_mut().enumerate() {
            *v = first + (b + l) as u32;
        }
        let (mut k0, mut k1) = (dr.key[0], dr.key[1]);
        for r in 0..10 {
            if r > 0 {
                k0 = k0.wrapping_add(W0);
                k1 = k1.wrapping_add(W1);
            }
            for l in 0..LANES {
                let p0 = M0 * c0[l] as u64;
                let p1 = M1 * c2[l] as u64;
                let n0 = ((p1 >> 32) as u32) ^ c1[l] ^ k0;
                let n2 = ((p0 >> 32) as u32) ^ c3[l] ^ k1;
                c1[l] = p1 as u32;
                c3[l] = p0 as u32;
                c0[l] = n0;
                c2[l] = n2;
            }
        }
        // Box–Muller on the 2·LANES pairs as arrays (structure of arrays, so that each step is
        // a vector operation): pair l is (c0, c1) of block l, pair LANES + l its (c2, c3).
        let (mut w0, mut w1) = ([0u32; 2 * LANES], [0u32; 2 * LANES]);
        w0[..LANES].copy_from_slice(&c0);
        w0[LANES..].copy_from_slice(&c2);
        w1[..LANES].copy_from_slice(&c1);
        w1[LANES..].copy_from_slice(&c3);
        let (mut zc, mut zs) = ([0.0f32; 2 * LANES], [0.0f32; 2 * LANES]);
        for k in 0..2 * LANES {
            let (x, y) = box_muller(w0[k], w1[k]);
            zc[k] = x;
            zs[k] = y;
        }
        let start = 4 * b;
        if start + 4 * LANES <= out.len() {
            let o = &mut out[start..start + 4 * LANES];
            for l in 0..LANES {
                o[4 * l] = zc[l];
                o[4 * l + 1] = zs[l];
                o[4 * l + 2] = zc[LANES + l];
                o[4 * l + 3] = zs[LANES + l];
            }
        } else {
            let mut z = [0.0f32; 4 * LANES];
            for l in 0..LANES {
                z[4 * l] = zc[l];
                z[4 * l + 1] = zs[l];
                z[4 * l + 2] = zc[LANES + l];
                z[4 * l + 3] = zs[LANES + l];
            }
            let end = out.len();
            out[start..end].copy_from_slice(&z[..end - start]);
        }
        b += LANES;
    }
    while b < blocks {
        let z = dr.normals4(purpose, a, first + b as u32);
        let start = 4 * b;
        let end = (start + 4).min(out.len());
        out[start..end].copy_from_slice(&z[..end - start]);
        b += 1;
    }
}

/// [`fill_body`] compiled for the CPU's widest vector unit (the formats' SIMD level, so
/// `cap_simd_level` caps it too); the same values at every level.
fn fill_dispatch(dr: &Draws, purpose: u32, a: u32, first: u32, out: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    {
        use crate::formats::{simd_level, SimdLevel};
        #[target_feature(enable = "avx512f,avx512bw,avx512dq,avx512vl,avx2")]
        unsafe fn v512(dr: &Draws, purpose: u32, a: u32, first: u32, out: &mut [f32]) {
            fill_body(dr, purpose, a, first, out)
        }
        #[target_feature(enable = "avx2")]
        unsafe fn v256(dr: &Draws, purpose: u32, a: u32, first: u32, out: &mut [f32]) {
            fill_body(dr, purpose, a, first, out)
        }
        match simd_level() {
            // SAFETY: simd_level returns a level only when the CPU has its features.
            SimdLevel::Avx512 => return unsafe { v512(dr, purpose, a, first, out) },
            // SAFETY: as above.
            SimdLevel::Avx2 => return unsafe { v256(dr, purpose, a, first, out) },
            SimdLevel::Baseline => {}
        }
    }
    fill_body(dr, purpose, a, first, out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Random123's known-answer vectors (`kat_vectors`): counter, key, output.
    #[test]
    fn philox_matches_random123_known_answers() {
        let kat: [([u32; 4], [u32; 2], [u32; 4]); 3] = [
            ([0; 4], [0; 2], [0x6627_e8d5, 0xe169_c58d, 0xbc57_ac4c, 0x9b00_dbd8]),
            ([u32::MAX; 4], [u32::MAX; 2], [0x408f_276d, 0x41c8_3b0e, 0xa20b_c7c6, 0x6d54_51fd]),
            (
                [0x243f_6a88, 0x85a3_08d3, 0x1319_8a2e, 0x0370_7344],
                [0xa409_3822, 0x299f_31d0],
                [0xd16c_fe09, 0x94fd_cceb, 0x5001_e420, 0x2412_6ea1],
            ),
        ];
        for (ctr, key, want) in kat {
            assert_eq!(philox4x32_10(ctr, key), want);
        }
    }

    /// The batched fill gives the values of one block at a time, at every SIMD level, for any
    /// length and starting block.
    #[test]
    fn batched_fill_equals_block_by_block() {
        let dr = Draws::new(3, 17, 2);
        for len in [1usize, 4, 7, 30, 32, 33, 62, 128, 131] {
            let mut want = vec![0.0f32; len];
            for (b, chunk) in want.chunks_mut(4).enumerate() {
                let z = dr.normals4(KEY, 9, 5 + b as u32);
                chunk.copy_from_slice(&z[..chunk.len()]);
            }
            let mut got = vec![0.0f32; len];
            fill_body(&dr, KEY, 9, 5, &mut got);
            assert_eq!(
                got.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                want.iter().map(|v| v.to_bits()).collect::<Vec<_>>()
            );
            dr.fill(KEY, 9, 5, &mut got);
            assert_eq!(
                got.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                want.iter().map(|v| v.to_bits()).collect::<Vec<_>>()
            );
        }
    }

    /// ln, sin and cos against f64 references: within a few f32 ulps.
    #[test]
    fn polynomials_are_accurate() {
        for k in 1..20_000u32 {
            let x = k as f32 / 20_000.0;
            let want = (x as f64).ln();
            assert!((ln(x) as f64 - want).abs() <= 3e-7 * want.abs().max(1e-3), "ln {x}");
            let a = (x - 0.5) * std::f32::consts::FRAC_PI_2;
            let (s, c) = sincos(a);
            assert!((s as f64 - (a as f64).sin()).abs() < 2e-7 && (c as f64 - (a as f64).cos()).abs() < 2e-7, "{a}");
        }
        assert_eq!(ln(1.0), 0.0);
        for k in 0..20_000u32 {
            let x = -(k as f32) / 200.0;
            let want = (x as f64).exp();
            assert!((exp_neg(x) as f64 - want).abs() <= 4e-7 * want + 1e-44, "exp {x}: {} vs {want}", exp_neg(x));
        }
        assert_eq!(exp_neg(0.0), 1.0);
        assert_eq!(exp_neg(-200.0), 0.0);
        assert!((ln(2.328_306_4e-10) as f64 - (2.328_306_4e-10f64).ln()).abs() < 1e-5);
    }

    /// The normals' law: mean 0, variance 1, the tail masses of a standard normal, no value
    /// beyond the documented bound.
    #[test]
    fn normals_are_standard() {
        let dr = Draws::new(11, 0, 0);
        let n = 1 << 20;
        let mut v = vec![0.0f32; n];
        dr.fill(KEY, 0, 0, &mut v);
        let mean = v.iter().map(|&x| x as f64).sum::<f64>() / n as f64;
        let var = v.iter().map(|&x| (x as f64 - mean).powi(2)).sum::<f64>() / n as f64;
        let kurt = v.iter().map(|&x| (x as f64).powi(4)).sum::<f64>() / n as f64;
        assert!(mean.abs() < 5.0 / (n as f64).sqrt(), "mean {mean}");
        assert!((var - 1.0).abs() < 0.01, "var {var}");
        assert!((kurt - 3.0).abs() < 0.05, "kurtosis {kurt}");
        for (t, p) in [(1.0, 0.158_655_25), (2.0, 0.022_750_13), (3.0, 0.001_349_9)] {
            let share = v.iter().filter(|&&x| x > t).count() as f64 / n as f64;
            let se = (p * (1.0 - p) / n as f64).sqrt();
            assert!((share - p).abs() < 5.0 * se, "P(z > {t}) = {share} vs {p}");
        }
        assert!(v.iter().all(|x| x.abs() < 6.8));
    }

    /// Different trials, layers, purposes and rows are different streams.
    #[test]
    fn streams_are_distinct() {
        let a = Draws::new(1, 0, 0).normals4(KEY, 0, 0);
        for other in [
            Draws::new(1, 1, 0).normals4(KEY, 0, 0),
            Draws::new(2, 0, 0).normals4(KEY, 0, 0),
            Draws::new(1, 0, 1).normals4(KEY, 0, 0),
            Draws::new(1, 0, 0).normals4(TOKEN, 0, 0),
            Draws::new(1, 0, 0).normals4(KEY, 1, 0),
            Draws::new(1, 0, 0).normals4(KEY, 0, 1),
        ] {
            assert_ne!(a, other);
        }
    }
}
