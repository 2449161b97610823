//! `dsa-sim run`: an experiment file → data, figures and a report in one folder.

use super::progress::Bar;
use super::CliError;
use crate::experiment::{run_file, ExperimentKind, RunSettings};
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
    let shard = args.shard.as_deref().map(crate::sweep::Shard::parse).transpose()?;
    let settings = RunSettings {
        threads: args.threads,
        resume: args.resume,
        seed: args.seed,
        shard,
        merge: args.merge.clone(),
        device: args.device,
    };
    let bar = Bar::points(!args.quiet);
    let done = run_file(&args.file, args.out.as_deref(), &settings, &bar)?;
    if args.json {
        let kind = match done.kind {
            ExperimentKind::Calibration => "calibration",
            ExperimentKind::Figures => "figures",
        };
        return super::print_json(&serde_json::json!({
            "experiment": done.name,
            "kind": kind,
            "folder": done.folder.display().to_string(),
            "report": if shard.is_some() { serde_json::Value::Null } else { done.folder.join("report.md").display().to_string().into() },
            "shard": shard.map(|s| s.to_string()),
            "figures": done.figures,
            "points": done.points,
            "files": done.files,
            "seed": done.seed,
            "resumed": args.resume,
            "dsa_sim_version": env!("CARGO_PKG_VERSION"),
        }));
    }
    if let (Some(sh), false) = (shard, args.quiet) {
        println!(
            "{}: shard {sh}: {} points of {} figures in {}; join the shards with dsa-sim run {} --merge DIR…",
            done.name,
            done.points,
            done.figures,
            done.folder.join("data").display(),
            args.file.display()
        );
        return Ok(());
    }
    if !args.quiet {
        let report = done.folder.join("report.md");
        let secs = started.elapsed().as_secs_f64();
        match done.kind {
            ExperimentKind::Calibration => {
                println!("wrote {} ({secs:.1} s); open {}", done.folder.display(), report.display())
            }
            ExperimentKind::Figures => println!(
                "{}: {} figures, {} points, {} files in {} ({secs:.1} s); open {}",
                done.name,
                done.figures,
                done.points,
                done.files,
                done.folder.display(),
                report.display()
            ),
        }
    }
    Ok(())
}
