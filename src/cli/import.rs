//! `dsa-sim import topk` (measured indexer selections from captures), `dsa-sim import scores`
//! (captured indexer scores: ranks, tail, predictions) and `dsa-sim import niah`
//! (needle-in-a-haystack harness results as a measured table).

use super::{emit, print_json, CliError, ScenarioArgs};
use crate::commands::import::{
    self as import, NiahRequest, ScoresRequest, TailChoice, TopkRequest, DEFAULT_MIN_SCORE, MAX_TAIL_CLASSES,
};
use crate::commands::DEFAULT_SEED;
use std::path::PathBuf;

/// Arguments of `dsa-sim import`.
#[derive(clap::Args, Debug)]
pub struct ImportArgs {
    /// What to import.
    #[command(subcommand)]
    pub what: ImportCommand,
}

/// The importers.
#[derive(clap::Subcommand, Debug)]
pub enum ImportCommand {
    /// Which layers' indexers selected the needle: captured top-k indices (SGLang, vLLM, .npz, .npy) to selections.csv.
    Topk(TopkArgs),
    /// Captured indexer scores (.npz): the needle's exact rank, the distractors' tail, and recall predicted at other context lengths and k.
    Scores(ScoresArgs),
    /// Needle-in-a-haystack results (gkamradt, RULER, lm-eval, NeedleBench) to a measured table for calibrate and verdict.
    Niah(NiahArgs),
}

const TOPK_HELP: &str = "The manifest (CSV) has one line per needle query: \
file,row,context_len,needle_start,needle_tokens, optional request and label. `file` is relative to \
the manifest's folder; `row` is the row of the capture (the selection made at query token `row`); \
`request` (default 0) picks the n-th indexer_topk string of a JSON/JSONL file. Each file is \
recognised by its content: .npz (array `topk_index`), .npy, SGLang replies (meta_info.indexer_topk, \
base64 of int32), vLLM replies (choices[i].indexer_topk, base64 of .npy bytes); every array is \
(rows, layers, index_topk) of entry indices, -1 for unused slots.

For each line and layer the needle counts as selected when an entry that pools one of its tokens \
is among the indices (entry i pools tokens i*c..i*c+c-1, with --overlap true also the c before). \
selections.csv has one row per line and layer: request,context_len,depth,layer,index_topk,selected, \
then the facts the import used: needle_start,needle_tokens,compress_ratio,overlap (depth = \
needle_start / (context_len - needle_tokens), as the depth field). calibrate, verdict and plan \
apply each request's facts to its own row; a flag that contradicts them is refused. Request names are \
made unique (a repeated label becomes `LABEL (2)`, with a note) and the table is read back with the \
measured reader before it is written. Files are streamed: a \
multi-gigabyte reply is read in bounded memory. Any bad input (a missing file, a shape other than \
(rows, --layers, --index-topk), base64 that does not decode, an index outside the context's \
entries, a needle outside the context) stops with one line and writes nothing. Formats: \
docs/capture.md.

Example (DeepSeek-V4-Flash: c = 4 with overlap, k = 512):
  dsa-sim import topk --manifest caps/manifest.csv --layers 21 --index-topk 512 \\
      --compress-ratio 4 --overlap true --out selections.csv";

/// Arguments of `dsa-sim import topk`.
#[derive(clap::Args, Debug)]
#[command(after_help = TOPK_HELP)]
pub struct TopkArgs {
    /// The manifest: file,row,context_len,needle_start,needle_tokens[,request][,label].
    #[arg(long, value_name = "M.csv")]
    pub manifest: PathBuf,
    /// Indexer layers in each capture (the array's second axis).
    #[arg(long, value_name = "N")]
    pub layers: u64,
    /// Indices per row and layer (the array's third axis).
    #[arg(long, value_name = "K")]
    pub index_topk: u64,
    /// Tokens per entry: 1 for token-level DSA (DeepSeek-V3.2), 4 for V4's compressed sparse attention.
    #[arg(long, value_name = "C")]
    pub compress_ratio: u64,
    /// Overlapping compression (V4 CSA): entry i also pools the c tokens before its block.
    #[arg(long, value_name = "BOOL", action = clap::ArgAction::Set)]
    pub overlap: bool,
    /// Where to write selections.csv (replaced only if dsa-sim wrote it).
    #[arg(long, short = 'o', value_name = "selections.csv")]
    pub out: PathBuf,
    /// Print one JSON object (requests, by_context, layers with Wilson intervals, per_request, agreement) instead of the summary.
    #[arg(long)]
    pub json: bool,
}

const NIAH_HELP: &str = "PATH is a result folder (walked recursively) or a file; each file is \
recognised by its content:
  gkamradt     *_results.json with context_length, depth_percent (0-100), score (1-10)
  RULER        {root}/{model}/{bench}/{seq}/pred/{task}.jsonl: pred, outputs, input, length
  lm-eval      samples_*.jsonl of --log_samples (ruler tasks): doc.input, doc.outputs, doc.max_length
  NeedleBench  OpenCompass predictions {dataset}.json, the dataset named Length{L}Depth{D}...

Trials are counted per (context_len, depth, needle): a gkamradt trial is a hit when score >= \
--min-score (default 10: the evaluator's rubric gives 10 only to a completely correct answer); \
RULER, lm-eval and NeedleBench trials when every expected answer occurs in the prediction \
(case-insensitive, RULER's string_match_all). Depth is in [0, 1]; RULER and lm-eval record none, \
so it is recovered from where the answer sits in the prompt (rounded to tenths), or left empty. \
The table starts with a `# provenance:` line naming the format and paths; calibrate --data and \
verdict --data read it as written (with --out; without it the table is printed on stdout). A gkamradt \
score outside 1-10 is refused; files that cannot be read as text (binary, larger than 64 MiB) are \
skipped with a note. A folder with no recognisable file is refused.

Example:
  dsa-sim import niah results/ --index-topk 512 --out measured.csv
  dsa-sim verdict --preset deepseek-v4-flash --data measured.csv";

/// Arguments of `dsa-sim import niah`.
#[derive(clap::Args, Debug)]
#[command(after_help = NIAH_HELP)]
pub struct NiahArgs {
    /// Result folders or files.
    #[arg(value_name = "PATH", required = true)]
    pub paths: Vec<PathBuf>,
    /// gkamradt: a score of at least S (1-10) counts as a hit.
    #[arg(long, value_name = "S", default_value_t = DEFAULT_MIN_SCORE)]
    pub min_score: f64,
    /// The index_topk column of the table: the deployment's k.
    #[arg(long, value_name = "K", default_value_t = 512)]
    pub index_topk: u64,
    /// Where to write the measured table (replaced only if dsa-sim wrote it); without it the table is printed on stdout.
    #[arg(long, short = 'o', value_name = "measured.csv")]
    pub out: Option<PathBuf>,
    /// Print one JSON object (format, cells, and the table as `csv` when there is no --out) instead of the summary.
    #[arg(long)]
    pub json: bool,
}

/// Runs `dsa-sim import …`.
pub fn run(args: &ImportArgs) -> Result<(), CliError> {
    match &args.what {
        ImportCommand::Topk(a) => topk(a),
        ImportCommand::Scores(a) => scores(a),
        ImportCommand::Niah(a) => niah(a),
    }
}

fn topk(a: &TopkArgs) -> Result<(), CliError> {
    let req = TopkRequest {
        manifest: &a.manifest,
        layers: a.layers,
        index_topk: a.index_topk,
        compress_ratio: a.compress_ratio,
        overlap: a.overlap,
        out: &a.out,
    };
    let imported = import::topk(&req)?;
    if a.json {
        print_json(&imported.to_json())
    } else {
        emit(&imported.to_text())
    }
}

fn niah(a: &NiahArgs) -> Result<(), CliError> {
    let req = NiahRequest { paths: &a.paths, min_score: a.min_score, index_topk: a.index_topk, out: a.out.as_deref() };
    let imported = import::niah(&req)?;
    // Without --out the table itself is the output (`import niah DIR > measured.csv`), or, with
    // --json, one object that carries it as `csv`.
    if a.json {
        print_json(&imported.to_json())
    } else {
        emit(&imported.to_text())
    }
}

/// Arguments of `dsa-sim import scores`.
#[derive(clap::Args, Debug)]
#[command(after_help = "Layouts (numpy.savez):\n  \
one layer:  scores (float32/float64, queries x candidates), needle_index (integer, one per query)\n  \
per layer:  indexer_scores_0, indexer_scores_1, ... (each queries x candidates), needle_index\n\
A candidate scored -inf is masked (no candidate). The rank is 1 + the candidates scoring strictly \
above the needle's. Predictions resample each query's own distractors at the scenario's candidate \
count (context_len / compress_ratio) with the upper tail from a generalised-Pareto fit: either one per \
tail class of queries standardised by their mean and sd (the class count chosen by held-out \
likelihood), or one pooled shape over each query's tail located and scaled by its own top scores, \
whichever, fitted on half of every query's distractors, best predicts the recall the whole capture \
measures; the band is a 95% bootstrap over queries. Reference: docs/capture.md.\n\nExample:\n  \
dsa-sim import scores capture.npz --preset deepseek-v4-flash \\\n      \
--predict context_len=16K,64K,256K --predict index_topk=512,1024,2048")]
pub struct ScoresArgs {
    /// The capture (.npz).
    #[arg(value_name = "FILE.npz")]
    pub file: PathBuf,
    #[command(flatten)]
    #[allow(missing_docs)]
    pub scenario: ScenarioArgs,
    /// A what-if axis FIELD=VALUES (repeatable; the grid is their product), e.g. context_len=16K,64K.
    #[arg(long, value_name = "FIELD=VALUES")]
    pub predict: Vec<String>,
    /// Bootstrap resamples for the prediction band.
    #[arg(long, default_value_t = 200, value_name = "N")]
    pub resamples: usize,
    /// Seed of the bootstrap: resample i draws only from (seed, i).
    #[arg(long, default_value_t = DEFAULT_SEED, value_name = "S")]
    pub seed: u64,
    /// Most tail classes of queries per layer (the count is chosen by 5-fold held-out
    /// likelihood up to this); 1 pools every query's tail into one law.
    #[arg(long, default_value_t = MAX_TAIL_CLASSES, value_name = "N", value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=(MAX_TAIL_CLASSES as u64)))]
    pub tail_classes: usize,
    /// The tail models that compete for each layer: auto (the classes and the query-top model,
    /// the one that best predicts the capture's own held-out half; the query-top model's
    /// fractions mixed by how well each predicts it), classes, or query-top.
    #[arg(long, value_enum, default_value_t = TailModelArg::Auto, value_name = "MODEL")]
    pub tail_model: TailModelArg,
    /// Print one JSON object on stdout instead of the summary.
    #[arg(long)]
    pub json: bool,
}

/// `--tail-model`.
#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum TailModelArg {
    /// The classes and the query-top model compete; validation on the capture chooses.
    Auto,
    /// Queries standardised by their mean and sd, pooled in tail classes.
    Classes,
    /// Each query's tail located by its own top scores, its scale drawn from a law shared by the
    /// queries (one shape), each query averaged over its posterior scale.
    QueryTop,
}

fn scores(args: &ScoresArgs) -> Result<(), CliError> {
    let req = ScoresRequest {
        file: &args.file,
        predict: &args.predict,
        resamples: args.resamples,
        seed: args.seed,
        tail_classes: args.tail_classes,
        tail_model: match args.tail_model {
            TailModelArg::Auto => TailChoice::Auto,
            TailModelArg::Classes => TailChoice::Classes,
            TailModelArg::QueryTop => TailChoice::QueryTop,
        },
    };
    let report = import::scores(&args.scenario.spec(), &req, &super::progress::Bar::resamples(!args.json))?;
    if args.json {
        print_json(&report.to_json())
    } else {
        emit(&report.to_text())
    }
}
