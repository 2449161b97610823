//! The effective k of a scenario at other `index_topk`: what the records answer for several k.
//!
//! Kept apart because both [`Replay`](super::Replay) and [`NoiseReplay`](super::NoiseReplay)
//! keep one part of each layer record per distinct k_eff.

use crate::geometry::Geometry;
use crate::scenario::Scenario;

/// The effective k of `s` at `index_topk` = k (its geometry's `k_eff`: the kernel's floor and
/// the candidate count applied).
pub(super) fn k_eff_at(s: &Scenario, k: u64) -> u64 {
    Geometry::new(&Scenario { index_topk: k, ..s.clone() }).k_eff
}

/// The distinct k_eff of `s` at each k of `topks` (`s`'s own k when `topks` is empty), in order.
pub(super) fn distinct_k_effs(s: &Scenario, topks: &[u64]) -> Vec<u64> {
    let mut k_effs: Vec<u64> = Vec::with_capacity(topks.len().max(1));
    for &k in if topks.is_empty() { std::slice::from_ref(&s.index_topk) } else { topks } {
        let k_eff = k_eff_at(s, k.max(1));
        if !k_effs.contains(&k_eff) {
            k_effs.push(k_eff);
        }
    }
    k_effs
}
