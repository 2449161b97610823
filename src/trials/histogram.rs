//! A mergeable histogram of needle ranks: exact up to 2^12, then 512 log-spaced bins per
//! doubling (relative resolution 0.2%), allocated only once a rank exceeds 2^12. Counts are integers, so merging per-thread histograms
//! gives the same result in any order: Monte Carlo output does not depend on the thread count.

/// Ranks up to this value are counted exactly.
pub(crate) const EXACT_LIMIT: u64 = 1 << 12;
const EXACT_BITS: u64 = 12;
const BINS_PER_OCTAVE: u64 = 512;
const OCTAVES: u64 = 48;

/// Histogram of needle ranks over trials.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RankHistogram {
    exact: Vec<u64>,
    log: Vec<u64>,
    /// Trials in which the needle was in no candidate entry (rank undefined).
    pub(crate) never: u64,
    /// Trials recorded.
    pub(crate) total: u64,
}

impl Default for RankHistogram {
    fn default() -> Self {
        RankHistogram { exact: vec![0; EXACT_LIMIT as usize + 1], log: Vec::new(), never: 0, total: 0 }
    }
}

fn log_bin(rank: u64) -> usize {
    let octave = 63 - rank.leading_zeros() as u64; // ≥ EXACT_BITS
    let base = 1u64 << octave;
    let sub = ((rank - base) as u128 * BINS_PER_OCTAVE as u128 / base as u128) as u64;
    (((octave - EXACT_BITS) * BINS_PER_OCTAVE + sub) as usize).min((BINS_PER_OCTAVE * OCTAVES) as usize - 1)
}

/// The largest rank falling in log bin `b`.
fn log_bin_upper(b: usize) -> u64 {
    let octave = b as u64 / BINS_PER_OCTAVE + EXACT_BITS;
    let sub = b as u64 % BINS_PER_OCTAVE;
    let base = 1u64 << octave;
    let next = base as u128 + ((sub + 1) as u128 * base as u128).div_ceil(BINS_PER_OCTAVE as u128);
    (next - 1) as u64
}

impl RankHistogram {
    /// Records one trial's rank (`None`: the needle was in no entry).
    #[inline]
    pub(crate) fn record(&mut self, rank: Option<u64>) {
        self.total += 1;
        match rank {
            None => self.never += 1,
            Some(r) if r <= EXACT_LIMIT => self.exact[r as usize] += 1,
            Some(r) => {
                if self.log.is_empty() {
                    self.log = vec![0; (BINS_PER_OCTAVE * OCTAVES) as usize];
                }
                self.log[log_bin(r)] += 1
            }
        }
    }

    /// Adds another histogram's counts.
    pub(crate) fn merge(&mut self, other: &RankHistogram) {
        for (a, b) in self.exact.iter_mut().zip(&other.exact) {
            *a += b;
        }
        if self.log.is_empty() && !other.log.is_empty() {
            self.log = vec![0; other.log.len()];
        }
        for (a, b) in self.log.iter_mut().zip(&other.log) {
            *a += b;
        }
        self.never += other.never;
        self.total += other.total;
    }

    /// Fraction of trials with rank ≤ j (exact for j ≤ 2^12 and at bin edges such as powers of
    /// two; otherwise counts the bins whose ranks are all ≤ j).
    pub fn cdf(&self, j: u64) -> f64 {
        if self.total == 0 {
            return 0.0;
        }
        let upto = j.min(EXACT_LIMIT) as usize;
        let mut c: u64 = self.exact[..=upto].iter().sum();
        if j > EXACT_LIMIT {
            c += self.log.iter().enumerate().filter(|(b, _)| log_bin_upper(*b) <= j).map(|(_, n)| n).sum::<u64>();
        }
        c as f64 / self.total as f64
    }

    /// The smallest rank r with P(rank ≤ r) ≥ p (beyond 2^12, the upper edge of its bin), or
    /// `None` if that many trials never had the needle in an entry.
    pub(crate) fn quantile(&self, p: f64) -> Option<u64> {
        let need = (p * self.total as f64).ceil().max(1.0) as u64;
        let mut c = 0u64;
        for (r, n) in self.exact.iter().enumerate() {
            c += n;
            if c >= need {
                return Some(r as u64);
            }
        }
        for (b, n) in self.log.iter().enumerate() {
            c += n;
            if c >= need {
                return Some(log_bin_upper(b));
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bins_cover_ranks_in_order() {
        let mut prev_upper = EXACT_LIMIT;
        for b in 0..5000 {
            let up = log_bin_upper(b);
            assert!(up > prev_upper);
            assert_eq!(log_bin(up), b);
            assert_eq!(log_bin(prev_upper + 1), b);
            prev_upper = up;
        }
    }

    #[test]
    fn quantiles_and_cdf() {
        let mut h = RankHistogram::default();
        for r in 1..=100u64 {
            h.record(Some(r));
        }
        h.record(None);
        assert_eq!(h.quantile(0.5), Some(51));
        assert!((h.cdf(10) - 10.0 / 101.0).abs() < 1e-15);
        assert_eq!(h.quantile(1.0), None);
        let mut g = RankHistogram::default();
        g.record(Some(1 << 20));
        assert_eq!(g.cdf((1 << 20) - 1), 0.0);
        let upper = log_bin_upper(log_bin(1 << 20));
        assert_eq!(upper, (1 << 20) + 2047);
        assert_eq!(g.cdf(upper), 1.0);
        assert_eq!(g.quantile(0.5), Some(upper));
    }
}
