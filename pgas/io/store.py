"""What a snapshot store is: its description, the interface of a format, identity and errors.

Shared by :mod:`pgas.io.snapshots` (the writer) and the formats it writes, one
module each (:mod:`pgas.io.zarrstore`, :mod:`pgas.io.ncstore`), which sit
below it and implement :class:`Format`. :mod:`pgas.io.formats` picks one by
the path's suffix: a third format is one new module and one entry there.
"""

from __future__ import annotations

import abc
import dataclasses
import errno
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from pgas.io.dataset import ResultsError

__all__ = ["SnapshotError", "StoreMismatchError", "SnapshotWriteError", "StoreSpec", "Format",
           "check_identity", "describe_failure"]  # fmt: skip

_IDENTITY_ATTRS = ("example", "problem")


class SnapshotError(ResultsError):
    """A snapshot write that cannot go on (base class)."""


class StoreMismatchError(SnapshotError):
    """An existing store that belongs to another problem (name, shape, dtype, example)."""


class SnapshotWriteError(SnapshotError):
    """A block or commit that failed to be written (disk full, I/O error, another process)."""


@dataclasses.dataclass(frozen=True)
class StoreSpec:
    """What a store holds: the field's name, dims, cell shape, dtype and chunking."""

    path: Path
    name: str
    dims: tuple[str, ...]
    shape: tuple[int, ...]
    dtype: np.dtype
    chunks: tuple[int, ...]
    diagnostics: tuple[tuple[str, np.dtype], ...]
    attrs: dict[str, Any]
    coords: dict[str, np.ndarray]


class Format(abc.ABC):
    """One way to store snapshots; what :class:`pgas.io.snapshots.SnapshotWriter` asks of it.

    Two protocols exist. A *parallel* format (Zarr) gives every process a
    writer of its own blocks (``write_pieces(index, pieces, decode)``), and
    process 0 commits each snapshot (``commit(index, step, values)``) once all
    have written. Otherwise (netCDF) process 0 alone has a writer and appends
    whole snapshots (``append(index, step, values, field)``), gathered for it.

    Attributes:
        suffix: the path suffix that selects the format (``".zarr"``).
        parallel: every process writes its own region of a snapshot.
    """

    suffix: str
    parallel: bool

    @abc.abstractmethod
    def create(self, spec: StoreSpec) -> None:
        """Process 0: a new, empty store (attributes, coordinates, empty arrays)."""

    @abc.abstractmethod
    def truncate(self, spec: StoreSpec, restart_step: int) -> int:
        """Process 0: check a store is ``spec``'s, drop times ``>= restart_step``; count kept."""

    @abc.abstractmethod
    def writer(self, spec: StoreSpec, rank: int) -> Any:
        """This process's writer of the store, or ``None`` where it writes nothing."""

    @abc.abstractmethod
    def update_attrs(self, path: Path, attrs: Mapping[str, Any]) -> None:
        """Process 0, after the run: add ``attrs`` (netCDF-safe) to the store's attributes."""

    def finish(self, path: Path) -> None:  # noqa: B027 (optional: most formats need nothing)
        """Process 0, after the last commit: remove what only writers needed."""


def check_identity(spec: StoreSpec, name: str, dims, shape, dtype, attrs: Mapping) -> None:
    """Raise :class:`StoreMismatchError` unless a stored field is the one ``spec`` describes."""
    found = {"variable": name, "dims": tuple(dims), "shape": tuple(shape), "dtype": str(dtype)}
    want = {"variable": spec.name, "dims": spec.dims, "shape": spec.shape,
            "dtype": str(spec.dtype)}  # fmt: skip
    for key in _IDENTITY_ATTRS:
        if key in attrs and key in spec.attrs:
            found[key], want[key] = attrs[key], spec.attrs[key]
    diff = {k: (found[k], want[k]) for k in want if found.get(k) != want[k]}
    if diff:
        what = ", ".join(f"{k} {a!r} (this run: {b!r})" for k, (a, b) in diff.items())
        raise StoreMismatchError(
            f"{spec.path} holds another problem: {what}; choose another output path, or "
            f"delete the store to start over"
        )


def describe_failure(exc: BaseException, path: Path | str) -> str:
    """What went wrong with ``path`` and the fix, in one line (a full disk, an I/O error).

    >>> print(describe_failure(OSError(errno.ENOSPC, "No space left on device"), "run.nc"))
    no space left for run.nc ([Errno 28] No space left on device); free disk space or write ...
    """
    if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return f"no space left for {path} ({exc}); free disk space or write elsewhere"
    if isinstance(exc, OSError):
        return f"I/O error on {path} ({exc}); check the file system"
    return f"{type(exc).__name__}: {exc}"
