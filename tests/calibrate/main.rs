//! Calibration: parameter recovery, selections, the shared tables, closed-form checks, captured
//! distractor laws, overdispersion, and the planning of measurements.
//!
//! One test binary per folder of tests/ (a link per binary saved): `cargo test --release --test calibrate`
//! runs this folder, `cargo test --release --test calibrate calibrate_recovery::` one file's tests.

#[path = "../common/mod.rs"]
mod common;

mod calibrate_recovery;
mod calibrate_selections;
mod calibrate_shared;
mod calibrate_toy;
mod empirical_law;
mod overdispersion;
mod plan_information;
