"""A run's snapshots: when it takes them, where they go, what they say, and their closing.

Contract: a run snapshots only what it writes or draws (:func:`snapshot_every`:
``--snapshot-every`` with ``--out`` or ``--plot``). :func:`open_stream` makes the
:class:`pgas.io.output.Stream` of such a run: every process writes its own
blocks of the decoded field, a row of store chunks at a time, to ``--out`` (or,
with only ``--plot``, to :func:`scratch_store`) from a background thread while
the next chunk computes; a restart appends to the store it continues.
:func:`run_attrs` are the store's attributes known before the run starts
(process 0 writes them once). :func:`closed_after` closes the stream after the
run (committing the last snapshot) or aborts it on an error.
"""

from __future__ import annotations

import contextlib
import dataclasses

from pgas.app.options import RunOptions
from pgas.app.problem import Problem

__all__ = ["snapshot_every", "scratch_store", "run_attrs", "open_stream", "closed_after"]


def scratch_store(picture: str) -> str:
    """Where a run with ``--plot`` but no ``--out`` keeps its snapshots until drawn.

    >>> scratch_store("out/heat.png")
    'out/heat.png.snapshots.zarr'
    """
    return f"{picture}.snapshots.zarr"


def snapshot_every(opts: RunOptions) -> int | None:
    """Steps between snapshots, or None: a run snapshots only what it writes or draws.

    >>> snapshot_every(RunOptions(snapshot_every=5)), snapshot_every(RunOptions(snapshot_every=5,
    ...                                                                         out="a.zarr"))
    (None, 5)
    """
    return opts.snapshot_every if opts.snapshot_every and (opts.out or opts.plot) else None


def run_attrs(problem, opts, backend, platform, device_kind, devices, processes, mesh, plan,
              start) -> dict:  # fmt: skip
    """The run's attributes known before it starts (process 0 writes them once).

    >>> from types import SimpleNamespace
    >>> from pgas.app.backends import get
    >>> from pgas.app.problem import demo
    >>> plan = SimpleNamespace(steps_per_exchange=1, note="")  # what a backend's plan says
    >>> a = run_attrs(demo(), RunOptions(), get("auto"), "cpu", "cpu", 2, 1, {"x": 2}, plan, 0)
    >>> a["example"], a["backend"], a["mesh"], a["steps_per_exchange"]
    ('demo', 'auto', {'x': 2}, 1)
    """
    from pgas.app.results import versions

    return {"title": f"pgas example {problem.name}", "example": problem.name,
            "backend": backend.name, "mesh": mesh, "devices": devices, "processes": processes,
            "platform": platform, "device_kind": device_kind, "dtype": opts.dtype,
            "steps_per_exchange": plan.steps_per_exchange,
            "steps_per_exchange_note": plan.note, "snapshot_every": opts.snapshot_every,
            "start_step": start, **versions()}  # fmt: skip


def open_stream(problem: Problem, opts: RunOptions, output, attrs: dict, axes, comm,
                processes: int, start: int):  # fmt: skip
    """The :class:`pgas.io.output.Stream` of a run with ``--out`` or ``--plot``, else None.

    Args:
        problem: the problem (its cells, dtype and ``decode``).
        opts: the run's options.
        output: the :class:`pgas.io.output.Output` of the snapshots, or None (``Output()``).
        attrs: the store's attributes (:func:`run_attrs`).
        axes: the block axes of the state (the store's chunks follow its blocks).
        comm: the processes' communicator (mpi4py), or None for one process.
        processes: how many processes write blocks.
        start: the step the run starts from (a restart appends after it).

    >>> from pgas.app.problem import demo
    >>> open_stream(demo(), RunOptions(), None, {}, None, None, 1, 0) is None  # no --out
    True
    """
    if not snapshot_every(opts):
        return None
    from pgas.io.blocks import block_chunks, decoded_dtype, split_chunks
    from pgas.io.output import Output, Stream

    output = output or Output()
    if output.dims is None:
        output = dataclasses.replace(output, dims=tuple(problem.mesh_axes))
    cells = tuple(problem.cell_shape or problem.shape)
    factor = [-(-c // s) for c, s in zip(cells, problem.shape)]  # cells per stored value
    dtype = decoded_dtype(problem.decode, problem.dtype, len(cells))
    restart = start if opts.restart and start > 0 else None
    # the runner decided (process 0, before anything was created) that --out may be replaced;
    # the scratch store of --plot is pgas's own
    overwrite = opts.overwrite or opts.restart or not opts.out
    return Stream(opts.out or scratch_store(opts.plot[0]), output, cells, dtype, problem.decode,
                  split_chunks(block_chunks(axes, factor), dtype.itemsize), attrs, restart,
                  comm, processes,
                  overwrite)  # fmt: skip


@contextlib.contextmanager
def closed_after(stream):
    """Close ``stream`` after the block (it commits the last snapshot); abort it on an error.

    >>> with closed_after(None):  # a run without snapshots: nothing to close
    ...     pass
    """
    if stream is None:
        yield
        return
    try:
        yield
    except BaseException:
        stream.abort()
        raise
    stream.close()
