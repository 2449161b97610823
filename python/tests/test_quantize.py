"""quantize: numpy in, numpy out, bit-exact against `dsa-sim quantize` on the same numbers,
including the edge values (NaN, ±inf, ±0, subnormals, ±max of float32 and of each format)."""

from fractions import Fraction

import numpy as np
import pytest

import dsa_sim

F32 = np.finfo(np.float32)
EDGE = np.array(
    [0.0, -0.0, 1.0, -1.0, 0.3, 0.75, 5.0, 7.0, -2.5, 1e-3, 1e-8,
     F32.smallest_subnormal, -F32.smallest_subnormal, F32.smallest_normal, F32.smallest_normal * (1 - 2**-23),
     F32.max, -F32.max, 448.0, 464.0, 57344.0, 65504.0, 65520.0, 6.0, 6.5, 127.5, -128.0, 3.3895314e38],
    dtype=np.float32,
)
NONFINITE = np.array([np.nan, np.inf, -np.inf], dtype=np.float32)
RANDOM = np.random.default_rng(7).standard_normal(256).astype(np.float32) * np.float32(3)


def cli_text(values: np.ndarray) -> str:
    # repr of the float64 holding an f32 is within half an f64 ulp of it, so it parses back to
    # the same f32 (the command line parses its input as f32).
    return " ".join(repr(float(x)) for x in values.ravel())


def f32_of_decimal(token: str) -> np.float32:
    """The f32 nearest to a decimal (ties to even), exactly: the command line prints each value in
    shortest round-trip form, and parsing through float64 could round twice."""
    low = token.lower()
    if low in ("nan", "-nan"):
        return np.float32(np.nan)
    if low in ("inf", "-inf", "+inf"):
        return np.float32(token)
    exact = Fraction(token)
    guess = np.float32(float(exact))
    with np.errstate(over="ignore"):
        candidates = [np.nextafter(guess, np.float32(-np.inf)), guess, np.nextafter(guess, np.float32(np.inf))]
    candidates = [c for c in candidates if np.isfinite(c)]
    best = min(candidates, key=lambda c: (abs(Fraction(float(c)) - exact), int(c.view(np.uint32)) & 1))
    return np.float32(-0.0) if best == 0 and token.startswith("-") else best


def assert_bit_exact(py: np.ndarray, stdout: str):
    expected = np.array([f32_of_decimal(t) for t in stdout.split()], dtype=np.float32)
    got = py.ravel()
    assert got.dtype == np.float32 and got.shape == expected.shape
    nan = np.isnan(expected)
    assert (np.isnan(got) == nan).all()
    assert (got[~nan].view(np.uint32) == expected[~nan].view(np.uint32)).all()


ELEMENT = ["fp32", "bf16", "fp16", "fp8-e4m3", "fp8-e5m2", "fp4-e2m1", "int8", "int4"]
BLOCK = [
    ("fp8-e4m3", dict(block=4)),
    ("fp8-e4m3", dict(block=4, scale="ue8m0")),
    ("fp8-e5m2", dict(block=4, scale="e8m0")),
    ("fp4-e2m1", dict(block=4, scale="e4m3")),
    ("int8", dict(block=4, amax_floor=1e-4)),
    ("int4", dict(block=2)),
    ("mxfp4", {}),
    ("nvfp4", {}),
    ("fp8-e4m3:128:ue8m0", {}),
    ("fp4-e2m1:32:ue8m0:floor=0.001", {}),
]


def cli_args(fmt, kw):
    args = ["quantize", "--format", fmt]
    for k, v in kw.items():
        args += ["--" + k.replace("_", "-"), str(v)]
    return args


def check(cli, values, fmt, kw):
    p = cli.run(*cli_args(fmt, kw), stdin=cli_text(values))
    if p.returncode == 0:
        py = dsa_sim.quantize(values, fmt, **kw)
        assert py.shape == values.shape
        assert_bit_exact(py, p.stdout)
    else:
        assert p.returncode == 2, p.stderr
        with pytest.raises(ValueError) as e:
            dsa_sim.quantize(values, fmt, **kw)
        assert "error: " + str(e.value) == p.stderr.strip()


@pytest.mark.parametrize("fmt", ELEMENT)
@pytest.mark.parametrize("values", [EDGE, NONFINITE, RANDOM], ids=["edge", "nonfinite", "random"])
def test_element_formats_are_bit_exact(cli, fmt, values):
    check(cli, values, fmt, {})


@pytest.mark.parametrize("fmt,kw", BLOCK, ids=[f"{f}{kw}" for f, kw in BLOCK])
@pytest.mark.parametrize("values", [RANDOM[:128], EDGE[:24], np.concatenate([EDGE[:3], NONFINITE[:1]])], ids=["random", "edge", "nan"])
def test_block_formats_are_bit_exact(cli, fmt, kw, values):
    check(cli, values, fmt, kw)


def test_shape_is_kept_and_blocks_run_in_c_order(cli):
    x = RANDOM[:128].reshape(4, 32)
    py = dsa_sim.quantize(x, "mxfp4")
    assert py.shape == (4, 32)
    assert (py.ravel().view(np.uint32) == dsa_sim.quantize(x.ravel(), "mxfp4").view(np.uint32)).all()
    # A Fortran-ordered copy holds the same logical array.
    assert (dsa_sim.quantize(np.asfortranarray(x), "mxfp4") == py).all()


def test_other_dtypes_are_converted_to_float32_first(cli):
    x64 = RANDOM.astype(np.float64) + 1e-9
    assert (dsa_sim.quantize(x64, "bf16") == dsa_sim.quantize(x64.astype(np.float32), "bf16")).all()
    assert dsa_sim.quantize([1, 2, 3], "fp32").tolist() == [1.0, 2.0, 3.0]
    with pytest.raises(ValueError, match="outside the f32 range"):
        dsa_sim.quantize(np.array([1.0, 1e39]), "bf16")


@pytest.mark.parametrize(
    "values,fmt,kw",
    [
        (np.array([1, 2, 3], dtype=np.float32), "fp4-e2m1", dict(block=2)),
        (np.array([1, np.nan], dtype=np.float32), "int8", {}),
        (np.array([1, 2], dtype=np.float32), "fp9", {}),
        (np.array([1, 2], dtype=np.float32), "fp8-e4m3", dict(block=0)),
        (np.array([1, 2], dtype=np.float32), "fp8-e4m3", dict(block=2, scale="ue9m0")),
        (np.array([1, 2], dtype=np.float32), "bf16", dict(scale="ue8m0")),
        (np.array([1, 2], dtype=np.float32), "int8", dict(block=2, amax_floor=-1)),
        (np.array([1, 2], dtype=np.float32), "mxfp4", dict(block=2)),
        (np.array([], dtype=np.float32), "bf16", {}),
    ],
)
def test_errors_carry_the_cli_message(cli, values, fmt, kw):
    p = cli.run(*cli_args(fmt, kw), stdin=cli_text(values))
    assert p.returncode == 2
    with pytest.raises(ValueError) as e:
        dsa_sim.quantize(values, fmt, **kw)
    assert "error: " + str(e.value) == p.stderr.strip()
