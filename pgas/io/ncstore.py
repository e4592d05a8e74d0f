"""The netCDF side of :mod:`pgas.snapshots`: process 0 appends to one netCDF-4 file.

The file has an unlimited ``time`` dimension; the field ``name`` ``(time,
*dims)`` is chunked one snapshot (or part of one, see
:func:`nc_chunks`) at a time; ``time`` holds the step numbers;
one ``(time,)`` variable per diagnostic. Each snapshot is appended and the file
closed (flushed) before the next, so a run stopped between two snapshots leaves
a file that opens. HDF5 is not journaled: a run killed *while* appending can
leave a file HDF5 cannot open; use ``.zarr`` where that matters.
"""

from __future__ import annotations

import math
import os
import uuid
from collections.abc import Sequence
from typing import Any

import numpy as np
import xarray as xr

from pgas.io.store import Format, StoreMismatchError, StoreSpec, check_identity

__all__ = ["Netcdf", "create", "truncate", "NetcdfFile", "nc_chunks"]


def _engine_file():
    import h5netcdf

    return h5netcdf.File


def create(spec: StoreSpec, target: Any = None) -> None:
    """Process 0: a new file with attributes, coordinates and empty variables."""
    fields = {spec.name: (("time", *spec.dims), np.zeros((0, *spec.shape), spec.dtype))}
    for key, dtype in spec.diagnostics:
        fields[key] = (("time",), np.zeros(0, dtype))
    coords = {"time": ("time", np.zeros(0, np.int64), {"long_name": "time step"})}
    coords.update({d: (d, v) for d, v in spec.coords.items()})
    ds = xr.Dataset(fields, coords=coords, attrs=spec.attrs)
    encoding = {k: {"_FillValue": None} for k in [*fields, *coords]}
    encoding[spec.name]["chunksizes"] = nc_chunks(spec.shape, spec.dtype.itemsize)
    ds.to_netcdf(target or spec.path, engine="h5netcdf", unlimited_dims=["time"],
                 encoding=encoding)  # fmt: skip


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
        with _engine_file()(self.path, "a") as f:
            f.resize_dimension("time", index + 1)
            f.variables[self.spec.name][index, ...] = field
            for key, _ in self.spec.diagnostics:
                f.variables[key][index] = values[key]
            f.variables["time"][index] = step


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
        with _engine_file()(path, "a") as f:
            f.attrs.update(attrs)
