//! `--device`: the refusals a user meets without a GPU, one line and exit 2 before any work
//! (CI builds without the `cuda` feature and has no GPU, so it checks the first; a build with
//! the feature on a machine without a driver checks the second), and `cpu` changing nothing.

use std::process::{Command, Output};
use std::time::Instant;

fn dsa(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_dsa-sim")).args(args).output().expect("binary runs")
}

fn refused(args: &[&str], needles: &[&str]) {
    let t = Instant::now();
    let out = dsa(args);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{args:?} should exit 2: {err}");
    assert_eq!(err.trim_end().lines().count(), 1, "{args:?}: one line expected, got {err}");
    assert!(!err.contains("panicked"), "{err}");
    for n in needles {
        assert!(err.contains(n), "{args:?}: `{n}` missing from {err}");
    }
    assert!(out.stdout.is_empty(), "no partial output");
    // Before any work: a 1M-token, 30-layer vector run would take minutes.
    assert!(t.elapsed().as_secs_f64() < 20.0, "{args:?} took {:?}", t.elapsed());
}

/// Whether this machine can run CUDA work (then the refusals below do not apply).
fn gpu_here() -> bool {
    let out =
        dsa(&["recall", "--model", "vector", "--context-len", "1024", "--trials", "1", "--device", "cuda", "--json"]);
    out.status.success()
}

const BIG: [&str; 10] = [
    "recall",
    "--preset",
    "deepseek-v4-flash",
    "--model",
    "vector",
    "--context-len",
    "1Mi",
    "--stack",
    "csa:30",
    "--trials",
];

#[test]
fn malformed_devices_are_refused_on_any_build() {
    for bad in ["gpu", "cuda:", "cuda:x", "cuda:0,", "CUDA"] {
        refused(&[&BIG[..], &["2000", "--device", bad]].concat(), &["--device", "allowed cpu, cuda"]);
    }
    refused(&["sweep", "--model", "vector", "--vary", "context_len=1Ki,2Ki", "--device", "tpu"], &["--device"]);
}

#[test]
fn cuda_without_a_gpu_is_refused_before_any_work() {
    if cfg!(feature = "cuda") && gpu_here() {
        eprintln!("a CUDA device is present: the refusal is not tested here");
        return;
    }
    let why: &[&str] = if cfg!(feature = "cuda") {
        &["--device cuda:0:", "allowed: cpu"]
    } else {
        &["--device cuda:0: this build has no CUDA backend", "--features cuda"]
    };
    for cmd in [&BIG[..], &["rank", "--model", "vector", "--context-len", "4096", "--trials"]] {
        refused(&[cmd, &["2000", "--device", "cuda"]].concat(), why);
    }
    refused(
        &["sweep", "--model", "vector", "--vary", "context_len=1Ki,2Ki", "--trials", "10", "--device", "cuda:0"],
        why,
    );
    // A scalar scenario is refused too: the flag asks for a device this machine lacks.
    refused(&["recall", "--context-len", "4096", "--device", "cuda"], why);
    // A scenario file's `device = "cuda"`, as the flag, for each command that runs trials.
    let sd = tempfile::tempdir().unwrap();
    let file = sd.path().join("gpu.toml");
    std::fs::write(&file, "preset = \"deepseek-v4-flash\"\nmodel = \"vector\"\ncontext_len = \"1Mi\"\nstack = \"csa:30\"\ndevice = \"cuda\"\n")
        .unwrap();
    let file = file.to_str().unwrap();
    for cmd in ["recall", "rank"] {
        refused(&[cmd, "--scenario", file, "--trials", "2000"], why);
    }
    refused(&["sweep", "--scenario", file, "--vary", "context_len=512Ki,1Mi", "--trials", "100"], why);
    // `run`: the flag, and an experiment file's `device` key, before any grid is computed.
    let d = tempfile::tempdir().unwrap();
    let out = d.path().join("out");
    let out = out.to_str().unwrap();
    refused(&["run", "experiments/indexer-formats.toml", "--device", "cuda", "--out", out], why);
    let exp = d.path().join("gpu.toml");
    let text = std::fs::read_to_string("experiments/indexer-formats.toml").unwrap();
    std::fs::write(&exp, text.replacen("engine = ", "device = \"cuda\"\nengine = ", 1)).unwrap();
    refused(&["run", exp.to_str().unwrap(), "--out", out], why);
    assert!(!d.path().join("out").exists(), "nothing written");
    // Commands without trials are unaffected.
    for args in [&["formats"][..], &["presets"]] {
        let out = dsa(args);
        assert!(out.status.success(), "{args:?}: {}", String::from_utf8_lossy(&out.stderr));
    }
}

#[test]
fn cpu_is_the_default() {
    let base = [
        "recall",
        "--preset",
        "deepseek-v4-flash",
        "--stack",
        "none",
        "--model",
        "vector",
        "--context-len",
        "4096",
        "--trials",
        "12",
        "--seed",
        "5",
        "--json",
    ];
    let a = dsa(&base);
    let b = dsa(&[&base[..], &["--device", "cpu"]].concat());
    assert!(a.status.success() && b.status.success(), "{}", String::from_utf8_lossy(&b.stderr));
    assert_eq!(a.stdout, b.stdout);
}

/// A scenario file's `device` key: the flag replaces it, a malformed one is refused like the
/// flag (one line, exit 2, naming the file), and the commands that run no vector trials on a
/// device (`formats`) ignore it.
#[test]
fn a_scenario_files_device() {
    let d = tempfile::tempdir().unwrap();
    let write = |name: &str, device: &str| {
        let p = d.path().join(name);
        std::fs::write(
            &p,
            format!(
                "preset = \"deepseek-v4-flash\"\nstack = \"none\"\nmodel = \"vector\"\ncontext_len = 4096\n{device}"
            ),
        )
        .unwrap();
        p.to_str().unwrap().to_string()
    };
    let (plain, cpu, cuda) =
        (write("plain.toml", ""), write("cpu.toml", "device = \"cpu\"\n"), write("cuda.toml", "device = \"cuda\"\n"));
    let run = |file: &str, extra: &[&str]| {
        let out =
            dsa(&[&["recall", "--scenario", file, "--trials", "12", "--seed", "5", "--json"][..], extra].concat());
        assert!(out.status.success(), "{file} {extra:?}: {}", String::from_utf8_lossy(&out.stderr));
        out.stdout
    };
    let base = run(&plain, &[]);
    assert!(!base.is_empty());
    assert_eq!(run(&cpu, &[]), base, "device = \"cpu\" is the default");
    assert_eq!(run(&cuda, &["--device", "cpu"]), base, "--device replaces the file's device");
    for (name, line, needles) in [
        ("gpu.toml", "device = \"gpu\"\n", &["--scenario", "gpu.toml", "device = \"gpu\": allowed cpu, cuda"][..]),
        ("one.toml", "device = 1\n", &["--scenario", "one.toml", "device = 1: expected a string"]),
    ] {
        let f = write(name, line);
        refused(&["recall", "--scenario", &f, "--trials", "12"], needles);
        refused(&["sweep", "--scenario", &f, "--vary", "context_len=1Ki,2Ki", "--trials", "12"], needles);
    }
    let out = dsa(&["formats", "--scenario", &cuda, "--format", "fp8-e4m3:128:fp32", "--trials", "4", "--json"]);
    assert!(out.status.success(), "formats ignores the device: {}", String::from_utf8_lossy(&out.stderr));
}
