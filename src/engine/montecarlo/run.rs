//! The runs: [`simulate`] and [`simulate_observed`], and the plan's [`TrialPlan`] dispatch.
//!
//! The one place that chooses, per chunk of trials, between the materialising path, the
//! batched exact path and exact trials one by one; the shared driver ([`crate::trials::run`])
//! does the rest (chunks, threads, merging).

use super::plan::{McPath, Plan, Scratch, CHUNK};
use crate::progress::{Progress, Silent};
use crate::scenario::Scenario;
use crate::scores::NotExact;
use crate::trials::{trial_rng, Tally, TrialPlan};

/// Runs `trials` Monte Carlo trials of a validated scenario.
pub fn simulate(s: &Scenario, trials: u64, seed: u64, path: McPath) -> Result<Tally, NotExact> {
    simulate_observed(s, trials, seed, path, &Silent)
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
