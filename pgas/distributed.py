"""Multi-process start-up: one call that works under ``mpiexec``, Slurm ``srun`` or alone.

Contract of :func:`initialize`:

* Values are taken, in this order, from the explicit arguments, then the
  environment overrides ``PGAS_COORDINATOR`` (``host:port``),
  ``PGAS_NUM_PROCESSES``, ``PGAS_PROCESS_ID``, ``PGAS_LOCAL_DEVICES`` (CPU
  devices per process), ``PGAS_LAUNCHER`` (``mpi``, ``slurm`` or ``none``)
  and ``PGAS_INIT_TIMEOUT`` (seconds, default 60), then the launcher.
* Launcher detection (:func:`detect_launcher`): ``mpiexec`` (``PMI_RANK``/
  ``PMI_SIZE`` of MPICH's hydra, ``OMPI_COMM_WORLD_SIZE``, ``PMIX_RANK``)
  wins over Slurm, because JAX would otherwise read the Slurm variables of the
  surrounding allocation, which describe the wrong job. Under ``mpiexec`` the
  ranks come from mpi4py (``cluster_detection_method="mpi4py"``) and rank 0
  picks a free port for the coordinator and broadcasts it. Under ``srun``
  (``SLURM_JOB_ID`` plus ``SLURM_STEP_NODELIST``/``SLURM_PROCID``) JAX's own
  Slurm detection is used. With none of these and no coordinator, nothing is
  started: one process, no coordinator.
* A declared process count that differs from the launcher's raises
  :class:`ProcessCountError` naming both values before anything is started;
  a coordinator that cannot be reached raises :class:`CoordinatorError`
  after at most the timeout.
* JAX's C++ runtime ends the process without a Python exception when the
  coordination service times out; so a watchdog prints a
  :class:`CoordinatorError` message and exits with status
  :data:`WATCHDOG_EXIT_CODE` (75) when not every process has connected after
  the timeout. An explicitly given coordinator that does not answer at all
  raises :class:`CoordinatorError` in Python (processes other than 0 try a
  TCP connection first).
* The call is idempotent: a second call returns the same :class:`Info`.
* CPU collectives between processes use gloo (JAX's default here; set
  explicitly when unset).

>>> info = initialize()          # single process: nothing to start
>>> info.process_count, info.method
(1, 'none')
>>> initialize() is info
True
"""

from __future__ import annotations

import dataclasses
import os
import socket
import sys
import threading
import time
from collections.abc import Mapping

import jax

from pgas.errors import PgasError

__all__ = [
    "CoordinatorError",
    "Info",
    "LauncherError",
    "ProcessCountError",
    "describe",
    "detect_launcher",
    "initialize",
]

_MPI_ENV = ("PMI_RANK", "PMI_SIZE", "OMPI_COMM_WORLD_SIZE", "PMIX_RANK")
_LAUNCHERS = ("mpi", "slurm", "none")
DEFAULT_TIMEOUT = 60
WATCHDOG_EXIT_CODE = 75  # EX_TEMPFAIL: the job could not start; try again
_GRACE = 15  # JAX's own timeout is set this much later than the watchdog's


class LauncherError(PgasError):
    """A launcher or start-up setting that is unknown, incomplete or inconsistent."""


class ProcessCountError(LauncherError):
    """The declared process count or id differs from what the launcher started."""


class CoordinatorError(LauncherError):
    """The JAX coordinator could not be started or reached in time."""


@dataclasses.dataclass(frozen=True)
class Info:
    """What :func:`initialize` found and started.

    Attributes:
        process_id: this process's index (``jax.process_index()``).
        process_count: number of processes (``jax.process_count()``).
        local_device_count: devices of this process.
        global_device_count: devices of all processes.
        method: ``"mpi4py"``, ``"slurm"``, ``"explicit"``, ``"external"``
            (JAX was initialised by someone else) or ``"none"`` (one process).
        coordinator: ``host:port`` of the coordinator, or None.
        platform: device platform (``"cpu"``, ``"gpu"``, ...).
    """

    process_id: int
    process_count: int
    local_device_count: int
    global_device_count: int
    method: str
    coordinator: str | None
    platform: str


_INFO: Info | None = None


def detect_launcher(env: Mapping[str, str] | None = None) -> str:
    """Which launcher started this process: ``"mpi"``, ``"slurm"`` or ``"none"``.

    ``mpiexec`` variables win over Slurm ones (``mpiexec`` inside an allocation).

    Args:
        env: the environment to inspect; default ``os.environ``.

    >>> detect_launcher({"PMI_RANK": "0", "PMI_SIZE": "2", "SLURM_JOB_ID": "7"})
    'mpi'
    >>> detect_launcher({"SLURM_JOB_ID": "7", "SLURM_STEP_NODELIST": "n1", "SLURM_PROCID": "0"})
    'slurm'
    >>> detect_launcher({"SLURM_JOB_ID": "7"})  # inside salloc/sbatch but not srun
    'none'
    """
    env = os.environ if env is None else env
    if any(k in env for k in _MPI_ENV):
        return "mpi"
    if "SLURM_JOB_ID" in env and ("SLURM_STEP_NODELIST" in env or "SLURM_PROCID" in env):
        return "slurm"
    return "none"


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


def initialize(
    coordinator_address: str | None = None,
    num_processes: int | None = None,
    process_id: int | None = None,
    local_device_count: int | None = None,
    method: str | None = None,
    verbose: bool = False,
    timeout: int | None = None,
) -> Info:
    """Start JAX's multi-process runtime the way this process was launched.

    Args:
        coordinator_address: ``host:port`` of process 0's coordinator
            (env ``PGAS_COORDINATOR``); default: from the launcher.
        num_processes: expected process count (env ``PGAS_NUM_PROCESSES``);
            checked against the launcher's.
        process_id: this process's id (env ``PGAS_PROCESS_ID``).
        local_device_count: CPU devices per process (env ``PGAS_LOCAL_DEVICES``);
            must be given before JAX's backend starts.
        method: ``"mpi"`` (alias ``"mpi4py"``), ``"slurm"`` or ``"none"``
            (env ``PGAS_LAUNCHER``); default: :func:`detect_launcher`.
        verbose: print :func:`describe` on process 0.
        timeout: seconds to wait for all processes to connect
            (env ``PGAS_INIT_TIMEOUT``, default 60).

    Returns:
        An :class:`Info`; the same object on every later call.

    Raises:
        ProcessCountError: declared and launched process counts differ.
        CoordinatorError: the coordinator could not be reached within ``timeout``.
        LauncherError: an unknown method or an incomplete explicit set-up.

    >>> initialize().process_id
    0
    """
    global _INFO
    if _INFO is not None:
        if verbose:
            describe()
        return _INFO
    env = os.environ
    coordinator = coordinator_address or env.get("PGAS_COORDINATOR") or None
    nproc = num_processes if num_processes is not None else _env_int("PGAS_NUM_PROCESSES", env)
    pid = process_id if process_id is not None else _env_int("PGAS_PROCESS_ID", env)
    ndev = (
        local_device_count
        if local_device_count is not None
        else _env_int("PGAS_LOCAL_DEVICES", env)
    )
    if timeout is None:
        timeout = _env_int("PGAS_INIT_TIMEOUT", env) or DEFAULT_TIMEOUT
    launcher = (method or env.get("PGAS_LAUNCHER") or detect_launcher(env)).lower()
    launcher = {"mpi4py": "mpi", "mpiexec": "mpi", "srun": "slurm"}.get(launcher, launcher)
    if launcher not in _LAUNCHERS:
        raise LauncherError(
            f"method = {launcher!r} (argument or PGAS_LAUNCHER) is not a launcher pgas knows; "
            f"use one of {_LAUNCHERS}"
        )
    if nproc is not None and nproc < 1:
        raise ProcessCountError(f"num_processes = {nproc}: give a whole number >= 1")

    if ndev is not None:
        from pgas.mesh import use_cpu_devices

        use_cpu_devices(int(ndev))
    if jax.config.jax_cpu_collectives_implementation in (None, "", "none"):
        jax.config.update("jax_cpu_collectives_implementation", "gloo")

    from jax._src import distributed as _dist

    if _dist.global_state.client is not None:  # started by the user or another library
        _INFO = _make_info("external", _dist.global_state.coordinator_address)
        return _finish(verbose)

    kwargs: dict = {"initialization_timeout": int(timeout)}
    if launcher == "mpi":
        from mpi4py import MPI

        comm = MPI.COMM_WORLD
        size, rank = comm.Get_size(), comm.Get_rank()
        _check_count("num_processes (PGAS_NUM_PROCESSES)", nproc, size, "mpiexec")
        _check_count("process_id (PGAS_PROCESS_ID)", pid, rank, "mpiexec (as this rank)")
        if size == 1 and coordinator is None:
            _INFO = _make_info("none", None)
            return _finish(verbose)
        if coordinator is None:
            coordinator = f"{socket.gethostname()}:{_free_port()}" if rank == 0 else None
            coordinator = comm.bcast(coordinator, root=0)
        kwargs.update(coordinator_address=coordinator, num_processes=size, process_id=rank,
                      cluster_detection_method="mpi4py")  # fmt: skip
        name = "mpi4py"
    elif launcher == "slurm":
        ntasks = _env_int("SLURM_NTASKS", env) or _env_int("SLURM_NPROCS", env)
        if ntasks is not None:
            _check_count("num_processes (PGAS_NUM_PROCESSES)", nproc, ntasks, "srun (SLURM_NTASKS)")
        procid = _env_int("SLURM_PROCID", env)
        if procid is not None:
            _check_count("process_id (PGAS_PROCESS_ID)", pid, procid, "srun (SLURM_PROCID)")
        if ntasks == 1 and coordinator is None:
            _INFO = _make_info("none", None)
            return _finish(verbose)
        if coordinator is not None:
            kwargs["coordinator_address"] = coordinator
        # Slurm binds GPUs per task through CUDA_VISIBLE_DEVICES: then every
        # visible device belongs to this task (JAX would pick [SLURM_LOCALID]).
        visible = env.get("CUDA_VISIBLE_DEVICES") or env.get("ROCR_VISIBLE_DEVICES")
        if visible:
            kwargs["local_device_ids"] = list(range(len(visible.split(","))))
        kwargs["cluster_detection_method"] = "slurm"
        coordinator = coordinator or "(from Slurm)"
        name = "slurm"
    else:
        if coordinator is None and nproc in (None, 1):
            _INFO = _make_info("none", None)
            return _finish(verbose)
        missing = [n for n, v in (("coordinator_address (PGAS_COORDINATOR)", coordinator),
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
        kwargs.update(coordinator_address=coordinator, num_processes=nproc, process_id=pid,
                      cluster_detection_method="deactivate")  # fmt: skip
        name = "explicit"

    def failure(waited: float, cause: str) -> str:
        return (
            f"could not start the {name} job: coordinator {coordinator}, "
            f"{kwargs.get('num_processes', 'launcher-defined')} process(es), this process "
            f"{kwargs.get('process_id', env.get('SLURM_PROCID', '?'))}, gave up after "
            f"{waited:.0f} s (timeout = {timeout} s, PGAS_INIT_TIMEOUT): {cause}. Check that "
            f"every process was started, that the address is reachable from all of them (host "
            f"name resolves, port open) and that num_processes matches the launch; raise "
            f"PGAS_INIT_TIMEOUT if processes start slowly"
        )

    start = time.monotonic()
    if name == "explicit" and pid != 0:
        cause = _probe(coordinator, timeout)
        if cause:
            raise CoordinatorError(failure(time.monotonic() - start, cause))
    # JAX's C++ client aborts the process (no Python exception) when the
    # coordination service times out; a watchdog says why first, then exits.
    kwargs["initialization_timeout"] = int(timeout) + _GRACE
    done = threading.Event()

    def watchdog() -> None:
        if not done.wait(timeout):
            msg = failure(time.monotonic() - start, "not every process connected in time")
            print(f"pgas.distributed: CoordinatorError: {msg}", file=sys.stderr, flush=True)
            os._exit(WATCHDOG_EXIT_CODE)

    threading.Thread(target=watchdog, name="pgas-init-watchdog", daemon=True).start()
    try:
        jax.distributed.initialize(**kwargs)
    except Exception as err:  # XlaRuntimeError (DEADLINE_EXCEEDED, UNAVAILABLE), ValueError
        text = str(err).splitlines()[0] if str(err) else ""
        raise CoordinatorError(
            failure(time.monotonic() - start, f"{type(err).__name__}: {text}")
        ) from err
    finally:
        done.set()
    _INFO = _make_info(name, kwargs.get("coordinator_address") or _coordinator())
    expected = kwargs.get("num_processes")
    if expected is not None and _INFO.process_count != expected:
        raise ProcessCountError(
            f"num_processes = {expected}, but JAX reports {_INFO.process_count} processes; "
            f"check the launcher's process count"
        )
    return _finish(verbose)


def _probe(address: str, timeout: float) -> str | None:
    """Try a TCP connection to ``host:port`` until it works or ``timeout`` passes."""
    host, _, port = address.rpartition(":")
    host = host.strip("[]")
    if not host or not port.isdigit():
        raise LauncherError(
            f"coordinator_address = {address!r} (or PGAS_COORDINATOR): write it as host:port, "
            f"e.g. node001:61440"
        )
    deadline = time.monotonic() + timeout
    last = ""
    while time.monotonic() < deadline:
        try:
            with socket.create_connection((host, int(port)), timeout=1.0):
                return None
        except OSError as err:
            last = f"{type(err).__name__}: {err}"
            time.sleep(0.25)
    return f"cannot connect to {address} ({last})"


def _coordinator() -> str | None:
    from jax._src import distributed as _dist

    return _dist.global_state.coordinator_address


def _make_info(method: str, coordinator: str | None) -> Info:
    return Info(
        process_id=jax.process_index(),
        process_count=jax.process_count(),
        local_device_count=jax.local_device_count(),
        global_device_count=jax.device_count(),
        method=method,
        coordinator=coordinator,
        platform=jax.devices()[0].platform,
    )


def _finish(verbose: bool) -> Info:
    if verbose:
        describe()
    assert _INFO is not None
    return _INFO


def describe(print_it: bool = True) -> str:
    """The process and device layout, one line per process; printed on process 0.

    Needs no communication: every process knows all global devices.

    Args:
        print_it: print the text on process 0 (every process returns it).

    >>> print(describe(print_it=False).splitlines()[0])  # doctest: +ELLIPSIS
    pgas: 1 process(es), ... device(s) ...
    """
    devices = jax.devices()
    procs = sorted({d.process_index for d in devices})
    kinds = sorted({d.device_kind for d in devices})
    method = _INFO.method if _INFO is not None else "not initialised"
    coord = _INFO.coordinator if _INFO is not None else None
    lines = [
        f"pgas: {len(procs)} process(es), {len(devices)} device(s) ({', '.join(kinds)}), "
        f"launcher {method}, coordinator {coord}"
    ]
    for p in procs:
        mine = [d for d in devices if d.process_index == p]
        ids = ",".join(str(d.id) for d in mine)
        pk = ", ".join(sorted({f"{d.platform}:{d.device_kind}" for d in mine}))
        lines.append(f"  process {p}: {len(mine)} local device(s) [{ids}] {pk}")
    text = "\n".join(lines)
    if print_it and jax.process_index() == 0:
        print(text, flush=True)
    return text
