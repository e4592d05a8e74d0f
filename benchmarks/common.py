"""Shared helpers: timing statistics, machine description, stencil definitions."""

from __future__ import annotations

import datetime
import os
import platform
import resource
import statistics
from pathlib import Path

import numpy as np

# bytes that must move per cell update (read the old field once, write the new one once)
BYTES_PER_CELL = {"heat1d_f32": 8, "heat1d_f64": 16, "life_u8": 2}
DTYPES = {"heat1d_f32": "float32", "heat1d_f64": "float64", "life_u8": "uint8"}


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
    from pgas.problem import load_problem

    problem = load_problem(f"{EXAMPLES / name / name}.py:problem")
    return problem.step, problem.kernel
