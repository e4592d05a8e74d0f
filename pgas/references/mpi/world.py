"""The MPI library, and checks that the launcher and the library agree.

A script that uses :mod:`pgas.mpi` is started with ``mpiexec -n P`` (or
``srun``). Two things go wrong in practice, and both are caught here:

- the script was started with plain ``python``: :func:`require_launcher`
  says how to launch it;
- the ``mpiexec`` belongs to another MPI library than the one mpi4py was
  built against (Open MPI's ``mpirun`` starting an mpi4py on MPICH, or the
  reverse): every process then comes up as its own one-rank world, and a
  4-rank run silently becomes four 1-rank runs. :func:`check_world` compares
  ``COMM_WORLD.size`` with the count the launcher announced
  (``PMI_SIZE``, ``OMPI_COMM_WORLD_SIZE``, ``SLURM_STEP_NUM_TASKS``) and
  says how to pair them.

:func:`abort_on_error` ends every rank when one raises.
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
import traceback
from collections.abc import Iterator

try:
    from mpi4py import MPI
except ImportError as _err:  # pragma: no cover - exercised in a subprocess test
    raise ImportError(
        f"pgas.mpi needs mpi4py and an MPI library ({_err}); install both with "
        f"`pip install mpi4py mpich`"
    ) from _err

from pgas.errors import DeviceCountError
from pgas.runtime.failure import ABORT_GRACE
from pgas.runtime.launcher import MPI_ENV, launch

__all__ = ["MPI", "abort_on_error", "check_world", "launched", "require_launcher"]


@contextlib.contextmanager
def abort_on_error() -> Iterator[None]:
    """End every rank when one raises (context manager or decorator).

    With more than one rank, an exception prints ``rank R of P`` and the
    traceback to stderr and calls ``COMM_WORLD.Abort(1)``, so ``mpiexec``
    returns within seconds instead of hanging in the next collective. With one
    rank the exception propagates normally.

    >>> with abort_on_error():
    ...     pass
    """
    try:
        yield
    except Exception:
        world = MPI.COMM_WORLD
        if world.size == 1:
            raise
        sys.stderr.write(
            f"pgas.mpi: rank {world.rank} of {world.size} failed, aborting "
            f"all ranks:\n{traceback.format_exc()}"
        )
        sys.stderr.flush()
        time.sleep(ABORT_GRACE)  # mpiexec's proxies lost the message when Abort came at once
        world.Abort(1)


def launched() -> bool:
    """Whether this process was started by an MPI launcher (``mpiexec``/``srun``).

    True when ``COMM_WORLD`` has more than one rank or a launcher's environment
    variable (``PMI_RANK``, ``OMPI_COMM_WORLD_SIZE``, ...) is set; a plain
    ``python script.py`` gives False.

    >>> isinstance(launched(), bool)
    True
    """
    return MPI.COMM_WORLD.size > 1 or any(k in os.environ for k in MPI_ENV)


def _library() -> str:
    return MPI.Get_library_version().splitlines()[0].strip()


def _pairing(ranks: int) -> str:
    mpiexec = os.path.join(os.path.dirname(sys.executable), "mpiexec")
    return (
        f"`python -m mpi4py --mpi-library` names the library mpi4py uses; launch with that "
        f"library's mpiexec, e.g. the mpich wheel's `{mpiexec} -n {ranks}` in this "
        f"environment, or rebuild mpi4py against the launcher's MPI "
        f"(`pip install --no-binary mpi4py mpi4py`)"
    )


def check_world(expected: int | None = None) -> int:
    """Check that ``COMM_WORLD`` holds the ranks that were launched; return its size.

    Args:
        expected: the rank count the caller launched (e.g. a worker started
            with ``--ranks 4``); ``None`` checks only against the launcher.

    Returns:
        ``COMM_WORLD.size``.

    Raises:
        DeviceCountError: the launcher announced another count than
            ``COMM_WORLD`` has (``mpiexec`` and mpi4py's MPI library differ),
            or ``COMM_WORLD`` differs from ``expected``.

    >>> check_world() >= 1
    True
    """
    size = MPI.COMM_WORLD.size
    info = launch()
    if info.launcher == "mpi" and info.size is not None and info.size != size:
        raise DeviceCountError(
            f"COMM_WORLD has {size} rank(s) but the launcher started {info.size} "
            f"({info.size_from}={info.size}): that mpiexec belongs to another MPI library "
            f"than mpi4py's ({_library()}), so every process runs alone. {_pairing(info.size)}"
        )
    if expected is not None and size != expected:
        _wrong_count(expected, size, info.launcher)
    return size


def _wrong_count(expected: int, size: int, launcher: str) -> None:
    script = " ".join(sys.argv) if sys.argv and sys.argv[0] else "script.py"
    how = f"`mpiexec -n {expected} python {script}`"
    if size == 1 and launcher == "none":
        raise DeviceCountError(
            f"expected_ranks = {expected}, but this process was started without an MPI "
            f"launcher (COMM_WORLD has 1 rank); launch it with {how}"
        )
    if size == 1 and expected > 1 and launcher == "mpi":
        raise DeviceCountError(
            f"expected_ranks = {expected}, but COMM_WORLD has 1 rank although an mpiexec "
            f"started this process: that mpiexec may belong to another MPI library than "
            f"mpi4py's ({_library()}). {_pairing(expected)}"
        )
    raise DeviceCountError(
        f"expected_ranks = {expected}, but COMM_WORLD has {size} ranks; launch with {how}"
    )


def require_launcher(expected_ranks: int) -> None:
    """Fail early, saying how to launch, unless ``COMM_WORLD`` has ``expected_ranks``.

    Raises:
        DeviceCountError: started without ``mpiexec``, with another rank count,
            or with the ``mpiexec`` of another MPI library (see :func:`check_world`).

    >>> require_launcher(1)   # a plain `python` process is one rank
    """
    check_world(expected_ranks)
