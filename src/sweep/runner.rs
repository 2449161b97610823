//! Running a grid: points evaluated in parallel, rows delivered in grid order, streamed to a
//! partial file and resumable.

use super::{
    csv_record, meta_path, parse_record, to_csv, to_json, write_atomic, Format, Grid, PointResult, Row, Shard,
    SweepError,
};
use crate::engine::EngineError;
use crate::progress::Progress;
use crate::scenario::Scenario;
use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

/// How to run a sweep.
#[derive(Debug, Clone)]
pub(crate) struct SweepOptions {
    /// Worker threads (default: rayon's count, i.e. the cores).
    pub(crate) threads: Option<usize>,
    /// Skip the rows already in the output's partial file.
    pub(crate) resume: bool,
    /// Compute at most this many new points, then stop and keep the partial file.
    pub(crate) limit: Option<usize>,
    /// Output format.
    pub(crate) format: Format,
    /// Identifies the sweep (scenario, axes, engine settings): a partial file of another
    /// sweep is refused on resume.
    pub(crate) fingerprint: String,
    /// Run metadata stored in JSON output (seed, engine, trials…).
    pub(crate) meta: serde_json::Value,
    /// The points to compute: the whole grid, or one shard of it ([`Shard`]).
    pub(crate) shard: Shard,
    /// For a CSV file output: the JSON document written beside it as `FILE.meta.json`
    /// ([`meta_path`]) when the sweep completes (before FILE itself), or nothing.
    pub(crate) sidecar: Option<serde_json::Value>,
    /// Replace an existing file output (and its sidecar) only when it is a sweep file dsa-sim
    /// wrote ([`super::merge::check_replaceable`]): the command line's `--out`, a path the user
    /// chose. Checked after a resumed partial file is read (its own, more specific errors
    /// first) and before anything is written.
    pub(crate) replace_only_ours: bool,
}

/// Where rows go.
#[derive(Debug, Clone)]
pub(crate) enum Output {
    /// A file (CSV or JSON), written through `FILE.partial`.
    File(PathBuf),
    /// Standard output: CSV rows as they finish, JSON at the end.
    Stdout,
    /// Nowhere: the rows are only returned.
    Memory,
}

/// The partial file that streams a sweep's rows for `path`.
pub(crate) fn partial_path(path: &Path) -> PathBuf {
    let mut name = path.file_name().map(|n| n.to_os_string()).unwrap_or_default();
    name.push(".partial");
    path.with_file_name(name)
}

const MAGIC: &str = "# dsa-sim sweep partial: ";

/// Reads the finished rows of a partial file (a prefix of the grid); `None` if it is absent.
fn read_partial(path: &Path, grid: &Grid, shard: Shard, fingerprint: &str) -> Result<Option<Vec<Row>>, SweepError> {
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(SweepError::Input(format!("cannot read {}: {e}", path.display()))),
    };
    let (first, rest) = text.split_once('\n').unwrap_or((&text, ""));
    if first.strip_prefix(MAGIC) != Some(fingerprint) {
        return Err(SweepError::Input(format!(
            "{} belongs to a different sweep (other scenario, axes or run options): delete it or run without --resume",
            path.display()
        )));
    }
    // Only complete lines count: a line cut by a kill is recomputed.
    let complete = match rest.rfind('\n') {
        Some(i) => &rest[..=i],
        None => "",
    };
    let mut rdr = csv::ReaderBuilder::new().has_headers(false).flexible(true).from_reader(complete.as_bytes());
    let mut rows = Vec::new();
    let mut header_seen = false;
    for rec in rdr.records() {
        let Ok(rec) = rec else { break };
        if !header_seen {
            if rec.iter().map(str::to_string).collect::<Vec<_>>() != grid.columns() {
                return Err(SweepError::Input(format!(
                    "{} has unexpected columns: delete it or run without --resume",
                    path.display()
                )));
            }
            header_seen = true;
            continue;
        }
        if rows.len() >= shard.len(grid.len()) {
            break;
        }
        let index = shard.point(rows.len());
        match parse_record(grid, index, &rec) {
            Some(row) => rows.push(row),
            None => break,
        }
    }
    Ok(Some(rows))
}

/// Turns the finished CSV file of a grid back into its partial file (unless a partial file is
/// already there), so that a resumed run reads its rows instead of recomputing them; `run_grid`
/// then checks the rows against the grid as for any partial file. Does nothing without a
/// finished file.
pub(crate) fn adopt_finished(path: &Path, fingerprint: &str) -> Result<(), SweepError> {
    let pp = partial_path(path);
    if pp.exists() {
        return Ok(());
    }
    match std::fs::read_to_string(path) {
        Ok(text) => write_atomic(&pp, format!("{MAGIC}{fingerprint}\n{text}").as_bytes()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(SweepError::Input(format!("cannot read {}: {e}", path.display()))),
    }
}

fn partial_text(grid: &Grid, fingerprint: &str, rows: &[Row]) -> String {
    format!("{MAGIC}{fingerprint}\n{}", to_csv(grid, rows))
}

/// Prepares a file output before any work: the file and its partial file must be absent or
/// regular files, the output's lock is taken (a second sweep on the same file fails at once),
/// and the temporaries that killed runs left beside them are removed.
fn lock_file_output(path: &Path, sidecar: bool) -> Result<crate::output::OutputLock, SweepError> {
    let pp = partial_path(path);
    crate::output::check_regular_target(path)?;
    crate::output::check_regular_target(&pp)?;
    if sidecar {
        crate::output::check_regular_target(&meta_path(path))?;
        crate::output::remove_stale_temporaries(&meta_path(path));
    }
    let lock = crate::output::OutputLock::acquire(path, path)?;
    crate::output::remove_stale_temporaries(path);
    crate::output::remove_stale_temporaries(&pp);
    Ok(lock)
}

/// Whether the sink wants more rows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Flow {
    More,
    /// Standard output was closed (`| head`): the rows are no longer wanted.
    Stop,
}

/// A write to standard output: a closed pipe (`| head`) ends the sweep without error, anything
/// else (a full disk) is an error, so that lost rows are never reported as a success.
fn stdout_result(r: std::io::Result<()>) -> Result<Flow, SweepError> {
    match r {
        Ok(()) => Ok(Flow::More),
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(Flow::Stop),
        Err(e) => Err(SweepError::Output(format!("cannot write to stdout: {e}"))),
    }
}

/// Runs `grid` with `eval` (which must be deterministic for reproducible files) and delivers the
/// rows to `out` in grid order, reporting each finished point to `progress`. Returns every
/// finished row (including resumed ones) and whether the grid is complete (it is not when
/// `limit` stopped it, or when standard output was closed: then the sweep stops early).
pub(crate) fn run_grid<F>(
    grid: &Grid,
    eval: F,
    out: &Output,
    opts: &SweepOptions,
    progress: &dyn Progress,
) -> Result<(Vec<Row>, bool), SweepError>
where
    F: Fn(&Scenario) -> Result<PointResult, EngineError> + Sync,
{
    let shard = opts.shard;
    let total = shard.len(grid.len());
    let sidecar = opts.sidecar.as_ref().filter(|_| opts.format == Format::Csv);
    let _lock = match out {
        Output::File(path) => Some(lock_file_output(path, sidecar.is_some())?),
        _ => None,
    };
    let mut rows: Vec<Row> = Vec::new();
    let mut stdout = std::io::stdout().lock();
    let mut file: Option<std::io::BufWriter<std::fs::File>> = None;
    let partial = match out {
        Output::File(path) => Some(partial_path(path)),
        _ => None,
    };
    if opts.resume && partial.is_none() {
        return Err(SweepError::Input("--resume needs --out FILE".into()));
    }
    if let Some(pp) = &partial {
        if opts.resume {
            if let Some(prev) = read_partial(pp, grid, shard, &opts.fingerprint)? {
                rows = prev;
            }
        }
        if opts.replace_only_ours {
            if let Output::File(path) = out {
                super::merge::check_replaceable(path, path)?;
                if sidecar.is_some() {
                    super::merge::check_replaceable(&meta_path(path), path)?;
                }
            }
        }
        // (Re)write the partial file with the rows kept, then append to it.
        write_atomic(pp, partial_text(grid, &opts.fingerprint, &rows).as_bytes())?;
        let f = std::fs::OpenOptions::new().append(true).open(pp).map_err(|e| SweepError::write(pp, &e))?;
        file = Some(std::io::BufWriter::new(f));
    } else if matches!(out, Output::Stdout) && opts.format == Format::Csv {
        let mut w = csv::Writer::from_writer(Vec::new());
        let _ = w.write_record(grid.columns());
        if stdout_result(stdout.write_all(&w.into_inner().unwrap_or_default()).and_then(|_| stdout.flush()))?
            == Flow::Stop
        {
            return Ok((rows, false));
        }
    }
    let start = rows.len();
    let end = match opts.limit {
        Some(l) => total.min(start.saturating_add(l)),
        None => total,
    };

    let mut closed = false;
    let mut sink = |row: Row| -> Result<Flow, SweepError> {
        let rec = csv_record(grid, &row);
        let mut w = csv::Writer::from_writer(Vec::new());
        let _ = w.write_record(&rec);
        let line = w.into_inner().unwrap_or_default();
        if let (Some(f), Some(pp)) = (file.as_mut(), partial.as_ref()) {
            f.write_all(&line).and_then(|_| f.flush()).map_err(|e| SweepError::write(pp, &e))?;
        } else if matches!(out, Output::Stdout) && opts.format == Format::Csv {
            // The progress display leaves the terminal while the row is written.
            let mut written = Ok(());
            progress.suspend(&mut || written = stdout.write_all(&line).and_then(|_| stdout.flush()));
            if stdout_result(written)? == Flow::Stop {
                closed = true;
                return Ok(Flow::Stop);
            }
        }
        rows.push(row);
        progress.advance(1);
        Ok(Flow::More)
    };
    progress.start(total as u64, start as u64);
    let computed = compute(grid, shard, start..end, &eval, opts.threads, &mut sink);
    progress.finish();
    computed?;
    drop(file);

    let complete = rows.len() == total && !closed;
    if complete {
        match out {
            Output::File(path) => {
                let text = match opts.format {
                    Format::Csv => to_csv(grid, &rows),
                    Format::Json => to_json(grid, &rows, &opts.meta),
                };
                if let Some(doc) = sidecar {
                    let mut meta = serde_json::to_string_pretty(doc).unwrap_or_default();
                    meta.push('\n');
                    write_atomic(&meta_path(path), meta.as_bytes())?;
                }
                write_atomic(path, text.as_bytes())?;
                if let Some(pp) = &partial {
                    let _ = std::fs::remove_file(pp);
                }
            }
            Output::Stdout if opts.format == Format::Json => {
                stdout_result(
                    stdout.write_all(to_json(grid, &rows, &opts.meta).as_bytes()).and_then(|_| stdout.flush()),
                )?;
            }
            _ => {}
        }
    }
    Ok((rows, complete))
}

/// Evaluates the shard's points at positions `todo` on a pool of `threads` workers and hands
/// the rows to `sink` strictly in order, each as soon as it and all before it are done, until
/// the sink says stop.
fn compute<F, S>(
    grid: &Grid,
    shard: Shard,
    todo: std::ops::Range<usize>,
    eval: &F,
    threads: Option<usize>,
    sink: &mut S,
) -> Result<(), SweepError>
where
    F: Fn(&Scenario) -> Result<PointResult, EngineError> + Sync,
    S: FnMut(Row) -> Result<Flow, SweepError>,
{
    if todo.is_empty() {
        return Ok(());
    }
    let workers = threads.unwrap_or_else(rayon::current_num_threads).max(1).min(todo.len());
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(threads.unwrap_or_else(rayon::current_num_threads).max(1))
        .build()
        .map_err(|e| SweepError::Engine(EngineError::Pool(format!("cannot start worker threads: {e}"))))?;
    let next = AtomicUsize::new(todo.start);
    let stop = AtomicBool::new(false);
    let (tx, rx) = std::sync::mpsc::channel::<(usize, Result<(Scenario, PointResult), SweepError>)>();
    let mut failure: Option<SweepError> = None;
    let mut stopped = false;
    std::thread::scope(|s| {
        let (next, stop, pool) = (&next, &stop, &pool);
        let end = todo.end;
        s.spawn(move || {
            pool.scope(|ps| {
                for _ in 0..workers {
                    let tx = tx.clone();
                    ps.spawn(move |_| loop {
                        if stop.load(Ordering::Relaxed) {
                            break;
                        }
                        let i = next.fetch_add(1, Ordering::Relaxed);
                        if i >= end {
                            break;
                        }
                        let r = grid
                            .scenario(shard.point(i))
                            .and_then(|sc| eval(&sc).map(|res| (sc, res)).map_err(SweepError::Engine));
                        if tx.send((i, r)).is_err() {
                            break;
                        }
                    });
                }
            });
        });
        let mut pending = BTreeMap::new();
        let mut want = todo.start;
        for (i, r) in rx.iter() {
            pending.insert(i, r);
            while let Some(r) = pending.remove(&want) {
                let step = r.and_then(|(scenario, result)| {
                    let values = grid.values_of(&scenario);
                    sink(Row { index: shard.point(want), values, scenario, result })
                });
                match step {
                    Ok(Flow::More) => {}
                    Ok(Flow::Stop) => stopped = true,
                    Err(e) => failure = Some(e),
                }
                if stopped || failure.is_some() {
                    stop.store(true, Ordering::Relaxed);
                    break;
                }
                want += 1;
            }
            if stopped || failure.is_some() {
                break;
            }
        }
        drop(rx);
    });
    match failure {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::super::Axis;
    use super::*;
    use crate::progress::Silent;

    fn fake(s: &Scenario) -> Result<PointResult, EngineError> {
        // Deterministic and uneven in cost so that points finish out of order.
        let x = s.context_len as f64 * 1e-6 + s.index_topk as f64;
        std::thread::sleep(std::time::Duration::from_millis((s.context_len % 7) * 2));
        // A row a sweep could write (sweep::check_result): resumed rows are checked against it.
        Ok(PointResult {
            recall: 1.0 / x,
            ci_low: 0.5 / x,
            ci_high: 1.0 / x,
            engine: "montecarlo".into(),
            trials: Some(1000),
            rank: None,
        })
    }

    fn grid() -> Grid {
        Grid::new(
            Scenario::default(),
            vec![Axis::parse("context_len=1000..64000:x2").unwrap(), Axis::parse("index_topk=1,2,3").unwrap()],
            false,
        )
        .unwrap()
    }

    fn opts(threads: usize) -> SweepOptions {
        SweepOptions {
            threads: Some(threads),
            resume: false,
            limit: None,
            format: Format::Csv,
            fingerprint: "test".into(),
            meta: serde_json::Value::Null,
            shard: Shard::WHOLE,
            sidecar: None,
            replace_only_ours: false,
        }
    }

    #[test]
    fn same_rows_for_any_thread_count() {
        let g = grid();
        let (a, done) = run_grid(&g, fake, &Output::Memory, &opts(1), &Silent).unwrap();
        assert!(done);
        let (b, _) = run_grid(&g, fake, &Output::Memory, &opts(4), &Silent).unwrap();
        assert_eq!(a, b);
        assert!(a.iter().enumerate().all(|(i, r)| r.index == i));
    }

    #[test]
    fn resume_after_a_stop_gives_the_same_file() {
        let dir = tempfile::tempdir().unwrap();
        let g = grid();
        let full = dir.path().join("full.csv");
        run_grid(&g, fake, &Output::File(full.clone()), &opts(2), &Silent).unwrap();
        let part = dir.path().join("part.csv");
        let mut o = opts(2);
        o.limit = Some(5);
        let (rows, done) = run_grid(&g, fake, &Output::File(part.clone()), &o, &Silent).unwrap();
        assert_eq!((rows.len(), done), (5, false));
        assert!(!part.exists() && partial_path(&part).exists());
        // Simulate a kill in the middle of a line.
        let mut text = std::fs::read_to_string(partial_path(&part)).unwrap();
        text.push_str("64000,1,0.0");
        std::fs::write(partial_path(&part), text).unwrap();
        o.limit = None;
        o.resume = true;
        let calls = AtomicUsize::new(0);
        let counted = |s: &Scenario| {
            calls.fetch_add(1, Ordering::Relaxed);
            fake(s)
        };
        let (rows, done) = run_grid(&g, counted, &Output::File(part.clone()), &o, &Silent).unwrap();
        assert!(done && rows.len() == g.len());
        assert_eq!(calls.load(Ordering::Relaxed), g.len() - 5);
        assert_eq!(std::fs::read(&full).unwrap(), std::fs::read(&part).unwrap());
        assert!(!partial_path(&part).exists());
    }

    #[test]
    fn resume_refuses_another_sweeps_partial() {
        let dir = tempfile::tempdir().unwrap();
        let g = grid();
        let out = dir.path().join("x.csv");
        let mut o = opts(1);
        o.limit = Some(2);
        run_grid(&g, fake, &Output::File(out.clone()), &o, &Silent).unwrap();
        o.fingerprint = "other".into();
        o.resume = true;
        let e = run_grid(&g, fake, &Output::File(out), &o, &Silent).unwrap_err();
        assert!(matches!(e, SweepError::Input(_)) && e.to_string().contains("different sweep"), "{e}");
    }

    #[test]
    fn an_engine_failure_stops_the_sweep_and_writes_no_final_file() {
        let dir = tempfile::tempdir().unwrap();
        let g = grid();
        let out = dir.path().join("x.csv");
        let failing =
            |s: &Scenario| if s.context_len > 8000 { Err(EngineError::NotExact("boom".into())) } else { fake(s) };
        let e = run_grid(&g, failing, &Output::File(out.clone()), &opts(2), &Silent).unwrap_err();
        assert_eq!(e, SweepError::Engine(EngineError::NotExact("boom".into())));
        assert!(!out.exists());
    }
}
