//! The normal survival function against 3,867 mpmath reference values (tests/data/normal/,
//! generator committed): both tails, the table's piece boundaries, the far tail to underflow.

use dsa_sim::stats::{norm_cdf, norm_sf};

fn reference() -> Vec<(f64, f64)> {
    let text = include_str!("../data/normal/normal_sf.txt");
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .map(|l| {
            let mut it = l.split_whitespace();
            let x: f64 = it.next().unwrap().parse().unwrap();
            let q: f64 = it.next().unwrap().parse().unwrap();
            (x, q)
        })
        .collect()
}

#[test]
fn upper_tail_to_relative_precision() {
    let mut worst = (0.0, 0.0f64);
    let mut checked = 0;
    for (x, q) in reference() {
        if x < 0.0 || q < f64::MIN_POSITIVE {
            continue; // lower half below; subnormal results hold fewer digits
        }
        let rel = (norm_sf(x) / q - 1.0).abs();
        if rel > worst.1 {
            worst = (x, rel);
        }
        assert_eq!(norm_cdf(-x), norm_sf(x));
        checked += 1;
    }
    assert!(checked > 2000);
    eprintln!("upper tail: worst relative error {:e} at x = {}", worst.1, worst.0);
    assert!(worst.1 < 1e-15, "worst relative error {:e} at x = {}", worst.1, worst.0);
}

#[test]
fn lower_tail_to_absolute_precision() {
    for (x, q) in reference() {
        if x >= 0.0 {
            continue;
        }
        // Q(x) = 1 − Q(−x) ∈ (0.5, 1]: the upper tail's relative error plus the final rounding.
        let err = (norm_sf(x) - q).abs();
        assert!(err <= 1e-15 * (1.0 - q) + 1.2e-16, "x = {x}: {} vs {q} (error {err:e})", norm_sf(x));
    }
}

#[test]
fn edges() {
    assert!((norm_sf(0.0) / 0.5 - 1.0).abs() < 1e-15);
    assert_eq!(norm_sf(f64::INFINITY), 0.0);
    assert_eq!(norm_sf(f64::NEG_INFINITY), 1.0);
    assert_eq!(norm_sf(40.0), 0.0);
    assert_eq!(norm_sf(-40.0), 1.0);
    assert!(norm_sf(f64::NAN).is_nan());
    // Monotone across every piece boundary of the table.
    for p in 1..128 {
        let b = p as f64 * 12.0 / 128.0;
        assert!(norm_sf(b - 1e-12) >= norm_sf(b) && norm_sf(b) >= norm_sf(b + 1e-12), "boundary {b}");
    }
}
