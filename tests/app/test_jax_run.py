"""A run on a JAX backend, phase by phase (pgas.app.jax_run)."""

import numpy as np
import pytest
from helpers import heat_problem, heat_reference

from pgas.app import jax_run, runner
from pgas.app.backends import get
from pgas.app.options import RunOptions
from pgas.app.problem import checksum
from pgas.app.state import build, mesh_for


@pytest.mark.parametrize("backend", ["auto", "explicit"])
def test_memory_the_compiler_freed_is_given_back_before_the_run(backend, monkeypatch):
    """The runner trims glibc's heaps once the comm report and once the warm-up have compiled
    (pgas.runtime.memory.trim_freed_memory), and the result is the same. k = 1 (auto's 16,
    more than the 5 steps, would compile a group never run)."""
    calls = []
    monkeypatch.setattr(jax_run, "trim_freed_memory", lambda: calls.append(1) or True)
    opts = RunOptions(steps=5, devices=2, backend=backend, steps_per_exchange=1)
    r = runner.run(heat_problem(), opts)
    assert len(calls) == 2
    assert r.checksum == checksum(heat_reference(203, 5))


def test_timed_warms_up_on_the_state_then_runs_a_fresh_one():
    """The warm-up consumes the state handed over (held is emptied); the timed run starts
    from again(), and a failure reaches on_error before it propagates."""
    p, backend = heat_problem(), get("auto")
    mesh = mesh_for(p, 2)
    plan = backend.plan(p, build(p, mesh), 1)
    held, fresh = [build(p, mesh)], []

    def again():
        fresh.append(1)
        return build(p, mesh)

    u, seconds, waited = jax_run.timed(p, backend, plan, held, 4, None, None, again, None)
    assert held == [] and fresh == [1] and seconds > 0 and waited == 0.0
    np.testing.assert_array_equal(u.to_numpy(), heat_reference(203, 4))
    seen = []

    def fail(done, state):
        raise RuntimeError("stop")

    with pytest.raises(RuntimeError, match="stop"):
        jax_run.timed(p, backend, plan, [build(p, mesh)], 4, 2, fail, again, None, seen.append)
    assert [str(e) for e in seen] == ["stop"]
