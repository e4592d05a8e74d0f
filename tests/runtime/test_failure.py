"""pgas.runtime.failure: one failed process ends the whole run, within seconds, non-zero.

Real launchers: MPICH's ``mpiexec`` from PyPI and, where it can be started, the local Slurm
of scripts/local-slurm (``srun --mpi=none``, whose KillOnBadExit is Slurm's default 0: the
other tasks are not ended by Slurm itself). Each case asserts the launcher returns a
non-zero status within 30 s (a hang is what this guards against: the failed process
used to leave the others waiting in a collective or in start-up until a test's deadline).
"""

import subprocess
import sys
import time

import pytest

from pgas.runtime import failure

try:
    from . import slurm_cluster
    from .dist_scripts import common
except ImportError:  # tests/ is not a package: pytest put it on sys.path
    import slurm_cluster
    from dist_scripts import common

FAIL = common.SCRIPTS / "fail.py"
HEAT = common.ROOT / "examples" / "heat1d" / "heat1d.py"
needs_mpiexec = pytest.mark.skipif(not common.MPIEXEC.exists(), reason="no mpiexec")
DEADLINE = 30


def test_one_process_sees_the_error_unchanged():
    with pytest.raises(ValueError, match="boom"), failure.abort_on_error(env={}):
        raise ValueError("boom")
    with pytest.raises(SystemExit) as exit_, failure.abort_on_error(env={"PMI_SIZE": "1"}):
        sys.exit(2)
    assert exit_.value.code == 2


def test_a_clean_exit_is_not_a_failure():
    with pytest.raises(SystemExit), failure.abort_on_error(env={"PMI_RANK": "1", "PMI_SIZE": "2"}):
        sys.exit(0)


def launch(cmd, timeout=120, **env):
    t = time.monotonic()
    r = subprocess.run(cmd, env=common.clean_env(**env), capture_output=True, text=True,
                       timeout=timeout, cwd=common.ROOT)  # fmt: skip
    return r, time.monotonic() - t


def mpmd(first: list[str], second: list[str]) -> list[str]:
    """``mpiexec -n 1 python FIRST : -n 1 python SECOND``: process 1 runs another command."""
    py = sys.executable
    return [str(common.MPIEXEC), "-n", "1", py, *first, ":", "-n", "1", py, *second]


@needs_mpiexec
@pytest.mark.slow
@pytest.mark.parametrize(
    "args",
    [["--when", "start"], ["--when", "run"], ["--when", "hook"], ["--backend", "mpi"]],
    ids=["start-up", "mid-run", "mid-run-no-wrapper", "mpi-backend"],
)
def test_mpiexec_ends_when_one_process_raises(args):
    r, took = launch([str(common.MPIEXEC), "-n", "2", sys.executable, str(FAIL), *args])
    assert r.returncode != 0 and took < DEADLINE, (took, r.stdout[-2000:], r.stderr[-3000:])
    assert "process 1 of 2 failed, ending the run" in r.stderr, r.stderr[-3000:]
    assert "RuntimeError: process 1 fails" in r.stderr


@needs_mpiexec
@pytest.mark.slow
def test_mpiexec_ends_when_one_process_exits_with_a_status():
    """Process 1 calls sys.exit(3) mid-run, nothing wraps the script: it names itself and ends
    the others (it used to wait in JAX's shutdown and process 0 in a collective, for minutes)."""
    r, took = launch([str(common.MPIEXEC), "-n", "2", sys.executable, str(FAIL), "--when", "exit"])
    assert r.returncode == 3 and took < DEADLINE, (took, r.stdout[-2000:], r.stderr[-3000:])
    assert "pgas: process 1 of 2 exited with status 3; ending the others" in r.stderr


def test_a_caught_exit_ends_nothing_and_the_exit_that_ends_the_program_is_named():
    """In a multi-process run a sys.exit that is caught ends nothing; the one that ends the
    program (status 4) says so and ends the others (here, alone: with its own status)."""
    code = ("import sys\nfrom pgas.runtime import failure\nfailure.install_excepthook(2)\n"
            "try:\n    sys.exit(5)\nexcept SystemExit:\n    pass\nprint('ON', flush=True)\n"
            "def main():\n    sys.exit(4)\nmain()\n")  # fmt: skip
    r = subprocess.run([sys.executable, "-c", code], env=common.clean_env(PGAS_PROCESS_ID="1"),
                       capture_output=True, text=True, timeout=60)  # fmt: skip
    assert r.returncode == 4 and r.stdout == "ON\n", (r.returncode, r.stdout, r.stderr[-2000:])
    assert r.stderr.count("ending the others") == 1, r.stderr[-2000:]
    assert "pgas: process 1 of 2 exited with status 4; ending the others" in r.stderr


@needs_mpiexec
@pytest.mark.slow
def test_a_bad_option_on_one_process_ends_the_example():
    """heat1d --distributed with a bad option on process 1 only: exit status 2 from argparse,
    and process 0 (waiting in JAX's start-up) ends too."""
    good = [str(HEAT), "--distributed", "--steps", "100"]
    r, took = launch(mpmd(good, [str(HEAT), "--distributed", "--steps", "abc"]))
    assert r.returncode == 2 and took < DEADLINE, (took, r.stderr[-3000:])
    assert "--steps: 'abc' is not a whole number" in r.stderr
    assert "process 1 of 2 failed, ending the run" in r.stderr


@needs_mpiexec
@pytest.mark.slow
def test_a_process_that_dies_before_mpi_starts_ends_the_run():
    """Process 1 is not pgas and exits before MPI_Init: process 0 waits in MPI_Init, which no
    thread of it can interrupt; pgas's watchdog (PGAS_INIT_TIMEOUT) ends it with a message.
    (1 s: process 1 never starts MPI, so the watchdog ends process 0 however long it waits.)"""
    r, took = launch(mpmd([str(HEAT), "--distributed", "--steps", "100"],
                          ["-c", "import sys; sys.exit(2)"]), PGAS_INIT_TIMEOUT="1")  # fmt: skip
    assert r.returncode != 0 and took < DEADLINE, (took, r.stderr[-3000:])
    assert "did not all start MPI within 1 s (PGAS_INIT_TIMEOUT)" in r.stderr


JOB = """#!/bin/bash
#SBATCH --job-name=pgas-failure
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=1
#SBATCH --time=00:05:00
srun --mpi=none {python} {script} --when {when}
echo "SRUN STATUS $?"
"""


@pytest.mark.slow
@pytest.mark.parametrize("when", ["run", "hook"])
def test_srun_ends_when_one_process_raises(cluster, tmp_path, when):
    """2 tasks on 2 nodes, no MPI: process 1 raises mid-run; pgas cancels the job step."""
    script, log = tmp_path / "job.sbatch", tmp_path / "job.out"
    script.write_text(JOB.format(python=sys.executable, script=FAIL, when=when))
    env = {k: v for k, v in cluster.items() if not k.startswith(("PGAS_", "XLA_FLAGS", "PMI"))}
    env.update(JAX_PLATFORMS="cpu", PGAS_LOCAL_DEVICES="1", PYTHONUNBUFFERED="1",
               PYTHONPATH=str(common.ROOT))  # fmt: skip
    job = slurm_cluster.submit(script, env, cwd=common.ROOT, args=(f"--output={log}",))
    text = lambda: log.read_text(errors="replace") if log.exists() else ""  # noqa: E731
    deadline = time.monotonic() + 120
    while "READY 1" not in text() or "READY 0" not in text():  # both tasks started
        assert time.monotonic() < deadline, f"job {job} did not start:\n{text()[-3000:]}"
        time.sleep(0.2)
    started = time.monotonic()
    state = slurm_cluster.wait_job(job, 120, env)
    took = time.monotonic() - started
    # the step ends with an error, or Slurm cancels the whole job (then no status line)
    ended = "SRUN STATUS" in text() or state in ("CANCELLED", "FAILED")
    assert "SRUN STATUS 0" not in text() and ended, (state, text()[-3000:])
    assert took < DEADLINE, (took, state, text()[-3000:])
    assert "process 1 of 2 failed, ending the run" in text()
