//! `quantize`: numbers quantize-dequantized with a number format. The command line reads them
//! as text on stdin ([`crate::formats::text::quantize_text`]); the Python package has them as
//! f32 already. Both go through the same checks with the same messages.

use super::CommandError;
use crate::formats::text::{check_request, quantize_text, quantize_values};
use crate::formats::Format;

pub use crate::formats::text::QuantizeRequest;

/// Quantize-dequantizes `values` in place with the format the request names (`format`, `block`,
/// `scale`, `amax_floor` as the flags give them) and returns the format used.
pub fn quantize(req: &QuantizeRequest, values: &mut [f32]) -> Result<Format, CommandError> {
    Ok(quantize_values(req, values)?)
}

/// `quantize` on the command line: the request checked (before stdin is read), then the numbers
/// on stdin quantize-dequantized; returns what the command prints (one value a line, or the
/// JSON object with `json`).
pub fn quantize_stdin(req: &QuantizeRequest) -> Result<String, CommandError> {
    check_request(req)?;
    let text = crate::input::read_stdin_to_string()
        .map_err(|e| CommandError::input(format!("cannot read stdin as text: {e}")))?;
    Ok(quantize_text(req, &text)?)
}
