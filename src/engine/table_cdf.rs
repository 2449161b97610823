//! The distribution function of T_j at any point, from its table.
//!
//! T_j's table ([`super::analytic`]) holds its density at the 15 Kronrod nodes of panels that
//! resolve it to 1e-13. On each panel the density's Legendre expansion to degree
//! `DEGREE` follows from those values by the Kronrod rule (exact for the products with
//! P_k up to degree 22), and its integral from the panel's left edge is a sum of Legendre
//! polynomials: F(t) = F(a) + h Σ c_k ∫_{−1}^{u} P_k. A needle whose score is sharper than T_j's
//! law is then integrated over its own law (a few nodes, F at each) instead of over T_j's whole
//! table, where every node would have to resolve the needle's survival function.

/// Degree of each panel's expansion: the Kronrod rule projects densities of up to this degree
/// exactly (f·P_k of degree ≤ 22), and a resolved panel's density is smooth far beyond it.
const DEGREE: usize = 11;

/// F of T_j from its table: panels with their cumulative mass and expansion coefficients.
#[derive(Debug, Clone)]
pub(crate) struct TableCdf {
    /// Left edges, increasing.
    a: Vec<f64>,
    /// Right edges.
    b: Vec<f64>,
    /// Mass below each panel's left edge.
    below: Vec<f64>,
    /// Per panel, the Legendre coefficients of the mass from its left edge to u in its [−1, 1]
    /// coordinate (the density's expansion integrated term by term, times the half-width),
    /// DEGREE + 2 each: F at a point is one Legendre sum, without a division.
    integral: Vec<[f64; DEGREE + 2]>,
    /// The whole table's mass (1 to its resolution).
    total: f64,
}

impl TableCdf {
    /// From panels (increasing, disjoint) with their 15 nodes each, `t` and `wf` (weight ×
    /// density) panel by panel.
    pub(crate) fn new(panels: &[(f64, f64)], t: &[f64], wf: &[f64]) -> TableCdf {
        let mut out = TableCdf {
            a: Vec::with_capacity(panels.len()),
            b: Vec::with_capacity(panels.len()),
            below: Vec::new(),
            integral: Vec::new(),
            total: 0.0,
        };
        let mut p = [0.0; DEGREE + 1];
        for (i, &(a, b)) in panels.iter().enumerate() {
            let (c, h) = (0.5 * (a + b), 0.5 * (b - a));
            let mut coef = [0.0; DEGREE + 1];
            for (&t, &wf) in t[15 * i..15 * i + 15].iter().zip(&wf[15 * i..15 * i + 15]) {
                legendre(((t - c) / h).clamp(-1.0, 1.0), &mut p);
                for k in 0..=DEGREE {
                    coef[k] += wf * p[k];
                }
            }
            // c_k = (2k + 1)/2 ∫ f P_k du, and ∫ f P_k du = Σ wf P_k / h.
            for (k, x) in coef.iter_mut().enumerate() {
                *x *= (2 * k + 1) as f64 / (2.0 * h);
            }
            out.a.push(a);
            out.b.push(b);
            out.below.push(out.total);
            out.total += wf[15 * i..15 * i + 15].iter().sum::<f64>();
            // ∫_{−1}^{u} P_0 = P_1 + P_0; ∫_{−1}^{u} P_k = (P_{k+1} − P_{k−1}) / (2k + 1), k ≥ 1.
            let mut integral = [0.0; DEGREE + 2];
            integral[0] += coef[0];
            integral[1] += coef[0];
            for (k, &c) in coef.iter().enumerate().skip(1) {
                let e = c / (2 * k + 1) as f64;
                integral[k + 1] += e;
                integral[k - 1] -= e;
            }
            out.integral.push(integral.map(|d| h * d));
        }
        out
    }

    /// P(T_j ≤ x).
    pub(crate) fn cdf(&self, x: f64) -> f64 {
        // The first panel whose right edge lies above x.
        let i = self.b.partition_point(|&b| b <= x);
        if i == self.a.len() {
            return self.total.min(1.0);
        }
        let (a, b) = (self.a[i], self.b[i]);
        if x <= a {
            // Below the panel: in a gap between panels (mass dropped as negligible) or below all.
            return self.below[i];
        }
        let (c, h) = (0.5 * (a + b), 0.5 * (b - a));
        let u = ((x - c) / h).clamp(-1.0, 1.0);
        let d = &self.integral[i];
        // Bonnet's recurrence with its ratios tabled (this is the hot path of a needle integrated
        // over its own law: a division per degree cost more than the rest).
        let (mut p0, mut p1) = (1.0, u);
        let mut s = d[0] + d[1] * u;
        for k in 1..=DEGREE {
            let (a, b) = BONNET[k];
            let p2 = a * u * p1 - b * p0;
            s += d[k + 1] * p2;
            (p0, p1) = (p1, p2);
        }
        (self.below[i] + s).clamp(0.0, 1.0)
    }
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

/// P_0(u) … P_DEGREE(u) into `p` by Bonnet's recurrence ([`BONNET`], as [`TableCdf::cdf`] runs it).
fn legendre(u: f64, p: &mut [f64; DEGREE + 1]) {
    p[0] = 1.0;
    p[1] = u;
    for k in 1..DEGREE {
        let (a, b) = BONNET[k];
        p[k + 1] = a * u * p[k] - b * p[k - 1];
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::quadrature::kronrod_nodes;

    /// F of a table of the normal density equals Φ everywhere to 1e-13, inside panels, at
    /// their edges, in a gap and beyond the ends.
    #[test]
    fn the_table_cdf_is_the_normal_cdf_for_a_normal_table() {
        let edges: Vec<f64> = (0..=40).map(|i| -10.0 + 0.5 * i as f64).collect();
        let panels: Vec<(f64, f64)> = edges.windows(2).map(|w| (w[0], w[1])).collect();
        let mut nodes = Vec::new();
        for &(a, b) in &panels {
            kronrod_nodes(a, b, &mut nodes);
        }
        let t: Vec<f64> = nodes.iter().map(|n| n.0).collect();
        let wf: Vec<f64> =
            nodes.iter().map(|&(t, w)| w * (-0.5 * t * t).exp() / (2.0 * std::f64::consts::PI).sqrt()).collect();
        let f = TableCdf::new(&panels, &t, &wf);
        for i in 0..=2400 {
            let x = -12.0 + 0.01 * i as f64 + 1e-3;
            let want = crate::stats::norm_cdf(x);
            assert!((f.cdf(x) - want).abs() < 1e-13, "x {x}: {} vs {want}", f.cdf(x));
        }
    }
}
