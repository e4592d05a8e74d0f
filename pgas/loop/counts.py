"""Step counts past int32: every count up to ``2**63 - 1`` runs exactly, or is refused.

A compiled loop takes its trip count as an int32 (:func:`pgas.run`'s runtime
count, :func:`pgas.run_until`'s step counter), which holds at most
:data:`INT32_STEPS` = ``2**31 - 1``; 64-bit integers exist in JAX only with
``jax_enable_x64``. So a longer run is cut into runs of at most that many
steps, one after the other (:func:`pieces`): each is a whole compiled loop,
and the runs together give the bits of one run (any split of a run does, as
any ``steps_per_exchange`` does). Inside a caller's trace nothing can run
between such pieces; a static count there is a 64-bit one where JAX has them
(:func:`counter_dtype`), and refused where it has not (:func:`check_traced`).
"""

from __future__ import annotations

from collections.abc import Iterator

import jax
import jax.numpy as jnp
import numpy as np

from pgas.errors import PgasError

__all__ = ["INT32_STEPS", "wide", "pieces", "counter_dtype", "check_traced"]

#: the most steps one compiled loop counts in int32
INT32_STEPS = 2**31 - 1


def wide() -> bool:
    """Whether JAX has 64-bit integers here (``jax_enable_x64``, globally or in a context).

    >>> with jax.enable_x64(False):
    ...     wide()
    False
    """
    return jax.dtypes.canonicalize_dtype(np.int64) == np.int64


def pieces(total: int, every: int = 1, limit: int | None = None) -> Iterator[int]:
    """``total`` steps as the step counts of loops that each count in int32.

    One piece where ``total`` fits ``limit`` (default :data:`INT32_STEPS`), or where
    ``every`` does not (a 64-bit count, :func:`counter_dtype`); else pieces of the most
    whole multiples of ``every`` that fit, then the rest: a run checked every ``every``
    steps (:func:`pgas.run_until`) checks at the same steps as one loop would.

    >>> list(pieces(10, 3, limit=7))
    [6, 4]
    >>> list(pieces(2**32 + 64, 64))
    [2147483584, 2147483584, 192]
    """
    limit = INT32_STEPS if limit is None else limit
    if total <= limit or every > limit:
        yield total
        return
    size = limit // every * every
    left = total
    while left > size:
        yield size
        left -= size
    yield left


def counter_dtype(*counts: int):
    """The dtype of a loop counter that reaches ``counts`` (static ints): int32 where they
    fit :data:`INT32_STEPS`, else int64 (:func:`check_traced` refuses that without x64).

    >>> counter_dtype(10, 64), counter_dtype(2**40)
    (<class 'jax.numpy.int32'>, <class 'jax.numpy.int64'>)
    """
    return jnp.int32 if max(counts) <= INT32_STEPS else jnp.int64


def check_traced(name: str, value: int, why: str) -> None:
    """Refuse a static count past :data:`INT32_STEPS` that one compiled loop must count
    (``why`` says which) where JAX has no 64-bit integers.

    >>> check_traced("max_steps", 10**12, "inside a trace")  # tests run with x64
    >>> with jax.enable_x64(False):
    ...     check_traced("max_steps", 2**31, "inside a trace")
    Traceback (most recent call last):
    ...
    pgas.errors.PgasError: max_steps = 2147483648 inside a trace: one compiled loop counts at \
most 2**31 - 1 = 2147483647 steps without 64-bit integers; enable them \
(jax.config.update('jax_enable_x64', True)) or give at most 2147483647
    """
    if value > INT32_STEPS and not wide():
        raise PgasError(
            f"{name} = {value} {why}: one compiled loop counts at most 2**31 - 1 = "
            f"{INT32_STEPS} steps without 64-bit integers; enable them "
            f"(jax.config.update('jax_enable_x64', True)) or give at most {INT32_STEPS}"
        )
