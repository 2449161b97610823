//! Geometry of one sparse layer (docs/model.md#geometry): candidate entries, the window and sink,
//! needle placement, which entries cover the needle, and the coverage horizon.
//!
//! Everything here is integer arithmetic on positions and never allocates per candidate: a
//! context of 10^9 tokens costs the same as one of 10^3.

use crate::scenario::{Pooling, RepeatLayout, Scenario};

/// An entry that pools at least one needle token.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NeedleEntry {
    /// Entry index in 0..N.
    pub index: u64,
    /// Tokens the entry pools (c, or 2c with overlap except entry 0).
    pub pool_size: u64,
    /// How many of those tokens are needle tokens (any copy).
    pub needle_tokens: u64,
}

/// The resolved geometry of a scenario.
#[derive(Debug, Clone, PartialEq)]
pub struct Geometry {
    /// N = floor(L / c) candidate entries.
    pub n_candidates: u64,
    /// min(max(k, min_topk), N): how many entries the indexer selects.
    pub k_eff: u64,
    /// Start token of each needle copy (each copy spans `needle_tokens` tokens).
    pub copy_starts: Vec<u64>,
    /// Some copy has a token inside the window or the sink: attended in every layer.
    pub always_attended: bool,
    /// The distinct entries covering any needle token, by index.
    pub needle_entries: Vec<NeedleEntry>,
    /// Resolved number of hard-negative candidates (clamped to the distractor entries).
    pub hard_negatives: u64,
    /// Distractor entries: N minus the needle entries.
    pub n_distractors: u64,
    /// P(some non-selecting layer of the stack delivers the needle): an `swa`, `hca` or `dense`
    /// layer whose window or sink holds a needle token delivers it; an `hca` or `dense` layer
    /// otherwise with probability `diluted_read`, independently of the others and of selection
    /// (docs/model.md#layer-stack). 0 without a stack.
    pub delivered: f64,
}

/// Tokens [start, end) pooled by entry `i`.
pub(crate) fn entry_tokens(i: u64, compress_ratio: u64, overlap: bool) -> (u64, u64) {
    let c = compress_ratio;
    let start = if overlap && i > 0 { (i - 1) * c } else { i * c };
    (start, i * c + c)
}

/// The entries, among the first `n`, that pool at least one token of the span [start, end)
/// (start < end): a contiguous range. Block β = t / c holds token t; entry β pools it, and with
/// overlap entry β + 1 too (it pools blocks β and β + 1, 2c tokens: the V4 CSA layout of
/// `entry_tokens`). Used by `capture` to map a measured needle's tokens to the entries an
/// indexer's top-k indices name, with the same convention [`Geometry::new`] uses.
pub(crate) fn covering_entries(
    start: u64,
    end: u64,
    compress_ratio: u64,
    overlap: bool,
    n: u64,
) -> std::ops::Range<u64> {
    debug_assert!(start < end && compress_ratio >= 1);
    let first = start / compress_ratio;
    let last = (end - 1) / compress_ratio + u64::from(overlap);
    first.min(n)..last.saturating_add(1).min(n)
}

/// Start positions of the needle copies.
pub(crate) fn copy_starts(s: &Scenario) -> Vec<u64> {
    let l = s.context_len;
    let m = s.needle_tokens;
    let r = s.repeat as u64;
    let at = |depth: f64, room: u64| -> u64 { ((depth * room as f64).floor() as u64).min(room) };
    if r == 1 {
        // A single copy sits at `depth` under either layout.
        return vec![at(s.depth, l - m)];
    }
    match s.repeat_layout {
        RepeatLayout::Spread => (0..r).map(|j| at((j as f64 + 0.5) / r as f64, l - m)).collect(),
        RepeatLayout::Adjacent => {
            let p = at(s.depth, l - r * m);
            (0..r).map(|j| p + j * m).collect()
        }
    }
}

/// Merges possibly overlapping token intervals [start, start + len) into sorted disjoint ones.
fn merge_spans(starts: &[u64], len: u64) -> Vec<(u64, u64)> {
    let mut spans: Vec<(u64, u64)> = starts.iter().map(|&p| (p, p + len)).collect();
    spans.sort_unstable();
    let mut out: Vec<(u64, u64)> = Vec::with_capacity(spans.len());
    for (a, b) in spans {
        match out.last_mut() {
            Some(last) if a <= last.1 => last.1 = last.1.max(b),
            _ => out.push((a, b)),
        }
    }
    out
}

impl Geometry {
    /// Resolves the geometry of a validated scenario.
    pub fn new(s: &Scenario) -> Geometry {
        let l = s.context_len;
        let c = s.compress_ratio;
        let n = l / c;
        let k_eff = s.index_topk.max(s.min_topk).min(n);
        let starts = copy_starts(s);
        let m = s.needle_tokens;
        // A window of W positions ends at the query token and includes it (V4's
        // get_window_topk_idxs): it holds the last W − 1 tokens of the context.
        let seen = |window: u64, sink: u64| {
            starts.iter().any(|&p| (window > 1 && p + m > l.saturating_sub(window - 1)) || p < sink)
        };
        let always_attended = seen(s.window, s.sink);
        // Non-selecting layers: P(none delivers) = Π (1 − d)^count.
        let mut none_delivers = 1.0f64;
        for e in s.stack.entries().iter().filter(|e| !e.kind.selects()) {
            let d = if seen(e.window.unwrap_or(s.window), e.sink.unwrap_or(s.sink)) {
                1.0
            } else if e.kind.reads_diluted() {
                s.diluted_read
            } else {
                0.0
            };
            none_delivers *= (1.0 - d).powi(e.count as i32);
        }

        let spans = merge_spans(&starts, m);
        let mut entries: Vec<NeedleEntry> = Vec::new();
        for &(a, b) in &spans {
            // Blocks touched by the span; with overlap, block β is also pooled by entry β + 1.
            let first = a / c;
            let last = (b - 1) / c + u64::from(s.overlap);
            let mut i = first;
            while i <= last && i < n {
                if entries.last().is_none_or(|e| e.index < i) {
                    let (ta, tb) = entry_tokens(i, c, s.overlap);
                    // Only the spans that meet [ta, tb) count: the spans are sorted and disjoint,
                    // so they are found by bisection, and the whole loop costs
                    // O(entries · log copies) instead of O(entries · copies).
                    let from = spans.partition_point(|&(_, y)| y <= ta);
                    let needle: u64 =
                        spans[from..].iter().take_while(|&&(x, _)| x < tb).map(|&(x, y)| y.min(tb) - x.max(ta)).sum();
                    if needle > 0 {
                        entries.push(NeedleEntry { index: i, pool_size: tb - ta, needle_tokens: needle });
                    }
                }
                i += 1;
            }
        }
        let n_distractors = n - entries.len() as u64;
        let h = s.hard_negatives;
        let hard = if h <= 0.0 {
            0
        } else if h < 1.0 {
            (h * n as f64).round() as u64
        } else {
            h as u64
        }
        .min(n_distractors);
        Geometry {
            n_candidates: n,
            k_eff,
            copy_starts: starts,
            always_attended,
            needle_entries: entries,
            hard_negatives: hard,
            n_distractors,
            delivered: 1.0 - none_delivers,
        }
    }

    /// P(correct answer | the selecting layers miss the needle): a non-selecting layer may still
    /// deliver it ([`Geometry::delivered`]), else the model guesses. Recall is then
    /// p_unselected + (p_read − p_unselected)·P(selecting layers attend).
    pub(crate) fn p_unselected(&self, p_read: f64, p_guess: f64) -> f64 {
        p_guess + (p_read - p_guess) * self.delivered
    }

    /// P(correct answer) when the selecting layers attend the needle with probability
    /// `attended`: p_u + (p_read − p_u)·attended, p_u = [`Geometry::p_unselected`]. The one
    /// formula of every exact recall (the analytic engine, the captured-score law and its
    /// predictions); Monte Carlo draws it through the readout rule.
    pub(crate) fn answer_probability(&self, p_read: f64, p_guess: f64, attended: f64) -> f64 {
        let p_u = self.p_unselected(p_read, p_guess);
        p_u + (p_read - p_u) * attended
    }

    /// The needle's tokens as sorted, disjoint [start, end) spans (copies merged).
    pub(crate) fn needle_spans(&self, needle_tokens: u64) -> Vec<(u64, u64)> {
        merge_spans(&self.copy_starts, needle_tokens)
    }

    /// Tokens pooled by every distractor entry when all entries pool alike, else `None`
    /// (overlap with mean / max pooling: entry 0 pools c tokens, the others 2c).
    pub fn uniform_pool_size(&self, s: &Scenario) -> Option<u64> {
        match (s.pooling, s.overlap) {
            (Pooling::None, _) => Some(1),
            (_, false) => Some(s.compress_ratio),
            (_, true) if self.n_candidates <= 1 => Some(s.compress_ratio),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sc(l: u64, c: u64, overlap: bool) -> Scenario {
        Scenario { context_len: l, compress_ratio: c, overlap, index_topk: 16, ..Scenario::default() }
    }

    #[test]
    fn depth_zero_and_one() {
        let mut s = sc(1000, 4, false);
        s.needle_tokens = 3;
        s.depth = 0.0;
        let g = Geometry::new(&s);
        assert_eq!(g.copy_starts, vec![0]);
        assert_eq!(g.needle_entries, vec![NeedleEntry { index: 0, pool_size: 4, needle_tokens: 3 }]);
        s.depth = 1.0;
        let g = Geometry::new(&s);
        assert_eq!(g.copy_starts, vec![997]);
        // Tokens 997..999 lie in block 249 = the last complete block (N = 250).
        assert_eq!(g.needle_entries, vec![NeedleEntry { index: 249, pool_size: 4, needle_tokens: 3 }]);
        assert_eq!(g.n_distractors, 249);
    }

    #[test]
    fn needle_straddling_a_block_boundary() {
        let mut s = sc(1000, 4, false);
        s.needle_tokens = 2;
        s.depth = 7.0 / 998.0; // p = 7: tokens 7, 8 in blocks 1 and 2
        let g = Geometry::new(&s);
        assert_eq!(g.copy_starts, vec![7]);
        assert_eq!(
            g.needle_entries,
            vec![
                NeedleEntry { index: 1, pool_size: 4, needle_tokens: 1 },
                NeedleEntry { index: 2, pool_size: 4, needle_tokens: 1 }
            ]
        );
    }

    #[test]
    fn overlap_entry_zero_and_neighbours() {
        let mut s = sc(1000, 4, true);
        s.depth = 0.0;
        let g = Geometry::new(&s);
        // Token 0 is pooled by entry 0 (its own block only) and entry 1 (blocks 0 and 1).
        assert_eq!(
            g.needle_entries,
            vec![
                NeedleEntry { index: 0, pool_size: 4, needle_tokens: 1 },
                NeedleEntry { index: 1, pool_size: 8, needle_tokens: 1 }
            ]
        );
        assert_eq!(entry_tokens(0, 4, true), (0, 4));
        assert_eq!(entry_tokens(5, 4, true), (16, 24));
        // The last complete block is pooled only by its own entry: no entry N exists.
        s.depth = 1.0;
        let g = Geometry::new(&s);
        assert_eq!(g.needle_entries, vec![NeedleEntry { index: 249, pool_size: 8, needle_tokens: 1 }]);
    }

    #[test]
    fn short_contexts() {
        // L < c: no complete block, no candidates; only the window can attend the needle.
        let s = sc(3, 4, false);
        let g = Geometry::new(&s);
        assert_eq!(g.n_candidates, 0);
        assert!(g.needle_entries.is_empty());
        assert!(!g.always_attended);
        let s = Scenario { window: 8, ..sc(3, 4, false) };
        assert!(Geometry::new(&s).always_attended);
        // L < W: everything is in the window (W positions include the query token).
        let s = Scenario { window: 1001, depth: 0.0, ..sc(1000, 1, false) };
        assert!(Geometry::new(&s).always_attended);
        // Tokens of an incomplete trailing block are in no entry.
        let s = Scenario { depth: 1.0, ..sc(1002, 4, false) };
        let g = Geometry::new(&s);
        assert_eq!(g.copy_starts, vec![1001]);
        assert!(g.needle_entries.is_empty());
    }

    #[test]
    fn k_eff_and_horizon() {
        let s = sc(40, 4, false);
        let g = Geometry::new(&s);
        assert_eq!(g.n_candidates, 10);
        assert_eq!(g.k_eff, 10);
        assert_eq!(s.coverage_horizon_tokens(), 64);
    }

    #[test]
    fn window_and_sink_edges() {
        let s = Scenario { window: 128, depth: 1.0, ..sc(10_000, 4, true) };
        assert!(Geometry::new(&s).always_attended);
        // Needle ends exactly where the window begins: not inside it.
        let s = Scenario { window: 128, depth: (10_000.0 - 129.0) / 9_999.0, ..sc(10_000, 1, false) };
        let g = Geometry::new(&s);
        assert_eq!(g.copy_starts, vec![9_871]);
        assert!(!g.always_attended);
        // The window of 128 positions includes the query token (position 10 000): it holds
        // tokens 9 873..9 999, so token 9 872, the 128th from the end, is outside it.
        let at = |p: u64| Scenario { window: 128, depth: p as f64 / 9_999.0, ..sc(10_000, 1, false) };
        assert_eq!(Geometry::new(&at(9_872)).copy_starts, vec![9_872]);
        assert!(!Geometry::new(&at(9_872)).always_attended);
        assert!(Geometry::new(&at(9_873)).always_attended);
        // A window of one position is the query token alone.
        assert!(!Geometry::new(&Scenario { window: 1, ..at(9_999) }).always_attended);
        let s = Scenario { sink: 1, depth: 0.0, ..sc(10_000, 1, false) };
        assert!(Geometry::new(&s).always_attended);
    }

    #[test]
    fn repeat_copies_sharing_an_entry() {
        let mut s = sc(1000, 16, false);
        s.repeat = 3;
        s.repeat_layout = RepeatLayout::Adjacent;
        s.needle_tokens = 2;
        s.depth = 0.5;
        let g = Geometry::new(&s);
        assert_eq!(g.copy_starts, vec![497, 499, 501]);
        // Tokens 497..503 lie in blocks 31 (496..512): one entry holds all six needle tokens.
        assert_eq!(g.needle_entries, vec![NeedleEntry { index: 31, pool_size: 16, needle_tokens: 6 }]);
        s.repeat_layout = RepeatLayout::Spread;
        let g = Geometry::new(&s);
        assert_eq!(g.copy_starts, vec![166, 499, 831]);
        // Copy 3 (tokens 831, 832) straddles blocks 51 and 52.
        assert_eq!(g.needle_entries.len(), 4);
    }

    #[test]
    fn hard_negative_count_resolution() {
        let s = Scenario { hard_negatives: 0.25, ..sc(1000, 1, false) };
        assert_eq!(Geometry::new(&s).hard_negatives, 250);
        let s = Scenario { hard_negatives: 5000.0, ..sc(1000, 1, false) };
        assert_eq!(Geometry::new(&s).hard_negatives, 999);
    }

    /// The needle tokens of each entry by brute force over every token (small contexts).
    fn brute_entries(s: &Scenario) -> Vec<NeedleEntry> {
        let starts = copy_starts(s);
        let is_needle = |t: u64| starts.iter().any(|&p| t >= p && t < p + s.needle_tokens);
        (0..s.n_candidates())
            .filter_map(|i| {
                let (ta, tb) = entry_tokens(i, s.compress_ratio, s.overlap);
                let k = (ta..tb).filter(|&t| is_needle(t)).count() as u64;
                (k > 0).then_some(NeedleEntry { index: i, pool_size: tb - ta, needle_tokens: k })
            })
            .collect()
    }

    #[test]
    fn needle_entries_match_brute_force() {
        for (l, c, overlap, m, r, layout) in [
            (4096, 4, true, 3, 37, RepeatLayout::Spread),
            (4096, 4, false, 5, 64, RepeatLayout::Adjacent),
            (1000, 16, true, 7, 200, RepeatLayout::Spread),
            (1000, 1, false, 1, 999, RepeatLayout::Spread),
            (333, 3, true, 2, 100, RepeatLayout::Adjacent),
        ] {
            let mut s = sc(l, c, overlap);
            s.needle_tokens = m;
            s.repeat = r;
            s.repeat_layout = layout;
            s.validate().unwrap();
            assert_eq!(Geometry::new(&s).needle_entries, brute_entries(&s), "{l} {c} {overlap} {m} {r} {layout:?}");
        }
    }

    #[test]
    fn many_copies_cost_little() {
        // 2^20 copies of a one-token needle in 2^40 tokens: bisection keeps this well under a
        // second (the pairwise sum took hours at the accepted maximum).
        let mut s = sc(1 << 40, 4, true);
        s.repeat = 1 << 20;
        s.validate().unwrap();
        let t = std::time::Instant::now();
        let g = Geometry::new(&s);
        assert_eq!(g.needle_entries.len(), 2 << 20);
        assert!(t.elapsed().as_secs_f64() < 5.0, "{:?}", t.elapsed());
    }

    #[test]
    fn covering_entries_agree_with_the_geometry() {
        for (l, c, overlap) in
            [(1000, 4, true), (1000, 4, false), (1002, 4, true), (333, 3, true), (64, 1, false), (100, 16, true)]
        {
            for m in [1, 2, 5, 17] {
                for p in (0..=l - m).step_by(7) {
                    let mut s = sc(l, c, overlap);
                    s.needle_tokens = m;
                    s.depth = p as f64 / (l - m) as f64;
                    let g = Geometry::new(&s);
                    let p = g.copy_starts[0];
                    let want: Vec<u64> = g.needle_entries.iter().map(|e| e.index).collect();
                    let got: Vec<u64> = covering_entries(p, p + m, c, overlap, g.n_candidates).collect();
                    assert_eq!(got, want, "L={l} c={c} overlap={overlap} m={m} p={p}");
                }
            }
        }
    }

    #[test]
    fn huge_context_costs_nothing() {
        let s = Scenario { context_len: 1_000_000_000, compress_ratio: 4, overlap: true, ..Scenario::default() };
        let g = Geometry::new(&s);
        assert_eq!(g.n_candidates, 250_000_000);
        assert_eq!(g.needle_entries.len(), 2);
    }
}
