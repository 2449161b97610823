//! The importers (`import topk`, `import niah`, `import scores`), on fixtures and hostile input.
//!
//! One test binary per folder of tests/ (a link per binary saved): `cargo test --release --test import`
//! runs this folder, `cargo test --release --test import hostile_readers::` one file's tests.

#[path = "../common/mod.rs"]
mod common;

mod hostile_readers;
mod import_bad_input;
mod import_niah;
mod import_scores;
mod import_topk;
