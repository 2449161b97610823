//! The named hypotheses about why a needle is lost (docs/model.md#calibration): what each one
//! is, its name in text and JSON, its one-line meaning, and its [`Family`] — what a preferred
//! fit of it prescribes. The one list of them; the fits are in [`super::hypotheses`].

use std::fmt;

/// A named hypothesis.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Hypothesis {
    /// dprime = 0: only k/N, the copies and the window matter.
    RandomIndexer,
    /// dprime free.
    Discrimination,
    /// dprime and needle_sd free.
    DiscriminationWithSpread,
    /// Look-alike distractors (hard_negatives, hard_mean) outrank the needle.
    HardNegatives,
    /// The needle's separation depends on its distance from the query.
    Positional,
    /// The kernel selects k′ candidates whatever index_topk is configured.
    EffectiveK,
    /// A fraction of queries never selects the needle.
    BrokenFraction,
    /// The needle is selected but not read with probability 1 − p_read.
    ReadFailure,
    /// Queries in one residue class of the length modulo the compression ratio never select it.
    LengthPeriodic,
    /// Beyond N0 candidates only the window is selected.
    CandidateCountLimit,
    /// The kernel returns the first k candidates by position without scoring them.
    FirstKUnscored,
    /// The model's own read rate falls with context length.
    ReadDecline,
}

/// What a hypothesis means for the call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Family {
    /// A working indexer: coverage-, discrimination-limited or saturated by the numbers.
    Working,
    /// The model does not read a selected needle: read-limited.
    Read,
    /// A broken implementation: implementation-suspect.
    Defect,
    /// dprime = 0: no better than chance.
    Random,
}

impl Hypothesis {
    /// Every hypothesis, in the order `--compare` lists them when their AIC ties.
    pub(crate) const ALL: [Hypothesis; 12] = [
        Hypothesis::RandomIndexer,
        Hypothesis::Discrimination,
        Hypothesis::DiscriminationWithSpread,
        Hypothesis::HardNegatives,
        Hypothesis::Positional,
        Hypothesis::EffectiveK,
        Hypothesis::BrokenFraction,
        Hypothesis::ReadFailure,
        Hypothesis::LengthPeriodic,
        Hypothesis::CandidateCountLimit,
        Hypothesis::FirstKUnscored,
        Hypothesis::ReadDecline,
    ];

    /// The name in text, JSON and `--hypotheses` lists.
    pub fn name(self) -> &'static str {
        match self {
            Hypothesis::RandomIndexer => "random-indexer",
            Hypothesis::Discrimination => "discrimination",
            Hypothesis::DiscriminationWithSpread => "discrimination-with-spread",
            Hypothesis::HardNegatives => "hard-negatives",
            Hypothesis::Positional => "positional",
            Hypothesis::EffectiveK => "effective-k",
            Hypothesis::BrokenFraction => "broken-fraction",
            Hypothesis::ReadFailure => "read-failure",
            Hypothesis::LengthPeriodic => "length-periodic",
            Hypothesis::CandidateCountLimit => "candidate-count-limit",
            Hypothesis::FirstKUnscored => "first-k-unscored",
            Hypothesis::ReadDecline => "read-decline",
        }
    }

    /// The hypothesis of a name (None: not a hypothesis's name).
    pub fn from_name(name: &str) -> Option<Hypothesis> {
        Hypothesis::ALL.into_iter().find(|h| h.name() == name)
    }

    /// The one-line meaning printed by `--compare`.
    pub(crate) fn description(self) -> &'static str {
        match self {
            Hypothesis::RandomIndexer => "dprime = 0: the indexer selects the needle no better than a random pick; only k/N, the copies and the window matter (not the raise-k hypothesis)",
            Hypothesis::Discrimination => "dprime free: the needle scores dprime distractor-sd above (or below) a typical distractor",
            Hypothesis::DiscriminationWithSpread => "dprime and needle_sd free: needle difficulty also varies from query to query",
            Hypothesis::HardNegatives => "hard_negatives (fraction of candidates), hard_mean and dprime free: look-alike distractors outrank the needle",
            Hypothesis::Positional => "the needle's separation depends on its distance from the query, not on the number of competitors: dprime_near within d0 tokens of the query, dprime_far beyond (d0 fitted)",
            Hypothesis::EffectiveK => "the kernel selects k′ candidates whatever index_topk is configured (k′ and dprime fitted): a hard-coded or mis-read top-k",
            Hypothesis::BrokenFraction => "a fraction f of queries never selects the needle (a corrupted indexer state), the rest follow dprime (f and dprime fitted)",
            Hypothesis::ReadFailure => "p_read < 1: the needle is selected but not used with probability 1 − p_read (p_read and dprime fitted)",
            Hypothesis::LengthPeriodic => "queries whose context length falls in one residue class modulo the compression ratio never select the needle with probability f (the residue, f and dprime fitted)",
            Hypothesis::CandidateCountLimit => "recall as modelled up to N0 candidates and only the window beyond (a buffer, a kernel or a cache that stops at N0; N0 and dprime fitted)",
            Hypothesis::FirstKUnscored => "the kernel returns the first k candidates by position without scoring them: the needle is found iff one of its entries is among the first k_eff (absolute position, not distance from the query), only the window otherwise",
            Hypothesis::ReadDecline => "the model's own read rate falls with context length, p_read · 1/(1 + (L/L50)^s) (L50, s and dprime fitted): selected or not, the needle is not used beyond about L50 — a model run past its trained context window (a steep fall), or one whose long-context reading degrades (dense attention loses it too)",
        }
    }

    /// What a preferred fit of the hypothesis means for the call.
    pub(crate) fn family(self) -> Family {
        match self {
            Hypothesis::RandomIndexer => Family::Random,
            Hypothesis::ReadFailure | Hypothesis::ReadDecline => Family::Read,
            Hypothesis::Positional
            | Hypothesis::EffectiveK
            | Hypothesis::BrokenFraction
            | Hypothesis::LengthPeriodic
            | Hypothesis::CandidateCountLimit
            | Hypothesis::FirstKUnscored => Family::Defect,
            Hypothesis::Discrimination | Hypothesis::DiscriminationWithSpread | Hypothesis::HardNegatives => {
                Family::Working
            }
        }
    }

    /// Whether a preferred fit points to a broken implementation rather than to the indexer's
    /// precision, the budget or the model's reading.
    pub(crate) fn is_implementation(self) -> bool {
        self.family() == Family::Defect
    }
}

impl fmt::Display for Hypothesis {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // `pad`, not `write_str`: text tables align names with `{:<28}`.
        f.pad(self.name())
    }
}

impl serde::Serialize for Hypothesis {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_are_distinct() {
        let mut seen = std::collections::HashSet::new();
        for h in Hypothesis::ALL {
            assert_eq!(Hypothesis::from_name(h.name()), Some(h));
            assert!(seen.insert(h.name()), "{h:?} repeats a name");
            assert!(h.description().len() > 40, "{h:?}");
            assert_eq!(h.to_string(), h.name());
            assert_eq!(format!("{h:<30}|"), format!("{:<30}|", h.name()));
            assert_eq!(serde_json::to_value(h).unwrap(), serde_json::json!(h.name()));
        }
        assert_eq!(Hypothesis::from_name("discrimination-limited"), None);
    }

    #[test]
    fn families() {
        use Hypothesis::*;
        let defects: Vec<Hypothesis> = Hypothesis::ALL.into_iter().filter(|h| h.is_implementation()).collect();
        assert_eq!(
            defects,
            [Positional, EffectiveK, BrokenFraction, LengthPeriodic, CandidateCountLimit, FirstKUnscored]
        );
        assert_eq!(RandomIndexer.family(), Family::Random);
        assert_eq!(ReadDecline.family(), Family::Read);
        assert_eq!(ReadFailure.family(), Family::Read);
        assert_eq!(HardNegatives.family(), Family::Working);
        assert_eq!(DiscriminationWithSpread.family(), Family::Working);
    }
}
