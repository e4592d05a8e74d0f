"""Pictures of results: heat maps and profiles, Game of Life boards and GIFs.

Contract:

* Every function takes either an ``xarray.Dataset`` as made by
  :func:`pgas.io.to_dataset` (or read back from a file) or plain NumPy arrays,
  and a path to write; it returns the absolute path written. From a Dataset
  the field is the variable ``var`` (default: the only variable with more than
  one dimension), the snapshot steps are its first coordinate and the spatial
  coordinates label the axes; with arrays the leading axis is the snapshot
  axis and ``times`` (default ``0, 1, ...``) gives the steps.
* Drawing uses Matplotlib's Agg canvas directly (``Figure`` +
  ``FigureCanvasAgg``, no ``pyplot``): it needs no screen, never changes the
  global backend and leaves no figures open.
* Boards wider or taller than ``max_side`` (512) cells are max-pooled by an
  integer factor ``k`` (a pixel is alive if any cell of its ``k x k`` block
  is), so sparse live cells stay visible; GIFs keep at most ``max_frames``
  (200) evenly spaced snapshots, always the first and the last.
* Files are written to a hidden temporary sibling and renamed into place.

Errors are :class:`PlotError` (a :class:`pgas.errors.PgasError`, so a
``ValueError``) naming the parameter, the value and the fix. This module
depends on NumPy, xarray, Matplotlib and :mod:`pgas.errors` only.
"""

from __future__ import annotations

import contextlib
import math
import os
import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import xarray as xr
from matplotlib.animation import PillowWriter
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from pgas.errors import PgasError

__all__ = ["PlotError", "heat_plot", "life_gif", "life_png"]

MAX_SIDE = 512
MAX_FRAMES = 200
_MAX_HEATMAP_COLUMNS = 2048
_MAX_HEATMAP_ROWS = 1024
_STRIP_BYTES = 1 << 25  # a board is read in strips of about this many bytes
_LABEL_PX = 22  # height of the text strip above a board, in pixels
_DPI = 100


class PlotError(PgasError):
    """Data of the wrong shape, a bad option, or an unusable output path."""


# --------------------------------------------------------------------------
# Inputs
# --------------------------------------------------------------------------


@contextlib.contextmanager
def _opened(data: Any, function: str) -> Iterator[Any]:
    """``data``, or the Dataset of a ``.zarr``/``.nc`` path opened lazily (closed after)."""
    if not isinstance(data, (str, os.PathLike)):
        yield data
        return
    source = Path(os.fspath(data))
    suffix = source.suffix.lower()
    if suffix not in (".zarr", ".nc") or not source.exists():
        raise PlotError(
            f"{function}: got the path {os.fspath(data)!r}, which is not an existing .zarr "
            f"or .nc result; pass a Dataset from pgas.io.to_dataset, an array, or such a path"
        )
    if suffix == ".zarr":
        ds = xr.open_zarr(source, chunks=None)  # lazy: reads only the chunks selected
    else:
        ds = xr.open_dataset(source, engine=_netcdf_engine())
    with ds:
        yield ds


def _netcdf_engine() -> str:
    try:
        import h5netcdf  # noqa: F401
    except ImportError:
        return "netcdf4"
    return "h5netcdf"


def _field(
    data: Any, var: str | None, times: Sequence[float] | None, function: str
) -> tuple[xr.DataArray, np.ndarray | None, str]:
    """(the field as a lazy DataArray, steps or None, var name); nothing is loaded yet."""
    if isinstance(data, xr.Dataset):
        if var is None:
            candidates = [k for k, v in data.data_vars.items() if v.ndim > 1]
            if len(candidates) != 1:
                raise PlotError(
                    f"{function}: the Dataset has {len(candidates)} field variables "
                    f"{sorted(map(str, candidates))}; pass var='name' to choose one"
                )
            var = str(candidates[0])
        if var not in data.data_vars:
            raise PlotError(
                f"{function}: var = {var!r} is not a variable of the Dataset; use one of "
                f"{sorted(map(str, data.data_vars))}"
            )
        data = data[var]
    if isinstance(data, xr.DataArray):
        name = str(data.name) if data.name is not None else (var or "u")
        first = data.dims[0] if data.dims else None
        steps = np.asarray(data[first].values) if first in data.coords else None
        return data, steps, name
    values = np.asarray(data)
    if values.dtype == object or values.ndim == 0:
        raise PlotError(
            f"{function}: got {type(data).__name__} of dtype {values.dtype}; pass a "
            f"Dataset from pgas.io.dataset.to_dataset, a numeric NumPy array, or a .zarr/.nc path"
        )
    steps = None
    if times is not None:
        steps = np.asarray(times)
        if values.ndim < 2 or steps.shape != (values.shape[0],):
            raise PlotError(
                f"{function}: times has shape {steps.shape} but data has shape "
                f"{values.shape}; give one step per snapshot (leading axis)"
            )
    dims = (["time", "y", "x"] if values.ndim == 3 else ["time", "x"])[-values.ndim :]
    if values.ndim > 3:
        dims = [f"dim_{i}" for i in range(values.ndim)]
    return xr.DataArray(values, dims=dims), steps, var or "u"


def _axis_values(da: xr.DataArray, dim: Any, index: Any) -> np.ndarray:
    """Coordinate values of ``dim`` at ``index`` (cell indices where there is none)."""
    if dim in da.coords:
        return np.asarray(da[dim].isel({dim: index}).values)
    return np.arange(da.sizes[dim])[index]


def _check_path(path: str | os.PathLike[str], function: str, suffixes: tuple[str, ...]) -> Path:
    target = Path(os.path.abspath(os.fspath(path)))
    if suffixes and target.suffix.lower() not in suffixes:
        raise PlotError(
            f"{function}: path {os.fspath(path)!r} has suffix {target.suffix!r}; "
            f"end it with {' or '.join(suffixes)}"
        )
    if not target.parent.is_dir():
        raise PlotError(
            f"{function}: directory {str(target.parent)!r} of path {os.fspath(path)!r} "
            f"does not exist; create it first or write elsewhere"
        )
    return target


@contextlib.contextmanager
def _atomic(target: Path) -> Iterator[Path]:
    tmp = target.with_name(f".{target.name}.{uuid.uuid4().hex[:12]}.tmp{target.suffix}")
    try:
        yield tmp
        os.replace(tmp, target)
    finally:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()


def _new_figure(width_in: float, height_in: float, **kwargs: Any) -> Figure:
    fig = Figure(figsize=(width_in, height_in), dpi=_DPI, **kwargs)
    FigureCanvasAgg(fig)
    return fig


def _uniform(values: np.ndarray) -> bool:
    if values.size < 3:
        return True
    steps = np.diff(values.astype(np.float64))
    return bool(np.allclose(steps, steps[0], rtol=1e-6, atol=0.0))


def _extent(values: np.ndarray) -> tuple[float, float]:
    v = values.astype(np.float64)
    half = (v[1] - v[0]) / 2 if v.size > 1 else 0.5
    return float(v[0] - half), float(v[-1] + half)


# --------------------------------------------------------------------------
# Heat equation
# --------------------------------------------------------------------------


def heat_plot(
    data: xr.Dataset | xr.DataArray | np.ndarray,
    path: str | os.PathLike[str],
    *,
    var: str | None = None,
    times: Sequence[float] | None = None,
    title: str | None = None,
) -> Path:
    """A space-time heat map of a 1-D field beside its final and initial profiles.

    Left: colour = the field, x horizontal, time step vertical (increasing
    upwards). Right: the final profile (solid) over the initial one (dashed).
    Fields wider than 2048 cells are drawn every ``k``-th cell in the heat map.

    Args:
        data: a Dataset from :func:`pgas.io.to_dataset` with a ``(time, x)``
            field, or an array ``(n_snapshots, n_cells)``.
        path: output image; the suffix picks the format (``.png``, ``.pdf``,
            ``.svg``, ...).
        var: the field variable of a Dataset (default: its only field).
        times: step numbers of the snapshots when ``data`` is an array.
        title: optional figure title.

    Returns:
        The absolute path written.

    Raises:
        PlotError: the field is not ``(time, x)``, or the directory is missing.

    >>> import tempfile, numpy as np
    >>> x = np.linspace(0, np.pi, 64)
    >>> u = np.array([np.sin(x) * np.exp(-0.1 * t) for t in range(20)])
    >>> heat_plot(u, tempfile.mkdtemp() + "/heat.png").name
    'heat.png'
    """
    with _opened(data, "heat_plot") as data:
        da, steps, name = _field(data, var, times, "heat_plot")
        if da.ndim != 2 or da.shape[0] < 1 or da.shape[1] < 1:
            raise PlotError(
                f"heat_plot draws a 1-D field over time, shape (n_snapshots, n_cells); got "
                f"shape {da.shape}; use life_png/life_gif for 2-D boards"
            )
        target = _check_path(path, "heat_plot", ())
        # downsample while reading: at most _MAX_HEATMAP_ROWS snapshots (first and last
        # kept) and every k-th cell, so memory is bounded whatever the run's size
        rows = _frame_indices(da.shape[0], _MAX_HEATMAP_ROWS)
        k = max(1, math.ceil(da.shape[1] / _MAX_HEATMAP_COLUMNS))
        time_dim, x_dim = da.dims
        thin = da.isel({x_dim: slice(None, None, k)})
        shown = np.empty((rows.size, thin.shape[1]), np.float64)
        for j, row in enumerate(rows):  # one snapshot at a time: a store reads its chunks
            shown[j] = thin.isel({time_dim: int(row)}).values
        shown_x = _axis_values(da, x_dim, slice(None, None, k))
    steps = rows if steps is None else steps[rows]
    xlabel = str(x_dim) if str(x_dim) != "dim_1" else "x"

    fig = _new_figure(11.0, 4.2, layout="constrained")
    ax_map, ax_profile = fig.subplots(1, 2, width_ratios=[1.15, 1.0])
    if _uniform(shown_x) and _uniform(steps):
        image = ax_map.imshow(
            shown,
            origin="lower",
            aspect="auto",
            interpolation="nearest",
            extent=(*_extent(shown_x), *_extent(steps)),
            cmap="inferno",
        )
    else:
        image = ax_map.pcolormesh(shown_x, steps, shown, shading="nearest", cmap="inferno")
    fig.colorbar(image, ax=ax_map, label=name)
    ax_map.set_xlabel(xlabel)
    ax_map.set_ylabel("time step")
    ax_map.set_title(f"{name}({xlabel}, t)" + (f"  (every {k}th cell)" if k > 1 else ""))

    initial, final = f"initial (step {steps[0]})", f"final (step {steps[-1]})"
    ax_profile.plot(shown_x, shown[0], "--", color="tab:blue", label=initial)
    ax_profile.plot(shown_x, shown[-1], "-", color="tab:red", label=final)
    ax_profile.set_xlabel(xlabel)
    ax_profile.set_ylabel(name)
    ax_profile.set_title("profiles")
    ax_profile.grid(alpha=0.3)
    ax_profile.legend()
    if title is not None:
        fig.suptitle(title)
    with _atomic(target) as tmp:
        fig.savefig(tmp, format=target.suffix.lstrip(".").lower() or "png")
    return target


# --------------------------------------------------------------------------
# Game of Life
# --------------------------------------------------------------------------


def _pool(board: np.ndarray, k: int) -> np.ndarray:
    """Max-pool a 2-D 0/1 board by ``k`` (padding the edges with dead cells)."""
    alive = board != 0
    if k == 1:
        return alive.astype(np.uint8)
    h, w = alive.shape
    padded = np.zeros((math.ceil(h / k) * k, math.ceil(w / k) * k), dtype=bool)
    padded[:h, :w] = alive
    blocks = padded.reshape(padded.shape[0] // k, k, padded.shape[1] // k, k)
    return blocks.any(axis=(1, 3)).astype(np.uint8)


def _read_pooled(board: xr.DataArray, k: int) -> tuple[np.ndarray, int]:
    """Read a (lazy) 2-D board in strips of rows, max-pooling each by ``k``.

    Memory is bounded by one strip (about ``_STRIP_BYTES``) plus the pooled
    image, whatever the board's size. Returns (pooled board, population).
    """
    h, w = board.shape
    rows = k * max(1, _STRIP_BYTES // max(1, k * w * board.dtype.itemsize))
    pooled, population = [], 0
    for start in range(0, h, rows):
        strip = np.asarray(board.isel({board.dims[0]: slice(start, start + rows)}).values)
        population += int(np.count_nonzero(strip))
        pooled.append(_pool(strip, k))
    return np.concatenate(pooled), population


def _board_figure(shape: tuple[int, int], max_side: int) -> tuple[Figure, Any, Any, int]:
    """A figure showing one board (pooled by k) under a text strip: (fig, image, label, k)."""
    k = max(1, math.ceil(max(shape) / max_side))
    h, w = math.ceil(shape[0] / k), math.ceil(shape[1] / k)
    scale = max(1, min(8, 384 // max(h, w)))  # small boards: whole pixels per cell
    width_px, board_px = max(w * scale, 160), h * scale
    height_px = board_px + _LABEL_PX
    fig = _new_figure(width_px / _DPI, height_px / _DPI)
    ax = fig.add_axes((0.0, 0.0, 1.0, board_px / height_px))
    ax.set_xticks([])
    ax.set_yticks([])
    for spine in ax.spines.values():  # a thin frame shows where the board ends
        spine.set_color("0.6")
    image = ax.imshow(
        np.zeros((h, w), np.uint8),
        cmap="binary",
        vmin=0,
        vmax=1,
        interpolation="nearest",
        resample=False,
    )
    label = fig.text(0.01, 1 - 0.5 * _LABEL_PX / height_px, "", va="center", fontsize=9)
    return fig, image, label, k


def _check_max_side(max_side: int, function: str) -> None:
    if not isinstance(max_side, (int, np.integer)) or max_side < 1:
        raise PlotError(
            f"{function}: max_side = {max_side!r}; give a positive integer number of "
            f"pixels, e.g. 512"
        )


def _caption(when: str, population: int, k: int) -> str:
    text = f"{when}   " if when else ""
    text += f"population {population}"
    return text + (f"   (max-pooled {k}x{k})" if k > 1 else "")


def life_png(
    data: xr.Dataset | xr.DataArray | np.ndarray,
    path: str | os.PathLike[str],
    *,
    var: str | None = None,
    times: Sequence[float] | None = None,
    max_side: int = MAX_SIDE,
) -> Path:
    """An image of the final Game of Life board, with its step and population.

    Args:
        data: a 2-D board ``(y, x)``, an array of snapshots ``(n, y, x)`` (the
            last is drawn), or a Dataset from :func:`pgas.io.to_dataset`.
        path: output image (``.png`` recommended; the suffix picks the format).
        var: the field variable of a Dataset (default: its only field).
        times: step numbers of the snapshots when ``data`` is a 3-D array.
        max_side: boards larger than this many cells per side are max-pooled.

    Returns:
        The absolute path written.

    Raises:
        PlotError: data that are not boards, a bad ``max_side``, or a missing
            directory.

    >>> import tempfile, numpy as np
    >>> board = np.zeros((16, 16), np.uint8); board[5, 4:7] = 1
    >>> life_png(board, tempfile.mkdtemp() + "/board.png").name
    'board.png'
    """
    with _opened(data, "life_png") as data:
        da, steps, _ = _field(data, var, times, "life_png")
        if da.ndim not in (2, 3) or 0 in da.shape:
            raise PlotError(
                f"life_png draws a board (y, x) or the last of snapshots (n, y, x); got "
                f"shape {da.shape}"
            )
        _check_max_side(max_side, "life_png")
        target = _check_path(path, "life_png", ())
        board = da if da.ndim == 2 else da.isel({da.dims[0]: -1})
        when = f"step {steps[-1]}" if (da.ndim == 3 and steps is not None) else ""
        fig, image, label, k = _board_figure(board.shape, max_side)
        pooled, population = _read_pooled(board, k)
    image.set_data(pooled)
    label.set_text(_caption(when, population, k))
    with _atomic(target) as tmp:
        fig.savefig(tmp, format=target.suffix.lstrip(".").lower() or "png")
    return target


def _frame_indices(n: int, max_frames: int) -> np.ndarray:
    if n <= max_frames:
        return np.arange(n)
    return np.unique(np.linspace(0, n - 1, max_frames).round().astype(int))


def life_gif(
    data: xr.Dataset | xr.DataArray | np.ndarray,
    path: str | os.PathLike[str],
    *,
    fps: float = 10,
    var: str | None = None,
    times: Sequence[float] | None = None,
    max_frames: int = MAX_FRAMES,
    max_side: int = MAX_SIDE,
) -> Path:
    """An animated GIF of Game of Life snapshots (Matplotlib's ``PillowWriter``).

    To keep files small, at most ``max_frames`` evenly spaced snapshots are
    used (first and last included), and boards larger than ``max_side`` cells
    per side are max-pooled by an integer factor. Pillow merges consecutive
    identical frames (e.g. of a still life) into one longer frame.

    Args:
        data: snapshots ``(n, y, x)``, or a Dataset from
            :func:`pgas.io.to_dataset` with a ``(time, y, x)`` field.
        path: output path ending in ``.gif``.
        fps: frames per second.
        var: the field variable of a Dataset (default: its only field).
        times: step numbers of the snapshots when ``data`` is an array.
        max_frames: most frames in the GIF.
        max_side: boards larger than this many cells per side are max-pooled.

    Returns:
        The absolute path written.

    Raises:
        PlotError: data that are not snapshots of boards, a bad option, a
            suffix other than ``.gif``, or a missing directory.

    >>> import tempfile, numpy as np
    >>> frames = np.zeros((4, 8, 8), np.uint8)
    >>> for t in range(4): frames[t, t, t] = 1
    >>> life_gif(frames, tempfile.mkdtemp() + "/life.gif", fps=5).name
    'life.gif'
    """
    with _opened(data, "life_gif") as data:
        da, steps, _ = _field(data, var, times, "life_gif")
        if da.ndim != 3 or 0 in da.shape:
            raise PlotError(
                f"life_gif animates snapshots of boards, shape (n, y, x); got shape "
                f"{da.shape}; for one board use life_png"
            )
        if not isinstance(fps, (int, float, np.number)) or not 0 < fps <= 100:
            raise PlotError(f"life_gif: fps = {fps!r}; give a frame rate in (0, 100], e.g. 10")
        if not isinstance(max_frames, (int, np.integer)) or max_frames < 1:
            raise PlotError(
                f"life_gif: max_frames = {max_frames!r}; give a positive integer, e.g. 200"
            )
        _check_max_side(max_side, "life_gif")
        target = _check_path(path, "life_gif", (".gif",))
        fig, image, label, k = _board_figure(da.shape[1:], max_side)
        writer = PillowWriter(fps=fps)
        with _atomic(target) as tmp, writer.saving(fig, str(tmp), dpi=_DPI):
            for i in _frame_indices(da.shape[0], max_frames):
                pooled, population = _read_pooled(da.isel({da.dims[0]: int(i)}), k)
                image.set_data(pooled)
                when = f"step {steps[i]}" if steps is not None else f"snapshot {i}"
                label.set_text(_caption(when, population, k))
                writer.grab_frame()
    return target
