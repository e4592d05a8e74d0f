"""The Zarr side of :mod:`pgas.snapshots`: one v3 store, a region per process.

Layout of a store: a group whose attributes are the run's attributes; the
field ``name`` with dimension names ``("time", *dims)`` and chunks ``(1,
*chunks)``; ``time`` (int64 step numbers, the index of the snapshots); one
``(time,)`` array per diagnostic; the given spatial coordinates. Every array
has no fill value that readers mask (``_FillValue`` is absent), so values read
back are the bits written. Metadata is consolidated after every commit.

Blocks of snapshot ``k`` are written through a view of the field whose length
is ``k + 1``; the stored length (what readers see) grows only when process 0
commits ``k``. Chunks past the stored length are invisible to readers and are
overwritten whole before they are committed, also after a restart.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import itertools
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import zarr

from pgas.io.blocks import Decoding, Piece, decode_piece
from pgas.io.store import Format, StoreMismatchError, StoreSpec, check_identity

__all__ = ["Zarr", "create", "truncate", "ZarrBlocks", "lock_dir", "chunk_locks", "quiet_zarr"]

_TIME_CHUNK = 4096


def create(spec: StoreSpec) -> None:
    """Process 0: a new store with attributes, coordinates and empty arrays."""
    group = zarr.open_group(spec.path, mode="w", zarr_format=3, attributes=spec.attrs)
    lock_dir(spec.path).mkdir(exist_ok=True)
    group.create_array(spec.name, shape=(0, *spec.shape), chunks=(1, *spec.chunks),
                       dtype=spec.dtype, fill_value=0,
                       dimension_names=("time", *spec.dims))  # fmt: skip
    time = group.create_array("time", shape=(0,), chunks=(_TIME_CHUNK,), dtype="int64",
                              fill_value=0, dimension_names=("time",))  # fmt: skip
    time.attrs["long_name"] = "time step"
    for key, dtype in spec.diagnostics:
        group.create_array(key, shape=(0,), chunks=(_TIME_CHUNK,), dtype=dtype, fill_value=0,
                           dimension_names=("time",))  # fmt: skip
    for dim, values in spec.coords.items():
        coord = group.create_array(dim, shape=values.shape, dtype=values.dtype, fill_value=0,
                                   dimension_names=(dim,))  # fmt: skip
        coord[:] = values
    _consolidate(spec)


def truncate(spec: StoreSpec, restart_step: int) -> int:
    """Process 0: check an existing store and drop its snapshots at steps >= ``restart_step``."""
    try:
        group = zarr.open_group(spec.path, mode="r+")
        field, time = group[spec.name], group["time"]
    except (KeyError, FileNotFoundError, ValueError) as exc:
        raise StoreMismatchError(
            f"{spec.path} is not a snapshot store of field {spec.name!r} ({exc}); choose "
            f"another output path, or delete it to start over"
        ) from None
    check_identity(spec, spec.name, field.metadata.dimension_names[1:], field.shape[1:],
                   field.dtype, dict(group.attrs))  # fmt: skip
    arrays = [field, time] + [group[k] for k, _ in spec.diagnostics if k in group]
    if len(arrays) != 2 + len(spec.diagnostics):
        raise StoreMismatchError(
            f"{spec.path} lacks diagnostics of {[k for k, _ in spec.diagnostics]}; choose "
            f"another output path, or delete it to start over"
        )
    committed = min(a.shape[0] for a in arrays)  # a commit cut short grows some arrays only
    steps = np.asarray(time[:committed])
    kept = int(np.count_nonzero(steps < restart_step))
    for array in arrays:
        if array.shape[0] != kept:
            array.resize((kept, *array.shape[1:]))
    lock_dir(spec.path).mkdir(exist_ok=True)
    _consolidate(spec)
    return kept


def _consolidate(spec: StoreSpec) -> None:
    with quiet_zarr():
        zarr.consolidate_metadata(spec.path)


class ZarrBlocks:
    """One process's handle on the store: writes its regions, and (process 0) commits."""

    def __init__(self, spec: StoreSpec):
        self.spec = spec
        self.group = zarr.open_group(spec.path, mode="r+", use_consolidated=False)
        self.field = self.group[spec.name]
        self.chunks = tuple(self.field.chunks[1:])  # the store's own (a restart may differ)

    def _view(self, length: int, array: zarr.Array | None = None) -> zarr.Array:
        """``array`` (default: the field) as if ``length`` snapshots long (no metadata written)."""
        array = self.field if array is None else array
        metadata = dataclasses.replace(array.metadata, shape=(length, *array.shape[1:]))
        return zarr.Array(zarr.AsyncArray(metadata=metadata, store_path=array.store_path))

    def write_pieces(self, index: int, pieces: list[Piece], decode: Any) -> None:
        """Write this process's decoded blocks of snapshot ``index``.

        One assignment per row of chunks: zarr encodes the chunks of one assignment
        concurrently, so a block written whole would hold the encodings of many chunks
        at once; a row at a time holds those of one row.
        """
        view = self._view(index + 1)
        for piece in pieces:
            shared = self._partial_chunks(_cell_region(piece, decode, self.spec.shape))
            with chunk_locks(self.spec.path, shared):
                for part in _row_parts(piece, decode, self.chunks[0]):
                    region, cells = decode_piece(part, decode, self.spec.shape)
                    view[(index, *region)] = cells

    def _partial_chunks(self, region: tuple[slice, ...]) -> list[str]:
        """Keys of the chunks ``region`` touches but does not cover whole (shared chunks)."""
        ranges = []
        for sl, c, n in zip(region, self.chunks, self.spec.shape, strict=True):
            ranges.append([(i, sl.start <= i * c and min((i + 1) * c, n) <= sl.stop)
                           for i in range(sl.start // c, -(-sl.stop // c))])  # fmt: skip
        return [
            f"{self.spec.name}." + ".".join(str(i) for i, _ in combo)
            for combo in itertools.product(*ranges)
            if not all(whole for _, whole in combo)
        ]

    def commit(self, index: int, step: int, values: dict[str, Any]) -> None:
        """Process 0: make snapshot ``index`` visible (all its blocks are written)."""
        length = index + 1
        # Values first, through views of the new length; then the lengths, time last: a run
        # killed anywhere in here leaves a store whose every visible snapshot is complete.
        diagnostics = [self.group[key] for key, _ in self.spec.diagnostics]
        time = self.group["time"]
        news = [values[key] for key, _ in self.spec.diagnostics] + [step]
        for array, value in zip(diagnostics + [time], news, strict=True):
            self._view(length, array)[index] = value
        self.field.resize((length, *self.spec.shape))
        for array in diagnostics:
            array.resize((length,))
        time.resize((length,))  # last: readers open a consistent store up to here
        _consolidate(self.spec)


def _cell_region(piece: Piece, decode: Any, shape) -> tuple[slice, ...]:
    """The cells ``piece`` covers once decoded (a plain decode: from its first and last rows)."""
    region, block = piece
    if decode is None or block.shape[0] == 0:
        return decode_piece(piece, decode, shape)[0]
    if isinstance(decode, Decoding):  # the representation knows without decoding
        return tuple(decode.region(region))
    head = decode_piece(((slice(region[0].start, region[0].start + 1), *region[1:]), block[:1]),
                        decode, shape)[0]  # fmt: skip
    tail = decode_piece(((slice(region[0].stop - 1, region[0].stop), *region[1:]), block[-1:]),
                        decode, shape)[0]  # fmt: skip
    return (slice(head[0].start, tail[0].stop), *head[1:])


def _row_parts(piece: Piece, decode: Any, rows: int):
    """``piece`` cut along its first axis into parts of about ``rows`` cell rows (a row of
    store chunks), each decoded on its own: writing holds one part's cells and encodings."""
    region, block = piece
    first = region[0]
    per = 1
    if decode is not None and block.shape[0]:
        per = max(1, np.asarray(decode(block[:1])).shape[0])  # cell rows per stored row
    step = max(1, rows // per)
    start = first.start
    cuts = [start, *range((start // step + 1) * step, first.stop, step)]
    for lo, hi in zip(cuts, [*cuts[1:], first.stop], strict=True):
        yield (slice(lo, hi), *region[1:]), block[lo - start : hi - start]


def lock_dir(path: Path) -> Path:
    """The directory of a store's chunk locks: ``.<name>.locks`` beside it."""
    return path.with_name(f".{path.name}.locks")


@contextlib.contextmanager
def chunk_locks(path: Path, keys: Sequence[str]):
    """Hold exclusive POSIX locks on the chunks ``keys`` of store ``path`` (sorted: no deadlock)."""
    files = []
    try:
        for key in sorted(set(keys)):
            handle = open(lock_dir(path) / f"{key}.lock", "a+b")  # noqa: SIM115
            files.append(handle)
            fcntl.lockf(handle, fcntl.LOCK_EX)
        yield
    finally:
        for handle in reversed(files):
            with contextlib.suppress(OSError):
                fcntl.lockf(handle, fcntl.LOCK_UN)
            handle.close()


@contextlib.contextmanager
def quiet_zarr():
    """Silence zarr-python's note that consolidated metadata is not in the v3 spec yet."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Consolidated metadata")
        yield


class Zarr(Format):
    """The ``.zarr`` format: every process writes its region (see the module).

    >>> Zarr().suffix, Zarr().parallel
    ('.zarr', True)
    """

    suffix, parallel = ".zarr", True

    create = staticmethod(create)
    truncate = staticmethod(truncate)

    def writer(self, spec: StoreSpec, rank: int) -> ZarrBlocks:
        return ZarrBlocks(spec)

    def update_attrs(self, path: Path, attrs) -> None:
        with quiet_zarr():
            zarr.open_group(path, mode="r+", use_consolidated=False).attrs.update(attrs)
            zarr.consolidate_metadata(path)

    def finish(self, path: Path) -> None:
        import shutil

        shutil.rmtree(lock_dir(path), ignore_errors=True)
