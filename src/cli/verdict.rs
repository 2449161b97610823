//! `dsa-sim verdict`: coverage- or discrimination-limited, with numbers (docs/model.md#verdict).

use super::calibrate::FitEngineArgs;
use super::{emit, print_json, CliError, ScenarioArgs};
use crate::calibrate::output::{hypotheses_json, hypotheses_text};
use crate::calibrate::{diagnose, fitted_scenarios, load_csv, parse_fit_spec, run_calibration};
use crate::verdict::{calibrated_verdict, calibrated_verdict_json, verdict, verdict_json, verdict_text, VerdictOptions};
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
    /// calibrate those fields first and the numbers carry 95% intervals.
    #[arg(long, value_name = "FILE.csv")]
    pub data: Option<PathBuf>,
    /// Fields to fit with --data.
    #[arg(long, value_name = "FIELD,…", requires = "data")]
    pub fit: Option<String>,
    #[command(flatten)]
    #[allow(missing_docs)]
    pub engine: FitEngineArgs,
}

/// Runs `dsa-sim verdict`.
pub fn run(args: &VerdictArgs) -> Result<(), CliError> {
    let base = args.scenario.resolve()?;
    let opts = VerdictOptions { target: args.target, max_topk: base.max_topk };
    opts.validate()?;
    let model = args.engine.model()?;
    args.engine.check(&base)?;
    match (&args.data, &args.fit) {
        (Some(path), Some(fit)) => {
            let data = load_csv(path).map_err(crate::calibrate::CalibError::from)?;
            super::calibrate::check_rows(&data, &base, &args.engine)?;
            let free = parse_fit_spec(fit, Some(&data))?;
            let (report, cv, s0) = args.engine.in_pool(|| -> Result<_, CliError> {
                let cached = args.engine.cached(&model);
                let model = &cached;
                let report = run_calibration(&data, &base, free, model, false, &[], String::new)?;
                let mut report = report;
                if report.fit.region.is_empty() {
                    let problem = crate::calibrate::Problem::new(&data, &base, report.free.clone(), model)?;
                    report.fit = crate::calibrate::fit::fit(&problem, true, true)?;
                }
                let scen = fitted_scenarios(&data, &base, &report, model)?;
                let mut cv = calibrated_verdict(&scen, model, opts)?;
                cv.at_estimate.dprime_on_bound =
                    report.fit.estimates.iter().any(|e| e.field == crate::scenario::Field::Dprime && e.value_at_bound);
                Ok((report, cv, scen[0].clone()))
            })??;
            if args.engine.json {
                let mut j = calibrated_verdict_json(&cv, &s0);
                j["calibration"] = report.to_json();
                j["warnings"] = serde_json::json!(report.warnings());
                print_json(&j)
            } else {
                let mut text = String::new();
                for w in report.warnings() {
                    text.push_str(&w);
                    text.push('\n');
                }
                let est: Vec<String> = report
                    .fit
                    .estimates
                    .iter()
                    .map(|e| format!("{} = {:.3} [{:.3}, {:.3}]", e.field, e.value, e.ci_low, e.ci_high))
                    .collect();
                text.push_str(&format!("calibrated on {}: {}\n", data.source, est.join(", ")));
                if let Some(c) = &report.checks {
                    text.push_str(&c.text());
                    if !c.below_floor().is_empty() || !c.selection_independent_misses().is_empty() {
                        text.push_str("note: these rows are not explained by the fitted fields; `verdict --data` without --fit diagnoses them (implementation-suspect / read-limited)\n");
                    }
                }
                text.push_str(&verdict_text(&cv.at_estimate, Some(&cv)));
                emit(&text)
            }
        }
        (Some(path), None) => {
            let data = load_csv(path).map_err(crate::calibrate::CalibError::from)?;
            super::calibrate::check_rows(&data, &base, &args.engine)?;
            let d = args.engine.in_pool(|| diagnose(&data, &base, &[], &args.engine.cached(&model), opts))??;
            if args.engine.json {
                let mut j = verdict_json(&d.verdict, &d.scenario);
                j["explanation"] = serde_json::json!(d.explanation());
                j["signatures"] = d.signatures_json();
                j["numbers_from"] = serde_json::json!(d.numbers_from);
                j["row_checks"] = serde_json::json!(d.checks);
                j["hypotheses"] = hypotheses_json(&d.hypotheses);
                j["warnings"] = serde_json::json!(data.transcribed_warning().into_iter().collect::<Vec<_>>());
                print_json(&j)
            } else {
                let mut text = String::new();
                if let Some(w) = data.transcribed_warning() {
                    text.push_str(&w);
                    text.push('\n');
                }
                text.push_str(&format!("diagnosed {} rows of {}\n", data.rows.len(), data.source));
                text.push_str(&d.checks.text());
                text.push_str(&hypotheses_text(&d.hypotheses));
                text.push_str(&format!("numbers at the fit of `{}`:\n", d.numbers_from));
                let body = verdict_text(&d.verdict, None);
                // The verdict's own explanation is replaced by the diagnosis's.
                let body = body.split("\n\n").next().unwrap_or("").to_string();
                text.push_str(&body);
                text.push_str(&format!("\n\n{}\n", d.explanation()));
                emit(&text)
            }
        }
        _ => {
            let v = args.engine.in_pool(|| verdict(&base, &model, opts))??;
            if args.engine.json {
                print_json(&verdict_json(&v, &base))
            } else {
                emit(&verdict_text(&v, None))
            }
        }
    }
}
