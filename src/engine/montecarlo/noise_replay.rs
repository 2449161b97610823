//! [`NoiseReplay`]: the materialising path's trials at every positive score noise, drawn once.
//!
//! Records each layer's distractor and needle lines in σ ([`NoiseRecorder`]) into the records
//! of `noise_layer`, and answers a noise level from them, running again the trials whose
//! answer rounding could change.

use super::k_effs::distinct_k_effs;
use super::noise_layer::{noise_layer_part, noise_layer_record, skip_noise_layer_part, CrossingScratch, RERUN};
use super::plan::{materialises, McPath, Plan, Scratch, CHUNK};
use crate::geometry::Geometry;
use crate::scenario::{Pooling, Scenario};
use crate::scores::{needle_token, NotExact};
use crate::trials::{trial_rng, ReadoutRule, Tally, VarRecordPlan};
use rand::Rng;
use rand_distr::StandardNormal;
use rand_xoshiro::Xoshiro256PlusPlus;

/// The materialising path's trials at every positive score noise, drawn once.
///
/// With noise σ > 0 a pooled entry scores `a + σ·z`: a its pooled statistic (or a hard
/// negative's draw), z the standard normal `Plan::noise_draw` draws in the same place for every
/// σ > 0; no other draw depends on σ. So in each layer every entry's score is a line in σ, the
/// needle's best score y(σ) the upper envelope of its entries' lines, and the needle ranks
/// within k_eff at σ when fewer than k_eff distractor lines lie above the envelope there. A noise
/// replay keeps, per trial and layer, where that answer changes along σ (the *toggles*), and
/// answers any σ > 0 from them: the counts of [`simulate`](super::simulate)`(s at σ, trials, seed,
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
    /// score noise > 0) and how many trials were run again: those of [`simulate`](super::simulate)`(s, trials,
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
    use super::super::run::simulate;
    use super::*;

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
}
