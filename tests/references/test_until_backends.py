"""run_until on every backend: Jacobi against a NumPy loop written here, same steps, same bits.

The explicit path (``pgas.explicit.run_until``) runs in this process on 1, 3 and 4
virtual devices; the MPI path (``pgas.mpi.run_until``) in one ``mpiexec -n 3``
launch (tests/mpi_scripts/until_cases.py) whose cases all run in that launch.
"""

import functools
import json
import os
import subprocess
import sys
import tempfile
import warnings
from pathlib import Path

import jax
import numpy as np
import pytest

import pgas
from pgas.errors import PgasError
from pgas.references import explicit

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "tests" / "mpi_scripts" / "until_cases.py"
MPIEXEC = Path(sys.executable).parent / "mpiexec"
sys.path.insert(0, str(SCRIPT.parent))
import until_cases as uc  # noqa: E402
from helpers import cg_numpy, jacobi_numpy, reprosum_numpy  # noqa: E402

TOL = uc.TOL
kernel, converged, F = uc.kernel, uc.converged, uc.F


def step(u, f):
    u[1:-1, 1:-1] = 0.25 * (u[:-2, 1:-1] + u[2:, 1:-1] + u[1:-1, :-2] + u[1:-1, 2:] + f[1:-1, 1:-1])
    return u


def auto_converged(u, f):
    r = u[:-2, 1:-1] + u[2:, 1:-1] + u[1:-1, :-2] + u[1:-1, 2:] + f[1:-1, 1:-1] - 4 * u[1:-1, 1:-1]
    return pgas.max(abs(r)) < TOL


def field(a, mesh):
    return pgas.from_numpy(a, mesh, spec=("y", "x"), boundary=pgas.Keep())


def whole_checks(max_steps: int, every: int) -> int:
    """``max_steps`` less its part group (the ``max_steps % every`` steps after the last whole
    check, a second copy of the loop's steps and check in its program): a run that converges
    before never reaches it (the max_steps tests below run one)."""
    return max_steps - max_steps % every


# Each mesh with the k that take another path there: k = 1; k = 4, two groups per check;
# "auto" with check_every = 6, lowered to divide it (to 2 on 1 and 1x3 devices, to 1 on 3x1).
# The 3-device cases are the MPI launch's (the same programs, run again below); 2x2 runs
# deep halos with "auto" (k = 6) in test_explicit_auto_check_every_as_on_the_automatic_path
# and with k = 2 and a part group in test_explicit_max_steps_reached_warns_and_runs_the_rest
# (both against NumPy; k = 1 on 2x2: the collective counts below and the CG tests).
@pytest.mark.parametrize("devices, shape, check_every, k", [
    (1, (1, 1), 6, "auto"), (3, (3, 1), 8, 1), (3, (3, 1), 8, 4), (3, (1, 3), 6, "auto"),
])  # fmt: skip
def test_explicit_jacobi_same_steps_and_bits_as_numpy_and_auto(devices, shape, check_every, k):
    mesh = pgas.make_mesh(("y", "x"), shape=shape, devices=devices)
    max_steps = whole_checks(2000, check_every)  # as the MPI test runs these programs
    out = explicit.run_until(kernel, field(np.zeros_like(F), mesh), converged, max_steps,
                             check_every=check_every, steps_per_exchange=k,
                             params=field(F, mesh))  # fmt: skip
    want, steps = jacobi_numpy(F, check_every, 2000)
    assert out.converged and out.steps_taken == steps and steps % check_every == 0
    np.testing.assert_array_equal(out.state.to_numpy(), want)
    auto = pgas.run_until(step, field(np.zeros_like(F), mesh), auto_converged, max_steps,
                          check_every=check_every, params=field(F, mesh))  # fmt: skip
    assert auto.steps_taken == steps
    np.testing.assert_array_equal(auto.state.to_numpy(), out.state.to_numpy())


def test_explicit_max_steps_reached_warns_and_runs_the_rest():
    mesh = pgas.make_mesh(("y", "x"), shape=(2, 2), devices=4)
    with pytest.warns(pgas.NonConvergenceWarning, match="max_steps = 21"):
        out = explicit.run_until(kernel, field(np.zeros_like(F), mesh), converged, 21,
                                 check_every=8, params=field(F, mesh))  # fmt: skip
    assert not out.converged and out.steps_taken == 21
    np.testing.assert_array_equal(out.state.to_numpy(), jacobi_numpy(F, 8, 21)[0])


def test_explicit_auto_check_every_as_on_the_automatic_path():
    mesh = pgas.make_mesh(("y", "x"), shape=(2, 2), devices=4)
    # max_steps 1980: whole checks of the 66 steps "auto" picks here (k = 6), converging at 330
    out = explicit.run_until(kernel, field(np.zeros_like(F), mesh), converged, 1980,
                             params=field(F, mesh))  # fmt: skip
    auto = pgas.run_until(step, field(np.zeros_like(F), mesh), auto_converged, 1980,
                          params=field(F, mesh))  # fmt: skip
    assert out.check_every == auto.check_every and out.steps_taken == auto.steps_taken
    np.testing.assert_array_equal(auto.state.to_numpy(), out.state.to_numpy())
    want, steps = jacobi_numpy(F, out.check_every, 2000)
    assert out.converged and out.steps_taken == steps
    np.testing.assert_array_equal(out.state.to_numpy(), want)


def test_explicit_one_all_reduce_per_check_in_the_compiled_loop():
    """The loop explicit.run_until ran in the test above (k = 6, a check every 66 steps, up to
    1980: its program) all-reduces once per check and gathers nothing; with two reductions
    (k = 1, a check every 4 steps), twice."""
    mesh = pgas.make_mesh(("y", "x"), shape=(2, 2), devices=4)
    u, f = field(np.zeros_like(F), mesh), field(F, mesh)
    layout = u.layout
    prog = explicit.until_program(kernel, converged, layout, (1, 1), None, 6, 66, 1980,
                                  jax.tree.structure(0), (layout,))  # fmt: skip
    hlo = prog.lower(u.data, f.data).compile().as_text()
    assert hlo.count(" all-reduce(") == 1 and hlo.count(" all-gather(") == 0

    def two(e, f, reduce):  # two reductions: two all-reduces
        return (reduce(abs(e[1:-1, 1:-1]), "max") < 1) & (reduce(e[1:-1, 1:-1]) < 1)

    prog = explicit.until_program(kernel, two, layout, (1, 1), None, 1, 4, 100,
                                  jax.tree.structure(0), (layout,))  # fmt: skip
    hlo = prog.lower(u.data, f.data).compile().as_text()
    assert hlo.count(" all-reduce(") == 2


def test_explicit_reduce_ignores_padding_and_kept_cells():
    a = np.arange(15 * 13, dtype=float).reshape(15, 13)
    mesh = pgas.make_mesh(("y", "x"), shape=(2, 2), devices=4)
    want = jax.numpy.asarray([a[1:-1, 1:-1].sum(), a[1:-1, 1:-1].max(), a[1:-1, 1:-1].min()])

    def test(e, p, reduce):  # NumPy's answers a param: one program for the three reductions
        x = e[1:-1, 1:-1]
        return (reduce(x, "sum") == p[0]) & (reduce(x, "max") == p[1]) & (reduce(x, "min") == p[2])

    out = explicit.run_until(lambda e, p: e[1:-1, 1:-1], field(a, mesh), test, 1, check_every=1,
                             params=want)  # fmt: skip
    assert out.converged


# ---- pgas.mpi.run_until under mpiexec -n 3 (one launch for every case) -------------------
@functools.cache
def launch(p: int = 3) -> tuple[dict, list]:
    if not MPIEXEC.exists():
        pytest.skip(f"no mpiexec next to {sys.executable}; pip install mpich")
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("PMI", "OMPI_", "PMIX", "HYDRA", "SLURM"))}  # fmt: skip
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    with tempfile.TemporaryDirectory(prefix="pgas_until_") as out:
        proc = subprocess.run([str(MPIEXEC), "-n", str(p), sys.executable, str(SCRIPT), out],
                              env=env, capture_output=True, text=True, timeout=300)  # fmt: skip
        assert proc.returncode == 0, f"mpiexec -n {p} failed:\n{proc.stdout}\n{proc.stderr}"
        with np.load(os.path.join(out, "fields.npz")) as z:
            fields = {k: z[k] for k in z.files}
        with open(os.path.join(out, "meta.json")) as f:
            meta = json.load(f)
    assert meta["size"] == p
    return fields, meta["ranks"]


@pytest.mark.parametrize("name", list(uc.CASES))
def test_mpi_jacobi_same_steps_and_bits_as_numpy_and_the_jax_backends(name):
    fields, ranks = launch(3)
    dims, max_steps, every, k = uc.CASES[name]
    meta = ranks[0][name]
    assert all(r[name] == meta for r in ranks)  # every rank took the same decisions
    assert meta["dims"] == dims
    want, steps = jacobi_numpy(F, meta["check_every"], max_steps)
    assert meta["steps"] == steps
    np.testing.assert_array_equal(fields[name], want)
    checks = -(-steps // meta["check_every"])
    assert meta["allreduces"] == checks  # one Allreduce per check (one reduction in it)
    mesh = pgas.make_mesh(("y", "x"), shape=tuple(dims), devices=3)
    if meta["converged"]:  # whole checks (rows_max_steps_21 reaches max_steps: all of it)
        max_steps = whole_checks(max_steps, meta["check_every"])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        expl = explicit.run_until(kernel, field(np.zeros_like(F), mesh), converged, max_steps,
                                  check_every=every, steps_per_exchange=k,
                                  params=field(F, mesh))  # fmt: skip
        auto = pgas.run_until(step, field(np.zeros_like(F), mesh), auto_converged, max_steps,
                              check_every=every, params=field(F, mesh))  # fmt: skip
    assert len(caught) == 2 * bool(meta["warned"])
    assert expl.steps_taken == auto.steps_taken == steps
    assert expl.check_every == auto.check_every == meta["check_every"]
    assert expl.converged == auto.converged == meta["converged"] == (not meta["warned"])
    np.testing.assert_array_equal(expl.state.to_numpy(), fields[name])
    np.testing.assert_array_equal(auto.state.to_numpy(), fields[name])


def test_explicit_inside_jit_gives_the_same_steps_and_bits():
    mesh = pgas.make_mesh(("y", "x"), shape=(3, 1), devices=3)
    run = jax.jit(lambda u, f: explicit.run_until(kernel, u, converged, 2000, check_every=8,
                                                  params=f))  # fmt: skip
    out = run(field(np.zeros_like(F), mesh), field(F, mesh))
    want, steps = jacobi_numpy(F, 8, 2000)
    assert int(out.steps_taken) == steps and bool(out.converged)
    np.testing.assert_array_equal(out.state.to_numpy(), want)


def rod_numpy(x: np.ndarray, check_every: int, max_steps: int = 5000):
    """The rod of until_cases: x[2:-2] relaxes between x[1] and x[-2]."""
    x, n = x.copy(), 0
    while n < max_steps:
        for _ in range(check_every):
            x[2:-2] = 0.5 * (x[1:-3] + x[3:-1])
            n += 1
        if np.abs(x[1:-3] + x[3:-1] - 2 * x[2:-2]).max() < TOL:
            break
    return x, n


@pytest.mark.parametrize("name", list(uc.RODS))
def test_a_region_on_every_backend_same_steps_and_bits_as_numpy(name):
    fields, ranks = launch(3)
    want, steps = rod_numpy(uc.ROD, 4)
    assert ranks[0][name]["steps"] == steps and ranks[0][name]["converged"]
    np.testing.assert_array_equal(fields[name], want)
    mesh = pgas.make_mesh(("x",), devices=3)
    bc = uc.rod_boundary(uc.RODS[name])
    out = explicit.run_until(uc.rod_kernel, pgas.from_numpy(uc.ROD, mesh, boundary=bc),
                             uc.rod_converged, 5000, region=uc.REGION, check_every=4)  # fmt: skip
    assert out.steps_taken == steps
    np.testing.assert_array_equal(out.state.to_numpy(), want)


def test_params_a_dict_of_a_field_and_a_scalar_on_explicit_and_mpi_in_one_process():
    from pgas.references import mpi

    x0 = np.array([0.0, 8.0, 0.0, 0.0, 0.0, 0.0, 0.0])
    w = np.arange(7.0)  # a field the test reads: weights 0 at the left end

    def kern(e, p):
        return p["c"] * (e[:-2] + e[2:])

    def test(e, p, reduce):
        return reduce(abs(e[1:-1]) * (p["w"][1:-1] > 0), "max") < 0.5

    want, n = x0.copy(), 0
    while True:
        for _ in range(2):
            want[1:-1], n = 0.5 * (want[:-2] + want[2:]), n + 1
        if (abs(want[1:-1]) * (w[1:-1] > 0)).max() < 0.5:
            break
    r = mpi.run_until(
        kern,
        lambda i: x0[i],
        (7,),
        "float64",
        test,
        100,
        1,
        pgas.Keep(),
        check_every=2,
        params={"c": np.float64(0.5), "w": lambda i: w[i]},
    )
    assert r.steps == n and r.converged and r.allreduces == n // 2
    np.testing.assert_array_equal(r.field, want)
    mesh = pgas.make_mesh(("x",), devices=3)
    wf = pgas.from_numpy(w, mesh, boundary=pgas.Keep())
    out = explicit.run_until(kern, pgas.from_numpy(x0, mesh, boundary=pgas.Keep()), test, 100,
                             check_every=2, params={"c": 0.5, "w": wf})  # fmt: skip
    assert out.steps_taken == n
    np.testing.assert_array_equal(out.state.to_numpy(), want)


# ---- conjugate gradients on a state dict: reproducible sums, the same bits everywhere --------
def cg_global(s):
    """The global-view CG of examples/poisson, with reproducible sums."""
    x, r, p, rr = s["x"], s["r"], s["p"], s["rr"]
    ap = 4 * p[1:-1, 1:-1] - (p[:-2, 1:-1] + p[2:, 1:-1] + p[1:-1, :-2] + p[1:-1, 2:])
    alpha = rr / pgas.sum(p[1:-1, 1:-1] * ap, reproducible=True)
    x[1:-1, 1:-1] = x[1:-1, 1:-1] + alpha * p[1:-1, 1:-1]
    r[1:-1, 1:-1] = r[1:-1, 1:-1] - alpha * ap
    new = pgas.sum(r * r, reproducible=True)
    p[1:-1, 1:-1] = r[1:-1, 1:-1] + (new / rr) * p[1:-1, 1:-1]
    return {"x": x, "r": r, "p": p, "rr": new}


def cg_state(mesh):
    b = uc.B
    rr = reprosum_numpy(b * b, b.size)
    return {"x": field(np.zeros_like(b), mesh), "r": field(b, mesh), "p": field(b, mesh),
            "rr": jax.numpy.asarray(rr)}  # fmt: skip


def test_cg_on_auto_and_explicit_same_iterations_and_bits_on_every_mesh():
    """Auto and explicit on 2x2 devices (uneven blocks on both axes; 1 device: the state dict
    test below, whose run_until on 2x2 gives the bits of run on 1 device; 3x1 and 1x3 ranks in
    the MPI one): one iteration count, one x, bit for bit;
    NumPy's CG agrees to the last bits only: XLA fuses CG's multiply-adds (``x + alpha * p``)
    into FMAs, NumPy rounds the product (the next test turns FMAs off)."""
    want, steps, rr = cg_numpy(uc.B, uc.CG_STOP)
    seen = []
    mesh = pgas.make_mesh(("y", "x"), shape=(2, 2), devices=4)
    auto = pgas.run_until(cg_global, cg_state(mesh), lambda s: s["rr"] < uc.CG_STOP, 200)
    expl = explicit.run_until(uc.cg_kernel, cg_state(mesh), uc.cg_converged, 200)
    for out in (auto, expl):
        assert out.converged and out.steps_taken == steps and out.check_every == 1
        seen.append((out.state["x"].to_numpy(), float(out.state["rr"])))
    assert expl.plan.steps_per_exchange == 1
    for x, r in seen:
        np.testing.assert_array_equal(x, seen[0][0])
        assert r == seen[0][1]
    np.testing.assert_allclose(seen[0][0], want, rtol=1e-13, atol=1e-14)


@pytest.mark.one_process
def test_cg_on_auto_and_explicit_without_fma_bitwise_equal_to_numpy():
    """With XLA's FMAs off (``--xla_cpu_max_isa=AVX``, one process) auto and explicit CG on
    2x2 devices (uneven blocks on both axes) give NumPy's iterations and bits, so MPI's on
    3x1 and 1x3 ranks (the next test); so does explicit.run on the state dict for as many
    steps."""
    env = dict(os.environ, XLA_FLAGS="--xla_cpu_max_isa=AVX", JAX_PLATFORMS="cpu")
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    script = Path(__file__).with_name("cg_no_fma.py")
    proc = subprocess.run([sys.executable, str(script)], env=env, capture_output=True,
                          text=True, timeout=300)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    want, steps, rr = cg_numpy(uc.B, uc.CG_STOP)
    assert len(got) == 3
    for case in got:
        assert case["steps"] == steps and case["rr"] == rr, case
        assert case["x_bits"] == want.tobytes().hex(), case["name"]


@pytest.mark.parametrize("name", list(uc.CG_CASES))
def test_mpi_cg_same_iterations_and_bits_as_numpy(name):
    fields, ranks = launch(3)
    want, steps, rr = cg_numpy(uc.B, uc.CG_STOP)
    meta = ranks[0][name]
    assert all(r[name]["steps"] == steps for r in ranks)
    assert meta["converged"] and meta["check_every"] == 1 and meta["k"] == 1
    assert meta["allreduces"] == 2 * 2 * steps  # two reproducible sums per step, two each
    assert meta["rr"] == rr
    np.testing.assert_array_equal(fields[name], want)


def test_explicit_run_on_a_state_dict_is_auto_and_run_until_bit_for_bit():
    """``steps`` CG iterations by explicit.run on 1 and 2x2 devices: pgas.run's state with
    the global-view step, and run_until's after as many steps, bit for bit; NumPy's CG within
    the last bits (XLA's FMAs: cg_no_fma.py has the bits)."""
    want, steps, rr = cg_numpy(uc.B, uc.CG_STOP)
    first = None
    for devices, shape in [(1, (1, 1)), (4, (2, 2))]:
        mesh = pgas.make_mesh(("y", "x"), shape=shape, devices=devices)
        out = explicit.run(uc.cg_kernel, cg_state(mesh), steps)
        auto = pgas.run(cg_global, cg_state(mesh), steps)
        got = {k: np.asarray(v.to_numpy() if k != "rr" else v) for k, v in out.items()}
        assert list(got) == ["x", "r", "p", "rr"] and got["rr"].shape == ()
        for key, value in auto.items():
            np.testing.assert_array_equal(got[key], value.to_numpy() if key != "rr" else value)
        first = first or got
        for key, value in first.items():
            np.testing.assert_array_equal(got[key], value)
    until = explicit.run_until(uc.cg_kernel, cg_state(mesh), uc.cg_converged, 200)
    assert until.steps_taken == steps
    for key, value in until.state.items():
        np.testing.assert_array_equal(got[key], value.to_numpy() if key != "rr" else value)
    np.testing.assert_allclose(got["x"], want, rtol=1e-13, atol=1e-14)
    np.testing.assert_allclose(got["rr"], rr, rtol=1e-10)


def test_mpi_run_on_a_state_dict_is_run_until_and_numpy_bit_for_bit():
    """pgas.mpi.run on 1x3 ranks for the steps cg_cols took to converge: its x and rr, and
    NumPy's CG after as many steps, bit for bit; no check, so no converged."""
    fields, ranks = launch(3)
    want, steps, rr = cg_numpy(uc.B, uc.CG_STOP)
    meta = ranks[0]["cg_run_cols"]
    assert meta["steps"] == steps and meta["converged"] is None and meta["k"] == 1
    assert meta["allreduces"] == 2 * 2 * steps  # the kernel's two reproducible sums
    assert meta["rr"] == ranks[0]["cg_cols"]["rr"] == rr
    np.testing.assert_array_equal(fields["cg_run_cols"], fields["cg_cols"])
    np.testing.assert_array_equal(fields["cg_run_cols"], want)


def test_explicit_cg_two_reproducible_sums_are_four_all_reduces_per_step():
    mesh = pgas.make_mesh(("y", "x"), shape=(2, 2), devices=4)
    state = cg_state(mesh)
    keys = tuple(state)
    layouts = tuple(v.layout if isinstance(v, pgas.GlobalArray) else None for v in state.values())
    # max_steps 200: the program explicit.run_until runs in the CG tests above
    prog = explicit.state_until_program(uc.cg_kernel, uc.cg_converged, keys, layouts, (1, 1),
                                        None, 1, 200)  # fmt: skip
    leaves = tuple(v.data if isinstance(v, pgas.GlobalArray) else v for v in state.values())
    hlo = prog.lower(leaves).compile().as_text()
    assert hlo.count(" all-reduce(") == 4 and hlo.count(" all-gather(") == 0


@pytest.mark.parametrize("bad, match", [
    (lambda s, reduce: {"x": s["x"][1:-1, 1:-1]}, r"returned \['x'\].*keys \['x', 'rr'\]"),
    (lambda s, reduce: {"x": s["x"], "rr": s["rr"]}, r"shape \(17, 15\) for the field 'x'"),
    (lambda s, reduce: {"x": s["x"][1:-1, 1:-1], "rr": s["x"][1:-1, 1:-1]},
     r"shape \(15, 13\) for the scalar 'rr'"),
])  # fmt: skip
def test_a_state_dict_kernel_returning_the_wrong_keys_or_shapes_is_refused(bad, match):
    from pgas.references import mpi

    mesh = pgas.make_mesh(("y", "x"), shape=(1, 1), devices=1)
    state = {"x": field(uc.B, mesh), "rr": 1.0}
    init = {"x": lambda i, j: uc.B[i, j], "rr": 1.0}
    for call in (lambda: explicit.run_until(bad, dict(state), uc.cg_converged, 3),
                 lambda: explicit.run(bad, dict(state), 3),
                 lambda: mpi.run_until(bad, init, uc.B.shape, "float64", uc.cg_converged, 3, 1,
                                       pgas.Keep()),
                 lambda: mpi.run(bad, init, uc.B.shape, "float64", 3, 1, pgas.Keep())):  # fmt: skip
        with pytest.raises(pgas.PgasError, match=match):
            call()


def test_a_state_dict_with_deep_halos_or_a_bad_leaf_is_refused():
    from pgas.references import mpi

    mesh = pgas.make_mesh(("y", "x"), shape=(1, 1), devices=1)
    with pytest.raises(pgas.PgasError, match="steps_per_exchange = 4 with a state dict"):
        explicit.run_until(uc.cg_kernel, cg_state(mesh), uc.cg_converged, 3,
                           steps_per_exchange=4)  # fmt: skip
    with pytest.raises(pgas.PgasError, match="steps_per_exchange = 4 with a state dict"):
        mpi.run_until(uc.cg_kernel, uc.cg_init(1.0), uc.B.shape, "float64", uc.cg_converged, 3,
                      1, pgas.Keep(), steps_per_exchange=4)  # fmt: skip
    with pytest.raises(pgas.PgasError, match=r"state\['rr'\] is a ndarray of shape \(2,\)"):
        explicit.run_until(uc.cg_kernel, {**cg_state(mesh), "rr": np.ones(2)}, uc.cg_converged, 3)
    with pytest.raises(pgas.PgasError, match=r"init\['rr'\] is a str"):
        mpi.run_until(uc.cg_kernel, uc.cg_init("1"), uc.B.shape, "float64", uc.cg_converged, 3,
                      1, pgas.Keep())  # fmt: skip


def test_run_on_a_state_dict_refuses_what_run_until_refuses():
    """explicit.run and mpi.run: deep halos, a bad leaf, negative steps; mpi.run: what only a
    single field has (snapshots, chunks, packed cells)."""
    from pgas.references import mpi

    mesh = pgas.make_mesh(("y", "x"), shape=(1, 1), devices=1)

    def mpi_run(init: dict, steps: int = 3, **kw):
        return mpi.run(uc.cg_kernel, init, uc.B.shape, "float64", steps, 1, pgas.Keep(), **kw)

    deep = "steps_per_exchange = 4 with a state dict: .* pass steps_per_exchange=1 or 'auto'"
    with pytest.raises(PgasError, match=deep):
        explicit.run(uc.cg_kernel, cg_state(mesh), 3, steps_per_exchange=4)
    with pytest.raises(PgasError, match=deep):
        mpi_run(uc.cg_init(1.0), steps_per_exchange=4)
    with pytest.raises(PgasError, match=r"steps = -1: give a whole number >= 0"):
        explicit.run(uc.cg_kernel, cg_state(mesh), -1)
    with pytest.raises(PgasError, match=r"steps = -1: give a whole number >= 0"):
        mpi_run(uc.cg_init(1.0), -1)
    with pytest.raises(PgasError, match=r"state\['rr'\] is a ndarray of shape \(2,\)"):
        explicit.run(uc.cg_kernel, {**cg_state(mesh), "rr": np.ones(2)}, 3)
    with pytest.raises(PgasError, match=r"init\['rr'\] is a str"):
        mpi_run(uc.cg_init("1"))
    with pytest.raises(PgasError, match="snapshot_every = 1, chunk = 3 with a state dict"):
        mpi_run(uc.cg_init(1.0), snapshot_every=1, chunk=3)


def test_a_state_dict_with_params_on_explicit_and_mpi_in_one_process():
    """kernel(e, p, reduce) and converged(e, p, reduce): a field and a scalar in the state, a
    read-only field in params; both backends against NumPy, bit for bit."""
    from pgas.references import mpi

    u0, w = np.linspace(1.0, 2.0, 9), np.linspace(0.5, 0.9, 9)

    def kern(e, p, reduce):
        u = e["u"][1:-1] * p["w"][1:-1]
        return {"u": u, "total": reduce(u, reproducible=True)}

    def test(e, p, reduce):
        return e["total"] < 1.0

    want, steps = u0.copy(), 0
    while True:
        want, steps = want * w, steps + 1
        if reprosum_numpy(want, want.size) < 1.0:
            break
    mesh = pgas.make_mesh(("x",), devices=3)
    state = {"u": pgas.from_numpy(u0, mesh), "total": 0.0}
    out = explicit.run_until(kern, state, test, 100, params={"w": pgas.from_numpy(w, mesh)})
    assert out.steps_taken == steps and float(out.state["total"]) == reprosum_numpy(want, 9)
    np.testing.assert_array_equal(out.state["u"].to_numpy(), want)
    r = mpi.run_until(kern, {"u": lambda i: u0[i], "total": 0.0}, (9,), "float64", test, 100,
                      1, pgas.Periodic(), params={"w": lambda i: w[i]})  # fmt: skip
    assert r.steps == steps and r.field["total"] == reprosum_numpy(want, 9)
    np.testing.assert_array_equal(r.field["u"], want)


# ---- pgas.mpi.run with params, in the same launch ------------------------------------------
@pytest.mark.parametrize("name", list(uc.RUNS))
def test_mpi_run_with_a_field_param_is_numpy_and_the_jax_backends_bitwise(name):
    fields, ranks = launch(3)
    dims, k, as_dict = uc.RUNS[name]
    assert ranks[0][name]["dims"] == dims
    want = np.zeros_like(F)
    for _ in range(uc.RUN_STEPS):
        new = want.copy()
        new[1:-1, 1:-1] = 0.25 * (want[:-2, 1:-1] + want[2:, 1:-1] + want[1:-1, :-2]
                                  + want[1:-1, 2:] + F[1:-1, 1:-1])  # fmt: skip
        want = new
    np.testing.assert_array_equal(fields[name], want)
    mesh = pgas.make_mesh(("y", "x"), shape=tuple(dims), devices=3)
    params = {"c": 0.25, "f": field(F, mesh)} if as_dict else field(F, mesh)

    def auto_step(u, p):
        u[1:-1, 1:-1] = uc.scaled_kernel(u, p) if as_dict else kernel(u, p)
        return u

    # the case's k on every backend: 1 on rows, "auto" on columns (deep groups, a params dict)
    auto = pgas.run(auto_step, field(np.zeros_like(F), mesh), uc.RUN_STEPS, params=params,
                    steps_per_exchange=k)  # fmt: skip
    np.testing.assert_array_equal(auto.to_numpy(), want)
    expl = explicit.run(uc.scaled_kernel if as_dict else kernel, field(np.zeros_like(F), mesh),
                        uc.RUN_STEPS, region=(slice(1, -1), slice(1, -1)),
                        steps_per_exchange=k, params=params)  # fmt: skip
    np.testing.assert_array_equal(expl.to_numpy(), want)


def test_mpi_run_with_a_field_param_and_a_one_sided_halo():
    fields, _ = launch(3)
    x, v = uc.UPWIND_X.copy(), uc.UPWIND_V
    for _ in range(uc.UPWIND_STEPS):
        x[2:] = x[2:] - v[2:] * (x[1:-1] - x[:-2]) * 0.5 - 0.1 * v[:-2] * (x[2:] - x[1:-1])
    np.testing.assert_array_equal(fields["run_upwind"], x)
    mesh = pgas.make_mesh(("x",), devices=3)

    def step(u, v):
        u[2:] = uc.upwind_kernel(u, v)
        return u

    u0, vf = (pgas.from_numpy(a, mesh, boundary=pgas.Neumann()) for a in (uc.UPWIND_X, v))
    auto = pgas.run(step, u0, uc.UPWIND_STEPS, params=vf)  # XLA's FMA: within an ulp of NumPy
    np.testing.assert_allclose(auto.to_numpy(), x, rtol=1e-15, atol=0)


def test_mpi_run_names_a_bad_param():
    from pgas.references import mpi

    with pytest.raises(PgasError, match=r"params\['c'\] is a str; params of pgas.mpi.run hold"):
        mpi.run(lambda e, p: e[1:-1], lambda i: 0.0 * i, (7,), "float64", 2, 1, pgas.Keep(),
                params={"c": "0.5"})  # fmt: skip


# ---- NaN and infinities: reduce as NumPy, stop where the state goes non-finite ---------------
@pytest.mark.parametrize(
    "devices, shape, dims",
    [(4, (10,), (4,)), (6, (7, 5), (3, 2))],  # uneven: padding beside the last cells
)
def test_explicit_reduce_of_nan_and_inf_in_every_block_position_is_numpys(devices, shape, dims):
    """reduce(x, "max"/"min"/"sum") inside explicit.run_until: NumPy's answer (NaN for a NaN
    anywhere, the block that held it not dropped), one program per mesh (the answer is a
    param); the check is then not finite, and the loop says so. check_every = 1: the one
    step and its check (with "auto", 64, the program holds a loop max_steps = 1 never enters)."""
    names = ("x",) if len(shape) == 1 else ("y", "x")
    mesh = pgas.make_mesh(names, shape=dims, devices=devices)
    for a in uc.nonfinite_cases(shape, dims):
        u = pgas.from_numpy(a, mesh, boundary=pgas.Periodic())
        with pytest.warns(pgas.NonFiniteWarning, match="stopped at step 1"):
            out = explicit.run_until(uc.nonfinite_kernel, u, uc.nonfinite_test, 1, check_every=1,
                                     params=jax.numpy.asarray(uc.numpy_reductions(a)))  # fmt: skip
        assert out.converged and not out.finite, a


def test_explicit_stops_where_the_state_goes_non_finite():
    """A NaN in the rod: explicit.run_until stops at the first check (not "converged"), as
    pgas.run_until does, inside jax.jit too; a state dict's scalar gone inf stops it too."""
    rod = uc.ROD_NAN
    mesh = pgas.make_mesh(("x",), devices=3)

    def solve(u):
        return explicit.run_until(uc.rod_kernel, u, uc.rod_converged, 5000, region=uc.REGION,
                                  check_every=4)  # fmt: skip

    with pytest.warns(pgas.NonFiniteWarning, match="stopped at step 4"):
        out = solve(pgas.from_numpy(rod, mesh, boundary=pgas.Keep()))
    assert (out.steps_taken, out.converged, out.finite) == (4, False, False)
    want = rod.copy()
    for _ in range(4):
        want[2:-2] = 0.5 * (want[1:-3] + want[3:-1])
    np.testing.assert_array_equal(out.state.to_numpy(), want)
    traced = jax.jit(solve)(pgas.from_numpy(rod, mesh, boundary=pgas.Keep()))
    assert (int(traced.steps_taken), bool(traced.finite)) == (4, False)
    state = {"u": pgas.from_numpy(uc.ROD, mesh), "rr": 1.0}
    with pytest.warns(pgas.NonFiniteWarning, match="stopped at step 2"):
        out = explicit.run_until(uc.grow_kernel, state, uc.grow_converged, 100)
    assert (out.steps_taken, out.finite) == (2, False)


def test_explicit_counts_past_int32_exactly(monkeypatch):
    """max_steps = 10**12 converges at the steps of 5000; with the int32 limit lowered to 40
    steps, run_until (one field, a state dict) and run take the steps of one loop."""
    from pgas.loop import counts

    mesh = pgas.make_mesh(("x",), devices=3)
    want, steps = rod_numpy(uc.ROD, 4)

    def solve(max_steps):
        u = pgas.from_numpy(uc.ROD, mesh, boundary=pgas.Keep())
        return explicit.run_until(uc.rod_kernel, u, uc.rod_converged, max_steps,
                                  region=uc.REGION, check_every=4)  # fmt: skip

    for max_steps in (10**12, 5000):
        out = solve(max_steps)
        assert (out.steps_taken, out.converged, out.finite) == (steps, True, True)
        np.testing.assert_array_equal(out.state.to_numpy(), want)
        monkeypatch.setattr(counts, "INT32_STEPS", 40)  # then 5000 steps in pieces of 40
    assert steps > 40
    ran = explicit.run(uc.rod_kernel, pgas.from_numpy(uc.ROD, mesh, boundary=pgas.Keep()), 101,
                       region=uc.REGION)  # fmt: skip
    monkeypatch.undo()
    once = explicit.run(uc.rod_kernel, pgas.from_numpy(uc.ROD, mesh, boundary=pgas.Keep()), 101,
                        region=uc.REGION)  # fmt: skip
    np.testing.assert_array_equal(ran.to_numpy(), once.to_numpy())


@pytest.mark.parametrize("name", list(uc.NONFINITE))
def test_mpi_reduce_of_nan_and_inf_in_every_block_position_is_numpys(name):
    """The same cases on 3 ranks: MPI's max and min keep or drop a NaN by the ranks' order,
    so reduce sends a NaN flag beside the value; every check held and was not finite."""
    _, ranks = launch(3)
    shape, dims = uc.NONFINITE[name]
    held = ranks[0][name]
    assert len(held) == len(uc.nonfinite_cases(shape, dims))
    assert all(r[name] == held for r in ranks)
    assert all(case == [True, False, True] for case in held), held


def test_mpi_stops_where_the_state_goes_non_finite():
    """As explicit.run_until: a NaN in the rod stops at the first check, a state dict's scalar
    gone inf at step 2 (the rod_keep case runs with max_steps = 10**12)."""
    fields, ranks = launch(3)
    meta = ranks[0]["rod_nan"]
    assert (meta["steps"], meta["converged"], meta["finite"]) == (4, False, False)
    assert meta["grow"] == [2, False, False]
    assert len(meta["warned"]) == 2 and all("stopped at step" in w for w in meta["warned"])
    want = uc.ROD_NAN.copy()
    for _ in range(4):
        want[2:-2] = 0.5 * (want[1:-3] + want[3:-1])
    np.testing.assert_array_equal(fields["rod_nan"], want)
