"""Iterative problems through the runner: the steps taken, the test, the field, the refusals."""

import contextlib
import dataclasses

import numpy as np
import pytest

from pgas.app import iterate, runner
from pgas.app.options import RunOptions
from pgas.errors import PgasError
from pgas.loop.until import CHECK_COST_STEPS, NonConvergenceWarning


def _jacobi_numpy(n: int, max_steps: int, every: int) -> tuple[np.ndarray, int, bool]:
    """The demo in NumPy: Jacobi from a spike at cell 1, tested every ``every`` steps."""
    u = 8.0 * (np.arange(n) == 1).astype(np.float32)
    for step in range(1, max_steps + 1):
        u[1:-1] = np.float32(0.5) * (u[:-2] + u[2:])
        if step % every == 0 and np.abs(u).max() < 1.0:
            return u, step, True
    return u, max_steps, False


def test_check_every_is_the_problems_or_one_for_every_backend():
    assert iterate.check_every(iterate.demo()) == 2
    auto = dataclasses.replace(iterate.demo(), check_every="auto")
    assert iterate.check_every(auto) == iterate.CHECK_EVERY == CHECK_COST_STEPS


@pytest.mark.parametrize(("n", "max_steps"), [(4, 100), (10, 6)])
def test_steps_taken_and_the_field_are_those_of_numpy(n, max_steps):
    want, steps, converged = _jacobi_numpy(n, max_steps, every=2)
    said = contextlib.nullcontext() if converged else pytest.warns(NonConvergenceWarning)
    with said:
        r = runner.run(iterate.demo(n), RunOptions(steps=max_steps, devices=2), gather=True)
    assert (r.steps, r.converged, r.check_every) == (steps, converged, 2)
    assert (steps, converged) == ((4, True) if n == 4 else (6, False))  # the closed form
    np.testing.assert_array_equal(r.field, want)


def test_snapshots_checkpoints_and_restarts_are_refused():
    with pytest.raises(PgasError, match="--restart True with the iterative problem 'jacobi-"):
        runner.run(iterate.demo(), RunOptions(steps=10, devices=1, restart=True))
