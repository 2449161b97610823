//! `dsa-sim quantize`: numbers in on stdin, their quantize-dequantized values out.

use super::{emit, CliError};
use crate::commands::quantize::{quantize_stdin, QuantizeRequest};

/// Arguments of `dsa-sim quantize`.
#[derive(clap::Args, Debug)]
#[command(after_help = "Reads numbers separated by spaces or newlines on stdin and prints each one's \
quantize-dequantize value, one per line, in shortest round-trip form.\n\n\
Element formats round to nearest even and saturate finite values at the format's max. NaN and inf: \
bf16, fp16 and fp8-e5m2 keep them; fp8-e4m3 (no inf) turns inf into NaN; fp4-e2m1 saturates inf \
to ±6 and refuses NaN; int8 and int4 refuse NaN. Block-scaled formats refuse NaN and inf.\n\n\
Block scaling (fp8-e4m3, fp8-e5m2, fp4-e2m1, int8, int4): --block B values share one scale, \
--scale fp32 (amax/max, the default), ue8m0 (2^ceil(log2(amax/max)), DeepSeek), e8m0 \
(2^(floor(log2 amax) - emax), OCP MX) or e4m3 (NVFP4-style, under one f32 scale for the whole \
input). The input must be whole blocks. int8/int4 without --block use one scale for the whole input. \
mxfp4 = fp4-e2m1 --block 32 --scale e8m0; nvfp4 = fp4-e2m1 --block 16 --scale e4m3.\n\n\
Examples:\n  echo 0.3 0.75 5 7 | dsa-sim quantize --format fp4-e2m1\n  \
seq 1 32 | dsa-sim quantize --format fp4-e2m1 --block 32 --scale ue8m0\n  \
printf '0.1 -2.5 1e-3 7\\n' | dsa-sim quantize --format fp8-e4m3 --block 4 --json")]
pub struct QuantizeArgs {
    /// Number format (required): fp32, bf16, fp16, fp8-e4m3, fp8-e5m2, fp4-e2m1, int8, int4, mxfp4,
    /// nvfp4, or a full specification NAME:BLOCK:SCALE[:floor=F] such as fp4-e2m1:32:ue8m0.
    #[arg(long, value_name = "FMT")]
    pub format: Option<String>,
    /// Values per shared scale (block-scaled fp8, fp4 and int formats).
    #[arg(long, value_name = "B", allow_hyphen_values = true)]
    pub block: Option<String>,
    /// Scale of each block: fp32 (default), ue8m0, e8m0 or e4m3.
    #[arg(long, value_name = "KIND")]
    pub scale: Option<String>,
    /// Raise each block's amax to at least F before computing its scale (DeepSeek FP8: 1e-4).
    #[arg(long, value_name = "F", allow_hyphen_values = true)]
    pub amax_floor: Option<String>,
    /// Print one JSON object (format, count, values) instead of one value per line.
    #[arg(long)]
    pub json: bool,
}

impl QuantizeArgs {
    /// The request the flags make.
    pub fn request(&self) -> QuantizeRequest {
        QuantizeRequest {
            format: self.format.clone(),
            block: self.block.clone(),
            scale: self.scale.clone(),
            amax_floor: self.amax_floor.clone(),
            json: self.json,
        }
    }
}

/// Runs `dsa-sim quantize`.
pub fn run(args: &QuantizeArgs) -> Result<(), CliError> {
    // The flags are checked before stdin is read.
    emit(&quantize_stdin(&args.request())?)
}
