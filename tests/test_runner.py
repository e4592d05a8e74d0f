"""The runner: one problem, every JAX backend, one Result; k, decode, snapshots, the loop hook."""

import dataclasses
from pathlib import Path

import numpy as np
import pytest
import xarray as xr
from helpers import heat_numpy

from pgas import checkpoint, runner
from pgas.options import RunOptions
from pgas.output import Output
from pgas.plan import choose_steps_per_exchange
from pgas.problem import checksum, demo, load_problem

PROBLEMS = str(Path(__file__).with_name("problems.py"))


def heat_problem(n=203):
    return load_problem(f"{PROBLEMS}:heat", n=n)


def heat_reference(n, steps):
    return heat_numpy((np.sin(0.37 * np.arange(n)) ** 2).astype(np.float32), steps)


@pytest.mark.parametrize("backend", ["auto", "explicit"])
def test_bitwise_with_snapshots_and_counts(backend, tmp_path):
    out = str(tmp_path / f"{backend}.zarr")
    opts = RunOptions(backend=backend, steps=12, devices=4, snapshot_every=4, out=out)
    r = runner.run(heat_problem(), opts)
    np.testing.assert_array_equal(r.field, heat_reference(203, 12))
    assert r.checksum == checksum(r.field) and r.devices == 4 and r.mesh == {"x": 4}
    assert r.store == out
    with xr.open_zarr(out) as ds:  # streamed by the runner, chunks aligned to the 4 blocks
        assert ds["time"].values.tolist() == [0, 4, 8, 12] and ds["u"].shape == (4, 203)
        assert ds["u"].encoding["chunks"] == (1, 51) and ds.attrs["backend"] == backend
        for shot, t in zip(ds["u"].values, ds["time"].values):
            np.testing.assert_array_equal(shot, heat_reference(203, t))
    k = r.steps_per_exchange  # 3 of 4 devices send a 4 B cell each way: nothing crosses the ends
    assert r.messages_per_step == 6 / k and r.bytes_per_step == 24.0
    assert r.ideal_bytes_per_step == 8 and r.platform == "cpu" and r.seconds > 0


@pytest.mark.parametrize("asked, k, lowered", [(1, 1, False), (4, 4, False), ("auto", None, False),
                                               (64, 50, True)])  # fmt: skip
def test_steps_per_exchange_choice_is_reported(asked, k, lowered):
    opts = RunOptions(steps=10, devices=4, steps_per_exchange=asked)
    r = runner.run(heat_problem(), opts)  # blocks of 50 cells, halo 1
    if k is None:  # auto: what the shared model picks for these blocks
        k = choose_steps_per_exchange("auto", (50,), (1,)).steps_per_exchange
    assert r.steps_per_exchange == k and bool(r.steps_per_exchange_note) == lowered
    if lowered:
        assert "lowered from 64 to 50" in r.steps_per_exchange_note
    np.testing.assert_array_equal(r.field, heat_reference(203, 10))


def test_decode_applies_before_checksum_and_output(tmp_path):
    p = dataclasses.replace(demo(8), decode=lambda v: (v * 2).astype(np.int16))
    out = str(tmp_path / "d.zarr")
    r = runner.run(p, RunOptions(steps=2, devices=2, snapshot_every=1, out=out))
    expected = (np.arange(8) * 2).astype(np.int16)
    np.testing.assert_array_equal(r.field, expected)
    assert r.checksum == checksum(expected)
    with xr.open_zarr(out) as ds:
        assert ds["u"].dtype == np.int16 and ds["time"].values.tolist() == [0, 1, 2]
        np.testing.assert_array_equal(ds["u"].values[-1], expected)


def _total(blocks, reduce):
    return {"total": reduce("sum", sum(float(b.astype(np.float64).sum()) for b in blocks))}


@pytest.mark.parametrize("suffix", [".zarr", ".nc"])
def test_restart_continues_the_store_without_duplicates(tmp_path, suffix):
    """Snapshots every 2 steps, checkpoints every 4; a run to 8 on explicit (2 devices), then a
    restart to 12 on auto (4 devices) appends: every time once, each snapshot bitwise."""
    out, ck = str(tmp_path / f"h{suffix}"), str(tmp_path / "ck")
    output = Output("u", ("x",), {"note": "t"}, diagnostics=_total)
    opts = RunOptions(backend="explicit", steps=8, devices=2, snapshot_every=2, out=out,
                      checkpoint=ck, checkpoint_every=4)  # fmt: skip
    runner.run(heat_problem(), opts, output=output)
    more = dataclasses.replace(opts, backend="auto", steps=12, devices=4, restart=True)
    r = runner.run(heat_problem(), more, output=output)
    assert r.start_step == 8 and checkpoint.latest(ck) == 12
    with xr.open_dataset(out, engine="zarr" if suffix == ".zarr" else None) as ds:
        assert ds["time"].values.tolist() == list(range(0, 13, 2))
        assert ds.attrs["note"] == "t"
        for shot, total, t in zip(ds["u"].values, ds["total"].values, ds["time"].values):
            ref = heat_reference(203, t)
            np.testing.assert_array_equal(shot, ref)
            assert total == pytest.approx(ref.astype(np.float64).sum(), rel=1e-12)


def test_the_problems_loop_is_what_runs():
    calls = []

    def loop(p, u, steps, how):
        calls.append((steps, how.backend, how.steps_per_exchange, how.chunk))
        return runner.default_loop(p, u, steps, how)

    p = dataclasses.replace(heat_problem(), loop=loop)
    r = runner.run(p, RunOptions(steps=6, devices=2, steps_per_exchange=2))
    np.testing.assert_array_equal(r.field, heat_reference(203, 6))
    assert calls == [(2, "auto", 2, None), (6, "auto", 2, None)]  # warm-up (same parity), run


def test_checkpoints_between_chunks_and_restart(tmp_path):
    ck = str(tmp_path / "ck")
    opts = RunOptions(backend="explicit", steps=8, devices=2, checkpoint=ck, checkpoint_every=4)
    runner.run(heat_problem(), opts)
    assert checkpoint.latest(ck) == 8
    more = dataclasses.replace(opts, backend="auto", steps=12, restart=True, devices=4)
    r = runner.run(heat_problem(), more)
    assert r.start_step == 8 and checkpoint.latest(ck) == 12
    np.testing.assert_array_equal(r.field, heat_reference(203, 12))


def test_restart_in_an_empty_directory_starts_fresh(tmp_path):
    (tmp_path / "ck").mkdir()
    opts = RunOptions(steps=3, devices=2, checkpoint=str(tmp_path / "ck"), restart=True)
    assert runner.run(heat_problem(), opts).start_step == 0


def test_chunk_length():
    assert runner.chunk_length(100, None, False) is None
    assert runner.chunk_length(100, None, True) == 5
    assert runner.chunk_length(100, 10, False) == 20
    assert runner.chunk_length(100, 50, True) == 50


def test_mesh_and_build():
    p = load_problem(f"{PROBLEMS}:life")
    mesh = runner.mesh_for(p, 4)
    assert dict(mesh.shape) == {"y": 2, "x": 2}
    u = runner.build(p, mesh)
    y, x = np.meshgrid(np.arange(37), np.arange(53), indexing="ij")
    np.testing.assert_array_equal(u.to_numpy(), p.init(y, x))
