"""Runner: run a :class:`~pgas.app.problem.Problem` on any backend and return one Result.

:func:`run` takes a problem and its :class:`~pgas.app.options.RunOptions`,
asks the backend (:mod:`pgas.app.backends`: ``auto``, ``explicit`` or ``mpi``)
for the run's plan once, and runs that plan, so the ``k`` in the
:class:`~pgas.app.results.Result` is the ``k`` that ran.

The runner does the rest, the same for every problem: it builds or restores
the state, compiles first (a warm-up run of the same program), times the
loop (its wall time, output waits included and reported apart:
``compute_seconds``, ``output_wait_seconds``), and between compiled chunks of
``snapshot_every`` steps hands each snapshot to a :class:`pgas.io.output.Stream`
(every process its own blocks, written to ``opts.out`` from a background thread while the next chunk
computes), then writes checkpoints (once the snapshots before are committed)
and advances a progress bar. Memory does not grow with the number of
snapshots.

What a run holds per process, from the first line to the last, on every
backend: its own blocks of the state and the buffers of the compiled loop over
them (on ``mpi``: the extended block and the kernel's temporaries of one slab
of rows), plus one host copy of its blocks for snapshots (made once, then
refilled at each snapshot once the one before is written). Never
a second state: the initial condition is built block by block, a slab of
cells at a time (:func:`pgas.from_function` with the problem's
``cells_per_value``, or each rank's cells on ``mpi``), and the run waits until
the devices hold it; the warm-up runs on the state itself, which is then freed
and built (or loaded from the checkpoint) again. Snapshots are written a row of
store chunks at a time (decoded row by row), checkpoints block by block; the
checksum (:func:`pgas.io.checksum.checksum`) and the final diagnostics are
computed from each process's blocks and combined with one small reduction.
Freed buffers go back to the system (:func:`pgas.runtime.memory.return_freed_buffers`,
called by :func:`pgas.app.platform.start`), and so does the memory XLA's compiler
freed, once the comm report and the warm-up have compiled
(:func:`pgas.runtime.memory.trim_freed_memory`); every process of a multi-process
job allocates from one heap (:func:`pgas.runtime.memory.share_one_heap`).
Nothing gathers the field unless asked: ``run(..., gather=True)`` puts the
whole decoded field in :attr:`Result.field` (on every process for ``auto`` and
``explicit``, on rank 0 for ``mpi``), at the cost of the whole field on each of
them.

The phases live in their own modules: :mod:`pgas.app.preflight` (what process
0 decides before anything is created), :mod:`pgas.app.state` (the mesh, the
state and whether it fits), :mod:`pgas.app.checkpointing`,
:mod:`pgas.app.streaming` (the snapshots), :mod:`pgas.app.progress`,
:mod:`pgas.app.jax_run` and :mod:`pgas.app.mpi_run` (a run on each kind of
backend) and :mod:`pgas.app.final` (the checksum and diagnostics); an iterative
problem runs in :mod:`pgas.app.iterate`. The names this module always offered
(:func:`build`, :func:`mesh_for`, :func:`chunk_length`, ...) are those modules'.
"""

from __future__ import annotations

from pgas.app import jax_run, mpi_run
from pgas.app.backends import get
from pgas.app.final import final_checksum
from pgas.app.options import RunOptions
from pgas.app.platform import Session
from pgas.app.problem import Problem
from pgas.app.progress import Progress, chunk_length
from pgas.app.results import Result
from pgas.app.state import build, build_params, check_memory, mesh_for
from pgas.app.streaming import scratch_store

__all__ = [
    "run",
    "build",
    "build_params",
    "check_memory",
    "mesh_for",
    "chunk_length",
    "scratch_store",
    "final_checksum",
]


def run(problem: Problem, opts: RunOptions, session: Session | None = None,
        meta: dict | None = None, output=None, gather: bool = False) -> Result:  # fmt: skip
    """Run ``problem`` for ``opts.steps`` steps on ``opts.backend``; see the module docstring.

    Args:
        problem: the problem.
        opts: the run's options (``opts.backend``: a name, or a
            :class:`~pgas.app.backends.Backend`).
        session: what :func:`pgas.app.platform.start` found (default: one process here).
        meta: identifies the problem in checkpoints (default ``{"example": name}``).
        output: a :class:`pgas.io.output.Output` (the field's name, dims, attributes and
            diagnostics) for the snapshots streamed to ``opts.out`` (or, with only
            ``opts.plot``, to :func:`scratch_store`); default ``Output()``. Its
            diagnostics of the final field go to :attr:`Result.diagnostics`.
        gather: also gather the final (decoded) field into :attr:`Result.field`
            (every process; rank 0 on ``mpi``); the whole field on each of them.

    >>> import numpy as np
    >>> from pgas.app.problem import checksum, demo
    >>> r = run(demo(), RunOptions(steps=3, devices=2))
    >>> r.backend, r.devices, r.checksum == checksum(np.arange(8, dtype="float32")), r.field
    ('auto', 2, True, None)
    """
    backend = get(opts.backend)
    if session is None:
        from pgas.app.platform import describe

        session = Session() if backend.launched else Session(**describe())
    if problem.iterative:  # until its test holds, at most opts.steps steps
        from pgas.app import iterate

        return iterate.run(problem, opts, backend, session, gather)
    progress = Progress(opts.steps, opts.quiet, session.rank, problem.name)
    try:
        if backend.launched:
            return mpi_run.run(problem, opts, backend, progress, output, gather)
        return jax_run.run(problem, opts, backend, session, progress,
                           meta or {"example": problem.name}, output, gather)  # fmt: skip
    finally:
        progress.close()
