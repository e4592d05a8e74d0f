"""NumPy references and HLO helpers shared by the tests."""

import numpy as np

NEIGHBOURS_2D = [(dy, dx) for dy in (-1, 0, 1) for dx in (-1, 0, 1) if (dy, dx) != (0, 0)]


def heat_numpy(u: np.ndarray, steps: int) -> np.ndarray:
    """The seed scheme, edges fixed, in the array's own dtype."""
    u = u.copy()
    half, quarter = u.dtype.type(0.5), u.dtype.type(0.25)
    for _ in range(steps):
        u[1:-1] = half * u[1:-1] + quarter * (u[:-2] + u[2:])
    return u


def heat_problem(n: int = 203):
    """tests/problems.py's heat problem on ``n`` cells: ``sin(0.37 i)**2``, ``Keep()`` ends."""
    from pathlib import Path

    from pgas.app.problem import load_problem

    return load_problem(f"{Path(__file__).resolve().parent / 'problems.py'}:heat", n=n)


def heat_reference(n: int, steps: int) -> np.ndarray:
    """:func:`heat_problem` after ``steps`` steps, in NumPy (float32)."""
    return heat_numpy((np.sin(0.37 * np.arange(n)) ** 2).astype(np.float32), steps)


def heat_adjoint(g: np.ndarray, steps: int) -> np.ndarray:
    """The transpose of the seed heat step (``Keep`` ends)."""
    for _ in range(steps):
        out = g.copy()
        out[1:-1] = 0.5 * g[1:-1]
        out[:-2] += 0.25 * g[1:-1]
        out[2:] += 0.25 * g[1:-1]
        g = out
    return g


def life_numpy(b: np.ndarray, steps: int) -> np.ndarray:
    """B3/S23 on a torus."""
    for _ in range(steps):
        n = sum(np.roll(np.roll(b, dy, 0), dx, 1) for dy, dx in NEIGHBOURS_2D)
        b = ((n == 3) | ((b == 1) & (n == 2))).astype(b.dtype)
    return b


def heat3d_numpy(u: np.ndarray, steps: int) -> np.ndarray:
    u = u.copy()
    c, w = u.dtype.type(0.25), u.dtype.type(0.125)
    for _ in range(steps):
        s = (u[:-2, 1:-1, 1:-1] + u[2:, 1:-1, 1:-1] + u[1:-1, :-2, 1:-1]
             + u[1:-1, 2:, 1:-1] + u[1:-1, 1:-1, :-2] + u[1:-1, 1:-1, 2:])  # fmt: skip
        u[1:-1, 1:-1, 1:-1] = c * u[1:-1, 1:-1, 1:-1] + w * s
    return u


def load_example(name: str, script: str | None = None):
    """The example ``examples/<name>/<script or name>.py`` as a module (loaded once per
    process)."""
    import importlib.util
    import sys
    from pathlib import Path

    script = script or name
    key = f"pgas_examples_{name}" + ("" if script == name else f"_{script}")
    if key not in sys.modules:
        path = Path(__file__).resolve().parents[1] / "examples" / name / f"{script}.py"
        spec = importlib.util.spec_from_file_location(key, path)
        sys.modules[key] = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(sys.modules[key])
    return sys.modules[key]


def last_json(stdout: str) -> dict:
    """The JSON object an example prints as its last line with ``--json``."""
    import json

    return json.loads(stdout.strip().splitlines()[-1])


def fails_with(main, argv, capsys, *needles) -> str:
    """Run an example's ``main(argv)``: it must exit 2 with every needle in stderr."""
    import pytest

    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2
    err = capsys.readouterr().err
    for needle in needles:
        assert needle in err, (needle, err)
    return err


# ---- one-sided stencils (halos per side), as tests/stencils.py writes them ----
C = 0.5


def upwind_numpy(u, steps):
    u = u.copy()
    for _ in range(steps):
        u[1:] = u[1:] - C * (u[1:] - u[:-1])
    return u


def downwind_numpy(u, steps):
    u = u.copy()
    for _ in range(steps):
        u[:-1] = u[:-1] - C * (u[:-1] - u[1:])
    return u


def two_below_numpy(u, steps):
    u = u.copy()
    for _ in range(steps):
        u[2:] = u[2:] - 0.5 * (u[1:-1] - u[:-2]) - 0.25 * (u[2:] - u[1:-1])
    return u


def ring_numpy(u, steps):
    for _ in range(steps):
        u = u - C * (u - np.roll(u, 1))
    return u


def upwind2d_numpy(u, steps):
    u = u.copy()
    for _ in range(steps):
        u[1:, 1:] = (u[1:, 1:] - 0.25 * (u[1:, 1:] - u[:-1, 1:])
                     - 0.25 * (u[1:, 1:] - u[1:, :-1]))  # fmt: skip
    return u


def advect_diffuse_numpy(u, steps):
    u = u.copy()
    for _ in range(steps):
        c = u[1:, 1:-1]
        u[1:, 1:-1] = c - 0.25 * (c - u[:-1, 1:-1]) + 0.125 * (u[1:, :-2] - 2 * c + u[1:, 2:])
    return u


def jacobi_numpy(f: np.ndarray, check_every: int, max_steps: int, tol: float = 1e-6):
    """Jacobi from zero until max |residual| < tol, checked every ``check_every`` sweeps:
    ``(u, sweeps)`` (the 5-point Laplacian on the interior; the walls stay 0)."""
    u, n = np.zeros_like(f), 0
    while n < max_steps:
        for _ in range(min(check_every, max_steps - n)):
            new = u.copy()
            new[1:-1, 1:-1] = 0.25 * (u[:-2, 1:-1] + u[2:, 1:-1] + u[1:-1, :-2] + u[1:-1, 2:]
                                      + f[1:-1, 1:-1])  # fmt: skip
            u, n = new, n + 1
        r = u[:-2, 1:-1] + u[2:, 1:-1] + u[1:-1, :-2] + u[1:-1, 2:] + f[1:-1, 1:-1] \
            - 4 * u[1:-1, 1:-1]  # fmt: skip
        if np.abs(r).max() < tol:
            break
    return u, n


def reprosum_numpy(values: np.ndarray, size: int):
    """The pre-rounded reproducible sum (Demmel & Nguyen 2013) of finite ``values``, in NumPy.

    ``M = max|x|`` with ``M < 2**E``; ``L = max(1, ceil(log2(size)))``; ``K`` folds (2 for
    float64, 3 for float32), fold ``j`` with ``sigma = 1.5 * 2**(E + L + j * (L - p))``:
    ``q = (sigma + x) - sigma``, ``x -= q``; each fold's ``q`` summed exactly (``math.fsum``),
    the folds added first to last in the values' dtype.
    """
    import math

    x = np.asarray(values).ravel()
    t = x.dtype.type
    m = float(np.abs(x).max()) if x.size else 0.0
    if m == 0.0:
        return t(0)
    p = np.finfo(x.dtype).nmant + 1
    folds = 2 if p == 53 else 3
    level = max(1, math.ceil(math.log2(size)))
    e = math.frexp(m)[1]
    sums = []
    for j in range(folds):
        sigma = t(math.ldexp(1.5, e + level + j * (level - p)))
        q = (sigma + x) - sigma
        x = x - q
        sums.append(t(math.fsum(q.astype(np.float64))))
    out = sums[0]
    for s in sums[1:]:
        out = t(out + s)
    return out


def cg_numpy(b: np.ndarray, stop: float, max_steps: int = 10**6):
    """CG on the 5-point Laplacian (walls fixed at 0) with :func:`reprosum_numpy` for both
    reductions over the grid of ``b``: ``(x, iterations, rr)``, stopping once ``rr < stop``."""
    size = b.size
    x, r, p = np.zeros_like(b), b.copy(), b.copy()
    rr, n = reprosum_numpy(b * b, size), 0
    while rr >= stop and n < max_steps:
        pin = p[1:-1, 1:-1]
        ap = 4 * pin - (p[:-2, 1:-1] + p[2:, 1:-1] + p[1:-1, :-2] + p[1:-1, 2:])
        alpha = rr / reprosum_numpy(pin * ap, size)
        x[1:-1, 1:-1] = x[1:-1, 1:-1] + alpha * pin
        r[1:-1, 1:-1] = r[1:-1, 1:-1] - alpha * ap
        new = reprosum_numpy(r * r, size)
        p[1:-1, 1:-1] = r[1:-1, 1:-1] + (new / rr) * pin
        rr, n = new, n + 1
    return x, n, rr


def cg_steps_numpy(b: np.ndarray, steps: int):
    """``steps`` CG iterations with NumPy's sums (walls of r zeroed): x, r and r.r."""
    x, r = np.zeros_like(b), b.copy()
    r[0, :] = r[-1, :] = r[:, 0] = r[:, -1] = 0
    p, rr = r.copy(), (r * r).sum()
    for _ in range(steps):
        ap = 4 * p[1:-1, 1:-1] - (p[:-2, 1:-1] + p[2:, 1:-1] + p[1:-1, :-2] + p[1:-1, 2:])
        alpha = rr / (p[1:-1, 1:-1] * ap).sum()
        x[1:-1, 1:-1] += alpha * p[1:-1, 1:-1]
        r[1:-1, 1:-1] -= alpha * ap
        new = (r * r).sum()
        p[1:-1, 1:-1] = r[1:-1, 1:-1] + (new / rr) * p[1:-1, 1:-1]
        rr = new
    return x, r, rr
