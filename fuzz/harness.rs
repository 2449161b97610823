//! The checks behind every fuzz target, shared by the libFuzzer binaries (fuzz/fuzz_targets/)
//! and by `tests/repo/fuzz_corpus.rs`, which replays the committed corpus under a plain `cargo test`.
//!
//! Each function takes arbitrary bytes and panics only when dsa-sim breaks a promise: a parser
//! that panics, an error message that is not one printable line, a value accepted that does not
//! validate or does not round-trip, an engine result outside [0, 1].

#![allow(dead_code)]

use dsa_sim::engine::analytic::Analytic;
use dsa_sim::engine::montecarlo::{simulate, McPath};
use dsa_sim::scenario::Scenario;
use dsa_sim::sweep::{Axis, Grid, MAX_RANGE_POINTS};

/// Largest context the engine part of [`scenario_toml`] evaluates (larger ones are shrunk).
pub const ENGINE_CONTEXT_CAP: u64 = 4096;

/// An error message must say something and, as the CLI prints it, be one printable line.
pub fn assert_one_line(what: &str, msg: &str) {
    assert!(!msg.trim().is_empty(), "{what}: empty error message");
    let printed = dsa_sim::error::one_line(msg);
    assert!(!printed.chars().any(|c| c.is_control()), "{what}: not one printable line: {printed:?}");
}

/// Scenario TOML: parse + validate; accepted scenarios round-trip through TOML and JSON and are
/// evaluated cheaply by the analytic engine (and 32 Monte Carlo trials) with the context capped.
pub fn scenario_toml(data: &[u8]) {
    // The CLI reads scenario files with read_to_string: bytes that are not UTF-8 are refused
    // before they reach the parser (the hostile-input tests check that message).
    let Ok(text) = std::str::from_utf8(data) else { return };
    let s = match Scenario::from_toml_str(text) {
        Ok(s) => s,
        Err(e) => {
            assert_one_line("scenario TOML", &e.to_string());
            return;
        }
    };
    s.validate().expect("an accepted scenario validates");
    let back = Scenario::from_toml_str(&s.to_toml_string()).expect("the TOML of an accepted scenario parses");
    assert_eq!(back, s, "TOML round trip");
    let json = serde_json::to_string(&s).expect("a scenario serialises to JSON");
    assert_eq!(Scenario::from_json_str(&json).expect("its JSON parses"), s, "JSON round trip");
    evaluate_small(s);
}

/// Shrinks a scenario to at most [`ENGINE_CONTEXT_CAP`] tokens and checks the engines on it.
fn evaluate_small(mut s: Scenario) {
    if s.context_len > ENGINE_CONTEXT_CAP {
        s.context_len = ENGINE_CONTEXT_CAP;
    }
    s.repeat = s.repeat.min(256);
    s.layers = s.layers.min(64);
    if s.model == dsa_sim::scenario::Model::Vector {
        // The vector model costs heads × head_dim per entry: keep it small.
        s.heads = s.heads.min(4);
        s.head_dim = s.head_dim.min(64);
        s.outlier_channels = s.outlier_channels.min(s.head_dim);
        if s.validate().is_err() {
            return;
        }
        let run = dsa_sim::indexer::simulate(&s, 3, 7);
        assert!(run.successes <= run.trials && run.trials == 3, "vector Monte Carlo counts for {s:?}");
        return;
    }
    if s.validate().is_err() {
        return;
    }
    let n = s.n_candidates();
    if let Ok(a) = Analytic::new(&s) {
        let r = a.recall();
        assert!(r.is_finite() && (0.0..=1.0).contains(&r), "analytic recall {r} for {s:?}");
        let mut last = 0.0;
        for j in [1, s.index_topk.min(n), n] {
            if j == 0 {
                continue;
            }
            let c = a.rank_cdf(j);
            assert!(c.is_finite() && (0.0..=1.0).contains(&c), "P(rank <= {j}) = {c} for {s:?}");
            assert!(c >= last - 1e-6, "rank CDF decreases at j = {j}: {c} < {last} for {s:?}");
            last = c;
        }
        if let Some(q) = a.rank_quantile(0.5) {
            assert!(q >= 1 && q <= n.max(1), "median rank {q} outside 1..={n} for {s:?}");
        }
    }
    let run = simulate(&s, 32, 7, McPath::Auto).expect("Monte Carlo runs any small scenario");
    assert!(run.successes <= run.trials && run.trials == 32, "Monte Carlo counts for {s:?}");
}

/// Measured-data CSV through the one reader ([`dsa_sim::measured::parse_csv`]) that
/// `dsa-sim calibrate` / `verdict` and the `dsa-sim run` overlays share.
pub fn measured_csv(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else { return };
    calibration_csv(text);
}

/// A sweep axis (`--vary FIELD=SPEC`): accepted axes have at most [`MAX_RANGE_POINTS`] values,
/// each of which sets the field; a grid over it either builds with every point valid or is
/// refused with one line.
pub fn sweep_axis(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let axis = match Axis::parse(text) {
        Ok(a) => a,
        Err(e) => {
            assert_one_line("sweep axis", &e.to_string());
            return;
        }
    };
    assert!(!axis.values.is_empty() && axis.values.len() <= MAX_RANGE_POINTS, "{} values", axis.values.len());
    let mut probe = Scenario::default();
    assert_eq!(axis.values.len(), axis.texts.len());
    for (v, t) in axis.values.iter().zip(&axis.texts) {
        probe.set(axis.field, *v).expect("every value of an accepted axis sets its field");
        probe.set_text(axis.field, t).expect("every text of an accepted axis parses");
        assert_eq!(probe.get(axis.field), *v, "an axis value is its text parsed");
    }
    match Grid::new(Scenario::default(), vec![axis], false) {
        Ok(g) => {
            for i in 0..g.len() {
                g.scenario(i).expect("every point of a built grid validates");
            }
        }
        Err(e) => assert_one_line("sweep grid", &e.to_string()),
    }
}

/// The calibration loader: accepted rows are well-formed counts, and each either applies to a
/// scenario that validates or is refused with one line.
fn calibration_csv(text: &str) {
    match dsa_sim::measured::parse_csv(text, "fuzz.csv") {
        Err(e) => assert_one_line("calibration CSV", &e.to_string()),
        Ok(ds) => {
            assert!(!ds.rows.is_empty(), "a loaded table has rows");
            for note in &ds.notes {
                assert_one_line("calibration CSV note", note);
            }
            let base = Scenario::default();
            for r in &ds.rows {
                assert!(r.trials >= 1 && r.hits <= r.trials, "{r:?}");
                assert!(r.context_len >= 1 && r.index_topk >= 1, "{r:?}");
                let p = r.observed();
                assert!((0.0..=1.0).contains(&p), "{r:?}");
                let (lo, hi) = r.interval();
                assert!(0.0 <= lo && lo <= p + 1e-12 && p <= hi + 1e-12 && hi <= 1.0, "{r:?}: [{lo}, {hi}]");
                if let Some(d) = r.depth {
                    assert!((0.0..=1.0).contains(&d), "{r:?}");
                }
                match r.apply(&base) {
                    Ok(s) => s.validate().expect("an applied row validates"),
                    Err(e) => assert_one_line("calibration row", &e.to_string()),
                }
            }
        }
    }
}

/// `dsa-sim quantize`: the first line holds the flags as `FORMAT|BLOCK|SCALE|AMAX_FLOOR` (later
/// parts optional), the rest is stdin. Accepted input gives one value per number, in text and
/// in JSON alike; element formats (no block) are idempotent and monotone.
pub fn quantize_input(data: &[u8]) {
    use dsa_sim::error::{Classify, ErrorKind};
    use dsa_sim::formats::text::{quantize_text, QuantizeRequest};
    let Ok(text) = std::str::from_utf8(data) else { return };
    let (head, body) = text.split_once('\n').unwrap_or((text, ""));
    let mut parts = head.split('|').map(str::to_string);
    let mut args = QuantizeRequest {
        format: parts.next(),
        block: parts.next().filter(|b| !b.is_empty()),
        scale: parts.next().filter(|b| !b.is_empty()),
        amax_floor: parts.next().filter(|b| !b.is_empty()),
        json: false,
    };
    let out = match quantize_text(&args, body) {
        Ok(out) => out,
        Err(e) => {
            assert_eq!(e.kind(), ErrorKind::Input, "quantize: bad input must exit 2: {e}");
            assert_one_line("quantize", &e.to_string());
            return;
        }
    };
    let n = body.split_whitespace().count();
    let values: Vec<f32> = out.lines().map(|l| l.parse::<f32>().expect("every output line is a number")).collect();
    assert_eq!(values.len(), n, "one value per input number");
    args.json = true;
    let json = quantize_text(&args, body).expect("JSON output succeeds where text output does");
    let v: serde_json::Value = serde_json::from_str(&json).expect("quantize --json prints one JSON object");
    assert_eq!(v["count"].as_u64(), Some(n as u64));
    let element = args.block.is_none() && !args.format.as_deref().unwrap_or("").contains(':');
    let fmt = args.format.as_deref().unwrap_or("").trim().to_ascii_lowercase();
    let integer = fmt.starts_with("int");
    if element
        && !integer
        && !["mxfp4", "nvfp4"].contains(&fmt.as_str())
        && args.scale.is_none()
        && args.amax_floor.is_none()
    {
        // Idempotent: the dequantized values are representable.
        args.json = false;
        let again_in: String = values.iter().map(|x| format!("{} ", dsa_sim::formats::Shortest(*x))).collect();
        let again = quantize_text(&args, &again_in).expect("dequantized values quantize again");
        let twice: Vec<f32> = again.lines().map(|l| l.parse::<f32>().unwrap()).collect();
        for (a, b) in values.iter().zip(&twice) {
            assert!(a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan()), "not idempotent: {a} -> {b}");
        }
        // Monotone: a larger input never gives a smaller value.
        let inputs: Vec<f32> = body.split_whitespace().map(|t| t.parse::<f32>().unwrap()).collect();
        for i in 0..n {
            for j in 0..n {
                if inputs[i] < inputs[j] && !values[i].is_nan() && !values[j].is_nan() {
                    assert!(
                        values[i] <= values[j],
                        "not monotone: {} -> {}, {} -> {}",
                        inputs[i],
                        values[i],
                        inputs[j],
                        values[j]
                    );
                }
            }
        }
    }
}

/// Marks the start of a side file in an [`experiment_toml`] input: `#file PATH` on its own line.
pub const FILE_MARKER: &str = "#file ";

/// Most grid points of an accepted experiment that [`experiment_toml`] also runs.
pub const RUN_POINTS_CAP: usize = 48;

/// Experiment files with their measured tables (`dsa-sim run`): the input is the experiment
/// TOML, then any number of side files, each introduced by a line `#file PATH` (PATH relative,
/// components of `[A-Za-z0-9._ -]` not starting with `.`, at most three deep; others are
/// skipped), all written into a fresh folder.
///
/// Loading either fails with one printable line or gives an experiment whose figure and data
/// names are unique and whose output files do not collide (recomputed here, independently of
/// the loader's own check). Accepted experiments of at most [`RUN_POINTS_CAP`] points are then
/// run with a stand-in evaluator (a deterministic function of the scenario, so the engines'
/// cost is out of the picture) into a fresh folder: the run succeeds, every file it reports
/// exists, no temporary or staging folder is left, every SVG parses as XML, and report.md holds
/// only printable characters and tables whose rows have their header's cells.
pub fn experiment_toml(data: &[u8]) {
    use dsa_sim::experiment::{Experiment, RunSettings};
    let Ok(text) = std::str::from_utf8(data) else { return };
    let marker = format!("\n{FILE_MARKER}");
    let mut parts = text.split(marker.as_str());
    let source = parts.next().unwrap_or("");
    let root =
        std::env::temp_dir().join(format!("dsa-sim-fuzz-exp-{}-{:?}", std::process::id(), std::thread::current().id()));
    let _ = std::fs::remove_dir_all(&root);
    let dir = root.join("in");
    std::fs::create_dir_all(&dir).unwrap();
    for part in parts {
        let (path, body) = part.split_once('\n').unwrap_or((part, ""));
        let comps: Vec<&str> = path.trim_end_matches('\r').split('/').collect();
        let ok = comps.len() <= 3
            && comps.iter().all(|c| {
                !c.is_empty()
                    && !c.starts_with('.')
                    && c.chars().all(|ch| ch.is_ascii_alphanumeric() || "._ -".contains(ch))
            });
        if !ok {
            continue;
        }
        let p = dir.join(comps.join("/"));
        if let Some(parent) = p.parent() {
            if std::fs::create_dir_all(parent).is_err() {
                continue;
            }
        }
        let _ = std::fs::write(&p, body);
    }
    let exp_path = dir.join("exp.toml");
    let _ = std::fs::write(&exp_path, source);
    let exp = match Experiment::parse(source, &exp_path) {
        Ok(e) => e,
        Err(e) => {
            assert_one_line("experiment", &e.to_string());
            let _ = std::fs::remove_dir_all(&root);
            return;
        }
    };
    // Names: unique figure and data names, and no two outputs on one file.
    let mut outputs: Vec<String> = vec!["scenario.toml".into(), "experiment.toml".into(), "report.md".into()];
    for (i, f) in exp.figures.iter().enumerate() {
        assert!(exp.figures[..i].iter().all(|g| g.spec.name != f.spec.name), "figure `{}` twice", f.spec.name);
        let n = &f.spec.name;
        outputs.extend([
            format!("data/{n}.csv"),
            format!("data/{n}.json"),
            format!("figures/{n}.svg"),
            format!("figures/{n}.png"),
        ]);
        assert!(!f.grid.is_empty(), "figure `{n}` has no points");
        if f.spec.kind == dsa_sim::experiment::FigureKind::RegimeMap {
            let k = f.grid.axes.last().unwrap();
            assert!(k.values.len() >= 2, "regime map `{n}` with {} k", k.values.len());
        }
    }
    for (i, d) in exp.data.iter().enumerate() {
        assert!(exp.data[..i].iter().all(|x| x.spec.name != d.spec.name), "data `{}` twice", d.spec.name);
        let name = d.path.file_name().and_then(|n| n.to_str()).unwrap_or("measured.csv");
        outputs.push(format!("data/measured-{name}"));
    }
    let mut sorted = outputs.clone();
    sorted.sort();
    assert!(sorted.windows(2).all(|w| w[0] != w[1]), "accepted experiment with colliding outputs: {sorted:?}");
    if exp.points() > RUN_POINTS_CAP {
        let _ = std::fs::remove_dir_all(&root);
        return;
    }
    let out = root.join("out");
    let eval = |s: &Scenario, rank: bool| -> Result<dsa_sim::sweep::PointResult, dsa_sim::engine::EngineError> {
        // A smooth, deterministic stand-in for recall and rank: enough to draw every figure kind.
        let n = s.n_candidates().max(1) as f64;
        let r = (s.index_topk as f64 / n).min(1.0) * (0.5 + 0.5 * (s.dprime / 8.0).tanh().abs());
        let q = |p: f64| Some(((1.0 - p) * n).max(1.0) as u64);
        Ok(dsa_sim::sweep::PointResult {
            recall: r,
            ci_low: r * 0.9,
            ci_high: (r * 1.1).min(1.0),
            engine: "analytic".into(),
            trials: None,
            rank: rank.then(|| dsa_sim::engine::RankQuantiles { p05: q(0.95), p50: q(0.5), p90: q(0.1), p95: q(0.05) }),
        })
    };
    let settings = RunSettings { threads: Some(1), ..RunSettings::default() };
    let files = match dsa_sim::experiment::run(&exp, &out, &eval, &settings, &dsa_sim::progress::Silent) {
        Ok(f) => f,
        Err(e) => panic!("an accepted experiment fails to run: {}", dsa_sim::error::one_line(&e.to_string())),
    };
    for f in &files {
        assert!(out.join(f).is_file(), "{} reported but missing", f.display());
    }
    // Nothing hidden is left but the result marker and the lock file: no temporary, no staging
    // or old folder.
    for entry in walk(&root).into_iter().filter(|e| !e.starts_with(&dir)) {
        let name = entry.file_name().and_then(|n| n.to_str()).unwrap_or("");
        assert!(
            !name.starts_with('.') || name == dsa_sim::output::RESULT_MARKER || entry == root.join(".out.lock"),
            "left behind: {}",
            entry.display()
        );
    }
    for f in files.iter().filter(|f| f.extension().is_some_and(|x| x == "svg")) {
        let svg = std::fs::read_to_string(out.join(f)).unwrap();
        if let Err(e) = roxmltree::Document::parse(&svg) {
            panic!("{} is not well-formed XML: {e}", f.display());
        }
    }
    let md = std::fs::read_to_string(out.join("report.md")).unwrap();
    // The author's own markdown (description, captions) may hold tables of any shape.
    let free_pipes = exp.description.contains('|')
        || exp.figures.iter().any(|f| f.spec.caption.as_deref().is_some_and(|c| c.contains('|')));
    assert_markdown_tables(&md, !free_pipes);
    let _ = std::fs::remove_dir_all(&root);
}

/// Every path under `dir` (files and folders), depth first.
fn walk(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    if let Ok(rd) = std::fs::read_dir(dir) {
        for e in rd.flatten() {
            let p = e.path();
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                out.extend(walk(&p));
            }
            out.push(p);
        }
    }
    out
}

/// report.md: printable (line feeds and tabs aside), and (when `tables`) every table row (a block of lines
/// starting `|` under a `|---` delimiter row) has as many unescaped `|` as its header.
pub fn assert_markdown_tables(md: &str, tables: bool) {
    assert!(!md.chars().any(|c| c.is_control() && c != '\n' && c != '\t'), "control characters in report.md");
    if !tables {
        return;
    }
    let pipes = |line: &str| {
        let (mut n, mut backslashes) = (0, 0);
        for c in line.chars() {
            if c == '|' && backslashes % 2 == 0 {
                n += 1;
            }
            backslashes = if c == '\\' { backslashes + 1 } else { 0 };
        }
        n
    };
    let lines: Vec<&str> = md.lines().collect();
    let mut i = 0;
    while i < lines.len() {
        if lines[i].starts_with('|') && lines.get(i + 1).is_some_and(|l| l.starts_with("|---")) {
            let header = pipes(lines[i]);
            while i < lines.len() && lines[i].starts_with('|') {
                assert_eq!(pipes(lines[i]), header, "report.md table row {:?}", lines[i]);
                i += 1;
            }
        } else {
            i += 1;
        }
    }
}

/// A fresh scratch folder of this process and thread under the system temporary folder.
fn scratch(tag: &str) -> std::path::PathBuf {
    let root = std::env::temp_dir().join(format!(
        "dsa-sim-fuzz-{tag}-{}-{:?}",
        std::process::id(),
        std::thread::current().id()
    ));
    let _ = std::fs::remove_dir_all(&root);
    std::fs::create_dir_all(&root).expect("scratch folder");
    root
}

/// Capture files (`import topk`): the first byte picks the shape (layers 1..=3, index_topk
/// 1..=4) and the geometry (compress ratio 1 or 4, overlap), the rest is the file, read by
/// content as `.npz`, `.npy` or SGLang / vLLM replies through `capture::import` with a manifest
/// asking for rows 0 and 1 of request 0 and row 0 of request 1 at context 64 (needle 8..10).
/// Errors are one printable line naming the file; an accepted capture has one selection per
/// layer for every manifest line, and the same bytes give the same result twice.
pub fn import_capture(data: &[u8]) {
    let Some((&b, file)) = data.split_first() else { return };
    let options = dsa_sim::import::topk::Options {
        layers: 1 + u64::from(b % 3),
        index_topk: 1 + u64::from((b / 3) % 4),
        compress_ratio: if b & 0x40 != 0 { 4 } else { 1 },
        overlap: b & 0x80 != 0,
    };
    let root = scratch("cap");
    std::fs::write(root.join("f.bin"), file).expect("write the capture");
    let manifest = root.join("m.csv");
    std::fs::write(
        &manifest,
        // Two lines under one label and one starting with `#`: the names must come out unique and
        // the table must read back whole.
        "file,request,row,context_len,needle_start,needle_tokens,label\nf.bin,0,0,64,8,2,a\nf.bin,0,1,64,8,2,a\nf.bin,1,0,64,8,2,#b\n",
    )
    .expect("write the manifest");
    let first = dsa_sim::import::topk::import(&manifest, &options);
    match &first {
        Ok(imp) => {
            assert_eq!(imp.selections.len(), 3);
            for s in &imp.selections {
                assert_eq!(s.selected.len() as u64, options.layers, "one selection per layer");
            }
            assert_eq!(imp.csv().lines().count() as u64, 1 + 3 * options.layers);
            let csv = imp.checked_csv("sel.csv").expect("the selection table reads back with the one reader");
            let ds = dsa_sim::measured::parse_csv(&csv, "sel.csv").expect("and parses");
            assert_eq!(ds.total_trials(), 3);
            let names: Vec<&str> = imp.selections.iter().map(|s| s.name.as_str()).collect();
            assert_eq!(names, ["a", "a (2)", "#b"]);
            let j = imp.json();
            assert_eq!(j["requests"], 3);
            if let Some((p, k)) = imp.agreement() {
                assert!((0.0..=1.0).contains(&p), "agreement {p}");
                assert!(k.is_none_or(|k| k.is_finite() && k <= 1.0 + 1e-12), "kappa {k:?}");
            }
        }
        Err(e) => {
            let m = e.to_string();
            assert_one_line("import topk", &m);
            assert!(m.contains("f.bin") || m.starts_with("--"), "the error names the file: {m}");
        }
    }
    let again = dsa_sim::import::topk::import(&manifest, &options);
    assert_eq!(
        first.as_ref().map(|i| i.csv()).map_err(|e| e.to_string()),
        again.as_ref().map(|i| i.csv()).map_err(|e| e.to_string())
    );
    let _ = std::fs::remove_dir_all(&root);
}

/// Harness results (`import niah`): the first byte picks where the rest is put (a gkamradt
/// results file, a RULER `4096/pred/{task}.jsonl`, an lm-eval samples log, a NeedleBench
/// predictions file, or all four copies), read through `harness::import` on the folder.
/// Errors are one printable line; an accepted folder gives a table the one measured reader
/// accepts, with the same trials and hits, depths in [0, 1] and hits ≤ trials.
pub fn import_niah(data: &[u8]) {
    let Some((&b, file)) = data.split_first() else { return };
    let root = scratch("niah");
    let names = [
        "m_len_1000_depth_50_results.json",
        "m/synthetic/4096/pred/niah_single_1.jsonl",
        "lm/samples_niah_single_1_2026-12-01T00-00-00.jsonl",
        "predictions/m/Length4000Depth50_origin_en_4k.json",
    ];
    let chosen: Vec<&str> = if b as usize % 5 == 4 { names.to_vec() } else { vec![names[b as usize % 5]] };
    for n in &chosen {
        let p = root.join(n);
        std::fs::create_dir_all(p.parent().expect("a parent")).expect("folders");
        std::fs::write(&p, file).expect("write the result");
    }
    let options = dsa_sim::import::niah::Options { min_score: f64::from(b % 11), index_topk: 512 };
    match dsa_sim::import::niah::import(std::slice::from_ref(&root), &options) {
        Ok(imp) => {
            let csv = imp.checked_csv("measured.csv").expect("the imported table reads back with the one reader");
            let ds = dsa_sim::measured::parse_csv(&csv, "measured.csv")
                .expect("the imported table parses with the one reader");
            let t: u64 = imp.cells.iter().map(|c| c.trials).sum();
            let h: u64 = imp.cells.iter().map(|c| c.hits).sum();
            assert_eq!(ds.total_trials(), t);
            assert_eq!(ds.rows.iter().map(|r| r.hits).sum::<u64>(), h);
            for c in &imp.cells {
                assert!(c.hits <= c.trials && c.trials >= 1);
                assert!(c.depth.is_none_or(|d| (0.0..=1.0).contains(&d)), "depth {:?}", c.depth);
            }
            assert!(ds.provenance.is_some_and(|p| p.contains("dsa-sim import niah")));
            let _ = imp.json();
        }
        Err(e) => assert_one_line("import niah", &e.to_string()),
    }
    let _ = std::fs::remove_dir_all(&root);
}

/// Captured scores (`import scores`): the input is the `.npz` file, read by the one reader;
/// an accepted capture gives ranks in 1..=candidates, a tail summary or a one-line refusal, and
/// predictions in [0, 1] inside their band; a refusal is one line naming the file.
pub fn import_scores(data: &[u8]) {
    let root = scratch("scores");
    let path = root.join("f.npz");
    std::fs::write(&path, data).expect("write the capture");
    match dsa_sim::import::scores::read_file(&path) {
        Ok(c) => {
            assert!(c.queries() > 0);
            for l in &c.layers {
                assert_eq!(l.queries.len(), c.queries(), "every layer holds every query");
                for q in &l.queries {
                    assert!(q.needle.is_finite());
                    assert!(q.distractors.windows(2).all(|w| w[0] >= w[1]), "sorted high first");
                    assert!(q.distractors.iter().all(|d| d.is_finite()));
                    let r = q.rank();
                    assert!(r >= 1 && r <= q.distractors.len() as u64 + 1);
                }
                match dsa_sim::import::scores::tail::summarise(l, &dsa_sim::import::scores::tail::standardised(l)) {
                    Ok(t) => assert!(t.gpd.sigma > 0.0 && t.gpd.xi.is_finite(), "{:?}", t.gpd),
                    Err(e) => assert_one_line("import scores tail", &e.0),
                }
            }
            let cell = dsa_sim::Scenario {
                context_len: 4096,
                index_topk: 8,
                compress_ratio: 1,
                overlap: false,
                window: 0,
                needle_tokens: 1,
                ..Default::default()
            };
            match dsa_sim::import::scores::predict(
                &c,
                &[cell],
                dsa_sim::import::scores::PredictOptions { resamples: 3, seed: 1, ..Default::default() },
            ) {
                Ok(p) => {
                    let p = &p[0];
                    assert!((0.0..=1.0).contains(&p.recall) && p.low <= p.recall && p.recall <= p.high, "{p:?}");
                    assert!((0.0..=1.0).contains(&p.recall_empirical));
                }
                Err(e) => assert_one_line("import scores predict", &e.0),
            }
        }
        Err(e) => {
            assert_one_line("import scores", &e.0);
            assert!(e.0.contains("f.npz"), "the error names the file: {}", e.0);
        }
    }
    let _ = std::fs::remove_dir_all(&root);
}

/// `dsa-sim probe`'s reply parsers (src/probe/client.rs) on a hostile server's body: the first
/// byte picks the endpoint (generation, `/v1/models`, `/tokenize`) and, with the next, the
/// cuts of the key-redaction check; the rest is the body. No panic; an error is one printable
/// line; an accepted reply keeps only what the probe reads (one choice at most) and agrees with
/// a full JSON parse of the same body wherever that parse finds the field; and the capture
/// writer's redaction of a key, fed in pieces, equals replacing the key in the whole body.
pub fn probe_reply(data: &[u8]) {
    use dsa_sim::probe::client::{parse_reply_for_fuzzing, redact_in_pieces_for_fuzzing};
    use serde_json::Value;
    let Some((&sel, body)) = data.split_first() else { return };
    let kind = sel % 3;
    match parse_reply_for_fuzzing(kind, body) {
        Err(e) => assert_one_line("probe reply", &e),
        Ok(v) => {
            let o = v.as_object().expect("the parsed reply is an object");
            for k in o.keys() {
                assert!(
                    ["choices", "usage", "text", "meta_info", "error", "data", "count", "has_indexer_topk"]
                        .contains(&k.as_str()),
                    "unexpected key {k}"
                );
            }
            if let Some(c) = o.get("choices") {
                assert_eq!(c.as_array().map(Vec::len), Some(1), "one choice kept");
            }
            if let Ok(full) = serde_json::from_slice::<Value>(body) {
                match kind {
                    0 => {
                        if let Some(t) = full["choices"][0]["text"].as_str() {
                            assert_eq!(v["choices"][0]["text"].as_str(), Some(t), "choices[0].text");
                        }
                        if let Some(t) = full["choices"][0]["message"]["content"].as_str() {
                            assert_eq!(v["choices"][0]["message"]["content"].as_str(), Some(t), "message.content");
                        }
                        if let Some(n) = full["usage"]["prompt_tokens"].as_u64() {
                            assert_eq!(v["usage"]["prompt_tokens"].as_u64(), Some(n), "usage.prompt_tokens");
                        }
                        if let Some(t) = full["text"].as_str() {
                            assert_eq!(v["text"].as_str(), Some(t), "text");
                        }
                    }
                    1 => {
                        if let Some(id) = full["data"][0]["id"].as_str() {
                            assert_eq!(v["data"][0]["id"].as_str(), Some(id), "data[0].id");
                        }
                    }
                    _ => {
                        let want = full["count"]
                            .as_u64()
                            .or_else(|| full["tokens"].as_array().map(|a| a.len() as u64))
                            .or_else(|| full.as_array().map(|a| a.len() as u64));
                        if let (Some(w), true) = (want, full.get("count").is_none_or(|c| c.as_u64().is_some())) {
                            assert_eq!(v["count"].as_u64(), Some(w), "the token count");
                        }
                    }
                }
            }
        }
    }
    // Redaction in pieces: a key of 1..=8 bytes taken from the body itself, so that it occurs.
    if body.len() >= 2 {
        let klen = 1 + (sel as usize >> 2) % 8.min(body.len() - 1);
        let key = &body[..klen];
        let step = 1 + (sel as usize >> 5);
        let cuts: Vec<usize> = (1..body.len()).step_by(step).collect();
        let got = redact_in_pieces_for_fuzzing(key, body, &cuts);
        let mut want = Vec::new();
        let mut i = 0;
        while i < body.len() {
            if body[i..].starts_with(key) {
                want.extend_from_slice(dsa_sim::probe::client::KEY_SHOWN.as_bytes());
                i += key.len();
            } else {
                want.push(body[i]);
                i += 1;
            }
        }
        assert_eq!(got, want, "redaction in pieces");
    }
}
