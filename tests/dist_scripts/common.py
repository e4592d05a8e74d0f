"""Helpers shared by tests/runtime/test_distributed.py and tests/io/test_checkpoint.py."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
SCRIPTS = Path(__file__).resolve().parent
SIMULATE = SCRIPTS / "simulate.py"
MPIEXEC = Path(sys.executable).parent / "mpiexec"


def clean_env(**extra: str) -> dict[str, str]:
    """The test's environment without launcher variables, one CPU device per process."""
    drop = ("PMI", "OMPI_", "PMIX", "HYDRA", "SLURM", "PGAS_", "XLA_FLAGS")
    env = {k: v for k, v in os.environ.items() if not k.startswith(drop)}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    env.update(JAX_PLATFORMS="cpu", PGAS_LOCAL_DEVICES="1", PYTHONUNBUFFERED="1")
    env.update(extra)
    return env


def mpiexec(n: int, *args: str, timeout: float = 120, **env: str) -> subprocess.CompletedProcess:
    """``mpiexec -n n python args...`` with a timeout; output captured as text."""
    cmd = [str(MPIEXEC), "-n", str(n), sys.executable, *args]
    return subprocess.run(cmd, env=clean_env(**env), capture_output=True, text=True,
                          timeout=timeout, cwd=ROOT)  # fmt: skip


def heat_reference(steps: int, n: int = 1001) -> np.ndarray:
    u = np.sin(np.arange(n) / 10.0).astype(np.float32)
    for _ in range(steps):
        u[1:-1] = np.float32(0.5) * u[1:-1] + np.float32(0.25) * (u[:-2] + u[2:])
    return u


def life_reference(steps: int, shape=(30, 22)) -> np.ndarray:
    i, j = np.meshgrid(np.arange(shape[0]), np.arange(shape[1]), indexing="ij")
    g = ((i * 7 + j * 13 + (i * j) % 5) % 3 == 0).astype(np.uint8)
    for _ in range(steps):
        n = sum(np.roll(np.roll(g, dy, 0), dx, 1)
                for dy in (-1, 0, 1) for dx in (-1, 0, 1) if (dy, dx) != (0, 0))  # fmt: skip
        g = ((n == 3) | ((g == 1) & (n == 2))).astype(np.uint8)
    return g


def wait_for(path: Path, text: str, timeout: float, proc: subprocess.Popen) -> None:
    """Wait until ``text`` appears in the file ``path`` (a process's output)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.exists() and text in path.read_text(errors="replace"):
            return
        if proc.poll() is not None:
            raise AssertionError(f"process ended ({proc.returncode}) before {text!r}:\n"
                                 f"{path.read_text(errors='replace')[-3000:]}")  # fmt: skip
        time.sleep(0.1)
    tail = path.read_text(errors="replace")[-3000:] if path.exists() else ""
    raise AssertionError(f"no {text!r} after {timeout} s:\n{tail}")


def kill_after(cmd: list[str], log: Path, text: str, timeout: float) -> None:
    """Start ``cmd`` (its output to ``log``), SIGKILL its whole session once ``text`` shows."""
    import signal

    with open(log, "w") as f:
        proc = subprocess.Popen(cmd, env=clean_env(), stdout=f, stderr=subprocess.STDOUT,
                                start_new_session=True, cwd=ROOT)  # fmt: skip
    try:
        wait_for(log, text, timeout, proc)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
