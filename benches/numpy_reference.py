"""The NumPy baseline the foundation issue quotes: vectorised exact sampling of the needle's rank
in the benchmark scenario (N = 2^18 candidates, iid standard normal distractors, needle score
Normal(3, 1), k = 2048), and materialising one trial at a time. One core (NumPy runs these
single-threaded). Needs numpy and scipy: python3 benches/numpy_reference.py"""
import time

import numpy as np
import scipy.special as sp

N, K, DPRIME = 1 << 18, 2048, 3.0
rng = np.random.default_rng(1)


def exact(trials):
    y = rng.normal(DPRIME, 1.0, trials)
    p = sp.ndtr(-y)  # Q(y)
    rank = 1 + rng.binomial(N - 1, p)
    return (rank <= K).mean()


def materialising(trials):
    hits = 0
    for _ in range(trials):
        y = rng.normal(DPRIME, 1.0)
        rank = 1 + np.count_nonzero(rng.standard_normal(N - 1) > y)
        hits += rank <= K
    return hits / trials


def best_of(f, trials, repeats=5):
    best = float("inf")
    for _ in range(repeats):
        t = time.perf_counter()
        f(trials)
        best = min(best, time.perf_counter() - t)
    return best


t = best_of(exact, 1_000_000)
print(f"exact sampling: {1e6 / t / 1e6:.1f} M trials/s (recall {exact(1_000_000):.4f})")
y = rng.normal(DPRIME, 1.0, 1_000_000)
p = sp.ndtr(-y)
t = best_of(lambda trials: rng.binomial(N - 1, p), 1_000_000)
print(f"  of which the binomial draws (p changing every draw): {t * 1e3:.0f} ns per draw")
t = best_of(materialising, 40)
print(f"materialising: {40 * N / t / 1e6:.0f} M candidate scores/s")
