//! `dsa-sim verdict`: coverage- or discrimination-limited, with numbers (docs/model.md#verdict).

use super::calibrate::{spinner, FitEngineArgs};
use super::{emit, print_json, CliError, ScenarioArgs};
use crate::commands::verdict::verdict_tables;
use std::path::PathBuf;

/// Arguments of `dsa-sim verdict`.
#[derive(clap::Args, Debug)]
#[command(after_help = "Examples:\n  \
dsa-sim verdict --preset deepseek-v4-flash --context-len 16000 --dprime 2\n  \
dsa-sim verdict --preset deepseek-v4-flash --context-len 16000 \\\n      \
--data experiments/dsv4_seed_observations.csv --fit dprime --json\n\n\
The kernel maximum k is the scenario's max_topk (--max-topk K to change it).\n\
recall_2k is recall at k = 2 × index_topk.")]
pub struct VerdictArgs {
    #[command(flatten)]
    #[allow(missing_docs)]
    pub scenario: ScenarioArgs,
    /// Target recall, in (0, 1).
    #[arg(long, default_value_t = 0.9, value_name = "T", allow_hyphen_values = true)]
    pub target: f64,
    /// Diagnose this measured table: without --fit, row checks (random-indexer floor,
    /// selection-independent misses) and every named hypothesis decide the call; with --fit,
    /// calibrate those fields first and the numbers carry 95% intervals. Repeatable: several
    /// tables (two probe runs, two builds) are joined into one, their condition columns united.
    /// The numbers are at the table's longest context length and, when its rows share one, their
    /// index_topk; --context-len and --index-topk ask about others.
    #[arg(long, value_name = "FILE.csv")]
    pub data: Vec<PathBuf>,
    /// Fields to fit with --data.
    #[arg(long, value_name = "FIELD,…")]
    pub fit: Option<String>,
    #[command(flatten)]
    #[allow(missing_docs)]
    pub engine: FitEngineArgs,
}

/// Runs `dsa-sim verdict`.
pub fn run(args: &VerdictArgs) -> Result<(), CliError> {
    let tables: Vec<&std::path::Path> = args.data.iter().map(PathBuf::as_path).collect();
    let v = verdict_tables(
        &args.scenario.spec(),
        &args.engine.spec(),
        args.target,
        &tables,
        args.fit.as_deref(),
        &spinner(),
    )?;
    if args.engine.json {
        print_json(&v.to_json())
    } else {
        emit(&v.to_text())
    }
}
