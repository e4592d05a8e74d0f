"""The snapshot formats pgas writes, chosen by a path's suffix.

Each format is one module implementing :class:`pgas.io.store.Format`
(:mod:`pgas.io.zarrstore`, :mod:`pgas.io.ncstore`); adding one is a new
module and an entry in :data:`FORMATS`.
"""

from __future__ import annotations

import os
from pathlib import Path

from pgas.io.dataset import OutputPathError
from pgas.io.ncstore import Netcdf
from pgas.io.store import Format
from pgas.io.zarrstore import Zarr

__all__ = ["FORMATS", "of"]

#: suffix -> format
FORMATS: dict[str, Format] = {f.suffix: f for f in (Zarr(), Netcdf())}


def of(path: str | os.PathLike[str]) -> Format:
    """The format that writes ``path``, by its suffix.

    >>> of("run.zarr").parallel, of("run.nc").parallel
    (True, False)
    >>> of("run.h5")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    pgas.io.dataset.OutputPathError: path 'run.h5' ends in '.h5'; snapshots are written as ...
    """
    suffix = Path(path).suffix.lower()
    if suffix not in FORMATS:
        raise OutputPathError(
            f"path {os.fspath(path)!r} ends in {suffix!r}; snapshots are written as "
            f"{' or '.join(FORMATS)}: end the path with one of them"
        )
    return FORMATS[suffix]
