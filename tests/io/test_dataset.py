"""Tests of pgas.io: Datasets from NumPy arrays, atomic netCDF/Zarr writes, path checks."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest
import xarray as xr

from pgas.io import dataset as pio

FORMATS = [".nc", ".zarr"]


def _open(path):
    if str(path).endswith(".nc"):
        return xr.open_dataset(path)
    return xr.open_zarr(path)


def _example(dtype, ndim=1):
    shape = {1: (4, 10), 2: (3, 6, 8), 3: (2, 3, 4, 5)}[ndim]
    rng = np.random.default_rng(0)
    if np.issubdtype(dtype, np.integer):
        fields = rng.integers(0, 2, shape).astype(dtype)
    else:
        fields = rng.random(shape).astype(dtype)
    times = np.arange(shape[0]) * 25
    total = fields.reshape(shape[0], -1).sum(axis=1).astype(np.float64)
    return fields, times, {"total": total}


# --------------------------------------------------------------------------
# to_dataset
# --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "ndim, dims",
    [(1, ("time", "x")), (2, ("time", "y", "x")), (3, ("time", "z", "y", "x"))],
)
def test_default_dims_and_index_coords(ndim, dims):
    fields, times, diags = _example(np.float32, ndim)
    ds = pio.to_dataset(fields, times, diagnostics=diags)
    assert ds["u"].dims == dims
    assert ds["u"].dtype == np.float32
    np.testing.assert_array_equal(ds["u"].values, fields)
    np.testing.assert_array_equal(ds["time"].values, times)
    for dim, size in zip(dims[1:], fields.shape[1:]):
        np.testing.assert_array_equal(ds[dim].values, np.arange(size))
    assert ds["total"].dims == ("time",)


def test_name_dims_coords_attrs():
    fields = np.zeros((2, 3, 4), np.float64)
    x = np.linspace(0.0, 1.0, 4)
    ds = pio.to_dataset(
        fields,
        [0, 100],
        name="T",
        dims=("row", "col"),
        coords={"col": x},
        attrs={"nu": 0.1, "mesh": (2, 4)},
    )
    assert ds["T"].dims == ("time", "row", "col")
    np.testing.assert_array_equal(ds["col"].values, x)
    assert ds.attrs == {"nu": 0.1, "mesh": "[2, 4]"}
    full = pio.to_dataset(fields, [0, 100], dims=("step", "a", "b"))
    assert full["u"].dims == ("step", "a", "b")


@pytest.mark.parametrize(
    "kwargs, words",
    [
        ({"fields": np.zeros(5)}, "leading snapshot axis"),
        ({"fields": np.zeros((2,) * 5)}, "pass dims="),
        ({"times": [0, 1, 2]}, "times has shape (3,)"),
        ({"times": [[0, 1]]}, "times has shape (1, 2)"),
        ({"dims": ("a", "b", "c")}, "dims = ('a', 'b', 'c')"),
        ({"dims": ("x", "x")}, "distinct names"),
        ({"coords": {"time": [0, 1]}}, "coords has a key 'time'"),
        ({"coords": {"x": np.arange(3)}}, "coords['x'] has shape (3,)"),
        ({"diagnostics": {"heat": np.ones(3)}}, "diagnostics['heat'] has shape (3,)"),
        ({"diagnostics": {"u": np.ones(2)}}, "key 'u' that is already"),
        ({"diagnostics": {"x": np.ones(2)}}, "key 'x' that is already"),
        ({"fields": np.array([[None, 1]])}, "dtype object"),
    ],
)
def test_to_dataset_errors(kwargs, words):
    args = {"fields": np.zeros((2, 4)), "times": [0, 1]} | kwargs
    with pytest.raises(pio.DatasetInputError) as info:
        pio.to_dataset(args.pop("fields"), args.pop("times"), **args)
    assert words in str(info.value)
    assert isinstance(info.value, ValueError)


# --------------------------------------------------------------------------
# write_dataset / read_dataset round trips
# --------------------------------------------------------------------------


@pytest.mark.parametrize("suffix", FORMATS)
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.uint8])
@pytest.mark.parametrize("ndim", [1, 2])
def test_round_trip(tmp_path, suffix, dtype, ndim):
    fields, times, diags = _example(dtype, ndim)
    attrs = {"nu": 0.25, "steps": 75, "mesh": (2, 4), "periodic": True, "name": "heat1d"}
    ds = pio.to_dataset(fields, times, diagnostics=diags, attrs=attrs)
    out = pio.write_dataset(ds, tmp_path / f"run{suffix}")
    assert out == tmp_path / f"run{suffix}"
    with _open(out) as back:
        assert back["u"].dtype == dtype
        assert back["u"].dims == ds["u"].dims
        np.testing.assert_array_equal(back["u"].values, fields)
        np.testing.assert_array_equal(back["time"].values, times)
        np.testing.assert_array_equal(back["x"].values, ds["x"].values)
        np.testing.assert_array_equal(back["total"].values, diags["total"])
        assert back["total"].dims == ("time",)
        assert back.attrs["nu"] == 0.25 and back.attrs["steps"] == 75
        assert back.attrs["name"] == "heat1d" and back.attrs["periodic"] == 1
        assert json.loads(back.attrs["mesh"]) == [2, 4]
    xr.testing.assert_identical(pio.read_dataset(out), ds)


def test_netcdf_readable_by_both_engines(tmp_path):
    fields, times, diags = _example(np.float32, 2)
    out = pio.write_dataset(pio.to_dataset(fields, times, diagnostics=diags), tmp_path / "a.nc")
    for engine in ("h5netcdf", "netcdf4"):
        with xr.open_dataset(out, engine=engine) as back:
            np.testing.assert_array_equal(back["u"].values, fields)


def test_physical_coordinates_round_trip(tmp_path):
    x = np.linspace(-1.0, 1.0, 10)
    ds = pio.to_dataset(np.zeros((2, 10), np.float32), [0, 5], coords={"x": x})
    with _open(pio.write_dataset(ds, tmp_path / "c.nc")) as back:
        np.testing.assert_array_equal(back["x"].values, x)


@pytest.mark.parametrize("suffix", FORMATS)
def test_overwrite_is_atomic_and_leaves_no_temporaries(tmp_path, suffix):
    path = tmp_path / f"run{suffix}"
    first = pio.to_dataset(np.zeros((2, 5), np.float32), [0, 1])
    second = pio.to_dataset(np.ones((3, 5), np.float32), [0, 1, 2])
    pio.write_dataset(first, path)
    pio.write_dataset(second, path, overwrite=True)
    assert sorted(os.listdir(tmp_path)) == [f"run{suffix}"]
    with _open(path) as back:
        np.testing.assert_array_equal(back["u"].values, np.ones((3, 5)))


@pytest.mark.parametrize("suffix", FORMATS)
def test_failed_write_keeps_old_result_and_cleans_up(tmp_path, suffix):
    path = tmp_path / f"run{suffix}"
    good = pio.to_dataset(np.zeros((2, 5), np.float32), [0, 1])
    pio.write_dataset(good, path)
    bad = good.copy()
    bad.attrs["bad"] = {1, 2}  # a set: no writer can store it (bypassing to_dataset)
    with pytest.raises((TypeError, ValueError)):
        pio.write_dataset(bad, path, overwrite=True)
    assert sorted(os.listdir(tmp_path)) == [f"run{suffix}"]
    with _open(path) as back:
        np.testing.assert_array_equal(back["u"].values, np.zeros((2, 5)))


@pytest.mark.parametrize("suffix", FORMATS)
def test_crash_after_writing_removes_the_temporary(tmp_path, suffix, monkeypatch):
    path = tmp_path / f"run{suffix}"
    pio.write_dataset(pio.to_dataset(np.zeros((2, 5), np.float32), [0, 1]), path)
    method = "to_netcdf" if suffix == ".nc" else "to_zarr"
    original = getattr(xr.Dataset, method)
    written = []

    def write_then_fail(self, target, *args, **kwargs):
        original(self, target, *args, **kwargs)
        written.append(os.path.basename(target))
        raise RuntimeError("disk full")

    monkeypatch.setattr(xr.Dataset, method, write_then_fail)
    with pytest.raises(RuntimeError, match="disk full"):
        pio.write_dataset(pio.to_dataset(np.ones((2, 5), np.float32), [0, 1]), path, overwrite=True)
    assert written and written[0].startswith(f".run{suffix}.")  # a hidden sibling
    assert sorted(os.listdir(tmp_path)) == [f"run{suffix}"]
    with _open(path) as back:
        np.testing.assert_array_equal(back["u"].values, np.zeros((2, 5)))


# --------------------------------------------------------------------------
# check_writable
# --------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["run.nc", "run.zarr", "RUN.NC"])
def test_check_writable_ok(tmp_path, name):
    assert pio.check_writable(tmp_path / name) == tmp_path / name
    assert os.listdir(tmp_path) == []  # the probe file is gone


@pytest.mark.parametrize("name", ["run.h5", "run", "run.nc.bak"])
def test_check_writable_bad_suffix(tmp_path, name):
    with pytest.raises(pio.OutputPathError, match=r"\.nc \(netCDF\) or \.zarr") as info:
        pio.check_writable(tmp_path / name)
    assert name in str(info.value)


def test_check_writable_missing_directory(tmp_path):
    missing = tmp_path / "no" / "such"
    with pytest.raises(pio.OutputPathError, match="does not exist; create it first") as info:
        pio.check_writable(missing / "run.nc")
    assert str(missing) in str(info.value)


def test_check_writable_parent_is_a_file(tmp_path):
    (tmp_path / "file").write_text("x")
    with pytest.raises(pio.OutputPathError, match="is not a directory"):
        pio.check_writable(tmp_path / "file" / "run.nc")


@pytest.mark.skipif(not os.path.isdir("/sys"), reason="needs /sys")
def test_check_writable_unwritable_directory_sysfs():
    # /sys refuses new files even to root
    with pytest.raises(pio.OutputPathError, match="is not writable"):
        pio.check_writable("/sys/run.nc")


@pytest.mark.skipif(os.geteuid() == 0, reason="root can write to any directory")
def test_check_writable_unwritable_directory(tmp_path):
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o500)
    try:
        with pytest.raises(pio.OutputPathError, match="is not writable"):
            pio.check_writable(locked / "run.zarr")
    finally:
        locked.chmod(0o700)


def test_check_writable_refuses_to_replace_foreign_objects(tmp_path):
    (tmp_path / "run.nc").mkdir()
    with pytest.raises(pio.OutputPathError, match="is an existing directory"):
        pio.check_writable(tmp_path / "run.nc")
    notes = tmp_path / "notes.zarr"
    notes.mkdir()
    (notes / "important.txt").write_text("keep me")
    with pytest.raises(pio.OutputPathError, match="is not a Zarr store; refusing"):
        pio.write_dataset(pio.to_dataset(np.zeros((1, 2)), [0]), notes)
    assert (notes / "important.txt").read_text() == "keep me"


def test_read_dataset_errors(tmp_path):
    with pytest.raises(pio.OutputPathError, match="does not exist"):
        pio.read_dataset(tmp_path / "none.nc")
    with pytest.raises(pio.OutputPathError, match="suffix '.txt'"):
        pio.read_dataset(tmp_path / "none.txt")


def test_results_errors_are_pgas_errors(tmp_path):
    from pgas.errors import PgasError

    for cls in (pio.ResultsError, pio.DatasetInputError, pio.OutputPathError):
        assert issubclass(cls, PgasError) and issubclass(cls, ValueError)
    with pytest.raises(PgasError, match="suffix"):
        pio.check_writable(tmp_path / "run.h5")


@pytest.mark.parametrize("suffix", FORMATS)
def test_an_existing_result_is_not_replaced_unless_asked(tmp_path, suffix):
    """As xarray's to_zarr(mode="w-"): the path and the keyword are named, the file kept."""
    path = tmp_path / f"run{suffix}"
    pio.write_dataset(pio.to_dataset(np.zeros((2, 5), np.float32), [0, 1]), path)
    with pytest.raises(pio.OutputPathError, match="exists.*overwrite=True"):
        pio.write_dataset(pio.to_dataset(np.ones((2, 5), np.float32), [0, 1]), path)
    with _open(path) as back:
        np.testing.assert_array_equal(back["u"].values, np.zeros((2, 5)))


@pytest.mark.parametrize("suffix", FORMATS)
def test_a_snapshot_store_is_not_replaced_unless_asked(tmp_path, suffix):
    from pgas.io.snapshots import SnapshotWriter

    path = tmp_path / f"run{suffix}"
    path.write_text("user notes") if suffix == ".nc" else None
    kw = dict(name="u", dims=("x",), shape=(4,), dtype="float32")
    if suffix == ".zarr":
        SnapshotWriter.open(path, **kw).close()
    with pytest.raises(pio.OutputPathError, match="exists.*overwrite"):
        SnapshotWriter.open(path, **kw)
    SnapshotWriter.open(path, overwrite=True, **kw).close()
    assert sorted(os.listdir(tmp_path)) == [f"run{suffix}"]  # the old one moved aside, removed
