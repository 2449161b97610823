#!/usr/bin/env bash
# A dsa-sim sweep split over a Slurm job array, then merged into the file one machine would write.
#
#   sbatch examples/cluster/slurm-array.sh    # 8 shards; the first submits the merge job
#
# Each array task runs `dsa-sim sweep --shard auto`, which reads SLURM_ARRAY_TASK_ID and
# SLURM_ARRAY_TASK_COUNT (and SLURM_ARRAY_TASK_MIN, so --array=1-8 works too) and computes grid
# points i with i mod 8 = its index. A final job, started when every task has succeeded, merges
# the parts; the result is byte-identical to running the sweep without --shard. Change the
# sweep in SWEEP_ARGS (the parts and the merge must use the same arguments), the array size,
# and the resources; dsa-sim must be on PATH (cargo install --path .) or set DSA_SIM.
#
#SBATCH --job-name=dsa-sim-sweep
#SBATCH --array=0-7
#SBATCH --cpus-per-task=4
#SBATCH --time=04:00:00
#SBATCH --output=dsa-sim-%A_%a.log
set -euo pipefail

DSA_SIM=${DSA_SIM:-dsa-sim}
OUT_DIR=${OUT_DIR:-$PWD/sweep-parts}
RESULT=${RESULT:-$PWD/sweep.csv}
SWEEP_ARGS=(
    --preset deepseek-v4-flash --stack none --model vector --trials 2000
    --vary context_len=4Ki..1Mi:x2
    --vary alignment=0.05..0.25:5
    --vary k_format=fp32,fp8-e4m3:128:fp32,fp4-e2m1:32:ue8m0
)
# For a quick trial run: DSA_SIM_SWEEP="--vary depth=0..1:11" replaces the sweep's arguments.
if [[ -n "${DSA_SIM_SWEEP:-}" ]]; then
    read -ra SWEEP_ARGS <<< "$DSA_SIM_SWEEP"
fi

if [[ -z "${SLURM_ARRAY_TASK_ID:-}" ]]; then
    echo "not inside a Slurm array task: submit with sbatch $0" >&2
    exit 2
fi

mkdir -p "$OUT_DIR"
# The first task also submits the merge, to run once every task of this array has succeeded.
if [[ "$SLURM_ARRAY_TASK_ID" == "${SLURM_ARRAY_TASK_MIN:-0}" ]]; then
    # (Its file list is expanded when the merge runs, after every part exists.)
    sbatch --dependency="afterok:${SLURM_ARRAY_JOB_ID}" --job-name=dsa-sim-merge \
        --output="dsa-sim-merge-%j.log" \
        --wrap="'$DSA_SIM' merge '$OUT_DIR'/part-*.csv --out '$RESULT'"
fi

# --resume: a task that was preempted and requeued keeps its finished rows.
"$DSA_SIM" sweep "${SWEEP_ARGS[@]}" --shard auto --threads "${SLURM_CPUS_PER_TASK:-1}" \
    --out "$OUT_DIR/part-${SLURM_ARRAY_TASK_ID}.csv" --resume --quiet
