//! Materialising: every candidate's score drawn, for the scenarios without closed-form laws.
//!
//! The [`Plan`] methods that draw block statistics, pooled and unpooled entry scores and score
//! noise, and count the candidates above the needle ([`Plan::rank_materialised`]). The replays
//! (`replay`, `rank_record`, `noise_replay`) call the same methods so that their draws and
//! floating-point operations are the run's, bit for bit; hence they live in one file.

use super::plan::{Plan, Scratch};
use crate::scenario::Pooling;
use crate::scores::needle_token;
use crate::scores::ziggurat::max_of_standard_normals;
use rand::Rng;
use rand_distr::StandardNormal;
use rand_xoshiro::Xoshiro256PlusPlus;

impl Plan {
    #[inline]
    pub(super) fn noise<R: Rng + ?Sized>(&self, rng: &mut R) -> f64 {
        if self.noise > 0.0 {
            self.noise * rng.sample::<f64, _>(StandardNormal)
        } else {
            0.0
        }
    }

    /// The standard normal an entry's score noise scales ([`Plan::noise`] is `noise · Z`), or 0
    /// without noise (no draw): the same draw for every positive noise level.
    #[inline]
    pub(super) fn noise_draw<R: Rng + ?Sized>(&self, rng: &mut R) -> f64 {
        if self.noise > 0.0 {
            rng.sample::<f64, _>(StandardNormal)
        } else {
            0.0
        }
    }

    /// Block `b`'s tokens [start, end), the needle spans from the only one that can meet it on,
    /// and whether one does.
    #[inline]
    pub(super) fn block_span(&self, b: u64) -> (u64, u64, &[(u64, u64)], bool) {
        let c = self.compress_ratio;
        let (start, end) = (b * c, b * c + c);
        // The spans are sorted and disjoint: the first that ends after `start` is the only
        // candidate to meet the block (bisection, not a scan of every copy).
        let from = self.needle_spans.partition_point(|&(_, e)| e <= start);
        let spans = &self.needle_spans[from..];
        let touches_needle = spans.first().is_some_and(|&(a, _)| a < end);
        (start, end, spans, touches_needle)
    }

    /// Pools tokens `start..end` one at a time (sum or max) in token order, token t scoring
    /// `token(t is a needle token)`. The one loop for the blocks that meet the needle: the
    /// materialising path draws the scores in it and the replay recomputes them from its record,
    /// so both do the same floating-point operations in the same order.
    #[inline(always)]
    pub(super) fn pool_tokens(
        &self,
        start: u64,
        end: u64,
        spans: &[(u64, u64)],
        mut token: impl FnMut(bool) -> f64,
    ) -> f64 {
        let max = self.pooling == Pooling::Max;
        let mut acc = if max { f64::NEG_INFINITY } else { 0.0 };
        for t in start..end {
            let in_needle = spans.iter().take_while(|&&(a, _)| a < end).any(|&(a, e)| t >= a && t < e);
            let x = token(in_needle);
            acc = if max { acc.max(x) } else { acc + x };
        }
        acc
    }

    /// Draws the pooled statistic (sum or max) of block `b`'s tokens; a token of a block that
    /// meets the needle scores `token(is a needle token, rng)`.
    #[inline(always)]
    pub(super) fn block_stat<R: Rng + ?Sized>(
        &self,
        b: u64,
        rng: &mut R,
        mut token: impl FnMut(bool, &mut R) -> f64,
    ) -> f64 {
        let (start, end, spans, touches_needle) = self.block_span(b);
        if !touches_needle {
            let c = self.compress_ratio;
            let max = self.pooling == Pooling::Max;
            if !max && self.token.is_normal() {
                // The sum of c standard normal tokens is exactly Normal(0, c): one draw.
                return (c as f64).sqrt() * rng.sample::<f64, _>(StandardNormal);
            }
            let mut acc = if max { f64::NEG_INFINITY } else { 0.0 };
            for _ in 0..c {
                let x = self.token.sample(rng);
                acc = if max { acc.max(x) } else { acc + x };
            }
            return acc;
        }
        self.pool_tokens(start, end, spans, |in_needle| token(in_needle, rng))
    }

    /// Draws every block's pooled statistic into `blocks` (one per candidate), in block order:
    /// the draws of [`Plan::block_stat`] for each block in turn, a block that meets the needle
    /// by `touching(b, rng)` and the runs of blocks between them in [`Plan::plain_blocks`]' loop
    /// (no search for the needle per block: this loop is most of a materialising trial).
    #[inline(always)]
    pub(super) fn fill_blocks<R: Rng + Clone>(
        &self,
        rng: &mut R,
        blocks: &mut [f64],
        mut touching: impl FnMut(u64, &mut R) -> f64,
    ) {
        let mut from = 0usize;
        for &t in &self.touching {
            let t = t as usize;
            self.plain_blocks(rng, &mut blocks[from..t]);
            blocks[t] = touching(t as u64, rng);
            from = t + 1;
        }
        self.plain_blocks(rng, &mut blocks[from..]);
    }

    /// Draws the statistics of consecutive blocks that do not meet the needle into `out`, as
    /// [`Plan::block_stat`] draws each.
    #[inline(always)]
    fn plain_blocks<R: Rng + Clone>(&self, rng: &mut R, out: &mut [f64]) {
        let c = self.compress_ratio;
        let max = self.pooling == Pooling::Max;
        if !max && self.token.is_normal() {
            let sd = (c as f64).sqrt();
            for v in out {
                *v = sd * rng.sample::<f64, _>(StandardNormal);
            }
            return;
        }
        if max && self.token.is_normal() {
            // The loop below's draws and maximum, a batch of draws at a time (Quest's pages).
            for v in out {
                *v = max_of_standard_normals(rng, c);
            }
            return;
        }
        for v in out {
            let mut acc = if max { f64::NEG_INFINITY } else { 0.0 };
            for _ in 0..c {
                let x = self.token.sample(rng);
                acc = if max { acc.max(x) } else { acc + x };
            }
            *v = acc;
        }
    }

    /// The score of pooled entry `i` (before noise) from its own block's statistic and, with
    /// overlap and i > 0, the previous block's.
    #[inline(always)]
    pub(super) fn pooled_entry(&self, own: f64, prev: Option<f64>) -> f64 {
        let (stat, size) = match prev {
            Some(prev) => {
                (if self.pooling == Pooling::Max { own.max(prev) } else { own + prev }, 2 * self.compress_ratio)
            }
            None => (own, self.compress_ratio),
        };
        if self.pooling == Pooling::Mean {
            stat / size as f64
        } else {
            stat
        }
    }

    /// Whether pooled entry `i` also pools the previous block.
    #[inline(always)]
    pub(super) fn pools_previous(&self, i: u64) -> bool {
        self.overlap && i > 0
    }

    /// Draws the score of every distractor entry of a pooled layer whose block statistics are
    /// `blocks`, in entry order, and hands each to `each`: the first `hard` non-needle entries
    /// are the hard negatives; every entry adds its score noise.
    #[inline(always)]
    pub(super) fn pooled_distractors(&self, blocks: &[f64], rng: &mut Xoshiro256PlusPlus, mut each: impl FnMut(f64)) {
        let g = &self.geometry;
        if g.hard_negatives == 0 && self.noise == 0.0 {
            // No hard negative and no noise (no draw): the runs of entries between needle
            // entries in loops of their own, each entry's score the general branch's (the
            // `+ 0.0` is its noise term, kept so that a −0 score stays +0 as there).
            let mut from = 0u64;
            for i in g.needle_entries.iter().map(|e| e.index).chain([g.n_candidates]) {
                self.pooled_run(blocks, from, i, &mut each);
                from = i + 1;
            }
            return;
        }
        // a + noise · z is a + `Plan::noise`'s draw, bit for bit (0 · 0 = +0 without noise).
        self.pooled_distractor_terms(blocks, rng, |a, z| each(a + self.noise * z));
    }

    /// The general branch of [`Plan::pooled_distractors`]: every distractor entry's score before
    /// noise, a, and its noise draw z ([`Plan::noise_draw`]), in entry order and with the same
    /// draws; the score is a + noise · z. A noise replay keeps (a, z) to answer any noise level.
    #[inline(always)]
    pub(super) fn pooled_distractor_terms(
        &self,
        blocks: &[f64],
        rng: &mut Xoshiro256PlusPlus,
        mut each: impl FnMut(f64, f64),
    ) {
        let g = &self.geometry;
        let mut hard_left = g.hard_negatives;
        let mut next_needle = g.needle_entries.iter().map(|e| e.index).peekable();
        for i in 0..g.n_candidates {
            if next_needle.peek() == Some(&i) {
                next_needle.next();
                continue;
            }
            let a = if hard_left > 0 {
                hard_left -= 1;
                self.hard_mean + rng.sample::<f64, _>(StandardNormal)
            } else {
                self.pooled_entry(blocks[i as usize], self.pools_previous(i).then(|| blocks[i as usize - 1]))
            };
            each(a, self.noise_draw(rng));
        }
    }

    /// The scores of pooled entries `from..to` (none a needle entry or a hard negative; no
    /// noise), in order, to `each`: `pooled_entry(..) + 0.0`, with the pooling's case taken
    /// once for the run.
    #[inline(always)]
    fn pooled_run(&self, blocks: &[f64], from: u64, to: u64, each: &mut impl FnMut(f64)) {
        if from >= to {
            return;
        }
        let (from, to) = (from as usize, to as usize);
        if !self.overlap {
            for &b in &blocks[from..to] {
                each(self.pooled_entry(b, None) + 0.0);
            }
            return;
        }
        // With overlap, entry 0 pools its own block alone, every later one the previous too.
        let mut start = from;
        if from == 0 {
            each(self.pooled_entry(blocks[0], None) + 0.0);
            start = 1;
        }
        let pairs = blocks[start - 1..to].windows(2);
        match self.pooling {
            Pooling::Mean => {
                let size = (2 * self.compress_ratio) as f64;
                pairs.for_each(|w| each((w[1] + w[0]) / size + 0.0));
            }
            Pooling::Max => pairs.for_each(|w| each(w[1].max(w[0]) + 0.0)),
            _ => pairs.for_each(|w| each((w[1] + w[0]) + 0.0)),
        }
    }

    /// Draws the score of every distractor entry of an unpooled layer, in order (hard
    /// negatives first), and hands each to `each`.
    #[inline(always)]
    pub(super) fn direct_distractors(&self, rng: &mut Xoshiro256PlusPlus, mut each: impl FnMut(f64)) {
        let g = &self.geometry;
        let hard = g.hard_negatives;
        for _ in 0..hard {
            each(self.hard_mean + rng.sample::<f64, _>(StandardNormal) + self.noise(rng));
        }
        let rest = g.n_distractors - hard;
        if self.token.is_normal() {
            // Normal token plus normal noise is one normal draw.
            let s = (1.0 + self.noise * self.noise).sqrt();
            for _ in 0..rest {
                let x: f64 = rng.sample(StandardNormal);
                each(s * x);
            }
        } else {
            for _ in 0..rest {
                each(self.token.sample(rng) + self.noise(rng));
            }
        }
    }

    /// The sd of an unpooled needle entry's score: the needle token's sd and the score noise.
    #[inline(always)]
    pub(super) fn direct_needle_sd(&self, sd: f64) -> f64 {
        (sd * sd + self.noise * self.noise).sqrt()
    }

    /// Draws a pooled layer's block statistics into `blocks` (resized to one per candidate),
    /// needle tokens Normal(mu, sd²).
    #[inline(always)]
    pub(super) fn draw_blocks(&self, (mu, sd): (f64, f64), rng: &mut Xoshiro256PlusPlus, blocks: &mut Vec<f64>) {
        blocks.resize(self.geometry.n_candidates as usize, 0.0);
        self.fill_blocks(rng, blocks, |b, rng| {
            self.block_stat(b, rng, |in_needle, rng| {
                if in_needle {
                    mu + sd * rng.sample::<f64, _>(StandardNormal)
                } else {
                    self.token.sample(rng)
                }
            })
        });
    }

    /// Materialising: draws every candidate's score and counts those above the needle's best.
    pub(super) fn rank_materialised(&self, z: Option<f64>, rng: &mut Xoshiro256PlusPlus, scratch: &mut Scratch) -> u64 {
        let g = &self.geometry;
        let (mu, sd) = needle_token(self.dprime, self.needle_sd, self.rho, z);
        let mut count = 0u64;
        if self.pooling == Pooling::None {
            // Entries draw their scores directly; the needle's entries first.
            let needle_sd = self.direct_needle_sd(sd);
            let mut y = f64::NEG_INFINITY;
            for _ in &g.needle_entries {
                y = y.max(mu + needle_sd * rng.sample::<f64, _>(StandardNormal));
            }
            self.direct_distractors(rng, |x| count += (x > y) as u64);
            return 1 + count;
        }
        // Pooled entries: one statistic per block, then entries from one or two blocks.
        self.draw_blocks((mu, sd), rng, &mut scratch.blocks);
        let blocks = &scratch.blocks;
        let mut y = f64::NEG_INFINITY;
        for e in &g.needle_entries {
            let i = e.index;
            y = y.max(
                self.pooled_entry(blocks[i as usize], self.pools_previous(i).then(|| blocks[i as usize - 1]))
                    + self.noise(rng),
            );
        }
        self.pooled_distractors(blocks, rng, |x| count += (x > y) as u64);
        1 + count
    }
}
