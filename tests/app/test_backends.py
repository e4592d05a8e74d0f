"""Backends: one plan per run, made once; the k in the result is the k that ran."""

import itertools
from pathlib import Path

import numpy as np
import pytest
from helpers import life_numpy

import pgas
from pgas.app import backends, runner
from pgas.app.backends import Auto, Backend, Explicit, Mpi, get
from pgas.app.options import RunOptions
from pgas.app.problem import load_problem
from pgas.app.results import format_table, summary_line
from pgas.errors import PgasError
from pgas.loop import timeloop

PROBLEMS = str(Path(__file__).resolve().parents[1] / "problems.py")


def life_problem(h=300, w=300):  # one block of 90000 cells: k = 4 double-buffered, 1 single
    return load_problem(f"{PROBLEMS}:life", h=h, w=w)


def test_backends_by_name_and_their_interface():
    assert list(backends.BACKENDS) == ["auto", "explicit", "mpi"]
    assert [type(get(n)) for n in backends.BACKENDS] == [Auto, Explicit, Mpi]
    assert [b.launched for b in backends.BACKENDS.values()] == [False, False, True]
    mine = Auto()
    assert get(mine) is mine
    with pytest.raises(PgasError, match="backend = 'gpu' is unknown; choose one of auto"):
        get("gpu")
    with pytest.raises(TypeError):
        Backend()  # abstract: a backend must plan and run


@pytest.fixture
def ran(monkeypatch):
    """The (k, double) of every loop pgas.run compiles: what actually ran."""
    seen = []
    program = timeloop.program

    def spy(step, k, widths, every, observe, double=False, *rest):
        seen.append((k, double))
        return program(step, k, widths, every, observe, double, *rest)

    monkeypatch.setattr(timeloop, "program", spy)
    return seen


CASES = list(itertools.product([None, 2], [False, True], [False, True], [None, 2]))


@pytest.mark.parametrize("every,out,plot,ck", CASES, ids=lambda v: str(v))
def test_the_k_in_the_result_is_the_k_that_ran(every, out, plot, ck, ran, tmp_path):
    """Every combination of snapshots, output, plot and checkpoints (callbacks or none):
    the plan the runner reports is the one pgas.run compiled, in the warm-up and the run."""
    opts = RunOptions(
        steps=4, devices=1, snapshot_every=every, quiet=True,
        out=str(tmp_path / "run.zarr") if out else None,
        plot=(str(tmp_path / "b.png"),) if plot else (),
        checkpoint=str(tmp_path / "ck") if ck else None, checkpoint_every=ck,
    )  # fmt: skip
    r = runner.run(life_problem(), opts, gather=True)
    # a run that hands its state over between chunks runs double-buffered too (the callback
    # gets a copy in the user's form): the same plan with or without callbacks
    assert set(ran) == {(r.steps_per_exchange, True)}
    assert r.steps_per_exchange == 4  # the model: 2-D, large block, double-buffered
    g0 = life_problem().init(*np.indices((300, 300)))
    np.testing.assert_array_equal(r.field, life_numpy(g0.astype(np.uint8), 4))


def test_snapshot_every_without_output_runs_double_buffered(ran):
    """The bug this design fixes: snapshots with nowhere to go are not taken, so the run
    has no callback and runs (and reports) the double-buffered k."""
    r = runner.run(life_problem(), RunOptions(steps=4, devices=1, snapshot_every=2, quiet=True))
    assert r.steps_per_exchange == 4 and set(ran) == {(4, True)}


def test_a_backend_object_runs_what_it_planned(ran):
    calls = []

    class Recording(Auto):
        name = "recording"

        def run(self, problem, u, steps, plan, *, chunk=None, callback=None):
            calls.append((steps, plan.steps_per_exchange, chunk))
            return super().run(problem, u, steps, plan, chunk=chunk, callback=callback)

    opts = RunOptions(backend=Recording(), steps=6, devices=2, steps_per_exchange=2)
    r = runner.run(load_problem(f"{PROBLEMS}:heat", n=203), opts)
    line = summary_line(dict(r.to_dict(), example="heat", dtype="float32"))
    assert "6 steps on recording (2 cpu device(s)" in line and format_table([r])
    assert calls == [(2, 2, None), (6, 2, None)]  # warm-up (same parity), run
    assert r.backend == "recording" and r.steps_per_exchange == 2 and set(ran) == {(2, True)}


def test_explicit_and_mpi_plans_are_what_their_runs_use():
    u = pgas.from_numpy(np.zeros(11), pgas.make_mesh(devices=1))
    p = pgas.explicit.plan(u, 1, 16)
    assert (p.steps_per_exchange, p.halo, p.double) == (11, (11,), False)
    assert p.note.startswith("lowered from 16 to 11")
    m = pgas.mpi.plan((1001,), 1, 4, "auto")
    assert (m.steps_per_exchange, m.halo, m.platform, m.double) == (16, (16,), "cpu", False)
    assert pgas.mpi.plan((20, 30), 1, (2, 3), 64).steps_per_exchange == 10


def test_a_double_buffered_plan_hands_a_callback_the_state_in_the_users_form():
    """The loop keeps its two framed buffers between chunks; the callback gets a copy of the
    cells in the user's form (no ghost cells), bitwise NumPy's after every chunk."""
    x = np.random.default_rng(5).random(2**17).astype(np.float32)
    u = pgas.from_numpy(x, pgas.make_mesh(devices=1))

    def heat(u):
        u[1:-1] = 0.5 * u[1:-1] + 0.25 * (u[:-2] + u[2:])
        return u

    plan = pgas.plan.plan(heat, u, 4)
    assert plan.double
    seen = {}

    def callback(done, s):
        seen[done] = (s.data.shape, s.to_numpy())

    out = pgas.run(heat, u, 12, chunk=6, plan=plan, callback=callback)
    want = x.copy()
    for step in range(1, 13):
        want[1:-1] = 0.5 * want[1:-1] + 0.25 * (want[:-2] + want[2:])
        if step in (6, 12):
            shape, got = seen[step]
            assert shape == x.shape and got.tobytes() == want.tobytes()  # no ghost cells
    assert sorted(seen) == [6, 12] and out.to_numpy().tobytes() == want.tobytes()
