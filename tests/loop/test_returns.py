"""What a step returns against the state it got: the message names both, and the difference."""

import jax.numpy as jnp
import numpy as np

import pgas
from pgas.loop.returns import explain, mismatch


def test_mismatch_names_what_the_step_returned_against_what_it_got():
    mesh = pgas.make_mesh(devices=1)
    u, v = pgas.from_numpy(np.zeros(6), mesh), pgas.from_numpy(np.zeros(4), mesh)
    assert mismatch(lambda u: u, u) is None
    assert mismatch(lambda u: u.astype("float32"), u) is None  # a field's dtype is cast back
    assert mismatch(lambda s, p: s, u, 2.0) is None  # called step(state, params)
    cases = [
        (lambda u: (u, u), u, "(GlobalArray[6] float64, GlobalArray[6] float64) for the state "
                              "GlobalArray[6] float64 (another structure)"),
        (lambda s: {"u": s["u"]}, {"u": u, "v": u}, "(another structure)"),
        (lambda u: v, u, "(the field state has shape (6,), the step returned (4,))"),
        (lambda s: (s[0], s[1] + 0.5), (u, jnp.int32(0)),
         "(the scalar state[1] is int32[], the step returned float64[])"),
        (lambda s: (s[0], jnp.zeros(2)), (u, jnp.float64(0)),
         "(the scalar state[1] is float64[], the step returned float64[2])"),
        (lambda s: (s[1], s[0]), (u, jnp.float64(0)),
         "(state[0] is GlobalArray[6] float64, the step returned float64[])"),
    ]  # fmt: skip
    for step, state, phrase in cases:
        message = mismatch(step, state)
        assert message is not None and phrase in message, message
        assert "return the state updated" in message


def test_explain_raises_only_for_a_step_that_returns_another_state():
    mesh = pgas.make_mesh(devices=1)
    u = pgas.from_numpy(np.zeros(6), mesh)
    explain(TypeError("carry differs"), lambda u: u, u)  # the step is fine: JAX's error stays
    explain(KeyError("x"), lambda u: (u, u), u)  # not a loop's error
    explain(pgas.PgasError("already clear"), lambda u: (u, u), u)
    try:
        explain(TypeError("carry differs"), lambda u: (u, u), u)
    except pgas.PgasError as err:
        assert "another structure" in str(err) and isinstance(err.__cause__, TypeError)
    else:
        raise AssertionError("no PgasError")
