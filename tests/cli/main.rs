//! The command line as a user runs it: every command's output, errors and refusals, files written
//! safely, interruption, determinism, scale, the shipped cluster examples.
//!
//! One test binary per folder of tests/ (a link per binary saved): `cargo test --release --test cli`
//! runs this folder, `cargo test --release --test cli bound_messages::` one file's tests.

#[path = "../common/mod.rs"]
mod common;

mod bound_messages;
mod cli_indexer;
mod cli_quantize;
mod cli_recall_rank;
mod cluster_examples;
mod determinism;
mod device;
mod fine_print;
mod hardening;
mod help_presets;
mod hostile_inputs;
mod interrupt;
mod output_safety;
mod run_cli;
mod scale;
mod shard_merge;
mod shell_integration;
mod sweep_cli;
