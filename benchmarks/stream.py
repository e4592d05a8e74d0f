"""STREAM-style copy and triad bandwidth with NumPy, at the field's own size."""

from __future__ import annotations

import time

import numpy as np
from common import stats


def stream(nbytes: int, repeats: int = 5) -> dict:
    """Copy (b[:] = a: 2 x nbytes moved) and triad (a = b + s*c: 3 x nbytes) in GB/s."""
    n = max(nbytes // 8, 1024)
    a, b, c = (np.full(n, 1.0) for _ in range(3))
    out = {"bytes": n * 8}
    for name, fn, moved in (
        ("copy", lambda: np.copyto(b, a), 2),
        ("triad", lambda: np.add(b, 3.0 * c, out=a), 3),  # the temporary makes this a lower bound
    ):
        fn()
        reps = max(repeats, int(2e8 // (n * 8)) + 1)
        reps = min(reps, 50)
        ts = []
        for _ in range(reps):
            t = time.perf_counter()
            fn()
            ts.append(time.perf_counter() - t)
        s = stats(ts, moved * n * 8)
        out[name] = {
            "GB_per_s_median": s["cells_per_s_median"] / 1e9,
            "GB_per_s_min": s["cells_per_s_min"] / 1e9,
            "GB_per_s_max": s["cells_per_s_max"] / 1e9,
            "repeats": s["repeats"],
        }
    return out
