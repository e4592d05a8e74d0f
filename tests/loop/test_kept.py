"""What pgas.run keeps for its caller: a copy of the state to consume, and the state at a
failure attached to the error; what a loop consumes holds each buffer once."""

import jax.numpy as jnp
import numpy as np
import pytest

import pgas
from pgas.loop.kept import attach, distinct, entered


def _field():
    return pgas.from_numpy(np.arange(6.0), pgas.make_mesh(("x",), devices=2))


def test_entered_copies_a_state_the_loop_would_otherwise_consume():
    u, s = _field(), jnp.float64(2.5)
    v, t = entered(lambda state: state, (u, s))
    assert v.data is not u.data and t is not s and v.layout is u.layout
    np.testing.assert_array_equal(v.to_numpy(), np.arange(6.0))
    v.data.delete()  # the loop consumed its copy (donated buffers)
    np.testing.assert_array_equal(u.to_numpy(), np.arange(6.0))  # the caller's is intact
    assert float(s) == 2.5


def test_entered_takes_a_state_the_loop_made_as_it_is():
    u = _field()
    made = u.copy()
    assert entered(lambda state: made, u) is made  # entering copied already: no second copy


def test_attach_adds_the_steps_done_and_the_state_after_them():
    u = _field()
    err = RuntimeError("boom")
    attach(err, lambda state: state.to_numpy() + 1, u, 4, 10)
    assert err.pgas_step == 4
    np.testing.assert_array_equal(err.pgas_state, np.arange(6.0) + 1)
    assert err.__notes__ == [
        "pgas.run stopped after 4 of 10 steps (.pgas_step); the state after step 4 is its "
        ".pgas_state"
    ]


def test_attach_says_the_state_is_lost_where_the_buffers_were_consumed():
    u = _field()
    u.data.delete()
    err = ValueError("chunk failed")
    attach(err, lambda state: state, u, 0, 5)
    assert err.pgas_step == 0 and err.pgas_state is None
    assert err.__notes__[0].endswith("is lost (a failed chunk consumed it)")

    def broken(state):
        raise KeyError("leave failed too")

    again = ValueError("callback failed")
    attach(again, broken, _field(), 2, 5)  # the original error is what propagates
    assert again.pgas_state is None and "lost" in again.__notes__[0]


def test_distinct_copies_a_repeated_buffer_and_one_the_call_also_reads():
    u, s = _field(), jnp.float64(2.5)
    r, p, a, b = distinct((u, u.copy(), s, s))  # u.copy() shares u's buffer
    assert r is u and p.data is not u.data and a is s and b is not s
    np.testing.assert_array_equal(p.to_numpy(), np.arange(6.0))
    assert float(b) == 2.5
    kept = {"k": u, "c": 1.0}
    assert distinct(u, kept).data is not u.data  # read by the same call: copied
    v = _field()
    assert distinct([v, 3.0], kept)[0] is v  # another buffer, a Python number: as they are


def _halve_and_count(s):
    return {"r": 0.5 * s["r"], "p": s["p"] + 1.0}


def test_run_until_donating_a_state_that_holds_one_array_twice():
    """``pgas.run_until(..., donate=True)`` on ``{"r": b, "p": b}`` made XLA refuse to donate
    one buffer twice, and the process crash; the repeat is copied first."""
    x0 = np.arange(6.0)
    b = _field()
    with pytest.warns(pgas.NonConvergenceWarning):
        out = pgas.run_until(_halve_and_count, {"r": b, "p": b},
                             lambda s: pgas.sum(s["r"]) < -1, 3, donate=True)  # fmt: skip
    np.testing.assert_array_equal(out.state["r"].to_numpy(), x0 / 8)
    np.testing.assert_array_equal(out.state["p"].to_numpy(), x0 + 3)


def test_run_donating_a_state_that_holds_one_array_twice():
    """``pgas.run(..., donate=True)`` on ``{"r": b, "p": b}``: the repeat is copied first (XLA
    refused to donate one buffer twice, and the process crashed)."""
    x0 = np.arange(6.0)
    b = _field()
    out = pgas.run(_halve_and_count, {"r": b, "p": b}, 3, donate=True)
    np.testing.assert_array_equal(out["r"].to_numpy(), x0 / 8)
    np.testing.assert_array_equal(out["p"].to_numpy(), x0 + 3)
