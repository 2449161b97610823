"""Reference values of the standard normal survival function Q(x) = 1 - Phi(x), from mpmath at
50 digits, for tests/engines/normal_tail.rs. Run: python3 gen_normal_sf.py > normal_sf.txt

The x values are exact binary64 numbers (written with repr), so the reference is Q of exactly
the double the test evaluates."""
import random
import mpmath

mpmath.mp.dps = 50
rng = random.Random(20261130)
xs = []
# Dense where the engines evaluate (|x| < 12), then the far upper tail to underflow.
xs += [rng.uniform(-12.0, 12.0) for _ in range(3000)]
xs += [rng.uniform(12.0, 38.5) for _ in range(600)]
xs += [0.0, 1e-300, -1e-300, 0.5, 1.0, 11.999999999999998, 12.0, 38.4]
# Piece boundaries of the table (width 12/128) and their neighbours.
for p in range(129):
    b = p * 12.0 / 128
    xs += [b, float(mpmath.mpf(b) + mpmath.mpf(2) ** -40)]
print("# x Q(x)  (mpmath %s, 50 digits; 20 significant digits written)" % mpmath.__version__)
for x in xs:
    q = mpmath.ncdf(-mpmath.mpf(x))
    print("%r %s" % (x, mpmath.nstr(q, 20, min_fixed=1, max_fixed=0)))
