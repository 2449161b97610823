//! Effective scalar parameters of the vector model and format comparisons.
