//! Numerical integration for the analytic engine.
//!
//! Written here rather than taken from a crate because the engine needs three things together
//! that the quadrature crates on crates.io do not offer in one place: a global adaptive
//! Gauss–Kronrod rule with an *absolute* error target and caller-given breakpoints (where the
//! needle's law has a kink), and probabilists' Gauss–Hermite rules for expectations over a
//! standard normal. Both are classical (QUADPACK QK15; Golub–Welsch-free Newton iteration on the
//! Hermite recurrence) and are tested on integrals with known values.

use std::sync::OnceLock;

/// Kronrod abscissae (QUADPACK qk15), descending; the odd-indexed ones are the 7-point Gauss nodes.
#[allow(clippy::excessive_precision)] // QUADPACK digits, kept verbatim to compare against the source
const XGK: [f64; 8] = [
    0.991_455_371_120_812_639_206_854_697_526_329,
    0.949_107_912_342_758_524_526_189_684_047_851,
    0.864_864_423_359_769_072_789_712_788_640_926,
    0.741_531_185_599_394_439_863_864_773_280_788,
    0.586_087_235_467_691_130_294_144_845_693_013,
    0.405_845_151_377_397_166_906_606_412_076_961,
    0.207_784_955_007_898_467_600_689_403_773_245,
    0.0,
];
#[allow(clippy::excessive_precision)]
const WGK: [f64; 8] = [
    0.022_935_322_010_529_224_963_732_008_058_970,
    0.063_092_092_629_978_553_290_700_663_189_204,
    0.104_790_010_322_250_183_839_876_322_541_518,
    0.140_653_259_715_525_918_745_189_590_510_238,
    0.169_004_726_639_267_902_826_583_426_598_550,
    0.190_350_578_064_785_409_913_256_402_421_014,
    0.204_432_940_075_298_892_414_161_999_234_649,
    0.209_482_141_084_727_828_012_999_174_891_714,
];
#[allow(clippy::excessive_precision)]
const WG: [f64; 4] = [
    0.129_484_966_168_869_693_270_611_432_679_082,
    0.279_705_391_489_276_667_901_467_771_423_780,
    0.381_830_050_505_118_944_950_369_775_488_975,
    0.417_959_183_673_469_387_755_102_040_816_327,
];

/// One Kronrod panel: (integral estimate, error estimate). The error estimate is QUADPACK's
/// (qk15): |K − G| scaled by the integrand's variation over the panel, resasc, as
/// resasc · min(1, (200 |K − G| / resasc)^1.5). The plain |K − G| is the error of the 7-point
/// Gauss result, not of the 15-point Kronrod result that is returned; it overstates the latter
/// by orders of magnitude on smooth integrands and made the adaptive loop split panels that
/// were already exact.
fn gk15(f: &mut impl FnMut(f64) -> f64, a: f64, b: f64) -> (f64, f64) {
    let c = 0.5 * (a + b);
    let h = 0.5 * (b - a);
    let fc = f(c);
    let mut k = fc * WGK[7];
    let mut g = fc * WG[3];
    let mut fv = [(0.0, 0.0); 7];
    for j in 0..7 {
        let x = h * XGK[j];
        let (f1, f2) = (f(c - x), f(c + x));
        fv[j] = (f1, f2);
        let s = f1 + f2;
        k += WGK[j] * s;
        if j % 2 == 1 {
            g += WG[j / 2] * s;
        }
    }
    let mean = 0.5 * k;
    let mut resasc = WGK[7] * (fc - mean).abs();
    for j in 0..7 {
        resasc += WGK[j] * ((fv[j].0 - mean).abs() + (fv[j].1 - mean).abs());
    }
    let resasc = resasc * h.abs();
    let mut err = ((k - g) * h).abs();
    if resasc != 0.0 && err != 0.0 {
        err = resasc * (200.0 * err / resasc).powf(1.5).min(1.0);
    }
    (k * h, err)
}

/// Integrates `f` over [a, b] (finite) to an absolute error of about `tol`, splitting first at
/// the given breakpoints (those outside (a, b) are ignored). Global adaptive bisection of the
/// panel with the largest error estimate, at most `max_panels` panels.
pub fn integrate(f: impl FnMut(f64) -> f64, a: f64, b: f64, breakpoints: &[f64], tol: f64) -> f64 {
    subdivide(f, a, b, breakpoints, tol).iter().map(|p| p.2).sum()
}

/// The panels (a_i, b_i, estimate of ∫f over the panel) into which [`integrate`] splits [a, b]
/// for `f` at `tol`, in increasing order: a
/// subdivision on which every panel's 15-point Kronrod rule resolves `f` (see
/// [`kronrod_nodes`]). For integrands f·g evaluated many times with the same f and a g that is
/// smooth on the panels' scale: f is evaluated at the panels' nodes once.
pub(crate) fn adaptive_panels(
    f: impl FnMut(f64) -> f64,
    a: f64,
    b: f64,
    breakpoints: &[f64],
    tol: f64,
) -> Vec<(f64, f64, f64)> {
    let mut p: Vec<(f64, f64, f64)> =
        subdivide(f, a, b, breakpoints, tol).into_iter().map(|p| (p.0, p.1, p.2)).collect();
    p.sort_by(|x, y| x.0.total_cmp(&y.0));
    p
}

/// Appends the 15 Kronrod nodes of [a, b] with their weights, (x, w), to `out`: Σ w·f(x) is the
/// panel's estimate in [`integrate`].
pub(crate) fn kronrod_nodes(a: f64, b: f64, out: &mut Vec<(f64, f64)>) {
    let c = 0.5 * (a + b);
    let h = 0.5 * (b - a);
    out.push((c, WGK[7] * h));
    for j in 0..7 {
        let x = h * XGK[j];
        out.push((c - x, WGK[j] * h));
        out.push((c + x, WGK[j] * h));
    }
}

/// Global adaptive bisection of the panel with the largest error estimate, from the cuts at a,
/// b and the breakpoints inside, until the error estimates sum to `tol` or there are
/// `MAX_PANELS` panels: (a_i, b_i, estimate, error estimate) per panel, in the order made.
fn subdivide(
    mut f: impl FnMut(f64) -> f64,
    a: f64,
    b: f64,
    breakpoints: &[f64],
    tol: f64,
) -> Vec<(f64, f64, f64, f64)> {
    const MAX_PANELS: usize = 2000;
    if !(b > a) {
        return Vec::new();
    }
    let mut cuts: Vec<f64> = Vec::with_capacity(breakpoints.len() + 2);
    cuts.push(a);
    cuts.extend(breakpoints.iter().copied().filter(|&x| x > a && x < b && x.is_finite()));
    cuts.push(b);
    cuts.sort_by(|x, y| x.total_cmp(y));
    cuts.dedup();
    let mut panels: Vec<(f64, f64, f64, f64)> = Vec::with_capacity(64);
    for w in cuts.windows(2) {
        let (v, e) = gk15(&mut f, w[0], w[1]);
        panels.push((w[0], w[1], v, e));
    }
    loop {
        let total_err: f64 = panels.iter().map(|p| p.3).sum();
        if total_err <= tol || panels.len() >= MAX_PANELS {
            break;
        }
        let (worst, _) = panels
            .iter()
            .enumerate()
            .max_by(|x, y| x.1 .3.total_cmp(&y.1 .3))
            .expect("b > a makes a panel, and a split never leaves fewer");
        let (pa, pb, _, _) = panels.swap_remove(worst);
        let mid = 0.5 * (pa + pb);
        if !(mid > pa && mid < pb) {
            // The panel cannot be split further in floating point: accept it.
            let (v, _) = gk15(&mut f, pa, pb);
            panels.push((pa, pb, v, 0.0));
            continue;
        }
        let (v1, e1) = gk15(&mut f, pa, mid);
        let (v2, e2) = gk15(&mut f, mid, pb);
        panels.push((pa, mid, v1, e1));
        panels.push((mid, pb, v2, e2));
    }
    panels
}

/// [`integrate`] of a vector-valued integrand `f(x, out)` (writing `n` components): one
/// adaptive subdivision for all components, a panel's error being the largest of its
/// components' (so each component meets `tol`), each point evaluated once. For integrands whose
/// components share an expensive inner quantity (the layer-count probabilities of one needle).
/// The scalar [`integrate`] stays separate: it runs in the analytic engine's innermost loop,
/// where this one's per-panel vectors would be an allocation per panel.
pub(crate) fn integrate_vec(
    mut f: impl FnMut(f64, &mut [f64]),
    n: usize,
    a: f64,
    b: f64,
    breakpoints: &[f64],
    tol: f64,
) -> Vec<f64> {
    const MAX_PANELS: usize = 2000;
    let mut total = vec![0.0; n];
    if !(b > a) || n == 0 {
        return total;
    }
    let mut buf = vec![0.0; n];
    let mut panel = |f: &mut dyn FnMut(f64, &mut [f64]), pa: f64, pb: f64| -> (Vec<f64>, f64) {
        let c = 0.5 * (pa + pb);
        let h = 0.5 * (pb - pa);
        let mut k = vec![0.0; n];
        let mut g = vec![0.0; n];
        f(c, &mut buf);
        for i in 0..n {
            k[i] = buf[i] * WGK[7];
            g[i] = buf[i] * WG[3];
        }
        let mut right = vec![0.0; n];
        for j in 0..7 {
            let x = h * XGK[j];
            f(c - x, &mut buf);
            f(c + x, &mut right);
            for i in 0..n {
                let s = buf[i] + right[i];
                k[i] += WGK[j] * s;
                if j % 2 == 1 {
                    g[i] += WG[j / 2] * s;
                }
            }
        }
        let err = k.iter().zip(&g).map(|(k, g)| ((k - g) * h).abs()).fold(0.0, f64::max);
        (k.into_iter().map(|v| v * h).collect(), err)
    };
    let mut cuts: Vec<f64> = Vec::with_capacity(breakpoints.len() + 2);
    cuts.push(a);
    cuts.extend(breakpoints.iter().copied().filter(|&x| x > a && x < b && x.is_finite()));
    cuts.push(b);
    cuts.sort_by(|x, y| x.total_cmp(y));
    cuts.dedup();
    let mut panels: Vec<(f64, f64, Vec<f64>, f64)> = Vec::with_capacity(64);
    for w in cuts.windows(2) {
        let (v, e) = panel(&mut f, w[0], w[1]);
        panels.push((w[0], w[1], v, e));
    }
    loop {
        let total_err: f64 = panels.iter().map(|p| p.3).sum();
        if total_err <= tol || panels.len() >= MAX_PANELS {
            break;
        }
        let (worst, _) = panels
            .iter()
            .enumerate()
            .max_by(|x, y| x.1 .3.total_cmp(&y.1 .3))
            .expect("b > a makes a panel, and a split never leaves fewer");
        let (pa, pb, v, _) = panels.swap_remove(worst);
        let mid = 0.5 * (pa + pb);
        if !(mid > pa && mid < pb) {
            panels.push((pa, pb, v, 0.0));
            continue;
        }
        let (v1, e1) = panel(&mut f, pa, mid);
        let (v2, e2) = panel(&mut f, mid, pb);
        panels.push((pa, mid, v1, e1));
        panels.push((mid, pb, v2, e2));
    }
    for p in &panels {
        for (t, v) in total.iter_mut().zip(&p.2) {
            *t += v;
        }
    }
    total
}

/// Nodes and weights of the n-point Gauss–Hermite rule for E[g(Z)], Z ~ N(0, 1): Σ w_i g(z_i).
pub fn gauss_hermite(n: usize) -> (Vec<f64>, Vec<f64>) {
    // Newton iteration on the orthonormal (physicists') Hermite recurrence, then rescaled to the
    // standard normal weight: z = √2·x, w = w_phys / √π.
    let mut x = vec![0.0; n];
    let mut w = vec![0.0; n];
    let pim4 = std::f64::consts::PI.powf(-0.25);
    let m = n.div_ceil(2);
    let nf = n as f64;
    let mut z = 0.0f64;
    for i in 0..m {
        z = match i {
            0 => (2.0 * nf + 1.0).sqrt() - 1.85575 * (2.0 * nf + 1.0).powf(-0.16667),
            1 => z - 1.14 * nf.powf(0.426) / z,
            2 => 1.86 * z - 0.86 * x[0],
            3 => 1.91 * z - 0.91 * x[1],
            _ => 2.0 * z - x[i - 2],
        };
        let mut pp = 0.0;
        for _ in 0..100 {
            let mut p1 = pim4;
            let mut p2 = 0.0;
            for j in 0..n {
                let p3 = p2;
                p2 = p1;
                let jf = j as f64;
                p1 = z * (2.0 / (jf + 1.0)).sqrt() * p2 - (jf / (jf + 1.0)).sqrt() * p3;
            }
            pp = (2.0 * nf).sqrt() * p2;
            let z1 = z;
            z = z1 - p1 / pp;
            if (z - z1).abs() <= 1e-15 * z.abs().max(1.0) {
                break;
            }
        }
        x[i] = z;
        x[n - 1 - i] = -z;
        w[i] = 2.0 / (pp * pp);
        w[n - 1 - i] = w[i];
    }
    let sqrt_pi = std::f64::consts::PI.sqrt();
    let nodes = x.iter().map(|v| v * std::f64::consts::SQRT_2).collect();
    let weights = w.iter().map(|v| v / sqrt_pi).collect();
    (nodes, weights)
}

/// The 64-point standard-normal Gauss–Hermite rule, computed once.
pub fn gauss_hermite_64() -> &'static (Vec<f64>, Vec<f64>) {
    static RULE: OnceLock<(Vec<f64>, Vec<f64>)> = OnceLock::new();
    RULE.get_or_init(|| gauss_hermite(64))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kronrod_is_exact_on_polynomials_of_degree_22() {
        // GK15 integrates degree ≤ 22 exactly; the embedded Gauss rule degree ≤ 13.
        for d in 0..=22u32 {
            let (v, _) = gk15(&mut |x: f64| x.powi(d as i32), 0.0, 1.0);
            assert!((v - 1.0 / (d as f64 + 1.0)).abs() < 1e-14, "degree {d}: {v}");
        }
    }

    #[test]
    fn adaptive_integrals_with_known_values() {
        let v = integrate(|x| (-x * x / 2.0).exp(), -40.0, 40.0, &[], 1e-13);
        assert!((v - (2.0 * std::f64::consts::PI).sqrt()).abs() < 1e-12, "{v}");
        // A jump at a breakpoint.
        let v = integrate(|x| if x > 0.3 { 1.0 } else { 0.0 }, 0.0, 1.0, &[0.3], 1e-13);
        assert!((v - 0.7).abs() < 1e-13, "{v}");
        // A sharp logistic step found by bisection alone.
        let v = integrate(|x| 1.0 / (1.0 + (-(x - 0.123) * 1e4).exp()), 0.0, 1.0, &[], 1e-12);
        assert!((v - 0.877).abs() < 1e-10, "{v}");
    }

    #[test]
    fn hermite_moments() {
        let (z, w) = gauss_hermite_64();
        let moment = |p: i32| z.iter().zip(w).map(|(z, w)| w * z.powi(p)).sum::<f64>();
        assert!((moment(0) - 1.0).abs() < 1e-13);
        assert!((moment(2) - 1.0).abs() < 1e-12);
        assert!((moment(4) - 3.0).abs() < 1e-11);
        assert!((moment(8) - 105.0).abs() < 1e-9);
        assert!(moment(3).abs() < 1e-12);
    }

    #[test]
    fn vector_integration_matches_the_scalar_rule_per_component() {
        let fs: [fn(f64) -> f64; 3] = [|x| (-x * x).exp(), |x| x.sin().powi(2), |x| 1.0 / (1.0 + x * x)];
        let v =
            integrate_vec(|x, out| out.iter_mut().zip(&fs).for_each(|(o, f)| *o = f(x)), 3, -4.0, 3.0, &[0.5], 1e-12);
        for (vi, f) in v.iter().zip(&fs) {
            let s = integrate(f, -4.0, 3.0, &[0.5], 1e-12);
            assert!((vi - s).abs() < 1e-11, "{vi} vs {s}");
        }
        // Known values: ∫ e^{−x²} over R ≈ √π (tails beyond ±8 are below 1e-27).
        let g = integrate_vec(|x, out| out[0] = (-x * x).exp(), 1, -8.0, 8.0, &[], 1e-13);
        assert!((g[0] - std::f64::consts::PI.sqrt()).abs() < 1e-12);
    }
}
