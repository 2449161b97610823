//! The vector model's trials on CUDA GPUs (`--features cuda`, `--device cuda[:N]`).
//!
//! **Binding.** cudarc (driver API + NVRTC, both loaded at run time): the kernels below are
//! compiled from source when a run starts, so the crate builds without the CUDA toolkit and a
//! binary without a driver refuses `--device cuda` with one line ([`device_count`]) instead of
//! failing to load. It is the maintained Rust binding that offers exactly that (bindgen-level
//! crates need the toolkit at build time; a framework would add gigabytes for three kernels).
//!
//! **What runs where.** Every draw of the vector model is counter-based (`super::philox`):
//! entry j's key in layer l of trial i is a pure function of (seed, i, l, j). So the card draws
//! the keys itself. Per trial, the CPU thread that runs it computes each layer's small part —
//! the queries (RoPE, Hadamard, q format), the signed weights, the compressor's positional
//! pooling weights and shortcut sds, the key gains, and the few entries built token by token
//! (needle and hard-negative entries, whose planting needs the query direction) — exactly as
//! the CPU build does (the same functions), and uploads it in one copy. One kernel launch then
//! draws every other entry key of every layer, one GPU thread per (entry, layer): its normals
//! (Philox4x32-10 + Box–Muller), the token gate's per-entry pooling, the key norm and gain,
//! RoPE/YaRN from the model's cos/sin table, the Hadamard rotation, the k format, and its score
//! against the layer's queries; a second kernel scores the uploaded token-built entries, a
//! third counts the entries above the needle per layer. Keys and scores never leave the card;
//! one count per layer comes back per trial.
//!
//! **Same numbers.** The kernels repeat the CPU code's f32 operations in its order: the
//! normals' polynomials, the key norm's 8-lane sum of squares, the rotations, the Hadamard
//! butterflies, the formats' grid rounding and block scales (ported from [`crate::formats`],
//! bit for bit, for finite values, which are all the model makes), and the scoring kernel's
//! FMA chain and reduction tree ([`super::kernel`]). NVRTC compiles with `--fmad=false` and
//! every arithmetic operation is an explicitly rounded intrinsic, so nothing is contracted or
//! reordered: keys, scores and ranks are the CPU's bit for bit (tests/engines/cuda_equivalence.rs
//! counts the trials that differ). The model's sizes and switches are compiled in as
//! constants (one NVRTC compilation per model and process).

use super::{philox, quantize_rows, Scratch, VectorModel};
use crate::formats::{ElementFormat, Format, ScaleKind};
use crate::progress::Progress;
use crate::scenario::Scenario;
use crate::trials::{trial_rng, Tally, TrialPlan};
use cudarc::driver::{
    CudaContext, CudaEvent, CudaFunction, CudaSlice, CudaStream, LaunchConfig, PinnedHostSlice, PushKernelArg,
};
use cudarc::nvrtc::{CompileOptions, Ptx};
use rayon::prelude::*;
use std::collections::HashMap;
use std::fmt::Write as _;
use std::sync::{Arc, Condvar, Mutex};

/// The kernels; the model's constants are prepended as `#define`s ([`Layout::defines`]).
/// `gen_score`: one thread per (entry, layer), its key in a padded shared-memory row;
/// `score_special`: the uploaded token-built entries; `count_above`: per layer, the entries
/// scoring strictly above the needle's best covering entry.
const SOURCE: &str = r#"
typedef unsigned int u32;
#define F(bits) __uint_as_float((u32)(bits))

__device__ __forceinline__ uint4 philox(u32 c0, u32 c1, u32 c2, u32 c3, u32 k0, u32 k1) {
#pragma unroll
    for (int r = 0; r < 10; ++r) {
        if (r > 0) { k0 += 0x9E3779B9u; k1 += 0xBB67AE85u; }
        u32 hi0 = __umulhi(0xD2511F53u, c0), lo0 = 0xD2511F53u * c0;
        u32 hi1 = __umulhi(0xCD9E8D57u, c2), lo1 = 0xCD9E8D57u * c2;
        u32 n0 = hi1 ^ c1 ^ k0, n2 = hi0 ^ c3 ^ k1;
        c0 = n0; c1 = lo1; c2 = n2; c3 = lo0;
    }
    return make_uint4(c0, c1, c2, c3);
}

__device__ __forceinline__ float ln_(float x) {
    u32 bits = __float_as_uint(x);
    int e = (int)(bits >> 23) - 126;
    float m = __uint_as_float((bits & 0x007FFFFFu) | 0x3F000000u);
    if (m < 0.707106781186547524f) { e -= 1; m = __fsub_rn(__fadd_rn(m, m), 1.0f); } else { m = __fsub_rn(m, 1.0f); }
    float z = __fmul_rn(m, m);
    float y = 7.0376836292E-2f;
    y = __fsub_rn(__fmul_rn(y, m), 1.1514610310E-1f);
    y = __fadd_rn(__fmul_rn(y, m), 1.1676998740E-1f);
    y = __fsub_rn(__fmul_rn(y, m), 1.2420140846E-1f);
    y = __fadd_rn(__fmul_rn(y, m), 1.4249322787E-1f);
    y = __fsub_rn(__fmul_rn(y, m), 1.6668057665E-1f);
    y = __fadd_rn(__fmul_rn(y, m), 2.0000714765E-1f);
    y = __fsub_rn(__fmul_rn(y, m), 2.4999993993E-1f);
    y = __fadd_rn(__fmul_rn(y, m), 3.3333331174E-1f);
    y = __fmul_rn(__fmul_rn(y, m), z);
    float ef = (float)e;
    y = __fadd_rn(y, __fmul_rn(ef, -2.12194440E-4f));
    y = __fsub_rn(y, __fmul_rn(0.5f, z));
    float r = __fadd_rn(m, y);
    return __fadd_rn(r, __fmul_rn(ef, 0.693359375f));
}

__device__ __forceinline__ void sincos_(float a, float* so, float* co) {
    float z = __fmul_rn(a, a);
    float s = __fmul_rn(-1.9515295891E-4f, z);
    s = __fadd_rn(s, 8.3321608736E-3f);
    s = __fmul_rn(s, z);
    s = __fsub_rn(s, 1.6666654611E-1f);
    s = __fmul_rn(s, z);
    s = __fmul_rn(s, a);
    s = __fadd_rn(s, a);
    float c = __fmul_rn(2.443315711809948E-5f, z);
    c = __fsub_rn(c, 1.388731625493765E-3f);
    c = __fmul_rn(c, z);
    c = __fadd_rn(c, 4.166664568298827E-2f);
    c = __fmul_rn(c, z);
    c = __fmul_rn(c, z);
    c = __fsub_rn(c, __fmul_rn(0.5f, z));
    c = __fadd_rn(c, 1.0f);
    *so = s; *co = c;
}

__device__ __forceinline__ void box_muller(u32 w0, u32 w1, float* z0, float* z1) {
    float u = __fadd_rn(__fmul_rn(__uint2float_rn(w0), F(0x2F800000)), F(0x2F000000));
    float r = __fsqrt_rn(__fmul_rn(ln_(u), -2.0f));
    float f = __fmul_rn(__uint2float_rn(w1 & 0x3FFFFFFFu), F(0x30800000));
    float a = __fmul_rn(__fsub_rn(f, 0.5f), F(0x3FC90FDB));
    float s, c;
    sincos_(a, &s, &c);
    u32 q = w1 >> 30;
    float s2 = q == 0 ? s : q == 1 ? c : q == 2 ? -s : -c;
    float c2 = q == 0 ? c : q == 1 ? -s : q == 2 ? -c : s;
    *z0 = __fmul_rn(r, c2);
    *z1 = __fmul_rn(r, s2);
}

__device__ __forceinline__ void normals4(u32 purpose, u32 a, u32 b, u32 layer, u32 k0, u32 k1, float* z) {
    uint4 w = philox(a, b, layer, purpose, k0, k1);
    box_muller(w.x, w.y, z, z + 1);
    box_muller(w.z, w.w, z + 2, z + 3);
}

__device__ __forceinline__ float exp_neg(float x) {
    if (x < -103.0f) return 0.0f;
    float n = floorf(__fadd_rn(__fmul_rn(x, 1.44269504088896341f), 0.5f));
    float r = __fsub_rn(x, __fmul_rn(n, 0.693359375f));
    r = __fsub_rn(r, __fmul_rn(n, -2.12194440E-4f));
    float z = __fmul_rn(r, r);
    float y = __fmul_rn(1.9875691500E-4f, r);
    y = __fadd_rn(y, 1.3981999507E-3f);
    y = __fmul_rn(y, r);
    y = __fadd_rn(y, 8.3334519073E-3f);
    y = __fmul_rn(y, r);
    y = __fadd_rn(y, 4.1665795894E-2f);
    y = __fmul_rn(y, r);
    y = __fadd_rn(y, 1.6666665459E-1f);
    y = __fmul_rn(y, r);
    y = __fadd_rn(y, 5.0000001201E-1f);
    y = __fmul_rn(y, z);
    y = __fadd_rn(y, r);
    y = __fadd_rn(y, 1.0f);
    int ni = (int)n;
    float p = ni >= -126 ? __uint_as_float((u32)(ni + 127) << 23) : ni >= -149 ? __uint_as_float(1u << (ni + 149)) : 0.0f;
    return __fmul_rn(y, p);
}

// ---- number formats (crate::formats, finite values) ----
__device__ __forceinline__ float round_grid(float a, u32 lo, u32 hi, u32 m) {
    u32 e = __float_as_uint(a) >> 23;
    e = e < lo ? lo : e;
    e = e > hi ? hi : e;
    float c = __uint_as_float((e + 23 - m) << 23);
    return __fsub_rn(__fadd_rn(a, c), c);
}
__device__ __forceinline__ float sat_round(float y, u32 lo, u32 hi, u32 m, float gmax) {
    float a = __uint_as_float(__float_as_uint(y) & 0x7FFFFFFFu);
    a = a < gmax ? a : gmax;
    return __uint_as_float(__float_as_uint(round_grid(a, lo, hi, m)) | (__float_as_uint(y) & 0x80000000u));
}
__device__ __forceinline__ float pow2_(int e) {
    return e >= -126 ? __uint_as_float((u32)(e + 127) << 23) : __uint_as_float(1u << (e + 149));
}
__device__ __forceinline__ int floor_log2(float t) {
    u32 bits = __float_as_uint(t) & 0x7FFFFFFFu;
    int e = (int)(bits >> 23);
    return e > 0 ? e - 127 : (31 - __clz(bits)) - 149;
}
__device__ __forceinline__ int ceil_log2(float t) {
    u32 bits = __float_as_uint(t) & 0x7FFFFFFFu;
    bool exact = bits >= 0x00800000u ? (bits & 0x007FFFFFu) == 0 : (bits & (bits - 1)) == 0;
    return floor_log2(t) + (exact ? 0 : 1);
}
__device__ __forceinline__ u32 max_abs_bits(const float* x, int n) {
    u32 m = 0;
    for (int j = 0; j < n; ++j) { u32 b = __float_as_uint(x[j]) & 0x7FFFFFFFu; m = b > m ? b : m; }
    return m;
}
__device__ __forceinline__ float sat_f32(float y) {
    return y < -F(0x7F7FFFFF) ? -F(0x7F7FFFFF) : (y > F(0x7F7FFFFF) ? F(0x7F7FFFFF) : y);
}
__device__ __forceinline__ bool may_overflow(float s) {
    return __dmul_rn((double)F(GMAX), (double)s) > (double)F(0x7F7FFFFF);
}

// Quantize-dequantize one row of D values with the k format.
__device__ __forceinline__ void quant_row(float* x) {
#if KFMT == 1
    for (int j = 0; j < D; ++j) x[j] = sat_round(x[j], G_LO, G_HI, G_M, F(GMAX));
#elif KFMT == 2
    for (int j = 0; j < D; ++j) {
        u32 bits = __float_as_uint(x[j]);
        u32 ab = bits & 0x7FFFFFFFu;
        u32 r = (ab + 0x7FFFu + ((ab >> 16) & 1u)) & 0xFFFF0000u;
        r = r < 0x7F7F0000u ? r : 0x7F7F0000u;
        x[j] = __uint_as_float(r | (bits & 0x80000000u));
    }
#elif KFMT == 3
    float tensor = __fdiv_rn(__uint_as_float(max_abs_bits(x, D)), F(GMAX448));
    float fmax_tensor = __fmul_rn(F(GMAX), tensor);
    (void)fmax_tensor;
    for (int b0 = 0; b0 < D; b0 += BLK) {
        float* blk = x + b0;
        float amax = __uint_as_float(max_abs_bits(blk, BLK));
        amax = amax < F(FLOOR) ? F(FLOOR) : amax;
        if (amax == 0.0f) continue;
#if SCALE == 0 || SCALE == 3
#if SCALE == 0
        float s = __fmul_rn(amax, F(INV));
#else
        float s_raw = __fdiv_rn(amax, fmax_tensor);
        float s = __fmul_rn(round_grid(s_raw < 448.0f ? s_raw : 448.0f, 121, 135, 3), tensor);
#endif
        if (s == 0.0f) {
            for (int j = 0; j < BLK; ++j) blk[j] = __fmul_rn(blk[j], 0.0f);
        } else if (may_overflow(s)) {
            for (int j = 0; j < BLK; ++j) blk[j] = sat_f32(__fmul_rn(sat_round(__fdiv_rn(blk[j], s), G_LO, G_HI, G_M, F(GMAX)), s));
        } else {
            for (int j = 0; j < BLK; ++j) blk[j] = __fmul_rn(sat_round(__fdiv_rn(blk[j], s), G_LO, G_HI, G_M, F(GMAX)), s);
        }
#else
#if SCALE == 1
        float t = __fmul_rn(amax, F(INV));
        int e = t > 0.0f ? ceil_log2(t) : -127;
#else
        int e = floor_log2(amax) - EMAX;
#endif
        e = e < -127 ? -127 : (e > 127 ? 127 : e);
        float s = pow2_(e), inv_s = pow2_(-e);
        if (may_overflow(s)) {
            for (int j = 0; j < BLK; ++j) blk[j] = sat_f32(__fmul_rn(sat_round(__fmul_rn(blk[j], inv_s), G_LO, G_HI, G_M, F(GMAX)), s));
        } else {
            for (int j = 0; j < BLK; ++j) blk[j] = __fmul_rn(sat_round(__fmul_rn(blk[j], inv_s), G_LO, G_HI, G_M, F(GMAX)), s);
        }
#endif
    }
#endif
}

// The CPU kernel's score (super::kernel): per group of 64 heads an FMA chain over the channels
// in order, w·max(acc, 0), the fixed reduction tree, groups summed in order.
__device__ __forceinline__ float score_key(const float* key, const float* __restrict__ qt, const float* __restrict__ w) {
    float total = 0.0f;
#pragma unroll 1
    for (int g = 0; g < HP / 64; ++g) {
        float acc[64];
#pragma unroll
        for (int h = 0; h < 64; ++h) acc[h] = 0.0f;
#pragma unroll 2
        for (int j = 0; j < D; ++j) {
            float kv = key[j];
            const float4* row = (const float4*)(qt + (size_t)j * HP + g * 64);
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
    return total;
}

// Quest's page score: Σ_j max(q_j M_j, q_j m_j) in channel order.
__device__ __forceinline__ float quest_key(const float* key, const float* __restrict__ q) {
    float s = 0.0f;
    for (int j = 0; j < D; ++j) s = __fadd_rn(s, fmaxf(__fmul_rn(q[j], key[j]), __fmul_rn(q[j], key[D + j])));
    return s;
}

extern "C" __global__ void __launch_bounds__(NT) gen_score(const float* __restrict__ params, const float* __restrict__ rope,
        const float* __restrict__ cs, float* __restrict__ scores, u32 k0, u32 k1) {
    __shared__ float sh[NT * PITCH];
    int i = blockIdx.x * NT + threadIdx.x;
    u32 layer = blockIdx.y;
    if (i >= N) return;
    float* k = sh + threadIdx.x * PITCH;
    const float* P = params + (size_t)layer * LS;
    const float* qt = P;
#if QUEST
    for (int j = 0; j < D; ++j) { k[j] = F(0xFF800000); k[D + j] = F(0x7F800000); }
    for (int p = 0; p < C; ++p) {
        for (int g = 0; g < GB; ++g) {
            float z[4];
            normals4(P_TOKEN, (u32)i, (u32)(p * GB + g), layer, k0, k1, z);
#pragma unroll
            for (int l = 0; l < 4; ++l) {
                int j = 4 * g + l;
                if (j < D) {
                    float v = __fmul_rn(z[l], cs[j]);
                    k[j] = fmaxf(k[j], v);
                    k[D + j] = fminf(k[D + j], v);
                }
            }
        }
    }
    quant_row(k);
    quant_row(k + D);
    scores[(size_t)layer * N + i] = quest_key(k, qt);
#else
    const float* w = P + D * HP;
    const float* sdf = w + HP;
    const float* sdr = sdf + D;
    const float* gain = sdr + D;
    const float* lgo = gain + D;
    const float* lgp = lgo + C * D;
#if TOKEN_GATE
    bool with_prev = OVERLAP && i > 0;
    for (int j = 0; j < D; ++j) {
        float own[C], prev[C];
        for (int half = 0; half < 2; ++half) {
            if (half == 1 && !with_prev) break;
            const float* lg = half == 0 ? lgo : lgp;
            float* buf = half == 0 ? own : prev;
            for (int q = 0; q < CB; ++q) {
                float z[4];
                normals4(P_GATE_TOKEN, (u32)i, (u32)((half * D + j) * CB + q), layer, k0, k1, z);
#pragma unroll
                for (int l = 0; l < 4; ++l) {
                    int p = 4 * q + l;
                    if (p < C) buf[p] = __fadd_rn(lg[p * D + j], __fmul_rn(F(TOK_SD), z[l]));
                }
            }
        }
        float m = own[0];
        for (int p = 1; p < C; ++p) m = fmaxf(m, own[p]);
        if (with_prev) for (int p = 0; p < C; ++p) m = fmaxf(m, prev[p]);
        float zs = 0.0f;
        for (int p = 0; p < C; ++p) {
            own[p] = exp_neg(__fsub_rn(own[p], m));
            zs = __fadd_rn(zs, own[p]);
            if (with_prev) {
                prev[p] = exp_neg(__fsub_rn(prev[p], m));
                zs = __fadd_rn(zs, prev[p]);
            }
        }
        float inv = __fdiv_rn(1.0f, zs);
        float ss = 0.0f;
        for (int p = 0; p < C; ++p) {
            own[p] = __fmul_rn(own[p], inv);
            ss = __fadd_rn(ss, __fmul_rn(own[p], own[p]));
            if (with_prev) {
                prev[p] = __fmul_rn(prev[p], inv);
                ss = __fadd_rn(ss, __fmul_rn(prev[p], prev[p]));
            }
        }
        k[j] = __fmul_rn(cs[j], __fsqrt_rn(ss));
    }
    const float* sd = k;
#else
    const float* sd = i == 0 ? sdf : sdr;
#endif
    // The key's normals times the sds; the key norm's 8 lane sums of squares on the way (lane
    // j mod 8 in channel order, as the CPU's sum_squares).
    float s8[8];
#pragma unroll
    for (int l = 0; l < 8; ++l) s8[l] = 0.0f;
#pragma unroll 2
    for (int g = 0; g < GB; ++g) {
        float z[4];
        normals4(P_KEY, (u32)i, (u32)g, layer, k0, k1, z);
#pragma unroll
        for (int l = 0; l < 4; ++l) {
            int j = 4 * g + l;
            if (j < D) {
                float v = __fmul_rn(z[l], sd[j]);
                k[j] = v;
                if (j < D / 8 * 8) s8[j & 7] = __fadd_rn(s8[j & 7], __fmul_rn(v, v));
            }
        }
    }
#if KEY_NORM
    float ks = 1.0f;
    bool scale = false;
    {
        float t = __fadd_rn(__fadd_rn(__fadd_rn(s8[0], s8[4]), __fadd_rn(s8[2], s8[6])),
                            __fadd_rn(__fadd_rn(s8[1], s8[5]), __fadd_rn(s8[3], s8[7])));
        for (int c8 = D / 8 * 8; c8 < D; ++c8) t = __fadd_rn(t, __fmul_rn(k[c8], k[c8]));
        if (t > 0.0f) { ks = __fsqrt_rn(__fdiv_rn((float)D, t)); scale = true; }
    }
#define SCALED(x) (scale ? __fmul_rn((x), ks) : (x))
#if GAIN
#define FINISH(j, x) __fmul_rn(SCALED(x), gain[j])
#else
#define FINISH(j, x) SCALED(x)
#endif
    // Key norm (and gain) of the channels RoPE leaves alone here; of each rotated pair with its
    // rotation below: per value the CPU's order (normalise, gain, rotate).
    for (int j = 0; j < D; ++j) {
        if (ROPE && j >= ROPE_START && j < ROPE_START + 2 * PAIRS) continue;
        k[j] = FINISH(j, k[j]);
    }
#else
#define FINISH(j, x) (x)
#endif
#if ROPE
    {
        const float* rc = rope + (size_t)i * PAIRS;
        const float* rs = rope + (size_t)N * PAIRS + (size_t)i * PAIRS;
        for (int p = 0; p < PAIRS; ++p) {
#if ROPE_HALF
            int ja = ROPE_START + p, jb = ROPE_START + PAIRS + p;
#else
            int ja = ROPE_START + 2 * p, jb = ja + 1;
#endif
            float u = FINISH(ja, k[ja]), v = FINISH(jb, k[jb]), c = rc[p], s = rs[p];
            k[ja] = __fsub_rn(__fmul_rn(u, c), __fmul_rn(v, s));
            k[jb] = __fadd_rn(__fmul_rn(u, s), __fmul_rn(v, c));
        }
    }
#endif
#if HADAMARD
    // The CPU's butterflies stage by stage (stride 1, 2, 4, ...), in registers: strides below 8
    // within each block of 8, then strides 8, 16, ... within each residue class mod 8; then
    // the scale.
    {
#define B1 (D < 8 ? D : 8)
#define M2 (D / B1)
        for (int b0 = 0; b0 < D; b0 += B1) {
            float v[B1];
#pragma unroll
            for (int m = 0; m < B1; ++m) v[m] = k[b0 + m];
#pragma unroll
            for (int h = 1; h < B1; h *= 2) {
#pragma unroll
                for (int c0 = 0; c0 < B1; c0 += 2 * h) {
#pragma unroll
                    for (int jj = 0; jj < h; ++jj) {
                        float u = v[c0 + jj], w2 = v[c0 + h + jj];
                        v[c0 + jj] = __fadd_rn(u, w2);
                        v[c0 + h + jj] = __fsub_rn(u, w2);
                    }
                }
            }
#pragma unroll
            for (int m = 0; m < B1; ++m) k[b0 + m] = M2 > 1 ? v[m] : __fmul_rn(v[m], F(HSCALE));
        }
#if D > 8
        for (int r = 0; r < B1; ++r) {
            float v[M2];
#pragma unroll
            for (int m = 0; m < M2; ++m) v[m] = k[r + B1 * m];
#pragma unroll
            for (int h = 1; h < M2; h *= 2) {
#pragma unroll
                for (int c0 = 0; c0 < M2; c0 += 2 * h) {
#pragma unroll
                    for (int jj = 0; jj < h; ++jj) {
                        float u = v[c0 + jj], w2 = v[c0 + h + jj];
                        v[c0 + jj] = __fadd_rn(u, w2);
                        v[c0 + h + jj] = __fsub_rn(u, w2);
                    }
                }
            }
#pragma unroll
            for (int m = 0; m < M2; ++m) k[r + B1 * m] = __fmul_rn(v[m], F(HSCALE));
        }
#endif
    }
#endif
    quant_row(k);
    scores[(size_t)layer * N + i] = score_key(k, qt, w);
#endif
}

extern "C" __global__ void score_special(const float* __restrict__ params, const u32* __restrict__ idx,
        float* __restrict__ scores) {
    int s = blockIdx.x * blockDim.x + threadIdx.x;
    u32 layer = blockIdx.y;
    if (s >= S) return;
    const float* P = params + (size_t)layer * LS;
    const float* key = P + SPEC + (size_t)s * KL;
#if QUEST
    scores[(size_t)layer * N + idx[s]] = quest_key(key, P);
#else
    scores[(size_t)layer * N + idx[s]] = score_key(key, P, P + D * HP);
#endif
}

extern "C" __global__ void count_above(const float* __restrict__ scores_all, const u32* __restrict__ needles, int m,
        u32* __restrict__ counts) {
    u32 layer = blockIdx.y;
    const float* scores = scores_all + (size_t)layer * N;
    float y = scores[needles[0]];
    for (int k = 1; k < m; ++k) y = fmaxf(y, scores[needles[k]]);
    u32 c = 0;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < N; i += gridDim.x * blockDim.x) c += scores[i] > y;
    for (int o = 16; o > 0; o /= 2) c += __shfl_down_sync(0xffffffffu, c, o);
    if ((threadIdx.x & 31) == 0 && c != 0) atomicAdd(counts + layer, c);
}
"#;
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

/// Largest f32 row a GPU thread keeps in shared memory (48 KiB a block, 32 threads at least).
const MAX_PITCH: usize = 384;

/// The GPU layout of one model: sizes, offsets into a layer's uploaded parameters, and the
/// compile-time constants of the kernels.
#[derive(Debug, Clone)]
struct Layout {
    n: usize,
    layers: usize,
    d: usize,
    hp: usize,
    /// Values per stored key (d, or 2d for Quest's page).
    kl: usize,
    /// Token-built entries (needle and hard-negative entries), uploaded per layer.
    specials: Vec<u32>,
    /// Offset of the token-built keys in a layer's parameters, and the layer stride.
    spec: usize,
    ls: usize,
    /// Threads per block of `gen_score`.
    nt: usize,
    defines: String,
}

/// f32 bits as a C constant.
fn bits(x: f32) -> String {
    format!("0x{:08X}u", x.to_bits())
}

/// (lo, hi, m, max) of a grid format, as in crate::formats' element module (the biased
/// exponent range of its quantum, its mantissa bits, its largest value).
fn grid(e: ElementFormat) -> (u32, u32, u32, f32) {
    let g = |emin: i32, emax: i32, m: u32, max: f32| ((emin + 127) as u32, (emax + 127) as u32, m, max);
    match e {
        ElementFormat::Fp16 => g(-14, 15, 10, 65504.0),
        ElementFormat::Fp8E4m3 => g(-6, 8, 3, 448.0),
        ElementFormat::Fp8E5m2 => g(-14, 15, 2, 57344.0),
        ElementFormat::Fp4E2m1 => g(0, 2, 1, 6.0),
        ElementFormat::Int8 => g(0, 0, 0, 127.0),
        ElementFormat::Int4 => g(0, 0, 0, 7.0),
        // bf16 is rounded on its bit pattern (KFMT 2), never through a grid.
        ElementFormat::Bf16 => g(-126, 127, 7, f32::from_bits(0x7F7F_0000)),
    }
}

impl Layout {
    fn new(m: &VectorModel) -> Result<Layout, String> {
        let (n, d, hp, c) = (m.n_entries(), m.d, m.hp, m.c);
        let layers = m.rule.layers().max(1) as usize;
        let kl = m.key_len();
        let pitch = kl + 1;
        if pitch > MAX_PITCH {
            return Err(format!(
                "the GPU build keeps one key of {kl} values per thread in shared memory (at most {}): head_dim {d} is too large for --device cuda",
                MAX_PITCH - 1
            ));
        }
        let nt = (12_288 / pitch / 32 * 32).clamp(32, 64);
        let specials: Vec<u32> = m.special_entries.iter().map(|&e| e as u32).collect();
        let spec = d * hp + hp + 3 * d + 2 * c * d;
        let ls = (spec + specials.len() * kl).div_ceil(4) * 4;
        let mut s = String::new();
        let mut def = |k: &str, v: String| {
            let _ = writeln!(s, "#define {k} {v}");
        };
        def("N", n.to_string());
        def("D", d.to_string());
        def("HP", hp.to_string());
        def("C", c.to_string());
        def("CB", c.div_ceil(4).to_string());
        def("GB", d.div_ceil(4).to_string());
        def("NT", nt.to_string());
        def("PITCH", pitch.to_string());
        def("LS", ls.to_string());
        def("SPEC", spec.to_string());
        def("S", specials.len().to_string());
        def("KL", kl.to_string());
        def("QUEST", (m.quest as u8).to_string());
        def("OVERLAP", (m.overlap as u8).to_string());
        def("TOKEN_GATE", ((m.gate_token_sd > 0.0) as u8).to_string());
        def("TOK_SD", bits(m.gate_token_sd as f32));
        def("KEY_NORM", (m.key_norm as u8).to_string());
        def("GAIN", ((m.key_gain_sd > 0.0) as u8).to_string());
        def("HADAMARD", (m.hadamard as u8).to_string());
        def("HSCALE", bits(1.0 / (d as f32).sqrt()));
        let (rope, pairs, start, half) = match &m.rope {
            Some(r) => (1, r.pairs, r.start, r.half_split as u8),
            None => (0, 0, 0, 0),
        };
        def("ROPE", rope.to_string());
        def("PAIRS", pairs.to_string());
        def("ROPE_START", start.to_string());
        def("ROPE_HALF", half.to_string());
        def("P_KEY", philox::KEY.to_string());
        def("P_TOKEN", philox::TOKEN.to_string());
        def("P_GATE_TOKEN", philox::GATE_TOKEN.to_string());
        // The k format: 0 fp32, 1 a grid, 2 bf16, 3 block-scaled (+ its scale kind).
        let (kfmt, el, blk, scale, floor) = match m.k_format {
            Format::F32 => (0, ElementFormat::Int8, 1, 0, 0.0),
            Format::Element(ElementFormat::Bf16) => (2, ElementFormat::Bf16, 1, 0, 0.0),
            Format::Element(e) => (1, e, 1, 0, 0.0),
            Format::Block(b) => {
                let sk = match b.scale() {
                    ScaleKind::Fp32 => 0,
                    ScaleKind::Ue8m0 => 1,
                    ScaleKind::E8m0 => 2,
                    ScaleKind::E4m3 => 3,
                };
                (3, b.element(), b.block(), sk, b.amax_floor())
            }
        };
        let (lo, hi, mb, gmax) = grid(el);
        def("KFMT", kfmt.to_string());
        def("G_LO", format!("{lo}u"));
        def("G_HI", format!("{hi}u"));
        def("G_M", format!("{mb}u"));
        def("GMAX", bits(gmax));
        def("GMAX448", bits(448.0 * gmax));
        def("INV", bits((1.0f64 / gmax as f64) as f32));
        def("EMAX", el.max_exponent().to_string());
        def("BLK", blk.to_string());
        def("SCALE", scale.to_string());
        def("FLOOR", bits(floor));
        Ok(Layout { n, layers, d, hp, kl, specials, spec, ls, nt, defines: s })
    }

    /// The cos then sin table of every entry's RoPE angles on the card: the CPU model's table,
    /// copied straight from it, or the same values computed when the model keeps none.
    fn upload_rope(&self, m: &VectorModel, stream: &Arc<CudaStream>) -> Res<CudaSlice<f32>> {
        let Some(r) = &m.rope else { return stream.alloc_zeros::<f32>(1) };
        let len = self.n * r.pairs;
        let computed;
        let (cos, sin) = if r.cos.is_empty() {
            computed = super::Rope::tables(&r.freqs, self.n as u64, r.c);
            (&computed.0, &computed.1)
        } else {
            (&r.cos, &r.sin)
        };
        // SAFETY: both halves are written below before any kernel reads the table.
        let mut t = unsafe { stream.alloc::<f32>((2 * len).max(1)) }?;
        if len > 0 {
            stream.memcpy_htod(&cos[..len], &mut t.slice_mut(0..len))?;
            stream.memcpy_htod(&sin[..len], &mut t.slice_mut(len..2 * len))?;
        }
        Ok(t)
    }

    /// Workers (a stream, staging and every layer's scores each) a run holds on one card: every
    /// thread's, unless their scores would pass 256 MiB (at 1Mi tokens and 30 layers, 31 MiB a
    /// worker), and 4 at least. Beyond a few workers the card is busy anyway (a trial's kernels
    /// take far longer than its CPU part at that size); each further one costs setup.
    fn max_workers(&self) -> usize {
        let bytes = 4 * self.layers * (self.n.max(1) + self.ls);
        ((256 << 20) / bytes.max(1)).clamp(4, rayon::current_num_threads().max(4))
    }
}

/// The kernels of a model as PTX (one NVRTC compilation per distinct layout and process).
fn ptx(defines: &str) -> Result<Ptx, String> {
    static CACHE: Mutex<Option<HashMap<String, Ptx>>> = Mutex::new(None);
    let mut cache = CACHE.lock().unwrap_or_else(|p| p.into_inner());
    let map = cache.get_or_insert_with(HashMap::new);
    if let Some(p) = map.get(defines) {
        return Ok(p.clone());
    }
    let opts = CompileOptions {
        fmad: Some(false),
        ftz: Some(false),
        prec_div: Some(true),
        prec_sqrt: Some(true),
        ..Default::default()
    };
    let src = format!("{defines}{SOURCE}");
    let p = cudarc::nvrtc::compile_ptx_with_opts(src, opts)
        .map_err(|e| format!("NVRTC could not compile the kernels: {e:?}"))?;
    map.insert(defines.to_string(), p.clone());
    Ok(p)
}

/// One model layout's kernels, loaded into a card's context.
#[derive(Clone)]
struct Kernels {
    gen: CudaFunction,
    special: CudaFunction,
    count: CudaFunction,
}

/// A card's context and the kernels of each model layout loaded into it, kept for the rest of
/// the process, as the CUDA runtime keeps a device's primary context: cudarc releases the
/// primary context when its last handle drops, and the driver then tears it down, so that each
/// run would create it again and load (JIT-compile) its module again — about 0.2 s a run on an
/// H100, paid by every `simulate` of a sweep or a benchmark. Everything a run owns (the model's
/// RoPE table, the buffers, the streams) is still made and freed per run.
fn loaded(ordinal: usize, defines: &str) -> Result<(Arc<CudaContext>, Kernels), String> {
    type Loaded = Vec<(usize, Arc<CudaContext>, HashMap<String, Kernels>)>;
    static LOADED: Mutex<Loaded> = Mutex::new(Vec::new());
    let err = |e: cudarc::driver::DriverError| format!("CUDA device {ordinal}: {e}");
    let mut all = LOADED.lock().unwrap_or_else(|p| p.into_inner());
    let at = match all.iter().position(|(o, ..)| *o == ordinal) {
        Some(at) => at,
        None => {
            let ctx = CudaContext::new(ordinal).map_err(err)?;
            // Each worker's buffers live on its own stream and are used only there; a run's
            // constant buffers are written once and synchronised before any worker reads them.
            // So stream order is all the synchronisation needed, and cudarc's per-buffer events
            // (a record or wait per argument per launch) would only cost CPU time.
            // SAFETY: no buffer of this context is written by one stream while another uses it.
            unsafe { ctx.disable_event_tracking() };
            all.push((ordinal, ctx, HashMap::new()));
            all.len() - 1
        }
    };
    let (_, ctx, modules) = &mut all[at];
    if let Some(k) = modules.get(defines) {
        return Ok((ctx.clone(), k.clone()));
    }
    let module = ctx.load_module(ptx(defines)?).map_err(err)?;
    let k = Kernels {
        gen: module.load_function("gen_score").map_err(err)?,
        special: module.load_function("score_special").map_err(err)?,
        count: module.load_function("count_above").map_err(err)?,
    };
    modules.insert(defines.to_string(), k.clone());
    Ok((ctx.clone(), k))
}

/// One card with one model's kernels and a run's constant buffers (RoPE table, channel scales,
/// token-built entries, needle entries).
struct Card {
    ctx: Arc<CudaContext>,
    kernels: Kernels,
    rope: CudaSlice<f32>,
    cs: CudaSlice<f32>,
    spec_idx: CudaSlice<u32>,
    needles: CudaSlice<u32>,
}

impl Card {
    fn open(ordinal: usize, m: &VectorModel, lay: &Layout) -> Result<Card, String> {
        let err = |e: cudarc::driver::DriverError| format!("CUDA device {ordinal}: {e}");
        let (ctx, kernels) = loaded(ordinal, &lay.defines)?;
        let stream = ctx.default_stream();
        let needles: Vec<u32> = m.geometry.needle_entries.iter().map(|e| e.index as u32).collect();
        let up = |v: &[u32]| if v.is_empty() { stream.alloc_zeros::<u32>(1) } else { stream.clone_htod(v) };
        let card = Card {
            rope: lay.upload_rope(m, &stream).map_err(err)?,
            cs: stream.clone_htod(&m.chan_scale).map_err(err)?,
            spec_idx: up(&lay.specials).map_err(err)?,
            needles: up(&needles).map_err(err)?,
            kernels,
            ctx,
        };
        stream.synchronize().map_err(err)?;
        Ok(card)
    }
}

type Res<T> = Result<T, cudarc::driver::DriverError>;

/// One worker's stream and buffers on a card (reused by every trial it runs).
struct Worker {
    card: Arc<Card>,
    stream: Arc<CudaStream>,
    /// Every layer's parameters (queries, weights, pooling sds, gains, gate logits,
    /// token-built keys), `Layout::ls` values a layer.
    params: CudaSlice<f32>,
    stage: PinnedHostSlice<f32>,
    /// Every layer's N scores.
    scores: CudaSlice<f32>,
    /// Entries above the needle, per layer.
    counts: CudaSlice<u32>,
    host_counts: Vec<u32>,
    /// Recorded after the copy out of `stage`: waited for before the CPU writes it again.
    staged: CudaEvent,
}

impl Worker {
    fn new(card: Arc<Card>, lay: &Layout) -> Res<Worker> {
        let stream = card.ctx.new_stream()?;
        let len = lay.layers * lay.ls;
        // SAFETY: the staging is written in full (every layer's used part) before it is copied;
        // unused padding is copied but never read by a kernel.
        let stage = unsafe { card.ctx.alloc_pinned::<f32>(len)? };
        // SAFETY: `params` is written in full by each trial's copy from `stage` before a kernel
        // reads it; `gen_score` writes each layer's N scores before the other kernels read them.
        let (params, scores) = unsafe { (stream.alloc::<f32>(len)?, stream.alloc::<f32>(lay.layers * lay.n.max(1))?) };
        Ok(Worker {
            params,
            stage,
            scores,
            counts: stream.alloc_zeros::<u32>(lay.layers)?,
            host_counts: vec![0; lay.layers],
            staged: card.ctx.new_event(None)?,
            stream,
            card,
        })
    }

    /// Trial `i` of `seed`: each layer's small part on this thread ([`VectorModel::draw_query`]
    /// and friends, token-built entries through [`VectorModel::draw_keys`]), then one upload and
    /// three launches; each layer's count of entries above the needle in `self.host_counts`.
    fn layers(&mut self, m: &VectorModel, lay: &Layout, seed: u64, i: u64, sc: &mut Scratch) -> Res<()> {
        let (d, kl) = (lay.d, lay.kl);
        self.staged.synchronize()?;
        {
            let st = self.stage.as_mut_slice()?;
            for layer in 0..lay.layers {
                let dr = philox::Draws::new(seed, i, layer as u32);
                m.draw_query(&dr, sc);
                m.rotate_queries(sc);
                quantize_rows(&m.q_format, &mut sc.q, d);
                let p = &mut st[layer * lay.ls..(layer + 1) * lay.ls];
                if m.quest {
                    p[..d].copy_from_slice(&sc.q[..d]);
                } else {
                    m.transpose_queries(sc);
                    p[..d * lay.hp].copy_from_slice(&sc.qt);
                    let mut o = d * lay.hp;
                    for src in [&sc.w[..], &sc.sd_first, &sc.sd_rest, &sc.gain, &sc.lg_own, &sc.lg_prev] {
                        p[o..o + src.len()].copy_from_slice(src);
                        o += src.len();
                    }
                }
                sc.keys.resize(kl, 0.0);
                for (k, &e) in lay.specials.iter().enumerate() {
                    m.draw_keys(&dr, sc, e as usize..e as usize + 1);
                    quantize_rows(&m.k_format, &mut sc.keys[..kl], d);
                    p[lay.spec + k * kl..lay.spec + (k + 1) * kl].copy_from_slice(&sc.keys[..kl]);
                }
            }
        }
        self.stream.memcpy_htod(&self.stage, &mut self.params)?;
        self.staged.record(&self.stream)?;
        let key = philox::trial_key(seed, i);
        let ly = lay.layers as u32;
        let cfg = LaunchConfig {
            grid_dim: (lay.n.div_ceil(lay.nt) as u32, ly, 1),
            block_dim: (lay.nt as u32, 1, 1),
            shared_mem_bytes: 0,
        };
        // SAFETY: the argument types match the kernels' signatures; every index the kernels
        // form stays within the buffers (sizes from the same Layout).
        unsafe {
            self.stream
                .launch_builder(&self.card.kernels.gen)
                .arg(&self.params)
                .arg(&self.card.rope)
                .arg(&self.card.cs)
                .arg(&mut self.scores)
                .arg(&key[0])
                .arg(&key[1])
                .launch(cfg)?;
        }
        if !lay.specials.is_empty() {
            let cfg = LaunchConfig {
                grid_dim: (lay.specials.len().div_ceil(32) as u32, ly, 1),
                block_dim: (32, 1, 1),
                shared_mem_bytes: 0,
            };
            // SAFETY: as above.
            unsafe {
                self.stream
                    .launch_builder(&self.card.kernels.special)
                    .arg(&self.params)
                    .arg(&self.card.spec_idx)
                    .arg(&mut self.scores)
                    .launch(cfg)?;
            }
        }
        self.stream.memset_zeros(&mut self.counts)?;
        let m_needles = m.geometry.needle_entries.len() as i32;
        if m_needles > 0 {
            let blocks = (lay.n.div_ceil(256) as u32).clamp(1, 1024);
            let cfg = LaunchConfig { grid_dim: (blocks, ly, 1), block_dim: (256, 1, 1), shared_mem_bytes: 0 };
            // SAFETY: as above; `needles` holds `m_needles` indices below N.
            unsafe {
                self.stream
                    .launch_builder(&self.card.kernels.count)
                    .arg(&self.scores)
                    .arg(&self.card.needles)
                    .arg(&m_needles)
                    .arg(&mut self.counts)
                    .launch(cfg)?;
            }
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
    fn trial(
        &mut self,
        m: &VectorModel,
        lay: &Layout,
        seed: u64,
        i: u64,
        sc: &mut Scratch,
        tally: &mut Tally,
    ) -> Res<()> {
        self.layers(m, lay, seed, i, sc)?;
        let mut attending = 0u32;
        for layer in 0..m.rule.layers() as usize {
            let rank = self.rank(m, layer);
            if layer == 0 {
                tally.ranks.record(rank);
            }
            attending += m.rule.attends(rank) as u32;
        }
        m.rule.conclude(attending, &mut trial_rng(seed, i), tally);
        Ok(())
    }
}

/// A card's workers in one run: the idle ones and how many were made
/// ([`Layout::max_workers`] at most), and a signal when one comes back.
#[derive(Default)]
struct Pool {
    workers: Mutex<(Vec<Worker>, usize)>,
    returned: Condvar,
}

/// The GPU trial plan: a [`VectorModel`], its cards (one slot per ordinal given, repeats
/// allowed: a repeated ordinal shares the card and its pool of workers).
struct GpuPlan<'a> {
    model: &'a VectorModel,
    layout: Layout,
    cards: Vec<Arc<Card>>,
    /// Slot s's pool: `pools[pool_of[s]]`, one per distinct card.
    pools: Vec<Pool>,
    pool_of: Vec<usize>,
    error: Mutex<Option<String>>,
}

impl GpuPlan<'_> {
    fn fail(&self, what: String) {
        let mut e = self.error.lock().unwrap_or_else(|p| p.into_inner());
        e.get_or_insert(what);
    }

    /// An idle worker of slot `slot`'s card, a new one while the card has fewer than
    /// [`Layout::max_workers`], else the next one another thread gives back. A thread holds at
    /// most one worker, and a trial's CPU part starts no parallel work (so no waiting thread
    /// can be holding one below it on its stack): every worker comes back.
    fn take(&self, slot: usize) -> Res<Worker> {
        let pool = &self.pools[self.pool_of[slot]];
        let mut g = pool.workers.lock().unwrap_or_else(|p| p.into_inner());
        loop {
            if let Some(w) = g.0.pop() {
                return Ok(w);
            }
            if g.1 < self.layout.max_workers() {
                g.1 += 1;
                drop(g);
                return Worker::new(self.cards[slot].clone(), &self.layout);
            }
            g = pool.returned.wait(g).unwrap_or_else(|p| p.into_inner());
        }
    }

    fn give_back(&self, slot: usize, w: Worker) {
        let pool = &self.pools[self.pool_of[slot]];
        pool.workers.lock().unwrap_or_else(|p| p.into_inner()).0.push(w);
        pool.returned.notify_one();
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
        let card = &self.cards[slot];
        let fail = |e: cudarc::driver::DriverError| self.fail(format!("CUDA device {}: {e}", card.ctx.ordinal()));
        let mut worker = match self.take(slot) {
            Ok(w) => w,
            Err(e) => return fail(e),
        };
        let mut result = Ok(());
        for i in range {
            result = worker.trial(self.model, &self.layout, seed, i, scratch, tally);
            if result.is_err() {
                break;
            }
        }
        // Given back even after a failure, so that no thread waits for it.
        self.give_back(slot, worker);
        if let Err(e) = result {
            fail(e);
        }
    }
}

/// Runs `trials` vector-model trials of a validated scenario on the CUDA devices `ordinals`
/// (checked by [`super::device::Device::check`]); the counts of [`super::simulate`] (see the
/// module docs). An error is a failure of the device mid-run.
pub(crate) fn simulate(
    s: &Scenario,
    trials: u64,
    seed: u64,
    ordinals: &[u16],
    progress: &dyn Progress,
) -> Result<Tally, String> {
    let model = VectorModel::new(s);
    let layout = Layout::new(&model)?;
    // A repeated ordinal shares the card and its workers (its own streams and buffers each).
    let mut distinct: Vec<(u16, Arc<Card>)> = Vec::new();
    let (mut cards, mut pool_of) = (Vec::new(), Vec::new());
    for &o in ordinals {
        let at = match distinct.iter().position(|(d, _)| *d == o) {
            Some(at) => at,
            None => {
                distinct.push((o, Arc::new(Card::open(o as usize, &model, &layout)?)));
                distinct.len() - 1
            }
        };
        cards.push(distinct[at].1.clone());
        pool_of.push(at);
    }
    let plan = GpuPlan {
        model: &model,
        layout,
        pools: distinct.iter().map(|_| Pool::default()).collect(),
        pool_of,
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
    let layout = Layout::new(&model)?;
    let layers = model.rule.layers() as usize;
    let cpu: Vec<Vec<Option<u64>>> = (0..trials)
        .into_par_iter()
        .map_init(Scratch::default, |sc, i| {
            (0..layers).map(|l| model.layer_rank(&philox::Draws::new(seed, i, l as u32), sc)).collect()
        })
        .collect();
    let card = Arc::new(Card::open(ordinal as usize, &model, &layout)?);
    let pool: Mutex<Vec<Worker>> = Mutex::new(Vec::new());
    let gpu: Result<Vec<Vec<Option<u64>>>, String> = (0..trials)
        .into_par_iter()
        .map_init(Scratch::default, |sc, i| {
            let popped = pool.lock().ok().and_then(|mut v| v.pop());
            let mut w = match popped {
                Some(w) => w,
                None => Worker::new(card.clone(), &layout).map_err(|e| e.to_string())?,
            };
            w.layers(&model, &layout, seed, i, sc).map_err(|e| e.to_string())?;
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
