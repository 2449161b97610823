//! `dsa-sim probe` against the loopback test server (tests/probe_server) and hostile servers.
//!
//! One test binary per folder of tests/ (a link per binary saved): `cargo test --release --test probe`
//! runs this folder, `cargo test --release --test probe probe_bad_servers::` one file's tests.

#[path = "../probe_server/mod.rs"]
mod probe_server;

mod probe_bad_servers;
mod probe_hostile;
mod probe_loop;
mod probe_run;
mod probe_tokenizer;
mod probe_units;
mod probe_until_decided;
