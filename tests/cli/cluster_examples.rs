//! The shipped cluster examples (examples/cluster/) run as written: the Slurm array script with a
//! stand-in `sbatch`, and the Kubernetes Job's shard count agrees with its completions.

use std::path::Path;
use std::process::Command;

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

#[test]
fn slurm_array_script_shards_and_merges_to_the_unsharded_file() {
    if Command::new("bash").arg("--version").output().is_err() {
        return; // no bash on this machine
    }
    let d = tempfile::tempdir().unwrap();
    let dir = d.path();
    let bin = dir.join("bin");
    std::fs::create_dir(&bin).unwrap();
    // A stand-in sbatch that records the merge job's --wrap command.
    let sbatch = bin.join("sbatch");
    std::fs::write(&sbatch, "#!/usr/bin/env bash\nfor a in \"$@\"; do case $a in --wrap=*) printf '%s\\n' \"${a#--wrap=}\" > \"$WRAP_FILE\";; esac; done\n").unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&sbatch, std::fs::Permissions::from_mode(0o755)).unwrap();
    let path = format!("{}:{}", bin.display(), std::env::var("PATH").unwrap_or_default());
    let script = root().join("examples/cluster/slurm-array.sh");
    let sweep =
        "--preset deepseek-v4-flash --engine montecarlo --trials 300 --vary context_len=1Ki..32Ki:x2 --vary dprime=1,2";
    let wrap = dir.join("wrap.txt");
    let count = 4;
    for id in 1..=count {
        let o = Command::new("bash")
            .arg(&script)
            .current_dir(dir)
            .env("PATH", &path)
            .env("DSA_SIM", env!("CARGO_BIN_EXE_dsa-sim"))
            .env("DSA_SIM_SWEEP", sweep)
            .env("WRAP_FILE", &wrap)
            .env("SLURM_ARRAY_JOB_ID", "77")
            .env("SLURM_ARRAY_TASK_ID", id.to_string())
            .env("SLURM_ARRAY_TASK_MIN", "1")
            .env("SLURM_ARRAY_TASK_COUNT", count.to_string())
            .env("SLURM_CPUS_PER_TASK", "1")
            .env_remove("JOB_COMPLETION_INDEX")
            .output()
            .unwrap();
        assert!(o.status.success(), "task {id}: {}", String::from_utf8_lossy(&o.stderr));
    }
    let wrap_cmd = std::fs::read_to_string(&wrap).expect("the first task submits the merge");
    let o = Command::new("bash").arg("-c").arg(wrap_cmd.trim()).current_dir(dir).output().unwrap();
    assert!(o.status.success(), "merge: {}", String::from_utf8_lossy(&o.stderr));
    let mut args: Vec<&str> = vec!["sweep"];
    args.extend(sweep.split(' '));
    args.extend(["--out", "unsharded.csv", "-q"]);
    let o = Command::new(env!("CARGO_BIN_EXE_dsa-sim")).args(&args).current_dir(dir).output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(std::fs::read(dir.join("sweep.csv")).unwrap() == std::fs::read(dir.join("unsharded.csv")).unwrap());
    assert!(
        std::fs::read(dir.join("sweep.csv.meta.json")).unwrap()
            == std::fs::read(dir.join("unsharded.csv.meta.json")).unwrap()
    );
    // Outside an array task the script says so.
    let o = Command::new("bash").arg(&script).current_dir(dir).env_remove("SLURM_ARRAY_TASK_ID").output().unwrap();
    assert_eq!(o.status.code(), Some(2));
}

#[test]
fn k8s_indexed_job_count_matches_completions_and_its_sweep_parses() {
    let text = std::fs::read_to_string(root().join("examples/cluster/k8s-indexed-job.yaml")).unwrap();
    assert!(text.contains("completionMode: Indexed"));
    let completions = text.lines().find_map(|l| l.trim().strip_prefix("completions: ")).unwrap();
    let count_line = text.lines().position(|l| l.contains("name: DSA_SIM_SHARD_COUNT")).unwrap();
    let value = text.lines().nth(count_line + 1).unwrap().trim();
    assert_eq!(value, format!("value: \"{completions}\""), "DSA_SIM_SHARD_COUNT = completions");
    assert!(text.contains(&format!("-ge {completions} ]")), "the merge waits for every part");
    // The sweep arguments in the ConfigMap are a valid sweep (checked without computing it).
    let start = text.find("SWEEP_ARGS: >-").unwrap();
    let args: Vec<&str> = text[start..]
        .lines()
        .skip(1)
        .take_while(|l| l.starts_with("    "))
        .flat_map(|l| l.split_whitespace())
        .collect();
    assert!(args.contains(&"--vary"), "{args:?}");
    let mut full = vec!["sweep"];
    full.extend(&args);
    full.extend(["--shard", "0/8", "--limit", "0", "--out", "part-0.csv", "-q"]);
    let d = tempfile::tempdir().unwrap();
    let o = Command::new(env!("CARGO_BIN_EXE_dsa-sim")).args(&full).current_dir(d.path()).output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
}
