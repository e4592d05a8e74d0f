"""plan(): the reach of a step, the steps per exchange it compiles with, the cache.

The model behind "auto" is tested in test_choice.py, the measuring of the reach in
test_probe.py."""

import numpy as np
import pytest
from stencils import heat, life_torus

import pgas
from pgas.loop.plan import plan


def test_reach_adds_up_over_dependent_assignments():
    u = pgas.zeros((64,), pgas.make_mesh(("x",), devices=2))

    def twice(u):
        u[1:-1] = 0.5 * (u[:-2] + u[2:])
        u[1:-1] = 0.5 * (u[:-2] + u[2:])  # reads the first result: a reach of 2
        return u

    p = plan(twice, u, 3)
    assert p.widths == (2,) and p.halo == (6,) and p.steps_per_exchange == 3
    assert plan(heat, u, 1).widths == (1,) and plan(twice, u, 1) is plan(twice, u, 1)  # cached


def test_life_reaches_both_axes():
    g = pgas.zeros((32, 32), pgas.make_mesh(("y", "x"), shape=(2, 2), devices=4), dtype="uint8")
    p = plan(life_torus, g, 2)
    assert p.widths == (1, 1) and p.halo == (2, 2) and p.reads == 9


@pytest.mark.parametrize("bad", [0, -1, 2.5, True, "fast"])
def test_bad_requests(bad):
    with pytest.raises(pgas.PgasError, match="steps_per_exchange"):
        plan(heat, pgas.zeros((8,), pgas.make_mesh(devices=1)), bad)


def test_plan_needs_global_arrays():
    with pytest.raises(pgas.PgasError, match="no pgas.GlobalArray"):
        plan(heat, {"u": np.zeros(3)})
