"""Shared helpers: timing statistics, machine description, stencil definitions."""

from __future__ import annotations

import datetime
import os
import platform
import resource
import statistics
import time
from pathlib import Path

import numpy as np

# bytes that must move per cell update (read the old field once, write the new one once)
BYTES_PER_CELL = {"heat1d_f32": 8, "heat1d_f64": 16, "life_u8": 2}
DTYPES = {"heat1d_f32": "float32", "heat1d_f64": "float64", "life_u8": "uint8"}


def median_seconds(fn, repeats: int, warm_up: bool = False) -> float:
    """Median seconds of ``fn()`` over ``repeats`` calls (after one untimed call: ``warm_up``)."""
    if warm_up:
        fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def paired_seconds(fns: dict, repeats: int, warm_up: bool = True) -> dict:
    """Median seconds of each of ``fns`` (name -> callable), called in turn ``repeats`` times.

    Alternating the calls puts every form under the same load on a shared machine, so a
    ratio of two medians compares like with like; timing one form after the other lets a
    burst of load land on one of them (in ``iterative.py``, timed in blocks, the Jacobi ratio
    moved by up to 40% between runs).
    """
    if warm_up:
        for fn in fns.values():
            fn()
    times: dict = {name: [] for name in fns}
    for _ in range(repeats):
        for name, fn in fns.items():
            start = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - start)
    return {name: statistics.median(ts) for name, ts in times.items()}


def stats(times: list[float], cells: float) -> dict:
    """Median and spread of a list of timings, and the throughput they give (cell updates/s)."""
    ts = sorted(times)
    q = statistics.quantiles(ts, n=4) if len(ts) >= 2 else [ts[0]] * 3
    return {
        "seconds_median": statistics.median(ts),
        "seconds_min": ts[0],
        "seconds_max": ts[-1],
        "seconds_iqr": [q[0], q[2]],
        "repeats": len(ts),
        "cells_per_s_median": cells / statistics.median(ts),
        "cells_per_s_min": cells / ts[-1],
        "cells_per_s_max": cells / ts[0],
    }


def peak_rss_bytes() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def machine() -> dict:
    model = "unknown"
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem = None
    try:
        for line in open("/proc/meminfo"):
            if line.startswith("MemTotal"):
                mem = int(line.split()[1]) * 1024
    except OSError:
        pass
    l3 = None
    try:
        l3 = open("/sys/devices/system/cpu/cpu0/cache/index3/size").read().strip()
    except OSError:
        pass
    import jax

    import pgas

    return {
        "cpu_model": model,
        "cores": os.cpu_count(),
        "memory_bytes": mem,
        "l3_cache": l3,
        "device_kind": jax.devices()[0].device_kind,
        "platform": platform.platform(),
        "python": platform.python_version(),
        "jax": jax.__version__,
        "numpy": np.__version__,
        "pgas": pgas.__version__,
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "load_average": os.getloadavg(),
    }


def heat_np(u: np.ndarray) -> None:
    """One heat1d step in place (Keep boundary: the two end cells stay)."""
    u[1:-1] = u.dtype.type(0.5) * u[1:-1] + u.dtype.type(0.25) * (u[:-2] + u[2:])


def life_np(g: np.ndarray) -> np.ndarray:
    n = sum(
        np.roll(np.roll(g, dy, 0), dx, 1)
        for dy in (-1, 0, 1)
        for dx in (-1, 0, 1)
        if (dy, dx) != (0, 0)
    )
    return ((n == 3) | ((g == 1) & (n == 2))).astype(np.uint8)


def init_heat(i):
    return np.sin(i / 10.0)


def init_life(i, j):
    return ((i * 7 + j * 13 + (i * j) % 5) % 3 == 0).astype(np.uint8)


EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def example_stencils(name: str):
    """``(global-view step, local kernel)`` of the example ``heat1d`` or ``life``: the
    benchmarks time exactly the stencils pgas ships."""
    from pgas.app.problem import load_problem

    problem = load_problem(f"{EXAMPLES / name / name}.py:problem")
    return problem.step, problem.kernel


def example_case(name: str, size: int, devices: int):
    """The benchmark case of example ``name``: heat1d f32 of ``size`` cells (Keep) on a 1-D
    mesh, or a ``size``-square uint8 Life torus on a 2-D mesh, each over ``devices`` devices.

    Returns a namespace with ``step``, ``kernel``, ``region`` (the explicit path's), ``mesh``,
    ``shape``, ``dtype``, ``cells`` and ``make()`` (a fresh initial state).
    """
    from types import SimpleNamespace

    import pgas

    step, kernel = example_stencils(name)
    if name == "heat1d":
        mesh, shape, dtype = pgas.make_mesh(("x",), devices=devices), (size,), np.float32
        region, kw, init = (slice(1, -1),), {"boundary": pgas.Keep()}, init_heat
    else:
        mesh = pgas.make_mesh(("y", "x"), shape=pgas.dims_create(devices, 2), devices=devices)
        shape, dtype, region, kw, init = (size, size), np.uint8, None, {}, init_life

    def make():
        return pgas.from_function(init, shape, mesh, dtype=dtype, **kw)

    return SimpleNamespace(step=step, kernel=kernel, region=region, mesh=mesh, shape=shape,
                           dtype=dtype, cells=int(np.prod(shape)), make=make)  # fmt: skip


def auto_peak_over_block(step, make, k="auto") -> float | None:
    """XLA's peak bytes per device of the compiled ``pgas.run`` loop over the local block."""
    from pgas.loop.timeloop import compiled as compiled_loop

    u = make()
    compiled = compiled_loop(step, u, k)
    m = compiled.memory_analysis()
    if m is None:
        return None
    peak = (m.argument_size_in_bytes + m.output_size_in_bytes + m.temp_size_in_bytes
            - m.alias_size_in_bytes)  # fmt: skip
    return peak / (int(np.prod(u.layout.local_shape)) * np.dtype(u.dtype).itemsize)
