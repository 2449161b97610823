//! `quantize`: numbers quantize-dequantized with a number format. The command line reads them
//! as text on stdin ([`crate::formats::text::quantize_text`]); the Python package has them as
//! f32 already. Both go through the same checks with the same messages.

use super::CommandError;
use crate::formats::text::{quantize_values, QuantizeRequest};
use crate::formats::Format;

/// Quantize-dequantizes `values` in place with the format the request names (`format`, `block`,
/// `scale`, `amax_floor` as the flags give them) and returns the format used.
pub fn quantize(req: &QuantizeRequest, values: &mut [f32]) -> Result<Format, CommandError> {
    Ok(quantize_values(req, values)?)
}
