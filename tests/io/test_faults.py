"""Faults end cleanly: a full disk while a store is written or created, a field too large.

A full disk is real where a small tmpfs can be mounted (root with CAP_SYS_ADMIN; the tests
that need one skip elsewhere) and patched otherwise: the store's writes raise
``OSError(ENOSPC)``. netCDF used to segfault at exit after a full disk (HDF5's exit handler
closed objects that a failed write had left open); Zarr used to leave a half-made store and
a raw traceback. A field larger than memory used to be killed without a word.
"""

import errno
import os
import shutil
import subprocess
import sys
import types

import numpy as np
import pytest
import xarray as xr

import pgas
from pgas.app import runner
from pgas.app.options import RunOptions
from pgas.app.problem import demo
from pgas.errors import FieldTooLargeError
from pgas.io import ncstore, output, zarrstore
from pgas.io.snapshots import SnapshotWriteError, SnapshotWriter
from pgas.runtime import capacity

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


def full(at: int):
    """A ``UndoFile._write_at`` whose disk is full from its ``at``-th write on (0-based)."""
    calls = []

    def write_at(self, view, offset):
        calls.append(offset)
        if len(calls) > at:
            raise OSError(errno.ENOSPC, "No space left on device")
        WRITE_AT(self, view, offset)

    return write_at


WRITE_AT = ncstore.UndoFile._write_at


def open_store(path, n=2):
    return SnapshotWriter.open(path, name="u", dims=("x",), shape=(n,), dtype="float32",
                               diagnostics=("top",), attrs={"example": "t"})  # fmt: skip


@pytest.mark.slow
def test_a_full_disk_ends_a_netcdf_run_with_one_message(small_disk):
    """heat1d --out x.nc on a disk that fills after 2 snapshots: exit 2, one message, no
    segfault (was: 12 h5py tracebacks, then exit 139); the file keeps what it says."""
    disk = small_disk(884)
    out = disk / "x.nc"
    r = subprocess.run([sys.executable, str(HEAT), "--n", "100000", "--steps", "200",
                        "--devices", "2", "--quiet", "--out", str(out)],
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


# ---- A field too large for memory -------------------------------------------------------


def test_a_field_too_large_for_memory_is_refused_before_it_is_allocated():
    """128 TiB over 8 CPU devices: 16 TiB a device, more than any host here has."""
    mesh = pgas.make_mesh(("x",), devices=8)
    n = 2**45
    makers = [
        lambda: pgas.zeros((n,), mesh),
        lambda: pgas.full((n,), 1.0, mesh),
        lambda: pgas.from_function(lambda i: i, (n,), mesh),
        lambda: pgas.from_numpy(np.broadcast_to(np.float32(0), (n,)), mesh),  # no memory
    ]
    for make in makers:
        with pytest.raises(FieldTooLargeError) as err:
            make()
        text = str(err.value)
        assert f"the field ({n},) (float32) needs 16384.00 GiB per device" in text, text
        assert "8 CPU device(s)" in text and "GiB" in text.split("but it can get")[1]
        assert "run on more nodes" in text and "make the field smaller" in text
        assert isinstance(err.value, MemoryError)


def test_the_runner_counts_the_buffers_of_a_run(monkeypatch):
    """With room for 1.5 states: the state alone is built, a run (2 buffers) is refused."""
    mesh = runner.mesh_for(demo(), 2)
    one = sum(s.data.nbytes for s in runner.build(demo(), mesh).data.addressable_shards)
    monkeypatch.setattr(capacity, "SMALL", 0)
    monkeypatch.setattr(capacity, "host_available", lambda: one * 3 // 2)
    runner.build(demo(), mesh)  # one buffer fits
    with pytest.raises(FieldTooLargeError, match=r"the demo field .* \(2 buffers of its"):
        runner.run(demo(), RunOptions(steps=2, devices=2))
    monkeypatch.setenv("PGAS_MEMORY_CHECK", "0")
    assert runner.run(demo(), RunOptions(steps=2, devices=2)).steps == 2


def test_an_accelerator_is_compared_with_its_bytes_limit():
    gpu = types.SimpleNamespace(platform="gpu", id=3, device_kind="H100",
                                memory_stats=lambda: {"bytes_limit": 2**30})  # fmt: skip
    capacity.check_fits((2**28,), "float32", [gpu])  # exactly its memory
    with pytest.raises(
        FieldTooLargeError,
        match=r"2.00 GiB per device .* but gpu:3 \(H100\) "
        r"holds 1.00 GiB; spread it over more devices .* or store it in float32",
    ):
        capacity.check_fits((2**27,), "float64", [gpu], buffers=2)


def test_a_cgroup_limit_caps_the_memory_a_process_can_get(tmp_path):
    """Slurm jobs and containers: the room under the cgroup's limit, page cache counted free;
    the least of the cgroup and its parents (v2 and v1)."""
    v2 = tmp_path / "v2"
    (v2 / "job" / "step").mkdir(parents=True)
    for where, limit, used, cache in [("job", "3221225472", "2147483648", "0"),
                                      ("job/step", "max", "1073741824", "0")]:  # fmt: skip
        (v2 / where / "memory.max").write_text(limit + "\n")
        (v2 / where / "memory.current").write_text(used + "\n")
        (v2 / where / "memory.stat").write_text(f"anon 5\nfile {cache}\n")
    (v2 / "job" / "memory.stat").write_text("file 536870912\n")
    me = tmp_path / "cgroup"
    me.write_text("0::/job/step\n")
    assert capacity._cgroup_room(v2, str(me)) == 3 * 2**30 - 2 * 2**30 + 2**29
    v1 = tmp_path / "v1" / "memory" / "slurm"
    v1.mkdir(parents=True)
    (v1 / "memory.limit_in_bytes").write_text("1073741824\n")
    (v1 / "memory.usage_in_bytes").write_text("1073741824\n")
    (v1 / "memory.stat").write_text("cache 1\ntotal_cache 268435456\n")
    me.write_text("4:memory:/slurm\n0::/\n")
    assert capacity._cgroup_room(tmp_path / "v1", str(me)) == 2**28
    me.write_text("0::/\n")
    assert capacity._cgroup_room(tmp_path / "none", str(me)) is None
