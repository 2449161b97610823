//! The importers: measurements brought in from outside, one submodule per source.
//!
//! - [`topk`]: captured indexer top-k selections (SGLang, vLLM, .npz, .npy) → selections.csv
//!   (`dsa-sim import topk`).
//! - [`scores`]: captured indexer scores (.npz) → the needle's ranks, the distractors' tail and
//!   predicted recall (`dsa-sim import scores`).
//! - [`niah`]: needle-in-a-haystack harness results (gkamradt, RULER, lm-eval, NeedleBench) →
//!   a measured table (`dsa-sim import niah`).
//!
//! `scores` reads .npy headers with `topk`'s reader; nothing else crosses between them.

pub mod niah;
pub mod scores;
pub mod topk;
