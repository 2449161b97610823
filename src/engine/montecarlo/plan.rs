//! The plan: a scenario prepared once for every trial, and the trial's order of draws.
//!
//! Owns [`McPath`], the materialising path's size limit and the per-trial work estimate, the
//! [`Plan`] both sampling paths read, its per-thread [`Scratch`], and the draws every trial
//! shares whatever its path ([`Plan::trial`], [`Plan::layer_ranks`]). The paths themselves add
//! their methods to [`Plan`] in `exact` and `materialise`, which sit above this file.

use crate::geometry::Geometry;
use crate::scenario::{Distractor, Pooling, Scenario};
use crate::scores::{EntryLaw, NotExact, ScoreModel, TokenLaw};
use crate::trials::{ReadoutRule, Tally};
use rand::Rng;
use rand_distr::StandardNormal;
use rand_xoshiro::Xoshiro256PlusPlus;

/// Trials per parallel work item.
pub(super) const CHUNK: u64 = 2048;

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
pub(super) struct Plan {
    /// The path every trial runs on.
    pub(super) path: McPath,
    pub(super) geometry: Geometry,
    pub(super) model: Option<ScoreModel>,
    /// The needle entries' laws when they do not depend on a shared component (computed once).
    pub(super) fixed_needle_laws: Vec<EntryLaw>,
    pub(super) token: TokenLaw,
    pub(super) pooling: Pooling,
    pub(super) overlap: bool,
    pub(super) compress_ratio: u64,
    pub(super) needle_spans: Vec<(u64, u64)>,
    /// The blocks that meet a needle span (pooled layers), in increasing order: every other
    /// block is drawn in [`Plan::plain_blocks`]' loop.
    pub(super) touching: Vec<u64>,
    pub(super) dprime: f64,
    pub(super) needle_sd: f64,
    pub(super) rho: f64,
    pub(super) noise: f64,
    pub(super) hard_mean: f64,
    pub(super) rule: ReadoutRule,
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
pub(super) struct Scratch {
    pub(super) blocks: Vec<f64>,
}

impl Plan {
    /// The plan of a validated scenario on `path` (Auto resolved to the path it runs on).
    pub(super) fn new(s: &Scenario, path: McPath) -> Result<Plan, NotExact> {
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

    pub(super) fn needs_shared(&self) -> bool {
        match &self.model {
            Some(m) => m.shared,
            None => self.rho > 0.0,
        }
    }

    /// One trial. Generic over the rank sampler so that the exact path's loop is compiled
    /// without the materialising path's code (which it never runs) inlined into it.
    #[inline(always)]
    pub(super) fn trial<F>(&self, rng: &mut Xoshiro256PlusPlus, scratch: &mut Scratch, tally: &mut Tally, rank_of: F)
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
    /// ([`RankRecord`](super::RankRecord)).
    #[inline(always)]
    pub(super) fn layer_ranks<F>(
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
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scenario::Scenario;

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
}
