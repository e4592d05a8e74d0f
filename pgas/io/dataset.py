"""Simulation results as xarray Datasets, written to netCDF or Zarr atomically.

Contract:

* :func:`to_dataset` takes plain NumPy arrays (anything ``numpy.asarray``
  accepts, e.g. a gathered JAX array): ``fields`` with a leading snapshot axis,
  the step numbers ``times`` of the snapshots, optional per-snapshot global
  ``diagnostics`` and run ``attrs``. It returns an ``xarray.Dataset`` with
  dimensions ``(time, x)``, ``(time, y, x)`` or ``(time, z, y, x)``, a
  ``time`` coordinate holding the step numbers, spatial coordinates (cell
  index unless given), the field variable (dtype kept: float32, float64,
  uint8, ...) and one ``(time,)`` variable per diagnostic.
* Attributes are made netCDF-safe by :func:`netcdf_safe_attrs` (of
  :mod:`pgas.io.attributes`, offered here too): ``bool`` becomes ``int`` 0/1,
  tuples, lists, dicts and ``None`` become their JSON text (``json.loads``
  gives them back), NumPy scalars become Python numbers, 1-D numeric arrays
  stay arrays, and anything else becomes ``str(value)``.
* :func:`write_dataset` writes ``.nc`` (netCDF-4/HDF5 via the ``h5netcdf``
  engine, which needs ``h5py``: both are dependencies of pgas; it falls back to
  the ``netcdf4`` engine only if they are missing) or ``.zarr`` (a Zarr v3
  directory store with consolidated metadata). It never leaves a half-written
  result under the final name: it writes to a hidden temporary sibling
  (``.<name>.<random>.tmp``) and renames it into place with ``os.replace``.
  A ``.zarr`` directory that already exists is replaced only if it is a Zarr
  store; the old one is moved aside, the new one renamed in, then the old one
  removed (readers see the old store, briefly nothing, or the new store).
* :func:`check_writable` runs the same path checks up front, so a long run
  can fail in its first second instead of at its end.

Errors are :class:`ResultsError` subclasses (a :class:`pgas.errors.PgasError`,
so a ``ValueError``) whose messages name the parameter, the value and the fix.
This module depends on NumPy, xarray, :mod:`pgas.errors` and
:mod:`pgas.io.attributes` only.

>>> import numpy as np
>>> u = np.zeros((3, 8), np.float32)  # 3 snapshots of a 1-D field
>>> ds = to_dataset(u, [0, 50, 100], diagnostics={"heat": u.sum(axis=1)})
>>> dict(ds.sizes), ds["u"].dtype.name, ds["time"].values.tolist()
({'time': 3, 'x': 8}, 'float32', [0, 50, 100])
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import uuid
import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import xarray as xr

from pgas.errors import PgasError
from pgas.io.attributes import netcdf_safe_attrs

__all__ = [
    "DatasetInputError",
    "OutputPathError",
    "ResultsError",
    "check_directory",
    "check_writable",
    "output_path",
    "netcdf_safe_attrs",
    "read_dataset",
    "to_dataset",
    "write_dataset",
]

SUFFIXES = (".nc", ".zarr")
_DEFAULT_DIMS = {1: ("time", "x"), 2: ("time", "y", "x"), 3: ("time", "z", "y", "x")}
_ZARR_MARKERS = ("zarr.json", ".zgroup", ".zarray", ".zattrs", ".zmetadata")


class ResultsError(PgasError):
    """Base class of every error this module raises for a bad input."""


class DatasetInputError(ResultsError):
    """Arrays, dims, coordinates or diagnostics that do not make a Dataset."""


class OutputPathError(ResultsError):
    """An output path with a wrong suffix, a missing or unwritable directory, or
    an existing object that must not be replaced."""


# --------------------------------------------------------------------------
# Building the Dataset
# --------------------------------------------------------------------------


def _one_d(values: Any, parameter: str, length: int, what: str) -> np.ndarray:
    array = np.asarray(values)
    if array.ndim != 1 or array.shape[0] != length:
        raise DatasetInputError(
            f"{parameter} has shape {array.shape}; it must be 1-D with {length} entries ({what})"
        )
    if array.dtype == object:
        raise DatasetInputError(
            f"{parameter} has dtype object; give numbers (a numeric NumPy array)"
        )
    return array


def _all_dims(data: np.ndarray, dims: Sequence[str] | None) -> tuple[str, ...]:
    """Every dimension name of ``fields`` (time first), from ``dims`` or the defaults."""
    if dims is None:
        if data.ndim - 1 not in _DEFAULT_DIMS:
            raise DatasetInputError(
                f"fields has {data.ndim - 1} spatial axes (shape {data.shape}); default "
                f"dims exist for 1 to 3; pass dims=(...) with {data.ndim} names"
            )
        all_dims = _DEFAULT_DIMS[data.ndim - 1]
    else:
        given = tuple(str(d) for d in dims)
        if len(given) == data.ndim - 1:
            given = ("time", *given)
        if len(given) != data.ndim or len(set(given)) != len(given):
            raise DatasetInputError(
                f"dims = {tuple(dims)!r} does not name the {data.ndim} axes of fields "
                f"(shape {data.shape}) once each; give {data.ndim} distinct names, or "
                f"{data.ndim - 1} spatial ones"
            )
        all_dims = given
    return all_dims


def to_dataset(
    fields: Any,
    times: Sequence[int] | np.ndarray,
    *,
    name: str = "u",
    dims: Sequence[str] | None = None,
    coords: Mapping[str, Any] | None = None,
    diagnostics: Mapping[str, Any] | None = None,
    attrs: Mapping[str, Any] | None = None,
) -> xr.Dataset:
    """Package snapshots of a field, their step numbers and diagnostics as a Dataset.

    Args:
        fields: array of shape ``(n_snapshots, *space)``; 1 to 3 spatial axes
            with default dims, any number with ``dims``. The dtype is kept.
        times: the step number of each snapshot, length ``n_snapshots``;
            stored as the ``time`` coordinate.
        name: the name of the field variable.
        dims: dimension names, either all of them (``("time", "y", "x")``) or
            the spatial ones only (``("y", "x")``; ``time`` is put first).
        coords: optional physical coordinates, ``{dim: 1-D array}`` for
            spatial dims; dims not given get the cell index ``0..n-1``.
        diagnostics: optional ``{name: 1-D array over snapshots}``, e.g. the
            total heat or the population of each snapshot.
        attrs: run attributes for the Dataset, converted by
            :func:`netcdf_safe_attrs`.

    Returns:
        The Dataset.

    Raises:
        DatasetInputError: no snapshot axis, lengths that do not match, an
            unknown coordinate dim, or a name used twice.

    >>> import numpy as np
    >>> ds = to_dataset(np.zeros((2, 4, 6), np.uint8), [0, 10],
    ...                 coords={"x": np.linspace(0.0, 1.0, 6)}, attrs={"mesh": (2, 4)})
    >>> ds["u"].dims, float(ds["x"][-1]), ds.attrs["mesh"]
    (('time', 'y', 'x'), 1.0, '[2, 4]')
    """
    data = np.asarray(fields)
    if data.dtype == object:
        raise DatasetInputError(
            "fields has dtype object; give a numeric array of shape (n_snapshots, *space), "
            "e.g. np.stack(snapshots)"
        )
    if data.ndim < 2:
        raise DatasetInputError(
            f"fields has shape {data.shape}; to_dataset needs a leading snapshot axis, "
            f"shape (n_snapshots, *space): for one snapshot pass field[None]"
        )
    all_dims = _all_dims(data, dims)
    time_dim, space_dims = all_dims[0], all_dims[1:]
    n_snapshots = data.shape[0]

    steps = _one_d(times, "times", n_snapshots, "one step number per snapshot")
    coordinates: dict[str, Any] = {
        time_dim: (time_dim, steps, {"long_name": "time step"}),
    }
    for dim, size in zip(space_dims, data.shape[1:], strict=True):
        coordinates[dim] = (dim, np.arange(size), {"long_name": f"cell index along {dim}"})
    for dim, values in (coords or {}).items():
        if dim not in space_dims:
            raise DatasetInputError(
                f"coords has a key {dim!r} that is not a spatial dim of fields "
                f"{space_dims}; use one of them (the snapshot steps go in times)"
            )
        size = data.shape[all_dims.index(dim)]
        coordinates[dim] = (dim, _one_d(values, f"coords[{dim!r}]", size, f"the size of {dim}"))

    variables: dict[str, Any] = {name: (all_dims, data)}
    for key, values in (diagnostics or {}).items():
        key = str(key)
        if key in variables or key in all_dims:
            raise DatasetInputError(
                f"diagnostics has a key {key!r} that is already the field name or a dim "
                f"name {(name, *all_dims)}; rename the diagnostic"
            )
        series = _one_d(values, f"diagnostics[{key!r}]", n_snapshots, "one value per snapshot")
        variables[key] = ((time_dim,), series)

    return xr.Dataset(variables, coords=coordinates, attrs=netcdf_safe_attrs(attrs))


# --------------------------------------------------------------------------
# Writing
# --------------------------------------------------------------------------


def _is_zarr_store(path: Path) -> bool:
    return path.is_dir() and any((path / marker).exists() for marker in _ZARR_MARKERS)


def output_path(path: str | os.PathLike[str]) -> Path:
    """The absolute output path, checked for its suffix only (the file system is not read).

    Raises:
        OutputPathError: the suffix is not ``.nc``/``.zarr``.

    >>> output_path("/tmp/heat.NC").name
    'heat.NC'
    """
    target = Path(os.path.abspath(os.fspath(path)))
    if target.suffix.lower() not in SUFFIXES:
        raise OutputPathError(
            f"output path {os.fspath(path)!r} has suffix {target.suffix!r}; results are "
            f"written as .nc (netCDF) or .zarr (Zarr store): end the path with one of them"
        )
    return target


def check_directory(path: str | os.PathLike[str]) -> Path:
    """Check the suffix of ``path`` and that its directory exists and can be written.

    Only what no run of pgas changes is looked at (never ``path`` itself), so
    every process of a run may call it at any time and get the same answer.

    Returns:
        The absolute path.

    Raises:
        OutputPathError: a bad suffix; the directory does not exist, is not a
            directory, or cannot be written (checked by creating and removing
            a hidden probe file).

    >>> import tempfile
    >>> check_directory(tempfile.gettempdir() + "/heat.zarr").name
    'heat.zarr'
    """
    target = output_path(path)
    parent = target.parent
    if not parent.exists():
        raise OutputPathError(
            f"output directory {str(parent)!r} (of {os.fspath(path)!r}) does not exist; "
            f"create it first (mkdir -p {parent}) or write elsewhere"
        )
    if not parent.is_dir():
        raise OutputPathError(
            f"output directory {str(parent)!r} (of {os.fspath(path)!r}) is not a "
            f"directory; choose a path inside a directory"
        )
    try:
        with tempfile.NamedTemporaryFile(dir=parent, prefix=".pgas-write-probe-"):
            pass
    except OSError as error:
        raise OutputPathError(
            f"output directory {str(parent)!r} is not writable ({error.strerror}); "
            f"choose a directory you can write to, or fix its permissions"
        ) from None
    return target


def check_writable(path: str | os.PathLike[str]) -> Path:
    """Check, before a long run, that :func:`write_dataset` can write ``path``.

    :func:`check_directory`, then what is at ``path`` itself. In a
    multi-process run only one process may call it (another may be creating
    ``path`` at that moment): see :class:`pgas.runtime.group.Group`.

    Args:
        path: the output path, ending in ``.nc`` or ``.zarr``.

    Returns:
        The absolute path.

    Raises:
        OutputPathError: the suffix is not ``.nc``/``.zarr``; the directory
            does not exist, is not a directory, or cannot be written (checked
            by creating and removing a probe file); or ``path`` exists and is
            a directory for ``.nc``, or something other than a Zarr store for
            ``.zarr``.

    >>> import tempfile
    >>> check_writable(tempfile.gettempdir() + "/heat.nc").name
    'heat.nc'
    """
    target = check_directory(path)
    suffix = target.suffix.lower()
    if target.exists():
        if suffix == ".nc" and target.is_dir():
            raise OutputPathError(
                f"output path {str(target)!r} is an existing directory; a .nc result is "
                f"a file: remove the directory or choose another name"
            )
        if suffix == ".zarr" and not _is_zarr_store(target):
            raise OutputPathError(
                f"output path {str(target)!r} exists and is not a Zarr store; refusing to "
                f"replace it: remove it yourself or choose another name"
            )
    return target


def _netcdf_engine() -> str:
    try:
        import h5netcdf  # noqa: F401
        import h5py  # noqa: F401  (h5netcdf needs it but does not declare it)
    except ImportError:
        pass
    else:
        return "h5netcdf"
    try:
        import netCDF4  # noqa: F401
    except ImportError:
        raise OutputPathError(
            "writing .nc needs h5netcdf and h5py (or netCDF4), and none is installed; "
            "pip install h5netcdf h5py, or write a .zarr path"
        ) from None
    return "netcdf4"


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        with contextlib.suppress(FileNotFoundError):
            path.unlink()


def write_dataset(ds: xr.Dataset, path: str | os.PathLike[str], *, overwrite: bool = False) -> Path:
    """Write ``ds`` to ``path`` (``.nc`` or ``.zarr``) atomically.

    The data go to a hidden temporary sibling first, which is renamed to
    ``path`` only once complete (``os.replace`` for a file; for a Zarr
    directory, the old store is moved aside, the new one renamed in, then the
    old one removed). On any error the temporary is removed and an existing
    result is left as it was.

    Args:
        ds: the Dataset, e.g. from :func:`to_dataset`.
        path: the output path; its suffix chooses the format.
        overwrite: replace an existing result at ``path`` (default False: an
            existing file or store is an error, as xarray's ``to_zarr``
            ``mode="w-"``); the replacement is atomic, as above.

    Returns:
        The absolute path written.

    Raises:
        OutputPathError: see :func:`check_writable`; ``path`` exists and
            ``overwrite`` is False.

    >>> import tempfile, numpy as np
    >>> out = write_dataset(to_dataset(np.ones((2, 3)), [0, 1]),
    ...                     tempfile.mkdtemp() + "/run.nc")
    >>> out.name, out.is_file()
    ('run.nc', True)
    """
    target = check_writable(path)
    if not overwrite and (target.exists() or target.is_symlink()):
        raise OutputPathError(
            f"output path {str(target)!r} exists; pgas does not replace it unless asked: pass "
            f"overwrite=True (--overwrite) to replace it, or choose another name"
        )
    tmp = target.with_name(f".{target.name}.{uuid.uuid4().hex[:12]}.tmp")
    try:
        if target.suffix.lower() == ".nc":
            ds.to_netcdf(tmp, engine=_netcdf_engine())
            os.replace(tmp, target)
        else:
            with warnings.catch_warnings():
                # zarr-python 3 warns that consolidated metadata is not (yet) in the
                # v3 spec; xarray and zarr-python read it, and it makes opening fast.
                warnings.filterwarnings("ignore", message="Consolidated metadata")
                ds.to_zarr(tmp, mode="w", consolidated=True)
            _swap_in(tmp, target)
    except BaseException:
        _remove(tmp)
        raise
    return target


def _swap_in(tmp: Path, target: Path) -> None:
    if not (target.exists() or target.is_symlink()):
        os.rename(tmp, target)
        return
    old = target.with_name(f".{target.name}.{uuid.uuid4().hex[:12]}.old")
    os.rename(target, old)
    try:
        os.rename(tmp, target)
    except BaseException:
        os.rename(old, target)
        raise
    _remove(old)


def read_dataset(path: str | os.PathLike[str]) -> xr.Dataset:
    """Read a result written by :func:`write_dataset` fully into memory.

    Args:
        path: a ``.nc`` file or ``.zarr`` store.

    Returns:
        The Dataset, loaded (no file stays open).

    Raises:
        OutputPathError: the suffix is not ``.nc``/``.zarr`` or the path does
            not exist.

    >>> import tempfile, numpy as np
    >>> out = write_dataset(to_dataset(np.ones((2, 3), np.float32), [0, 1]),
    ...                     tempfile.mkdtemp() + "/run.zarr")
    >>> read_dataset(out)["u"].dtype.name
    'float32'
    """
    source = Path(os.fspath(path))
    suffix = source.suffix.lower()
    if suffix not in SUFFIXES:
        raise OutputPathError(
            f"path {os.fspath(path)!r} has suffix {source.suffix!r}; read_dataset reads "
            f".nc or .zarr results"
        )
    if not source.exists():
        raise OutputPathError(
            f"path {os.fspath(path)!r} does not exist; give a result written by write_dataset"
        )
    if suffix == ".nc":
        with xr.open_dataset(source, engine=_netcdf_engine()) as ds:
            return ds.load()
    with xr.open_zarr(source) as ds:
        return ds.load()
