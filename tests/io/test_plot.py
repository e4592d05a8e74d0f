"""Tests of pgas.plot: files are written, valid PNG/GIF, animated, small; clear errors."""

from __future__ import annotations

import os

import numpy as np
import pytest
import xarray as xr
from PIL import Image

from pgas.io import plot

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
GIF_MAGIC = (b"GIF87a", b"GIF89a")


def heat_snapshots(n_cells=64, n_snapshots=12):
    x = np.linspace(0.0, 1.0, n_cells)
    u = np.array([np.exp(-((x - 0.5) ** 2) / (0.01 + 0.01 * t)) for t in range(n_snapshots)])
    return u.astype(np.float32), np.arange(n_snapshots) * 10, x


def glider_snapshots(n=12, size=16):
    frames = np.zeros((n, size, size), np.uint8)
    glider = np.array([[0, 1, 0], [0, 0, 1], [1, 1, 1]], np.uint8)
    for t in range(n):
        frames[t, t % (size - 3) : t % (size - 3) + 3, 2:5] = glider
    return frames


def heat_dataset():
    u, steps, x = heat_snapshots()
    return xr.Dataset(
        {"u": (("time", "x"), u), "heat": ("time", u.sum(axis=1))},
        coords={"time": steps, "x": x},
    )


def life_dataset(frames):
    return xr.Dataset(
        {"alive": (("time", "y", "x"), frames), "population": ("time", frames.sum(axis=(1, 2)))},
        coords={"time": np.arange(len(frames)) * 5},
    )


def assert_png(path):
    data = path.read_bytes()
    assert data.startswith(PNG_MAGIC) and len(data) > 500
    with Image.open(path) as image:
        assert image.format == "PNG"
        return image.size


# --------------------------------------------------------------------------
# heat_plot
# --------------------------------------------------------------------------


def test_heat_plot_from_dataset(tmp_path):
    out = plot.heat_plot(heat_dataset(), tmp_path / "heat.png")
    assert out == tmp_path / "heat.png"
    width, height = assert_png(out)
    assert width > height > 200
    assert sorted(os.listdir(tmp_path)) == ["heat.png"]  # no temporaries left


def test_heat_plot_from_arrays_and_other_formats(tmp_path):
    u, steps, _ = heat_snapshots()
    assert_png(plot.heat_plot(u, tmp_path / "a.png", times=steps, title="heat"))
    assert (plot.heat_plot(u, tmp_path / "a.pdf")).read_bytes().startswith(b"%PDF")


def test_heat_plot_non_uniform_steps_and_wide_fields(tmp_path):
    u, _, _ = heat_snapshots(n_cells=5000, n_snapshots=5)
    assert_png(plot.heat_plot(u, tmp_path / "b.png", times=[0, 1, 2, 10, 100]))


@pytest.mark.parametrize(
    "data, kwargs, words",
    [
        (np.zeros((3, 4, 5)), {}, "heat_plot draws a 1-D field over time"),
        (np.zeros(5), {}, "got shape (5,)"),
        (np.zeros((3, 4)), {"times": [0, 1]}, "times has shape (2,)"),
        ("text", {}, "pass a Dataset"),
    ],
)
def test_heat_plot_errors(tmp_path, data, kwargs, words):
    with pytest.raises(plot.PlotError) as info:
        plot.heat_plot(data, tmp_path / "x.png", **kwargs)
    assert words in str(info.value)


def test_dataset_variable_choice(tmp_path):
    ds = heat_dataset()
    ds["v"] = ds["u"] * 2
    with pytest.raises(plot.PlotError, match=r"2 field variables \['u', 'v'\]; pass var="):
        plot.heat_plot(ds, tmp_path / "x.png")
    with pytest.raises(plot.PlotError, match="var = 'w' is not a variable"):
        plot.heat_plot(ds, tmp_path / "x.png", var="w")
    assert_png(plot.heat_plot(ds, tmp_path / "v.png", var="v"))


def test_missing_directory(tmp_path):
    with pytest.raises(plot.PlotError, match="does not exist; create it first"):
        plot.life_png(np.zeros((4, 4)), tmp_path / "missing" / "b.png")


# --------------------------------------------------------------------------
# life_png
# --------------------------------------------------------------------------


def test_life_png_board_snapshots_and_dataset(tmp_path):
    frames = glider_snapshots()
    size = assert_png(plot.life_png(frames[-1], tmp_path / "board.png"))
    assert size == assert_png(plot.life_png(frames, tmp_path / "last.png"))
    assert_png(plot.life_png(life_dataset(frames), tmp_path / "ds.png"))


def test_life_png_downsamples_large_boards(tmp_path):
    board = np.zeros((2000, 1000), np.uint8)
    board[1999, 999] = 1  # one live cell in a corner must survive pooling
    width, height = assert_png(plot.life_png(board, tmp_path / "big.png"))
    assert max(width, height) <= 600
    with Image.open(tmp_path / "big.png") as image:
        pixels = np.asarray(image.convert("L"))
    assert pixels.min() < 50  # a dark pixel: the live cell is visible


def test_pool_keeps_any_live_cell():
    board = np.zeros((5, 7), np.uint8)
    board[4, 6] = 1
    pooled = plot._pool(board, 2)
    assert pooled.shape == (3, 4) and pooled[2, 3] == 1 and pooled.sum() == 1


@pytest.mark.parametrize(
    "data, kwargs, words",
    [
        (np.zeros(4), {}, "got shape (4,)"),
        (np.zeros((2, 2, 2, 2)), {}, "got shape (2, 2, 2, 2)"),
        (np.zeros((4, 4)), {"max_side": 0}, "max_side = 0"),
    ],
)
def test_life_png_errors(tmp_path, data, kwargs, words):
    with pytest.raises(plot.PlotError) as info:
        plot.life_png(data, tmp_path / "b.png", **kwargs)
    assert words in str(info.value)


# --------------------------------------------------------------------------
# life_gif
# --------------------------------------------------------------------------


def test_life_gif_is_animated(tmp_path):
    frames = glider_snapshots()
    out = plot.life_gif(frames, tmp_path / "life.gif", fps=8)
    assert out.read_bytes()[:6] in GIF_MAGIC
    with Image.open(out) as image:
        assert image.format == "GIF"
        assert image.n_frames == len(frames)
        assert image.info.get("loop") == 0
    assert sorted(os.listdir(tmp_path)) == ["life.gif"]


def test_life_gif_from_dataset(tmp_path):
    out = plot.life_gif(life_dataset(glider_snapshots()), tmp_path / "ds.gif")
    with Image.open(out) as image:
        assert image.n_frames > 1


def test_life_gif_caps_frames_and_size(tmp_path):
    rng = np.random.default_rng(0)
    frames = (rng.random((30, 1100, 600)) < 0.1).astype(np.uint8)
    out = plot.life_gif(frames, tmp_path / "big.gif", max_frames=7)
    with Image.open(out) as image:
        assert image.n_frames == 7
        assert max(image.size) <= 600


def test_frame_indices_keep_first_and_last():
    idx = plot._frame_indices(1000, 200)
    assert len(idx) == 200 and idx[0] == 0 and idx[-1] == 999
    assert list(plot._frame_indices(5, 200)) == [0, 1, 2, 3, 4]


@pytest.mark.parametrize(
    "name, data, kwargs, words",
    [
        ("a.png", np.zeros((3, 4, 4)), {}, "end it with .gif"),
        ("a.gif", np.zeros((4, 4)), {}, "for one board use life_png"),
        ("a.gif", np.zeros((3, 4, 4)), {"fps": 0}, "fps = 0"),
        ("a.gif", np.zeros((3, 4, 4)), {"max_frames": 0}, "max_frames = 0"),
        ("a.gif", np.zeros((3, 4, 4)), {"times": [1, 2]}, "times has shape (2,)"),
    ],
)
def test_life_gif_errors(tmp_path, name, data, kwargs, words):
    with pytest.raises(plot.PlotError) as info:
        plot.life_gif(data, tmp_path / name, **kwargs)
    assert words in str(info.value)
    assert isinstance(info.value, ValueError)


# --------------------------------------------------------------------------
# Pictures of big runs, drawn from a store with bounded memory
# --------------------------------------------------------------------------


def test_plot_error_is_a_pgas_error():
    from pgas.errors import PgasError

    assert issubclass(plot.PlotError, PgasError)
    with pytest.raises(PgasError, match="not an existing .zarr or .nc"):
        plot.heat_plot("missing.zarr", "x.png")


def _heat_store(path, snapshots=40, cells=200_000):
    from pgas.io.snapshots import SnapshotWriter

    x = np.linspace(0.0, 1.0, cells, dtype=np.float32)
    with SnapshotWriter.open(path, name="u", dims=("x",), shape=(cells,), dtype="float32",
                             chunks=(cells // 8,)) as out:  # fmt: skip
        for t in range(snapshots):
            out.write(10 * t, np.exp(-((x - 0.5) ** 2) / (0.01 + 0.01 * t)),
                      region=(slice(0, cells),))  # fmt: skip
    return snapshots * cells * 4


@pytest.mark.parametrize("suffix", [".zarr", ".nc"])
def test_heat_plot_reads_a_store_downsampled(tmp_path, suffix):
    """A store 16x larger (1.6 -> 26 MB) costs the picture (Matplotlib's buffers included)
    less than 8 MB more memory: it is read one snapshot and every k-th cell at a time."""
    import tracemalloc

    peaks = {}
    for snapshots, cells in ((8, 50_000), (32, 200_000)):
        path = tmp_path / f"h{cells}{suffix}"
        size = _heat_store(path, snapshots, cells)
        tracemalloc.start()
        try:
            plot.heat_plot(path, tmp_path / "h.png")
            peaks[size] = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
    (small, p_small), (large, p_large) = sorted(peaks.items())
    assert large - small > 22e6 and p_large - p_small < 8e6, peaks
    with xr.open_zarr(path, chunks=None) if suffix == ".zarr" else xr.open_dataset(path) as ds:
        plot.heat_plot(ds, tmp_path / "h2.png")  # a lazily opened Dataset
    assert Image.open(tmp_path / "h2.png").format == "PNG"


def test_life_pictures_read_a_store_in_strips(tmp_path, monkeypatch):
    """Boards of 1024**2 instead of 256**2 (6 snapshots: 6 MB instead of 0.4 MB) cost the GIF
    and PNG less than half a board more memory: boards are read in strips and pooled."""
    import tracemalloc

    from pgas.io.snapshots import SnapshotWriter

    monkeypatch.setattr(plot, "_STRIP_BYTES", 1 << 16)
    rng, n, peaks = np.random.default_rng(0), 6, {}
    for side in (256, 1024):
        path = tmp_path / f"life{side}.zarr"
        with SnapshotWriter.open(path, name="board", dims=("y", "x"), shape=(side, side),
                                 dtype="uint8", chunks=(64, side)) as out:  # fmt: skip
            for t in range(n):
                board = (rng.random((side, side)) < 0.001).astype(np.uint8)
                out.write(t, board, region=(slice(0, side), slice(0, side)))
        tracemalloc.start()
        try:
            plot.life_gif(path, tmp_path / "l.gif", max_side=128)
            plot.life_png(path, tmp_path / "l.png", max_side=128)
            peaks[side] = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
    assert peaks[1024] - peaks[256] < 1024 * 1024 / 2, peaks
    gif = Image.open(tmp_path / "l.gif")
    assert gif.n_frames == n and max(gif.size) <= 600
    with xr.open_zarr(path) as ds:  # the strips add up to the right picture and population
        pooled, population = plot._read_pooled(ds["board"].isel(time=-1), 8)
    assert population == int(board.sum())
    np.testing.assert_array_equal(pooled, plot._pool(board, 8))
