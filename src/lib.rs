//! dsa-sim: simulates sparse-attention needle retrieval.
#![deny(missing_docs)]

pub mod geometry;
pub mod scenario;

pub use scenario::{Scenario, ScenarioError};
pub mod calibrate;
pub mod verdict;
