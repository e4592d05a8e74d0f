"""auto vs explicit vs mpi on one problem: real mpiexec, bitwise equal, counted messages."""

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from helpers import heat_numpy, life_numpy

import pgas
from pgas.app.compare import compare, run_mpi
from pgas.app.problem import checksum
from pgas.app.results import format_table

PROBLEMS = str(Path(__file__).resolve().parents[1] / "problems.py")


def _heat_reference(n):
    i = np.arange(n)
    return heat_numpy((np.sin(0.37 * i) ** 2).astype(np.float32), 20)


def test_compare_three_backends_heat():
    """Bitwise and counted on 4 devices and ranks (1001 cells: uneven, 251 + 3 x 250; two
    ranks between two others); also that compare passes steps_per_exchange to every backend
    ("auto" would be 16). pgas.mpi on 1, 2 and 4 ranks against NumPy: test_mpi.py."""
    results = compare(f"{PROBLEMS}:heat", 20, devices=4, steps_per_exchange=4, gather=True, n=1001)
    assert [r.backend for r in results] == ["auto", "explicit", "mpi"]
    assert len({r.checksum for r in results}) == 1
    np.testing.assert_array_equal(results[2].field, _heat_reference(1001))
    auto, expl, mpi = results
    assert mpi.checksum == checksum(_heat_reference(1001))  # from the ranks' blocks: no gather
    # 3 of 4 devices send a 4 B cell each way per step: nothing crosses the fixed ends, as in MPI
    assert auto.bytes_per_step == expl.bytes_per_step == mpi.bytes_per_step == 2 * 3 * 4
    assert auto.steps_per_exchange == expl.steps_per_exchange == mpi.steps_per_exchange == 4
    assert auto.messages_per_step == expl.messages_per_step == mpi.messages_per_step == 6 / 4
    assert auto.ideal_bytes_per_step == 8
    table = format_table(results)
    assert table.count(" yes") == 3 and "NO" not in table


# 2x2 (both axes split, periodic); one split axis: test_mpi's life_torus_dims_1x2 and 2x1
# against NumPy and test_explicit's life on 1x2 and 2x1 devices
@pytest.mark.parametrize("ranks", [4])
def test_life_mpi_and_jax_bitwise(ranks):
    problem = pgas.problem.load_problem(f"{PROBLEMS}:life", h=13, w=17)  # blocks 7/6 x 9/8
    b0 = problem.init(*np.meshgrid(np.arange(13), np.arange(17), indexing="ij"))
    expected = life_numpy(b0, 15)
    results = compare(f"{PROBLEMS}:life", 15, devices=ranks, ranks=ranks, gather=True, h=13, w=17)
    for r in results:
        np.testing.assert_array_equal(r.field, expected, err_msg=r.backend)
        assert r.checksum == checksum(expected), r.backend


def test_cli_compare_json(capsys):
    """The CLI's wiring of all three backends, in this process: the mpi row runs under
    mpiexec (run_mpi) on one rank (enough here); the JAX rows run the programs of
    test_compare_three_backends_heat. ``python -m pgas.app.cli`` as a process:
    test_cli.py::test_console_entry_point_runs_as_a_module."""
    from pgas.app.cli import main

    assert main(["compare", f"{PROBLEMS}:heat", "--steps", "20", "--devices", "4", "--ranks",
                 "1", "--steps-per-exchange", "4", "--set", "n=1001", "--json"]) == 0  # fmt: skip
    rows = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert [r["backend"] for r in rows] == ["auto", "explicit", "mpi"]
    assert len({r["checksum"] for r in rows}) == 1


def test_compare_errors():
    with pytest.raises(pgas.PgasError, match="backend = 'gpu' is unknown"):
        compare(f"{PROBLEMS}:heat", 1, backends=["gpu"])
    with pytest.raises(pgas.PgasError, match="has no function 'nope'"):
        compare(f"{PROBLEMS}:nope", 1)
    with pytest.raises(pgas.PgasError, match="file.py:factory"):
        compare("heat", 1)


def test_missing_mpiexec_is_explained(monkeypatch, tmp_path):
    monkeypatch.setattr(sys, "executable", str(tmp_path / "python"))
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(pgas.PgasError, match="pip install mpi4py mpich"):
        run_mpi(f"{PROBLEMS}:heat", 1, 2)


def test_example_compare_failure_exits_2_without_traceback(monkeypatch, capsys):
    """A comparison whose mpiexec fails (here: no MPI library) ends like any user error."""
    from helpers import fails_with, load_example

    import pgas.app.compare

    def broken(*args, **kwargs):
        raise pgas.PgasError("mpiexec -n 2 failed (exit 1): libmpi.so.12: cannot open shared")

    monkeypatch.setattr(pgas.compare, "run_mpi", broken)
    # the JAX backends' runs before it: not what fails here (compiled and checked above)
    monkeypatch.setattr(pgas.compare, "run", lambda problem, opts, gather=False: None)
    heat = load_example("heat1d")
    err = fails_with(heat.main, ["--devices", "2", "--n", "64", "--steps", "4", "--compare"],
                     capsys, "mpiexec -n 2 failed", "libmpi.so.12")  # fmt: skip
    assert "Traceback" not in err


def test_worker_checks_the_rank_count_it_was_launched_with(tmp_path):
    """A worker started without the ranks compare launched (here: no mpiexec at all) stops
    with pgas.mpi.require_launcher's message instead of reporting a 1-rank run."""
    cmd = [sys.executable, "-m", "pgas.app.compare", "--worker", f"{PROBLEMS}:heat", "--ranks", "2",
           "--steps", "1", "--out", str(tmp_path / "f.npy")]  # fmt: skip
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PMI", "HYDRA", "OMPI_"))}
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=env)
    assert proc.returncode != 0 and not (tmp_path / "f.npy").exists()
    assert "expected_ranks = 2" in proc.stderr and "mpiexec -n 2" in proc.stderr, proc.stderr
