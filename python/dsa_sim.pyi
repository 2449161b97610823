"""dsa-sim: sparse-attention needle retrieval (DeepSeek DSA / V4 CSA and relatives).

Functions mirror the command line's commands; each returns the dict `dsa-sim COMMAND --json`
prints (equal to the last digit), with numpy arrays where noted. Scenario fields are keyword
arguments named as the field table names them (`dsa_sim.FIELDS`): `context_len=131072`,
`dprime=3.0`, `pooling="mean"`, `context_len="128Ki"`; None means "not given". Precedence as on
the command line: defaults, `preset`, `scenario` (a TOML file), fields. Bad input raises
ValueError with the command line's message (naming fields as their flags, `--depth: …`); a
failure to compute raises RuntimeError.
"""

from os import PathLike
from typing import Any, Literal, Mapping, Optional, Sequence, Union

import numpy as np
import numpy.typing as npt

__version__: str
FIELDS: tuple[str, ...]
"""Every scenario field's name, in the field table's order."""

FieldValue = Union[int, float, bool, str, np.generic, None]
Engine = Literal["auto", "analytic", "montecarlo"]
Path = Union[str, PathLike[str]]
Axes = Union[str, Sequence[str], Mapping[str, Union[str, Sequence[FieldValue]]]]
"""Axes as `--vary` takes them: "FIELD=V1,V2,…" (ranges A..B:xF, A..B:N, A..B:+S), a list of
such strings, or {field: "1Ki..1Mi:x2" or [values]}; the first axis is outermost."""

def recall(
    *,
    preset: Optional[str] = None,
    scenario: Optional[Path] = None,
    engine: Engine = "auto",
    trials: Optional[int] = None,
    seed: Optional[int] = None,
    threads: Optional[int] = None,
    device: Optional[str] = None,
    **fields: FieldValue,
) -> dict[str, Any]:
    """Recall of a needle, exact (analytic engine) or Monte Carlo with a 95% Wilson interval.

    Returns recall, ci_low, ci_high, engine, trials (None when exact), seed, not_exact,
    n_candidates, coverage_horizon_tokens, rank {quantiles, cdf}, scenario, version.
    """

def rank(
    *,
    preset: Optional[str] = None,
    scenario: Optional[Path] = None,
    engine: Engine = "auto",
    trials: Optional[int] = None,
    seed: Optional[int] = None,
    threads: Optional[int] = None,
    device: Optional[str] = None,
    **fields: FieldValue,
) -> dict[str, Any]:
    """The needle's rank distribution.

    Returns layer (0: the first selecting layer's rank), selecting_layers, not_in_rank (window,
    sink, p_read, p_guess, readout), n_candidates, quantiles {"0.05": j or None, …}, cdf [[j, P(rank <= j)], …], engine,
    trials, seed, scenario, version, and numpy arrays: cdf_j (uint64), cdf_p (float64),
    quantile_p (0.05, 0.5, 0.9, 0.95), quantile_j (float64; inf where never reached).
    """

def sweep(
    vary: Axes,
    *,
    rank: bool = True,
    preset: Optional[str] = None,
    scenario: Optional[Path] = None,
    engine: Engine = "auto",
    trials: Optional[int] = None,
    seed: Optional[int] = None,
    threads: Optional[int] = None,
    device: Optional[str] = None,
    **fields: FieldValue,
) -> dict[str, Any]:
    """Recall and rank quantiles over a grid of scenario fields.

    Returns run, base_scenario, axes, columns, rows (one dict per grid point:
    `pandas.DataFrame(result["rows"])`), dsa_sim_version, and arrays {column: numpy array}
    (rank quantiles float64 with inf for never selectable, trials float64 with NaN where exact,
    counts uint64, text as object arrays). `rank=False` leaves out the rank quantiles.
    """

def calibrate(
    data: Path,
    fit: Union[str, Sequence[str]],
    *,
    compare: bool = False,
    predict: Optional[Axes] = None,
    scores: Optional[Path] = None,
    preset: Optional[str] = None,
    scenario: Optional[Path] = None,
    engine: Engine = "auto",
    trials: Optional[int] = None,
    seed: Optional[int] = None,
    threads: Optional[int] = None,
    **fields: FieldValue,
) -> dict[str, Any]:
    """Fits scenario fields ("dprime,needle_sd=0.1:5") to a measured recall table (CSV).
    `scores`: a captured-scores .npz whose distractor law replaces the scenario's (as
    `calibrate --scores`).

    Returns estimates, loglik, aic, deviance, df, gof_p, rows, hypotheses (compare=True),
    predictions (predict=…), data, engine, interval_method, band_method, warnings.
    `trials` defaults to 4000 per model evaluation.
    """

def verdict(
    *,
    target: float = 0.9,
    data: Optional[Union[Path, Sequence[Path]]] = None,
    fit: Optional[Union[str, Sequence[str]]] = None,
    preset: Optional[str] = None,
    scenario: Optional[Path] = None,
    engine: Engine = "auto",
    trials: Optional[int] = None,
    seed: Optional[int] = None,
    threads: Optional[int] = None,
    **fields: FieldValue,
) -> dict[str, Any]:
    """Coverage-, discrimination- or read-limited, saturated, or implementation-suspect.

    Returns call, target, recall_now, recall_2k, k_2x, recall_max_k, index_topk, max_topk,
    k_needed, dprime, dprime_needed_now, dprime_needed_max_k, score_noise,
    score_noise_allowed_now, score_noise_allowed_max_k, coverage_horizon_tokens, context_len,
    n_candidates, explanation, notes; with `data` the diagnosis (signatures, conditions, row_checks,
    hypotheses, …), numbers_length ("longest_measured": the numbers are at the table's longest
    length unless a context_len is given, "given") and numbers_topk ("every_rows": at the k every
    row shares unless an index_topk is given, "given"), with `data` and `fit` the intervals and
    the calibration.
    """

def probe(
    url: str,
    out: Optional[Path] = None,
    *,
    context_len: Optional[Union[str, int, Sequence[int]]] = None,
    depth: Optional[Union[str, float, Sequence[float]]] = None,
    repeat: Optional[Union[str, int, Sequence[int]]] = None,
    trials: Optional[int] = None,
    cells: Optional[Path] = None,
    chat: bool = False,
    generate: bool = False,
    model: Optional[str] = None,
    index_topk: int = 512,
    labels: Optional[Union[dict[str, str], Sequence[str]]] = None,
    concurrency: Optional[Union[str, int, Sequence[int]]] = None,
    prefix_cache_twice: bool = False,
    seed: Optional[int] = None,
    max_inflight: int = 4,
    timeout: float = 600.0,
    retries: int = 5,
    backoff: float = 0.5,
    max_tokens: int = 32,
    haystack: Optional[Path] = None,
    api_key_env: str = "OPENAI_API_KEY",
    capture: bool = False,
    token_count: Literal["auto", "tokenize", "usage"] = "auto",
    tokenizer: Optional[Path] = None,
    resume: bool = False,
    dry_run: bool = False,
    spread: Optional[int] = None,
    template: Optional[str] = None,
    until_decided: bool = False,
    preset: str = "deepseek-v4-flash",
    scenario: Optional[Path] = None,
    set: Optional[dict[str, Any]] = None,
    budget: int = 3000,
    max_rounds: int = 6,
    restart_cmd: Optional[str] = None,
    ready_timeout: float = 600.0,
    data: Optional[Sequence[Path]] = None,
) -> dict[str, Any]:
    """Measures a live server (OpenAI-compatible, or SGLang's /generate with generate=True):
    needle prompts of exact token lengths, answers scored with RULER's string_match_all, written
    to the folder `out` (measured.csv, transcript.jsonl; captures/ and manifest.csv with
    capture=True). Returns what `dsa-sim probe --json` prints; dry_run=True sends nothing and
    returns the cells, the number of requests and the prompt tokens. tokenizer: the served
    model's Hugging Face tokenizer.json, counting prompts locally (token_count "tokenizer" in the
    result; the server's usage is still what the table records, and a server count more than 1%
    apart raises ValueError before the budget is spent). spread: consecutive lengths each cell's
    trials spread over (default 4 for a context_len grid, 1 for cells). until_decided=True runs
    `dsa-sim probe --until-decided`: measure, verdict (preset, scenario, set={"stack": "none"}),
    plan, measure the planned cells, until the call is decided or `budget` requests are spent;
    cells at another k run after `restart_cmd` ("... {k} ...") or are listed as pending; returns
    what `--until-decided --json` prints (call, decided, stop, rounds, pending, report). Bad input
    raises ValueError, a server that fails after the retries RuntimeError."""
    ...

def plan(
    data: Path,
    *,
    budget: Optional[int] = None,
    hypotheses: Optional[Sequence[str]] = None,
    target: float = 0.9,
    preset: Optional[str] = None,
    scenario: Optional[Path] = None,
    engine: Engine = "auto",
    trials: Optional[int] = None,
    seed: Optional[int] = None,
    threads: Optional[int] = None,
    **fields: FieldValue,
) -> dict[str, Any]:
    """The cells to measure next that tell most about which leading hypothesis is true (budget default 1000), and the simulated probability of the right call after them (the call at `target` recall, default 0.9, as `--target`).

    Returns cells, budget, total_trials, candidate_k, leading_hypotheses, information, right_call, seed, warnings.
    """

def quantize(
    values: npt.ArrayLike,
    format: str,
    *,
    block: Optional[int] = None,
    scale: Optional[Literal["fp32", "ue8m0", "e8m0", "e4m3"]] = None,
    amax_floor: Optional[float] = None,
) -> npt.NDArray[np.float32]:
    """Quantize-dequantize, bit-exactly as `dsa-sim quantize`: a float32 array of the input's shape.

    Values are converted to float32 first; blocks run over them in C order.
    """

def import_topk(
    topk: npt.ArrayLike,
    *,
    context_len: Union[int, Sequence[int], npt.ArrayLike],
    needle_start: Union[int, Sequence[int], npt.ArrayLike],
    needle_tokens: Union[int, Sequence[int], npt.ArrayLike],
    compress_ratio: int,
    overlap: bool,
    labels: Optional[Sequence[str]] = None,
) -> dict[str, Any]:
    """Per-layer needle selections from captured top-k indices in memory, as `dsa-sim import
    topk` computes them from capture files.

    `topk`: integer array (queries, layers, index_topk), each query's kept row (row P − 1 of a
    prompt of P tokens), −1 for unused slots; entry indices (compressed entries for c > 1).
    `context_len`, `needle_start`, `needle_tokens`: one int for all queries or one per query.
    Returns the `import topk --json` dict (requests, by_context, layers with Wilson intervals,
    per_request, agreement; `files` empty) plus `selected` (bool array, queries × layers) and
    `csv` (the selections.csv text `calibrate` reads, read back with that reader first).
    Request names are unique: a repeated label is numbered (`a`, `a (2)`), with a note in
    `warnings`. Bad input raises ValueError, checked before anything is copied: an array other
    than (queries, layers, index_topk) of integers (a float array is refused, not truncated), more
    than 2^27 indices in all (a broadcast view is not copied to find out), an index outside the
    context's entries (a uint64 past 2^63 − 1 included), an int out of range (`10**30`).
    """

def import_scores(
    file: Path,
    *,
    predict: Optional[Axes] = None,
    resamples: Optional[int] = None,
    seed: Optional[int] = None,
    tail_classes: Optional[int] = None,
    tail_model: Literal["auto", "classes", "query-top"] = "auto",
    preset: Optional[str] = None,
    scenario: Optional[Path] = None,
    **fields: FieldValue,
) -> dict[str, Any]:
    """Captured indexer scores (.npz), as `dsa-sim import scores` reads them: the needle's exact
    rank and the distractors' tail per layer, and recall predicted over the `predict` grid with a
    bootstrap band (`resamples`, default 200; `seed`).

    Returns the `import scores --json` dict (file, queries, layers, ranks, tail, predictions,
    tail_classes, tail_models, max_tail_classes, resamples, seed, scenario, version).
    """

def formats(
    *,
    format: Optional[Union[str, Sequence[str]]] = None,
    trials: Optional[int] = None,
    seed: Optional[int] = None,
    threads: Optional[int] = None,
    preset: Optional[str] = None,
    scenario: Optional[Path] = None,
    **fields: FieldValue,
) -> dict[str, Any]:
    """Per-format error of the vector indexer against fp32 on the same draws, as `dsa-sim
    formats` computes it (default geometry deepseek-v4-flash at 131072 tokens; `trials` default
    40 per format).

    Returns the `formats --json` dict (formats, fp32_effective, top_k, trials, seed,
    n_candidates, scenario, version).
    """
