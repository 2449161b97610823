//! `dsa-sim run`: an experiment file → data, figures and a report in one folder.

use super::CliError;
use crate::engine::{EngineChoice, RunOptions};
use crate::experiment::{Experiment, RunSettings};
use crate::sweep::engine_evaluator;
use std::path::PathBuf;

/// Arguments of `dsa-sim run`.
#[derive(clap::Args, Debug)]
#[command(after_help = "Writes DIR/data/*.csv|json, DIR/figures/*.svg|png, DIR/scenario.toml, DIR/experiment.toml and \
DIR/report.md; the folder is built in .DIR.partial next to it and replaces DIR only when complete. \
A run that is killed keeps its finished rows there: rerun with --resume to finish it.\n\nExamples:\n  \
dsa-sim run experiments/dsv4-needle-diagnosis.toml\n  dsa-sim run experiments/quest-passkey.toml --out /tmp/quest")]
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
    /// No progress bars or summary.
    #[arg(long, short = 'q')]
    pub quiet: bool,
}

/// Runs `dsa-sim run`.
pub fn run(args: &RunExperimentArgs) -> Result<(), CliError> {
    super::check_threads(args.threads)?;
    let started = std::time::Instant::now();
    // Calibration experiments (top-level `data` and `fit`) are run by the calibration module.
    if crate::input::read_to_string(&args.file).is_ok_and(|t| crate::experiment::calibration::is_calibration_experiment(&t)) {
        let out = super::calibrate::run_experiment_in_pool(&args.file, args.out.as_deref(), args.threads)?;
        if !args.quiet {
            println!("wrote {} ({:.1} s); open {}", out.display(), started.elapsed().as_secs_f64(), out.join("report.md").display());
        }
        return Ok(());
    }
    let exp = Experiment::load(&args.file).map_err(super::sweep::cli_error)?;
    let engine: EngineChoice = exp.engine.parse().map_err(CliError::input)?;
    let opts = RunOptions { engine, trials: exp.trials, seed: exp.seed, progress: false, ..RunOptions::default() };
    for fig in &exp.figures {
        super::sweep::check_points(&fig.grid, &opts)
            .map_err(|e| CliError::input(format!("{}: figure `{}`: {}", args.file.display(), fig.spec.name, e.message)))?;
    }
    let eval = engine_evaluator(opts);
    let out = args.out.clone().unwrap_or_else(|| PathBuf::from("results").join(&exp.name));
    let settings = RunSettings { threads: args.threads, progress: !args.quiet, resume: args.resume };
    let files = crate::experiment::run(&exp, &out, &eval, &settings).map_err(super::sweep::cli_error)?;
    if !args.quiet {
        println!(
            "{}: {} figures, {} points, {} files in {} ({:.1} s); open {}",
            exp.name,
            exp.figures.len(),
            exp.points(),
            files.len(),
            out.display(),
            started.elapsed().as_secs_f64(),
            out.join("report.md").display()
        );
    }
    Ok(())
}
