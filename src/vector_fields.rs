//! The keyword types of the vector model's fields `head_weights` and `rope_at` (the model is
//! [`crate::indexer`]): a leaf module, so that the scenario table and the indexer both import it
//! without a cycle.

/// How the indexer's head weights are formed (`head_weights`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HeadWeights {
    /// Per query, signed: w_h = z_h · H^-1/2 · d^-1/2, z_h ~ N(0, 1) per layer and trial.
    Signed,
    /// Fixed positive constants from `indexer::WEIGHT_SEED` (log-normal, the model before per-query
    /// weights).
    Fixed,
}

/// Which half of the head dimension RoPE rotates, and how it pairs channels (`rope_at`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RopeAt {
    /// The last `rope_dims` channels, interleaved pairs (2i, 2i+1) (V4).
    Last,
    /// The first `rope_dims` channels, half-split pairs (i, i + rope_dims/2) (V3.2).
    First,
}

macro_rules! keyword {
    ($t:ident { $($v:ident => $w:literal),+ }) => {
        impl std::str::FromStr for $t {
            type Err = String;
            fn from_str(s: &str) -> Result<Self, String> {
                match s.trim() {
                    $($w => Ok($t::$v),)+
                    o => {
                        let words: &[&str] = &[$($w),+];
                        let (last, rest) = words.split_last().unwrap_or((&"", &[]));
                        Err(format!("`{o}`: expected {} or {last}", rest.join(", ")))
                    }
                }
            }
        }
        impl std::fmt::Display for $t {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(match self { $($t::$v => $w,)+ })
            }
        }
        impl serde::Serialize for $t {
            fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.serialize_str(&self.to_string())
            }
        }
        impl<'de> serde::Deserialize<'de> for $t {
            fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                let text = String::deserialize(d)?;
                text.parse().map_err(serde::de::Error::custom)
            }
        }
    };
}
keyword!(HeadWeights { Signed => "signed", Fixed => "fixed" });
keyword!(RopeAt { Last => "last", First => "first" });
