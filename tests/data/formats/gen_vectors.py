#!/usr/bin/env python3
"""Generates the bit-exact test vectors of dsa-sim's number formats (docs/model.md#number-formats).

Run once, commit the output:  python3 gen_vectors.py   (needs numpy and ml_dtypes; the vectors
were generated with the versions written in each file's header). The output is deterministic.

Files (one value per column, f32 bit patterns in hex, one input per line):
  scalar_<format>.txt  columns `in <format>`: the element format applied value by value.
  block_<element>.txt  columns `in <spec> <spec> ...`: block-scaled formats (dsa-sim format
                       specifications); every row group of 128 values (`# rows: 128`) is one
                       call, i.e. one tensor for the two-level e4m3 scale.

The references, all in float32 arithmetic:
  - element casts: ml_dtypes (bfloat16, float8_e4m3fn, float8_e5m2, float4_e2m1fn) and numpy
    float16, round to nearest even; finite values are clipped to +-max first (dsa-sim saturates;
    ml_dtypes alone would give inf or NaN). Non-finite inputs take ml_dtypes' result, NaN
    written as the canonical quiet NaN with the input's sign. int8/int4: numpy rint, clipped.
    NaN is not a valid input to fp4-e2m1, int8 or int4 (dsa-sim reports an error), so it is
    not in their files.
  - block scales (amax = max |x| of the block, raised to the floor; inv = float32(1/fmax)):
      fp32   s = amax * inv                           (DeepSeek act_quant, scale_fmt=None)
      ue8m0  s = 2^ceil(log2(amax * inv))              (DeepSeek fast_round_scale)
      e8m0   s = 2^(floor(log2 amax) - emax)           (OCP MX shared exponent; MXFP4)
      e4m3   g = amax_tensor / (448*fmax); s = e4m3(min(amax / (fmax*g), 448)); scale s*g (NVFP4)
    the exponents clamped to [-127, 127] (E8M0); values element(clip(x / scale)) * scale,
    clipped to +-f32 max (a finite input never becomes inf).
    A block with amax 0 is unchanged; a block whose scale is 0 in float32 becomes x * 0.
    log2 is taken with frexp and x / scale is a true division here (dsa-sim multiplies by the
    exact reciprocal of power-of-two scales), so the two implementations are independent.
"""

import os
import sys

import ml_dtypes
import numpy as np

F32 = np.float32
F32_MAX = np.finfo(np.float32).max
HERE = os.path.dirname(os.path.abspath(__file__))
ROWS = 128

ELEMENTS = {
    # name: (dtype or None for integers, max finite, emax = floor(log2 max))
    "bf16": (ml_dtypes.bfloat16, float(ml_dtypes.finfo(ml_dtypes.bfloat16).max), 127),
    "fp16": (np.float16, 65504.0, 15),
    "fp8-e4m3": (ml_dtypes.float8_e4m3fn, 448.0, 8),
    "fp8-e5m2": (ml_dtypes.float8_e5m2, 57344.0, 15),
    "fp4-e2m1": (ml_dtypes.float4_e2m1fn, 6.0, 2),
    "int8": (None, 127.0, 6),
    "int4": (None, 7.0, 2),
}
HAS_NAN = {"bf16", "fp16", "fp8-e4m3", "fp8-e5m2"}


def bits(a):
    return np.asarray(a, dtype=F32).view(np.uint32)


def from_bits(b):
    return np.asarray(b, dtype=np.uint32).view(F32)


def canonical_nan(out, x):
    """Writes NaN outputs as 0x7FC00000 with the sign of the input."""
    nan = np.isnan(out)
    if nan.any():
        ob = bits(out).copy()
        ob[nan] = 0x7FC00000 | (bits(x)[nan] & 0x80000000)
        out = from_bits(ob)
    return out


def cast(name, y):
    """Element cast of float32 values, saturating finite values (the dsa-sim rule)."""
    dt, fmax, _ = ELEMENTS[name]
    y = np.asarray(y, dtype=F32)
    fin = np.isfinite(y)
    clipped = np.where(fin, np.clip(y, F32(-fmax), F32(fmax)), y).astype(F32)
    if dt is None:
        if np.isnan(y).any():
            raise ValueError("NaN given to an integer format")
        out = np.clip(np.rint(clipped), F32(-fmax), F32(fmax)).astype(F32)
    else:
        if name == "fp4-e2m1" and np.isnan(y).any():
            raise ValueError("NaN given to fp4-e2m1")
        with np.errstate(over="ignore", invalid="ignore"):
            out = clipped.astype(dt).astype(F32)
    out = canonical_nan(out, y)
    nan_in = np.isnan(y)
    assert np.all(np.isnan(out[nan_in])), name
    return out


def representable(name):
    """All non-negative finite values of a format (sampled for the 16-bit ones)."""
    dt, fmax, _ = ELEMENTS[name]
    if dt is None:
        return np.arange(0, int(fmax) + 1, dtype=F32)
    nbits = {np.float16: 16, ml_dtypes.bfloat16: 16}.get(dt, 8)
    if dt is ml_dtypes.float4_e2m1fn:
        vals = np.array([0, 0.5, 1, 1.5, 2, 3, 4, 6], dtype=F32)
        assert np.array_equal(vals.astype(dt).astype(F32), vals)
        return vals
    codes = np.arange(2 ** nbits, dtype=np.uint16 if nbits == 16 else np.uint8)
    vals = codes.view(dt).astype(F32)
    vals = vals[np.isfinite(vals) & (bits(vals) < 0x80000000)]
    return np.unique(vals)


def scalar_inputs(name, rng, n=10240):
    dt, fmax, _ = ELEMENTS[name]
    vals = representable(name)
    if len(vals) > 1000:  # 16-bit formats: the smallest and largest codes, plus a random sample
        keep = np.concatenate([vals[:150], vals[-150:], rng.choice(vals[150:-150], 500, replace=False)])
        neighbours_of = np.unique(keep)
    else:
        neighbours_of = vals
    allv = vals
    idx = np.searchsorted(allv, neighbours_of)
    idx = idx[idx + 1 < len(allv)]
    lo, hi = allv[idx], allv[idx + 1]
    mids = ((lo.astype(np.float64) + hi.astype(np.float64)) / 2).astype(F32)  # exact ties
    assert np.all((mids.astype(np.float64) * 2) == (lo.astype(np.float64) + hi.astype(np.float64)))
    up = np.nextafter(mids, F32(np.inf))
    down = np.nextafter(mids, F32(0))
    # Beyond the max: the tie above it, a little more, a lot more.
    top_quantum = float(allv[-1]) - float(allv[-2])
    with np.errstate(over="ignore"):
        past = np.array([fmax + top_quantum / 2, fmax + top_quantum / 4, fmax * 1.0001, fmax * 1.5, fmax * 2,
                         fmax * 1000, 1e30, 3.4028235e38], dtype=F32)
    past = past[np.isfinite(past)]
    specials = np.array([0.0, 2 ** -149, 2 ** -140, 2 ** -127, 2 ** -126, 1.0], dtype=F32)
    f32_subnormals = from_bits(rng.integers(1, 0x00800000, 40, dtype=np.uint32))
    parts = [neighbours_of, mids, up, down, past, specials, f32_subnormals]
    base = np.concatenate(parts).astype(F32)
    base = np.concatenate([base, -base])
    nonfinite = [np.inf, -np.inf]
    if name in HAS_NAN:
        nonfinite += list(from_bits(np.array([0x7FC00000, 0xFFC00000, 0x7F800001, 0xFFA12345], dtype=np.uint32)))
    base = np.concatenate([base, np.array(nonfinite, dtype=F32)])
    # Random fill: log-uniform magnitudes from a quarter of the smallest step to 4x the max.
    smallest = float(allv[1])
    k = n - len(base)
    assert k > 1000, (name, len(base))
    mag = np.exp(rng.uniform(np.log(smallest / 4), np.log(min(fmax * 4, 3.4e38)), k))
    fill = (mag * rng.choice([-1.0, 1.0], k)).astype(F32)
    return np.concatenate([base, fill]).astype(F32)


# ---------------------------------------------------------------- block-scaled reference

def ceil_log2(t):
    m, e = np.frexp(F32(t))
    return int(e) - 1 if m == 0.5 else int(e)


def floor_log2(t):
    _, e = np.frexp(F32(t))
    return int(e) - 1


def pow2(e):
    return np.ldexp(F32(1.0), int(e)).astype(F32)


def ref_block_row(row, elem, block, scale, floor):
    """One call: the row is the tensor, split into blocks."""
    _, fmax, emax = ELEMENTS[elem]
    fmax = F32(fmax)
    inv = F32(1.0 / float(fmax))
    floor = F32(floor)
    out = np.empty_like(row)
    if scale == "e4m3":
        amax_t = np.max(np.abs(row))
        g = F32(amax_t / F32(448.0 * float(fmax)))
        fg = F32(fmax * g)
    for b0 in range(0, len(row), block):
        xb = row[b0:b0 + block]
        amax = max(F32(np.max(np.abs(xb))), floor)
        if amax == 0:
            out[b0:b0 + block] = xb
            continue
        if scale == "fp32":
            s = F32(amax * inv)
        elif scale == "ue8m0":
            t = F32(amax * inv)
            e = ceil_log2(t) if t > 0 else -127
            s = pow2(min(max(e, -127), 127))
        elif scale == "e8m0":
            s = pow2(min(max(floor_log2(amax) - emax, -127), 127))
        elif scale == "e4m3":
            with np.errstate(divide="ignore"):
                s_raw = F32(amax / fg)
            s_e4m3 = cast("fp8-e4m3", np.array([min(s_raw, F32(448.0))], dtype=F32))[0]
            s = F32(s_e4m3 * g)
        else:
            raise ValueError(scale)
        if s == 0:
            out[b0:b0 + block] = xb * F32(0.0)
            continue
        y = (xb / s).astype(F32)
        with np.errstate(over="ignore"):  # q * s can pass the f32 max (e.g. 4 * 2^126): inf,
            q = (cast(elem, y) * s).astype(F32)  # which dsa-sim saturates to +-f32 max
        out[b0:b0 + block] = np.clip(q, -F32_MAX, F32_MAX)
    return out


def block_inputs(elem, rng):
    """89 rows of 128 values exercising the cases listed in the module docstring."""
    dt, fmax, _ = ELEMENTS[elem]
    grid = representable(elem)
    mids = ((grid[:-1].astype(np.float64) + grid[1:]) / 2).astype(F32)
    rows = []

    def add(r):
        r = np.asarray(r, dtype=F32)
        assert r.shape == (ROWS,) and np.all(np.isfinite(r))
        rows.append(r)

    sign = lambda n: rng.choice([-1.0, 1.0], n)
    for _ in range(26):  # Gaussian rows at random magnitudes
        add(rng.standard_normal(ROWS) * 10 ** rng.uniform(-3, 3))
    for _ in range(4):  # heavy-tailed rows (outlier channels)
        add(rng.standard_t(2, ROWS) * 10 ** rng.uniform(-2, 2))
    for _ in range(12):  # exact ties of the scaled grid: amax = fmax * 2^k in every block of 16
        k = int(rng.integers(-12, 12))
        r = rng.choice(np.concatenate([mids, grid]), ROWS) * sign(ROWS)
        r[::16] = fmax * sign(ROWS // 16)
        add(r * 2.0 ** k)
    for _ in range(5):  # amax past fmax * 2^k: e8m0 scales saturate elements
        k = int(rng.integers(-8, 8))
        top = 2.0 ** (ELEMENTS[elem][2] + 1)
        r = rng.uniform(-top, top, ROWS)
        r[::16] = rng.uniform(fmax, top, ROWS // 16) * sign(ROWS // 16)
        add(r * 2.0 ** k)
    for _ in range(5):  # amax one f32 ulp around fmax * 2^k: the ceil/floor boundaries
        k = int(rng.integers(-20, 20))
        r = rng.standard_normal(ROWS) * fmax * 2.0 ** k / 8
        edge = F32(fmax * 2.0 ** k)
        r[::16] = rng.choice([np.nextafter(edge, F32(0)), edge, np.nextafter(edge, F32(np.inf))], ROWS // 16)
        add(r)
    inv = F32(1.0 / fmax)
    for _ in range(6):  # x / s within a few f32 ulps of a tie for the fp32 scale s = amax * inv
        amax = F32(10 ** rng.uniform(-3, 3))
        s = F32(amax * inv)
        t = rng.choice(mids[mids < fmax], ROWS)
        r = (t * s).astype(F32)
        for _ in range(2):
            step = rng.integers(-1, 2, ROWS)
            r = np.where(step > 0, np.nextafter(r, F32(np.inf)), np.where(step < 0, np.nextafter(r, F32(0)), r))
        r = r * sign(ROWS)
        r[::16] = amax * sign(ROWS // 16)
        add(r)
    add(np.zeros(ROWS))  # zero rows, signs of zero, and rows with zero blocks
    add(-np.zeros(ROWS))
    add(np.where(rng.random(ROWS) < 0.5, 0.0, -0.0))
    r = rng.standard_normal(ROWS)
    r[:16] = 0.0
    r[32:64] = -0.0
    r[70] = -0.0
    add(r)
    for lg in (-5, -7, -9):  # tiny rows: amax below DeepSeek's 1e-4 floor
        add(rng.standard_normal(ROWS) * 10.0 ** lg)
    add(rng.standard_normal(ROWS) * 6 * 2.0 ** -126)  # around the fp4 floor 6 * 2^-126
    add(from_bits(rng.integers(0, 0x00800000, ROWS, dtype=np.uint32)) * sign(ROWS))  # f32 subnormals
    add(from_bits(rng.integers(0, 64, ROWS, dtype=np.uint32)) * sign(ROWS))  # the smallest subnormals
    for top in (3.4028235e38, 1e38, 1e30):  # huge rows
        add(rng.uniform(-1, 1, ROWS) * top)
    for _ in range(5):  # one outlier per block of 16, the rest far smaller (element underflow)
        r = rng.standard_normal(ROWS) * 10.0 ** rng.uniform(-6, -2)
        r[rng.integers(0, 16)::16] = 10.0 ** rng.uniform(0, 4) * sign(ROWS // 16)
        add(r)
    for _ in range(6):  # block magnitudes spread over 10 decades (e4m3 block scales underflow)
        r = rng.standard_normal(ROWS)
        r *= np.repeat(10.0 ** rng.uniform(-10, 0, ROWS // 16), 16)
        add(r)
    for _ in range(5):  # powers of two and their neighbours
        r = 2.0 ** rng.integers(-30, 30, ROWS).astype(np.float64) * sign(ROWS)
        r = r.astype(F32)
        r[1::3] = np.nextafter(r[1::3], F32(np.inf))
        add(r)
    for _ in range(2):  # blocks topping out at or just below the f32 max: the saturating product
        r = rng.uniform(0.5, 1.0, ROWS) * float(F32_MAX) * sign(ROWS)
        top = np.array([F32_MAX, np.nextafter(F32_MAX, F32(0)), F32(2.0 ** 127)], dtype=F32)
        r[::16] = rng.choice(top, ROWS // 16) * sign(ROWS // 16)
        add(r)
    assert len(rows) * ROWS >= 10000
    return np.concatenate(rows).astype(F32)


def block_variants(elem):
    v = [
        (f"{elem}:32:fp32", 32, "fp32", 0.0),
        (f"{elem}:128:fp32:floor=0.0001", 128, "fp32", 1e-4),
        (f"{elem}:32:ue8m0", 32, "ue8m0", 0.0),
        (f"{elem}:128:ue8m0:floor=0.0001", 128, "ue8m0", 1e-4),
        (f"{elem}:32:e8m0", 32, "e8m0", 0.0),
        (f"{elem}:16:e4m3", 16, "e4m3", 0.0),
    ]
    if elem == "fp4-e2m1":  # OCP MXFP4 and NVIDIA NVFP4 under their names
        v[4] = ("mxfp4",) + v[4][1:]
        v[5] = ("nvfp4",) + v[5][1:]
        floor = float(F32(6 * 2.0 ** -126))
        v.append((f"{elem}:32:ue8m0:floor={str(F32(floor))}", 32, "ue8m0", floor))
    return v


def write(path, header, columns, rows_per_call=None):
    cols = [bits(c) for c in columns]
    with open(path, "w") as f:
        f.write(f"# dsa-sim format test vectors: generated by gen_vectors.py (numpy {np.__version__}, "
                f"ml_dtypes {ml_dtypes.__version__}); do not edit\n")
        if rows_per_call:
            f.write(f"# rows: {rows_per_call}\n")
        f.write("# columns: " + " ".join(header) + "\n")
        for vals in zip(*cols):
            f.write(" ".join(f"{v:08x}" for v in vals) + "\n")


def main():
    total = 0
    for i, name in enumerate(ELEMENTS):
        rng = np.random.default_rng(1000 + i)
        x = scalar_inputs(name, rng)
        y = cast(name, x)
        write(os.path.join(HERE, f"scalar_{name}.txt"), ["in", name], [x, y])
        total += len(x)
    for i, elem in enumerate(["fp8-e4m3", "fp8-e5m2", "fp4-e2m1", "int8", "int4"]):
        rng = np.random.default_rng(2000 + i)
        x = block_inputs(elem, rng)
        header, cols = ["in"], [x]
        for spec, block, scale, floor in block_variants(elem):
            out = np.concatenate([ref_block_row(x[r:r + ROWS], elem, block, scale, floor)
                                  for r in range(0, len(x), ROWS)])
            header.append(spec)
            cols.append(out)
        write(os.path.join(HERE, f"block_{elem}.txt"), header, cols, ROWS)
        total += len(x) * (len(header) - 1)
    print(f"wrote {total} reference values", file=sys.stderr)


if __name__ == "__main__":
    main()
