//! `dsa-sim plan`: the cells to measure next that tell most about which leading hypothesis is
//! true, and how often the diagnosis would then make the right call (docs/model.md#planning).

use super::calibrate::{spinner, FitEngineArgs};
use super::{emit, print_json, CliError, ScenarioArgs};
use crate::commands::plan::{nothing_to_plan, nothing_to_plan_json, plan, PlanRequest};
use crate::commands::write_file;
use std::path::PathBuf;

/// Arguments of `dsa-sim plan`.
#[derive(clap::Args, Debug)]
#[command(after_help = "The leading hypotheses (Akaike weight ≥ 1%, at most four) are the prior; the budget goes, \
chunk by chunk, to the cell whose trials most reduce the expected entropy of the posterior over them \
(mutual information), only at k the scenario's top-k kernel runs (topk_kernel, max_topk) and never where \
they all predict the same recall. For each hypothesis as the truth, tables with the planned cells' counts \
drawn from it (seeded by --seed) are diagnosed, and the fraction called right is reported.\n\n\
Example:\n  \
dsa-sim plan --preset deepseek-v4-flash-sglang --context-len 16000 \\\n      \
--data experiments/dsv4_seed_observations.csv --budget 1000 --out cells.csv")]
pub struct PlanArgs {
    #[command(flatten)]
    #[allow(missing_docs)]
    pub scenario: ScenarioArgs,
    /// Measured table (CSV) the hypotheses are fitted to.
    #[arg(long, value_name = "FILE.csv")]
    pub data: Option<PathBuf>,
    /// Total trials to spend on the planned cells.
    #[arg(long, default_value_t = 1000, value_name = "T")]
    pub budget: u64,
    /// Target recall of the verdict that gives a physical hypothesis's call.
    #[arg(long, default_value_t = 0.9, value_name = "T", allow_hyphen_values = true)]
    pub target: f64,
    /// Separate these hypotheses (comma-separated names) instead of the leading ones.
    #[arg(long, value_name = "NAME,…", value_delimiter = ',')]
    pub hypotheses: Vec<String>,
    /// Write the planned cells as CSV (context_len,index_topk,depth,repeat,trials).
    #[arg(long, value_name = "cells.csv")]
    pub out: Option<PathBuf>,
    #[command(flatten)]
    #[allow(missing_docs)]
    pub engine: FitEngineArgs,
}

/// Runs `dsa-sim plan`.
pub fn run(args: &PlanArgs) -> Result<(), CliError> {
    let req = PlanRequest {
        data: args.data.as_deref(),
        also: &[],
        budget: args.budget,
        hypotheses: &args.hypotheses,
        target: Some(args.target),
    };
    let p = match plan(&args.scenario.spec(), &args.engine.spec(), &req, &spinner()) {
        Ok(p) => p,
        Err(e) => {
            // A result, not bad input: one line, exit 0, nothing written.
            return match nothing_to_plan(&e) {
                Some(line) if args.engine.json => print_json(&nothing_to_plan_json(&line)),
                Some(line) => emit(&format!("{line}\n")),
                None => Err(e),
            };
        }
    };
    if let Some(out) = &args.out {
        write_file(out, &p.csv())?;
    }
    if args.engine.json {
        print_json(&p.to_json())
    } else {
        let mut t = p.to_text();
        if let Some(out) = &args.out {
            t.push_str(&format!("wrote {}\n", out.display()));
        }
        emit(&t)
    }
}
