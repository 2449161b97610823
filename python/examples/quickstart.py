# %% [markdown]
# # dsa_sim quickstart: is a lost needle a coverage or a discrimination problem?
#
# A notebook in cells (`# %%`: VS Code, Jupyter with jupytext, or `python quickstart.py`). Every
# function returns what `dsa-sim COMMAND --json` prints, as Python objects and numpy arrays.
# Run it from the repository's root (the measured table is `experiments/…csv`).

# %%
import pathlib

import numpy as np

import dsa_sim

ROOT = pathlib.Path(__file__).resolve().parents[2] if "__file__" in globals() else pathlib.Path.cwd()
DATA = ROOT / "experiments" / "dsv4_seed_observations.csv"

# %% [markdown]
# ## Recall of one scenario
# DeepSeek-V4-Flash geometry at 128K tokens, a needle 3 sd above a typical distractor. Scenario
# fields are keyword arguments named as in TOML files (`context_len`, `dprime`, …).

# %%
r = dsa_sim.recall(preset="deepseek-v4-flash", context_len=131072, dprime=3)
print(f"recall {r['recall']:.6f} ({r['engine']}), {r['n_candidates']} candidates")

# %% [markdown]
# ## Where does a weaker needle rank?
# `cdf_j`, `cdf_p`: P(rank ≤ j) as numpy arrays. Spread over thousands of candidates, far
# beyond any feasible k: a discrimination problem.

# %%
k = dsa_sim.rank(preset="deepseek-v4-flash", context_len=131072, dprime=1.5)
for j, p in zip(k["cdf_j"], k["cdf_p"]):
    if j in (512, 1024, 2048):
        print(f"P(rank <= {j:5d}) = {p:.4f}")
print("median rank:", k["quantile_j"][1])

# %% [markdown]
# ## A sweep, as a table
# `rows` is a list of dicts (`pandas.DataFrame(s["rows"])`), `arrays` the same columns as numpy
# arrays.

# %%
s = dsa_sim.sweep(
    {"context_len": "4Ki..1Mi:x4", "index_topk": [512, 1024, 2048]},
    preset="deepseek-v4-flash",
    dprime=2.5,
    rank=False,
)
a = s["arrays"]
for L in np.unique(a["context_len"]):
    at = a["context_len"] == L
    print(f"L = {int(L):>8}: " + "  ".join(f"k={int(kk)}: {rr:.3f}" for kk, rr in zip(a["index_topk"][at], a["recall"][at])))
try:
    import pandas as pd

    print(pd.DataFrame(s["rows"]).head(3))
except ImportError:
    pass

# %% [markdown]
# ## Calibrate against a measured table, then the verdict
# The seed table is TRANSCRIBED from qualitative statements (illustrative counts): the results
# carry that warning.

# %%
fit = dsa_sim.calibrate(DATA, "dprime", preset="deepseek-v4-flash")
d = fit["estimates"]["dprime"]
print(f"dprime = {d['value']:.3f} [{d['ci_low']:.3f}, {d['ci_high']:.3f}]")

summary = dsa_sim.verdict(preset="deepseek-v4-flash", context_len=16000, dprime=d["value"])
print(summary["call"], "-", summary["explanation"])

# %% [markdown]
# ## What the indexer's FP4 keys do to its numbers
# numpy in, numpy out: bit-exact with `dsa-sim quantize`.

# %%
x = np.random.default_rng(0).standard_normal((4, 64)).astype(np.float32)
q = dsa_sim.quantize(x, "fp4-e2m1", block=32, scale="ue8m0")
print("relative RMS error of fp4-e2m1:32:ue8m0:", float(np.sqrt(np.mean((q - x) ** 2) / np.mean(x**2))))
