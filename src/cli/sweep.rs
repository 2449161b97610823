//! `dsa-sim sweep`: recall (and rank quantiles) over a grid of scenario fields.

use super::progress::Bar;
use super::{CliError, RunArgs, ScenarioArgs};
use crate::commands::sweep::{prepare, PreparedSweep};
use crate::sweep::{engine_evaluator, merge, run_grid, Format, Output, Shard, SweepOptions};
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
    let rank = !args.no_rank;
    let PreparedSweep { grid, opts, meta } = prepare(&args.scenario.spec(), &args.run.spec(), &args.vary, rank)?;
    let format = match (&args.out, args.run.json) {
        (_, true) => Format::Json,
        (Some(p), false) => Format::from_path(p),
        (None, false) => Format::Csv,
    };
    if let Some(p) = &args.out {
        if args.run.json && p.extension().is_some_and(|e| e.eq_ignore_ascii_case("csv")) {
            return Err(CliError::input(format!(
                "--json conflicts with --out {}: the file would hold JSON; name it .json or drop --json",
                p.display()
            )));
        }
        if p.is_dir() {
            return Err(CliError::input(format!(
                "--out {}: is a folder; give a file name (.csv or .json)",
                p.display()
            )));
        }
    }
    let shard = match &args.shard {
        Some(t) => Shard::parse(t)?,
        None => Shard::WHOLE,
    };
    if args.shard.is_some() {
        match &args.out {
            None => {
                return Err(CliError::input(
                    "--shard needs --out FILE.csv (one file per shard, joined by `dsa-sim merge`)",
                ))
            }
            Some(_) if format == Format::Json => return Err(CliError::input(
                "--shard writes CSV parts (--out FILE.csv); `dsa-sim merge PARTS… --out FILE.json` makes the JSON file",
            )),
            Some(_) => {}
        }
    }
    let mut fingerprint = serde_json::json!({
        "version": env!("CARGO_PKG_VERSION"),
        "base": grid.base,
        "axes": grid.axes.iter().map(|a| serde_json::json!([a.field.name(), a.texts])).collect::<Vec<_>>(),
        "run": meta,
        "format": format.to_string(),
    });
    if !shard.is_whole() {
        fingerprint["shard"] = shard.to_string().into();
    }
    let fingerprint = fingerprint.to_string();
    let sidecar = (args.out.is_some() && format == Format::Csv).then(|| merge::sidecar(&grid, &meta, shard));
    let out = match &args.out {
        Some(p) => Output::File(p.clone()),
        None => Output::Stdout,
    };
    let sweep = SweepOptions {
        threads: args.run.threads,
        resume: args.resume,
        limit: args.limit,
        format,
        fingerprint,
        meta,
        shard,
        sidecar,
        // As merge and the importers: an existing --out is replaced only if a sweep wrote it.
        replace_only_ours: args.out.is_some(),
    };
    let eval = engine_evaluator(opts);
    let (rows, complete) = run_grid(&grid, |s| eval(s, rank), &out, &sweep, &Bar::points(!args.quiet))?;
    if let Some(p) = &args.out {
        if !args.quiet {
            if complete {
                match args.shard {
                    Some(_) => {
                        eprintln!("shard {shard}: {} of {} points written to {}", rows.len(), grid.len(), p.display())
                    }
                    None => eprintln!("{} points written to {}", rows.len(), p.display()),
                }
            } else {
                eprintln!(
                    "{} of {} points done, kept in {}: rerun with --resume to finish",
                    rows.len(),
                    shard.len(grid.len()),
                    crate::sweep::partial_path(p).display()
                );
            }
        }
    }
    Ok(())
}
