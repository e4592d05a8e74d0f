"""A run on the mpi backend (pgas.app.mpi_run), here in a world of one rank (plain python);
``mpiexec`` runs of it: tests/app/test_compare.py and tests/io/test_snapshots.py."""

from pathlib import Path

import numpy as np
import pytest
import xarray as xr
from helpers import heat_numpy

pytest.importorskip("mpi4py")

from pgas.app import mpi_run  # noqa: E402
from pgas.app.backends import get  # noqa: E402
from pgas.app.options import RunOptions  # noqa: E402
from pgas.app.problem import checksum, load_problem  # noqa: E402
from pgas.app.progress import Progress  # noqa: E402

PROBLEMS = str(Path(__file__).resolve().parents[1] / "problems.py")


def test_one_rank_snapshots_checksum_and_gather(tmp_path):
    p = load_problem(f"{PROBLEMS}:heat", n=101)
    out = str(tmp_path / "m.zarr")
    opts = RunOptions(backend="mpi", steps=6, snapshot_every=3, out=out, steps_per_exchange=2)
    r = mpi_run.run(p, opts, get("mpi"), Progress(6, True, 0, p.name), None, True)
    u0 = (np.sin(0.37 * np.arange(101)) ** 2).astype(np.float32)
    np.testing.assert_array_equal(r.field, heat_numpy(u0, 6))
    assert r.checksum == checksum(heat_numpy(u0, 6)) and r.store == out
    assert (r.backend, r.devices, r.processes, r.steps_per_exchange) == ("mpi", 1, 1, 2)
    assert r.messages_per_step == 0 and r.output_wait_seconds >= 0
    with xr.open_zarr(out) as ds:
        assert ds["time"].values.tolist() == [0, 3, 6] and ds.attrs["backend"] == "mpi"
        for shot, t in zip(ds["u"].values, ds["time"].values):
            np.testing.assert_array_equal(shot, heat_numpy(u0, t))


def test_a_block_too_large_for_memory_is_refused_before_it_is_allocated(monkeypatch):
    """The rank's block and the loop's second buffer against what the process can get."""
    from pgas.errors import FieldTooLargeError
    from pgas.runtime import capacity

    monkeypatch.setattr(capacity, "host_available", lambda: 3 << 20)  # 3 MiB
    monkeypatch.setattr(capacity, "SMALL", 0)
    p = load_problem(f"{PROBLEMS}:heat", n=1 << 20)  # 4 MiB of float32, two buffers
    opts = RunOptions(backend="mpi", steps=2)
    with pytest.raises(FieldTooLargeError, match="needs 0.01 GiB per process") as err:
        mpi_run.run(p, opts, get("mpi"), Progress(2, True, 0, p.name), None, False)
    assert "(2 buffers of its (1048576,) block)" in str(err.value) and "make the field" in str(
        err.value
    )
