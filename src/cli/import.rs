//! `dsa-sim import topk` (measured indexer selections from captures) and `dsa-sim import niah`
//! (needle-in-a-haystack harness results as a measured table).

use super::{emit, print_json, CliError};
use dsa_sim::output::{OutputError, OutputLock};
use std::path::{Path, PathBuf};

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
selections.csv has one row per line and layer: request,context_len,depth,layer,index_topk,selected \
(depth = needle_start / (context_len - needle_tokens), as the depth field). Files are streamed: a \
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
verdict --data read it as written. A folder with no recognisable file is refused.

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
    #[arg(long, value_name = "S", default_value_t = dsa_sim::harness::DEFAULT_MIN_SCORE)]
    pub min_score: f64,
    /// The index_topk column of the table: the deployment's k.
    #[arg(long, value_name = "K", default_value_t = 512)]
    pub index_topk: u64,
    /// Where to write the measured table (replaced only if dsa-sim wrote it).
    #[arg(long, short = 'o', value_name = "measured.csv")]
    pub out: PathBuf,
    /// Print one JSON object (format, cells) instead of the summary.
    #[arg(long)]
    pub json: bool,
}

/// Runs `dsa-sim import …`.
pub fn run(args: &ImportArgs) -> Result<(), CliError> {
    match &args.what {
        ImportCommand::Topk(a) => topk(a),
        ImportCommand::Niah(a) => niah(a),
    }
}

fn output_error(e: OutputError) -> CliError {
    if e.is_input() {
        CliError::input(e.to_string())
    } else {
        CliError::failure(e.to_string())
    }
}

/// Writes `text` to `out` atomically under its lock, replacing an existing file only when it
/// is one dsa-sim wrote: its first line is `ours` (an import's own first line).
fn write_owned(out: &Path, ours: &str, text: &str) -> Result<(), CliError> {
    if let Ok(m) = std::fs::metadata(out) {
        if m.is_file() {
            let mut first = String::new();
            let f = std::fs::File::open(out).map_err(|e| CliError::input(format!("--out {}: {e}", out.display())))?;
            use std::io::{BufRead, Read};
            let _ = std::io::BufReader::new(f.take(4096)).read_line(&mut first);
            if !first.trim_end().starts_with(ours) {
                return Err(CliError::input(format!(
                    "--out {}: the file exists and was not written by dsa-sim import (its first line is not `{ours}`): refusing to replace it; choose another --out or remove it yourself",
                    out.display()
                )));
            }
        }
    }
    dsa_sim::output::check_regular_target(out).map_err(output_error)?;
    let dir = out.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    if !dir.is_dir() {
        return Err(CliError::input(format!("--out {}: the folder {} does not exist", out.display(), dir.display())));
    }
    let _lock = OutputLock::acquire(out, out).map_err(output_error)?;
    dsa_sim::output::remove_stale_temporaries(out);
    dsa_sim::output::write_file_atomic(out, text.as_bytes()).map_err(output_error)
}

fn topk(a: &TopkArgs) -> Result<(), CliError> {
    let options = dsa_sim::capture::Options {
        layers: a.layers,
        index_topk: a.index_topk,
        compress_ratio: a.compress_ratio,
        overlap: a.overlap,
    };
    let imp = dsa_sim::capture::import(&a.manifest, &options)?;
    write_owned(&a.out, dsa_sim::capture::CSV_HEADER, &imp.csv())?;
    if a.json {
        let mut j = imp.json();
        j["out"] = serde_json::json!(a.out.display().to_string());
        return print_json(&j);
    }
    let mut t = imp.text();
    t.push_str(&format!("wrote {} ({} rows)\n", a.out.display(), imp.selections.len() as u64 * a.layers));
    emit(&t)
}

fn niah(a: &NiahArgs) -> Result<(), CliError> {
    let options = dsa_sim::harness::Options { min_score: a.min_score, index_topk: a.index_topk };
    let imp = dsa_sim::harness::import(&a.paths, &options)?;
    let csv = imp.csv();
    // The table must be one that calibrate and verdict accept: checked with the one reader.
    dsa_sim::measured::parse_csv(&csv, &a.out.display().to_string())
        .map_err(|e| CliError::failure(format!("internal: the imported table does not parse: {e}")))?;
    write_owned(&a.out, "# provenance: dsa-sim import niah", &csv)?;
    if a.json {
        let mut j = imp.json();
        j["out"] = serde_json::json!(a.out.display().to_string());
        return print_json(&j);
    }
    let trials: u64 = imp.cells.iter().map(|c| c.trials).sum();
    let hits: u64 = imp.cells.iter().map(|c| c.hits).sum();
    let mut t = format!(
        "{} results: {} trials, {} hits, {} cells (context_len, depth, needle)\n",
        imp.format_name(),
        trials,
        hits,
        imp.cells.len()
    );
    if imp.skipped > 0 {
        t.push_str(&format!("{} file(s) matched no format and were skipped\n", imp.skipped));
    }
    t.push_str(&format!("wrote {}\n", a.out.display()));
    emit(&t)
}
