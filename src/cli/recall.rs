//! `dsa-sim recall`: P(correct answer) for one scenario.

use super::progress::Bar;
use super::{emit, print_json, CliError, RunArgs, ScenarioArgs};
use crate::commands::estimate::estimate;

/// Arguments of `dsa-sim recall`.
#[derive(clap::Args, Debug)]
#[command(after_help = "Examples:\n  dsa-sim recall --preset deepseek-v4-flash --context-len 131072 --dprime 3\n  \
dsa-sim recall --context-len 1000000 --index-topk 1024 --dprime 4 --score-noise 0.5 --json\n  \
dsa-sim recall --preset deepseek-v4-flash --pooling mean --context-len 32768 \\\n      \
--engine montecarlo --trials 5000 --seed 7")]
pub struct RecallArgs {
    #[command(flatten)]
    #[allow(missing_docs)]
    pub scenario: ScenarioArgs,
    #[command(flatten)]
    #[allow(missing_docs)]
    pub run: RunArgs,
}

/// Runs `dsa-sim recall`.
pub fn run(args: &RecallArgs) -> Result<(), CliError> {
    let r = estimate(&args.scenario.spec(), &args.run.spec(), &Bar::trials(!args.run.json))?;
    if args.run.json {
        return print_json(&r.recall_json());
    }
    emit(&r.recall_text())
}
