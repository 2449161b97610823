//! Score laws of the scalar model (docs/model.md#scalar-score-model): distractor tokens, pooled
//! entries, needle.
//!
//! [`distractor::TokenLaw`] is a standardised token law; [`entry::EntryLaw`] is an entry's score
//! after pooling and score noise, in the closed forms the analytic engine integrates and the
//! exact-sampling Monte Carlo path inverts. [`ScoreModel`] maps a scenario and its geometry to
//! those laws, and says when no closed form exists.

pub(crate) mod distractor;
pub(crate) mod entry;
pub(crate) mod key;
mod model;
pub(crate) mod ziggurat;

pub use distractor::TokenLaw;
pub use entry::EntryLaw;
pub use model::ScoreModel;
pub(crate) use model::{needle_token, NotExact};
