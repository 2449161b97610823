//! Runtime selection of the widest vector instruction set for the hot loops.
//!
//! The loops are written once, branch-free per value, as `#[inline(always)]` functions; the
//! `simd_versions!` macro compiles each of them three times (AVX-512, AVX2, baseline) and picks
//! one per call from the CPU's features (a cached check). The arithmetic is the same IEEE f32
//! operations in every version (Rust never fuses a multiply and an add on its own), so the
//! results are bit-identical whichever version runs; the bit-exact tests run all three.

use std::sync::atomic::{AtomicU8, Ordering};

/// An instruction-set level for the formats' hot loops.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum SimdLevel {
    /// The target's baseline (SSE2 on x86-64).
    Baseline = 1,
    /// AVX2.
    Avx2 = 2,
    /// AVX-512 (F, BW, DQ, VL).
    Avx512 = 3,
}

static CAP: AtomicU8 = AtomicU8::new(SimdLevel::Avx512 as u8);

/// Caps the level the formats' loops use (`None`: the best the CPU has). For tests and
/// benchmarks: the results are identical at every level, only the speed changes. Process-wide.
pub fn cap_simd_level(level: Option<SimdLevel>) {
    CAP.store(level.unwrap_or(SimdLevel::Avx512) as u8, Ordering::Relaxed);
}

/// The level the loops run at: the best the CPU has, within the cap.
pub fn simd_level() -> SimdLevel {
    let cap = CAP.load(Ordering::Relaxed);
    #[cfg(target_arch = "x86_64")]
    {
        if cap >= SimdLevel::Avx512 as u8
            && std::arch::is_x86_feature_detected!("avx512f")
            && std::arch::is_x86_feature_detected!("avx512bw")
            && std::arch::is_x86_feature_detected!("avx512dq")
            && std::arch::is_x86_feature_detected!("avx512vl")
        {
            return SimdLevel::Avx512;
        }
        if cap >= SimdLevel::Avx2 as u8 && std::arch::is_x86_feature_detected!("avx2") {
            return SimdLevel::Avx2;
        }
    }
    let _ = cap;
    SimdLevel::Baseline
}

/// `simd_versions! { fn name(args) -> R = kernel; }` defines `name`, which calls `kernel(args)`
/// compiled for the level [`simd_level`] picks.
macro_rules! simd_versions {
    ($(#[$meta:meta])* fn $name:ident($($a:ident: $t:ty),* $(,)?) -> $r:ty = $kernel:path;) => {
        $(#[$meta])*
        fn $name($($a: $t),*) -> $r {
            #[cfg(target_arch = "x86_64")]
            {
                #[target_feature(enable = "avx512f,avx512bw,avx512dq,avx512vl,avx2")]
                unsafe fn v512($($a: $t),*) -> $r {
                    $kernel($($a),*)
                }
                #[target_feature(enable = "avx2")]
                unsafe fn v256($($a: $t),*) -> $r {
                    $kernel($($a),*)
                }
                match $crate::formats::simd::simd_level() {
                    // SAFETY: simd_level returns a level only when the CPU has its features.
                    $crate::formats::simd::SimdLevel::Avx512 => return unsafe { v512($($a),*) },
                    // SAFETY: as above.
                    $crate::formats::simd::SimdLevel::Avx2 => return unsafe { v256($($a),*) },
                    $crate::formats::simd::SimdLevel::Baseline => {}
                }
            }
            $kernel($($a),*)
        }
    };
}
