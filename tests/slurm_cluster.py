"""Helpers for tests that submit jobs to the local Slurm of scripts/local-slurm.

    reason = unavailable_reason()      # None if a cluster can be started here
    was_running = start_cluster()      # idempotent; raises ClusterError
    job_id, state = submit_and_wait(script, timeout=120, env=cluster_env())
    stop_cluster()

The cluster keeps its config, state and logs under $PGAS_SLURM_DIR
(default /tmp/pgas-slurm); see `scripts/local-slurm --help`.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "scripts" / "local-slurm"
PACKAGES = ("slurmctld", "slurmd", "slurm-client", "munge")
# Job states after which a job does not change any more.
FINAL_STATES = set(
    "COMPLETED FAILED CANCELLED TIMEOUT NODE_FAIL PREEMPTED OUT_OF_MEMORY BOOT_FAIL "
    "DEADLINE".split()
)


class ClusterError(RuntimeError):
    pass


def state_dir() -> Path:
    return Path(os.environ.get("PGAS_SLURM_DIR", "/tmp/pgas-slurm"))


def unavailable_reason() -> str | None:
    """Why a local cluster cannot be started here, or None if it can."""
    if not hasattr(os, "geteuid") or os.geteuid() != 0:
        return "scripts/local-slurm needs root"
    if shutil.which("unshare") is None:
        return "unshare (util-linux) is missing"
    query = (
        subprocess.run(
            ["dpkg-query", "-W", "-f=${Status}\n", *PACKAGES], capture_output=True, text=True
        )
        if shutil.which("dpkg-query")
        else None
    )
    installed = (
        query is not None
        and query.returncode == 0
        and query.stdout.count("install ok installed") == len(PACKAGES)
    )
    if not installed and shutil.which("apt-get") is None:
        return "Slurm packages are not installed and apt-get is unavailable"
    return None


def _run(*args: str, timeout: float = 180) -> subprocess.CompletedProcess:
    return subprocess.run([str(SCRIPT), *args], capture_output=True, text=True, timeout=timeout)


def is_running() -> bool:
    return _run("status", timeout=60).returncode == 0


def start_cluster(nodes: int = 2) -> bool:
    """Start the cluster (no-op if up). Returns True if it was already up."""
    was_running = is_running()
    res = _run("start", "--nodes", str(nodes))
    if res.returncode != 0:
        raise ClusterError(f"local-slurm start failed:\n{res.stdout}{res.stderr}")
    return was_running


def stop_cluster() -> None:
    res = _run("stop", timeout=120)
    if res.returncode != 0:
        raise ClusterError(f"local-slurm stop failed:\n{res.stdout}{res.stderr}")


def running_cluster(nodes: int = 2):
    """Generator for a pytest fixture (conftest.py: one per run): a started cluster's environment.

    Skips where Slurm cannot be started, but fails instead when CI runs as root
    (CI must run the Slurm tests). Stops the cluster afterwards unless it was
    already running.
    """
    import pytest

    reason = unavailable_reason()
    if reason is not None:
        if os.environ.get("CI") and hasattr(os, "geteuid") and os.geteuid() == 0:
            pytest.fail(f"CI as root must run the Slurm test, but: {reason}")
        pytest.skip(reason)
    was_running = start_cluster(nodes=nodes)
    try:
        yield cluster_env()
    finally:
        if not was_running:  # leave a cluster someone else started running
            stop_cluster()


def cluster_env(base: dict | None = None) -> dict:
    """`base` (default os.environ) with SLURM_CONF pointing at the local
    cluster and no Slurm variables inherited from an outer allocation."""
    env = {
        k: v
        for k, v in (os.environ if base is None else base).items()
        if not k.startswith(("SLURM_", "SBATCH_", "SRUN_", "SALLOC_"))
    }
    env["SLURM_CONF"] = str(state_dir() / "etc" / "slurm.conf")
    env["PATH"] = env.get("PATH", "/usr/bin:/bin") + ":/usr/sbin:/sbin"
    return env


def job_state(job_id: str, env: dict | None = None) -> str | None:
    """Current state of a job (None if Slurm does not know it)."""
    env = cluster_env() if env is None else env
    res = subprocess.run(
        ["scontrol", "show", "job", "-o", job_id],
        env=env,
        capture_output=True,
        text=True,
        timeout=30,
    )
    match = re.search(r"\bJobState=(\S+)", res.stdout)
    if match:
        return match.group(1)
    try:  # purged from slurmctld's memory: the job completion log has it
        log = (state_dir() / "log" / "jobcomp.log").read_text()
    except OSError:
        return None
    found = re.findall(rf"\bJobId={job_id}\b.*?\bJobState=(\S+)", log)
    return found[-1] if found else None


def submit(script_path, env: dict | None = None, *, cwd=None, args: tuple = (),
           script_args: tuple = ()) -> str:  # fmt: skip
    """sbatch `script_path` (sbatch options `args`, script arguments `script_args`,
    submitted from `cwd`); returns the job id."""
    env = cluster_env() if env is None else env
    res = subprocess.run(
        ["sbatch", "--parsable", *args, str(script_path), *script_args],
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=60,
    )
    if res.returncode != 0:
        raise ClusterError(f"sbatch failed: {res.stdout}{res.stderr}")
    return res.stdout.strip().split(";")[0]


def wait_job(job_id: str, timeout: float = 120, env: dict | None = None) -> str:
    """Wait until the job has ended; return its final state.  On timeout the job
    is cancelled and TimeoutError raised."""
    env = cluster_env() if env is None else env
    deadline = time.monotonic() + timeout
    while True:
        state = job_state(job_id, env)
        if state in FINAL_STATES:
            return state
        if time.monotonic() > deadline:
            subprocess.run(["scancel", job_id], env=env, timeout=30)
            raise TimeoutError(f"job {job_id} still {state} after {timeout} s")
        time.sleep(0.2)


def submit_and_wait(
    script_path, timeout: float = 120, env: dict | None = None, *, cwd=None, args: tuple = ()
) -> tuple[str, str]:
    """sbatch `script_path` (extra sbatch options in `args`, run from `cwd`),
    wait until the job has ended and return (job_id, final state).  On
    timeout the job is cancelled and TimeoutError raised."""
    env = cluster_env() if env is None else env
    job_id = submit(script_path, env, cwd=cwd, args=args)
    return job_id, wait_job(job_id, timeout, env)
