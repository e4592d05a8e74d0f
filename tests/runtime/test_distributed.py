"""pgas.distributed: start-up under real ``mpiexec`` (MPICH from PyPI) and its errors.

The 2-process run of ``tests/dist_scripts/simulate.py`` (1-D heat on 1001 cells,
2-D Life) is compared bitwise with NumPy loops (its 4-process run, Life on a 2x2
mesh, with the same checks: tests/io/test_checkpoint.py, restarting from a
checkpoint); the error cases run as subprocesses with timeouts.
"""

from __future__ import annotations

import subprocess
import sys
import time

import numpy as np
import pytest

sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parents[1] / "dist_scripts"))
import common  # noqa: E402

from pgas import distributed  # noqa: E402

pytest.importorskip("mpi4py")
needs_mpiexec = pytest.mark.skipif(
    not common.MPIEXEC.exists(), reason="no mpiexec next to python; pip install mpich"
)

STEPS = 40


@pytest.mark.parametrize(
    "env, expected",
    [
        ({"PMI_RANK": "0", "PMI_SIZE": "2"}, "mpi"),
        ({"OMPI_COMM_WORLD_SIZE": "2"}, "mpi"),
        ({"PMIX_RANK": "0"}, "mpi"),
        (
            {
                "PMI_RANK": "1",
                "SLURM_JOB_ID": "3",
                "SLURM_STEP_NODELIST": "n1",
                "SLURM_PROCID": "0",
            },
            "mpi",
        ),  # mpiexec inside a Slurm allocation: MPI wins
        ({"SLURM_JOB_ID": "3", "SLURM_STEP_NODELIST": "n[1-2]", "SLURM_PROCID": "1"}, "slurm"),
        ({"SLURM_JOB_ID": "3"}, "none"),  # sbatch shell, not an srun step
        ({}, "none"),
    ],
)
def test_detect_launcher(env, expected):
    assert distributed.detect_launcher(env) == expected


def test_single_process_starts_nothing_and_is_idempotent(monkeypatch):
    for k in ("PMI_RANK", "PMI_SIZE", "OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "SLURM_JOB_ID",
              "PGAS_COORDINATOR", "PGAS_NUM_PROCESSES", "PGAS_LAUNCHER"):  # fmt: skip
        monkeypatch.delenv(k, raising=False)
    info = distributed.initialize()
    assert (info.process_id, info.process_count, info.coordinator) == (0, 1, None)
    assert info.global_device_count == info.local_device_count >= 1
    assert distributed.initialize() is info
    text = distributed.describe(print_it=False)
    assert "1 process(es)" in text and "process 0:" in text


@needs_mpiexec
def test_mpiexec_bitwise_equal_to_numpy(tmp_path):
    """2 processes; 4 in test_checkpoint's restart (the same checks, one launch fewer)."""
    n, out = 2, tmp_path / "out.npz"
    r = common.mpiexec(n, str(common.SIMULATE), str(out), "--steps", str(STEPS), timeout=180)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert f"pgas: {n} process(es), {n} device(s)" in r.stdout  # verbose=True on process 0
    assert r.stdout.count("pgas: ") == 1  # printed once
    res = np.load(out)
    assert int(res["processes"]) == n and int(res["devices"]) == n
    assert str(res["method"]) == "mpi4py"
    heat, life = common.heat_reference(STEPS), common.life_reference(STEPS)
    assert res["heat"].dtype == np.float32 and res["life"].dtype == np.uint8
    np.testing.assert_array_equal(res["heat"], heat)  # bitwise
    assert res["heat"].tobytes() == heat.tobytes()
    np.testing.assert_array_equal(res["life"], life)


PROBE = (
    "import sys, pgas.distributed as d\n"
    "try:\n"
    "    d.initialize()\n"
    "except d.LauncherError as e:\n"
    "    print(type(e).__name__ + ': ' + str(e), file=sys.stderr); sys.exit(3)\n"
    "print('STARTED')\n"
)


# PGAS_INIT_TIMEOUT=1 below: no peer ever comes, so the outcome is the same however long the
# watchdog waits (it starts after the imports)
def test_unreachable_coordinator_fails_fast_with_message():
    env = common.clean_env(PGAS_COORDINATOR="127.0.0.1:1", PGAS_NUM_PROCESSES="2",
                           PGAS_PROCESS_ID="1", PGAS_INIT_TIMEOUT="1")  # fmt: skip
    t = time.monotonic()
    r = subprocess.run([sys.executable, "-c", PROBE], env=env, capture_output=True, text=True,
                       timeout=60)  # fmt: skip
    elapsed = time.monotonic() - t
    assert r.returncode == 3, r.stderr[-2000:]
    assert "CoordinatorError" in r.stderr and "127.0.0.1:1" in r.stderr
    assert "PGAS_INIT_TIMEOUT" in r.stderr and "STARTED" not in r.stdout
    assert elapsed < 30


def test_missing_peer_ends_with_message_and_status_75():
    """Process 0 of 2 alone: the watchdog explains and exits (JAX itself would abort)."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = common.clean_env(PGAS_COORDINATOR=f"127.0.0.1:{port}", PGAS_NUM_PROCESSES="2",
                           PGAS_PROCESS_ID="0", PGAS_INIT_TIMEOUT="1")  # fmt: skip
    t = time.monotonic()
    r = subprocess.run([sys.executable, "-c", PROBE], env=env, capture_output=True, text=True,
                       timeout=60)  # fmt: skip
    assert r.returncode == distributed.WATCHDOG_EXIT_CODE, r.stderr[-2000:]
    assert "not every process connected" in r.stderr and f"127.0.0.1:{port}" in r.stderr
    assert time.monotonic() - t < 30


@needs_mpiexec
def test_process_count_mismatch_names_both_values():
    r = common.mpiexec(2, "-c", PROBE, timeout=60, PGAS_NUM_PROCESSES="4")
    assert r.returncode != 0
    assert "ProcessCountError" in r.stderr
    assert "PGAS_NUM_PROCESSES) = 4" in r.stderr and "started 2 process(es)" in r.stderr


SLURM = {"SLURM_JOB_ID": "9", "SLURM_STEP_NODELIST": "n[1-2]", "SLURM_PROCID": "5"}


@pytest.mark.parametrize(
    "env, ids",
    [
        ({}, None),  # nothing declared: JAX decides
        (dict(SLURM, SLURM_LOCALID="1", SLURM_NTASKS_PER_NODE="4"), None),
        # --gpus-per-node=4, 4 tasks per node, no binding: one GPU per task
        (
            dict(
                SLURM, SLURM_LOCALID="1", SLURM_NTASKS_PER_NODE="4", CUDA_VISIBLE_DEVICES="0,1,2,3"
            ),
            [1],
        ),  # fmt: skip
        (
            dict(
                SLURM,
                SLURM_LOCALID="3",
                SLURM_NTASKS_PER_NODE="4(x2)",
                CUDA_VISIBLE_DEVICES="0,1,2,3",
            ),
            [3],
        ),  # fmt: skip
        # Slurm bound one GPU per task (--gpus-per-task=1): the one visible is ours
        (dict(SLURM, SLURM_LOCALID="2", SLURM_NTASKS_PER_NODE="4", CUDA_VISIBLE_DEVICES="2"), [0]),
        (
            dict(SLURM, SLURM_LOCALID="1", SLURM_NTASKS_PER_NODE="4", CUDA_VISIBLE_DEVICES="4,5"),
            [0, 1],
        ),  # fmt: skip
        # 8 GPUs shared by 4 processes of mpiexec (MPICH's hydra): two each
        (
            {
                "PMI_RANK": "6",
                "PMI_SIZE": "8",
                "MPI_LOCALRANKID": "2",
                "MPI_LOCALNRANKS": "4",
                "CUDA_VISIBLE_DEVICES": "0,1,2,3,4,5,6,7",
            },
            [4, 5],
        ),  # fmt: skip
        (
            {
                "OMPI_COMM_WORLD_SIZE": "2",
                "OMPI_COMM_WORLD_LOCAL_RANK": "1",
                "OMPI_COMM_WORLD_LOCAL_SIZE": "2",
                "ROCR_VISIBLE_DEVICES": "0,1",
            },
            [1],
        ),  # fmt: skip
        ({"CUDA_VISIBLE_DEVICES": "0,1"}, [0, 1]),  # one process alone: all of them
        ({"PGAS_LOCAL_DEVICE_IDS": "3,1", "CUDA_VISIBLE_DEVICES": "0"}, [3, 1]),  # override
    ],
)
def test_local_device_ids(env, ids):
    assert distributed.local_device_ids(env) == ids


def test_local_device_ids_bad_override():
    with pytest.raises(distributed.LauncherError, match="PGAS_LOCAL_DEVICE_IDS = 'a,b'"):
        distributed.local_device_ids({"PGAS_LOCAL_DEVICE_IDS": "a,b"})


def test_no_private_jax_in_house_modules():
    import pgas

    root = __import__("pathlib").Path(pgas.__file__).parent
    files = sorted(root.rglob("*.py"))  # every module of every layer
    assert len(files) > 40
    for path in files:
        assert "jax._src" not in path.read_text(), path
