//! dsa-sim: simulates sparse-attention needle retrieval.
//!
//! (crate documentation is written as the modules land)
