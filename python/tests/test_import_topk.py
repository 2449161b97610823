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
