//! `dsa-sim sweep`: recall (and rank quantiles) over a grid of scenario fields.

use super::progress::Bar;
use super::{CliError, RunArgs, ScenarioArgs};
use crate::commands::sweep::{prepare, sweep_to, SweepRequest};
use std::path::PathBuf;

/// Arguments of `dsa-sim sweep`.
#[derive(clap::Args, Debug)]
#[command(after_help = "Axes: --vary FIELD=V1,V2,… with ranges A..B:xF (geometric), A..B:N (N evenly spaced points) \
and A..B:+S (step); repeat --vary for a grid (the first axis is outermost).\n\nExamples:\n  \
dsa-sim sweep --preset deepseek-v4-flash --vary context_len=1024..1048576:x2 \\\n      \
--vary index_topk=512,1024,2048 --out sweep.csv\n  \
dsa-sim sweep --vary dprime=0..6:13 --vary score_noise=0,0.5,1 --no-rank --json\n  \
dsa-sim sweep --preset deepseek-v4-flash --vary depth=0..1:11 --out depth.csv --resume")]
pub struct SweepArgs {
    #[command(flatten)]
    #[allow(missing_docs)]
    pub scenario: ScenarioArgs,
    /// An axis: FIELD=V1,V2,… or a range (A..B:xF, A..B:N, A..B:+S). Repeatable.
    #[arg(long = "vary", value_name = "FIELD=VALUES", required = true)]
    pub vary: Vec<String>,
    /// Output file (.csv or .json); rows stream into FILE.partial until the sweep completes.
    /// Default: CSV rows on stdout as they finish.
    #[arg(long, short = 'o', value_name = "FILE")]
    pub out: Option<PathBuf>,
    /// Keep the rows already in FILE.partial from an interrupted run of the same sweep.
    #[arg(long)]
    pub resume: bool,
    /// Compute at most N new points, then stop (the partial file keeps them for --resume).
    #[arg(long, value_name = "N")]
    pub limit: Option<usize>,
    /// Compute only shard I of N (0-based): the grid points i with i mod N = I, into --out FILE.csv
    /// (with FILE.csv.meta.json); `auto` reads SLURM_ARRAY_TASK_ID / SLURM_ARRAY_TASK_COUNT or
    /// JOB_COMPLETION_INDEX / DSA_SIM_SHARD_COUNT. `dsa-sim merge` joins the parts.
    #[arg(long, value_name = "I/N|auto")]
    pub shard: Option<String>,
    /// Leave out the rank quantile columns (faster: recall only).
    #[arg(long)]
    pub no_rank: bool,
    /// No progress bar.
    #[arg(long, short = 'q')]
    pub quiet: bool,
    #[command(flatten)]
    #[allow(missing_docs)]
    pub run: RunArgs,
}

/// Runs `dsa-sim sweep`.
pub fn run(args: &SweepArgs) -> Result<(), CliError> {
    let prepared = prepare(&args.scenario.spec(), &args.run.spec(), &args.vary, !args.no_rank)?;
    let req = SweepRequest {
        out: args.out.as_deref(),
        json: args.run.json,
        resume: args.resume,
        limit: args.limit,
        shard: args.shard.as_deref(),
        threads: args.run.threads,
    };
    let done = sweep_to(prepared, &req, &Bar::points(!args.quiet))?;
    if let (Some(line), false) = (done.to_text(), args.quiet) {
        eprintln!("{line}");
    }
    Ok(())
}
