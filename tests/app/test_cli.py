"""The ``pgas`` command: argument errors (exit 2, a message), ``pgas report``, ``pgas compare``."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import fails_with

from pgas.app.cli import main

PROBLEMS = str(Path(__file__).resolve().parents[1] / "problems.py")


@pytest.mark.parametrize(
    "argv, needles",
    [
        (["compare", f"{PROBLEMS}:heat", "--steps", "0"], ["--steps", "positive"]),
        (["compare", f"{PROBLEMS}:heat", "--steps-per-exchange", "0"], ["K >= 1 or auto"]),
        (["report", f"{PROBLEMS}:heat", "--devices", "-1"], ["--devices"]),
        (["report", f"{PROBLEMS}:heat", "--platform", "tpu"], ["--platform", "cpu", "gpu"]),
        (["report", f"{PROBLEMS}:heat", "--set", "n"], ["--set 'n'", "key=value"]),
        (["frobnicate"], ["invalid choice", "compare", "report"]),
    ],
)
def test_argument_errors_exit_2(argv, needles, capsys):
    fails_with(main, argv, capsys, *needles)


@pytest.mark.parametrize(
    "argv, needles",
    [
        (["report", "heat"], ["pgas report: error:", "path/to/file.py:factory"]),
        (["report", f"{PROBLEMS}:heat", "--set", "size=3"], ["heat takes n, dtype"]),
        (
            ["compare", f"{PROBLEMS}:heat", "--backends", "auto,gpu"],
            ["backend = 'gpu' is unknown", "auto, explicit, mpi"],
        ),
        (["compare", f"{PROBLEMS}:heat", "--devices", "9"], ["DeviceCountError", "--devices 9"]),
    ],
)
def test_problem_errors_return_2_without_traceback(argv, needles, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err
    for needle in needles:
        assert needle in err, (needle, err)
    assert "Traceback" not in err


def test_report_prints_the_collectives(capsys):
    assert main(["report", f"{PROBLEMS}:heat", "--devices", "4", "--set", "n=101"]) == 0
    out = capsys.readouterr().out
    assert "heat_step" in out and "{'x': 4}" in out and "collective-permute" in out


def test_compare_json_in_process(capsys):
    argv = ["compare", f"{PROBLEMS}:life", "--steps", "4", "--devices", "2", "--backends",
            "auto,explicit", "--steps-per-exchange", "2", "--json"]  # fmt: skip
    assert main(argv) == 0
    rows = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert [r["backend"] for r in rows] == ["auto", "explicit"]
    assert len({r["checksum"] for r in rows}) == 1
    for r in rows:
        assert r["steps_per_exchange"] == 2 and r["steps_per_exchange_note"] == ""
        assert r["platform"] == "cpu" and r["device_kind"] and r["devices"] == 2
        assert isinstance(r["messages_per_step"], float) and r["bytes_per_step"] > 0


def test_compare_table_in_process(capsys):
    # k = 1: auto's 16, more than the 3 steps, would compile a group never run
    assert main(["compare", f"{PROBLEMS}:heat", "--steps", "3", "--devices", "2", "--backends",
                 "auto", "--set", "n=64", "--steps-per-exchange", "1"]) == 0  # fmt: skip
    head, row = capsys.readouterr().out.splitlines()[:2]
    assert head.split()[:4] == ["backend", "platform", "devices/ranks", "k"]
    assert row.split()[:3] == ["auto", "cpu", "2"] and row.split()[-1] == "yes"


@pytest.mark.one_process
def test_console_entry_point_runs_as_a_module():
    proc = subprocess.run([sys.executable, "-m", "pgas.app.cli", "--help"], capture_output=True,
                          text=True, timeout=60, check=True)  # fmt: skip
    assert "compare" in proc.stdout and "report" in proc.stdout


POISSON = str(Path(__file__).resolve().parents[2] / "examples" / "poisson" / "poisson.py")


def test_report_and_compare_of_an_iterative_float64_problem(capsys):
    assert main(["report", f"{POISSON}:problem", "--devices", "3", "--set", "n=17"]) == 0
    out = capsys.readouterr().out
    assert "'jacobi'" in out and "collective-permute" in out and "0 all-gather" in out
    # at most 99968 steps: whole checks of 64 (100000 would compile a part group of 32 steps,
    # after the last whole check, that a run converging at step 256 never reaches)
    assert main(["compare", f"{POISSON}:problem", "--steps", "99968", "--devices", "2",
                 "--backends", "auto,explicit", "--set", "n=9"]) == 0  # fmt: skip
    head, *rows = capsys.readouterr().out.splitlines()
    assert head.split()[-3:] == ["steps", "checksum", "equal"]
    assert rows[0].split()[-3] == rows[1].split()[-3] and rows[1].split()[-1] == "yes"
