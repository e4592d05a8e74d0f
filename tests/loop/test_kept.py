"""What pgas.run keeps for its caller: a copy of the state to consume, and the state at a
failure attached to the error."""

import jax.numpy as jnp
import numpy as np

import pgas
from pgas.loop.kept import attach, entered


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
