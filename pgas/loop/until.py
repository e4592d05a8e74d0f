"""Iterate to convergence: ``run_until(step, state, converged, max_steps)`` as one program.

The whole iteration is one compiled ``lax.while_loop``: each iteration runs
``check_every`` steps of the compiled loop of :func:`pgas.run` (the same deep
halos, the same bits), then evaluates ``converged(state)``, typically a
reduction such as ``pgas.max(abs(r)) < tol``: one all-reduce of a scalar per
check. The loop stops at the first check that holds, or after ``max_steps``
steps, so ``steps_taken`` is a multiple of ``check_every`` (or ``max_steps``),
and the state is bitwise equal to ``pgas.run(step, state, steps_taken)``.
Nothing returns to Python between checks.

``check_every="auto"`` weighs a check against a step: a check (a halo
refresh, a pass over the fields and one synchronising all-reduce) was measured
at about 3.5 steps of the double-buffered Jacobi loop, so the loop checks every
:data:`CHECK_COST_STEPS` = 64 steps (rounded to whole deep-halo groups), a few %
of the run; a step that computes a reduction itself (CG) synchronises every step
anyway, so it is checked every step. The result says which value ran
(benchmarks/README.md, "Iterative solvers").

Reaching ``max_steps`` without convergence is reported: ``result.converged``
is ``False`` and a :class:`NonConvergenceWarning` is issued.

A state gone non-finite stops the loop. A check also reads the values its
``converged`` reduced (each ``pgas.sum``, ``pgas.max``, ... it called) and the
float scalars of the state (a CG's ``r . r``, which its test reads without
reducing): where one is NaN or infinite, the loop stops at that check,
``result.finite`` is ``False`` and a :class:`NonFiniteWarning` names the step.
Those values are scalars every device already holds, so this costs no
communication; a NaN in cells no reduction reads goes unseen (it cannot
change the decision). Reductions propagate NaN as NumPy does
(:mod:`pgas.globalview.reduce`), so without this check ``pgas.max(abs(r)) <
tol`` would be ``False`` at every check and the loop would run to
``max_steps``.

Any ``max_steps`` up to ``2**63 - 1`` runs exactly. The compiled loop counts
steps in int32; a longer ``max_steps`` runs as several such loops of at most
:data:`pgas.loop.counts.INT32_STEPS` steps each, one after the other (the same checks at the
same steps), stopping at the first that converges. Inside a trace the count is
an int64 (which needs ``jax_enable_x64``; without it a ``max_steps`` or
``check_every`` past ``2**31 - 1`` is refused).

Forward mode (``jax.jvp``) runs the tangent through the same loop (the trip
count is the primal's). Reverse mode (``jax.grad``) is not supported (the trip
count depends on the values): it raises a :class:`~pgas.errors.PgasError`
that says so. ``jax.jit`` of a function calling :func:`run_until` works (the
loop is inlined).
"""

from __future__ import annotations

import functools
import math
import types
import warnings
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from pgas.errors import PgasError
from pgas.globalview.reduce import recorded
from pgas.loop import counts, kept, returns
from pgas.loop.decision import all_finite, called, check_converged
from pgas.loop.outside import Same, captured, numbers_read
from pgas.loop.plan import AUTO, Plan, check_steps_per_exchange
from pgas.loop.plan import plan as make_plan
from pgas.loop.programs import program, sides
from pgas.loop.scalars import check_state, placed
from pgas.loop.timeloop import check_not_framed, check_params

__all__ = [
    "run_until",
    "Until",
    "NonConvergenceWarning",
    "NonFiniteWarning",
    "warn_non_finite",
    "SameCode",
    "choose_check_every",
    "check_args",
    "check_state_steps",
    "warn_not_converged",
]

State = Any
#: steps per check of ``check_every="auto"``: a check (a halo refresh, a pass over the fields,
#: an all-reduce that synchronises every device) costs a few steps, a few % of 64
#: (benchmarks/README.md, "Iterative solvers")
CHECK_COST_STEPS = 64


class SameCode:
    """A function compared by what it computes: its code, defaults and closure values.

    ``converged`` is often made anew for every call (``lambda u: pgas.max(abs(u)) <
    tol``, or a factory's closure over ``tol``); compared by identity, each would
    compile a new program. Two functions of the same code whose defaults and closure
    cells hold equal values of the same types (numbers, strings, ``None``, tuples of
    them; functions, classes and modules by identity) compute the same, so they share
    one. A function with any other value there (an array, which may be changed in
    place) or without code is compared by identity, as before.

    >>> make = lambda tol: (lambda u: u < tol)
    >>> SameCode(make(1e-8)) == SameCode(make(1e-8)), SameCode(make(1e-8)) == SameCode(make(1))
    (True, False)
    """

    __slots__ = ("fn", "key")

    def __init__(self, fn: Callable):
        self.fn = fn
        self.key = _code_key(fn)

    def __call__(self, *args):
        return self.fn(*args)

    def __hash__(self) -> int:
        return hash(self.key)

    def __eq__(self, other) -> bool:
        return isinstance(other, SameCode) and self.key == other.key


def _code_key(fn: Callable):
    code = getattr(fn, "__code__", None)
    if code is None:
        return Same(fn)
    try:
        cells = tuple(_typed(c.cell_contents) for c in fn.__closure__ or ())
        defaults = tuple(_typed(d) for d in fn.__defaults__ or ())
        key = (code, cells, defaults, _typed(tuple(sorted((fn.__kwdefaults__ or {}).items()))))
        hash(key)
    except (TypeError, ValueError):  # an unhashable value, an empty cell
        return Same(fn)
    return key


def _typed(value):
    """``value`` with its type (1 and 1.0 are equal, but a step computes with them apart);
    a function, class or module by identity; anything else (an array, which may be changed
    in place or compares cell by cell) raises TypeError: the whole function by identity."""
    if isinstance(value, tuple):
        return (tuple, tuple(_typed(v) for v in value))
    if value is None or isinstance(value, (bool, int, float, complex, str, bytes, np.generic)):
        return (type(value), value)
    if isinstance(value, (types.FunctionType, types.BuiltinFunctionType, types.ModuleType, type)):
        return Same(value)
    raise TypeError(f"{type(value).__name__} is compared by identity")


class NonConvergenceWarning(UserWarning):
    """:func:`run_until` reached ``max_steps`` before ``converged`` held."""


class NonFiniteWarning(NonConvergenceWarning):
    """:func:`run_until` stopped at a check where a value ``converged`` reduced (or a scalar
    of the state) was NaN or infinite: the state went non-finite."""


class Until(tuple):
    """What :func:`run_until` returns: ``(state, steps_taken)``, with more by name.

    Unpacks as a pair (``state, steps = pgas.run_until(...)``).

    Attributes:
        state: the final state.
        steps_taken: steps run (a Python int; traced inside a trace).
        converged: whether ``converged`` held at the last check (``False``:
            ``max_steps`` was reached first, or the state went non-finite).
        check_every: steps between checks, as chosen.
        plan: how the step was compiled (:func:`pgas.loop.plan.plan`).
        note: why ``check_every`` has its value (for ``"auto"``).
        finite: ``False`` where the loop stopped because a value ``converged``
            reduced, or a float scalar of the state, was NaN or infinite at the
            last check (module docstring).
    """

    def __new__(cls, state, steps_taken, converged, check_every: int, plan: Plan, note: str,
                finite=True):  # fmt: skip
        self = super().__new__(cls, (state, steps_taken))
        self.converged, self.check_every, self.plan, self.note = converged, check_every, plan, note
        self.finite = finite
        return self

    @property
    def state(self) -> State:
        return self[0]

    @property
    def steps_taken(self):
        return self[1]


jax.tree_util.register_pytree_node(
    Until,
    lambda u: ((u[0], u[1], u.converged, u.finite), (u.check_every, u.plan, u.note)),
    lambda aux, children: Until(*children[:3], *aux, finite=children[3]),
)  # a pytree: a function under jax.jit may return it


def choose_check_every(requested: int | str, k: int, reductions: bool) -> tuple[int, str]:
    """``check_every`` and why: an int is kept; ``"auto"`` weighs a check against a step.

    >>> every, note = choose_check_every("auto", 4, False)
    >>> every, note[:38]
    (64, 'check_every = 64: a check costs a few ')
    >>> choose_check_every("auto", 1, True)[0], choose_check_every(5, 1, False)[0]
    (1, 5)
    """
    if requested != AUTO:
        return int(requested), ""
    if reductions:
        return 1, ("check_every = 1: the step computes a reduction, so it synchronises every "
                   "step anyway and a check adds one scalar all-reduce")  # fmt: skip
    every = k * max(1, math.ceil(CHECK_COST_STEPS / k))
    return every, (f"check_every = {every}: a check costs a few steps (a halo refresh, a pass "
                   f"over the fields and one synchronising scalar all-reduce), so one check per "
                   f"{every} steps (a multiple of k = {k}) keeps it to a few %")  # fmt: skip


def _is_int(value) -> bool:
    return isinstance(value, (int, np.integer)) and not isinstance(value, bool)


def check_args(max_steps, check_every, steps_per_exchange) -> None:
    """Refuse a bad ``max_steps``, ``check_every`` or ``steps_per_exchange`` (every backend).

    >>> check_args(10, "auto", "auto")
    """
    if not _is_int(max_steps) or max_steps < 1:
        raise PgasError(f"max_steps = {max_steps!r}: give a whole number >= 1 (the most steps "
                        f"to run before giving up)")  # fmt: skip
    if check_every != AUTO and (not _is_int(check_every) or check_every < 1):
        raise PgasError(f"check_every = {check_every!r}: give a whole number >= 1, or 'auto'")
    k = check_steps_per_exchange(steps_per_exchange)
    if _is_int(check_every) and k != AUTO and check_every % k:
        raise PgasError(
            f"check_every = {check_every} is not a multiple of steps_per_exchange = {k}: a "
            f"check would fall inside a deep-halo group; pick check_every = "
            f"{(check_every // k + 1) * k}, or steps_per_exchange dividing {check_every}"
        )


def check_state_steps(steps_per_exchange) -> None:
    """Refuse deep halos for a local-view state dict (explicit and MPI), whose kernel reduces.

    >>> check_state_steps("auto")
    """
    if steps_per_exchange not in (AUTO, 1):
        raise PgasError(
            f"steps_per_exchange = {steps_per_exchange!r} with a state dict: its kernel reduces "
            f"inside the step (reduce(...)), which needs every cell up to date, so it runs one "
            f"step per exchange; pass steps_per_exchange=1 or 'auto'"
        )


@functools.lru_cache(maxsize=64)
def _loop(step: Callable, converged: Callable, k: int, widths, double: bool, every: int,
          max_steps: int, takes_params: bool, keys: tuple = (),
          frames: tuple = (), reads: tuple = (), checks: tuple = ()) -> Callable:  # fmt: skip
    """The traceable while loop: ``loop(state, params) -> (state, steps, done, finite)``.

    Each iteration runs ``every`` steps (a static count: the double-buffered loop of
    :func:`pgas.run` needs its parity) and one check; the ``max_steps % every`` steps
    left, if any, run after the loop unless it stopped, then one last check. It stops at
    a check that holds or that is not finite (:func:`all_finite` of what the check reduced
    and of the state's scalars). The step counter is an int32, an int64 past 2**31 - 1
    (:func:`pgas.loop.counts.counter_dtype`).
    ``frames``: the plan's ``sides``, ``fields`` and ``inputs`` for :func:`program`, as
    sorted ``(name, value)`` pairs. ``reads`` and ``checks``: the numbers ``step`` and
    ``converged`` read from outside (:func:`pgas.loop.outside.numbers_read`), parts of the
    key: a changed global or closure number (a tolerance) gives a new loop, never a stale one.
    """
    form = program(step, k, widths, None, None, double, None, takes_params, keys,
                   **dict(frames), **({"reads": reads} if reads else {})).carried  # fmt: skip

    count = counts.counter_dtype(max_steps, every)

    def check(s, given):
        """``(s, done, finite)``: the carried state (its halo refreshed), whether it
        converged and whether what the check reduced is finite."""
        s, seen = form.seen(s)
        # a decision: no derivative flows into it (jax.jvp traces it too)
        seen, given = jax.lax.stop_gradient((seen, given))
        with recorded() as values:
            done = jnp.asarray(called(converged, seen, given), jnp.bool_)
        return s, done, all_finite(values, seen)

    def loop(state, params):
        with form.inputs(params) as ready:  # extended once, outside the while loop
            return inner(state, ready, params)

    def inner(state, params, given):
        def cond(c):
            _, n, done, finite = c
            return ~done & finite & (n <= max_steps - every)

        def body(c):
            s, n, _, _ = c
            s, done, finite = check(form.steps(s, every, params), given)
            return s, n + every, done, finite

        start = (form.into(state), jnp.zeros((), count), jnp.zeros((), jnp.bool_),
                 jnp.ones((), jnp.bool_))  # fmt: skip
        out = jax.lax.while_loop(cond, body, start)
        rest = max_steps % every
        if rest:

            def tail(c):
                s, n, _, _ = c
                s, done, finite = check(form.steps(s, rest, params), given)
                return s, n + rest, done, finite

            out = jax.lax.cond(out[2] | ~out[3], lambda c: c, tail, out)
        s, n, done, finite = out
        return form.out_of(s), n, done, finite

    return loop


@functools.lru_cache(maxsize=64)
def _compiled(loop: Callable) -> Callable:
    return jax.jit(loop, donate_argnums=0)


def _forward_only(loop: Callable) -> Callable:
    """``loop`` differentiable in forward mode only: ``jax.jvp`` runs the tangent through
    the same while loop (its trip count the primal's); reverse mode meets the transpose of
    the tangent's ``linear_call``, which says it is not supported."""

    @jax.custom_jvp
    def guarded(state, params):
        return loop(state, params)

    @guarded.defjvp
    def rule(primals, tangents):
        out, (ds, *rest) = jax.jvp(loop, primals, tangents)
        leaves, tree = jax.tree.flatten(ds)
        floats = [i for i, x in enumerate(leaves) if jnp.issubdtype(x.dtype, jnp.inexact)]
        held = jax.custom_derivatives.linear_call(
            lambda _, t: t, _no_transpose, (), tuple(leaves[i] for i in floats)
        )
        for i, x in zip(floats, held):
            leaves[i] = x
        return out, (tree.unflatten(leaves), *rest)

    return guarded


def _no_transpose(_, cotangent):
    raise PgasError(
        "jax.grad (reverse mode) through pgas.run_until is not supported: its trip count "
        "depends on the values; differentiate pgas.run for a fixed number of steps "
        "(e.g. the steps_taken of a run_until outside the gradient); forward mode (jax.jvp) "
        "works"
    )


def run_until(
    step: Callable[[State], State],
    state: State,
    converged: Callable[..., Any],
    max_steps: int,
    *,
    check_every: int | str = AUTO,
    params: Any = None,
    steps_per_exchange: int | str = AUTO,
    donate: bool = False,
) -> Until:
    """Run ``step`` until ``converged(state)`` holds, as one compiled ``while`` loop.

    Args:
        step: as for :func:`pgas.run`: ``state -> state``, or
            ``(state, params) -> state`` with ``params``. It may compute scalars
            with reductions and return them in the state (conjugate gradients).
        state: a pytree of :class:`pgas.GlobalArray` fields and scalars (0-d
            JAX arrays).
        converged: ``state -> bool`` (``(state, params) -> bool`` with
            ``params``): a scalar boolean, typically a comparison of a
            reduction (``pgas.max(abs(r)) < tol``), evaluated every
            ``check_every`` steps (one all-reduce per reduction). One made
            anew per call with the same code and closure values reuses the
            compiled program (:class:`SameCode`).
        max_steps: the most steps to run (>= 1, up to ``2**63 - 1``: a large one,
            ``10**12``, means "until converged"; see the module docstring).
        check_every: steps between checks (>= 1, a multiple of an int
            ``steps_per_exchange``), or ``"auto"`` (:func:`choose_check_every`).
        params: as :func:`pgas.run`'s ``params=``; passed to ``converged`` too.
            A number ``step`` or ``converged`` reads from a module global or a
            closure (a ``tol``) is a constant of the program, cached by its
            value: a changed one compiles anew, never runs with the old one; to
            change it without compiling, pass it in ``params``.
        steps_per_exchange: ``k`` or ``"auto"``, as for :func:`pgas.run`; with
            ``"auto"`` ``k`` is lowered to divide ``check_every``.
        donate: hand ``state``'s buffers to the loop, as :func:`pgas.run`'s
            ``donate``: no copy of the state (but of a buffer it holds twice, or
            that ``params`` holds too), but ``state`` is invalid afterwards.
            Default False: the loop works on a copy and ``state`` stays usable.

    Returns:
        An :class:`Until`: ``(state, steps_taken)``, with ``.converged``,
        ``.finite``, ``.check_every``, ``.plan`` and ``.note``. ``steps_taken``
        is a multiple of ``check_every`` or ``max_steps``; the state is bitwise
        equal to ``pgas.run(step, state, steps_taken)``.

    Raises:
        PgasError: a bad ``max_steps``, ``check_every``, state leaf or
            ``converged`` (one that returns an array or expression, or uses
            Python ``if`` on a reduction); a step that returns a state of
            another structure, shape or scalar dtype; reverse-mode
            differentiation (not supported).

    Warns:
        NonConvergenceWarning: ``max_steps`` was reached before ``converged`` held,
            issued when the call returns with concrete values. Inside a trace
            (``jax.jit``, ``jax.vmap``, ``lax.scan``, a traced state, params or
            captured array) no warning is issued, since whether the test held
            is only known when the compiled program runs: read the result's
            ``.converged`` (a traced boolean; under ``vmap`` one per element).
        NonFiniteWarning: the loop stopped at a check where a value
            ``converged`` reduced, or a float scalar of the state, was NaN or
            infinite (``.finite`` is ``False``); the warning names the step.

    >>> import numpy as np, pgas
    >>> u = pgas.from_numpy(np.array([0.0, 8.0, 0.0, 0.0]), pgas.make_mesh(devices=1),
    ...                     boundary=pgas.Keep())
    >>> def jacobi(u):
    ...     u[1:-1] = 0.5 * (u[:-2] + u[2:])
    ...     return u
    >>> u, steps = pgas.run_until(jacobi, u, lambda u: pgas.max(abs(u)) < 1.0, 100,
    ...                           check_every=2)
    >>> steps, u.to_numpy()
    (4, array([0. , 0.5, 0. , 0. ]))
    """
    check_args(max_steps, check_every, steps_per_exchange)
    check_params(params)
    check_not_framed(state)
    check_state(state)
    how = make_plan(step, state, steps_per_exchange, params=params)
    every, note = choose_check_every(check_every, how.steps_per_exchange, how.reduces)
    if every % how.steps_per_exchange:  # "auto" k: lowered to divide check_every
        k = math.gcd(every, how.steps_per_exchange)
        how = make_plan(step, state, k, params=params)
    keys = captured(step) + captured(converged)
    reads, checks = numbers_read(step), numbers_read(converged)
    converged = SameCode(converged)  # one program for a converged made anew per call
    check_converged(converged, state, params)
    max_steps = int(max_steps)
    counts.check_traced("check_every", every, "(the steps between two checks)")

    def loop(steps: int) -> Callable:
        return _loop(step, converged, how.steps_per_exchange, how.widths, how.double, every,
                     steps, params is not None, keys, tuple(sorted(sides(how).items())),
                     reads, checks)  # fmt: skip

    traced = any(isinstance(x, jax.core.Tracer)
                 for x in jax.tree.leaves((state, params)))  # fmt: skip
    try:
        if traced or any(isinstance(c.obj, jax.core.Tracer) for c in keys):
            counts.check_traced("max_steps", max_steps, "inside a trace")
            out, n, done, finite = _forward_only(loop(max_steps))(state, params)
            return Until(out, n, done, every, how, note, finite)
        out = placed(state)  # a scalar where the loop returns it: a resumed run, one program
        out, n = kept.distinct(out, params) if donate else kept.entered(lambda s: s, out), 0
        for size in counts.pieces(max_steps, every):  # one loop unless past 2**31 - 1 steps
            out, m, done, finite = _compiled(loop(size))(out, params)
            n, done, finite = n + int(m), bool(done), bool(finite)
            if done or not finite:
                break
    except (TypeError, ValueError) as err:  # a step returning another state: say what it did
        returns.explain(err, step, state, params)
        raise
    if not finite:
        warn_non_finite(n, every)
    elif not done:
        warn_not_converged(max_steps, every)
    return Until(out, n, done, every, how, note, finite)


def warn_not_converged(max_steps: int, every: int, stacklevel: int = 2) -> None:
    """Warn that a run reached ``max_steps`` before converging (every backend says the same)."""
    warnings.warn(
        f"run_until reached max_steps = {max_steps} before converged held (checked every "
        f"{every} steps); raise max_steps, loosen the tolerance, or check the problem",
        NonConvergenceWarning, stacklevel=stacklevel + 1,
    )  # fmt: skip


def warn_non_finite(steps: int, every: int, stacklevel: int = 2) -> None:
    """Warn that a run stopped at step ``steps`` on a non-finite check (every backend)."""
    warnings.warn(
        f"run_until stopped at step {steps}: a value converged reduced (or a float scalar of "
        f"the state) was NaN or infinite at that check, so the state went non-finite after "
        f"the check before it (checked every {every} steps); result.finite is False. Look "
        f"for an unstable step (a time step or relaxation factor too large), a division by "
        f"zero, or a NaN in the initial state or params",
        NonFiniteWarning, stacklevel=stacklevel + 1,
    )  # fmt: skip
