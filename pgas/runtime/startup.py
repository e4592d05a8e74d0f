"""How this process would join a multi-process job: its start-up settings and JAX's call.

Contract: :func:`read_settings` takes each start-up value from the explicit
argument, else its ``PGAS_*`` environment override (``PGAS_COORDINATOR``,
``PGAS_NUM_PROCESSES``, ``PGAS_PROCESS_ID``, ``PGAS_LOCAL_DEVICES``,
``PGAS_LAUNCHER``, ``PGAS_INIT_TIMEOUT``), else the launcher
(:func:`pgas.runtime.launcher.detect_launcher`), and refuses an unknown launcher
or a count below 1. :func:`plan_start` turns the settings into the
:class:`Start` of ``jax.distributed.initialize`` for the launcher, or None when
there is nothing to start (one process): under ``mpiexec`` the ranks come from
mpi4py (``MPI_Init`` runs under a watchdog process) and rank 0 picks a free
coordinator port and broadcasts it; under ``srun`` JAX's Slurm detection is
used; with no launcher a coordinator, a process count and an id must all be
given. A declared process count or id that differs from the launcher's raises
:class:`ProcessCountError` naming both values. Nothing of JAX is started here:
:func:`pgas.runtime.distributed.initialize` makes the call.

>>> s = read_settings(None, None, None, None, "none", None, {})
>>> s.launcher, s.timeout, plan_start(s, {}) is None  # one process: nothing to start
('none', 60, True)
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import signal
import socket
import subprocess
from collections.abc import Mapping

from pgas.errors import PgasError
from pgas.runtime.launcher import detect_launcher

__all__ = [
    "CoordinatorError",
    "DEFAULT_TIMEOUT",
    "LauncherError",
    "ProcessCountError",
    "Settings",
    "Start",
    "plan_start",
    "read_settings",
]

_LAUNCHERS = ("mpi", "slurm", "none")
DEFAULT_TIMEOUT = 60


class LauncherError(PgasError):
    """A launcher or start-up setting that is unknown, incomplete or inconsistent."""


class ProcessCountError(LauncherError):
    """The declared process count or id differs from what the launcher started."""


class CoordinatorError(LauncherError):
    """The JAX coordinator could not be started or reached in time."""


def _env_int(name: str, env: Mapping[str, str]) -> int | None:
    value = env.get(name)
    if value is None or value.strip() == "":
        return None
    try:
        return int(value)
    except ValueError:
        raise LauncherError(
            f"{name} = {value!r} is not a whole number; set it to an integer or unset it"
        ) from None


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("", 0))
        return s.getsockname()[1]


def _check_count(name: str, declared: int | None, actual: int, launcher: str) -> None:
    if declared is not None and declared != actual:
        raise ProcessCountError(
            f"{name} = {declared}, but {launcher} started {actual} process(es); make them agree: "
            f"launch {declared} processes, or set {name} to {actual} (or unset it)"
        )


@dataclasses.dataclass(frozen=True)
class Settings:
    """The start-up values after arguments, ``PGAS_*`` overrides and the launcher."""

    coordinator: str | None
    num_processes: int | None
    process_id: int | None
    local_devices: int | None
    timeout: int
    launcher: str


def read_settings(coordinator, num_processes, process_id, local_devices, method, timeout,
                  env) -> Settings:  # fmt: skip
    """The start-up values: each argument, else its ``PGAS_*`` override in ``env``, else the
    launcher's (see :func:`pgas.runtime.distributed.initialize` for the arguments).

    Raises:
        LauncherError: an unknown launcher (``method`` or ``PGAS_LAUNCHER``), or an
            override that is not a whole number.
        ProcessCountError: a process count below 1.

    >>> read_settings(None, None, None, None, None, None, {"PGAS_NUM_PROCESSES": "4",
    ...               "PGAS_INIT_TIMEOUT": "5", "PMI_RANK": "0"})  # doctest: +NORMALIZE_WHITESPACE
    Settings(coordinator=None, num_processes=4, process_id=None, local_devices=None, timeout=5,
             launcher='mpi')
    """

    def pick(value, name):
        return value if value is not None else _env_int(name, env)

    launcher = (method or env.get("PGAS_LAUNCHER") or detect_launcher(env)).lower()
    launcher = {"mpi4py": "mpi", "mpiexec": "mpi", "srun": "slurm"}.get(launcher, launcher)
    if launcher not in _LAUNCHERS:
        raise LauncherError(
            f"method = {launcher!r} (argument or PGAS_LAUNCHER) is not a launcher pgas knows; "
            f"use one of {_LAUNCHERS}"
        )
    settings = Settings(
        coordinator=coordinator or env.get("PGAS_COORDINATOR") or None,
        num_processes=pick(num_processes, "PGAS_NUM_PROCESSES"),
        process_id=pick(process_id, "PGAS_PROCESS_ID"),
        local_devices=pick(local_devices, "PGAS_LOCAL_DEVICES"),
        timeout=int(timeout or _env_int("PGAS_INIT_TIMEOUT", env) or DEFAULT_TIMEOUT),
        launcher=launcher,
    )
    if settings.num_processes is not None and settings.num_processes < 1:
        raise ProcessCountError(
            f"num_processes = {settings.num_processes}: give a whole number >= 1"
        )
    return settings


@dataclasses.dataclass(frozen=True)
class Start:
    """How to call ``jax.distributed.initialize``: a method name and its arguments."""

    method: str
    kwargs: dict


def _mpi_start(s: Settings, env: Mapping[str, str]) -> Start | None:
    """Under ``mpiexec``: ranks from mpi4py, a coordinator port picked by rank 0."""
    # MPI_Init waits, holding Python's lock, for processes that may never call it (one that
    # failed before): a watchdog thread could not run, so a small shell process watches.
    message = (f"pgas.distributed: CoordinatorError: mpiexec's processes did not all start MPI "
               f"within {s.timeout} s (PGAS_INIT_TIMEOUT): one of them may have failed before "
               f"it (see its error); check the launch command")  # fmt: skip
    watchdog = subprocess.Popen(
        ["/bin/sh", "-c", f'sleep {int(s.timeout)}; echo "$1" >&2; kill -TERM {os.getpid()}; '
         f"sleep 2; kill -KILL {os.getpid()} 2>/dev/null", "pgas-mpi-watchdog", message],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, start_new_session=True,
    )  # fmt: skip
    try:
        return _mpi_start_after_init(s)
    finally:  # the whole group: an orphaned `sleep` would hold stderr (mpiexec waits on it)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(watchdog.pid, signal.SIGKILL)
        watchdog.wait()


def _mpi_start_after_init(s: Settings) -> Start | None:
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    size, rank = comm.Get_size(), comm.Get_rank()
    _check_count("num_processes (PGAS_NUM_PROCESSES)", s.num_processes, size, "mpiexec")
    _check_count("process_id (PGAS_PROCESS_ID)", s.process_id, rank, "mpiexec (as this rank)")
    if size == 1 and s.coordinator is None:
        return None
    coordinator = s.coordinator
    if coordinator is None:
        coordinator = f"{socket.gethostname()}:{_free_port()}" if rank == 0 else None
        coordinator = comm.bcast(coordinator, root=0)
    kwargs = dict(coordinator_address=coordinator, num_processes=size, process_id=rank,
                  cluster_detection_method="mpi4py")  # fmt: skip
    return Start("mpi4py", kwargs)


def _slurm_start(s: Settings, env: Mapping[str, str]) -> Start | None:
    """Under ``srun``: JAX's own Slurm detection, checked against the declared counts."""
    ntasks = _env_int("SLURM_NTASKS", env) or _env_int("SLURM_NPROCS", env)
    if ntasks is not None:
        _check_count("num_processes (PGAS_NUM_PROCESSES)", s.num_processes, ntasks,
                     "srun (SLURM_NTASKS)")  # fmt: skip
    procid = _env_int("SLURM_PROCID", env)
    if procid is not None:
        _check_count("process_id (PGAS_PROCESS_ID)", s.process_id, procid, "srun (SLURM_PROCID)")
    if ntasks == 1 and s.coordinator is None:
        return None
    kwargs: dict = {"cluster_detection_method": "slurm"}
    if s.coordinator is not None:
        kwargs["coordinator_address"] = s.coordinator
    return Start("slurm", kwargs)


def _explicit_start(s: Settings, env: Mapping[str, str]) -> Start | None:
    """No launcher: a coordinator, a process count and an id must all be given."""
    nproc, pid = s.num_processes, s.process_id
    if s.coordinator is None and nproc in (None, 1):
        return None
    missing = [n for n, v in (("coordinator_address (PGAS_COORDINATOR)", s.coordinator),
                              ("num_processes (PGAS_NUM_PROCESSES)", nproc),
                              ("process_id (PGAS_PROCESS_ID)", pid)) if v is None]  # fmt: skip
    if missing:
        raise LauncherError(
            f"no launcher detected (no mpiexec or srun variables), so pgas needs "
            f"{', '.join(missing)}; set them, or start the job with mpiexec or srun"
        )
    if not 0 <= pid < nproc:
        raise ProcessCountError(
            f"process_id = {pid} is outside 0..{nproc - 1} for num_processes = {nproc}; "
            f"give each process a distinct id below num_processes"
        )
    kwargs = dict(coordinator_address=s.coordinator, num_processes=nproc, process_id=pid,
                  cluster_detection_method="deactivate")  # fmt: skip
    return Start("explicit", kwargs)


_STARTS = {"mpi": _mpi_start, "slurm": _slurm_start, "none": _explicit_start}


def plan_start(s: Settings, env: Mapping[str, str]) -> Start | None:
    """The call that starts this process's job under ``s.launcher``, or None (one process).

    >>> s = read_settings("h:1", 2, 1, None, "none", None, {})
    >>> plan_start(s, {}).kwargs["process_id"], plan_start(s, {}).method
    (1, 'explicit')
    """
    return _STARTS[s.launcher](s, env)
