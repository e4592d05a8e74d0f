"""The derivative of a loop inside JAX: a ``custom_jvp``; for an affine step, a transposed loop.

Contract: :func:`pgas.loop.timeloop.run` inside a caller's trace
(:mod:`pgas.loop.traced`) is a ``jax.custom_jvp`` (:func:`differentiable`):
its primal is the loop of :attr:`pgas.loop.programs.Program.inline`, as fast
as the standalone run, and its derivative one of two. Either gives the
numbers of JAX's derivative of the loop.

- A step affine in its state, differentiated with respect to the state only
  (:func:`pgas.loop.adjoint.transposable`): the tangent is a ``linear_call``
  whose transpose runs the transposed step through a loop of
  :func:`pgas.loop.programs.program` (:class:`Transposed`,
  :mod:`pgas.loop.adjoint`): deep halos and double buffers as the forward has
  them, nothing stored and nothing recomputed. A ``vmap`` of it runs through
  the batching rule of :mod:`pgas.loop.batching`.
- Another step on fields, differentiated with respect to the state, or any
  step on fields differentiated with respect to its params (of an inexact
  dtype) and perhaps its state: the same ``linear_call``, linear in both
  tangents, whose transpose runs checkpointed segments back one adjoint step at
  a time, the params' cotangent summed over the steps (:mod:`pgas.loop.reverse`).
- Otherwise the derivative is that of the same loop run one step per exchange
  with loop-invariant masks (:func:`pgas.loop.iterations.tie`; the same bits at
  every ``k``), so nothing per step is stored for a linear step and no
  deep-halo group is transposed. Reverse mode cuts it into rematerialised
  segments (:func:`pgas.loop.iterations.segments`): about ``2 sqrt(steps)``
  stored states for one extra forward pass.

Evaluated eagerly (a ``jax.grad`` without ``jit``), the loop's forward and its
way back run as two compiled programs, not one per primitive; where they are
those of :func:`reverse_of`, they are kept (:func:`compiled`) and a second such
gradient compiles neither. Inside a caller's trace nothing changes.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable

import jax

import pgas.loop.batching  # noqa: F401  (linear_call's batching rule, registered on import)
from pgas.errors import PgasError
from pgas.globalview.array import GlobalArray
from pgas.loop import adjoint, reverse
from pgas.loop.plan import Plan
from pgas.loop.plan import plan as make_plan
from pgas.loop.programs import program, reads, sides

__all__ = ["differentiable", "reverse_of", "Transposed", "compiled", "WayBack", "way_back"]


@dataclasses.dataclass(frozen=True)
class Transposed:
    """Reverse mode of a run of a step affine in its state: the forward as it runs, nothing
    kept, and the transposed step run through the forward's loop (:mod:`pgas.loop.adjoint`).

    Equal where its loops and steps are (both loops come from the cache of
    :func:`pgas.loop.programs.program`), so it keys its compiled programs (:func:`compiled`).

    Attributes:
        run: the forward's loop, ``run(state, count, params, segment, tied=, scan=)``
            (:attr:`pgas.loop.programs.Program.inline`).
        loop: the transposed step's loop, ``loop(ct, count, params, segment)``.
        steps: the run's steps.
        k: the transposed loop's steps per exchange.
        widths: the transposed step's reach per axis, on both sides
            (:func:`pgas.loop.adjoint.adjoint_reach`).
    """

    run: Callable
    loop: Callable
    steps: int
    k: int = 1
    widths: tuple[int, ...] = ()

    def forward(self, state, params) -> tuple:
        return self.run(state, self.steps, params, None, tied=True, scan=False), ()

    def back(self, kept: tuple, ct, params):
        return self.loop(ct, self.steps, params, None)


@functools.lru_cache(maxsize=64)
def compiled(rev: Transposed | reverse.Checkpointed) -> tuple[Callable, Callable]:
    """``rev.forward`` and ``rev.back``, each one ``jax.jit`` program, made once per ``rev``
    (as many kept as :func:`pgas.loop.programs.program` keeps programs).

    An eager ``jax.grad`` (no ``jit``) evaluates the rule of :func:`differentiable` and
    the transpose of its ``linear_call`` one primitive at a time, each compiled on its own;
    there these run instead, each as one compiled program, and a second eager gradient of
    an equal ``rev`` traces and compiles nothing. The key is the programs' (a number read
    from an object's attribute is not in it, :mod:`pgas.loop.outside`). In a caller's trace
    (``jax.jit(jax.grad(...))``) the rule calls ``rev.forward`` and ``rev.back`` themselves,
    so the caller's program is what it was.

    >>> import jax.numpy as jnp
    >>> loop = lambda s, count, p, segment, tied=True, scan=True: 2.0**count * s
    >>> forward, back = compiled(Transposed(loop, loop, 3))
    >>> float(forward(jnp.float32(1.0), None)[0]), float(back((), jnp.float32(1.0), None))
    (8.0, 8.0)
    >>> compiled(Transposed(loop, loop, 3))[0] is forward
    True
    """
    return jax.jit(rev.forward), jax.jit(rev.back)


def reverse_of(step, steps: int, how: Plan, held: tuple, forward: Callable, state, params,
               with_params: bool = False) -> Transposed | reverse.Checkpointed | None:  # fmt: skip
    """How reverse mode runs a loop back, with respect to its state (and its params, with
    ``with_params``): an object with ``forward(state, params) -> (result, kept)`` and
    ``back(kept, ct, params) -> ct`` (``-> (ct, params' ct)`` with ``with_params``), or
    ``None`` where JAX transposes the derivative's loop instead. Made where reverse mode asks
    for it (inside the rule of :func:`differentiable`), so a forward run under ``jit``
    traces none of it.

    - A step affine in its state (:func:`pgas.loop.adjoint.transposable`): :class:`Transposed`,
      the transposed step run ``steps`` times through the forward's loop.
    - Another step on fields (:func:`pgas.loop.adjoint.qualifies`), or any such step with
      ``with_params`` (params of an inexact dtype, none of them a field with a Neumann
      face): :class:`pgas.loop.reverse.Checkpointed`, checkpointed segments run back one
      adjoint step at a time, the params' cotangent summed over the steps.

    Args:
        step: the user's step.
        steps: the forward's step count, a Python int.
        how: the forward's plan (its reach, ``k`` and platform).
        held: the arrays the step captures (:func:`pgas.loop.outside.captured`), none traced.
        forward: the forward's loop, ``forward(state, count, params, segment, tied=,
            scan=)`` (:attr:`pgas.loop.programs.Program.inline`).
        state: the forward's state, as the rule sees it.
        params: the forward's params.
        with_params: the params' cotangent is asked for too.

    >>> import numpy as np, pgas
    >>> from pgas.loop.programs import program
    >>> u = pgas.from_numpy(np.zeros(16), pgas.make_mesh(devices=1), boundary=pgas.Keep())
    >>> def heat(u):
    ...     u[1:-1] = 0.5 * u[1:-1] + 0.25 * (u[:-2] + u[2:])
    ...     return u
    >>> def square(u):
    ...     u[1:-1] = u[1:-1] * u[1:-1]
    ...     return u
    >>> def how(step):
    ...     plan = pgas.plan.plan(step, u)
    ...     loop = program(step, plan.steps_per_exchange, plan.widths, None, None).inline
    ...     return reverse_of(step, 4, plan, (), loop, u, None)
    >>> type(how(heat)).__name__, type(how(square)).__name__
    ('Transposed', 'Checkpointed')
    >>> how(square).schedule.steps
    4
    """
    if how.widths is None:
        return None
    fields = jax.tree.leaves(state, is_leaf=lambda x: isinstance(x, GlobalArray))
    if not adjoint.qualifies(state):
        return None
    shortest = tuple(min(g.layout.axes[a].min_length for g in fields)
                     for a in range(len(how.reach)))  # fmt: skip
    read_only = bool(held) or any(isinstance(x, GlobalArray) for x in jax.tree.leaves(
        params, is_leaf=lambda x: isinstance(x, GlobalArray)))  # fmt: skip
    takes = params is not None
    if with_params and not _params_qualify(params):
        return None
    if not with_params and adjoint.transposable(step, state, params):
        widths = adjoint.adjoint_reach(how.reach)
        k = adjoint.adjoint_k(how.steps_per_exchange, widths, shortest, read_only)
        if k < 1:
            return None
        prog = program(adjoint.transposed(step, takes, widths), k, widths, None, None,
                       double=how.platform == "cpu" and k > 1, takes_params=takes,
                       captured=held, **reads(step))  # fmt: skip
        return Transposed(forward, prog.inline, steps, k, widths)
    if not reverse.fits(how.reach, shortest, read_only):
        return None
    return reverse.Checkpointed(
        step,
        reverse.schedule(steps, how.steps_per_exchange),
        how.reach,
        forward,
        takes,
        held,
        with_params,
    )


def _params_qualify(params) -> bool:
    """Whether the checkpointed way back gives ``params``' cotangent: every leaf of an
    inexact dtype (an integer one has none) and no field with a face whose ghosts steps
    write (:func:`pgas.loop.adjoint.qualifies`)."""
    leaves = jax.tree.leaves(params, is_leaf=lambda x: isinstance(x, GlobalArray))
    fields = [g for g in leaves if isinstance(g, GlobalArray)]
    return (len(reverse.differentiable_leaves(params)) == len(leaves)
            and (not fields or adjoint.qualifies(fields)))  # fmt: skip


@dataclasses.dataclass(frozen=True)
class WayBack:
    """One piece of the way back of a run, as reverse mode runs it, for a report
    (:func:`pgas.comm_report` with ``gradient=True``).

    Attributes:
        fn: the piece, ``fn(*args)``: ``k`` transposed steps (one exchange of the
            transposed loop), or one physical step of a checkpointed segment's way back
            (the step recomputed and one adjoint step,
            :meth:`pgas.loop.reverse.Checkpointed.step_back`).
        args: its arguments.
        halos: the ideal halos of the piece, per axis ``(below, above)``, each exchanged once.
        k: physical steps the piece runs.
        note: the schedule, in words.
    """

    fn: Callable
    args: tuple
    halos: tuple
    k: int
    note: str


def way_back(step, state, steps: int, params, steps_per_exchange: int | str,
             plan: Plan | None = None) -> WayBack:  # fmt: skip
    """How reverse mode runs ``pgas.run(step, state, steps)`` back (:func:`reverse_of`, as a
    ``jax.grad`` of the run decides), as one piece to compile; ``plan``: the forward's, as
    :func:`pgas.run`'s ``plan=`` (default: made here).

    Raises:
        PgasError: ``steps`` not a whole number >= 1, or a run that reverse mode takes through
            JAX's derivative of the loop (no pgas loop to report).
    """
    if not isinstance(steps, int) or isinstance(steps, bool) or steps < 1:
        raise PgasError(f"steps = {steps!r}: a gradient's report needs the run's step count, "
                        f"a whole number >= 1, e.g. comm_report(step, u, gradient=True, "
                        f"steps=1000)")  # fmt: skip
    how = plan or make_plan(step, state, steps_per_exchange, params=params)
    rev = None
    if how.widths is not None:
        prog = program(step, how.steps_per_exchange, how.widths, None, None, how.double, None,
                       params is not None, (), **reads(step), **sides(how))  # fmt: skip
        rev = reverse_of(step, steps, how, (), prog.inline, state, params)
    if isinstance(rev, Transposed):
        return WayBack(lambda ct, p: rev.loop(ct, rev.k, p, None), (state, params),
                       (tuple(rev.k * w for w in rev.widths),), rev.k,
                       f"{rev.k} on the way back: the transposed step's loop")  # fmt: skip
    if isinstance(rev, reverse.Checkpointed):
        mirrored = tuple((hi, lo) for lo, hi in rev.reach)
        return WayBack(rev.step_back, (state, state, params), (rev.reach, mirrored), 1,
                       f"1 on the way back: {rev.schedule.note}")  # fmt: skip
    raise PgasError(
        "reverse mode runs this step's loop back through JAX's derivative of the loop (a field "
        "of an integer dtype, a Neumann face, a scalar in the state, or blocks too short for "
        "the adjoint's frames: pgas.loop.derivative), not through a pgas loop: compile the "
        "gradient and read its HLO, e.g. jax.jit(jax.grad(loss)).lower(u).compile().as_text()"
    )


def differentiable(forward: Callable, derivative: Callable, state, steps, params,
                   adjoint_of: Callable | None = None):  # fmt: skip
    """``forward(state, steps, params, tied=True)``, differentiated as
    ``derivative(state, steps, params, tied=False)`` (see :func:`pgas.loop.iterations.tie`).

    A ``jax.custom_jvp`` whose primal is the loop with its masks tied to the
    counter (as fast as the standalone run under ``jit``) and whose rule is the
    ``jvp`` of the derivative's loop untied, so that forward and reverse mode
    see loop-invariant masks: reverse mode computes them once rather than
    storing one per step. ``derivative`` runs one step per exchange: its
    transpose is cheaper than a deep-halo group's, and every ``k`` gives the
    same bits. Values the step reads from the enclosing scope (a coefficient
    the caller differentiates) cross the boundary as arguments
    (``jax.closure_convert``), so their derivatives are kept; ``steps`` stays as
    the caller gave it (a static count, or a traced one for forward use).

    ``adjoint_of(state, params, with_params)``: how the loop runs back, with
    respect to the state (and the params, with ``with_params``), an object with
    ``forward`` and ``back`` (:func:`reverse_of`), or ``None``. Where the state,
    the params or both have a tangent (the enclosing scope's values none) and it
    exists, the rule's primal is its ``forward``
    (the forward loop as a while loop: reverse mode's partial evaluation of a
    scan would hoist its index arrays out of the loop, see
    :func:`pgas.loop.iterations.fori`), and its tangent a
    ``jax.custom_derivatives.linear_call`` whose transpose is its ``back``, so
    reverse mode runs pgas's own loops instead of JAX's transpose of the
    derivative's loop.

    Evaluated eagerly (the rule's primals concrete: a ``jax.grad`` or ``jax.jvp``
    without ``jit``), each piece of the rule runs as one compiled program rather
    than one per primitive: the derivative's loop (a ``jax.jit`` made per call),
    and the reverse run's ``forward`` and ``back`` (:func:`compiled`, kept per
    run back, so a second eager gradient compiles nothing). In a caller's trace
    nothing is wrapped: the caller's program is what it was.

    >>> import jax
    >>> def loop(s, steps, p, tied=True, scan=True):  # a toy loop: s doubled, steps times
    ...     return s * 2.0**steps
    >>> float(jax.grad(lambda x: differentiable(loop, loop, x, 3, None))(1.0))
    8.0
    """

    def loop(inline: Callable, tied: bool) -> Callable:
        return lambda s, p: inline(s, steps, p, tied=tied)

    tied, consts = jax.closure_convert(loop(forward, True), state, params)
    untied, others = jax.closure_convert(loop(derivative, False), state, params)
    n = len(consts)
    made: dict = {}

    def reverse_for(s, p, with_params):
        if adjoint_of is None:
            return None
        if with_params not in made:
            made[with_params] = adjoint_of(s, p, with_params)
        return made[with_params]

    @jax.custom_jvp
    def run(s, p, *cs):
        return tied(s, p, *cs[:n])

    def tangent(derived, res, lin):
        (s, p, cs), (ds, dp) = res[:3], lin
        zero = jax.custom_derivatives.zero_from_primal
        return jax.jvp(derived, (s, p, *cs[n:]),
                       (_filled(s, ds), _filled(p, dp), *zero(cs[n:])))[1]  # fmt: skip

    @functools.partial(run.defjvp, symbolic_zeros=True)
    def run_jvp(primals, tangents):
        (s, p, *cs), (ds, dp, *dcs) = primals, tangents
        eager = not any(isinstance(x, jax.core.Tracer) for x in jax.tree.leaves(primals))
        derived = jax.jit(untied) if eager else untied
        with_params = not _zero(dp)
        asked = _zero(dcs) and (with_params or not _zero(ds))
        rev = reverse_for(s, p, with_params) if asked else None
        if rev is not None:
            ahead, back = compiled(rev) if eager else (rev.forward, rev.back)
            out, kept = ahead(s, p)
            # the linear arguments: the tangents that are not symbolic zeros, leaf by leaf
            # (a leaf's zero made dense would be a constant among them)
            given = (_live(ds), _live(dp) if with_params else None)

            def transpose(res, ct):
                cts = back(res[3], ct, res[1])
                cts = cts if with_params else (cts, None)
                return tuple(_like(x, c) for x, c in zip(given, cts))

            rule = functools.partial(tangent, derived)
            lin = jax.custom_derivatives.linear_call(rule, transpose, (s, p, cs, kept), given)
            return out, lin
        dp, dcs, ds = (_filled(x, _live(t)) for x, t in ((p, dp), (cs, dcs), (s, ds)))
        return jax.jvp(derived, (s, p, *cs[n:]), (ds, dp, *dcs[n:]))

    return run(state, params, *consts, *others)


def _zero(tangents) -> bool:
    """Every leaf of ``tangents`` is a symbolic zero (no derivative flows there)."""
    return all(type(t) is jax.custom_derivatives.SymbolicZero for t in jax.tree.leaves(tangents))


def _live(tangents):
    """``tangents`` with each symbolic zero made ``None`` (an empty subtree); ``None`` if all
    are."""
    if _zero(tangents):
        return None
    symbolic = jax.custom_derivatives.SymbolicZero
    return jax.tree.map(lambda t: None if type(t) is symbolic else t, tangents)


def _filled(primals, live):
    """The tangents ``live`` (:func:`_live`'s form) with each ``None`` made zeros like its
    primal's tangent."""
    zero = jax.custom_derivatives.zero_from_primal
    if live is None:
        return zero(primals)
    return jax.tree.map(lambda t, a: zero(a) if t is None else t, live, primals,
                        is_leaf=lambda t: t is None)  # fmt: skip


def _like(live, cts):
    """The cotangents ``cts`` of the leaves that ``live`` (:func:`_live`'s form) has."""
    if live is None:
        return None
    return jax.tree.map(lambda t, c: None if t is None else c, live, cts,
                        is_leaf=lambda t: t is None)  # fmt: skip
