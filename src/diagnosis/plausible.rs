//! Which fitted hypotheses count as explanations a person could act on (docs/model.md#plausible).
//!
//! A hypothesis belongs to one [`Family`]: a working indexer (the physical calls' explanations),
//! the model's own reading (read-limited), a defect (implementation-suspect) or the random
//! indexer (the least favourable working indexer: the null of the defect evidence, never an
//! explanation by itself). A physical fit is a **working explanation** only when its estimates
//! are values a working indexer and model produce ([`implausibility`] says why not otherwise):
//! a fit that needs a separation below 0, hard negatives far above the needle, an estimate on an
//! arbitrary search bound, or a model that stops reading far inside its trained window with no
//! row measuring that, explains the table only by assuming a defect under another name.

use crate::calibrate::{Family, HypothesisResult};
use crate::scenario::Scenario;

/// Largest separation (distractor sd) a working indexer is credited with: the seed
/// investigation's bf16 indexer ranked the needle 1st–3rd of 22K candidates, about dprime 4;
/// beyond 12 every needle would rank first at any length a model serves.
pub(crate) const MAX_DPRIME: f64 = 12.0;
/// Largest query-to-query spread of the needle's separation (distractor sd).
pub(crate) const MAX_NEEDLE_SD: f64 = 3.0;
/// Largest fraction of look-alike distractors: beyond half, the "needle" is not distinguishable
/// from the haystack by any content.
pub(crate) const MAX_HARD_FRACTION: f64 = 0.5;
/// How far above the needle's own separation a look-alike may score: a "look-alike" scoring far
/// above the needle is a better match, not a hard negative.
pub(crate) const MAX_HARD_ABOVE_NEEDLE: f64 = 3.0;
/// A fitted separation this far below 0 is the random indexer's within the fit's resolution
/// (one trial a cell moves dprime by more); below it the fit ranks the needle below a typical
/// distractor.
pub(crate) const DPRIME_RESOLUTION: f64 = 0.1;
/// Goodness-of-fit p-value below which an explanation fits the table too badly to support a
/// prescription (or an error rate simulated from it).
pub(crate) const MIN_GOF_P: f64 = 0.01;
/// A model's read rate collapses only near the end of its trained window: a steep read-decline
/// whose L50 lies below this fraction of the trained window is not an explanation (a model
/// trained to 128K that stops reading at 4K is broken, not long-context-limited).
pub(crate) const MIN_L50_OF_WINDOW: f64 = 0.5;
/// Significance at which a dense table's needles lost far inside the trained window reject a
/// model that reads even half of them (the evidence a collapse there needs besides its fit).
pub(crate) const COLLAPSE_ALPHA: f64 = 0.01;
/// A read-decline this steep is a collapse: the read rate falls from 0.9 to 0.1 within a factor
/// 81^(1/8) ≈ 1.73 of context length.
pub(crate) const STEEP_FALL: f64 = 8.0;

/// What the plausibility of a fit depends on besides its estimates.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct TableFacts {
    /// The context window the model was trained to (rope_orig_len × rope_factor of the scenario).
    pub(crate) trained_window: u64,
}

impl TableFacts {
    /// The facts of the scenario a table is diagnosed on.
    pub(crate) fn of(base: &Scenario) -> Self {
        let trained_window = (base.rope_orig_len as f64 * base.rope_factor.max(1.0)).round() as u64;
        TableFacts { trained_window }
    }
}

/// Why a fitted hypothesis is not a working explanation (None: it is one). Defects and the
/// random indexer are never working explanations.
pub(crate) fn implausibility(h: &HypothesisResult, facts: &TableFacts) -> Option<String> {
    match h.hypothesis.family() {
        Family::Defect => return Some("a defect, not a working indexer".into()),
        Family::Random => return Some("the random indexer (dprime = 0) is no better than chance".into()),
        _ => {}
    }
    if let Some(p) = h.on_bound.first() {
        return Some(format!("its {p} lies on a search bound"));
    }
    let est = |n: &str| h.estimate(n);
    if let Some(d) = est("dprime") {
        if d < -DPRIME_RESOLUTION {
            return Some(format!("dprime {d:.2} ranks the needle below a typical distractor"));
        }
        if d > MAX_DPRIME {
            return Some(format!("dprime {d:.2} is beyond what an indexer reaches ({MAX_DPRIME})"));
        }
    }
    if let Some(sd) = est("needle_sd").filter(|&v| v > MAX_NEEDLE_SD) {
        return Some(format!("needle_sd {sd:.2} is beyond {MAX_NEEDLE_SD}"));
    }
    if let Some(f) = est("hard_negatives").filter(|&v| v > MAX_HARD_FRACTION) {
        return Some(format!("hard_negatives {f:.2} is beyond {MAX_HARD_FRACTION} of the candidates"));
    }
    if let (Some(m), Some(d)) = (est("hard_mean"), est("dprime")) {
        if est("hard_negatives").is_some_and(|f| f > 0.0) && m > d.max(0.0) + MAX_HARD_ABOVE_NEEDLE {
            return Some(format!(
                "hard negatives {m:.2} sd above the distractors score far above the needle itself ({d:.2})"
            ));
        }
    }
    if let (Some(l), Some(slope)) = (est(crate::calibrate::hypotheses::READ_L50), est("read_slope")) {
        if let Some(why) = collapse_inside_window(10f64.powf(l), slope, facts) {
            return Some(why);
        }
    }
    if let Some(p) = h.gof_p.filter(|&p| p < MIN_GOF_P) {
        return Some(format!("it fits the table poorly (goodness of fit p = {p:.1e})"));
    }
    None
}

/// Why a read rate halving at `l50` with steepness `slope` is no model's own limit: a collapse
/// (slope ≥ [`STEEP_FALL`]) far inside the trained window ([`MIN_L50_OF_WINDOW`]). A gradual
/// decline is what models do on hard tasks well inside their window; a cliff there is a bug.
pub(crate) fn collapse_inside_window(l50: f64, slope: f64, facts: &TableFacts) -> Option<String> {
    let window = facts.trained_window as f64;
    (slope >= STEEP_FALL && l50 < MIN_L50_OF_WINDOW * window).then(|| {
        format!(
            "its read rate collapses at {l50:.0} tokens, far inside the trained window ({} tokens)",
            facts.trained_window
        )
    })
}

/// Whether `h` puts the needle below the random-indexer floor without a defect: the floor assumes
/// a selected needle is read and nothing outscores the needle by content, so the model's own
/// reading (read-failure, read-decline) and look-alikes scoring above the needle (hard negatives
/// with `hard_mean` above `dprime`, as multi-key tasks have) each break it.
pub(crate) fn breaks_floor(h: &HypothesisResult) -> bool {
    match h.hypothesis.family() {
        Family::Read => true,
        Family::Working => match (h.estimate("hard_negatives"), h.estimate("hard_mean"), h.estimate("dprime")) {
            (Some(f), Some(m), Some(d)) => f > 0.0 && m > d,
            _ => false,
        },
        Family::Defect | Family::Random => false,
    }
}

/// Whether `h` is a working explanation (a working indexer or the model's reading, plausible).
pub(crate) fn is_explanation(h: &HypothesisResult, facts: &TableFacts) -> bool {
    implausibility(h, facts).is_none()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::calibrate::Hypothesis::{self, *};

    fn fit(hypothesis: Hypothesis, est: &[(&str, f64)]) -> HypothesisResult {
        HypothesisResult {
            hypothesis,
            fixed: vec![],
            estimates: est.iter().map(|(n, v)| (n.to_string(), *v)).collect(),
            on_bound: vec![],
            loglik: 0.0,
            k: est.len(),
            aic: 0.0,
            delta_aic: 0.0,
            weight: 0.0,
            deviance: 0.0,
            gof_p: Some(0.5),
            fitted: vec![],
        }
    }

    const V32: TableFacts = TableFacts { trained_window: 163_840 };

    /// The ranges of docs/model.md#plausible, each at both sides of its edge.
    #[test]
    fn each_range_at_its_edges() {
        let ok = |h: &HypothesisResult| implausibility(h, &V32).is_none();
        assert!(ok(&fit(Discrimination, &[("dprime", 2.5)])));
        assert!(ok(&fit(Discrimination, &[("dprime", -0.09)])));
        assert!(!ok(&fit(Discrimination, &[("dprime", -0.11)])));
        assert!(ok(&fit(Discrimination, &[("dprime", 12.0)])));
        assert!(!ok(&fit(Discrimination, &[("dprime", 12.1)])));
        assert!(!ok(&fit(DiscriminationWithSpread, &[("dprime", 2.0), ("needle_sd", 3.1)])));
        assert!(ok(&fit(DiscriminationWithSpread, &[("dprime", 2.0), ("needle_sd", 2.9)])));
        assert!(!ok(&fit(HardNegatives, &[("dprime", 2.5), ("hard_negatives", 0.47), ("hard_mean", 11.1)])));
        assert!(ok(&fit(HardNegatives, &[("dprime", 2.5), ("hard_negatives", 0.2), ("hard_mean", 5.4)])));
        assert!(!ok(&fit(HardNegatives, &[("dprime", 2.5), ("hard_negatives", 0.6), ("hard_mean", 2.0)])));
        let mut bound = fit(Discrimination, &[("dprime", 2.0)]);
        bound.on_bound = vec!["needle_sd".into()];
        assert!(!ok(&bound));
        let mut poor = fit(Discrimination, &[("dprime", 2.0)]);
        poor.gof_p = Some(0.005);
        assert!(!ok(&poor));
        // A read-rate collapse at 4K on a model trained to 160K is no model's limit; a gradual
        // decline there, or a collapse near the window, is.
        let l = |x: f64| x.log10();
        assert!(!ok(&fit(ReadDecline, &[("log10_read_l50", l(4000.0)), ("read_slope", 40.0), ("dprime", 3.0)])));
        assert!(ok(&fit(ReadDecline, &[("log10_read_l50", l(4000.0)), ("read_slope", 2.0), ("dprime", 3.0)])));
        assert!(ok(&fit(ReadDecline, &[("log10_read_l50", l(150_000.0)), ("read_slope", 40.0), ("dprime", 3.0)])));
        // Defects and the random indexer are never working explanations.
        assert!(!ok(&fit(CandidateCountLimit, &[("dprime", 2.0)])));
        assert!(!ok(&fit(RandomIndexer, &[])));
    }

    /// The floor's premises: a selected needle is read, and nothing outscores it by content.
    #[test]
    fn what_breaks_the_floor() {
        assert!(breaks_floor(&fit(ReadFailure, &[("p_read", 0.5), ("dprime", 3.0)])));
        assert!(breaks_floor(&fit(ReadDecline, &[("log10_read_l50", 5.0), ("read_slope", 2.0)])));
        let hard = |m: f64| fit(HardNegatives, &[("dprime", 3.0), ("hard_negatives", 0.05), ("hard_mean", m)]);
        assert!(breaks_floor(&hard(4.5)));
        assert!(!breaks_floor(&hard(2.5)), "look-alikes below the needle cannot push it below random");
        assert!(!breaks_floor(&fit(HardNegatives, &[("dprime", 3.0), ("hard_negatives", 0.0), ("hard_mean", 5.0)])));
        assert!(!breaks_floor(&fit(Discrimination, &[("dprime", 0.5)])));
        assert!(!breaks_floor(&fit(CandidateCountLimit, &[("dprime", 3.0)])));
        assert!(!breaks_floor(&fit(RandomIndexer, &[])));
    }
}
