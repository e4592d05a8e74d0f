"""Faults end cleanly: a real full disk while a store is written or created.

A full disk is real where a small tmpfs can be mounted (root with CAP_SYS_ADMIN; the tests
that need one skip elsewhere). netCDF used to segfault at exit after a full disk (HDF5's exit
handler closed objects that a failed write had left open); Zarr used to leave a half-made
store and a raw traceback. The same faults patched in (the store's writes raise
``OSError(ENOSPC)``) are tested per format in test_ncstore.py and test_zarrstore.py; a field
too large for memory in tests/runtime/test_capacity.py.
"""

import os
import shutil
import subprocess
import sys

import pytest
import xarray as xr

from pgas.io.snapshots import SnapshotWriteError, SnapshotWriter

try:
    from .dist_scripts import common
except ImportError:  # tests/ is not a package: pytest put it on sys.path
    from dist_scripts import common

HEAT = common.ROOT / "examples" / "heat1d" / "heat1d.py"


@pytest.fixture
def small_disk(tmp_path):
    """``small_disk(kib)``: a directory on a tmpfs of ``kib`` KiB (skips where none mounts)."""
    mounted = []

    def mount(kib: int):
        where = tmp_path / f"disk{kib}"
        where.mkdir()
        if os.geteuid() != 0 or not shutil.which("mount"):
            pytest.skip("mounting a tmpfs needs root")
        r = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={kib}k", "tmpfs", str(where)],
                           capture_output=True, text=True)  # fmt: skip
        if r.returncode:
            pytest.skip(f"cannot mount a tmpfs here: {r.stderr.strip()}")
        mounted.append(where)
        return where

    yield mount
    for where in mounted:
        subprocess.run(["umount", "-l", str(where)], check=False)


def open_store(path, n=2):
    return SnapshotWriter.open(path, name="u", dims=("x",), shape=(n,), dtype="float32",
                               diagnostics=("top",), attrs={"example": "t"})  # fmt: skip


@pytest.mark.slow
def test_a_full_disk_ends_a_netcdf_run_with_one_message(small_disk):
    """heat1d --out x.nc on a disk that fills after 2 snapshots: exit 2, one message, no
    segfault (was: 12 h5py tracebacks, then exit 139); the file keeps what it says."""
    disk = small_disk(884)
    out = disk / "x.nc"
    # k = 1: auto's 16, more than the 4 steps between snapshots, would compile a group never run
    r = subprocess.run([sys.executable, str(HEAT), "--n", "100000", "--steps", "200",
                        "--devices", "2", "--steps-per-exchange", "1", "--quiet", "--out",
                        str(out)],
                       env=common.clean_env(), capture_output=True, text=True, timeout=120,
                       cwd=common.ROOT)  # fmt: skip
    assert r.returncode == 2, (r.returncode, r.stderr[-3000:])
    errors = [line for line in r.stderr.splitlines() if "error:" in line]
    assert len(errors) == 1 and "Traceback" not in r.stderr, r.stderr[-3000:]
    assert f"SnapshotWriteError: writing a snapshot to {out} failed: no space left" in errors[0]
    kept = int(errors[0].split("the store keeps the ")[1].split()[0])
    with xr.open_dataset(out, engine="h5netcdf") as ds:
        assert ds.sizes["time"] == kept >= 1


def test_a_full_disk_while_creating_a_zarr_store_leaves_nothing(small_disk):
    disk = small_disk(8)
    with pytest.raises(SnapshotWriteError, match=r"creating .*x.zarr failed: no space left for "
                       r".*nothing was left behind"):  # fmt: skip
        open_store(disk / "x.zarr")
    assert os.listdir(disk) == []  # neither the store nor its lock directory
