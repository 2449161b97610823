//! The Monte Carlo engine: any scenario, rayon-parallel, reproducible.
//!
//! The scenario is prepared once into a plan, a [`TrialPlan`] that the shared driver
//! ([`crate::trials::run`]) runs chunk by chunk: trial i draws only from
//! [`crate::trials::trial_rng`]`(seed, i)` and the counts merge by addition, so the output is
//! identical for any thread count and any rerun.
//!
//! Two paths:
//! - **exact sampling** (closed-form laws): draw the needle's best entry score Y, then the number
//!   of distractors above it, Binomial(n_regular, Q(Y)) + Binomial(n_hard, Q_hard(Y)). No
//!   candidate is materialised; a trial costs the same at N = 10^3 and N = 10^9. Single-layer
//!   trials run `BATCH` at a time (`Plan::exact_batched`) with results identical to running
//!   them one by one.
//! - **materialising**: every candidate's score is drawn (from its tokens when pooling), for the
//!   cases without closed-form laws (overlapping mean/max pooling, noise on non-normal laws, …).
//!   Memory is one f64 per block per thread, reused across trials; at most
//!   [`MAX_MATERIALISED_CANDIDATES`] candidates (128 MiB per thread), a larger scenario is
//!   refused up front instead of failing to allocate.

use super::binomial;
use crate::geometry::Geometry;
use crate::progress::{Progress, Silent};
use crate::scenario::{Distractor, Pooling, Scenario};
use crate::scores::ziggurat::max_of_standard_normals;
use crate::scores::{needle_token, EntryLaw, NotExact, ScoreModel, TokenLaw};
use crate::trials::{trial_rng, ReadoutRule, RecordPlan, Tally, TrialPlan, VarRecordPlan};
use rand::Rng;
use rand_distr::StandardNormal;
use rand_xoshiro::Xoshiro256PlusPlus;

/// Trials per parallel work item.
const CHUNK: u64 = 2048;

/// Exact trials interleaved in one batch (see `Plan::exact_batched`).
const BATCH: usize = 16;

/// Which Monte Carlo path to use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum McPath {
    /// Exact sampling where the laws are in closed form, else materialising.
    Auto,
    /// Exact sampling (an error where the laws have no closed form).
    Exact,
    /// Materialise every candidate's score.
    Materialise,
}

/// Most candidate entries the materialising path draws per trial: its scratch is one f64 per
/// block per worker thread (128 MiB at this size), and a trial this large already draws 2^24·c
/// token scores.
pub const MAX_MATERIALISED_CANDIDATES: u64 = 1 << 24;

/// `Some(why)` when a Monte Carlo run of `s` (its geometry and score model resolved) on `path`
/// would have to materialise more than [`MAX_MATERIALISED_CANDIDATES`] candidates per trial;
/// `None` when it can run.
fn materialise_limit(s: &Scenario, g: &Geometry, path: McPath, model: &Result<ScoreModel, NotExact>) -> Option<String> {
    let n = g.n_candidates;
    if n <= MAX_MATERIALISED_CANDIDATES || path == McPath::Exact {
        return None;
    }
    let why = match (path, model) {
        (McPath::Materialise, _) => "the materialising path was requested".to_string(),
        (_, Ok(_)) => return None,
        (_, Err(e)) => e.0.clone(),
    };
    Some(format!(
        "context_len = {}: {n} candidates, and Monte Carlo must draw every one of them here ({why}); \
         allowed at most {MAX_MATERIALISED_CANDIDATES} candidates (2^24): lower context_len or raise compress_ratio",
        s.context_len
    ))
}

/// Whether a Monte Carlo run of the validated scalar scenario `s` on [`McPath::Auto`] takes the
/// materialising path (its laws have no closed form).
pub fn materialises(s: &Scenario) -> bool {
    ScoreModel::new(s, &Geometry::new(s)).is_err()
}

/// What one trial of a scalar run of `s` on `path` draws, in work units, and what the units
/// count; or why the run would have to materialise too many candidates. One geometry and one
/// score model serve both checks.
pub fn trial_work(s: &Scenario, path: McPath) -> Result<(u64, &'static str), String> {
    let g = Geometry::new(s);
    let model = ScoreModel::new(s, &g);
    if let Some(why) = materialise_limit(s, &g, path, &model) {
        return Err(why);
    }
    let layers = s.selecting_layers() as u64;
    Ok(if path != McPath::Materialise && model.is_ok() {
        // Exact sampling draws every needle entry, and two binomials, in every layer.
        ((g.needle_entries.len() as u64 + 2).saturating_mul(4 * layers), "work units (4 per needle entry and layer)")
    } else if s.pooling != Pooling::Max && s.distractor == Distractor::Normal {
        // Materialising with normal tokens summed: one draw per block, plus the needle's tokens.
        let per = g.n_candidates + s.needle_tokens.saturating_mul(s.repeat as u64);
        (per.saturating_mul(layers).max(1), "block scores (candidates × layers)")
    } else {
        // Materialising max-pooled or non-normal tokens draws every token of every layer.
        (s.context_len.saturating_mul(layers).max(1), "token scores (context_len × layers)")
    })
}

/// Everything a trial needs, prepared once.
#[derive(Debug)]
struct Plan {
    /// The path every trial runs on.
    path: McPath,
    geometry: Geometry,
    model: Option<ScoreModel>,
    /// The needle entries' laws when they do not depend on a shared component (computed once).
    fixed_needle_laws: Vec<EntryLaw>,
    token: TokenLaw,
    pooling: Pooling,
    overlap: bool,
    compress_ratio: u64,
    needle_spans: Vec<(u64, u64)>,
    /// The blocks that meet a needle span (pooled layers), in increasing order: every other
    /// block is drawn in [`Plan::plain_blocks`]' loop.
    touching: Vec<u64>,
    dprime: f64,
    needle_sd: f64,
    rho: f64,
    noise: f64,
    hard_mean: f64,
    rule: ReadoutRule,
}

/// The blocks of `c` tokens among the first `n` that hold a token of one of the sorted, disjoint
/// `spans`, in increasing order (those for which [`Plan::block_span`] says the needle meets it).
fn touching_blocks(spans: &[(u64, u64)], c: u64, n: u64) -> Vec<u64> {
    let mut out: Vec<u64> = Vec::new();
    for &(a, e) in spans {
        if e <= a {
            continue;
        }
        for b in a / c..=(e - 1) / c {
            if b < n && out.last() != Some(&b) {
                out.push(b);
            }
        }
    }
    out
}

/// Per-thread scratch, reused across trials.
#[derive(Default)]
struct Scratch {
    blocks: Vec<f64>,
}

impl Plan {
    fn needs_shared(&self) -> bool {
        match &self.model {
            Some(m) => m.shared,
            None => self.rho > 0.0,
        }
    }

    /// One trial. Generic over the rank sampler so that the exact path's loop is compiled
    /// without the materialising path's code (which it never runs) inlined into it.
    #[inline(always)]
    fn trial<F>(&self, rng: &mut Xoshiro256PlusPlus, scratch: &mut Scratch, tally: &mut Tally, rank_of: F)
    where
        F: FnMut(Option<f64>, &mut Xoshiro256PlusPlus, &mut Scratch) -> u64,
    {
        let mut layers_attending = 0u32;
        self.layer_ranks(rng, scratch, rank_of, |layer, rank| {
            if layer == 0 {
                tally.ranks.record(rank);
            }
            layers_attending += self.rule.attends(rank) as u32;
        });
        self.rule.conclude(layers_attending, rng, tally);
    }

    /// A trial's draws up to its readout: the shared component (when drawn), then each layer's
    /// rank (`None`: no entry covers the needle), handed to `each` with the layer's index. The
    /// one order of draws for a trial that is run ([`Plan::trial`]) and one that is recorded
    /// ([`RankRecord`]).
    #[inline(always)]
    fn layer_ranks<F>(
        &self,
        rng: &mut Xoshiro256PlusPlus,
        scratch: &mut Scratch,
        mut rank_of: F,
        mut each: impl FnMut(u32, Option<u64>),
    ) where
        F: FnMut(Option<f64>, &mut Xoshiro256PlusPlus, &mut Scratch) -> u64,
    {
        let z = if self.needs_shared() { Some(rng.sample::<f64, _>(StandardNormal)) } else { None };
        let g = &self.geometry;
        for layer in 0..self.rule.layers() {
            each(layer, if g.needle_entries.is_empty() { None } else { Some(rank_of(z, rng, scratch)) });
        }
    }

    /// Whether exact trials can run [`BATCH`] at a time: one layer, no shared component, a
    /// needle to rank (the common case; every other exact scenario runs trial by trial).
    fn batchable(&self) -> bool {
        self.rule.layers() == 1 && !self.needs_shared() && !self.geometry.needle_entries.is_empty()
    }

    /// Exact trials `range`, [`BATCH`] at a time in two phases: every trial's needle score and
    /// tail probabilities, then every trial's binomial counts. Each trial still draws from its
    /// own generator in the same order as [`Plan::trial`] (needle, counts, readout), so the
    /// results are identical to running them one by one; the phases only give the processor
    /// independent work to overlap (a single trial is one long chain of dependent latencies:
    /// seed, normal, tail probability, square root, division).
    fn exact_batched(&self, seed: u64, range: std::ops::Range<u64>, tally: &mut Tally) {
        let m = self.model.as_ref().expect("Plan::new takes the exact path only when ScoreModel::new succeeded");
        let mut i = range.start;
        while i < range.end {
            let len = (range.end - i).min(BATCH as u64) as usize;
            let mut rngs: [Xoshiro256PlusPlus; BATCH] = std::array::from_fn(|j| trial_rng(seed, i + j as u64));
            let mut tails = [(0.0, 0.0); BATCH];
            for (rng, tail) in rngs.iter_mut().zip(&mut tails).take(len) {
                *tail = self.exact_tails(m, None, rng);
            }
            for (rng, &tail) in rngs.iter_mut().zip(&tails).take(len) {
                let rank = Some(exact_rank(m, tail, rng));
                tally.ranks.record(rank);
                self.rule.conclude(self.rule.attends(rank) as u32, rng, tally);
            }
            i += len as u64;
        }
    }

    /// Exact sampling: the needle's best entry, then binomial counts above it.
    fn rank_exact(&self, z: Option<f64>, rng: &mut Xoshiro256PlusPlus) -> u64 {
        let m = self.model.as_ref().expect("Plan::new takes the exact path only when ScoreModel::new succeeded");
        let tails = self.exact_tails(m, z, rng);
        exact_rank(m, tails, rng)
    }

    /// Draws the needle's best entry score y and returns P(regular distractor > y) and
    /// P(hard negative > y) (0 without hard negatives).
    #[inline(always)]
    fn exact_tails(&self, m: &ScoreModel, z: Option<f64>, rng: &mut Xoshiro256PlusPlus) -> (f64, f64) {
        let mut y = f64::NEG_INFINITY;
        if z.is_none() {
            for law in &self.fixed_needle_laws {
                y = y.max(law.sample(rng));
            }
        } else {
            for e in &m.needle_entries {
                y = y.max(m.needle_law(e, z).sample(rng));
            }
        }
        (m.distractor.sf(y), if m.n_hard > 0 { m.hard.sf(y) } else { 0.0 })
    }

    #[inline]
    fn noise<R: Rng + ?Sized>(&self, rng: &mut R) -> f64 {
        if self.noise > 0.0 {
            self.noise * rng.sample::<f64, _>(StandardNormal)
        } else {
            0.0
        }
    }

    /// The standard normal an entry's score noise scales ([`Plan::noise`] is `noise · Z`), or 0
    /// without noise (no draw): the same draw for every positive noise level.
    #[inline]
    fn noise_draw<R: Rng + ?Sized>(&self, rng: &mut R) -> f64 {
        if self.noise > 0.0 {
            rng.sample::<f64, _>(StandardNormal)
        } else {
            0.0
        }
    }

    /// Block `b`'s tokens [start, end), the needle spans from the only one that can meet it on,
    /// and whether one does.
    #[inline]
    fn block_span(&self, b: u64) -> (u64, u64, &[(u64, u64)], bool) {
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
    fn pool_tokens(&self, start: u64, end: u64, spans: &[(u64, u64)], mut token: impl FnMut(bool) -> f64) -> f64 {
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
    fn block_stat<R: Rng + ?Sized>(&self, b: u64, rng: &mut R, mut token: impl FnMut(bool, &mut R) -> f64) -> f64 {
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
    fn fill_blocks<R: Rng + Clone>(
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
    fn pooled_entry(&self, own: f64, prev: Option<f64>) -> f64 {
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
    fn pools_previous(&self, i: u64) -> bool {
        self.overlap && i > 0
    }

    /// Draws the score of every distractor entry of a pooled layer whose block statistics are
    /// `blocks`, in entry order, and hands each to `each`: the first `hard` non-needle entries
    /// are the hard negatives; every entry adds its score noise.
    #[inline(always)]
    fn pooled_distractors(&self, blocks: &[f64], rng: &mut Xoshiro256PlusPlus, mut each: impl FnMut(f64)) {
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
    fn pooled_distractor_terms(&self, blocks: &[f64], rng: &mut Xoshiro256PlusPlus, mut each: impl FnMut(f64, f64)) {
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
    fn direct_distractors(&self, rng: &mut Xoshiro256PlusPlus, mut each: impl FnMut(f64)) {
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
    fn direct_needle_sd(&self, sd: f64) -> f64 {
        (sd * sd + self.noise * self.noise).sqrt()
    }

    /// Draws a pooled layer's block statistics into `blocks` (resized to one per candidate),
    /// needle tokens Normal(mu, sd²).
    #[inline(always)]
    fn draw_blocks(&self, (mu, sd): (f64, f64), rng: &mut Xoshiro256PlusPlus, blocks: &mut Vec<f64>) {
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
    fn rank_materialised(&self, z: Option<f64>, rng: &mut Xoshiro256PlusPlus, scratch: &mut Scratch) -> u64 {
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

/// The needle's rank from the tail probabilities of [`Plan::exact_tails`]: 1 + the binomial
/// counts of regular distractors and hard negatives above it.
#[inline(always)]
fn exact_rank(m: &ScoreModel, (p_regular, p_hard): (f64, f64), rng: &mut Xoshiro256PlusPlus) -> u64 {
    let mut above = binomial::sample(m.n_regular, p_regular, rng);
    if m.n_hard > 0 {
        above += binomial::sample(m.n_hard, p_hard, rng);
    }
    1 + above
}

/// Runs `trials` Monte Carlo trials of a validated scenario.
pub fn simulate(s: &Scenario, trials: u64, seed: u64, path: McPath) -> Result<Tally, NotExact> {
    simulate_observed(s, trials, seed, path, &Silent)
}

impl Plan {
    /// The plan of a validated scenario on `path` (Auto resolved to the path it runs on).
    fn new(s: &Scenario, path: McPath) -> Result<Plan, NotExact> {
        let geometry = Geometry::new(s);
        let model = ScoreModel::new(s, &geometry);
        let path = match (path, &model) {
            (McPath::Auto, Ok(_)) | (McPath::Exact, Ok(_)) => McPath::Exact,
            (McPath::Exact, Err(e)) => return Err(e.clone()),
            _ => McPath::Materialise,
        };
        if path == McPath::Materialise && geometry.n_candidates > MAX_MATERIALISED_CANDIDATES {
            return Err(NotExact(materialise_limit(s, &geometry, path, &model).unwrap_or_default()));
        }
        let fixed_needle_laws = match &model {
            Ok(m) if !m.shared => m.needle_entries.iter().map(|e| m.needle_law(e, None)).collect(),
            _ => Vec::new(),
        };
        let needle_spans = geometry.needle_spans(s.needle_tokens);
        let touching = if s.pooling == Pooling::None {
            Vec::new()
        } else {
            touching_blocks(&needle_spans, s.compress_ratio, geometry.n_candidates)
        };
        let plan = Plan {
            path,
            rule: ReadoutRule::new(s, &geometry),
            fixed_needle_laws,
            needle_spans,
            touching,
            geometry,
            model: model.ok(),
            token: TokenLaw::new(s.distractor),
            pooling: s.pooling,
            overlap: s.overlap,
            compress_ratio: s.compress_ratio,
            dprime: s.dprime,
            needle_sd: s.needle_sd,
            rho: s.layer_corr,
            noise: s.score_noise,
            hard_mean: s.hard_mean,
        };
        Ok(plan)
    }

    /// Exact trials `range`, each run to its end before the next starts.
    fn run_one_by_one(&self, seed: u64, range: std::ops::Range<u64>, scratch: &mut Scratch, tally: &mut Tally) {
        for i in range {
            self.trial(&mut trial_rng(seed, i), scratch, tally, |z, rng, _| self.rank_exact(z, rng));
        }
    }
}

impl TrialPlan for Plan {
    type Scratch = Scratch;

    fn chunk(&self) -> u64 {
        CHUNK
    }

    fn run_trials(&self, seed: u64, range: std::ops::Range<u64>, scratch: &mut Scratch, tally: &mut Tally) {
        if self.path == McPath::Materialise {
            for i in range {
                self.trial(&mut trial_rng(seed, i), scratch, tally, |z, rng, scratch| {
                    self.rank_materialised(z, rng, scratch)
                });
            }
        } else if self.batchable() {
            self.exact_batched(seed, range, tally);
        } else {
            self.run_one_by_one(seed, range, scratch, tally);
        }
    }
}

/// [`simulate`], reporting each finished chunk of trials to `progress`.
pub fn simulate_observed(
    s: &Scenario,
    trials: u64,
    seed: u64,
    path: McPath,
    progress: &dyn Progress,
) -> Result<Tally, NotExact> {
    Ok(crate::trials::run(&Plan::new(s, path)?, trials, seed, progress))
}

/// Every Monte Carlo trial's needle rank in each layer, kept to answer the same scenario at
/// any `index_topk`.
///
/// No draw of a trial depends on k: the needle's scores, the distractors' (or their binomial
/// counts above the needle) and the readout's uniform are drawn the same way whatever k is, and
/// k enters only through k_eff, which decides which ranks attend. So the ranks of one run, with
/// each trial's readout uniform, give the counts of [`simulate`]`(s at any k, trials, seed,
/// McPath::Auto)` exactly: a search over k (the verdict's k needed, recall at 2k and at the
/// kernel maximum) costs one run instead of one per k. A record is `layers + 1` f64s a trial
/// (ranks are exact in an f64 up to 2^53; −1 where no entry covers the needle).
#[derive(Debug)]
pub struct RankRecord {
    key: String,
    layers: usize,
    trials: u64,
    records: Vec<f64>,
}

/// The scenario a [`RankRecord`] of `s` depends on, as a key: `s` with `index_topk` set aside.
pub fn rank_key(s: &Scenario) -> String {
    serde_json::to_string(&Scenario { index_topk: 1, ..s.clone() }).unwrap_or_default()
}

/// Draws a [`RankRecord`]'s trials: [`Plan::trial`]'s draws in its order.
struct RankRecorder<'a> {
    plan: &'a Plan,
}

impl RecordPlan for RankRecorder<'_> {
    type Scratch = Scratch;

    fn chunk(&self) -> u64 {
        CHUNK
    }

    fn stride(&self) -> usize {
        self.plan.rule.layers() as usize + 1
    }

    fn record_trial(&self, rng: &mut Xoshiro256PlusPlus, scratch: &mut Scratch, out: &mut [f64]) {
        let plan = self.plan;
        let rank_of = |z, rng: &mut Xoshiro256PlusPlus, scratch: &mut Scratch| {
            if plan.path == McPath::Materialise {
                plan.rank_materialised(z, rng, scratch)
            } else {
                plan.rank_exact(z, rng)
            }
        };
        plan.layer_ranks(rng, scratch, rank_of, |layer, rank| out[layer as usize] = rank.map_or(-1.0, |r| r as f64));
        // The readout's draw, the trial's last: drawn here even where the outcome is certain
        // (nothing follows it, so no other draw moves).
        out[plan.rule.layers() as usize] = rng.random::<f64>();
    }
}

impl RankRecord {
    /// f64s a record of `trials` trials of the validated scalar scenario `s` holds.
    pub fn values(s: &Scenario, trials: u64) -> u64 {
        (s.selecting_layers() as u64 + 1).saturating_mul(trials)
    }

    /// Runs `trials` trials of the validated scalar scenario `s` on [`McPath::Auto`], seeded from
    /// (seed, i), and keeps every layer's rank. The caller bounds the memory
    /// ([`RankRecord::values`] f64s).
    pub fn new(s: &Scenario, trials: u64, seed: u64) -> Result<RankRecord, NotExact> {
        let plan = Plan::new(s, McPath::Auto)?;
        let records = crate::trials::record(&RankRecorder { plan: &plan }, trials, seed);
        Ok(RankRecord { key: rank_key(s), layers: plan.rule.layers() as usize, trials, records })
    }

    /// The successes and attendance of the recorded trials for `s`: those of
    /// [`simulate`]`(s, trials, seed, McPath::Auto)`, exactly, with the first layer's rank histogram; `None` when `s` differs from the recorded scenario in a
    /// field other than `index_topk`.
    pub fn tally(&self, s: &Scenario) -> Option<Tally> {
        if self.key != rank_key(s) {
            return None;
        }
        let rule = ReadoutRule::new(s, &Geometry::new(s));
        let mut tally = Tally { trials: self.trials, ..Tally::default() };
        let rank = |r: f64| (r >= 0.0).then_some(r as u64);
        for rec in self.records.chunks_exact(self.layers + 1) {
            if self.layers > 0 {
                tally.ranks.record(rank(rec[0]));
            }
            let attending = rec[..self.layers].iter().filter(|&&r| rule.attends(rank(r))).count() as u32;
            rule.conclude_with(attending, || rec[self.layers], &mut tally);
        }
        Some(tally)
    }
}

/// The needle parameters of one scenario of [`RankRecord::for_needles`].
#[derive(Debug, Clone, Copy)]
struct NeedleParams {
    dprime: f64,
    needle_sd: f64,
    layer_corr: f64,
}

/// Per-worker buffers of [`NeedlesRecorder`]: a layer's draws and record, and a needle's
/// pooled blocks.
#[derive(Default)]
struct NeedlesScratch {
    replay: ReplayScratch,
    layer: Vec<f64>,
    hood: Vec<f64>,
}

/// Draws the trials of [`RankRecord::for_needles`]: each layer as a replay records it (every
/// distractor score kept), then the needle's rank at each scenario's parameters.
struct NeedlesRecorder<'a> {
    recorder: Recorder<'a>,
    needles: &'a [NeedleParams],
}

impl RecordPlan for NeedlesRecorder<'_> {
    type Scratch = NeedlesScratch;

    fn chunk(&self) -> u64 {
        CHUNK
    }

    /// Each scenario's [`RankRecord`] trial, one after the other.
    fn stride(&self) -> usize {
        self.needles.len() * (self.recorder.plan.rule.layers() as usize + 1)
    }

    /// [`RankRecorder::record_trial`] for every scenario from one trial's draws: the shared
    /// component, each layer ([`Recorder::draw_layer`], the draws of `rank_materialised` in its
    /// order), the readout's uniform.
    fn record_trial(&self, rng: &mut Xoshiro256PlusPlus, scratch: &mut NeedlesScratch, out: &mut [f64]) {
        let (plan, layout) = (self.recorder.plan, self.recorder.layout);
        let layers = plan.rule.layers() as usize;
        let per = layers + 1;
        let z = if layout.shared { Some(rng.sample::<f64, _>(StandardNormal)) } else { None };
        scratch.layer.resize(layout.layer_len, 0.0);
        scratch.hood.resize(layout.hood.len(), 0.0);
        for layer in 0..layers {
            if plan.geometry.needle_entries.is_empty() {
                for n in 0..self.needles.len() {
                    out[n * per + layer] = -1.0;
                }
                continue;
            }
            // Every score kept: the rank counts all of them, not only those above a guess.
            scratch.replay.scores.guess = None;
            self.recorder.draw_layer(rng, &mut scratch.replay, &mut scratch.layer);
            let scores = &scratch.replay.scores;
            for (n, p) in self.needles.iter().enumerate() {
                let needle = needle_token(p.dprime, p.needle_sd, p.layer_corr, z);
                let y = needle_best(plan, layout, &scratch.layer, needle, &mut scratch.hood);
                // The comparison `rank_materialised` makes, on the scores as drawn.
                let above = scores.buf[..scores.kept].iter().filter(|&&k| order_value(k) > y).count();
                out[n * per + layer] = (1 + above) as f64;
            }
        }
        let u = rng.random::<f64>();
        for n in 0..self.needles.len() {
            out[n * per + layers] = u;
        }
    }
}

impl RankRecord {
    /// The rank records of several validated scalar scenarios that differ only in the needle's
    /// parameters (dprime, needle_sd, layer_corr) and `index_topk`, from one run: each equal to
    /// [`RankRecord::new`] of its scenario, value for value. On the materialising path no draw
    /// depends on those parameters (the distractors' scores and the needle tokens' standard
    /// normals are drawn the same way, and the needle's entries are recomputed from them as a
    /// [`Replay`] does), so one run's distractor scores are counted above each scenario's
    /// needle. `None` when the scenarios differ in another field, run on the exact-sampling path
    /// (whose draws depend on the needle), or disagree on drawing the needle's shared component.
    /// The caller bounds the memory (the sum of their [`RankRecord::values`]).
    pub fn for_needles(ss: &[Scenario], trials: u64, seed: u64) -> Result<Option<Vec<RankRecord>>, NotExact> {
        let Some(first) = ss.first() else { return Ok(Some(Vec::new())) };
        let without_needle =
            |s: &Scenario| rank_key(&Scenario { dprime: 0.0, needle_sd: 1.0, layer_corr: 0.0, ..s.clone() });
        let plan = Plan::new(first, McPath::Auto)?;
        if plan.path != McPath::Materialise {
            return Ok(None);
        }
        let base = without_needle(first);
        for s in &ss[1..] {
            let p = Plan::new(s, McPath::Auto)?;
            if p.path != McPath::Materialise || p.needs_shared() != plan.needs_shared() || without_needle(s) != base {
                return Ok(None);
            }
        }
        let layout = ReplayLayout::new(&plan, 0);
        let needles: Vec<NeedleParams> = ss
            .iter()
            .map(|s| NeedleParams { dprime: s.dprime, needle_sd: s.needle_sd, layer_corr: s.layer_corr })
            .collect();
        let recorder =
            NeedlesRecorder { recorder: Recorder { plan: &plan, layout: &layout, k_effs: &[] }, needles: &needles };
        let all = crate::trials::record(&recorder, trials, seed);
        let layers = plan.rule.layers() as usize;
        let per = layers + 1;
        Ok(Some(
            ss.iter()
                .enumerate()
                .map(|(n, s)| {
                    let mut records = Vec::with_capacity(trials as usize * per);
                    for trial in all.chunks_exact(ss.len() * per) {
                        records.extend_from_slice(&trial[n * per..(n + 1) * per]);
                    }
                    RankRecord { key: rank_key(s), layers, trials, records }
                })
                .collect(),
        ))
    }
}

/// The blocks a needle entry pools, in a replay's layer record.
#[derive(Debug, Clone, Copy)]
struct HoodBlock {
    block: u64,
    /// Whether the block pools a needle token: then its c token draws are recorded (needle tokens
    /// as standard normals), otherwise its pooled statistic.
    touches: bool,
    /// Where its record starts in a layer record.
    offset: usize,
}

/// Where each value of a replay's trial record lies. A trial's record is `[z]` (when the plan
/// draws the needle's shared component), one record per layer (none when no entry covers the
/// needle), then the uniform the readout would draw. A layer's record is, for each k_eff the
/// replay keeps (in [`Replay::k_effs`] order), the k_eff-th largest distractor score (−∞ when
/// every distractor is within k_eff − 1), then, unpooled, the standard normal of each needle
/// entry; pooled, the records of the blocks the needle entries pool ([`HoodBlock`]), then each
/// needle entry's score noise.
#[derive(Debug, Clone)]
struct ReplayLayout {
    /// How many k_eff-th largest scores start a layer record.
    kths: usize,
    shared: bool,
    layer_len: usize,
    stride: usize,
    hood: Vec<HoodBlock>,
    /// Per needle entry: its own block's and (with overlap, i > 0) its previous block's index
    /// in `hood`.
    entries: Vec<(usize, Option<usize>)>,
    /// Where the needle entries' noise starts in a layer record (pooled).
    noise_at: usize,
}

impl ReplayLayout {
    fn new(plan: &Plan, kths: usize) -> ReplayLayout {
        let g = &plan.geometry;
        let e = g.needle_entries.len();
        let mut hood: Vec<HoodBlock> = Vec::new();
        let mut entries = Vec::with_capacity(e);
        let mut at = kths;
        if plan.pooling != Pooling::None {
            // Needle entries are sorted by index, so their blocks arrive in increasing order.
            let pos = |b: u64, hood: &mut Vec<HoodBlock>, at: &mut usize| -> usize {
                if let Some(h) = hood.iter().rposition(|h| h.block == b) {
                    return h;
                }
                let touches = plan.block_span(b).3;
                hood.push(HoodBlock { block: b, touches, offset: *at });
                *at += if touches { plan.compress_ratio as usize } else { 1 };
                hood.len() - 1
            };
            for ne in &g.needle_entries {
                let i = ne.index;
                let prev = plan.pools_previous(i).then(|| pos(i - 1, &mut hood, &mut at));
                let own = pos(i, &mut hood, &mut at);
                entries.push((own, prev));
            }
        }
        let noise_at = at;
        let layer_len = if e == 0 { 0 } else { at + e };
        let shared = plan.needs_shared();
        let stride = shared as usize + plan.rule.layers() as usize * layer_len + 1;
        ReplayLayout { kths, shared, layer_len, stride, hood, entries, noise_at }
    }
}

/// A replay's per-worker buffers.
#[derive(Default)]
pub struct ReplayScratch {
    blocks: Vec<f64>,
    tokens: Vec<f64>,
    scores: KthLargest,
}

/// Builds a [`Replay`]: the materialising plan's trials, drawn into records.
struct Recorder<'a> {
    plan: &'a Plan,
    layout: &'a ReplayLayout,
    /// The k_eff whose k-th largest distractor score each layer record starts with.
    k_effs: &'a [u64],
}

impl Recorder<'_> {
    /// One layer of [`Plan::rank_materialised`], the same draws in the same order, keeping what
    /// does not depend on the needle's parameters (see [`ReplayLayout`]).
    fn record_layer(&self, rng: &mut Xoshiro256PlusPlus, scratch: &mut ReplayScratch, out: &mut [f64]) {
        let start = rng.clone();
        loop {
            self.draw_layer(rng, scratch, out);
            if scratch.scores.kths(self.k_effs, &mut out[..self.k_effs.len()]) {
                return;
            }
            // Fewer than k scores above the guess: the same layer again from the same state of
            // the generator (so the same draws), keeping every score.
            *rng = start.clone();
            scratch.scores.guess = None;
        }
    }

    /// Draws one layer into `out` (all but its threshold) and its distractor scores into
    /// `scratch.scores`.
    fn draw_layer(&self, rng: &mut Xoshiro256PlusPlus, scratch: &mut ReplayScratch, out: &mut [f64]) {
        let (plan, layout) = (self.plan, self.layout);
        let g = &plan.geometry;
        let ReplayScratch { blocks, tokens, scores } = scratch;
        scores.clear(g.n_distractors as usize);
        if plan.pooling == Pooling::None {
            let at = layout.kths;
            for v in &mut out[at..at + g.needle_entries.len()] {
                *v = rng.sample(StandardNormal);
            }
            plan.direct_distractors(rng, |x| scores.push(x));
        } else {
            let n = g.n_candidates as usize;
            blocks.resize(n, 0.0);
            tokens.clear();
            // A block meeting the needle keeps its raw draws (its statistic here is not the
            // needle's: no distractor entry pools it).
            plan.fill_blocks(rng, blocks, |b, rng| {
                plan.block_stat(b, rng, |in_needle, rng| {
                    let v = if in_needle { rng.sample(StandardNormal) } else { plan.token.sample(rng) };
                    tokens.push(v);
                    v
                })
            });
            let mut next_token = tokens.iter();
            for h in &layout.hood {
                if h.touches {
                    for v in &mut out[h.offset..h.offset + plan.compress_ratio as usize] {
                        *v = *next_token.next().expect("tokens holds c draws for each block in plan.touching, which has every hood block that touches");
                    }
                } else {
                    out[h.offset] = blocks[h.block as usize];
                }
            }
            for v in &mut out[layout.noise_at..layout.noise_at + g.needle_entries.len()] {
                *v = plan.noise(rng);
            }
            plan.pooled_distractors(blocks, rng, |x| scores.push(x));
        }
    }
}

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
fn order_value(key: i64) -> f64 {
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
#[derive(Default)]
struct KthLargest {
    /// The `kept` scores as [`order_key`]s, in room for every score of the layer: each is
    /// written at `kept`, which advances only when it is kept (a branch-free filter; a branch
    /// taken for one score in six would mispredict).
    buf: Vec<i64>,
    kept: usize,
    count: usize,
    guess: Option<f64>,
}

impl KthLargest {
    /// Starts a layer of at most `n` scores.
    fn clear(&mut self, n: usize) {
        if self.buf.len() < n {
            self.buf.resize(n, 0);
        }
        self.kept = 0;
        self.count = 0;
    }

    #[inline(always)]
    fn push(&mut self, x: f64) {
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
    fn kths(&mut self, ks: &[u64], out: &mut [f64]) -> bool {
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

impl RecordPlan for Recorder<'_> {
    type Scratch = ReplayScratch;

    fn chunk(&self) -> u64 {
        CHUNK
    }

    fn stride(&self) -> usize {
        self.layout.stride
    }

    /// One trial of [`Plan::trial`] on the materialising path.
    fn record_trial(&self, rng: &mut Xoshiro256PlusPlus, scratch: &mut ReplayScratch, out: &mut [f64]) {
        let mut at = 0;
        if self.layout.shared {
            out[0] = rng.sample(StandardNormal);
            at = 1;
        }
        if !self.plan.geometry.needle_entries.is_empty() {
            for _ in 0..self.plan.rule.layers() {
                let len = self.layout.layer_len;
                self.record_layer(rng, scratch, &mut out[at..at + len]);
                at += len;
            }
        }
        // The readout's draw, the trial's last (drawn here even when the outcome is certain:
        // nothing follows it).
        out[at] = rng.random::<f64>();
    }
}

/// The materialising path's trials, drawn once and replayed at any needle parameters.
///
/// With common random numbers a trial's draws do not depend on `dprime`, `needle_sd`, the
/// value of `layer_corr` (only whether it is 0), `p_read`, `p_guess` or `readout`: a needle
/// token scores mu + sd·Z from a standard normal Z drawn in the same place whatever mu and sd
/// are, and no distractor score involves them. So a replay keeps, per trial and layer, the
/// k_eff-th largest distractor score and the needle entries' own draws (their blocks' raw token
/// draws and their noise, see `ReplayLayout`); [`Replay::tally`] recomputes the needle's
/// best entry score y with the materialising path's own functions (the same floating-point
/// operations in the same order, so the same y bit for bit) and selects the needle when the
/// k_eff-th largest distractor does not exceed y: the hit counts of
/// [`simulate`]`(s, trials, seed, McPath::Materialise)`, exactly, in O(trials × needle tokens)
/// instead of O(trials × N). Building one is a materialising run.
///
/// No draw depends on `index_topk` either (k enters only as k_eff), so a replay can keep each
/// layer's k_eff-th largest distractor score for several k_eff at once ([`Replay::for_topks`]):
/// the rows of a table measured at several k on one length, and the verdict's recall at the
/// kernel maximum, then share one materialising run.
#[derive(Debug)]
pub struct Replay {
    plan: Plan,
    layout: ReplayLayout,
    /// [`replay_key_any_k`] of the replayed scenario.
    key: String,
    /// The k_eff kept, in layer-record order (distinct).
    k_effs: Vec<u64>,
    trials: u64,
    seed: u64,
    records: Vec<f64>,
}

/// The scenario a replay of `s` depends on, as a key: `s` with the fields that change no draw
/// set to fixed values (`dprime`, `needle_sd`, `p_read`, `p_guess`, `diluted_read`, `readout`; `layer_corr`
/// reduced to whether it is positive, which decides whether the shared component is drawn).
/// Every other field stays, so a field added later invalidates a replay by default.
pub fn replay_key(s: &Scenario) -> String {
    let neutral = Scenario {
        dprime: 0.0,
        needle_sd: 1.0,
        p_read: 1.0,
        p_guess: 0.0,
        diluted_read: 0.0,
        readout: crate::scenario::Readout::Any,
        layer_corr: if s.layer_corr > 0.0 { 1.0 } else { 0.0 },
        ..s.clone()
    };
    serde_json::to_string(&neutral).unwrap_or_default()
}

/// [`replay_key`] with `index_topk` set aside too: what a replay kept for several k depends on.
fn replay_key_any_k(s: &Scenario) -> String {
    replay_key(&Scenario { index_topk: 1, ..s.clone() })
}

/// The distinct k_eff of `s` at each k of `topks` (`s`'s own k when `topks` is empty), in order.
fn distinct_k_effs(s: &Scenario, topks: &[u64]) -> Vec<u64> {
    let mut k_effs: Vec<u64> = Vec::with_capacity(topks.len().max(1));
    for &k in if topks.is_empty() { std::slice::from_ref(&s.index_topk) } else { topks } {
        let k_eff = k_eff_at(s, k.max(1));
        if !k_effs.contains(&k_eff) {
            k_effs.push(k_eff);
        }
    }
    k_effs
}

impl Replay {
    /// f64s a replay of `trials` trials of the validated scalar scenario `s` would hold, or `None`
    /// when it cannot be built (the scenario is too large to materialise).
    pub fn values(s: &Scenario, trials: u64) -> Option<u64> {
        Replay::values_for_topks(s, &[s.index_topk], trials)
    }

    /// [`Replay::values`] of [`Replay::for_topks`]`(s, topks, …)`.
    pub fn values_for_topks(s: &Scenario, topks: &[u64], trials: u64) -> Option<u64> {
        let plan = Plan::new(s, McPath::Materialise).ok()?;
        (ReplayLayout::new(&plan, distinct_k_effs(s, topks).len()).stride as u64).checked_mul(trials)
    }

    /// Draws `trials` trials of the validated scalar scenario `s` on the materialising path
    /// (whatever its laws), seeded from (seed, i), and keeps their records. The caller bounds
    /// the memory ([`Replay::values`] f64s).
    pub fn new(s: &Scenario, trials: u64, seed: u64) -> Result<Replay, NotExact> {
        Replay::for_topks(s, &[s.index_topk], trials, seed)
    }

    /// [`Replay::new`] keeping each layer's k_eff-th largest distractor score at every
    /// `index_topk` of `topks` (their k_eff, each once; `s`'s own k when empty): one
    /// materialising run answers `s` at any of these k ([`Replay::values_for_topks`] f64s).
    pub fn for_topks(s: &Scenario, topks: &[u64], trials: u64, seed: u64) -> Result<Replay, NotExact> {
        let plan = Plan::new(s, McPath::Materialise)?;
        let k_effs = distinct_k_effs(s, topks);
        let layout = ReplayLayout::new(&plan, k_effs.len());
        let records = crate::trials::record(&Recorder { plan: &plan, layout: &layout, k_effs: &k_effs }, trials, seed);
        Ok(Replay { plan, layout, key: replay_key_any_k(s), k_effs, trials, seed, records })
    }

    /// Where the k_eff-th largest lies in a layer record for `s`, whose k_eff is `k_eff`, when
    /// `s` is the replayed scenario up to the fields [`replay_key`] sets aside and `index_topk`,
    /// at a k_eff kept.
    fn column(&self, s: &Scenario, k_eff: u64) -> Option<usize> {
        if self.key != replay_key_any_k(s) {
            return None;
        }
        self.k_effs.iter().position(|&k| k == k_eff)
    }

    /// Whether this replay answers for `s` under (trials, seed).
    pub fn applies(&self, s: &Scenario, trials: u64, seed: u64) -> bool {
        self.trials == trials && self.seed == seed && self.column(s, k_eff_at(s, s.index_topk)).is_some()
    }

    /// The `index_topk`-independent k_eff kept (distinct, in record order).
    pub fn k_effs(&self) -> &[u64] {
        &self.k_effs
    }

    /// f64s held.
    pub fn len(&self) -> usize {
        self.records.len()
    }

    /// Whether it holds no values (never: every trial records its readout draw).
    pub fn is_empty(&self) -> bool {
        self.records.is_empty()
    }

    /// The successes and attendance of the replayed trials for `s`: those of
    /// [`simulate`]`(s, trials, seed, McPath::Materialise)`, exactly (the rank histogram is not
    /// kept); `None` when `s` differs from the replayed scenario in a field other than those
    /// [`replay_key`] sets aside and `index_topk`, or has a k_eff the replay did not keep.
    pub fn tally(&self, s: &Scenario) -> Option<Tally> {
        // Only k_eff depends on index_topk (Geometry::new), and the records answer s's.
        let s_geometry = Geometry::new(s);
        let kth_at = self.column(s, s_geometry.k_eff)?;
        let (plan, layout) = (&self.plan, &self.layout);
        let g = &plan.geometry;
        let rule = ReadoutRule::new(s, &s_geometry);
        let mut hood = vec![0.0; layout.hood.len()];
        let mut tally = Tally { trials: self.trials, ..Tally::default() };
        for rec in self.records.chunks_exact(layout.stride) {
            let mut at = 0;
            let z = if layout.shared {
                at = 1;
                Some(rec[0])
            } else {
                None
            };
            let (mu, sd) = needle_token(s.dprime, s.needle_sd, s.layer_corr, z);
            let mut layers_attending = 0u32;
            for _ in 0..rule.layers() {
                let within = if g.needle_entries.is_empty() {
                    None
                } else {
                    let layer = &rec[at..at + layout.layer_len];
                    at += layout.layer_len;
                    let y = needle_best(plan, layout, layer, (mu, sd), &mut hood);
                    Some(!(layer[kth_at] > y))
                };
                layers_attending += rule.attends_within(within) as u32;
            }
            rule.conclude_with(layers_attending, || rec[at], &mut tally);
        }
        Some(tally)
    }
}

/// The needle's best entry score in one layer record of `layout`, with needle tokens
/// Normal(mu, sd²), as `rank_materialised` computes it: unpooled, the needle's entries in
/// order; pooled, [`pooled_needle`].
fn needle_best(plan: &Plan, layout: &ReplayLayout, layer: &[f64], (mu, sd): (f64, f64), hood: &mut [f64]) -> f64 {
    if plan.pooling == Pooling::None {
        let needle_sd = plan.direct_needle_sd(sd);
        layer[layout.kths..].iter().fold(f64::NEG_INFINITY, |y, &x| y.max(mu + needle_sd * x))
    } else {
        pooled_needle(plan, layout, layer, (mu, sd), hood)
    }
}

/// The needle's best entry score in one pooled layer record of `layout`, with needle tokens
/// Normal(mu, sd²): the blocks it pools recomputed token by token, as in
/// `rank_materialised`.
fn pooled_needle(plan: &Plan, layout: &ReplayLayout, layer: &[f64], (mu, sd): (f64, f64), hood: &mut [f64]) -> f64 {
    for (v, h) in hood.iter_mut().zip(&layout.hood) {
        *v = if h.touches {
            let (start, end, spans, _) = plan.block_span(h.block);
            let mut next = layer[h.offset..].iter();
            plan.pool_tokens(start, end, spans, |in_needle| {
                let x = *next.next().expect(
                    "a touching block's record holds its c token draws (ReplayLayout::new) and pool_tokens asks for c",
                );
                if in_needle {
                    mu + sd * x
                } else {
                    x
                }
            })
        } else {
            layer[h.offset]
        };
    }
    let mut y = f64::NEG_INFINITY;
    for (k, &(own, prev)) in layout.entries.iter().enumerate() {
        y = y.max(plan.pooled_entry(hood[own], prev.map(|p| hood[p])) + layer[layout.noise_at + k]);
    }
    y
}

/// The materialising path's trials at every positive score noise, drawn once.
///
/// With noise σ > 0 a pooled entry scores `a + σ·z`: a its pooled statistic (or a hard
/// negative's draw), z the standard normal `Plan::noise_draw` draws in the same place for every
/// σ > 0; no other draw depends on σ. So in each layer every entry's score is a line in σ, the
/// needle's best score y(σ) the upper envelope of its entries' lines, and the needle ranks
/// within k_eff at σ when fewer than k_eff distractor lines lie above the envelope there. A noise
/// replay keeps, per trial and layer, where that answer changes along σ (the *toggles*), and
/// answers any σ > 0 from them: the counts of [`simulate`]`(s at σ, trials, seed,
/// McPath::Materialise)`, exactly.
///
/// No draw depends on `index_topk` either: k enters only as k_eff, the count of lines allowed
/// above the envelope. So one replay keeps each layer's toggles for several k_eff at once
/// ([`NoiseReplay::for_topks`]), the crossings computed and sorted once for all of them: the
/// verdict's two noise searches (at the scenario's k and at the kernel maximum) cost one
/// materialising run, not two.
///
/// Exactly, not nearly: a run compares rounded scores, the toggles come from rounded crossing
/// points, and the two can disagree only within a few ulps of a crossing. Each crossing
/// therefore has a window (a bound on that disagreement, from the rounding-error bounds of
/// `a + σ·z` and of the crossing's division), and each layer keeps the stretches of overlapping
/// windows where the disagreement could reach the answer's boundary (see
/// `noise_layer_record`); a σ in one of them — or a layer whose lines are too close to
/// parallel to bound — is answered by running that trial again at σ. A verdict's noise search
/// costs one materialising run (and the record's sorting) instead of one per value.
#[derive(Debug)]
pub struct NoiseReplay {
    key: String,
    /// The k_eff each layer record answers, in record order (distinct).
    k_effs: Vec<u64>,
    trials: u64,
    seed: u64,
    values: Vec<f64>,
    starts: Vec<usize>,
}

/// The scenario a [`NoiseReplay`] of `s` depends on: `s` with `score_noise` (any positive value
/// answers) and `index_topk` (the replay keeps the k_eff it answers) set aside.
pub fn noise_replay_key(s: &Scenario) -> String {
    serde_json::to_string(&Scenario { score_noise: 1.0, index_topk: 1, ..s.clone() }).unwrap_or_default()
}

/// The effective k of `s` at `index_topk` = k (its geometry's `k_eff`: the kernel's floor and
/// the candidate count applied).
fn k_eff_at(s: &Scenario, k: u64) -> u64 {
    Geometry::new(&Scenario { index_topk: k, ..s.clone() }).k_eff
}

/// A layer record's first value when its trial must be run again at every σ.
const RERUN: f64 = 2.0;

/// Builds a [`NoiseReplay`]: [`Plan::rank_materialised`]'s draws, kept as lines in σ.
struct NoiseRecorder<'a> {
    plan: &'a Plan,
    /// k_eff − 1 for each k_eff recorded: the most lines allowed above the envelope.
    belows: &'a [i64],
}

/// A noise recorder's per-worker buffers.
#[derive(Default)]
struct NoiseScratch {
    blocks: Vec<f64>,
    needle: Vec<(f64, f64)>,
    lines: Vec<(f64, f64)>,
    crossings: CrossingScratch,
}

/// [`noise_layer_record`]'s buffers: the crossings (point, window half-width, change of the
/// count) and the clusters of their windows.
#[derive(Default)]
struct CrossingScratch {
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

impl VarRecordPlan for NoiseRecorder<'_> {
    type Scratch = NoiseScratch;

    fn chunk(&self) -> u64 {
        CHUNK
    }

    /// [`Plan::trial`]'s draws on the materialising path, in its order: the shared component,
    /// each layer's blocks, needle entries' noise and distractors, then the readout's uniform.
    fn record_trial(&self, rng: &mut Xoshiro256PlusPlus, scratch: &mut NoiseScratch, out: &mut Vec<f64>) {
        let plan = self.plan;
        let g = &plan.geometry;
        let z = if plan.needs_shared() { Some(rng.sample::<f64, _>(StandardNormal)) } else { None };
        if !g.needle_entries.is_empty() {
            let (mu, sd) = needle_token(plan.dprime, plan.needle_sd, plan.rho, z);
            for _ in 0..plan.rule.layers() {
                let NoiseScratch { blocks, needle, lines, crossings } = scratch;
                plan.draw_blocks((mu, sd), rng, blocks);
                needle.clear();
                for e in &g.needle_entries {
                    let i = e.index;
                    let a =
                        plan.pooled_entry(blocks[i as usize], plan.pools_previous(i).then(|| blocks[i as usize - 1]));
                    needle.push((a, plan.noise_draw(rng)));
                }
                lines.clear();
                plan.pooled_distractor_terms(blocks, rng, |a, z| lines.push((a, z)));
                noise_layer_record(needle, lines, self.belows, crossings, out);
            }
        }
        // The readout's draw, the trial's last (drawn even when the outcome is certain).
        out.push(rng.random::<f64>());
    }
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
fn noise_layer_record(
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
fn noise_layer_part(rec: &[f64], at: usize, sigma: f64) -> (bool, bool, usize) {
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
fn skip_noise_layer_part(rec: &[f64], at: usize) -> usize {
    let at = at + 2 + rec[at + 1] as usize;
    at + 1 + 2 * rec[at] as usize
}

impl NoiseReplay {
    /// Whether a noise replay answers `s` (a pooled scenario with positive score noise on the
    /// materialising path) at all.
    pub fn covers(s: &Scenario) -> bool {
        s.pooling != Pooling::None && s.score_noise > 0.0 && materialises(s)
    }

    /// Draws `trials` trials of the validated scalar scenario `s` (pooled, score noise > 0) on
    /// the materialising path, seeded from (seed, i), and keeps each layer's toggles at its k.
    pub fn new(s: &Scenario, trials: u64, seed: u64) -> Result<NoiseReplay, NotExact> {
        NoiseReplay::for_topks(s, &[s.index_topk], trials, seed)
    }

    /// [`NoiseReplay::new`] keeping each layer's toggles at every `index_topk` of `topks` (their
    /// k_eff, each once): one materialising run answers `s` at any positive noise and any of
    /// these k.
    pub fn for_topks(s: &Scenario, topks: &[u64], trials: u64, seed: u64) -> Result<NoiseReplay, NotExact> {
        if s.pooling == Pooling::None || !(s.score_noise > 0.0) {
            return Err(NotExact("a noise replay needs pooled entries and score noise > 0".into()));
        }
        let plan = Plan::new(s, McPath::Materialise)?;
        let k_effs = distinct_k_effs(s, topks);
        let belows: Vec<i64> = k_effs.iter().map(|&k| k as i64 - 1).collect();
        let (values, starts) = crate::trials::record_var(&NoiseRecorder { plan: &plan, belows: &belows }, trials, seed);
        Ok(NoiseReplay { key: noise_replay_key(s), k_effs, trials, seed, values, starts })
    }

    /// Whether this replay answers for `s` under (trials, seed).
    pub fn applies(&self, s: &Scenario, trials: u64, seed: u64) -> bool {
        self.trials == trials
            && self.seed == seed
            && s.score_noise > 0.0
            && self.key == noise_replay_key(s)
            && self.k_effs.contains(&Geometry::new(s).k_eff)
    }

    /// f64s held.
    pub fn len(&self) -> usize {
        self.values.len() + self.starts.len()
    }

    /// Whether it holds no values (never: every trial records its readout draw).
    pub fn is_empty(&self) -> bool {
        self.values.is_empty()
    }

    /// The successes and attendance of the trials for `s` (the replayed scenario at another
    /// score noise > 0) and how many trials were run again: those of [`simulate`]`(s, trials,
    /// seed, McPath::Materialise)`, exactly (the rank histogram is not kept); `None` when `s`
    /// differs from the replayed scenario in a field other than `score_noise` and `index_topk`,
    /// has no noise, or has a k_eff the replay did not keep.
    pub fn tally_counted(&self, s: &Scenario) -> Option<(Tally, u64)> {
        if !(s.score_noise > 0.0) || self.key != noise_replay_key(s) {
            return None;
        }
        let sigma = s.score_noise;
        let g = Geometry::new(s);
        let part = self.k_effs.iter().position(|&k| k == g.k_eff)?;
        let rule = ReadoutRule::new(s, &g);
        let mut tally = Tally { trials: self.trials, ..Tally::default() };
        // Trials to run again, run after the pass in parallel: each is a whole materialising
        // trial (at Quest's 64K tokens, 30 layers of 4096 pages), and their counts add.
        let mut again_at: Vec<u64> = Vec::new();
        for (i, bounds) in self.starts.windows(2).enumerate() {
            let rec = &self.values[bounds[0]..bounds[1]];
            let mut at = 0;
            let mut attending = 0u32;
            let mut again = false;
            if !g.needle_entries.is_empty() {
                for _ in 0..rule.layers() {
                    if rec[at] == RERUN {
                        at += 1;
                        again = true;
                        continue;
                    }
                    for j in 0..self.k_effs.len() {
                        if j == part {
                            let (within, near, end) = noise_layer_part(rec, at, sigma);
                            again |= near;
                            attending += rule.attends_within(Some(within)) as u32;
                            at = end;
                        } else {
                            at = skip_noise_layer_part(rec, at);
                        }
                    }
                }
            } else {
                attending = (0..rule.layers()).map(|_| rule.attends_within(None) as u32).sum();
            }
            if again {
                again_at.push(i as u64);
            } else {
                rule.conclude_with(attending, || rec[at], &mut tally);
            }
        }
        if !again_at.is_empty() {
            use rayon::prelude::*;
            // The key matched: s is the recorded scenario but for score_noise and index_topk, which
            // leave the candidate count (the only way Plan::new can fail here) as it was.
            let plan = Plan::new(s, McPath::Materialise)
                .expect("the recorded scenario's plan was built by NoiseReplay::for_topks");
            let (successes, attended) = again_at
                .par_iter()
                .map_init(Scratch::default, |scratch, &i| {
                    let mut one = Tally::default();
                    plan.trial(&mut trial_rng(self.seed, i), scratch, &mut one, |z, rng, scratch| {
                        plan.rank_materialised(z, rng, scratch)
                    });
                    (one.successes, one.attended)
                })
                .reduce(|| (0, 0), |a, b| (a.0 + b.0, a.1 + b.1));
            tally.successes += successes;
            tally.attended += attended;
        }
        Some((tally, again_at.len() as u64))
    }

    /// [`NoiseReplay::tally_counted`]'s tally.
    pub fn tally(&self, s: &Scenario) -> Option<Tally> {
        self.tally_counted(s).map(|t| t.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scenario::{Distractor, Readout};

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

    /// A layer whose guess keeps fewer than k scores is drawn again from the same generator
    /// state: its record is the one drawn without a guess.
    #[test]
    fn a_missed_guess_redraws_the_same_layer() {
        let s = Scenario {
            context_len: 2000,
            pooling: Pooling::Mean,
            index_topk: 100,
            ..Scenario::preset("deepseek-v4-flash").unwrap()
        };
        let plan = Plan::new(&s, McPath::Materialise).unwrap();
        let layout = ReplayLayout::new(&plan, 1);
        let rec = Recorder { plan: &plan, layout: &layout, k_effs: &[plan.geometry.k_eff] };
        for i in 0..20 {
            let mut plain = vec![0.0; layout.stride];
            let mut missed = vec![0.0; layout.stride];
            rec.record_trial(&mut trial_rng(9, i), &mut ReplayScratch::default(), &mut plain);
            let mut scratch = ReplayScratch::default();
            scratch.scores.guess = Some(f64::INFINITY);
            rec.record_trial(&mut trial_rng(9, i), &mut scratch, &mut missed);
            assert_eq!(plain, missed);
            assert!(scratch.scores.guess.is_some_and(f64::is_finite));
        }
    }

    /// One run's ranks answer every k: the rank record's tally at k equals a run at k, counts and
    /// first-layer histogram alike, on materialising and exact paths, one layer and stacks.
    /// One run's records for several needles are each needle's own record, value for value;
    /// scenarios that differ elsewhere, or run on the exact-sampling path, are refused.
    #[test]
    fn rank_records_for_several_needles_are_each_needles_own() {
        let v4 = Scenario { context_len: 3000, ..Scenario::preset("deepseek-v4-flash").unwrap() };
        let needles = [(1.5, 1.0, 0.9), (-0.5, 1.0, 0.9), (3.0, 0.5, 0.2), (1.0, 2.0, 0.99)];
        let cases = [
            ("mean pooling with overlap, 21 layers", Scenario { pooling: Pooling::Mean, ..v4.clone() }),
            (
                "max pooling with noise, at least 2 of 3",
                Scenario {
                    pooling: Pooling::Max,
                    score_noise: 0.4,
                    layers: 3,
                    readout: Readout::AtLeast(2),
                    ..v4.clone().one_layer()
                },
            ),
            (
                "unpooled student-t with noise",
                Scenario {
                    pooling: Pooling::None,
                    distractor: Distractor::StudentT(4.0),
                    score_noise: 0.3,
                    layers: 2,
                    ..v4.clone().one_layer()
                },
            ),
            (
                "unpooled normal: exact sampling",
                Scenario { pooling: Pooling::None, layers: 2, ..v4.clone().one_layer() },
            ),
        ];
        for (name, base) in cases {
            let ss: Vec<Scenario> = needles
                .iter()
                .map(|&(dprime, needle_sd, layer_corr)| Scenario { dprime, needle_sd, layer_corr, ..base.clone() })
                .collect();
            for s in &ss {
                s.validate().unwrap();
            }
            let plan = Plan::new(&ss[0], McPath::Auto).unwrap();
            let together = RankRecord::for_needles(&ss, 200, 9).unwrap();
            assert_eq!(plan.path == McPath::Exact, name.contains("exact"), "{name}: {:?}", plan.path);
            if plan.path != McPath::Materialise {
                assert!(together.is_none(), "{name}: the exact path's draws depend on the needle");
                continue;
            }
            let together = together.unwrap_or_else(|| panic!("{name}: one run serves these needles"));
            assert_eq!(together.len(), ss.len());
            for (s, r) in ss.iter().zip(&together) {
                let alone = RankRecord::new(s, 200, 9).unwrap();
                assert_eq!(
                    (r.key.as_str(), r.layers, r.trials),
                    (alone.key.as_str(), alone.layers, alone.trials),
                    "{name}"
                );
                assert_eq!(r.records, alone.records, "{name}: {s:?}");
            }
            // Another length is another set of draws.
            let other = [ss[0].clone(), Scenario { context_len: 3001, ..ss[1].clone() }];
            assert!(RankRecord::for_needles(&other, 200, 9).unwrap().is_none(), "{name}");
        }
    }

    #[test]
    fn a_rank_record_equals_a_run_at_every_k() {
        let v4 = Scenario::preset("deepseek-v4-flash").unwrap();
        let scenarios = [
            Scenario { context_len: 3000, pooling: Pooling::Mean, ..v4.clone() },
            Scenario {
                context_len: 3000,
                pooling: Pooling::Mean,
                layer_corr: 0.5,
                p_read: 0.9,
                p_guess: 0.1,
                ..v4.clone()
            },
            Scenario { context_len: 3000, pooling: Pooling::Max, overlap: false, score_noise: 0.3, ..v4.clone() },
            Scenario { context_len: 3000, readout: Readout::All, ..v4 },
            Scenario { context_len: 1 << 14, index_topk: 64, dprime: 2.0, ..Scenario::default() },
        ];
        for s in &scenarios {
            s.validate().unwrap();
            let record = RankRecord::new(s, 300, 5).unwrap();
            for k in [1, 7, 64, 512, 700, 5000] {
                let at_k = Scenario { index_topk: k, ..s.clone() };
                assert_eq!(record.tally(&at_k), Some(simulate(&at_k, 300, 5, McPath::Auto).unwrap()), "{s:?} k {k}");
            }
            assert_eq!(record.tally(&Scenario { dprime: s.dprime + 1.0, ..s.clone() }), None);
        }
    }

    /// The blocks drawn outside the runs' loop are exactly those that meet the needle.
    #[test]
    fn touching_blocks_are_the_blocks_that_meet_the_needle() {
        let v4 = Scenario::preset("deepseek-v4-flash").unwrap();
        for s in [
            Scenario { context_len: 3001, pooling: Pooling::Mean, needle_tokens: 9, ..v4.clone() },
            Scenario { context_len: 5000, pooling: Pooling::Max, repeat: 8, needle_tokens: 3, ..v4.clone() },
            Scenario { context_len: 777, pooling: Pooling::Mean, depth: 1.0, needle_tokens: 5, ..v4 },
        ] {
            s.validate().unwrap();
            let plan = Plan::new(&s, McPath::Materialise).unwrap();
            let by_span: Vec<u64> = (0..plan.geometry.n_candidates).filter(|&b| plan.block_span(b).3).collect();
            assert_eq!(plan.touching, by_span, "{s:?}");
            assert!(!by_span.is_empty());
        }
    }

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

    /// A noise level in a kept cluster runs its trials again, and the counts stay the run's.
    #[test]
    fn a_noise_level_on_a_crossing_runs_the_trial_again() {
        let s = Scenario {
            context_len: 1200,
            score_noise: 0.5,
            index_topk: 4,
            dprime: 1.0,
            ..Scenario::preset("quest-16").unwrap()
        };
        s.validate().unwrap();
        let replay = NoiseReplay::new(&s, 100, 4).unwrap();
        // The centre of the first kept cluster at σ > 0 of any trial's layer.
        let mut sigma = None;
        for bounds in replay.starts.windows(2) {
            let rec = &replay.values[bounds[0]..bounds[1]];
            let mut at = 0;
            for _ in 0..s.selecting_layers() {
                if rec[at] == RERUN {
                    at += 1;
                    continue;
                }
                let toggles = rec[at + 1] as usize;
                let kept = rec[at + 2 + toggles] as usize;
                let ends = &rec[at + 3 + toggles..at + 3 + toggles + 2 * kept];
                sigma = sigma.or(ends.chunks_exact(2).map(|k| 0.5 * (k[0] + k[1])).find(|&x| x > 0.0));
                at = skip_noise_layer_part(rec, at);
            }
        }
        let sigma = sigma.expect("a kept cluster");
        let at = Scenario { score_noise: sigma, ..s.clone() };
        let (tally, reruns) = replay.tally_counted(&at).unwrap();
        assert!(reruns >= 1);
        let run = simulate(&at, 100, 4, McPath::Materialise).unwrap();
        assert_eq!((tally.successes, tally.attended), (run.successes, run.attended));
    }

    /// Batching is a schedule, not a different sampler: every trial's draws and outcome are those
    /// of running it alone, so the counts must be identical, not merely close.
    #[test]
    fn batched_trials_equal_trials_run_one_by_one() {
        let base = Scenario { context_len: 1 << 16, index_topk: 256, ..Scenario::default() };
        let scenarios = [
            base.clone(),
            Scenario { dprime: 4.5, ..base.clone() }, // mostly inversion (n·p < 10)
            Scenario { dprime: 1.0, ..base.clone() }, // mostly BTRS
            Scenario { hard_negatives: 40.0, hard_mean: 2.5, ..base.clone() },
            Scenario { compress_ratio: 4, pooling: Pooling::Mean, needle_tokens: 6, ..base.clone() },
            Scenario { compress_ratio: 4, pooling: Pooling::Max, ..base.clone() },
            Scenario { distractor: Distractor::Gumbel, score_noise: 0.0, ..base.clone() },
            Scenario { repeat: 3, ..base.clone() },
            Scenario { p_read: 0.9, p_guess: 0.05, ..base.clone() },
            Scenario { window: 40_000, depth: 0.9, ..base.clone() },
            Scenario { readout: Readout::All, ..base.clone() },
        ];
        let mut batched_scenarios = 0;
        for s in &scenarios {
            s.validate().unwrap();
            let plan = Plan::new(s, McPath::Exact).unwrap();
            assert_eq!(plan.path, McPath::Exact);
            batched_scenarios += plan.batchable() as u32;
            // A range that starts mid-batch and ends with a partial batch.
            let range = 5..5 + 7 * BATCH as u64 + 3;
            let (mut batched, mut alone) = (Tally::default(), Tally::default());
            plan.run_trials(42, range.clone(), &mut Scratch::default(), &mut batched);
            plan.run_one_by_one(42, range, &mut Scratch::default(), &mut alone);
            assert_eq!(
                (batched.successes, batched.attended, &batched.ranks),
                (alone.successes, alone.attended, &alone.ranks),
                "{s:?}"
            );
        }
        assert!(batched_scenarios >= 10, "only {batched_scenarios} scenarios took the batched path");
    }
}
