//! `dsa-sim formats`: what each number format does to the vector indexer at a given geometry
//! (default: DeepSeek-V4-Flash, 64 heads × 128, 128K tokens).

use super::{emit, print_json, CliError, ScenarioArgs};
use crate::commands::formats::{formats, FormatsRequest, DEFAULT_FORMATS_TRIALS};
use crate::commands::DEFAULT_SEED;

/// Arguments of `dsa-sim formats`.
#[derive(clap::Args, Debug)]
#[command(after_help = "For each format (applied to the indexer's queries and keys alike), on the same random \
queries and keys as fp32: relative RMS error of q and keys, correlation of the entry scores with fp32, \
Jaccard overlap of the top-k entry sets (k = index_topk), the induced score_noise (sd of the score error in \
distractor-sd units), the effective dprime and its loss against fp32, and how often the needle stays in the \
top k. Without --preset or --scenario the geometry is deepseek-v4-flash at 131072 tokens; the scenario's own \
q_format / k_format are ignored (each listed format is applied to both).\n\nExamples:\n  dsa-sim formats\n  \
dsa-sim formats --format fp8-e4m3:128:fp32 --format fp4-e2m1:32:ue8m0 --trials 50 --json\n  \
dsa-sim formats --preset deepseek-v3.2 --context-len 65536 --outlier-channels 4")]
pub struct FormatsArgs {
    #[command(flatten)]
    #[allow(missing_docs)]
    pub scenario: ScenarioArgs,
    /// A format to compare (repeatable; default: fp32, bf16, fp16, fp8 and fp4 variants, int8, int4).
    #[arg(long = "format", value_name = "FMT")]
    pub formats: Vec<String>,
    /// Trials (random queries and key sets) per format.
    #[arg(long, default_value_t = DEFAULT_FORMATS_TRIALS, value_name = "N")]
    pub trials: u64,
    /// Seed: trial i draws only from (seed, i); every format sees the same draws.
    #[arg(long, default_value_t = DEFAULT_SEED, value_name = "S")]
    pub seed: u64,
    /// Worker threads (default: all cores). Results do not depend on it.
    #[arg(long, value_name = "N")]
    pub threads: Option<usize>,
    /// Print one JSON object on stdout.
    #[arg(long)]
    pub json: bool,
}

/// Runs `dsa-sim formats`.
pub fn run(args: &FormatsArgs) -> Result<(), CliError> {
    let req = FormatsRequest { formats: &args.formats, trials: args.trials, seed: args.seed, threads: args.threads };
    let report = formats(&args.scenario.spec(), &req)?;
    if args.json {
        print_json(&report.to_json())
    } else {
        emit(&report.to_text())
    }
}
