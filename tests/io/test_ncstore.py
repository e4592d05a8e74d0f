"""netCDF snapshots: an append undone when a write fails, later snapshots dropped on a
restart, the chunk of one snapshot."""

import errno

import numpy as np
import pytest
import xarray as xr

from pgas.io import ncstore, output
from pgas.io.snapshots import SnapshotWriteError, SnapshotWriter

WRITE_AT = ncstore.UndoFile._write_at


def full(at: int):
    """A ``UndoFile._write_at`` whose disk is full from its ``at``-th write on (0-based)."""
    calls = []

    def write_at(self, view, offset):
        calls.append(offset)
        if len(calls) > at:
            raise OSError(errno.ENOSPC, "No space left on device")
        WRITE_AT(self, view, offset)

    return write_at


def open_store(path, n=2):
    return SnapshotWriter.open(path, name="u", dims=("x",), shape=(n,), dtype="float32",
                               diagnostics=("top",), attrs={"example": "t"})  # fmt: skip


def test_a_failed_netcdf_append_leaves_the_file_as_it_was(tmp_path, monkeypatch):
    """The disk fills at every write of an append in turn: each time the append raises ENOSPC
    and the file is as before, byte for byte; the writer says what the file keeps."""
    path = tmp_path / "x.nc"
    with open_store(path) as out:
        for t in (0, 1):
            out.write(t, np.full(2, t, np.float32), {"top": t}, region=(slice(0, 2),))
        spec = out.spec
    before = path.read_bytes()
    at = 0
    while True:
        monkeypatch.setattr(ncstore.UndoFile, "_write_at", full(at))
        try:
            ncstore.NetcdfFile(spec).append(2, 2, {"top": 2.0}, np.full(2, 2, np.float32))
        except OSError as exc:
            assert exc.errno == errno.ENOSPC
            assert path.read_bytes() == before, f"disk full at write {at}"
            at += 1
            continue
        break  # no write failed: every position was tried
    assert at >= 5  # the data, the diagnostics, HDF5's metadata
    monkeypatch.setattr(ncstore.UndoFile, "_write_at", full(0))
    with pytest.raises(SnapshotWriteError, match="no space left for .*x.nc"):
        output.update_attrs(path, {"checksum": "ab"})
    path.write_bytes(before)
    with SnapshotWriter.open(path, name="u", dims=("x",), shape=(2,), dtype="float32",
                             diagnostics=("top",), attrs={"example": "t"},
                             restart_step=2) as out:  # fmt: skip
        out.write(2, np.full(2, 2, np.float32), {"top": 2.0}, region=(slice(0, 2),))
        with pytest.raises(SnapshotWriteError, match=r"no space left .*keeps the 2 snapshot"):
            out.write(3, np.full(2, 3, np.float32), {"top": 3.0}, region=(slice(0, 2),))
    assert path.read_bytes() == before
    with xr.open_dataset(path, engine="h5netcdf") as ds:
        assert ds["time"].values.tolist() == [0, 1]


def test_truncate_drops_the_snapshots_from_the_restart_step_on(tmp_path):
    path = tmp_path / "x.nc"
    fields = [np.arange(3, dtype=np.float32) + 10 * t for t in range(3)]
    with open_store(path, 3) as out:
        for t, f in enumerate(fields):
            out.write(5 * t, f, {"top": float(f.max())}, region=(slice(0, 3),))
        spec = out.spec
    before = path.read_bytes()
    assert ncstore.truncate(spec, 100) == 3 and path.read_bytes() == before  # nothing to drop
    assert ncstore.truncate(spec, 6) == 2  # steps 0 and 5 kept, 10 dropped
    with xr.open_dataset(path, engine="h5netcdf") as ds:
        assert ds["time"].values.tolist() == [0, 5]
        np.testing.assert_array_equal(ds["u"].values, np.stack(fields[:2]))
        np.testing.assert_array_equal(ds["top"].values, [2.0, 12.0])
        assert ds.attrs["example"] == "t"


def test_nc_chunks_halves_the_largest_axis_until_a_chunk_fits():
    assert ncstore.nc_chunks((10, 20), 8) == (1, 10, 20)  # 1600 bytes: one chunk
    assert ncstore.nc_chunks((7,), 1, limit=2) == (1, 2)  # 7 -> 4 -> 2 cells
    assert ncstore.nc_chunks((1000, 1000), 8, limit=1 << 20) == (1, 250, 500)  # 1e6 bytes
