//! The verdict and the diagnosis: calls on constructed truths, their error rates, public reports,
//! condition dependence.
//!
//! One test binary per folder of tests/ (a link per binary saved): `cargo test --release --test verdict`
//! runs this folder, `cargo test --release --test verdict conditions::` one file's tests.
//! tests/verdict_corpus.rs is a binary of its own: it times each verdict it runs (at most 10 s),
//! which a test of this binary running beside it would slow.

#[path = "../common/mod.rs"]
mod common;

mod conditions;
mod diagnose_truths;
mod error_rates_refit;
mod verdict_calls;
mod verdict_reports;
mod verdict_sparse_truths;
mod verdict_truths;
