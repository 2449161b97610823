//! Runtime selection of the widest vector instruction set for the hot loops.
//!
//! The loops are written once, branch-free per value, as `#[inline(always)]` functions; this
//! macro compiles each of them three times (AVX-512, AVX2, baseline x86-64 / other targets) and
//! picks one per call from the CPU's features (a cached check). The arithmetic is the same IEEE
//! f32 operations in every version (Rust never fuses a multiply and an add on its own), so the
//! results are bit-identical whichever version runs.

/// `simd_versions!(fn name(args) -> R = kernel);` defines `name`, which calls `kernel(args)`
/// compiled for the best instruction set available.
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
                if std::arch::is_x86_feature_detected!("avx512f")
                    && std::arch::is_x86_feature_detected!("avx512bw")
                    && std::arch::is_x86_feature_detected!("avx512dq")
                    && std::arch::is_x86_feature_detected!("avx512vl")
                {
                    // SAFETY: the CPU has every feature v512 is compiled for.
                    return unsafe { v512($($a),*) };
                }
                if std::arch::is_x86_feature_detected!("avx2") {
                    // SAFETY: the CPU has every feature v256 is compiled for.
                    return unsafe { v256($($a),*) };
                }
            }
            $kernel($($a),*)
        }
    };
}
