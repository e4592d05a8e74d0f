"""Zarr snapshots: a store that fails half made is removed, the lock directory goes with a
failed write, later snapshots are dropped on a restart, chunk locks."""

import errno
import os

import numpy as np
import pytest
import xarray as xr

from pgas.io import zarrstore
from pgas.io.snapshots import SnapshotWriteError, SnapshotWriter


def open_store(path, n=2):
    return SnapshotWriter.open(path, name="u", dims=("x",), shape=(n,), dtype="float32",
                               diagnostics=("top",), attrs={"example": "t"})  # fmt: skip


def test_a_zarr_store_that_fails_half_made_is_removed(tmp_path, monkeypatch):
    def no_space(spec):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(zarrstore, "_consolidate", no_space)  # after the arrays are made
    path = tmp_path / "x.zarr"
    with pytest.raises(SnapshotWriteError, match="creating .* nothing was left behind"):
        open_store(path)
    assert os.listdir(tmp_path) == []


def test_a_failed_zarr_write_removes_the_lock_directory(tmp_path, monkeypatch):
    def no_space(self, index, pieces, decode):
        raise OSError(errno.ENOSPC, "No space left on device")

    path = tmp_path / "x.zarr"
    out = open_store(path)
    monkeypatch.setattr(zarrstore.ZarrBlocks, "write_pieces", no_space)
    out.write(0, np.zeros(2, np.float32), {"top": 0.0}, region=(slice(0, 2),))
    with pytest.raises(SnapshotWriteError, match="keeps the 0 snapshot"):
        out.close()
    assert sorted(os.listdir(tmp_path)) == ["x.zarr"]  # no .x.zarr.locks


def test_truncate_drops_the_snapshots_from_the_restart_step_on(tmp_path):
    path = tmp_path / "x.zarr"
    fields = [np.arange(3, dtype=np.float32) + 10 * t for t in range(3)]
    with open_store(path, 3) as out:
        for t, f in enumerate(fields):
            out.write(5 * t, f, {"top": float(f.max())}, region=(slice(0, 3),))
        spec = out.spec
    assert not zarrstore.lock_dir(path).exists()  # removed when the writer closed
    assert zarrstore.truncate(spec, 100) == 3  # nothing to drop
    assert zarrstore.truncate(spec, 6) == 2  # steps 0 and 5 kept, 10 dropped
    assert zarrstore.lock_dir(path).is_dir()  # made again for the writes of the restart
    with xr.open_zarr(path) as ds:
        assert ds["time"].values.tolist() == [0, 5]
        np.testing.assert_array_equal(ds["u"].values, np.stack(fields[:2]))
        np.testing.assert_array_equal(ds["top"].values, [2.0, 12.0])


def test_chunk_locks_are_files_in_the_lock_directory_beside_the_store(tmp_path):
    path = tmp_path / "run.zarr"
    assert zarrstore.lock_dir(path) == tmp_path / ".run.zarr.locks"
    zarrstore.lock_dir(path).mkdir()
    with zarrstore.chunk_locks(path, ["u.1.0", "u.0.1", "u.1.0"]):  # each chunk once
        held = sorted(os.listdir(zarrstore.lock_dir(path)))
    assert held == ["u.0.1.lock", "u.1.0.lock"]
    with zarrstore.chunk_locks(path, ["u.0.1"]):  # released: taken again at once
        pass
