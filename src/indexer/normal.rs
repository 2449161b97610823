//! A fast exact standard-normal sampler for f32: Marsaglia and Tsang's ziggurat (J. Stat.
//! Softw. 5(8), 2000) with 256 layers, two samples per 64 random bits.
//!
//! Each sample uses 32 independent bits: 8 choose the layer, 1 the sign, 23 the uniform position
//! within the layer (the f32 mantissa's resolution). In the ~98.5 % common case the sample is
//! `m · w[layer]` after one integer comparison; otherwise the wedge or the tail (|x| > r) test
//! runs in f64 on fresh 64-bit words and, if rejected, a fresh 32-bit word restarts the draw. The
//! tables are built once in f64 with the portable `libm` functions; the common case is integer
//! operations and one correctly rounded f32 product, so its AVX-512 version (16 samples per
//! step, table gathers) gives the portable version's bits (tested), and the stream is the same
//! on every CPU.
//!
//! Order of the random stream: [`fill`] works in chunks of 256 outputs; for each, one 64-bit
//! word per pair of outputs (low half to the even slot, high half to the odd one; an odd last
//! output uses the low half of a final word), then the extra words of the chunk's slow-path
//! samples, in output order.

use rand::RngCore;
use std::sync::OnceLock;

/// Layers.
const LAYERS: usize = 256;
/// Right edge of the last layer (the tail starts there; Marsaglia and Tsang's value for 256).
const R: f64 = 3.654_152_885_361_009;
/// Area of every layer.
const V: f64 = 4.928_673_233_99e-3;
/// 2^23: the uniform's resolution.
const M: f64 = 8_388_608.0;
/// Outputs per pass of [`fill`].
const CHUNK: usize = 256;

struct Tables {
    /// Accept `m < k[i]` at once (k < 2^23).
    k: [u32; LAYERS],
    /// x = m · w[i].
    w: [f32; LAYERS],
    /// The density at the layer edges: f[i] = exp(−x_i²/2), f[0] = 1 (used by the wedge).
    f: [f64; LAYERS],
}

fn density(x: f64) -> f64 {
    libm::exp(-0.5 * x * x)
}

fn tables() -> &'static Tables {
    static T: OnceLock<Tables> = OnceLock::new();
    T.get_or_init(|| {
        let mut x = [0.0f64; LAYERS];
        x[LAYERS - 1] = R;
        for i in (1..LAYERS - 1).rev() {
            x[i] = libm::sqrt(-2.0 * libm::log(V / x[i + 1] + density(x[i + 1])));
        }
        let q = V / density(R);
        let mut t = Tables { k: [0; LAYERS], w: [0.0; LAYERS], f: [0.0; LAYERS] };
        t.k[0] = (R / q * M).floor() as u32;
        t.w[0] = (q / M) as f32;
        t.f[0] = 1.0;
        for i in 1..LAYERS {
            t.w[i] = (x[i] / M) as f32;
            t.f[i] = density(x[i]);
            t.k[i] = if i == 1 { 0 } else { (x[i - 1] / x[i] * M).floor() as u32 };
        }
        t
    })
}

/// A uniform in (0, 1] from 53 random bits.
#[inline]
fn unit<G: RngCore>(rng: &mut G) -> f64 {
    ((rng.next_u64() >> 11) as f64 + 1.0) * (1.0 / 9_007_199_254_740_992.0)
}

/// The common case of 32 bits: the sample, and whether it stands.
#[inline(always)]
fn fast(t: &Tables, bits: u32) -> (f32, bool) {
    let i = (bits & 255) as usize;
    let m = bits >> 9;
    // m < 2^23: exact as an i32 and an f32; the sign bit set without a branch.
    let x = (m as i32) as f32 * t.w[i];
    (f32::from_bits(x.to_bits() ^ ((bits & 256) << 23)), m < t.k[i])
}

#[cold]
fn slow<G: RngCore>(t: &Tables, mut bits: u32, rng: &mut G) -> f32 {
    loop {
        let i = (bits & 255) as usize;
        let (x, ok) = fast(t, bits);
        if ok {
            return x;
        }
        if i == 0 {
            // The tail beyond R (Marsaglia 1964).
            let neg = bits & 256 != 0;
            loop {
                let x = -libm::log(unit(rng)) / R;
                let y = -libm::log(unit(rng));
                if y + y >= x * x {
                    let v = (R + x) as f32;
                    return if neg { -v } else { v };
                }
            }
        }
        let y = t.f[i] + unit(rng) * (t.f[i - 1] - t.f[i]);
        if y < density(x.abs() as f64) {
            return x;
        }
        bits = rng.next_u64() as u32;
    }
}

/// Fills `out` with iid standard normals.
pub(crate) fn fill<G: RngCore>(rng: &mut G, out: &mut [f32]) {
    let t = tables();
    let mut words = [0u32; CHUNK];
    let mut ok = [0u16; CHUNK / 16];
    let mut tail = [0.0f32; 16];
    for chunk in out.chunks_mut(CHUNK) {
        let n = chunk.len();
        for pair in words[..n.div_ceil(2) * 2].chunks_exact_mut(2) {
            let b = rng.next_u64();
            pair[0] = b as u32;
            pair[1] = (b >> 32) as u32;
        }
        let groups = n / 16;
        common(t, &words[..groups * 16], &mut chunk[..groups * 16], &mut ok[..groups]);
        if n % 16 != 0 {
            // The last partial group through a buffer (its unused words are never read out).
            common(t, &words[groups * 16..groups * 16 + 16], &mut tail, &mut ok[groups..groups + 1]);
            chunk[groups * 16..].copy_from_slice(&tail[..n % 16]);
            ok[groups] |= !0u16 << (n % 16);
        }
        for (g, &mask) in ok[..n.div_ceil(16)].iter().enumerate() {
            let mut bad = !mask;
            while bad != 0 {
                let j = g * 16 + bad.trailing_zeros() as usize;
                chunk[j] = slow(t, words[j], rng);
                bad &= bad - 1;
            }
        }
    }
}

/// The common case of groups of 16 words: samples into `out`, acceptance bits into `ok`.
fn common(t: &Tables, words: &[u32], out: &mut [f32], ok: &mut [u16]) {
    debug_assert!(words.len() == out.len() && words.len() == 16 * ok.len());
    #[cfg(target_arch = "x86_64")]
    {
        if std::arch::is_x86_feature_detected!("avx512f") {
            // SAFETY: the CPU has AVX-512 F (checked above); the slices hold 16 values per mask.
            unsafe { common_avx512(t, words, out, ok) };
            return;
        }
    }
    common_portable(t, words, out, ok)
}

fn common_portable(t: &Tables, words: &[u32], out: &mut [f32], ok: &mut [u16]) {
    for ((w, o), mask) in words.chunks_exact(16).zip(out.chunks_exact_mut(16)).zip(ok.iter_mut()) {
        let mut m = 0u16;
        for l in 0..16 {
            let (x, good) = fast(t, w[l]);
            o[l] = x;
            m |= (good as u16) << l;
        }
        *mask = m;
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn common_avx512(t: &Tables, words: &[u32], out: &mut [f32], ok: &mut [u16]) {
    use std::arch::x86_64::*;
    let low8 = _mm512_set1_epi32(255);
    let sign = _mm512_set1_epi32(256);
    let groups = ok.len().min(words.len() / 16).min(out.len() / 16);
    for (g, mask) in ok.iter_mut().enumerate().take(groups) {
        let bits = _mm512_loadu_si512(words.as_ptr().add(g * 16) as *const _);
        let idx = _mm512_and_si512(bits, low8);
        let m = _mm512_srli_epi32::<9>(bits);
        let w = _mm512_i32gather_ps::<4>(idx, t.w.as_ptr() as *const _);
        let k = _mm512_i32gather_epi32::<4>(idx, t.k.as_ptr() as *const _);
        let x = _mm512_mul_ps(_mm512_cvtepi32_ps(m), w);
        let s = _mm512_slli_epi32::<23>(_mm512_and_si512(bits, sign));
        let x = _mm512_castsi512_ps(_mm512_xor_si512(_mm512_castps_si512(x), s));
        _mm512_storeu_ps(out.as_mut_ptr().add(g * 16), x);
        *mask = _mm512_cmplt_epu32_mask(m, k);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    /// The layers tile the area: the top layer has area V and reaches the mode.
    #[test]
    fn tables_are_consistent() {
        let t = tables();
        let x1 = t.w[1] as f64 * M;
        assert!((x1 * (1.0 - t.f[1]) - V).abs() < 1e-6, "{}", x1 * (1.0 - t.f[1]));
        assert!(t.k.iter().skip(2).all(|&k| k > 0 && (k as f64) < M));
    }

    /// Moments and the Kolmogorov–Smirnov distance of 2M samples against Φ, and tail masses.
    #[test]
    fn samples_are_standard_normal() {
        let mut rng = rand_xoshiro::Xoshiro256PlusPlus::seed_from_u64(3);
        let n = 2_000_000;
        let mut xs = vec![0.0f32; n];
        for c in xs.chunks_mut(1000) {
            fill(&mut rng, c);
        }
        let mean = xs.iter().map(|&x| x as f64).sum::<f64>() / n as f64;
        let var = xs.iter().map(|&x| (x as f64 - mean).powi(2)).sum::<f64>() / n as f64;
        let kurt = xs.iter().map(|&x| (x as f64 - mean).powi(4)).sum::<f64>() / n as f64 / (var * var);
        assert!(mean.abs() < 5.0 * (1.0 / n as f64).sqrt(), "mean {mean}");
        assert!((var - 1.0).abs() < 5.0 * (2.0 / n as f64).sqrt(), "var {var}");
        assert!((kurt - 3.0).abs() < 5.0 * (96.0 / n as f64).sqrt(), "kurtosis {kurt}");
        let mut s: Vec<f64> = xs.iter().map(|&x| x as f64).collect();
        s.sort_by(|a, b| a.total_cmp(b));
        let phi = |x: f64| 0.5 * libm::erfc(-x / std::f64::consts::SQRT_2);
        let ks = s.iter().enumerate().map(|(i, &x)| (phi(x) - (i as f64 + 0.5) / n as f64).abs()).fold(0.0, f64::max);
        assert!(ks < 1.95 / (n as f64).sqrt(), "KS {ks}"); // p ≈ 0.001
        for cut in [1.0, 2.0, R, 4.5] {
            let tail = s.iter().filter(|x| x.abs() > cut).count() as f64 / n as f64;
            let want = 2.0 * (1.0 - phi(cut));
            assert!((tail - want).abs() < 5.0 * (want / n as f64).sqrt() + 1e-6, "P(|x| > {cut}) {tail} vs {want}");
        }
    }

    /// The AVX-512 common case gives the portable bits; a fixed seed gives a fixed stream
    /// (pinned: the same on every CPU).
    #[test]
    fn stream_is_portable_and_pinned() {
        let t = tables();
        let mut rng = rand_xoshiro::Xoshiro256PlusPlus::seed_from_u64(2);
        for _ in 0..200 {
            let mut words = [0u32; CHUNK];
            words.iter_mut().for_each(|w| *w = rng.next_u64() as u32);
            let (mut a, mut b) = ([0.0f32; CHUNK], [0.0f32; CHUNK]);
            let (mut oa, mut ob) = ([0u16; CHUNK / 16], [0u16; CHUNK / 16]);
            let words = &words[..];
            common(t, words, &mut a, &mut oa);
            common_portable(t, words, &mut b, &mut ob);
            assert!(a.iter().zip(&b).all(|(x, y)| x.to_bits() == y.to_bits()) && oa == ob);
        }
        let mut rng = rand_xoshiro::Xoshiro256PlusPlus::seed_from_u64(1);
        let mut xs = vec![0.0f32; 1001];
        fill(&mut rng, &mut xs);
        // Fills of any length draw the same stream as one fill when they end on chunk bounds.
        let mut again = rand_xoshiro::Xoshiro256PlusPlus::seed_from_u64(1);
        let mut ys = vec![0.0f32; 1001];
        let (a, b) = ys.split_at_mut(512);
        fill(&mut again, a);
        fill(&mut again, b);
        assert!(xs.iter().zip(&ys).all(|(x, y)| x.to_bits() == y.to_bits()));
        let h = xs.iter().fold(0u64, |h, x| h.rotate_left(5) ^ x.to_bits() as u64);
        assert_eq!(h, PINNED, "{h:#x}");
    }
    const PINNED: u64 = 0x0de2_468a_f3a3_a866;
}
