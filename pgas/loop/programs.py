"""The compiled programs of a time loop: single- or double-buffered, with deep halos.

Contract: :func:`program` builds, once per step, ``k``, reach and snapshots
(cached), the :class:`Program` that :func:`pgas.loop.timeloop.run` runs: the
loop compiled with its state donated (``advance``), the forms it carries and
the same loop as a traceable function for a caller's trace (``inline``);
:class:`Carried` is that loop on the carried form for a caller's own loop
(:func:`pgas.run_until`). :func:`sides` and :func:`reads` give the keywords of
:func:`program` a plan and a step call for.

Deep halos (``k`` steps per exchange): every loop iteration exchanges, for
every field of the state, a halo ``k`` times the step's reach
(:func:`pgas.loop.frames.frame_ext`), runs the user's step ``k`` times on the
extended blocks without communicating (each sub-step shrinks the extension,
see :mod:`pgas.globalview.lower`), and keeps the blocks' own cells
(:func:`pgas.loop.frames.physical`). The result is bitwise equal to ``k``
single steps. A run of ``steps`` steps is ``steps // k`` such groups and
``steps % k`` single steps.

Buffers. On the CPU at ``k > 1`` the loop is double-buffered
(:func:`pgas.loop.buffers.double_group`): it carries every field already
extended, in two buffers, exchanges the halo slabs in place and writes each
sub-step into the other buffer, so each sub-step is one pass over the block
and a device holds two extended blocks (:func:`pgas.loop.timeloop.compiled`
gives XLA's memory analysis). ``Program.enter`` converts the user's state to
that form and ``Program.leave`` back, once per call of ``run``. Elsewhere
(``k = 1``, GPUs) the loop carries the fields in their blocks form in one
buffer: a group reads the extended copy of its field, built once per exchange
by one concatenate, so XLA writes the group's result straight into the loop's
buffer (no copy), and a device holds the block, the extended copy and the
sub-steps' intermediates.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp

from pgas.globalview.array import GlobalArray
from pgas.loop import counts
from pgas.loop.buffers import double_group, framed, refreshed
from pgas.loop.frames import (
    blocks,
    frame_ext,
    group,
    loop_inputs,
    physical,
    step_fn,
    step_params,
)
from pgas.loop.iterations import fori, segments, tie
from pgas.loop.outside import numbers_read
from pgas.loop.plan import Plan

__all__ = ["program", "Program", "Carried", "sides", "reads"]

State = Any


@dataclasses.dataclass(frozen=True)
class Program:
    """The compiled loop of :func:`pgas.loop.timeloop.run` and the forms it carries.

    Attributes:
        enter: the user's state -> what the loop carries.
        advance: ``advance(carried, count, params=None)`` runs ``count`` steps
            (with snapshots: ``count`` snapshots) as one compiled program; it
            donates what it is given.
        leave: what the loop carries -> the user's state.
        inline: ``inline(state, count, params, segment)``: the same loop as a
            traceable function of the user's state (no ``jit``, no donation),
            for a caller's trace (:func:`pgas.loop.timeloop.run` under ``jax.jit``,
            ``grad``, ...); a static ``count`` is cut into rematerialised segments
            of ``segment`` loop iterations (``None``: none); ``tied=``, ``scan=``:
            see :func:`pgas.loop.iterations.tie` and :func:`pgas.loop.iterations.fori`.
    """

    enter: Callable
    advance: Callable
    leave: Callable
    inline: Callable | None = None
    carried: Carried | None = None


@dataclasses.dataclass(frozen=True)
class Carried:
    """The loop of a :class:`Program` on the form it carries, for a caller's own loop.

    :func:`pgas.run_until` checks between runs of ``steps`` without leaving
    that form, so a check costs no conversion of the state (the
    double-buffered fields stay framed across checks).

    Attributes:
        into: the user's state -> the carried form (traceable).
        steps: ``steps(carried, count, params)`` runs a static ``count`` of
            steps, ``params`` as ``inputs`` yields them; trace it inside ``inputs``.
        out_of: the carried form -> the user's state (traceable; a view XLA
            fuses into what reads it).
        inputs: ``with inputs(params) as params``: the params and the
            constants the step captures, extended once
            (:func:`pgas.loop.frames.loop_inputs`); enter it outside the
            caller's loop.
        seen: the carried form -> ``(carried, state)``, the state a check
            reads (traceable): the double-buffered fields with their halo
            refreshed in place, read without a copy; else ``out_of``'s.
    """

    into: Callable
    steps: Callable
    out_of: Callable
    inputs: Callable
    seen: Callable


@functools.lru_cache(maxsize=64)
def program(step: Callable, k: int, widths: tuple[int, ...] | None, every: int | None,
            observe: Callable | None, double: bool = False,
            transport: Callable | None = None, takes_params: bool = False,
            captured: tuple = (), sides: tuple | None = None, fields: tuple | None = None,
            inputs: tuple | None = None, reads: tuple = ()) -> Program:  # fmt: skip
    """The compiled program of :func:`pgas.loop.timeloop.run` (cached per step, ``k``, reach
    and snapshots).

    A seam for tools that need the loop itself: XLA's memory analysis and HLO
    (:func:`pgas.loop.timeloop.compiled`), or the same loop with another transport.

    Args:
        step: the step, as given to :func:`pgas.loop.timeloop.run`.
        k: steps per exchange (:attr:`pgas.loop.plan.Plan.steps_per_exchange`).
        widths: the step's reach per axis (:attr:`pgas.loop.plan.Plan.widths`).
        every: steps per snapshot, or ``None``.
        observe: what a snapshot keeps (default: the state).
        double: carry the fields extended, in two buffers
            (:func:`pgas.loop.buffers.double_group`; CPU, ``k > 1``).
        transport: how the double-buffered loop's halo slabs travel between
            blocks, a :data:`pgas.globalview.halo.Transport`; default the
            collective-permutes of the global view. ``lambda slab, direction:
            slab`` gives every block its own slabs: the same work with no
            collective, which is how benchmarks/deep_halo.py measures the cost
            of communication.
        takes_params: the step is called ``step(state, params)``.
        captured: the arrays the step reads from its enclosing scope
            (:func:`pgas.loop.outside.captured`), part of the key so that a rebound array gives a
            new program, never a stale one.
        sides: the step's reach per side (:attr:`pgas.loop.plan.Plan.sides`): only ``k``
            times each side's reach is kept and exchanged; ``None``: both sides of
            ``widths``.
        fields, inputs: each field's and read-only field's frame for a single-buffered
            step (:attr:`pgas.loop.plan.Plan.fields`, :attr:`~pgas.loop.plan.Plan.inputs`);
            ``None``: the state's.
        reads: the numbers ``step`` and ``observe`` read from outside
            (:func:`pgas.loop.outside.numbers_read`), a part of the key only: a
            changed global or closure number gives a new program, never a stale one.
    """
    look = observe or (lambda s: s)
    held = tuple(c.field for c in captured if c.field is not None)
    if double and widths is not None and k > 1:  # k = 1: the single-buffered loop, 2 passes
        return _double(step, k, widths, every, look, transport, takes_params, held, sides)

    def body(params):
        return step_fn(step, step_params(params, takes_params))

    def loop(a, count, params, segment, ready=False, tied=True, scan=True):
        if not ready:  # params and constants extended once, outside the loop
            with loop_inputs(params, held, widths, k, inputs) as params:
                return loop(a, count, params, segment, True, tied, scan)
        many = tie(group(body(params), widths, k, sides, fields), tied)
        single = tie(group(body(params), widths, 1, sides, fields), tied)
        a, first = segments(many, count // k, a, segment)
        a = fori(first, count // k, many, a, scan)
        return fori(0, count % k, single, a, scan) if k > 1 else a  # k = 1: no remainder

    def advance(state, count, params=None):
        return physical(loop(blocks(state), count, params, None))

    def same(state):
        return state

    def inline(state, count, params, segment, tied=True, scan=True):
        if every is None:
            return physical(loop(blocks(state), count, params, segment, tied=tied, scan=scan))

        def chunk(s, _):
            s = physical(loop(blocks(s), every, params, segment, tied=tied, scan=scan))
            return s, look(s)

        return jax.lax.scan(chunk, state, None, length=count // every)

    if every is None:
        carried = Carried(blocks, lambda a, count, params: loop(a, count, params, None, True),
                          physical, functools.partial(loop_inputs, fields=held, widths=widths,
                                                      k=k, inputs=inputs),
                          lambda a: (a, physical(a)))  # fmt: skip
        return Program(same, _Counted(jax.jit(advance, donate_argnums=0)), same, inline, carried)

    def snapshots(state, count, params=None):
        def chunk(s, _):
            s = advance(s, every, params)
            return s, look(s)

        return jax.lax.scan(chunk, state, None, length=count)

    run = jax.jit(snapshots, donate_argnums=0, static_argnums=1)
    return Program(same, run, same, inline)


def _double(step: Callable, k: int, widths: tuple[int, ...], every: int | None,
            look: Callable, transport: Callable | None = None,
            takes_params: bool = False, fields: tuple = (),
            sides: tuple | None = None) -> Program:  # fmt: skip
    """The double-buffered loop (see :func:`pgas.loop.buffers.double_group`).

    Every physical step writes a field into its other buffer, so a field is
    back in the buffer it started in after an even number of steps. The loop
    runs groups in pairs when ``k`` is odd and the remaining steps in pairs, so
    nothing is copied; after an odd number of steps (its parity is static: a
    program per parity) the result is the second buffer.
    """
    halo = frame_ext(widths, sides, k)
    pairs = 2 if k % 2 else 1

    def spare(state):
        return jax.tree.map(lambda g: GlobalArray(jnp.zeros_like(g.data), g.layout, g.ext),
                            state, is_leaf=lambda x: isinstance(x, GlobalArray))  # fmt: skip

    def loop(state, count, params, segment, odd: bool, ready=False, tied=True, scan=True):
        """``count`` steps on the extended state (``odd``: ``count`` is odd): the latest
        buffer (the spare is made here, so a caller hands on one buffer); ``ready``: the
        params come from :func:`loop_inputs` already; ``tied``: see :func:`tie`; ``scan``:
        see :func:`fori`."""
        if not ready:
            with loop_inputs(params, fields, widths, k) as params:
                return loop(state, count, params, segment, odd, True, tied, scan)
        body = step_fn(step, step_params(params, takes_params))
        many = tie(double_group(body, widths, k, transport, sides), tied)
        single = tie(double_group(body, widths, 1, transport, sides), tied)

        def iteration(pair, i):
            for j in range(pairs):  # each group its own anchor, so no mask is shared (and stored)
                pair = many(pair, pairs * i + j)
            return pair

        n = count // (pairs * k)
        state, first = segments(iteration, n, state, segment,
                                 fresh=lambda x: (x, spare(x)), hand=lambda p: p[0])  # fmt: skip
        pair = fori(first, n, iteration, (state, spare(state)), scan)
        rest = count % (pairs * k)
        two = lambda p, i: single(single(p, 2 * i), 2 * i + 1)  # noqa: E731
        pair = fori(0, rest // 2, two, pair, scan)
        return (single(pair, count) if odd else pair)[0]

    enter, leave = jax.jit(lambda state: framed(state, halo)), jax.jit(physical)

    def inline(state, count, params, segment, tied=True, scan=True):
        if every is None:
            return physical(loop(framed(state, halo), count, params, segment, count % 2 == 1,
                                 tied=tied, scan=scan))  # fmt: skip

        def chunk(s, _):
            s = loop(s, every, params, segment, every % 2 == 1, tied=tied, scan=scan)
            return s, look(physical(s))

        s, snaps = jax.lax.scan(chunk, framed(state, halo), None, length=count // every)
        return physical(s), snaps

    if every is None:
        runs = [jax.jit(lambda state, count, params=None, odd=odd:
                        loop(state, count, params, None, odd), donate_argnums=0)
                for odd in (False, True)]  # fmt: skip
        carried = Carried(lambda state: framed(state, halo),
                          lambda s, count, params: loop(s, count, params, None, count % 2 == 1,
                                                        True),
                          physical, functools.partial(loop_inputs, fields=fields, widths=widths,
                                                      k=k),
                          _seen_refreshed)  # fmt: skip
        return Program(enter, _Counted(*runs), leave, inline, carried)

    def snapshots(state, count, params=None):
        def chunk(s, _):
            s = loop(s, every, params, None, every % 2 == 1)
            return s, look(physical(s))

        return jax.lax.scan(chunk, state, None, length=count)

    return Program(enter, jax.jit(snapshots, donate_argnums=0, static_argnums=1), leave, inline)


def _seen_refreshed(state: State) -> tuple[State, State]:
    """The double-buffered state with its halo refreshed, carried on and read by a check."""
    state = refreshed(state)
    return state, state


class _Counted:
    """``advance(state, count)`` for a Python int ``count``: one compiled program for
    every count, or one per parity (``runs[count % len(runs)]``)."""

    def __init__(self, *runs):
        self.runs = runs

    def __call__(self, state, count: int, params=None):
        extra = () if params is None else (params,)
        for piece in counts.pieces(int(count), 2):  # an int32 trip count: longer runs in pieces
            state = self.runs[piece % len(self.runs)](state, jnp.int32(piece), *extra)
        return state

    def lower(self, state, count: int, params=None):
        extra = () if params is None else (params,)
        return self.runs[int(count) % len(self.runs)].lower(state, jnp.int32(count), *extra)


def reads(*fns: Callable | None) -> dict:
    """``reads=`` for :func:`program`: the numbers ``fns`` read from outside
    (:func:`pgas.loop.outside.numbers_read`); none where they read none, so such a step's
    cache key is the one it always was.

    >>> scale = 0.5
    >>> reads(lambda u: u * scale)
    {'reads': (('scale', (<class 'float'>, '0.5')),)}
    >>> reads(lambda u: 2 * u, None)
    {}
    """
    found = numbers_read(*fns)
    return {"reads": found} if found else {}


def sides(how: Plan) -> dict:
    """``sides=``, ``fields=`` and ``inputs=`` for :func:`program` where the plan has them: a
    symmetric plan calls it as before, so its cache key (and compiled program) is the one it
    always was.

    >>> import numpy as np, pgas
    >>> u = pgas.from_numpy(np.zeros(64), pgas.make_mesh(devices=1))
    >>> def upwind(u):
    ...     u[1:] = u[1:] - 0.5 * (u[1:] - u[:-1])
    ...     return u
    >>> sides(pgas.plan.plan(upwind, u))  # reads one cell below, none above
    {'sides': ((1, 0),)}
    >>> sides(pgas.plan.plan(lambda u: 0.5 * u, u))
    {}
    """
    return ({} if how.sides is None else {"sides": how.sides}) | how.frames
