//! Monte Carlo trials, shared by the scalar engine ([`crate::engine::montecarlo`]) and the vector
//! model ([`crate::indexer`]): the generator of each trial (`trial_rng`), the counts a run
//! accumulates ([`Tally`]), the readout rule that turns a trial's layers into an answer
//! (`ReadoutRule`), and the one driver ([`run`]) that runs any [`TrialPlan`]'s trials in
//! parallel and reports their progress.
//!
//! Trial i draws only from its own generator, seeded from (seed, i) with the portable
//! Xoshiro256++ (rand_xoshiro), and per-chunk results are integer counts merged by addition, so
//! a run's result is identical for any thread count, any schedule and any rerun.

pub(crate) mod histogram;

use crate::geometry::Geometry;
use crate::progress::Progress;
use crate::scenario::{Readout, Scenario};
use histogram::RankHistogram;
use rand::{Rng, SeedableRng};
use rand_xoshiro::Xoshiro256PlusPlus;
use rayon::prelude::*;
use std::ops::Range;

/// The generator of trial `i` under `seed`: portable, independent of threads and of other trials.
#[inline]
pub(crate) fn trial_rng(seed: u64, i: u64) -> Xoshiro256PlusPlus {
    // seed_from_u64 expands its argument through SplitMix64 into the 256-bit state; one more
    // SplitMix64 of the seed keeps (seed, i) and (seed', i') streams apart.
    Xoshiro256PlusPlus::seed_from_u64(splitmix64(seed) ^ i)
}

#[inline]
fn splitmix64(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

/// The counts of a run of trials. Integers only, merged by addition: the merge order (the
/// thread schedule) cannot change them.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Tally {
    /// Trials run.
    pub trials: u64,
    /// Trials that succeeded (answered correctly).
    pub successes: u64,
    /// Trials in which the needle was attended by enough layers.
    pub attended: u64,
    /// The needle's rank in the first layer, over trials.
    pub ranks: RankHistogram,
}

impl Tally {
    /// Adds another run's counts.
    pub(crate) fn merge(&mut self, other: &Tally) {
        self.trials += other.trials;
        self.successes += other.successes;
        self.attended += other.attended;
        self.ranks.merge(&other.ranks);
    }
}

/// A prepared model whose Monte Carlo trials [`run`] drives: the scalar engine's plan and the
/// vector model implement it.
pub trait TrialPlan: Sync {
    /// Per-worker buffers, reused across the trials of one worker.
    type Scratch: Default + Send;
    /// Trials per parallel work item (scheduling only: never the results).
    fn chunk(&self) -> u64;
    /// Runs trials `range`, trial i drawing only from `trial_rng``(seed, i)`, and adds their
    /// successes, attendance and first-layer ranks to `tally` (not `tally.trials`: the driver
    /// counts those).
    fn run_trials(&self, seed: u64, range: Range<u64>, scratch: &mut Self::Scratch, tally: &mut Tally);
}

/// Runs trials `0..trials` of `plan` on the current rayon pool, chunk by chunk, reporting each
/// finished chunk to `progress` (but neither starting nor finishing it: the caller frames the
/// computation). Identical results for any thread count.
pub fn run<P: TrialPlan>(plan: &P, trials: u64, seed: u64, progress: &dyn Progress) -> Tally {
    let chunk = plan.chunk().max(1);
    let chunks = trials.div_ceil(chunk);
    (0..chunks)
        .into_par_iter()
        .fold(
            || (Tally::default(), P::Scratch::default()),
            |(mut tally, mut scratch), c| {
                let range = c * chunk..((c + 1) * chunk).min(trials);
                let n = range.end - range.start;
                plan.run_trials(seed, range, &mut scratch, &mut tally);
                tally.trials += n;
                progress.advance(n);
                (tally, scratch)
            },
        )
        .map(|(tally, _)| tally)
        .reduce(Tally::default, |mut a, b| {
            a.merge(&b);
            a
        })
}

/// A prepared model whose trials [`record`] draws once into fixed-size records of f64s, for a
/// later pass to replay without drawing again (the scalar engine's [`Replay`]: the distractor
/// side of a materialising run, replayed at any needle parameters).
///
/// [`Replay`]: crate::engine::montecarlo::Replay
pub(crate) trait RecordPlan: Sync {
    /// Per-worker buffers, reused across the trials of one worker.
    type Scratch: Default + Send;
    /// Trials per parallel work item (scheduling only: never the records).
    fn chunk(&self) -> u64;
    /// f64s in one trial's record.
    fn stride(&self) -> usize;
    /// Draws one trial from `rng` (its [`trial_rng`]) and writes its record to `out` (`stride`
    /// values).
    fn record_trial(&self, rng: &mut Xoshiro256PlusPlus, scratch: &mut Self::Scratch, out: &mut [f64]);
}

/// The records of trials `0..trials` of `plan`, trial i's at `i * stride` and drawn only from
/// [`trial_rng`]`(seed, i)`: chunks in parallel on the current rayon pool like [`run`], each
/// trial writing its own slots, so the records are identical for any thread count.
pub(crate) fn record<P: RecordPlan>(plan: &P, trials: u64, seed: u64) -> Vec<f64> {
    let stride = plan.stride();
    let chunk = plan.chunk().max(1);
    let mut out = vec![0.0; (trials as usize) * stride];
    if stride == 0 {
        return out;
    }
    out.par_chunks_mut(chunk as usize * stride).enumerate().for_each_init(P::Scratch::default, |scratch, (c, buf)| {
        for (j, slot) in buf.chunks_mut(stride).enumerate() {
            let i = c as u64 * chunk + j as u64;
            plan.record_trial(&mut trial_rng(seed, i), scratch, slot);
        }
    });
    out
}

/// A prepared model whose trials [`record_var`] draws once into records of any length (the
/// scalar engine's [`NoiseReplay`]: a trial's record is as long as its layers' answers need).
///
/// [`NoiseReplay`]: crate::engine::montecarlo::NoiseReplay
pub(crate) trait VarRecordPlan: Sync {
    /// Per-worker buffers, reused across the trials of one worker.
    type Scratch: Default + Send;
    /// Trials per parallel work item (scheduling only: never the records).
    fn chunk(&self) -> u64;
    /// Draws one trial from `rng` (its [`trial_rng`]) and appends its record to `out`.
    fn record_trial(&self, rng: &mut Xoshiro256PlusPlus, scratch: &mut Self::Scratch, out: &mut Vec<f64>);
}

/// The records of trials `0..trials` of `plan` and where each starts: trial i's record is
/// `values[starts[i]..starts[i + 1]]`, drawn only from [`trial_rng`]`(seed, i)`; chunks in
/// parallel, joined in trial order, so the records are identical for any thread count.
pub(crate) fn record_var<P: VarRecordPlan>(plan: &P, trials: u64, seed: u64) -> (Vec<f64>, Vec<usize>) {
    let chunk = plan.chunk().max(1);
    let chunks: Vec<(Vec<f64>, Vec<usize>)> = (0..trials.div_ceil(chunk))
        .into_par_iter()
        .map_init(P::Scratch::default, |scratch, c| {
            let (mut values, mut ends) = (Vec::new(), Vec::new());
            for i in c * chunk..((c + 1) * chunk).min(trials) {
                plan.record_trial(&mut trial_rng(seed, i), scratch, &mut values);
                ends.push(values.len());
            }
            (values, ends)
        })
        .collect();
    let mut values = Vec::with_capacity(chunks.iter().map(|c| c.0.len()).sum());
    let mut starts = Vec::with_capacity(trials as usize + 1);
    starts.push(0);
    for (v, ends) in chunks {
        let base = values.len();
        starts.extend(ends.iter().map(|e| base + e));
        values.extend_from_slice(&v);
    }
    (values, starts)
}

/// The readout rule of every Monte Carlo trial, scalar or vector: a layer attends the needle
/// when it lies in the window or sink or ranks within the effective k; the trial's layers
/// attend it when the scenario's [`Readout`] is met; the answer is then correct with
/// probability `p_read` (attended) or `p_guess` (not).
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct ReadoutRule {
    always_attended: bool,
    k_eff: u64,
    layers: u32,
    readout: Readout,
    p_read: f64,
    /// P(correct | the selecting layers miss): p_guess, or a non-selecting layer's delivery.
    p_guess: f64,
}

impl ReadoutRule {
    /// The rule of a scenario with its resolved geometry.
    pub(crate) fn new(s: &Scenario, g: &Geometry) -> ReadoutRule {
        ReadoutRule {
            always_attended: g.always_attended,
            k_eff: g.k_eff,
            layers: s.selecting_layers(),
            readout: s.readout,
            p_read: s.p_read,
            p_guess: g.p_unselected(s.p_read, s.p_guess),
        }
    }

    /// Indexer layers per trial.
    #[inline(always)]
    pub(crate) fn layers(&self) -> u32 {
        self.layers
    }

    /// Whether a layer with the needle at `rank` (`None`: in no entry) attends it.
    #[inline(always)]
    pub(crate) fn attends(&self, rank: Option<u64>) -> bool {
        self.attends_within(rank.map(|r| r <= self.k_eff))
    }

    /// Whether a layer attends the needle when `within` says whether it ranks within the
    /// effective k (`None`: in no entry): for a replay that knows that but not the rank.
    #[inline(always)]
    pub(crate) fn attends_within(&self, within: Option<bool>) -> bool {
        self.always_attended || within == Some(true)
    }

    /// Whether `attending` of the trial's layers attending the needle meets the readout.
    #[inline(always)]
    pub(crate) fn attended(&self, attending: u32) -> bool {
        match self.readout {
            Readout::Any => attending >= 1,
            Readout::All => attending == self.layers,
            Readout::AtLeast(m) => attending >= m,
        }
    }

    /// Ends a trial whose layers have been ranked, `attending` of them attending the needle:
    /// counts it attended or not, then draws the answer from the trial's generator (its last
    /// draw; none when the outcome is certain, the common p_read = 1, p_guess = 0) and counts
    /// a success.
    #[inline(always)]
    pub(crate) fn conclude(&self, attending: u32, rng: &mut Xoshiro256PlusPlus, tally: &mut Tally) {
        self.conclude_with(attending, || rng.random::<f64>(), tally)
    }

    /// [`ReadoutRule::conclude`] with the answer's uniform draw from `uniform` (called only when
    /// the outcome is uncertain): a replay passes the draw it recorded.
    #[inline(always)]
    pub(crate) fn conclude_with(&self, attending: u32, uniform: impl FnOnce() -> f64, tally: &mut Tally) {
        let attended = self.attended(attending);
        tally.attended += attended as u64;
        let p = if attended { self.p_read } else { self.p_guess };
        let success = if p >= 1.0 {
            true
        } else if p <= 0.0 {
            false
        } else {
            uniform() < p
        };
        tally.successes += success as u64;
    }
}
