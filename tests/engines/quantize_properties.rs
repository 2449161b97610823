//! Property tests of quantize-dequantize (docs/model.md#number-formats): idempotent (a
//! dequantized value is on the format's grid, so quantizing it again changes nothing) and
//! monotone (a larger input never gives a smaller value), for every element format and every
//! block-scaled combination.
//!
//! Idempotence is exact for element formats and power-of-two block scales (ue8m0, e8m0). With an
//! fp32 scale (amax / max) it holds to within the rounding of the scale: the block's largest
//! value dequantizes to max·s rounded to f32, whose own scale differs from s in the last bit
//! (e.g. fp8-e4m3:16:fp32 maps -7807311.5 to -7807312.0, then to -7807312.5). That is how the
//! reference implementations behave too, so it is asserted as such, not as a bug.
//!
//! e4m3 block scales (NVFP4's two-level scaling) are idempotent to within rounding for their
//! own element format, fp4-e2m1, whose grid saturates the block maximum back to 6. Under an
//! e4m3 scale, elements with a finer top grid (fp8, int) are not: the block maximum can round
//! down (fp8-e4m3 under e4m3 scales maps -13.44634 to -13.123194, then to -12.719402), the next
//! block scale is one e4m3 step smaller, and the values move again. Those combinations are left
//! out here and reported. Even for fp4-e2m1 the claim needs the block scale in e4m3's normal
//! range: a block whose amax is below 2^-6/448 of the tensor's gets a subnormal e4m3 scale with
//! one or two significant bits, and a second pass can move it a whole grid step (nvfp4 took
//! -5.2182035 to -3.9136527 in a block 1.7e5 times smaller than the tensor's maximum). Such blocks
//! are skipped, not tolerated.
//!
//! Finite inputs stay finite: values near `f32::MAX` saturate there under every block format and
//! scale kind (the dequantized product `element · s` would otherwise pass the f32 range).
//!
//! The proptest RNG seed is fixed, so every run checks the same cases.

use dsa_sim::formats::Format;
use proptest::prelude::*;
use proptest::test_runner::RngSeed;

/// amax_block / amax_tensor below which an NVFP4-style e4m3 block scale is subnormal
/// (scale = e4m3(amax_block / (6·g)), g = amax_tensor / (448·6); e4m3's smallest normal is 2^-6).
const E4M3_NORMAL_SCALE_RATIO: f32 = 1.0 / (64.0 * 448.0);

const ELEMENTS: &[&str] = &["bf16", "fp16", "fp8-e4m3", "fp8-e5m2", "fp4-e2m1"];
const BLOCK_ELEMENTS: &[&str] = &["fp8-e4m3", "fp8-e5m2", "fp4-e2m1", "int8", "int4"];
const SCALES: &[&str] = &["fp32", "ue8m0", "e8m0", "e4m3"];

fn q(f: &Format, xs: &[f32]) -> Vec<f32> {
    let mut v = xs.to_vec();
    f.quantize_dequantize_in_place(&mut v).unwrap_or_else(|e| panic!("{f}: {e} on {xs:?}"));
    v
}

fn same(a: &[f32], b: &[f32]) -> bool {
    a.iter().zip(b).all(|(x, y)| x.to_bits() == y.to_bits() || (x.is_nan() && y.is_nan()) || (*x == 0.0 && *y == 0.0))
}

/// Finite f32 values over the whole range: signs, subnormals, huge magnitudes, exact zeros.
fn value() -> impl Strategy<Value = f32> {
    prop_oneof![
        4 => -8.0f32..8.0,
        2 => (-30i32..30, -1.0f32..1.0).prop_map(|(e, m)| m * 2f32.powi(e)),
        1 => any::<f32>().prop_filter("finite", |x| x.is_finite()),
        1 => Just(0.0f32),
    ]
}

/// Finite values within a factor of two of `f32::MAX` (the max itself and its neighbours
/// included), mixed with ordinary ones: where a block-scaled product could pass the f32 range.
fn huge() -> impl Strategy<Value = f32> {
    let near_max = (1.0f32..2.0, any::<bool>()).prop_map(|(m, neg)| {
        let x = (m * 2f32.powi(127)).min(f32::MAX);
        if neg {
            -x
        } else {
            x
        }
    });
    prop_oneof![
        4 => near_max,
        2 => prop::sample::select(vec![f32::MAX, -f32::MAX, f32::from_bits(0x7F7F_FFFE), -f32::from_bits(0x7F7F_FFFE), 2f32.powi(127), -2f32.powi(127)]),
        1 => value(),
    ]
}

/// Finite in, finite out, the sign kept (or zero): the saturation rule of every block format.
fn assert_finite_and_signed(f: &Format, xs: &[f32], out: &[f32]) {
    for (x, y) in xs.iter().zip(out) {
        assert!(y.is_finite(), "{f}: finite {x:e} ({:08x}) became {y}", x.to_bits());
        assert!(*y == 0.0 || y.is_sign_negative() == x.is_sign_negative(), "{f}: {x:e} became {y:e}");
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 400, failure_persistence: None, rng_seed: RngSeed::Fixed(0x7F7F), ..ProptestConfig::default() })]

    #[test]
    fn block_formats_keep_values_near_the_f32_max_finite(
        xs in prop::collection::vec(huge(), 32..=64),
        e in 0usize..5,
        s in 0usize..4,
        b in prop::sample::select(vec![1usize, 2, 16, 32]),
        floor in prop::sample::select(vec!["", ":floor=0.0001"]),
    ) {
        let xs = &xs[..xs.len() / b * b];
        let f: Format = format!("{}:{b}:{}{floor}", BLOCK_ELEMENTS[e], SCALES[s]).parse().unwrap();
        assert_finite_and_signed(&f, xs, &q(&f, xs));
    }
}

#[test]
fn every_block_format_saturates_at_the_f32_max() {
    // The case first: 3.4028235e38 under fp8-e4m3 with a ue8m0 scale rounds to 256·2^120.
    let f: Format = "fp8-e4m3:2:ue8m0".parse().unwrap();
    assert_eq!(q(&f, &[f32::MAX, 1.0]), [f32::MAX, 0.0]);
    let edge = [f32::MAX, f32::from_bits(0x7F7F_FFFE), 2f32.powi(127), 3.4e38, 3.0e38, 2e38, 1.8e38, 1.0];
    let mut specs: Vec<String> = vec!["mxfp4".into(), "nvfp4".into(), "fp4-e2m1:32:ue8m0:floor=1.1754944e-38".into()];
    for e in BLOCK_ELEMENTS {
        for s in SCALES {
            for b in [1, 2, 8] {
                specs.push(format!("{e}:{b}:{s}"));
                specs.push(format!("{e}:{b}:{s}:floor=0.0001"));
            }
        }
    }
    for spec in &specs {
        let f: Format = spec.parse().unwrap();
        let b = f.block().unwrap();
        for &top in &edge {
            for sign in [1.0f32, -1.0] {
                // A tensor of whole blocks: the edge value first, then a ramp below it.
                let n = b.max(8).div_ceil(b) * b;
                let xs: Vec<f32> = (0..n).map(|i| sign * top * (1.0 - i as f32 / n as f32)).collect();
                let out = q(&f, &xs);
                assert_finite_and_signed(&f, &xs, &out);
                // Saturated, not collapsed: the edge value keeps its magnitude within a factor 2.
                assert!(out[0].abs() >= top.min(f32::MAX) / 2.0, "{spec}: {} -> {}", xs[0], out[0]);
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 400, failure_persistence: None, rng_seed: RngSeed::Fixed(0xF0F0), ..ProptestConfig::default() })]

    #[test]
    fn element_formats_are_idempotent_and_monotone(xs in prop::collection::vec(value(), 1..64), i in 0usize..5) {
        let f: Format = ELEMENTS[i].parse().unwrap();
        let once = q(&f, &xs);
        prop_assert!(same(&q(&f, &once), &once), "{} not idempotent on {:?}", f, xs);
        let mut sorted = xs.clone();
        sorted.sort_by(|a, b| a.partial_cmp(b).unwrap());
        let qs = q(&f, &sorted);
        prop_assert!(qs.windows(2).all(|w| w[0] <= w[1]), "{} not monotone: {:?} -> {:?}", f, sorted, qs);
    }

    #[test]
    fn block_formats_are_idempotent(
        blocks in prop::collection::vec(prop::collection::vec(value(), 16), 1..4),
        e in 0usize..5,
        s in 0usize..4,
    ) {
        let xs: Vec<f32> = blocks.concat();
        let e = if SCALES[s] == "e4m3" { 2 } else { e };
        let spec = format!("{}:16:{}", BLOCK_ELEMENTS[e], SCALES[s]);
        let f: Format = spec.parse().unwrap();
        let once = q(&f, &xs);
        prop_assert!(once.iter().all(|x| !x.is_nan()), "{} made a NaN from {:?}", f, xs);
        let twice = q(&f, &once);
        if ["ue8m0", "e8m0"].contains(&SCALES[s]) {
            prop_assert!(same(&twice, &once), "{} not idempotent:\n{:?}\n{:?}", f, once, twice);
        } else {
            // Within the rounding of the scale, relative to each block's largest magnitude.
            let tensor_amax = |v: &[f32]| v.iter().fold(0f32, |m, x| m.max(x.abs()));
            let (t_in, t_once) = (tensor_amax(&xs), tensor_amax(&once));
            for ((a, b), x_in) in once.chunks(16).zip(twice.chunks(16)).zip(xs.chunks(16)) {
                let amax = a.iter().fold(0f32, |m, x| m.max(x.abs()));
                if SCALES[s] == "e4m3" {
                    let a_in = tensor_amax(x_in);
                    // Subnormal e4m3 block scales: outside the claim (see the module docs).
                    if a_in < 2.0 * E4M3_NORMAL_SCALE_RATIO * t_in || amax < 2.0 * E4M3_NORMAL_SCALE_RATIO * t_once {
                        continue;
                    }
                }
                let tol = 8.0 * f32::EPSILON * amax;
                for (x, y) in a.iter().zip(b) {
                    prop_assert!((x - y).abs() <= tol, "{} drifts on a second pass: {} -> {} (block amax {})", f, x, y, amax);
                }
            }
        }
    }

    #[test]
    fn block_formats_are_monotone_under_a_shared_scale(
        mut block in prop::collection::vec(-4.0f32..4.0, 16),
        e in 0usize..5,
        s in 0usize..4,
    ) {
        // Pin the block's amax with a first element the others cannot exceed: the scale is then
        // the same for every input below, and sorting the rest must keep the values sorted.
        block[0] = 8.0;
        let spec = format!("{}:16:{}", BLOCK_ELEMENTS[e], SCALES[s]);
        let f: Format = spec.parse().unwrap();
        block[1..].sort_by(|a, b| a.partial_cmp(b).unwrap());
        let qs = q(&f, &block);
        prop_assert!(qs[1..].windows(2).all(|w| w[0] <= w[1]), "{} not monotone: {:?} -> {:?}", f, block, qs);
    }
}

#[test]
fn the_named_formats_are_idempotent_on_a_ramp() {
    let ramp: Vec<f32> = (0..64).map(|i| (i as f32 - 31.5) * 0.37).collect();
    for spec in
        ["fp32", "bf16", "fp16", "fp8-e4m3", "fp8-e5m2", "fp4-e2m1", "mxfp4", "nvfp4", "fp8-e4m3:128:fp32:floor=0.0001"]
    {
        let f: Format = spec.parse().unwrap();
        let xs: Vec<f32> =
            if f.block() == Some(128) { ramp.iter().chain(&ramp).copied().collect() } else { ramp.clone() };
        let once = q(&f, &xs);
        let twice = q(&f, &once);
        if spec.contains(":fp32") {
            let amax = once.iter().fold(0f32, |m, x| m.max(x.abs()));
            assert!(once.iter().zip(&twice).all(|(x, y)| (x - y).abs() <= 4.0 * f32::EPSILON * amax), "{spec}");
        } else {
            assert!(same(&twice, &once), "{spec}");
        }
    }
}
