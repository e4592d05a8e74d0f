"""2-D lid-driven cavity, vorticity-streamfunction, time-stepped to a steady state on N devices.

    python examples/cavity/cavity.py --re 100 --n 129
    python examples/cavity/cavity.py --re 1000 --n 129 --out out/cavity.nc --plot out/cavity.png
    python examples/cavity/cavity.py --n 33 --devices 4 --json
    python examples/cavity/cavity.py --n 65 --out out/c.zarr --checkpoint-every 500  # --restart
    mpiexec -n 2 python examples/cavity/cavity.py --n 33 --distributed --out out/cavity.zarr

Physics: incompressible flow in the unit square, no-slip walls, the top wall
(the lid, y = 1) sliding at ``--lid`` (1) in +x; Reynolds number ``--re`` =
lid * 1 / nu. Ghia, Ghia & Shin's formulation (J. Comput. Phys. 48, 387-411,
1982): the streamfunction psi (u = dpsi/dy, v = -dpsi/dx) and the vorticity
omega = dv/dx - du/dy, with -lap(psi) = omega and
d omega/dt + u d omega/dx + v d omega/dy = nu lap(omega).

Numerics: ``--n`` x ``--n`` grid points (walls included, n = 2**L + 1 for
multigrid), h = 1/(n - 1), x the first array axis. Each step: (1) the wall
vorticity from psi by Thom's formula, (2) omega forward in time, explicit Euler
with central differences (stable for dt <= min(h**2 Re / (4 lid), 2 / (Re lid)):
diffusion and the cell Peclet condition; default dt: 0.8 of that), (3) -lap(psi)
= omega by ``pgas.solvers.multigrid`` warm-started from the previous psi. All in
the global view, one compiled ``pgas.run_until`` loop until the change per unit
time max|omega_new - omega| / dt falls below ``--tol``. ``--out`` (.nc or .zarr)
writes u, v, psi and omega with coordinates x, y in [0, 1]; ``--plot`` the
streamlines and the centreline profiles against Ghia's tables; ``--json`` one
JSON line; ``--checkpoint-every K`` a checkpoint every K steps, ``--restart``
continues from it (bitwise the same run).
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import json
import math
import sys
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

import pgas
from pgas.app import options
from pgas.errors import PgasError

# ---- Physics ------------------------------------------------------------------------------
# The unit square, walls at x = 0, x = 1, y = 0 (at rest) and y = 1 (the lid, moving at `lid`
# in +x). psi = 0 on every wall (no flow through them). nu = lid / Re.
#
# Ghia, U., Ghia, K. N. & Shin, C. T. (1982), "High-Re solutions for incompressible flow using
# the Navier-Stokes equations and a multigrid method", J. Comput. Phys. 48, 387-411: their
# 129 x 129 results, typed in from the paper. Table I: u along the vertical line through the
# cavity's centre (x = 0.5); Table II: v along the horizontal line through it (y = 0.5).
GHIA_Y = (1.0000, 0.9766, 0.9688, 0.9609, 0.9531, 0.8516, 0.7344, 0.6172, 0.5000,
          0.4531, 0.2813, 0.1719, 0.1016, 0.0703, 0.0625, 0.0547, 0.0000)  # fmt: skip
GHIA_U = {
    100: (1.00000, 0.84123, 0.78871, 0.73722, 0.68717, 0.23151, 0.00332, -0.13641, -0.20581,
          -0.21090, -0.15662, -0.10150, -0.06434, -0.04775, -0.04192, -0.03717, 0.00000),
    1000: (1.00000, 0.65928, 0.57492, 0.51117, 0.46604, 0.33304, 0.18719, 0.05702, -0.06080,
           -0.10648, -0.27805, -0.38289, -0.29730, -0.22220, -0.20196, -0.18109, 0.00000),
}  # fmt: skip
GHIA_X = (1.0000, 0.9688, 0.9609, 0.9531, 0.9453, 0.9063, 0.8594, 0.8047, 0.5000,
          0.2344, 0.2266, 0.1563, 0.0938, 0.0781, 0.0703, 0.0625, 0.0000)  # fmt: skip
GHIA_V = {
    100: (0.00000, -0.05906, -0.07391, -0.08864, -0.10313, -0.16914, -0.22445, -0.24533,
          0.05454, 0.17527, 0.17507, 0.16077, 0.12317, 0.10890, 0.10091, 0.09233, 0.00000),
    1000: (0.00000, -0.21388, -0.27669, -0.33714, -0.39188, -0.51550, -0.42665, -0.31966,
           0.02526, 0.32235, 0.33075, 0.37095, 0.32627, 0.30353, 0.29012, 0.28124, 0.00000),
}  # fmt: skip


class CavityError(PgasError):
    """A cavity run that cannot start (a bad parameter) or that failed (a solve that did not
    converge, a flow gone non-finite); the message names the parameter, its value and the fix."""


@dataclasses.dataclass(frozen=True)
class Cavity:
    """One cavity problem and its numerics (checked when made).

    Attributes:
        n: grid points per side, walls included: ``2**L + 1``, at least 5.
        re: the Reynolds number lid * 1 / nu (> 0).
        lid: the lid's speed (nonzero; negative moves it in -x).
        dt: the time step; ``None``: 0.8 of :func:`stability_limit`.
        solver_tol: the Poisson solves' relative residual.
        max_cycles: the most V-cycles of one solve.

    >>> c = Cavity(33, 100.0)
    >>> c.h, round(c.dt / stability_limit(33, 100.0, 1.0), 12)
    (0.03125, 0.8)
    """

    n: int
    re: float
    lid: float = 1.0
    dt: float | None = None
    solver_tol: float = 1e-6
    max_cycles: int = 20

    def __post_init__(self):
        n, re, lid = self.n, self.re, self.lid
        if not (isinstance(re, (int, float)) and math.isfinite(re) and re > 0):
            raise CavityError(f"--re {re}: the Reynolds number must be a number > 0, e.g. "
                              f"--re 100")  # fmt: skip
        if not (isinstance(lid, (int, float)) and math.isfinite(lid) and lid != 0):
            raise CavityError(f"--lid {lid}: give the lid speed, a nonzero number (1 by "
                              f"default)")  # fmt: skip
        if not isinstance(n, int) or n < 5 or (n - 1) & (n - 2):
            raise CavityError(
                f"--n {n}: multigrid halves the grid level by level, so give n = 2**L + 1 "
                f"points per side with L >= 2 (5, 9, 17, 33, 65, 129, 257, ...), e.g. --n "
                f"{_next_size(n)}"
            )
        if not 0 < self.solver_tol < 1:
            raise CavityError(f"--solver-tol {self.solver_tol}: give the Poisson solves' "
                              f"relative residual, a number in (0, 1), e.g. 1e-6")  # fmt: skip
        if not isinstance(self.max_cycles, int) or self.max_cycles < 1:
            raise CavityError(f"--max-cycles {self.max_cycles}: give a whole number >= 1")
        limit = stability_limit(n, re, lid)
        if self.dt is None:
            object.__setattr__(self, "dt", 0.8 * limit)
        elif not (math.isfinite(self.dt) and 0 < self.dt <= limit):
            raise CavityError(
                f"--dt {self.dt}: explicit Euler with central differences is stable here for "
                f"0 < dt <= {limit:.6g} = min(h**2 Re / (4 |lid|), 2 / (Re |lid|)) (diffusion, "
                f"cell Peclet; h = {1 / (n - 1):.6g}); give --dt {0.8 * limit:.4g} or leave "
                f"--dt out (0.8 of the limit)"
            )

    @property
    def h(self) -> float:
        return 1.0 / (self.n - 1)

    @property
    def nu(self) -> float:
        return abs(self.lid) / self.re


def _next_size(n: int) -> int:
    return 2 ** max(2, math.ceil(math.log2(max(n - 1, 1)))) + 1


def stability_limit(n: int, re: float, lid: float = 1.0) -> float:
    """The largest stable time step of the scheme on ``n`` points per side.

    Forward Euler with central differences for omega_t + u . grad omega = nu lap omega in 2-D
    is stable for 4 nu dt / h**2 <= 1 and dt (u**2 + v**2) <= 2 nu (Hindmarsh, Gresho &
    Griffiths 1984); the cavity's fastest fluid moves at the lid's speed.

    >>> stability_limit(129, 100.0)  # diffusion bounds it: h**2 Re / 4
    0.00152587890625
    >>> stability_limit(129, 1000.0)  # convection bounds it: 2 / Re
    0.002
    """
    h, nu = 1.0 / (n - 1), abs(lid) / re
    return min(h * h / (4 * nu), 2 * nu / (lid * lid))


# ---- Numerics -----------------------------------------------------------------------------
# The state: psi and omega on the n x n points (boundary pgas.Keep(): the wall cells hold the
# boundary values, psi = 0 and the wall vorticity), and three scalars the step computes:
# "change" = max|omega_new - omega| / dt over the interior (already reduced: the test reads
# it without a collective of its own), "solved" (whether the step's Poisson solve converged)
# and "cycles" (the V-cycles of all solves so far). The arithmetic, term by term, is what
# tests/examples/test_cavity.py repeats in NumPy.


def advance_vorticity(c: Cavity, psi, w, lid):
    """Steps (1) and (2) of :func:`make_step`: the wall vorticity, then omega forward;
    ``(w, change)``, ``change`` = max|omega_new - omega| / dt over the interior."""
    h, nu, dt = c.h, c.nu, c.dt
    wall, diff, conv = -2.0 / (h * h), nu / (h * h), 0.5 / h
    # (1) Thom's formula: omega on a wall from psi one cell inside (psi = 0 on the walls)
    w[0, 1:-1] = wall * psi[1, 1:-1]
    w[-1, 1:-1] = wall * psi[-2, 1:-1]
    w[1:-1, 0] = wall * psi[1:-1, 1]
    w[1:-1, -1] = wall * psi[1:-1, -2] - 2.0 * lid / h
    # (2) omega forward: explicit Euler, central differences
    c0 = w[1:-1, 1:-1]
    u = (psi[1:-1, 2:] - psi[1:-1, :-2]) * conv
    v = (psi[:-2, 1:-1] - psi[2:, 1:-1]) * conv
    lap = w[2:, 1:-1] + w[:-2, 1:-1] + w[1:-1, 2:] + w[1:-1, :-2] - 4 * c0
    adv = u * (w[2:, 1:-1] - w[:-2, 1:-1]) + v * (w[1:-1, 2:] - w[1:-1, :-2])
    rate = diff * lap - conv * adv
    # now: rate is a lazy view of w, which the next line writes; no derivative (a test,
    # and JAX has no derivative rule for the max all-reduce, pmax)
    change = pgas.max(pgas.apply(jax.lax.stop_gradient, abs(rate)))
    w[1:-1, 1:-1] = c0 + dt * rate
    return w, change


@functools.lru_cache(maxsize=16)
def make_step(c: Cavity):
    """The time step of ``c``, ``step(state, lid)``: wall vorticity, omega forward, then the
    Poisson solve. The lid speed arrives as ``params`` (a traced number: ``jax.grad`` with
    respect to it, at fixed nu and dt, and no new compilation for another value).

    One function per problem (cached): ``pgas.run_until`` knows a step by its identity, so
    runs of the same problem (a restart, the next chunk) reuse one compiled loop."""
    op = pgas.solvers.Poisson(h=c.h)
    tol, cycles = c.solver_tol, c.max_cycles

    def step(s, lid):
        psi, w = s["psi"], s["omega"]
        w, change = advance_vorticity(c, psi, w, lid)
        # (3) -lap(psi) = omega, warm-started from the previous psi (whose walls stay 0)
        sol = pgas.solvers.multigrid(op, w, psi, tol=tol, max_cycles=cycles)
        return {"psi": sol.x, "omega": w, "change": change,
                "solved": sol.converged, "cycles": s["cycles"] + sol.iterations}  # fmt: skip

    return step


def steady(tol: float):
    """The loop's test: steady (the change below ``tol``), or a solve failed (stop, report)."""
    return lambda s, lid: (s["change"] < tol) | ~s["solved"]


def kinetic_energy(psi) -> object:
    """0.5 h**2 sum(u**2 + v**2) over the interior points (global view: one reduction)."""
    n = psi.shape[0]
    conv = 0.5 * (n - 1)
    u = (psi[1:-1, 2:] - psi[1:-1, :-2]) * conv
    v = (psi[:-2, 1:-1] - psi[2:, 1:-1]) * conv
    return pgas.sum(u * u + v * v) * (0.5 / (n - 1) ** 2)


def velocity(psi: np.ndarray, h: float, lid: float) -> tuple[np.ndarray, np.ndarray]:
    """u = dpsi/dy, v = -dpsi/dx (central differences inside; the walls' own velocities).

    >>> u, v = velocity(np.zeros((5, 5)), 0.25, 1.0)
    >>> u[:, -1].tolist(), float(abs(v).max())
    ([0.0, 1.0, 1.0, 1.0, 0.0], 0.0)
    """
    u, v = np.zeros_like(psi), np.zeros_like(psi)
    u[1:-1, 1:-1] = (psi[1:-1, 2:] - psi[1:-1, :-2]) / (2 * h)
    v[1:-1, 1:-1] = (psi[:-2, 1:-1] - psi[2:, 1:-1]) / (2 * h)
    u[1:-1, -1] = lid
    return u, v


def centrelines(u: np.ndarray, v: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """u along x = 0.5 (against y) and v along y = 0.5 (against x); n odd: grid lines."""
    m = (u.shape[0] - 1) // 2
    return u[m, :], v[:, m]


def ghia_deviation(u: np.ndarray, v: np.ndarray, re: float, lid: float = 1.0) -> dict | None:
    """Max |ours - Ghia| / |lid| over Table I (u) and II (v) for Re 100 or 1000, else None.

    Ours is read at Ghia's points by linear interpolation along the centreline (on 129 x 129
    they are grid points).
    """
    key = int(re) if float(re).is_integer() else None
    if key not in GHIA_U:
        return None
    uc, vc = centrelines(u, v)
    s = np.linspace(0.0, 1.0, u.shape[0])
    du = np.interp(GHIA_Y, s, uc) / lid - np.asarray(GHIA_U[key])
    dv = np.interp(GHIA_X, s, vc) / lid - np.asarray(GHIA_V[key])
    return {"ghia_u_max_deviation": float(abs(du).max()),
            "ghia_v_max_deviation": float(abs(dv).max())}  # fmt: skip


# ---- Initial conditions -------------------------------------------------------------------
# The fluid at rest, the lid started impulsively: psi = omega = 0 (the first step sets the
# wall vorticity).


def initial_state(c: Cavity, mesh) -> dict:
    """psi = omega = 0 on ``mesh`` (mesh axes ("x", "y")), and the scalars of the state."""

    def field():
        return pgas.zeros((c.n, c.n), mesh, dtype="float64", spec=("x", "y"),
                          boundary=pgas.Keep())  # fmt: skip

    # typed as the loop returns them (a weak-typed inf would compile a second loop for the
    # second checkpoint chunk)
    return {"psi": field(), "omega": field(), "change": jnp.asarray(np.inf, jnp.float64),
            "solved": jnp.asarray(True), "cycles": jnp.asarray(0, jnp.int32)}  # fmt: skip


def check_mesh(c: Cavity, mesh) -> None:
    """A grid too small for the mesh: every device needs three points of each axis (with
    blocks of two, the step fails to compile with a HaloError on this pgas version)."""
    for name, parts in mesh.shape.items():
        if c.n < 3 * parts:
            raise CavityError(
                f"--n {c.n} over {parts} devices along mesh axis {name!r} leaves a device "
                f"fewer than 3 points per side; give --n >= {_next_size(3 * parts)} or fewer "
                f"--devices"
            )


# ---- Time loop ----------------------------------------------------------------------------
def meta(c: Cavity) -> dict:
    """What identifies the problem in a checkpoint: a restart must run the same scheme."""
    return {"example": "cavity", "n": c.n, "re": c.re, "lid": c.lid, "dt": c.dt,
            "solver_tol": c.solver_tol, "max_cycles": c.max_cycles,
            "scheme": "psi-omega, Thom walls, Euler + central, multigrid"}  # fmt: skip


def simulate(c: Cavity, mesh, tol: float = 1e-3, max_steps: int = 10**6, *,
             checkpoint: str | None = None, checkpoint_every: int | None = None,
             restart: bool = False, verbose: bool = False) -> dict:  # fmt: skip
    """Step ``c`` on ``mesh`` until the change per unit time is below ``tol`` (at most
    ``max_steps`` steps), one ``pgas.run_until`` per ``checkpoint_every`` steps.

    Returns the final state (``"state"``), ``steps`` (from step 0, a restart's included),
    ``converged``, ``change``, ``cycles`` and ``seconds`` (of this process's loop, compilation
    included). Raises :class:`CavityError` where a Poisson solve did not converge or the flow
    went non-finite: a failed run returns nothing.
    """
    import warnings

    from pgas.io import checkpoint as ckpt

    check_mesh(c, mesh)
    state, start = initial_state(c, mesh), 0
    if restart and checkpoint and ckpt.latest(checkpoint) is not None:
        fields, start = ckpt.load(checkpoint, {k: state[k] for k in ("psi", "omega")},
                                  meta=meta(c))  # fmt: skip
        state = {**state, **fields}
        if verbose:
            print(f"restart: from step {start} ({checkpoint})", file=sys.stderr)
    step, done, lid = make_step(c), steady(tol), jnp.asarray(float(c.lid))
    steps, converged, t0, out = start, False, time.perf_counter(), None
    while steps < max_steps and not converged:
        chunk = min(checkpoint_every or max_steps, max_steps - steps)
        with warnings.catch_warnings():  # a chunk that ends unsteady is not news
            warnings.simplefilter("ignore", pgas.NonConvergenceWarning)
            out = pgas.run_until(step, state, done, chunk, check_every=1, params=lid)
        state, steps = out.state, steps + int(out.steps_taken)
        if not bool(out.finite):
            raise CavityError(
                f"the flow went non-finite by step {steps} (Re {c.re}, n {c.n}, dt {c.dt:.6g}): "
                f"give a smaller --dt (the limit is {stability_limit(c.n, c.re, c.lid):.6g})"
            )
        if not bool(state["solved"]):
            raise CavityError(
                f"the Poisson solve of step {steps} did not converge within --max-cycles "
                f"{c.max_cycles} V-cycles to --solver-tol {c.solver_tol:g}; the run stops here "
                f"and writes nothing: raise --max-cycles or loosen --solver-tol"
            )
        converged = bool(out.converged)
        if checkpoint_every and checkpoint:
            ckpt.save(checkpoint, {k: state[k] for k in ("psi", "omega")}, step=steps,
                      meta=meta(c))  # fmt: skip
    jax.block_until_ready(state)
    return {"state": state, "steps": steps, "converged": converged,
            "change": float(state["change"]), "cycles": int(state["cycles"]),
            "seconds": time.perf_counter() - t0}  # fmt: skip


# ---- Derivative ---------------------------------------------------------------------------
def energy_after(c: Cavity, mesh, steps: int):
    """``f(lid)``: the kinetic energy after ``steps`` steps from rest with lid speed ``lid``
    (the viscosity and time step of ``c``).

    Differentiable: ``jax.grad(f)`` runs back through ``pgas.run`` (its reverse mode of a
    nonlinear step) and through each Poisson solve by its implicit derivative (one more solve).

    >>> import jax
    >>> c = Cavity(9, 10.0, solver_tol=1e-10, max_cycles=40)
    >>> f = energy_after(c, pgas.make_mesh(("x", "y"), devices=1), 2)
    >>> e, g = jax.value_and_grad(f)(1.0)
    >>> bool(abs(g - (f(1.001) - f(0.999)) / 0.002) < 1e-6 * abs(g))
    True
    """
    step = make_step(c)

    def f(lid):
        out = pgas.run(step, initial_state(c, mesh), steps, params=lid)
        return kinetic_energy(out["psi"])

    return f


# ---- Taylor-Green vortex ------------------------------------------------------------------
# The same scheme on the periodic unit square (no walls): psi = sin(kx) sin(ky) / k, k = 2 pi,
# omega = 2 k**2 psi, a steady solution of the Euler equations that viscosity damps: the
# kinetic energy decays as exp(-4 nu k**2 t). The advection term vanishes (omega is a function
# of psi, and stays one, up to round-off), so the error is the diffusion's: second order in h
# with dt proportional to h**2.


def taylor_green(n: int, mesh, re: float = 10.0, t_end: float = 0.05,
                 solver_tol: float = 1e-10) -> dict:  # fmt: skip
    """The Taylor-Green vortex on ``n`` x ``n`` periodic points (h = 1/n) to ``t_end``:
    the energy ratio E(t_end) / E(0) against exp(-4 nu k**2 t_end)."""
    if n < 8 or n & (n - 1):
        raise CavityError(f"--taylor-green {n}: give periodic sizes n = 2**L >= 8, e.g. 32 64")
    h, nu, k = 1.0 / n, 1.0 / re, 2 * np.pi
    dt = 0.5 * h * h / (4 * nu)  # half the diffusion limit: the time error falls as h**2 too
    if dt > 0.8 * 2 * nu:  # the fastest fluid moves at speed 1
        raise CavityError(
            f"--taylor-green {n} at Re {re}: dt = h**2 Re / 8 = {dt:.3g} is above "
            f"0.8 of the convective limit 2 / Re; give a larger n or a smaller Re"
        )
    steps = math.ceil(t_end / dt)
    dt = t_end / steps
    diff, conv = nu / (h * h), 0.5 / h
    op = pgas.solvers.Poisson(h=h)
    sh = pgas.shift

    def step(s):
        psi, w = s["psi"], s["omega"]
        u = (sh(psi, -1, 1) - sh(psi, 1, 1)) * conv
        v = (sh(psi, 1, 0) - sh(psi, -1, 0)) * conv
        lap = sh(w, 1, 0) + sh(w, -1, 0) + sh(w, 1, 1) + sh(w, -1, 1) - 4 * w
        adv = u * (sh(w, -1, 0) - sh(w, 1, 0)) + v * (sh(w, -1, 1) - sh(w, 1, 1))
        w[...] = w + dt * (diff * lap - conv * adv)
        sol = pgas.solvers.multigrid(op, w, psi, tol=solver_tol, max_cycles=50)
        return {"psi": sol.x, "omega": w}

    x = np.arange(n) * h
    psi0 = np.sin(k * x)[:, None] * np.sin(k * x)[None, :] / k

    def field(a):
        return pgas.from_numpy(a, mesh, spec=("x", "y"), boundary=pgas.Periodic())

    state = {"psi": field(psi0), "omega": field(2 * k * k * psi0)}
    e0 = float(periodic_energy(state["psi"]))
    out = pgas.run(step, state, steps)
    ratio = float(periodic_energy(out["psi"])) / e0
    exact = math.exp(-4 * nu * k * k * t_end)
    return {"n": n, "re": re, "t_end": t_end, "steps": steps, "dt": dt, "energy_ratio": ratio,
            "exact": exact, "error": abs(ratio - exact)}  # fmt: skip


def periodic_energy(psi):
    """0.5 h**2 sum(u**2 + v**2) over the periodic grid (central differences of psi)."""
    n = psi.shape[0]
    conv = 0.5 * n
    u = (pgas.shift(psi, -1, 1) - pgas.shift(psi, 1, 1)) * conv
    v = (pgas.shift(psi, 1, 0) - pgas.shift(psi, -1, 0)) * conv
    return pgas.sum(u * u + v * v) * (0.5 / (n * n))


# ---- Output -------------------------------------------------------------------------------
def dataset(c: Cavity, psi: np.ndarray, omega: np.ndarray, attrs: dict):
    """The final state as an xarray Dataset: u, v, psi, omega on dims (x, y) in [0, 1]."""
    import xarray as xr

    from pgas.io.attributes import netcdf_safe_attrs

    u, v = velocity(psi, c.h, c.lid)
    s = np.linspace(0.0, 1.0, c.n)
    dims = ("x", "y")
    return xr.Dataset(
        {"u": (dims, u, {"long_name": "x velocity"}), "v": (dims, v, {"long_name": "y velocity"}),
         "psi": (dims, psi, {"long_name": "streamfunction"}),
         "omega": (dims, omega, {"long_name": "vorticity"})},
        coords={"x": s, "y": s},
        attrs=netcdf_safe_attrs({"title": "pgas example cavity: lid-driven cavity, "
                                 "vorticity-streamfunction", **attrs}),
    )  # fmt: skip


def plot(path: str, c: Cavity, psi: np.ndarray) -> None:
    """Streamlines, and the centreline profiles against Ghia's points (Re 100, 1000)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    u, v = velocity(psi, c.h, c.lid)
    s = np.linspace(0.0, 1.0, c.n)
    uc, vc = centrelines(u, v)
    key = int(c.re) if float(c.re).is_integer() else None
    fig, (left, mid, right) = plt.subplots(1, 3, figsize=(15, 5))
    left.streamplot(s, s, u.T, v.T, density=1.6, linewidth=0.6, color="k")  # arrays [y, x]
    left.set_aspect("equal")
    left.set_xlim(0, 1)
    left.set_ylim(0, 1)
    left.set_title(f"streamlines, Re {c.re:g}, {c.n} x {c.n}")
    mid.plot(uc / c.lid, s, "b-", label="pgas")
    right.plot(s, vc / c.lid, "r-", label="pgas")
    if key in GHIA_U:
        mid.plot(GHIA_U[key], GHIA_Y, "ko", mfc="none", label="Ghia et al. 1982, Table I")
        right.plot(GHIA_X, GHIA_V[key], "ks", mfc="none", label="Ghia et al. 1982, Table II")
    mid.set(xlabel="u / lid", ylabel="y", title="u along x = 0.5")
    right.set(xlabel="x", ylabel="v / lid", title="v along y = 0.5")
    for ax in (mid, right):
        ax.legend(fontsize=8)
        ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def main(argv: list[str] | None = None) -> dict | None:
    ap = argparse.ArgumentParser(
        description=__doc__.splitlines()[0], epilog="\n".join(__doc__.splitlines()[1:]),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )  # fmt: skip
    add = ap.add_argument
    add("--re", type=float, default=100.0, help="Reynolds number lid * 1 / nu (default 100)")
    add("--n", type=options.positive_int, default=129,
        help="grid points per side, walls included: 2**L + 1 (default 129)")  # fmt: skip
    add("--lid", type=float, default=1.0, help="lid speed (default 1)")
    add("--dt", type=float, help="time step (default 0.8 of the stability limit)")
    add("--tol", type=float, default=1e-3,
        help="steady when max|omega_new - omega| / dt < TOL (default 1e-3)")  # fmt: skip
    add("--max-steps", type=options.positive_int, default=10**6,
        help="the most time steps (default 1_000_000)")  # fmt: skip
    add("--solver-tol", type=float, default=1e-6,
        help="relative residual of each step's Poisson solve (default 1e-6)")  # fmt: skip
    add("--max-cycles", type=options.positive_int, default=20,
        help="the most V-cycles of one Poisson solve (default 20)")  # fmt: skip
    add("--devices", type=options.positive_int,
        help="JAX devices (per process with --distributed); default 1")  # fmt: skip
    options.add_platform(ap)
    add("--distributed", action="store_true",
        help="multi-process JAX run under mpiexec/srun (pgas.distributed.initialize)")  # fmt: skip
    add("--verbose", action="store_true", help="say what the run does (stderr)")
    options.add_out(ap, "write the final u, v, psi, omega (dims x, y) as an xarray Dataset "
                    "(.nc or .zarr)")  # fmt: skip
    options.add_overwrite(ap)
    add("--plot", metavar="FILE", help="streamlines and centreline profiles vs Ghia (.png)")
    add("--json", action="store_true", help="print one JSON line (process 0)")
    add(
        "--checkpoint",
        metavar="DIR",
        help="checkpoint directory (default: next to --out, FILE.ckpt; else out/cavity.ckpt)",
    )
    add("--checkpoint-every", type=options.positive_int, metavar="K",
        help="write a checkpoint every K steps and at the end")  # fmt: skip
    add(
        "--restart",
        action="store_true",
        help="continue from the checkpoint in --checkpoint (from step 0 if there is none)",
    )
    add("--taylor-green", type=options.positive_int, nargs="+", metavar="N",
        help="instead: the periodic Taylor-Green vortex on N x N points (N = 2**L >= 8) at "
        "Re 10 to t = 0.05, its energy decay against exp(-4 nu k**2 t), the observed order "
        "between the sizes, e.g. --taylor-green 32 64")  # fmt: skip
    args = ap.parse_args(argv)
    for size in args.taylor_green or ():
        if size < 8 or size & (size - 1):
            ap.error(f"--taylor-green {size}: give periodic sizes n = 2**L >= 8, e.g. 32 64")
    if not 0 < args.tol:
        ap.error(f"--tol {args.tol}: give the steady-state threshold, a number > 0 (e.g. 1e-3)")
    c = options.or_exit(ap, lambda: Cavity(args.n, args.re, args.lid, args.dt,
                                           args.solver_tol, args.max_cycles))  # fmt: skip
    if args.out:
        options.check_out(ap, args.out, distributed=args.distributed,
                          overwrite=None if args.restart else args.overwrite)  # fmt: skip
    if args.plot and Path(args.plot).suffix.lower() != ".png":
        ap.error(f"--plot {args.plot!r}: give a file ending in .png")
    checkpoint = args.checkpoint or (str(Path(args.out).with_suffix(".ckpt")) if args.out
                                     else "out/cavity.ckpt")  # fmt: skip
    if args.checkpoint_every and not args.restart and Path(checkpoint).exists() \
            and not args.overwrite:  # fmt: skip
        ap.error(f"--checkpoint {checkpoint} exists; pass --restart to continue it, "
                 f"--overwrite to start over, or another --checkpoint DIR")  # fmt: skip
    from pgas.app import platform

    opts = options.RunOptions(platform=args.platform, devices=args.devices or
                              (None if args.distributed else 1), distributed=args.distributed,
                              verbose=args.verbose, dtype="float64")  # fmt: skip
    session = options.or_exit(ap, lambda: platform.start(opts, __file__, dtype="float64",
                                                         shape=(c.n, c.n)))  # fmt: skip
    if args.checkpoint_every and args.overwrite and session.rank == 0:
        import shutil

        shutil.rmtree(checkpoint, ignore_errors=True)
    mesh = pgas.make_mesh(("x", "y"), devices=None if session.multiprocess else opts.devices)
    if args.taylor_green:
        return _taylor_green_report(args, mesh, session.rank)
    r = options.or_exit(
        ap,
        lambda: simulate(
            c,
            mesh,
            args.tol,
            args.max_steps,
            checkpoint=checkpoint,
            checkpoint_every=args.checkpoint_every,
            restart=args.restart,
            verbose=args.verbose,
        ),
    )
    psi, omega = r["state"]["psi"].to_numpy(), r["state"]["omega"].to_numpy()  # collective
    if session.rank != 0:
        return None
    u, v = velocity(psi, c.h, c.lid)
    result = {"example": "cavity", "n": c.n, "re": c.re, "lid": c.lid, "dt": c.dt,
              "tol": args.tol, "solver_tol": c.solver_tol, "steps": r["steps"],
              "time": r["steps"] * c.dt, "converged": r["converged"], "change": r["change"],
              "cycles": r["cycles"], "seconds": r["seconds"], "devices": mesh.size,
              "processes": session.processes, "mesh": dict(mesh.shape),
              "platform": session.platform, "device_kind": session.device_kind,
              **(ghia_deviation(u, v, c.re, c.lid) or {})}  # fmt: skip
    if args.out:
        from pgas.io.dataset import write_dataset

        write_dataset(dataset(c, psi, omega, result), args.out,
                      overwrite=args.overwrite or args.restart)  # fmt: skip
    if args.plot:
        plot(args.plot, c, psi)
    if not args.json:
        state = "steady" if r["converged"] else "NOT steady (--max-steps reached)"
        print(f"cavity Re {c.re:g}, {c.n} x {c.n}, dt {c.dt:.4g}: {state} after {r['steps']} "
              f"steps (t = {result['time']:.4g}), change {r['change']:.3g}, {r['cycles']} "
              f"V-cycles, {r['seconds']:.1f} s on {mesh.size} device(s)")  # fmt: skip
        if "ghia_u_max_deviation" in result:
            print(
                f"  vs Ghia et al. 1982: max |u - u_Ghia| {result['ghia_u_max_deviation']:.4f}"
                f", max |v - v_Ghia| {result['ghia_v_max_deviation']:.4f} (of the lid speed)"
            )
    else:
        print(json.dumps(result), flush=True)
    return result


def _taylor_green_report(args, mesh, rank: int) -> dict | None:
    runs = [taylor_green(size, mesh) for size in args.taylor_green]
    orders = [math.log2(a["error"] / b["error"]) / math.log2(b["n"] / a["n"])
              for a, b in zip(runs, runs[1:])]  # fmt: skip
    if rank != 0:
        return None
    result = {"example": "cavity-taylor-green", "runs": runs, "observed_orders": orders}
    if args.json:
        print(json.dumps(result), flush=True)
        return result
    for r in runs:
        print(f"Taylor-Green {r['n']} x {r['n']}, Re {r['re']:g}, {r['steps']} steps to t = "
              f"{r['t_end']:g}: E/E0 = {r['energy_ratio']:.6f}, exp(-4 nu k^2 t) = "
              f"{r['exact']:.6f}, error {r['error']:.3e}")  # fmt: skip
    if orders:
        print("observed order: " + ", ".join(f"{o:.2f}" for o in orders))
    return result


if __name__ == "__main__":
    from pgas.runtime.failure import abort_on_error

    with abort_on_error():  # under mpiexec: one failed process ends every process
        main()
