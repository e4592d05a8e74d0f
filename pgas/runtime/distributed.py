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
* In a multi-process start, what C++ libraries write to file descriptor 1
  (gloo's ``[Gloo] Rank N is connected ...``) goes to stderr, and
  ``sys.stdout`` keeps the real stdout, so stdout carries only what the
  program prints (``PGAS_KEEP_STDOUT=1`` leaves file descriptor 1 alone). An
  unhandled exception then ends every process
  (:func:`pgas.runtime.failure.install_excepthook`), and ``MPI_Init``, which
  waits for processes that may never call it, runs under a watchdog process.
* The call is idempotent: a second call returns the same :class:`Info`.
* CPU collectives between processes use gloo (JAX's default here; set
  explicitly when unset).
* GPUs: :func:`local_device_ids` picks each process's devices from the
  launcher's local rank and the visible GPUs (``CUDA_VISIBLE_DEVICES``), so
  that one process per GPU gets its own GPU whether or not Slurm binds GPUs
  per task; ``PGAS_LOCAL_DEVICE_IDS`` (e.g. ``0,1``) overrides it.
* Public JAX only (``jax.distributed``, ``jax.config``).

The settings and, per launcher, the call to ``jax.distributed.initialize`` are
:mod:`pgas.runtime.startup`'s (its errors are offered here too); this module
makes the call, watches it and describes what started.

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

from pgas.runtime.launcher import Launch, detect_launcher, launch
from pgas.runtime.startup import (
    DEFAULT_TIMEOUT,  # noqa: F401 - offered here as before
    CoordinatorError,
    LauncherError,
    ProcessCountError,
    Settings,
    Start,
    plan_start,
    read_settings,
)

__all__ = [
    "CoordinatorError",
    "Info",
    "LauncherError",
    "ProcessCountError",
    "describe",
    "detect_launcher",
    "initialize",
    "local_device_ids",
]

WATCHDOG_EXIT_CODE = 75  # EX_TEMPFAIL: the job could not start; try again
_GRACE = 15  # JAX's own timeout is set this much later than the watchdog's


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


def local_device_ids(env: Mapping[str, str] | None = None) -> list[int] | None:
    """The GPUs this process should use, as JAX's ``local_device_ids``; None: JAX decides.

    From ``PGAS_LOCAL_DEVICE_IDS`` if set; else from the GPUs visible to this
    process (``CUDA_VISIBLE_DEVICES``, ``ROCR_VISIBLE_DEVICES``) and the
    launcher's processes on this node (``SLURM_LOCALID``/``SLURM_NTASKS_PER_NODE``,
    ``MPI_LOCALRANKID``/``MPI_LOCALNRANKS``, ``OMPI_COMM_WORLD_LOCAL_*``):

    - ``G`` visible GPUs shared by ``P`` processes on the node with ``P``
      dividing ``G`` (e.g. ``--gpus-per-node=4``, 4 tasks, no binding):
      ``G / P`` GPUs each, local rank ``r`` taking ``r*G/P`` onwards;
    - otherwise (one process on the node, one visible GPU, or fewer GPUs
      than processes: the launcher bound GPUs per task): every visible GPU;
    - no visible GPUs declared: ``None``; JAX then picks ``[local rank]``.

    >>> local_device_ids({"SLURM_JOB_ID": "1", "SLURM_PROCID": "5", "SLURM_LOCALID": "1",
    ...                   "SLURM_NTASKS_PER_NODE": "4", "CUDA_VISIBLE_DEVICES": "0,1,2,3"})
    [1]
    >>> local_device_ids({"SLURM_JOB_ID": "1", "SLURM_PROCID": "5", "SLURM_LOCALID": "1",
    ...                   "SLURM_NTASKS_PER_NODE": "4", "CUDA_VISIBLE_DEVICES": "2"})
    [0]
    """
    env = os.environ if env is None else env
    explicit = env.get("PGAS_LOCAL_DEVICE_IDS", "").strip()
    if explicit:
        try:
            return [int(x) for x in explicit.split(",")]
        except ValueError:
            raise LauncherError(
                f"PGAS_LOCAL_DEVICE_IDS = {explicit!r}: give device numbers separated by "
                f"commas, e.g. 0,1, or unset it"
            ) from None
    visible = env.get("CUDA_VISIBLE_DEVICES") or env.get("ROCR_VISIBLE_DEVICES")
    if not visible:
        return None
    count = len(visible.split(","))
    info: Launch = launch(env)
    procs, rank = info.local_size or 1, info.local_rank or 0
    if count == 1 or procs == 1 or count % procs or rank >= procs:
        return list(range(count))  # bound per task by the launcher: all are ours
    per = count // procs
    return list(range(rank * per, (rank + 1) * per))


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
    if _INFO is None:
        env = os.environ
        s = read_settings(coordinator_address, num_processes, process_id, local_device_count,
                          method, timeout, env)  # fmt: skip
        if s.local_devices is not None:
            from pgas.runtime.devices import use_cpu_devices

            use_cpu_devices(int(s.local_devices))
        if jax.config.jax_cpu_collectives_implementation in (None, "", "none"):
            jax.config.update("jax_cpu_collectives_implementation", "gloo")
        if jax.distributed.is_initialized():  # started by the user or another library
            _INFO = _make_info("external", s.coordinator)
        elif (start := plan_start(s, env)) is None:
            _INFO = _make_info("none", None)
        else:
            _python_stdout_only()
            _INFO = _run_start(start, s, env)
        if _INFO.process_count > 1:  # an unhandled error in any process ends all of them
            from pgas.runtime.failure import install_excepthook

            install_excepthook(_INFO.process_count)
    if verbose:
        describe()
    return _INFO


def _python_stdout_only() -> None:
    """Send what C++ libraries write to file descriptor 1 (gloo's ``[Gloo] Rank N is
    connected to ...`` lines) to stderr, and keep ``sys.stdout`` on the real stdout: stdout
    then carries only what the program prints (``--json``, the summary)."""
    if os.environ.get("PGAS_KEEP_STDOUT"):
        return
    try:
        sys.stdout.flush()
        real = os.dup(1)
        os.dup2(2, 1)
    except (OSError, ValueError, AttributeError):  # no real file descriptors (a notebook)
        return
    sys.stdout = open(real, "w", buffering=1, encoding=getattr(sys.stdout, "encoding", None),
                      errors=getattr(sys.stdout, "errors", None))  # fmt: skip


def _failure(start: Start, s: Settings, env, waited: float, cause: str) -> str:
    kwargs = start.kwargs
    coordinator = kwargs.get("coordinator_address", "(from Slurm)")
    return (
        f"could not start the {start.method} job: coordinator {coordinator}, "
        f"{kwargs.get('num_processes', 'launcher-defined')} process(es), this process "
        f"{kwargs.get('process_id', env.get('SLURM_PROCID', '?'))}, gave up after "
        f"{waited:.0f} s (timeout = {s.timeout} s, PGAS_INIT_TIMEOUT): {cause}. Check that "
        f"every process was started, that the address is reachable from all of them (host "
        f"name resolves, port open) and that num_processes matches the launch; raise "
        f"PGAS_INIT_TIMEOUT if processes start slowly"
    )


def _run_start(start: Start, s: Settings, env: Mapping[str, str]) -> Info:
    """Call ``jax.distributed.initialize`` under a watchdog; check the process count."""
    kwargs = dict(start.kwargs)
    ids = local_device_ids(env)
    if ids is not None:
        kwargs["local_device_ids"] = ids
    begin = time.monotonic()
    if start.method == "explicit" and kwargs["process_id"] != 0:
        cause = _probe(kwargs["coordinator_address"], s.timeout)
        if cause:
            raise CoordinatorError(_failure(start, s, env, time.monotonic() - begin, cause))
    # JAX's C++ client aborts the process (no Python exception) when the
    # coordination service times out; a watchdog says why first, then exits.
    kwargs["initialization_timeout"] = s.timeout + _GRACE
    done = threading.Event()

    def watchdog() -> None:
        if not done.wait(s.timeout):
            cause = "not every process connected in time"
            msg = _failure(start, s, env, time.monotonic() - begin, cause)
            print(f"pgas.distributed: CoordinatorError: {msg}", file=sys.stderr, flush=True)
            from pgas.runtime.failure import end_run

            end_run(WATCHDOG_EXIT_CODE)  # under mpiexec: MPI_Abort, so no process waits on

    threading.Thread(target=watchdog, name="pgas-init-watchdog", daemon=True).start()
    try:
        jax.distributed.initialize(**kwargs)
    except Exception as err:  # XlaRuntimeError (DEADLINE_EXCEEDED, UNAVAILABLE), ValueError
        text = str(err).splitlines()[0] if str(err) else ""
        cause = f"{type(err).__name__}: {text}"
        raise CoordinatorError(_failure(start, s, env, time.monotonic() - begin, cause)) from err
    finally:
        done.set()
    info = _make_info(start.method, kwargs.get("coordinator_address", "(from Slurm)"))
    expected = kwargs.get("num_processes")
    if expected is not None and info.process_count != expected:
        raise ProcessCountError(
            f"num_processes = {expected}, but JAX reports {info.process_count} processes; "
            f"check the launcher's process count"
        )
    return info


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
