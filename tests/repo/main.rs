//! The repository's own promises: the library's layering, the documented examples, the shipped
//! result folders and figures, the committed fuzz corpus.
//!
//! One test binary per folder of tests/ (a link per binary saved): `cargo test --release --test repo`
//! runs this folder, `cargo test --release --test repo figure_text::` one file's tests.

#[path = "../common/mod.rs"]
mod common;

mod figure_text;
mod fuzz_corpus;
mod layers;
mod readme_examples;
mod results_reproduce;
