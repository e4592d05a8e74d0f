"""Reverse mode of a run whose step is not affine: checkpointed segments, each run back
one adjoint step at a time on the pair (stored state, cotangent).

Reverse mode of ``pgas.run(step, u, n)`` applies ``J(u_0)^T ... J(u_{n-1})^T`` to
the cotangent of the result, where ``J(u_i)`` is the step's Jacobian at the
state of step ``i``. For a step affine in its state the Jacobian is one matrix
and :mod:`pgas.loop.adjoint` runs its transpose as a step; here it depends on
the state, so the states must be had again, in reverse order.

The schedule (:class:`Schedule`), two levels:

1. The forward run stores its state every ``segment`` steps (checkpoints),
   running between them through the forward's own loop
   (:attr:`pgas.loop.programs.Program.inline`: its ``k``, its buffers, its
   collectives; segments are whole multiples of ``k``). This is the primal
   run: its result is the forward's, bit for bit.
2. Reverse mode takes the segments from the last. It recomputes a segment
   from its checkpoint one step per exchange, storing every state, and runs it
   back: an *adjoint step* (:func:`adjoint_step`) takes a stored state ``u``
   and the cotangent ``w`` of the next state, and gives the cotangent at ``u``.

Memory: ``steps / segment`` checkpoints and the ``segment`` states of one
segment (:attr:`Schedule.stored`), fewest at ``segment`` about
``sqrt(steps)``: about ``2 sqrt(steps)`` states, and one adjoint step's frames.

The adjoint step, in gather form as the transposed affine step is. The state
is extended by ``below + above`` cells per side and the cotangent by the reach
*mirrored* (``above`` cells below the block, ``below`` above; halo-sized
collective-permutes). The state's frame is exchanged once: the recomputed step
runs on it (:func:`recompute`) and the segment keeps the slabs it received, from
which the adjoint step builds the same frame again; so a step back exchanges the
state once and the cotangent once, the slabs of fields of one layout and dtype
in one message (``frames(..., joined=True)``). ``jax.vjp`` of the step on that frame
takes the cotangent of the cells the step writes back to the frame, and every
cell of the block then has its full sum: each cell that reads it lies in the
frame the cotangent is given on. The block's own cells are kept; no cell of
another block is written, nothing is scattered across blocks. A cell the step
never writes (a padding cell of an uneven block, a ghost beyond a Dirichlet or
Keep face) is the identity, so its cotangent goes back to itself only, and is
dropped. A Neumann ghost follows the cells beside its face (steps write it),
so a run with a Neumann face is not run back here
(:func:`pgas.loop.adjoint.qualifies`).

Cost. The adjoint step runs one step per exchange, and JAX's transpose of a
window read is a ``pad``: on XLA's CPU a sum of pads costs several times the
forward's slices, and a deep-halo group of adjoint steps fused worse still
(benchmarks/README.md, "pgas inside JAX"). Groups of ``g`` steps recomputed and
run back per exchange were tried: XLA fuses each step of a group into the reads
of the next, recomputing it there (three reads a step), unless every state is
written out; written out, with each cotangent written into a buffer (an adjoint
fusion ending in a ``pad`` costs about five times one ending in a slice), they
were faster for 1-D Burgers and slower for 2-D Gray-Scott on a 2-core CPU
(CHANGELOG, issue 33).

Params and captured arrays are read by the adjoint steps as the forward reads
them (extended once per segment, :func:`pgas.loop.frames.loop_inputs`). With
respect to params (:attr:`Checkpointed.with_params`: fields and numbers of an
inexact dtype), each adjoint step gives their cotangent too, in scatter form:
from the cells of its own block only, so that each written cell counts once
over the devices. It is summed over the segment's steps on the params' frame,
and the frame's halo cells go back to the cells they copy once per segment
(the extension transposed: halo-sized collective-permutes); a number's
cotangent is a scalar all-reduce a step. A derivative with respect to captured
arrays goes through JAX's derivative of the loop (:mod:`pgas.loop.derivative`).
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp

from pgas.globalview.array import GlobalArray
from pgas.globalview.forms import anchor_of, blocks_of, narrowed
from pgas.globalview.halo import global_transport
from pgas.grid.decomposition import ext_of, ext_sides
from pgas.loop.frames import (
    blocks,
    cores,
    frames,
    loop_inputs,
    physical,
    read_only,
    step_fn,
    step_params,
)

__all__ = ["Schedule", "schedule", "fits", "recompute", "adjoint_step", "differentiable_leaves",
           "Checkpointed"]  # fmt: skip

State = Any
Sides = tuple[tuple[int, int], ...]


def _is_array(x) -> bool:
    return isinstance(x, GlobalArray)


@dataclasses.dataclass(frozen=True)
class Schedule:
    """How reverse mode has the states of a run of ``steps`` again (see the module docstring).

    Attributes:
        steps: the run's steps.
        k: the forward's steps per exchange.
        segment: steps between checkpoints, a multiple of ``k``.

    >>> s = Schedule(steps=1000, k=16, segment=32)
    >>> s.checkpoints, s.stored, s.whole, s.last
    (32, 64, 31, 8)
    """

    steps: int
    k: int
    segment: int

    @property
    def checkpoints(self) -> int:
        """States the forward stores: one at the start of every segment (the last may be
        partial)."""
        return -(-self.steps // self.segment)

    @property
    def whole(self) -> int:
        """Whole segments before the last one (which may be whole too)."""
        return (self.steps - 1) // self.segment

    @property
    def last(self) -> int:
        """Steps of the last segment."""
        return self.steps - self.whole * self.segment

    @property
    def stored(self) -> int:
        """States stored at once: the checkpoints and the states of one segment."""
        return self.checkpoints + min(self.segment, self.steps)

    @property
    def note(self) -> str:
        """The schedule in words, for reports."""
        return (f"{self.checkpoints} checkpoints, every {self.segment} steps (a multiple of "
                f"the forward's k = {self.k}); each segment recomputed and run back a step at "
                f"a time: {self.stored} states stored")  # fmt: skip


def schedule(steps: int, k: int) -> Schedule:
    """The two-level schedule with the fewest states stored for ``steps`` at the forward's
    ``k``: segments of a multiple of ``k`` steps, about ``sqrt(steps)``.

    A binomial (revolve) schedule stores fewer states for more recomputation: about
    ``log(steps)`` forward passes where this one makes one. One extra forward is the
    budget here, so the two levels.

    >>> schedule(1000, 16)
    Schedule(steps=1000, k=16, segment=32)
    >>> schedule(1000, 1)
    Schedule(steps=1000, k=1, segment=28)
    >>> schedule(3, 4)  # shorter than a group: one segment
    Schedule(steps=3, k=4, segment=4)
    """
    groups = -(-steps // k)
    best = min(range(1, groups + 1), key=lambda g: (-(-steps // (k * g)) + min(k * g, steps), g))
    return Schedule(steps, k, k * best)


def fits(reach: Sides, shortest: tuple[int, ...], read_only: bool) -> bool:
    """Whether an adjoint step's frames fit the shortest block: the state extended by
    ``below + above`` per side, a read-only field by three reaches.

    >>> fits(((1, 1),), (2,), False), fits(((1, 1),), (2,), True)
    (True, False)
    """
    return all((3 * max(lo, hi) if read_only else lo + hi) <= n
               for (lo, hi), n in zip(reach, shortest))  # fmt: skip


def _state_frame(reach: Sides):
    """The frame of the state an adjoint step reads: ``below + above`` cells per side."""
    return ext_of(tuple((lo + hi, lo + hi) for lo, hi in reach))


def recompute(body: Callable, reach: Sides) -> Callable:
    """``one(u, counter) -> (next, slabs)``: one step of ``body`` from ``u`` (blocks form),
    computed on ``u``'s frame of ``below + above`` cells per side, and the slabs that frame's
    exchange received: :func:`adjoint_step` builds the same frame from them, with no
    exchange of its own."""
    ext_u = _state_frame(reach)

    def one(u, counter=None):
        slabs: list = []
        framed = frames(u, ext_u, None if counter is None else anchor_of(counter),
                        moves=_recording(slabs), joined=True)  # fmt: skip
        return cores(body(framed)), slabs

    return one


def _recording(slabs: list) -> Callable:
    """``moves`` for :func:`pgas.loop.frames.frames`: the global view's, each received slab
    appended to ``slabs``."""

    def moves(axis: int, periodic: bool):
        move = global_transport(2 * axis, periodic)

        def record(slab, direction):
            slabs.append(move(slab, direction))
            return slabs[-1]

        return record

    return moves


def _replaying(slabs) -> Callable:
    """``moves`` for :func:`pgas.loop.frames.frames`: the slabs :func:`_recording` kept, in
    the order they came."""
    given = iter(slabs)
    return lambda axis, periodic: lambda slab, direction: next(given)


def adjoint_step(body: Callable, reach: Sides, with_params: bool = False) -> Callable:
    """``back(u, w, counter, slabs)``: the cotangent at ``u`` (blocks form) of one step of
    ``body`` from ``u``, given the cotangent ``w`` (blocks form) of its result and the slabs
    :func:`recompute` received for ``u``'s frame; in gather form (see the module docstring).

    ``with_params``: ``body(given)`` is the body reading ``given``, the params as the
    segment extended them (:func:`pgas.loop.frames.read_only`), and
    ``back(u, w, counter, slabs, given)`` gives ``(cotangent at u, cotangents of given)``,
    the latter for :func:`differentiable_leaves` of ``given``: each field's on its frame,
    each scalar's reduced over the blocks. The state's cotangent is in gather form (each
    cell's from every cell of the frame that reads it); a param's is in scatter form, from
    the cells of the block only (each written cell counted once over the devices), its
    frame's halo cells given back to the cells they copy once per segment
    (:meth:`Checkpointed.back`).

    >>> import numpy as np, pgas
    >>> from pgas.loop.frames import blocks, physical, step_fn
    >>> u = pgas.from_numpy(np.arange(5.0), pgas.make_mesh(devices=1), boundary=pgas.Keep())
    >>> def square(u):
    ...     u[1:-1] = u[1:-1] * u[1:-1]
    ...     return u
    >>> w = pgas.from_numpy(np.ones(5), u.layout.mesh, boundary=pgas.Keep())
    >>> _, slabs = recompute(step_fn(square), ((1, 1),))(blocks(u), 0)
    >>> back = adjoint_step(step_fn(square), ((1, 1),))
    >>> physical(back(blocks(u), blocks(w), 0, slabs)).to_numpy()  # d(u^2)/du = 2 u inside
    array([1., 2., 4., 6., 1.])
    """
    ext_u = _state_frame(reach)
    mirrored = tuple((hi, lo) for lo, hi in reach)

    def back(u, w, counter, slabs, given=None):
        anchor = None if counter is None else anchor_of(counter)
        framed = frames(u, ext_u, anchor, moves=_replaying(slabs), joined=True)
        framed, tree = jax.tree.flatten(framed, is_leaf=_is_array)
        given_leaves, given_tree = jax.tree.flatten(given, is_leaf=_is_array)
        free = differentiable_leaves(given) if with_params else []

        def forward(datas, free_datas):
            state = tree.unflatten([GlobalArray(d, g.layout, g.ext, anchor)
                                    for d, g in zip(datas, framed)])  # fmt: skip
            leaves = list(given_leaves)
            for i, d in zip(free, free_datas):
                g = leaves[i]
                leaves[i] = GlobalArray(d, g.layout, g.ext, g.anchor) if _is_array(g) else d
            run = body(given_tree.unflatten(leaves)) if with_params else body
            out = []
            for g, new in zip(framed, tree.flatten_up_to(run(state))):
                data, ext = blocks_of(new)
                out.append(narrowed(data, ext, mirrored[: g.layout.ndim]))
            return out

        framed_w = frames(w, ext_of(mirrored), anchor, joined=True)  # the cotangent's frame
        given_w = [g.data for g in tree.flatten_up_to(framed_w)]
        free_datas = [_data(given_leaves[i]) for i in free]
        pull = jax.vjp(forward, [g.data for g in framed], free_datas)[1]
        ct = pull(given_w)[0]
        if with_params:  # each written cell's share once: the block's real cells of w only
            ct_free = pull([_own(g, mirrored) for g in tree.flatten_up_to(w)])[1]
        out = [GlobalArray(narrowed(d, ext_sides(f.ext), ((0, 0),) * f.layout.ndim), f.layout,
                           (0,) * f.layout.ndim)
               for d, f in zip(ct, framed)]  # fmt: skip
        return (tree.unflatten(out), ct_free) if with_params else tree.unflatten(out)

    return back


def _own(w: GlobalArray, sides: Sides) -> jax.Array:
    """``w``'s data (blocks form, no halo) on the block's real cells, zero on its padding
    (on a periodic axis a frame's padding cell computes the cell it wraps to) and on
    ``sides`` cells around it per block axis."""
    data, lay = w.data, w.layout
    for axis in range(lay.ndim):
        real = lay.valid(axis)
        if real is not None:
            data = jnp.where(real, data, jnp.zeros((), data.dtype))
    pads = [(0, 0)] * data.ndim
    for axis, lo_hi in enumerate(sides[: lay.ndim]):
        pads[2 * axis + 1] = lo_hi
    return jnp.pad(data, pads)


def differentiable_leaves(params: Any) -> list[int]:
    """The positions, among ``params``' leaves (fields as leaves), of those reverse mode
    differentiates: the fields and numbers of an inexact dtype.

    >>> import numpy as np, pgas
    >>> c = pgas.from_numpy(np.zeros(4), pgas.make_mesh(devices=1))
    >>> differentiable_leaves({"c": c, "dt": 0.1, "n": 3})
    [0, 1]
    """
    leaves = jax.tree.leaves(params, is_leaf=_is_array)
    return [i for i, x in enumerate(leaves)
            if jnp.issubdtype(jnp.result_type(_data(x)), jnp.inexact)]  # fmt: skip


def _data(x):
    """A field's data, or the number itself."""
    return x.data if _is_array(x) else x


@dataclasses.dataclass(frozen=True)
class Checkpointed:
    """Reverse mode of a run by :class:`Schedule`: the forward storing checkpoints, and the
    segments run back (see the module docstring).

    Attributes:
        step: the user's step.
        schedule: the schedule.
        reach: the step's reach per side and axis (:attr:`pgas.loop.plan.Plan.reach`).
        run: the forward's loop, ``run(state, count, params, segment, tied=, scan=)``
            (:attr:`pgas.loop.programs.Program.inline`, traceable).
        takes_params: the step is called ``step(state, params)``.
        held: the arrays the step captures (their fields extended per segment).
        with_params: :meth:`back` gives the cotangent of the params too (of their
            :func:`differentiable_leaves`; the others' are zero).
    """

    step: Callable
    schedule: Schedule
    reach: Sides
    run: Callable
    takes_params: bool = False
    held: tuple = ()
    with_params: bool = False

    @property
    def _widths(self) -> tuple[int, ...]:
        """The reach per axis, both sides alike: what the params and held arrays are
        extended by (two of them for an adjoint frame)."""
        return tuple(max(lo, hi) for lo, hi in self.reach)

    def forward(self, state: State, params: Any) -> tuple[State, tuple]:
        """The run's result, and what reverse mode keeps: the checkpoints (stacked) and the
        last segment's start."""
        s, stack = self.schedule, None
        if s.whole:
            state, stack = jax.lax.scan(lambda c, _: (self._run(c, s.segment, params), c),
                                        state, None, length=s.whole)  # fmt: skip
        return self._run(state, s.last, params), (stack, state)

    def _run(self, state: State, count: int, params: Any) -> State:
        """``count`` steps of the forward's loop, as a while loop (no derivative sees it)."""
        return self.run(state, count, params, None, tied=True, scan=False)

    def back(self, kept: tuple, ct: State, params: Any) -> State | tuple[State, Any]:
        """The cotangent of the run's start from ``ct``, that of its result; with
        :attr:`with_params`, ``(that, the params' cotangent)``."""
        (stack, last), s = kept, self.schedule
        ct, cp = self._segment(last, s.last, ct, params)
        if s.whole:

            def one(carry, c):
                w, total = carry
                w, more = self._segment(c, s.segment, w, params)
                return (w, jax.tree.map(jnp.add, total, more)), None

            (ct, cp), _ = jax.lax.scan(one, (ct, cp), stack, reverse=True)
        return (ct, cp) if self.with_params else ct

    @contextlib.contextmanager
    def _pieces(self, params: Any):
        """``(one, back, given)`` on blocks: one step recomputed (:func:`recompute`), one
        adjoint step (:func:`adjoint_step`; with :attr:`with_params` it reads the params it
        is given) and the params, the params and held arrays extended for them."""
        widths = self._widths
        held = tuple(c.field for c in self.held if c.field is not None)
        with loop_inputs(params, held, widths, 2) as given:  # an adjoint frame: 2 reaches
            body = step_fn(self.step, step_params(given, self.takes_params))
            reads = ((lambda p: step_fn(self.step, step_params(p, self.takes_params)))
                     if self.with_params else body)  # fmt: skip
            yield (recompute(body, self.reach), adjoint_step(reads, self.reach, self.with_params),
                   given)  # fmt: skip

    def _segment(self, start: State, count: int, ct: State, params: Any) -> tuple[State, Any]:
        """``count`` steps from ``start`` recomputed one step per exchange, every state
        stored, then run back from ``ct`` one adjoint step at a time: the cotangent at
        ``start`` and the params' (``None`` without :attr:`with_params`)."""
        with self._pieces(params) as (one, back, given):

            def ahead(s, i):
                nxt, slabs = one(s, i)
                return nxt, (s, slabs)

            _, (kept, received) = jax.lax.scan(ahead, blocks(start),
                                               jnp.arange(count, dtype=jnp.int32))  # fmt: skip

            def state_at(j):
                i = count - 1 - j
                u = jax.tree.map(lambda g: GlobalArray(g.data[i], g.layout, g.ext), kept,
                                 is_leaf=_is_array)  # fmt: skip
                return i, u, [slab[i] for slab in received]

            if not self.with_params:

                def step_back(j, w):
                    i, u, slabs = state_at(j)
                    return back(u, w, i, slabs)

                return physical(jax.lax.fori_loop(0, count, step_back, blocks(ct))), None

            def step_back_params(j, carry):
                w, total = carry
                i, u, slabs = state_at(j)
                w, more = back(u, w, i, slabs, given)
                return w, [a + b for a, b in zip(total, more)]

            free = differentiable_leaves(given)
            leaves = jax.tree.leaves(given, is_leaf=_is_array)
            zeros = [jnp.zeros_like(_data(leaves[i])) for i in free]
            w, total = jax.lax.fori_loop(0, count, step_back_params, (blocks(ct), zeros))
        return physical(w), self._params_cotangent(params, total)

    def _params_cotangent(self, params: Any, total: list) -> Any:
        """The params' cotangent from ``total``, that of each of their differentiable leaves
        as a segment extended them: the extension transposed (each frame's halo cells sent
        back to the cells they copy, halo-sized collective-permutes), zero for the rest."""
        widths = self._widths
        leaves, tree = jax.tree.flatten(params, is_leaf=_is_array)
        free = differentiable_leaves(params)

        def extended(datas):
            mine = list(leaves)
            for i, d in zip(free, datas):
                g = mine[i]
                mine[i] = GlobalArray(d, g.layout, g.ext, g.anchor) if _is_array(g) else d
            out = jax.tree.leaves(read_only(tree.unflatten(mine), widths, 2), is_leaf=_is_array)
            return [_data(out[i]) for i in free]

        back = jax.vjp(extended, [_data(leaves[i]) for i in free])[1](total)[0]
        out = [jnp.zeros_like(_data(x)) for x in leaves]
        for i, d in zip(free, back):
            out[i] = d
        return jax.tree.unflatten(jax.tree.structure(params), out)

    def step_back(self, state: State, ct: State, params: Any) -> tuple[State, State]:
        """One physical step of the way back, as :meth:`back` runs it in a segment: the step
        recomputed from ``state`` and the cotangent at ``state`` from ``ct``, that of the
        next state (what :func:`pgas.comm_report` compiles with ``gradient=True``)."""
        with self._pieces(params) as (one, back, given):
            u, zero = blocks(state), jnp.int32(0)
            nxt, slabs = one(u, zero)
            w = back(u, blocks(ct), zero, slabs, *((given,) if self.with_params else ()))
            return physical(nxt), physical(w[0] if self.with_params else w)
