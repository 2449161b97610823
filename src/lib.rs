//! # dsa-sim
//!
//! Simulates sparse-attention retrieval (DeepSeek Sparse Attention, DeepSeek-V4 CSA, Quest, NSA)
//! to tell whether a lost long-context needle is a **coverage** problem (the needle ranks just
//! outside the top-k: raise `index_topk`) or a **discrimination** problem (the indexer does not
//! score it high enough: no feasible k helps, precision must improve).
//!
//! The scalar model (docs/model.md): N = floor(L / c) candidate entries, each with an
//! indexer score; the needle's entries score Normal(dprime, needle_sd²) per token against
//! standardised distractors, pooled by `none`, `mean` or `max`, with optional score noise, hard
//! negatives, repeats, several layers and a readout rule. The needle is attended when one of its
//! entries ranks within the top k (or it lies in the window or sink).
//!
//! The vector model ([`indexer`], `model = "vector"`): the lightning indexer itself — H heads,
//! ReLU scoring, gated compression, Hadamard rotation, q/k quantized with any
//! [`formats::Format`] — simulated by Monte Carlo, with the effective scalar parameters it implies
//! ([`indexer::effective`]).
//!
//! Two engines compute recall and the needle's rank distribution:
//! [`engine::analytic`] (exact quadrature, absolute error ≤ 1e-6) and [`engine::montecarlo`]
//! (any scenario, reproducible from a seed whatever the thread count). [`engine::estimate`]
//! picks the analytic engine where it is exact.
//!
//! ```
//! use dsa_sim::{Scenario, engine::{estimate, RunOptions}};
//!
//! // One DeepSeek-V4-Flash indexer layer at 128K tokens, a needle 3 sd above a typical
//! // distractor (the preset itself is the whole model: 21 selecting layers).
//! let mut s = Scenario::preset("deepseek-v4-flash").unwrap().one_layer();
//! s.context_len = 131_072;
//! s.dprime = 3.0;
//! let e = estimate(&s, &RunOptions::default()).unwrap();
//! assert!(e.recall > 0.9 && e.recall < 1.0);
//! assert_eq!(e.ci_low, e.recall); // exact: the analytic engine was used
//!
//! // Raising k can only help.
//! s.index_topk = 1024;
//! let e2 = estimate(&s, &RunOptions::default()).unwrap();
//! assert!(e2.recall > e.recall);
//! ```
//!
//! Calibration fits scenario fields to measured recall ([`mod@calibrate`]; tables in the format of
//! [`measured`]); the verdict ([`mod@verdict`]) says whether some k within the kernel's limit
//! reaches a target:
//!
//! ```
//! use dsa_sim::calibrate::{calibrate, parse_csv, parse_fit_spec};
//! use dsa_sim::engine::{estimate, EngineChoice, EngineModel, RunOptions};
//! use dsa_sim::verdict::{verdict, Call, VerdictOptions};
//! use dsa_sim::Scenario;
//!
//! // A table measured on a system whose needle sits 2.5 sd above a typical distractor: the
//! // expected hits of 400 trials per cell, as a harness would report them.
//! let mut truth = Scenario::preset("deepseek-v4-flash").unwrap().one_layer();
//! truth.dprime = 2.5;
//! let mut csv = String::from("context_len,index_topk,trials,hits\n");
//! for (l, k) in [(16384, 512), (65536, 512), (262144, 512), (262144, 1024)] {
//!     let (mut s, trials) = (truth.clone(), 400.0);
//!     (s.context_len, s.index_topk) = (l, k);
//!     let recall = estimate(&s, &RunOptions::default()).unwrap().recall;
//!     csv.push_str(&format!("{l},{k},{trials},{}\n", (recall * trials).round()));
//! }
//! let data = parse_csv(&csv, "example").unwrap();
//!
//! // Fit dprime by maximum likelihood with a 95% profile interval: it recovers the truth.
//! let base = Scenario::preset("deepseek-v4-flash").unwrap().one_layer();
//! let model = EngineModel::new(EngineChoice::Analytic, 4000, 1);
//! let free = parse_fit_spec("dprime", Some(&data)).unwrap();
//! let fit = calibrate(&data, &base, free, &model, true, false).unwrap();
//! let d = &fit.estimates[0];
//! assert!(d.ci_low < 2.5 && 2.5 < d.ci_high, "{} [{}, {}]", d.value, d.ci_low, d.ci_high);
//!
//! // At 128K tokens with the fitted needle, raising k reaches 90% recall within the kernel's
//! // maximum: coverage-limited. A needle at dprime 0.5 could not: discrimination-limited.
//! let mut s = base.clone();
//! (s.context_len, s.dprime) = (131_072, d.value);
//! let opts = VerdictOptions { target: 0.9, max_topk: s.max_topk };
//! assert_eq!(verdict(&s, &model, opts).unwrap().call, Call::CoverageLimited);
//! s.dprime = 0.5;
//! assert_eq!(verdict(&s, &model, opts).unwrap().call, Call::DiscriminationLimited);
//! ```
//!
//! # The public API
//!
//! The main entry points are re-exported at the crate root:
//!
//! - [`Scenario`] (and [`ScenarioError`]): the model's parameters, from a preset, TOML or fields;
//!   [`scenario`] has the field table ([`scenario::Field`]), presets and keywords.
//! - [`estimate`], [`Estimate`], [`RunOptions`]: recall and rank of one scenario, by the engine
//!   that fits it; [`Analytic`] and [`engine::montecarlo`] are the two engines, [`EngineModel`]
//!   (a [`RecallModel`]) the engine choice that calibration, verdict and diagnosis evaluate.
//! - [`calibrate()`](calibrate::calibrate), [`FitResult`]: scenario fields fitted to a measured
//!   table ([`Dataset`], read by [`parse_csv`] or [`load_csv`]; format in [`measured`]).
//! - [`verdict()`](verdict::verdict), [`Verdict`], [`Call`], [`VerdictOptions`]: coverage- or
//!   discrimination-limited, for a scenario.
//! - [`diagnose`], [`Diagnosis`]: the verdict of a measured table (fit, hypotheses, error rates,
//!   next measurement); the plan and condition checks are in [`diagnosis`].
//! - Imports of measured data: [`import::niah`] (harness outputs), [`import::topk`] (captured
//!   selections), [`import::scores`] (captured indexer scores).
//! - [`indexer::VectorModel`]: the vector model; [`formats::Format`]: number formats.
//! - [`commands`]: each command's request and result, as the command line and the Python
//!   package run them; [`CommandError`] carries the exit kind ([`error::ErrorKind`]).
//!
//! Everything else is `pub(crate)`: what stays public is what those users (the binary, the
//! Python package, benches, fuzz targets, integration tests) need, so the internals can change
//! without a breaking release.
#![deny(missing_docs)]
// `!(x > 0.0)` is how this crate rejects NaN together with the out-of-range values; the
// partial_cmp spelling clippy suggests would hide that.
#![allow(clippy::neg_cmp_op_on_partial_ord)]

// Modules from the bottom layer up: each imports only modules listed above it (checked by
// tests/repo/layers.rs). The command line is not part of the library: it is src/cli/, a module of
// the binary (src/main.rs), over `commands`, which computes each command's result for it and
// for the Python package (python/).
pub mod calibrate;
pub mod commands;
pub mod diagnosis;
pub mod engine;
pub mod error;
pub mod experiment;
pub(crate) mod figure;
pub mod formats;
pub mod geometry;
pub mod import;
pub mod indexer;
pub(crate) mod input;
pub mod measured;
pub mod output;
pub mod present;
pub mod probe;
pub mod progress;
pub mod quadrature;
pub mod scenario;
pub mod scores;
pub mod stats;
pub mod sweep;
pub mod trials;
pub mod vector_fields;
pub mod verdict;

pub use calibrate::{FitResult, ParamEstimate};
pub use commands::CommandError;
pub use diagnosis::{diagnose, Diagnosis};
pub use engine::analytic::Analytic;
pub use engine::{estimate, EngineChoice, EngineModel, Estimate, RecallModel, RunOptions};
pub use measured::{load_csv, parse_csv, Dataset, Observation};
pub use scenario::{Scenario, ScenarioError};
pub use verdict::{Call, Verdict, VerdictOptions};
