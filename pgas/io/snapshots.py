"""Snapshots streamed to one store by every process while the run goes on.

A :class:`SnapshotWriter` is called between compiled chunks: ``write(step,
field, diagnostics)`` copies this process's blocks to the host (synchronously,
so the next chunk may donate the device buffers) and hands them to one
background thread that writes them while the next chunk computes. At most one
snapshot is in flight per process, so memory does not grow with the number of
snapshots.

Two formats, chosen by the path's suffix:

* ``.zarr``: every process writes its own region of each snapshot into one
  Zarr v3 store; no process holds the whole field. Chunks are ``(1,
  *chunks)``, by default one per block (:func:`block_chunks`). Where blocks are
  of unequal length (a size the process count does not divide), a chunk can
  straddle two blocks: each writer then holds an exclusive POSIX lock
  (``fcntl.lockf``) on ``.<store name>.locks/<chunk>.lock`` (beside the store,
  removed by :meth:`~SnapshotWriter.close`) while it writes a chunk it does
  not cover whole, so the read-modify-write of that chunk by one
  writer never interleaves with another's.
* ``.nc``: process 0 appends each snapshot to one netCDF-4 file. In a
  multi-process run process 0 receives one snapshot at a time (through MPI
  when ``comm`` is given, else through JAX's all-gather, which every process
  then holds briefly).

Protocol: process 0 alone looks at the path and creates the store (attributes,
coordinates) in :meth:`SnapshotWriter.open`, before any block; the other
processes wait for its answer and never look at a half-made store. A snapshot is *committed* (its
``time`` value appended and the arrays' length grown) by process 0 only after
every process has written its blocks, at the next :meth:`~SnapshotWriter.write`
or at :meth:`~SnapshotWriter.close`. An interrupted run therefore leaves a
store holding exactly the snapshots committed before; so does a write that fails
(a full disk): every process then raises :class:`SnapshotWriteError`, naming the
path, the cause and the snapshots the store keeps. A store that cannot be
created is removed again. ``restart_step=s``
reopens it and drops stored times ``>= s`` (also after a run on another
process count), so a restart neither duplicates nor loses a snapshot.

>>> import tempfile, numpy as np
>>> path = tempfile.mkdtemp() + "/run.zarr"
>>> with SnapshotWriter.open(path, name="u", dims=("x",), shape=(6,), dtype="float32",
...                          diagnostics=("max",)) as out:
...     for step in (0, 10):
...         u = np.full(6, step, np.float32)
...         out.write(step, u, {"max": float(u.max())}, region=(slice(0, 6),))
>>> import xarray as xr
>>> xr.open_zarr(path)["u"].sel(time=10).values.tolist()
[10.0, 10.0, 10.0, 10.0, 10.0, 10.0]
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import os
import shutil
import uuid
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from pgas.io import formats
from pgas.io.attributes import netcdf_safe_attrs
from pgas.io.blocks import Piece, Region, block_chunks, decode_piece, host_blocks
from pgas.io.dataset import (
    OutputPathError,
    ResultsError,
    check_writable,
    output_path,
)
from pgas.io.store import (
    Format,
    SnapshotError,
    SnapshotWriteError,
    StoreMismatchError,
    StoreSpec,
    describe_failure,
)
from pgas.runtime.group import Group

__all__ = [
    "SnapshotError",
    "StoreMismatchError",
    "SnapshotWriteError",
    "SnapshotWriter",
    "block_chunks",
    "host_blocks",
]

_TIME_CHUNK = 4096


# --------------------------------------------------------------------------
# Processes: rank, barrier with an error flag, gather to process 0
# --------------------------------------------------------------------------


class _Group(Group):
    """The processes writing one store: :class:`pgas.runtime.group.Group`, plus a gather."""

    def gather(self, pieces: list[Piece], out: np.ndarray | None) -> None:
        """Send every process's decoded pieces to process 0, which assembles them in ``out``."""
        if self.rank == 0:
            for region, cells in pieces:
                out[region] = cells
        if self.size == 1:
            return
        if self.comm is None:
            raise SnapshotError("gather needs an MPI communicator")  # guarded by the caller
        if self.rank != 0:
            self.comm.send([(r, c.shape, c.dtype.str) for r, c in pieces], dest=0, tag=71)
            for _, cells in pieces:
                self.comm.Send(np.ascontiguousarray(cells), dest=0, tag=72)
            return
        for source in range(1, self.size):
            for region, shape, dtype in self.comm.recv(source=source, tag=71):
                buffer = np.empty(shape, np.dtype(dtype))
                self.comm.Recv(buffer, source=source, tag=72)
                out[region] = buffer


# --------------------------------------------------------------------------
# The writer
# --------------------------------------------------------------------------


class SnapshotWriter:
    """Streams snapshots of one field into a ``.zarr`` store or ``.nc`` file; see the module.

    Make one with :meth:`open` (collective), call :meth:`write` on every
    process for every snapshot, then :meth:`close` (collective); or use it as a
    context manager.
    """

    def __init__(self, spec: StoreSpec, group: _Group, decode: Callable | None, stored: int):
        self.spec, self.group, self.decode = spec, group, decode
        self.count = stored  # snapshots in the store (committed or in flight)
        self._executor = concurrent.futures.ThreadPoolExecutor(1, "pgas-snapshots")
        self._pending: concurrent.futures.Future | None = None
        self._uncommitted: tuple[int, int, dict[str, float]] | None = None
        self._closed = False
        self._last_step: int | None = None
        self.format = formats.of(spec.path)
        self._store = self.format.writer(spec, group.rank)
        self._buffer: np.ndarray | None = None  # a gathered snapshot (not parallel formats)

    @classmethod
    def open(
        cls,
        path: str | os.PathLike[str],
        *,
        name: str,
        dims: Sequence[str],
        shape: Sequence[int],
        dtype: Any,
        attrs: Mapping[str, Any] | None = None,
        coords: Mapping[str, Any] | None = None,
        chunks: Sequence[int] | None = None,
        decode: Callable[[np.ndarray], np.ndarray] | None = None,
        diagnostics: Sequence[str] | Mapping[str, Any] = (),
        restart_step: int | None = None,
        comm: Any = None,
        overwrite: bool = False,
    ) -> SnapshotWriter:
        """Create (or, with ``restart_step``, reopen) the store; collective.

        Args:
            path: ``.zarr`` (every process writes its region) or ``.nc``
                (process 0 writes).
            name: the field variable.
            dims: the spatial dimension names, e.g. ``("y", "x")``.
            shape: the global shape in cells (after ``decode``).
            dtype: the dtype of the cells (after ``decode``).
            attrs: run attributes (provenance), written once by process 0;
                ``example``/``problem`` are compared on a restart.
            coords: optional 1-D coordinates of spatial dims (none by default:
                readers then use the cell index).
            chunks: cells per chunk along each spatial axis; use
                :func:`block_chunks` to align them to the blocks. Default: the
                whole field per snapshot.
            decode: maps a stored block to its cells (e.g. words to a uint8
                board); a whole number of cells per value along each axis.
            diagnostics: names of per-snapshot scalars (float64), or
                ``{name: dtype}``.
            restart_step: append to an existing store, dropping stored times
                ``>= restart_step``; ``None`` starts a new store.
            overwrite: replace an existing store or file at ``path`` when
                starting a new one (``restart_step=None``); default False: an
                existing one is an error, as xarray's ``to_zarr(mode="w-")``.
                The old one is moved aside and removed only once the new one
                exists, so the path never holds a mix of the two.
            comm: an MPI communicator of the writing processes (the MPI path,
                or a JAX run under ``mpiexec``); default: JAX's processes.

        Raises:
            OutputPathError: a bad suffix or an unwritable directory, or an
                existing ``path`` without ``overwrite``.
            StoreMismatchError: ``restart_step`` with a store of another problem.
            SnapshotWriteError: the store could not be created or reopened (a full
                disk, an I/O error); a store it began to create is removed.
        """
        group = _Group(comm)
        spec, stored, error = None, 0, None
        try:  # every process checks the arguments, without looking at the file system
            spec = _spec(path, name, dims, shape, dtype, attrs, coords, chunks, diagnostics)
            if group.rank == 0:  # the one process that looks at the path and creates the store
                stored = _prepare(spec, restart_step, overwrite)
        except ResultsError as exc:
            error = exc
        except OSError as exc:  # a full disk, an I/O error: one message, not a traceback
            error = SnapshotWriteError(f"opening {path} failed: {describe_failure(exc, path)}")
        failed, stored = group.agree(str(error) if error else None, stored)
        if error is not None:
            raise error
        if failed:
            raise SnapshotWriteError(f"opening {path} failed on {'; '.join(failed)}")
        return cls(spec, group, decode, stored)

    # ---- per snapshot ----------------------------------------------------------------
    def write(
        self,
        step: int,
        field: Any,
        diagnostics: Mapping[str, Any] | None = None,
        *,
        region: Region | None = None,
        copy: bool = True,
    ) -> None:
        """Hand one snapshot to the writer; collective, returns once the host copy is made.

        Args:
            step: the step number of the snapshot (increasing).
            field: a ``pgas.GlobalArray`` (its addressable blocks are written),
                this process's NumPy block with ``region``, or a list of
                ``(region, block)`` pairs (several blocks of this process).
            diagnostics: ``{name: value}`` for every name given to :meth:`open`
                (global values; process 0's are stored).
            region: the block's global slices in stored values (e.g.
                ``pgas.mpi.CartGrid.block()``), for a NumPy ``field``.
            copy: copy a list of pieces (``False``: the caller hands over blocks it
                will not change, e.g. fresh host copies).

        Raises:
            SnapshotWriteError: this or an earlier snapshot could not be written.
        """
        self._check_open()
        if self._last_step is not None and int(step) <= self._last_step:
            raise SnapshotError(
                f"step = {step} after step {self._last_step}; snapshots are written in "
                f"increasing step order (a restart reopens the store with restart_step)"
            )
        values = self._diagnostics(diagnostics)
        if region is None and isinstance(field, (list, tuple)):
            pieces = [(tuple(r), np.array(b, copy=True) if copy else b) for r, b in field]
        elif region is None:
            if not hasattr(field, "layout"):
                raise SnapshotError(
                    f"field is a {type(field).__name__}; pass a pgas.GlobalArray, or a NumPy "
                    f"block with region=<its global slices> (e.g. grid.block())"
                )
            pieces = None if self._allgather_nc() else host_blocks(field)
        else:
            pieces = [(tuple(region), np.array(field, copy=True))]
        self._finish_previous()
        index, commit = self.count, None
        if self.format.parallel:  # every process writes its region; process 0 commits later
            job = (self._store.write_pieces, index, pieces, self.decode)
            commit = self._uncommitted if self.group.rank == 0 else None
            self._uncommitted = (index, int(step), values)
        else:  # process 0 has the whole snapshot: written and committed at once
            full = self._gathered(field, pieces)
            job = (self._store.append, index, int(step), values, full) if self._store else None
        self._pending = self._executor.submit(_run_job, commit, self._store, job)
        self.count += 1
        self._last_step = int(step)

    def flush(self) -> None:
        """Wait until every process has written the snapshot in flight; collective.

        The snapshots before it are then committed. Call it before saving a
        checkpoint of the same step, so that a restart from that checkpoint finds
        every earlier snapshot in the store (the last one is written again).

        Raises:
            SnapshotWriteError: a snapshot could not be written.
        """
        self._check_open()
        self._finish_previous()

    def close(self) -> None:
        """Wait for the last snapshot, commit it and release the thread; collective.

        Raises:
            SnapshotWriteError: the first error of the background writer.
        """
        if self._closed:
            return
        self._closed = True
        try:
            self._finish_previous()
            message = None
            if self.group.rank == 0 and self._uncommitted is not None:
                try:
                    self._store.commit(*self._uncommitted)
                except Exception as exc:  # noqa: BLE001 (reported to every process)
                    message = describe_failure(exc, self.spec.path)
            failed, _ = self.group.agree(message)
            if self.group.rank == 0:  # every process has written: the locks can go
                with contextlib.suppress(OSError):
                    self.format.finish(self.spec.path)
            if failed:
                raise SnapshotWriteError(f"committing the last snapshot: {'; '.join(failed)}")
        finally:
            self._executor.shutdown(wait=True)

    def __enter__(self) -> SnapshotWriter:
        return self

    def __exit__(self, kind, value, traceback) -> None:
        if kind is None:
            self.close()
        else:  # leave the store as committed so far; do not hide the error
            self._closed = True
            self._executor.shutdown(wait=True)

    # ---- helpers ---------------------------------------------------------------------
    def _check_open(self) -> None:
        if self._closed:
            raise SnapshotError(f"the writer of {self.spec.path} is closed; open a new one")

    def _diagnostics(self, given: Mapping[str, Any] | None) -> dict[str, float]:
        given = dict(given or {})
        names = [n for n, _ in self.spec.diagnostics]
        if sorted(given) != sorted(names):
            raise SnapshotError(
                f"diagnostics has names {sorted(given)} but the store was opened with "
                f"{sorted(names)}; give one value for each"
            )
        return {k: np.asarray(v)[()] for k, v in given.items()}

    def _finish_previous(self) -> None:
        """Wait for this process's last snapshot, then agree with all that it is written."""
        message = None
        if self._pending is not None:
            try:
                self._pending.result()
            except Exception as exc:  # noqa: BLE001 (reported to every process)
                message = describe_failure(exc, self.spec.path)
            self._pending = None
        failed, _ = self.group.agree(message)
        if failed:
            self._closed = True
            self._executor.shutdown(wait=False)
            if self.group.rank == 0:  # every process has stopped writing (agreed above)
                with contextlib.suppress(OSError):
                    self.format.finish(self.spec.path)  # what only writers needed (locks)
            raise SnapshotWriteError(
                f"writing a snapshot to {self.spec.path} failed: {'; '.join(failed)}; the "
                f"store keeps the {self.count - 1} snapshot(s) committed before (a restart "
                f"from a checkpoint continues it)"
            )

    def _allgather_nc(self) -> bool:
        return not self.format.parallel and self.group.size > 1 and self.group.comm is None

    def _gathered(self, field: Any, pieces: list[Piece] | None) -> np.ndarray | None:
        """The decoded global field on process 0 (``None`` elsewhere), for a ``.nc`` file."""
        if pieces is None:  # JAX processes without MPI: every process gathers the field
            full = field.to_numpy()
            return decode_piece(((slice(0, None),) * full.ndim, full), self.decode,
                                self.spec.shape)[1] if self.group.rank == 0 else None  # fmt: skip
        decoded = [decode_piece(p, self.decode, self.spec.shape) for p in pieces]
        if self.group.rank == 0 and self._buffer is None:
            self._buffer = np.empty(self.spec.shape, self.spec.dtype)
        self.group.gather(decoded, self._buffer)
        return self._buffer


def _run_job(commit, store, job) -> None:
    """Background work of one snapshot: commit the previous one (process 0), write this one."""
    if commit is not None:
        store.commit(*commit)
    if job is not None:
        function, *args = job
        function(*args)


def _spec(path, name, dims, shape, dtype, attrs, coords, chunks, diagnostics) -> StoreSpec:
    """The store's description from the arguments alone (the path is not looked at)."""
    target = output_path(path)
    shape = tuple(int(n) for n in shape)
    dims = tuple(str(d) for d in dims)
    if len(dims) != len(shape) or "time" in dims or len(set(dims)) != len(dims):
        raise SnapshotError(
            f"dims = {dims!r} must name the {len(shape)} spatial axes of shape {shape} once "
            f"each (the snapshot axis 'time' is added)"
        )
    if any(n < 1 for n in shape):
        raise SnapshotError(f"shape = {shape}: every axis needs at least one cell")
    chunks = shape if chunks is None else tuple(int(c) for c in chunks)
    if len(chunks) != len(shape) or any(c < 1 for c in chunks):
        raise SnapshotError(f"chunks = {chunks!r}: give one positive size per axis of {shape}")
    if isinstance(diagnostics, Mapping):
        diags = tuple((str(k), np.dtype(v)) for k, v in diagnostics.items())
    else:
        diags = tuple((str(k), np.dtype("float64")) for k in diagnostics)
    taken = {name, "time", *dims}
    if any(k in taken for k, _ in diags):
        raise SnapshotError(f"diagnostics {[k for k, _ in diags]} reuse a name of {sorted(taken)}")
    coordinates = {}
    for dim, values in (coords or {}).items():
        values = np.asarray(values)
        if dim not in dims or values.shape != (shape[dims.index(dim)],):
            raise SnapshotError(
                f"coords[{dim!r}] has shape {values.shape}; give a 1-D array for a spatial dim "
                f"of {dict(zip(dims, shape))}"
            )
        coordinates[dim] = values
    return StoreSpec(target, str(name), dims, shape, np.dtype(dtype),
                     tuple(min(c, n) for c, n in zip(chunks, shape)), diags,
                     netcdf_safe_attrs(attrs), coordinates)  # fmt: skip


def _prepare(spec: StoreSpec, restart_step: int | None, overwrite: bool) -> int:
    """Process 0: check the path, create the store or reopen and truncate it; returns the
    snapshots kept. The other processes wait for the answer before they open it."""
    check_writable(spec.path)
    fmt = formats.of(spec.path)
    if restart_step is not None and spec.path.exists():
        return fmt.truncate(spec, int(restart_step))
    if not spec.path.exists():
        _create(fmt, spec)
        return 0
    if not overwrite:
        raise OutputPathError(
            f"output path {str(spec.path)!r} exists; pgas does not replace it unless asked: "
            f"pass overwrite=True (--overwrite) to replace it, or choose another name"
        )
    old = spec.path.with_name(f".{spec.path.name}.{uuid.uuid4().hex[:12]}.old")
    os.rename(spec.path, old)  # aside, whole: the path never holds half of each
    try:
        _create(fmt, spec)
    except BaseException:
        os.rename(old, spec.path)
        raise
    _remove(old)
    return 0


def _create(fmt: Format, spec: StoreSpec) -> None:
    """Create the store; one that fails half-way (a full disk) is removed, with its locks.

    Raises:
        SnapshotWriteError: the store could not be created, naming what is left, if anything.
    """
    try:
        fmt.create(spec)
    except BaseException as exc:
        try:
            if spec.path.exists() or spec.path.is_symlink():
                _remove(spec.path)
            fmt.finish(spec.path)
            left = "nothing was left behind"
        except OSError as err:
            left = f"the half-made {spec.path} could not be removed ({err}): delete it"
        if not isinstance(exc, OSError):
            raise
        raise SnapshotWriteError(
            f"creating {spec.path} failed: {describe_failure(exc, spec.path)}; {left}"
        ) from None


def _remove(path: Path) -> None:
    if path.is_dir():
        shutil.rmtree(path)
    else:
        path.unlink()
