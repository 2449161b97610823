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
//!   trials run [`BATCH`] at a time (`Plan::exact_batched`) with results identical to running
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
use crate::scores::{needle_token, EntryLaw, NotExact, ScoreModel, TokenLaw};
use crate::trials::{trial_rng, ReadoutRule, Tally, TrialPlan};
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

/// What one trial of a scalar run of `s` on `path` draws, in work units, and what the units
/// count; or why the run would have to materialise too many candidates. One geometry and one
/// score model serve both checks.
pub fn trial_work(s: &Scenario, path: McPath) -> Result<(u64, &'static str), String> {
    let g = Geometry::new(s);
    let model = ScoreModel::new(s, &g);
    if let Some(why) = materialise_limit(s, &g, path, &model) {
        return Err(why);
    }
    let layers = s.layers as u64;
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
    dprime: f64,
    needle_sd: f64,
    rho: f64,
    noise: f64,
    hard_mean: f64,
    rule: ReadoutRule,
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
    fn trial<F>(&self, rng: &mut Xoshiro256PlusPlus, scratch: &mut Scratch, tally: &mut Tally, mut rank_of: F)
    where
        F: FnMut(Option<f64>, &mut Xoshiro256PlusPlus, &mut Scratch) -> u64,
    {
        let z = if self.needs_shared() { Some(rng.sample::<f64, _>(StandardNormal)) } else { None };
        let g = &self.geometry;
        let mut layers_attending = 0u32;
        for layer in 0..self.rule.layers() {
            let rank = if g.needle_entries.is_empty() { None } else { Some(rank_of(z, rng, scratch)) };
            if layer == 0 {
                tally.ranks.record(rank);
            }
            layers_attending += self.rule.attends(rank) as u32;
        }
        self.rule.conclude(layers_attending, rng, tally);
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
        let m = self.model.as_ref().expect("exact path needs closed-form laws");
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
        let m = self.model.as_ref().expect("exact path needs closed-form laws");
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

    /// Draws the pooled statistic (sum or max) of block `b`'s tokens, needle tokens included.
    fn block_stat<R: Rng + ?Sized>(&self, b: u64, needle: (f64, f64), rng: &mut R) -> f64 {
        let c = self.compress_ratio;
        let (start, end) = (b * c, b * c + c);
        let max = self.pooling == Pooling::Max;
        // The spans are sorted and disjoint: the first that ends after `start` is the only
        // candidate to meet the block (bisection, not a scan of every copy).
        let from = self.needle_spans.partition_point(|&(_, e)| e <= start);
        let spans = &self.needle_spans[from..];
        let touches_needle = spans.first().is_some_and(|&(a, _)| a < end);
        if !touches_needle {
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
        let mut acc = if max { f64::NEG_INFINITY } else { 0.0 };
        for t in start..end {
            let in_needle = spans.iter().take_while(|&&(a, _)| a < end).any(|&(a, e)| t >= a && t < e);
            let x = if in_needle {
                needle.0 + needle.1 * rng.sample::<f64, _>(StandardNormal)
            } else {
                self.token.sample(rng)
            };
            acc = if max { acc.max(x) } else { acc + x };
        }
        acc
    }

    /// Materialising: draws every candidate's score and counts those above the needle's best.
    fn rank_materialised(&self, z: Option<f64>, rng: &mut Xoshiro256PlusPlus, scratch: &mut Scratch) -> u64 {
        let g = &self.geometry;
        let (mu, sd) = needle_token(self.dprime, self.needle_sd, self.rho, z);
        let n = g.n_candidates;
        let hard = g.hard_negatives;
        let normal_fast = self.token.is_normal();
        if self.pooling == Pooling::None {
            // Entries draw their scores directly; the needle's entries first.
            let needle_sd = (sd * sd + self.noise * self.noise).sqrt();
            let mut y = f64::NEG_INFINITY;
            for _ in &g.needle_entries {
                y = y.max(mu + needle_sd * rng.sample::<f64, _>(StandardNormal));
            }
            let mut count = 0u64;
            for _ in 0..hard {
                let x = self.hard_mean + rng.sample::<f64, _>(StandardNormal) + self.noise(rng);
                count += (x > y) as u64;
            }
            let rest = g.n_distractors - hard;
            if normal_fast {
                // Normal token plus normal noise is one normal draw.
                let s = (1.0 + self.noise * self.noise).sqrt();
                for _ in 0..rest {
                    let x: f64 = rng.sample(StandardNormal);
                    count += (s * x > y) as u64;
                }
            } else {
                for _ in 0..rest {
                    let x = self.token.sample(rng) + self.noise(rng);
                    count += (x > y) as u64;
                }
            }
            return 1 + count;
        }
        // Pooled entries: one statistic per block, then entries from one or two blocks.
        scratch.blocks.resize(n as usize, 0.0);
        for b in 0..n {
            scratch.blocks[b as usize] = self.block_stat(b, (mu, sd), rng);
        }
        let entry = |i: u64, blocks: &[f64]| -> f64 {
            let own = blocks[i as usize];
            let (stat, size) = if self.overlap && i > 0 {
                let prev = blocks[i as usize - 1];
                (if self.pooling == Pooling::Max { own.max(prev) } else { own + prev }, 2 * self.compress_ratio)
            } else {
                (own, self.compress_ratio)
            };
            if self.pooling == Pooling::Mean {
                stat / size as f64
            } else {
                stat
            }
        };
        let mut y = f64::NEG_INFINITY;
        for e in &g.needle_entries {
            y = y.max(entry(e.index, &scratch.blocks) + self.noise(rng));
        }
        let mut count = 0u64;
        let mut hard_left = hard;
        let mut next_needle = g.needle_entries.iter().map(|e| e.index).peekable();
        for i in 0..n {
            if next_needle.peek() == Some(&i) {
                next_needle.next();
                continue;
            }
            // The first `hard` non-needle entries are the hard negatives.
            let x = if hard_left > 0 {
                hard_left -= 1;
                self.hard_mean + rng.sample::<f64, _>(StandardNormal)
            } else {
                entry(i, &scratch.blocks)
            } + self.noise(rng);
            count += (x > y) as u64;
        }
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
        let plan = Plan {
            path,
            rule: ReadoutRule::new(s, &geometry),
            fixed_needle_laws,
            needle_spans: geometry.needle_spans(s.needle_tokens),
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
                self.trial(&mut trial_rng(seed, i), scratch, tally, |z, rng, scratch| self.rank_materialised(z, rng, scratch));
            }
        } else if self.batchable() {
            self.exact_batched(seed, range, tally);
        } else {
            self.run_one_by_one(seed, range, scratch, tally);
        }
    }
}

/// [`simulate`], reporting each finished chunk of trials to `progress`.
pub fn simulate_observed(s: &Scenario, trials: u64, seed: u64, path: McPath, progress: &dyn Progress) -> Result<Tally, NotExact> {
    Ok(crate::trials::run(&Plan::new(s, path)?, trials, seed, progress))
}


#[cfg(test)]
mod tests {
    use super::*;
    use crate::scenario::{Distractor, Readout};

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
