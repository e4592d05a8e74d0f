"""2-D Poisson equation, Jacobi and conjugate gradients, iterated to convergence on N devices.

    python examples/poisson/poisson.py --n 129 --devices 4
    python examples/poisson/poisson.py --n 65 --devices 4 --plot out/poisson.png --json
    python examples/poisson/poisson.py --order 33 65 129        # error against the exact u
    python examples/poisson/poisson.py --n 129 --devices 4 --methods cg multigrid mgcg
    python examples/poisson/poisson.py --case cube --n 65 --devices 4 --methods multigrid mgcg
    python examples/poisson/poisson.py --n 33 --devices 3 --backend explicit
    python examples/poisson/poisson.py --n 65 --devices 4 --platform cpu --out out/poisson.nc
    mpiexec -n 3 python examples/poisson/poisson.py --n 33 --backend mpi
    pgas compare examples/poisson/poisson.py:problem --devices 3 --steps 100000 --set n=33

Physics: -lap(u) = f on the unit square, u = 0 on the walls, with the
manufactured solution u = e^x sin(pi x) sin(pi y). Numerics: the
5-point Laplacian on n x n points (walls included), h = 1/(n - 1); Jacobi
(the textbook baseline) and conjugate gradients, both written in the global
view and run by ``pgas.run_until`` as one compiled ``while`` loop until the
relative residual ||b - A u|| / ||b|| falls below ``--tol`` (1e-8). CG's
state holds x, r, p and the scalar r.r; each iteration does two reductions
(p.Ap and r.r), reproducible sums (``pgas.sum(..., reproducible=True)``: the
same bits on every decomposition, two scalar-sized all-reduces each).
``--json`` prints one JSON line; ``--out FILE`` (.nc or .zarr) writes each
method's converged field, ``u_jacobi`` and ``u_cg``, with its iteration count
(:func:`write_fields`),
``--platform`` picks JAX's platform (auto, cpu, gpu), as in the other examples
(:mod:`pgas.app.options`). Both are also written in the local view
(kernels on blocks with one halo cell, reductions by a ``reduce`` helper), so
they run on ``--backend explicit`` (``pgas.explicit.run_until``) and
``--backend mpi`` (``pgas.mpi.run_until``, under mpiexec) with the iterations
of auto; :func:`problem` hands Jacobi to ``pgas compare``. Jacobi's fields are
bitwise equal on every backend; CG's on every decomposition of one backend,
and across backends where XLA does not fuse CG's multiply-adds into FMAs
(NumPy rounds each product; on a CPU ``XLA_FLAGS=--xla_cpu_max_isa=AVX`` turns
them off).
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np

import pgas
from pgas.app import options
from pgas.app.problem import Problem
from pgas.globalview import reprosum

# ---- Physics ------------------------------------------------------------------------------
# -lap(u) = f on [0, 1]^2, u = 0 on the walls; exact solution u = e^x sin(pi x) sin(pi y)
# (not an eigenvector of the discrete Laplacian, so CG has work to do; x is the first axis).


def exact(n: int) -> np.ndarray:
    """The manufactured solution on the n x n grid points (walls included)."""
    x = np.linspace(0.0, 1.0, n)
    return (np.exp(x) * np.sin(np.pi * x))[:, None] * np.sin(np.pi * x)[None, :]


def source(n: int) -> np.ndarray:
    """f = -lap(u) = e^x sin(pi y) ((2 pi^2 - 1) sin(pi x) - 2 pi cos(pi x))."""
    x = np.linspace(0.0, 1.0, n)
    sx, cx = np.sin(np.pi * x), np.cos(np.pi * x)
    return (np.exp(x) * ((2 * np.pi**2 - 1) * sx - 2 * np.pi * cx))[:, None] * sx[None, :]


# ---- Numerics -----------------------------------------------------------------------------
# A u = 4 u[i, j] - (u[i-1, j] + u[i+1, j] + u[i, j-1] + u[i, j+1]) = h^2 f[i, j] = b
# on the interior points; the walls stay 0 (boundary pgas.Keep(): never written).


def jacobi(u, b):
    """One Jacobi sweep: u <- (neighbours + b) / 4 (the walls are not written)."""
    u[1:-1, 1:-1] = 0.25 * (u[:-2, 1:-1] + u[2:, 1:-1] + u[1:-1, :-2] + u[1:-1, 2:] + b[1:-1, 1:-1])
    return u


def residual_squared(u, b):
    """||b - A u||^2 over the interior: one reduction (one scalar all-reduce)."""
    r = b[1:-1, 1:-1] - (4 * u[1:-1, 1:-1] - (u[:-2, 1:-1] + u[2:, 1:-1] + u[1:-1, :-2]
                                              + u[1:-1, 2:]))  # fmt: skip
    return pgas.sum(r * r)


def jacobi_converged(tol: float, bb: float):
    return lambda u, b: residual_squared(u, b) < tol**2 * bb


# The same Jacobi in the local view (explicit and MPI backends): ``e`` is a block with one halo
# cell, ``b`` the same block of b; ``reduce(values)`` sums values of the block's own cells over
# the cells the sweep writes on every device or rank (one all-reduce). Same sums in the same
# order as the global view, so the same bits; the reduced residual only decides when to stop.


def jacobi_kernel(e, b):
    """One Jacobi sweep of a block: the new values of its cells."""
    return 0.25 * (e[:-2, 1:-1] + e[2:, 1:-1] + e[1:-1, :-2] + e[1:-1, 2:] + b[1:-1, 1:-1])


def local_jacobi_converged(tol: float, bb: float):
    def converged(e, b, reduce):
        r = b[1:-1, 1:-1] - (4 * e[1:-1, 1:-1] - (e[:-2, 1:-1] + e[2:, 1:-1] + e[1:-1, :-2]
                                                  + e[1:-1, 2:]))  # fmt: skip
        return reduce(r * r) < tol**2 * bb

    return converged


def cg(s, reproducible: bool = True):
    """One conjugate-gradient iteration; the state holds x, r, p and the scalar rr = r.r.

    Both sums are reproducible: the iterates do not depend on the decomposition
    (``reproducible=False``, bound by ``functools.partial``: plain sums, for comparison)."""
    x, r, p, rr = s["x"], s["r"], s["p"], s["rr"]
    ap = 4 * p[1:-1, 1:-1] - (p[:-2, 1:-1] + p[2:, 1:-1] + p[1:-1, :-2] + p[1:-1, 2:])
    alpha = rr / pgas.sum(p[1:-1, 1:-1] * ap, reproducible=reproducible)
    x[1:-1, 1:-1] = x[1:-1, 1:-1] + alpha * p[1:-1, 1:-1]
    r[1:-1, 1:-1] = r[1:-1, 1:-1] - alpha * ap
    new = pgas.sum(r * r, reproducible=reproducible)
    p[1:-1, 1:-1] = r[1:-1, 1:-1] + (new / rr) * p[1:-1, 1:-1]
    return {"x": x, "r": r, "p": p, "rr": new}


def cg_converged(tol: float, bb: float):
    return lambda s: s["rr"] < tol**2 * bb  # rr is already reduced: no collective of its own


# The same CG in the local view (explicit and MPI): ``s`` holds each field's block with one halo
# cell and the scalar rr; the kernel returns each field's new cells and the new rr. reduce(...)
# sums over the cells the step writes (the interior), reproducibly: the sums of the global view.


def cg_kernel(s, reduce):
    """One CG iteration of a block: the new x, r and p cells and the new rr."""
    x, r, p, rr = s["x"], s["r"], s["p"], s["rr"]
    pin = p[1:-1, 1:-1]
    ap = 4 * pin - (p[:-2, 1:-1] + p[2:, 1:-1] + p[1:-1, :-2] + p[1:-1, 2:])
    alpha = rr / reduce(pin * ap, reproducible=True)
    r1 = r[1:-1, 1:-1] - alpha * ap
    new = reduce(r1 * r1, reproducible=True)
    return {"x": x[1:-1, 1:-1] + alpha * pin, "r": r1, "p": r1 + (new / rr) * pin, "rr": new}


def local_cg_converged(tol: float, bb: float):
    return lambda s, reduce: s["rr"] < tol**2 * bb  # rr is already reduced


# ---- Initial conditions -------------------------------------------------------------------
def fields(n: int, mesh):
    """b = h^2 f (zero on the walls) and a field maker on ``mesh``."""
    b = rhs(n)

    def field(a):
        return pgas.from_numpy(a, mesh, spec=("y", "x"), boundary=pgas.Keep())

    return b, field


def rhs(n: int) -> np.ndarray:
    """b = h^2 f on the n x n points, zero on the walls."""
    h = 1.0 / (n - 1)
    b = h * h * source(n)
    b[0, :] = b[-1, :] = b[:, 0] = b[:, -1] = 0.0
    return b


def problem(n: int = 65, tol: float = 1e-8, check_every: int = 0) -> Problem:
    """Jacobi for every backend (``pgas compare examples/poisson/poisson.py:problem``).

    ``--steps`` is the most sweeps; ``check_every = 0``: ``"auto"``.

    >>> problem(9).iterative
    True
    """
    b = rhs(n)
    bb = float((b * b).sum())
    return Problem(
        "poisson-jacobi", (n, n), "float64", lambda i, j: np.zeros(np.broadcast(i, j).shape),
        jacobi, jacobi_kernel, pgas.Keep(), 1, None, ("y", "x"),
        params=lambda i, j: b[i, j], converged=jacobi_converged(tol, bb),
        local_converged=local_jacobi_converged(tol, bb), check_every=check_every or "auto",
    )  # fmt: skip


def cg_state(b: np.ndarray, field):
    """x = 0, so r = p = b and rr = b.b (the reproducible sum, as every iteration's)."""
    import jax.numpy as jnp

    return {"x": field(np.zeros_like(b)), "r": field(b.copy()), "p": field(b.copy()),
            "rr": jnp.asarray(reprosum.total(b * b))}  # fmt: skip


def solve_cg_on(backend: str, n: int, devices: int, tol: float = 1e-8,
                max_steps: int = 10**6) -> dict | None:  # fmt: skip
    """CG on ``explicit`` or ``mpi`` (a warm-up run, then the timed one); the same dict as
    :func:`solve`, on rank 0 of ``mpi`` (``None`` on the other ranks)."""
    b = rhs(n)
    bb = float((b * b).sum())
    done = local_cg_converged(tol, bb)
    if backend == "explicit":
        mesh = pgas.make_mesh(("y", "x"), devices=devices)
        _, field = fields(n, mesh)
        pgas.explicit.run_until(cg_kernel, cg_state(b, field), done, max_steps)  # compiles
        start = time.perf_counter()
        out = pgas.explicit.run_until(cg_kernel, cg_state(b, field), done, max_steps)
        seconds = time.perf_counter() - start
        u, steps, converged, every = (out.state["x"].to_numpy(), out.steps_taken,
                                      out.converged, out.check_every)  # fmt: skip
    else:
        init = {"x": lambda i, j: np.zeros(np.broadcast(i, j).shape),
                "r": lambda i, j: b[i, j], "p": lambda i, j: b[i, j],
                "rr": reprosum.total(b * b)}  # fmt: skip
        r = pgas.mpi.run_until(cg_kernel, init, b.shape, "float64", done, max_steps, 1,
                               pgas.Keep())  # fmt: skip
        if r.field is None:
            return None
        u, steps, converged, every, seconds = (r.field["x"], r.steps, r.converged,
                                               r.check_every, r.seconds)  # fmt: skip
        devices = len(r.rank_messages_per_step)
    return {"method": "cg", "backend": backend, "n": n, "devices": devices,
            "iterations": steps, "converged": converged, "check_every": every,
            "seconds": seconds, "seconds_per_iteration": seconds / steps,
            "relative_residual": _relative_residual(u, b),
            "error_max": float(np.abs(u - exact(n)).max()), "field": u}  # fmt: skip


# ---- Time loop ----------------------------------------------------------------------------
def solve(method: str, n: int, mesh, tol: float = 1e-8, max_steps: int = 10**6) -> dict:
    """Solve with ``method`` ("jacobi", "cg", "multigrid" or "mgcg"); iterations, seconds,
    residual, error and the converged field (``"field"``, gathered to NumPy)."""
    b, field = fields(n, mesh)
    if method in ("multigrid", "mgcg"):
        return solve_multigrid(method, n, b, field, tol)
    bb = float((b * b).sum())
    if method == "jacobi":
        step, done, kw = jacobi, jacobi_converged(tol, bb), {"params": field(b)}
    else:
        step, done, kw = cg, cg_converged(tol, bb), {}
    kw["donate"] = True  # a fresh state each time: the loop may take its buffers
    pgas.run_until(step, _fresh(method, b, field), done, max_steps, **kw)  # compiles
    start = time.perf_counter()
    out = pgas.run_until(step, _fresh(method, b, field), done, max_steps, **kw)
    seconds = time.perf_counter() - start
    u = (out.state if method == "jacobi" else out.state["x"]).to_numpy()
    return {"method": method, "backend": "auto", "n": n, "devices": mesh.size,
            "iterations": out.steps_taken,
            "converged": out.converged, "check_every": out.check_every, "seconds": seconds,
            "seconds_per_iteration": seconds / out.steps_taken,
            "relative_residual": _relative_residual(u, b),
            "error_max": float(np.abs(u - exact(n)).max()), "field": u}  # fmt: skip


def solve_multigrid(method: str, n: int, b: np.ndarray, field, tol: float) -> dict:
    """``pgas.solvers``: multigrid V-cycles, or CG preconditioned by one V-cycle ("mgcg"),
    on -lap(u) = f (``b / h**2``); the same dict as :func:`solve` (iterations: cycles)."""
    h = 1.0 / (n - 1)
    op, f = pgas.solvers.Poisson(h=h), field(b / (h * h))
    out, seconds = timed_solve(method, op, f, tol)
    u, iterations = out.x.to_numpy(), int(out.iterations)
    return {"method": method, "backend": "auto", "n": n, "devices": f.layout.mesh.size,
            "iterations": iterations, "converged": bool(out.converged), "check_every": 1,
            "seconds": seconds, "seconds_per_iteration": seconds / max(iterations, 1),
            "relative_residual": _relative_residual(u, b),
            "error_max": float(np.abs(u - exact(n)).max()), "field": u}  # fmt: skip


def timed_solve(method: str, op, f, tol: float):
    """``(solution, seconds)`` of ``pgas.solvers``' ``method`` ("cg", "multigrid" or "mgcg")
    on ``op(u) = f``: a first call compiles, the second is timed."""
    if method == "cg":
        run = lambda: pgas.solvers.cg(op, f, tol=tol, max_iters=10**5)  # noqa: E731
    elif method == "mgcg":
        run = lambda: pgas.solvers.cg(op, f, M=op.vcycle, tol=tol, max_iters=200)  # noqa: E731
    else:
        run = lambda: pgas.solvers.multigrid(op, f, tol=tol, max_cycles=200)  # noqa: E731
    run().x.data.block_until_ready()  # compiles
    start = time.perf_counter()
    out = run()
    out.x.data.block_until_ready()
    return out, time.perf_counter() - start


def solve_case(case: str, method: str, n: int, devices: int, tol: float = 1e-8) -> dict:
    """``pgas.solvers`` on the other cases: ``"cube"``, -lap(u) = f with u = e^x sin(pi x)
    sin(pi y) sin(pi z) on n^3 points (7-point Laplacian); ``"variable"``, -div(a grad u) = f
    on the square with a = 1 + 0.9 sin(2 pi x) sin(2 pi y) and f = A u_exact, the
    discrete operator applied to the manufactured u (so the error is the solver's alone).
    ``method``: "cg", "multigrid" or "mgcg"; the dict of :func:`solve` (no field)."""
    x = np.linspace(0.0, 1.0, n)
    h = 1.0 / (n - 1)
    names = ("z", "y", "x") if case == "cube" else ("y", "x")
    mesh = pgas.make_mesh(names, devices=devices)

    def field(a):
        return pgas.from_numpy(a, mesh, boundary=pgas.Keep())

    if case == "cube":
        s, c, e = np.sin(np.pi * x), np.cos(np.pi * x), np.exp(x)
        yz = s[None, :, None] * s[None, None, :]
        want = (e * s)[:, None, None] * yz
        rhs = (e * ((3 * np.pi**2 - 1) * s - 2 * np.pi * c))[:, None, None] * yz
        op, f = pgas.solvers.Poisson(h=h), field(rhs)
    else:
        s2 = np.sin(2 * np.pi * x)
        a = 1 + 0.9 * s2[:, None] * s2[None, :]
        want = exact(n)
        op = pgas.solvers.Poisson(h=h, coefficient=field(a))
        f = op(field(want))
    out, seconds = timed_solve(method, op, f, tol)
    iterations = int(out.iterations)
    return {"method": method, "case": case, "backend": "auto", "n": n, "devices": devices,
            "iterations": iterations, "converged": bool(out.converged), "check_every": 1,
            "seconds": seconds, "seconds_per_iteration": seconds / max(iterations, 1),
            "relative_residual": float(out.residual),
            "error_max": float(np.abs(out.x.to_numpy() - want).max())}  # fmt: skip


def solve_on(backend: str, n: int, devices: int, tol: float = 1e-8,
             max_steps: int = 10**6) -> dict | None:  # fmt: skip
    """Jacobi on ``backend`` (``pgas.app.runner``: a warm-up run, then the timed one); the
    same dict as :func:`solve`, on rank 0 of ``mpi`` (``None`` on the other ranks)."""
    from pgas.app import runner
    from pgas.app.options import RunOptions

    opts = RunOptions(backend=backend, steps=max_steps, devices=devices, dtype="float64")
    r = runner.run(problem(n, tol), opts, gather=True)
    if r.field is None:
        return None
    u = r.field
    return {"method": "jacobi", "backend": backend, "n": n, "devices": r.devices,
            "iterations": r.steps, "converged": r.converged, "check_every": r.check_every,
            "seconds": r.seconds, "seconds_per_iteration": r.seconds / r.steps,
            "relative_residual": _relative_residual(u, rhs(n)),
            "error_max": float(np.abs(u - exact(n)).max()), "checksum": r.checksum,
            "field": u}  # fmt: skip


def _fresh(method, b, field):
    return field(np.zeros_like(b)) if method == "jacobi" else cg_state(b, field)


def _relative_residual(u: np.ndarray, b: np.ndarray) -> float:
    r = b[1:-1, 1:-1] - (4 * u[1:-1, 1:-1] - (u[:-2, 1:-1] + u[2:, 1:-1] + u[1:-1, :-2]
                                              + u[1:-1, 2:]))  # fmt: skip
    return float(np.sqrt((r * r).sum() / (b * b).sum()))


def history(method: str, n: int, mesh, steps: int, every: int) -> np.ndarray:
    """Relative residual after every ``every`` iterations (``pgas.run`` with snapshots)."""
    b, field = fields(n, mesh)
    bb = float((b * b).sum())
    steps -= steps % every
    if method == "jacobi":
        bf = field(b)
        _, snaps = pgas.run(jacobi, field(np.zeros_like(b)), steps, params=bf,
                            snapshot_every=every,
                            observe=lambda u: residual_squared(u, bf))  # fmt: skip
    else:
        _, snaps = pgas.run(cg, cg_state(b, field), steps, snapshot_every=every,
                            observe=lambda s: s["rr"])  # fmt: skip
    return np.sqrt(np.asarray(snaps) / bb)


def write_fields(path: str, runs: list[dict], tol: float, overwrite: bool = False) -> None:
    """The converged field of each run (one grid) as an xarray Dataset, ``.nc`` or ``.zarr``.

    One variable per method, ``u_jacobi`` and ``u_cg`` (dims ``x``, the first
    array axis, and ``y``; coordinates the grid points in [0, 1]): its final
    field, with the iterations it took (its step count), ``converged``,
    ``check_every``, ``relative_residual`` and ``error_max`` in its attributes;
    the run in the Dataset's. A run until convergence has no time axis: one
    field per method, at its end.
    """
    import xarray as xr

    from pgas.io.attributes import netcdf_safe_attrs
    from pgas.io.dataset import write_dataset

    n, keys = runs[0]["n"], ("iterations", "converged", "check_every", "relative_residual",
                             "error_max")  # fmt: skip
    x = np.linspace(0.0, 1.0, n)
    fields = {f"u_{r['method']}": xr.DataArray(r["field"], dims=("x", "y"),
                                                attrs=netcdf_safe_attrs({k: r[k] for k in keys}))
              for r in runs}  # fmt: skip
    ds = xr.Dataset(fields, coords={"x": x, "y": x}, attrs=netcdf_safe_attrs({
        "title": "pgas example poisson: -lap(u) = f on [0, 1]^2, u = 0 on the walls",
        "n": n, "tol": tol, "backend": runs[0]["backend"], "devices": runs[0]["devices"],
        "methods": " ".join(r["method"] for r in runs)}))  # fmt: skip
    write_dataset(ds, path, overwrite=overwrite)


def plot(path: str, n: int, mesh, runs: list[dict]) -> None:
    """The CG solution and both methods' residual histories."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    b, field = fields(n, mesh)
    out = pgas.run_until(cg, cg_state(b, field), cg_converged(1e-8, float((b * b).sum())), 10**5)
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
    im = left.imshow(out.state["x"].to_numpy().T, origin="lower", extent=(0, 1, 0, 1))  # x across
    left.set_xlabel("x")
    left.set_ylabel("y")
    fig.colorbar(im, ax=left)
    left.set_title(f"CG solution, n = {n}")
    for r in runs:
        if r["method"] not in ("jacobi", "cg"):
            continue  # the histories are of the global-view loops written here
        every = max(1, r["iterations"] // 200)
        h = history(r["method"], n, mesh, r["iterations"], every)
        right.semilogy(every * np.arange(1, len(h) + 1), h, label=r["method"])
    right.set_xlabel("iteration")
    right.set_ylabel("||b - Au|| / ||b||")
    right.set_xscale("log")
    right.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)


def main(argv: list[str] | None = None) -> list[dict]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=65, help="grid points per side (walls included)")
    parser.add_argument("--devices", type=options.positive_int, default=1)
    parser.add_argument("--tol", type=float, default=1e-8)
    parser.add_argument(
        "--methods",
        nargs="+",
        choices=["jacobi", "cg", "multigrid", "mgcg"],
        help="default: jacobi and cg; multigrid (V-cycles) and mgcg (CG preconditioned by a "
        "V-cycle) are pgas.solvers' (--backend auto)",
    )
    parser.add_argument(
        "--backend",
        default="auto",
        choices=["auto", "explicit", "mpi"],
        help="mpi: under mpiexec",
    )
    parser.add_argument("--order", type=int, nargs="+", help="sizes for the error's order (CG)")
    parser.add_argument(
        "--case",
        default="square",
        choices=["square", "cube", "variable"],
        help="cube: the 3-D Laplacian on n^3 points; variable: -div(a grad u) on the square "
        "(both with --methods cg, multigrid, mgcg)",
    )
    options.add_platform(parser)
    options.add_out(parser, "write each method's converged field and iterations as an xarray "
                    "Dataset (.nc or .zarr; one grid: not with several --order sizes)")  # fmt: skip
    options.add_overwrite(parser)
    parser.add_argument("--plot", help="write the solution and residual histories here (PNG)")
    parser.add_argument("--json", action="store_true", help="print one JSON line")
    args = parser.parse_args(argv)
    if args.n < 3:
        parser.error(f"--n {args.n}: the grid needs at least 3 points per side")
    if args.methods is None:
        args.methods = ["jacobi", "cg"] if args.case == "square" else ["multigrid", "mgcg"]
    if args.backend != "auto" and args.plot:
        parser.error(f"--backend {args.backend} draws no pictures: drop --plot, or use "
                     f"--backend auto")  # fmt: skip
    if args.backend != "auto" and {"multigrid", "mgcg"} & set(args.methods):
        parser.error(f"--methods multigrid and mgcg run on --backend auto (pgas.solvers), not "
                     f"{args.backend}: drop them, or use --backend auto")  # fmt: skip
    if args.case != "square" and (args.backend != "auto" or "jacobi" in args.methods
                                  or args.out or args.plot or args.order):  # fmt: skip
        parser.error(f"--case {args.case} runs --methods cg, multigrid and mgcg on --backend "
                     f"auto, without --out, --plot and --order")  # fmt: skip
    sizes = args.order or [args.n]
    if args.out:
        if len(sizes) > 1:
            parser.error(f"--out writes the fields of one grid, --order gives {len(sizes)} "
                         f"sizes: give one size (--n N), or drop --out")  # fmt: skip
        options.check_out(parser, args.out, overwrite=args.overwrite)
    import jax

    if args.backend == "mpi":  # NumPy blocks under mpiexec: no JAX devices to pick
        try:
            pgas.use_cpu_devices(args.devices)
        except pgas.DeviceCountError:  # JAX already runs (a test, a notebook): use a subset
            pass
    else:
        from pgas.app import platform

        options.or_exit(parser, lambda: platform.select(args.platform, args.devices))
    jax.config.update("jax_enable_x64", True)
    if args.case != "square":
        runs = [solve_case(args.case, m, n, args.devices, args.tol)
                for n in sizes for m in args.methods]  # fmt: skip
    elif args.backend == "auto":
        mesh = pgas.make_mesh(("y", "x"), devices=args.devices)
        runs = [solve(m, n, mesh, args.tol) for n in sizes for m in args.methods]
    else:  # on mpi, rank 0 reports
        runs = [solve_on(args.backend, n, args.devices, args.tol) if m == "jacobi"
                else solve_cg_on(args.backend, n, args.devices, args.tol)
                for n in sizes for m in args.methods]  # fmt: skip
        if None in runs:
            return []
    for r in runs:
        if not args.json:
            print(f"{r['method']:>6} n = {r['n']:>4} on {r['backend']}: {r['iterations']:>7} "
                  f"iterations "
                  f"(converged {r['converged']}), {r['seconds']:.3f} s, "
                  f"residual {r['relative_residual']:.2e}, error {r['error_max']:.3e}")  # fmt: skip
    if args.order and len(sizes) > 1 and not args.json:
        errs = [r["error_max"] for r in runs if r["method"] == args.methods[-1]]
        orders = [np.log2(a / b) / np.log2((m - 1) / (k - 1))
                  for a, b, k, m in zip(errs, errs[1:], sizes, sizes[1:])]  # fmt: skip
        print("observed order: " + ", ".join(f"{o:.2f}" for o in orders))
    if args.plot:
        plot(args.plot, sizes[0], mesh, [r for r in runs if r["n"] == sizes[0]])
    if args.out:
        write_fields(args.out, runs, args.tol, overwrite=args.overwrite)
    if args.json:
        print(json.dumps([{k: v for k, v in r.items() if k != "field"} for r in runs]))
    return runs


if __name__ == "__main__":
    main()
