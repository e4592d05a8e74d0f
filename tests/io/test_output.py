"""Output: an example's snapshots streamed to a store, with its diagnostics reduced over the
processes, and the run's results added to the store's attributes."""

import types

import numpy as np
import pytest
import xarray as xr

import pgas
from pgas.io.output import Output, Stream, local, reducer, update_attrs


def total(blocks, reduce):
    return {"total": reduce("sum", sum(float(b.sum()) for b in blocks)),
            "top": reduce("max", max(float(b.max()) for b in blocks))}  # fmt: skip


def test_a_stream_copies_each_snapshot_into_the_same_host_blocks(tmp_path):
    """The app's Stream allocates its host blocks once: every snapshot after the first is
    copied into the arrays of the one before (written by then), for GlobalArrays on 3
    devices (uneven blocks) and for a NumPy block with its region (the MPI path)."""
    mesh = pgas.make_mesh(devices=3)
    fields = [np.arange(10.0) + 100 * s for s in range(3)]

    def stream(path):
        return Stream(path, Output(dims=("x",)), (10,), "float64", None, None, {}, None,
                      None, 1)  # fmt: skip

    out = stream(tmp_path / "a.zarr")
    for s, f in enumerate(fields):
        out.write(s, pgas.from_numpy(f, mesh))
        if s == 0:
            first = [b for _, b in out.host]
        assert len(out.host) == 3 and all(b is a for (_, b), a in zip(out.host, first))
    out.close()
    block = np.zeros(4)
    out = stream(tmp_path / "b.zarr")
    for s, f in enumerate(fields):  # one process writing cells 3:7 of each snapshot
        block[:] = f[3:7]
        out.write(s, block, region=(slice(3, 7),))
        first = out.host[0][1] if s == 0 else first
        assert out.host[0][1] is first and out.host[0][1] is not block
    out.close()
    with xr.open_zarr(tmp_path / "a.zarr") as ds:
        np.testing.assert_array_equal(ds["u"].values, np.stack(fields))
    with xr.open_zarr(tmp_path / "b.zarr") as ds:
        np.testing.assert_array_equal(ds["u"].values[:, 3:7], np.stack(fields)[:, 3:7])


def test_a_netcdf_stream_writes_the_field_its_diagnostics_and_attributes(tmp_path):
    mesh = pgas.make_mesh(devices=3)
    fields = [np.arange(10.0) * (s + 1) for s in range(3)]
    output = Output("rho", ("x",), attrs={"units": "kg/m3"}, diagnostics=total)
    out = Stream(tmp_path / "r.nc", output, (10,), "float64", None, None, {"run": "t"}, None,
                 None, 1)  # fmt: skip
    for s, f in enumerate(fields):
        out.write(10 * s, pgas.from_numpy(f, mesh))
    out.close()
    update_attrs(tmp_path / "r.nc", {"checksum": "ab"})
    with xr.open_dataset(tmp_path / "r.nc", engine="h5netcdf") as ds:
        assert ds["time"].values.tolist() == [0, 10, 20]
        np.testing.assert_array_equal(ds["rho"].values, np.stack(fields))
        np.testing.assert_array_equal(ds["total"].values, [45.0, 90.0, 135.0])
        np.testing.assert_array_equal(ds["top"].values, [9.0, 18.0, 27.0])
        assert (ds.attrs["units"], ds.attrs["run"], ds.attrs["checksum"]) == ("kg/m3", "t", "ab")


def test_reduce_over_processes_in_rank_order():
    assert reducer(None, 1) is local and local("min", 4.0) == 4.0
    with pytest.raises(ValueError, match=r"reduce op = 'mean'; use one of \['max', 'min', 'sum'\]"):
        local("mean", 1.0)
    comm = types.SimpleNamespace(allgather=lambda v: [v, 0.25, 7.0])  # this rank, then two more
    reduce = reducer(comm, 3)
    assert (reduce("sum", 1.0), reduce("max", 1.0), reduce("min", 1.0)) == (8.25, 7.0, 0.25)
    with pytest.raises(ValueError, match="reduce op = 'prod'"):
        reduce("prod", 1.0)
