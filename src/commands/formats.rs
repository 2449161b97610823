//! `formats`: what each number format does to the vector indexer at a given geometry (default:
//! DeepSeek-V4-Flash, 64 heads × 128, 128K tokens), every format on the same draws as fp32.

use super::{outln, scenario_json, CommandError, ScenarioSpec};
use crate::formats::Format;
use crate::indexer::effective::{compare_formats, default_formats, effective_params, EffectiveParams, FormatReport};
use crate::scenario::{Field, Model, Scenario};
use serde_json::json;

/// Most trials `formats` accepts (it keeps a summary of every trial).
pub(crate) const MAX_FORMATS_TRIALS: u64 = 100_000;

/// Trials per format by default (`--trials`).
pub const DEFAULT_FORMATS_TRIALS: u64 = 40;

/// The inputs of `formats` besides the scenario, as its flags give them.
#[derive(Debug, Clone)]
pub struct FormatsRequest<'a> {
    /// The formats to compare (as `--format` takes them); empty: the default list.
    pub formats: &'a [String],
    /// Trials (random queries and key sets) per format.
    pub trials: u64,
    /// Seed: trial i draws only from (seed, i).
    pub seed: u64,
    /// Worker threads; `None`: all cores.
    pub threads: Option<usize>,
}

/// Each format's error against fp32 on the same draws, and fp32's effective scalar parameters.
#[derive(Debug, Clone)]
pub struct FormatsReport {
    /// One per format, in the order given.
    pub(crate) rows: Vec<FormatReport>,
    /// fp32's effective scalar parameters.
    pub(crate) fp32: EffectiveParams,
    /// k of the top-k overlap (the scenario's index_topk).
    pub(crate) top_k: usize,
    /// Trials per format.
    pub(crate) trials: u64,
    /// Seed.
    pub(crate) seed: u64,
    /// The vector-model scenario compared at.
    pub(crate) scenario: Scenario,
}

/// The scenario `formats` compares at: deepseek-v4-flash at 131072 tokens unless a preset or a
/// scenario file is given, always the vector model, bounded so that the keys it keeps fit.
fn resolve(spec: &ScenarioSpec) -> Result<Scenario, CommandError> {
    let mut a = spec.clone();
    if a.preset.is_none() && a.file.is_none() {
        a.preset = Some("deepseek-v4-flash".into());
        if !a.fields.iter().any(|(f, _)| *f == Field::ContextLen) {
            a.fields.insert(0, (Field::ContextLen, "131072".into()));
        }
    }
    let mut s = a.resolve()?;
    s.model = Model::Vector;
    // The vector model's own limits apply only once the model is set.
    s.validate()?;
    // Comparing formats on the same draws keeps every entry key (N × head_dim f32 per thread).
    let bytes = s.n_candidates() as u128 * s.head_dim as u128 * 4;
    if bytes > 1 << 34 {
        return Err(CommandError::input(format!(
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
        return Err(CommandError::input(format!(
            "context_len = {}: formats compares the needle with distractors, and none of its {} candidate entries is one (each holds the needle or a hard negative); give a longer context",
            s.context_len,
            m.n_entries()
        )));
    }
    Ok(s)
}

/// Compares the formats on the same random queries and keys as fp32.
pub fn formats(spec: &ScenarioSpec, req: &FormatsRequest) -> Result<FormatsReport, CommandError> {
    let s = resolve(spec)?;
    super::check_trials(req.trials)?;
    crate::engine::check_threads(req.threads)?;
    let formats: Vec<Format> = if req.formats.is_empty() {
        default_formats()
    } else {
        req.formats
            .iter()
            .map(|f| f.parse::<Format>().map_err(|e| CommandError::input(format!("--format {f:?}: {e}"))))
            .collect::<Result<_, _>>()?
    };
    for f in &formats {
        if let Some(b) = f.block() {
            if !(s.head_dim as usize).is_multiple_of(b) {
                return Err(CommandError::input(format!(
                    "--format {f}: its block ({b}) must divide head_dim ({})",
                    s.head_dim
                )));
            }
        }
    }
    // `formats` keeps every trial's per-format summary (9 numbers a format) to average them,
    // and draws every key once per format: both bounded before any work.
    if req.trials > MAX_FORMATS_TRIALS {
        return Err(CommandError::input(format!(
            "--trials {}: formats keeps each trial's summary; allowed 1..={MAX_FORMATS_TRIALS}",
            req.trials
        )));
    }
    let per_trial = s.context_len.saturating_mul(s.head_dim as u64).saturating_mul(formats.len() as u64 + 1);
    if req.trials.saturating_mul(per_trial) > crate::engine::MAX_VECTOR_WORK_UNITS {
        return Err(CommandError::input(format!(
            "--trials {}: each trial draws {per_trial} key components (tokens × head_dim × (formats + 1)), and a run is \
             bounded at 2^40 so that it finishes; use at most {} trials",
            req.trials,
            (crate::engine::MAX_VECTOR_WORK_UNITS / per_trial).max(1)
        )));
    }
    let top_k = s.index_topk as usize;
    let work = || {
        let rows = compare_formats(&s, &formats, top_k, req.trials, req.seed);
        let fp32 = {
            let mut r = s.clone();
            r.q_format = Format::F32;
            r.k_format = Format::F32;
            effective_params(&r, req.trials, req.seed)
        };
        (rows, fp32)
    };
    let (rows, fp32) = crate::engine::in_pool(req.threads, work)?;
    Ok(FormatsReport { rows, fp32, top_k, trials: req.trials, seed: req.seed, scenario: s })
}

impl FormatsReport {
    /// The `formats --json` object.
    pub fn to_json(&self) -> serde_json::Value {
        json!({
            "formats": self.rows,
            "fp32_effective": self.fp32,
            "top_k": self.top_k,
            "trials": self.trials,
            "seed": self.seed,
            "n_candidates": self.scenario.n_candidates(),
            "scenario": scenario_json(&self.scenario),
            "version": env!("CARGO_PKG_VERSION"),
        })
    }

    /// The table `formats` prints.
    pub fn to_text(&self) -> String {
        let (s, fp32) = (&self.scenario, &self.fp32);
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
            self.trials,
            self.seed,
            self.top_k
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
        for r in &self.rows {
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
        out
    }
}
