//! The vector model's trials on CUDA GPUs (`--features cuda`, `--device cuda[:N]`).
//!
//! **Binding.** cudarc (driver API + NVRTC, both loaded at run time): the kernels below are
//! compiled from source when a run starts, so the crate builds without the CUDA toolkit and a
//! binary without a driver refuses `--device cuda` with one line ([`device_count`]) instead of
//! failing to load. It is the maintained Rust binding that offers exactly that (bindgen-level
//! crates need the toolkit at build time; a framework would add gigabytes for two kernels).
//!
//! **What runs where, and why.** A trial draws from one Xoshiro256++ stream, (seed, i), in a
//! fixed order (module docs of [`super`]). Its f32 normals come from a ziggurat whose rejected
//! samples take extra words from the same stream, so where entry j's words start depends on
//! every earlier rejection: the stream cannot be split across GPU threads without walking it,
//! and walking it is the CPU's cost. The draws therefore stay on the CPU threads, in the very
//! code of the CPU build (`VectorModel::draw_query`, `VectorModel::draw_keys`: queries,
//! signed weights, gate logits, gains, token-gated pooling, planted needle and hard tokens,
//! key norm, RoPE/YaRN, Hadamard) and the q/k number formats (`quantize_rows`), so the trial
//! is the CPU's value for value. The GPU takes the heavy part, the scores of every entry
//! (H·d multiply-adds each, about 85 % of a CPU trial) and the needle's rank: keys go to the
//! card a block at a time through pinned, double-buffered staging, scores never leave it, and
//! one count per layer comes back per trial.
//!
//! **Same scores.** The kernels do the CPU kernel's arithmetic in its order ([`super::kernel`]):
//! per group of 64 heads a fused multiply-add chain over the channels in order, w·max(acc, 0),
//! the same reduction tree, groups summed in order; Quest's page score as a product-max-sum in
//! channel order. NVRTC compiles with `--fmad=false` and every operation is an explicitly
//! rounded intrinsic, so nothing is contracted or reordered: the scores, hence the ranks, are
//! the CPU's bit for bit (tests/cuda_equivalence.rs counts the trials that differ).

use super::{quantize_rows, Scratch, VectorModel, KEY_BLOCK};
use crate::progress::Progress;
use crate::scenario::Scenario;
use crate::trials::{trial_rng, Tally, TrialPlan};
use cudarc::driver::{
    CudaContext, CudaEvent, CudaFunction, CudaSlice, CudaStream, LaunchConfig, PinnedHostSlice, PushKernelArg,
};
use cudarc::nvrtc::{CompileOptions, Ptx};
use rand_xoshiro::Xoshiro256PlusPlus;
use rayon::prelude::*;
use std::sync::{Arc, Mutex, OnceLock};

/// The kernels. `score_keys`: one thread per entry (see the module docs for the order of
/// operations); `quest_keys`: Quest's page score; `count_above`: per layer, the entries
/// scoring strictly above the needle's best covering entry.
const SOURCE: &str = r#"
extern "C" __global__ void score_keys(const float* __restrict__ qt, const float* __restrict__ w, int hp, int d,
                                      const float* __restrict__ keys, int n, float* __restrict__ out) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    const float* key = keys + (size_t)i * d;
    float total = 0.0f;
    for (int g = 0; g < hp / 64; ++g) {
        float acc[64];
#pragma unroll
        for (int h = 0; h < 64; ++h) acc[h] = 0.0f;
        for (int j = 0; j < d; ++j) {
            float kv = key[j];
            const float4* row = (const float4*)(qt + (size_t)j * hp + g * 64);
#pragma unroll
            for (int h4 = 0; h4 < 16; ++h4) {
                float4 q = __ldg(row + h4);
                acc[4 * h4 + 0] = __fmaf_rn(q.x, kv, acc[4 * h4 + 0]);
                acc[4 * h4 + 1] = __fmaf_rn(q.y, kv, acc[4 * h4 + 1]);
                acc[4 * h4 + 2] = __fmaf_rn(q.z, kv, acc[4 * h4 + 2]);
                acc[4 * h4 + 3] = __fmaf_rn(q.w, kv, acc[4 * h4 + 3]);
            }
        }
        const float* wg = w + g * 64;
        float s[16];
#pragma unroll
        for (int l = 0; l < 16; ++l) {
            float t0 = __fmul_rn(wg[l], acc[l] > 0.0f ? acc[l] : 0.0f);
            float t1 = __fmul_rn(wg[l + 16], acc[l + 16] > 0.0f ? acc[l + 16] : 0.0f);
            float t2 = __fmul_rn(wg[l + 32], acc[l + 32] > 0.0f ? acc[l + 32] : 0.0f);
            float t3 = __fmul_rn(wg[l + 48], acc[l + 48] > 0.0f ? acc[l + 48] : 0.0f);
            s[l] = __fadd_rn(__fadd_rn(t0, t1), __fadd_rn(t2, t3));
        }
#pragma unroll
        for (int m = 8; m >= 1; m /= 2) {
#pragma unroll
            for (int l = 0; l < m; ++l) s[l] = __fadd_rn(s[l], s[l + m]);
        }
        total = __fadd_rn(total, s[0]);
    }
    out[i] = total;
}

extern "C" __global__ void quest_keys(const float* __restrict__ q, int d, const float* __restrict__ keys, int n,
                                      float* __restrict__ out) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    const float* hi = keys + (size_t)i * 2 * d;
    const float* lo = hi + d;
    float s = 0.0f;
    for (int j = 0; j < d; ++j) s = __fadd_rn(s, fmaxf(__fmul_rn(q[j], hi[j]), __fmul_rn(q[j], lo[j])));
    out[i] = s;
}

extern "C" __global__ void count_above(const float* __restrict__ scores, int n, const unsigned* __restrict__ needles,
                                       int m, unsigned* __restrict__ counts, int layer) {
    float y = scores[needles[0]];
    for (int k = 1; k < m; ++k) y = fmaxf(y, scores[needles[k]]);
    unsigned c = 0;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) c += scores[i] > y;
    for (int o = 16; o > 0; o /= 2) c += __shfl_down_sync(0xffffffffu, c, o);
    if ((threadIdx.x & 31) == 0 && c != 0) atomicAdd(counts + layer, c);
}
"#;

/// Threads per block of the entry kernels.
const THREADS: u32 = 128;

/// Key blocks ([`KEY_BLOCK`] entries) per copy and launch: 8 (4 MiB at d = 128) keep the
/// launches few (32 per 1M-token layer) and the pinned memory small (two stages a worker).
const STAGE_BLOCKS: usize = 8;

/// CUDA devices the driver lists, or why there are none usable (no driver library, no NVRTC,
/// the driver failing to start): the message of a refusal.
pub fn device_count() -> Result<usize, String> {
    // SAFETY: only tries to open the shared libraries by name.
    if !unsafe { cudarc::driver::sys::is_culib_present() } {
        return Err("no CUDA driver on this machine (libcuda could not be loaded)".into());
    }
    // SAFETY: as above.
    if !unsafe { cudarc::nvrtc::sys::is_culib_present() } {
        return Err("no NVRTC library on this machine (libnvrtc, part of the CUDA toolkit, could not be loaded)".into());
    }
    match CudaContext::device_count() {
        Ok(n) if n > 0 => Ok(n as usize),
        Ok(_) => Err("the CUDA driver lists no device".into()),
        Err(e) => Err(format!("the CUDA driver has no usable device ({e})")),
    }
}

/// The kernels as PTX, compiled once per process.
fn ptx() -> Result<Ptx, String> {
    static PTX: OnceLock<Result<Ptx, String>> = OnceLock::new();
    PTX.get_or_init(|| {
        let opts = CompileOptions {
            fmad: Some(false),
            ftz: Some(false),
            prec_div: Some(true),
            prec_sqrt: Some(true),
            ..Default::default()
        };
        cudarc::nvrtc::compile_ptx_with_opts(SOURCE, opts)
            .map_err(|e| format!("NVRTC could not compile the kernels: {e:?}"))
    })
    .clone()
}

/// One card: its context and the loaded kernels.
struct Card {
    ctx: Arc<CudaContext>,
    score: CudaFunction,
    quest: CudaFunction,
    count: CudaFunction,
}

impl Card {
    fn open(ordinal: usize) -> Result<Card, String> {
        let err = |e: cudarc::driver::DriverError| format!("CUDA device {ordinal}: {e}");
        let ctx = CudaContext::new(ordinal).map_err(err)?;
        // Each worker's buffers live on its own stream and are used only there, so stream
        // order is all the synchronisation they need; cudarc's per-buffer events (a record or
        // wait per argument per launch) would only cost CPU time. The pinned staging, which the
        // CPU rewrites while copies run, has the worker's own events ([`Worker::staged`]).
        // SAFETY: no buffer of this context is shared between streams (see above).
        unsafe { ctx.disable_event_tracking() };
        let module = ctx.load_module(ptx()?).map_err(err)?;
        Ok(Card {
            score: module.load_function("score_keys").map_err(err)?,
            quest: module.load_function("quest_keys").map_err(err)?,
            count: module.load_function("count_above").map_err(err)?,
            ctx,
        })
    }
}

type Res<T> = Result<T, cudarc::driver::DriverError>;

/// One worker's stream and buffers on a card (reused by every trial it runs).
struct Worker {
    card: Arc<Card>,
    stream: Arc<CudaStream>,
    /// Queries (the kernel's transposed layout, or Quest's one query), then the head weights.
    qt: CudaSlice<f32>,
    q_stage: PinnedHostSlice<f32>,
    /// One stage of keys (up to [`STAGE_BLOCKS`] · [`KEY_BLOCK`] entries).
    keys: CudaSlice<f32>,
    /// All N scores of the current layer.
    scores: CudaSlice<f32>,
    needles: CudaSlice<u32>,
    /// Entries above the needle, per layer of the current trial.
    counts: CudaSlice<u32>,
    /// Pinned staging for key blocks, alternated so that drawing block b+1 overlaps b's copy.
    stage: [PinnedHostSlice<f32>; 2],
    /// `counts` read back.
    host_counts: Vec<u32>,
    /// Recorded after each copy out of `stage[0]`, `stage[1]` and `q_stage`: waited for before
    /// the CPU writes that buffer again.
    staged: [CudaEvent; 3],
}

impl Worker {
    fn new(card: Arc<Card>, m: &VectorModel) -> Res<Worker> {
        let stream = card.ctx.new_stream()?;
        let (n, d, kl) = (m.n_entries(), m.d, m.key_len());
        let block = (STAGE_BLOCKS * KEY_BLOCK).min(n.max(1)) * kl;
        let needles: Vec<u32> = m.geometry.needle_entries.iter().map(|e| e.index as u32).collect();
        let needles = if needles.is_empty() { stream.alloc_zeros::<u32>(1)? } else { stream.clone_htod(&needles)? };
        // SAFETY: staging is written in full before any copy reads it (the last block's
        // unused tail is copied but never read by a kernel).
        let stage = unsafe { [card.ctx.alloc_pinned::<f32>(block)?, card.ctx.alloc_pinned::<f32>(block)?] };
        let q_len = d * m.hp + m.hp + 2 * d;
        // SAFETY: as above (only the written prefix is read).
        let q_stage = unsafe { card.ctx.alloc_pinned::<f32>(q_len)? };
        Ok(Worker {
            qt: stream.alloc_zeros::<f32>(q_len)?,
            q_stage,
            keys: stream.alloc_zeros::<f32>(block)?,
            scores: stream.alloc_zeros::<f32>(n.max(1))?,
            needles,
            counts: stream.alloc_zeros::<u32>(m.rule.layers().max(1) as usize)?,
            host_counts: vec![0; m.rule.layers().max(1) as usize],
            staged: [card.ctx.new_event(None)?, card.ctx.new_event(None)?, card.ctx.new_event(None)?],
            stage,
            stream,
            card,
        })
    }

    /// One trial's layers: draws on this thread, scores and counts on the card; then each
    /// layer's count of entries above the needle in `self.host_counts`.
    fn layers(&mut self, m: &VectorModel, rng: &mut Xoshiro256PlusPlus, sc: &mut Scratch) -> Res<()> {
        self.stream.memset_zeros(&mut self.counts)?;
        for layer in 0..m.rule.layers() {
            self.layer(m, rng, sc, layer as i32)?;
        }
        self.stream.memcpy_dtoh(&self.counts, &mut self.host_counts)?;
        self.stream.synchronize()
    }

    /// Layer `layer`'s rank from the counts of [`Worker::layers`] ([`VectorModel::rank`]'s
    /// definition: 1 + entries strictly above the needle's best entry; none without one).
    fn rank(&self, m: &VectorModel, layer: usize) -> Option<u64> {
        (!m.geometry.needle_entries.is_empty()).then(|| 1 + self.host_counts[layer] as u64)
    }

    /// One trial, as [`VectorModel::trial`]: the layers, then the readout and the answer.
    fn trial(&mut self, m: &VectorModel, rng: &mut Xoshiro256PlusPlus, sc: &mut Scratch, tally: &mut Tally) -> Res<()> {
        self.layers(m, rng, sc)?;
        let mut attending = 0u32;
        for layer in 0..m.rule.layers() as usize {
            let rank = self.rank(m, layer);
            if layer == 0 {
                tally.ranks.record(rank);
            }
            attending += m.rule.attends(rank) as u32;
        }
        m.rule.conclude(attending, rng, tally);
        Ok(())
    }

    /// One layer: the draws of [`VectorModel::layer_rank`], in its order; scoring on the card.
    fn layer(&mut self, m: &VectorModel, rng: &mut Xoshiro256PlusPlus, sc: &mut Scratch, layer: i32) -> Res<()> {
        let (n, d, kl) = (m.n_entries(), m.d, m.key_len());
        m.draw_query(rng, sc);
        m.rotate_queries(sc);
        quantize_rows(&m.q_format, &mut sc.q, d);
        // Through pinned memory, so that the copy does not wait for the stream's earlier work.
        self.staged[2].synchronize()?;
        if m.quest {
            self.q_stage.as_mut_slice()?[..d].copy_from_slice(&sc.q[..d]);
        } else {
            m.transpose_queries(sc);
            let q = self.q_stage.as_mut_slice()?;
            q[..sc.qt.len()].copy_from_slice(&sc.qt);
            q[sc.qt.len()..sc.qt.len() + sc.w.len()].copy_from_slice(&sc.w);
        }
        self.stream.memcpy_htod(&self.q_stage, &mut self.qt)?;
        self.staged[2].record(&self.stream)?;
        sc.keys.resize(KEY_BLOCK.min(n) * kl, 0.0);
        // Key blocks are drawn as on the CPU and gathered STAGE_BLOCKS at a time into one
        // pinned buffer: one copy and one launch per stage, the other buffer's copy and kernel
        // running meanwhile.
        let stage_entries = STAGE_BLOCKS * KEY_BLOCK;
        let (mut start, mut b, mut first, mut filled) = (0usize, 0usize, 0usize, 0usize);
        while start < n {
            let end = (start + KEY_BLOCK).min(n);
            m.draw_keys(rng, sc, start..end);
            let keys = &mut sc.keys[..(end - start) * kl];
            quantize_rows(&m.k_format, keys, d);
            // Waits for this buffer's previous copy (a stage ago) before the first write.
            if filled == 0 {
                self.staged[b].synchronize()?;
            }
            self.stage[b].as_mut_slice()?[filled * kl..filled * kl + keys.len()].copy_from_slice(keys);
            filled += end - start;
            start = end;
            if filled < stage_entries && start < n {
                continue;
            }
            self.stream.memcpy_htod(&self.stage[b], &mut self.keys)?;
            self.staged[b].record(&self.stream)?;
            let cnt = filled as i32;
            let cfg = LaunchConfig {
                grid_dim: (filled.div_ceil(THREADS as usize) as u32, 1, 1),
                block_dim: (THREADS, 1, 1),
                shared_mem_bytes: 0,
            };
            let mut out = self.scores.slice_mut(first..first + filled);
            let (hp, dd) = (m.hp as i32, d as i32);
            let w = self.qt.slice(d * m.hp..d * m.hp + m.hp);
            // SAFETY: the argument types match the kernels' signatures; every index the kernels
            // form stays within the buffers (sizes set in `Worker::new` from the same model).
            unsafe {
                if m.quest {
                    self.stream
                        .launch_builder(&self.card.quest)
                        .arg(&self.qt)
                        .arg(&dd)
                        .arg(&self.keys)
                        .arg(&cnt)
                        .arg(&mut out)
                        .launch(cfg)?;
                } else {
                    self.stream
                        .launch_builder(&self.card.score)
                        .arg(&self.qt)
                        .arg(&w)
                        .arg(&hp)
                        .arg(&dd)
                        .arg(&self.keys)
                        .arg(&cnt)
                        .arg(&mut out)
                        .launch(cfg)?;
                }
            }
            b ^= 1;
            first = start;
            filled = 0;
        }
        let m_needles = m.geometry.needle_entries.len() as i32;
        if m_needles > 0 {
            let nn = n as i32;
            let blocks = (n.div_ceil(256) as u32).clamp(1, 1024);
            let cfg = LaunchConfig { grid_dim: (blocks, 1, 1), block_dim: (256, 1, 1), shared_mem_bytes: 0 };
            // SAFETY: as above; `needles` holds `m_needles` indices below n, `counts` one slot
            // per layer.
            unsafe {
                self.stream
                    .launch_builder(&self.card.count)
                    .arg(&self.scores)
                    .arg(&nn)
                    .arg(&self.needles)
                    .arg(&m_needles)
                    .arg(&mut self.counts)
                    .arg(&layer)
                    .launch(cfg)?;
            }
        }
        Ok(())
    }
}

/// The GPU trial plan: a [`VectorModel`], its cards (one slot per ordinal given, repeats
/// allowed) and the idle workers of each slot.
struct GpuPlan<'a> {
    model: &'a VectorModel,
    cards: Vec<Arc<Card>>,
    idle: Vec<Mutex<Vec<Worker>>>,
    error: Mutex<Option<String>>,
}

impl GpuPlan<'_> {
    fn fail(&self, what: String) {
        let mut e = self.error.lock().unwrap_or_else(|p| p.into_inner());
        e.get_or_insert(what);
    }
}

impl TrialPlan for GpuPlan<'_> {
    type Scratch = Scratch;

    fn chunk(&self) -> u64 {
        super::CHUNK
    }

    /// Work item c = range.start / chunk runs on slot c mod D (the shard rule); each trial
    /// from (seed, i) alone, so the slot cannot change its result.
    fn run_trials(&self, seed: u64, range: std::ops::Range<u64>, scratch: &mut Scratch, tally: &mut Tally) {
        if self.error.lock().map(|e| e.is_some()).unwrap_or(true) {
            return;
        }
        let slot = ((range.start / self.chunk()) % self.cards.len() as u64) as usize;
        let popped = self.idle[slot].lock().ok().and_then(|mut v| v.pop());
        let mut worker = match popped {
            Some(w) => w,
            None => match Worker::new(self.cards[slot].clone(), self.model) {
                Ok(w) => w,
                Err(e) => return self.fail(format!("CUDA device {}: {e}", self.cards[slot].ctx.ordinal())),
            },
        };
        for i in range {
            if let Err(e) = worker.trial(self.model, &mut trial_rng(seed, i), scratch, tally) {
                return self.fail(format!("CUDA device {}: {e}", self.cards[slot].ctx.ordinal()));
            }
        }
        if let Ok(mut v) = self.idle[slot].lock() {
            v.push(worker);
        }
    }
}

/// Runs `trials` vector-model trials of a validated scenario on the CUDA devices `ordinals`
/// (checked by [`super::device::Device::check`]); the counts of [`super::simulate`] (see the
/// module docs). An error is a failure of the device mid-run.
pub fn simulate(
    s: &Scenario,
    trials: u64,
    seed: u64,
    ordinals: &[u16],
    progress: &dyn Progress,
) -> Result<Tally, String> {
    let model = VectorModel::new(s);
    let mut cards: Vec<Arc<Card>> = Vec::new();
    for &o in ordinals {
        // A repeated ordinal shares the card (its own streams and buffers per worker).
        let card = match cards.iter().find(|c| c.ctx.ordinal() == o as usize) {
            Some(c) => c.clone(),
            None => Arc::new(Card::open(o as usize)?),
        };
        cards.push(card);
    }
    let plan = GpuPlan {
        model: &model,
        idle: cards.iter().map(|_| Mutex::new(Vec::new())).collect(),
        cards,
        error: Mutex::new(None),
    };
    let tally = crate::trials::run(&plan, trials, seed, progress);
    match plan.error.into_inner().unwrap_or_else(|p| p.into_inner()) {
        Some(e) => Err(e),
        None => Ok(tally),
    }
}

/// Trials whose needle ranks differ between the CPU and a CUDA device.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Equivalence {
    /// Trials compared.
    pub trials: u64,
    /// Layer ranks compared (trials × selecting layers).
    pub layer_ranks: u64,
    /// Trials with any layer's rank different.
    pub trials_differing: u64,
    /// Layer ranks that differ.
    pub layer_ranks_differing: u64,
    /// The first few differences: (trial, layer, CPU rank, GPU rank).
    pub examples: Vec<(u64, usize, Option<u64>, Option<u64>)>,
}

/// Every layer's needle rank of trials `0..trials` (from (seed, i)) by the CPU build
/// ([`VectorModel::layer_rank`]) and on CUDA device `ordinal`, compared rank by rank.
pub fn equivalence(s: &Scenario, trials: u64, seed: u64, ordinal: u16) -> Result<Equivalence, String> {
    let model = VectorModel::new(s);
    let layers = model.rule.layers() as usize;
    let cpu: Vec<Vec<Option<u64>>> = (0..trials)
        .into_par_iter()
        .map_init(Scratch::default, |sc, i| {
            let mut rng = trial_rng(seed, i);
            (0..layers).map(|_| model.layer_rank(&mut rng, sc)).collect()
        })
        .collect();
    let card = Arc::new(Card::open(ordinal as usize)?);
    let pool: Mutex<Vec<Worker>> = Mutex::new(Vec::new());
    let gpu: Result<Vec<Vec<Option<u64>>>, String> = (0..trials)
        .into_par_iter()
        .map_init(Scratch::default, |sc, i| {
            let popped = pool.lock().ok().and_then(|mut v| v.pop());
            let mut w = match popped {
                Some(w) => w,
                None => Worker::new(card.clone(), &model).map_err(|e| e.to_string())?,
            };
            w.layers(&model, &mut trial_rng(seed, i), sc).map_err(|e| e.to_string())?;
            let ranks = (0..layers).map(|l| w.rank(&model, l)).collect();
            if let Ok(mut v) = pool.lock() {
                v.push(w);
            }
            Ok(ranks)
        })
        .collect();
    let gpu = gpu?;
    let mut e = Equivalence {
        trials,
        layer_ranks: trials * layers as u64,
        trials_differing: 0,
        layer_ranks_differing: 0,
        examples: Vec::new(),
    };
    for (i, (a, b)) in cpu.iter().zip(&gpu).enumerate() {
        let mut differs = false;
        for l in 0..layers {
            if a[l] != b[l] {
                differs = true;
                e.layer_ranks_differing += 1;
                if e.examples.len() < 10 {
                    e.examples.push((i as u64, l, a[l], b[l]));
                }
            }
        }
        e.trials_differing += differs as u64;
    }
    Ok(e)
}
