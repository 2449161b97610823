//! From a scenario and its geometry to the laws of every candidate's score.

use super::distractor::TokenLaw;
use super::entry::EntryLaw;
use crate::geometry::{Geometry, NeedleEntry};
use crate::scenario::{Distractor, Pooling, Scenario};

/// Why a scenario has no closed-form score laws (the analytic engine and the exact-sampling
/// Monte Carlo path need them; the materialising Monte Carlo path does not).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("not exact: {0}")]
pub struct NotExact(pub String);

/// Mean and sd of one needle token score: Normal(dprime, needle_sd²) split into a shared part
/// √ρ·needle_sd·z and an independent part of sd √(1−ρ)·needle_sd. `z = None` gives the marginal.
pub(crate) fn needle_token(dprime: f64, needle_sd: f64, rho: f64, z: Option<f64>) -> (f64, f64) {
    match z {
        Some(z) => (dprime + needle_sd * rho.sqrt() * z, needle_sd * (1.0 - rho).max(0.0).sqrt()),
        None => (dprime, needle_sd),
    }
}

/// The score laws of one scenario: regular and hard-negative distractor entries, and the needle's
/// entries, conditional on the needle's shared component z where one is needed.
#[derive(Debug, Clone, PartialEq)]
pub struct ScoreModel {
    /// Token law of the distractors.
    pub token: TokenLaw,
    /// Law of a regular distractor entry (pooling and noise included).
    pub distractor: EntryLaw,
    /// Law of a hard-negative entry: Normal(hard_mean, 1 + σ_q²).
    pub hard: EntryLaw,
    /// Regular distractor entries.
    pub n_regular: u64,
    /// Hard-negative entries.
    pub n_hard: u64,
    /// The entries covering the needle.
    pub needle_entries: Vec<NeedleEntry>,
    /// The needle entries grouped by law (`group_entries`): one representative per group with
    /// its count, in order of first appearance (with max pooling one entry pooling all
    /// their tokens).
    pub needle_groups: Vec<(NeedleEntry, u64)>,
    /// Whether the needle's shared component must be integrated (or sampled) explicitly: it
    /// couples several needle entries or tokens, or several layers.
    pub shared: bool,
    /// Whether it couples several needle entries or tokens within one layer (one layer's rank
    /// then needs it too; otherwise one layer sees the needle's marginal law).
    within_layer: bool,
    pooling: Pooling,
    dprime: f64,
    needle_sd: f64,
    rho: f64,
    noise: f64,
}

/// Groups entries whose score has one law, keeping the order of first appearance: without
/// pooling every needle entry scores one needle token's draw, whatever it pools, so all are one
/// group (a needle of several tokens then has the law of one entry counted e times, which the
/// analytic engine integrates on one checked Gauss rule); with mean pooling, entries of equal
/// (pool size, needle tokens).
///
/// With max pooling the entries together are one entry pooling all their tokens: given the
/// needle's shared component every token scores independently, so "some needle entry's maximum
/// beats t" is "the maximum of all their tokens beats t", and Π_e F_tok^(pool_e − a_e)·Φ^(a_e)
/// is F_tok^(Σ pool − Σ a)·Φ^(Σ a). One law of one entry, which the analytic engine integrates
/// on one checked Gauss rule, where a needle across two pages of different needle counts was
/// two laws summed over every node of T_j's table at every outer node (a Quest verdict on a
/// probe table took over 10 minutes).
fn group_entries(entries: &[NeedleEntry], pooling: Pooling) -> Vec<(NeedleEntry, u64)> {
    if pooling == Pooling::Max {
        let Some(first) = entries.first() else { return Vec::new() };
        let merged = NeedleEntry {
            index: first.index,
            pool_size: entries.iter().map(|e| e.pool_size).sum(),
            needle_tokens: entries.iter().map(|e| e.needle_tokens).sum(),
        };
        return vec![(merged, 1)];
    }
    let same = |g: &NeedleEntry, e: &NeedleEntry| {
        pooling == Pooling::None || (g.pool_size == e.pool_size && g.needle_tokens == e.needle_tokens)
    };
    let mut groups: Vec<(NeedleEntry, u64)> = Vec::new();
    for e in entries {
        match groups.iter_mut().find(|(g, _)| same(g, e)) {
            Some((_, n)) => *n += 1,
            None => groups.push((*e, 1)),
        }
    }
    groups
}

impl ScoreModel {
    /// Appends the model's exact key ([`super::key`]) leaving out where the needle sits: its
    /// entries' indices (the laws read only an entry's pool size and needle tokens).
    pub(crate) fn put_key_without_index(&self, out: &mut String) {
        use super::key::{put_f64, put_tag, put_u64};
        self.token.put_key(out);
        self.distractor.put_key(out);
        self.hard.put_key(out);
        put_u64(out, self.n_regular);
        put_u64(out, self.n_hard);
        // Without pooling an entry's law reads neither its pool nor its needle tokens: the key
        // leaves them out too, so that needles of one entry count share an evaluation wherever
        // they sit in their blocks.
        let pooled = self.pooling != Pooling::None;
        let entry = |out: &mut String, e: &NeedleEntry| {
            if pooled {
                put_u64(out, e.pool_size);
                put_u64(out, e.needle_tokens);
            }
        };
        put_u64(out, self.needle_entries.len() as u64);
        for e in &self.needle_entries {
            entry(out, e);
        }
        put_u64(out, self.needle_groups.len() as u64);
        for (e, n) in &self.needle_groups {
            entry(out, e);
            put_u64(out, *n);
        }
        put_tag(out, if self.shared { 'S' } else { 's' });
        put_tag(out, if self.within_layer { 'W' } else { 'w' });
        put_tag(
            out,
            match self.pooling {
                Pooling::None => 'n',
                Pooling::Mean => 'a',
                Pooling::Max => 'x',
            },
        );
        for x in [self.dprime, self.needle_sd, self.rho, self.noise] {
            put_f64(out, x);
        }
    }

    /// The closed-form laws, or why there are none.
    pub fn new(s: &Scenario, g: &Geometry) -> Result<ScoreModel, NotExact> {
        let token = TokenLaw::new(s.distractor);
        let normal = matches!(s.distractor, Distractor::Normal);
        let sigma = s.score_noise;
        let c = s.compress_ratio;
        let pool = match s.pooling {
            Pooling::None => 1,
            _ => c,
        };
        if s.overlap && s.pooling != Pooling::None && g.n_candidates > 1 {
            return Err(NotExact(
                "overlapping blocks with mean/max pooling make neighbouring entries correlated".into(),
            ));
        }
        if s.pooling == Pooling::Mean && !normal && pool > 1 {
            return Err(NotExact(format!("the mean of {} tokens has no closed-form law", s.distractor)));
        }
        if sigma > 0.0 && !(normal && s.pooling != Pooling::Max) && !(s.pooling == Pooling::Mean && pool == 1 && normal)
        {
            return Err(NotExact(format!(
                "score_noise on {} entries with {} pooling has no closed-form law",
                s.distractor, s.pooling
            )));
        }
        let distractor = match s.pooling {
            Pooling::Max if pool > 1 => {
                EntryLaw::Max { token, n_dist: pool, n_needle: 0, needle_mean: 0.0, needle_sd: 1.0 }
            }
            _ if normal => EntryLaw::Gauss { mean: 0.0, sd: (1.0 / pool as f64 + sigma * sigma).sqrt() },
            _ => EntryLaw::Token(token),
        };
        let hard = EntryLaw::Gauss { mean: s.hard_mean, sd: (1.0 + sigma * sigma).sqrt() };
        let e = g.needle_entries.len();
        let one_entry = e == 1 && (s.pooling == Pooling::None || g.needle_entries[0].needle_tokens == 1);
        let single = s.selecting_layers() == 1 && one_entry;
        Ok(ScoreModel {
            token,
            distractor,
            hard,
            n_regular: g.n_distractors - g.hard_negatives,
            n_hard: g.hard_negatives,
            needle_entries: g.needle_entries.clone(),
            needle_groups: group_entries(&g.needle_entries, s.pooling),
            shared: s.layer_corr > 0.0 && !single,
            within_layer: s.layer_corr > 0.0 && !one_entry,
            pooling: s.pooling,
            dprime: s.dprime,
            needle_sd: s.needle_sd,
            rho: s.layer_corr,
            noise: sigma,
        })
    }

    /// Groups the needle entries by (pool size, needle tokens) whatever the pooling: the laws
    /// are the same, integrated per group on the slower path a needle of several entries took
    /// before entries were grouped by law (the tests' reference for that grouping).
    pub(crate) fn group_by_entry_kind(&mut self) {
        self.needle_groups = group_entries(&self.needle_entries, Pooling::Mean);
    }

    /// Whether one layer's needle entries or tokens share the needle's component (see
    /// [`ScoreModel::shared`]).
    pub(crate) fn shared_within_layer(&self) -> bool {
        self.within_layer
    }

    /// Mean and sd of one needle token score given the shared component z (`None`: marginal,
    /// valid only when [`ScoreModel::shared`] is false).
    pub(crate) fn needle_token(&self, z: Option<f64>) -> (f64, f64) {
        needle_token(self.dprime, self.needle_sd, self.rho, z)
    }

    /// The law of a needle entry's score given z (see `ScoreModel::needle_token`).
    pub fn needle_law(&self, entry: &NeedleEntry, z: Option<f64>) -> EntryLaw {
        let (mu, sd) = self.needle_token(z);
        let s2 = self.noise * self.noise;
        match self.pooling {
            Pooling::None => EntryLaw::Gauss { mean: mu, sd: (sd * sd + s2).sqrt() },
            Pooling::Mean => {
                let n = entry.pool_size as f64;
                let a = entry.needle_tokens as f64;
                // Distractor tokens are standard normal here (checked in `new`) or the pool is 1.
                let var = (a * sd * sd + (n - a)) / (n * n) + s2;
                EntryLaw::Gauss { mean: a * mu / n, sd: var.sqrt() }
            }
            Pooling::Max => EntryLaw::Max {
                token: self.token,
                n_dist: entry.pool_size - entry.needle_tokens,
                n_needle: entry.needle_tokens,
                needle_mean: mu,
                needle_sd: sd,
            },
        }
    }
}
