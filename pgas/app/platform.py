"""Platform: start JAX on the platform and devices a run asks for, or MPI for the mpi backend.

:func:`start` runs once per process, before any JAX array exists:

- ``--platform cpu`` sets JAX's platform to the CPU and asks for ``--devices N``
  virtual CPU devices (:func:`pgas.use_cpu_devices`); ``gpu`` asks for the GPU
  platform; ``auto`` keeps JAX's default (a GPU where the CUDA plugin is
  installed, else the CPU with ``N`` virtual devices).
- ``--devices N`` beyond the devices the platform has stops with
  :class:`~pgas.errors.DeviceCountError` naming the fix (``--platform cpu`` for N
  virtual CPU devices, or fewer devices).
- Under ``mpiexec``/``srun`` (or with ``--distributed``) it starts JAX's
  multi-process runtime (:func:`pgas.distributed.initialize`).
- ``--backend mpi`` runs NumPy blocks: it only checks that an MPI launcher
  started the process and says how to launch it otherwise.

When JAX has started already (a test calling an example's ``main`` in its own
process), the devices it has are used: ``--devices N`` picks N of them.
:func:`describe` names the platform and the device kind for summaries, JSON and
dataset attributes. Only public JAX is used.
"""

from __future__ import annotations

import dataclasses
import sys

import numpy as np

from pgas.app.backends import get
from pgas.errors import DeviceCountError, PgasError

__all__ = ["Session", "start", "describe", "select"]


@dataclasses.dataclass(frozen=True)
class Session:
    """What :func:`start` found: this process's rank and where the run goes.

    Attributes:
        rank: this process's index (JAX process index or MPI rank).
        processes: processes in the run.
        multiprocess: a multi-process JAX run (the mesh spans all processes).
        platform: ``cpu``, ``gpu`` (``cuda``/``rocm`` devices) or ``numpy`` for mpi.
        device_kind: the device model as JAX names it.
    """

    rank: int = 0
    processes: int = 1
    multiprocess: bool = False
    platform: str = "cpu"
    device_kind: str = "cpu"


def describe() -> dict[str, str]:
    """``{"platform": ..., "device_kind": ...}`` of JAX's default devices.

    >>> describe()["platform"]
    'cpu'
    """
    import jax

    device = jax.devices()[0]
    platform = "gpu" if device.platform in ("cuda", "rocm", "gpu") else device.platform
    return {"platform": platform, "device_kind": str(device.device_kind)}


def select(platform: str, devices: int | None) -> None:
    """Point JAX at ``platform`` with ``devices`` devices, then check it has them.

    Raises:
        DeviceCountError: too few devices on the platform, or no GPU for ``gpu``.
        PgasError: an unknown platform.

    >>> select("auto", None)
    """
    import jax

    from pgas.runtime.devices import use_cpu_devices

    if platform not in ("auto", "cpu", "gpu"):
        raise PgasError(f"platform = {platform!r}: choose auto, cpu or gpu")
    if platform != "auto":  # no effect once JAX has started
        # JAX's "gpu" asks for CUDA *and* ROCm and fails where one plugin is missing:
        # for gpu, let JAX pick from the plugins present, then check it found a GPU.
        jax.config.update("jax_platforms", None if platform == "gpu" else platform)
    if devices is not None and platform != "gpu":
        try:
            use_cpu_devices(devices)
        except DeviceCountError:
            pass  # JAX started already (in-process callers): pick from what it has
    try:
        found = describe()
        have = len(jax.devices())
    except RuntimeError as err:
        raise DeviceCountError(
            f"--platform {platform}: JAX found no such device ({str(err).splitlines()[0]}); "
            f'install JAX\'s GPU plugin (pip install -e ".[cuda]") or run --platform cpu'
        ) from None
    if platform == "gpu" and found["platform"] != "gpu":
        raise DeviceCountError(
            f"--platform gpu: JAX runs on {found['platform']} here; install JAX's GPU plugin "
            f'(pip install -e ".[cuda]") or run --platform cpu'
        )
    if platform == "cpu" and found["platform"] != "cpu":
        raise DeviceCountError(
            f"--platform cpu: JAX started on {found['platform']} before the platform was "
            f"chosen; set JAX_PLATFORMS=cpu in the environment"
        )
    if devices is not None and devices > have and found["platform"] == "cpu":
        raise DeviceCountError(
            f"--devices {devices}: JAX started with {have} CPU device(s) in this process before "
            f"--devices was read; ask for --devices {have} or fewer"
        )
    if devices is not None and devices > have:
        raise DeviceCountError(
            f"--devices {devices}: JAX has {have} {found['platform']} device(s) "
            f"({found['device_kind']}); ask for --devices {have} or fewer, or run "
            f"--platform cpu for {devices} virtual CPU devices"
        )


def _start_mpi(script: str) -> Session:
    from pgas.references import mpi

    if not mpi.launched():
        raise PgasError(
            f"--backend mpi runs under an MPI launcher: start it with `mpiexec -n 4 "
            f"{sys.executable} {script} --backend mpi ...` (or use --backend auto/explicit "
            f"with --devices N)"
        )
    world = mpi.MPI.COMM_WORLD
    return Session(world.rank, world.size, False, "cpu", "numpy (mpi4py)")


def check_fits(devices: int | None, shape) -> None:
    """Refuse a device count the field cannot be split over, before any device is created.

    Raises:
        DeviceCountError: some mesh axis would have more devices than cells.

    >>> check_fits(4, (1001,))
    >>> check_fits(5000, (1001,))  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    pgas.errors.DeviceCountError: --devices 5000: ... use at most 1001 devices
    """
    if devices is None or shape is None:
        return
    from pgas.grid.decomposition import dims_create
    from pgas.runtime.failure import launched_processes

    total = devices * launched_processes()
    dims = dims_create(total, len(shape))
    for axis, (d, n) in enumerate(zip(dims, shape, strict=True)):
        if d > n:
            raise DeviceCountError(
                f"--devices {devices}: the field {tuple(shape)} split over {total} device(s) "
                f"(mesh {tuple(dims)}) leaves devices without a cell along axis {axis} ({n} "
                f"cells); use at most {_most(shape)} devices"
            )


def _most(shape) -> int:
    import math

    from pgas.grid.decomposition import dims_create

    return max(p for p in range(1, min(math.prod(shape), 4096) + 1)
               if all(d <= n for d, n in zip(dims_create(p, len(shape)), shape)))  # fmt: skip


def start(opts, script: str, dtype: str | None = None, shape=None) -> Session:
    """Start the run's platform for :class:`pgas.options.RunOptions` ``opts``.

    Args:
        opts: the run's options (backend, platform, devices, distributed, dtype, ...).
        script: the program's file, for the launch line of ``--backend mpi``.
        dtype: the stored field's dtype (default ``opts.dtype``); 8-byte types turn
            on JAX's 64-bit mode.
        shape: the field's shape: a device count it cannot be split over is refused
            before any device exists (:func:`check_fits`).

    Raises:
        PgasError: no launcher for ``--backend mpi``, ``--compare`` under a launcher.
        DeviceCountError: the platform lacks the devices asked for.
    """
    import jax

    from pgas.runtime import distributed
    from pgas.runtime.memory import return_freed_buffers, share_one_heap

    return_freed_buffers()  # a process's peak is the blocks it holds, not ones it freed
    mpi, launched = get(opts.backend).launched, distributed.detect_launcher() != "none"
    if mpi or opts.distributed or launched:
        share_one_heap()  # one of several processes: memory per process is the measure
    if mpi:
        return _start_mpi(script)
    check_fits(opts.devices, shape)
    if opts.distributed or launched:
        if opts.compare:
            raise PgasError(
                "--compare starts its own processes; run it in one process, not under "
                "mpiexec/srun and without --distributed"
            )
        if opts.platform != "auto":
            jax.config.update("jax_platforms", opts.platform)
        info = distributed.initialize(local_device_count=opts.devices, verbose=opts.verbose)
        session = Session(info.process_id, info.process_count, info.process_count > 1,
                          **describe())  # fmt: skip
    else:
        select(opts.platform, opts.devices)
        session = Session(**describe())
        if opts.verbose:
            distributed.describe()
    if np.dtype(dtype or opts.dtype).itemsize == 8:
        jax.config.update("jax_enable_x64", True)
    return session
