"""One process fails, the run ends: every process of a launched run stops within seconds.

A process of a multi-process run that raises and simply exits leaves the
others waiting: in JAX's distributed start-up, in a gloo collective, in an MPI
call. ``mpiexec`` (MPICH's hydra) waits for them; ``srun`` does too unless the
cluster sets ``KillOnBadExit``. :func:`abort_on_error` wraps a program's
``main`` so that an unhandled exception, or a ``SystemExit`` with a non-zero
status (``argparse``'s bad option), in any process of a launched run:

1. prints ``pgas: process R of P failed, ending the run`` and the error (its
   traceback, or the message of a ``SystemExit``) to stderr, then
2. ends every process of the run, with the same status:

   - under ``mpiexec`` (and ``srun --mpi=pmi2`` with mpi4py):
     ``MPI.COMM_WORLD.Abort(status)``, as ``python -m mpi4py`` does;
   - under ``srun`` without MPI: ``scancel`` of this job step
     (``SLURM_JOB_ID.SLURM_STEP_ID``), then ``os._exit(status)``;
   - otherwise (processes started by hand with ``PGAS_COORDINATOR``):
     ``os._exit(status)``; the others stop at their next collective.

In one process (no launcher, or a launcher that started one) nothing changes:
the exception propagates as usual, so tests and notebooks see it.

:func:`pgas.distributed.initialize` also calls :func:`install_excepthook` when
it starts a multi-process run, so any script (the user's own too) that lets an
exception reach the top level after that ends the whole run the same way, and
so does one that ends with ``sys.exit(status)``, ``status`` non-zero: that
process prints ``pgas: process R of P exited with status S; ending the others``
and ends them (else it would wait at exit for the others in JAX's shutdown and
they for it in their next collective: a hang). To see the status, pgas puts its
own ``sys.exit`` in place (the same, but for this); a ``SystemExit`` that is
caught ends nothing, and one raised by hand (``raise SystemExit(3)``) is not seen.

>>> with abort_on_error():
...     pass
>>> launched_processes({})
1
"""

from __future__ import annotations

import atexit
import contextlib
import os
import shutil
import subprocess
import sys
import threading
import time
import traceback
from collections.abc import Iterator, Mapping

from pgas.runtime.launcher import detect_launcher, launch

__all__ = ["abort_on_error", "end_run", "exit_status", "install_excepthook", "launched_processes"]

ABORT_GRACE = 1.0  # seconds: mpiexec's proxies lost a failed rank's last lines without it


def launched_processes(env: Mapping[str, str] | None = None) -> int:
    """How many processes the launcher (or ``PGAS_NUM_PROCESSES``) started; 1 if none.

    >>> launched_processes({"PMI_RANK": "0", "PMI_SIZE": "4"})
    4
    """
    env = os.environ if env is None else env
    info = launch(env)
    if info.size:
        return info.size
    declared = env.get("PGAS_NUM_PROCESSES", "").strip()
    return int(declared) if declared.isdigit() else 1


def _status(exc: BaseException) -> int:
    if isinstance(exc, SystemExit):
        code = exc.code
        return code if isinstance(code, int) and 0 < code < 256 else 1
    return 1


def end_run(status: int = 1, env: Mapping[str, str] | None = None) -> None:
    """End every process of this launched run now (see the module); does not return."""
    env = os.environ if env is None else env
    sys.stdout.flush()
    sys.stderr.flush()
    time.sleep(ABORT_GRACE)  # let the launcher forward the message before it ends the processes
    launcher = detect_launcher(env)
    if launcher == "mpi" or "mpi4py.MPI" in sys.modules:
        try:  # importing mpi4py.MPI initialises MPI if nobody has yet
            from mpi4py import MPI

            if not MPI.Is_finalized() and MPI.COMM_WORLD.size > 1:
                MPI.COMM_WORLD.Abort(status)
        except Exception:  # noqa: BLE001 - fall through to the other ways out
            pass
    job, step = env.get("SLURM_JOB_ID"), env.get("SLURM_STEP_ID") or env.get("SLURM_STEPID")
    if launcher == "slurm" and job and step and shutil.which("scancel"):
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            subprocess.run(["scancel", "--quiet", f"{job}.{step}"], timeout=20, check=False)
    os._exit(status)


def _say(rank, processes: int, detail: str) -> None:
    sys.stderr.write(f"pgas: process {rank} of {processes} failed, ending the run:\n{detail}\n")
    sys.stderr.flush()


def _rank(env: Mapping[str, str]):
    rank = launch(env).rank
    return env.get("PGAS_PROCESS_ID", "?") if rank is None else rank


_INSTALLED = False


def install_excepthook(processes: int) -> None:
    """From now on, an exception that reaches the top level, or a ``sys.exit`` with a
    non-zero status that ends the program, ends every process of the run (see the module).

    Does nothing for one process; idempotent.
    """
    global _INSTALLED
    if processes <= 1 or _INSTALLED:
        return
    _INSTALLED = True
    previous = sys.excepthook

    def hook(kind, value, tb) -> None:
        if issubclass(kind, KeyboardInterrupt):
            previous(kind, value, tb)
            return
        detail = "".join(traceback.format_exception(kind, value, tb)).rstrip()
        _say(_rank(os.environ), processes, detail)
        end_run(1)

    sys.excepthook = hook
    _watch_exits(processes)


def exit_status(code: object) -> int:
    """The process status of ``sys.exit(code)``, as Python's exit gives it.

    >>> exit_status(None), exit_status(3), exit_status(256), exit_status("bad option")
    (0, 3, 0, 1)
    """
    if code is None:
        return 0
    if isinstance(code, int):
        return int(code) & 0xFF
    return 1


_EXITING: tuple[int, int] | None = None  # (id, status) of a non-zero sys.exit under way


class _Exit(SystemExit):
    """``sys.exit``'s exception in a multi-process run: marks the process as exiting with
    its status until the exception is freed while Python code runs (it was caught and
    dropped). One that ends the program is freed by the interpreter itself, outside any
    Python frame, and the mark stays for the exit handler of :func:`_watch_exits`."""

    def __init__(self, code: object = None):
        global _EXITING
        super().__init__(code)
        _EXITING = (id(self), exit_status(code))

    def __del__(self) -> None:
        global _EXITING
        if _EXITING is not None and _EXITING[0] == id(self) and _freed_by_python():
            _EXITING = None


def _freed_by_python() -> bool:
    """Whether Python code runs under the ``__del__`` that calls this (else the
    interpreter itself freed the object: it is handling the program's exit)."""
    try:
        sys._getframe(2)
    except ValueError:
        return False
    return True


def _watch_exits(processes: int) -> None:
    """Make ``sys.exit`` raise :class:`_Exit` and end the others at exit if one ended the
    program with a non-zero status."""
    original = sys.exit

    def exit(code: object = None) -> None:  # noqa: A001 - sys.exit's own name and signature
        if exit_status(code) == 0 or threading.current_thread() is not threading.main_thread():
            original(code)  # a clean exit, or the end of a thread only
        raise _Exit(code)

    exit.__doc__ = original.__doc__
    sys.exit = exit

    def end_others() -> None:
        if _EXITING is not None:
            status, rank = _EXITING[1], _rank(os.environ)
            sys.stderr.write(f"pgas: process {rank} of {processes} exited with status "
                             f"{status}; ending the others\n")  # fmt: skip
            end_run(status)

    atexit.register(end_others)  # after JAX's and mpi4py's: runs before their shutdowns


@contextlib.contextmanager
def abort_on_error(env: Mapping[str, str] | None = None) -> Iterator[None]:
    """End every process of a launched run when this one fails (context manager).

    See the module. With one process the error propagates unchanged.
    """
    try:
        yield
    except (Exception, SystemExit) as exc:
        if isinstance(exc, SystemExit) and exc.code in (0, None):
            raise  # a clean exit
        env = os.environ if env is None else env
        processes = launched_processes(env)
        if processes <= 1:
            raise
        if isinstance(exc, SystemExit):
            detail = f"exit status {_status(exc)}" + (
                f": {exc.code}" if isinstance(exc.code, str) else " (its message is above)"
            )
        else:
            detail = traceback.format_exc().rstrip()
        _say(_rank(env), processes, detail)
        end_run(_status(exc), env)
