"""import_topk: the same selections, rates and agreement as `dsa-sim import topk` on the same
indices written as a capture file."""

import json

import numpy as np
import pytest

import dsa_sim


def _captures(tmp_path):
    # 6 queries, 3 layers, k = 4, c = 4 with overlap; needle tokens 40..43 (entries 10, 11).
    rng = np.random.default_rng(5)
    topk = rng.integers(12, 200, size=(6, 3, 4)).astype(np.int32)
    topk[0, :, 0] = 10          # every layer selects entry 10
    topk[1, 1, 2] = 11          # layer 1 selects entry 11 (overlap: it pools block 10 too)
    topk[2, 2, 3] = -1          # a padded slot
    topk[3, 0, 1] = 10
    np.save(tmp_path / "cap.npy", topk)
    lines = ["file,row,context_len,needle_start,needle_tokens"] + [f"cap.npy,{i},800,40,3" for i in range(6)]
    (tmp_path / "m.csv").write_text("\n".join(lines) + "\n")
    return topk


def test_import_topk_equals_the_cli(cli, tmp_path):
    topk = _captures(tmp_path)
    out = tmp_path / "sel.csv"
    want = cli.json("import", "topk", "--manifest", str(tmp_path / "m.csv"), "--layers", "3", "--index-topk", "4",
                    "--compress-ratio", "4", "--overlap", "true", "--out", str(out))
    got = dsa_sim.import_topk(topk, context_len=800, needle_start=40, needle_tokens=3, compress_ratio=4, overlap=True)
    for key in ["requests", "index_topk", "compress_ratio", "overlap", "by_context", "layers", "per_request", "agreement", "warnings"]:
        assert got[key] == want[key], key
    assert got["selected"].dtype == np.bool_ and got["selected"].shape == (6, 3)
    assert got["selected"][0].all() and got["selected"][1].tolist() == [False, True, False]
    # The csv is the file the command writes, but for the request names' source.
    assert got["csv"] == out.read_text()
    # Per-query needles as sequences: the same result.
    again = dsa_sim.import_topk(topk, context_len=[800] * 6, needle_start=np.full(6, 40), needle_tokens=3, compress_ratio=4, overlap=True)
    assert again["layers"] == got["layers"]


def test_import_topk_bad_input_raises_value_error():
    topk = np.zeros((2, 3, 4), dtype=np.int64)
    with pytest.raises(ValueError, match=r"index 500 outside 0\.\.200"):
        bad = topk.copy()
        bad[1, 2, 0] = 500
        dsa_sim.import_topk(bad, context_len=800, needle_start=40, needle_tokens=3, compress_ratio=4, overlap=True)
    with pytest.raises(ValueError, match="does not lie inside the context"):
        dsa_sim.import_topk(topk, context_len=800, needle_start=799, needle_tokens=3, compress_ratio=4, overlap=True)
    with pytest.raises(ValueError, match=r"expected \(queries, layers, index_topk\)"):
        dsa_sim.import_topk(np.zeros((3, 4)), context_len=800, needle_start=40, needle_tokens=3, compress_ratio=4, overlap=True)
    with pytest.raises(ValueError, match="one per query"):
        dsa_sim.import_topk(topk, context_len=[800, 800, 800], needle_start=40, needle_tokens=3, compress_ratio=4, overlap=True)


def test_calibrate_with_captured_scores_equals_the_cli(cli):
    args = ["calibrate", "--preset", "deepseek-v4-flash", "--data", "experiments/dsv4_seed_observations.csv",
            "--fit", "dprime", "--scores", "tests/data/scores/demo.npz"]
    want = cli.json(*args)
    got = dsa_sim.calibrate("experiments/dsv4_seed_observations.csv", "dprime", preset="deepseek-v4-flash",
                            scores="tests/data/scores/demo.npz")
    assert got == want
    assert "captured distractor law" in got["engine"]


def _request_names(csv_text):
    import csv as _csv
    import io
    rows = list(_csv.DictReader(io.StringIO(csv_text)))
    return [r["request"].strip() for r in rows]


def test_import_topk_repeated_labels_are_made_unique_and_read_back(cli, tmp_path):
    topk = np.zeros((3, 2, 4), dtype=np.int64)
    got = dsa_sim.import_topk(topk, context_len=800, needle_start=40, needle_tokens=3, compress_ratio=4, overlap=True,
                              labels=["a", "a", "#c"])
    names = _request_names(got["csv"])
    assert sorted(set(names)) == ["#c", "a", "a (2)"]
    assert any("request name(s) changed" in w for w in got["warnings"])
    # The table calibrate reads: every request back, none lost to a comment line.
    path = tmp_path / "sel.csv"
    path.write_text(got["csv"])
    p = cli.run("verdict", "--data", str(path), "--json")
    assert p.returncode == 0, p.stderr
    assert sum(r["trials"] for r in json.loads(p.stdout)["row_checks"]["rows"]) == 3


def test_import_topk_refuses_float_and_out_of_range_indices():
    kw = dict(context_len=800, needle_start=40, needle_tokens=3, compress_ratio=4, overlap=True)
    with pytest.raises(ValueError, match="dtype float64: expected integers"):
        dsa_sim.import_topk(np.full((1, 2, 4), 10.7), **kw)
    big = np.zeros((1, 2, 4), dtype=np.uint64)
    big[0, 1, 3] = 2**64 - 1
    with pytest.raises(ValueError, match=r"outside 0\.\.200"):
        dsa_sim.import_topk(big, **kw)
    # Small uint64 values are indices like any other.
    assert dsa_sim.import_topk(np.full((1, 2, 4), 10, dtype=np.uint64), **kw)["selected"].all()
    with pytest.raises(ValueError, match="expected integers"):
        dsa_sim.import_topk(np.zeros((1, 2, 4), dtype=np.int64), **dict(kw, context_len=[800.5]))
    with pytest.raises(ValueError, match="expected integers"):
        dsa_sim.import_topk(np.zeros((1, 2, 4), dtype=np.int64), **dict(kw, needle_start=np.float64(40)))


def test_import_topk_huge_ints_raise_value_error_not_overflow():
    topk = np.zeros((1, 2, 4), dtype=np.int64)
    for name in ["context_len", "needle_start", "needle_tokens"]:
        kw = dict(context_len=800, needle_start=40, needle_tokens=3, compress_ratio=4, overlap=True)
        kw[name] = 10**30
        with pytest.raises(ValueError, match=name):
            dsa_sim.import_topk(topk, **kw)
        kw[name] = [10**30]
        with pytest.raises(ValueError, match=name):
            dsa_sim.import_topk(topk, **kw)
    with pytest.raises(ValueError):
        dsa_sim.import_topk(topk, context_len=800, needle_start=40, needle_tokens=3, compress_ratio=10**30, overlap=True)


def test_import_topk_checks_the_size_before_copying():
    import time
    # 10^7 x 61 x 2048 int32 as a broadcast view: 5 TB if copied.
    huge = np.broadcast_to(np.int32(0), (10**7, 61, 2048))
    start = time.monotonic()
    with pytest.raises(ValueError, match="exceed the bound"):
        dsa_sim.import_topk(huge, context_len=800, needle_start=40, needle_tokens=3, compress_ratio=4, overlap=True)
    assert time.monotonic() - start < 5
    with pytest.raises(ValueError, match="--layers"):
        dsa_sim.import_topk(np.broadcast_to(np.int32(0), (1, 5000, 4)), context_len=800, needle_start=40, needle_tokens=3,
                            compress_ratio=4, overlap=True)
