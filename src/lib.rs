//! dsa-sim: simulates sparse-attention needle retrieval.
#![deny(missing_docs)]

pub mod formats;
pub mod geometry;
pub mod scenario;

pub use scenario::{Scenario, ScenarioError};
