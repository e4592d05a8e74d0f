"""The runner: one problem, every JAX backend, one Result; k, decode, snapshots."""

import dataclasses
import sys
from pathlib import Path

import numpy as np
import pytest
import xarray as xr
from helpers import heat_problem, heat_reference, load_example

from pgas.app import runner
from pgas.app.options import RunOptions
from pgas.app.problem import checksum, demo
from pgas.io import checkpoint
from pgas.io.output import Output
from pgas.loop.plan import choose_steps_per_exchange


@pytest.mark.parametrize("backend", ["auto", "explicit"])
def test_bitwise_with_snapshots_and_counts(backend, tmp_path):
    out = str(tmp_path / f"{backend}.zarr")
    # k = 4: a group between snapshots (auto's 16, more than the 4 steps between them, would be
    # compiled and never run); on auto, test_steps_per_exchange_choice_is_reported's program
    opts = RunOptions(backend=backend, steps=12, devices=4, snapshot_every=4, out=out,
                      steps_per_exchange=4)  # fmt: skip
    r = runner.run(heat_problem(), opts, gather=True)
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


# 203 cells: blocks of 50 cells, halo 1; 23 cells: blocks of 6, 6, 6 and 5, so 64 is lowered
# to 5 (lowered to 50 on 203 cells, the same note, its group of 50 steps compiled for nothing)
# and "auto" is 5, unnoted, the same program (16 on 203 cells: a group that 10 steps never run)
@pytest.mark.parametrize("asked, k, lowered, n", [
    (1, 1, False, 203), (4, 4, False, 203), ("auto", None, False, 23), (64, 5, True, 23),
])  # fmt: skip
def test_steps_per_exchange_choice_is_reported(asked, k, lowered, n):
    opts = RunOptions(steps=10, devices=4, steps_per_exchange=asked)
    r = runner.run(heat_problem(n), opts, gather=True)
    if k is None:  # auto: what the shared model picks for these blocks (the smallest, n // 4)
        k = choose_steps_per_exchange("auto", (n // 4,), (1,)).steps_per_exchange
    assert r.steps_per_exchange == k and bool(r.steps_per_exchange_note) == lowered
    if lowered:
        assert f"lowered from 64 to {k}" in r.steps_per_exchange_note
    np.testing.assert_array_equal(r.field, heat_reference(n, 10))


class Ragged:
    """A representation with 1 or 2 cells per value, as the value says (odd values hold 2):
    a block's cells start where its first value's do, not at a fixed multiple."""

    def __call__(self, values):
        return np.repeat(values, 1 + values.astype(np.int64) % 2, axis=-1).astype(np.float32)

    def region(self, region):
        (sl,) = region  # value j starts at cell j + j // 2 (demo's values are 0, 1, 2, ...)
        return (slice(sl.start + sl.start // 2, sl.stop + sl.stop // 2),)


def _packed_life():
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples" / "life"))
    import packed

    return packed.problem("9x130", density=0.5, seed=1)  # words of 44, 43, 43 cells


DECODING = {  # every problem that declares a decoding: fixed factor, ragged, packed Life
    "scale": lambda: dataclasses.replace(demo(8), decode=lambda v: (v * 2).astype(np.int16)),
    "repeat": lambda: dataclasses.replace(
        demo(8), decode=lambda v: np.repeat(v, 3, axis=-1), cell_shape=(24,)
    ),
    "ragged": lambda: dataclasses.replace(demo(9), decode=Ragged(), cell_shape=(13,)),
    "packed-life": _packed_life,
}


@pytest.mark.parametrize("suffix", [".zarr", ".nc"])
@pytest.mark.parametrize("name", list(DECODING))
def test_decode_applies_before_checksum_and_output(name, suffix, tmp_path):
    """The store, the checksum and the gathered field are the decoded state, on 3 devices
    (uneven blocks), read back against the decode of the whole gathered state."""
    from pgas.app.state import build, mesh_for

    p = DECODING[name]()
    if name == "packed-life":  # what is stepped does not matter here: what is written does
        p = dataclasses.replace(p, step=lambda u: u, kernel=lambda e: e[1:-1, 1:-1])
    devices = 3
    expected = p.decode(build(p, mesh_for(p, devices)).to_numpy())
    out = str(tmp_path / f"d{suffix}")
    r = runner.run(p, RunOptions(steps=2, devices=devices, snapshot_every=1, out=out),
                   gather=True)  # fmt: skip
    np.testing.assert_array_equal(r.field, expected)
    assert r.checksum == checksum(expected)
    with xr.open_dataset(out, engine="zarr" if suffix == ".zarr" else "h5netcdf") as ds:
        var = "u"
        assert ds[var].dtype == expected.dtype and ds["time"].values.tolist() == [0, 1, 2]
        np.testing.assert_array_equal(ds[var].values[-1], expected)


def _total(blocks, reduce):
    return {"total": reduce("sum", sum(float(b.astype(np.float64).sum()) for b in blocks))}


@pytest.mark.parametrize("suffix", [".zarr", ".nc"])
def test_restart_continues_the_store_without_duplicates(tmp_path, suffix):
    """Snapshots every 2 steps, checkpoints every 4; a run to 8 on explicit (2 devices), then a
    restart to 12 on auto (4 devices) appends: every time once, each snapshot bitwise."""
    out, ck = str(tmp_path / f"h{suffix}"), str(tmp_path / "ck")
    output = Output("u", ("x",), {"note": "t"}, diagnostics=_total)
    # k = 2: a group in every chunk of 2 steps, on both runs (auto's 16 would be compiled and
    # never run)
    opts = RunOptions(backend="explicit", steps=8, devices=2, snapshot_every=2, out=out,
                      checkpoint=ck, checkpoint_every=4, steps_per_exchange=2)  # fmt: skip
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


def test_checksum_is_the_same_on_every_mesh_backend_and_k():
    """The runner's checksum (every device's blocks, no gather) equals NumPy's whole-field one."""
    want = checksum(heat_reference(203, 10))
    cases = [
        ("auto", 1, 1),
        ("auto", 3, 3),  # odd: groups in pairs, then single steps ("auto", 16: none run)
        ("auto", 4, 4),  # the program of test_steps_per_exchange_choice_is_reported[4-4-...]
        ("explicit", 6, 1),
        ("explicit", 3, 2),
    ]  # blocks of 68/67, 51/50 and 34/33 cells
    for backend, devices, k in cases:
        opts = RunOptions(backend=backend, steps=10, devices=devices, steps_per_exchange=k)
        r = runner.run(heat_problem(), opts)
        assert r.field is None and r.checksum == want, (backend, devices, k)


def test_packed_and_byte_life_have_one_checksum():
    """Packed words are hashed as the board's cells: the same checksum as the byte example."""
    from pgas.app.problem import load_problem as load

    life_file = Path(__file__).resolve().parents[2] / "examples" / "life"
    byte_p = load(f"{life_file / 'life.py'}:problem", size="12x70", density=0.4, seed=5)
    packed_p = load(f"{life_file / 'packed.py'}:problem", size="12x70", density=0.4, seed=5)
    life = load_example("life")
    board = life.board("12x70", "random", density=0.4, seed=5)
    for _ in range(3):
        board = life.kernel(np.pad(board, 1, mode="wrap"))
    want = checksum(board)
    for p in (packed_p, byte_p):
        # 2x2 blocks, uneven words; k = 1 (auto's 6 for the bytes, more than the 3 steps:
        # its group would be compiled and never run)
        r = runner.run(p, RunOptions(steps=3, devices=4, steps_per_exchange=1))
        assert r.checksum == want, p.name
