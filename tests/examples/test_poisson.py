"""examples/poisson at a tiny size: iterations against NumPy Jacobi and CG written here."""

from pathlib import Path

import numpy as np
from helpers import load_example

P = load_example("poisson")


def numpy_problem(n):
    x = np.linspace(0.0, 1.0, n)
    sx, cx = np.sin(np.pi * x), np.cos(np.pi * x)
    f = (np.exp(x) * ((2 * np.pi**2 - 1) * sx - 2 * np.pi * cx))[:, None] * sx[None, :]
    b = f / (n - 1) ** 2
    b[0, :] = b[-1, :] = b[:, 0] = b[:, -1] = 0
    return b, (np.exp(x) * sx)[:, None] * sx[None, :]


def apply_a(u):
    return 4 * u[1:-1, 1:-1] - (u[:-2, 1:-1] + u[2:, 1:-1] + u[1:-1, :-2] + u[1:-1, 2:])


def jacobi_iterations(b, every, tol=1e-8):
    u, n, bb = np.zeros_like(b), 0, (b * b).sum()
    while True:
        for _ in range(every):
            new = u.copy()
            new[1:-1, 1:-1] = 0.25 * (u[:-2, 1:-1] + u[2:, 1:-1] + u[1:-1, :-2] + u[1:-1, 2:]
                                      + b[1:-1, 1:-1])  # fmt: skip
            u, n = new, n + 1
        r = b[1:-1, 1:-1] - apply_a(u)
        if (r * r).sum() < tol**2 * bb:
            return n, u


def cg_iterations(b, tol=1e-8):
    x, r = np.zeros_like(b), b.copy()
    p, rr, n = r.copy(), (r * r).sum(), 0
    bb = rr
    while rr >= tol**2 * bb:
        ap = apply_a(p)
        alpha = rr / (p[1:-1, 1:-1] * ap).sum()
        x[1:-1, 1:-1] += alpha * p[1:-1, 1:-1]
        r[1:-1, 1:-1] -= alpha * ap
        new = (r * r).sum()
        p[1:-1, 1:-1] = r[1:-1, 1:-1] + (new / rr) * p[1:-1, 1:-1]
        rr, n = new, n + 1
    return n, x


def test_poisson_tiny_jacobi_and_cg_match_numpy_and_converge_at_second_order(tmp_path):
    """On 3 devices at n = 5 and 9, the smallest pair of sizes in the asymptotic range (the
    error falls 3.8x from 5 to 9, 4.0x from 9 to 17): blocks of 2, 2 and 1 rows at n = 5,
    Jacobi 3 sweeps per exchange on blocks of 3 at n = 9 (the pictures are of n = 5, the
    smaller programs); its n = 9 programs serve the explicit test's CG on auto and the --out
    test too."""
    runs = P.main(["--order", "5", "9", "--devices", "3", "--json",
                   "--plot", str(tmp_path / "p.png")])  # fmt: skip
    assert (tmp_path / "p.png").stat().st_size > 0
    errors = {}
    for r in runs:
        b, exact = numpy_problem(r["n"])
        assert r["converged"] and r["devices"] == 3 and r["relative_residual"] < 1e-8
        if r["method"] == "jacobi":
            n, u = jacobi_iterations(b, r["check_every"])
            assert r["iterations"] == n
        else:
            n, u = cg_iterations(b)
            assert abs(r["iterations"] - n) <= 2
        assert abs(r["error_max"] - np.abs(u - exact).max()) < 1e-9
        errors.setdefault(r["method"], []).append(r["error_max"])
    for coarse, fine in errors.values():
        assert 3.6 < coarse / fine < 4.4  # second order: h halves, the error falls 4x


def test_poisson_jacobi_on_every_backend_same_iterations_and_bits_as_numpy():
    """pgas compare of the Jacobi problem: auto and explicit on 3 devices, mpi under
    ``mpiexec -n 3`` (one launch); the field of each equals NumPy's, bit for bit."""
    from pgas.app.compare import compare

    source = f"{Path(P.__file__).resolve()}:problem"
    results = compare(source, 10**5, devices=3, ranks=3, gather=True, n=17)
    b, _ = numpy_problem(17)
    every = results[0].check_every
    n, u = jacobi_iterations(b, every)
    assert [r.backend for r in results] == ["auto", "explicit", "mpi"]
    for r in results:
        assert r.converged and r.steps == n and r.check_every == every, r
        np.testing.assert_array_equal(r.field, u)
    assert len({r.checksum for r in results}) == 1


def test_poisson_jacobi_and_cg_example_on_the_explicit_backend_as_on_auto():
    r, c = P.main(["--n", "9", "--devices", "3", "--backend", "explicit", "--json"])
    b, exact = numpy_problem(9)
    n, u = jacobi_iterations(b, r["check_every"])
    assert r["backend"] == "explicit" and r["converged"] and r["iterations"] == n
    assert r["devices"] == 3 and abs(r["error_max"] - np.abs(u - exact).max()) < 1e-12
    # auto on 3 devices: the first test's program (reproducible sums give these bits on every
    # mesh: tests/globalview/test_reprosum.py)
    (auto,) = P.main(["--n", "9", "--devices", "3", "--methods", "cg", "--json"])
    assert c["method"] == "cg" and c["converged"] and c["check_every"] == 1
    assert c["iterations"] == auto["iterations"] and c["error_max"] == auto["error_max"]


def test_poisson_out_writes_each_final_field_and_platform_cpu_is_accepted(tmp_path):
    """--out: one variable per method, read back with xarray equal to the run's final field
    (and Jacobi's to NumPy's, bit for bit), its iterations in its attributes."""
    import xarray as xr

    out = tmp_path / "p.zarr"
    # 3 devices and n = 9: the programs of the first test
    runs = P.main(["--n", "9", "--devices", "3", "--platform", "cpu", "--out", str(out),
                   "--json"])  # fmt: skip
    b, _ = numpy_problem(9)
    n, u = jacobi_iterations(b, runs[0]["check_every"])
    with xr.open_dataset(out, engine="zarr") as ds:
        assert ds.attrs["methods"] == "jacobi cg" and ds.attrs["n"] == 9
        for r in runs:
            field = ds[f"u_{r['method']}"]
            assert field.dims == ("x", "y") and field.attrs["iterations"] == r["iterations"]
            np.testing.assert_array_equal(field.values, r["field"])
        np.testing.assert_array_equal(ds["u_jacobi"].values, u)
        assert ds["u_jacobi"].attrs["iterations"] == n and ds["u_cg"].attrs["converged"] == 1


def test_poisson_multigrid_and_mgcg_solve_what_cg_solves_and_the_other_cases_run(capsys):
    """pgas.solvers in the example: the same discrete solution as NumPy CG (to the
    tolerance), few cycles; the variable-coefficient case (MG-preconditioned CG) and the 3-D
    case (pgas.solvers' CG, against a dense NumPy solve); methods the other backends do not
    have are refused. n = 5 (two grid levels: a smaller program than n = 9's three, the same
    code), on a 2 x 2 mesh (blocks of 3 and 2) and on 3 devices (2, 2 and 1 rows)."""
    import poisson_numpy as ref
    import pytest

    (mg,) = P.main(["--n", "5", "--devices", "4", "--methods", "multigrid", "--json"])
    b, exact = numpy_problem(5)
    _, x = cg_iterations(b, tol=1e-12)
    assert mg["converged"] and mg["relative_residual"] <= 1e-8 and mg["iterations"] <= 12
    assert abs(mg["error_max"] - np.abs(x - exact).max()) < 1e-7  # the discretisation's
    (var,) = P.main(["--case", "variable", "--n", "5", "--devices", "3", "--methods", "mgcg",
                     "--json"])  # fmt: skip
    assert var["converged"] and var["error_max"] < 1e-6 and var["iterations"] <= 10
    # f = A u_exact: the error is the solver's alone
    (cube,) = P.main(["--case", "cube", "--n", "5", "--methods", "cg", "--json"])
    x = np.linspace(0.0, 1.0, 5)
    s, c, e = np.sin(np.pi * x), np.cos(np.pi * x), np.exp(x)
    want = (e * s)[:, None, None] * s[None, :, None] * s[None, None, :]
    f = ((e * ((3 * np.pi**2 - 1) * s - 2 * np.pi * c))[:, None, None] * s[None, :, None]
         * s[None, None, :])  # fmt: skip
    dense = ref.solve(f, ("keep",) * 3, 0.25)  # -lap(u) = f by the 7-point stencil
    assert cube["converged"] and cube["relative_residual"] <= 1e-8
    assert abs(cube["error_max"] - np.abs(dense - want).max()) < 1e-7
    with pytest.raises(SystemExit):
        P.main(["--n", "17", "--backend", "explicit", "--methods", "multigrid"])
    assert "run on --backend auto (pgas.solvers)" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        P.main(["--case", "cube", "--n", "9", "--methods", "jacobi"])
    assert "--case cube runs --methods cg, multigrid and mgcg" in capsys.readouterr().err
