//! The indexer's scoring kernel: for every key k, I(q, k) = Σ_h w_h · ReLU(q_h · k).
//!
//! Layout: the queries transposed, `qt[j * hp + h]` = q_h\[j\] for j < d and h < hp, with the
//! heads padded with zero queries and zero weights to a multiple of `GROUP` (a padded head
//! adds exactly +0 to the score). Keys are rows of d values.
//!
//! Arithmetic, identical in every version: per group of 64 heads, acc_h = fma(q_h\[j\], k\[j\],
//! acc_h) for j = 0, 1, …, d−1 in order; then t_h = w_h · max(acc_h, 0); then a fixed reduction
//! tree (lanes l, l+16, l+32, l+48 as (t_l + t_{l+16}) + (t_{l+32} + t_{l+48}), then halves
//! 16 → 8 → 4 → 2 → 1); groups are summed in order. The AVX-512 version (6 keys × 64 heads in 24
//! registers, one FMA per head lane) and the portable version (`f32::mul_add`) therefore give
//! bit-identical scores, so results do not depend on the CPU's instruction set.

/// Heads per register group (4 × 16 lanes).
pub(crate) const GROUP: usize = 64;

/// Pads a head count to a multiple of [`GROUP`].
pub(crate) fn padded_heads(heads: usize) -> usize {
    heads.div_ceil(GROUP) * GROUP
}

/// Which version of the kernel [`score`] runs on this CPU.
pub fn kernel_name() -> &'static str {
    #[cfg(target_arch = "x86_64")]
    {
        if avx512() {
            return "avx512";
        }
        if fma() {
            return "avx2+fma";
        }
    }
    "portable"
}

#[cfg(target_arch = "x86_64")]
fn avx512() -> bool {
    std::arch::is_x86_feature_detected!("avx512f") && std::arch::is_x86_feature_detected!("avx512dq")
}

#[cfg(target_arch = "x86_64")]
fn fma() -> bool {
    std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma")
}

/// Scores every key: `out[i] = Σ_h w[h] · max(0, Σ_j qt[j·hp + h] · keys[i·d + j])`.
///
/// `hp` must be a multiple of `GROUP`, `qt.len() == d·hp`, `w.len() == hp`,
/// `keys.len() == out.len()·d`.
pub fn score(qt: &[f32], w: &[f32], hp: usize, d: usize, keys: &[f32], out: &mut [f32]) {
    assert!(hp.is_multiple_of(GROUP) && qt.len() == d * hp && w.len() == hp && keys.len() == out.len() * d);
    #[cfg(target_arch = "x86_64")]
    {
        if avx512() {
            // SAFETY: the CPU has AVX-512 F and DQ (checked above); slices were checked.
            unsafe { avx512_impl::score(qt, w, hp, d, keys, out) };
            return;
        }
        if fma() {
            // SAFETY: the CPU has AVX2 and FMA.
            unsafe { score_fma(qt, w, hp, d, keys, out) };
            return;
        }
    }
    score_portable(qt, w, hp, d, keys, out)
}

/// The portable version (also the reference the fast versions are tested against).
pub(crate) fn score_portable(qt: &[f32], w: &[f32], hp: usize, d: usize, keys: &[f32], out: &mut [f32]) {
    for (key, o) in keys.chunks_exact(d).zip(out.iter_mut()) {
        *o = score_one(qt, w, hp, d, key);
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn score_fma(qt: &[f32], w: &[f32], hp: usize, d: usize, keys: &[f32], out: &mut [f32]) {
    for (key, o) in keys.chunks_exact(d).zip(out.iter_mut()) {
        *o = score_one(qt, w, hp, d, key);
    }
}

#[inline(always)]
fn score_one(qt: &[f32], w: &[f32], hp: usize, d: usize, key: &[f32]) -> f32 {
    let mut total = 0.0f32;
    for g in 0..hp / GROUP {
        let mut acc = [0.0f32; GROUP];
        for (j, &kv) in key.iter().enumerate().take(d) {
            let row = &qt[j * hp + g * GROUP..j * hp + g * GROUP + GROUP];
            for h in 0..GROUP {
                acc[h] = row[h].mul_add(kv, acc[h]);
            }
        }
        total += reduce_group(&acc, &w[g * GROUP..g * GROUP + GROUP]);
    }
    total
}

#[inline(always)]
fn reduce_group(acc: &[f32; GROUP], w: &[f32]) -> f32 {
    let mut t = [0.0f32; GROUP];
    for h in 0..GROUP {
        t[h] = w[h] * if acc[h] > 0.0 { acc[h] } else { 0.0 };
    }
    let mut s = [0.0f32; 16];
    for l in 0..16 {
        s[l] = (t[l] + t[16 + l]) + (t[32 + l] + t[48 + l]);
    }
    let mut n = 8;
    while n >= 1 {
        for l in 0..n {
            s[l] += s[l + n];
        }
        n /= 2;
    }
    s[0]
}

#[cfg(target_arch = "x86_64")]
mod avx512_impl {
    use super::GROUP;
    use std::arch::x86_64::*;

    /// Keys per register tile.
    const R: usize = 6;

    #[target_feature(enable = "avx512f,avx512dq")]
    pub(crate) unsafe fn score(qt: &[f32], w: &[f32], hp: usize, d: usize, keys: &[f32], out: &mut [f32]) {
        let n = out.len();
        let mut i = 0;
        while i + R <= n {
            tile::<R>(qt, w, hp, d, &keys[i * d..(i + R) * d], &mut out[i..i + R]);
            i += R;
        }
        while i < n {
            tile::<1>(qt, w, hp, d, &keys[i * d..(i + 1) * d], &mut out[i..i + 1]);
            i += 1;
        }
    }

    #[inline]
    #[allow(clippy::needless_range_loop)]
    #[target_feature(enable = "avx512f,avx512dq")]
    unsafe fn tile<const T: usize>(qt: &[f32], w: &[f32], hp: usize, d: usize, keys: &[f32], out: &mut [f32]) {
        let mut totals = [0.0f32; T];
        let qp = qt.as_ptr();
        let kp = keys.as_ptr();
        for g in 0..hp / GROUP {
            let mut acc = [[_mm512_setzero_ps(); 4]; T];
            for j in 0..d {
                let row = qp.add(j * hp + g * GROUP);
                let q0 = _mm512_loadu_ps(row);
                let q1 = _mm512_loadu_ps(row.add(16));
                let q2 = _mm512_loadu_ps(row.add(32));
                let q3 = _mm512_loadu_ps(row.add(48));
                for r in 0..T {
                    let kb = _mm512_set1_ps(*kp.add(r * d + j));
                    acc[r][0] = _mm512_fmadd_ps(q0, kb, acc[r][0]);
                    acc[r][1] = _mm512_fmadd_ps(q1, kb, acc[r][1]);
                    acc[r][2] = _mm512_fmadd_ps(q2, kb, acc[r][2]);
                    acc[r][3] = _mm512_fmadd_ps(q3, kb, acc[r][3]);
                }
            }
            let wp = w.as_ptr().add(g * GROUP);
            let zero = _mm512_setzero_ps();
            let w0 = _mm512_loadu_ps(wp);
            let w1 = _mm512_loadu_ps(wp.add(16));
            let w2 = _mm512_loadu_ps(wp.add(32));
            let w3 = _mm512_loadu_ps(wp.add(48));
            for r in 0..T {
                let t0 = _mm512_mul_ps(w0, _mm512_max_ps(acc[r][0], zero));
                let t1 = _mm512_mul_ps(w1, _mm512_max_ps(acc[r][1], zero));
                let t2 = _mm512_mul_ps(w2, _mm512_max_ps(acc[r][2], zero));
                let t3 = _mm512_mul_ps(w3, _mm512_max_ps(acc[r][3], zero));
                let s = _mm512_add_ps(_mm512_add_ps(t0, t1), _mm512_add_ps(t2, t3));
                // 16 → 8: lanes l and l + 8.
                let lo = _mm512_castps512_ps256(s);
                let hi = _mm512_extractf32x8_ps::<1>(s);
                let s8 = _mm256_add_ps(lo, hi);
                // 8 → 4.
                let s4 = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps::<1>(s8));
                // 4 → 2: lanes l and l + 2.
                let s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
                // 2 → 1.
                let s1 = _mm_add_ss(s2, _mm_shuffle_ps::<0b01>(s2, s2));
                totals[r] += _mm_cvtss_f32(s1);
            }
        }
        out[..T].copy_from_slice(&totals);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn data(hp: usize, d: usize, n: usize) -> (Vec<f32>, Vec<f32>, Vec<f32>) {
        let mut state = 0x1234_5678_9abc_def0u64;
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state >> 40) as f32 / (1u64 << 24) as f32 - 0.5
        };
        let qt: Vec<f32> = (0..d * hp).map(|_| next()).collect();
        let w: Vec<f32> = (0..hp).map(|_| next().abs() + 0.1).collect();
        let keys: Vec<f32> = (0..n * d).map(|_| next() * 3.0).collect();
        (qt, w, keys)
    }

    #[test]
    fn fast_versions_are_bit_identical_to_the_portable_one() {
        for (hp, d, n) in [(64, 128, 37), (128, 64, 13), (64, 1, 7), (192, 32, 6)] {
            let (qt, w, keys) = data(hp, d, n);
            let mut a = vec![0.0; n];
            let mut b = vec![0.0; n];
            score(&qt, &w, hp, d, &keys, &mut a);
            score_portable(&qt, &w, hp, d, &keys, &mut b);
            for i in 0..n {
                assert_eq!(a[i].to_bits(), b[i].to_bits(), "hp={hp} d={d} key {i}: {} vs {}", a[i], b[i]);
            }
            // And close to a plain f64 evaluation.
            for i in 0..n {
                let mut want = 0.0f64;
                for h in 0..hp {
                    let dot: f64 = (0..d).map(|j| qt[j * hp + h] as f64 * keys[i * d + j] as f64).sum();
                    want += w[h] as f64 * dot.max(0.0);
                }
                assert!((a[i] as f64 - want).abs() <= 1e-4 * want.abs().max(1.0), "{} vs {want}", a[i]);
            }
        }
    }
}
