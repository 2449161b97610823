//! The analytic engine: exact recall and needle-rank distribution by numerical quadrature.
//!
//! With the needle's best covering entry Y and T_j the j-th largest distractor score,
//! rank ≤ j ⟺ Y > T_j, so P(rank ≤ j) = ∫ f_{T_j}(t) · P(Y > t) dt. Integrating over the order
//! statistic rather than over the needle keeps every integrand evaluation O(1): the density of
//! T_j needs one binomial pmf (Loader's formula), where the needle-side form
//! ∫ f_Y(y) P[Bin(N−r, Q(y)) ≤ j − 1] dy would need a binomial CDF (an incomplete beta) per node.
//! With hard negatives the distractors form two groups and the pmf is a short convolution.
//! The needle's shared component z (layers, or several correlated needle entries) is a further
//! outer integral against the standard normal density.

use super::gauss_rule::{self, kernel_centres, GaussRule, Ladder};
use super::table_cdf::TableCdf;
use crate::geometry::Geometry;
use crate::quadrature::{adaptive_panels, integrate, integrate_vec, kronrod_nodes};
use crate::scenario::{Readout, Scenario};
use crate::scores::key::{put_f64, put_tag, put_u64};
use crate::scores::{EntryLaw, NotExact, ScoreModel, TokenLaw};
use crate::stats::{ln_binom_pmf, ln_norm_cdf, ln_norm_pdf};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

/// Absolute tolerance of each inner integral (the engine promises 1e-6 on recall).
const TOL_INNER: f64 = 1e-9;
/// Absolute tolerance of the outer integral over the needle's shared component.
const TOL_OUTER: f64 = 1e-9;
/// The outer integral runs over z in [−Z_MAX, Z_MAX]; the normal mass outside is 1.5e-23.
const Z_MAX: f64 = 10.0;
/// Most the outer integral's two tails, counted as their mass times the integrand's value at a
/// cut ([`readout_moves`]), differ from their integrals: four orders below [`TOL_OUTER`].
const TOL_TAIL_CUT: f64 = 1e-13;
/// Bisection steps [`readout_moves`] takes on each side: a cut within 1/64 of the range.
const CUT_STEPS: u32 = 6;
/// How many needle sds beyond T_j's support [`Analytic::transition`] puts the ends of the
/// shared component's range where the selection probability moves: Q(9) = 1.1e-19.
const TRANSITION_SDS: f64 = 9.0;
/// Density ratio (in nats) below which the order statistic's tails are cut off.
const TAIL_NATS: f64 = 46.0;
/// Absolute tolerance to which an [`OrderTable`]'s panels resolve T_j's density (its integral
/// is 1): well below [`TOL_INNER`], so that the tabulated inner integral is as exact as the
/// adaptive one.
const TOL_TABLE: f64 = 1e-13;
/// Absolute tolerance to which a Gauss rule ([`OrderTable::rule_for`],
/// [`OrderTable::needle_side`]) gives the inner integral a whole table gives: three orders below
/// [`TOL_INNER`], and above the table's own resolution (a check cannot resolve differences
/// below the [`TableCdf`]'s rounding).
const TOL_RULE: f64 = 1e-12;
/// Agreement [`OrderTable::max_side`] asks of two rules of the needle's law where none agrees
/// to [`TOL_RULE`]: W, read from a [`TableCdf`] whose panels carry degree-11 expansions of
/// T_j's density, is itself exact to about 1e-12, so rules of Y's law stop agreeing there
/// however large (hard negatives' tables show differences of 1–3e-12 from 32 to 128 nodes).
/// Two orders below [`TOL_INNER`], where the whole table's thousand nodes at every z made a
/// hard-negatives fit take minutes.
const TOL_SIDE_RULE: f64 = 1e-11;
/// Widest panel of an [`OrderTable`] in units of the needle law's scale (where its survival
/// function bends): 15 Kronrod nodes over half a scale resolve a normal cdf to ~1e-16.
const PANEL_PER_SCALE: f64 = 0.5;
/// Most panels of an [`OrderTable`] refined to the needle's scale: a needle law too sharp for
/// that many (a needle score shared by nearly every layer, no score noise) keeps T_j's own panels,
/// and runs over the needle's law or, failing that, the inner integral per z.
const MAX_TABLE_PANELS: usize = 1000;
/// T_j's mass below which a table panel is dropped (the panels dropped hold at most
/// [`MAX_TABLE_PANELS`] times it).
const NEGLIGIBLE_MASS: f64 = 1e-18;
/// Most identical needle entries whose joint survival [`needle_sf`] sums as a series.
const SUM_FORM_ENTRIES: f64 = 64.0;
/// Most order statistics [`TABLES`] keeps before starting over (each some kilobytes).
const MAX_TABLES: usize = 4096;

/// The order statistics and their tables, shared by every scenario with the same distractors,
/// j and table resolution: a fit's parameter vectors, its profiles and the hypotheses evaluate
/// each row at many needle parameters, and T_j does not depend on them. A table is a
/// deterministic function of its key (the resolution is a power of two, not the scale that
/// asked for it), so which scenario built it first changes no result.
static TABLES: OnceLock<Mutex<HashMap<String, Arc<Prepared>>>> = OnceLock::new();

/// An order statistic with its table (`None`: nothing to tabulate).
#[derive(Debug)]
struct Prepared {
    os: OrderStat,
    table: Option<OrderTable>,
}

/// A scenario prepared for exact evaluation.
#[derive(Debug, Clone)]
pub struct Analytic {
    model: ScoreModel,
    geometry: Geometry,
    layers: u32,
    readout: Readout,
    p_read: f64,
    p_guess: f64,
}

/// The support and location of T_j, the j-th largest distractor score.
#[derive(Debug, Clone)]
struct OrderStat {
    j: u64,
    lo: f64,
    hi: f64,
    /// The points the edge search stepped through: geometric away from the centre, they split
    /// the range into panels matched to the density's scale (a single panel over a heavy tail
    /// would miss the bulk between its nodes).
    breaks: Vec<f64>,
}

/// T_j's density at fixed quadrature nodes: the part of P(rank ≤ j | z) that does not depend on
/// the needle, computed once per order statistic and reused at every z of the outer integral
/// (the layers' shared component), where the per-z adaptive inner integral would evaluate the
/// density (a binomial pmf) afresh at every node. The coarse panels resolve the density to
/// [`TOL_TABLE`], and the Gauss rules are built on them; the fine panels, split from them to no
/// wider than [`PANEL_PER_SCALE`] needle-law scales and made only when a needle law needs them,
/// make Σ w·f(t)·S(t | z) the inner integral to the same accuracy for every z.
#[derive(Debug, Clone)]
struct OrderTable {
    /// T_j's own adaptive panels (its density resolved to [`TOL_TABLE`]): the measure of the
    /// Gauss rules, whose moments they give as exactly as the refined panels, at half the
    /// density evaluations or fewer (with hard negatives each is a convolution, and a fit over
    /// their fields makes a table per evaluation).
    coarse: TableNodes,
    /// T_j's mass over the coarse panels (1 to their resolution).
    mass: f64,
    /// T_j's standard deviation over the coarse panels.
    sd: f64,
    /// Each coarse panel's split to the needle's scale (all 1 when the table is not refined).
    splits: Vec<usize>,
    /// T_j's density, for the refined panels' new nodes.
    density: OrderDensity,
    /// The panels no wider than the needle's scale ([`OrderTable::fine`]): made at their first
    /// use, the sum over every node or F_{T_j} (most tables serve Gauss rules only).
    fine: OnceLock<TableNodes>,
    /// The resolution asked for: the widest panel for the needle sds of its key (a power of
    /// two; `None`: a point mass).
    width: Option<f64>,
    /// Whether the panels are that narrow (else they resolve T_j alone: see `order_table`).
    refined: bool,
    /// Gauss rules of the table's measure: a needle survival function smooth over T_j's support
    /// is integrated by a few nodes instead of every node (the same sum to [`TOL_TABLE`]).
    ladder: Ladder,
    /// Gauss rules of the refined panels' measure, for a rule larger than the coarse panels'
    /// nodes can give ([`OrderTable::choose`]).
    fine_ladder: Ladder,
    /// Per sharpness class ([`sharpness_class`]), the rule [`Ladder::choose`] found for it.
    choices: [OnceLock<Option<RuleAt>>; SHARPNESS_CLASSES],
    /// Per needle law of c normal entries of one sd, by c and the quarter octave of the sd
    /// within the table's range ([`OrderTable::law_rule`]), the rule found for it.
    law_choices: LawChoices,
    /// F_{T_j} at any point: for a needle sharper than T_j, integrated over the needle's law;
    /// made at its first use ([`OrderTable::cdf`]: most tables serve Gauss rules only, and a
    /// fit over distractor fields makes a table per evaluation).
    cdf: OnceLock<TableCdf>,
    /// Per count c of needle entries (1 ..= [`NEEDLE_SIDE_ENTRIES`]), the rule of the largest of
    /// c normals that integrates F_{T_j} over the needle's law to [`TOL_TABLE`] at the table's
    /// broadest needle sd.
    needle_choices: [OnceLock<Option<usize>>; NEEDLE_SIDE_ENTRIES],
    /// Per max-pooled needle law ([`MaxKind`]), the rule found for it (shared by clones: a
    /// choice is a function of the table alone).
    max_choices: MaxChoices,
    /// Per (distractor token law, n_dist) of a max-pooled needle law, n_dist · ln F_tok at
    /// every node of the refined panels ([`OrderTable::max_table_parts`]).
    max_table_parts: MaxTableParts,
    /// Per (distractor token law, power p), x ↦ ∫_{−∞}^x f_{T_j}·F_tok^p
    /// ([`OrderTable::max_side`]).
    point_max_cdfs: PointMaxCdfs,
    /// Per (distractor token law, e·n_dist, e·n_needle, sharpness class), the rule of the
    /// needle's law [`OrderTable::max_side`] found.
    max_side_choices: MaxSideChoices,
}

/// [`OrderTable::max_side`]'s rule choices, by (distractor token law, e·n_dist, e·n_needle,
/// sharpness class), with whether it agreed only to [`TOL_SIDE_RULE`].
type MaxSideChoices = Arc<Mutex<Vec<((TokenLaw, u64, u64, u32), Option<(usize, bool)>)>>>;

/// Broadest sharpness class [`OrderTable::max_side`] looks for a rule in: four octaves above
/// the table's sharp range (broader needles are served by a rule of T_j's table, or not at all).
const MAX_SIDE_CLASS: u32 = 16;

/// Most needle tokens whose largest [`OrderTable::max_side`] integrates over (its law,
/// [`gauss_rule::max_of_normals`], is a discretisation of step 0.002 on [−12, 12]: the largest
/// of 64 normals has sd above 0.4, resolved by 200 steps per sd or more).
const SIDE_MAX_TOKENS: u64 = 64;

/// [`OrderTable::point_max_cdf`]'s kept tables.
type PointMaxCdfs = Arc<Mutex<Vec<((TokenLaw, u64), Arc<TableCdf>)>>>;

/// Widest panel of [`OrderTable::point_max_cdf`]'s table in units of the scale over which
/// F_tok^p bends (1 / its log-derivative): Legendre expansions of degree 11 over half of it.
const POINT_MAX_PANEL_PER_SCALE: f64 = 0.5;
/// Most subpanels [`OrderTable::point_max_cdf`] splits one of T_j's panels into.
const POINT_MAX_SPLITS: f64 = 64.0;

/// Panels of T_j's table with their 15 Kronrod nodes each and the weights × f_{T_j} there.
#[derive(Debug, Clone)]
struct TableNodes {
    /// Panel edges, increasing.
    panels: Vec<(f64, f64)>,
    /// Node positions, panel by panel.
    t: Vec<f64>,
    /// Kronrod weight × f_{T_j}(t) at each node.
    wf: Vec<f64>,
}

/// What T_j's density depends on: the distractors' laws and counts, and j.
#[derive(Debug, Clone, Copy)]
struct OrderDensity {
    distractor: EntryLaw,
    hard: EntryLaw,
    n_regular: u64,
    n_hard: u64,
    j: u64,
}

impl OrderDensity {
    /// ln f_{T_j}(t).
    fn ln(&self, t: f64) -> f64 {
        let group = |law: &EntryLaw| law.sf_cdf_ln_pdf(t);
        let j = self.j;
        let (qr, fr, gr) = group(&self.distractor);
        let v = if self.n_hard == 0 {
            let n = self.n_regular;
            (n as f64).ln() + ln_binom_pmf(n - 1, j - 1, qr, fr) + gr
        } else {
            let (qh, fh, gh) = group(&self.hard);
            let (n_r, n_h) = (self.n_regular, self.n_hard);
            // Σ over the other n − 1 of the two terms of `ln_two_sums` as one sum over i, the hard
            // negatives above t, of P[Bin(n_h, q_h) = i]·P[Bin(n_r, q_r) = j − 1 − i] weighted by
            // what each term contributes (Bin(n − 1, q; x) = Bin(n, q; x)·(n − x)/(n·F)): one
            // walk where two took the density's whole cost (hard-negatives fits).
            let (a, b) = (gr.exp() / fr, gh.exp() / fh);
            if n_r > 0 && a.is_finite() && b.is_finite() {
                let m = j - 1;
                let weight = |i: f64| a * (n_r as f64 - m as f64 + i) + b * (n_h as f64 - i);
                sum_pmf_weighted(n_r, qr, fr, n_h, qh, fh, m, weight).ln()
            } else {
                self.ln_two_sums((qr, fr, gr), (qh, fh, gh))
            }
        };
        if v.is_nan() {
            f64::NEG_INFINITY
        } else {
            v
        }
    }

    /// ln f_{T_j}(t) with hard negatives as two sums, one per kind of the j-th entry (each with
    /// its own binomial of the others): where a kind's cdf at t is 0 (the weights of the one
    /// sum divide by it), or there are no regular distractors. `(q, F, ln f)` of each kind at t.
    fn ln_two_sums(&self, (qr, fr, gr): (f64, f64, f64), (qh, fh, gh): (f64, f64, f64)) -> f64 {
        let j = self.j;
        let mut total = 0.0;
        if self.n_regular > 0 {
            total += (self.n_regular as f64).ln().exp()
                * gr.exp()
                * sum_pmf(self.n_regular - 1, qr, fr, self.n_hard, qh, fh, j - 1);
        }
        total += self.n_hard as f64 * gh.exp() * sum_pmf(self.n_regular, qr, fr, self.n_hard - 1, qh, fh, j - 1);
        total.ln()
    }

    /// f_{T_j}(t), 0 where its logarithm is −∞.
    fn at(&self, t: f64) -> f64 {
        let d = self.ln(t);
        if d == f64::NEG_INFINITY {
            0.0
        } else {
            d.exp()
        }
    }
}

/// [`OrderTable::max_table_parts`]' kept parts.
type MaxTableParts = Arc<Mutex<Vec<((TokenLaw, u64), Arc<[f64]>)>>>;

/// The rules found per max-pooled needle kind ([`OrderTable::max_rule`]), each with its
/// distractor tokens' part of ln F at the rule's nodes once asked for
/// ([`OrderTable::max_rule_parts`]).
type MaxChoices = Arc<Mutex<Vec<(MaxKind, Option<RuleAt>, Option<Arc<[f64]>>)>>>;

/// Where a table's rule is: on the refined panels' ladder (else the coarse one), at which size.
type RuleAt = (bool, usize);

/// The rules found per (entries, quarter octave) ([`OrderTable::law_rule`]).
type LawChoices = Arc<Mutex<Vec<((u32, u32), Option<RuleAt>)>>>;

/// A Gauss rule of T_j's table for the needle's laws ([`OrderTable::rule_with_parts`]), with a
/// max-pooled law's distractor parts at its nodes ([`OrderTable::max_rule_parts`]).
struct SharedRule<'t> {
    rule: &'t GaussRule,
    parts: Option<Arc<[f64]>>,
}

impl SharedRule<'_> {
    /// P(rank ≤ j) for the needle's `laws` (of the shape the rule was found for) on the rule.
    fn integrate(&self, laws: &[(EntryLaw, f64)]) -> f64 {
        match (&self.parts, laws) {
            (Some(parts), [(law, entries)]) => integrate_max_needle(self.rule, parts, law, *entries),
            _ => self.rule.integrate(|t| needle_sf(laws, t)),
        }
    }
}

/// How P(rank ≤ j | z) is integrated at every z of an outer integral
/// ([`Analytic::inner_integral`]).
enum Inner<'t> {
    /// Over the needle's own law, on F_{T_j} or W ([`OrderTable::needle_side`],
    /// [`OrderTable::max_side`]).
    OwnLaw,
    /// On a Gauss rule of T_j's table.
    Rule(SharedRule<'t>),
    /// Over the table's nodes, or adaptively.
    Table,
}

impl Inner<'_> {
    /// Whether the outer integral runs over [`Analytic::transition`]'s range only: where the
    /// inner integral is a rule's or the needle's own law's, whose limits beyond that range
    /// (0, and the table's mass) are the table's; and for a max-pooled needle summed over the
    /// table's nodes.
    fn trims(&self, a: &Analytic) -> bool {
        !matches!(self, Inner::Table) || a.max_pooled()
    }

    /// The table's rule, where one serves every z.
    fn rule(&self) -> Option<&SharedRule<'_>> {
        match self {
            Inner::Rule(r) => Some(r),
            _ => None,
        }
    }
}

/// Steps per octave of the needle sd at which [`OrderTable::law_rule`] checks rules: a law is
/// integrated by the rule checked at the sharpest sd of its step, at most 2^(1/4) = 1.19 times
/// sharper than itself.
const LAW_STEPS_PER_OCTAVE: f64 = 4.0;

/// What fixes the shape of a max-pooled needle's survival function apart from its needle
/// token's mean and sd: 1 − (F_tok(t)^n_dist · Φ((t − μ)/σ)^n_needle)^c for c entries of
/// one law.
#[derive(Debug, Clone, Copy, PartialEq)]
struct MaxKind {
    token: TokenLaw,
    n_dist: u64,
    n_needle: u64,
    entries: f64,
}

/// Most needle entries (of one law) integrated over the needle's side.
const NEEDLE_SIDE_ENTRIES: usize = 20;
/// T_j's sd, in sds of the needle's law at the broadest needle a table serves, below which
/// [`OrderTable::needle_side`] does not look for a rule of the needle's law: F_{T_j} is then a
/// step on that law's scale, which no rule of its ladder integrates to [`TOL_RULE`]. Traced on
/// the verdicts of the five bench tables (benches/data: DeepSeek-V3.2 and V4 presets, 2 to 18
/// needle entries, 83,000 checks, four in five of them failed), no check passed below 0.49 of
/// the law's sd, whatever the entry count; 0.4 leaves a margin. Skipping a check that would
/// have passed costs no accuracy (the table's own rules, checked to the same tolerance, serve
/// instead), only time; a skipped failure saves the refined panels, F_{T_j} and a failing
/// check of every rule size, which a hard-negatives fit paid at every evaluation for most of
/// its tables (a fifth of its time on V3.2).
const NEEDLE_SIDE_MIN_SCALE: f64 = 0.4;
/// Most kernel centres a needle-side check takes.
const MAX_CHECK_CENTRES: usize = 200;

/// Sharpness classes of the needle's survival function relative to one normal law of the
/// table's scale: one entry; up to [`FEW_ENTRIES`] entries (their maximum bends up to twice as
/// sharply); up to [`MANY_ENTRIES`] (four times).
const SHARPNESS_CLASSES: usize = 3;
/// Most needle entries of sharpness class 1: the maximum of 20 normals has sd 0.52 of theirs.
const FEW_ENTRIES: f64 = 20.0;
/// Most needle entries of sharpness class 2: the maximum of 10⁴ normals has sd 0.27 of theirs.
const MANY_ENTRIES: f64 = 1e4;

/// The sharpness class of needle laws: `None` when a Gauss rule is not tried (a law that is
/// not normal, a point mass, or too many entries).
fn sharpness_class(laws: &[(EntryLaw, f64)]) -> Option<usize> {
    if !laws.iter().all(|(l, _)| matches!(l, EntryLaw::Gauss { sd, .. } if *sd > 0.0)) {
        return None;
    }
    let n: f64 = laws.iter().map(|l| l.1).sum();
    if n <= 1.0 {
        Some(0)
    } else if n <= FEW_ENTRIES {
        Some(1)
    } else if n <= MANY_ENTRIES {
        Some(2)
    } else {
        None
    }
}

impl OrderTable {
    /// The smallest rule `choose` finds on the coarse panels' measure or, where none is found
    /// there, on the refined panels' (more nodes: a larger rule can be built and checked;
    /// the measure the rules were built on before the coarse panels served).
    fn choose(&self, choose: impl Fn(&Ladder, &[f64], &[f64]) -> Option<usize>) -> Option<RuleAt> {
        if let Some(at) = choose(&self.ladder, &self.coarse.t, &self.coarse.wf) {
            return Some((false, at));
        }
        if !self.refined || self.splits.iter().all(|&n| n == 1) {
            return None;
        }
        let f = self.fine();
        choose(&self.fine_ladder, &f.t, &f.wf).map(|at| (true, at))
    }

    /// The rule at `at` ([`OrderTable::choose`] built it).
    fn rule_at(&self, (fine, at): RuleAt) -> &GaussRule {
        if fine {
            self.fine_ladder.rule(at)
        } else {
            self.ladder.rule(at)
        }
    }

    /// The panels refined to the needle's scale: each coarse panel split as `splits` says, a
    /// panel left whole keeping its nodes and densities (the same arithmetic places them).
    fn fine(&self) -> &TableNodes {
        self.fine.get_or_init(|| self.split_panels(&self.splits))
    }

    /// The coarse panels with panel p split into `splits[p]` equal panels: a panel left whole
    /// keeps its nodes and densities (the same arithmetic places them), a split one has T_j's
    /// density at its new Kronrod nodes.
    fn split_panels(&self, splits: &[usize]) -> TableNodes {
        let c = &self.coarse;
        let total: usize = splits.iter().sum();
        let mut out = TableNodes {
            panels: Vec::with_capacity(total),
            t: Vec::with_capacity(15 * total),
            wf: Vec::with_capacity(15 * total),
        };
        let mut nodes = Vec::with_capacity(15);
        for (p, (&(a, b), &n)) in c.panels.iter().zip(splits).enumerate() {
            if n == 1 {
                out.panels.push((a, b));
                out.t.extend_from_slice(&c.t[15 * p..15 * p + 15]);
                out.wf.extend_from_slice(&c.wf[15 * p..15 * p + 15]);
                continue;
            }
            for i in 0..n {
                let lo = if i == 0 { a } else { a + (b - a) * i as f64 / n as f64 };
                let hi = if i + 1 == n { b } else { a + (b - a) * (i + 1) as f64 / n as f64 };
                out.panels.push((lo, hi));
                nodes.clear();
                kronrod_nodes(lo, hi, &mut nodes);
                for &(t, w) in &nodes {
                    out.t.push(t);
                    out.wf.push(w * self.density.at(t));
                }
            }
        }
        out
    }

    /// The needle means at which a rule over the needle's own law is checked for a needle of sd
    /// `sd` ([`OrderTable::needle_side`], [`OrderTable::max_side`]): every half of the finer
    /// of the two scales (the needle's, T_j's support over 30) from 6 sd below T_j's support to 6
    /// sd above, at most [`MAX_CHECK_CENTRES`], the middle ones first.
    fn side_centres(&self, sd: f64) -> Vec<f64> {
        let (lo, hi) = gauss_rule::span(&self.coarse.t);
        let step = 0.5 * sd.min((hi - lo) / 30.0);
        let (from, to) = (lo - 6.0 * sd, hi + 6.0 * sd);
        let count = ((to - from) / step).ceil().clamp(2.0, MAX_CHECK_CENTRES as f64) as usize;
        gauss_rule::centres(from, to, count)
    }

    /// F_{T_j} from the table's refined panels, made at the first call.
    fn cdf(&self) -> &TableCdf {
        self.cdf.get_or_init(|| {
            let f = self.fine();
            TableCdf::new(&f.panels, &f.t, &f.wf)
        })
    }

    /// Whether a normal needle is integrated over its own law ([`OrderTable::needle_side`])
    /// before a rule of the table is looked for: where the table has hard negatives. Such a
    /// table is made for one evaluation of a fit (its density depends on the fitted
    /// hard_negatives and hard_mean), so its own rules (a recurrence over its nodes and an
    /// eigenproblem per size) would be built for that one use, where the rules of the needle's
    /// law are built once per entry count: a table's rules were 56% of a hard-negatives fit on
    /// DeepSeek-V3.2, and the needle's side first cut that fit's time by a fifth. A table
    /// without them serves every evaluation at its length, and its rules are the cheaper path
    /// there (the 30-length V4 verdict ran 1.4 times as long with the needle's side first).
    fn side_first(&self) -> bool {
        self.density.n_hard > 0
    }

    /// P(rank ≤ j | z) integrated over the needle's law when it is one law of `c` entries
    /// sharper than T_j (E[F_{T_j}(max of c needle scores)], a few nodes of the law of the max,
    /// F from [`TableCdf`]); `None` when the needle's law is of another form or too broad for
    /// that.
    fn needle_side(&self, laws: &[(EntryLaw, f64)]) -> Option<f64> {
        #[cfg(test)]
        if tests::NO_RULES.with(|c| c.get()) {
            return None;
        }
        let [(EntryLaw::Gauss { mean, sd }, c)] = *laws else { return None };
        if sd == 0.0 {
            // A point mass (the largest of c copies is the same point): rank ≤ j ⟺ T_j < mean.
            return Some(self.cdf().cdf(mean));
        }
        if !(c >= 1.0 && c <= NEEDLE_SIDE_ENTRIES as f64 && c.fract() == 0.0) {
            return None;
        }
        let width = self.width?;
        // The table serves needle sds below 4·width; integrating F over the needle's law is
        // hardest at the broadest, where the rule is checked.
        if sd >= 4.0 * width {
            return None;
        }
        let law = gauss_rule::max_of_normals(c as u32);
        let at = (*self.needle_choices[c as usize - 1].get_or_init(|| self.needle_rule(&law, 4.0 * width)))?;
        let rule = law.ladder.rule(at);
        Some(self.cdf().integrate_shifted(rule, mean, sd))
    }

    /// The rule of `law` (the largest of c standard normals) that integrates F_{T_j} over a
    /// needle of that many entries and sd `sd` to [`TOL_RULE`], checked at
    /// [`OrderTable::side_centres`]; `None` when none is found, and without a check where T_j is
    /// a step on the law's scale ([`NEEDLE_SIDE_MIN_SCALE`]).
    fn needle_rule(&self, law: &gauss_rule::Measure, sd: f64) -> Option<usize> {
        #[cfg(test)]
        let skips = !tests::NO_SIDE_SKIP.with(|c| c.get());
        #[cfg(not(test))]
        let skips = true;
        if skips && self.side_scale(law, sd) < NEEDLE_SIDE_MIN_SCALE {
            return None;
        }
        let centres = self.side_centres(sd);
        law.ladder.choose_by(&law.t, &law.w, &centres, TOL_RULE, |rule, m| self.cdf().integrate_shifted(rule, m, sd))
    }

    /// T_j's sd in sds of a needle of `sd` whose entries' maximum has the law `law`.
    fn side_scale(&self, law: &gauss_rule::Measure, sd: f64) -> f64 {
        self.sd / (sd * law.sd)
    }

    /// P(rank ≤ j | z) for one max-pooled law integrated over the needle's own law, or a point
    /// mass (needle_sd = 0); `None` for any other law or where no rule of the needle's law is
    /// found. The e entries pool e·n_dist distractor tokens and e·n_needle needle tokens, all
    /// independent given z, so the survival is 1 − F_tok(t)^(e·n_dist)·Φ((t − m)/s)^(e·n_needle),
    /// and with W(x) = ∫_{−∞}^x f_{T_j}·F_tok^(e·n_dist) ([`OrderTable::point_max_cdf`]) and
    /// Y = m + s·(the largest of e·n_needle standard normals), P(rank ≤ j | z) = M − W(∞) +
    /// E[W(Y)], M the table's mass: a few nodes of Y's law, W at each (W(m) for a point mass),
    /// where the whole table's thousand nodes at every z took a Quest verdict minutes. Tried
    /// before a rule of T_j's table ([`OrderTable::max_rule`]): Y's rules are built once per
    /// token count, where a table's need the table's own recurrence, and a fit over hard
    /// negatives makes a new table at every evaluation, for which a table's rule often does
    /// not exist within [`gauss_rule`]'s largest size. The rule of Y's law is checked once per
    /// (token law, powers) and sharpness class: every needle sd below 4·width at 4·width, as
    /// [`OrderTable::needle_side`]'s is; a broader one at the upper end of its quarter octave
    /// (a broader needle spreads Y over more of W's bends, so a rule checked there integrates
    /// every sd of the class).
    fn max_side(&self, laws: &[(EntryLaw, f64)]) -> Option<f64> {
        #[cfg(test)]
        if tests::NO_RULES.with(|c| c.get()) || tests::NO_MAX_SIDE.with(|c| c.get()) {
            return None;
        }
        let [(EntryLaw::Max { token, n_dist, n_needle, needle_mean, needle_sd }, e)] = *laws else { return None };
        if n_needle == 0 || !(e >= 1.0 && e <= SIDE_MAX_TOKENS as f64 && e.fract() == 0.0) {
            return None;
        }
        let (power, tokens) = (n_dist.checked_mul(e as u64)?, n_needle.checked_mul(e as u64)?);
        if tokens > SIDE_MAX_TOKENS {
            return None;
        }
        let weighted = self.point_max_cdf(token, power);
        let (mass, above) = (self.mass, weighted.cdf(f64::INFINITY));
        if needle_sd == 0.0 {
            return Some(mass - (above - weighted.cdf(needle_mean)));
        }
        let class = self.side_class(needle_sd)?;
        let sharp = 4.0 * self.width?;
        let law = gauss_rule::max_of_normals(tokens as u32);
        let key = (token, power, tokens, class);
        let known =
            self.max_side_choices.lock().ok().and_then(|m| m.iter().find(|(k, _)| *k == key).map(|&(_, at)| at));
        let at = match known {
            Some(at) => at,
            None => {
                let sd = sharp * 2f64.powf(class as f64 / LAW_STEPS_PER_OCTAVE);
                let centres = self.side_centres(sd);
                let value = |rule: &GaussRule, m: f64| weighted.integrate_shifted(rule, m, sd);
                let at = match law.ladder.choose_by(&law.t, &law.w, &centres, TOL_RULE, value) {
                    Some(at) => Some((at, false)),
                    None => law.ladder.choose_by(&law.t, &law.w, &centres, TOL_SIDE_RULE, value).map(|at| (at, true)),
                };
                if let Ok(mut m) = self.max_side_choices.lock() {
                    m.push((key, at));
                }
                at
            }
        }?
        .0;
        let rule = law.ladder.rule(at);
        Some(mass - above + weighted.integrate_shifted(rule, needle_mean, needle_sd))
    }

    /// Whether a rule [`OrderTable::max_side`] chose agreed only to [`TOL_SIDE_RULE`].
    #[cfg(test)]
    fn any_loose_side_rule(&self) -> bool {
        self.max_side_choices.lock().unwrap().iter().any(|(_, at)| at.is_some_and(|(_, loose)| loose))
    }

    /// The sharpness class of a needle of sd `needle_sd` > 0 for [`OrderTable::max_side`]: 0
    /// below 4·width, else s ≥ 1 for the quarter octave [4·width·2^((s−1)/4), 4·width·2^(s/4));
    /// `None` for a point mass, a table without a resolution, or beyond [`MAX_SIDE_CLASS`].
    fn side_class(&self, needle_sd: f64) -> Option<u32> {
        let sharp = 4.0 * self.width?;
        if !(needle_sd > 0.0 && needle_sd.is_finite()) {
            return None;
        }
        let class =
            if needle_sd < sharp { 0 } else { ((needle_sd / sharp).log2() * LAW_STEPS_PER_OCTAVE).floor() as u32 + 1 };
        (class <= MAX_SIDE_CLASS).then_some(class)
    }

    /// x ↦ ∫_{−∞}^x f_{T_j}·F_tok^p as a [`TableCdf`], made at its first use per (token law, p):
    /// T_j's panels split until F_tok^p bends little over each ([`POINT_MAX_PANEL_PER_SCALE`]
    /// of 1 / (d/dt) ln F_tok^p at the panel's left edge, where it is largest;
    /// [`OrderTable::split_panels`]).
    fn point_max_cdf(&self, token: TokenLaw, power: u64) -> Arc<TableCdf> {
        if let Ok(m) = self.point_max_cdfs.lock() {
            if let Some((_, c)) = m.iter().find(|(k, _)| *k == (token, power)) {
                return Arc::clone(c);
            }
        }
        let p = power as f64;
        // (d/dt) ln F_tok^p = p·f_tok/F_tok at each panel's left edge: a bound on the bend.
        let splits: Vec<usize> = self
            .coarse
            .panels
            .iter()
            .map(|&(a, b)| {
                let slope = p * (token.ln_pdf(a) - token.ln_cdf(a)).exp();
                let width = POINT_MAX_PANEL_PER_SCALE / slope.max(1e-300);
                ((b - a) / width).ceil().clamp(1.0, POINT_MAX_SPLITS) as usize
            })
            .collect();
        let TableNodes { panels, t, mut wf } = self.split_panels(&splits);
        if power > 0 {
            for (w, &x) in wf.iter_mut().zip(&t) {
                *w *= (p * token.ln_cdf(x)).exp();
            }
        }
        let made = Arc::new(TableCdf::new(&panels, &t, &wf));
        if let Ok(mut m) = self.point_max_cdfs.lock() {
            if let Some((_, c)) = m.iter().find(|(k, _)| *k == (token, power)) {
                return Arc::clone(c);
            }
            m.push(((token, power), Arc::clone(&made)));
        }
        made
    }

    /// The Gauss rule that integrates the needle's survival for `laws` as the whole table does,
    /// or `None` (integrate over every node).
    fn rule_for(&self, laws: &[(EntryLaw, f64)]) -> Option<&GaussRule> {
        #[cfg(test)]
        if tests::NO_RULES.with(|c| c.get()) {
            return None;
        }
        if !self.refined {
            return None;
        }
        let width = self.width?;
        if let [(EntryLaw::Max { token, n_dist, n_needle, needle_sd, .. }, entries)] = *laws {
            return self.max_rule(MaxKind { token, n_dist, n_needle, entries }, needle_sd, width);
        }
        if let [(EntryLaw::Gauss { sd, .. }, c)] = *laws {
            // Any count of entries: the rule is checked on the law's own family for that count.
            if c >= 1.0 && c <= u32::MAX as f64 && c.fract() == 0.0 && sd >= 2.0 * width {
                return self.law_rule(c as u32, sd, width);
            }
        }
        let class = sharpness_class(laws)?;
        // The table's resolution holds for laws of sd ≥ 2·width (see `panel_width`); a rule is
        // checked at the sharpest sd of that range, divided by the class's factor.
        let sd = laws
            .iter()
            .map(|(l, _)| if let EntryLaw::Gauss { sd, .. } = l { *sd } else { 0.0 })
            .fold(f64::INFINITY, f64::min);
        if sd < 2.0 * width {
            return None;
        }
        let scale = 2.0 * width / (1u32 << class) as f64;
        let at =
            (*self.choices[class].get_or_init(|| self.choose(|ladder, t, w| ladder.choose(t, w, scale, TOL_RULE))))?;
        Some(self.rule_at(at))
    }
}

impl OrderTable {
    /// The Gauss rule for a needle of `c` entries, each Normal(m, sd²) given z (sd ≥ 2·width, the
    /// table's resolution): checked, once per c and quarter octave of sd, on the law's own family
    /// 1 − Φ((t − m)/s)^c at kernel centres m over T_j's support, with s the sharpest sd of the
    /// quarter octave (a broader law of the family is smoother). Checked at the law's own
    /// sharpness rather than at the table's resolution divided by a factor for several entries
    /// (up to four times sharper than the law): at a layer correlation near 1 (needle sd
    /// √(1 − ρ) per layer) the rule is about half the size.
    fn law_rule(&self, c: u32, sd: f64, width: f64) -> Option<&GaussRule> {
        let floor = 2.0 * width;
        let step = ((sd / floor).log2() * LAW_STEPS_PER_OCTAVE).floor().clamp(0.0, LAW_STEPS_PER_OCTAVE - 1.0) as u32;
        let known =
            self.law_choices.lock().ok().and_then(|m| m.iter().find(|(k, _)| *k == (c, step)).map(|&(_, at)| at));
        let at = match known {
            Some(at) => at,
            None => {
                let s = floor * 2f64.powf(step as f64 / LAW_STEPS_PER_OCTAVE);
                let at = kernel_centres(&self.coarse.t, s).and_then(|centres| {
                    self.choose(|ladder, t, w| {
                        ladder.choose_by(t, w, &centres, TOL_RULE, |rule, m| {
                            let laws = [(EntryLaw::Gauss { mean: m, sd: s }, c as f64)];
                            rule.integrate(|x| needle_sf(&laws, x))
                        })
                    })
                });
                if let Ok(mut m) = self.law_choices.lock() {
                    m.push(((c, step), at));
                }
                at
            }
        }?;
        Some(self.rule_at(at))
    }

    /// The Gauss rule for a max-pooled needle law of kind `kind` whose needle tokens have sd
    /// `needle_sd` (Quest and max-pooled layers), or `None`. The rule is checked, once per kind,
    /// on that law's own family: 1 − (F_tok(t)^n_dist · Φ((t − m)/s)^n_needle)^c at kernel
    /// centres m over T_j's support, with s = 2·width, the sharpest needle sd the table resolves
    /// (the distractor tokens' factor is the same for every needle, a broader needle token only
    /// smoother). A needle token sharper than that, or none, integrates over the whole table.
    fn max_rule(&self, kind: MaxKind, needle_sd: f64, width: f64) -> Option<&GaussRule> {
        let scale = 2.0 * width;
        if kind.n_needle == 0 || !(needle_sd >= scale) {
            return None;
        }
        let known =
            self.max_choices.lock().ok().and_then(|m| m.iter().find(|(k, ..)| *k == kind).map(|&(_, at, _)| at));
        let at = match known {
            Some(at) => at,
            None => {
                let at = kernel_centres(&self.coarse.t, scale).and_then(|centres| {
                    let law = |m: f64| EntryLaw::Max {
                        token: kind.token,
                        n_dist: kind.n_dist,
                        n_needle: kind.n_needle,
                        needle_mean: m,
                        needle_sd: scale,
                    };
                    self.choose(|ladder, t, w| {
                        ladder.choose_by(t, w, &centres, TOL_RULE, |rule, m| {
                            let laws = [(law(m), kind.entries)];
                            rule.integrate(|x| needle_sf(&laws, x))
                        })
                    })
                });
                if let Ok(mut m) = self.max_choices.lock() {
                    m.push((kind, at, None));
                }
                at
            }
        }?;
        Some(self.rule_at(at))
    }

    /// [`OrderTable::rule_for`]'s rule for `laws`, with a max-pooled law's kept distractor parts
    /// where it has them ([`OrderTable::max_rule_parts`]); the same sum either way.
    fn rule_with_parts(&self, laws: &[(EntryLaw, f64)]) -> Option<SharedRule<'_>> {
        if let [(_, entries)] = laws {
            if *entries <= SUM_FORM_ENTRIES {
                if let Some((rule, parts)) = self.max_rule_parts(laws) {
                    return Some(SharedRule { rule, parts: Some(parts) });
                }
            }
        }
        self.rule_for(laws).map(|rule| SharedRule { rule, parts: None })
    }

    /// [`OrderTable::rule_for`]'s rule for one max-pooled needle law of distractor tokens
    /// (`laws` = [(`EntryLaw::Max`, entries)], n_dist > 0), with n_dist · ln F_tok at each of
    /// its nodes: that part of the law's ln_cdf is the same for every needle mean and sd, so a
    /// fit's every evaluation at every z reads it instead of computing it.
    fn max_rule_parts(&self, laws: &[(EntryLaw, f64)]) -> Option<(&GaussRule, Arc<[f64]>)> {
        let [(EntryLaw::Max { token, n_dist, n_needle, .. }, entries)] = *laws else { return None };
        if n_dist == 0 {
            return None;
        }
        let rule = self.rule_for(laws)?;
        let kind = MaxKind { token, n_dist, n_needle, entries };
        let mut m = self.max_choices.lock().ok()?;
        let slot = m.iter_mut().find(|(k, ..)| *k == kind)?;
        let parts = slot.2.get_or_insert_with(|| rule.nodes.iter().map(|&t| max_part(token, n_dist, t)).collect());
        Some((rule, Arc::clone(parts)))
    }

    /// n_dist · ln F_tok at every node of the refined panels, for a max-pooled needle law of
    /// distractor tokens `token` (`None` for any other law): the whole-table sum's every
    /// evaluation at every z reads it (a needle too sharp for a rule: layer_corr near 1, small
    /// needle_sd).
    fn max_table_parts(&self, law: &EntryLaw) -> Option<Arc<[f64]>> {
        let EntryLaw::Max { token, n_dist, .. } = *law else { return None };
        if n_dist == 0 {
            return None;
        }
        let mut m = self.max_table_parts.lock().ok()?;
        if let Some((_, parts)) = m.iter().find(|(k, _)| *k == (token, n_dist)) {
            return Some(Arc::clone(parts));
        }
        let parts: Arc<[f64]> = self.fine().t.iter().map(|&t| max_part(token, n_dist, t)).collect();
        m.push(((token, n_dist), Arc::clone(&parts)));
        Some(parts)
    }
}

/// [`needle_sf`] at t of one max-pooled law `law` (n_dist > 0) of `entries` ≤
/// [`SUM_FORM_ENTRIES`] entries, its distractor tokens' part of ln F at t given (`part`,
/// [`OrderTable::max_rule_parts`], [`OrderTable::max_table_parts`]); the rest as
/// [`EntryLaw::ln_cdf`], [`EntryLaw::sf`] and [`needle_sf`] compute it (the same operations in
/// the same order: the same value).
#[inline]
fn max_needle_sf(part: f64, t: f64, law: &EntryLaw, entries: f64) -> f64 {
    let EntryLaw::Max { n_needle, needle_mean, needle_sd, .. } = *law else { unreachable!("a max-pooled law") };
    let mut v = part;
    if n_needle > 0 {
        let l = if needle_sd > 0.0 {
            ln_norm_cdf((t - needle_mean) / needle_sd)
        } else if t >= needle_mean {
            0.0
        } else {
            f64::NEG_INFINITY
        };
        v += n_needle as f64 * l;
    }
    any_of(-v.exp_m1(), entries)
}

/// `rule.integrate(|t| needle_sf(..))` for one max-pooled law, from its parts at the rule's nodes.
fn integrate_max_needle(rule: &GaussRule, parts: &[f64], law: &EntryLaw, entries: f64) -> f64 {
    rule.nodes
        .iter()
        .zip(&rule.weights)
        .zip(parts)
        .map(|((&t, &w), &part)| w * max_needle_sf(part, t, law, entries))
        .sum()
}

/// n_dist · ln F_tok(t), as [`EntryLaw::ln_cdf`] sums it (from 0.0).
fn max_part(token: TokenLaw, n_dist: u64, t: f64) -> f64 {
    let mut v = 0.0;
    v += n_dist as f64 * token.ln_cdf(t);
    v
}

/// The scale over which a needle law's survival function bends (0 for a point mass): the panel
/// width an [`OrderTable`] needs for it.
fn needle_scale(law: &EntryLaw) -> f64 {
    match *law {
        EntryLaw::Gauss { sd, .. } => sd,
        // The max of a few distractor tokens bends over a fraction of a token sd.
        EntryLaw::Token(_) => 0.25,
        EntryLaw::Max { n_needle, needle_sd, .. } => {
            if n_needle > 0 {
                needle_sd.min(0.25)
            } else {
                0.25
            }
        }
    }
}

/// The widest table panel for a needle law of `scale`, rounded down to a power of two (a
/// table's resolution is then one of few values, and part of its key); `None` for a point mass.
fn panel_width(scale: f64) -> Option<f64> {
    (scale > 0.0 && scale.is_finite())
        .then(|| 2f64.powi((PANEL_PER_SCALE * scale).log2().floor().clamp(-1000.0, 1000.0) as i32))
}

impl Analytic {
    /// Prepares a validated scenario, or says why it has no exact evaluation.
    pub fn new(s: &Scenario) -> Result<Analytic, NotExact> {
        let geometry = Geometry::new(s);
        let model = ScoreModel::new(s, &geometry)?;
        Ok(Analytic {
            model,
            geometry,
            layers: s.selecting_layers(),
            readout: s.readout,
            p_read: s.p_read,
            p_guess: s.p_guess,
        })
    }

    /// The same scenario with its needle entries grouped by (pool size, needle tokens) rather
    /// than by law: the same values, on the slower path (several groups of one law) that a
    /// needle of several unpooled entries took before; for the tests that compare the two.
    #[doc(hidden)]
    pub fn grouped_by_entry_kind(mut self) -> Analytic {
        self.model.group_by_entry_kind();
        self
    }

    /// The resolved geometry.
    pub fn geometry(&self) -> &Geometry {
        &self.geometry
    }

    /// Number of distractor entries (N minus the needle's entries).
    fn n_distractors(&self) -> u64 {
        self.model.n_regular + self.model.n_hard
    }

    /// T_j's density.
    fn order_density_of(&self, j: u64) -> OrderDensity {
        let m = &self.model;
        OrderDensity { distractor: m.distractor, hard: m.hard, n_regular: m.n_regular, n_hard: m.n_hard, j }
    }

    /// ln f_{T_j}(t).
    fn ln_order_density(&self, j: u64, t: f64) -> f64 {
        self.order_density_of(j).ln(t)
    }

    /// Expected number of distractors scoring above t.
    fn expected_above(&self, t: f64) -> f64 {
        let m = &self.model;
        m.n_regular as f64 * m.distractor.sf(t) + m.n_hard as f64 * m.hard.sf(t)
    }

    /// Locates T_j: its centre (expected count above = j − ½) and a range holding all its mass.
    fn order_stat(&self, j: u64) -> OrderStat {
        let target = j as f64 - 0.5;
        let (mut lo, mut hi) = (-1.0f64, 1.0f64);
        for _ in 0..1100 {
            if self.expected_above(lo) >= target {
                break;
            }
            lo *= 2.0;
        }
        for _ in 0..1100 {
            if self.expected_above(hi) <= target {
                break;
            }
            hi *= 2.0;
        }
        for _ in 0..200 {
            let mid = 0.5 * (lo + hi);
            if !(mid > lo && mid < hi) {
                break;
            }
            if self.expected_above(mid) > target {
                lo = mid;
            } else {
                hi = mid;
            }
        }
        let centre = 0.5 * (lo + hi);
        let m = &self.model;
        let rate =
            m.n_regular as f64 * m.distractor.ln_pdf(centre).exp() + m.n_hard as f64 * m.hard.ln_pdf(centre).exp();
        let n_d = self.n_distractors() as f64;
        let sd_count = (j as f64 * (1.0 - j as f64 / n_d).max(0.0)).sqrt() + 0.5;
        let mut h = sd_count / rate;
        if !(h.is_finite() && h > 0.0) {
            h = 1.0;
        }
        h = h.max(1e-9 * (1.0 + centre.abs()));
        let mut peak = self.ln_order_density(j, centre);
        let mut breaks = vec![centre];
        let mut edge = |dir: f64, breaks: &mut Vec<f64>| {
            let mut step = h;
            let mut t = centre + dir * step;
            let mut last_break = 0.0;
            for _ in 0..400 {
                let v = self.ln_order_density(j, t);
                if v > peak {
                    peak = v;
                }
                if v < peak - TAIL_NATS {
                    break;
                }
                // A breakpoint every factor of ~5 in distance keeps panels matched to the scale.
                if step >= 5.0 * last_break {
                    breaks.push(t);
                    last_break = step;
                }
                step *= 1.5;
                t = centre + dir * step;
            }
            t
        };
        let hi = edge(1.0, &mut breaks);
        let lo = edge(-1.0, &mut breaks);
        OrderStat { j, lo, hi, breaks }
    }

    /// f_{T_j}(t), 0 where its logarithm is −∞.
    fn order_density(&self, j: u64, t: f64) -> f64 {
        self.order_density_of(j).at(t)
    }

    /// The needle's law of each kind of entry given z, with the entries of that kind.
    fn needle_laws(&self, z: Option<f64>, laws: &mut Vec<(EntryLaw, f64)>) {
        let m = &self.model;
        laws.clear();
        laws.extend(m.needle_groups.iter().map(|(e, n)| (m.needle_law(e, z), *n as f64)));
    }

    /// The narrowest scale of the needle's laws given z (`Some(0.0)` stands for every z: the
    /// shared component moves the laws, it does not change their shape).
    fn needle_law_scale(&self, z: Option<f64>) -> f64 {
        let m = &self.model;
        m.needle_groups.iter().map(|(e, _)| needle_scale(&m.needle_law(e, z))).fold(f64::INFINITY, f64::min)
    }

    /// T_j and its table for needle laws of scale `scale`, from [`TABLES`] or made and kept
    /// there.
    fn prepared(&self, j: u64, scale: f64) -> Arc<Prepared> {
        let m = &self.model;
        let width = panel_width(scale);
        let mut key = String::with_capacity(128);
        m.distractor.put_key(&mut key);
        put_u64(&mut key, m.n_regular);
        put_u64(&mut key, m.n_hard);
        if m.n_hard > 0 {
            m.hard.put_key(&mut key);
        }
        put_u64(&mut key, j);
        match width {
            Some(w) => {
                put_tag(&mut key, 'w');
                put_f64(&mut key, w);
            }
            None => put_tag(&mut key, 'o'),
        }
        let memo = TABLES.get_or_init(Default::default);
        if let Some(p) = memo.lock().unwrap_or_else(|e| e.into_inner()).get(&key) {
            return Arc::clone(p);
        }
        let os = self.order_stat(j);
        let table = self.order_table(&os, width);
        let p = Arc::new(Prepared { os, table });
        let mut map = memo.lock().unwrap_or_else(|e| e.into_inner());
        if map.len() >= MAX_TABLES {
            map.clear();
        }
        map.insert(key, Arc::clone(&p));
        p
    }

    /// The table of T_j with panels no wider than `width` (unbounded for `None`; T_j's own panels
    /// when that would take more than [`MAX_TABLE_PANELS`]), or `None` when there is nothing to
    /// tabulate.
    fn order_table(&self, os: &OrderStat, width: Option<f64>) -> Option<OrderTable> {
        let m = &self.model;
        if m.needle_entries.is_empty() || os.j > self.n_distractors() {
            return None;
        }
        // The densities the adaptive panels evaluate, by node: a panel the refinement leaves
        // whole has the same 15 nodes (the same arithmetic places them), whose densities are
        // then looked up, not computed again (with hard negatives, each is a convolution). A
        // sorted list, not a hash map: a few hundred entries written once and read once, where
        // hashing and growing the map cost several percent of a hard-negatives fit.
        let mut seen: Vec<(u64, f64)> = Vec::with_capacity(1024);
        let coarse = adaptive_panels(
            |t| {
                let f = self.order_density(os.j, t);
                seen.push((t.to_bits(), f));
                f
            },
            os.lo,
            os.hi,
            &os.breaks,
            TOL_TABLE,
        );
        // Equal keys hold equal values (the density is a function of t).
        seen.sort_unstable_by_key(|e| e.0);
        let looked_up = |t: f64| seen.binary_search_by_key(&t.to_bits(), |e| e.0).ok().map(|i| seen[i].1);
        // A panel holding less of T_j's mass than NEGLIGIBLE_MASS adds less than that to any
        // P(rank ≤ j | z) (the needle's survival is at most 1): dropped, so that the refinement
        // to the needle's scale covers only where T_j lies.
        let coarse: Vec<(f64, f64)> =
            coarse.into_iter().filter(|p| p.2.abs() >= NEGLIGIBLE_MASS).map(|p| (p.0, p.1)).collect();
        // Each panel's split to the needle's scale, unless that takes more than
        // MAX_TABLE_PANELS in all: then the table resolves T_j alone and serves only a needle
        // sharper than T_j (`needle_side`, which reads F_{T_j} from it); any other needle law
        // runs the adaptive inner integral.
        let splits: Vec<f64> =
            coarse.iter().map(|&(a, b)| width.map_or(1.0, |w| ((b - a) / w).ceil().max(1.0))).collect();
        let total: f64 = splits.iter().sum();
        let refined = total.is_finite() && total <= MAX_TABLE_PANELS as f64;
        let splits: Vec<usize> = splits.iter().map(|&n| if refined { n as usize } else { 1 }).collect();
        let mut nodes = Vec::with_capacity(15 * coarse.len());
        for &(a, b) in &coarse {
            kronrod_nodes(a, b, &mut nodes);
        }
        let t: Vec<f64> = nodes.iter().map(|n| n.0).collect();
        let density = self.order_density_of(os.j);
        let wf: Vec<f64> = nodes.iter().map(|&(t, w)| w * looked_up(t).unwrap_or_else(|| density.at(t))).collect();
        Some(OrderTable {
            mass: wf.iter().sum(),
            sd: gauss_rule::measure_sd(&t, &wf),
            coarse: TableNodes { panels: coarse, t, wf },
            splits,
            density,
            fine: OnceLock::new(),
            width,
            refined,
            ladder: Ladder::new(),
            fine_ladder: Ladder::new(),
            choices: Default::default(),
            law_choices: Default::default(),
            cdf: OnceLock::new(),
            needle_choices: Default::default(),
            max_choices: Default::default(),
            max_table_parts: Default::default(),
            point_max_cdfs: Default::default(),
            max_side_choices: Default::default(),
        })
    }

    /// [`Analytic::rank_le_given`] from a table of T_j: on a Gauss rule of the table, or over
    /// the needle's law, where either gives the table's sum; else Σ w·f(t)·S(t | z) over its
    /// nodes (a panel that holds a point mass of the needle's law at z, a jump of S, integrated
    /// adaptively, split at the jump), or the adaptive integral when the table is not refined
    /// to the needle's scale.
    fn rank_le_tabled(
        &self,
        os: &OrderStat,
        table: &OrderTable,
        z: Option<f64>,
        laws: &mut Vec<(EntryLaw, f64)>,
    ) -> f64 {
        self.needle_laws(z, laws);
        if let Some(p) = table.max_side(laws) {
            return p;
        }
        if table.side_first() {
            if let Some(p) = table.needle_side(laws) {
                return p;
            }
        }
        if let Some(rule) = table.rule_with_parts(laws) {
            return rule.integrate(laws);
        }
        if let Some(p) = table.needle_side(laws) {
            return p;
        }
        if !table.refined {
            // T_j's own panels are too wide for this needle's survival function.
            return self.rank_le_given(os, z, laws);
        }
        let laws = &*laws;
        let needle_sf = |t: f64| needle_sf(laws, t);
        // One max-pooled law: its distractor part at the nodes read from the table.
        let max_parts = match laws[..] {
            [(ref law, entries)] if entries <= SUM_FORM_ENTRIES => {
                table.max_table_parts(law).map(|p| (p, law, entries))
            }
            _ => None,
        };
        let has_jump = laws.iter().any(|(l, _)| l.breakpoint().is_some());
        let mut total = 0.0;
        let fine = table.fine();
        for (p, &(a, b)) in fine.panels.iter().enumerate() {
            if has_jump && laws.iter().filter_map(|(l, _)| l.breakpoint()).any(|x| x > a && x < b) {
                let jumps: Vec<f64> = laws.iter().filter_map(|(l, _)| l.breakpoint()).collect();
                total += integrate(|t| self.order_density(os.j, t) * needle_sf(t), a, b, &jumps, TOL_TABLE);
            } else {
                let at = 15 * p;
                let nodes = fine.t[at..at + 15].iter().zip(&fine.wf[at..at + 15]);
                match &max_parts {
                    Some((parts, law, entries)) => {
                        for ((t, wf), &part) in nodes.zip(&parts[at..at + 15]) {
                            total += wf * max_needle_sf(part, *t, law, *entries);
                        }
                    }
                    None => {
                        for (t, wf) in nodes {
                            total += wf * needle_sf(*t);
                        }
                    }
                }
            }
        }
        total
    }

    /// P(rank ≤ j) in one layer given the needle's shared component z, through `table` when
    /// there is one.
    fn rank_le(
        &self,
        os: &OrderStat,
        table: Option<&OrderTable>,
        z: Option<f64>,
        laws: &mut Vec<(EntryLaw, f64)>,
    ) -> f64 {
        let m = &self.model;
        if m.needle_entries.is_empty() {
            return 0.0;
        }
        if os.j > self.n_distractors() {
            return 1.0;
        }
        match table {
            Some(t) => self.rank_le_tabled(os, t, z, laws),
            None => self.rank_le_given(os, z, laws),
        }
    }

    /// P(rank ≤ j) in one layer given the needle's shared component z.
    fn rank_le_given(&self, os: &OrderStat, z: Option<f64>, laws: &mut Vec<(EntryLaw, f64)>) -> f64 {
        let m = &self.model;
        if m.needle_entries.is_empty() {
            return 0.0;
        }
        if os.j > self.n_distractors() {
            return 1.0;
        }
        // Entries that pool alike have one law: a group of n contributes n·ln F(t), so the cost
        // is per kind of entry (a handful), not per entry (up to 2^24 with many long copies).
        self.needle_laws(z, laws);
        let mut breaks: Vec<f64> = laws.iter().filter_map(|(l, _)| l.breakpoint()).collect();
        breaks.extend_from_slice(&os.breaks);
        let laws = &*laws;
        integrate(|t| self.order_density(os.j, t) * needle_sf(laws, t), os.lo, os.hi, &breaks, TOL_INNER)
    }

    /// How `table` integrates the needle at every z of an outer integral: the laws' shape (the
    /// sds, the entry counts, a max-pooled law's kind) does not depend on z, only their
    /// location, so what [`Analytic::rank_le_tabled`] finds at z = 0 it finds at every z. The
    /// needle's own law ([`OrderTable::max_side`], [`OrderTable::needle_side`] where the table
    /// takes it first), else the Gauss rule of the table ([`OrderTable::rule_for`], returned:
    /// found once per outer integral instead of once per node), else neither.
    fn inner_integral<'t>(&self, table: Option<&'t OrderTable>, laws: &mut Vec<(EntryLaw, f64)>) -> Inner<'t> {
        let Some(table) = table else { return Inner::Table };
        if self.model.needle_entries.is_empty() {
            return Inner::Table;
        }
        self.needle_laws(Some(0.0), laws);
        if table.max_side(laws).is_some() || (table.side_first() && table.needle_side(laws).is_some()) {
            return Inner::OwnLaw;
        }
        table.rule_with_parts(laws).map_or(Inner::Table, Inner::Rule)
    }

    /// Where P(rank ≤ j | z) moves, for needle laws whose location increases in z, read from
    /// T_j's table (every node of which lies in [lo, hi]; asked where a rule of the table
    /// serves, or for a max-pooled needle): below `from` every needle entry lies
    /// [`TRANSITION_SDS`] sds below T_j's support, so P(rank ≤ j | z) is within c·Q(9) ≈ 1e-19
    /// per entry of its limit; above `to` the entries of one law lie that far above it, so it
    /// is within that of its limit (1, or the table's mass). A max-pooled law of N needle
    /// tokens (Y = m + s·the largest of N normals) is below the support by 9 + √(2 ln N) sds
    /// (P(Y > lo) ≤ N·Q(9 + √(2 ln N)) ≤ Q(9)) and above it by 9 (P(Y < hi) ≤ Φ(−9)^N); its
    /// distractor tokens do not move with z. Both within [−Z_MAX, Z_MAX], the range integrated
    /// otherwise; `None` when the laws are of another form (a point mass, a token law, a law
    /// that does not move with z: then that whole range is integrated).
    fn transition(&self, os: &OrderStat, laws: &mut Vec<(EntryLaw, f64)>) -> Option<(f64, f64)> {
        // (location, sd, sds below the support) of each law.
        let moving = |laws: &[(EntryLaw, f64)]| -> Option<Vec<(f64, f64, f64)>> {
            laws.iter()
                .map(|&(l, entries)| match l {
                    EntryLaw::Gauss { mean, sd } => (sd > 0.0).then_some((mean, sd, TRANSITION_SDS)),
                    EntryLaw::Max { n_needle, needle_mean, needle_sd, .. } => {
                        let tokens = n_needle as f64 * entries;
                        (n_needle > 0 && needle_sd > 0.0 && tokens >= 1.0)
                            .then(|| (needle_mean, needle_sd, TRANSITION_SDS + (2.0 * tokens.ln()).sqrt()))
                    }
                    EntryLaw::Token(_) => None,
                })
                .collect()
        };
        self.needle_laws(Some(0.0), laws);
        let at0 = moving(laws)?;
        self.needle_laws(Some(1.0), laws);
        let at1 = moving(laws)?;
        let (mut from, mut to) = (f64::INFINITY, f64::INFINITY);
        for (&(m0, sd, below), &(m1, ..)) in at0.iter().zip(&at1) {
            let slope = m1 - m0;
            if !(slope > 0.0) {
                return None;
            }
            from = from.min((os.lo - below * sd - m0) / slope);
            to = to.min((os.hi + TRANSITION_SDS * sd - m0) / slope);
        }
        let (from, to) = (from.max(-Z_MAX), to.min(Z_MAX));
        (from < to).then_some((from, to))
    }

    /// Whether every needle law is max-pooled.
    fn max_pooled(&self) -> bool {
        self.model
            .needle_groups
            .iter()
            .all(|(e, _)| matches!(self.model.needle_law(e, Some(0.0)), EntryLaw::Max { .. }))
    }

    /// [`Analytic::rank_le`] at z, on `rule` when [`Analytic::inner_integral`] found one (what
    /// [`Analytic::rank_le_tabled`] would do at z, without looking for the rule again).
    fn rank_le_at(
        &self,
        os: &OrderStat,
        table: Option<&OrderTable>,
        rule: Option<&SharedRule>,
        z: f64,
        laws: &mut Vec<(EntryLaw, f64)>,
    ) -> f64 {
        let Some(r) = rule else { return self.rank_le(os, table, Some(z), laws) };
        self.needle_laws(Some(z), laws);
        r.integrate(laws)
    }

    /// E_z[g(P(rank ≤ j | z))] when the shared component matters, else g(P(rank ≤ j)). With
    /// `across_layers` false only the sharing within one layer counts (several needle entries
    /// or pooled needle tokens): one layer's rank has the needle's marginal law otherwise.
    fn over_shared(&self, j: u64, across_layers: bool, g: impl Fn(f64) -> f64) -> f64 {
        let mut laws = Vec::with_capacity(self.model.needle_groups.len());
        let shared = if across_layers { self.model.shared } else { self.model.shared_within_layer() };
        if shared {
            // Many evaluations of one T_j: tabulated (and kept for the next scenario).
            let p = self.prepared(j.max(1), self.needle_law_scale(Some(0.0)));
            let (os, table) = (&p.os, p.table.as_ref());
            let inner = self.inner_integral(table, &mut laws);
            #[cfg(test)]
            let trim = inner.trims(self) && !tests::NO_TRIM.with(|c| c.get());
            #[cfg(not(test))]
            let trim = inner.trims(self);
            let rule = inner.rule();
            let Some((from, to)) = trim.then(|| self.transition(os, &mut laws)).flatten() else {
                return integrate(
                    |z| ln_norm_pdf(z).exp() * g(self.rank_le_at(os, table, rule, z, &mut laws)),
                    -Z_MAX,
                    Z_MAX,
                    &[0.0],
                    TOL_OUTER,
                );
            };
            // Below `from` and above `to` the integrand is φ(z) times a constant (to ~1e-18), and
            // the readout stops moving further inside ([`readout_moves`]): the parts beyond its
            // cuts are the readout at each cut times the normal tail's mass, within 1e-13.
            let mut at = |z: f64| g(self.rank_le_at(os, table, rule, z, &mut laws));
            let ((from, g_from), (to, g_to)) = readout_moves(&mut at, from, to);
            let tails = g_from * crate::stats::norm_cdf(from) + g_to * crate::stats::norm_sf(to);
            // The cuts bracket where the readout moves: panels of thirds of that range resolve
            // it in fewer bisections than halves at z = 0 (110 rather than 130 nodes per integral
            // on the 30-length verdict).
            let thirds = [from + (to - from) / 3.0, from + 2.0 * (to - from) / 3.0];
            tails + integrate(|z| ln_norm_pdf(z).exp() * at(z), from, to, &thirds, TOL_OUTER)
        } else {
            // One evaluation: one adaptive inner integral costs less than a table, and a fit over
            // distractor fields (hard negatives, k) asks for each T_j once.
            g(self.rank_le(&self.order_stat(j.max(1)), None, None, &mut laws))
        }
    }

    /// P(needle attended by enough selecting layers for the readout).
    pub(crate) fn p_attended(&self) -> f64 {
        if self.geometry.always_attended {
            return 1.0;
        }
        if self.geometry.k_eff == 0 || self.model.needle_entries.is_empty() {
            return 0.0;
        }
        let (n, readout) = (self.layers, self.readout);
        self.over_shared(self.geometry.k_eff, true, |a| readout_probability(a, n, readout))
    }

    /// P(exactly m of the scenario's layers select the needle), m = 0..=layers: each layer's
    /// indexer alone (the window and sink are not selections), the layers independent given the
    /// needle's shared component. The likelihood of captured per-layer selections.
    pub fn layer_count_pmf(&self) -> Vec<f64> {
        let n = self.layers as u64;
        let mut out = vec![0.0; n as usize + 1];
        if self.geometry.k_eff == 0 || self.model.needle_entries.is_empty() {
            out[0] = 1.0;
            return out;
        }
        // One integral over the shared component for all m at once: the per-layer selection
        // probability at each z (an inner integral) is the expensive part.
        let shared = self.model.shared;
        let p = if shared {
            self.prepared(self.geometry.k_eff.max(1), self.needle_law_scale(Some(0.0)))
        } else {
            Arc::new(Prepared { os: self.order_stat(self.geometry.k_eff.max(1)), table: None })
        };
        let (os, table) = (&p.os, p.table.as_ref());
        let mut laws = Vec::with_capacity(self.model.needle_groups.len());
        let inner = if shared { self.inner_integral(table, &mut laws) } else { Inner::Table };
        let rule = inner.rule();
        let fill = |a: f64, w: f64, out: &mut [f64]| {
            let a = a.clamp(0.0, 1.0);
            for (m, o) in out.iter_mut().enumerate() {
                *o = w * ln_binom_pmf(n, m as u64, a, 1.0 - a).exp();
            }
        };
        if shared {
            out = integrate_vec(
                |z, o| {
                    let a = self.rank_le_at(os, table, rule, z, &mut laws);
                    fill(a, ln_norm_pdf(z).exp(), o)
                },
                n as usize + 1,
                -Z_MAX,
                Z_MAX,
                &[0.0],
                TOL_OUTER,
            );
        } else {
            let a = self.rank_le(os, table, None, &mut laws);
            fill(a, 1.0, &mut out);
        }
        // Quadrature leaves the total within its tolerance of 1: normalise.
        let total: f64 = out.iter().sum();
        if total > 0.0 {
            out.iter_mut().for_each(|p| *p /= total);
        }
        out
    }

    /// A key that two prepared scenarios share only when every result of this engine (recall,
    /// the rank distribution, the layer-count pmf) is the same for both: the score model and the
    /// geometry's outcome (k, the window and the delivering layers, the needle entries' pooling),
    /// not where the needle sits. Rows of a table that differ only in depth (beyond the window)
    /// evaluate once. Exact: the evaluation reads nothing the key leaves out (an entry's index
    /// is not read, only its pool and needle tokens), and f64s are compared by their bits
    /// ([`crate::scores::key`]).
    pub(crate) fn evaluation_key(&self) -> String {
        let mut key = String::with_capacity(512);
        self.model.put_key_without_index(&mut key);
        let g = &self.geometry;
        put_u64(&mut key, g.k_eff);
        put_tag(&mut key, if g.always_attended { 'Y' } else { 'y' });
        put_f64(&mut key, g.delivered);
        put_u64(&mut key, u64::from(self.layers));
        match self.readout {
            Readout::Any => put_tag(&mut key, 'A'),
            Readout::All => put_tag(&mut key, 'L'),
            Readout::AtLeast(m) => {
                put_tag(&mut key, 'M');
                put_u64(&mut key, u64::from(m));
            }
        }
        put_f64(&mut key, self.p_read);
        put_f64(&mut key, self.p_guess);
        key
    }

    /// P(correct answer) = p_u + (p_read − p_u)·P(attended), p_u the answer's probability when
    /// the selecting layers miss (`Geometry::answer_probability`; p_u is p_guess without
    /// non-selecting layers).
    pub fn recall(&self) -> f64 {
        self.geometry.answer_probability(self.p_read, self.p_guess, self.p_attended()).clamp(0.0, 1.0)
    }

    /// P(rank ≤ j) in one layer: the rank is 1 + the number of candidates scoring above the
    /// needle's best covering entry (the window and sink do not enter it).
    pub fn rank_cdf(&self, j: u64) -> f64 {
        if j == 0 || self.model.needle_entries.is_empty() {
            return 0.0;
        }
        self.over_shared(j, false, |a| a).clamp(0.0, 1.0)
    }

    /// The smallest j with P(rank ≤ j) ≥ p, or `None` when the needle is in no entry.
    pub fn rank_quantile(&self, p: f64) -> Option<u64> {
        if self.model.needle_entries.is_empty() {
            return None;
        }
        let (mut lo, mut hi) = (1u64, self.n_distractors() + 1);
        if self.rank_cdf(lo) >= p {
            return Some(1);
        }
        // Invariant: cdf(lo) < p ≤ cdf(hi).
        while hi - lo > 1 {
            let mid = lo + (hi - lo) / 2;
            if self.rank_cdf(mid) >= p {
                hi = mid;
            } else {
                lo = mid;
            }
        }
        Some(hi)
    }
}

/// P(the needle's best entry scores above t), its entries' laws given by kind with their counts.
#[inline]
fn needle_sf(laws: &[(EntryLaw, f64)], t: f64) -> f64 {
    if let [(law, n)] = laws {
        if *n == 1.0 {
            return law.sf(t);
        }
        if *n <= SUM_FORM_ENTRIES {
            return any_of(law.sf(t), *n);
        }
    }
    let ln_f: f64 = laws.iter().map(|(l, n)| n * l.ln_cdf(t)).sum();
    -ln_f.exp_m1()
}

/// 1 − (1 − q)^n for n ≤ [`SUM_FORM_ENTRIES`] entries each above t with probability q, as
/// q · Σ_{i<n} (1 − q)^i: a sum of positive terms, exact to rounding for every q (no
/// cancellation), and one tail probability instead of a logarithm and an exponential.
#[inline]
fn any_of(q: f64, n: f64) -> f64 {
    if n == 1.0 {
        return q;
    }
    let c = 1.0 - q;
    let (mut sum, mut pow) = (0.0, 1.0);
    for _ in 0..n as u32 {
        sum += pow;
        pow *= c;
    }
    q * sum
}

/// Σ_i P[Bin(n_b, p_b) = i] · P[Bin(n_a, p_a) = m − i]: the pmf of a sum of two binomials at m.
///
/// The terms are log-concave in i (a product of two log-concave sequences), so they rise to one
/// mode and fall. The mode is found by bisection on the ratio of consecutive terms, and the sum
/// walks outwards from it with that ratio (a few flops per term instead of two binomial pmfs),
/// until the terms no longer change the sum. Degenerate probabilities (0 or 1) take the
/// direct sum.
fn sum_pmf(n_a: u64, p_a: f64, q_a: f64, n_b: u64, p_b: f64, q_b: f64, m: u64) -> f64 {
    // A term below half an ulp of the running total leaves it unchanged (round to nearest), and
    // every later one is smaller: stopping there gives the sum of a longer walk bit for bit.
    // Half an ulp is more than 2^-54 of the total (exactly so at the top of a binade).
    sum_pmf_walk(n_a, p_a, q_a, n_b, p_b, q_b, m, f64::EPSILON / 4.0, |_| 1.0)
}

/// Σ_i P[Bin(n_b, p_b) = i] · P[Bin(n_a, p_a) = m − i] · w(i) for a weight w positive and
/// linear in i ([`sum_pmf`]'s walk: a positive linear function is log-concave, so the weighted
/// terms still rise to one mode and fall, and a term below half an ulp of the total is followed
/// by smaller ones).
#[allow(clippy::too_many_arguments)]
fn sum_pmf_weighted(n_a: u64, p_a: f64, q_a: f64, n_b: u64, p_b: f64, q_b: f64, m: u64, w: impl Fn(f64) -> f64) -> f64 {
    sum_pmf_walk(n_a, p_a, q_a, n_b, p_b, q_b, m, f64::EPSILON / 4.0, w)
}

/// [`sum_pmf_weighted`], walking until a weighted term falls below `cut` of the sum (the
/// weight 1: [`sum_pmf`], the same arithmetic, a product by 1 being exact).
#[allow(clippy::too_many_arguments)]
fn sum_pmf_walk(
    n_a: u64,
    p_a: f64,
    q_a: f64,
    n_b: u64,
    p_b: f64,
    q_b: f64,
    m: u64,
    cut: f64,
    w: impl Fn(f64) -> f64,
) -> f64 {
    let lo = m.saturating_sub(n_a);
    let hi = n_b.min(m);
    if lo > hi {
        return 0.0;
    }
    let positive = |x: f64| x.is_finite() && x > 0.0;
    if !(positive(p_a) && positive(q_a) && positive(p_b) && positive(q_b)) || hi - lo < 16 {
        return sum_pmf_direct(n_a, p_a, q_a, n_b, p_b, q_b, m, w);
    }
    let odds = (p_b / q_b) * (q_a / p_a);
    // term(i + 1) / term(i); decreasing in i. One division per term, not two: the walk's cost
    // on a hard-negatives table, whose every node needs two such sums.
    let ratio = |i: u64| {
        let (i, na, nb, m) = (i as f64, n_a as f64, n_b as f64, m as f64);
        (nb - i) * (m - i) * odds / ((i + 1.0) * (na - m + i + 1.0))
    };
    // The mode: the first i in [lo, hi] with ratio(i) < 1 (hi if there is none).
    let (mut a, mut b) = (lo, hi);
    while a < b {
        let mid = a + (b - a) / 2;
        if ratio(mid) < 1.0 {
            b = mid;
        } else {
            a = mid + 1;
        }
    }
    let mode = a;
    let ln_peak = ln_binom_pmf(n_b, mode, p_b, q_b) + ln_binom_pmf(n_a, m - mode, p_a, q_a);
    if ln_peak == f64::NEG_INFINITY || ln_peak.is_nan() {
        return sum_pmf_direct(n_a, p_a, q_a, n_b, p_b, q_b, m, w);
    }
    let mut total = w(mode as f64);
    let mut t = 1.0;
    let mut i = mode;
    while i < hi {
        t *= ratio(i);
        i += 1;
        let term = t * w(i as f64);
        total += term;
        if term < cut * total {
            break;
        }
    }
    let mut t = 1.0;
    let mut i = mode;
    while i > lo {
        t /= ratio(i - 1);
        i -= 1;
        let term = t * w(i as f64);
        total += term;
        if term < cut * total {
            break;
        }
    }
    total * ln_peak.exp()
}

/// [`sum_pmf_weighted`] term by term, each with its own binomial pmfs.
#[allow(clippy::too_many_arguments)]
fn sum_pmf_direct(n_a: u64, p_a: f64, q_a: f64, n_b: u64, p_b: f64, q_b: f64, m: u64, w: impl Fn(f64) -> f64) -> f64 {
    let lo = m.saturating_sub(n_a);
    let hi = n_b.min(m);
    if lo > hi {
        return 0.0;
    }
    let centre = ((n_b as f64 * p_b).round() as u64).clamp(lo, hi);
    // A term from the second binomial's log pmf at i (computed once: it is also the walk's test).
    let term = |ln_b: f64, i: u64| (ln_b + ln_binom_pmf(n_a, m - i, p_a, q_a)).exp() * w(i as f64);
    let ln_b_peak = ln_binom_pmf(n_b, centre, p_b, q_b);
    let mut total = term(ln_b_peak, centre);
    // Walk outwards until the second binomial's pmf is negligible (it bounds every term).
    let mut i = centre;
    while i > lo {
        i -= 1;
        let ln_b = ln_binom_pmf(n_b, i, p_b, q_b);
        if ln_b < ln_b_peak - 40.0 {
            break;
        }
        total += term(ln_b, i);
    }
    let mut i = centre;
    while i < hi {
        i += 1;
        let ln_b = ln_binom_pmf(n_b, i, p_b, q_b);
        if ln_b < ln_b_peak - 40.0 {
            break;
        }
        total += term(ln_b, i);
    }
    total
}

/// Where `h`, increasing on [from, to] (a readout of the selection probability at z), moves
/// enough to matter: ((from', h(from')), (to', h(to'))) with the parts of E[h(Z)] below from'
/// and above to', each counted as h at the cut times the normal tail's mass, within
/// [`TOL_TAIL_CUT`] of their integrals. Below from' h differs from h(from') by at most
/// h(from') − h(from), and the tail's mass is Φ(from'); above to' likewise with Q(to'). A few
/// bisection steps on each side, each one evaluation of h: the outer integral spends about 15
/// per panel, and with many layers the readout saturates well inside the range where the
/// selection probability itself moves.
fn readout_moves(h: &mut impl FnMut(f64) -> f64, from: f64, to: f64) -> ((f64, f64), (f64, f64)) {
    use crate::stats::{norm_cdf, norm_sf};
    let (h_from, h_to) = (h(from), h(to));
    let lower = last_within(h, (from, h_from), to, |z, v| norm_cdf(z) * (v - h_from).abs() <= TOL_TAIL_CUT);
    let upper = last_within(h, (to, h_to), lower.0, |z, v| norm_sf(z) * (h_to - v).abs() <= TOL_TAIL_CUT);
    (lower, upper)
}

/// [`CUT_STEPS`] bisection steps from `good` = (z, h(z)), where `ok` holds, towards `bad`: the
/// point nearest `bad` found where `ok(z, h(z))` holds, with h there.
fn last_within(
    h: &mut impl FnMut(f64) -> f64,
    good: (f64, f64),
    bad: f64,
    ok: impl Fn(f64, f64) -> bool,
) -> (f64, f64) {
    let ((mut z, mut hz), mut bad) = (good, bad);
    for _ in 0..CUT_STEPS {
        let mid = 0.5 * (z + bad);
        let v = h(mid);
        if ok(mid, v) {
            (z, hz) = (mid, v);
        } else {
            bad = mid;
        }
    }
    (z, hz)
}

/// P(readout satisfied) when each of `n` layers attends independently with probability `a`.
pub(crate) fn readout_probability(a: f64, n: u32, readout: Readout) -> f64 {
    let a = a.clamp(0.0, 1.0);
    match readout {
        Readout::Any => -((n as f64) * (-a).ln_1p()).exp_m1(),
        Readout::All => a.powi(n as i32),
        Readout::AtLeast(m) => {
            if m == 0 {
                return 1.0;
            }
            if m > n {
                return 0.0;
            }
            (m..=n).map(|i| ln_binom_pmf(n as u64, i as u64, a, 1.0 - a).exp()).sum::<f64>().min(1.0)
        }
    }
}

/// Exact recall of a validated scenario, or why it has none.
pub fn recall(s: &Scenario) -> Result<f64, NotExact> {
    Ok(Analytic::new(s)?.recall())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scenario::{Distractor, Field};

    thread_local! {
        /// Set by a test: every tabled inner integral runs over the whole table.
        pub(super) static NO_RULES: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
        /// Set by a test: the outer integral runs over the whole range of z.
        pub(super) static NO_TRIM: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
        /// Set by a test: a max-pooled needle is never integrated over its own law
        /// ([`OrderTable::max_side`]), so that a rule of T_j's table serves it where one exists.
        pub(super) static NO_MAX_SIDE: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
        /// Set by a test: [`OrderTable::needle_rule`] checks every table, T_j a step on the
        /// needle law's scale or not.
        pub(super) static NO_SIDE_SKIP: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
    }

    /// The outer integral over the range where the selection probability moves, with the
    /// normal tails' mass beyond it, is the integral over the whole range: stacked rows over
    /// the layer correlation, the needle's separation and spread, and the context length, on
    /// two V4 presets (normal needle laws) and on Quest's pages with needles of 1 to 40 tokens
    /// and hard negatives (max-pooled laws, whose lower cut lies √(2 ln N) sds further out).
    #[test]
    fn the_transition_range_changes_no_recall() {
        let (mut worst, mut trimmed, mut trimmed_max) = (0.0f64, 0, 0);
        let mut check = |s: Scenario, what: &str| {
            let (a, p, mut laws) = at_zero(&s);
            let served = a.inner_integral(p.table.as_ref(), &mut laws).trims(&a);
            if served && a.transition(&p.os, &mut laws).is_some() {
                trimmed += 1;
                trimmed_max += usize::from(matches!(laws[..], [(EntryLaw::Max { .. }, _)]));
            }
            let r = a.recall();
            NO_TRIM.with(|c| c.set(true));
            let full = a.recall();
            NO_TRIM.with(|c| c.set(false));
            worst = worst.max((r - full).abs());
            // Each is an adaptive quadrature to TOL_OUTER (their difference on these rows is at
            // most 9e-12); a tail left out or counted twice would be orders of magnitude more.
            assert!((r - full).abs() <= 2.0 * TOL_OUTER, "{what}: {r} vs {full}");
        };
        for preset in ["deepseek-v4-flash-sglang", "deepseek-v4-pro"] {
            for ctx in ["4000", "22000", "90000"] {
                for corr in ["0.3", "0.9", "0.99", "0.9999"] {
                    for (dprime, sd) in [("0.5", "1"), ("1.5", "1"), ("3", "0.5"), ("-1", "2")] {
                        let mut s = Scenario::preset(preset).unwrap();
                        for (f, v) in [
                            (Field::ContextLen, ctx),
                            (Field::LayerCorr, corr),
                            (Field::Dprime, dprime),
                            (Field::NeedleSd, sd),
                        ] {
                            s.set_text(f, v).unwrap();
                        }
                        check(s, &format!("{preset} {ctx} corr {corr} dprime {dprime} sd {sd}"));
                    }
                }
            }
        }
        for (ctx, corr, dprime, tokens, hard, hard_mean) in [
            (4000, 0.97, 12.6, 16, 0.25, 13.7),
            (8000, 0.97, 12.6, 16, 0.25, 13.7),
            (16000, 0.9956, 6.3, 17, 0.5, 7.0),
            (4000, 0.5, 2.0, 1, 0.0, 2.0),
            (32000, 0.9, 3.0, 40, 0.01, 3.0),
            (8000, 0.0, 1.5, 9, 0.0, 2.0),
        ] {
            let s = hard_row("quest-16", ctx, corr, dprime, tokens, hard, hard_mean);
            check(s, &format!("quest-16 {ctx} corr {corr} dprime {dprime} tokens {tokens} hard {hard}"));
        }
        // Normal needles over their own law first (hard negatives: `OrderTable::side_first`).
        for (ctx, corr, dprime, hard, hard_mean) in
            [(4002, 0.999991137, 4.7737, 1985.0 / 4002.0, 5.4687), (4003, 0.99090456, 4.4710, 2022.0 / 4003.0, 5.3527)]
        {
            let s = hard_row("deepseek-v3.2", ctx, corr, dprime, 16, hard, hard_mean);
            let (a, p, mut laws) = at_zero(&s);
            assert!(matches!(a.inner_integral(p.table.as_ref(), &mut laws), Inner::OwnLaw), "{ctx}: the needle's side");
            check(s, &format!("deepseek-v3.2 {ctx} corr {corr} dprime {dprime} hard {hard}"));
        }
        assert!(trimmed >= 62, "the range was trimmed on {trimmed} rows (largest difference {worst:e})");
        assert!(trimmed_max >= 4, "max-pooled rows trimmed: {trimmed_max}");
    }

    /// The readout's cuts: on readouts of a normal selection probability over many layers
    /// (which saturate well inside the range where the probability moves), each tail counted as
    /// its mass times the readout at the cut is within TOL_TAIL_CUT of its integral (the tail
    /// integrated on its own to 1e-15), the cuts narrow the range, and the expectation from the
    /// cut range and tails is the whole range's.
    #[test]
    fn readout_cuts_keep_the_tails_within_their_bound() {
        use crate::stats::{norm_cdf, norm_sf};
        let phi = |z: f64| ln_norm_pdf(z).exp();
        let mut narrowed = 0;
        for (layers, readout) in [
            (43, Readout::Any),
            (61, Readout::Any),
            (21, Readout::All),
            (43, Readout::AtLeast(5)),
            (2, Readout::Any),
            (1, Readout::Any),
        ] {
            for (shift, slope) in [(-2.0, 1.0), (0.0, 0.7), (1.5, 2.0), (-4.0, 0.5)] {
                let h = |z: f64| readout_probability(norm_cdf(slope * z + shift), layers, readout);
                let (from, to) = (-Z_MAX, Z_MAX);
                let ((a, ha), (b, hb)) = readout_moves(&mut |z| h(z), from, to);
                assert!(from <= a && a <= b && b <= to, "{a} {b}");
                assert_eq!((ha.to_bits(), hb.to_bits()), (h(a).to_bits(), h(b).to_bits()));
                let below = integrate(|z| phi(z) * (h(z) - ha), from, a, &[], 1e-15) + (h(from) - ha) * norm_cdf(from);
                let above = integrate(|z| phi(z) * (h(z) - hb), b, to, &[], 1e-15) + (h(to) - hb) * norm_sf(to);
                assert!(
                    below.abs() <= TOL_TAIL_CUT && above.abs() <= TOL_TAIL_CUT,
                    "{layers} {readout:?} {shift} {slope}: {below:e} {above:e}"
                );
                let cut = ha * norm_cdf(a) + hb * norm_sf(b) + integrate(|z| phi(z) * h(z), a, b, &[0.0], 1e-12);
                let whole = integrate(|z| phi(z) * h(z), from, to, &[0.0], 1e-12);
                assert!((cut - whole).abs() <= 1e-11, "{layers} {readout:?} {shift} {slope}: {cut} vs {whole}");
                narrowed += usize::from(b - a < 0.75 * (to - from));
            }
        }
        assert!(narrowed >= 20, "the range narrowed on {narrowed} of 24 readouts");
    }

    /// The Gauss rules change no recall and no layer-count pmf beyond 1e-12: stacked rows over
    /// the needle's spread, its sharing across layers, repeated needles, hard negatives and
    /// context lengths, each against the same row integrated over every node of T_j's table.
    #[test]
    fn gauss_rules_agree_with_the_whole_table() {
        let mut worst: f64 = 0.0;
        let (mut used, mut needle_side) = (0, 0);
        for preset in ["deepseek-v4-flash-sglang", "deepseek-v3.2"] {
            for (ctx, corr, sd, repeat, hard) in [
                ("16000", "0.5", "1", "1", "0"),
                ("4000", "0.95", "0.3", "1", "0"),
                ("64000", "0.99", "1", "1", "0"),
                ("16000", "0.2", "3", "8", "0"),
                ("22000", "0.7", "0.8", "3", "0.2"),
                ("8000", "0.9", "0.05", "1", "0"),
                ("128000", "0.6", "1.5", "40", "0"),
                ("16000", "1", "1", "1", "0"),
                ("4000", "0.999", "1", "2", "0"),
                ("22000", "0.98", "0.5", "1", "0.3"),
                ("16000", "0.9999", "1", "1", "0"),
                ("4000", "0.99999", "0.5", "2", "0.1"),
            ] {
                let mut s = Scenario::preset(preset).unwrap();
                for (f, v) in [
                    (Field::ContextLen, ctx),
                    (Field::LayerCorr, corr),
                    (Field::NeedleSd, sd),
                    (Field::Repeat, repeat),
                    (Field::HardNegatives, hard),
                    (Field::Dprime, "1.5"),
                ] {
                    s.set_text(f, v).unwrap();
                }
                let (a, p, laws) = at_zero(&s);
                if p.table.as_ref().is_some_and(|t| t.rule_for(&laws).is_some()) {
                    used += 1;
                }
                if p.table.as_ref().is_some_and(|t| t.rule_for(&laws).is_none() && t.needle_side(&laws).is_some()) {
                    needle_side += 1;
                }
                let ((r, pmf), (r0, pmf0)) = with_and_without_rules(&a);
                worst = worst.max((r - r0).abs());
                for (x, y) in pmf.iter().zip(&pmf0) {
                    worst = worst.max((x - y).abs());
                }
                assert!(
                    (r - r0).abs() <= 1e-12,
                    "{preset} {ctx} corr {corr} sd {sd} repeat {repeat} hard {hard}: {r} vs {r0}"
                );
                assert!(
                    pmf.iter().zip(&pmf0).all(|(x, y)| (x - y).abs() <= 1e-12),
                    "{preset} {ctx} corr {corr}: layer-count pmf"
                );
            }
        }
        // The rules are what the rows ran on (not a comparison of the table with itself).
        assert!(used >= 8 && needle_side >= 3, "rules of T_j used on {used} rows, of the needle on {needle_side}");
        assert!(worst <= 1e-12, "{worst}");
    }

    /// With hard negatives a normal needle is integrated over its own law first
    /// ([`OrderTable::side_first`]): on rows a hard-negatives fit visits on DeepSeek-V3.2 (1 to
    /// 18 needle tokens, layer_corr 0.5 to 0.999991, look-alikes from 5% to three quarters of
    /// the candidates, above the needle and below it) recall agrees with the whole table to
    /// 1e-12 and the layer-count pmf to layers × 1e-12, whether the needle's side served or a
    /// rule of the table.
    #[test]
    fn hard_negative_tables_take_the_needle_side_first_and_agree_with_the_whole_table() {
        let mut side = 0;
        // (context, needle sd per layer, dprime, tokens, hard negatives, hard_mean): the first six
        // where the fit of benches/data/probe72_k2048_t16.csv took the needle's side, the rest
        // where it fell back to a rule of the table.
        for (ctx, sd, dprime, tokens, hard, hard_mean) in [
            (4002, 0.002977, 4.7737, 16, 1985.0 / 4002.0, 5.4687),
            (8003, 0.04122, 4.8607, 16, 4050.0 / 8003.0, 5.5356),
            (8003, 0.05942, 5.8654, 16, 3959.0 / 8003.0, 7.0364),
            (4003, 0.1003, 3.9439, 16, 1996.0 / 4003.0, 4.8492),
            (32001, 0.02498, 4.3147, 16, 16073.0 / 32001.0, 4.9888),
            (4003, 0.09537, 4.4710, 16, 2022.0 / 4003.0, 5.3527),
            (16000, 0.0663, 6.3, 16, 0.51, 7.07),
            (64003, 0.0755, 7.66, 18, 0.51, 8.47),
            (4001, 0.1, 3.0, 15, 0.05, 4.0),
            (32002, 0.316, 2.0, 17, 0.2, 1.0),
            (8000, 0.707, 2.5, 1, 0.475, 5.0),
            (64000, 0.447, 10.0, 16, 0.76, 11.0),
        ] {
            let corr = 1.0 - sd * sd;
            let s = hard_row("deepseek-v3.2", ctx, corr, dprime, tokens, hard, hard_mean);
            let (a, p, laws) = at_zero(&s);
            if p.table.as_ref().is_some_and(|t| t.side_first() && t.needle_side(&laws).is_some()) {
                side += 1;
            }
            // Over the whole range of z both (the range's trim is the transition test's).
            NO_TRIM.with(|c| c.set(true));
            let ((r, pmf), (r0, pmf0)) = with_and_without_rules(&a);
            NO_TRIM.with(|c| c.set(false));
            let what = format!("{ctx} corr {corr} dprime {dprime} tokens {tokens} hard {hard} at {hard_mean}");
            assert!((r - r0).abs() <= 1e-12, "{what}: {r} vs {r0}");
            // The pmf of n layers moves by at most n times the per-layer probability's change.
            let layers = pmf.len() as f64 - 1.0;
            assert!(pmf.iter().zip(&pmf0).all(|(x, y)| (x - y).abs() <= layers * 1e-12), "{what}: layer-count pmf");
        }
        assert!(side >= 4, "the needle's side served {side} of 12 rows");
    }

    /// [`NEEDLE_SIDE_MIN_SCALE`] skips only checks that fail: on hard-negatives rows of
    /// DeepSeek-V3.2 (4K to 64K candidates, 1 to 20 needle entries, look-alikes from 5% to three
    /// quarters of the candidates below, near and above the needle, needles sharp and broad),
    /// no rule of the needle's law is found for any table whose T_j is narrower than that
    /// fraction of the needle law's sd, and the skip spares most failing checks.
    #[test]
    fn needle_side_skips_only_checks_that_fail() {
        let (mut skipped, mut failed, mut passed) = (0, 0, 0);
        NO_SIDE_SKIP.with(|c| c.set(true));
        for ctx in [4003, 16001, 64000] {
            for tokens in [1, 2, 5, 16, 20] {
                for (hard, offset) in [(0.05, 1.0), (0.25, -1.0), (0.5, 0.8), (0.75, 3.0), (0.5, 0.0)] {
                    for (dprime, sd) in [(3.0, 0.05), (6.0, 0.3), (4.5, 0.01)] {
                        let corr = 1.0 - sd * sd;
                        let s = hard_row("deepseek-v3.2", ctx, corr, dprime, tokens, hard, dprime + offset);
                        let (_, p, laws) = at_zero(&s);
                        let Some(t) = p.table.as_ref() else { continue };
                        let (Some(width), [(EntryLaw::Gauss { .. }, c)]) = (t.width, laws.as_slice()) else {
                            continue;
                        };
                        let law = gauss_rule::max_of_normals(*c as u32);
                        let sd = 4.0 * width;
                        let found = t.needle_rule(&law, sd).is_some();
                        let scale = t.side_scale(&law, sd);
                        let what = format!("{ctx} tokens {tokens} hard {hard} at +{offset} dprime {dprime} sd {sd}");
                        if scale < NEEDLE_SIDE_MIN_SCALE {
                            assert!(!found, "{what}: a rule at scale {scale}");
                            skipped += 1;
                        } else if found {
                            passed += 1;
                        } else {
                            failed += 1;
                        }
                    }
                }
            }
        }
        NO_SIDE_SKIP.with(|c| c.set(false));
        assert!(skipped >= 2 * failed && passed >= 10, "skipped {skipped}, failed unskipped {failed}, passed {passed}");
    }

    /// `preset` with a needle of `tokens` tokens at `dprime`, `corr` of its score shared across
    /// layers and tokens, and hard negatives (`hard`, at `hard_mean`): a hard-negatives fit's row.
    fn hard_row(preset: &str, ctx: u64, corr: f64, dprime: f64, tokens: u64, hard: f64, hard_mean: f64) -> Scenario {
        Scenario {
            context_len: ctx,
            layer_corr: corr,
            dprime,
            needle_tokens: tokens,
            hard_negatives: hard,
            hard_mean,
            ..Scenario::preset(preset).unwrap()
        }
    }

    /// `s` validated and prepared: its engine, T_j's table at its k, and the needle's laws at z = 0.
    fn at_zero(s: &Scenario) -> (Analytic, Arc<Prepared>, Vec<(EntryLaw, f64)>) {
        s.validate().unwrap();
        let a = Analytic::new(s).unwrap();
        let p = a.prepared(a.geometry.k_eff.max(1), a.needle_law_scale(Some(0.0)));
        let mut laws = Vec::new();
        a.needle_laws(Some(0.0), &mut laws);
        (a, p, laws)
    }

    /// Recall and layer-count pmf as `a` computes them, and over the whole table (no rule of T_j,
    /// no integral over the needle's side): the reference every shortcut is checked against.
    fn with_and_without_rules(a: &Analytic) -> ((f64, Vec<f64>), (f64, Vec<f64>)) {
        let fast = (a.recall(), a.layer_count_pmf());
        NO_RULES.with(|c| c.set(true));
        let whole = (a.recall(), a.layer_count_pmf());
        NO_RULES.with(|c| c.set(false));
        (fast, whole)
    }

    /// Max-pooled needles (Quest's pages): the rule checked on the law's own family integrates
    /// every needle the fits ask for, from sharp (needle_sd at the table's resolution) to broad,
    /// as the whole table does, to 1e-12, and so does the needle's own law
    /// ([`OrderTable::max_side`], tried first) where it serves: most rows have a rule of the
    /// table, three of the seven one of the needle's law.
    #[test]
    fn max_pooled_needle_rules_agree_with_the_whole_table() {
        let (mut rule_rows, mut side_rows, mut rows) = (0, 0, 0);
        for (ctx, k, corr, sd, dprime) in [
            (10000, 2, 0.26, 0.29, 3.0),
            (10000, 4, 0.0, 1.0, 1.8),
            (10000, 32, 0.5, 0.1, 3.5),
            (10000, 16, 0.9, 2.5, 5.0),
            (32000, 64, 0.3, 0.5, 2.0),
            (10000, 8, 0.99, 7.0, 10.0),
            (4000, 3, 0.7, 0.05, 2.5),
        ] {
            let s = Scenario {
                context_len: ctx,
                index_topk: k,
                layer_corr: corr,
                needle_sd: sd,
                dprime,
                ..Scenario::preset("quest-16").unwrap()
            };
            let (a, p, laws) = at_zero(&s);
            assert!(matches!(laws[..], [(EntryLaw::Max { .. }, _)]), "{laws:?}");
            let table = p.table.as_ref();
            rule_rows += table.is_some_and(|t| t.rule_for(&laws).is_some()) as u32;
            side_rows += table.is_some_and(|t| t.max_side(&laws).is_some()) as u32;
            rows += 1;
            for side in [false, true] {
                NO_MAX_SIDE.with(|c| c.set(!side));
                let ((r, pmf), (r0, pmf0)) = with_and_without_rules(&a);
                NO_MAX_SIDE.with(|c| c.set(false));
                assert!((r - r0).abs() <= 1e-12, "{ctx} k {k} corr {corr} sd {sd} side {side}: {r} vs {r0}");
                assert!(
                    pmf.iter().zip(&pmf0).all(|(x, y)| (x - y).abs() <= 1e-12),
                    "{ctx} k {k} corr {corr} sd {sd} side {side}: layer-count pmf"
                );
            }
        }
        assert!(rule_rows * 2 > rows, "a max-pooled rule on {rule_rows} of {rows} rows");
        assert!(side_rows >= 3, "the needle's own law on {side_rows} of {rows} rows");
    }

    /// A max-pooled needle broader than the table's sharp range, integrated over its own law
    /// with a rule checked at its sharpness class ([`OrderTable::max_side`]; where no rule of
    /// the needle's law agrees to TOL_RULE, to TOL_SIDE_RULE), gives P(rank ≤ j | z) within
    /// TOL_SIDE_RULE of the whole table at every z, and the recall and layer-count pmf within
    /// the readout's amplification of it (recall moves at most `layers` times P): the regimes
    /// a hard-negatives fit visits (a quarter or half of the pages far above the needle's
    /// mean, T_j among few pages, layer_corr from 0 to near 1), and ordinary broad needles over
    /// one and two pages; where neither the needle's law nor the table has a rule, the whole
    /// table serves and the comparison is with itself.
    #[test]
    fn broad_max_pooled_needles_on_their_own_law_agree_with_the_whole_table() {
        let (mut broad, mut loose, mut rows) = (0, 0, 0);
        for (ctx, corr, sd, dprime, tokens, hard, hard_mean, depth) in [
            (4000, 0.97, 1.0, 12.6, 16, 0.25, 13.7, 0.1),
            (8000, 0.97, 1.0, 12.6, 16, 0.25, 13.7, 0.5),
            (4000, 0.9956, 1.0, 6.3, 16, 0.5, 7.1, 0.9),
            (2000, 0.8, 1.0, 5.0, 18, 0.3, 6.0, 0.5),
            (8000, 0.0, 1.0, 2.0, 16, 0.0, 2.0, 0.5),
            (16000, 0.5, 1.5, 3.0, 1, 0.0, 2.0, 0.3),
            (10000, 0.9, 2.0, 4.0, 9, 0.01, 3.0, 0.77),
            (2000, 0.7, 1.0, 6.3, 16, 0.5, 7.1, 0.5),
            (4000, 0.7, 1.0, 12.6, 16, 0.25, 13.7, 0.5),
            (2000, 0.0, 1.0, 6.3, 16, 0.5, 7.1, 0.5),
        ] {
            let s = Scenario {
                context_len: ctx,
                index_topk: 64,
                layer_corr: corr,
                needle_sd: sd,
                dprime,
                needle_tokens: tokens,
                hard_negatives: hard,
                hard_mean,
                depth,
                ..Scenario::preset("quest-16").unwrap()
            };
            let (a, p, mut laws) = at_zero(&s);
            let (os, table) = (&p.os, p.table.as_ref().unwrap());
            let [(EntryLaw::Max { needle_sd, .. }, _)] = laws[..] else { panic!("{laws:?}") };
            rows += 1;
            if table.side_class(needle_sd).is_some_and(|c| c > 0) && table.max_side(&laws).is_some() {
                broad += 1;
                loose += usize::from(table.any_loose_side_rule());
            }
            for z in [-3.0, -1.5, -0.5, 0.0, 0.5, 1.0, 2.0, 3.5] {
                let fast = a.rank_le(os, Some(table), Some(z), &mut laws);
                NO_RULES.with(|c| c.set(true));
                let whole = a.rank_le(os, Some(table), Some(z), &mut laws);
                NO_RULES.with(|c| c.set(false));
                assert!((fast - whole).abs() <= TOL_SIDE_RULE, "{ctx} corr {corr} z {z}: {fast} vs {whole}");
            }
            let ((r, pmf), (r0, pmf0)) = with_and_without_rules(&a);
            let bound = a.layers as f64 * TOL_SIDE_RULE;
            assert!((r - r0).abs() <= bound, "{ctx} corr {corr} tokens {tokens}: {r} vs {r0}");
            assert!(
                pmf.iter().zip(&pmf0).all(|(x, y)| (x - y).abs() <= bound),
                "{ctx} corr {corr} tokens {tokens}: layer-count pmf"
            );
        }
        assert!(broad >= 2, "a broad class on {broad} of {rows} rows");
        assert!(loose >= 1, "the looser agreement on {loose} rows");
    }

    /// A max-pooled needle across pages is one entry pooling all its pages' tokens (the laws'
    /// product is one law): the same recall and layer-count pmf as the pages integrated as
    /// separate groups, to 1e-9 (the engine's 1e-6 three orders over), at needles of one to
    /// forty tokens starting anywhere in a page, with and without a shared component.
    #[test]
    fn a_needle_across_pages_is_one_max_pooled_entry() {
        let mut several = 0;
        for (needle_tokens, depth, corr, sd, hard) in [
            (16, 0.5, 0.0, 1.0, 0.0),
            (16, 0.3137, 0.4, 0.5, 0.0),
            (9, 0.77, 0.9, 1.0, 0.001),
            (40, 0.1, 0.2, 2.0, 0.0),
            (2, 0.5, 0.0, 1.0, 0.0),
            (17, 0.9, 0.99, 1.0, 0.0),
        ] {
            for l in [4000u64, 8191, 20011] {
                let s = Scenario {
                    context_len: l,
                    index_topk: 16,
                    needle_tokens,
                    depth,
                    layer_corr: corr,
                    needle_sd: sd,
                    hard_negatives: hard,
                    dprime: 2.5,
                    ..Scenario::preset("quest-16").unwrap()
                };
                s.validate().unwrap();
                let merged = Analytic::new(&s).unwrap();
                assert_eq!(merged.model.needle_groups.len(), 1);
                let pages = merged.clone().grouped_by_entry_kind();
                several += (pages.model.needle_groups.len() > 1) as u32;
                let (a, b) = (merged.recall(), pages.recall());
                assert!((a - b).abs() <= 1e-9, "{needle_tokens} tokens at {depth} of {l}: {a} against {b}");
                for (x, y) in merged.layer_count_pmf().iter().zip(pages.layer_count_pmf()) {
                    assert!((x - y).abs() <= 1e-9, "{needle_tokens} tokens at {depth} of {l}: pmf");
                }
            }
        }
        // The comparison is between different groupings on most cases, not one path with itself.
        assert!(several >= 10, "{several}");
    }

    /// A max-pooled needle too sharp for a rule of T_j's table (layer_corr near 1) or a point
    /// mass given z (layer_corr 1, or needle_sd 0 with a shared component): P(rank ≤ j | z)
    /// integrated over the needle's law is the whole table's sum (a jump panel integrated
    /// adaptively), to 1e-12; across needles spanning one and two pages, hard negatives, Gumbel
    /// tokens, and needle means anywhere in T_j's support. And it is what those rows ran on.
    #[test]
    fn sharp_max_pooled_needles_agree_with_the_whole_table() {
        let (mut used, mut rows) = (0, 0);
        for (ctx, k, corr, sd, dprime, needle_tokens, hard, distractor) in [
            (10000, 4, 1.0, 1.0, 3.0, 16, 0.0, Distractor::Normal),
            (10000, 16, 1.0, 0.5, 2.0, 9, 0.0, Distractor::Normal),
            (32000, 64, 0.6, 0.0, 2.5, 16, 0.0, Distractor::Normal),
            (8000, 8, 1.0, 1.0, 3.5, 20, 0.002, Distractor::Normal),
            (16000, 32, 1.0, 1.0, 4.0, 5, 0.0, Distractor::Gumbel),
            (4000, 3, 1.0, 2.0, 1.0, 1, 0.0, Distractor::Normal),
            (64000, 64, 0.999, 1.0, 3.0, 16, 0.0, Distractor::Normal),
            (16000, 64, 0.9995, 1.0, 2.5, 17, 0.001, Distractor::Normal),
            (8000, 16, 0.998, 1.5, 2.0, 2, 0.0, Distractor::Gumbel),
            (32000, 8, 0.9999, 1.0, 4.0, 40, 0.0, Distractor::Normal),
        ] {
            let s = Scenario {
                context_len: ctx,
                index_topk: k,
                layer_corr: corr,
                needle_sd: sd,
                dprime,
                needle_tokens,
                hard_negatives: hard,
                distractor,
                ..Scenario::preset("quest-16").unwrap()
            };
            let (a, p, laws) = at_zero(&s);
            let table = p.table.as_ref().unwrap();
            assert!(matches!(laws[..], [(EntryLaw::Max { .. }, _)]), "{laws:?}");
            used += (table.rule_for(&laws).is_none() && table.max_side(&laws).is_some()) as u32;
            rows += 1;
            let ((r, pmf), (r0, pmf0)) = with_and_without_rules(&a);
            assert!((r - r0).abs() <= 1e-12, "{ctx} k {k} corr {corr} sd {sd} tokens {needle_tokens}: {r} vs {r0}");
            assert!(
                pmf.iter().zip(&pmf0).all(|(x, y)| (x - y).abs() <= 1e-12),
                "{ctx} k {k} corr {corr} sd {sd}: layer-count pmf"
            );
            // Not a value at the ends, where any path gives 0 or 1.
            assert!(r > 1e-6 && r < 1.0 - 1e-6, "{ctx} k {k}: recall {r}");
        }
        assert_eq!(used, rows, "the needle's side on {used} of {rows} rows");
    }

    /// The max-pooled rule with its kept distractor parts is the rule on `needle_sf`, bit for
    /// bit, and so is the survival at the whole table's nodes from their kept parts: at many
    /// needle means and sds, one and several entries, a point-mass needle token, the Gumbel and
    /// Student-t token laws.
    #[test]
    fn max_rule_parts_integrate_as_needle_sf_does() {
        let (mut compared, mut table_nodes) = (0, 0);
        for (distractor, needle_tokens, repeat) in [
            (Distractor::Normal, 1, 1),
            (Distractor::Normal, 1, 3),
            (Distractor::Gumbel, 2, 1),
            (Distractor::StudentT(6.0), 1, 2),
        ] {
            let s = Scenario {
                context_len: 10000,
                index_topk: 8,
                layer_corr: 0.3,
                needle_sd: 0.4,
                distractor,
                needle_tokens,
                repeat,
                ..Scenario::preset("quest-16").unwrap()
            };
            let (_, p, laws) = at_zero(&s);
            let table = p.table.as_ref().unwrap();
            let [(EntryLaw::Max { token, n_dist, n_needle, .. }, entries)] = laws[..] else { panic!("{laws:?}") };
            for i in 0..200 {
                let needle_mean = -2.0 + 0.05 * i as f64;
                for needle_sd in [0.2, 0.4, 1.3, 0.0] {
                    let laws = [(EntryLaw::Max { token, n_dist, n_needle, needle_mean, needle_sd }, entries)];
                    let Some(rule) = table.rule_for(&laws) else { continue };
                    let (same, parts) = table.max_rule_parts(&laws).unwrap();
                    assert!(std::ptr::eq(rule, same));
                    let got = integrate_max_needle(rule, &parts, &laws[0].0, entries);
                    assert_eq!(
                        got.to_bits(),
                        rule.integrate(|t| needle_sf(&laws, t)).to_bits(),
                        "{distractor} mean {needle_mean} sd {needle_sd}"
                    );
                    compared += 1;
                }
                // The whole table's nodes, for needles too sharp for a rule as well.
                let parts = table.max_table_parts(&laws[0].0).unwrap();
                assert_eq!(parts.len(), table.fine().t.len());
                for needle_sd in [0.001, 0.05, 0.4, 0.0] {
                    let law = EntryLaw::Max { token, n_dist, n_needle, needle_mean, needle_sd };
                    let laws = [(law, entries)];
                    for (&t, &part) in table.fine().t.iter().zip(parts.iter()).step_by(7) {
                        assert_eq!(
                            max_needle_sf(part, t, &law, entries).to_bits(),
                            needle_sf(&laws, t).to_bits(),
                            "{distractor} mean {needle_mean} sd {needle_sd} t {t}"
                        );
                        table_nodes += 1;
                    }
                }
            }
        }
        assert!(compared >= 1000 && table_nodes > 100_000, "{compared} {table_nodes}");
    }

    /// The hard-negatives density as one weighted walk equals the two sums it replaced (one per
    /// kind of the j-th entry), for few and many hard negatives, below and above the regular
    /// distractors, j from 1 to beyond the hard count: to 1e-13 of the largest density over a
    /// grid from 6 sds below the distractors to far above the hard ones (what a table's
    /// integral sees), and to 1e-13 relative wherever the density is within 1e-6 of it (the
    /// bulk; further out the two differ by the rounding of ln of a binomial pmf deep in its
    /// tail, ~1e-12 relative at densities of e^-400).
    #[test]
    fn one_walk_hard_density_is_the_two_sums() {
        for (n_regular, n_hard) in [(7_999, 1), (6_000, 2_000), (4_000, 4_000), (31_000, 32_000), (200, 30)] {
            for hard_mean in [-1.0, 1.5, 4.0, 8.7] {
                for j in [1, 2, 64, 2048] {
                    if j > n_regular + n_hard {
                        continue;
                    }
                    let d = OrderDensity {
                        distractor: EntryLaw::Gauss { mean: 0.0, sd: 1.0 },
                        hard: EntryLaw::Gauss { mean: hard_mean, sd: 1.0 },
                        n_regular,
                        n_hard,
                        j,
                    };
                    let values: Vec<(f64, f64, f64)> = (0..=400)
                        .map(|i| {
                            let t = -6.0 + 0.05 * i as f64;
                            let g = |law: &EntryLaw| law.sf_cdf_ln_pdf(t);
                            let two = d.ln_two_sums(g(&d.distractor), g(&d.hard)).exp();
                            (t, d.at(t), if two.is_nan() { 0.0 } else { two })
                        })
                        .collect();
                    let peak = values.iter().map(|v| v.2).fold(0.0, f64::max);
                    assert!(peak > 0.0, "n {n_regular}+{n_hard}, j {j}: no density on the grid");
                    for &(t, one, two) in &values {
                        let case = format!("n {n_regular}+{n_hard}, hard mean {hard_mean}, j {j}, t {t}");
                        assert!((one - two).abs() <= 1e-13 * peak, "{case}: {one} against {two} (peak {peak})");
                        if two >= 1e-6 * peak {
                            assert!((one - two).abs() <= 1e-13 * two, "{case}: {one} against {two}");
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn sum_of_binomials_pmf_matches_direct_convolution() {
        for &(n_a, p_a, n_b, p_b) in
            &[(1000u64, 0.01, 50u64, 0.3), (100_000, 0.002, 95_000, 0.0015), (20, 0.5, 20, 0.5), (5000, 0.2, 3, 0.9)]
        {
            let mean = n_a as f64 * p_a + n_b as f64 * p_b;
            for m in [0u64, 1, (mean * 0.5) as u64, mean as u64, (mean * 1.5) as u64 + 3] {
                let direct: f64 = (0..=n_b.min(m))
                    .filter(|&i| m - i <= n_a)
                    .map(|i| (ln_binom_pmf(n_b, i, p_b, 1.0 - p_b) + ln_binom_pmf(n_a, m - i, p_a, 1.0 - p_a)).exp())
                    .sum();
                let fast = sum_pmf(n_a, p_a, 1.0 - p_a, n_b, p_b, 1.0 - p_b, m);
                assert!(
                    (fast - direct).abs() <= 1e-12 * direct.max(1e-300) + 1e-300,
                    "{n_a} {p_a} {n_b} {p_b} m={m}: {fast} vs {direct}"
                );
            }
        }
    }
}

#[cfg(test)]
mod sum_pmf_tests {
    use super::*;

    /// The exact convolution, every term.
    fn brute(n_a: u64, p_a: f64, n_b: u64, p_b: f64, m: u64) -> f64 {
        (0..=n_b.min(m))
            .filter(|&i| m - i <= n_a)
            .map(|i| (ln_binom_pmf(n_b, i, p_b, 1.0 - p_b) + ln_binom_pmf(n_a, m - i, p_a, 1.0 - p_a)).exp())
            .sum()
    }

    #[test]
    fn the_ratio_walk_matches_the_full_sum() {
        let mut worst: f64 = 0.0;
        for &(n_a, n_b) in &[(1000u64, 10u64), (50, 5000), (20000, 20000), (100000, 300), (7, 40)] {
            for &p_a in &[1e-6, 1e-3, 0.02, 0.3, 0.9] {
                for &p_b in &[1e-5, 0.01, 0.4, 0.999] {
                    let mean = n_a as f64 * p_a + n_b as f64 * p_b;
                    let sd = (n_a as f64 * p_a * (1.0 - p_a) + n_b as f64 * p_b * (1.0 - p_b)).sqrt();
                    for &k in &[-3.0, -1.0, 0.0, 0.5, 2.0, 6.0] {
                        let m = (mean + k * sd).round().max(0.0) as u64;
                        let want = brute(n_a, p_a, n_b, p_b, m);
                        let got = sum_pmf(n_a, p_a, 1.0 - p_a, n_b, p_b, 1.0 - p_b, m);
                        // Stopping where the terms no longer change the sum: the longer walk's sum.
                        let longer = sum_pmf_walk(n_a, p_a, 1.0 - p_a, n_b, p_b, 1.0 - p_b, m, 1e-30, |_| 1.0);
                        assert_eq!(got.to_bits(), longer.to_bits(), "n_a {n_a} p_a {p_a} n_b {n_b} p_b {p_b} m {m}");
                        let err = (got - want).abs() / want.max(1e-300);
                        if want > 1e-250 {
                            assert!(err < 1e-9, "n_a {n_a} p_a {p_a} n_b {n_b} p_b {p_b} m {m}: {got} vs {want}");
                        }
                        worst = worst.max(if want > 1e-250 { err } else { 0.0 });
                    }
                }
            }
        }
        assert!(worst < 1e-9, "{worst}");
    }
}
