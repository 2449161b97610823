//! [`RankRecord`]: every trial's needle rank per layer, kept to answer any `index_topk`.
//!
//! Records either path's ranks ([`RankRecord::new`]) or, on the materialising path, several
//! needles' ranks from one run ([`RankRecord::for_needles`], which draws each layer as a
//! [`Replay`](super::Replay) records it); so it sits above `replay`.

use super::kth_largest::order_value;
use super::plan::{McPath, Plan, Scratch, CHUNK};
use super::replay::{needle_best, Recorder, ReplayLayout, ReplayScratch};
use crate::geometry::Geometry;
use crate::scenario::Scenario;
use crate::scores::{needle_token, NotExact};
use crate::trials::{ReadoutRule, RecordPlan, Tally};
use rand::Rng;
use rand_distr::StandardNormal;
use rand_xoshiro::Xoshiro256PlusPlus;

/// Every Monte Carlo trial's needle rank in each layer, kept to answer the same scenario at
/// any `index_topk`.
///
/// No draw of a trial depends on k: the needle's scores, the distractors' (or their binomial
/// counts above the needle) and the readout's uniform are drawn the same way whatever k is, and
/// k enters only through k_eff, which decides which ranks attend. So the ranks of one run, with
/// each trial's readout uniform, give the counts of [`simulate`](super::simulate)`(s at any k, trials, seed,
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
    ///
    /// [`simulate`]: super::simulate
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
    /// [`Replay`](super::Replay) does), so one run's distractor scores are counted above each scenario's
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

#[cfg(test)]
mod tests {
    use super::super::run::simulate;
    use super::*;
    use crate::scenario::{Distractor, Pooling, Readout};

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
}
