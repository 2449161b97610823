//! Recall as a function of the scenario, the model that calibration and the verdict evaluate:
//! the [`RecallModel`] trait, the project's engines behind it ([`EngineModel`]: the exact
//! analytic engine where it applies, and otherwise Monte Carlo with common random numbers, trial
//! i always drawing from (seed, i), so that the likelihood surface is a deterministic function of
//! the parameters and profile/optimiser steps compare like with like), and closed-form models
//! for tests ([`FnModel`]).
//!
//! Monte Carlo without closed-form laws (the materialising path: overlapping mean/max pooling,
//! …) draws every candidate of every trial, O(trials × N) per evaluation; a fit evaluates
//! hundreds of parameter vectors on the same rows. [`EngineModel`] therefore keeps, per row
//! scenario up to the needle's parameters, a [`Replay`] of its trials (drawn once; when: see
//! `Replays`) and answers every later evaluation from it in O(trials × needle tokens), with exactly the counts of the
//! materialising run (`tests/engines/replay_equivalence.rs`).

use super::montecarlo::{noise_replay_key, rank_key, replay_key, NoiseReplay, RankRecord, Replay};
use super::{check_monte_carlo, route, simulate_successes, EngineChoice, EngineError, Route, RunOptions};
use crate::scenario::{Field, Model, Scenario};
use std::collections::{HashMap, HashSet};
use std::hash::{Hash, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

/// A recall model: P(success) for a scenario.
pub trait RecallModel: Sync {
    /// Recall of `s`, or why it cannot be computed.
    fn recall(&self, s: &Scenario) -> Result<f64, EngineError>;
    /// Short description (engine used) for reports.
    fn describe(&self) -> String;
    /// Whether the rows of a table should be evaluated in parallel (expensive models).
    fn parallel_rows(&self) -> bool {
        true
    }
    /// Whether the model evaluates a needle component shared by several layers (`layer_corr`
    /// > 0 with more than one selecting layer); hypotheses free `layer_corr` only then.
    fn shares_across_layers(&self) -> bool {
        true
    }
    /// Whether `recall(s)` is the exact engine's value (within its quadrature tolerance), not a
    /// Monte Carlo estimate or a stand-in: properties of the model as stated (monotonicity in a
    /// parameter) then hold for the computed values up to that tolerance, and a bound may rely
    /// on them. Conservative by default.
    fn is_exact(&self, _s: &Scenario) -> bool {
        false
    }
    /// Recall of `s` as a function of `index_topk` alone (every other field as in `s`; k < 1
    /// read as 1), for the searches over k: by default one [`RecallModel::recall`] per k; a
    /// model whose one evaluation answers every k (Monte Carlo: no draw depends on k) overrides
    /// it, with the same values.
    fn recall_in_k<'a>(&'a self, s: &Scenario) -> Result<KCurve<'a>, EngineError> {
        Ok(recall_per_k(self, s))
    }
    /// Says that k-curves of `ss` ([`RecallModel::recall_in_k`]) are about to be asked for (the
    /// verdict at an estimate and at its region's points), so that a model can prepare them
    /// together; the curves' values do not depend on it. By default nothing.
    fn expect_k_curves(&self, ss: &[Scenario]) {
        let _ = ss;
    }
    /// Recall of `s` as a function of `score_noise` alone (every other field as in `s`), for the
    /// verdict's noise search: by default one [`RecallModel::recall`] per level; a model whose
    /// one evaluation answers every level (Monte Carlo on the materialising path: the noise
    /// draws are the same standard normals at every positive level) overrides it, with the same
    /// values.
    fn recall_in_noise<'a>(&'a self, s: &Scenario) -> Result<NoiseCurve<'a>, EngineError> {
        Ok(recall_per_noise(self, s))
    }
    /// Token or block scores a Monte Carlo noise curve of `s` ([`RecallModel::recall_in_noise`])
    /// draws: trials × one trial's work at positive noise; 0 where the curve costs no Monte
    /// Carlo (closed forms, models that compute rather than draw). The verdict withholds its
    /// noise figures above `crate::verdict::NOISE_SEARCH_MAX_DRAWS`.
    fn noise_curve_draws(&self, s: &Scenario) -> u64 {
        let _ = s;
        0
    }
    /// A key equal for two scenarios only when the model's results for them are equal (for
    /// memos and for evaluating a table's rows once each): by default the scenario itself; a
    /// model that knows which fields its results ignore (the exact engine: where the needle sits,
    /// beyond the window) keys on what it reads.
    fn evaluation_key(&self, s: &Scenario) -> String {
        serde_json::to_string(s).unwrap_or_default()
    }
    /// P(exactly m of the scenario's layers select the needle), m = 0..=layers (the
    /// likelihood of captured per-layer selections); by default not available.
    fn layer_count_pmf(&self, s: &Scenario) -> Result<Vec<f64>, EngineError> {
        let _ = s;
        Err(EngineError::NeedsExact(format!(
            "per-layer selection data need the exact engine, which {} is not",
            self.describe()
        )))
    }
}

/// Recall as a function of `index_topk`: [`RecallModel::recall_in_k`].
pub(crate) type KCurve<'a> = Box<dyn Fn(u64) -> Result<f64, EngineError> + 'a>;

/// `s` at `index_topk` = k (k < 1 read as 1): the scenario a [`KCurve`] evaluates at k.
pub(crate) fn with_topk(s: &Scenario, k: u64) -> Scenario {
    Scenario { index_topk: k.max(1), ..s.clone() }
}

/// [`RecallModel::recall_in_k`] by one [`RecallModel::recall`] per k.
fn recall_per_k<'a, M: RecallModel + ?Sized>(model: &'a M, s: &Scenario) -> KCurve<'a> {
    let s = s.clone();
    Box::new(move |k| model.recall(&with_topk(&s, k)))
}

/// Recall as a function of `score_noise`: [`RecallModel::recall_in_noise`].
pub(crate) type NoiseCurve<'a> = Box<dyn Fn(f64) -> Result<f64, EngineError> + 'a>;

/// `s` at `score_noise` = v (checked as the field is): the scenario a `NoiseCurve` evaluates at v.
pub fn with_noise(s: &Scenario, v: f64) -> Result<Scenario, EngineError> {
    let mut t = s.clone();
    t.set_real(Field::ScoreNoise, v)?;
    Ok(t)
}

/// [`RecallModel::recall_in_noise`] by one [`RecallModel::recall`] per level.
fn recall_per_noise<'a, M: RecallModel + ?Sized>(model: &'a M, s: &Scenario) -> NoiseCurve<'a> {
    let s = s.clone();
    Box::new(move |v| model.recall(&with_noise(&s, v)?))
}

/// A closed-form or test model from a function.
pub struct FnModel<F>(pub F, pub &'static str);

impl<F: Fn(&Scenario) -> f64 + Sync> RecallModel for FnModel<F> {
    fn recall(&self, s: &Scenario) -> Result<f64, EngineError> {
        Ok((self.0)(s))
    }
    fn describe(&self) -> String {
        self.1.to_string()
    }
    fn parallel_rows(&self) -> bool {
        false
    }
}

/// Most f64s an [`EngineModel`]'s replays hold together (256 MiB): at the fit default of 4000
/// trials a V4-Flash row's replay holds some 10^5, so a table's rows fit many times over; a
/// replay larger than this is not built (its evaluations run the materialising path), and
/// when a new one does not fit the memo is emptied first.
pub(crate) const MAX_REPLAY_VALUES: u64 = 1 << 25;

/// The replays of an [`EngineModel`], by [`replay_key`], and what decides when to build one.
///
/// A replay costs 1.2–1.9 materialising runs to build and pays off from its second use. Most
/// row scenarios are asked for at many needle parameters (a dprime fit, its profiles, the
/// verdict's searches), so a replay is built at the first request; but a fit over a distractor
/// field (`hard_mean`, an effective k, …) asks for a new scenario of the same row at every
/// evaluation, each once. So requests are grouped into families (the replay key without
/// `score_noise`, `hard_negatives`, `hard_mean`, `index_topk` and `depth`): when a family's
/// last replay was never used again before another of its scenarios came, the family turns
/// *varying*, and its scenarios are replayed only from their second request on, until one of
/// its replays is used again. Rows of a table that differ only in k or depth are asked for
/// together, at the same needle parameters: such a scenario (a *sibling* of the family's last:
/// the same scenario but for `index_topk` and `depth`, needle parameters included) is built at
/// its first request without turning the family varying, while a fit over a distractor field
/// (or over k) changes another field with every new scenario.
#[derive(Debug, Default)]
struct Replays {
    by_key: HashMap<String, Built>,
    /// f64s held.
    values: u64,
    families: HashMap<u64, Family>,
    /// Hashes of the keys of varying families requested once so far (a collision only builds a
    /// replay one request early).
    seen_once: HashSet<u64>,
}

/// A replay being built or built (the first request builds it, the others wait for it instead
/// of drawing the same trials again), and how often it answered after the first request.
#[derive(Debug)]
struct Built {
    replay: Arc<OnceLock<Result<Arc<Replay>, EngineError>>>,
    reused: u64,
    family: u64,
}

/// See [`Replays`].
#[derive(Debug, Default)]
struct Family {
    /// The key of its last replay built.
    last: Option<String>,
    /// [`sibling_of`] the scenario that built it.
    last_sibling: u64,
    varying: bool,
}

/// A cell's value once the thread that registered it has built it (every cell here is built by
/// the request that registered it), waited for without blocking a rayon worker: meanwhile this
/// thread runs other pending rayon jobs, among them the chunks of that build (a worker blocked
/// on the cell would leave the builder to draw them alone, one core idle).
fn built_elsewhere<T: Clone>(cell: &OnceLock<T>) -> T {
    loop {
        if let Some(v) = cell.get() {
            return v.clone();
        }
        if !matches!(rayon::yield_now(), Some(rayon::Yield::Executed)) {
            std::thread::sleep(std::time::Duration::from_micros(200));
        }
    }
}

/// Most families and once-seen keys remembered before starting over (they only steer when
/// replays are built).
const MAX_REMEMBERED: usize = 1 << 20;

fn hash_of(text: &str) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    text.hash(&mut h);
    h.finish()
}

/// The family of a replay key's scenario (see [`Replays`]).
fn family_of(s: &Scenario) -> u64 {
    let base =
        Scenario { score_noise: 0.0, hard_negatives: 0.0, hard_mean: 0.0, index_topk: 1, depth: 0.0, ..s.clone() };
    hash_of(&replay_key(&base))
}

/// What the scenarios of a table's rows at one parameter vector share (see [`Replays`]): the
/// whole scenario, needle parameters included, but for `index_topk` and `depth`.
fn sibling_of(s: &Scenario) -> u64 {
    hash_of(&serde_json::to_string(&Scenario { index_topk: 1, depth: 0.0, ..s.clone() }).unwrap_or_default())
}

impl Replays {
    /// Whether to build the replay of `key` (of scenario `s`) now, on a miss.
    fn build_now(&mut self, key: &str, s: &Scenario) -> bool {
        if self.families.len() >= MAX_REMEMBERED || self.seen_once.len() >= MAX_REMEMBERED {
            self.families.clear();
            self.seen_once.clear();
        }
        let family = self.families.entry(family_of(s)).or_default();
        if !family.varying {
            let sibling = sibling_of(s);
            let unused = |last: &String| last != key && self.by_key.get(last).is_some_and(|b| b.reused == 0);
            if family.last_sibling == sibling || !family.last.as_ref().is_some_and(unused) {
                family.last = Some(key.to_string());
                family.last_sibling = sibling;
                return true;
            }
            family.varying = true;
        }
        // Varying: build at the second request.
        !self.seen_once.insert(hash_of(key))
    }
}

/// Engine-backed recall.
#[derive(Debug)]
pub struct EngineModel {
    /// Which engine.
    pub(crate) choice: EngineChoice,
    /// Monte Carlo trials per evaluation (when Monte Carlo is used).
    pub(crate) trials: u64,
    /// Monte Carlo seed (common random numbers across parameter values).
    pub(crate) seed: u64,
    analytic_calls: AtomicU64,
    mc_calls: AtomicU64,
    replays: Mutex<Replays>,
    noise_replays: Mutex<NoiseReplays>,
    replays_built: AtomicU64,
    replay_budget: u64,
    /// The (context_len, index_topk) the caller expects to ask for (a table's rows, the
    /// verdict's kernel maximum at its length): a replay at a length keeps that length's k too
    /// ([`Replay::for_topks`]).
    expected_topks: Vec<(u64, u64)>,
    rank_records: Mutex<RankRecords>,
    rank_records_built: AtomicU64,
}

/// Most `index_topk`s a replay keeps besides its scenario's own: each adds one value per layer
/// record and a selection among a layer's largest scores.
pub(crate) const MAX_EXPECTED_TOPKS: usize = 7;

/// A rank record being built or built, shared by every k-curve of its scenario.
type RankCell = Arc<OnceLock<Result<Arc<RankRecord>, EngineError>>>;

/// The rank records of an [`EngineModel`], by [`rank_key`]: the verdict asks for the k-curve of
/// one scenario several times (k needed, recall at 2k, at the kernel maximum).
#[derive(Debug, Default)]
struct RankRecords {
    by_key: HashMap<String, RankCell>,
    /// f64s held by the records built.
    values: u64,
}

/// A noise replay being built or built, shared by every curve that asks for it (the first
/// builds it, the others wait for it).
type NoiseCell = Arc<OnceLock<Result<Arc<NoiseReplay>, EngineError>>>;

/// The noise replays of an [`EngineModel`], by [`noise_replay_key`] (the scenario without its
/// noise and k), each with the `index_topk`s it answers: the verdict's noise searches at the
/// scenario's k and at the kernel maximum are one replay, built for both at the first.
#[derive(Debug, Default)]
struct NoiseReplays {
    by_key: HashMap<String, Vec<(Vec<u64>, NoiseCell)>>,
    /// f64s held by the replays built.
    values: u64,
}

impl EngineModel {
    /// A model with the given engine choice, Monte Carlo trials and seed.
    pub fn new(choice: EngineChoice, trials: u64, seed: u64) -> EngineModel {
        EngineModel {
            choice,
            trials: trials.max(1),
            seed,
            analytic_calls: AtomicU64::new(0),
            mc_calls: AtomicU64::new(0),
            replays: Mutex::new(Replays::default()),
            noise_replays: Mutex::new(NoiseReplays::default()),
            replays_built: AtomicU64::new(0),
            replay_budget: MAX_REPLAY_VALUES,
            expected_topks: Vec::new(),
            rank_records: Mutex::new(RankRecords::default()),
            rank_records_built: AtomicU64::new(0),
        }
    }

    /// The same model expecting to be asked for scenarios at these (context_len, index_topk)
    /// (a table's rows, the verdict's kernel maximum at its length): a replay of a scenario
    /// then keeps, besides its own k, the first `MAX_EXPECTED_TOPKS` other k expected at its
    /// length, so that the rows measured at several k on one length share a materialising run.
    /// Only the time changes, never a recall.
    pub fn expecting_topks(mut self, at: impl IntoIterator<Item = (u64, u64)>) -> EngineModel {
        for pair in at {
            if !self.expected_topks.contains(&pair) {
                self.expected_topks.push(pair);
            }
        }
        self
    }

    /// The `index_topk`s a replay of `s` keeps: its own, then the others expected at its length.
    fn replay_topks(&self, s: &Scenario) -> Vec<u64> {
        let mut topks = vec![s.index_topk];
        for &(len, k) in &self.expected_topks {
            if len == s.context_len && !topks.contains(&k) && topks.len() <= MAX_EXPECTED_TOPKS {
                topks.push(k);
            }
        }
        topks
    }

    /// The same model holding at most `values` f64s of replays (default `MAX_REPLAY_VALUES`;
    /// 0: never replay). Only the time changes, never a recall.
    pub fn with_replay_budget(mut self, values: u64) -> EngineModel {
        self.replay_budget = values;
        self
    }

    fn mc(&self, s: &Scenario) -> Result<f64, EngineError> {
        self.mc_calls.fetch_add(1, Ordering::Relaxed);
        let hits = match self.replay(s)?.and_then(|replay| replay.tally(s)) {
            Some(tally) => tally.successes,
            None => simulate_successes(s, self.trials, self.seed)?,
        };
        Ok(hits as f64 / self.trials as f64)
    }

    /// The replay that answers for `s`, built when [`Replays`] says so; `None` otherwise, when
    /// `s` does not run on the materialising path (exact sampling is already O(trials × needle
    /// entries)) or when its replay would not fit the budget ([`MAX_REPLAY_VALUES`]). Checks `s`
    /// as [`simulate_successes`] does.
    fn replay(&self, s: &Scenario) -> Result<Option<Arc<Replay>>, EngineError> {
        s.validate()?;
        if s.model != Model::Scalar {
            return Ok(None);
        }
        let key = replay_key(s);
        let build = |topks: &[u64]| {
            self.replays_built.fetch_add(1, Ordering::Relaxed);
            Replay::for_topks(s, topks, self.trials, self.seed).map(Arc::new).map_err(|e| EngineError::NotExact(e.0))
        };
        let kept = {
            let Ok(mut m) = self.replays.lock() else { return Ok(None) };
            match m.by_key.get_mut(&key) {
                Some(b) => {
                    b.reused += 1;
                    let (cell, family) = (b.replay.clone(), b.family);
                    if let Some(f) = m.families.get_mut(&family) {
                        f.varying = false;
                    }
                    Some(cell)
                }
                None => None,
            }
        };
        if let Some(cell) = kept {
            // Built, or being built by the thread that registered it: its draws, once.
            return built_elsewhere(&cell).map(Some);
        }
        let opts = RunOptions { trials: self.trials, seed: self.seed, ..RunOptions::default() };
        check_monte_carlo(s, &opts)?;
        if !super::montecarlo::materialises(s) {
            return Ok(None);
        }
        if !self.replays.lock().is_ok_and(|mut m| m.build_now(&key, s)) {
            return Ok(None);
        }
        let topks = self.replay_topks(s);
        let fits = |topks: &[u64]| Replay::values_for_topks(s, topks, self.trials).filter(|&v| v <= self.replay_budget);
        let (topks, values) = match fits(&topks) {
            Some(v) => (topks, v),
            None => match fits(&topks[..1]) {
                Some(v) => (topks[..1].to_vec(), v),
                None => return Ok(None),
            },
        };
        let cell = {
            let Ok(mut m) = self.replays.lock() else { return build(&topks).map(Some) };
            match m.by_key.get_mut(&key) {
                // Another thread asked for it meanwhile: theirs (identical).
                Some(theirs) => {
                    theirs.reused += 1;
                    let theirs = theirs.replay.clone();
                    drop(m);
                    return built_elsewhere(&theirs).map(Some);
                }
                None => {
                    if m.values + values > self.replay_budget {
                        m.by_key.clear();
                        m.values = 0;
                    }
                    m.values += values;
                    let cell = Arc::new(OnceLock::new());
                    let family = family_of(s);
                    // The replay answers s at each k kept: registered under each of their keys
                    // not already answered.
                    for &k in &topks {
                        m.by_key.entry(replay_key(&with_topk(s, k))).or_insert_with(|| Built {
                            replay: cell.clone(),
                            reused: 0,
                            family,
                        });
                    }
                    cell
                }
            }
        };
        cell.get_or_init(|| build(&topks)).clone().map(Some)
    }

    /// The rank record of `s` (validated, Monte Carlo, within the replay budget): kept from an
    /// earlier k-curve of the same scenario at any k, or built now and kept. When the kept
    /// records would exceed the replay budget they are dropped first.
    fn rank_record(&self, s: &Scenario) -> Result<Arc<RankRecord>, EngineError> {
        let build = || {
            self.rank_records_built.fetch_add(1, Ordering::Relaxed);
            RankRecord::new(s, self.trials, self.seed).map(Arc::new).map_err(|e| EngineError::NotExact(e.0))
        };
        let values = RankRecord::values(s, self.trials);
        let cell = {
            let Ok(mut m) = self.rank_records.lock() else { return build() };
            let key = rank_key(s);
            match m.by_key.get(&key) {
                Some(c) => {
                    let c = c.clone();
                    drop(m);
                    return built_elsewhere(&c);
                }
                None => {
                    if m.values + values > self.replay_budget {
                        // Keep the cells still being built (another thread waits on them).
                        m.by_key.retain(|_, c| c.get().is_none());
                        m.values = 0;
                    }
                    m.values += values;
                    let c: RankCell = Arc::new(OnceLock::new());
                    m.by_key.insert(key, c.clone());
                    c
                }
            }
        };
        cell.get_or_init(build).clone()
    }

    /// The rank records of `ss` that one run can give together ([`RankRecord::for_needles`]:
    /// Monte Carlo scenarios that differ only in the needle's parameters, on the materialising
    /// path), built now and kept for their k-curves, when there are at least two not yet kept and
    /// they fit the replay budget beside the records kept twice over (the run's buffer holds them
    /// all before they are split). Any other scenario is left to its curve, as is every scenario
    /// when the run cannot serve them together.
    fn prepare_rank_records(&self, ss: &[Scenario]) {
        let mut wanted: Vec<Scenario> = Vec::new();
        for s in ss {
            let monte_carlo = s.validate().is_ok()
                && s.model == Model::Scalar
                && matches!(route(s, self.choice), Ok(Route::MonteCarlo { .. }))
                && check_monte_carlo(s, &RunOptions { trials: self.trials, seed: self.seed, ..RunOptions::default() })
                    .is_ok();
            if monte_carlo && !wanted.iter().any(|w| rank_key(w) == rank_key(s)) {
                wanted.push(s.clone());
            }
        }
        {
            let Ok(m) = self.rank_records.lock() else { return };
            wanted.retain(|s| !m.by_key.contains_key(&rank_key(s)));
            let values: u64 = wanted.iter().map(|s| RankRecord::values(s, self.trials)).fold(0, u64::saturating_add);
            if wanted.len() < 2 || m.values.saturating_add(values.saturating_mul(2)) > self.replay_budget {
                return;
            }
        }
        let Ok(Some(records)) = RankRecord::for_needles(&wanted, self.trials, self.seed) else { return };
        self.rank_records_built.fetch_add(1, Ordering::Relaxed);
        let Ok(mut m) = self.rank_records.lock() else { return };
        for (s, record) in wanted.iter().zip(records) {
            let key = rank_key(s);
            if m.by_key.contains_key(&key) {
                continue;
            }
            m.values += RankRecord::values(s, self.trials);
            let cell: RankCell = Arc::new(OnceLock::new());
            let _ = cell.set(Ok(Arc::new(record)));
            m.by_key.insert(key, cell);
        }
    }

    /// The noise replay that answers `at` (validated, positive noise, on the materialising
    /// path): the one kept for its scenario and k, or one built now for its k and the kernel
    /// maximum (`max_topk`: the verdict's other noise search), kept for later curves. When the
    /// kept replays would exceed the replay budget they are dropped first.
    fn noise_replay(&self, at: &Scenario) -> Result<Arc<NoiseReplay>, EngineError> {
        let build = |topks: &[u64]| {
            self.replays_built.fetch_add(1, Ordering::Relaxed);
            NoiseReplay::for_topks(at, topks, self.trials, self.seed)
                .map(Arc::new)
                .map_err(|e| EngineError::NotExact(e.0))
        };
        let (topks, cell) = {
            let Ok(mut m) = self.noise_replays.lock() else { return build(&[at.index_topk]) };
            let key = noise_replay_key(at);
            match m.by_key.get(&key).and_then(|v| v.iter().find(|(ks, _)| ks.contains(&at.index_topk))) {
                Some((_, c)) => {
                    let c = c.clone();
                    drop(m);
                    return built_elsewhere(&c);
                }
                None => {
                    let topks = if at.max_topk != at.index_topk {
                        vec![at.index_topk, at.max_topk]
                    } else {
                        vec![at.index_topk]
                    };
                    let c: NoiseCell = Arc::new(OnceLock::new());
                    m.by_key.entry(key).or_default().push((topks.clone(), c.clone()));
                    (topks, c)
                }
            }
        };
        cell.get_or_init(|| {
            let built = build(&topks);
            if let (Ok(r), Ok(mut m)) = (&built, self.noise_replays.lock()) {
                let values = r.len() as u64;
                if m.values + values > self.replay_budget {
                    // Drop the replays built; keep the cells still being built (this one).
                    m.by_key.retain(|_, v| {
                        v.retain(|(_, c)| c.get().is_none());
                        !v.is_empty()
                    });
                    m.values = 0;
                }
                m.values += values;
            }
            built
        })
        .clone()
    }

    /// (analytic evaluations, Monte Carlo evaluations) so far.
    pub fn counts(&self) -> (u64, u64) {
        (self.analytic_calls.load(Ordering::Relaxed), self.mc_calls.load(Ordering::Relaxed))
    }

    /// Monte Carlo replays built so far (each 1.2–1.9 materialising runs).
    pub fn replays_built(&self) -> u64 {
        self.replays_built.load(Ordering::Relaxed)
    }

    /// Runs made for rank records so far ([`RankRecord`]: one run answering every k; one run
    /// for several needles, [`RankRecord::for_needles`], when told of them together:
    /// [`RecallModel::expect_k_curves`]).
    pub fn rank_records_built(&self) -> u64 {
        self.rank_records_built.load(Ordering::Relaxed)
    }
}

impl RecallModel for EngineModel {
    fn recall(&self, s: &Scenario) -> Result<f64, EngineError> {
        match route(s, self.choice)? {
            Route::Analytic(a) => {
                self.analytic_calls.fetch_add(1, Ordering::Relaxed);
                Ok(a.recall())
            }
            Route::MonteCarlo { .. } => self.mc(s),
        }
    }

    /// The exact engine's `super::analytic::Analytic::evaluation_key` where it applies; Monte Carlo keys on
    /// the whole scenario (a trial's draws follow the needle's position).
    fn evaluation_key(&self, s: &Scenario) -> String {
        match route(s, self.choice) {
            Ok(Route::Analytic(a)) => format!("exact {}", a.evaluation_key()),
            _ => serde_json::to_string(s).unwrap_or_default(),
        }
    }

    /// Monte Carlo scenarios that differ only in the needle's parameters get their rank records
    /// from one run (`EngineModel::prepare_rank_records`): the values are those of a record per
    /// scenario, exactly.
    fn expect_k_curves(&self, ss: &[Scenario]) {
        self.prepare_rank_records(ss);
    }

    /// Monte Carlo: one run keeps every trial's ranks ([`RankRecord`], kept for later curves of
    /// the same scenario) and answers each k from them, the counts of a run at that k exactly;
    /// analytic (or a record too large for the replay budget): one evaluation per k.
    fn recall_in_k<'a>(&'a self, s: &Scenario) -> Result<KCurve<'a>, EngineError> {
        s.validate()?;
        if s.model != Model::Scalar || !matches!(route(s, self.choice)?, Route::MonteCarlo { .. }) {
            return Ok(recall_per_k(self, s));
        }
        check_monte_carlo(s, &RunOptions { trials: self.trials, seed: self.seed, ..RunOptions::default() })?;
        if RankRecord::values(s, self.trials) > self.replay_budget {
            return Ok(recall_per_k(self, s));
        }
        let record = self.rank_record(s)?;
        let s = s.clone();
        Ok(Box::new(move |k| {
            let at_k = with_topk(&s, k);
            at_k.validate()?;
            match record.tally(&at_k) {
                Some(tally) => {
                    self.mc_calls.fetch_add(1, Ordering::Relaxed);
                    Ok(tally.successes as f64 / self.trials as f64)
                }
                None => self.recall(&at_k),
            }
        }))
    }

    /// Monte Carlo on the materialising path with pooled entries: one [`NoiseReplay`], built at
    /// the first positive level asked for (or kept from an earlier curve of the same scenario
    /// at another k: see `EngineModel::noise_replay`), answers every positive level with the
    /// counts of a run at it exactly; any other level (0, or one the analytic engine takes) is
    /// evaluated alone.
    fn recall_in_noise<'a>(&'a self, s: &Scenario) -> Result<NoiseCurve<'a>, EngineError> {
        s.validate()?;
        if s.model != Model::Scalar || self.replay_budget == 0 {
            return Ok(recall_per_noise(self, s));
        }
        let s = s.clone();
        let replay: OnceLock<Result<Arc<NoiseReplay>, EngineError>> = OnceLock::new();
        Ok(Box::new(move |v| {
            let at = with_noise(&s, v)?;
            at.validate()?;
            if !(v > 0.0 && matches!(route(&at, self.choice)?, Route::MonteCarlo { .. }) && NoiseReplay::covers(&at)) {
                return self.recall(&at);
            }
            check_monte_carlo(&at, &RunOptions { trials: self.trials, seed: self.seed, ..RunOptions::default() })?;
            let built = replay.get_or_init(|| self.noise_replay(&at));
            match built.as_ref().map_err(Clone::clone)?.tally(&at) {
                Some(tally) => {
                    self.mc_calls.fetch_add(1, Ordering::Relaxed);
                    Ok(tally.successes as f64 / self.trials as f64)
                }
                None => self.recall(&at),
            }
        }))
    }

    fn is_exact(&self, s: &Scenario) -> bool {
        matches!(route(s, self.choice), Ok(Route::Analytic(_)))
    }

    fn noise_curve_draws(&self, s: &Scenario) -> u64 {
        let Ok(at) = with_noise(s, 1.0) else { return 0 };
        if at.model != Model::Scalar || !matches!(route(&at, self.choice), Ok(Route::MonteCarlo { .. })) {
            return 0;
        }
        let path = if NoiseReplay::covers(&at) {
            super::montecarlo::McPath::Materialise
        } else {
            RunOptions::default().mc_path
        };
        super::montecarlo::trial_work(&at, path).map_or(0, |(per, _)| per.saturating_mul(self.trials))
    }

    fn layer_count_pmf(&self, s: &Scenario) -> Result<Vec<f64>, EngineError> {
        match route(s, EngineChoice::Analytic) {
            Ok(Route::Analytic(a)) => {
                self.analytic_calls.fetch_add(1, Ordering::Relaxed);
                Ok(a.layer_count_pmf())
            }
            Ok(Route::MonteCarlo { .. }) | Err(_) => Err(EngineError::NeedsExact(
                "per-layer selection data are fitted by their exact likelihood, which needs a scenario the analytic engine covers \
                 (pooling none or max without overlap, or mean pooling without overlap; not the vector model)"
                    .into(),
            )),
        }
    }

    fn describe(&self) -> String {
        let (a, m) = self.counts();
        let mc =
            format!("montecarlo (common random numbers: {} trials per evaluation, seed {})", self.trials, self.seed);
        match (a > 0, m > 0) {
            (_, false) => "analytic (exact quadrature)".to_string(),
            (false, true) => mc,
            (true, true) => format!("analytic where exact, {mc} elsewhere ({m} of {} evaluations)", a + m),
        }
    }
}
