//! `dsa-sim rank`: the needle's rank distribution.

use super::progress::Bar;
use super::{emit, print_json, CliError, RunArgs, ScenarioArgs};
use crate::commands::estimate::estimate;

/// Arguments of `dsa-sim rank`.
#[derive(clap::Args, Debug)]
#[command(after_help = "The rank is 1 + the number of candidates scoring above the needle's best entry in one \
layer; the needle is selected when rank <= index_topk.\n\nExample:\n  dsa-sim rank --preset deepseek-v4-flash --context-len 65536 --dprime 2.5")]
pub struct RankArgs {
    #[command(flatten)]
    #[allow(missing_docs)]
    pub scenario: ScenarioArgs,
    #[command(flatten)]
    #[allow(missing_docs)]
    pub run: RunArgs,
}

/// Runs `dsa-sim rank`.
pub fn run(args: &RankArgs) -> Result<(), CliError> {
    let r = estimate(&args.scenario.spec(), &args.run.spec(), &Bar::trials(!args.run.json))?;
    if args.run.json {
        return print_json(&r.rank_json());
    }
    emit(&r.rank_text())
}
