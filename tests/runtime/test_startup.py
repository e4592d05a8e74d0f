"""Start-up settings and the start each launcher asks for (pgas.runtime.startup); no JAX
runtime is started (the runs under mpiexec: tests/runtime/test_distributed.py)."""

import pytest

from pgas.runtime.startup import (
    DEFAULT_TIMEOUT,
    LauncherError,
    ProcessCountError,
    plan_start,
    read_settings,
)


def settings(coordinator=None, num_processes=None, process_id=None, method=None, env=None):
    return read_settings(coordinator, num_processes, process_id, None, method, None, env or {})


def test_unknown_launcher_is_named():
    with pytest.raises(LauncherError, match="PGAS_LAUNCHER"):
        settings(method="pbs")
    with pytest.raises(LauncherError, match="PGAS_LAUNCHER"):
        settings(env={"PGAS_LAUNCHER": "pbs"})


def test_arguments_win_over_overrides_which_win_over_the_launcher():
    env = {"PGAS_NUM_PROCESSES": "4", "PGAS_PROCESS_ID": "2", "PGAS_COORDINATOR": "h:9",
           "PMI_RANK": "0", "PMI_SIZE": "4"}  # fmt: skip
    s = settings(num_processes=8, env=env)
    assert (s.num_processes, s.process_id, s.coordinator, s.launcher) == (8, 2, "h:9", "mpi")
    assert s.timeout == DEFAULT_TIMEOUT
    assert settings(method="srun", env=env).launcher == "slurm"
    with pytest.raises(LauncherError, match="PGAS_PROCESS_ID = 'two' is not a whole number"):
        settings(env={"PGAS_PROCESS_ID": "two"})
    with pytest.raises(ProcessCountError, match="num_processes = 0: give a whole number >= 1"):
        settings(num_processes=0, method="none")


def test_explicit_setup_incomplete_is_named():
    with pytest.raises(LauncherError, match="process_id"):
        plan_start(settings("h:1", 2, method="none"), {})
    with pytest.raises(ProcessCountError, match="process_id = 5"):
        plan_start(settings("h:1", 2, 5, method="none"), {})
    start = plan_start(settings("h:1", 2, 1, method="none"), {})
    assert start.method == "explicit" and start.kwargs["cluster_detection_method"] == "deactivate"
    assert plan_start(settings(method="none"), {}) is None  # one process: nothing to start


def test_slurm_counts_are_checked_against_the_declared_ones():
    env = {"SLURM_JOB_ID": "3", "SLURM_STEP_NODELIST": "n1", "SLURM_PROCID": "1",
           "SLURM_NTASKS": "2"}  # fmt: skip
    with pytest.raises(ProcessCountError, match=r"PGAS_NUM_PROCESSES\) = 4, but srun"):
        plan_start(settings(num_processes=4, env=env), env)
    start = plan_start(settings(env=env), env)
    assert (start.method, start.kwargs) == ("slurm", {"cluster_detection_method": "slurm"})
    alone = dict(env, SLURM_NTASKS="1", SLURM_PROCID="0")
    assert plan_start(settings(env=alone), alone) is None
