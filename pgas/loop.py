"""Compiled time loops: a whole run is one XLA program, with deep halos.

``run(step, state, steps)`` compiles ``steps`` applications of ``step`` into a
single ``lax.fori_loop`` (the trip count is a runtime value, so the program is
compiled once and reused for any count), donates the state's buffers so the
loop updates them in place, and accepts any pytree of global arrays (several
fields). ``step`` may update its arguments in place (``u[1:-1] = ...``) and
return them, or return new arrays or whole-array expressions.

Deep halos (``steps_per_exchange=k``, chosen by :func:`pgas.plan.plan` for
``"auto"``): every loop iteration exchanges, for every field of the state, a
halo ``k`` times the step's reach (:func:`frames`), runs the user's step ``k``
times on the extended blocks without communicating (each sub-step shrinks the
extension, see :mod:`pgas.lower`), and keeps the blocks' own cells
(:func:`cores`). The result is bitwise equal to ``k`` single steps. A run of
``steps`` steps is ``steps // k`` such groups and ``steps % k`` single steps;
chunks and snapshots end on their own step counts, so groups never cross them.

The loop carries the fields in their blocks form (the reshapes at the start
and end of each step cancel) in one buffer: a group reads the extended copy
of its field, built once per exchange by one concatenate, so XLA writes the
group's result straight into the loop's buffer (no copy). Peak memory per
device is then the block plus the extended copy and the sub-steps'
intermediates (see benchmarks/README.md).

With ``snapshot_every=K`` the loop is a ``lax.scan`` over snapshots of an
inner loop of ``K`` steps, still one program; ``observe(state)`` picks what
each snapshot keeps (default: the whole state; use a reduction such as
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

from pgas.errors import PgasError
from pgas.frames import blocks, group, physical, step_fn
from pgas.plan import AUTO, plan

__all__ = ["run", "program"]

State = Any


@functools.lru_cache(maxsize=64)
def program(step: Callable, k: int, widths: tuple[int, ...], every: int | None,
            observe: Callable | None):  # fmt: skip
    """The compiled program of :func:`run` (cached per step, ``k``, reach and snapshots)."""
    body = step_fn(step)
    many, single = group(body, widths, k), group(body, widths, 1)

    def advance(state, count):
        a = blocks(state)
        a = jax.lax.fori_loop(0, count // k, lambda i, s: many(s, i), a)
        a = jax.lax.fori_loop(0, count % k, lambda i, s: single(s, i), a)
        return physical(a)

    if every is None:
        return jax.jit(advance, donate_argnums=0)

    look = observe or (lambda s: s)

    def snapshots(state, count):
        def chunk(s, _):
            s = advance(s, every)
            return s, look(s)

        return jax.lax.scan(chunk, state, None, length=count)

    return jax.jit(snapshots, donate_argnums=0, static_argnums=1)


def _check(steps, snapshot_every, chunk) -> tuple[int | None, int]:
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
    return every, chunk


def run(
    step: Callable[[State], State],
    state: State,
    steps: int,
    *,
    snapshot_every: int | None = None,
    observe: Callable[[State], Any] | None = None,
    chunk: int | None = None,
    callback: Callable[[int, State], None] | None = None,
    steps_per_exchange: int | str = AUTO,
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
        steps_per_exchange: ``k``, physical steps per halo exchange (deep halos),
            or ``"auto"`` (:func:`pgas.plan.plan` chooses). Any ``k`` gives the
            same bits; it is lowered when the blocks are too small for its halo.

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
    every, chunk = _check(steps, snapshot_every, chunk)
    if steps == 0:
        return state if every is None else (state, None)
    how = plan(step, state, steps_per_exchange)
    compiled = program(step, how.steps_per_exchange, how.widths, every, observe)
    done, parts = 0, []
    while done < steps:
        n = min(chunk, steps - done)
        if every is None:
            state = compiled(state, jnp.int32(n))
        else:
            state, snaps = compiled(state, n // every)
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
