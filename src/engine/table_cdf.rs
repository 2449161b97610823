//! The distribution function of T_j at any point, from its table.
//!
//! T_j's table ([`super::analytic`]) holds its density at the 15 Kronrod nodes of panels that
//! resolve it to 1e-13. On each panel the density's Legendre expansion to degree
//! `DEGREE` follows from those values by the Kronrod rule (exact for the products with
//! P_k up to degree 22), and its integral from the panel's left edge is a sum of Legendre
//! polynomials: F(t) = F(a) + h Σ c_k ∫_{−1}^{u} P_k, kept as one polynomial in u. A needle
//! whose score is sharper than T_j's law is then integrated over its own law (a few nodes, F at
//! each) instead of over T_j's whole table, where every node would have to resolve the needle's
//! survival function.

use super::gauss_rule::GaussRule;

/// Degree of each panel's expansion: the Kronrod rule projects densities of up to this degree
/// exactly (f·P_k of degree ≤ 22), and a resolved panel's density is smooth far beyond it.
const DEGREE: usize = 11;

/// F of T_j from its table: per panel, where it lies, the mass below it and its expansion.
#[derive(Debug, Clone)]
pub(crate) struct TableCdf {
    /// Right edges, increasing: the search reads only these (a few cache lines for a table of
    /// a thousand panels), then the one panel it lands in.
    b: Vec<f64>,
    /// The panels, in the same order.
    panels: Vec<Panel>,
    /// The whole table's mass (1 to its resolution).
    total: f64,
}

/// One panel of a [`TableCdf`], packed so that a lookup reads one record.
#[derive(Debug, Clone)]
struct Panel {
    /// Left edge.
    a: f64,
    /// Mass below the left edge.
    below: f64,
    /// Centre and inverse half-width: u = (x − c) · inv_h.
    c: f64,
    inv_h: f64,
    /// The mass from the left edge to u in the panel's [−1, 1] coordinate as a polynomial in u,
    /// DEGREE + 2 coefficients from the constant up: evaluated by Estrin's scheme, whose
    /// products are independent (the three-term Legendre recurrence is a chain of dependent
    /// multiplications, and this lookup is the hot path of a needle integrated over its own
    /// law). The Legendre coefficients of a resolved panel fall fast, so the conversion's
    /// large binomial-like factors (up to ~2e3 at degree 12) multiply only tiny ones: the
    /// polynomial agrees with the Legendre sum to rounding (tested below).
    m: [f64; DEGREE + 2],
}

impl TableCdf {
    /// From panels (increasing, disjoint) with their 15 nodes each, `t` and `wf` (weight ×
    /// density) panel by panel.
    pub(crate) fn new(panels: &[(f64, f64)], t: &[f64], wf: &[f64]) -> TableCdf {
        let mut out =
            TableCdf { b: Vec::with_capacity(panels.len()), panels: Vec::with_capacity(panels.len()), total: 0.0 };
        for (i, &(a, b)) in panels.iter().enumerate() {
            let integral = panel_legendre_integral((a, b), &t[15 * i..15 * i + 15], &wf[15 * i..15 * i + 15]);
            // Σ_k d_k P_k(u) as Σ_j m_j u^j.
            let mut m = [0.0; DEGREE + 2];
            for (k, &d) in integral.iter().enumerate() {
                for (j, &p) in LEGENDRE_MONOMIALS[k].iter().enumerate() {
                    m[j] += d * p;
                }
            }
            let (c, h) = (0.5 * (a + b), 0.5 * (b - a));
            out.b.push(b);
            out.panels.push(Panel { a, below: out.total, c, inv_h: 1.0 / h, m });
            out.total += wf[15 * i..15 * i + 15].iter().sum::<f64>();
        }
        out
    }

    /// P(T_j ≤ x).
    #[inline]
    pub(crate) fn cdf(&self, x: f64) -> f64 {
        // The first panel whose right edge lies above x.
        self.cdf_from(self.b.partition_point(|&b| b <= x), x)
    }

    /// `rule.integrate(|x| self.cdf(m + s · x))` for s > 0, in the same order and with the same
    /// values: the rule's nodes increase, and so do the points, so each panel is found by
    /// walking on from the last one instead of by a search from the start (the search was most
    /// of a lookup on the needle's own law, which a hard-negatives fit's tables make at every
    /// evaluation).
    pub(crate) fn integrate_shifted(&self, rule: &GaussRule, m: f64, s: f64) -> f64 {
        debug_assert!(s > 0.0 && rule.nodes.windows(2).all(|w| w[0] <= w[1]));
        let mut i = 0;
        rule.nodes
            .iter()
            .zip(&rule.weights)
            .map(|(&t, &w)| {
                let x = m + s * t;
                // The partition point of `b` at x: every edge before i lies at or below the
                // previous point, so at or below x.
                while i < self.b.len() && self.b[i] <= x {
                    i += 1;
                }
                w * self.cdf_from(i, x)
            })
            .sum()
    }

    /// [`TableCdf::cdf`] at x, `i` the first panel whose right edge lies above x.
    #[inline]
    fn cdf_from(&self, i: usize, x: f64) -> f64 {
        let Some(p) = self.panels.get(i) else { return self.total.min(1.0) };
        if x <= p.a {
            // Below the panel: in a gap between panels (mass dropped as negligible) or below all.
            return p.below;
        }
        let u = ((x - p.c) * p.inv_h).clamp(-1.0, 1.0);
        let m = &p.m;
        let (u2, u4) = (u * u, u * u * (u * u));
        let u8 = u4 * u4;
        let q0 = m[0] + m[1] * u;
        let q1 = m[2] + m[3] * u;
        let q2 = m[4] + m[5] * u;
        let q3 = m[6] + m[7] * u;
        let q4 = m[8] + m[9] * u;
        let q5 = m[10] + m[11] * u;
        let r0 = q0 + q1 * u2;
        let r1 = q2 + q3 * u2;
        let r2 = q4 + q5 * u2;
        let s = (r0 + r1 * u4) + (r2 + m[12] * u4) * u8;
        (p.below + s).clamp(0.0, 1.0)
    }
}

/// The Legendre coefficients, in u ∈ [−1, 1], of the mass of panel `(a, b)` from its left edge
/// to u, from its 15 nodes `t` and weight × density `wf`: the density's expansion to degree
/// `DEGREE` projected by the Kronrod rule and integrated term by term, times the half-width.
fn panel_legendre_integral((a, b): (f64, f64), t: &[f64], wf: &[f64]) -> [f64; DEGREE + 2] {
    let (c, h) = (0.5 * (a + b), 0.5 * (b - a));
    let mut p = [0.0; DEGREE + 1];
    let mut coef = [0.0; DEGREE + 1];
    for (&t, &wf) in t.iter().zip(wf) {
        legendre(((t - c) / h).clamp(-1.0, 1.0), &mut p);
        for k in 0..=DEGREE {
            coef[k] += wf * p[k];
        }
    }
    // c_k = (2k + 1)/2 ∫ f P_k du, and ∫ f P_k du = Σ wf P_k / h.
    for (k, x) in coef.iter_mut().enumerate() {
        *x *= (2 * k + 1) as f64 / (2.0 * h);
    }
    // ∫_{−1}^{u} P_0 = P_1 + P_0; ∫_{−1}^{u} P_k = (P_{k+1} − P_{k−1}) / (2k + 1), k ≥ 1.
    let mut integral = [0.0; DEGREE + 2];
    integral[0] += coef[0];
    integral[1] += coef[0];
    for (k, &c) in coef.iter().enumerate().skip(1) {
        let e = c / (2 * k + 1) as f64;
        integral[k + 1] += e;
        integral[k - 1] -= e;
    }
    integral.map(|d| h * d)
}

/// ((2k + 1)/(k + 1), k/(k + 1)): P_{k+1}(u) = a·u·P_k(u) − b·P_{k−1}(u).
const BONNET: [(f64, f64); DEGREE + 1] = {
    let mut t = [(0.0, 0.0); DEGREE + 1];
    let mut k = 1;
    while k <= DEGREE {
        t[k] = ((2 * k + 1) as f64 / (k + 1) as f64, k as f64 / (k + 1) as f64);
        k += 1;
    }
    t
};

/// P_0(u) … P_DEGREE(u) into `p` by Bonnet's recurrence ([`BONNET`]).
fn legendre(u: f64, p: &mut [f64; DEGREE + 1]) {
    p[0] = 1.0;
    p[1] = u;
    for k in 1..DEGREE {
        let (a, b) = BONNET[k];
        p[k + 1] = a * u * p[k] - b * p[k - 1];
    }
}

/// The monomial coefficients of P_0 … P_{DEGREE+1}: row k holds P_k(u) = Σ_j row[j] u^j
/// (Bonnet's recurrence, [`BONNET`], on the coefficient vectors), made once at compile time.
const LEGENDRE_MONOMIALS: [[f64; DEGREE + 2]; DEGREE + 2] = {
    let mut p = [[0.0; DEGREE + 2]; DEGREE + 2];
    p[0][0] = 1.0;
    p[1][1] = 1.0;
    let mut k = 1;
    while k <= DEGREE {
        let (a, b) = BONNET[k];
        let mut j = 0;
        while j < DEGREE + 2 {
            let up = if j > 0 { a * p[k][j - 1] } else { 0.0 };
            p[k + 1][j] = up - b * p[k - 1][j];
            j += 1;
        }
        k += 1;
    }
    p
};

#[cfg(test)]
mod tests {
    use super::*;
    use crate::quadrature::kronrod_nodes;

    /// The table of the standard normal density on `panels`.
    fn normal_table(panels: &[(f64, f64)]) -> TableCdf {
        let mut nodes = Vec::new();
        for &(a, b) in panels {
            kronrod_nodes(a, b, &mut nodes);
        }
        let t: Vec<f64> = nodes.iter().map(|n| n.0).collect();
        let wf: Vec<f64> =
            nodes.iter().map(|&(t, w)| w * (-0.5 * t * t).exp() / (2.0 * std::f64::consts::PI).sqrt()).collect();
        TableCdf::new(panels, &t, &wf)
    }

    /// F of a table of the normal density equals Φ everywhere to 1e-13, inside panels, at
    /// their edges, in a gap and beyond the ends.
    #[test]
    fn the_table_cdf_is_the_normal_cdf_for_a_normal_table() {
        let edges: Vec<f64> = (0..=40).map(|i| -10.0 + 0.5 * i as f64).collect();
        let panels: Vec<(f64, f64)> = edges.windows(2).map(|w| (w[0], w[1])).collect();
        let f = normal_table(&panels);
        for i in 0..=2400 {
            let x = -12.0 + 0.01 * i as f64 + 1e-3;
            let want = crate::stats::norm_cdf(x);
            assert!((f.cdf(x) - want).abs() < 1e-13, "x {x}: {} vs {want}", f.cdf(x));
        }
    }

    /// A rule integrated by walking the panels ([`TableCdf::integrate_shifted`]) is the sum of
    /// [`TableCdf::cdf`] at its points bit for bit: on a table with a gap between its panels
    /// and edges that fall on the points, for rules of 2 to 64 nodes whose points lie below all
    /// panels, across them, in the gap and above them all.
    #[test]
    fn walking_the_panels_finds_what_the_search_finds() {
        // Panels of uneven widths over [−6, 6] with (0.5, 1.5) left out: a gap.
        let mut edges: Vec<f64> = (0..=24).map(|i| -6.0 + 0.5 * i as f64).collect();
        edges.extend([6.25, 6.3, 7.0]);
        let panels: Vec<(f64, f64)> =
            edges.windows(2).map(|w| (w[0], w[1])).filter(|&(a, b)| !(a >= 0.5 && b <= 1.5)).collect();
        let f = normal_table(&panels);
        // Rules of the uniform measure on [−1, 1] (midpoints of 4000 cells).
        let cells = 4000;
        let xs: Vec<f64> = (0..cells).map(|i| -1.0 + (i as f64 + 0.5) * 2.0 / cells as f64).collect();
        let ws = vec![2.0 / cells as f64; cells];
        let mut compared = 0;
        for n in [2, 3, 8, 17, 64] {
            let rule = GaussRule::of_measure(&xs, &ws, n).unwrap();
            for (m, s) in
                [(0.0, 1.0), (-9.0, 1.0), (9.0, 2.0), (1.0, 0.5), (1.0, 0.01), (0.0, 8.0), (-5.75, 0.25), (3.0, 1e-9)]
            {
                let walked = f.integrate_shifted(&rule, m, s);
                let searched = rule.integrate(|x| f.cdf(m + s * x));
                assert_eq!(walked.to_bits(), searched.to_bits(), "{n} nodes, m {m}, s {s}: {walked} vs {searched}");
                compared += 1;
            }
        }
        assert_eq!(compared, 40);
        // Points exactly on the panels' edges.
        let edge_rule = GaussRule { nodes: edges.clone(), weights: vec![1.0; edges.len()] };
        let walked = f.integrate_shifted(&edge_rule, 0.0, 1.0);
        assert_eq!(walked.to_bits(), edge_rule.integrate(|x| f.cdf(x)).to_bits());
    }

    /// The Legendre sum the panels' polynomials stand for, by Bonnet's recurrence term by term.
    fn legendre_sum(panels: &[(f64, f64)], t: &[f64], wf: &[f64], x: f64) -> f64 {
        let mut below = 0.0;
        for (i, &(a, b)) in panels.iter().enumerate() {
            if x >= b {
                below += wf[15 * i..15 * i + 15].iter().sum::<f64>();
                continue;
            }
            if x <= a {
                return below;
            }
            let d = panel_legendre_integral((a, b), &t[15 * i..15 * i + 15], &wf[15 * i..15 * i + 15]);
            let mut p = [0.0; DEGREE + 1];
            let u = ((x - 0.5 * (a + b)) / (0.5 * (b - a))).clamp(-1.0, 1.0);
            legendre(u, &mut p);
            // P_{DEGREE+1} from the last two.
            let (ka, kb) = BONNET[DEGREE];
            let top = ka * u * p[DEGREE] - kb * p[DEGREE - 1];
            return below + d[..=DEGREE].iter().zip(&p).map(|(d, p)| d * p).sum::<f64>() + d[DEGREE + 1] * top;
        }
        below
    }

    /// The polynomial form agrees with the Legendre sum to rounding on a skewed, heavy-tailed
    /// density (a Gumbel's, whose panels' expansions fall off more slowly than a normal's) on
    /// panels of several widths, the widest holding ~2.5 of its scales.
    #[test]
    fn the_polynomial_form_is_the_legendre_sum() {
        let edges: Vec<f64> = (0..=60).map(|i| -4.0 + 0.2 * i as f64 + 0.05 * ((i % 7) as f64)).collect();
        let mut edges = edges;
        edges.dedup_by(|b, a| *b <= *a);
        let panels: Vec<(f64, f64)> = edges.windows(2).map(|w| (w[0], w[1])).collect();
        let mut nodes = Vec::new();
        for &(a, b) in &panels {
            kronrod_nodes(a, b, &mut nodes);
        }
        let t: Vec<f64> = nodes.iter().map(|n| n.0).collect();
        let gumbel = |x: f64| (-(x + (-x).exp())).exp();
        let wf: Vec<f64> = nodes.iter().map(|&(t, w)| w * gumbel(t)).collect();
        let f = TableCdf::new(&panels, &t, &wf);
        for i in 0..=5000 {
            let x = -5.0 + 0.003 * i as f64 + 1e-4;
            let want = legendre_sum(&panels, &t, &wf, x).clamp(0.0, 1.0);
            assert!((f.cdf(x) - want).abs() <= 2.0 * f64::EPSILON, "x {x}: {} vs {want}", f.cdf(x));
        }
    }
}
