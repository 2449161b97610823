//! [`Replay`]: the materialising path's trials, drawn once and replayed at any needle parameters.
//!
//! Owns the layout of a replay's records ([`ReplayLayout`]), the recorder that draws them
//! ([`Recorder`], the materialising path's draws in its order) and the recomputation of the
//! needle's best entry score from a record ([`needle_best`]), which the rank records reuse.

use super::k_effs::{distinct_k_effs, k_eff_at};
use super::kth_largest::KthLargest;
use super::plan::{McPath, Plan, CHUNK};
use crate::geometry::Geometry;
use crate::scenario::{Pooling, Scenario};
use crate::scores::{needle_token, NotExact};
use crate::trials::{ReadoutRule, RecordPlan, Tally};
use rand::Rng;
use rand_distr::StandardNormal;
use rand_xoshiro::Xoshiro256PlusPlus;

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
/// [`simulate`](super::simulate)`(s, trials, seed, McPath::Materialise)`, exactly, in O(trials × needle tokens)
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
    /// [`simulate`](super::simulate)`(s, trials, seed, McPath::Materialise)`, exactly (the rank histogram is not
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

/// The blocks a needle entry pools, in a replay's layer record.
#[derive(Debug, Clone, Copy)]
pub(super) struct HoodBlock {
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
pub(super) struct ReplayLayout {
    /// How many k_eff-th largest scores start a layer record.
    pub(super) kths: usize,
    pub(super) shared: bool,
    pub(super) layer_len: usize,
    pub(super) stride: usize,
    pub(super) hood: Vec<HoodBlock>,
    /// Per needle entry: its own block's and (with overlap, i > 0) its previous block's index
    /// in `hood`.
    pub(super) entries: Vec<(usize, Option<usize>)>,
    /// Where the needle entries' noise starts in a layer record (pooled).
    pub(super) noise_at: usize,
}

impl ReplayLayout {
    pub(super) fn new(plan: &Plan, kths: usize) -> ReplayLayout {
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
    pub(super) scores: KthLargest,
}

/// Builds a [`Replay`]: the materialising plan's trials, drawn into records.
pub(super) struct Recorder<'a> {
    pub(super) plan: &'a Plan,
    pub(super) layout: &'a ReplayLayout,
    /// The k_eff whose k-th largest distractor score each layer record starts with.
    pub(super) k_effs: &'a [u64],
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
    pub(super) fn draw_layer(&self, rng: &mut Xoshiro256PlusPlus, scratch: &mut ReplayScratch, out: &mut [f64]) {
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

/// The needle's best entry score in one layer record of `layout`, with needle tokens
/// Normal(mu, sd²), as `rank_materialised` computes it: unpooled, the needle's entries in
/// order; pooled, [`pooled_needle`].
pub(super) fn needle_best(
    plan: &Plan,
    layout: &ReplayLayout,
    layer: &[f64],
    (mu, sd): (f64, f64),
    hood: &mut [f64],
) -> f64 {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trials::trial_rng;

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
}
