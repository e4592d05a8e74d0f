"""Step counts past int32: pieces of a long run, the counter's dtype, the refusal without x64."""

import jax
import jax.numpy as jnp
import pytest

import pgas
from pgas.loop import counts


def test_pieces_add_up_and_keep_the_checks_on_their_steps():
    assert list(counts.pieces(10, 3, limit=7)) == [6, 4]  # checks at 3, 6 | 9, 10 as in one
    assert list(counts.pieces(7, 3, limit=7)) == [7]  # fits: one loop
    assert list(counts.pieces(9, 8, limit=7)) == [9]  # a check further apart than the limit
    for total, every in [(2**31, 8), (2**32 + 64, 64), (10**12, 1), (2**63 - 1, 2)]:
        head = list(zip(range(3), counts.pieces(total, every)))
        size = head[0][1]
        assert size % every == 0 and size <= counts.INT32_STEPS < size + every
    parts = list(counts.pieces(10**12, 64))
    assert sum(parts) == 10**12 and len(parts) == 466


def test_the_counter_is_int64_only_past_int32_and_refused_without_x64():
    assert counts.counter_dtype(2**31 - 1, 64) is jnp.int32
    assert counts.counter_dtype(2**31, 64) is jnp.int64 and counts.wide()
    counts.check_traced("max_steps", 2**40, "inside a trace")  # x64: counted in int64
    with jax.enable_x64(False):
        assert not counts.wide()
        counts.check_traced("max_steps", 2**31 - 1, "inside a trace")
        with pytest.raises(pgas.PgasError, match=r"max_steps = 2147483648 inside a trace: .*"
                                                 r"give at most 2147483647"):  # fmt: skip
            counts.check_traced("max_steps", 2**31, "inside a trace")
