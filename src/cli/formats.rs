//! `dsa-sim formats`: what each number format does to the vector indexer at a given geometry
//! (default: DeepSeek-V4-Flash, 64 heads × 128, 128K tokens).

use super::{emit, outln, print_json, scenario_json, CliError, ScenarioArgs};
use crate::engine::DEFAULT_SEED;
use crate::formats::Format;
use crate::indexer::effective::{compare_formats, default_formats, effective_params};
use crate::scenario::Scenario;
use serde_json::json;

/// Arguments of `dsa-sim formats`.
#[derive(clap::Args, Debug)]
#[command(after_help = "For each format (applied to the indexer's queries and keys alike), on the same random \
queries and keys as fp32: relative RMS error of q and keys, correlation of the entry scores with fp32, \
Jaccard overlap of the top-k entry sets (k = index_topk), the induced score_noise (sd of the score error in \
distractor-sd units), the effective dprime and its loss against fp32, and how often the needle stays in the \
top k. Without --preset or --scenario the geometry is deepseek-v4-flash at 131072 tokens; the scenario's own \
q_format / k_format are ignored (each listed format is applied to both).\n\nExamples:\n  dsa-sim formats\n  \
dsa-sim formats --format fp8-e4m3:128:fp32 --format fp4-e2m1:32:ue8m0 --trials 50 --json\n  \
dsa-sim formats --preset deepseek-v3.2 --context-len 65536 --outlier-channels 4")]
pub struct FormatsArgs {
    #[command(flatten)]
    #[allow(missing_docs)]
    pub scenario: ScenarioArgs,
    /// A format to compare (repeatable; default: fp32, bf16, fp16, fp8 and fp4 variants, int8, int4).
    #[arg(long = "format", value_name = "FMT")]
    pub formats: Vec<String>,
    /// Trials (random queries and key sets) per format.
    #[arg(long, default_value_t = 40, value_name = "N")]
    pub trials: u64,
    /// Seed: trial i draws only from (seed, i); every format sees the same draws.
    #[arg(long, default_value_t = DEFAULT_SEED, value_name = "S")]
    pub seed: u64,
    /// Worker threads (default: all cores). Results do not depend on it.
    #[arg(long, value_name = "N")]
    pub threads: Option<usize>,
    /// Print one JSON object on stdout.
    #[arg(long)]
    pub json: bool,
}

fn resolve(args: &FormatsArgs) -> Result<Scenario, CliError> {
    let mut a = args.scenario.clone();
    if a.preset.is_none() && a.scenario.is_none() {
        a.preset = Some("deepseek-v4-flash".into());
        if !a.fields.iter().any(|(f, _)| *f == crate::scenario::Field::ContextLen) {
            a.fields.insert(0, (crate::scenario::Field::ContextLen, "131072".into()));
        }
    }
    let mut s = a.resolve()?;
    s.model = crate::scenario::Model::Vector;
    // The vector model's own limits apply only once the model is set.
    s.validate()?;
    // Comparing formats on the same draws keeps every entry key (N × head_dim f32 per thread).
    let bytes = s.n_candidates() as u128 * s.head_dim as u128 * 4;
    if bytes > 1 << 34 {
        return Err(CliError::input(format!(
            "context_len = {}: formats keeps every entry key (N × head_dim × 4 bytes per thread); {} entries × {} is over 16 GiB",
            s.context_len,
            s.n_candidates(),
            s.head_dim
        )));
    }
    // The distractors' normal fit needs one entry that is neither the needle nor a hard negative
    // (a context of one entry has none: the fit indexed an empty list). `any` stops at the first.
    let m = crate::indexer::VectorModel::new(&s);
    if !(0..m.n_entries() as u64).any(|i| !m.is_needle_entry(i) && !m.is_hard_entry(i)) {
        return Err(CliError::input(format!(
            "context_len = {}: formats compares the needle with distractors, and none of its {} candidate entries is one (each holds the needle or a hard negative); give a longer context",
            s.context_len,
            m.n_entries()
        )));
    }
    Ok(s)
}

/// Most trials `formats` accepts (it keeps a summary of every trial).
const MAX_FORMATS_TRIALS: u64 = 100_000;

/// Runs `dsa-sim formats`.
pub fn run(args: &FormatsArgs) -> Result<(), CliError> {
    let s = resolve(args)?;
    super::check_trials(args.trials)?;
    crate::engine::check_threads(args.threads)?;
    let formats: Vec<Format> = if args.formats.is_empty() {
        default_formats()
    } else {
        args.formats
            .iter()
            .map(|f| f.parse::<Format>().map_err(|e| CliError::input(format!("--format {f:?}: {e}"))))
            .collect::<Result<_, _>>()?
    };
    for f in &formats {
        if let Some(b) = f.block() {
            if !(s.head_dim as usize).is_multiple_of(b) {
                return Err(CliError::input(format!(
                    "--format {f}: its block ({b}) must divide head_dim ({})",
                    s.head_dim
                )));
            }
        }
    }
    // `formats` keeps every trial's per-format summary (9 numbers a format) to average them,
    // and draws every key once per format: both bounded before any work.
    if args.trials > MAX_FORMATS_TRIALS {
        return Err(CliError::input(format!(
            "--trials {}: formats keeps each trial's summary; allowed 1..={MAX_FORMATS_TRIALS}",
            args.trials
        )));
    }
    let per_trial = s.context_len.saturating_mul(s.head_dim as u64).saturating_mul(formats.len() as u64 + 1);
    if args.trials.saturating_mul(per_trial) > crate::engine::MAX_VECTOR_WORK_UNITS {
        return Err(CliError::input(format!(
            "--trials {}: each trial draws {per_trial} key components (tokens × head_dim × (formats + 1)), and a run is \
             bounded at 2^40 so that it finishes; use at most {} trials",
            args.trials,
            (crate::engine::MAX_VECTOR_WORK_UNITS / per_trial).max(1)
        )));
    }
    let topk = s.index_topk as usize;
    let work = || {
        let rows = compare_formats(&s, &formats, topk, args.trials, args.seed);
        let fp32 = {
            let mut r = s.clone();
            r.q_format = Format::F32;
            r.k_format = Format::F32;
            effective_params(&r, args.trials, args.seed)
        };
        (rows, fp32)
    };
    let (rows, fp32) = crate::engine::in_pool(args.threads, work)?;
    if args.json {
        return print_json(&json!({
            "formats": rows,
            "fp32_effective": fp32,
            "top_k": topk,
            "trials": args.trials,
            "seed": args.seed,
            "n_candidates": s.n_candidates(),
            "scenario": scenario_json(&s),
            "version": env!("CARGO_PKG_VERSION"),
        }));
    }
    let mut out = String::new();
    outln!(
        out,
        "vector indexer {} heads x {}, {} tokens -> {} entries (c = {}, overlap {}), {} trials, seed {}; top-k = {}",
        s.heads,
        s.head_dim,
        s.context_len,
        s.n_candidates(),
        s.compress_ratio,
        s.overlap,
        args.trials,
        args.seed,
        topk
    );
    outln!(
        out,
        "fp32 effective scalar parameters: dprime {:.3} (se {:.3}), needle_sd {:.3}; normal fit of distractors: KS {:.4}, skewness {:.3}",
        fp32.dprime,
        fp32.dprime_se,
        fp32.needle_sd,
        fp32.fit.ks_distance,
        fp32.fit.skewness
    );
    for (p, emp, normal) in &fp32.fit.upper_quantiles {
        outln!(out, "  upper quantile p = {p:.5}: standardised distractor {emp:.3} vs normal {normal:.3}");
    }
    outln!(
        out,
        "{:<34} {:>5} {:>8} {:>8} {:>8} {:>8} {:>8} {:>7} {:>7} {:>7}",
        "format",
        "bits",
        "q_err",
        "k_err",
        "corr",
        "jaccard",
        "noise",
        "dprime",
        "loss",
        "in_topk"
    );
    for r in &rows {
        outln!(
            out,
            "{:<34} {:>5.2} {:>8.5} {:>8.5} {:>8.5} {:>8.4} {:>8.4} {:>7.3} {:>7.3} {:>7.3}",
            r.format,
            r.bits_per_value,
            r.q_rel_rms_error,
            r.k_rel_rms_error,
            r.score_corr,
            r.topk_jaccard,
            r.score_noise,
            r.dprime,
            r.dprime_loss,
            r.needle_in_topk
        );
    }
    emit(&out)
}
