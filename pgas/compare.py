"""Compare backends: the same problem, automatic vs explicit vs MPI, side by side.

:func:`compare` runs a :class:`~pgas.problem.Problem` on

- ``auto``: the global-view ``step`` under :func:`pgas.run` (Shardy places the
  communication),
- ``explicit``: the local ``kernel`` with ``ppermute`` halos under ``shard_map``
  (:mod:`pgas.explicit`),
- ``mpi``: the same kernel on NumPy blocks with mpi4py ``Sendrecv`` halos
  (:mod:`pgas.mpi`), in ``mpiexec -n P`` worker processes it launches itself,

and returns one :class:`Result` per backend: time per step, cell updates per
second, halo messages and bytes per step (from the compiled HLO on the JAX
paths, counted on the MPI path; all senders together), and a checksum of the
final field. :func:`format_table` prints them; equal checksums mean bitwise
equal fields. Timings exclude compilation and set-up and are one run each:
compare ratios within a table, not across machines.

Command line: ``pgas compare examples/heat1d/heat1d.py:problem --steps 100``.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

import jax
import numpy as np

from pgas.errors import PgasError
from pgas.problem import Problem, checksum, load_problem

__all__ = ["Result", "run_jax", "run_mpi", "compare", "format_table", "mpiexec_path"]

BACKENDS = ("auto", "explicit", "mpi")


@dataclasses.dataclass(frozen=True)
class Result:
    """One backend's run of a problem.

    >>> r = Result("auto", 1, 1, {"x": 1}, (8,), 10, 0.5, 0, 0, 0, "ab")
    >>> r.cell_updates_per_second
    160.0
    """

    backend: str
    devices: int
    processes: int
    mesh: dict
    shape: tuple[int, ...]
    steps: int
    seconds: float
    messages_per_step: int
    bytes_per_step: int
    ideal_bytes_per_step: int
    checksum: str
    comm: dict | None = None
    field: np.ndarray | None = dataclasses.field(default=None, repr=False, compare=False)

    @property
    def cell_updates_per_second(self) -> float:
        cells = int(np.prod(self.shape))
        return cells * self.steps / self.seconds if self.seconds > 0 else float("nan")

    def to_dict(self) -> dict:
        d = dataclasses.asdict(self)
        d.pop("field")
        d["shape"] = list(self.shape)
        d["cell_updates_per_second"] = self.cell_updates_per_second
        return d


def _mesh_for(problem: Problem, devices: int | None):
    from pgas.mesh import make_mesh

    return make_mesh(problem.mesh_axes, devices=devices)


def _build(problem: Problem, mesh):
    from pgas.array import from_function

    return from_function(problem.init, problem.shape, mesh, dtype=problem.dtype,
                         boundary=problem.boundary, halo=problem.halo or None)  # fmt: skip


def run_jax(problem: Problem, backend: str, steps: int, devices: int | None = None) -> Result:
    """Run ``problem`` in this process on the ``auto`` or ``explicit`` backend.

    >>> import pgas
    >>> from pgas.problem import _demo
    >>> run_jax(_demo(), "auto", 3, devices=1).checksum == checksum(np.arange(8, dtype="float32"))
    True
    """
    from pgas import explicit
    from pgas.loop import run
    from pgas.report import comm_report

    if backend not in ("auto", "explicit"):
        raise PgasError(f"backend = {backend!r}: run_jax runs 'auto' or 'explicit'")
    mesh = _mesh_for(problem, devices)
    if backend == "auto":
        fn = problem.step
        go = lambda u, n: run(problem.step, u, n)
    else:
        fn = lambda u: explicit.step(problem.kernel, u, problem.halo, problem.region)
        go = lambda u, n: explicit.run(problem.kernel, u, n, problem.halo, problem.region)
    report = comm_report(fn, _build(problem, mesh))
    jax.block_until_ready(go(_build(problem, mesh), 1).data)  # compile (the trip count is traced)
    u = _build(problem, mesh)
    jax.block_until_ready(u.data)
    start = time.perf_counter()
    u = go(u, steps)
    jax.block_until_ready(u.data)
    seconds = time.perf_counter() - start
    field = u.to_numpy()
    return Result(
        backend, mesh.size, jax.process_count(), dict(mesh.shape), problem.shape, steps, seconds,
        report.messages_total, report.bytes_total, report.ideal_bytes, checksum(field),
        report.to_dict(), field,
    )  # fmt: skip


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


def run_mpi(source: str, steps: int, ranks: int, timeout: float = 600.0, **kwargs) -> Result:
    """Run the problem named by ``source`` on the MPI backend in ``mpiexec -n ranks``.

    The workers build their own blocks from the problem's ``init``; rank 0
    gathers the final field to a temporary ``.npy`` that this process reads.

    Raises:
        PgasError: when the job fails or times out, with the workers' stderr.
    """
    with tempfile.TemporaryDirectory(prefix="pgas-mpi-") as tmp:
        out = os.path.join(tmp, "field.npy")
        cmd = [mpiexec_path(), "-n", str(ranks), sys.executable, "-m", "pgas.compare",
               "--worker", source, "--steps", str(steps), "--kwargs", json.dumps(kwargs),
               "--out", out]  # fmt: skip
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
        field = np.load(out)
    d.pop("cell_updates_per_second")
    d["shape"] = tuple(d["shape"])
    return Result(**d, field=field)


def _worker(source: str, steps: int, kwargs: dict, out: str) -> None:
    from pgas import mpi

    with mpi.abort_on_error():
        problem = load_problem(source, **kwargs)
        r = mpi.run(problem.kernel, problem.init, problem.shape, problem.dtype, steps,
                    problem.halo, problem.boundary, problem.region)  # fmt: skip
        if mpi.MPI.COMM_WORLD.rank == 0:
            np.save(out, r.field)
            size = mpi.MPI.COMM_WORLD.size
            result = Result(
                "mpi", size, size, {"ranks": list(r.dims)}, problem.shape, steps, r.seconds,
                r.messages_per_step, r.bytes_per_step, 0, checksum(r.field),
            )  # fmt: skip
            print(json.dumps(result.to_dict()), flush=True)


def compare(
    source: str,
    steps: int,
    *,
    devices: int | None = None,
    ranks: int | None = None,
    backends: Sequence[str] = BACKENDS,
    **kwargs,
) -> list[Result]:
    """Run one problem on several backends; see the module docstring.

    Args:
        source: ``"file.py:factory"`` or ``"module:factory"`` of the problem.
        steps: time steps.
        devices: devices for the JAX backends (default: all local devices).
        ranks: MPI ranks (default: the same number as devices).
        backends: which backends to run.
        **kwargs: passed to the problem factory.
    """
    unknown = [b for b in backends if b not in BACKENDS]
    if unknown:
        raise PgasError(f"backends {unknown} unknown; choose from {BACKENDS}")
    problem = load_problem(source, **kwargs)
    results = []
    for backend in backends:
        if backend == "mpi":
            n = ranks or devices or len(jax.local_devices())
            results.append(run_mpi(source, steps, n, **kwargs))
        else:
            results.append(run_jax(problem, backend, steps, devices))
    return results


def format_table(results: Sequence[Result]) -> str:
    """The comparison as a text table; ``equal`` compares checksums with the first row.

    >>> r = Result("auto", 2, 1, {"x": 2}, (8,), 10, 0.5, 4, 16, 8, "abcdef0123456789")
    >>> format_table([r]).splitlines()[1].split()[-1]
    'yes'
    """
    head = (f"{'backend':<9} {'devices/ranks':>13} {'ms/step':>8} {'Mcell/s':>8} {'msgs/step':>10} "
            f"{'bytes/step':>11} {'ideal/dev':>10} {'checksum':<17} equal")  # fmt: skip
    lines = [head]
    ref = results[0].checksum if results else None
    for r in results:
        who = r.devices if r.backend != "mpi" else r.processes
        lines.append(
            f"{r.backend:<9} {who:>13} {1e3 * r.seconds / max(r.steps, 1):>8.3f} "
            f"{r.cell_updates_per_second / 1e6:>8.1f} {r.messages_per_step:>10} "
            f"{r.bytes_per_step:>11} {r.ideal_bytes_per_step or '-':>10} {r.checksum[:16]:<17} "
            f"{'yes' if r.checksum == ref else 'NO'}"
        )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m pgas.compare`` (and ``pgas compare``): see :mod:`pgas.cli`."""
    from pgas.cli import main as cli_main

    return cli_main(["compare", *(argv if argv is not None else sys.argv[1:])])


if __name__ == "__main__":
    if "--worker" in sys.argv:
        import argparse

        ap = argparse.ArgumentParser()
        ap.add_argument("--worker")
        ap.add_argument("--steps", type=int)
        ap.add_argument("--kwargs", default="{}")
        ap.add_argument("--out", required=True)
        a = ap.parse_args()
        _worker(a.worker, a.steps, json.loads(a.kwargs), a.out)
    else:
        sys.exit(main())
