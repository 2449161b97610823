//! The vector model's trial time on each device (`cargo bench --features cuda --bench
//! vector_device`; docs/benchmarks.md holds its figures): a 21-layer DeepSeek-V4-Flash trial
//! at 128Ki tokens and a 30-layer one at 1Mi tokens with every mechanism on, and the naive
//! PyTorch peer's simplified trial (normal keys, an FP8 round trip with a per-row scale, signed
//! weights, no compressor weights, RoPE, Hadamard or key norm) at both sizes, on the CPU (all
//! cores) and on `cuda:0`.
//!
//! Criterion-style without criterion's fixed sample counts (a 1Mi trial on the CPU takes
//! seconds): one warm-up sample (what a process pays once: the driver, the card's context, the
//! kernels' NVRTC compilation and load), then `SAMPLES` samples, each a
//! run of T trials (the device's throughput, trials running concurrently as in a real run) and
//! (on a GPU) a run of 4 trials, reported as ms per trial: the run's time / T (what a T-trial run costs per
//! trial, its setup included: the model, the card's buffers, one stream and staging per
//! thread), and the marginal cost (t(T) − t(4)) / (T − 4) (what each further trial costs);
//! median, min and max over the samples. Each sample draws other trials (seed = sample), so no
//! cache holds a previous sample's keys. Writes a JSON summary to `DSA_SIM_BENCH_OUT` when set;
//! `DSA_SIM_BENCH_DEVICES` (default `cpu,cuda:0`) picks devices.

use dsa_sim::indexer::device::Device;
use dsa_sim::progress::Silent;
use dsa_sim::Scenario;
use std::time::Instant;

/// Samples per case (`DSA_SIM_BENCH_SAMPLES` overrides).
const SAMPLES: usize = 5;

fn scenario(fields: &[(&str, &str)]) -> Scenario {
    let mut s = Scenario::preset("deepseek-v4-flash").unwrap();
    s.model = dsa_sim::scenario::Model::Vector;
    for (f, v) in fields {
        s.set_text(f.parse().unwrap(), v).unwrap();
    }
    s.validate().unwrap();
    s
}

fn main() {
    let simplified = [
        ("compressor", "mean"),
        ("overlap", "false"),
        ("rope_dims", "0"),
        ("hadamard", "false"),
        ("key_norm", "false"),
        ("q_format", "fp8-e4m3:128:fp32"),
        ("k_format", "fp8-e4m3:128:fp32"),
    ];
    let with = |base: &[(&'static str, &'static str)]| {
        let mut v = base.to_vec();
        v.extend_from_slice(&simplified);
        v
    };
    let env = |k: &str| std::env::var(k).ok().and_then(|v| v.parse::<u64>().ok());
    // Trials per sample at 1Mi (`DSA_SIM_BENCH_1M_TRIALS`, default 32), samples per case; and
    // `DSA_SIM_BENCH_SKIP`: "case@device" pairs (case = index in the list below) not to run.
    let big = env("DSA_SIM_BENCH_1M_TRIALS").unwrap_or(32);
    let small = env("DSA_SIM_BENCH_128K_TRIALS").unwrap_or(64);
    let samples = env("DSA_SIM_BENCH_SAMPLES").map_or(SAMPLES, |v| v as usize).max(1);
    let skip = std::env::var("DSA_SIM_BENCH_SKIP").unwrap_or_default();
    let cases: Vec<(&str, Scenario, u64)> = vec![
        ("v4-flash 21 layers 128Ki, every mechanism", scenario(&[("context_len", "128Ki")]), small),
        (
            "v4-flash 30 layers 1Mi, every mechanism",
            scenario(&[("context_len", "1Mi"), ("stack", "csa:30"), ("index_topk", "1024")]),
            big,
        ),
        ("peer's simplified trial, 21 layers 128Ki", scenario(&with(&[("context_len", "128Ki")])), small),
        (
            "peer's simplified trial, 30 layers 1Mi",
            scenario(&with(&[("context_len", "1Mi"), ("stack", "csa:30"), ("index_topk", "1024")])),
            big,
        ),
    ];
    let devices = std::env::var("DSA_SIM_BENCH_DEVICES").unwrap_or_else(|_| "cpu,cuda:0".into());
    let mut json = Vec::new();
    println!(
        "threads {} ({} cores)",
        rayon::current_num_threads(),
        std::thread::available_parallelism().map(|n| n.get()).unwrap_or(0)
    );
    for (case, (name, s, trials)) in cases.iter().enumerate() {
        assert_eq!(s.selecting_layers() as usize, if name.contains("30 layers") { 30 } else { 21 });
        for dev in devices.split(';').flat_map(|d| d.split(',').map(str::to_string).collect::<Vec<_>>()) {
            if skip.split(' ').any(|p| p == format!("{case}@{dev}")) {
                continue;
            }
            let device: Device = dev.parse().unwrap();
            if let Err(e) = device.check() {
                println!("{name} on {dev}: {}", e.0);
                continue;
            }
            let (mut ms, mut marginal) = (Vec::new(), Vec::new());
            let timed = |n: u64, seed: u64| {
                let t = Instant::now();
                let tally = dsa_sim::indexer::simulate_on(s, n, seed, device, &Silent).unwrap();
                assert_eq!(tally.trials, n);
                t.elapsed().as_secs_f64() * 1e3
            };
            for sample in 0..=samples {
                let full = timed(*trials, sample as u64);
                // The setup is the card's (a CPU run's is negligible, and its 4 trials would
                // run on one thread).
                let four =
                    if device == Device::Cpu { 4.0 * full / *trials as f64 } else { timed(4, 1000 + sample as u64) };
                if sample > 0 {
                    ms.push(full / *trials as f64);
                    marginal.push((full - four) / (*trials - 4) as f64);
                }
            }
            let stats = |v: &mut Vec<f64>| {
                v.sort_by(f64::total_cmp);
                (v[v.len() / 2], v[0], v[v.len() - 1])
            };
            let (med, lo, hi) = stats(&mut ms);
            let (mmed, mlo, mhi) = stats(&mut marginal);
            println!("{name} on {dev}: {med:.2} ms per trial in runs of {trials} (median of {samples} samples; min {lo:.2}, max {hi:.2}); marginal {mmed:.2} ms per trial (min {mlo:.2}, max {mhi:.2})");
            json.push(serde_json::json!({"case": name, "device": dev, "trials_per_sample": trials, "samples": samples, "ms_per_trial_median": med, "ms_per_trial_min": lo, "ms_per_trial_max": hi, "marginal_ms_per_trial_median": mmed, "marginal_ms_per_trial_min": mlo, "marginal_ms_per_trial_max": mhi}));
        }
    }
    if let Ok(path) = std::env::var("DSA_SIM_BENCH_OUT") {
        std::fs::write(path, serde_json::to_string_pretty(&json).unwrap()).unwrap();
    }
}
