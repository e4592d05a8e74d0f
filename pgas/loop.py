"""Compiled time loops: a whole run is one XLA program.

``run(step, state, steps)`` compiles ``steps`` applications of ``step`` into a
single ``lax.fori_loop`` (the trip count is a runtime value, so the program is
compiled once and reused for any count), donates the state's buffers so the
loop updates them in place, and accepts any pytree of global arrays (several
fields). ``step`` may update its arguments in place (``u[1:-1] = ...``) and
return them, or return new arrays or whole-array expressions.

With ``snapshot_every=k`` the loop is a ``lax.scan`` over snapshots of an
inner ``fori_loop`` of k steps, still one program; ``observe(state)`` picks
what each snapshot keeps (default: the whole state; use a reduction such as
:func:`pgas.sum` for cheap diagnostics). ``chunk`` and ``callback`` cut the run
into compiled chunks and call back into Python between them only, for
progress bars and checkpoints.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp

from pgas.array import GlobalArray
from pgas.errors import PgasError
from pgas.halo import record_exchanges
from pgas.view import View, as_array

__all__ = ["run", "step_fn"]

State = Any


def _is_view(x) -> bool:
    return isinstance(x, View)


def step_fn(step: Callable[[State], State]) -> Callable[[State], State]:
    """Wrap ``step`` so that it returns arrays (whole-array expressions materialised).

    >>> import numpy as np, pgas
    >>> u = pgas.from_numpy(np.arange(3.0), pgas.make_mesh(devices=1))
    >>> step_fn(lambda u: 2 * u)(u).to_numpy()
    array([0., 2., 4.])
    """

    @functools.wraps(step)
    def wrapped(state):
        out = step(state)
        if out is None:
            raise PgasError(
                f"step function {getattr(step, '__name__', step)!r} returned None; return the "
                f"updated state (e.g. 'return u' after u[1:-1] = ...)"
            )
        return jax.tree.map(as_array, out, is_leaf=_is_view)

    return wrapped


def _is_array(x) -> bool:
    return isinstance(x, GlobalArray)


def _blocks(state):
    return jax.tree.map(lambda g: GlobalArray(g.layout.to_blocks(g.data), g.layout), state,
                        is_leaf=_is_array)  # fmt: skip


def _physical(state):
    return jax.tree.map(lambda g: GlobalArray(g.layout.from_blocks(g.data), g.layout), state,
                        is_leaf=_is_array)  # fmt: skip


@functools.lru_cache(maxsize=64)
def _program(step: Callable, every: int | None, observe: Callable | None):
    body = step_fn(step)

    def one(s):
        return _blocks(body(_physical(s)))

    def advance(state, count):
        # The loop carries every array in its blocks form, so that the reshapes at the
        # start and end of each step cancel. A stencil cannot update its input in place,
        # so with one carried buffer XLA copies the new field back every step. When the
        # step reads its neighbours lazily (halo.shifted: 1-D decompositions), the loop
        # carries two states and runs two steps per iteration, each writing the other
        # buffer (double buffering: no copy). When it materialises extended blocks
        # (2-D/3-D stencils) XLA fuses across the two steps and recomputes the first
        # (measured 3-4x slower), so those keep one buffer.
        a = _blocks(state)
        with record_exchanges() as log:
            jax.eval_shape(one, a)
        if log.materialized:
            return _physical(jax.lax.fori_loop(0, count, lambda i, s: one(s), a)), None

        def two(i, ab):
            b = one(ab[0])
            return one(b), b

        a, b = jax.lax.fori_loop(0, count // 2, two, (a, a))
        a = jax.lax.cond(count % 2 == 1, one, lambda s: s, a)
        return _physical(a), _physical(b)  # both returned: else XLA merges the buffers

    if every is None:
        return jax.jit(advance, donate_argnums=0)  # returns (state, scratch buffer)

    look = observe or (lambda s: s)

    def snapshots(state, count):
        def chunk(s, _):
            s = advance(s, every)[0]
            return s, look(s)

        return jax.lax.scan(chunk, state, None, length=count)

    return jax.jit(snapshots, donate_argnums=0, static_argnums=1)


def run(
    step: Callable[[State], State],
    state: State,
    steps: int,
    *,
    snapshot_every: int | None = None,
    observe: Callable[[State], Any] | None = None,
    chunk: int | None = None,
    callback: Callable[[int, State], None] | None = None,
    steps_per_exchange: int | str = "auto",
):
    """Run ``steps`` steps of ``step`` as one compiled program.

    Args:
        step: ``state -> state``; global-view code on :class:`pgas.GlobalArray`.
        state: a GlobalArray or any pytree of them (its buffers are donated:
            use the returned state, not the one passed in).
        steps: number of steps (>= 0).
        snapshot_every: record ``observe(state)`` after every that many steps;
            must divide ``steps``.
        observe: what a snapshot keeps; default the whole state.
        chunk: run in compiled chunks of this many steps (a multiple of
            ``snapshot_every``), calling ``callback(steps_done, state)`` after
            each; default: one chunk.
        callback: called between chunks (progress, checkpoints); never per step.

    Returns:
        The final state; with ``snapshot_every``, ``(state, snapshots)`` where
        the snapshots' leaves have a leading axis of ``steps // snapshot_every``
        entries (after steps ``k, 2k, ...``).

    >>> import numpy as np, pgas
    >>> u = pgas.from_numpy(np.array([0.0, 4.0, 0.0]), pgas.make_mesh(devices=1))
    >>> def heat(u):
    ...     u[1:-1] = 0.5 * u[1:-1] + 0.25 * (u[:-2] + u[2:])
    ...     return u
    >>> pgas.run(heat, u, steps=2).to_numpy()
    array([0., 1., 0.])
    """
    from pgas.plan import check_steps_per_exchange

    check_steps_per_exchange(steps_per_exchange)
    for name, value, least in (("steps", steps, 0), ("snapshot_every", snapshot_every, 1),
                               ("chunk", chunk, 1)):  # fmt: skip
        if value is not None and (not isinstance(value, int) or value < least):
            raise PgasError(f"{name} = {value!r}: give a whole number >= {least}")
    every = snapshot_every
    if every is not None and steps % every:
        raise PgasError(
            f"snapshot_every = {every} does not divide steps = {steps}; pick steps as a "
            f"multiple of it (e.g. steps = {(steps // every + 1) * every})"
        )
    chunk = chunk or steps or 1
    if every is not None and chunk % every:
        raise PgasError(f"chunk = {chunk} must be a multiple of snapshot_every = {every}")
    program = _program(step, every, observe)
    done, parts = 0, []
    while done < steps:
        n = min(chunk, steps - done)
        if every is None:
            state = program(state, jnp.int32(n))[0]
        else:
            state, snaps = program(state, n // every)
            parts.append(snaps)
        done += n
        if callback is not None:
            callback(done, state)
    if every is None:
        return state
    if not parts:
        return state, None
    snaps = parts[0] if len(parts) == 1 else jax.tree.map(lambda *x: jnp.concatenate(x), *parts)
    return state, snaps
