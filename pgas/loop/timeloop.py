"""Compiled time loops: a whole run is one XLA program, with deep halos.

Contract: ``run(step, state, steps)`` compiles ``steps`` applications of
``step`` into a single ``lax.fori_loop`` (the trip count is a runtime value,
so the program is compiled once and reused for any count), donates the
state's buffers so the loop updates them in place, and accepts any pytree of
global arrays (several fields). ``step`` may update its arguments in place
(``u[1:-1] = ...``) and return them, or return new arrays or whole-array
expressions. :func:`compiled` gives the loop ``run`` compiles, not run, for
XLA's memory analysis and HLO.

Deep halos (``steps_per_exchange=k``, chosen by :func:`pgas.plan.plan` for
``"auto"``): every loop iteration exchanges a halo ``k`` times the step's
reach and runs ``k`` steps without communicating, bitwise equal to ``k``
single steps; on the CPU at ``k > 1`` the loop is double-buffered. The
programs and their buffers: :mod:`pgas.loop.programs`. Chunks and snapshots
end on their own step counts, so groups never cross them.

With ``snapshot_every=K`` the loop is a ``lax.scan`` over snapshots of an
inner loop of ``K`` steps, still one program; ``observe(state)`` picks what
each snapshot keeps (default: the whole state; use a reduction such as
:func:`pgas.sum` for cheap diagnostics). ``chunk`` and ``callback`` cut the run
into compiled chunks and call back into Python between them only, for
progress bars and checkpoints.

Inside JAX. Called with traced arrays (under ``jax.jit``, ``grad``, ``jvp``,
``vmap`` over params, ``lax.scan``) ``run`` inlines the same loop
(:mod:`pgas.loop.traced`), a ``jax.custom_jvp`` whose derivative is the
transposed loop for a step affine in its state, and otherwise the loop's own
derivative in rematerialised segments (:mod:`pgas.loop.derivative`,
:mod:`pgas.loop.iterations`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from pgas.errors import FrameError, PgasError, whole_number
from pgas.globalview.array import GlobalArray
from pgas.loop import counts, kept, returns
from pgas.loop.outside import captured
from pgas.loop.plan import AUTO, Plan
from pgas.loop.plan import plan as make_plan
from pgas.loop.programs import Carried as Carried  # re-exported: importable here as before
from pgas.loop.programs import Program as Program
from pgas.loop.programs import program, reads, sides
from pgas.loop.scalars import check_state, placed
from pgas.loop.traced import run_traced

__all__ = ["run", "compiled", "check_params", "check_not_framed"]

State = Any


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
                   **reads(step), **sides(how))  # fmt: skip
    return prog.advance.lower(prog.enter(state), 2).compile()


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


def check_params(params) -> None:
    """Check that every leaf of ``params`` is a scalar, a JAX or NumPy array or a
    :class:`~pgas.globalview.array.GlobalArray` in its physical form (``None``: no params).

    Raises:
        PgasError: a leaf of another type, named by its path in ``params``, or an array
            inside a loop.

    >>> check_params({"c": 0.1, "k": np.ones(3)})
    >>> check_params({"dt": "0.1"})  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    pgas.errors.PgasError: params['dt'] is a str ('0.1'); params holds scalars, ...
    """
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
            raise _nested(f"params{jax.tree_util.keystr(path)}")


def check_not_framed(state) -> None:
    """A loop's ``state`` must be in its physical form: a loop called inside another loop's
    step that runs on deep-halo frames raises :class:`~pgas.errors.FrameError`, which the
    outer plan reads as "run this step without frames" (a nested solve then sees its fields
    whole, as a standalone call does).

    >>> check_not_framed(None)
    """
    found, _ = jax.tree_util.tree_flatten_with_path(
        state, is_leaf=lambda x: isinstance(x, GlobalArray)
    )
    for path, leaf in found:
        if isinstance(leaf, GlobalArray) and leaf.ext is not None:
            raise _nested(f"state{jax.tree_util.keystr(path)}")


def _nested(what: str) -> FrameError:
    return FrameError(
        f"{what} is a field held on an outer loop's deep-halo frames: the step calls a loop "
        f"(pgas.run, pgas.run_until or a pgas.solvers solve), which runs on whole fields, so "
        f"the outer loop runs that step one step per exchange without frames (pgas.run and "
        f"pgas.run_until plan that by themselves; a loop called from outside any loop takes "
        f"GlobalArrays in their physical form)"
    )


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
    step through the same deep-halo loop (:mod:`pgas.loop.adjoint`); of
    another step, or with respect to params, it runs checkpointed segments back
    an adjoint step at a time (:mod:`pgas.loop.reverse`); otherwise
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
    could choose avoids it: running each batch element through the unbatched
    loop (``jax.custom_batching.sequential_vmap``) was tried, and matched the
    standalone call for 1 of 8 values of ``c`` where the batched program
    matches all 8 (benchmarks/vmap_bits.py). With FMA instructions off
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
    check_params(params)
    check_not_framed(state)
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
            return run_traced(step, state, steps, params, every=every, observe=observe,
                              chunk=asked, callback=callback, keys=keys,
                              steps_per_exchange=steps_per_exchange, plan=plan,
                              remat_every=remat_every)  # fmt: skip
        except (TypeError, ValueError) as err:  # a step returning another state: say so
            returns.explain(err, step, state, params)
            raise
    steps = int(steps)
    if steps == 0:
        return state if every is None else (state, None)
    how = plan or make_plan(step, state, steps_per_exchange, params=params)
    extra = (None, params is not None, keys) if params is not None or keys else ()
    prog = program(step, how.steps_per_exchange, how.widths, every, observe, how.double, *extra,
                   **reads(step, observe), **sides(how))  # fmt: skip
    given = state  # its shapes, to name what a step returned unlike it
    state = placed(state)  # a scalar where the loop returns it: a resumed run, one program
    if donate:  # a buffer the state holds twice (or params reads) is copied: donated once
        state = _convert(prog.enter, kept.distinct(state, params))
    else:
        state = kept.entered(prog.enter, state)
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
