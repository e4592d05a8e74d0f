"""examples/cavity at n = 5, 9, 17: the scheme against NumPy written here, restart, store, errors.

The NumPy cavity below repeats the example's step term by term, with the Poisson equation
solved exactly (the 5-point Dirichlet Laplacian diagonalised by sine transforms, as dense
matrices); the example's multigrid solves to a relative residual of 1e-12, so the two agree
to round-off, not bit for bit (XLA fuses multiply-adds, and the solves differ).

Sizes are the smallest that cover each case (each compiled program costs seconds, and each
multi-device run's V-cycles cost milliseconds): n = 17 on a 3 x 2 mesh, where 3 devices split
the grid unevenly (6, 6, 5 points) and 2 too (9, 8), all of its runs one compiled loop (chunks
of 5 steps); n = 9 for the runs on 2 devices (mpiexec), n = 5 (two grid levels) for the steady
state on one device, the derivative and the failing solve.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import xarray as xr
from helpers import load_example

import pgas

C = load_example("cavity")
SCRIPT = Path(C.__file__).resolve()
MPIEXEC = Path(sys.executable).parent / "mpiexec"

N, RE = 9, 100.0  # N: the mpiexec runs (N3: 3 devices split it unevenly)
N3 = 17
TIGHT = {"solver_tol": 1e-12, "max_cycles": 60}  # the solve to round-off: NumPy solves exactly


def numpy_cavity(n: int, re: float, dt: float, steps: int, tol: float = 0.0, lid: float = 1.0):
    """The example's scheme in NumPy: ``(psi, omega, steps taken, steady)``."""
    h, nu = 1.0 / (n - 1), abs(lid) / re
    wall, lid_term, diff, conv = -2.0 / (h * h), 2.0 * lid / h, nu / (h * h), 0.5 / h
    k = np.arange(1, n - 1)
    s = np.sin(np.pi * np.outer(k, k) / (n - 1))  # s @ s = (n - 1) / 2 I
    lam = (2 - 2 * np.cos(np.pi * k / (n - 1))) / (h * h)
    eig = lam[:, None] + lam[None, :]
    scale = (2.0 / (n - 1)) ** 2

    def poisson(w):  # -lap(psi) = w inside, psi = 0 on the walls
        p = np.zeros_like(w)
        p[1:-1, 1:-1] = scale * (s @ ((s @ w[1:-1, 1:-1] @ s) / eig) @ s)
        return p

    psi, w = np.zeros((n, n)), np.zeros((n, n))
    for taken in range(1, steps + 1):
        w[0, 1:-1] = wall * psi[1, 1:-1]
        w[-1, 1:-1] = wall * psi[-2, 1:-1]
        w[1:-1, 0] = wall * psi[1:-1, 1]
        w[1:-1, -1] = wall * psi[1:-1, -2] - lid_term
        c0 = w[1:-1, 1:-1].copy()
        u = (psi[1:-1, 2:] - psi[1:-1, :-2]) * conv
        v = (psi[:-2, 1:-1] - psi[2:, 1:-1]) * conv
        lap = w[2:, 1:-1] + w[:-2, 1:-1] + w[1:-1, 2:] + w[1:-1, :-2] - 4 * c0
        adv = u * (w[2:, 1:-1] - w[:-2, 1:-1]) + v * (w[1:-1, 2:] - w[1:-1, :-2])
        rate = diff * lap - conv * adv
        w[1:-1, 1:-1] = c0 + dt * rate
        psi = poisson(w)
        if np.abs(rate).max() < tol:
            return psi, w, taken, True
    return psi, w, steps, False


def _mesh(devices: int, shape=None):
    return pgas.make_mesh(("x", "y"), shape=shape, devices=devices)


def _close(state, psi, omega):
    """The example's fields against NumPy's, relative to their size."""
    got_psi, got_w = state["psi"].to_numpy(), state["omega"].to_numpy()
    assert np.abs(got_psi - psi).max() <= 1e-10 * np.abs(psi).max()
    assert np.abs(got_w - omega).max() <= 1e-10 * np.abs(omega).max()


def test_steps_match_numpy_on_3x2_devices_and_restart_is_bitwise(tmp_path):
    """10 steps on a 3 x 2 mesh (17 points: uneven blocks of 6, 6, 5 along x, 9, 8 along y;
    in two checkpointed chunks of 5) against NumPy; 5 steps, a checkpoint, a restart and 5
    more equal the uninterrupted 10 steps bit for bit (one compiled loop: every chunk has 5
    steps)."""
    c = C.Cavity(N3, RE, **TIGHT)
    psi10, w10, _, _ = numpy_cavity(N3, RE, c.dt, 10)
    mesh = _mesh(6, (3, 2))
    whole = C.simulate(c, mesh, 1e-300, 10, checkpoint=str(tmp_path / "whole"),
                       checkpoint_every=5)  # fmt: skip
    assert whole["steps"] == 10 and not whole["converged"] and whole["cycles"] > 10
    assert pgas.checkpoint.latest(tmp_path / "whole") == 10
    _close(whole["state"], psi10, w10)

    ck = str(tmp_path / "ck")
    first = C.simulate(c, mesh, 1e-300, 5, checkpoint=ck, checkpoint_every=5)
    assert first["steps"] == 5 and pgas.checkpoint.latest(ck) == 5
    again = C.simulate(c, mesh, 1e-300, 10, checkpoint=ck, checkpoint_every=5, restart=True)
    assert again["steps"] == 10 and pgas.checkpoint.latest(ck) == 10
    for name in ("psi", "omega"):
        np.testing.assert_array_equal(again["state"][name].to_numpy(),
                                      whole["state"][name].to_numpy())  # fmt: skip


def test_steady_state_on_one_device_matches_numpy_and_is_written_for_xarray(tmp_path, capsys):
    """The command line to the steady state (the change below 0.5) on one device, n = 5 (two
    grid levels: the smallest program; 150 steps): the same step count as NumPy's and its
    fields; --out .nc holds u, v (and psi, omega) on x, y in
    [0, 1], u = dpsi/dy, v = -dpsi/dx, the lid's u on y = 1; the JSON line and the store's
    attributes say how the run ended; --plot writes a picture. (--out .zarr: the mpiexec test
    below reads one back.)"""
    n = 5
    c = C.Cavity(n, RE, **TIGHT)
    psi, w, taken, done = numpy_cavity(n, RE, c.dt, 2000, tol=0.5)
    assert done and taken > 50
    h = 1.0 / (n - 1)
    out = tmp_path / "c.nc"
    r = C.main(["--n", str(n), "--re", str(RE), "--max-steps", "2000", "--tol", "0.5",
                "--solver-tol", "1e-12", "--max-cycles", "60", "--out", str(out),
                "--json", "--platform", "cpu", "--devices", "1",
                "--plot", str(tmp_path / "c.png")])  # fmt: skip
    assert r["steps"] == taken and r["converged"] is True and r["change"] < 0.5
    with xr.open_dataset(out) as ds:
        assert ds["u"].dims == ds["v"].dims == ("x", "y")
        np.testing.assert_array_equal(ds["x"].values, np.linspace(0, 1, n))
        np.testing.assert_array_equal(ds["y"].values, np.linspace(0, 1, n))
        u, v, got, got_w = (ds[k].values for k in ("u", "v", "psi", "omega"))
        assert ds.attrs["steps"] == taken and ds.attrs["converged"] == 1
    np.testing.assert_array_equal(u[1:-1, 1:-1], (got[1:-1, 2:] - got[1:-1, :-2]) / (2 * h))
    np.testing.assert_array_equal(v[1:-1, 1:-1], (got[:-2, 1:-1] - got[2:, 1:-1]) / (2 * h))
    assert (u[1:-1, -1] == 1.0).all() and (u[:, 0] == 0).all() and (v[0] == 0).all()
    assert np.abs(got - psi).max() <= 1e-10 * np.abs(psi).max()
    assert np.abs(got_w - w).max() <= 1e-10 * np.abs(w).max()
    assert (tmp_path / "c.png").stat().st_size > 0
    assert f'"steps": {taken}' in capsys.readouterr().out


@pytest.mark.parametrize(
    "args, words",
    [
        (["--re", "0"], ["--re 0.0", "> 0", "--re 100"]),
        (["--re", "-5"], ["--re -5.0", "> 0"]),
        (["--n", "20"], ["--n 20", "2**L + 1", "--n 33"]),
        (["--n", "3"], ["--n 3", "2**L + 1", "--n 5"]),
        (["--n", "5", "--devices", "3"], ["--n 5 over 3 devices", "--n >= 9", "fewer"]),
        (
            ["--n", "17", "--dt", "0.1"],
            ["--dt 0.1", "stable", "dt <= 0.02 ", "leave --dt out"],
        ),  # fmt: skip
        (["--n", "17", "--lid", "0"], ["--lid 0.0", "nonzero"]),
        (["--n", "17", "--tol", "0"], ["--tol 0.0", "> 0"]),
    ],
)
def test_bad_inputs_exit_with_a_message_naming_the_parameter(args, words, capsys):
    with pytest.raises(SystemExit) as exit_:
        C.main([*args, "--platform", "cpu"])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    for word in words:
        assert word in err, err


def test_taylor_green_energy_decays_at_second_order_and_grad_of_energy_wrt_lid():
    """The periodic Taylor-Green vortex at 8 and 16 points: E(t)/E(0) within the scheme's
    error of exp(-4 nu k**2 t) (0.012 at 16 points, 4x that at 8), the error falling 4x per
    halving of h; jax.grad of the cavity's kinetic energy after 2 steps (5 points) with
    respect to the lid speed against central differences (through pgas.run's reverse mode and
    the solves' implicit derivative; one jax.jit program, not one per operation, whose values
    at lid +- eps give the differences)."""
    import jax

    mesh = _mesh(1)
    coarse, fine = (C.taylor_green(n, mesh) for n in (8, 16))
    assert coarse["error"] < 4 * 0.012 and fine["error"] < 0.012
    assert 1.9 < np.log2(coarse["error"] / fine["error"]) < 2.2
    f = C.energy_after(C.Cavity(5, 10.0, solver_tol=1e-11, max_cycles=40), mesh, 2)
    value_and_grad = jax.jit(jax.value_and_grad(f))
    e, g = value_and_grad(1.0)
    eps = 1e-3
    fd = (value_and_grad(1.0 + eps)[0] - value_and_grad(1.0 - eps)[0]) / (2 * eps)
    assert float(e) > 0 and abs(float(g) - float(fd)) < 1e-6 * abs(float(fd))


def test_a_solve_that_does_not_converge_stops_the_run_and_writes_nothing(tmp_path, capsys):
    out = tmp_path / "c.nc"
    with pytest.raises(SystemExit) as exit_:
        C.main(["--n", "5", "--max-cycles", "1", "--solver-tol", "1e-12", "--out", str(out),
                "--platform", "cpu", "--devices", "1"])  # fmt: skip
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert "Poisson solve of step 1 did not converge within --max-cycles 1" in err, err
    assert "writes nothing" in err and not out.exists()


@pytest.mark.slow
@pytest.mark.skipif(not MPIEXEC.exists(), reason="no mpiexec; pip install mpich")
def test_mpiexec_two_processes_equal_one_process_on_two_devices(tmp_path):
    """``mpiexec -n 2 ... --distributed`` (one CPU device per process, mesh 2 x 1) writes the
    .zarr store a one-process run on 2 devices (the same mesh) writes (x, y in [0, 1], the
    steps in its attributes), and both equal NumPy's (6 steps: the launch, not the steps, is
    what is tested; the one-process run is tests/examples/test_examples_slurm.py's, whose
    compiled loop, and process 0's in the persistent cache, serve both in a test run)."""
    args = ["--n", str(N), "--re", str(RE), "--max-steps", "6", "--tol", "1e-300",
            "--solver-tol", "1e-12", "--max-cycles", "60", "--json"]  # fmt: skip
    one, two = tmp_path / "one.zarr", tmp_path / "two.zarr"
    single = C.main([*args, "--devices", "2", "--platform", "cpu", "--out", str(one)])
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("PMI", "OMPI_", "PMIX", "HYDRA", "SLURM", "PGAS_", "XLA_FLAGS"))
    }
    env.update(JAX_PLATFORMS="cpu", PYTHONUNBUFFERED="1")  # fmt: skip
    r = subprocess.run([str(MPIEXEC), "-n", "2", sys.executable, str(SCRIPT), *args,
                        "--distributed", "--out", str(two)], capture_output=True, text=True,
                       timeout=300, env=env, cwd=SCRIPT.parents[2])  # fmt: skip
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    lines = [x for x in r.stdout.splitlines() if x.startswith("{")]
    assert len(lines) == 1, r.stdout  # process 0 reports
    multi = json.loads(lines[0])
    assert multi["processes"] == 2 and multi["devices"] == 2 and multi["steps"] == 6
    assert multi["mesh"] == single["mesh"] == {"x": 2, "y": 1}
    psi, _, _, _ = numpy_cavity(N, RE, single["dt"], 6)
    with xr.open_zarr(one) as a, xr.open_zarr(two) as b:
        for ds in (a, b):
            assert ds["u"].dims == ("x", "y") and ds.attrs["steps"] == 6
            np.testing.assert_array_equal(ds["x"].values, np.linspace(0, 1, N))
        for name in ("u", "v", "psi", "omega"):
            np.testing.assert_allclose(b[name].values, a[name].values, rtol=0, atol=1e-12)
        assert np.abs(b["psi"].values - psi).max() <= 1e-10 * np.abs(psi).max()
