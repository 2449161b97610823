//! The engines and models: analytic against references and Monte Carlo, the vector indexer model,
//! the layer stack, number formats, replays, property tests (and the CUDA backend with `--features cuda`).
//!
//! One test binary per folder of tests/ (a link per binary saved): `cargo test --release --test engines`
//! runs this folder, `cargo test --release --test engines analytic_reference::` one file's tests.

#[path = "../common/mod.rs"]
mod common;

mod analytic_reference;
mod cross_engine;
mod cuda_equivalence;
mod evaluation_key;
mod formats_vectors;
mod indexer_model;
mod noise_replay;
mod normal_tail;
mod properties;
mod quantize_properties;
mod replay_equivalence;
mod stack;
mod stack_reference;
mod vector_mechanisms;
