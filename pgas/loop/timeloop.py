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
device holds two extended blocks (:func:`compiled` gives XLA's memory
analysis). ``run`` converts the user's state to that form
and back once per call. Elsewhere (``k = 1``, GPUs) the loop carries the
fields in their blocks form in one buffer: a group reads the extended copy of
its field, built once per exchange by one concatenate, so XLA writes the
group's result straight into the loop's buffer (no copy), and a device holds
the block, the extended copy and the sub-steps' intermediates.

With ``snapshot_every=K`` the loop is a ``lax.scan`` over snapshots of an
inner loop of ``K`` steps, still one program; ``observe(state)`` picks what
each snapshot keeps (default: the whole state; use a reduction such as
:func:`pgas.sum` for cheap diagnostics). ``chunk`` and ``callback`` cut the run
into compiled chunks and call back into Python between them only, for
progress bars and checkpoints.

Inside JAX. Called with traced arrays (under ``jax.jit``, ``grad``, ``jvp``,
``vmap`` over params, ``lax.scan``) ``run`` inlines the same loop
(:attr:`Program.inline`): no ``jit`` of its own, no donation, static trip
counts (a ``lax.scan``, which reverse mode differentiates) unless ``steps`` is
traced. It is a ``jax.custom_jvp`` (:func:`_differentiable`): its primal is that
loop, and its derivative one of two.

- A step affine in its state, differentiated with respect to the state only
  (:func:`pgas.loop.adjoint.transposable`): the tangent is a ``linear_call``
  whose transpose runs the transposed step through a loop of this module
  (:func:`_adjoint_loop`, :mod:`pgas.loop.adjoint`): deep halos and double
  buffers as the forward has them, nothing stored and nothing recomputed.
- Otherwise the derivative is that of the same loop run one step per exchange
  with loop-invariant masks (:func:`_tie`; the same bits at every ``k``), so
  nothing per step is stored for a linear step and no deep-halo group is
  transposed. Reverse mode cuts it into rematerialised segments
  (:func:`_segments`): a scan over segments of about ``sqrt(steps)`` steps,
  each under ``jax.checkpoint``, so the state is stored at segment boundaries
  only and one segment at a time is recomputed: about ``2 sqrt(steps)`` stored
  states for one extra forward pass. Only that loop is cut into segments: the
  forward loop is never differentiated, and runs as the standalone one. This
  two-level schedule, rather than a binomial (treeverse) one, because it is
  two nested scans (``lax.scan``) XLA compiles as loops, keeps every segment on
  whole steps, and its memory was measured within ``2.5 sqrt(steps) + 10``
  blocks up to 10000 steps (benchmarks/README.md); ``remat_every=`` is the
  knob.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Callable
from typing import Any

import jax
import jax.extend.core
import jax.interpreters.batching
import jax.numpy as jnp
import numpy as np

from pgas.errors import PgasError, whole_number
from pgas.globalview.array import GlobalArray
from pgas.loop import adjoint, counts, kept, returns
from pgas.loop.frames import (
    blocks,
    double_group,
    frame_ext,
    framed,
    group,
    loop_inputs,
    physical,
    refreshed,
    step_fn,
)
from pgas.loop.outside import numbers_read
from pgas.loop.plan import AUTO, Plan
from pgas.loop.plan import plan as make_plan
from pgas.loop.scalars import check_state

__all__ = ["run", "program", "Program", "Carried", "compiled", "captured"]

State = Any


@dataclasses.dataclass(frozen=True)
class Program:
    """The compiled loop of :func:`run` and the forms it carries.

    Attributes:
        enter: the user's state -> what the loop carries.
        advance: ``advance(carried, count, params=None)`` runs ``count`` steps
            (with snapshots: ``count`` snapshots) as one compiled program; it
            donates what it is given.
        leave: what the loop carries -> the user's state.
        inline: ``inline(state, count, params, segment)``: the same loop as a
            traceable function of the user's state (no ``jit``, no donation),
            for a caller's trace (:func:`run` under ``jax.jit``, ``grad``, ...);
            a static ``count`` is cut into rematerialised segments of
            ``segment`` loop iterations (``None``: none); ``tied=``, ``scan=``:
            see :func:`_tie` and :func:`_fori`.
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
    """The compiled program of :func:`run` (cached per step, ``k``, reach and snapshots).

    A seam for tools that need the loop itself: XLA's memory analysis and HLO
    (:func:`compiled`), or the same loop with another transport.

    Args:
        step: the step, as given to :func:`run`.
        k: steps per exchange (:attr:`pgas.loop.plan.Plan.steps_per_exchange`).
        widths: the step's reach per axis (:attr:`pgas.loop.plan.Plan.widths`).
        every: steps per snapshot, or ``None``.
        observe: what a snapshot keeps (default: the state).
        double: carry the fields extended, in two buffers
            (:func:`pgas.loop.frames.double_group`; CPU, ``k > 1``).
        transport: how the double-buffered loop's halo slabs travel between
            blocks, a :data:`pgas.globalview.halo.Transport`; default the
            collective-permutes of the global view. ``lambda slab, direction:
            slab`` gives every block its own slabs: the same work with no
            collective, which is how benchmarks/deep_halo.py measures the cost
            of communication.
        takes_params: the step is called ``step(state, params)``.
        captured: the arrays the step reads from its enclosing scope
            (:func:`captured`), part of the key so that a rebound array gives a
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
        return step_fn(step, _given(params, takes_params))

    def loop(a, count, params, segment, ready=False, tied=True, scan=True):
        if not ready:  # params and constants extended once, outside the loop
            with loop_inputs(params, held, widths, k, inputs) as params:
                return loop(a, count, params, segment, True, tied, scan)
        many = _tie(group(body(params), widths, k, sides, fields), tied)
        single = _tie(group(body(params), widths, 1, sides, fields), tied)
        a, first = _segments(many, count // k, a, segment)
        a = _fori(first, count // k, many, a, scan)
        return _fori(0, count % k, single, a, scan) if k > 1 else a  # k = 1: no remainder

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


def _tie(group: Callable, tied: bool) -> Callable:
    """``group(state, counter)``, its masks tied to the loop counter or not.

    Tied (every loop that runs forward): each group builds its masks on an
    anchor that depends on the counter (:func:`pgas.globalview.lower.anchor_of`),
    so XLA fuses them into the stencil instead of hoisting them as arrays read
    every step. Untied (the loop a derivative differentiates, see
    :func:`_differentiable`): the masks are loop-invariant, so reverse mode
    computes each once before the loop instead of storing one per step as a
    residual for the transpose (a block-sized predicate per step: the stored
    masks and their reads were half the reverse pass's time at k = 1,
    benchmarks/README.md). The results are the same bits.
    """
    return group if tied else (lambda state, counter=None: group(state))


def _given(params, takes: bool):
    """What the step is given besides its state (``None``: it is called ``step(state)``)."""
    return (params if params is not None else ()) if takes else None


def _fori(lo, hi, fn: Callable, carry, scan: bool = True):
    """``fn(carry, i)`` for ``i`` in ``[lo, hi)``: a ``fori_loop`` (a traced ``hi`` stays a
    runtime trip count; a static one becomes a scan, which reverse mode differentiates);
    nothing for a static empty range. ``scan=False``: a ``while_loop`` for a static ``hi``
    too, for a loop no derivative sees (reverse mode's partial evaluation of a scan hoists
    its loop-invariant index arrays out of the loop, which XLA then reads every step)."""
    if isinstance(hi, int) and hi <= lo:
        return carry
    if scan or not isinstance(hi, int):
        return jax.lax.fori_loop(lo, hi, lambda i, s: fn(s, i), carry)

    def body(c):
        i, s = c
        return i + 1, fn(s, i)

    return jax.lax.while_loop(lambda c: c[0] < hi, body, (jnp.int32(lo), carry))[1]


def _segments(fn: Callable, n, carry, segment: int | None, *, fresh=None, hand=None):
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
    """
    if segment is None or not isinstance(n, int) or n < 2 * segment:
        return carry, 0
    fresh, hand = fresh or (lambda c: c), hand or (lambda c: c)
    outer = n // segment

    def one(c, j):
        return hand(_fori(0, segment, lambda s, i: fn(s, j * segment + i), fresh(c))), None

    carry, _ = jax.lax.scan(jax.checkpoint(one, prevent_cse=False), carry,
                            jnp.arange(outer, dtype=jnp.int32))  # fmt: skip
    return carry, outer * segment


def _double(step: Callable, k: int, widths: tuple[int, ...], every: int | None,
            look: Callable, transport: Callable | None = None,
            takes_params: bool = False, fields: tuple = (),
            sides: tuple | None = None) -> Program:  # fmt: skip
    """The double-buffered loop (see :func:`pgas.frames.double_group`).

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
        params come from :func:`loop_inputs` already; ``tied``: see :func:`_tie`; ``scan``:
        see :func:`_fori`."""
        if not ready:
            with loop_inputs(params, fields, widths, k) as params:
                return loop(state, count, params, segment, odd, True, tied, scan)
        body = step_fn(step, _given(params, takes_params))
        many = _tie(double_group(body, widths, k, transport, sides), tied)
        single = _tie(double_group(body, widths, 1, transport, sides), tied)

        def iteration(pair, i):
            for j in range(pairs):  # each group its own anchor, so no mask is shared (and stored)
                pair = many(pair, pairs * i + j)
            return pair

        n = count // (pairs * k)
        state, first = _segments(iteration, n, state, segment,
                                 fresh=lambda x: (x, spare(x)), hand=lambda p: p[0])  # fmt: skip
        pair = _fori(first, n, iteration, (state, spare(state)), scan)
        rest = count % (pairs * k)
        two = lambda p, i: single(single(p, 2 * i), 2 * i + 1)  # noqa: E731
        pair = _fori(0, rest // 2, two, pair, scan)
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
    how = make_plan(step, state, steps_per_exchange)
    prog = program(step, how.steps_per_exchange, how.widths, None, None, how.double,
                   **_reads(step), **_sides(how))  # fmt: skip
    return prog.advance.lower(prog.enter(state), 2).compile()


def _reads(*fns: Callable | None) -> dict:
    """``reads=`` for :func:`program`: the numbers ``fns`` read from outside
    (:func:`pgas.loop.outside.numbers_read`); none where they read none, so such a step's
    cache key is the one it always was."""
    found = numbers_read(*fns)
    return {"reads": found} if found else {}


def _sides(how: Plan) -> dict:
    """``sides=``, ``fields=`` and ``inputs=`` for :func:`program` where the plan has them: a
    symmetric plan calls it as before, so its cache key (and compiled program) is the one it
    always was."""
    return ({} if how.sides is None else {"sides": how.sides}) | how.frames


def _convert(form: Callable, state: State) -> State:
    """``form(state)``, freeing ``state``'s blocks when that is a new copy: the loop owns its
    state, as when it is donated, so a device never holds a field twice between chunks."""
    out = form(state)
    if out is not state:
        for leaf in jax.tree.leaves(state, is_leaf=lambda x: isinstance(x, GlobalArray)):
            if isinstance(leaf, GlobalArray):
                leaf.data.delete()
    return out


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _check(steps, snapshot_every, chunk) -> tuple[int | None, int]:
    if isinstance(steps, jax.core.Tracer):
        if snapshot_every is not None or chunk is not None:
            raise PgasError(
                "steps is a traced value; snapshot_every and chunk need steps as a Python int "
                "(pass steps as a static argument, e.g. jax.jit(f, static_argnums=...))"
            )
        if steps.shape != () or not jnp.issubdtype(steps.dtype, jnp.integer):
            raise PgasError(f"steps = {steps!r}: give a whole number (an integer scalar)")
        return None, 0
    if steps is None:
        raise PgasError(
            "steps = None: give the number of steps to run, a whole number >= 0 (pgas.run(step, "
            "state, 100)); to run until a test holds, use pgas.run_until(step, state, "
            "converged, max_steps)"
        )
    for name, value, least in (("steps", steps, 0), ("snapshot_every", snapshot_every, 1),
                               ("chunk", chunk, 1)):  # fmt: skip
        if value is not None:  # any integral value (NumPy's too), never a bool
            whole_number(name, value, least)
    steps, snapshot_every, chunk = (None if v is None else int(v) for v in (steps, snapshot_every,
                                                                              chunk))  # fmt: skip
    every = snapshot_every
    if every is not None:  # the steps of a snapshot: one compiled loop
        counts.check_traced("snapshot_every", every, "(the steps of one snapshot)")
    if every is not None and steps % every:
        raise PgasError(
            f"snapshot_every = {every} does not divide steps = {steps}; pick steps as a "
            f"multiple of it (e.g. steps = {(steps // every + 1) * every})"
        )
    chunk = chunk or steps or 1
    if every is not None and chunk % every:
        raise PgasError(f"chunk = {chunk} must be a multiple of snapshot_every = {every}")
    return every, chunk


_PARAM_TYPES = (jax.Array, np.ndarray, np.generic, int, float, bool, complex)


def _check_params(params) -> None:
    """Every leaf of ``params`` is a scalar, a JAX or NumPy array or a :class:`GlobalArray`."""
    if params is None:
        return
    found, _ = jax.tree_util.tree_flatten_with_path(
        params, is_leaf=lambda x: isinstance(x, GlobalArray)
    )
    for path, leaf in found:
        if not isinstance(leaf, (GlobalArray, *_PARAM_TYPES)):
            raise PgasError(
                f"params{jax.tree_util.keystr(path)} is a {type(leaf).__name__} ({leaf!r:.40}); "
                f"params holds scalars, JAX or NumPy arrays and pgas.GlobalArrays (read-only "
                f"fields): pass other settings to the step by closure or functools.partial"
            )
        if isinstance(leaf, GlobalArray) and leaf.ext is not None:
            raise PgasError(f"params{jax.tree_util.keystr(path)} is an array inside a loop; "
                            f"pass a GlobalArray in its physical form")  # fmt: skip


class _Same:
    """An object compared by identity (a cache key part that holds the object alive);
    ``field``: the :class:`GlobalArray` whose data ``obj`` is (not part of the key)."""

    __slots__ = ("obj", "field")

    def __init__(self, obj, field: GlobalArray | None = None):
        self.obj, self.field = obj, field

    def __hash__(self) -> int:
        return id(self.obj)

    def __eq__(self, other) -> bool:
        return isinstance(other, _Same) and other.obj is self.obj


def captured(step: Callable, depth: int = 3) -> tuple:
    """The arrays (:class:`GlobalArray` data, ``jax.Array``) ``step`` reads from its enclosing
    scope: its closure cells and the globals its code names, and those of the functions
    found there (``depth`` levels). A compiled program holds such arrays as constants; the
    program cache keys on them by identity, so a rebound array gives a new program.

    >>> import numpy as np, pgas
    >>> c = pgas.from_numpy(np.ones(3), pgas.make_mesh(devices=1))
    >>> len(captured(lambda u: u * c))
    1
    """
    found: list = []
    seen: set[int] = set()

    def visit(obj, level: int) -> None:
        if id(obj) in seen:
            return
        seen.add(id(obj))
        if isinstance(obj, GlobalArray):
            plain = obj.ext is None and not obj.batch_ndim  # a field a loop can extend
            found.append(_Same(obj.data, obj if plain else None))
        elif isinstance(obj, jax.Array):
            found.append(_Same(obj))
        elif isinstance(obj, (list, tuple, dict)) and level > 0:
            for x in obj.values() if isinstance(obj, dict) else obj:
                visit(x, level - 1)
        elif isinstance(obj, functools.partial) and level > 0:
            for x in (obj.func, *obj.args, *obj.keywords.values()):
                visit(x, level - 1)
        elif callable(obj) and level > 0 and hasattr(obj, "__code__"):
            for cell in obj.__closure__ or ():
                try:
                    visit(cell.cell_contents, level - 1)
                except ValueError:  # an empty cell
                    pass
            names = obj.__globals__
            for name in obj.__code__.co_names:
                if name in names:
                    visit(names[name], level - 1)

    visit(step, depth)
    return tuple(found)


def _segment(remat_every, steps) -> int | None:
    """Steps per rematerialised segment of the derivative's loop (see :func:`_segments`)."""
    if remat_every is None or not _is_int(steps):
        return None
    if remat_every == AUTO:
        return max(2, math.isqrt(max(steps, 1)))
    return remat_every


def _traced(*trees) -> bool:
    return any(isinstance(x, jax.core.Tracer) for t in trees for x in jax.tree.leaves(t))


def _check_layout(state) -> None:
    """A field whose data does not have its layout's shape: a vmap over the sharded axis."""
    for g in jax.tree.leaves(state, is_leaf=lambda x: isinstance(x, GlobalArray)):
        if isinstance(g, GlobalArray) and g.ext is None and \
                tuple(g.data.shape) != g.layout.physical_shape:  # fmt: skip
            raise PgasError(
                f"a field of the state has data of shape {tuple(g.data.shape)} but its layout "
                f"holds {g.layout.physical_shape}: jax.vmap over a GlobalArray's axes (the "
                f"sharded axis) is not supported; put the ensemble in the array as an axis of "
                f"its own (e.g. spec=(None, 'x')) and write the step over it, or vmap over params"
            )


def run(
    step: Callable[[State], State],
    state: State,
    steps: int,
    *,
    params: Any = None,
    snapshot_every: int | None = None,
    observe: Callable[[State], Any] | None = None,
    chunk: int | None = None,
    callback: Callable[[int, State], None] | None = None,
    steps_per_exchange: int | str = AUTO,
    plan: Plan | None = None,
    remat_every: int | str | None = AUTO,
    donate: bool = False,
):
    """Run ``steps`` steps of ``step`` as one compiled program.

    Called with traced arrays (inside ``jax.jit``, ``jax.grad``, ``jax.vjp``,
    ``jax.jvp``, ``jax.vmap`` over ``params``, ``lax.scan``), ``run`` inlines
    the same loop into the caller's program: the same deep halos, collectives
    and bits as the standalone call; nothing is donated. Reverse mode of a
    step affine in its state, with respect to the state, runs the transposed
    step through the same deep-halo loop (:mod:`pgas.loop.adjoint`); otherwise
    it stores the state only at the boundaries of rematerialised segments
    (``remat_every``) and recomputes each segment once: about
    ``2 * sqrt(steps)`` states instead of ``steps``.

    Under ``jax.vmap`` over ``params`` each element agrees with the call alone
    within an ulp, not bitwise, where the step adds two products of inexact
    factors (``(1 - 2 * c) * u[1:-1] + c * (u[:-2] + u[2:])``): XLA's CPU
    backend always contracts a multiply and an add into one fused multiply-add,
    and which product it contracts depends on the fusion (the batched
    program's last sub-step contracts the other one; ``jax.jit`` and the
    standalone call can differ the same way). No form of the step that pgas
    could choose avoids it. With FMA instructions off
    (``XLA_FLAGS=--xla_cpu_max_isa=AVX``) vmap, jit and the standalone call
    agree bitwise, with NumPy too (benchmarks/README.md, "vmap over params").

    Args:
        step: ``state -> state``, or ``(state, params) -> state`` with ``params``;
            global-view code on :class:`pgas.GlobalArray`.
        state: a GlobalArray or any pytree of them (and 0-d scalars); left as
            it is (see ``donate``).
        steps: number of steps (>= 0): a Python int, or, inside a trace and for
            forward use only (no reverse mode, no snapshots), a traced integer.
            Any count up to ``2**63 - 1`` runs exactly: the compiled loop's trip
            count is an int32, so a longer run is several runs of at most
            ``2**31 - 2`` steps (the same bits, :mod:`pgas.loop.counts`); inside
            a trace a static count past ``2**31 - 1`` needs ``jax_enable_x64``.
        params: what the step reads besides its state, passed as
            ``step(state, params)``: a pytree of scalars, JAX arrays and
            read-only GlobalArrays (coefficient fields). They are arguments of
            the compiled program: a new value of the same shapes and dtypes runs
            without compiling, and a GlobalArray in it is exchanged once per
            run, with the halo its reads need. Arrays the step reads from its
            enclosing scope instead are constants of the program, which is
            cached by their identity (a rebound array compiles anew). Numbers
            the step or ``observe`` reads from a module global or a closure
            (``c = 0.1`` at module level) are constants too: the program is
            cached by their values, so a changed number compiles anew, never
            runs with the old one (:mod:`pgas.loop.outside`); pass a number
            that changes from call to call through ``params`` instead, which
            does not compile again.
        snapshot_every: record ``observe(state)`` after every that many steps;
            must divide ``steps``.
        observe: what a snapshot keeps; default the whole state.
        chunk: run in compiled chunks of this many steps (a multiple of
            ``snapshot_every``), calling ``callback(steps_done, state)`` after
            each; default: one chunk. Not inside a trace.
        callback: called between chunks (progress, checkpoints); never per step.
            Not inside a trace.
        steps_per_exchange: ``k``, physical steps per halo exchange (deep halos),
            or ``"auto"`` (:func:`pgas.plan.plan` chooses). Any ``k`` gives the
            same bits; it is lowered when the blocks are too small for its halo.
        plan: run this plan (:func:`pgas.loop.plan.plan` of ``step`` on a state
            like this one, made by the caller or a backend) instead of making one:
            what was decided is what runs. Default: ``plan(step, state,
            steps_per_exchange)``. A double-buffered loop keeps its framed
            buffers between chunks and hands ``callback`` a copy of the state
            in the user's form.
        remat_every: inside a trace, physical steps per rematerialised segment
            of the loop reverse mode differentiates (one step per exchange; not
            used where the transposed step runs);
            ``"auto"``: about ``sqrt(steps)``, at least 2; ``None``: no segments
            (reverse mode then stores every step). No effect on the values, nor
            outside reverse mode.
        donate: hand ``state``'s buffers to the loop (as ``jax.jit``'s
            ``donate_argnums``): the run then needs no copy of the state, one
            field less on every device, but ``state`` is invalid afterwards
            (use the returned state). Default False: the loop works on a copy
            and ``state`` stays usable, as JAX does unless asked.

    Returns:
        The final state; with ``snapshot_every``, ``(state, snapshots)`` where
        the snapshots' leaves have a leading axis of ``steps // snapshot_every``
        entries (after steps ``k, 2k, ...``).

    Raises:
        PgasError: a bad ``steps`` (``None``, negative, not whole), ``params`` or
            state leaf; a step that returns another structure, field shape or
            scalar dtype than it got (:mod:`pgas.loop.returns` names both).
        Exception: whatever a chunk or ``callback`` raised, unchanged, with two
            attributes added: ``pgas_step``, the steps completed, and
            ``pgas_state``, the state after them (in ``state``'s form; None
            if a failed chunk had consumed it), so the caller can save it.

    >>> import numpy as np, pgas
    >>> u = pgas.from_numpy(np.array([0.0, 4.0, 0.0]), pgas.make_mesh(devices=1))
    >>> def heat(u, c):
    ...     u[1:-1] = (1 - 2 * c) * u[1:-1] + c * (u[:-2] + u[2:])
    ...     return u
    >>> pgas.run(heat, u, steps=2, params=0.25).to_numpy()
    array([0., 1., 0.])
    >>> import jax
    >>> loss = lambda u: pgas.sum(pgas.run(heat, u, 2, params=0.25) ** 2)
    >>> jax.grad(loss)(pgas.from_numpy(np.array([0.0, 4.0, 0.0]), u.layout.mesh)).to_numpy()
    array([0.75, 0.5 , 0.75])
    """
    _check_params(params)
    if remat_every is not None and remat_every != AUTO and (
            not _is_int(remat_every) or remat_every < 1):  # fmt: skip
        raise PgasError(f"remat_every = {remat_every!r}: give a whole number >= 1, 'auto' or None")
    asked = chunk
    every, chunk = _check(steps, snapshot_every, chunk)
    check_state(state)
    _check_layout(state)
    keys = captured(step)
    if _traced(state, params, steps) or any(isinstance(c.obj, jax.core.Tracer) for c in keys):
        try:
            return _inline(step, state, steps, params, every, observe, asked, callback, keys,
                           steps_per_exchange, plan, remat_every)  # fmt: skip
        except (TypeError, ValueError) as err:  # a step returning another state: say so
            returns.explain(err, step, state, params)
            raise
    steps = int(steps)
    if steps == 0:
        return state if every is None else (state, None)
    how = plan or make_plan(step, state, steps_per_exchange, params=params)
    extra = (None, params is not None, keys) if params is not None or keys else ()
    prog = program(step, how.steps_per_exchange, how.widths, every, observe, how.double, *extra,
                   **_reads(step, observe), **_sides(how))  # fmt: skip
    given = state  # its shapes, to name what a step returned unlike it
    state = _convert(prog.enter, state) if donate else kept.entered(prog.enter, state)
    done, parts = 0, []
    try:
        while done < steps:
            n = min(chunk, steps - done)
            if every is None:
                state = prog.advance(state, n, params)
            else:
                state, snaps = prog.advance(state, n // every,
                                            *(() if params is None else (params,)))  # fmt: skip
                parts.append(snaps)
            done += n
            if callback is not None:  # in the user's form: a copy of the double buffers' cells
                callback(done, prog.leave(state) if how.double else state)
    except BaseException as err:  # Ctrl-C too: the state so far is worth saving
        returns.explain(err, step, given, params)
        kept.attach(err, prog.leave, state, done, steps)
        raise
    state = _convert(prog.leave, state)
    if every is None:
        return state
    if not parts:
        return state, None
    snaps = parts[0] if len(parts) == 1 else jax.tree.map(lambda *x: jnp.concatenate(x), *parts)
    return state, snaps


def _inline(step, state, steps, params, every, observe, chunk, callback, keys,
            steps_per_exchange, plan, remat_every):  # fmt: skip
    """:func:`run` inside a caller's trace: the loop inlined into the caller's program."""
    if callback is not None or chunk is not None:
        raise PgasError(
            "chunk and callback cannot run inside a trace (jax.jit, grad, vmap, ...): Python "
            "cannot run between the compiled chunks of one program; use snapshot_every (and "
            "observe) to keep what the callback would see, or call pgas.run outside the trace"
        )
    if _is_int(steps) and steps == 0:
        return state if every is None else (state, None)
    static = _is_int(steps)
    if static:
        counts.check_traced("steps", steps, "inside a trace")
    how = plan or make_plan(step, state, steps_per_exchange, double=None if static else False,
                            params=params)  # fmt: skip
    if not static and how.double:
        raise PgasError("plan is double-buffered, but steps is traced (its parity is unknown); "
                        "make the plan with pgas.plan.plan(..., double=False)")  # fmt: skip
    k = how.steps_per_exchange
    # fields captured from the enclosing scope are extended once per loop, as params are;
    # traced ones (a caller's argument) are not cached in a program, and exchange per read
    held = tuple(c for c in keys if not isinstance(c.obj, jax.core.Tracer))
    reads = _reads(step, observe)
    prog = program(step, k, how.widths, every, observe, how.double, None, params is not None,
                   held, **reads, **_sides(how))  # fmt: skip
    # the derivative differentiates one step per exchange, single-buffered (the same bits):
    # a deep-halo group's transpose cost more than k single steps' (benchmarks/README.md)
    one = how if k == 1 and not how.double else make_plan(step, state, 1, double=False,
                                                          params=params)  # fmt: skip
    single = prog if one is how else program(step, 1, one.widths, every, observe, False, None,
                                             params is not None, held, **reads,
                                             **_sides(one))  # fmt: skip
    # only the derivative is ever differentiated (the rule of _differentiable), so only its
    # loop is cut into rematerialised segments; the forward loop runs as the standalone one
    forward = functools.partial(prog.inline, segment=None)
    derivative = functools.partial(single.inline, segment=_segment(remat_every, steps))
    back = None
    if every is None and _is_int(steps) and how.widths is not None and len(held) == len(keys):
        # no captured array is traced: the transposed loop may close over what the step reads
        back = functools.partial(_adjoint_loop, step, steps, how, held)
    return _differentiable(forward, derivative, state, steps, params, back)


def _adjoint_loop(step, steps: int, how: Plan, held: tuple, state, params) -> Callable | None:
    """``back(ct, params)``: the transposed step run ``steps`` times through the forward's
    loop (:mod:`pgas.loop.adjoint`), for a step affine in its state; ``None`` where JAX
    transposes the derivative's loop instead. Made where reverse mode asks for it (inside
    the rule of :func:`_differentiable`), so a forward run under ``jit`` traces none of it."""
    if not adjoint.transposable(step, state, params):
        return None
    widths = adjoint.adjoint_reach(how.reach)
    fields = jax.tree.leaves(state, is_leaf=lambda x: isinstance(x, GlobalArray))
    shortest = tuple(min(g.layout.axes[a].min_length for g in fields)
                     for a in range(len(widths)))  # fmt: skip
    read_only = bool(held) or any(isinstance(x, GlobalArray) for x in jax.tree.leaves(
        params, is_leaf=lambda x: isinstance(x, GlobalArray)))  # fmt: skip
    k = adjoint.adjoint_k(how.steps_per_exchange, widths, shortest, read_only)
    if k < 1:
        return None
    takes = params is not None
    prog = program(adjoint.transposed(step, takes, widths), k, widths, None, None,
                   double=how.platform == "cpu" and k > 1, takes_params=takes,
                   captured=held, **_reads(step))  # fmt: skip
    return lambda ct, p: prog.inline(ct, steps, p, None)


def _differentiable(forward: Callable, derivative: Callable, state, steps, params,
                    adjoint_of: Callable | None = None):  # fmt: skip
    """``forward(state, steps, params, tied=True)``, differentiated as
    ``derivative(state, steps, params, tied=False)`` (see :func:`_tie`).

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

    ``adjoint_of(state, params)``: the transposed loop ``back(ct, params)`` or
    ``None`` (:func:`_adjoint_loop`). Where only the state has a tangent and
    ``back`` exists, the rule's tangent is a ``jax.custom_derivatives.linear_call``
    whose transpose is ``back``, so reverse mode runs the transposed step
    through the forward's deep-halo loop instead of JAX's transpose of the
    derivative's loop; the rule's primal is then the forward loop as a while
    loop (reverse mode's partial evaluation of a scan would hoist its index
    arrays out of the loop, see :func:`_fori`).
    """

    def loop(inline: Callable, tied: bool) -> Callable:
        return lambda s, p: inline(s, steps, p, tied=tied)

    tied, consts = jax.closure_convert(loop(forward, True), state, params)
    untied, others = jax.closure_convert(loop(derivative, False), state, params)
    n = len(consts)
    made: dict = {}

    def back_for(s, p) -> Callable | None:
        if adjoint_of is None:
            return None
        if "back" not in made:
            made["back"] = adjoint_of(s, p)
        return made["back"]

    @jax.custom_jvp
    def run(s, p, *cs):
        return tied(s, p, *cs[:n])

    def tangent(res, ds):
        s, p, cs = res
        zero = jax.custom_derivatives.zero_from_primal
        return jax.jvp(untied, (s, p, *cs[n:]), (ds, zero(p), *zero(cs[n:])))[1]

    @functools.partial(run.defjvp, symbolic_zeros=True)
    def run_jvp(primals, tangents):
        (s, p, *cs), (ds, dp, *dcs) = primals, tangents
        back = back_for(s, p) if _zero(dp) and _zero(dcs) and not _zero(ds) else None
        if back is not None:
            out = forward(s, steps, p, tied=True, scan=False)
            transpose = lambda res, ct: back(ct, res[1])  # noqa: E731
            lin = jax.custom_derivatives.linear_call(tangent, transpose, (s, p, cs), _dense(s, ds))
            return out, lin
        dp, dcs, ds = _dense(p, dp), _dense(cs, dcs), _dense(s, ds)
        return jax.jvp(untied, (s, p, *cs[n:]), (ds, dp, *dcs[n:]))

    return run(state, params, *consts, *others)


def _linear_call_batched(axis_data, args, dims, *, callee, **_):
    """Batching rule of ``linear_call``, which JAX lacks: a batched ``linear_call`` runs its
    callee, a linear function that JAX transposes itself.

    A ``jax.vmap`` of a gradient batches the transposed loop's ``linear_call`` (its
    callee is the transposed loop), which then runs batched. A gradient of a ``vmap``
    batches the forward's tangent, which JAX then transposes itself (the derivative's
    loop). Either way the numbers are those of a loop over the batch."""
    outs = jax.vmap(jax.extend.core.jaxpr_as_fun(callee), in_axes=list(dims),
                    axis_size=axis_data.size, axis_name=axis_data.name,
                    spmd_axis_name=axis_data.spmd_name)(*args)  # fmt: skip
    return outs, [0] * len(outs)


def _linear_call_primitive():
    """The primitive :func:`jax.custom_derivatives.linear_call` binds (found by tracing one)."""
    call = lambda x: jax.custom_derivatives.linear_call(lambda r, v: v, lambda r, c: c, (), x)  # noqa: E731
    return jax.make_jaxpr(call)(0.0).eqns[0].primitive


jax.interpreters.batching.fancy_primitive_batchers.setdefault(
    _linear_call_primitive(), _linear_call_batched
)


def _zero(tangents) -> bool:
    """Every leaf of ``tangents`` is a symbolic zero (no derivative flows there)."""
    return all(type(t) is jax.custom_derivatives.SymbolicZero for t in jax.tree.leaves(tangents))


def _dense(primals, tangents):
    """``tangents`` with each symbolic zero made an array of zeros like its primal's tangent."""
    zero = jax.custom_derivatives.zero_from_primal
    p, t = jax.tree.leaves(primals), jax.tree.leaves(tangents)
    return jax.tree.unflatten(
        jax.tree.structure(tangents),
        [zero(a) if type(b) is jax.custom_derivatives.SymbolicZero else b for a, b in zip(p, t)],
    )
