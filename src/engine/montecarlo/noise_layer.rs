//! One layer's record of a noise replay: scores as lines in σ, their crossings and windows.
//!
//! Pure arithmetic on (a, z) pairs, with no plan or generator: where the needle's rank within
//! k_eff changes along σ ([`noise_layer_record`]), where rounding could make a run disagree
//! (kept clusters of windows), and the answer at one σ from a record ([`noise_layer_part`]).

/// A layer record's first value when its trial must be run again at every σ.
pub(super) const RERUN: f64 = 2.0;

/// [`noise_layer_record`]'s buffers: the crossings (point, window half-width, change of the
/// count) and the clusters of their windows.
#[derive(Default)]
pub(super) struct CrossingScratch {
    crossings: Vec<(f64, f32, i8)>,
    clusters: Vec<WindowCluster>,
}

/// A stretch [lo, hi] of σ where the windows of `size` crossings overlap (a connected part of
/// their union), and the least and greatest count of lines above the envelope by crossings
/// within it (`cmin`, `cmax`).
#[derive(Debug, Clone, Copy)]
struct WindowCluster {
    lo: f64,
    hi: f64,
    size: i64,
    cmin: i64,
    cmax: i64,
}

/// Appends one layer's record of a noise replay to `out`: for each `below` of `belows` in turn,
/// whether at most `below` of the distractor lines `lines` (a + σ·z) lie strictly above the
/// envelope of the needle's lines `needle` as σ → 0⁺ (1 or 0), the σ where that changes (count,
/// then the points), and the stretches of σ where a run may disagree with that answer (count,
/// then each stretch's ends); or just [`RERUN`] (for every `below`: no crossing depends on it).
/// The crossings are computed and sorted once for all of `belows`.
///
/// Rounding: a run's comparison of a + σ·z (each rounded twice) with a needle line is decided
/// by the exact one when they differ by more than E = 2.0001u(|a| + |a'| + σ(|z| + |z'|)) (u the
/// unit roundoff); the exact difference is |Δz|·|σ − r| at crossing r, and the rounded crossing
/// is within 3.01u|r| of r; so outside the window
/// w_r = 32u(|a| + |a'| + 2|r|(|z| + |z'|))/|Δz| + 16u|r| (4× the bound) of the rounded
/// crossing, the run agrees with it, provided
/// |Δz| ≥ 1e-10(|z| + |z'|) (else [`RERUN`]). A σ in no window is thus answered by the count
/// by crossings exactly. The windows' union splits into clusters (connected parts); in a cluster
/// of `size` windows, at most `size` contain σ, so a run's count differs from the count by
/// crossings by at most `size`, and that count lies between the least and greatest count by
/// crossings within the cluster (its crossings are contiguous in σ order). A cluster whose range
/// so widened still lies wholly within the boundary (≤ `below`) or wholly beyond it cannot
/// change the answer; the others are kept, and a σ in one of them is run again. (Each window is
/// a crossing's own: one nearly parallel line far along σ widens only its own cluster.)
pub(super) fn noise_layer_record(
    needle: &[(f64, f64)],
    lines: &[(f64, f64)],
    belows: &[i64],
    scratch: &mut CrossingScratch,
    out: &mut Vec<f64>,
) {
    const U: f64 = f64::EPSILON / 2.0;
    let CrossingScratch { crossings, clusters } = scratch;
    crossings.clear();
    let mut count0: i64 = 0;
    for &(a, z) in lines {
        // Above every needle line for σ in (lo, hi), lo and hi among the crossings; `from`/`to`
        // the index in `crossings` of the crossing that set each.
        let (mut lo, mut hi) = (0.0f64, f64::INFINITY);
        let (mut from, mut to) = (None, None);
        let first = crossings.len();
        for &(ae, ze) in needle {
            let (da, dz) = (a - ae, z - ze);
            let scale = z.abs() + ze.abs();
            if !(dz.abs() >= 1e-10 * scale) || dz == 0.0 {
                out.push(RERUN);
                return;
            }
            let r = -da / dz;
            let wr = 32.0 * U * (a.abs() + ae.abs() + 2.0 * r.abs() * scale) / dz.abs() + 16.0 * U * r.abs() + 1e-300;
            if !(r.is_finite() && wr.is_finite()) {
                out.push(RERUN);
                return;
            }
            if r + wr > 0.0 {
                // The window kept in single precision, rounded up (a wider window is still one):
                // 16-byte crossings sort faster.
                let mut w = wr as f32;
                if (w as f64) < wr {
                    w = w.next_up();
                }
                crossings.push((r, w, 0));
            }
            if dz > 0.0 {
                // Above this needle line for σ > r.
                if r > lo {
                    lo = r;
                    from = (r + wr > 0.0).then(|| crossings.len() - 1);
                }
            } else if r < hi {
                // Above for σ < r.
                hi = r;
                to = (r + wr > 0.0).then(|| crossings.len() - 1);
            }
        }
        if lo < hi && hi > 0.0 {
            match from {
                Some(j) if lo > 0.0 => crossings[j].2 = 1,
                _ => count0 += 1,
            }
            if let Some(j) = to.filter(|_| hi.is_finite()) {
                crossings[j].2 = -1;
            }
        }
        debug_assert!(crossings[first..].iter().all(|c| c.0.is_finite()));
    }
    crossings.sort_unstable_by(|x, y| x.0.total_cmp(&y.0));
    // The clusters of windows, in σ order: each crossing's window joins the clusters it meets
    // (only the last ones can: those before are disjoint and in order). The counts by crossings
    // just before and after each crossing bound the count anywhere in its cluster (between
    // crossings at one point the intermediate counts are not attained: bounding by them too only
    // keeps more).
    clusters.clear();
    let mut c = count0;
    for &(x, w, change) in crossings.iter() {
        let w = w as f64;
        let before = c;
        c += change as i64;
        let mut k = WindowCluster { lo: x - w, hi: x + w, size: 1, cmin: before.min(c), cmax: before.max(c) };
        while let Some(last) = clusters.last().copied().filter(|l| l.hi >= k.lo) {
            clusters.pop();
            k = WindowCluster {
                lo: k.lo.min(last.lo),
                hi: k.hi.max(last.hi),
                size: k.size + last.size,
                cmin: k.cmin.min(last.cmin),
                cmax: k.cmax.max(last.cmax),
            };
        }
        clusters.push(k);
    }
    for &below in belows {
        let within = |c: i64| c <= below;
        out.push(within(count0) as u8 as f64);
        // The toggles.
        let at = out.len();
        out.push(0.0);
        let mut c = count0;
        let mut i = 0;
        while i < crossings.len() {
            let x = crossings[i].0;
            let before = c;
            while i < crossings.len() && crossings[i].0 == x {
                c += crossings[i].2 as i64;
                i += 1;
            }
            if within(before) != within(c) {
                out.push(x);
                out[at] += 1.0;
            }
        }
        // The clusters whose widened range of counts meets both sides of the boundary.
        let at = out.len();
        out.push(0.0);
        for k in clusters.iter().filter(|k| k.cmin - k.size <= below && k.cmax + k.size > below) {
            out.extend([k.lo, k.hi]);
            out[at] += 1.0;
        }
    }
}

/// One k_eff's part of a noise replay's layer record (see [`noise_layer_record`]), from `at`:
/// whether the needle ranks within k_eff at `sigma` (by the toggles) and whether `sigma` lies
/// in a kept cluster of windows (the trial must run again); and where the part ends.
pub(super) fn noise_layer_part(rec: &[f64], at: usize, sigma: f64) -> (bool, bool, usize) {
    let first = rec[at];
    let toggles = rec[at + 1] as usize;
    let crossed = rec[at + 2..at + 2 + toggles].iter().filter(|&&x| x < sigma).count();
    let at = at + 2 + toggles;
    let kept = rec[at] as usize;
    let again = rec[at + 1..at + 1 + 2 * kept].chunks_exact(2).any(|k| k[0] <= sigma && sigma <= k[1]);
    ((first == 1.0) != (crossed % 2 == 1), again, at + 1 + 2 * kept)
}

/// Where the part of a noise replay's layer record that follows `at` ends (see
/// [`noise_layer_part`]).
pub(super) fn skip_noise_layer_part(rec: &[f64], at: usize) -> usize {
    let at = at + 2 + rec[at + 1] as usize;
    at + 1 + 2 * rec[at] as usize
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::Rng;
    use rand_distr::StandardNormal;
    use rand_xoshiro::Xoshiro256PlusPlus;

    /// A layer record's parts, one per `below`: (first, toggles, kept clusters' ends).
    fn record_parts<'a>(out: &'a [f64], belows: &[i64]) -> Vec<(f64, &'a [f64], &'a [f64])> {
        let mut at = 0;
        let parts = belows
            .iter()
            .map(|_| {
                let end = skip_noise_layer_part(out, at);
                let toggles = out[at + 1] as usize;
                let kept = out[at + 2 + toggles] as usize;
                assert_eq!(end - at, 3 + toggles + 2 * kept);
                let part = (out[at], &out[at + 2..at + 2 + toggles], &out[at + 3 + toggles..end]);
                at = end;
                part
            })
            .collect();
        assert_eq!(at, out.len());
        parts
    }

    /// Checks a layer record against a run's own comparisons (rounded a + σ·z against the
    /// needle's rounded best) at each σ of `probes` and at the record's kept points and just
    /// beside them; returns how many σ it answered without running again.
    fn check_layer_record(
        needle: &[(f64, f64)],
        lines: &[(f64, f64)],
        belows: &[i64],
        out: &[f64],
        mut probes: Vec<f64>,
        what: &str,
    ) -> usize {
        let parts = record_parts(out, belows);
        for (_, toggles, kept) in &parts {
            probes.extend(toggles.iter().chain(kept.iter()).flat_map(|&x| {
                let up = f64::from_bits(x.to_bits() + 1);
                let down = if x > 0.0 { f64::from_bits(x.to_bits() - 1) } else { x };
                [x, up, down, x * (1.0 + 1e-12), x * (1.0 - 1e-12), x + 1e-9]
            }));
        }
        let mut decided = 0;
        let mut at = 0;
        for (&below, (_, toggles, kept)) in belows.iter().zip(&parts) {
            for &sigma in probes.iter().filter(|&&x| x > 0.0) {
                let y = needle.iter().fold(f64::NEG_INFINITY, |y, &(a, z)| y.max(a + sigma * z));
                let above = lines.iter().filter(|&&(a, z)| a + sigma * z > y).count() as i64;
                let (within, again, end) = noise_layer_part(out, at, sigma);
                assert_eq!(end, at + 3 + toggles.len() + kept.len());
                assert_eq!(again, kept.chunks_exact(2).any(|k| k[0] <= sigma && sigma <= k[1]));
                if again {
                    continue;
                }
                assert_eq!(within, above <= below, "{what}: below {below} σ {sigma:e}");
                decided += 1;
            }
            at += 3 + toggles.len() + kept.len();
        }
        decided
    }

    /// A layer record answers like counting lines above the envelope, at every σ outside its
    /// kept clusters: random lines, many needle entries, ties and crossings at σ ≤ 0 included.
    #[test]
    fn a_noise_layer_record_counts_lines_above_the_envelope() {
        use rand::SeedableRng;
        let mut rng = Xoshiro256PlusPlus::seed_from_u64(8);
        let n01 = |rng: &mut Xoshiro256PlusPlus| rng.sample::<f64, _>(StandardNormal);
        let (mut scratch, mut out) = (CrossingScratch::default(), Vec::new());
        let mut decided = 0;
        for case in 0..400 {
            let entries = 1 + case % 4;
            let needle: Vec<(f64, f64)> = (0..entries).map(|_| (1.0 + n01(&mut rng), n01(&mut rng))).collect();
            // Coarse a's: ties between lines.
            let lines: Vec<(f64, f64)> =
                (0..60).map(|_| ((n01(&mut rng) * 2.0).round() / 2.0, n01(&mut rng))).collect();
            // Several k in one record (as a replay keeps its k and the kernel maximum), each part
            // answering for its own k.
            let belows = [(case % 7) as i64 * 3 - 1, (case % 5) as i64 * 7 + 2];
            out.clear();
            noise_layer_record(&needle, &lines, &belows, &mut scratch, &mut out);
            assert_ne!(out[0], RERUN);
            let probes: Vec<f64> = (0..50).map(|_| (n01(&mut rng) * 3.0).exp()).collect();
            decided += check_layer_record(&needle, &lines, &belows, &out, probes, &format!("case {case}"));
        }
        assert!(decided > 30_000, "{decided}");
    }

    /// Where rounding decides: lines nearly parallel to a needle line (wide windows, some far
    /// along σ), lines through a needle line's own point (crossings at σ = 0), lines crossing it
    /// within a few ulps of each other, and equal needle entries. Every σ a record answers
    /// without running again is the run's answer, probed inside, at and beside every kept
    /// cluster and toggle; a cluster is kept only where its widened count range meets the
    /// boundary, so a wide window far from the boundary keeps nothing.
    #[test]
    fn a_noise_layer_record_is_exact_where_rounding_decides() {
        use rand::SeedableRng;
        let mut rng = Xoshiro256PlusPlus::seed_from_u64(81);
        let n01 = |rng: &mut Xoshiro256PlusPlus| rng.sample::<f64, _>(StandardNormal);
        let (mut scratch, mut out) = (CrossingScratch::default(), Vec::new());
        let (mut decided, mut kept_total, mut parts_total) = (0, 0, 0);
        for case in 0..300 {
            let (ae, ze) = (2.0 + n01(&mut rng), n01(&mut rng));
            let mut needle = vec![(ae, ze)];
            if case % 3 == 1 {
                needle.push((ae, ze));
            }
            if case % 3 == 2 {
                needle.push((ae - 0.5, ze + 0.7));
            }
            let mut lines: Vec<(f64, f64)> = (0..40).map(|_| (n01(&mut rng), n01(&mut rng))).collect();
            for j in 0..12 {
                // Slope within 1e-9 … 1e-3 of the needle's (never below the 1e-10 refusal), the
                // crossing at σ from 1e-3 to 1e4.
                let dz = 10f64.powf(-3.0 - 6.0 * rng.random::<f64>()) * if j % 2 == 0 { 1.0 } else { -1.0 };
                let r = 10f64.powf(-3.0 + 7.0 * rng.random::<f64>());
                lines.push((ae - r * dz, ze + dz));
            }
            // Through the needle's point at σ = 0, and a bundle crossing it within ulps of one σ.
            lines.push((ae, ze + 0.3));
            lines.push((ae, ze - 0.3));
            let r0 = 0.5 + rng.random::<f64>();
            for j in 0..8 {
                // Rising through the needle's line and, every other one, falling through it.
                let dz = (0.2 + 0.1 * j as f64) * if j % 2 == 0 { 1.0 } else { -1.0 };
                let a = ae - r0 * dz;
                lines.push((f64::from_bits(a.to_bits() + j / 2), ze + dz));
            }
            let belows = [(case % 9) as i64, 40 + (case % 5) as i64, 1000];
            out.clear();
            noise_layer_record(&needle, &lines, &belows, &mut scratch, &mut out);
            if out[0] == RERUN {
                continue;
            }
            let mut probes: Vec<f64> = (0..40).map(|_| (n01(&mut rng) * 3.0).exp()).collect();
            probes.push(r0);
            // Every crossing of every line with every needle line, and beside it.
            for &(a, z) in &lines {
                for &(a2, z2) in &needle {
                    let r = -(a - a2) / (z - z2);
                    if r > 0.0 && r.is_finite() {
                        probes.extend([
                            r,
                            f64::from_bits(r.to_bits() + 1),
                            f64::from_bits(r.to_bits() - 1),
                            r * (1.0 + 1e-13),
                            r * (1.0 - 1e-13),
                        ]);
                    }
                }
            }
            decided += check_layer_record(&needle, &lines, &belows, &out, probes, &format!("case {case}"));
            for (_, _, kept) in record_parts(&out, &belows) {
                kept_total += kept.len() / 2;
                parts_total += 1;
            }
            // Far beyond every line (below ≥ the line count): nothing near the boundary.
            assert!(record_parts(&out, &belows)[2].2.is_empty(), "case {case}");
        }
        assert!(decided > 100_000, "{decided}");
        // Kept clusters are few per part: those next to the boundary, not every wide window.
        assert!(kept_total < 4 * parts_total, "{kept_total} clusters kept in {parts_total} parts");
    }
}
