"""The netCDF side of :mod:`pgas.snapshots`: process 0 appends to one netCDF-4 file.

The file has an unlimited ``time`` dimension; the field ``name`` ``(time,
*dims)`` is chunked one snapshot (or part of one, see
:func:`nc_chunks`) at a time; ``time`` holds the step numbers;
one ``(time,)`` variable per diagnostic. Each snapshot is appended and the file
closed (flushed) before the next, so a run stopped between two snapshots leaves
a file that opens.

HDF5 is not journaled, and a write that fails inside it (a full disk) leaves
objects it can neither flush nor close, which HDF5's own exit handler then
touches (a segmentation fault at exit). So every write to an existing file goes
through an :class:`UndoFile`: HDF5 never sees a write fail, and an append that
fails (disk full, I/O error) is undone, the bytes it overwrote restored and the
file cut back to its old length, before the error is raised: the file holds
the snapshots it held before. New files are made in memory and written whole.
A run *killed* while appending can still leave a file HDF5 cannot open; use
``.zarr`` where that matters.
"""

from __future__ import annotations

import contextlib
import math
import os
import uuid
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
import xarray as xr

from pgas.io.store import Format, StoreMismatchError, StoreSpec, check_identity

__all__ = ["Netcdf", "create", "truncate", "NetcdfFile", "UndoFile", "appending", "nc_chunks"]


def _engine_file():
    import h5netcdf

    return h5netcdf.File


def create(spec: StoreSpec, target: Any = None) -> None:
    """Process 0: a new file with attributes, coordinates and empty variables.

    The file is made in memory and written whole from Python: a write that fails
    (disk full) removes what it wrote and raises the ``OSError``, never inside HDF5.
    """
    fields = {spec.name: (("time", *spec.dims), np.zeros((0, *spec.shape), spec.dtype))}
    for key, dtype in spec.diagnostics:
        fields[key] = (("time",), np.zeros(0, dtype))
    coords = {"time": ("time", np.zeros(0, np.int64), {"long_name": "time step"})}
    coords.update({d: (d, v) for d, v in spec.coords.items()})
    ds = xr.Dataset(fields, coords=coords, attrs=spec.attrs)
    encoding = {k: {"_FillValue": None} for k in [*fields, *coords]}
    encoding[spec.name]["chunksizes"] = nc_chunks(spec.shape, spec.dtype.itemsize)
    data = ds.to_netcdf(engine="h5netcdf", unlimited_dims=["time"], encoding=encoding)
    target = spec.path if target is None else target
    try:
        with open(target, "wb") as f:
            f.write(data)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(target)
        raise


def truncate(spec: StoreSpec, restart_step: int) -> int:
    """Process 0: check an existing file and drop its snapshots at steps >= ``restart_step``.

    netCDF cannot shrink a dimension: the snapshots kept are copied, one at a
    time, into a new file that then replaces the old one.
    """
    try:
        old = _engine_file()(spec.path, "r")
    except OSError as exc:
        raise StoreMismatchError(
            f"{spec.path} cannot be read as netCDF ({exc}); choose another output path, or "
            f"delete it to start over"
        ) from None
    with old:
        if spec.name not in old.variables or "time" not in old.variables:
            raise StoreMismatchError(
                f"{spec.path} has no field {spec.name!r} over time; choose another output "
                f"path, or delete it to start over"
            )
        field = old.variables[spec.name]
        check_identity(spec, spec.name, field.dimensions[1:], field.shape[1:], field.dtype,
                       dict(old.attrs))  # fmt: skip
        steps = np.asarray(old.variables["time"][:])
        kept = int(np.count_nonzero(steps < restart_step))
        if kept == len(steps):
            return kept
        tmp = spec.path.with_name(f".{spec.path.name}.{uuid.uuid4().hex[:12]}.tmp")
        try:
            create(spec, tmp)
            target = NetcdfFile(spec, tmp)
            for i in range(kept):
                values = {k: old.variables[k][i] for k, _ in spec.diagnostics}
                target.append(i, int(steps[i]), values, np.asarray(field[i]))
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
    os.replace(tmp, spec.path)
    return kept


class NetcdfFile:
    """Process 0's handle: appends whole (decoded) snapshots."""

    def __init__(self, spec: StoreSpec, path: Any = None):
        self.spec = spec
        self.path = spec.path if path is None else path

    def append(self, index: int, step: int, values: dict[str, Any], field: np.ndarray) -> None:
        """Write snapshot ``index`` with its step and diagnostics, then close the file."""
        with appending(self.path) as f:
            f.resize_dimension("time", index + 1)
            f.variables[self.spec.name][index, ...] = field
            for key, _ in self.spec.diagnostics:
                f.variables[key][index] = values[key]
            f.variables["time"][index] = step


@contextlib.contextmanager
def appending(path: str | os.PathLike[str]) -> Iterator[Any]:
    """``path`` open for writing (an ``h5netcdf.File``) through an :class:`UndoFile`.

    Raises:
        OSError: a write failed, e.g. a full disk (the file is as it was: see the module).

    >>> import tempfile, xarray as xr
    >>> path = tempfile.mkdtemp() + "/a.nc"
    >>> xr.Dataset(attrs={"n": 1}).to_netcdf(path, engine="h5netcdf")
    >>> with appending(path) as f:
    ...     f.attrs["n"] = 2
    >>> xr.open_dataset(path, engine="h5netcdf").attrs["n"]
    np.int64(2)
    """
    undo = UndoFile(path)
    try:
        with _engine_file()(undo, "a") as f:
            yield f
    except BaseException:
        undo.close(restore=True)  # raises the write's OSError where one failed first
        raise
    undo.close()


class UndoFile:
    """A file HDF5 writes through (h5py's file-object driver) that can be put back.

    A write that fails is remembered, not raised: HDF5 goes on (and closes its
    objects) as if it had succeeded, and every later write is dropped.
    :meth:`close` then undoes the session (the bytes overwritten below the
    file's first length are restored from memory, the file is cut back to that
    length) and raises the error. Only the overwritten bytes are kept: HDF5's
    metadata when snapshots are appended (new chunks go past the end).

    >>> import tempfile
    >>> path = tempfile.mkdtemp() + "/f"
    >>> _ = open(path, "wb").write(b"abc")
    >>> f = UndoFile(path)
    >>> _ = f.seek(1), f.write(b"XYZ")
    >>> f.close(restore=True)
    >>> open(path, "rb").read()
    b'abc'
    """

    def __init__(self, path: str | os.PathLike[str]):
        self.path = path
        self.fd = os.open(path, os.O_RDWR)
        self.length = self.size = os.fstat(self.fd).st_size  # at the start, now
        self.pos = 0
        self.saved: list[tuple[int, bytes]] = []  # (offset, old bytes) in the order written
        self.error: Exception | None = None  # the first write that failed

    def readable(self) -> bool:
        return True

    def writable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def seek(self, pos: int, whence: int = os.SEEK_SET) -> int:
        self.pos = pos + {os.SEEK_SET: 0, os.SEEK_CUR: self.pos, os.SEEK_END: self.size}[whence]
        return self.pos

    def tell(self) -> int:
        return self.pos

    def readinto(self, buffer) -> int:
        got = os.preadv(self.fd, [memoryview(buffer).cast("B")], self.pos)
        self.pos += got
        return got

    def read(self, size: int = -1) -> bytes:
        data = os.pread(self.fd, max(0, self.size - self.pos) if size < 0 else size, self.pos)
        self.pos += len(data)
        return data

    def write(self, buffer) -> int:
        view = memoryview(buffer).cast("B")
        if self.error is None:
            try:
                if self.pos < self.length:  # keep what it overwrites
                    old = os.pread(self.fd, min(len(view), self.length - self.pos), self.pos)
                    self.saved.append((self.pos, old))
                self._write_at(view, self.pos)
                self.size = max(self.size, self.pos + len(view))
            except Exception as exc:  # noqa: BLE001 - raised by close(), never inside HDF5
                self.error = exc
        self.pos += len(view)
        return len(view)

    def _write_at(self, view: memoryview, offset: int) -> None:
        done = 0
        while done < len(view):
            done += os.pwrite(self.fd, view[done:], offset + done)

    def truncate(self, size: int | None = None) -> int:
        size = self.pos if size is None else size
        if self.error is None:
            try:
                os.ftruncate(self.fd, size)
                self.size = size
            except Exception as exc:  # noqa: BLE001 - raised by close(), never inside HDF5
                self.error = exc
        return size

    def flush(self) -> None:
        """Nothing to do: every write went to the file at once."""

    def close(self, restore: bool = False) -> None:
        """Close the file; undo this session if a write failed or ``restore``; raise the
        write's error (an ``OSError``: a full disk) if one failed."""
        try:
            if self.error is not None or restore:
                self._undo()
        finally:
            os.close(self.fd)
        if self.error is not None:
            raise self.error

    def _undo(self) -> None:
        try:
            for pos, old in reversed(self.saved):
                os.pwrite(self.fd, old, pos)
            os.ftruncate(self.fd, self.length)
        except OSError as exc:
            first = self.error or exc
            code = getattr(first, "errno", None) or exc.errno
            self.error = OSError(code, f"{getattr(first, 'strerror', None) or first}; putting "
                                 f"{self.path} back as it was failed too ({exc}): it may no "
                                 f"longer open")  # fmt: skip


def nc_chunks(shape: Sequence[int], itemsize: int, limit: int = 1 << 26) -> tuple[int, ...]:
    """HDF5 chunk of one snapshot: the largest axis halved until a chunk is <= ``limit`` bytes.

    >>> nc_chunks((1000, 1000), 8, limit=1 << 20)
    (1, 250, 500)
    """
    chunk = list(shape)
    while math.prod(chunk) * itemsize > limit:
        axis = int(np.argmax(chunk))
        chunk[axis] = (chunk[axis] + 1) // 2
    return (1, *chunk)


class Netcdf(Format):
    """The ``.nc`` format: process 0 appends whole snapshots (see the module).

    >>> Netcdf().suffix, Netcdf().parallel
    ('.nc', False)
    """

    suffix, parallel = ".nc", False

    create = staticmethod(create)
    truncate = staticmethod(truncate)

    def writer(self, spec: StoreSpec, rank: int) -> NetcdfFile | None:
        return NetcdfFile(spec) if rank == 0 else None

    def update_attrs(self, path, attrs) -> None:
        with appending(path) as f:
            f.attrs.update(attrs)
