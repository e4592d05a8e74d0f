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

Buffers. On the CPU at ``k > 1`` the loop is double-buffered
(:func:`pgas.frames.double_group`): it carries every field already extended,
in two buffers, exchanges the halo slabs in place and writes each sub-step
into the other buffer, so each sub-step is one pass over the block and a
device holds two extended blocks (2.0x its block for heat1d, XLA's memory
analysis; :func:`compiled`). ``run`` converts the user's state to that form
and back once per call. Elsewhere (``k = 1``, GPUs) the loop carries the
fields in their blocks form in one buffer: a group reads the extended copy of
its field, built once per exchange by one concatenate, so XLA writes the
group's result straight into the loop's buffer (no copy), and a device holds
the block, the extended copy and the sub-steps' intermediates (2.0x for
heat1d at ``k = 1``, 3.0x for Life; see benchmarks/README.md).

With ``snapshot_every=K`` the loop is a ``lax.scan`` over snapshots of an
inner loop of ``K`` steps, still one program; ``observe(state)`` picks what
each snapshot keeps (default: the whole state; use a reduction such as
:func:`pgas.sum` for cheap diagnostics). ``chunk`` and ``callback`` cut the run
into compiled chunks and call back into Python between them only, for
progress bars and checkpoints.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp

from pgas.array import GlobalArray
from pgas.errors import PgasError
from pgas.frames import blocks, double_buffered, double_group, framed, group, physical, step_fn
from pgas.plan import AUTO, plan

__all__ = ["run", "program", "Program", "compiled"]

State = Any


@dataclasses.dataclass(frozen=True)
class Program:
    """The compiled loop of :func:`run` and the forms it carries.

    Attributes:
        enter: the user's state -> what the loop carries.
        advance: ``advance(carried, count)`` runs ``count`` steps (with
            snapshots: ``count`` snapshots) as one compiled program; it
            donates what it is given.
        leave: what the loop carries -> the user's state.
    """

    enter: Callable
    advance: Callable
    leave: Callable


@functools.lru_cache(maxsize=64)
def program(step: Callable, k: int, widths: tuple[int, ...] | None, every: int | None,
            observe: Callable | None, double: bool = False,
            transport: Callable | None = None) -> Program:  # fmt: skip
    """The compiled program of :func:`run` (cached per step, ``k``, reach and snapshots).

    ``double``: carry the fields extended, in two buffers (:func:`pgas.frames.double_group`);
    ``transport``: how its halo slabs travel (benchmarks: none, to time the same work
    without exchange).
    """
    body = step_fn(step)
    look = observe or (lambda s: s)
    if double and widths is not None and k > 1:  # k = 1: the single-buffered loop, 2 passes
        return _double(body, k, widths, every, look, transport)
    many, single = group(body, widths, k), group(body, widths, 1)

    def advance(state, count):
        a = blocks(state)
        a = jax.lax.fori_loop(0, count // k, lambda i, s: many(s, i), a)
        a = jax.lax.fori_loop(0, count % k, lambda i, s: single(s, i), a)
        return physical(a)

    def same(state):
        return state

    if every is None:
        return Program(same, _Counted(jax.jit(advance, donate_argnums=0)), same)

    def snapshots(state, count):
        def chunk(s, _):
            s = advance(s, every)
            return s, look(s)

        return jax.lax.scan(chunk, state, None, length=count)

    return Program(same, jax.jit(snapshots, donate_argnums=0, static_argnums=1), same)


def _double(body: Callable, k: int, widths: tuple[int, ...], every: int | None,
            look: Callable, transport: Callable | None = None) -> Program:  # fmt: skip
    """The double-buffered loop (see :func:`pgas.frames.double_group`).

    Every physical step writes a field into its other buffer, so a field is
    back in the buffer it started in after an even number of steps. The loop
    runs groups in pairs when ``k`` is odd and the remaining steps in pairs, so
    nothing is copied; after an odd number of steps (its parity is static: a
    program per parity) the result is the second buffer.
    """
    halo = tuple(k * w for w in widths)
    many = double_group(body, widths, k, transport)
    single = double_group(body, widths, 1, transport)
    pairs = 2 if k % 2 else 1

    def iteration(i, pair):
        for j in range(pairs):  # each group its own anchor, so no mask is shared (and stored)
            pair = many(pair, pairs * i + j)
        return pair

    def advance(pair, count, odd: bool):
        pair = jax.lax.fori_loop(0, count // (pairs * k), iteration, pair)
        rest = count % (pairs * k)
        two = lambda i, p: single(single(p, 2 * i), 2 * i + 1)  # noqa: E731
        pair = jax.lax.fori_loop(0, rest // 2, two, pair)
        return single(pair, count) if odd else pair

    def spare(state):
        return jax.tree.map(lambda g: GlobalArray(jnp.zeros_like(g.data), g.layout, g.ext),
                            state, is_leaf=lambda x: isinstance(x, GlobalArray))  # fmt: skip

    enter, leave = jax.jit(lambda state: framed(state, halo)), jax.jit(physical)
    if every is None:
        runs = [jax.jit(lambda state, count, odd=odd: advance((state, spare(state)), count, odd)[0],
                        donate_argnums=0) for odd in (False, True)]  # fmt: skip
        return Program(enter, _Counted(*runs), leave)

    def snapshots(state, count):
        def chunk(pair, _):
            pair = advance(pair, every, every % 2 == 1)
            return pair, look(physical(pair[0]))

        pair, snaps = jax.lax.scan(chunk, (state, spare(state)), None, length=count)
        return pair[0], snaps

    return Program(enter, jax.jit(snapshots, donate_argnums=0, static_argnums=1), leave)


class _Counted:
    """``advance(state, count)`` for a Python int ``count``: one compiled program for
    every count, or one per parity (``runs[count % len(runs)]``)."""

    def __init__(self, *runs):
        self.runs = runs

    def __call__(self, state, count: int):
        return self.runs[int(count) % len(self.runs)](state, jnp.int32(count))

    def lower(self, state, count: int):
        return self.runs[int(count) % len(self.runs)].lower(state, jnp.int32(count))


def compiled(step: Callable, state: State, steps_per_exchange: int | str = AUTO):
    """The loop :func:`run` compiles for ``step`` on ``state``, lowered and compiled (not run).

    For XLA's memory analysis (``compiled(...).memory_analysis()``) and HLO.

    >>> import numpy as np, pgas
    >>> u = pgas.from_numpy(np.zeros(2**16, np.float32), pgas.make_mesh(devices=1))
    >>> def heat(u):
    ...     u[1:-1] = 0.5 * u[1:-1] + 0.25 * (u[:-2] + u[2:])
    ...     return u
    >>> m = compiled(heat, u, 4).memory_analysis()
    >>> round((m.argument_size_in_bytes + m.temp_size_in_bytes) / 2**18, 2)  # two buffers
    2.0
    """
    how = plan(step, state, steps_per_exchange)
    prog = program(step, how.steps_per_exchange, how.widths, None, None, _double_on(state))
    return prog.advance.lower(prog.enter(state), 2).compile()


def _convert(form: Callable, state: State) -> State:
    """``form(state)``, freeing ``state``'s blocks when that is a new copy: the loop owns its
    state, as when it is donated, so a device never holds a field twice between chunks."""
    out = form(state)
    if out is not state:
        for leaf in jax.tree.leaves(state, is_leaf=lambda x: isinstance(x, GlobalArray)):
            leaf.data.delete()
    return out


def _double_on(state: State) -> bool:
    first = jax.tree.leaves(state, is_leaf=lambda x: isinstance(x, GlobalArray))[0]
    return double_buffered(first.layout.mesh)


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
    # with a callback the loop hands its state over between chunks, so it keeps the user's form
    # (converting every chunk grew the processes' memory with the number of chunks)
    double = callback is None and _double_on(state)
    how = plan(step, state, steps_per_exchange, double=double)
    prog = program(step, how.steps_per_exchange, how.widths, every, observe, double)
    state = _convert(prog.enter, state)
    done, parts = 0, []
    while done < steps:
        n = min(chunk, steps - done)
        if every is None:
            state = prog.advance(state, n)
        else:
            state, snaps = prog.advance(state, n // every)
            parts.append(snaps)
        done += n
        if callback is not None:
            callback(done, state)
    state = _convert(prog.leave, state)
    if every is None:
        return state
    if not parts:
        return state, None
    snaps = parts[0] if len(parts) == 1 else jax.tree.map(lambda *x: jnp.concatenate(x), *parts)
    return state, snaps
