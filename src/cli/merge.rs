//! `dsa-sim merge`: the parts of a sharded sweep into the file an unsharded sweep writes.

use super::{print_json, CliError};
use crate::commands::sweep::merge_parts;
use std::path::PathBuf;

/// Arguments of `dsa-sim merge`.
#[derive(clap::Args, Debug)]
#[command(after_help = "Each part is a CSV written by `dsa-sim sweep --shard I/N --out PART.csv`, with its \
PART.csv.meta.json beside it. Every shard of the split must be given once, all from the same sweep (grid, seed, \
run options and dsa-sim version); the result is byte-identical to running the sweep unsharded.\n\nExample:\n  \
dsa-sim merge parts/sweep-*.csv --out sweep.csv")]
pub struct MergeArgs {
    /// The parts (CSV files of `sweep --shard`), in any order.
    #[arg(value_name = "PART.csv", required = true)]
    pub parts: Vec<PathBuf>,
    /// The merged file: FILE.csv (with FILE.csv.meta.json) or FILE.json.
    #[arg(long, short = 'o', value_name = "FILE", required = true)]
    pub out: PathBuf,
    /// Print one JSON object (points, parts, shards, files) instead of the summary.
    #[arg(long)]
    pub json: bool,
    /// No summary.
    #[arg(long, short = 'q')]
    pub quiet: bool,
}

/// Runs `dsa-sim merge`.
pub fn run(args: &MergeArgs) -> Result<(), CliError> {
    let done = merge_parts(&args.parts, &args.out)?;
    if args.json {
        return print_json(&done.to_json());
    }
    if !args.quiet {
        eprintln!("{}", done.to_text());
    }
    Ok(())
}
