//! `dsa-sim merge`: the parts of a sharded sweep into the file an unsharded sweep writes.

use super::{print_json, CliError};
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
    let m = crate::sweep::merge::merge(&args.parts, &args.out)?;
    if args.json {
        let files: Vec<String> = m.files.iter().map(|f| f.display().to_string()).collect();
        return print_json(&serde_json::json!({
            "points": m.points, "parts": m.parts, "shards": m.shards, "files": files,
        }));
    }
    if !args.quiet {
        eprintln!("{} points from {} shards written to {}", m.points, m.shards, args.out.display());
    }
    Ok(())
}
