"""The command line the Python package is checked against: the release binary of this checkout
(`cargo build --release`), or $DSA_SIM_BIN."""

import json
import os
import pathlib
import subprocess

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]


def _binary() -> pathlib.Path:
    return pathlib.Path(os.environ.get("DSA_SIM_BIN", ROOT / "target" / "release" / "dsa-sim"))


class Cli:
    """Runs `dsa-sim` in the repository's root (where relative data paths resolve)."""

    def __init__(self, path: pathlib.Path):
        self.path = path

    def run(self, *args: str, stdin: str = ""):
        return subprocess.run([str(self.path), *args], input=stdin, capture_output=True, text=True, cwd=ROOT, timeout=600)

    def json(self, *args: str):
        p = self.run(*args, "--json")
        assert p.returncode == 0, p.stderr
        return json.loads(p.stdout)

    def error(self, *args: str, stdin: str = "") -> str:
        """The message of a refused command: its one stderr line without `error: `."""
        p = self.run(*args, stdin=stdin)
        assert p.returncode == 2, (p.returncode, p.stdout, p.stderr)
        lines = p.stderr.splitlines()
        assert len(lines) == 1 and lines[0].startswith("error: "), p.stderr
        return lines[0][len("error: "):]


@pytest.fixture(scope="session")
def cli() -> Cli:
    path = _binary()
    if not path.is_file():
        # A missing binary is a broken set-up, not a reason to skip the comparison.
        pytest.fail(f"{path}: no dsa-sim binary to compare against (run `cargo build --release`, or set DSA_SIM_BIN)")
    return Cli(path)


@pytest.fixture(autouse=True)
def _in_root(monkeypatch):
    # Relative paths (experiments/…csv) mean the same file to the package and the binary.
    monkeypatch.chdir(ROOT)
