//! The orthonormal Hadamard rotation of DeepSeek's indexer (`rotate_activation`: a fast
//! Walsh–Hadamard transform scaled by d^-1/2), applied to queries and keys before quantization.

/// In-place fast Walsh–Hadamard transform of `x`, scaled by `1/sqrt(len)` so that it is
/// orthonormal (and its own inverse). `x.len()` must be a power of two.
///
/// The butterflies run in a fixed order (stride 1, 2, 4, …), so the result is deterministic.
pub(crate) fn fwht_orthonormal(x: &mut [f32]) {
    if let Ok(a) = <&mut [f32; 128]>::try_from(&mut *x) {
        return fwht128(a);
    }
    let n = x.len();
    assert!(n.is_power_of_two(), "Hadamard transform needs a power-of-two length, got {n}");
    let mut h = 1;
    if n >= 8 {
        // Stages h = 1, 2, 4 within each block of 8 at once: the same butterflies as the loop
        // below (so the same result, bit for bit), in registers.
        for blk in x.chunks_exact_mut(8) {
            let a: [f32; 8] = [blk[0], blk[1], blk[2], blk[3], blk[4], blk[5], blk[6], blk[7]];
            let b = [
                a[0] + a[1],
                a[0] - a[1],
                a[2] + a[3],
                a[2] - a[3],
                a[4] + a[5],
                a[4] - a[5],
                a[6] + a[7],
                a[6] - a[7],
            ];
            let c = [
                b[0] + b[2],
                b[1] + b[3],
                b[0] - b[2],
                b[1] - b[3],
                b[4] + b[6],
                b[5] + b[7],
                b[4] - b[6],
                b[5] - b[7],
            ];
            let out = [
                c[0] + c[4],
                c[1] + c[5],
                c[2] + c[6],
                c[3] + c[7],
                c[0] - c[4],
                c[1] - c[5],
                c[2] - c[6],
                c[3] - c[7],
            ];
            blk.copy_from_slice(&out);
        }
        h = 8;
    }
    while h < n {
        for block in x.chunks_exact_mut(2 * h) {
            let (a, b) = block.split_at_mut(h);
            for (p, q) in a.iter_mut().zip(b.iter_mut()) {
                let (u, v) = (*p, *q);
                *p = u + v;
                *q = u - v;
            }
        }
        h *= 2;
    }
    let scale = 1.0 / (n as f32).sqrt();
    for v in x.iter_mut() {
        *v *= scale;
    }
}

/// d = 128 (both DeepSeek indexers) with constant bounds, which the compiler unrolls and
/// vectorises: the same butterflies in the same stage order as the general loop, so the same
/// bits (tested).
#[inline]
fn fwht128(x: &mut [f32; 128]) {
    for blk in x.chunks_exact_mut(8) {
        let a: [f32; 8] = [blk[0], blk[1], blk[2], blk[3], blk[4], blk[5], blk[6], blk[7]];
        let b =
            [a[0] + a[1], a[0] - a[1], a[2] + a[3], a[2] - a[3], a[4] + a[5], a[4] - a[5], a[6] + a[7], a[6] - a[7]];
        let c =
            [b[0] + b[2], b[1] + b[3], b[0] - b[2], b[1] - b[3], b[4] + b[6], b[5] + b[7], b[4] - b[6], b[5] - b[7]];
        let out =
            [c[0] + c[4], c[1] + c[5], c[2] + c[6], c[3] + c[7], c[0] - c[4], c[1] - c[5], c[2] - c[6], c[3] - c[7]];
        blk.copy_from_slice(&out);
    }
    stage::<8>(x);
    stage::<16>(x);
    stage::<32>(x);
    stage::<64>(x);
    let scale = 1.0 / 128f32.sqrt();
    for v in x.iter_mut() {
        *v *= scale;
    }
}

#[inline(always)]
fn stage<const H: usize>(x: &mut [f32; 128]) {
    let mut base = 0;
    while base < 128 {
        for j in 0..H {
            let (u, v) = (x[base + j], x[base + H + j]);
            x[base + j] = u + v;
            x[base + H + j] = u - v;
        }
        base += 2 * H;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The transform of each unit vector is a column of H/sqrt(n): columns are orthonormal and
    /// applying the transform twice gives the identity.
    /// The reference: every stage by the plain loop.
    fn reference(x: &mut [f32]) {
        let n = x.len();
        let mut h = 1;
        while h < n {
            for block in x.chunks_exact_mut(2 * h) {
                let (a, b) = block.split_at_mut(h);
                for (p, q) in a.iter_mut().zip(b.iter_mut()) {
                    let (u, v) = (*p, *q);
                    *p = u + v;
                    *q = u - v;
                }
            }
            h *= 2;
        }
        let scale = 1.0 / (n as f32).sqrt();
        x.iter_mut().for_each(|v| *v *= scale);
    }

    #[test]
    fn fast_stages_are_bit_identical_to_the_plain_loop() {
        for n in [1usize, 2, 4, 8, 16, 64, 128, 256] {
            let x: Vec<f32> = (0..n).map(|i| ((i as f32 * 0.731).sin() * 7.0).exp2()).collect();
            let (mut a, mut b) = (x.clone(), x);
            fwht_orthonormal(&mut a);
            reference(&mut b);
            assert!(a.iter().zip(&b).all(|(p, q)| p.to_bits() == q.to_bits()), "n = {n}");
        }
    }

    #[test]
    fn orthonormal_and_involutive() {
        for n in [1usize, 2, 4, 8, 64, 128] {
            let cols: Vec<Vec<f32>> = (0..n)
                .map(|i| {
                    let mut e = vec![0.0f32; n];
                    e[i] = 1.0;
                    fwht_orthonormal(&mut e);
                    e
                })
                .collect();
            for i in 0..n {
                for j in 0..n {
                    let dot: f64 = cols[i].iter().zip(&cols[j]).map(|(a, b)| *a as f64 * *b as f64).sum();
                    let want = if i == j { 1.0 } else { 0.0 };
                    assert!((dot - want).abs() < 1e-6, "n={n} <{i},{j}> = {dot}");
                }
                // Entries are ±1/sqrt(n): a Hadamard matrix.
                for v in &cols[i] {
                    assert!((v.abs() - 1.0 / (n as f32).sqrt()).abs() < 1e-6);
                }
            }
            let x: Vec<f32> = (0..n).map(|i| (i as f32 * 0.37).sin() * 3.0).collect();
            let mut y = x.clone();
            fwht_orthonormal(&mut y);
            let norm_x: f32 = x.iter().map(|v| v * v).sum();
            let norm_y: f32 = y.iter().map(|v| v * v).sum();
            assert!((norm_x - norm_y).abs() <= 1e-4 * norm_x.max(1.0));
            fwht_orthonormal(&mut y);
            for (a, b) in x.iter().zip(&y) {
                assert!((a - b).abs() < 1e-5);
            }
        }
    }
}
