//! `dsa-sim plan`: the cells to measure next that best separate the leading hypotheses
//! (docs/model.md#planning).

use super::calibrate::FitEngineArgs;
use super::{emit, print_json, CliError, ScenarioArgs};
use crate::calibrate::{load_csv, plan::plan};
use std::path::PathBuf;

/// Arguments of `dsa-sim plan`.
#[derive(clap::Args, Debug)]
#[command(after_help = "Example:\n  \
dsa-sim plan --preset deepseek-v4-flash --context-len 16000 \\\n      \
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
    let Some(path) = &args.data else {
        return Err(CliError::input("plan: --data FILE.csv is required (the measured table the hypotheses are fitted to)"));
    };
    if args.scenario.preset.is_none() && args.scenario.scenario.is_none() {
        return Err(CliError::input("plan: give the deployment's scenario: --preset NAME or --scenario FILE.toml"));
    }
    if args.budget == 0 {
        return Err(CliError::input("--budget 0: allowed ≥ 1 trial"));
    }
    for n in &args.hypotheses {
        crate::calibrate::check_name(n)?;
    }
    let base = args.scenario.resolve()?;
    let model = args.engine.model()?;
    args.engine.check(&base)?;
    let data = load_csv(path).map_err(crate::calibrate::CalibError::from)?;
    super::calibrate::check_rows(&data, &base, &args.engine)?;
    let p = args.engine.in_pool(|| plan(&data, &base, &[], &args.engine.cached(&model), args.budget, args.engine.seed, &args.hypotheses))??;
    if let Some(out) = &args.out {
        dsa_sim::output::write_file_atomic(out, p.csv(&data.source).as_bytes()).map_err(|e| {
            if e.is_input() {
                CliError::input(e.to_string())
            } else {
                CliError::failure(e.to_string())
            }
        })?;
    }
    if args.engine.json {
        let mut j = p.json();
        j["warnings"] = serde_json::json!(data.transcribed_warning().into_iter().collect::<Vec<_>>());
        print_json(&j)
    } else {
        let mut t = String::new();
        if let Some(w) = data.transcribed_warning() {
            t.push_str(&w);
            t.push('\n');
        }
        t.push_str(&p.text());
        if let Some(out) = &args.out {
            t.push_str(&format!("wrote {}\n", out.display()));
        }
        emit(&t)
    }
}
