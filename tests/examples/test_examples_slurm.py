"""The examples' Slurm job scripts on a real (local) Slurm: 2 nodes x 2 tasks, and 2 x 1.

Starts scripts/local-slurm (tests/slurm_cluster.py), submits
examples/heat1d/heat1d.sbatch, examples/life/life.sbatch and
examples/cavity/cavity.sbatch from the repository root with small sizes (the
scripts' environment overrides; life on the scripts' 2 nodes x 2 tasks, heat1d and cavity
on 2 nodes x 1 task), checks the JSON line in
each job's output file and the written .nc against the single-process result (heat1d
and life: NumPy, bitwise; cavity: the example in this process on the same 2 x 1 mesh,
to 1e-12),
then requeues the finished heat1d job: the rerun finds the final checkpoint
(--restart) and reports the same field without stepping again.
Skipped where Slurm cannot be started (not root, no apt), except as root with
env CI set, where that is a failure.
"""

import json
import re
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import xarray as xr
from helpers import load_example

from pgas.app.problem import checksum
from pgas.io import checkpoint

try:
    from . import slurm_cluster
except ImportError:  # tests/ is not a package: pytest put it on sys.path
    import slurm_cluster

try:
    from .test_examples_distributed import H, L
except ImportError:
    from test_examples_distributed import H, L

ROOT = Path(__file__).resolve().parents[2]
C = load_example("cavity")
# cavity: 6 steps (--tol below any change), each solve to round-off; one checkpoint, at the end
# (one chunk, one compile: a second chunk compiles the loop again, its scalars placed anew)
CAVITY_ARGS = ("--tol", "1e-300", "--solver-tol", "1e-12", "--max-cycles", "60")


def _requeue_until_rerun(job: str, log: Path, env: dict, tries: int = 3) -> None:
    """Requeue a finished job and wait until its rerun has reported.

    A requeued job is held back (Reason=BeginTime): it is released while it waits.
    Requeued the moment it ended, a job can also be refused by the node that still
    holds the old run ("Job N already killed, do not launch batch job") and fail at
    once without running; such an attempt is requeued again.
    """
    for _ in range(tries):
        res = subprocess.run(["scontrol", "requeue", job], env=env, capture_output=True,
                             text=True, timeout=30)  # fmt: skip
        assert res.returncode == 0, res.stdout + res.stderr
        deadline = time.monotonic() + 60
        while len(_results(log)) < 2:
            text = log.read_text(errors="replace")
            assert "srun: error" not in re.split(r"restart count", text)[-1], text[-4000:]
            state = slurm_cluster.job_state(job, env)
            if state == "FAILED":
                break
            assert time.monotonic() < deadline, (state, text[-4000:])
            if state == "PENDING":
                subprocess.run(["scontrol", "update", f"JobId={job}", "StartTime=now"],
                               env=env, capture_output=True, timeout=30)  # fmt: skip
            time.sleep(0.3)
        else:
            return
        time.sleep(1)
    pytest.fail(f"job {job} failed at once on each of {tries} requeues")


def _job_env(cluster: dict, out: Path, **extra: str) -> dict:
    env = {k: v for k, v in cluster.items() if not k.startswith(("PGAS_", "XLA_FLAGS", "PMI"))}
    env.update(PGAS_PYTHON=sys.executable, PGAS_OUT_DIR=str(out), JAX_PLATFORMS="cpu", **extra)
    return env


def _results(log: Path) -> list[dict]:
    text = log.read_text(errors="replace") if log.exists() else ""
    return [json.loads(x) for x in text.splitlines() if x.startswith("{")]


@pytest.mark.slow
def test_sbatch_scripts_on_two_nodes_equal_single_process(cluster, tmp_path):
    out = tmp_path / "out"
    env = _job_env(cluster, out, HEAT1D_N="1001", HEAT1D_STEPS="60",
                   HEAT1D_CHECKPOINT_EVERY="20", HEAT1D_SNAPSHOT_EVERY="10",
                   LIFE_SIZE="37x50", LIFE_STEPS="30", LIFE_CHECKPOINT_EVERY="10",
                   LIFE_SNAPSHOT_EVERY="5", CAVITY_N="9", CAVITY_RE="100",
                   CAVITY_MAX_STEPS="6", CAVITY_CHECKPOINT_EVERY="6",
                   CAVITY_DEVICES="1")  # fmt: skip
    t0 = time.monotonic()
    jobs = {}
    # heat1d and cavity on 2 nodes x 1 task (sbatch's option over the script's 2 tasks per
    # node): every process compiles (a multigrid solve for cavity), and two cross the nodes as
    # four do; life keeps the scripts' 2 x 2 (4 processes)
    # (k = 2, of auto's parity, a small group for every process to compile: auto's, 16 and 8,
    # is more than the steps between snapshots, compiled and never run)
    one_per_node = ("--ntasks-per-node=1",)
    heat_args = ("--seed", "3", "--steps-per-exchange", "2")
    life_args = ("--density", "0.4", "--seed", "9", "--steps-per-exchange", "2")
    for name, script, extra, tasks in (
        ("heat1d", "examples/heat1d/heat1d.sbatch", heat_args, one_per_node),
        ("life", "examples/life/life.sbatch", life_args, ()),
        ("cavity", "examples/cavity/cavity.sbatch", CAVITY_ARGS, one_per_node),
    ):
        log = tmp_path / f"{name}.out"
        job = slurm_cluster.submit(ROOT / script, env, cwd=ROOT,
                                   args=(f"--output={log}", *tasks), script_args=extra)  # fmt: skip
        jobs[name] = (job, log)
    # while they run: the cavity example in this process on 2 devices (mesh 2 x 1)
    one = tmp_path / "one.nc"
    single = C.main(["--n", "9", "--re", "100", "--max-steps", "6", *CAVITY_ARGS, "--json",
                     "--devices", "2", "--platform", "cpu", "--out", str(one)])  # fmt: skip
    for name, (job, log) in jobs.items():
        state = slurm_cluster.wait_job(job, 180, env)
        text = log.read_text(errors="replace") if log.exists() else "(no output file)"
        assert state == "COMPLETED", f"{name} job {job} ended {state}:\n{text[-4000:]}"
    print(f"all jobs done {time.monotonic() - t0:.1f} s after submitting")

    heat0 = H.initial(1001, "random", seed=3).astype(np.float32)
    for _ in range(60):
        heat0[1:-1] = 0.5 * heat0[1:-1] + 0.25 * (heat0[:-2] + heat0[2:])
    board = L.patterns.random_board((37, 50), 0.4, seed=9)
    for _ in range(30):
        board = L.patterns.life_step_numpy(board)
    expected = {"heat1d": checksum(heat0), "life": checksum(board)}
    for name, processes in (("heat1d", 2), ("life", 4)):
        job, log = jobs[name]
        (d,) = _results(log)
        assert d["processes"] == processes and d["devices"] == processes, d
        assert d["checksum"] == expected[name], name
        assert d["start_step"] == 0 and d["checkpoint"] == f"{out}/{name}.ckpt"
        with xr.open_dataset(out / f"{name}.nc") as ds:
            assert ds.attrs["processes"] == processes
            assert checksum(ds[list(ds.data_vars)[0]].values[-1]) == expected[name]
        assert (out / f"{name}.ckpt" / "LATEST").exists()

    # cavity: 2 processes (one per node) of one device each equal one process on the same mesh
    (d,) = _results(jobs["cavity"][1])
    assert d["processes"] == 2 and d["devices"] == 2 and d["steps"] == 6, d
    assert d["mesh"] == single["mesh"] == {"x": 2, "y": 1}, (d["mesh"], single["mesh"])
    with xr.open_dataset(out / "cavity.nc") as got, xr.open_dataset(one) as want:
        assert got.attrs["processes"] == 2 and got.attrs["steps"] == 6
        for name in ("psi", "omega"):
            assert np.abs(want[name].values).max() > 0, name
            np.testing.assert_allclose(got[name].values, want[name].values, rtol=0, atol=1e-12)
    assert checkpoint.latest(out / "cavity.ckpt") == 6

    # requeue the finished heat1d job: it starts again with --restart, finds the checkpoint
    # of the last step and reports the same field; the log is appended to
    job, log = jobs["heat1d"]
    _requeue_until_rerun(job, log, env)
    assert slurm_cluster.wait_job(job, 60, env) == "COMPLETED"
    first, again = _results(log)
    assert again["start_step"] == 60 and again["checksum"] == first["checksum"]
    assert re.search(r"restart count [1-9]", log.read_text())


def test_gpu_job_script_is_valid_bash_and_uses_known_options(capsys):
    """The GPU job script cannot run here (no GPU): check its shell syntax, its Slurm GPU
    options, and that every option it gives heat1d.py is one heat1d.py takes."""
    script = ROOT / "examples" / "heat1d" / "heat1d-gpu.sbatch"
    subprocess.run(["bash", "-n", str(script)], check=True, timeout=30)
    text = script.read_text()
    for line in ("#SBATCH --gpus-per-node=", "#SBATCH --gpus-per-task=1", "--platform gpu"):
        assert line in text, line
    job = text[text.rindex("examples/heat1d/heat1d.py") :]
    given = set(re.findall(r"(?<![\w-])(--[a-z][a-z-]+)", job))
    with pytest.raises(SystemExit):
        H.main(["--help"])
    known = set(re.findall(r"(?<![\w-])(--[a-z][a-z-]+)", capsys.readouterr().out))
    assert {"--platform", "--devices", "--distributed", "--restart"} <= given
    assert given <= known, given - known
