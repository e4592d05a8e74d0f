"""How a loop lays out its iterations (pgas.loop.iterations): the loop primitive a count and
``scan`` give, rematerialised segments (the values and gradients of the plain loop, one
segment stored at a time), masks tied to the counter or not."""

import jax
import jax.numpy as jnp
import numpy as np

from pgas.loop.iterations import fori, segments, tie


def _loops(fn, *args) -> list[str]:
    """The loop primitives of ``fn``'s jaxpr, outermost first."""
    return [e.primitive.name for e in jax.make_jaxpr(fn)(*args).jaxpr.eqns
            if e.primitive.name in ("scan", "while")]  # fmt: skip


def test_fori_is_a_scan_for_a_static_count_else_a_while_loop():
    step = lambda c, i: 0.5 * c + i  # noqa: E731
    want = 1.0
    for i in range(2, 7):
        want = 0.5 * want + i
    for scan in (True, False):
        assert float(fori(2, 7, step, 1.0, scan)) == want
    assert _loops(lambda c: fori(2, 7, step, c), 1.0) == ["scan"]  # reverse mode's
    assert _loops(lambda c: fori(2, 7, step, c, scan=False), 1.0) == ["while"]
    assert _loops(lambda c, n: fori(2, n, step, c), 1.0, 7) == ["while"]  # a runtime count
    assert float(jax.jit(lambda c, n: fori(2, n, step, c))(1.0, 7)) == want
    assert fori(5, 5, step, "carry") == "carry" and fori(6, 5, step, "carry") == "carry"


def test_segments_give_the_plain_loops_values_and_gradient():
    """n = 11 in segments of 3: 9 iterations under jax.checkpoint, 2 left to the caller; the
    value and the derivative are those of the 11 iterations run plainly."""
    step = lambda c, i: jnp.sin(c) + 0.1 * i  # noqa: E731

    def cut(segment):
        def loop(x):
            c, done = segments(step, 11, x, segment)
            return fori(done, 11, step, c)

        return loop

    plain = lambda x: fori(0, 11, step, x)  # noqa: E731
    for segment in (3, 5, None):
        np.testing.assert_array_equal(cut(segment)(0.3), plain(0.3))
        np.testing.assert_allclose(jax.grad(cut(segment))(0.3), jax.grad(plain)(0.3),
                                   rtol=1e-15)  # fmt: skip
    assert segments(step, 11, 0.3, 3)[1] == 9
    grads = str(jax.make_jaxpr(jax.grad(cut(3)))(0.3))
    assert "checkpoint" in grads or "remat" in grads
    whole = str(jax.make_jaxpr(jax.grad(cut(None)))(0.3))
    assert "checkpoint" not in whole and "remat" not in whole


def test_no_segments_for_a_short_or_a_runtime_count():
    step = lambda c, i: c + i  # noqa: E731
    assert segments(step, 5, 1.0, 3) == (1.0, 0)  # fewer than two segments
    assert segments(step, 6, 1.0, None) == (1.0, 0)
    n = jnp.int32(12)  # not a Python int: its segments are unknown
    assert segments(step, n, 1.0, 3) == (1.0, 0)


def test_segments_hand_on_one_part_of_the_carry():
    """``fresh`` builds the carry a segment starts from, ``hand`` what it hands on: the
    double-buffered loop's buffer and spare."""
    step = lambda pair, i: (pair[1] + pair[0], pair[0])  # noqa: E731
    fresh = lambda x: (x, jnp.zeros_like(x))  # noqa: E731
    c, done = segments(step, 8, 1.0, 2, fresh=fresh, hand=lambda p: p[0])
    want = 1.0
    for _ in range(4):  # each segment: (x, 0) -> (x, x) -> (2x, x), handing on 2x
        want *= 2
    assert done == 8 and float(c) == want


def test_tie_passes_the_counter_or_drops_it():
    group = lambda state, counter=None: (state, counter)  # noqa: E731
    assert tie(group, True) is group
    assert tie(group, True)("s", 3) == ("s", 3)
    assert tie(group, False)("s", 3) == ("s", None)
