"""NumPy's vectorised equivalent of the scalar exact-sampling Monte Carlo that
`dsa-sim recall --context-len 262144 --dprime 2 --engine montecarlo --trials 4000000` runs
(issue 23's comparison): N = 2^18 candidates, iid standard normal distractors, the needle's
score Y ~ Normal(dprime, 1), its rank 1 + Binomial(N - 1, Q(Y)) (exact sampling), recall =
P(rank <= k) at k = 2048, printed with its 95% Wilson interval. One process, one core (NumPy
runs these single-threaded), every trial in one vectorised pass.

Needs numpy and scipy. Run as a whole process (interpreter start and imports included), e.g.
    /usr/bin/time -f '%e s wall %U s user' python3 benches/numpy_scalar_mc.py
or through benches/numpy_vs_scalar_mc.py, which times it against dsa-sim."""
import argparse
import json
import math

import numpy as np
import scipy.special as sp

ap = argparse.ArgumentParser()
ap.add_argument("--candidates", type=int, default=1 << 18)
ap.add_argument("--k", type=int, default=2048)
ap.add_argument("--dprime", type=float, default=2.0)
ap.add_argument("--trials", type=int, default=4_000_000)
ap.add_argument("--seed", type=int, default=1)
a = ap.parse_args()

rng = np.random.default_rng(a.seed)
y = rng.normal(a.dprime, 1.0, a.trials)
rank = 1 + rng.binomial(a.candidates - 1, sp.ndtr(-y))  # ndtr(-y) = Q(y)
hits = int(np.count_nonzero(rank <= a.k))

# Wilson 95% interval, as dsa-sim reports.
n, z = a.trials, 1.959963984540054
r = hits / n
centre = (r + z * z / (2 * n)) / (1 + z * z / n)
half = z * math.sqrt(r * (1 - r) / n + z * z / (4 * n * n)) / (1 + z * z / n)
print(json.dumps({"recall": r, "ci_low": centre - half, "ci_high": centre + half, "trials": n}))
