"""Install: the Python and JAX versions pgas declares, and make's early stop on an old Python."""

from __future__ import annotations

import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

FAKE_PY310 = """#!/bin/sh
# stands in for a Python 3.10 interpreter: answers make's version questions only
case "$*" in
  *version_info*) exit 1 ;;
  *sys.version.split*) echo 3.10.12 ;;
  *) echo "fake python 3.10 was asked to run: $*" >&2; exit 99 ;;
esac
"""


def _make(tmp_path: Path, py: str, target: str) -> subprocess.CompletedProcess:
    shutil.copy(ROOT / "Makefile", tmp_path / "Makefile")
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    return subprocess.run(
        ["make", target, f"PY={py}"], cwd=tmp_path, capture_output=True, text=True, timeout=120
    )


def test_make_stops_on_python_310(tmp_path):
    fake = tmp_path / "python3.10"
    fake.write_text(FAKE_PY310)
    fake.chmod(0o755)
    r = _make(tmp_path, str(fake), "test")
    assert r.returncode != 0
    assert "pgas needs Python 3.11 or newer" in r.stderr
    assert "is Python 3.10.12" in r.stderr and str(fake) in r.stderr
    assert "asked to run" not in r.stderr  # stopped before `python -m venv` or pip
    assert not (tmp_path / ".venv").exists()


def test_make_names_a_missing_interpreter(tmp_path):
    r = _make(tmp_path, str(tmp_path / "no-such-python"), "test")
    assert r.returncode != 0 and "(not found)" in r.stderr
    assert not (tmp_path / ".venv").exists()


def test_make_accepts_this_python(tmp_path):
    """This Python passes the check and make goes on to `python -m venv` (recorded, not run)."""
    py = tmp_path / "python"
    py.write_text(
        f'#!/bin/sh\nif [ "$1 $2" = "-m venv" ]; then echo "$@" > venv-called; exit 0; fi\n'
        f'exec {sys.executable} "$@"\n'
    )
    py.chmod(0o755)
    r = _make(tmp_path, str(py), ".venv/bin/python")
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "venv-called").read_text().split() == ["-m", "venv", ".venv"]


def test_declared_versions():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert project["project"]["requires-python"] == ">=3.11"
    assert "jax>=0.10,<0.12" in project["project"]["dependencies"]
    extras = project["project"]["optional-dependencies"]
    assert extras["cuda"] == ["jax[cuda12]>=0.10,<0.12"]
    assert extras["cuda13"] == ["jax[cuda13]>=0.10,<0.12"]
    assert project["tool"]["ruff"]["target-version"] == "py311"
