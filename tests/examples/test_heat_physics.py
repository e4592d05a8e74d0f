"""Physics of examples/heat1d/heat1d.py: the discrete scheme's exact behaviour, on pgas backends.

In-process (conftest: 8 CPU devices, x64): the example's own ``problem``,
``heat`` step and ``kernel``, run with :func:`pgas.run` (automatic path) and
:func:`pgas.explicit.run` on meshes that split the rod unevenly.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from helpers import load_example

import pgas
from pgas.app.problem import checksum
from pgas.app.state import build as _build
from pgas.references import explicit

_PATH = Path(__file__).resolve().parents[2] / "examples" / "heat1d" / "heat1d.py"


H = load_example("heat1d")


def history(prob, backend: str, devices: int, steps: int) -> np.ndarray:
    """Field after every step 0..steps, shape (steps + 1, n)."""
    u = _build(prob, pgas.make_mesh(("x",), devices=devices))
    first = u.to_numpy()
    if backend == "auto":
        # k = 1: a snapshot after every step leaves no room for a group (auto's k, 5 to 16 on
        # these blocks, would be compiled and never run; groups and single steps of auto's k
        # against NumPy: test_heat1d.py's test_uneven_sizes_bitwise)
        u, snaps = pgas.run(H.heat, u, steps, snapshot_every=1, steps_per_exchange=1)
        return np.concatenate([first[None], snaps.to_numpy()])
    out = [first]
    for _ in range(steps):
        u = explicit.run(H.kernel, u, 1, prob.halo, prob.region)
        out.append(u.to_numpy())
    return np.stack(out)


def final(prob, backend: str, devices: int, steps: int) -> np.ndarray:
    """Field after ``steps`` steps; the explicit backend in one call (one program), not one
    call per step as :func:`history` (whose automatic run is one program already)."""
    if backend == "auto":
        return history(prob, backend, devices, steps)[-1]
    u = _build(prob, pgas.make_mesh(("x",), devices=devices))
    return explicit.run(H.kernel, u, steps, prob.halo, prob.region).to_numpy()


def numpy_heat(u0: np.ndarray, steps: int) -> np.ndarray:
    u = u0.copy()
    for _ in range(steps):
        u[1:-1] = 0.5 * u[1:-1] + 0.25 * (u[:-2] + u[2:])
    return u


@pytest.mark.parametrize(
    ("backend", "devices", "n", "k"),
    [("auto", 4, 65, 3), ("auto", 3, 50, 1), ("explicit", 4, 65, 7)],
)
def test_sine_mode_decays_by_the_discrete_factor(backend, devices, n, k):
    # u_i = sin(k pi i/(N-1)) is an eigenvector: a step multiplies it by 0.5 + 0.5 cos(k pi/(N-1))
    prob = H.problem(n=n, dtype="float64", init="sine", mode=k)
    steps = 25
    u = history(prob, backend, devices, steps)
    i = np.arange(n)
    mode = np.sin(k * np.pi * i / (n - 1))
    factor = 0.5 + 0.5 * np.cos(k * np.pi / (n - 1))
    for t in range(steps + 1):
        np.testing.assert_allclose(u[t, 1:-1], factor**t * mode[1:-1], rtol=0, atol=1e-13)
    # per step, cell by cell, where the mode is not tiny
    big = np.abs(u[-2, 1:-1]) > 1e-3
    np.testing.assert_allclose(u[-1, 1:-1][big] / u[-2, 1:-1][big], factor, rtol=1e-12)
    assert u[:, 0].tolist() == [mode[0]] * (steps + 1)  # ends held fixed
    assert u[:, -1].tolist() == [mode[-1]] * (steps + 1)


@pytest.mark.parametrize("backend", ["auto", "explicit"])
def test_total_heat_changes_by_the_boundary_fluxes(backend):
    # sum(u[1:-1]) changes by 0.25*(u0 - u1 + u_{N-1} - u_{N-2}) per step (flux through the ends)
    prob = H.problem(n=101, dtype="float64", init="random", seed=5)
    u = history(prob, backend, 4, 30)
    interior = u[:, 1:-1].sum(axis=1)
    flux = 0.25 * (u[:-1, 0] - u[:-1, 1] + u[:-1, -1] - u[:-1, -2])
    np.testing.assert_allclose(np.diff(interior), flux, rtol=0, atol=1e-12)
    # with equal end temperatures and a step profile, heat flows in until uniform
    prob = H.problem(n=21, dtype="float64", init="step")
    u = final(prob, backend, 4, 2000)
    assert u[0] == 1.0 and u[-1] == 0.1
    np.testing.assert_allclose(u, np.linspace(1.0, 0.1, 21), atol=1e-4)  # the steady state


@pytest.mark.parametrize(
    ("backend", "devices", "init"),
    [("auto", 3, "random"), ("auto", 8, "gaussian"), ("explicit", 4, "step")],
)
def test_bitwise_equal_to_numpy(backend, devices, init):
    prob = H.problem(n=1001, dtype="float32", init=init, seed=2)
    u0 = H.initial(1001, init, 1, 2).astype(np.float32)
    got = history(prob, backend, devices, 100)
    assert checksum(got[-1]) == checksum(numpy_heat(u0, 100))
    assert got.min() >= min(u0.min(), 0.1) * 0.99  # maximum principle: nothing subnormal
