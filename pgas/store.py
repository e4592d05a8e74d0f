"""What a snapshot store is: its description, its identity check and its errors.

Shared by :mod:`pgas.snapshots` (the writer) and the two formats it writes,
:mod:`pgas.zarrstore` and :mod:`pgas.ncstore`, which sit below it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from pgas.io import ResultsError

__all__ = ["SnapshotError", "StoreMismatchError", "SnapshotWriteError", "StoreSpec",
           "check_identity"]  # fmt: skip

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

    @property
    def zarr(self) -> bool:
        return self.path.suffix.lower() == ".zarr"


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
