"""plan(): the reach of a step, the steps per exchange and the model behind "auto"."""

import numpy as np
import pytest
from stencils import heat, life_torus

import pgas
from pgas.loop.plan import Choice, choose_steps_per_exchange, model, plan


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


def test_model_and_choices():
    assert model((2**22,), (1,), "cpu") == 16 and model((4096, 4096), (1, 1), "cpu") == 1
    assert model((4096, 4096), (1, 1), "cpu", double=True) == 4
    assert model((64, 64), (1, 1), "cpu") == 8 and model((2**25,), (1,), "gpu") == 2


def test_gpu_model_amortises_the_iteration():
    """On a GPU small blocks run many steps per loop iteration; large ones weigh bytes."""
    assert model((1001,), (1,), "gpu") == 32 and model((1024, 1024), (1, 1), "gpu") == 16
    assert model((8192, 8192), (1, 1), "gpu") == 16 and model((2**26,), (1,), "gpu") == 2
    assert model((2**24,), (1,), "gpu") == 16
    assert choose_steps_per_exchange("auto", (20,), (1,), "gpu").steps_per_exchange == 20


def test_choices():
    assert choose_steps_per_exchange("auto", (10,), (1,)) == Choice(10, "auto")
    assert choose_steps_per_exchange("auto", (10, 10), (0, 0)).steps_per_exchange == 1
    lowered = choose_steps_per_exchange(12, (10,), (2,))
    assert lowered.steps_per_exchange == 5 and "lowered from 12 to 5" in lowered.note


@pytest.mark.parametrize("bad", [0, -1, 2.5, True, "fast"])
def test_bad_requests(bad):
    with pytest.raises(pgas.PgasError, match="steps_per_exchange"):
        choose_steps_per_exchange(bad, (10,), (1,))
    with pytest.raises(pgas.PgasError, match="steps_per_exchange"):
        plan(heat, pgas.zeros((8,), pgas.make_mesh(devices=1)), bad)


def test_plan_needs_global_arrays():
    with pytest.raises(pgas.PgasError, match="no pgas.GlobalArray"):
        plan(heat, {"u": np.zeros(3)})
