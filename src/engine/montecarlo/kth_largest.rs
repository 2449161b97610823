//! The k-th largest of a layer's distractor scores, exactly, keeping only scores above a guess.
//!
//! A selection structure with no knowledge of plans or scenarios: a replay records each layer's
//! k_eff-th largest distractor score with it, and the rank records count scores above the
//! needle from its kept scores ([`order_value`]).

/// `x` as an integer whose order is `f64::total_cmp`'s (the sign bit kept, the other bits
/// flipped for negative values, as `total_cmp` does on every comparison): selecting on
/// integers compares faster, and [`order_value`] gives the score back bit for bit.
#[inline(always)]
fn order_key(x: f64) -> i64 {
    let bits = x.to_bits() as i64;
    bits ^ ((((bits >> 63) as u64) >> 1) as i64)
}

/// The score of an [`order_key`] (the map is its own inverse).
#[inline(always)]
pub(super) fn order_value(key: i64) -> f64 {
    f64::from_bits((key ^ ((((key >> 63) as u64) >> 1) as i64)) as u64)
}

/// The k-th largest of a layer's distractor scores, exactly, with the needle ranking within k
/// exactly when fewer than k scores exceed its score y, that is when the k-th largest does not:
/// `!(kth > y)`, the same comparisons as counting (NaN-free scores; ±0 compare equal either way).
/// −∞ when there are fewer than k scores (then any y has at most k − 1 above it).
///
/// Keeping and selecting among all N scores cost half as much again as drawing them, so only
/// the scores above a guess are kept; when there are at least k of them they hold the k
/// largest. The guess is the previous trial's (k + k/4 + 16)-th largest, so that a layer with
/// fewer than k above it (drawn again, keeping every score: [`Recorder::record_layer`]) is rare:
/// about one in 250 for V4-Flash with mean pooling at 16K tokens, k = 512 (neighbouring entries
/// share a block, which spreads the count above a level more than a binomial would). The result
/// never depends on the guess, only the time does, so a worker's history cannot change a record.
///
/// [`Recorder::record_layer`]: super::replay::Recorder::record_layer
#[derive(Default)]
pub(super) struct KthLargest {
    /// The `kept` scores as [`order_key`]s, in room for every score of the layer: each is
    /// written at `kept`, which advances only when it is kept (a branch-free filter; a branch
    /// taken for one score in six would mispredict).
    pub(super) buf: Vec<i64>,
    pub(super) kept: usize,
    count: usize,
    pub(super) guess: Option<f64>,
}

impl KthLargest {
    /// Starts a layer of at most `n` scores.
    pub(super) fn clear(&mut self, n: usize) {
        if self.buf.len() < n {
            self.buf.resize(n, 0);
        }
        self.kept = 0;
        self.count = 0;
    }

    #[inline(always)]
    pub(super) fn push(&mut self, x: f64) {
        self.count += 1;
        // Without a guess every score is kept (the comparison with −∞ would drop a −∞ score).
        let floor = self.guess.unwrap_or(f64::NEG_INFINITY);
        self.buf[self.kept] = order_key(x);
        self.kept += (self.guess.is_none() || x > floor) as usize;
    }

    /// The k-th largest score pushed since [`KthLargest::clear`], or `None` when fewer than k of
    /// them were kept (only with a guess).
    #[cfg(test)]
    fn kth(&mut self, k: u64) -> Option<f64> {
        let mut out = [0.0];
        self.kths(&[k], &mut out).then_some(out[0])
    }

    /// Writes the k-th largest score pushed since [`KthLargest::clear`] for each k of `ks` into
    /// `out` (same order; −∞ for k = 0 or beyond the count), or returns false when fewer than
    /// the largest of them were kept (only with a guess; `out` is then to be discarded). The largest k is selected among the kept scores and each smaller one
    /// among the scores before it (the largest k − 1, unordered), so several k cost little more
    /// than one; the guess follows the largest k.
    pub(super) fn kths(&mut self, ks: &[u64], out: &mut [f64]) -> bool {
        let count = self.count;
        let has = |k: u64| k >= 1 && k as usize <= count;
        out.fill(f64::NEG_INFINITY);
        let Some(top) = ks.iter().copied().filter(|&k| has(k)).max().map(|k| k as usize) else {
            return true;
        };
        if self.kept < top {
            debug_assert!(self.guess.is_some(), "without a guess every score is kept");
            return false;
        }
        let above = &mut self.buf[..self.kept];
        let desc = |a: &i64, b: &i64| b.cmp(a);
        let top_kth = order_value(*above.select_nth_unstable_by(top - 1, desc).1);
        // The next guess: this trial's k2-th largest, the (k2 − k)-th largest of those after the
        // k-th; the old one stays when too few were kept to say.
        let k2 = top + top / 4 + 16;
        if k2 <= above.len() {
            self.guess = Some(order_value(*above[top..].select_nth_unstable_by(k2 - top - 1, desc).1));
        }
        // The smaller k from the largest down, each among the scores before the last one
        // selected (the k' − 1 largest, unordered, for the last k'): its k-th is the k-th of
        // all. Few k (at most a table's), so the descending order is found by scanning.
        let mut last = top;
        loop {
            let next = ks.iter().copied().filter(|&k| has(k) && (k as usize) < last).max();
            for (v, &k) in out.iter_mut().zip(ks) {
                if k as usize == last && has(k) {
                    *v = if last == top { top_kth } else { order_value(above[last - 1]) };
                }
            }
            let Some(next) = next.map(|k| k as usize) else { break };
            above[..last - 1].select_nth_unstable_by(next - 1, desc);
            last = next;
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trials::trial_rng;
    use rand::Rng;
    use rand_distr::StandardNormal;
    use rand_xoshiro::Xoshiro256PlusPlus;

    /// The k-th largest is exact whatever the guess: with too few scores above the guess it
    /// says so (the layer is then drawn again), otherwise it is the sorted value; ties and ±0
    /// included.
    #[test]
    fn kth_largest_is_exact_whatever_the_guess() {
        use rand::SeedableRng;
        let mut rng = Xoshiro256PlusPlus::seed_from_u64(3);
        for n in [1usize, 2, 7, 100, 1000] {
            // Rounded to a coarse grid: many ties, and −0 next to +0.
            let xs: Vec<f64> = (0..n)
                .map(|_| {
                    (rng.sample::<f64, _>(StandardNormal) * 4.0).round() / 4.0
                        * if rng.random::<bool>() { 1.0 } else { -1.0 }
                })
                .collect();
            let mut sorted = xs.clone();
            sorted.sort_by(|a, b| b.total_cmp(a));
            for k in [1, 2, n / 3 + 1, n, n + 1] {
                for guess in [None, Some(f64::NEG_INFINITY), Some(-0.0), Some(0.0), Some(0.7), Some(f64::INFINITY)] {
                    let mut top = KthLargest { guess, ..KthLargest::default() };
                    top.clear(n);
                    xs.iter().for_each(|&x| top.push(x));
                    let above = xs.iter().filter(|&&x| guess.is_none_or(|g| x > g)).count();
                    match top.kth(k as u64) {
                        None => assert!(guess.is_some() && above < k && k <= n, "n {n} k {k} {guess:?}"),
                        Some(v) if k > n => assert_eq!(v, f64::NEG_INFINITY),
                        // total_cmp is a total order: the k-th value is unique to the bit.
                        Some(v) => assert_eq!(v.to_bits(), sorted[k - 1].to_bits(), "n {n} k {k} {guess:?}"),
                    }
                }
                if k <= n {
                    // The comparisons it stands for: fewer than k strictly above y iff !(kth > y).
                    let v = sorted[k - 1];
                    for y in sorted.iter().copied().chain([f64::NEG_INFINITY, f64::INFINITY, -0.0, 0.0]) {
                        assert_eq!(xs.iter().filter(|&&x| x > y).count() < k, !(v > y), "n {n} k {k} y {y}");
                    }
                }
            }
        }
    }

    /// The order key sorts as `total_cmp` and gives every value back, bit for bit.
    #[test]
    fn order_key_is_total_cmp_and_inverts() {
        let xs =
            [f64::NEG_INFINITY, -1e300, -1.0, -f64::MIN_POSITIVE, -0.0, 0.0, 5e-324, 1.0, 2.5, f64::MAX, f64::INFINITY];
        for a in xs {
            assert_eq!(order_value(order_key(a)).to_bits(), a.to_bits());
            for b in xs {
                assert_eq!(order_key(a).cmp(&order_key(b)), a.total_cmp(&b), "{a} {b}");
            }
        }
    }

    /// Several k at once are each the k-th largest alone, whatever the guess and the order of
    /// the k (ties, ±0, k beyond the count, k = 0).
    #[test]
    fn kth_largest_of_several_k_is_each_alone() {
        let mut rng = trial_rng(11, 0);
        for n in [1usize, 5, 300] {
            let xs: Vec<f64> = (0..n).map(|_| (rng.sample::<f64, _>(StandardNormal) * 3.0).round() / 3.0).collect();
            for ks in [
                vec![1u64],
                vec![3, 1, 2],
                vec![n as u64, 1],
                vec![0, n as u64 + 1, 2],
                vec![n as u64 / 2 + 1, n as u64 / 5 + 1, n as u64],
            ] {
                for guess in [None, Some(-0.5), Some(0.0), Some(1.5)] {
                    let mut many = KthLargest { guess, ..KthLargest::default() };
                    many.clear(n);
                    xs.iter().for_each(|&x| many.push(x));
                    let mut out = vec![f64::NAN; ks.len()];
                    let done = many.kths(&ks, &mut out);
                    let alone: Vec<Option<f64>> = ks
                        .iter()
                        .map(|&k| {
                            let mut one = KthLargest { guess, ..KthLargest::default() };
                            one.clear(n);
                            xs.iter().for_each(|&x| one.push(x));
                            one.kth(k)
                        })
                        .collect();
                    // Fewer kept than the largest k: refused, as the largest k alone is.
                    let top = ks.iter().copied().filter(|&k| k >= 1 && k as usize <= n).max();
                    let top_alone = top.and_then(|t| alone[ks.iter().position(|&k| k == t).unwrap()]);
                    assert_eq!(done, top.is_none() || top_alone.is_some(), "n {n} {ks:?} {guess:?}");
                    if done {
                        for (i, a) in alone.iter().enumerate() {
                            assert_eq!(
                                Some(out[i].to_bits()),
                                a.map(f64::to_bits),
                                "n {n} {ks:?} {guess:?} k {}",
                                ks[i]
                            );
                        }
                    }
                }
            }
        }
    }
}
