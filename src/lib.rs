//! dsa-sim: simulates sparse-attention needle retrieval.
#![deny(missing_docs)]

pub mod scenario;

pub use scenario::{Scenario, ScenarioError};
pub mod sweep;
pub mod report;
