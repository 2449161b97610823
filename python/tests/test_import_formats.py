"""`import_scores` and `formats` equal the command line's `--json` objects to the last digit, and
their errors carry the command line's message."""

import pytest

import dsa_sim

from test_commands import assert_same

DEMO = "tests/data/scores/demo.npz"
PER_LAYER = "tests/data/scores/per-layer.npz"


@pytest.mark.parametrize(
    "kw,args",
    [
        (dict(file=DEMO), [DEMO]),
        (dict(file=PER_LAYER, preset="deepseek-v4-flash"), [PER_LAYER, "--preset", "deepseek-v4-flash"]),
        (
            dict(file=DEMO, predict=["context_len=16K,64K", "index_topk=512,1024"], resamples=20, seed=3),
            [DEMO, "--predict", "context_len=16K,64K", "--predict", "index_topk=512,1024", "--resamples", "20", "--seed", "3"],
        ),
        (
            dict(file=DEMO, predict={"context_len": [32768]}, resamples=10, tail_model="classes", tail_classes=2),
            [DEMO, "--predict", "context_len=32768", "--resamples", "10", "--tail-model", "classes", "--tail-classes", "2"],
        ),
    ],
)
def test_import_scores_equals_the_cli(cli, kw, args):
    f = kw.pop("file")
    assert_same(dsa_sim.import_scores(f, **kw), cli.json("import", "scores", *args))


@pytest.mark.parametrize(
    "kw,args",
    [
        (dict(trials=3, context_len=8192), ["--trials", "3", "--context-len", "8192"]),
        (
            dict(format=["fp8-e4m3:128:fp32", "fp4-e2m1:32:ue8m0"], trials=4, seed=9, preset="deepseek-v3.2", context_len=4096),
            ["--format", "fp8-e4m3:128:fp32", "--format", "fp4-e2m1:32:ue8m0", "--trials", "4", "--seed", "9",
             "--preset", "deepseek-v3.2", "--context-len", "4096"],
        ),
        (dict(format="bf16", trials=2, context_len=2048, threads=2), ["--format", "bf16", "--trials", "2", "--context-len", "2048", "--threads", "2"]),
    ],
)
def test_formats_equals_the_cli(cli, kw, args):
    assert_same(dsa_sim.formats(**kw), cli.json("formats", *args))


@pytest.mark.parametrize(
    "call,args",
    [
        (lambda: dsa_sim.import_scores("no/such.npz"), ["import", "scores", "no/such.npz"]),
        (lambda: dsa_sim.import_scores(DEMO, resamples=100001), ["import", "scores", DEMO, "--resamples", "100001"]),
        (lambda: dsa_sim.import_scores(DEMO, predict="bogus=1"), ["import", "scores", DEMO, "--predict", "bogus=1"]),
        (lambda: dsa_sim.formats(format="fp5"), ["formats", "--format", "fp5"]),
        (lambda: dsa_sim.formats(trials=0), ["formats", "--trials", "0"]),
        (lambda: dsa_sim.formats(context_len=1), ["formats", "--context-len", "1"]),
        (lambda: dsa_sim.formats(trials=100001, context_len=2048), ["formats", "--trials", "100001", "--context-len", "2048"]),
    ],
)
def test_errors_carry_the_cli_message(cli, call, args):
    with pytest.raises(ValueError) as e:
        call()
    assert str(e.value) == cli.error(*args)


def test_a_tail_model_or_class_count_the_cli_would_not_parse_is_refused():
    with pytest.raises(ValueError, match="query-top"):
        dsa_sim.import_scores(DEMO, tail_model="pooled")
    with pytest.raises(ValueError, match=r"^--tail-classes 0: allowed 1\.\.="):
        dsa_sim.import_scores(DEMO, tail_classes=0)
