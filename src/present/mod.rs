//! Presenters: the text and JSON of a command's result, one module per output (hyperfine's
//! `export/` is the model). The domain modules return typed results; what a person or a program
//! reads is built here.

pub mod calibrate;
pub mod estimate;
pub mod import;
pub mod plan;
pub mod probe;
pub mod verdict;
