//! `probe --until-decided`: measure, diagnose, plan, measure the planned cells, and repeat
//! until the call is decided or the request budget is spent (docs/guide.md#one-command-probe---until-decided).
//!
//! One folder holds every round: `round-N/` is that round's probe folder (measured.csv,
//! transcript.jsonl) with the verdict on every table so far (verdict.txt, verdict.json) and the
//! plan made from it (plan.txt, plan.json, cells.csv); `round-N-kK/` a round's cells at another
//! k, measured after `--restart-cmd` restarted the server at k = K; `report.md` the call, the
//! evidence, the rounds and the figures. Everything is derived deterministically from the
//! measured tables, so running the same command again continues where it stopped: finished
//! rounds are taken as they are, an interrupted one is resumed from its transcript.
//!
//! The loop stops when the call is decided (a physical call, or implementation-suspect with the
//! defect class named), when the budget cannot pay for another round, when there is nothing to
//! plan (the verdict stands), or when every planned cell is at another k and no restart hook is
//! given (those cells are listed, never silently skipped).

use super::plan::{nothing_to_plan, plan, PlanRequest};
use super::probe::ProbeSpec;
use super::verdict::{verdict_tables, VerdictResult};
use super::{CommandError, FitEngineSpec, ScenarioSpec};
use crate::diagnosis::signature::Signature;
use crate::probe::{Client, RetryPolicy};
use crate::progress::Progress;
use crate::verdict::Call;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// The design of the first round when none is given.
pub(crate) const DEFAULT_GRID: &str = "2K..64K:x2";
/// Default `--budget` of the loop: requests in all, every round's.
pub const DEFAULT_BUDGET: u64 = 3000;
/// Most trials one round's plan spends.
pub(crate) const ROUND_TRIALS: u64 = 1000;
/// Fewest trials a planned round is worth.
pub(crate) const MIN_ROUND_TRIALS: u64 = 50;
/// Default most rounds.
pub const DEFAULT_ROUNDS: u32 = 6;
/// The loop folder's own record: its options' fingerprint.
pub(crate) const LOOP_FILE: &str = ".probe-loop.json";

/// What `probe --until-decided` takes.
#[derive(Debug, Clone)]
pub struct LoopSpec {
    /// The probe's options; `out` is the loop's folder, the grid the first round's design.
    pub probe: ProbeSpec,
    /// The deployment's scenario the verdict and the plan use (`--preset`, `--scenario`, `--set`).
    pub scenario: ScenarioSpec,
    /// The fit's engine.
    pub engine: FitEngineSpec,
    /// Requests in all (every round's, both sends of a prefix-cache pair, each concurrency).
    pub budget: u64,
    /// Most rounds.
    pub max_rounds: u32,
    /// `--restart-cmd`: a shell command restarting the server at k = `{k}`.
    pub restart_cmd: Option<String>,
    /// Seconds to wait for the server after a restart.
    pub ready_timeout: f64,
    /// Tables measured before (`--data`: another build's, say), joined to every verdict and plan.
    pub data: Vec<PathBuf>,
}

impl Default for LoopSpec {
    fn default() -> Self {
        LoopSpec {
            probe: ProbeSpec::default(),
            scenario: ScenarioSpec { preset: Some("deepseek-v4-flash".into()), file: None, fields: Vec::new() },
            engine: FitEngineSpec::default(),
            budget: DEFAULT_BUDGET,
            max_rounds: DEFAULT_ROUNDS,
            restart_cmd: None,
            ready_timeout: 600.0,
            data: Vec::new(),
        }
    }
}

/// Why the loop stopped.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub(crate) enum Stop {
    /// The call is decided.
    Decided,
    /// The budget cannot pay for another round.
    BudgetSpent,
    /// No cell the kernel runs separates the leading hypotheses: the verdict stands.
    NothingToPlan,
    /// Every planned cell is at another k, and no `--restart-cmd` was given.
    NeedsRestart,
    /// `--max-rounds` rounds were measured.
    MaxRounds,
}

/// One round.
#[derive(Debug, Clone, serde::Serialize)]
pub(crate) struct Round {
    /// 1, 2, …
    pub(crate) number: u32,
    /// The folders measured in this round (relative to the loop's folder) with their k.
    pub(crate) folders: Vec<(String, u64)>,
    /// Rows of the round's tables.
    pub(crate) rows: usize,
    /// Requests counted in this round's tables.
    pub(crate) requests: u64,
    /// Hits among them.
    pub(crate) hits: u64,
    /// The call on every table so far.
    pub(crate) call: String,
    /// The preferred hypothesis.
    pub(crate) preferred: String,
    /// The signatures found.
    pub(crate) signatures: Vec<String>,
    /// The plan made after it (its one-line summary), if any.
    pub(crate) plan: Option<String>,
}

/// Planned cells left for after a restart.
#[derive(Debug, Clone, serde::Serialize)]
pub(crate) struct Pending {
    /// The k they need.
    pub(crate) k: u64,
    /// Their trials.
    pub(crate) trials: u64,
    /// The cells file.
    pub(crate) cells: PathBuf,
    /// The command that measures them once the server runs at k.
    pub(crate) command: String,
}

/// A finished loop.
#[derive(Debug, Clone)]
pub struct Looped {
    /// The folder.
    pub(crate) out: PathBuf,
    /// The server as named in outputs.
    pub(crate) server: String,
    /// The final call.
    pub(crate) call: Call,
    /// Why, and what next (the verdict's first lines).
    pub(crate) why: String,
    /// What to do next.
    pub(crate) next: String,
    /// Whether the call is decided.
    pub(crate) decided: bool,
    /// Why the loop stopped.
    pub(crate) stop: Stop,
    /// The line saying so.
    pub(crate) stop_line: String,
    /// The rounds.
    pub(crate) rounds: Vec<Round>,
    /// Cells at another k not measured.
    pub(crate) pending: Vec<Pending>,
    /// Requests counted in all.
    pub(crate) requests: u64,
    /// The budget.
    pub(crate) budget: u64,
    /// Notes (restarts, resumed rounds).
    pub(crate) notes: Vec<String>,
}

/// Signatures that leave the defect's class unnamed: an implementation-suspect call on them
/// alone goes on measuring to name it.
const UNNAMED: &[Signature] =
    &[Signature::BelowRandomFloor, Signature::WorseThanRandom, Signature::PoorFit, Signature::ParameterOnBound];

/// Whether a call is decided: physical, or implementation-suspect with a defect class named.
pub(crate) fn is_decided(call: Call, signatures: &[Signature]) -> bool {
    match call {
        Call::Undecided => false,
        Call::ImplementationSuspect => signatures.iter().any(|s| !UNNAMED.contains(s)),
        _ => true,
    }
}

fn failure(m: impl Into<String>) -> CommandError {
    CommandError::failure(m)
}

fn write(path: &Path, text: &str) -> Result<(), CommandError> {
    crate::output::write_file_atomic(path, text.as_bytes()).map_err(|e| {
        if e.is_input() {
            CommandError::input(e.to_string())
        } else {
            failure(e.to_string())
        }
    })
}

impl LoopSpec {
    /// Checks the options before any request.
    fn check(&self) -> Result<(), CommandError> {
        if self.budget == 0 {
            return Err(CommandError::input("--budget 0: allowed ≥ 1 request"));
        }
        if self.max_rounds == 0 || self.max_rounds > 100 {
            return Err(CommandError::input(format!("--max-rounds {}: allowed 1..=100", self.max_rounds)));
        }
        if let Some(c) = &self.restart_cmd {
            if !c.contains("{k}") {
                return Err(CommandError::input(format!(
                    "--restart-cmd {c}: the command must contain {{k}}, replaced by the k to restart the server at"
                )));
            }
        }
        if !(self.ready_timeout.is_finite() && self.ready_timeout > 0.0 && self.ready_timeout <= 86_400.0) {
            return Err(CommandError::input(format!(
                "--ready-timeout {}: allowed (0, 86400] seconds",
                self.ready_timeout
            )));
        }
        if self.probe.resume {
            return Err(CommandError::input(
                "--resume with --until-decided: run the same command again instead (finished rounds are kept, an interrupted one is resumed)",
            ));
        }
        if self.probe.capture {
            return Err(CommandError::input(
                "--capture with --until-decided: capture a chosen cell with a plain probe (a loop's replies would be gigabytes)",
            ));
        }
        self.scenario.resolve()?;
        for p in &self.data {
            crate::measured::load_csv(p).map_err(|e| CommandError::input(format!("--data: {e}")))?;
        }
        Ok(())
    }

    /// What identifies the loop: running it again on its folder continues it only with the same.
    fn fingerprint(&self) -> String {
        let p = &self.probe;
        serde_json::json!({
            "dsa-sim probe --until-decided": env!("CARGO_PKG_VERSION"),
            "url": crate::probe::client::shown_url(&p.url),
            "api": [p.chat, p.generate], "model": p.model,
            "grid": [&p.context_len, &Some(p.depth.clone()), &Some(p.repeat.clone())], "trials": p.trials,
            "cells": p.cells.as_ref().map(|c| c.display().to_string()),
            "index_topk": p.index_topk, "labels": p.labels, "concurrency": p.concurrency,
            "prefix_cache_twice": p.prefix_cache_twice, "seed": p.seed, "max_tokens": p.max_tokens,
            "haystack": p.haystack.as_ref().map(|h| h.display().to_string()), "spread": p.spread,
            "token_count": p.token_count, "tokenizer": p.tokenizer.as_ref().map(|t| t.display().to_string()),
            "preset": self.scenario.preset, "scenario": self.scenario.file.as_ref().map(|f| f.display().to_string()),
            "fields": self.scenario.fields.iter().map(|(f, v)| format!("{}={v}", f.name())).collect::<Vec<_>>(),
            "engine_seed": self.engine.seed,
            "data": self.data.iter().map(|d| d.display().to_string()).collect::<Vec<_>>(),
        })
        .to_string()
    }

    /// Requests one trial of a planned cell costs: both sends of a prefix-cache pair, each
    /// concurrency phase.
    fn per_trial(&self) -> u64 {
        let phases = self
            .probe
            .concurrency
            .as_deref()
            .map_or(1, |c| c.split(',').filter(|x| !x.trim().is_empty()).count().max(1));
        phases as u64 * if self.probe.prefix_cache_twice { 2 } else { 1 }
    }

    /// Runs the loop.
    pub fn run(&self, progress: &dyn Progress) -> Result<Looped, CommandError> {
        self.check()?;
        let out = self.probe.out.clone().ok_or_else(|| {
            CommandError::input(
                "--out FOLDER is required (where every round, the verdicts, the plans and report.md go)",
            )
        })?;
        let server = crate::probe::client::shown_url(&self.probe.url);
        // The probe's own checks (cells, labels, tokenizer) before anything is created.
        let mut first = self.probe.clone();
        if first.context_len.is_none() && first.cells.is_none() {
            first.context_len = Some(DEFAULT_GRID.to_string());
        }
        let dry = first.dry_run()?;
        if dry.requests > self.budget {
            return Err(CommandError::input(format!(
                "--budget {}: the first round alone sends {} requests; raise --budget or give a smaller design (--context-len, --depth, --trials)",
                self.budget, dry.requests
            )));
        }
        let _lock = prepare(&out, &self.fingerprint())?;
        let here = self.probe.index_topk;
        let mut notes = Vec::new();
        let mut tables: Vec<PathBuf> = self.data.clone();
        let mut rounds: Vec<Round> = Vec::new();
        let mut pending: Vec<Pending> = Vec::new();
        let mut requests = 0u64;
        let mut restarted = false;
        // Each round: the probes to run, (folder name, spec, k).
        let mut next: Vec<(String, ProbeSpec, u64)> = vec![("round-1".to_string(), first, here)];
        let mut last_text;
        let (stop, stop_line, call, decided) = 'rounds: loop {
            let number = rounds.len() as u32 + 1;
            let mut folders = Vec::new();
            let (mut rows, mut reqs, mut hits) = (0usize, 0u64, 0u64);
            for (name, spec, k) in std::mem::take(&mut next) {
                if k != here || restarted {
                    if let Some(cmd) = &self.restart_cmd {
                        restart(cmd, k, &self.probe.url, self.ready_timeout, &out)?;
                        notes.push(format!("round {number}: the server restarted at k = {k} (--restart-cmd)"));
                        restarted = k != here;
                    }
                }
                let mut spec = spec;
                spec.out = Some(out.join(&name));
                spec.resume = true;
                let p = spec.run(progress)?;
                if p.resumed > 0 && p.sent == 0 {
                    notes.push(format!("round {number}: {name} was complete: taken as it is"));
                }
                rows += p.rows.len();
                reqs += p.rows.iter().map(|r| r.trials).sum::<u64>();
                hits += p.rows.iter().map(|r| r.hits).sum::<u64>();
                tables.push(out.join(&name).join("measured.csv"));
                folders.push((name, k));
            }
            if restarted {
                if let Some(cmd) = &self.restart_cmd {
                    restart(cmd, here, &self.probe.url, self.ready_timeout, &out)?;
                    notes.push(format!("round {number}: the server restarted at the deployment's k = {here} again"));
                    restarted = false;
                }
            }
            requests += reqs;
            let dir = out.join(&folders[0].0);
            let refs: Vec<&Path> = tables.iter().map(PathBuf::as_path).collect();
            let v = verdict_tables(&self.scenario, &self.engine, 0.9, &refs, None, &|_| {})?;
            let text = v.to_text();
            write(&dir.join("verdict.txt"), &text)?;
            write(
                &dir.join("verdict.json"),
                &format!("{}\n", serde_json::to_string_pretty(&v.to_json()).unwrap_or_default()),
            )?;
            let (call, sigs, preferred) = match &v {
                VerdictResult::Diagnosed { diagnosis, .. } => (
                    diagnosis.call,
                    diagnosis.signatures.clone(),
                    diagnosis.hypotheses.first().map(|h| h.hypothesis.to_string()).unwrap_or_default(),
                ),
                _ => return Err(failure("internal: the verdict on the probe's tables is not a diagnosis")),
            };
            last_text = text;
            rounds.push(Round {
                number,
                folders: folders.clone(),
                rows,
                requests: reqs,
                hits,
                call: call.to_string(),
                preferred,
                signatures: sigs.iter().map(|s| s.name().to_string()).collect(),
                plan: None,
            });
            let decided = is_decided(call, &sigs);
            if decided {
                break 'rounds (Stop::Decided, format!("decided after round {number}"), call, true);
            }
            if number >= self.max_rounds {
                break 'rounds (
                    Stop::MaxRounds,
                    format!("stopped after {number} rounds (--max-rounds): the call is not decided"),
                    call,
                    false,
                );
            }
            let left = self.budget.saturating_sub(requests);
            let trials = (left / self.per_trial()).min(ROUND_TRIALS);
            if trials < MIN_ROUND_TRIALS {
                break 'rounds (
                    Stop::BudgetSpent,
                    format!(
                        "budget spent: {requests} of {} requests measured, too few left for another round (at least {MIN_ROUND_TRIALS} trials)",
                        self.budget
                    ),
                    call,
                    false,
                );
            }
            let req =
                PlanRequest { data: Some(refs[0]), also: &refs[1..], budget: trials, hypotheses: &[], target: None };
            let planned = match plan(&self.scenario, &self.engine, &req, &|_| {}) {
                Ok(p) => p,
                Err(e) => match nothing_to_plan(&e) {
                    Some(line) => {
                        write(&dir.join("plan.txt"), &format!("{line}\n"))?;
                        rounds.last_mut().expect("a round was pushed").plan = Some(line.clone());
                        break 'rounds (Stop::NothingToPlan, line, call, false);
                    }
                    None => return Err(e),
                },
            };
            let cells_path = dir.join("cells.csv");
            write(&dir.join("plan.txt"), &planned.to_text())?;
            write(
                &dir.join("plan.json"),
                &format!("{}\n", serde_json::to_string_pretty(&planned.to_json()).unwrap_or_default()),
            )?;
            write(&cells_path, &planned.csv())?;
            let cells = &planned.plan.cells;
            let mut ks: Vec<u64> = cells.iter().map(|c| c.index_topk).collect();
            ks.sort_unstable();
            ks.dedup();
            let summary = format!(
                "{} trials in {} cells at k = {}",
                planned.plan.total(),
                cells.len(),
                ks.iter().map(u64::to_string).collect::<Vec<_>>().join(", ")
            );
            rounds.last_mut().expect("a round was pushed").plan = Some(summary);
            let mut base = self.probe.clone();
            base.context_len = None;
            base.trials = None;
            base.spread = None;
            base.cells = Some(cells_path.clone());
            if ks.contains(&here) {
                next.push((format!("round-{}", number + 1), base.clone(), here));
            }
            for &k in ks.iter().filter(|&&k| k != here) {
                let trials: u64 = cells.iter().filter(|c| c.index_topk == k).map(|c| c.trials).sum();
                let name = format!("round-{}-k{k}", number + 1);
                if self.restart_cmd.is_some() {
                    let mut s = base.clone();
                    s.index_topk = k;
                    next.push((name, s, k));
                } else {
                    pending.push(Pending {
                        k,
                        trials,
                        cells: cells_path.clone(),
                        command: format!(
                            "dsa-sim probe --url {server} --cells {} --index-topk {k} --out {}",
                            cells_path.display(),
                            out.join(&name).display()
                        ),
                    });
                }
            }
            if next.is_empty() {
                break 'rounds (
                    Stop::NeedsRestart,
                    format!(
                        "every planned cell is at another k ({}): give --restart-cmd 'COMMAND {{k}}' to measure them, or run them after restarting the server (below)",
                        ks.iter().map(u64::to_string).collect::<Vec<_>>().join(", ")
                    ),
                    call,
                    false,
                );
            }
            if next[0].2 != here {
                // The round's verdict and plan go in its first folder, whatever its k.
                next.sort_by_key(|(_, _, k)| *k != here);
            }
        };
        let (why, next_line) = head(&last_text);
        let looped = Looped {
            out: out.clone(),
            server,
            call,
            why,
            next: next_line,
            decided,
            stop,
            stop_line,
            rounds,
            pending,
            requests,
            budget: self.budget,
            notes,
        };
        write(&out.join("report.md"), &looped.report(&self.scenario, &last_text))?;
        Ok(looped)
    }
}

/// The verdict text's `why:` and `next:` lines.
fn head(text: &str) -> (String, String) {
    let line = |p: &str| text.lines().find_map(|l| l.strip_prefix(p)).unwrap_or("").trim().to_string();
    (line("why:"), line("next:"))
}

/// Prepares the loop's folder: created when absent; an existing one is continued only when it is
/// a loop of the same options (its [`LOOP_FILE`]), taken when empty, refused otherwise (never a
/// file dsa-sim did not write is touched). Returns the folder's lock.
fn prepare(out: &Path, fingerprint: &str) -> Result<crate::output::OutputLock, CommandError> {
    let shown = out.display().to_string();
    match std::fs::symlink_metadata(out) {
        Ok(m) if !m.is_dir() => {
            return Err(CommandError::input(format!("--out {shown}: exists and is not a folder")));
        }
        Ok(_) => {}
        Err(_) => std::fs::create_dir_all(out).map_err(|e| failure(format!("cannot create {shown}: {e}")))?,
    }
    let lock = crate::output::OutputLock::acquire(out, out).map_err(|e| {
        if e.is_input() {
            CommandError::input(e.to_string())
        } else {
            failure(e.to_string())
        }
    })?;
    let record = out.join(LOOP_FILE);
    let empty = std::fs::read_dir(out).map(|mut d| d.next().is_none()).unwrap_or(false);
    if !empty {
        let text = crate::input::read_regular_file(&record).ok().flatten();
        match text.and_then(|t| serde_json::from_str::<serde_json::Value>(&t).ok()) {
            Some(v) if v["fingerprint"].as_str() == Some(fingerprint) => return Ok(lock),
            Some(_) => {
                return Err(CommandError::input(format!(
                    "--out {shown}: holds a probe --until-decided of other options (server, design, scenario, seed, …): it is continued only with the same options; choose another --out"
                )))
            }
            None => {
                return Err(CommandError::input(format!(
                    "--out {shown}: exists and was not written by probe --until-decided: choose another --out (dsa-sim replaces only folders it wrote)"
                )))
            }
        }
    }
    let rec = serde_json::json!({"fingerprint": fingerprint});
    write(&record, &format!("{rec}\n"))?;
    write(&out.join(crate::output::RESULT_MARKER), crate::output::RESULT_MARKER_TEXT)?;
    Ok(lock)
}

/// Runs `--restart-cmd` with `{k}` replaced (its output appended to OUT/restart.log), then waits
/// until the server answers.
fn restart(cmd: &str, k: u64, url: &str, ready_timeout: f64, out: &Path) -> Result<(), CommandError> {
    let line = cmd.replace("{k}", &k.to_string());
    let log = out.join("restart.log");
    let file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&log)
        .map_err(|e| failure(format!("cannot write {}: {e}", log.display())))?;
    let err = file.try_clone().map_err(|e| failure(format!("cannot write {}: {e}", log.display())))?;
    let status = std::process::Command::new("sh")
        .arg("-c")
        .arg(&line)
        .stdin(std::process::Stdio::null())
        .stdout(file)
        .stderr(err)
        .status()
        .map_err(|e| failure(format!("--restart-cmd: cannot run sh -c '{line}': {e}")))?;
    if !status.success() {
        return Err(failure(format!(
            "--restart-cmd: `{line}` exited with {status} (its output is in {}); rerun the same command to continue",
            log.display()
        )));
    }
    wait_ready(url, Duration::from_secs_f64(ready_timeout))
}

/// Waits until the server answers `/v1/models` (any HTTP reply: a server without the endpoint
/// is up too), polling each second, at most `timeout`.
pub(crate) fn wait_ready(url: &str, timeout: Duration) -> Result<(), CommandError> {
    let client = Client::new(
        url,
        Duration::from_secs(5),
        RetryPolicy { retries: 0, base: Duration::ZERO, max: Duration::ZERO },
        None,
    )?;
    let start = Instant::now();
    loop {
        match client.model_id() {
            Ok(_) => return Ok(()),
            Err(e) if e.message.starts_with("HTTP ") || e.message.contains("lists no model") => return Ok(()),
            Err(_) if start.elapsed() < timeout => std::thread::sleep(Duration::from_millis(200)),
            Err(e) => {
                return Err(failure(format!(
                "the server at {} is not ready {:.0} s after --restart-cmd: {} (rerun the same command to continue)",
                client.shown(),
                timeout.as_secs_f64(),
                e.message
            )))
            }
        }
    }
}

impl Looped {
    /// The summary printed.
    pub fn to_text(&self) -> String {
        let mut s = format!("call: {}\n", self.call);
        if !self.why.is_empty() {
            s.push_str(&format!("why: {}\n", self.why));
        }
        if !self.next.is_empty() {
            s.push_str(&format!("next: {}\n", self.next));
        }
        s.push_str(&format!("{} ({} of {} requests)\n", self.stop_line, self.requests, self.budget));
        for r in &self.rounds {
            s.push_str(&format!(
                "  round {}: {} ({} requests, {} hits): {}, preferred {}{}{}\n",
                r.number,
                r.folders.iter().map(|(f, _)| f.as_str()).collect::<Vec<_>>().join(" + "),
                r.requests,
                r.hits,
                r.call,
                r.preferred,
                if r.signatures.is_empty() {
                    String::new()
                } else {
                    format!(", signatures {}", r.signatures.join(", "))
                },
                r.plan.as_ref().map_or(String::new(), |p| format!("; plan: {p}"))
            ));
        }
        for p in &self.pending {
            s.push_str(&format!("to run after restarting at k = {}: {} trials: {}\n", p.k, p.trials, p.command));
        }
        for n in &self.notes {
            s.push_str(&format!("note: {n}\n"));
        }
        s.push_str(&format!("wrote {} (report.md, round-N/)\n", self.out.display()));
        s
    }

    /// `--json`.
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::json!({
            "out": self.out.display().to_string(),
            "report": self.out.join("report.md").display().to_string(),
            "server": self.server,
            "call": self.call.to_string(),
            "why": self.why,
            "next": self.next,
            "decided": self.decided,
            "stop": self.stop,
            "stop_line": self.stop_line,
            "rounds": self.rounds,
            "pending": self.pending,
            "requests": self.requests,
            "budget": self.budget,
            "notes": self.notes,
            "version": env!("CARGO_PKG_VERSION"),
        })
    }

    /// report.md: the call, the evidence, the rounds, the figures.
    fn report(&self, scenario: &ScenarioSpec, verdict: &str) -> String {
        let mut s = String::from("# dsa-sim probe --until-decided\n\n");
        s.push_str(&format!("**call: {}**", self.call));
        s.push_str(if self.decided { " (decided)\n\n" } else { " (not decided)\n\n" });
        if !self.why.is_empty() {
            s.push_str(&format!("- why: {}\n", self.why));
        }
        if !self.next.is_empty() {
            s.push_str(&format!("- next: {}\n", self.next));
        }
        s.push_str(&format!("- the loop: {} ({} of {} requests)\n", self.stop_line, self.requests, self.budget));
        let fields: Vec<String> = scenario.fields.iter().map(|(f, v)| format!("{}={v}", f.name())).collect();
        s.push_str(&format!(
            "- server {}; scenario {}{}{}; dsa-sim {}\n\n",
            self.server,
            scenario.preset.as_deref().map_or(String::new(), |p| format!("--preset {p}")),
            scenario.file.as_ref().map_or(String::new(), |f| format!(" --scenario {}", f.display())),
            if fields.is_empty() { String::new() } else { format!(" ({})", fields.join(", ")) },
            env!("CARGO_PKG_VERSION")
        ));
        s.push_str("## Rounds\n\n| round | folders | requests | hits | call on every table so far | preferred hypothesis | signatures | plan after it |\n| --- | --- | ---: | ---: | --- | --- | --- | --- |\n");
        for r in &self.rounds {
            s.push_str(&format!(
                "| {} | {} | {} | {} | {} | {} | {} | {} |\n",
                r.number,
                r.folders.iter().map(|(f, k)| format!("`{f}/` (k = {k})")).collect::<Vec<_>>().join(", "),
                r.requests,
                r.hits,
                r.call,
                r.preferred,
                if r.signatures.is_empty() { "none".to_string() } else { r.signatures.join(", ") },
                r.plan.as_deref().unwrap_or("—")
            ));
        }
        s.push_str("\nEach `round-N/` holds that round's measured.csv and transcript.jsonl, the verdict on every table so far (verdict.txt, verdict.json) and the plan made from it (plan.txt, plan.json, cells.csv).\n");
        if !self.pending.is_empty() {
            s.push_str("\n## Not measured: cells at another k\n\n");
            for p in &self.pending {
                s.push_str(&format!(
                    "- to run after restarting at k = {}: {} trials of `{}`:\n  `{}`\n",
                    p.k,
                    p.trials,
                    p.cells.display(),
                    p.command
                ));
            }
        }
        if !self.notes.is_empty() {
            s.push_str("\n## Notes\n\n");
            for n in &self.notes {
                s.push_str(&format!("- {n}\n"));
            }
        }
        s.push_str("\n## The evidence and the figures: the verdict on every table\n\n```text\n");
        s.push_str(verdict);
        if !verdict.ends_with('\n') {
            s.push('\n');
        }
        s.push_str("```\n");
        s
    }
}
