"""Output: an example's snapshots streamed to one store while its run goes on.

The runner (:mod:`pgas.runner`) runs compiled chunks of ``snapshot_every``
steps and hands each snapshot to a :class:`Stream` between chunks. The stream
takes this process's blocks of the field (host copies, never the whole field),
computes the example's global diagnostics from them (one small all-gather of
scalars per value, no field gather) and passes the blocks to a
:class:`pgas.snapshots.SnapshotWriter`, which writes them from a background
thread while the next chunk computes. Memory per process is one host copy of
its blocks (the snapshot in flight is written before the next is copied),
whatever the number of snapshots.

An :class:`Output` says what an example writes: the field's name and
dimensions, its own attributes and its diagnostics. Diagnostics are a function
``diagnostics(blocks, reduce) -> {name: value}``: ``blocks`` are this process's
decoded cell blocks, and ``reduce(op, local)`` (``op`` one of ``sum``,
``max``, ``min``) turns a local value into the global one, the same on every
process (the values of all processes are combined in rank order).

>>> import numpy as np
>>> total = lambda blocks, reduce: {"total": reduce("sum", sum(float(b.sum()) for b in blocks))}
>>> Output("u", ("x",), diagnostics=total).diagnostics([np.ones(3), np.ones(2)], local)
{'total': 5.0}
"""

from __future__ import annotations

import dataclasses
import os
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from pgas.io.attributes import netcdf_safe_attrs
from pgas.io.blocks import decode_piece, host_blocks, host_copy

__all__ = ["Output", "Stream", "local", "reducer", "update_attrs", "mpi_comm"]

Reduce = Callable[[str, Any], Any]
_OPS: dict[str, Callable] = {"sum": sum, "max": max, "min": min}


@dataclasses.dataclass(frozen=True)
class Output:
    """What an example writes per snapshot.

    Attributes:
        var: the field variable's name.
        dims: the spatial dimension names (default: the problem's mesh axes).
        attrs: the example's own attributes (written once, by process 0).
        diagnostics: ``diagnostics(blocks, reduce) -> {name: value}`` (see the
            module docstring), or None.
    """

    var: str = "u"
    dims: tuple[str, ...] | None = None
    attrs: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    diagnostics: Callable[[list[np.ndarray], Reduce], dict[str, Any]] | None = None


def local(op: str, value: Any) -> Any:
    """The ``reduce`` of one process holding everything: the value itself.

    >>> local("sum", 3.0)
    3.0
    """
    if op not in _OPS:
        raise ValueError(f"reduce op = {op!r}; use one of {sorted(_OPS)}")
    return value


def reducer(comm: Any, processes: int) -> Reduce:
    """``reduce(op, value)`` over the processes: MPI's allgather, JAX's, or none.

    >>> reducer(None, 1)("max", 2.0)
    2.0
    """
    if processes == 1:
        return local

    def reduce(op: str, value: Any) -> float:
        local(op, value)
        if comm is not None:
            values = comm.allgather(float(value))
        else:
            from jax.experimental import multihost_utils

            got = multihost_utils.process_allgather(np.asarray(value, np.float64))
            values = np.asarray(got).reshape(-1).tolist()
        return float(_OPS[op](values))  # in rank order: bitwise the same everywhere

    return reduce


def mpi_comm() -> Any:
    """``MPI.COMM_WORLD`` when ``mpiexec`` started this JAX process, else None (srun).

    >>> mpi_comm() is None  # not under mpiexec
    True
    """
    from pgas.runtime.launcher import detect_launcher

    if detect_launcher(os.environ) != "mpi":
        return None
    from mpi4py import MPI

    return MPI.COMM_WORLD


class Stream:
    """Snapshots of one run, handed to a :class:`~pgas.snapshots.SnapshotWriter`.

    Args:
        path: the store (``.zarr``: every process writes its blocks; ``.nc``:
            process 0 appends, receiving one snapshot at a time).
        output: what to write.
        shape, dtype: the decoded cells' global shape and dtype.
        decode: the problem's decode (stored values to cells), or None.
        chunks: Zarr chunk shape in cells (aligned to the blocks).
        attrs: run attributes (provenance), besides the example's.
        restart_step: append to the store from this step on (a restart), or None.
        comm: the writing processes' MPI communicator, or None (JAX's processes).
        processes: how many processes write.
        overwrite: replace an existing store when starting a new one.

    The writer is opened (collectively) at the first :meth:`write`, when the
    diagnostics' names and types are known.
    """

    def __init__(self, path, output: Output, shape, dtype, decode, chunks, attrs,
                 restart_step: int | None, comm: Any, processes: int,
                 overwrite: bool = False):  # fmt: skip
        self.path, self.output, self.shape, self.dtype = str(path), output, tuple(shape), dtype
        self.decode, self.chunks, self.attrs = decode, chunks, dict(attrs)
        self.restart_step, self.comm, self.processes = restart_step, comm, processes
        self.overwrite = overwrite
        self.reduce = reducer(comm, processes)
        self.writer = None
        self.host: list = []  # the last snapshot's host blocks, reused once it is written
        self.seconds = 0.0  # spent in write(): host copies, diagnostics, hand-over

    def write(self, step: int, field: Any, region: tuple[slice, ...] | None = None) -> None:
        """Hand the snapshot at ``step`` over: a GlobalArray, or a NumPy block and its region."""
        if region is None:  # JAX computes asynchronously: the chunk's time is not output's
            import jax

            jax.block_until_ready(field.data)
        t0 = time.perf_counter()
        if self.writer is not None:  # the previous snapshot written: its host copy is free
            self.writer.flush()
        if region is None:
            pieces = host_blocks(field, into=self.host)
        else:
            pieces = [host_copy((tuple(region), np.asarray(field)), next(iter(self.host), None))]
        self.host = pieces
        cells = [decode_piece(p, self.decode, self.shape)[1] for p in pieces]
        diagnostics = self.output.diagnostics
        values = diagnostics(cells, self.reduce) if diagnostics else {}
        del cells
        if self.writer is None:
            self._open({k: np.asarray(v).dtype for k, v in values.items()})
        allgather = region is None and self.comm is None and self.processes > 1
        nc = Path(self.path).suffix.lower() == ".nc"
        # pieces are host copies that stay untouched until the next write's flush: no more copies
        self.writer.write(step, field if (nc and allgather) else pieces, values, copy=False)
        self.seconds += time.perf_counter() - t0

    def flush(self) -> None:
        """Wait until the snapshot in flight is written everywhere (before a checkpoint)."""
        if self.writer is not None:
            t0 = time.perf_counter()
            self.writer.flush()
            self.seconds += time.perf_counter() - t0

    def close(self) -> None:
        """Wait for the last snapshot and commit it (collective)."""
        if self.writer is not None:
            t0 = time.perf_counter()
            self.writer.close()
            self.seconds += time.perf_counter() - t0

    def abort(self) -> None:
        """Stop without committing the snapshot in flight (the run failed)."""
        if self.writer is not None:
            self.writer.__exit__(RuntimeError, None, None)

    def _open(self, diagnostics: dict[str, np.dtype]) -> None:
        from pgas.io.snapshots import SnapshotWriter

        dims = self.output.dims
        self.writer = SnapshotWriter.open(
            self.path, name=self.output.var, dims=dims, shape=self.shape, dtype=self.dtype,
            attrs={**self.attrs, **self.output.attrs}, chunks=self.chunks, decode=self.decode,
            diagnostics=diagnostics, restart_step=self.restart_step, comm=self.comm,
            overwrite=self.overwrite,
        )  # fmt: skip


def update_attrs(path: str | os.PathLike[str], attrs: Mapping[str, Any]) -> None:
    """Process 0, after the writer closed: add the run's results to the store's attributes.

    Raises:
        SnapshotWriteError: they could not be written (a full disk); the store keeps
            its snapshots (a ``.nc`` file is put back as it was).

    >>> import tempfile, xarray as xr
    >>> path = tempfile.mkdtemp() + "/r.zarr"
    >>> from pgas.io.zarrstore import quiet_zarr
    >>> with quiet_zarr():
    ...     _ = xr.Dataset({"u": ("x", [1.0])}).to_zarr(path, zarr_format=3, consolidated=True)
    >>> update_attrs(path, {"checksum": "ab"})
    >>> xr.open_zarr(path).attrs["checksum"]
    'ab'
    """
    from pgas.io import formats
    from pgas.io.store import SnapshotWriteError, describe_failure

    try:
        formats.of(path).update_attrs(Path(path), netcdf_safe_attrs(attrs))
    except OSError as exc:  # a full disk: one message; the snapshots are all in the store
        raise SnapshotWriteError(
            f"adding the run's results to the attributes of {path} failed: "
            f"{describe_failure(exc, path)}; its snapshots are complete"
        ) from None
