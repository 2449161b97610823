//! Exact keys of score laws: the memo and table keys of the analytic engine.
//!
//! Two laws get the same key exactly when every field is the same value (floats compared by
//! their bits, so −0 and 0 differ, as they do in the laws' `Debug` text the keys used to be).
//! Each number is written as a fixed number of hex digits and each enum as a tag letter, with
//! a list's length before its items, so no two different values write the same text. Written
//! by hand because the `Debug` form's shortest round-trip decimals cost more than evaluating a
//! cached row: a fit asks for a row's key at every parameter vector.

use super::distractor::TokenLaw;
use super::entry::EntryLaw;

const HEX: &[u8; 16] = b"0123456789abcdef";

/// Appends the 16 hex digits of `n`.
pub(crate) fn put_u64(out: &mut String, n: u64) {
    for shift in (0..16).rev() {
        out.push(HEX[((n >> (4 * shift)) & 0xf) as usize] as char);
    }
}

/// Appends `x` by its bits.
pub(crate) fn put_f64(out: &mut String, x: f64) {
    put_u64(out, x.to_bits());
}

/// Appends a tag letter (a variant or a flag).
pub(crate) fn put_tag(out: &mut String, tag: char) {
    out.push(tag);
}

impl TokenLaw {
    /// Appends the law's key.
    pub(crate) fn put_key(&self, out: &mut String) {
        match *self {
            TokenLaw::Normal => put_tag(out, 'N'),
            TokenLaw::StudentT { df, scale, ln_norm } => {
                put_tag(out, 'T');
                for x in [df, scale, ln_norm] {
                    put_f64(out, x);
                }
            }
            TokenLaw::Gumbel { mu, beta } => {
                put_tag(out, 'G');
                put_f64(out, mu);
                put_f64(out, beta);
            }
        }
    }
}

impl EntryLaw {
    /// Appends the law's key.
    pub(crate) fn put_key(&self, out: &mut String) {
        match *self {
            EntryLaw::Gauss { mean, sd } => {
                put_tag(out, 'g');
                put_f64(out, mean);
                put_f64(out, sd);
            }
            EntryLaw::Token(t) => {
                put_tag(out, 't');
                t.put_key(out);
            }
            EntryLaw::Max { token, n_dist, n_needle, needle_mean, needle_sd } => {
                put_tag(out, 'm');
                token.put_key(out);
                put_u64(out, n_dist);
                put_u64(out, n_needle);
                put_f64(out, needle_mean);
                put_f64(out, needle_sd);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scores::TokenLaw;

    fn key(law: &EntryLaw) -> String {
        let mut s = String::new();
        law.put_key(&mut s);
        s
    }

    #[test]
    fn keys_tell_apart_exactly_the_laws_that_differ() {
        let t = TokenLaw::new(crate::scenario::Distractor::StudentT(5.0));
        let laws = [
            EntryLaw::Gauss { mean: 0.0, sd: 1.0 },
            EntryLaw::Gauss { mean: -0.0, sd: 1.0 },
            EntryLaw::Gauss { mean: 0.1 + 0.2, sd: 1.0 },
            EntryLaw::Gauss { mean: 0.3, sd: 1.0 },
            EntryLaw::Token(TokenLaw::Normal),
            EntryLaw::Token(t),
            EntryLaw::Max { token: TokenLaw::Normal, n_dist: 3, n_needle: 1, needle_mean: 2.0, needle_sd: 1.0 },
            EntryLaw::Max { token: TokenLaw::Normal, n_dist: 1, n_needle: 3, needle_mean: 2.0, needle_sd: 1.0 },
            EntryLaw::Max { token: t, n_dist: 3, n_needle: 1, needle_mean: 2.0, needle_sd: 1.0 },
        ];
        for (i, a) in laws.iter().enumerate() {
            for (j, b) in laws.iter().enumerate() {
                // The keys agree exactly where the Debug text (the key before) does.
                assert_eq!(key(a) == key(b), format!("{a:?}") == format!("{b:?}"), "{a:?} vs {b:?}");
                assert_eq!(key(a) == key(b), i == j);
            }
        }
    }
}
