"""Issue 23's whole-process comparison: the scalar exact-sampling Monte Carlo of dsa-sim against
NumPy's vectorised equivalent (benches/numpy_scalar_mc.py), same scenario (N = 2^18 candidates,
dprime 2, k = 2048, 4M trials), each run as a whole process (start-up, imports and output
included), alternately, several times. Prints every run, the medians of wall and CPU (user + sys)
seconds, their ratios, and the load average; exits 1 if the two recalls disagree beyond 5
standard errors (they sample the same law with different generators).

    cargo build --release
    python3 benches/numpy_vs_scalar_mc.py [--repeats 9] [--bin target/release/dsa-sim] [--threads N]

Needs numpy and scipy for the NumPy side only. On a machine shared with other work, compare the
CPU column too: the wall ratio then depends on how many cores each process was given."""
import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
ap.add_argument("--repeats", type=int, default=9)
ap.add_argument("--bin", default=os.path.join(HERE, "..", "target", "release", "dsa-sim"))
ap.add_argument("--trials", type=int, default=4_000_000)
ap.add_argument("--threads", type=int, help="dsa-sim --threads (default: all cores)")
a = ap.parse_args()

N, K, DPRIME = 1 << 18, 2048, 2.0
numpy_cmd = [sys.executable, os.path.join(HERE, "numpy_scalar_mc.py"), "--candidates", str(N), "--k", str(K),
             "--dprime", str(DPRIME), "--trials", str(a.trials)]
rust_cmd = [a.bin, "recall", "--context-len", str(N), "--index-topk", str(K), "--dprime", str(DPRIME),
            "--engine", "montecarlo", "--trials", str(a.trials), "--json"]
if a.threads:
    rust_cmd += ["--threads", str(a.threads)]


def run(cmd):
    """Wall and CPU (user + sys) seconds of one whole process, and its recall."""
    t = time.perf_counter()
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE)
    out = p.stdout.read()
    _, status, ru = os.wait4(p.pid, 0)
    wall = time.perf_counter() - t
    if status != 0:
        sys.exit(f"{cmd[0]} failed (status {status})")
    return wall, ru.ru_utime + ru.ru_stime, json.loads(out)["recall"]


print(f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
print(" ".join(rust_cmd))
print(" ".join(numpy_cmd))
runs = {"numpy": [], "dsa-sim": []}
for i in range(a.repeats):
    # Alternate which goes first, so neither always follows the other's cache and load.
    order = [("numpy", numpy_cmd), ("dsa-sim", rust_cmd)]
    for name, cmd in order if i % 2 == 0 else order[::-1]:
        runs[name].append(run(cmd))
    (nw, nc, _), (rw, rc, _) = runs["numpy"][-1], runs["dsa-sim"][-1]
    print(f"run {i + 1}: numpy {nw:.3f} s wall {nc:.3f} s CPU | dsa-sim {rw:.3f} s wall {rc:.3f} s CPU | "
          f"ratio {nw / rw:.2f} wall {nc / rc:.2f} CPU")
print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")

med = {name: (statistics.median(r[0] for r in rs), statistics.median(r[1] for r in rs)) for name, rs in runs.items()}
for name, (w, c) in med.items():
    print(f"{name:8} median {w:.3f} s wall, {c:.3f} s CPU ({a.repeats} runs)")
print(f"ratio numpy / dsa-sim: {med['numpy'][0] / med['dsa-sim'][0]:.2f}x wall, {med['numpy'][1] / med['dsa-sim'][1]:.2f}x CPU")

# Same law, different generators: the recalls agree to within sampling error.
rn, rr = runs["numpy"][0][2], runs["dsa-sim"][0][2]
se = math.sqrt(rn * (1 - rn) / a.trials + rr * (1 - rr) / a.trials)
print(f"recall: numpy {rn:.5f}, dsa-sim {rr:.5f} ({abs(rn - rr) / se:.1f} standard errors apart)")
if abs(rn - rr) > 5 * se:
    sys.exit("the two recalls disagree")
