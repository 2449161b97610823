# Writes a recall table of one row per context length (no two rows share a length, so no row's
# evaluation answers for another), drawn from the scalar model's own recall: the shape that costs
# the verdict most per row (benches/issue_table.rs). Deterministic: Python's Mersenne Twister from
# the seed. Usage: python3 gen_lengths.py DSA_SIM OUT PRESET DPRIME RHO TRIALS SEED
#   lengths30_v4_flash_vllm_fp8.csv: target/release/dsa-sim ... deepseek-v4-flash-vllm-fp8 1.0 0.9 10 3
import json
import random
import subprocess
import sys

exe, out, preset, dprime, rho, trials, seed = sys.argv[1:8]
rng = random.Random(int(seed))
lengths = [2000 + 1500 * i for i in range(30)]
rows = []
for n in lengths:
    reply = subprocess.run(
        [exe, "recall", "--preset", preset, "--context-len", str(n), "--dprime", dprime, "--layer-corr", rho, "--json"],
        check=True, capture_output=True, text=True,
    )
    p = json.loads(reply.stdout)["recall"]
    hits = sum(rng.random() < p for _ in range(int(trials)))
    rows.append(f"{n},512,0.5,{trials},{hits}")
with open(out, "w") as f:
    f.write(
        f"# provenance: CONSTRUCTED by benches/data/gen_lengths.py (seed {seed}): 30 context lengths 2000..45500, "
        f"{trials} trials each, drawn from the scalar model on {preset} at dprime {dprime}, layer_corr {rho}; "
        "for timing the verdict (benches/issue_table.rs)\n"
    )
    f.write("context_len,index_topk,depth,trials,hits\n")
    f.write("\n".join(rows) + "\n")
