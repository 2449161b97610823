//! The vector lightning-indexer model (docs/model.md#vector-model), simulated by Monte Carlo.
//!
//! One layer of one trial. Every draw is addressed, not streamed (`philox`): layer l of trial
//! i draws from [`Draws::new`]`(seed, i, l)` at (purpose, row, index), so entry j's key is a pure
//! function of (seed, i, l, j) and the CPU and a GPU (`cuda.rs`) make the same keys in any order:
//! 1. **Queries.** H heads q_h ∈ R^d, iid Normal(0, D²) where D scales the first
//!    `outlier_channels` channels by `outlier_scale` (1 elsewhere): H·d normals, head by head.
//! 2. **Head weights** ([`HeadWeights`]). `signed` (default): w_h = z_h · H^-1/2 · d^-1/2, z_h
//!    standard normal, H draws per layer and trial — DeepSeek's per-query, signed
//!    `weights_proj(x) · softmax_scale · H^-1/2` (V4 `inference/model.py`:418) of an RMS-normed
//!    hidden state; one positive factor common to all heads cannot change a rank, so only the
//!    sign and spread law matter. `fixed`: w_h = H^-1/2 · d^-1/2 · exp(0.5 z_h − 0.125) from
//!    `WEIGHT_SEED`, no draw. The **query direction** is u = Σ_h w_h q_h / ‖Σ_h w_h q_h‖ with
//!    the trial's weights, in the unrotated (content) frame.
//! 3. **Gate logits** (`compressor = "gated"`): Normal(0, `gate_pos_sd`²) per (position,
//!    channel), the previous half's c·d then the own half's c·d, position-major — V4's learned
//!    positional bias `ape`. Their softmax gives the pooling weights when `gate_token_sd` is 0.
//! 4. **Key gain** (`key_gain_sd` σ_g > 0 with `key_norm`): g_j = exp(σ_g z_j), d draws.
//! 5. **Entries**, [`KEY_BLOCK`] at a time. With `gate_token_sd` σ_tok > 0 (gated), first the
//!    entry's token-dependent logits, σ_tok·z per pooled (position, channel) (entry 0 or no
//!    overlap: own block only), added to the positional logits before the per-channel softmax. Then the key: a shortcut entry's d normals, or a
//!    token-built entry's tokens (d normals each, planted for needle and hard tokens: draw
//!    g ~ Normal(0, D²), keep its norm, set its cosine with u to `alignment` / `hard_alignment`:
//!    x = ‖g‖ (α u + √(1−α²) ĝ⊥); one look-alike token in each of `hard_negatives` blocks that
//!    share no entry with the needle; with overlap only every other block, so at most N/2).
//!    Entry i pools its c tokens, and with `overlap` also the c tokens of block i−1 through a
//!    *second, independent* projection (V4 splits the compressor's 2d channels into the
//!    overlapping and the current half); `mean` weighs them 1/(pooled tokens).
//! 6. **Finishing a key**: with `key_norm`, RMS normalisation (V4's compressor RMSNorm, V3.2's
//!    LayerNorm) times the gain g; RoPE (`rope_dims` > 0) at the entry's block start
//!    i·c; with `hadamard`, the orthonormal Hadamard matrix. Queries get RoPE at position
//!    L = `context_len` and the Hadamard matrix. RoPE rotates the last `rope_dims` channels in
//!    pairs (2k, 2k+1) (`rope_at = "last"`, V4) or the first in pairs (k, k + r/2) (`"first"`,
//!    V3.2) by position · f_k, f_k from `yarn_freqs`; the cos/sin table per entry position is
//!    built once per model. Every key is rotated (the shortcut's per-channel sds differ within
//!    a pair), so the needle's match depends on its true distance L − i·c.
//! 7. **Quantization.** q_h (one head vector at a time) and every entry key are
//!    quantize-dequantized with `q_format` and `k_format` (the indexer cache stores compressed
//!    keys). A format's block scales run along the head dimension; NVFP4's tensor scale is per
//!    head vector / per key.
//! 8. **Scores and rank.** I(q, k) = Σ_h w_h ReLU(q_h · k) for every entry ([`kernel`]); the needle's
//!    rank is 1 + the number of entries scoring strictly above its best covering entry.
//!
//! **Quest** (`compressor = "quest"`): page i's key is the per-channel max and min of its own c
//! token keys (2d values, each half quantized with `k_format`), scored Σ_j max(q_j M_j, q_j m_j)
//! with head 0's query (also the planting direction u); no weights, ReLU, key norm, RoPE or
//! Hadamard, and every page is built from its tokens.
//!
//! The normals are Philox4x32-10 + Box–Muller in plain f32 operations (`philox`); the head
//! weights, gate logits and gains use them in f64. The readout draws from `trial_rng(seed, i)`.
//!
//! With `head_weights = "fixed"`, `rope_dims = 0`, `key_gain_sd = 0`, `gate_pos_sd = 1` and
//! `gate_token_sd = 0` the model is the earlier one in law (and was bit for bit until the
//! sampler changed; tests/engines/vector_mechanisms.rs pins it).
//!
//! **Exact shortcut.** An entry without needle or hard-negative tokens has key Σ_t p_t x_t with
//! fixed weights p and iid Gaussian x_t, hence exactly Normal(0, D² Σ_t p_t²) per channel,
//! independent across entries (with overlap, neighbouring entries read the shared block through
//! independent projections). Those entries are drawn directly: d normals per entry instead of
//! c·d or 2c·d. With σ_tok > 0 the weights, hence Σ_t p_t², are random per entry: the entry's
//! logits are drawn exactly first (about 9× the normals at V4's c = 4 with overlap, and 2c·d
//! exponentials: a 128K V4 layer about 20× slower). Entries
//! that pool a needle or hard token are built token by token. The
//! explicit token path for every entry is kept for testing ([`VectorModel::with_token_path`]).
//!
//! Fields of the scalar model that the vector model ignores: distractor, hard_mean, dprime,
//! needle_sd, pooling, score_noise, layer_corr (layers are independent draws). Window, sink,
//! geometry, repeat, layers, readout, p_read and p_guess act as in the scalar model.

#[cfg(feature = "cuda")]
pub mod cuda;
pub mod device;
pub mod effective;
pub(crate) mod hadamard;
pub mod kernel;
pub(crate) mod philox;

use crate::formats::Format;
use crate::geometry::Geometry;
use crate::progress::{Progress, Silent};
use crate::scenario::{Compressor, Scenario};
use crate::trials::{trial_rng, ReadoutRule, Tally, TrialPlan};
pub(crate) use crate::vector_fields::{HeadWeights, RopeAt};
pub use philox::Draws;
use rand::Rng;
use rand_distr::StandardNormal;

/// Seed of the fixed per-head weights.
pub(crate) const WEIGHT_SEED: u64 = 0x5EED_4EAD_0000_0064;

/// Trials per parallel work item (vector trials are expensive; chunks only affect scheduling).
const CHUNK: u64 = 4;

/// Entry keys a trial holds at once (512 KiB at d = 128).
pub const KEY_BLOCK: usize = 1024;

/// YaRN's `beta_fast` (V4-Flash `inference/config.json`; V3.2 `ModelArgs.beta_fast`).
pub(crate) const YARN_BETA_FAST: f64 = 32.0;

/// YaRN's `beta_slow` (same sources).
pub(crate) const YARN_BETA_SLOW: f64 = 1.0;

/// RoPE frequencies f_k (k < dims/2) with YaRN, in f64: a port of V4's `precompute_freqs_cis`
/// (DeepSeek-V4-Flash `inference/model.py`:199–228; V3.2's is the same formula). f_k =
/// θ^(−2k/dims); with `original_len` > 0, f_k ← f_k/factor · (1 − s_k) + f_k · s_k where s_k =
/// 1 − clamp((k − low)/(high − low), 0, 1), low = ⌊D(β_fast)⌋ ≥ 0, high = ⌈D(β_slow)⌉ ≤ dims − 1,
/// D(β) = dims · ln(original_len / (2π β)) / (2 ln θ) (high += 0.001 when low = high).
pub(crate) fn yarn_freqs(dims: usize, theta: f64, factor: f64, original_len: u64) -> Vec<f64> {
    let half = dims / 2;
    let mut f: Vec<f64> = (0..half).map(|k| 1.0 / libm::pow(theta, (2 * k) as f64 / dims as f64)).collect();
    if original_len > 0 {
        let corr = |rot: f64| {
            dims as f64 * libm::log(original_len as f64 / (rot * 2.0 * std::f64::consts::PI)) / (2.0 * libm::log(theta))
        };
        let low = corr(YARN_BETA_FAST).floor().max(0.0);
        let mut high = corr(YARN_BETA_SLOW).ceil().min(dims as f64 - 1.0);
        if low == high {
            high += 0.001;
        }
        for (k, v) in f.iter_mut().enumerate() {
            let ramp = ((k as f64 - low) / (high - low)).clamp(0.0, 1.0);
            let smooth = 1.0 - ramp;
            *v = *v / factor * (1.0 - smooth) + *v * smooth;
        }
    }
    f
}

/// RoPE of one layer geometry: which channels, and cos/sin per entry position (computed once
/// per [`VectorModel`], f64 angles stored as f32).
#[derive(Debug, Clone)]
struct Rope {
    /// Pairs rotated (rope_dims / 2).
    pairs: usize,
    /// First rotated channel.
    start: usize,
    /// V3.2's half-split pairing (else V4's interleaved).
    half_split: bool,
    /// cos and sin at the query's position, `pairs` each.
    q_cos: Vec<f32>,
    q_sin: Vec<f32>,
    /// cos and sin at entry i's position i·c, rows of `pairs` (empty beyond [`ROPE_TABLE_MAX`]:
    /// then computed per entry from `freqs`, the same values).
    cos: Vec<f32>,
    sin: Vec<f32>,
    freqs: Vec<f64>,
    /// Tokens per entry c.
    c: u64,
}

/// The largest RoPE table (entries × pairs, 2^25: 256 MiB of cos and sin) a model precomputes;
/// beyond it each entry's angles are computed when its key is finished (slower, same values).
pub(crate) const ROPE_TABLE_MAX: usize = 1 << 25;

impl Rope {
    /// cos and sin of position · f_k in f64 (the portable `libm`, so the same on every
    /// platform), stored as f32.
    fn table(freqs: &[f64], pos: f64, cos: &mut Vec<f32>, sin: &mut Vec<f32>) {
        for &f in freqs {
            let (s, c) = libm::sincos(pos * f);
            cos.push(c as f32);
            sin.push(s as f32);
        }
    }

    /// cos and sin of every entry position i·c (rows of `freqs.len()`), the entries split over
    /// the thread pool (each value is [`Rope::table`]'s: the same for any split).
    fn tables(freqs: &[f64], n: u64, c: u64) -> (Vec<f32>, Vec<f32>) {
        use rayon::prelude::*;
        let pairs = freqs.len();
        let (mut cos, mut sin) = (vec![0.0f32; n as usize * pairs], vec![0.0f32; n as usize * pairs]);
        if pairs == 0 {
            return (cos, sin);
        }
        cos.par_chunks_mut(pairs).zip(sin.par_chunks_mut(pairs)).enumerate().for_each(|(i, (co, si))| {
            let (mut cv, mut sv) = (Vec::with_capacity(pairs), Vec::with_capacity(pairs));
            Rope::table(freqs, (i as u64 * c) as f64, &mut cv, &mut sv);
            co.copy_from_slice(&cv);
            si.copy_from_slice(&sv);
        });
        (cos, sin)
    }

    /// Rotates channel pairs of `x` by the angles whose cos and sin are given
    /// ((a, b) → (a cos − b sin, a sin + b cos), the complex product of `apply_rotary_emb`).
    #[inline]
    fn rotate(&self, x: &mut [f32], cos: &[f32], sin: &[f32]) {
        let (p, s0) = (self.pairs, self.start);
        if self.half_split {
            let (a, b) = x[s0..s0 + 2 * p].split_at_mut(p);
            for k in 0..p {
                let (u, v) = (a[k], b[k]);
                a[k] = u * cos[k] - v * sin[k];
                b[k] = u * sin[k] + v * cos[k];
            }
        } else {
            for (k, pair) in x[s0..s0 + 2 * p].chunks_exact_mut(2).enumerate() {
                let (u, v) = (pair[0], pair[1]);
                pair[0] = u * cos[k] - v * sin[k];
                pair[1] = u * sin[k] + v * cos[k];
            }
        }
    }

    fn rotate_entry(&self, x: &mut [f32], i: usize) {
        let p = self.pairs;
        if self.cos.is_empty() {
            let (mut c, mut s) = ([0.0f32; 2048], [0.0f32; 2048]);
            let pos = (i as u64 * self.c) as f64;
            for (k, &f) in self.freqs.iter().enumerate().take(2048) {
                let (sv, cv) = libm::sincos(pos * f);
                c[k] = cv as f32;
                s[k] = sv as f32;
            }
            self.rotate(x, &c[..p], &s[..p]);
            return;
        }
        let (c, s) = (&self.cos[i * p..i * p + p], &self.sin[i * p..i * p + p]);
        self.rotate(x, c, s);
    }

    fn rotate_query(&self, x: &mut [f32]) {
        self.rotate(x, &self.q_cos, &self.q_sin);
    }
}

/// The fixed per-head weights w_h (see the module docs).
pub(crate) fn head_weights(heads: usize, head_dim: usize) -> Vec<f32> {
    let mut rng = trial_rng(WEIGHT_SEED, heads as u64);
    let base = 1.0 / ((heads as f64).sqrt() * (head_dim as f64).sqrt());
    (0..heads)
        .map(|_| {
            let z: f64 = rng.sample(StandardNormal);
            (base * (0.5 * z - 0.125).exp()) as f32
        })
        .collect()
}

/// What kind of token a position holds.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Kind {
    Plain,
    Needle,
    Hard,
}

/// A validated scenario prepared for vector trials.
#[derive(Debug, Clone)]
pub struct VectorModel {
    /// The resolved geometry (entries, window, needle entries).
    pub geometry: Geometry,
    heads: usize,
    hp: usize,
    d: usize,
    c: usize,
    overlap: bool,
    weights: Vec<f32>,
    chan_scale: Vec<f32>,
    alignment: f64,
    hard_alignment: f64,
    hadamard: bool,
    key_norm: bool,
    gated: bool,
    /// Query format.
    pub q_format: Format,
    /// Key format.
    pub k_format: Format,
    needle_spans: Vec<(u64, u64)>,
    /// First token of each hard-negative block, sorted.
    hard_tokens: Vec<u64>,
    /// Entries that pool a needle or hard token, sorted.
    special_entries: Vec<u64>,
    /// Entries that pool a hard token (sorted): excluded from the distractor statistics.
    hard_entries: Vec<u64>,
    rule: ReadoutRule,
    token_path: bool,
    signed_weights: bool,
    /// `compressor = "quest"`: page keys (max, min) and Quest's score.
    quest: bool,
    rope: Option<Rope>,
    key_gain_sd: f64,
    gate_pos_sd: f64,
    /// sd of the token-dependent gate logits; 0 unless the compressor is gated.
    gate_token_sd: f64,
}

/// Per-thread buffers, reused across trials: N scores and [`KEY_BLOCK`] keys in a trial,
/// N keys when [`VectorModel::draw`] draws them all.
#[derive(Default, Debug, Clone)]
pub struct Scratch {
    /// Queries, H rows of d (rotated; quantized after [`VectorModel::quantize`]).
    pub q: Vec<f32>,
    /// Transposed padded queries for the kernel.
    qt: Vec<f32>,
    /// Entry keys, rows of d: all N after [`VectorModel::draw`], one block during a trial.
    pub keys: Vec<f32>,
    /// Entry scores.
    pub scores: Vec<f32>,
    u: Vec<f64>,
    tok: Vec<f32>,
    acc: Vec<f32>,
    w_first: Vec<f32>,
    w_prev: Vec<f32>,
    w_own: Vec<f32>,
    sd_first: Vec<f32>,
    sd_rest: Vec<f32>,
    /// This layer's head weights (padded with zeros to the kernel's head count).
    pub w: Vec<f32>,
    gain: Vec<f32>,
    lg_prev: Vec<f32>,
    lg_own: Vec<f32>,
    ew_prev: Vec<f32>,
    ew_own: Vec<f32>,
    sd_entry: Vec<f32>,
}

impl VectorModel {
    /// Prepares a validated scenario (any `model` value: the vector fields are always set).
    pub fn new(s: &Scenario) -> VectorModel {
        let geometry = Geometry::new(s);
        let heads = s.heads as usize;
        let d = s.head_dim as usize;
        let c = s.compress_ratio as usize;
        let hp = kernel::padded_heads(heads);
        let mut weights = head_weights(heads, d);
        weights.resize(hp, 0.0);
        let chan_scale: Vec<f32> =
            (0..d).map(|j| if j < s.outlier_channels as usize { s.outlier_scale as f32 } else { 1.0 }).collect();
        let n = geometry.n_candidates;
        let needle_spans = geometry.needle_spans(s.needle_tokens);
        let needle_entries: Vec<u64> = geometry.needle_entries.iter().map(|e| e.index).collect();
        let is_needle_entry = |e: u64| needle_entries.binary_search(&e).is_ok();
        // Hard-negative blocks: one look-alike token each, in blocks sharing no entry with the
        // needle; every other block with overlap so that no entry pools two of them.
        let stride = 1 + s.overlap as u64;
        let mut hard_tokens = Vec::new();
        let mut hard_entries = Vec::new();
        let mut b = 0u64;
        while (hard_tokens.len() as u64) < geometry.hard_negatives && b < n {
            let touches = is_needle_entry(b) || (s.overlap && b + 1 < n && is_needle_entry(b + 1));
            if !touches {
                hard_tokens.push(b * s.compress_ratio);
                hard_entries.push(b);
                if s.overlap && b + 1 < n {
                    hard_entries.push(b + 1);
                }
                b += stride;
            } else {
                b += 1;
            }
        }
        let mut special_entries: Vec<u64> = needle_entries.iter().chain(&hard_entries).copied().collect();
        special_entries.sort_unstable();
        special_entries.dedup();
        let gated = s.compressor == Compressor::Gated && (c > 1 || s.overlap);
        let quest = s.compressor == Compressor::Quest;
        let rope_dims = if quest { 0 } else { (s.rope_dims as usize).min(d) & !1 };
        let rope = (rope_dims > 0).then(|| {
            let freqs = yarn_freqs(rope_dims, s.rope_theta, s.rope_factor, s.rope_orig_len);
            let pairs = rope_dims / 2;
            let (mut q_cos, mut q_sin) = (Vec::with_capacity(pairs), Vec::with_capacity(pairs));
            Rope::table(&freqs, s.context_len as f64, &mut q_cos, &mut q_sin);
            let (mut cos, mut sin) = (Vec::new(), Vec::new());
            if (n as usize).saturating_mul(pairs) <= ROPE_TABLE_MAX {
                (cos, sin) = Rope::tables(&freqs, n, s.compress_ratio);
            }
            let last = s.rope_at == RopeAt::Last;
            let start = if last { d - rope_dims } else { 0 };
            Rope { pairs, start, half_split: !last, q_cos, q_sin, cos, sin, freqs, c: s.compress_ratio }
        });
        VectorModel {
            rule: ReadoutRule::new(s, &geometry),
            geometry,
            heads,
            hp,
            d,
            c,
            overlap: s.overlap,
            weights,
            chan_scale,
            alignment: s.alignment,
            hard_alignment: s.hard_alignment,
            hadamard: s.hadamard && !quest,
            key_norm: s.key_norm && !quest,
            gated,
            q_format: s.q_format,
            k_format: s.k_format,
            needle_spans,
            hard_tokens,
            special_entries,
            hard_entries,
            token_path: false,
            signed_weights: s.head_weights == HeadWeights::Signed && !quest,
            quest,
            rope,
            key_gain_sd: if s.key_norm && !quest { s.key_gain_sd } else { 0.0 },
            gate_pos_sd: s.gate_pos_sd,
            gate_token_sd: if gated { s.gate_token_sd } else { 0.0 },
        }
    }

    /// Builds every entry from its tokens (no Gaussian shortcut): slower, for testing.
    pub fn with_token_path(mut self, on: bool) -> VectorModel {
        self.token_path = on;
        self
    }

    /// Candidate entries N.
    pub fn n_entries(&self) -> usize {
        self.geometry.n_candidates as usize
    }

    /// Head dimension d.
    pub fn head_dim(&self) -> usize {
        self.d
    }

    /// Indexer heads H.
    pub fn heads(&self) -> usize {
        self.heads
    }

    /// Whether entry `i` pools a hard-negative token.
    pub(crate) fn is_hard_entry(&self, i: u64) -> bool {
        self.hard_entries.binary_search(&i).is_ok()
    }

    /// Whether entry `i` covers the needle.
    pub(crate) fn is_needle_entry(&self, i: u64) -> bool {
        self.geometry.needle_entries.iter().any(|e| e.index == i)
    }

    fn kind(&self, t: u64) -> Kind {
        if self.needle_spans.iter().any(|&(a, b)| t >= a && t < b) {
            Kind::Needle
        } else if self.hard_tokens.binary_search(&t).is_ok() {
            Kind::Hard
        } else {
            Kind::Plain
        }
    }

    /// Draws one layer's unquantized (rotated) queries and entry keys into `sc.q` and `sc.keys`
    /// (all N keys at once: for comparing formats on the same draws; a trial streams them).
    pub fn draw(&self, dr: &Draws, sc: &mut Scratch) {
        let n = self.n_entries();
        self.draw_query(dr, sc);
        sc.keys.resize(n * self.key_len(), 0.0);
        self.draw_keys(dr, sc, 0..n);
        self.rotate_queries(sc);
    }

    /// Values per stored entry key: d, or 2d for Quest's page key (max then min).
    fn key_len(&self) -> usize {
        if self.quest {
            2 * self.d
        } else {
            self.d
        }
    }

    /// Quest's page key of entry `i`: the per-channel max then min of its c token keys (its own
    /// block only), into `out` (2d values).
    fn quest_page(&self, i: usize, dr: &Draws, u: &[f64], tok: &mut [f32], out: &mut [f32]) {
        let (c, d) = (self.c, self.d);
        let (hi, lo) = out.split_at_mut(d);
        hi.iter_mut().for_each(|v| *v = f32::NEG_INFINITY);
        lo.iter_mut().for_each(|v| *v = f32::INFINITY);
        for p in 0..c {
            self.token((i * c + p) as u64, dr, i, p, u, tok);
            for j in 0..d {
                hi[j] = hi[j].max(tok[j]);
                lo[j] = lo[j].min(tok[j]);
            }
        }
    }

    /// Quest's page scores Σ_j max(q_j M_j, q_j m_j) with head 0's query, summed in channel
    /// order.
    fn quest_scores(&self, q: &[f32], keys: &[f32], out: &mut [f32]) {
        let d = self.d;
        for (key, o) in keys.chunks_exact(2 * d).zip(out.iter_mut()) {
            let (hi, lo) = key.split_at(d);
            let mut s = 0.0f32;
            for j in 0..d {
                s += (q[j] * hi[j]).max(q[j] * lo[j]);
            }
            *o = s;
        }
    }

    /// The layer's queries (unrotated), their direction, and the compressor's pooling weights:
    /// every draw that precedes the keys.
    fn draw_query(&self, dr: &Draws, sc: &mut Scratch) {
        let (h, d, c) = (self.heads, self.d, self.c);
        sc.q.resize(h * d, 0.0);
        sc.u.resize(d, 0.0);
        sc.tok.resize(d, 0.0);
        sc.acc.resize(d, 0.0);
        // Queries and the query direction.
        for (hh, row) in sc.q.chunks_exact_mut(d).enumerate() {
            dr.fill(philox::QUERY, hh as u32, 0, row);
            for (x, s) in row.iter_mut().zip(&self.chan_scale) {
                *x *= s;
            }
        }
        sc.w.clone_from(&self.weights);
        if self.signed_weights {
            let base = 1.0 / ((h as f64).sqrt() * (d as f64).sqrt());
            sc.gain.resize(h.max(d), 0.0);
            dr.fill(philox::WEIGHT, 0, 0, &mut sc.gain[..h]);
            for (w, &z) in sc.w[..h].iter_mut().zip(&sc.gain) {
                *w = (base * z as f64) as f32;
            }
        }
        sc.u.iter_mut().for_each(|v| *v = 0.0);
        if self.quest {
            // Quest scores with one head: its query is the direction.
            for (u, &x) in sc.u.iter_mut().zip(&sc.q[..d]) {
                *u = x as f64;
            }
        } else {
            for (row, &w) in sc.q.chunks_exact(d).zip(&sc.w) {
                for (u, &x) in sc.u.iter_mut().zip(row) {
                    *u += w as f64 * x as f64;
                }
            }
        }
        let norm = sc.u.iter().map(|v| v * v).sum::<f64>().sqrt();
        sc.u.iter_mut().for_each(|v| *v /= norm);
        // Pooling weights: entry 0 (own block only) and the others (previous + own block).
        let own_positions = c;
        for buf in [
            &mut sc.w_first,
            &mut sc.w_prev,
            &mut sc.w_own,
            &mut sc.lg_prev,
            &mut sc.lg_own,
            &mut sc.ew_prev,
            &mut sc.ew_own,
        ] {
            buf.resize(c * d, 0.0);
        }
        if self.gated {
            // Positional logits per (position, channel): row 0 the previous half, row 1 the own.
            for (row, lg) in [&mut sc.lg_prev, &mut sc.lg_own].into_iter().enumerate() {
                dr.fill(philox::GATE_POS, row as u32, 0, lg);
                for v in lg.iter_mut() {
                    *v = (self.gate_pos_sd * *v as f64) as f32;
                }
            }
            sc.w_prev.copy_from_slice(&sc.lg_prev);
            sc.w_own.copy_from_slice(&sc.lg_own);
            for j in 0..d {
                // Entry 0 (and every entry without overlap): softmax over its own c positions.
                let m_own = (0..c).map(|p| sc.w_own[p * d + j] as f64).fold(f64::NEG_INFINITY, f64::max);
                let z_own: f64 = (0..c).map(|p| (sc.w_own[p * d + j] as f64 - m_own).exp()).sum();
                for p in 0..c {
                    sc.w_first[p * d + j] = ((sc.w_own[p * d + j] as f64 - m_own).exp() / z_own) as f32;
                }
                if self.overlap {
                    let m_prev = (0..c).map(|p| sc.w_prev[p * d + j] as f64).fold(f64::NEG_INFINITY, f64::max);
                    let m = m_own.max(m_prev);
                    let z: f64 = (0..c)
                        .map(|p| (sc.w_prev[p * d + j] as f64 - m).exp() + (sc.w_own[p * d + j] as f64 - m).exp())
                        .sum();
                    for p in 0..c {
                        sc.w_prev[p * d + j] = ((sc.w_prev[p * d + j] as f64 - m).exp() / z) as f32;
                        sc.w_own[p * d + j] = ((sc.w_own[p * d + j] as f64 - m).exp() / z) as f32;
                    }
                }
            }
        } else {
            sc.w_first.iter_mut().for_each(|v| *v = 1.0 / own_positions as f32);
            let both = 1.0 / (2 * c) as f32;
            sc.w_prev.iter_mut().for_each(|v| *v = both);
            sc.w_own.iter_mut().for_each(|v| *v = both);
        }
        // Shortcut standard deviations per channel.
        sc.sd_first.resize(d, 0.0);
        sc.sd_rest.resize(d, 0.0);
        for j in 0..d {
            let s1: f64 = (0..c).map(|p| (sc.w_first[p * d + j] as f64).powi(2)).sum();
            let s2: f64 =
                (0..c).map(|p| (sc.w_prev[p * d + j] as f64).powi(2) + (sc.w_own[p * d + j] as f64).powi(2)).sum();
            let cs = self.chan_scale[j] as f64;
            sc.sd_first[j] = (cs * s1.sqrt()) as f32;
            sc.sd_rest[j] = (cs * if self.overlap { s2.sqrt() } else { s1.sqrt() }) as f32;
        }
        // The key norm's per-channel gain.
        sc.gain.clear();
        sc.gain.resize(d, 1.0);
        if self.key_gain_sd > 0.0 {
            dr.fill(philox::GAIN, 0, 0, &mut sc.gain);
            for g in sc.gain.iter_mut() {
                *g = libm::exp(self.key_gain_sd * *g as f64) as f32;
            }
        }
    }

    /// Entry `i`'s pooling weights with the token-dependent gate: softmax per channel of the
    /// positional logits plus σ_tok·z, z ~ N(0, 1) per pooled (position, channel) (drawn by
    /// channel, [`philox::gate_block`]), into `ew_prev` / `ew_own` (entry 0, or no overlap: own
    /// block only, in `ew_own`); and the shortcut's sd per channel into `sd_entry`. Channel by
    /// channel, in the order the GPU kernel repeats (`cuda.rs`): the max over the own then the
    /// previous block's logits, the exponentials ([`philox::exp_neg`]) and their sum (own then
    /// previous at each position), then the weights and Σ p².
    fn entry_gate(&self, i: usize, dr: &Draws, sc: &mut Scratch) {
        let (c, d) = (self.c, self.d);
        let with_prev = self.overlap && i > 0;
        let sd = self.gate_token_sd as f32;
        sc.sd_entry.resize(d, 0.0);
        let cb = c.div_ceil(4);
        let (mut own, mut prev) = (vec![0.0f32; c], vec![0.0f32; c]);
        for j in 0..d {
            for (half, buf) in [(0u32, &mut own), (1, &mut prev)] {
                if half == 1 && !with_prev {
                    break;
                }
                let lg = if half == 0 { &sc.lg_own } else { &sc.lg_prev };
                for q in 0..cb {
                    let (blk, _) = philox::gate_block(half, j as u32, d as u32, c as u32, 4 * q as u32);
                    let z = dr.normals4(philox::GATE_TOKEN, i as u32, blk);
                    for (l, &zv) in z.iter().enumerate().take(c - 4 * q) {
                        let p = 4 * q + l;
                        buf[p] = lg[p * d + j] + sd * zv;
                    }
                }
            }
            let mut m = own[0];
            for &v in &own[1..c] {
                m = m.max(v);
            }
            if with_prev {
                for &v in &prev[..c] {
                    m = m.max(v);
                }
            }
            let mut z = 0.0f32;
            for p in 0..c {
                own[p] = philox::exp_neg(own[p] - m);
                z += own[p];
                if with_prev {
                    prev[p] = philox::exp_neg(prev[p] - m);
                    z += prev[p];
                }
            }
            let inv = 1.0 / z;
            let mut ss = 0.0f32;
            for p in 0..c {
                own[p] *= inv;
                ss += own[p] * own[p];
                sc.ew_own[p * d + j] = own[p];
                if with_prev {
                    prev[p] *= inv;
                    ss += prev[p] * prev[p];
                    sc.ew_prev[p * d + j] = prev[p];
                }
            }
            sc.sd_entry[j] = self.chan_scale[j] * ss.sqrt();
        }
    }

    /// Entry keys `entries` (drawn in entry order, finished: normalised and rotated) into the
    /// first rows of `sc.keys`.
    fn draw_keys(&self, dr: &Draws, sc: &mut Scratch, entries: std::ops::Range<usize>) {
        let d = self.d;
        let start = entries.start;
        if self.quest {
            let kl = 2 * d;
            for i in entries {
                let row = i - start;
                self.quest_page(i, dr, &sc.u, &mut sc.tok, &mut sc.keys[row * kl..row * kl + kl]);
            }
            return;
        }
        let mut next_special = self.special_entries.partition_point(|&e| e < start as u64);
        for i in entries {
            let special = self.special_entries.get(next_special) == Some(&(i as u64));
            if special {
                next_special += 1;
            }
            let row = i - start;
            let token_gate = self.gate_token_sd > 0.0;
            if token_gate {
                self.entry_gate(i, dr, sc);
            }
            let key = &mut sc.keys[row * d..row * d + d];
            if special || self.token_path {
                let (wf, wp, wo) = if token_gate {
                    (&sc.ew_own, &sc.ew_prev, &sc.ew_own)
                } else {
                    (&sc.w_first, &sc.w_prev, &sc.w_own)
                };
                self.entry_from_tokens(i, dr, &sc.u, wf, wp, wo, &mut sc.tok, &mut sc.acc);
                key.copy_from_slice(&sc.acc);
            } else {
                let sd = if token_gate {
                    &sc.sd_entry
                } else if i == 0 {
                    &sc.sd_first
                } else {
                    &sc.sd_rest
                };
                dr.fill(philox::KEY, i as u32, 0, key);
                for (x, s) in key.iter_mut().zip(sd) {
                    *x *= s;
                }
            }
            self.finish_key(key, i, &sc.gain);
        }
    }

    /// RoPE at the query's position and the Hadamard rotation of every head (no randomness: may
    /// run before or after the keys are drawn).
    fn rotate_queries(&self, sc: &mut Scratch) {
        for row in sc.q.chunks_exact_mut(self.d) {
            if let Some(rope) = &self.rope {
                rope.rotate_query(row);
            }
            if self.hadamard {
                hadamard::fwht_orthonormal(row);
            }
        }
    }

    /// RMS normalisation (with the gain), RoPE at entry `i`'s position and the Hadamard rotation
    /// of one entry key.
    #[inline]
    fn finish_key(&self, key: &mut [f32], i: usize, gain: &[f32]) {
        if self.key_norm {
            let ss = sum_squares(key);
            if ss > 0.0 {
                let s = (key.len() as f32 / ss).sqrt();
                key.iter_mut().for_each(|v| *v *= s);
            }
            if self.key_gain_sd > 0.0 {
                key.iter_mut().zip(gain).for_each(|(v, g)| *v *= g);
            }
        }
        if let Some(rope) = &self.rope {
            rope.rotate_entry(key, i);
        }
        if self.hadamard {
            hadamard::fwht_orthonormal(key);
        }
    }

    /// Entry `i`'s key from its tokens, into `acc`.
    #[allow(clippy::too_many_arguments)]
    fn entry_from_tokens(
        &self,
        i: usize,
        dr: &Draws,
        u: &[f64],
        w_first: &[f32],
        w_prev: &[f32],
        w_own: &[f32],
        tok: &mut [f32],
        acc: &mut [f32],
    ) {
        let (c, d) = (self.c, self.d);
        acc.iter_mut().for_each(|v| *v = 0.0);
        let own_start = (i * c) as u64;
        let with_prev = self.overlap && i > 0;
        if with_prev {
            let prev_start = own_start - c as u64;
            for p in 0..c {
                self.token(prev_start + p as u64, dr, i, c + p, u, tok);
                let w = &w_prev[p * d..p * d + d];
                for j in 0..d {
                    acc[j] += w[j] * tok[j];
                }
            }
        }
        let w_own_block = if with_prev { w_own } else { w_first };
        for p in 0..c {
            self.token(own_start + p as u64, dr, i, p, u, tok);
            let w = &w_own_block[p * d..p * d + d];
            for j in 0..d {
                acc[j] += w[j] * tok[j];
            }
        }
    }

    /// Token `t`'s key projection as pooled by entry `entry` in its slot `slot` (p < c: own
    /// block; c + p: the previous block through the second projection), planted for needle
    /// and hard tokens, into `out`.
    fn token(&self, t: u64, dr: &Draws, entry: usize, slot: usize, u: &[f64], out: &mut [f32]) {
        dr.fill(philox::TOKEN, entry as u32, (slot * self.d.div_ceil(4)) as u32, out);
        for (x, s) in out.iter_mut().zip(&self.chan_scale) {
            *x *= s;
        }
        let alpha = match self.kind(t) {
            Kind::Plain => return,
            Kind::Needle => self.alignment,
            Kind::Hard => self.hard_alignment,
        };
        plant(out, u, alpha);
    }

    /// Quantize-dequantizes the queries (per head) and keys (per entry) in place.
    /// (Quest: its max and min rows separately.)
    pub fn quantize(&self, q_format: &Format, k_format: &Format, sc: &mut Scratch) {
        quantize_rows(q_format, &mut sc.q, self.d);
        quantize_rows(k_format, &mut sc.keys, self.d);
    }

    /// Scores every entry with the current `sc.q` and `sc.keys` into `sc.scores`.
    pub fn score(&self, sc: &mut Scratch) {
        let (hp, d, n) = (self.hp, self.d, self.n_entries());
        sc.scores.resize(n, 0.0);
        if self.quest {
            self.quest_scores(&sc.q[..d], &sc.keys, &mut sc.scores);
            return;
        }
        self.transpose_queries(sc);
        kernel::score(&sc.qt, &sc.w, hp, d, &sc.keys, &mut sc.scores);
    }

    /// `sc.q` into the kernel's padded, transposed layout `sc.qt`.
    fn transpose_queries(&self, sc: &mut Scratch) {
        let (h, hp, d) = (self.heads, self.hp, self.d);
        sc.qt.resize(d * hp, 0.0);
        sc.qt.iter_mut().for_each(|v| *v = 0.0);
        for hh in 0..h {
            for j in 0..d {
                sc.qt[j * hp + hh] = sc.q[hh * d + j];
            }
        }
    }

    /// The needle's best covering entry score, if it is in any entry.
    pub(crate) fn needle_score(&self, scores: &[f32]) -> Option<f32> {
        self.geometry.needle_entries.iter().map(|e| scores[e.index as usize]).reduce(f32::max)
    }

    /// The needle's rank from `sc.scores`: 1 + entries scoring strictly above its best entry.
    pub fn rank(&self, scores: &[f32]) -> Option<u64> {
        let y = self.needle_score(scores)?;
        Some(1 + scores.iter().filter(|&&x| x > y).count() as u64)
    }

    /// One layer: draw, quantize with the scenario's formats, score; the needle's rank. The keys
    /// are streamed [`KEY_BLOCK`] entries at a time (drawn, quantized, scored, discarded), so a
    /// thread holds N scores and one block of keys rather than all N keys. The draws, and so the
    /// scores, are those of [`VectorModel::draw`] + [`VectorModel::quantize`] +
    /// [`VectorModel::score`] (tested).
    pub fn layer_rank(&self, dr: &Draws, sc: &mut Scratch) -> Option<u64> {
        let (hp, d, n) = (self.hp, self.d, self.n_entries());
        self.draw_query(dr, sc);
        self.rotate_queries(sc);
        quantize_rows(&self.q_format, &mut sc.q, d);
        self.transpose_queries(sc);
        sc.scores.resize(n, 0.0);
        let kl = self.key_len();
        sc.keys.resize(KEY_BLOCK.min(n) * kl, 0.0);
        let mut start = 0;
        while start < n {
            let end = (start + KEY_BLOCK).min(n);
            self.draw_keys(dr, sc, start..end);
            let keys = &mut sc.keys[..(end - start) * kl];
            quantize_rows(&self.k_format, keys, d);
            if self.quest {
                self.quest_scores(&sc.q[..d], keys, &mut sc.scores[start..end]);
            } else {
                kernel::score(&sc.qt, &sc.w, hp, d, keys, &mut sc.scores[start..end]);
            }
            start = end;
        }
        self.rank(&sc.scores)
    }

    /// Trial `i` of `seed`: every layer (its draws from [`Draws::new`]`(seed, i, layer)`),
    /// the readout and the answer (drawn from `trial_rng(seed, i)`), added to `tally` (its
    /// success, attendance and first layer's rank; not `tally.trials`).
    pub fn trial(&self, seed: u64, i: u64, sc: &mut Scratch, tally: &mut Tally) {
        let mut attending = 0u32;
        for layer in 0..self.rule.layers() {
            let rank = self.layer_rank(&Draws::new(seed, i, layer), sc);
            if layer == 0 {
                tally.ranks.record(rank);
            }
            attending += self.rule.attends(rank) as u32;
        }
        self.rule.conclude(attending, &mut trial_rng(seed, i), tally);
    }
}

impl TrialPlan for VectorModel {
    type Scratch = Scratch;

    /// Vector trials are expensive: few per work item.
    fn chunk(&self) -> u64 {
        CHUNK
    }

    fn run_trials(&self, seed: u64, range: std::ops::Range<u64>, scratch: &mut Scratch, tally: &mut Tally) {
        for i in range {
            self.trial(seed, i, scratch, tally);
        }
    }
}

/// Σ v² in a fixed order that vectorises: 8 lane sums (lane l takes v[l], v[l+8], …), then
/// ((s0+s4)+(s2+s6)) + ((s1+s5)+(s3+s7)); a remainder of fewer than 8 values is added last, in
/// order. The same on every CPU.
#[inline]
fn sum_squares(v: &[f32]) -> f32 {
    let mut s = [0.0f32; 8];
    let mut chunks = v.chunks_exact(8);
    for c in &mut chunks {
        for l in 0..8 {
            s[l] += c[l] * c[l];
        }
    }
    let mut t = ((s[0] + s[4]) + (s[2] + s[6])) + ((s[1] + s[5]) + (s[3] + s[7]));
    for x in chunks.remainder() {
        t += x * x;
    }
    t
}

/// Quantize-dequantizes every row of `d` values in place (one head vector or one entry key:
/// block scales run along it). Block sizes divide d and every value is finite (validated), so
/// the format cannot fail here.
fn quantize_rows(format: &Format, rows: &mut [f32], d: usize) {
    if *format != Format::F32 {
        for row in rows.chunks_exact_mut(d) {
            let _ = format.quantize_dequantize_in_place(row);
        }
    }
}

/// Replaces `x` by a vector of the same norm whose cosine with the unit vector `u` is `alpha`:
/// ‖x‖ (α u + √(1−α²) x⊥/‖x⊥‖).
pub(crate) fn plant(x: &mut [f32], u: &[f64], alpha: f64) {
    let norm = x.iter().map(|&v| (v as f64).powi(2)).sum::<f64>().sqrt();
    let along: f64 = x.iter().zip(u).map(|(&v, &e)| v as f64 * e).sum();
    let perp_norm = (x.iter().zip(u).map(|(&v, &e)| (v as f64 - along * e).powi(2)).sum::<f64>()).sqrt();
    let beta = (1.0 - alpha * alpha).max(0.0).sqrt();
    for (v, &e) in x.iter_mut().zip(u) {
        let perp = if perp_norm > 0.0 { (*v as f64 - along * e) / perp_norm } else { 0.0 };
        *v = (norm * (alpha * e + beta * perp)) as f32;
    }
}

/// Runs `trials` vector-model trials of a validated scenario (trial i from `trial_rng(seed, i)`),
/// in parallel; identical results for any thread count.
pub fn simulate(s: &Scenario, trials: u64, seed: u64) -> Tally {
    simulate_observed(s, trials, seed, &Silent)
}

/// [`simulate`], reporting each finished chunk of trials to `progress`.
pub(crate) fn simulate_observed(s: &Scenario, trials: u64, seed: u64, progress: &dyn Progress) -> Tally {
    crate::trials::run(&VectorModel::new(s), trials, seed, progress)
}

/// `simulate_observed` on `device` (checked beforehand by [`device::Device::check`]): the
/// same trials and counts on a CUDA device (`cuda`). The error is a device's failure mid-run.
pub fn simulate_on(
    s: &Scenario,
    trials: u64,
    seed: u64,
    device: device::Device,
    progress: &dyn Progress,
) -> Result<Tally, String> {
    match device {
        device::Device::Cpu => Ok(simulate_observed(s, trials, seed, progress)),
        #[cfg(feature = "cuda")]
        device::Device::Cuda(o) => cuda::simulate(s, trials, seed, o.as_slice(), progress),
        #[cfg(not(feature = "cuda"))]
        device::Device::Cuda(_) => Err(device.check().err().map(|e| e.0).unwrap_or_default()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn model(fields: &[(&str, &str)]) -> VectorModel {
        let mut s = Scenario::preset("deepseek-v4-flash").unwrap_or_default();
        s.model = crate::scenario::Model::Vector;
        for (f, v) in fields {
            s.set_text(f.parse().unwrap(), v).unwrap();
        }
        s.validate().unwrap();
        VectorModel::new(&s)
    }

    /// The YaRN frequencies against the reference formula evaluated independently (Python's
    /// `math` in f64, the formula of V4 `inference/model.py`:199–228 written out:
    /// `freqs = 1/base**(arange(0, dim, 2)/dim)`; `low, high = find_correction_range(32, 1, …)`;
    /// `smooth = 1 − clamp((arange(dim/2) − low)/(high − low), 0, 1)`;
    /// `freqs = freqs/factor·(1 − smooth) + freqs·smooth`), for V4 (θ = 160000, factor 16, 65536:
    /// low 15, high 25) and V3.2 (θ = 10000, factor 40, 4096: low 10, high 23).
    #[test]
    fn yarn_frequencies_match_the_reference_formula() {
        let at = [0usize, 7, 8, 12, 16, 20, 24, 31];
        let v4 = [
            1.0,
            0.07271077167244769,
            0.05,
            0.011180339887498949,
            0.0022656250000000003,
            0.00029697777826169085,
            1.9531249999999997e-05,
            5.680529036909976e-07,
        ];
        let v32 = [
            1.0,
            0.1333521432163324,
            0.1,
            0.026879360111431223,
            0.0055,
            0.0007905694150420945,
            2.5e-05,
            3.3338035804083097e-06,
        ];
        for (f, want) in [(yarn_freqs(64, 160_000.0, 16.0, 65_536), v4), (yarn_freqs(64, 10_000.0, 40.0, 4096), v32)] {
            assert_eq!(f.len(), 32);
            for (&k, &w) in at.iter().zip(&want) {
                assert!((f[k] - w).abs() <= 1e-13 * w, "k = {k}: {} vs {w}", f[k]);
            }
        }
        // Plain RoPE: no original length, or factor 1.
        let plain = yarn_freqs(64, 160_000.0, 16.0, 0);
        let one = yarn_freqs(64, 160_000.0, 1.0, 65_536);
        for k in 0..32 {
            let want = 160_000f64.powf(-((2 * k) as f64) / 64.0);
            assert!((plain[k] - want).abs() <= 1e-15 * want && (one[k] - want).abs() <= 1e-15 * want);
        }
    }

    /// RoPE preserves norms, rotates the documented channels (V4: the last 64, pairs (2i, 2i+1);
    /// V3.2: the first 64, pairs (i, i + 32)) and leaves the others alone.
    #[test]
    fn rope_rotates_the_documented_pairs_and_preserves_norms() {
        for (at, pair_of) in
            [("last", (|k: usize| (64 + 2 * k, 65 + 2 * k)) as fn(usize) -> (usize, usize)), ("first", |k| (k, k + 32))]
        {
            let m = model(&[("context_len", "8192"), ("rope_at", at)]);
            let rope = m.rope.as_ref().unwrap();
            let x: Vec<f32> = (0..128).map(|j| ((j as f32) * 0.77).sin() + 0.1).collect();
            for i in [0usize, 1, 777, 2047] {
                let mut y = x.clone();
                rope.rotate_entry(&mut y, i);
                let (nx, ny) = (
                    x.iter().map(|v| (*v as f64).powi(2)).sum::<f64>(),
                    y.iter().map(|v| (*v as f64).powi(2)).sum::<f64>(),
                );
                assert!((nx - ny).abs() < 1e-5 * nx, "{at} entry {i}");
                let f = yarn_freqs(64, 160_000.0, 16.0, 65_536);
                let mut touched = [false; 128];
                for (k, &fk) in f.iter().enumerate() {
                    let (a, b) = pair_of(k);
                    touched[a] = true;
                    touched[b] = true;
                    let ang = (i * 4) as f64 * fk;
                    let want_a = x[a] as f64 * ang.cos() - x[b] as f64 * ang.sin();
                    let want_b = x[a] as f64 * ang.sin() + x[b] as f64 * ang.cos();
                    assert!(
                        (y[a] as f64 - want_a).abs() < 1e-5 && (y[b] as f64 - want_b).abs() < 1e-5,
                        "{at} entry {i} pair {k}"
                    );
                }
                for j in 0..128 {
                    if !touched[j] {
                        assert_eq!(x[j].to_bits(), y[j].to_bits());
                    }
                }
            }
        }
        // rope_dims 0: no table at all; odd or too large values are clipped.
        assert!(model(&[("rope_dims", "0")]).rope.is_none());
        assert_eq!(model(&[("rope_dims", "7")]).rope.as_ref().unwrap().pairs, 3);
        assert_eq!(model(&[("rope_dims", "1000")]).rope.as_ref().unwrap().pairs, 64);
    }

    /// The positional mechanism acts: a key equal to the query in its rotated channels is seen
    /// through cos(Δ f_k) of its true distance Δ = L − i·c. On the fastest pair (f_0 = 1) the
    /// match swings with Δ; on the slowest (YaRN-scaled) pair it barely moves over 128K tokens.
    #[test]
    fn the_match_depends_on_the_true_distance() {
        let m = model(&[("context_len", "131072")]);
        let rope = m.rope.as_ref().unwrap();
        let n = m.n_entries();
        for (k, swings) in [(0usize, true), (31, false)] {
            let mut q = vec![0.0f32; 128];
            q[64 + 2 * k] = 1.0;
            let mut qr = q.clone();
            rope.rotate_query(&mut qr);
            let mut seen = Vec::new();
            for i in [n - 1, n - 2, n - 100, n / 2, 0] {
                let mut kr = q.clone();
                rope.rotate_entry(&mut kr, i);
                let dot: f64 = qr.iter().zip(&kr).map(|(a, b)| *a as f64 * *b as f64).sum();
                let delta = 131_072.0 - (i * 4) as f64;
                let want = (delta * yarn_freqs(64, 160_000.0, 16.0, 65_536)[k]).cos();
                assert!((dot - want).abs() < 2e-3, "pair {k} entry {i}: {dot} vs {want}");
                seen.push(dot);
            }
            let spread = seen.iter().cloned().fold(f64::MIN, f64::max) - seen.iter().cloned().fold(f64::MAX, f64::min);
            assert_eq!(spread > 0.5, swings, "pair {k}: {seen:?}");
        }
    }

    /// Signed weights: drawn per layer, both signs, sd H^-1/2 d^-1/2, padded heads 0; fixed:
    /// the model's constants.
    #[test]
    fn head_weights_signed_and_fixed() {
        let m = model(&[("context_len", "4096")]);
        let mut sc = Scratch::default();
        let mut all = Vec::new();
        for k in 0..50 {
            m.draw_query(&Draws::new(5, k, 0), &mut sc);
            assert_eq!(sc.w.len(), m.hp);
            all.extend_from_slice(&sc.w[..m.heads]);
            assert!(sc.w[m.heads..].iter().all(|&w| w == 0.0));
        }
        let base = 1.0 / (64f64 * 128.0).sqrt();
        let mean = all.iter().map(|&w| w as f64).sum::<f64>() / all.len() as f64;
        let sd = (all.iter().map(|&w| (w as f64).powi(2)).sum::<f64>() / all.len() as f64).sqrt();
        assert!(mean.abs() < 0.1 * base && (sd / base - 1.0).abs() < 0.06, "mean {mean}, sd {sd} vs {base}");
        let f = model(&[("context_len", "4096"), ("head_weights", "fixed")]);
        f.draw_query(&Draws::new(5, 0, 0), &mut sc);
        assert_eq!(sc.w, f.weights);
        assert!(sc.w[..64].iter().all(|&w| w > 0.0));
    }

    /// The key norm's gain: exp(σ z) per channel, applied after the normalisation.
    #[test]
    fn key_gain_is_lognormal_and_applied_after_the_norm() {
        let m = model(&[("context_len", "4096"), ("key_gain_sd", "0.5"), ("rope_dims", "0"), ("hadamard", "false")]);
        let mut sc = Scratch::default();
        let dr = Draws::new(6, 0, 0);
        m.draw_query(&dr, &mut sc);
        let logs: Vec<f64> = sc.gain.iter().map(|&g| (g as f64).ln()).collect();
        let sd = (logs.iter().map(|l| l * l).sum::<f64>() / 128.0).sqrt();
        assert!((sd - 0.5).abs() < 0.15, "log-gain sd {sd}");
        let x: Vec<f32> = (0..128).map(|j| (j as f32 * 0.3).cos() * 2.0).collect();
        let mut y = x.clone();
        m.finish_key(&mut y, 3, &sc.gain);
        let s = (128.0 / sum_squares(&x)).sqrt();
        for j in 0..128 {
            assert_eq!(y[j].to_bits(), (x[j] * s * sc.gain[j]).to_bits());
        }
        let off = model(&[("context_len", "4096")]);
        off.draw_query(&dr, &mut sc);
        assert!(sc.gain.iter().all(|&g| g == 1.0));
    }

    /// The token-dependent gate: per-entry pooling weights that sum to 1 per channel, and a
    /// shortcut variance Σ p² that differs from entry to entry.
    #[test]
    fn token_gate_weights_are_per_entry() {
        let m = model(&[("context_len", "4096"), ("gate_token_sd", "1.5")]);
        let mut sc = Scratch::default();
        let dr = Draws::new(8, 0, 0);
        m.draw_query(&dr, &mut sc);
        let mut sds = Vec::new();
        for i in [0usize, 1, 2, 3] {
            m.entry_gate(i, &dr, &mut sc);
            for j in 0..128 {
                let mut t: f32 = (0..4).map(|p| sc.ew_own[p * 128 + j]).sum();
                if i > 0 {
                    t += (0..4).map(|p| sc.ew_prev[p * 128 + j]).sum::<f32>();
                }
                assert!((t - 1.0).abs() < 1e-5, "entry {i} channel {j}: {t}");
            }
            sds.push(sc.sd_entry[0]);
        }
        assert!(sds[1] != sds[2] && sds[2] != sds[3], "{sds:?}");
        // Entry 0 pools its own block only (4 positions): Σ p² ≥ 1/4.
        assert!(sds[0] >= 0.5 - 1e-6);
    }

    /// Quest's page score against a direct computation: the largest q·x over the box of the
    /// page's token keys, Σ_j q_j · (M_j if q_j ≥ 0 else m_j), in f64, from the same tokens;
    /// it bounds every token's own q·k from above. One head, no key norm, Hadamard or RoPE.
    #[test]
    fn quest_scores_match_a_direct_computation() {
        let mut s = Scenario { model: crate::scenario::Model::Vector, ..Scenario::default() };
        for (f, v) in [
            ("compressor", "quest"),
            ("context_len", "3000"),
            ("compress_ratio", "4"),
            ("index_topk", "16"),
            ("alignment", "0.6"),
            ("hard_negatives", "3"),
        ] {
            s.set_text(f.parse().unwrap(), v).unwrap();
        }
        s.validate().unwrap();
        let m = VectorModel::new(&s);
        assert!(m.quest && m.rope.is_none() && !m.hadamard && !m.key_norm);
        let (n, d, c) = (m.n_entries(), m.d, m.c);
        let mut sc = Scratch::default();
        let dr = Draws::new(4, 0, 0);
        let rank = m.layer_rank(&dr, &mut sc);
        let mut direct = Scratch::default();
        m.draw_query(&dr, &mut direct);
        let q: Vec<f64> = direct.q[..d].iter().map(|&v| v as f64).collect();
        let mut tok = vec![0.0f32; d];
        for i in 0..n {
            let toks: Vec<Vec<f32>> = (0..c)
                .map(|p| {
                    m.token((i * c + p) as u64, &dr, i, p, &direct.u, &mut tok);
                    tok.clone()
                })
                .collect();
            let upper: f64 = (0..d)
                .map(|j| {
                    let pick = if q[j] >= 0.0 {
                        toks.iter().map(|t| t[j]).fold(f32::MIN, f32::max)
                    } else {
                        toks.iter().map(|t| t[j]).fold(f32::MAX, f32::min)
                    };
                    q[j] * pick as f64
                })
                .sum();
            let best = toks
                .iter()
                .map(|t| t.iter().zip(&q).map(|(&a, &b)| a as f64 * b).sum::<f64>())
                .fold(f64::MIN, f64::max);
            assert!((sc.scores[i] as f64 - upper).abs() < 1e-3, "entry {i}: {} vs {upper}", sc.scores[i]);
            assert!(upper >= best - 1e-9, "entry {i}: the page bound {upper} below a token's {best}");
        }
        assert_eq!(rank, m.rank(&sc.scores));
        // A strongly aligned needle is found.
        assert!(rank.is_some_and(|r| r <= 16), "{rank:?}");
    }

    /// Beyond [`ROPE_TABLE_MAX`] the angles are computed per entry: the same values as the table.
    #[test]
    fn rope_without_a_table_rotates_identically() {
        for at in ["last", "first"] {
            let m = model(&[("context_len", "8192"), ("rope_at", at)]);
            let with = m.rope.as_ref().unwrap();
            let without = Rope { cos: Vec::new(), sin: Vec::new(), ..with.clone() };
            let x: Vec<f32> = (0..128).map(|j| ((j as f32) * 1.3).cos() * 3.0).collect();
            for i in [0usize, 5, 1000, 2047] {
                let (mut a, mut b) = (x.clone(), x.clone());
                with.rotate_entry(&mut a, i);
                without.rotate_entry(&mut b, i);
                assert!(a.iter().zip(&b).all(|(p, q)| p.to_bits() == q.to_bits()), "{at} entry {i}");
            }
        }
    }
}
