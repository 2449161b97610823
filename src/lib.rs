//! dsa-sim: simulates sparse-attention needle retrieval.
#![deny(missing_docs)]

pub mod cli;
pub mod engine;
pub mod geometry;
pub mod quadrature;
pub mod scenario;
pub mod scores;
pub mod stats;

pub use scenario::{Scenario, ScenarioError};
pub mod calibrate;
pub mod verdict;
