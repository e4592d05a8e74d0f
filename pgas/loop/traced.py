""":func:`pgas.run` inside a caller's trace: the same loop inlined into the caller's program.

Contract: called with traced arrays (under ``jax.jit``, ``grad``, ``jvp``,
``vmap`` over params, ``lax.scan``) :func:`pgas.loop.timeloop.run` runs
:func:`run_traced`, which inlines the same loop
(:attr:`pgas.loop.programs.Program.inline`): the same deep halos, collectives
and bits as the standalone call; no ``jit`` of its own, no donation, static
trip counts (a ``lax.scan``, which reverse mode differentiates) unless
``steps`` is traced. The loop is a ``jax.custom_jvp``
(:func:`pgas.loop.derivative.differentiable`): its primal is that loop, and
its derivative, one step per exchange, is cut into rematerialised segments of
``remat_every`` steps (:func:`pgas.loop.iterations.segments`) where it is not
the transposed loop.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable

import jax

from pgas.errors import PgasError
from pgas.loop import counts
from pgas.loop.derivative import differentiable, reverse_of
from pgas.loop.plan import AUTO, Plan
from pgas.loop.plan import plan as make_plan
from pgas.loop.programs import program, reads, sides

__all__ = ["run_traced"]


def run_traced(step: Callable, state, steps, params=None, *, every: int | None = None,
               observe: Callable | None = None, chunk: int | None = None,
               callback: Callable | None = None, keys: tuple = (),
               steps_per_exchange: int | str = AUTO, plan: Plan | None = None,
               remat_every: int | str | None = AUTO):  # fmt: skip
    """:func:`pgas.loop.timeloop.run` inside a caller's trace: the loop inlined into the
    caller's program (see the module docstring).

    Args:
        step, state, steps, params: as :func:`pgas.loop.timeloop.run` takes them, its
            checks done; ``steps`` a Python int or a traced integer.
        every: ``snapshot_every``, checked (it divides ``steps``).
        observe: what a snapshot keeps.
        chunk: as given to ``run`` (before its default): refused here.
        callback: refused here: Python cannot run inside a trace.
        keys: the arrays the step captures (:func:`pgas.loop.outside.captured`).
        steps_per_exchange, plan, remat_every: as ``run`` takes them.

    Raises:
        PgasError: a ``chunk`` or ``callback``; a double-buffered ``plan`` with a traced
            ``steps``.

    >>> import jax, numpy as np, pgas
    >>> u = pgas.from_numpy(np.array([0.0, 4.0, 0.0]), pgas.make_mesh(devices=1))
    >>> def heat(u):
    ...     u[1:-1] = 0.5 * u[1:-1] + 0.25 * (u[:-2] + u[2:])
    ...     return u
    >>> jax.jit(lambda u: run_traced(heat, u, 2))(u).to_numpy()
    array([0., 1., 0.])
    """
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
    found = reads(step, observe)
    prog = program(step, k, how.widths, every, observe, how.double, None, params is not None,
                   held, **found, **sides(how))  # fmt: skip
    # the derivative differentiates one step per exchange, single-buffered (the same bits):
    # a deep-halo group's transpose cost more than k single steps' (value-and-grad at k = 4
    # took 1.6 s against 0.43 s at k = 1, heat1d 2**20, 2 CPU devices, 256 steps)
    one = how if k == 1 and not how.double else make_plan(step, state, 1, double=False,
                                                          params=params)  # fmt: skip
    single = prog if one is how else program(step, 1, one.widths, every, observe, False, None,
                                             params is not None, held, **found,
                                             **sides(one))  # fmt: skip
    # only the derivative is ever differentiated (the rule of differentiable), so only its
    # loop is cut into rematerialised segments; the forward loop runs as the standalone one
    forward = functools.partial(prog.inline, segment=None)
    derivative = functools.partial(single.inline, segment=_segment(remat_every, steps))
    back = None
    if every is None and _is_int(steps) and how.widths is not None and len(held) == len(keys):
        # no captured array is traced: the transposed loop may close over what the step reads
        back = functools.partial(reverse_of, step, steps, how, held, prog.inline)
    return differentiable(forward, derivative, state, steps, params, back)


def _segment(remat_every, steps) -> int | None:
    """Steps per rematerialised segment of the derivative's loop (see
    :func:`pgas.loop.iterations.segments`)."""
    if remat_every is None or not _is_int(steps):
        return None
    if remat_every == AUTO:
        return max(2, math.isqrt(max(steps, 1)))
    return remat_every


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)
