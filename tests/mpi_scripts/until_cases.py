"""Rank-side driver for tests/references/test_until_backends.py: Jacobi by
``pgas.mpi.run_until``, CG on a state dict by ``pgas.mpi.run_until`` and ``pgas.mpi.run``,
``pgas.mpi.run`` with params (a field, a scalar), reductions of NaN and infinities, a
state gone non-finite, and ``max_steps = 10**12``.

Usage: ``mpiexec -n P python until_cases.py OUT_DIR``. Every case runs in this one
launch; rank 0 writes ``OUT_DIR/fields.npz`` (one gathered field per case) and
``OUT_DIR/meta.json`` (steps taken, converged, check_every, all-reduces per rank).
The kernel, the test and the right-hand side live here, without MPI imports, so
that the test imports them for its in-process backends.
"""

from __future__ import annotations

import itertools
import json
import os
import sys
import warnings

import numpy as np

TOL = 1e-6  # max |residual|: the checks' values lie far from it on both sides
F = np.random.default_rng(1).random((15, 13)) / 14**2  # uneven over 3 ranks, either way

#: name -> (dims, max_steps, check_every, steps_per_exchange)
CASES = {
    "rows_every8_k1": ([3, 1], 2000, 8, 1),
    "rows_every8_k4": ([3, 1], 2000, 8, 4),
    "cols_every6_kauto": ([1, 3], 2000, 6, "auto"),
    "cols_auto": ([1, 3], 2000, "auto", "auto"),
    "rows_max_steps_21": ([3, 1], 21, 8, "auto"),
}


def kernel(e, f):
    """The local Jacobi sweep: ``e`` and ``f`` are blocks with a halo of one cell."""
    return 0.25 * (e[:-2, 1:-1] + e[2:, 1:-1] + e[1:-1, :-2] + e[1:-1, 2:] + f[1:-1, 1:-1])


def converged(e, f, reduce):
    """max |b - A u| < TOL over the interior: one reduction, one all-reduce."""
    r = e[:-2, 1:-1] + e[2:, 1:-1] + e[1:-1, :-2] + e[1:-1, 2:] + f[1:-1, 1:-1] - 4 * e[1:-1, 1:-1]
    return reduce(abs(r), "max") < TOL


# A rod relaxing to a straight line between two fixed cells: region (2, -2), Keep or
# Dirichlet ends; the test reads the cells the kernel writes (``reduce`` leaves the rest out).
# 13 cells (uneven over 3 devices, 5 + 5 + 3): 256 steps to converge (29 cells took 1576,
# ~3 ms a step on three busy-waiting MPI ranks)
ROD = np.random.default_rng(5).random(13)
REGION = (slice(2, -2),)
RODS = {"rod_keep": "keep", "rod_dirichlet": "dirichlet"}
ROD_MAX_STEPS = {"rod_keep": 10**12, "rod_dirichlet": 5000}  # 10**12: "until converged"


def rod_kernel(e):
    return 0.5 * (e[:-2] + e[2:])


def rod_converged(e, reduce):
    r = e[:-2] + e[2:] - 2 * e[1:-1]
    return reduce(abs(r), "max") < TOL


def rod_boundary(name: str):
    import pgas

    return pgas.Keep() if name == "keep" else pgas.Dirichlet(0.0)


# Conjugate gradients on a state dict {x, r, p, rr}: reductions inside the step, reproducible,
# so every backend and decomposition gives the bits of the NumPy CG of the test.
B = np.random.default_rng(2).random((15, 13))
B[0, :] = B[-1, :] = B[:, 0] = B[:, -1] = 0.0
CG_STOP = 1e-20 * float((B * B).sum())  # rr < CG_STOP: relative residual 1e-10
CG_CASES = {"cg_rows": [3, 1], "cg_cols": [1, 3]}


def cg_kernel(s, reduce):
    """One CG iteration on blocks with a halo of one cell (walls: Keep, never written)."""
    x, r, p, rr = s["x"], s["r"], s["p"], s["rr"]
    pin = p[1:-1, 1:-1]
    ap = 4 * pin - (p[:-2, 1:-1] + p[2:, 1:-1] + p[1:-1, :-2] + p[1:-1, 2:])
    alpha = rr / reduce(pin * ap, reproducible=True)
    r1 = r[1:-1, 1:-1] - alpha * ap
    new = reduce(r1 * r1, reproducible=True)
    return {"x": x[1:-1, 1:-1] + alpha * pin, "r": r1, "p": r1 + (new / rr) * pin, "rr": new}


def cg_converged(s, reduce):
    return s["rr"] < CG_STOP  # already reduced by the step


def cg_init(rr0):
    """The state dict of the MPI path: x = 0, r = p = B, rr = B.B."""
    return {"x": lambda i, j: np.zeros(np.broadcast(i, j).shape), "r": lambda i, j: B[i, j],
            "p": lambda i, j: B[i, j], "rr": rr0}  # fmt: skip


# pgas.mpi.run with params: name -> (dims, steps_per_exchange, params as a dict?), 29 steps
RUNS = {"run_rows_k1": ([3, 1], 1, False), "run_cols_kauto": ([1, 3], "auto", True)}
RUN_STEPS = 29


def scaled_kernel(e, p):
    """The Jacobi sweep with its weight a scalar param: ``p = {"c": 0.25, "f": field}``."""
    return p["c"] * (e[:-2, 1:-1] + e[2:, 1:-1] + e[1:-1, :-2] + e[1:-1, 2:] + p["f"][1:-1, 1:-1])


# An upwind step reading a velocity field at the cell and two below it: halo ((2, 0),).
UPWIND_X = np.random.default_rng(3).random(37)
UPWIND_V = 0.2 + 0.5 * np.random.default_rng(4).random(37)
UPWIND_STEPS = 23


def upwind_kernel(e, v):
    return e[2:] - v[2:] * (e[1:-1] - e[:-2]) * 0.5 - 0.1 * v[:-2] * (e[2:] - e[1:-1])


# NaN and infinities next to every block edge: reduce gives NumPy's max, min and sum (params)
NONFINITE = {"nonfinite_1d": ((10,), [3]), "nonfinite_2d": ((7, 5), [3, 1])}


def _edges(n: int, parts: int) -> list[int]:
    """The first and last cell of every block of ``ceil(n / parts)`` cells, and a middle one
    (MPI's blocks may be cut otherwise: then these are cells near its edges)."""
    size = -(-n // parts)
    return sorted({n // 2} | {c for lo in range(0, n, size) for c in (lo, min(lo + size, n) - 1)})


def nonfinite_cases(shape: tuple, dims) -> list:
    """Arrays with a NaN, an inf or a -inf at a cell next to a block edge (each of them), and
    an inf and a NaN (a -inf and an inf) in the first and last blocks."""
    base = np.random.default_rng(len(shape)).random(shape) - 0.5
    cells = list(itertools.product(*(_edges(n, d) for n, d in zip(shape, dims))))
    cases = [{c: v} for c in cells for v in (np.nan, np.inf, -np.inf)]
    cases += [{cells[0]: np.inf, cells[-1]: np.nan}, {cells[0]: -np.inf, cells[-1]: np.inf}]
    out = []
    for case in cases:
        a = base.copy()
        for cell, value in case.items():
            a[cell] = value
        out.append(a)
    return out


def numpy_reductions(a) -> list:
    with np.errstate(invalid="ignore"):
        return [a.max(), a.min(), a.sum()]


def nonfinite_kernel(e, p):
    return e[tuple(slice(1, -1) for _ in range(e.ndim))]


def _same(x, want):
    return (x == want) | ((x != x) & (want != want))  # NaN is NaN


def nonfinite_test(e, p, reduce):
    """reduce's max, min and sum of the block's cells are ``p``'s (NumPy's), NaN for NaN."""
    x = e[tuple(slice(1, -1) for _ in range(e.ndim))]
    return _same(reduce(x, "max"), p[0]) & _same(reduce(x, "min"), p[1]) & \
        _same(reduce(x, "sum"), p[2])  # fmt: skip


# the rod with a NaN inside the region: a check's max is NaN, so the loop stops there (finite
# False)
ROD_NAN = ROD.copy()
ROD_NAN[6] = np.nan


def grow_kernel(s, reduce):
    """A state dict whose scalar (read without reducing, as CG's rr) is inf after 2 steps."""
    return {"u": s["u"][1:-1], "rr": s["rr"] * 1e200}


def grow_converged(s, reduce):
    return s["rr"] < 1e-8


def main() -> None:
    import pgas
    from pgas.references import mpi

    out = sys.argv[1]
    fields, meta = {}, {}
    with mpi.abort_on_error():
        for name, (dims, max_steps, every, k) in CASES.items():
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                r = mpi.run_until(kernel, lambda i, j: np.zeros(np.shape(i)), F.shape, "float64",
                                  converged, max_steps, 1, pgas.Keep(), dims=dims,
                                  check_every=every, steps_per_exchange=k,
                                  params=lambda i, j: F[i, j])  # fmt: skip
            if r.field is not None:
                fields[name] = r.field
            meta[name] = {"steps": r.steps, "converged": r.converged,
                          "check_every": r.check_every, "allreduces": r.allreduces,
                          "dims": list(r.dims), "k": r.steps_per_exchange,
                          "warned": [str(w.message) for w in caught
                                     if w.category is pgas.NonConvergenceWarning]}  # fmt: skip
        for name, bc in RODS.items():
            r = mpi.run_until(rod_kernel, lambda i: ROD[i], ROD.shape, "float64", rod_converged,
                              ROD_MAX_STEPS[name], 1, rod_boundary(bc), REGION,
                              check_every=4)  # fmt: skip
            if r.field is not None:
                fields[name] = r.field
            meta[name] = {"steps": r.steps, "converged": r.converged, "allreduces": r.allreduces}
        from pgas.globalview.reprosum import total

        for name, dims in CG_CASES.items():
            r = mpi.run_until(cg_kernel, cg_init(total(B * B)), B.shape, "float64",
                              cg_converged, 200, 1, pgas.Keep(), dims=dims)  # fmt: skip
            if r.field is not None:
                fields[name] = r.field["x"]
            meta[name] = {"steps": r.steps, "converged": r.converged, "allreduces": r.allreduces,
                          "check_every": r.check_every, "k": r.steps_per_exchange,
                          "messages_per_step": r.messages_per_step,
                          "rr": float(r.field["rr"]) if r.field is not None else None}  # fmt: skip
        # pgas.mpi.run on the state dict for the steps cg_cols took: its x and rr, bitwise
        r = mpi.run(cg_kernel, cg_init(total(B * B)), B.shape, "float64", meta["cg_cols"]["steps"],
                    1, pgas.Keep(), dims=CG_CASES["cg_cols"])  # fmt: skip
        if r.field is not None:
            fields["cg_run_cols"] = r.field["x"]
        rr = float(r.field["rr"]) if r.field is not None else None
        meta["cg_run_cols"] = {"steps": r.steps, "converged": r.converged, "rr": rr,
                               "k": r.steps_per_exchange, "allreduces": r.allreduces}  # fmt: skip
        for name, (dims, k, as_dict) in RUNS.items():
            zero, f = (lambda i, j: np.zeros(np.shape(i))), (lambda i, j: F[i, j])
            r = mpi.run(scaled_kernel if as_dict else kernel, zero, F.shape, "float64",
                        RUN_STEPS, 1, pgas.Keep(), dims=dims, steps_per_exchange=k,
                        params={"c": 0.25, "f": f} if as_dict else f)  # fmt: skip
            if r.field is not None:
                fields[name] = r.field
            meta[name] = {"dims": list(r.dims), "k": r.steps_per_exchange}
        r = mpi.run(upwind_kernel, lambda i: UPWIND_X[i], UPWIND_X.shape, "float64",
                    UPWIND_STEPS, ((2, 0),), pgas.Neumann(), (slice(2, None),),
                    steps_per_exchange=3, params=lambda i: UPWIND_V[i])  # fmt: skip
        if r.field is not None:
            fields["run_upwind"] = r.field
        for name, (shape, dims) in NONFINITE.items():
            held = []
            for a in nonfinite_cases(shape, dims):
                with warnings.catch_warnings(record=True) as caught:
                    warnings.simplefilter("always")
                    r = mpi.run_until(nonfinite_kernel, lambda *i, a=a: a[i], shape, "float64",
                                      nonfinite_test, 1, 1, pgas.Periodic(), dims=dims,
                                      params=np.array(numpy_reductions(a)))  # fmt: skip
                warned = [w.category.__name__ for w in caught  # not NumPy's inf - inf
                          if issubclass(w.category, pgas.NonConvergenceWarning)]  # fmt: skip
                held.append([r.converged, r.finite, warned == ["NonFiniteWarning"]])
            meta[name] = held
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            r = mpi.run_until(
                rod_kernel,
                lambda i: ROD_NAN[i],
                ROD.shape,
                "float64",
                rod_converged,
                5000,
                1,
                pgas.Keep(),
                REGION,
                check_every=4,
            )
            g = mpi.run_until(grow_kernel, {"u": lambda i: ROD[i], "rr": 1.0}, ROD.shape,
                              "float64", grow_converged, 100, 1, pgas.Periodic())  # fmt: skip
        if r.field is not None:
            fields["rod_nan"] = r.field
        meta["rod_nan"] = {"steps": r.steps, "converged": r.converged, "finite": r.finite,
                           "grow": [g.steps, g.converged, g.finite],
                           "warned": [str(w.message) for w in caught
                                      if w.category is pgas.NonFiniteWarning]}  # fmt: skip
        every_rank = mpi.MPI.COMM_WORLD.gather(meta)
        if mpi.MPI.COMM_WORLD.rank == 0:
            np.savez(os.path.join(out, "fields.npz"), **fields)
            with open(os.path.join(out, "meta.json"), "w") as f:
                json.dump({"size": mpi.MPI.COMM_WORLD.size, "ranks": every_rank}, f)


if __name__ == "__main__":
    main()
