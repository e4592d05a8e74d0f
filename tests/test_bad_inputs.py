"""The bad-input table: every bad input pgas knows, its error type and a phrase of its message.

One row per input, library and command line alike; each message names the parameter, the
value and the fix. The README's troubleshooting section lists the common ones. Rows are
lambdas taking ``tmp`` (a temporary directory); CLI rows run an example's ``main(argv)``
in this process (argparse's exit 2 and its message on stderr).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import load_example

import pgas
from pgas import errors
from pgas.io import checkpoint, dataset
from pgas.references import explicit

H = load_example("heat1d")
L = load_example("life")
PS = load_example("poisson")


def mesh(n=2, names=("x",)):
    return pgas.make_mesh(names, devices=n)


def rod(n=10, devices=2, dtype="float32", **kw):
    return pgas.from_function(lambda i: i * 1.0, (n,), mesh(devices), dtype=dtype, **kw)


def heat(u):
    u[1:-1] = 0.5 * u[1:-1] + 0.25 * (u[:-2] + u[2:])
    return u


class CLI:
    """``main(argv)`` must exit with status 2, the phrase in stderr."""

    def __init__(self, main, *argv):
        self.main, self.argv = main, argv

    def __call__(self, tmp):
        return self.main([a.replace("TMP", str(tmp)) for a in self.argv])


def _notes(tmp):
    (tmp / "notes.nc").write_text("user notes")
    return H.main(["--devices", "2", "--steps", "4", "--out", str(tmp / "notes.nc")])


def _mistyped_restart(tmp):
    # the run that leaves r.zarr and its checkpoints in ck1: k = 1 (auto's 16, more than the
    # chunks of 10 steps: its group would be compiled and never run); the refusal below
    # comes before anything is compiled
    H.main(["--devices", "2", "--steps", "20", "--out", str(tmp / "r.zarr"), "--checkpoint",
            str(tmp / "ck1"), "--checkpoint-every", "10", "--steps-per-exchange", "1",
            "--quiet"])  # fmt: skip
    return H.main(["--devices", "2", "--steps", "40", "--out", str(tmp / "r.zarr"),
                   "--checkpoint", str(tmp / "ck11"), "--restart"])  # fmt: skip


def _wrong_meta(tmp):
    checkpoint.save(tmp / "ck", rod(), step=1, meta={"n": 10})
    return checkpoint.load(tmp / "ck", rod(), meta={"n": 11})


def _compare_set(tmp):
    from pgas.app import cli

    raise SystemExit(cli.main(["compare", "examples/heat1d/heat1d.py:problem", "--set", "n=abc",
                               "--devices", "1", "--steps", "2"]))  # fmt: skip


def _until():
    return (lambda e: e[1:-1], rod(), lambda e, reduce: reduce(e[1:-1]) < 1)


def _half_iterative():
    from pgas.app.problem import Problem

    return Problem("half", (8,), "float32", lambda i: i * 1.0, heat, lambda e: e[1:-1],
                   pgas.Keep(), 1, None, ("x",), converged=lambda u: pgas.max(u) < 1)  # fmt: skip


def _iterative_out(tmp):
    from pgas.app import iterate, runner
    from pgas.app.options import RunOptions

    return runner.run(iterate.demo(), RunOptions(steps=10, devices=1, out=str(tmp / "x.zarr")))


def _mpi_until(max_steps=10, check_every="auto", converged=None):
    from pgas.references import mpi

    return mpi.run_until(lambda e: e[1:-1], lambda i: i * 1.0, (10,), "float64",
                         converged or (lambda e, reduce: reduce(e[1:-1]) < 1), max_steps, 1,
                         pgas.Keep(), check_every=check_every)  # fmt: skip


def _poisson_notes(tmp):
    (tmp / "p.nc").write_text("user notes")
    return PS.main(["--n", "9", "--out", str(tmp / "p.nc")])


def _two_meshes():
    return pgas.run(lambda s: {"a": heat(s["a"]), "b": heat(s["b"])},
                    {"a": rod(devices=2), "b": rod(devices=4)}, 2)  # fmt: skip


def _until_in_x32():
    with jax.enable_x64(False):  # a traced loop counts in int32: 2**31 is refused, not wrapped
        return jax.jit(lambda u: pgas.run_until(heat, u, lambda u: pgas.max(u) < 1, 2**31))(rod())


TABLE = [
    # ---- library: meshes, arrays, views ------------------------------------------------
    ("mesh axis name twice", lambda t: pgas.make_mesh(("x", "x"), devices=2),
     errors.MeshError, "axis"),
    ("more devices than exist", lambda t: pgas.make_mesh(("x",), devices=64),
     errors.DeviceCountError, "64"),
    ("unsupported dtype", lambda t: pgas.zeros((4,), mesh(), dtype="complex64"),
     errors.LayoutError, "dtype"),
    ("slice with a negative step", lambda t: rod()[::-2], errors.IndexingError, "step"),
    ("traced slice bound", lambda t: rod()[np.array([1, 2])], errors.IndexingError, ""),
    ("views of different shapes", lambda t: rod()[1:] + rod()[2:],
     errors.ShapeMismatchError, "equal shapes"),
    ("bool of a comparison", lambda t: bool(rod() > 5), errors.ConversionError, "pgas.any"),
    ("bool of a view", lambda t: bool(rod()[1:-1]), errors.ConversionError, "pgas.all"),
    ("int of a field", lambda t: int(rod()), errors.ConversionError, "only one cell"),
    ("float of an expression", lambda t: float(rod()[1:] + 1), errors.ConversionError,
     "reduce it"),
    ("NumPy array of an expression", lambda t: np.asarray(rod()[1:] * 2),
     errors.ConversionError, "to_array"),
    ("reduction of a non-array", lambda t: pgas.sum(np.ones(3)), errors.LayoutError,
     "GlobalArray"),
    # ---- library: the time loop --------------------------------------------------------
    ("steps negative", lambda t: pgas.run(heat, rod(), -1), errors.PgasError, "steps = -1"),
    ("steps a bool", lambda t: pgas.run(heat, rod(), True), errors.PgasError, "not a bool"),
    ("steps a float", lambda t: pgas.run(heat, rod(), 5.0), errors.PgasError, "steps = 5.0"),
    ("chunk zero", lambda t: pgas.run(heat, rod(), 4, chunk=0), errors.PgasError, "chunk = 0"),
    ("snapshot_every not dividing", lambda t: pgas.run(heat, rod(), 10, snapshot_every=3),
     errors.PgasError, "does not divide"),
    ("steps_per_exchange zero", lambda t: pgas.run(heat, rod(), 4, steps_per_exchange=0),
     errors.PgasError, "'auto'"),
    ("steps_per_exchange a bool", lambda t: pgas.run(heat, rod(), 4, steps_per_exchange=True),
     errors.PgasError, "not a bool"),
    ("run_until max_steps zero", lambda t: explicit.run_until(*_until(), 0), errors.PgasError,
     "max_steps = 0: give a whole number >= 1"),
    ("run_until max_steps a float", lambda t: explicit.run_until(*_until(), 10.5),
     errors.PgasError, "max_steps = 10.5"),
    ("run_until check_every zero", lambda t: explicit.run_until(*_until(), 10, check_every=0),
     errors.PgasError, "check_every = 0: give a whole number >= 1, or 'auto'"),
    ("run_until check_every not a multiple of k",
     lambda t: explicit.run_until(*_until(), 10, check_every=6, steps_per_exchange=4),
     errors.PgasError, "pick check_every = 8"),
    ("iterative problem without its local test", lambda t: _half_iterative(),
     errors.PgasError, "give converged (the global-view test) and local_converged"),
    ("iterative problem with --out", lambda t: _iterative_out(t), errors.PgasError,
     "writes no snapshots or checkpoints; leave --out out"),
    ("run_until local test without reduce",
     lambda t: explicit.run_until(_until()[0], rod(), lambda e, reduce: e[1:-1].max() < 1, 10),
     errors.PgasError, "converged made no reduce(...) call"),
    ("run_until local test not a scalar",
     lambda t: explicit.run_until(_until()[0], rod(), lambda e, reduce: reduce(e[1:-1]) + e, 10),
     errors.PgasError, "it must return a scalar boolean"),
    ("mpi.run_until local test without reduce",
     lambda t: _mpi_until(converged=lambda e, reduce: e[1:-1].max() < 1), errors.PgasError,
     "converged made no reduce(...) call"),
    ("mpi.run_until max_steps zero", lambda t: _mpi_until(max_steps=0), errors.PgasError,
     "max_steps = 0: give a whole number >= 1"),
    ("mpi.run_until check_every a string", lambda t: _mpi_until(check_every="often"),
     errors.PgasError, "check_every = 'often'"),
    ("steps None", lambda t: pgas.run(heat, rod(), None), errors.PgasError,
     "steps = None: give the number of steps to run"),
    ("step returns another structure", lambda t: pgas.run(lambda u: (u, u), rod(), 3),
     errors.PgasError, "the step returned (GlobalArray[10] float32, GlobalArray[10] float32) "
                       "for the state GlobalArray[10] float32"),
    ("step returns a scalar of another dtype",
     lambda t: pgas.run(lambda s: (heat(s[0]), s[1] + 0.5), (rod(), jnp.int32(0)), 3),
     errors.PgasError, "the scalar state[1] is int32[], the step returned float"),
    ("run_until step drops a field of the state",
     lambda t: pgas.run_until(lambda s: {"u": heat(s["u"])}, {"u": rod(), "v": rod()},
                              lambda s: pgas.max(s["u"]) < 1, 10),
     errors.PgasError, "(another structure)"),
    ("run_until converged returns an expression",
     lambda t: pgas.run_until(heat, rod(), lambda u: u[1:-1] < 1, 10), errors.PgasError,
     "converged returned a pgas expression of views of shape (8,)"),
    ("run_until converged returns the field",
     lambda t: pgas.run_until(heat, rod(), lambda u: u, 10), errors.PgasError,
     "converged returned a pgas.GlobalArray of shape (10,)"),
    ("run_until converged uses if on a reduction",
     lambda t: pgas.run_until(heat, rod(), lambda u: True if pgas.max(u) < 1 else False, 10),
     errors.PgasError, "tests combined with & | ~"),
    ("explicit.run_until converged uses and",
     lambda t: explicit.run_until(_until()[0], rod(), lambda e, reduce: reduce(e[1:-1]) < 1 and
                                  reduce(e[1:-1], "max") < 1, 10),
     errors.PgasError, "converged used Python `if`, `and`, `or` or `not` on a reduction"),
    ("run_until max_steps past 2**31 - 1 in a trace without x64", lambda t: _until_in_x32(),
     errors.PgasError, "max_steps = 2147483648 inside a trace"),
    # ---- library: results, snapshots, checkpoints ------------------------------------
    ("result suffix", lambda t: dataset.check_writable(t / "r.csv"), dataset.OutputPathError,
     ".nc"),
    ("result directory missing", lambda t: dataset.check_writable(t / "no" / "r.nc"),
     dataset.OutputPathError, "mkdir -p"),
    ("result exists", lambda t: [dataset.write_dataset(dataset.to_dataset(np.ones((1, 2)), [0]),
                                                       t / "r.nc") for _ in range(2)],
     dataset.OutputPathError, "overwrite=True"),
    ("fields without a snapshot axis", lambda t: dataset.to_dataset(np.ones(3), [0]),
     dataset.DatasetInputError, "field[None]"),
    ("checkpoint of another problem", _wrong_meta, checkpoint.CheckpointMismatchError,
     "another problem"),
    ("checkpoint missing", lambda t: checkpoint.load(t / "none", rod(), meta={}),
     checkpoint.CorruptCheckpointError, "no checkpoint"),
    ("checkpoint step negative", lambda t: checkpoint.save(t / "ck", rod(), step=-1, meta={}),
     checkpoint.CheckpointError, "step = -1"),
    # ---- command line ------------------------------------------------------------------
    ("--steps not a number", CLI(H.main, "--steps", "abc"), SystemExit, "not a whole number"),
    ("--n zero", CLI(H.main, "--n", "0"), SystemExit, "positive"),
    ("--dtype unknown", CLI(H.main, "--dtype", "float16"), SystemExit, "float32"),
    ("--backend unknown", CLI(H.main, "--backend", "cuda"), SystemExit, "explicit"),
    ("--out suffix", CLI(H.main, "--out", "TMP/h.csv"), SystemExit, ".zarr"),
    ("--out directory missing", CLI(H.main, "--out", "TMP/no/h.nc"), SystemExit, "mkdir"),
    ("--out exists", _notes, SystemExit, "--overwrite"),
    ("--restart, mistyped checkpoint", _mistyped_restart, SystemExit, "--restart refused"),
    ("--snapshot-every not dividing", CLI(H.main, "--steps", "10", "--snapshot-every", "3"),
     SystemExit, "--steps 12"),
    ("--devices beyond the cells", CLI(H.main, "--n", "11", "--devices", "5000"), SystemExit,
     "use at most 11 devices"),
    ("--plot format", CLI(L.main, "--plot", "TMP/b.jpg"), SystemExit, ".png or .gif"),
    ("--size malformed", CLI(L.main, "--size", "abc"), SystemExit, "HxW"),
    ("--backend mpi without mpiexec", CLI(H.main, "--backend", "mpi"), SystemExit, "mpiexec"),
    ("pgas compare --set of the wrong type", _compare_set, SystemExit, "takes a whole number"),
    ("poisson --backend explicit with --plot", CLI(PS.main, "--backend", "explicit", "--plot",
                                                    "TMP/p.png"), SystemExit, "draws no pictures"),
    # ---- pgas's own errors where JAX's or NumPy's came (issue 32) ----------------------
    ("state fields on meshes of different devices", lambda t: _two_meshes(), errors.LayoutError,
     "make every field on one mesh"),
    ("make_mesh devices zero", lambda t: pgas.make_mesh(devices=0), errors.DeviceCountError,
     "devices = 0: give a whole number >= 1"),
    ("Dirichlet value a string", lambda t: pgas.Dirichlet("a"), errors.LayoutError,
     "Dirichlet value = 'a' (of type str): give one real number"),
    ("Dirichlet value None", lambda t: pgas.Dirichlet(None), errors.LayoutError,
     "Dirichlet value = None"),
    ("Dirichlet value an array", lambda t: pgas.Dirichlet(np.ones(3)), errors.LayoutError,
     "an array of shape (3,)"),
    ("from_function of the wrong shape",
     lambda t: pgas.from_function(lambda i: np.ones(3), (10,), mesh()),
     errors.ShapeMismatchError, "fn returned values of shape (3,) for a block of cells of shape"),
    ("comm_report of a NumPy state", lambda t: pgas.comm_report(heat, np.zeros(5)),
     errors.PgasError, "wrap a field with pgas.from_numpy"),
    ("NumPy ufunc of a view", lambda t: np.sin(rod()[1:-1]), errors.ConversionError,
     "pgas.apply(jnp.sin"),
    ("poisson --out exists", _poisson_notes, SystemExit, "pass --overwrite to replace it"),
    ("poisson --out with several --order sizes",
     CLI(PS.main, "--order", "9", "17", "--out", "TMP/p.nc"), SystemExit,
     "--out writes the fields of one grid"),
]  # fmt: skip


@pytest.mark.parametrize("make, kind, phrase", [row[1:] for row in TABLE],
                         ids=[row[0] for row in TABLE])  # fmt: skip
def test_bad_input_names_the_fix(make, kind, phrase, tmp_path, capsys):
    with pytest.raises(kind) as caught:
        make(tmp_path)
    if kind is SystemExit:
        assert caught.value.code == 2
        message = capsys.readouterr().err
    else:
        message = str(caught.value)
    assert phrase in message, message


def test_the_table_covers_the_cases_of_issue_21():
    names = {row[0] for row in TABLE}
    assert {"bool of a comparison", "--out exists", "--restart, mistyped checkpoint",
            "steps a bool", "--devices beyond the cells"} <= names  # fmt: skip
    assert len(TABLE) >= 35
