//! The one error type of the formats module.

use thiserror::Error;

/// The format names [`crate::formats::Format`] accepts, as listed in error messages.
pub(crate) const FORMAT_NAMES: &str = "fp32, bf16, fp16, fp8-e4m3, fp8-e5m2, fp4-e2m1, int8, int4, mxfp4, nvfp4";

/// The scale kinds [`crate::formats::ScaleKind`] accepts, as listed in error messages.
pub(crate) const SCALE_NAMES: &str = "fp32, ue8m0, e8m0, e4m3";

/// The element formats that can be block-scaled, as listed in error messages.
pub(crate) const BLOCK_ELEMENT_NAMES: &str = "fp8-e4m3, fp8-e5m2, fp4-e2m1, int8, int4";

/// Everything that can go wrong when naming a format or quantizing with it.
///
/// Every message is one line that names the offending value and what is allowed.
#[derive(Debug, Clone, PartialEq, Error)]
pub enum FormatError {
    /// A format name that is not known.
    #[error("unknown format `{name}`: expected one of {FORMAT_NAMES}")]
    UnknownFormat {
        /// The name as given.
        name: String,
    },
    /// A scale kind that is not known.
    #[error("unknown scale `{name}`: expected one of {SCALE_NAMES}")]
    UnknownScale {
        /// The name as given.
        name: String,
    },
    /// A block size of zero.
    #[error("block size 0 is not allowed: the block must be a positive number of values")]
    ZeroBlock,
    /// A block size that is not a number.
    #[error("block size `{value}` is not a positive integer")]
    BadBlock {
        /// The text as given.
        value: String,
    },
    /// Block scaling asked for an element format that is not block-scaled.
    #[error("format {format} cannot be block-scaled: block scaling applies to {BLOCK_ELEMENT_NAMES}")]
    NotBlockScalable {
        /// The element format's name.
        format: String,
    },
    /// A scale kind given without a block size.
    #[error("scale `{scale}` needs a block size: give one as well (e.g. --block 32, or fp8-e4m3:32:{scale})")]
    ScaleWithoutBlock {
        /// The scale kind's name.
        scale: String,
    },
    /// `mxfp4` / `nvfp4` with a different block or scale than their definition.
    #[error("{format} is fixed to block {block} and scale {scale}; got {what} — use fp4-e2m1 with a block and scale for other combinations")]
    FixedFormat {
        /// `mxfp4` or `nvfp4`.
        format: &'static str,
        /// The format's fixed block size.
        block: usize,
        /// The format's fixed scale kind.
        scale: &'static str,
        /// What was asked for instead, e.g. `block 16`.
        what: String,
    },
    /// An amax floor that is negative or not finite.
    #[error("amax floor `{value}` is not allowed: it must be a finite number ≥ 0")]
    BadAmaxFloor {
        /// The text or value as given.
        value: String,
    },
    /// A format specification string that does not parse.
    #[error("format `{spec}` is malformed: {reason}")]
    Malformed {
        /// The whole specification as given.
        spec: String,
        /// What is wrong with it.
        reason: String,
    },
    /// The slice length is not a multiple of the block size.
    #[error("block size {block} does not divide the number of values ({len}): the input must be whole blocks")]
    BlockDoesNotDivide {
        /// The block size.
        block: usize,
        /// The slice length.
        len: usize,
    },
    /// A NaN or infinite value given to a format that does not accept it.
    #[error("value {value} at index {index} is not allowed by {format}: {allowed}")]
    NonFinite {
        /// The offending value, printed as `NaN`, `inf` or `-inf`.
        value: String,
        /// Its index in the slice.
        index: usize,
        /// The format's name.
        format: String,
        /// What the format accepts.
        allowed: &'static str,
    },
}

impl crate::error::Classify for FormatError {
    /// Always bad input: a format name, a block size, values a format does not accept.
    fn kind(&self) -> crate::error::ErrorKind {
        crate::error::ErrorKind::Input
    }
}
