//! The scenario fields that take keywords: distractor laws, pooling, repeat layout, model,
//! compressor, readout; their parsing and display (one error wording for all of them).

use super::MAX_STUDENT_T_DF;
use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

/// The law of a distractor token's indexer score, standardised to mean 0 and variance 1.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Distractor {
    /// Standard normal.
    Normal,
    /// Student's t with 2 < `df` ≤ `MAX_STUDENT_T_DF` degrees of freedom, scaled to unit
    /// variance (heavy tails).
    StudentT(f64),
    /// Gumbel (max-type extreme value), shifted and scaled to mean 0, variance 1.
    Gumbel,
}

/// How an entry's score is formed from the scores of the tokens it pools.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Pooling {
    /// The entry score has the token law directly; `compress_ratio` only changes N.
    None,
    /// Mean of the pooled tokens (dilution).
    Mean,
    /// Max of the pooled tokens (a sharp gate).
    Max,
}

/// Where the `repeat` copies of the needle go.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RepeatLayout {
    /// Copy j at depth (j + 0.5) / repeat: spread over the context.
    Spread,
    /// Copies follow each other from `depth`.
    Adjacent,
}

/// Which score model a scenario uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Model {
    /// The scalar score model (docs/model.md#scalar-score-model) (analytic or Monte Carlo).
    Scalar,
    /// The vector lightning-indexer model of §2.3 (Monte Carlo; see [`crate::indexer`]).
    Vector,
}

/// How the vector model's compressor pools token keys into an entry key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Compressor {
    /// Mean of the pooled tokens' keys.
    Mean,
    /// Per-channel softmax over the pooled positions with random gate logits (V4's compressor).
    Gated,
    /// Quest's page summary (vector model): per-channel max and min of the c token keys, scored
    /// Σ_j max(q_j M_j, q_j m_j) with one query head.
    Quest,
}

/// The top-k kernel a serving stack selects with: the largest k it supports (a property of the
/// kernel, not of the model; docs/presets.md cites each).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum TopkKernel {
    /// No kernel constraint: any k up to `max_topk` (the reference code's `torch.topk`).
    #[serde(rename = "any")]
    Any,
    /// sglang's first DeepSeek-V4 top-k kernel: k = 512 or 1024.
    #[serde(rename = "sglang-v1")]
    SglangV1,
    /// sglang's second top-k kernel: any k up to 2048.
    #[serde(rename = "sglang-v2")]
    SglangV2,
    /// ROCm aiter's radix `top_k_per_row` kernel: k ≤ 2048 (its default and the only k of the
    /// fast assembly variant).
    #[serde(rename = "aiter")]
    Aiter,
}

impl TopkKernel {
    /// The largest k the kernel supports (`None`: no kernel limit).
    pub(crate) fn max_k(self) -> Option<u64> {
        match self {
            TopkKernel::Any => None,
            TopkKernel::SglangV1 => Some(1024),
            TopkKernel::SglangV2 | TopkKernel::Aiter => Some(2048),
        }
    }

    /// Whether the kernel runs with this k (`Any`: every k).
    pub fn supports(self, k: u64) -> bool {
        match self {
            TopkKernel::Any => true,
            TopkKernel::SglangV1 => k == 512 || k == 1024,
            TopkKernel::SglangV2 | TopkKernel::Aiter => (1..=2048).contains(&k),
        }
    }

    /// The k values the kernel supports, in words.
    pub(crate) fn supported_text(self) -> &'static str {
        match self {
            TopkKernel::Any => "any k",
            TopkKernel::SglangV1 => "k = 512 or 1024",
            TopkKernel::SglangV2 => "k ≤ 2048",
            TopkKernel::Aiter => "k ≤ 2048; 2048 on the fast path",
        }
    }
}

/// How many of the `layers` indexer layers must attend the needle for it to be retrieved.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Readout {
    /// At least one layer.
    Any,
    /// Every layer.
    All,
    /// At least this many layers.
    AtLeast(u32),
}

macro_rules! string_serde {
    ($t:ty) => {
        impl Serialize for $t {
            fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.serialize_str(&self.to_string())
            }
        }
        impl<'de> Deserialize<'de> for $t {
            fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                let text = String::deserialize(d)?;
                text.parse().map_err(serde::de::Error::custom)
            }
        }
    };
}
string_serde!(Distractor);
string_serde!(Readout);

/// FromStr and Display for an enum of plain keywords, with the one-line error every field uses
/// ("`x`: expected a, b or c").
macro_rules! keyword_enum {
    ($t:ty { $($variant:ident => $word:literal),+ $(,)? }) => {
        impl FromStr for $t {
            type Err = String;
            fn from_str(s: &str) -> Result<Self, String> {
                match s.trim() {
                    $($word => Ok(<$t>::$variant),)+
                    o => {
                        let words: &[&str] = &[$($word),+];
                        let (last, rest) = words.split_last().expect("keyword_enum! takes one keyword or more");
                        Err(format!("`{o}`: expected {} or {last}", rest.join(", ")))
                    }
                }
            }
        }
        impl fmt::Display for $t {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(match self {
                    $(<$t>::$variant => $word,)+
                })
            }
        }
    };
}
keyword_enum!(Pooling { None => "none", Mean => "mean", Max => "max" });
keyword_enum!(Model { Scalar => "scalar", Vector => "vector" });
keyword_enum!(Compressor { Mean => "mean", Gated => "gated", Quest => "quest" });
keyword_enum!(RepeatLayout { Spread => "spread", Adjacent => "adjacent" });
keyword_enum!(TopkKernel { Any => "any", SglangV1 => "sglang-v1", SglangV2 => "sglang-v2", Aiter => "aiter" });

impl fmt::Display for Distractor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Distractor::Normal => write!(f, "normal"),
            Distractor::StudentT(df) => write!(f, "student_t:{df}"),
            Distractor::Gumbel => write!(f, "gumbel"),
        }
    }
}

/// The parameter of `KEY:P` or `KEY(P)` (student_t:5, at_least(3)), if `s` has that form.
fn keyword_parameter<'a>(s: &'a str, key: &str) -> Option<&'a str> {
    let rest = s.strip_prefix(key)?;
    rest.strip_prefix(':').or_else(|| rest.strip_prefix('(').and_then(|r| r.strip_suffix(')')))
}

impl FromStr for Distractor {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let s = s.trim();
        let allowed = "expected normal, gumbel or student_t:DF (2 < DF ≤ 1000000; beyond, use normal)";
        match s {
            "normal" => Ok(Distractor::Normal),
            "gumbel" => Ok(Distractor::Gumbel),
            _ => {
                let df = keyword_parameter(s, "student_t").ok_or_else(|| format!("`{s}`: {allowed}"))?;
                let df: f64 = df.trim().parse().map_err(|_| format!("`{s}`: {allowed}"))?;
                if !(df.is_finite() && df > 2.0 && df <= MAX_STUDENT_T_DF) {
                    return Err(format!("`{s}`: {allowed}"));
                }
                Ok(Distractor::StudentT(df))
            }
        }
    }
}

impl fmt::Display for Readout {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Readout::Any => write!(f, "any"),
            Readout::All => write!(f, "all"),
            Readout::AtLeast(m) => write!(f, "at_least:{m}"),
        }
    }
}

impl FromStr for Readout {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let s = s.trim();
        let allowed = "expected any, all or at_least:M (M ≥ 1)";
        match s {
            "any" => Ok(Readout::Any),
            "all" => Ok(Readout::All),
            _ => {
                let m = keyword_parameter(s, "at_least").ok_or_else(|| format!("`{s}`: {allowed}"))?;
                let m: u32 = m.trim().parse().map_err(|_| format!("`{s}`: {allowed}"))?;
                if m == 0 {
                    return Err(format!("`{s}`: {allowed}"));
                }
                Ok(Readout::AtLeast(m))
            }
        }
    }
}
