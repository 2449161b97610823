//! Monte Carlo trials shared by the scalar engine and the vector model.

pub mod histogram;
