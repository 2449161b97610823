//! The Monte Carlo engine: any scenario, rayon-parallel, reproducible.
//!
//! The scenario is prepared once into a plan, a [`TrialPlan`](crate::trials::TrialPlan) that the shared driver
//! ([`crate::trials::run`]) runs chunk by chunk: trial i draws only from
//! `crate::trials::trial_rng(seed, i)` and the counts merge by addition, so the output is
//! identical for any thread count and any rerun.
//!
//! Two paths:
//! - **exact sampling** (closed-form laws): draw the needle's best entry score Y, then the number
//!   of distractors above it, Binomial(n_regular, Q(Y)) + Binomial(n_hard, Q_hard(Y)). No
//!   candidate is materialised; a trial costs the same at N = 10^3 and N = 10^9. Single-layer
//!   trials run `BATCH` at a time (`Plan::exact_batched`) with results identical to running
//!   them one by one.
//! - **materialising**: every candidate's score is drawn (from its tokens when pooling), for the
//!   cases without closed-form laws (overlapping mean/max pooling, noise on non-normal laws, …).
//!   Memory is one f64 per block per thread, reused across trials; at most
//!   [`MAX_MATERIALISED_CANDIDATES`] candidates (128 MiB per thread), a larger scenario is
//!   refused up front instead of failing to allocate.
//!
//! One file per mechanism, each importing only from those above it in this list:
//! - `kth_largest`: the k-th largest of a layer's scores (replays); `k_effs`: k_eff at other k.
//! - `plan`: [`McPath`], limits, the prepared plan and a trial's order of draws.
//! - `exact`, `materialise`: the two sampling paths, as methods of the plan.
//! - `run`: [`simulate`], [`simulate_observed`] and the dispatch between the paths.
//! - `replay` ([`Replay`]), `rank_record` ([`RankRecord`]), `noise_layer` and `noise_replay`
//!   ([`NoiseReplay`]): records of one run that answer other parameters exactly.

mod exact;
mod k_effs;
mod kth_largest;
mod materialise;
mod noise_layer;
mod noise_replay;
mod plan;
mod rank_record;
mod replay;
mod run;

pub use noise_replay::{noise_replay_key, NoiseReplay};
pub use plan::{materialises, trial_work, McPath, MAX_MATERIALISED_CANDIDATES};
pub use rank_record::{rank_key, RankRecord};
pub use replay::{replay_key, Replay, ReplayScratch};
pub use run::{simulate, simulate_observed};
