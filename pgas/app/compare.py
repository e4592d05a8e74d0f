"""Compare backends: the same problem, automatic vs explicit vs MPI, side by side.

:func:`compare` runs a :class:`~pgas.problem.Problem` through
:func:`pgas.runner.run` on

- ``auto``: the global-view ``step`` under :func:`pgas.run` (Shardy places the
  communication),
- ``explicit``: the local ``kernel`` with ``ppermute`` halos under ``shard_map``
  (:mod:`pgas.explicit`),
- ``mpi``: the same kernel on NumPy blocks with mpi4py ``Sendrecv`` halos
  (:mod:`pgas.mpi`), in ``mpiexec -n P`` worker processes it launches itself,

and returns one :class:`pgas.results.Result` per backend: time per step, cell
updates per second, halo messages and bytes per physical step (from the
compiled HLO on the JAX paths, counted on the MPI path; all senders together),
the steps per exchange ``k`` and a checksum of the final field
(:mod:`pgas.io.checksum`: every process hashes its own blocks; no gather).
:func:`pgas.results.format_table` prints them; equal checksums mean bitwise
equal fields. Timings exclude compilation and set-up and are one run each:
compare ratios within a table, not across machines.

Command line: ``pgas compare examples/heat1d/heat1d.py:problem --steps 100``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from pgas.app import options
from pgas.app.backends import BACKENDS, get
from pgas.app.options import RunOptions
from pgas.app.problem import load_problem
from pgas.app.results import Result, format_table
from pgas.app.runner import run
from pgas.errors import PgasError

__all__ = ["compare", "run_mpi", "mpiexec_path", "print_comparison"]


def mpiexec_path() -> str:
    """The ``mpiexec`` next to this Python (the ``mpich`` wheel's), else the one on PATH.

    >>> mpiexec_path().endswith("mpiexec")
    True
    """
    here = Path(sys.executable).parent / "mpiexec"
    if here.exists():
        return str(here)
    found = shutil.which("mpiexec")
    if not found:
        raise PgasError("mpiexec not found; install the MPI wheel with `pip install mpi4py mpich`")
    return found


def run_mpi(source: str, steps: int, ranks: int, timeout: float = 600.0,
            steps_per_exchange: int | str = "auto", gather: bool = False,
            **kwargs) -> Result:  # fmt: skip
    """Run the problem named by ``source`` on the MPI backend in ``mpiexec -n ranks``.

    The workers build their own blocks from the problem's ``init`` and check
    that ``mpiexec`` started ``ranks`` of them (:func:`pgas.mpi.require_launcher`);
    with ``gather``, rank 0 gathers the final field to a temporary ``.npy`` that
    this process reads into :attr:`Result.field`.

    Raises:
        PgasError: when the job fails or times out, with the workers' stderr.
    """
    with tempfile.TemporaryDirectory(prefix="pgas-mpi-") as tmp:
        out = os.path.join(tmp, "field.npy")
        cmd = [mpiexec_path(), "-n", str(ranks), sys.executable, "-m", "pgas.app.compare",
               "--worker", source, "--ranks", str(ranks), "--steps", str(steps),
               "--steps-per-exchange", str(steps_per_exchange), "--kwargs", json.dumps(kwargs),
               "--out", out] + (["--gather"] if gather else [])  # fmt: skip
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired as err:
            raise PgasError(f"mpiexec -n {ranks} did not finish within {timeout} s") from err
        if proc.returncode != 0:
            raise PgasError(
                f"mpiexec -n {ranks} failed (exit {proc.returncode}):\n"
                f"{proc.stderr.strip()[-2000:]}"
            )
        d = json.loads(proc.stdout.strip().splitlines()[-1])
        return Result.from_dict(d, field=np.load(out) if gather else None)


def _worker(source: str, ranks: int, steps: int, k: int | str, kwargs: dict, out: str,
            gather: bool = False) -> None:  # fmt: skip
    from pgas.references import mpi

    with mpi.abort_on_error():
        mpi.require_launcher(ranks)
        problem = load_problem(source, **kwargs)
        r = run(problem, RunOptions(backend="mpi", steps=steps, steps_per_exchange=k),
                gather=gather)  # fmt: skip
        if r.rank == 0:
            if gather:
                np.save(out, r.field)
            print(json.dumps(r.to_dict()), flush=True)


def compare(
    source: str,
    steps: int,
    *,
    devices: int | None = None,
    ranks: int | None = None,
    backends: Sequence[str] = tuple(BACKENDS),
    steps_per_exchange: int | str = "auto",
    gather: bool = False,
    **kwargs,
) -> list[Result]:
    """Run one problem on several backends; see the module docstring.

    Args:
        source: ``"file.py:factory"`` or ``"module:factory"`` of the problem.
        steps: time steps.
        devices: devices for the JAX backends (default: all local devices).
        ranks: MPI ranks (default: the same number as devices).
        backends: which backends to run.
        steps_per_exchange: ``k`` (an int >= 1 or ``"auto"``) on every backend.
        gather: also return each backend's final field (:attr:`Result.field`);
            the whole field in this process (and on rank 0 of ``mpi``).
        **kwargs: passed to the problem factory.

    >>> [r.backend for r in compare("pgas.problem:demo", 2, devices=2, backends=["auto"])]
    ['auto']
    """
    import jax

    chosen = [get(b) for b in backends]
    problem = load_problem(source, **kwargs)
    if np.dtype(problem.dtype).itemsize == 8:  # a float64 problem needs 64-bit JAX
        jax.config.update("jax_enable_x64", True)
    results = []
    for backend in chosen:
        if backend.launched:
            n = ranks or devices or len(jax.local_devices())
            results.append(run_mpi(source, steps, n, steps_per_exchange=steps_per_exchange,
                                   gather=gather, **kwargs))  # fmt: skip
        else:
            opts = RunOptions(backend=backend, steps=steps, devices=devices,
                              steps_per_exchange=steps_per_exchange)  # fmt: skip
            results.append(run(problem, opts, gather=gather))
    return results


def print_comparison(file: str, opts: RunOptions, kwargs: dict, factory: str = "problem") -> None:
    """Run an example's problem (``factory(**kwargs)``) on every backend and print the table."""
    results = compare(f"{os.path.abspath(file)}:{factory}", opts.steps, devices=opts.devices,
                      steps_per_exchange=opts.steps_per_exchange, **kwargs)  # fmt: skip
    print(f"comparison of backends ({opts.steps} steps, equal checksums = bitwise equal fields; "
          f"messages and bytes per physical step):")  # fmt: skip
    print(format_table(results), flush=True)


if __name__ == "__main__":  # the MPI worker that run_mpi starts under mpiexec
    ap = argparse.ArgumentParser(prog="pgas.compare worker")
    ap.add_argument("--worker", required=True)
    ap.add_argument("--ranks", type=int, required=True)
    ap.add_argument("--steps", type=int, required=True)
    ap.add_argument("--steps-per-exchange", type=options.steps_per_exchange, default="auto")
    ap.add_argument("--kwargs", default="{}")
    ap.add_argument("--out", required=True)
    ap.add_argument("--gather", action="store_true")
    from pgas.runtime.failure import abort_on_error

    with abort_on_error():  # one failed rank ends them all
        a = ap.parse_args()
        _worker(a.worker, a.ranks, a.steps, a.steps_per_exchange, json.loads(a.kwargs), a.out,
                a.gather)  # fmt: skip
