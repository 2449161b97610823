"""Every function's result equals the command line's `--json` object to the last digit, and its
errors carry the command line's message."""

import inspect
import json
import pathlib

import numpy as np
import pytest

import dsa_sim

DATA = "experiments/dsv4_seed_observations.csv"


def flags(**fields) -> list:
    """The command-line flags of scenario fields given as keyword arguments."""
    out = []
    for name, v in fields.items():
        text = ("true" if v else "false") if isinstance(v, (bool, np.bool_)) else str(v.item() if isinstance(v, np.generic) else v)
        out += ["--" + name.replace("_", "-"), text]
    return out


def assert_same(py: dict, cli: dict):
    """Equal values (floats compared with ==) and the same JSON text: repr() of a float is its
    shortest round-trip form, so equal text means equal digits, and an int where the command
    line has a float (1 == 1.0 in Python) shows. (Key order is not compared: sweep rows keep
    the columns' order, for pandas.)"""
    assert py == cli
    assert json.dumps(py, sort_keys=True) == json.dumps(cli, sort_keys=True)


def without(d: dict, *keys) -> dict:
    return {k: v for k, v in d.items() if k not in keys}


@pytest.mark.parametrize(
    "fields",
    [
        dict(preset="deepseek-v4-flash", stack="none", context_len=131072, dprime=3),
        dict(context_len=1000000, index_topk=1024, dprime=4, score_noise=0.5),
        # Field values of every Python type: a suffixed count, a keyword, a bool, a numpy scalar.
        dict(preset="deepseek-v3.2", context_len="128Ki", depth=np.float64(0.25), distractor="normal", overlap=False),
        dict(dprime=2.5, window=4096, sink=4, context_len=8192, depth=0.01),
    ],
)
def test_recall_equals_the_cli(cli, fields):
    preset = fields.pop("preset", None)
    args = (["--preset", preset] if preset else []) + flags(**fields)
    assert_same(dsa_sim.recall(preset=preset, **fields), cli.json("recall", *args))


def test_monte_carlo_recall_equals_the_cli_for_the_same_seed(cli):
    fields = dict(pooling="mean", context_len=32768)
    py = dsa_sim.recall(preset="deepseek-v4-flash", stack="none", trials=3000, seed=7, threads=2, **fields)
    assert py["engine"] == "montecarlo" and py["trials"] == 3000
    assert_same(py, cli.json("recall", "--preset", "deepseek-v4-flash", "--stack", "none", "--trials", "3000", "--seed", "7", *flags(**fields)))


def test_rank_equals_the_cli_and_its_arrays_are_its_columns(cli):
    fields = dict(context_len=131072, dprime=1.5)
    py = dsa_sim.rank(preset="deepseek-v4-flash", stack="none", **fields)
    c = cli.json("rank", "--preset", "deepseek-v4-flash", "--stack", "none", *flags(**fields))
    assert_same(without(py, "cdf_j", "cdf_p", "quantile_p", "quantile_j"), c)
    assert py["cdf_j"].dtype == np.uint64 and py["cdf_p"].dtype == np.float64
    assert py["cdf_j"].tolist() == [j for j, _ in c["cdf"]]
    assert py["cdf_p"].tolist() == [p for _, p in c["cdf"]]
    assert py["quantile_p"].tolist() == [0.05, 0.5, 0.9, 0.95]
    assert py["quantile_j"].tolist() == [float(c["quantiles"][k]) for k in ("0.05", "0.5", "0.9", "0.95")]


def test_rank_never_reached_is_inf_in_the_array(cli):
    # A needle in no complete block and outside the window: never selectable.
    fields = dict(compress_ratio=4, context_len=4098, depth=1.0)
    py = dsa_sim.rank(**fields)
    c = cli.json("rank", *flags(**fields))
    assert_same(without(py, "cdf_j", "cdf_p", "quantile_p", "quantile_j"), c)
    for k, j in zip(("0.05", "0.5", "0.9", "0.95"), py["quantile_j"]):
        assert (c["quantiles"][k] is None and j == np.inf) or j == c["quantiles"][k]


@pytest.mark.parametrize("rank", [True, False])
def test_sweep_equals_the_cli(cli, rank):
    vary = {"context_len": [1024, "4Ki", 65536], "dprime": "1..3:3"}
    py = dsa_sim.sweep(vary, rank=rank, preset="deepseek-v4-flash", stack="none", score_noise=0.3)
    args = ["--vary", "context_len=1024,4Ki,65536", "--vary", "dprime=1..3:3", "--preset", "deepseek-v4-flash", "--stack", "none", "--score-noise", "0.3"]
    c = cli.json("sweep", *args, *([] if rank else ["--no-rank"]))
    assert_same(without(py, "arrays"), c)
    assert list(py["arrays"]) == c["columns"]
    for col, arr in py["arrays"].items():
        assert len(arr) == len(c["rows"]) == 9
        for a, row in zip(arr.tolist(), c["rows"]):
            v = row[col]
            if v is None:
                assert (col.startswith("rank_p") and a == np.inf) or (col == "trials" and np.isnan(a))
            else:
                assert a == v
    assert py["arrays"]["context_len"].dtype == np.uint64 and py["arrays"]["recall"].dtype == np.float64


def test_sweep_rows_make_a_dataframe():
    pd = pytest.importorskip("pandas")
    py = dsa_sim.sweep("index_topk=512,1024", preset="deepseek-v4-flash", stack="none", context_len=131072, dprime=2)
    df = pd.DataFrame(py["rows"])
    assert list(df.columns) == py["columns"] and len(df) == 2
    assert pd.DataFrame(py["arrays"])["recall"].tolist() == [r["recall"] for r in py["rows"]]


def test_monte_carlo_sweep_equals_the_cli(cli):
    py = dsa_sim.sweep(["depth=0.2,0.8"], preset="deepseek-v4-flash", stack="none", pooling="mean", context_len=16384, trials=2000, seed=3)
    c = cli.json("sweep", "--vary", "depth=0.2,0.8", "--preset", "deepseek-v4-flash", "--stack", "none", "--pooling", "mean", "--context-len", "16384",
                 "--trials", "2000", "--seed", "3")
    assert_same(without(py, "arrays"), c)
    assert py["arrays"]["trials"].tolist() == [2000.0, 2000.0]


@pytest.mark.parametrize(
    "kw,args",
    [
        (dict(fit="dprime"), ["--fit", "dprime"]),
        (dict(fit=["dprime", "needle_sd=0.2:3"], compare=True, predict={"index_topk": [1024, 2048]}),
         ["--fit", "dprime,needle_sd=0.2:3", "--compare", "--predict", "index_topk=1024,2048"]),
    ],
)
def test_calibrate_equals_the_cli(cli, kw, args):
    py = dsa_sim.calibrate(DATA, preset="deepseek-v4-flash", stack="none", **kw)
    assert_same(py, cli.json("calibrate", "--data", DATA, "--preset", "deepseek-v4-flash", "--stack", "none", *args))


@pytest.mark.parametrize(
    "kw,args",
    [
        (dict(), []),
        (dict(target=0.95, dprime=0.5), ["--target", "0.95", "--dprime", "0.5"]),
        (dict(data=DATA), ["--data", DATA]),
        (dict(data=pathlib.Path(DATA), fit="dprime"), ["--data", DATA, "--fit", "dprime"]),
    ],
)
def test_verdict_equals_the_cli(cli, kw, args):
    py = dsa_sim.verdict(preset="deepseek-v4-flash", stack="none", context_len=16000, **kw)
    assert_same(py, cli.json("verdict", "--preset", "deepseek-v4-flash", "--stack", "none", "--context-len", "16000", *args))


def test_plan_equals_the_cli(cli):
    py = dsa_sim.plan(DATA, budget=500, preset="deepseek-v4-flash", stack="none", context_len=16000)
    c = cli.json("plan", "--data", DATA, "--budget", "500", "--preset", "deepseek-v4-flash", "--stack", "none", "--context-len", "16000")
    assert_same(py, c)
    assert py["total_trials"] <= 500


def test_plan_at_a_target_equals_the_cli(cli):
    py = dsa_sim.plan(DATA, budget=500, target=0.5, preset="deepseek-v4-flash", stack="none", context_len=16000)
    c = cli.json("plan", "--data", DATA, "--budget", "500", "--target", "0.5", "--preset", "deepseek-v4-flash", "--stack", "none", "--context-len", "16000")
    assert_same(py, c)


def test_plan_of_named_hypotheses_equals_the_cli(cli):
    hyps = ["discrimination", "effective-k"]
    py = dsa_sim.plan(DATA, hypotheses=hyps, preset="deepseek-v4-flash", stack="none")
    assert_same(py, cli.json("plan", "--data", DATA, "--hypotheses", ",".join(hyps), "--preset", "deepseek-v4-flash", "--stack", "none"))


# Bad input: the ValueError's message is the command line's error line.
@pytest.mark.parametrize(
    "call,args",
    [
        (lambda: dsa_sim.recall(depth=1.5), ["recall", "--depth", "1.5"]),
        (lambda: dsa_sim.recall(context_len="abc"), ["recall", "--context-len", "abc"]),
        (lambda: dsa_sim.recall(context_len=-5), ["recall", "--context-len", "-5"]),
        (lambda: dsa_sim.recall(pooling="median"), ["recall", "--pooling", "median"]),
        (lambda: dsa_sim.recall(dprime=float("nan")), ["recall", "--dprime", "nan"]),
        (lambda: dsa_sim.rank(preset="deepseek-v9"), ["rank", "--preset", "deepseek-v9"]),
        (lambda: dsa_sim.recall(compress_ratio=0), ["recall", "--compress-ratio", "0"]),
        (lambda: dsa_sim.recall(trials=0), ["recall", "--trials", "0"]),
        (lambda: dsa_sim.recall(threads=0), ["recall", "--threads", "0"]),
        # The package is built without the cuda feature, as CI's binary is: refused alike.
        (lambda: dsa_sim.recall(model="vector", device="cuda"), ["recall", "--model", "vector", "--device", "cuda"]),
        (lambda: dsa_sim.recall(scenario="no/such.toml"), ["recall", "--scenario", "no/such.toml"]),
        (lambda: dsa_sim.recall(engine="analytic", preset="deepseek-v4-flash", stack="none", pooling="mean"),
         ["recall", "--engine", "analytic", "--preset", "deepseek-v4-flash", "--stack", "none", "--pooling", "mean"]),
        (lambda: dsa_sim.sweep("dprime=1..x"), ["sweep", "--vary", "dprime=1..x"]),
        (lambda: dsa_sim.sweep("nonsense=1,2"), ["sweep", "--vary", "nonsense=1,2"]),
        (lambda: dsa_sim.calibrate(DATA, "index_topk"), ["calibrate", "--data", DATA, "--fit", "index_topk"]),
        (lambda: dsa_sim.calibrate("no/such.csv", "dprime"), ["calibrate", "--data", "no/such.csv", "--fit", "dprime"]),
        (lambda: dsa_sim.verdict(target=1.5), ["verdict", "--target", "1.5"]),
        (lambda: dsa_sim.plan(DATA), ["plan", "--data", DATA]),
        (lambda: dsa_sim.plan(DATA, budget=0, preset="quest-16"), ["plan", "--data", DATA, "--budget", "0", "--preset", "quest-16"]),
        (lambda: dsa_sim.plan(DATA, hypotheses=["nope"], preset="quest-16"), ["plan", "--data", DATA, "--hypotheses", "nope", "--preset", "quest-16"]),
    ],
)
def test_errors_carry_the_cli_message(cli, call, args):
    with pytest.raises(ValueError) as e:
        call()
    assert str(e.value) == cli.error(*args)


def test_a_scenario_files_device_as_on_the_command_line(cli, tmp_path):
    """`device = "cuda"` in a scenario file: refused on this build (no cuda feature) with the
    command line's message; device= replaces it, as --device does; device=None defers to it."""
    f = tmp_path / "gpu.toml"
    f.write_text('preset = "deepseek-v4-flash"\nstack = "none"\nmodel = "vector"\ncontext_len = 4096\ndevice = "cuda"\n')
    for call, cmd in [(dsa_sim.recall, "recall"), (dsa_sim.rank, "rank")]:
        with pytest.raises(ValueError) as e:
            call(scenario=str(f), trials=12)
        assert str(e.value) == cli.error(cmd, "--scenario", str(f), "--trials", "12")
        assert "this build has no CUDA backend" in str(e.value)
    with pytest.raises(ValueError) as e:
        dsa_sim.sweep("context_len=1Ki,2Ki", scenario=str(f), trials=12)
    assert str(e.value) == cli.error("sweep", "--vary", "context_len=1Ki,2Ki", "--scenario", str(f), "--trials", "12")
    got = dsa_sim.recall(scenario=str(f), trials=12, seed=5, device="cpu")
    want = cli.json("recall", "--scenario", str(f), "--trials", "12", "--seed", "5", "--device", "cpu")
    assert got["recall"] == want["recall"] and got["rank"] == want["rank"] and got["trials"] == 12
    bad = tmp_path / "bad.toml"
    bad.write_text('context_len = 4096\ndevice = "gpu"\n')
    with pytest.raises(ValueError) as e:
        dsa_sim.recall(scenario=str(bad))
    assert str(e.value) == cli.error("recall", "--scenario", str(bad))
    assert 'device = "gpu": allowed cpu, cuda' in str(e.value)


def test_an_unknown_field_or_a_wrong_type_is_refused():
    with pytest.raises(ValueError, match="nonsense"):
        dsa_sim.recall(nonsense=1)
    with pytest.raises(ValueError, match="allowed cpu, cuda"):
        dsa_sim.rank(model="vector", device="gpu")
    with pytest.raises(TypeError, match="dprime"):
        dsa_sim.recall(dprime=[1, 2])
    with pytest.raises(TypeError, match="seed"):
        dsa_sim.recall(seed="7")
    with pytest.raises(ValueError, match="--seed -1"):
        dsa_sim.recall(seed=-1)
    with pytest.raises(ValueError, match="bogus"):
        dsa_sim.recall(engine="bogus")
    # Negative counts: the range the command line states for the flag (`--trials 0: allowed …`).
    with pytest.raises(ValueError) as e:
        dsa_sim.recall(trials=-5)
    assert str(e.value).startswith("--trials -5: allowed 1..=")
    with pytest.raises(ValueError, match=r"^--budget -1: allowed 1\.\.=1000000 trials$"):
        dsa_sim.plan(DATA, budget=-1, preset="quest-16")
    with pytest.raises(ValueError, match="^--fit needs --data"):
        dsa_sim.verdict(fit="dprime")
    with pytest.raises(ValueError, match="at least one axis"):
        dsa_sim.sweep([])


def test_no_scenario_field_is_shadowed_by_a_keyword_argument():
    assert len(dsa_sim.FIELDS) >= 30 and "context_len" in dsa_sim.FIELDS
    for f in (dsa_sim.recall, dsa_sim.rank, dsa_sim.sweep, dsa_sim.calibrate, dsa_sim.verdict, dsa_sim.plan,
              dsa_sim.import_scores, dsa_sim.formats):
        params = set(inspect.signature(f).parameters) - {"fields"}
        assert not params & set(dsa_sim.FIELDS), f.__name__


def test_every_function_has_a_docstring_and_a_stub():
    stub = (pathlib.Path(__file__).parents[1] / "dsa_sim.pyi").read_text()
    for name in ("recall", "rank", "sweep", "calibrate", "verdict", "plan", "quantize", "probe", "import_scores", "formats"):
        assert len(getattr(dsa_sim, name).__doc__ or "") > 100, name
        assert f"def {name}(" in stub, name


def test_the_example_runs():
    import runpy

    ns = runpy.run_path(str(pathlib.Path(__file__).parents[1] / "examples" / "quickstart.py"))
    assert ns["summary"]["call"] in ("coverage-limited", "discrimination-limited", "saturated")


def test_the_readme_python_example_prints_what_it_shows():
    import doctest
    import re

    readme = (pathlib.Path(__file__).parents[2] / "README.md").read_text()
    blocks = re.findall(r"```pycon\n(.*?)```", readme, re.S)
    assert blocks, "README.md has no ```pycon example"
    for i, block in enumerate(blocks):
        test = doctest.DocTestParser().get_doctest(block, {}, f"README.md pycon block {i}", "README.md", 0)
        runner = doctest.DocTestRunner()
        runner.run(test)
        assert runner.tries >= 5 and runner.failures == 0, f"README.md pycon block {i}: see the output above"
