//! Exact sampling: the needle's best entry score, then binomial counts of distractors above it.
//!
//! The path for closed-form laws ([`ScoreModel`]): no candidate is materialised, so a trial
//! costs the same at any N. Single-layer trials run [`BATCH`] at a time
//! ([`Plan::exact_batched`]) with results identical to running them one by one; kept apart from
//! the materialising path so that neither's loop is read with the other's in view.

use super::plan::{Plan, Scratch};
use crate::engine::binomial;
use crate::scores::ScoreModel;
use crate::trials::{trial_rng, Tally};
use rand_xoshiro::Xoshiro256PlusPlus;

/// Exact trials interleaved in one batch (see `Plan::exact_batched`).
const BATCH: usize = 16;

impl Plan {
    /// Whether exact trials can run [`BATCH`] at a time: one layer, no shared component, a
    /// needle to rank (the common case; every other exact scenario runs trial by trial).
    pub(super) fn batchable(&self) -> bool {
        self.rule.layers() == 1 && !self.needs_shared() && !self.geometry.needle_entries.is_empty()
    }

    /// Exact trials `range`, [`BATCH`] at a time in two phases: every trial's needle score and
    /// tail probabilities, then every trial's binomial counts. Each trial still draws from its
    /// own generator in the same order as [`Plan::trial`] (needle, counts, readout), so the
    /// results are identical to running them one by one; the phases only give the processor
    /// independent work to overlap (a single trial is one long chain of dependent latencies:
    /// seed, normal, tail probability, square root, division).
    pub(super) fn exact_batched(&self, seed: u64, range: std::ops::Range<u64>, tally: &mut Tally) {
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
    pub(super) fn rank_exact(&self, z: Option<f64>, rng: &mut Xoshiro256PlusPlus) -> u64 {
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

    /// Exact trials `range`, each run to its end before the next starts.
    pub(super) fn run_one_by_one(
        &self,
        seed: u64,
        range: std::ops::Range<u64>,
        scratch: &mut Scratch,
        tally: &mut Tally,
    ) {
        for i in range {
            self.trial(&mut trial_rng(seed, i), scratch, tally, |z, rng, _| self.rank_exact(z, rng));
        }
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

#[cfg(test)]
mod tests {
    use super::super::plan::McPath;
    use super::*;
    use crate::scenario::{Distractor, Pooling, Readout, Scenario};
    use crate::trials::TrialPlan;

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
