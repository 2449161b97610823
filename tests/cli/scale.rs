//! Scale: the exact paths at context_len 10^9 (and the 2^40 maximum) answer in well under a
//! second each; Monte Carlo that must draw every candidate runs at N = 2^22 in a few tens of MB.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_dsa-sim"))
}

/// Runs the command, returns its JSON and wall time.
fn json(args: &[&str]) -> (serde_json::Value, Duration) {
    let t = Instant::now();
    let o = bin().args(args).output().unwrap();
    let dt = t.elapsed();
    assert!(o.status.success(), "{args:?}: {}", String::from_utf8_lossy(&o.stderr));
    (serde_json::from_slice(&o.stdout).unwrap(), dt)
}

/// Generous bound for one exact evaluation at 10^9 tokens (they take 0.01–0.5 s on one core).
const QUICK: Duration = Duration::from_secs(20);

#[test]
fn a_billion_tokens_on_the_exact_paths_runs_quickly() {
    let scenarios: Vec<Vec<&str>> = vec![
        vec![],
        vec!["--preset", "deepseek-v4-flash", "--stack", "none"],
        vec!["--preset", "deepseek-v4-pro", "--stack", "none", "--dprime", "4"],
        vec!["--preset", "quest-16"],
        vec!["--compress-ratio", "64", "--index-topk", "16", "--window", "512", "--sink", "64"],
        vec!["--distractor", "student_t:3", "--dprime", "8"],
        vec!["--distractor", "gumbel", "--dprime", "8"],
        vec!["--hard-negatives", "1000"],
        vec!["--layers", "4", "--layer-corr", "0.5", "--readout", "all"],
        vec!["--repeat", "8", "--needle-tokens", "20"],
        vec!["--compress-ratio", "64", "--pooling", "mean"],
        vec!["--score-noise", "0.5", "--dprime", "5"],
    ];
    for sc in scenarios {
        for cmd in ["recall", "rank"] {
            let (v, dt) = json(&[&[cmd, "--context-len", "1000000000", "--json"], &sc[..]].concat());
            assert!(dt < QUICK, "{cmd} {sc:?}: {dt:?}");
            if cmd == "recall" {
                assert_eq!(v["engine"], "analytic", "{sc:?}");
                let r = v["recall"].as_f64().unwrap();
                assert!((0.0..=1.0).contains(&r), "{sc:?}: {r}");
            }
            let cdf = v["cdf"].as_array().or_else(|| v["rank"]["cdf"].as_array()).unwrap();
            let ps: Vec<f64> = cdf.iter().map(|p| p[1].as_f64().unwrap()).collect();
            assert!(ps.windows(2).all(|w| w[0] <= w[1] + 1e-9), "{cmd} {sc:?}: the rank CDF decreases");
        }
    }
    // The largest context the model accepts, 2^40 tokens.
    let (v, dt) = json(&[
        "recall",
        "--preset",
        "deepseek-v4-flash",
        "--stack",
        "none",
        "--context-len",
        "1099511627776",
        "--dprime",
        "6",
        "--json",
    ]);
    assert!(dt < QUICK && v["engine"] == "analytic" && v["n_candidates"] == 274877906944u64, "{v}");
}

#[test]
fn a_sweep_to_a_billion_tokens_is_exact_and_monotone() {
    for extra in [
        vec![],
        vec!["--hard-negatives", "0.01", "--no-rank"],
        vec!["--preset", "deepseek-v4-flash", "--stack", "none"],
    ] {
        let t = Instant::now();
        let (v, _) = json(
            &[
                &[
                    "sweep",
                    "--vary",
                    "context_len=1000..1000000000:x10",
                    "--vary",
                    "index_topk=512,2048",
                    "--json",
                    "-q",
                ],
                &extra[..],
            ]
            .concat(),
        );
        assert!(t.elapsed() < QUICK * 3, "{extra:?}: {:?}", t.elapsed());
        let rows = v["rows"].as_array().unwrap();
        assert_eq!(rows.len(), 14);
        assert!(rows.iter().all(|r| r["engine"] == "analytic"));
        // Recall does not rise with the context at fixed k (needle outside the window, dprime ≥ 0).
        for k in [512, 2048] {
            let rs: Vec<f64> =
                rows.iter().filter(|r| r["index_topk"] == k).map(|r| r["recall"].as_f64().unwrap()).collect();
            assert!(rs.windows(2).all(|w| w[1] <= w[0] + 1e-6), "{extra:?} k = {k}: {rs:?}");
        }
    }
}

/// Peak resident memory (VmHWM, kB) of a running child, polled until it exits.
fn peak_kb(mut cmd: Command) -> (u64, std::process::ExitStatus, Vec<u8>) {
    let mut child = cmd.stdout(Stdio::piped()).stderr(Stdio::null()).spawn().unwrap();
    let status_path = format!("/proc/{}/status", child.id());
    let mut peak = 0;
    let status = loop {
        if let Ok(text) = std::fs::read_to_string(&status_path) {
            if let Some(kb) = text
                .lines()
                .find(|l| l.starts_with("VmHWM:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|n| n.parse::<u64>().ok())
            {
                peak = peak.max(kb);
            }
        }
        if let Some(st) = child.try_wait().unwrap() {
            break st;
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    let mut out = Vec::new();
    use std::io::Read;
    child.stdout.take().unwrap().read_to_end(&mut out).unwrap();
    (peak, status, out)
}

#[test]
fn materialised_monte_carlo_at_2_pow_22_candidates_stays_small() {
    // Overlapping mean pooling has no closed form: every one of the 2^22 entries is drawn.
    let mut cmd = bin();
    cmd.args([
        "recall",
        "--context-len",
        "4194304",
        "--overlap",
        "true",
        "--pooling",
        "mean",
        "--trials",
        "6",
        "--threads",
        "2",
        "--json",
    ]);
    let t = Instant::now();
    let (peak, status, out) = peak_kb(cmd);
    assert!(status.success());
    let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
    assert_eq!((v["engine"].as_str(), v["n_candidates"].as_u64()), (Some("montecarlo"), Some(1 << 22)));
    assert!(t.elapsed() < QUICK * 3, "{:?}", t.elapsed());
    // One f64 per entry per worker: 32 MiB a worker, plus the program.
    assert!(peak > 1 << 15, "the entries were not drawn ({peak} kB)");
    assert!(peak < 1 << 20, "peak resident memory {peak} kB is over 1 GiB");
    eprintln!("peak resident memory at N = 2^22, materialised: {} MB", peak / 1024);
}
