//! `dsa-sim run`: an experiment file → data, figures and a report in one folder.

use super::progress::Bar;
use super::{emit, CliError};
use crate::commands::run::{self, RunRequest};
use std::path::PathBuf;

/// Arguments of `dsa-sim run`.
#[derive(clap::Args, Debug)]
#[command(
    after_help = "Writes DIR/data/*.csv|json, DIR/figures/*.svg|png, DIR/scenario.toml, DIR/experiment.toml and \
DIR/report.md; the folder is built in .DIR.partial next to it and replaces DIR only when complete. \
A run that is killed keeps its finished rows there: rerun with --resume to finish it.\n\nExamples:\n  \
dsa-sim run experiments/dsv4-needle-diagnosis.toml\n  dsa-sim run experiments/quest-passkey.toml --out /tmp/quest"
)]
pub struct RunExperimentArgs {
    /// The experiment file (TOML).
    #[arg(value_name = "FILE.toml")]
    pub file: PathBuf,
    /// Output folder (default: results/NAME, NAME from the file).
    #[arg(long, short = 'o', value_name = "DIR")]
    pub out: Option<PathBuf>,
    /// Worker threads (default: all cores). Results do not depend on it.
    #[arg(long, value_name = "N")]
    pub threads: Option<usize>,
    /// Continue an interrupted run of the same experiment (its rows are kept in .DIR.partial
    /// next to the output folder) instead of starting over.
    #[arg(long)]
    pub resume: bool,
    /// Compute only shard I of N (0-based) of every figure's grid, the points i with i mod N = I,
    /// into --out DIR/data/ (no figures, no report); `auto` reads SLURM_ARRAY_TASK_ID /
    /// SLURM_ARRAY_TASK_COUNT or JOB_COMPLETION_INDEX / DSA_SIM_SHARD_COUNT.
    #[arg(long, value_name = "I/N|auto", conflicts_with = "merge", requires = "out")]
    pub shard: Option<String>,
    /// Build the result folder from the shard folders of `run --shard` (every shard once) instead
    /// of computing: the same folder as an unsharded run.
    #[arg(long, value_name = "DIR", num_args = 1..)]
    pub merge: Vec<PathBuf>,
    /// Monte Carlo seed for every grid, replacing the file's `seed` (figures experiments).
    #[arg(long, value_name = "S")]
    pub seed: Option<u64>,
    /// Where the vector model's trials run, replacing the file's `device`: cpu, or cuda, cuda:N,
    /// cuda:N,M,… (a build with `--features cuda`). Results do not depend on it.
    #[arg(long, value_name = "DEVICE")]
    pub device: Option<crate::indexer::device::Device>,
    /// Print one JSON object on stdout, a summary of what was written (experiment, kind, folder,
    /// report, figures, points, files, seed, dsa_sim_version), instead of the text summary.
    #[arg(long)]
    pub json: bool,
    /// No progress bars or summary.
    #[arg(long, short = 'q')]
    pub quiet: bool,
}

/// Runs `dsa-sim run`.
pub fn run(args: &RunExperimentArgs) -> Result<(), CliError> {
    let started = std::time::Instant::now();
    let req = RunRequest {
        file: &args.file,
        out: args.out.as_deref(),
        threads: args.threads,
        resume: args.resume,
        shard: args.shard.as_deref(),
        merge: &args.merge,
        seed: args.seed,
        device: args.device,
    };
    let done = run::run(&req, &Bar::points(!args.quiet))?;
    if args.json {
        return super::print_json(&done.to_json());
    }
    if args.quiet {
        return Ok(());
    }
    emit(&done.to_text(started.elapsed().as_secs_f64()))
}
