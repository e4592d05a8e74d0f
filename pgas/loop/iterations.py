"""How a compiled loop lays out its iterations: trip counts, rematerialised segments, masks.

Contract: :func:`fori` runs ``fn(carry, i)`` for ``i`` in a range: a
``lax.fori_loop`` that a static range makes a scan (which reverse mode
differentiates), or a ``while_loop`` for a loop no derivative sees.
:func:`segments` cuts a static count of iterations into rematerialised
segments for reverse mode, and :func:`tie` ties a group's masks to the loop
counter or not. None of them changes a value: the same bits either way.

Rematerialised segments. The loop a derivative differentiates
(:mod:`pgas.loop.derivative`) is cut into segments of about ``sqrt(steps)``
steps: a scan over segments, each under ``jax.checkpoint``, so the state is
stored at segment boundaries only and one segment at a time is recomputed:
about ``2 sqrt(steps)`` stored states for one extra forward pass. Only that
loop is cut into segments: the forward loop is never differentiated, and runs
as the standalone one. This two-level schedule, rather than a binomial
(treeverse) one, because it is two nested scans (``lax.scan``) XLA compiles
as loops, keeps every segment on whole steps, and its memory was measured
within ``2.5 sqrt(steps) + 10`` blocks up to 10000 steps (42 blocks at 10000
steps, heat1d 2**20 on 2 CPU devices); ``remat_every=`` of :func:`pgas.run`
is the knob.
"""

from __future__ import annotations

from collections.abc import Callable

import jax
import jax.numpy as jnp

__all__ = ["fori", "segments", "tie"]


def fori(lo, hi, fn: Callable, carry, scan: bool = True):
    """``fn(carry, i)`` for ``i`` in ``[lo, hi)``: a ``fori_loop`` (a traced ``hi`` stays a
    runtime trip count; a static one becomes a scan, which reverse mode differentiates);
    nothing for a static empty range. ``scan=False``: a ``while_loop`` for a static ``hi``
    too, for a loop no derivative sees (reverse mode's partial evaluation of a scan hoists
    its loop-invariant index arrays out of the loop, which XLA then reads every step).

    >>> int(fori(0, 4, lambda c, i: c + i, 0))
    6
    >>> fori(3, 3, lambda c, i: c + i, "untouched")
    'untouched'
    """
    if isinstance(hi, int) and hi <= lo:
        return carry
    if scan or not isinstance(hi, int):
        return jax.lax.fori_loop(lo, hi, lambda i, s: fn(s, i), carry)

    def body(c):
        i, s = c
        return i + 1, fn(s, i)

    return jax.lax.while_loop(lambda c: c[0] < hi, body, (jnp.int32(lo), carry))[1]


def segments(fn: Callable, n, carry, segment: int | None, *, fresh=None, hand=None):
    """Rematerialised segments of ``n`` applications of ``fn(carry, i)``: ``(carry, done)``.

    For a static ``n`` and a ``segment``: a ``lax.scan`` over ``n // segment``
    segments of ``segment`` iterations, each under ``jax.checkpoint``. Reverse
    mode then stores the carry at each segment boundary only and, from the last
    segment back, recomputes one segment at a time, storing what its iterations
    need: about ``n / segment + segment`` carries instead of ``n``. The caller
    runs the ``n - done`` iterations left. ``fresh(c)`` makes the carry a
    segment starts from out of what segments hand on, ``hand(carry)`` what it
    hands on (the double-buffered loop hands on one buffer and gives each
    segment a new spare, so the spare is never stored).

    >>> carry, done = segments(lambda c, i: c + i, 7, 0, 3)  # 2 segments of 3: i = 0 .. 5
    >>> int(carry), done
    (15, 6)
    >>> segments(lambda c, i: c + i, 5, 0, 3)  # fewer than 2 segments: none
    (0, 0)
    """
    if segment is None or not isinstance(n, int) or n < 2 * segment:
        return carry, 0
    fresh, hand = fresh or (lambda c: c), hand or (lambda c: c)
    outer = n // segment

    def one(c, j):
        return hand(fori(0, segment, lambda s, i: fn(s, j * segment + i), fresh(c))), None

    carry, _ = jax.lax.scan(jax.checkpoint(one, prevent_cse=False), carry,
                            jnp.arange(outer, dtype=jnp.int32))  # fmt: skip
    return carry, outer * segment


def tie(group: Callable, tied: bool) -> Callable:
    """``group(state, counter)``, its masks tied to the loop counter or not.

    Tied (every loop that runs forward): each group builds its masks on an
    anchor that depends on the counter (:func:`pgas.globalview.forms.anchor_of`),
    so XLA fuses them into the stencil instead of hoisting them as arrays read
    every step. Untied (the loop a derivative differentiates, see
    :func:`pgas.loop.derivative.differentiable`): the masks are loop-invariant,
    so reverse mode computes each once before the loop instead of storing one
    per step as a residual for the transpose (a block-sized predicate per step;
    value-and-grad over forward at k = 1: 17.2 tied, 8.1-8.2 untied; heat1d
    2**20, 2 CPU devices, 256 steps). The results are the same bits.

    >>> untied = tie(lambda state, counter=None: (state, counter), False)
    >>> untied(1.0, 5)  # the counter is not passed on
    (1.0, None)
    """
    return group if tied else (lambda state, counter=None: group(state))
