"""The explicit path's ``run_until``: iterate to convergence in one ``shard_map`` + ``while_loop``.

Contract: :func:`run_until` is the explicit twin of :func:`pgas.run_until`:
groups of ``k`` steps as :func:`pgas.references.explicit.loop.run` (deep halos,
the same bits), and every ``check_every`` steps one exchange of the halo and
``converged(e, reduce)`` on every device (:mod:`pgas.references.explicit.checks`:
one all-reduce per reduction). It stops at the first check that holds, or that
reduced a value that is not finite, or after ``max_steps``: the same
``steps_taken`` as the automatic and MPI paths, the field bitwise equal to
theirs. A state dict runs one step per exchange
(:mod:`pgas.references.explicit.state`). :func:`until_program` is the compiled
program, cached per kernel, ``converged`` (:class:`pgas.loop.until.SameCode`),
layout, halo, region, ``k``, ``check_every``, ``max_steps``, the params'
structure and the numbers the kernel and ``converged`` read from module globals and
closures (a changed ``tol`` compiles anew); a count past ``2**31 - 1`` runs in
several loops. The state's buffers are donated, each once.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence

import jax
import jax.numpy as jnp
from jax import shard_map
from jax.sharding import PartitionSpec

from pgas.globalview.array import GlobalArray
from pgas.globalview.view import normalize_index
from pgas.grid.decomposition import halo_sides
from pgas.grid.layout import Layout
from pgas.loop import counts
from pgas.loop.decision import all_finite, check_decision
from pgas.loop.kept import distinct
from pgas.loop.outside import numbers_read
from pgas.loop.until import (
    SameCode,
    Until,
    check_args,
    check_state_steps,
    choose_check_every,
    warn_non_finite,
    warn_not_converged,
)
from pgas.references.explicit.checks import converged_of, reducer, while_checks
from pgas.references.explicit.exchange import Kernel, block_numbers, extended, halo_key, widths_of
from pgas.references.explicit.loop import region_key
from pgas.references.explicit.params import given, param_specs, split_params
from pgas.references.explicit.state import split_state, state_of, state_until_program
from pgas.references.explicit.update import choose, local_update, plan

__all__ = ["run_until", "until_program"]


@functools.lru_cache(maxsize=32)
def until_program(kernel: Kernel, converged: Callable, layout: Layout, widths: tuple,
                  region_key, k: int, every: int, max_steps: int, tree=None,
                  fields: tuple = (), reads: tuple = ()) -> Callable:  # fmt: skip
    """The compiled program of :func:`run_until` on a field:
    ``(block, *params) -> (block, steps, done, finite)``.

    ``tree`` is the structure of ``params`` (``None``: no params) and ``fields`` the layout
    of each leaf that is a field (``None`` for a scalar); fields get their halo once. It
    stops at a check that holds or whose reductions are not finite
    (:func:`pgas.loop.decision.all_finite`); the step counter is an int32 (an int64 past
    ``2**31 - 1``, :func:`pgas.loop.counts.counter_dtype`).
    ``reads``: the numbers the kernel (and ``converged``) read from module globals and
    closures (:func:`pgas.loop.outside.numbers_read`), a part of the key only: a changed one
    compiles anew, never a stale program.
    """
    region = None if region_key is None else tuple(slice(*r) for r in region_key)
    window = normalize_index(region if region is not None else (), layout.shape)

    def loop(block, *leaves):
        numbers = block_numbers(layout)
        sides = halo_sides(widths, layout.ndim)
        call = given(leaves, tree, fields, layout, sides, k)
        group = local_update(lambda e: call(kernel, e), layout, sides, region, k)
        single = local_update(lambda e: call(kernel, e), layout, sides, region, 1)
        reduce = reducer(layout, window, widths, numbers)

        def advance(b, n: int):  # n static: whole groups of k, then single steps
            b = jax.lax.fori_loop(0, n // k, lambda i, x: group(x, i), b)
            return jax.lax.fori_loop(0, n % k, lambda i, x: single(x, i), b)

        def check(b):
            e = extended(b, layout, widths, numbers)
            before, seen = reduce.calls, len(reduce.seen)
            out = call(converged_of(converged), e.reshape(e.shape[1::2]), reduce)
            done = jnp.asarray(check_decision(out, reduce.calls - before), jnp.bool_)
            return done, all_finite(reduce.seen[seen:])

        return while_checks(advance, check, block, every, max_steps)

    spec = PartitionSpec(*layout.spec)
    sharded = shard_map(loop, mesh=layout.mesh, in_specs=(spec, *param_specs(fields)),
                        out_specs=(spec, *(PartitionSpec(),) * 3))  # fmt: skip
    return jax.jit(sharded, donate_argnums=0)


def _until(compiled: Callable, values, leaves: list, max_steps: int, every: int) -> tuple:
    """Run ``compiled`` (an until program of ``max_steps``'s pieces, :func:`until_program`
    or :func:`~pgas.references.explicit.state.state_until_program`): ``(values, steps, done,
    finite)``, Python values outside a trace; warns where it did not converge."""
    if any(isinstance(x, jax.core.Tracer) for x in (*jax.tree.leaves(values), *leaves)):
        counts.check_traced("max_steps", max_steps, "inside a trace")
        return compiled(max_steps)(values, *leaves)  # inside jax.jit: traced, no warning
    n = 0
    for size in counts.pieces(max_steps, every):  # one loop unless past 2**31 - 1 steps
        values, m, done, finite = compiled(size)(values, *leaves)
        n, done, finite = n + int(m), bool(done), bool(finite)
        if done or not finite:
            break
    if not finite:
        warn_non_finite(n, every, stacklevel=3)
    elif not done:
        warn_not_converged(max_steps, every, stacklevel=3)
    return values, n, done, finite


def run_until(
    kernel: Kernel,
    u: GlobalArray,
    converged: Callable,
    max_steps: int,
    *,
    halo: int | Sequence[int] = 1,
    region=None,
    check_every: int | str = "auto",
    steps_per_exchange: int | str = "auto",
    params=None,
):
    """Run the local ``kernel`` until ``converged`` holds: one ``shard_map`` + ``while_loop``.

    The explicit twin of :func:`pgas.run_until`: every ``check_every`` steps
    (deep halos between checks, as :func:`~pgas.references.explicit.loop.run`) the
    halo of ``u`` is exchanged once (``halo`` wide) and ``converged(e, reduce)``
    runs on every device, ``e`` the block with its halo; ``reduce(values, op="sum")`` reduces
    ``values`` of the block's own cells (``e[1:-1]`` for halo 1) over the
    cells the kernel writes (``region`` minus ``Keep`` cells, no padding) on
    all devices, one all-reduce (``psum``/``pmax``/``pmin``) per call. The loop
    stops at the first check that holds, or after ``max_steps`` steps: the
    same ``steps_taken`` as :func:`pgas.run_until` with the same
    ``check_every``, and the field bitwise equal to ``run(kernel, u,
    steps_taken)``. The reductions are not bitwise equal across backends or
    decompositions (another order of the sum): they only decide when to stop,
    unless they are ``reduce(..., reproducible=True)`` (the same bits everywhere).

    A state dict (conjugate gradients): ``u`` may be a dict of
    :class:`pgas.GlobalArray` fields split alike and 0-d scalars. Its kernel
    reduces inside the step, ``kernel(e, reduce)`` (``kernel(e, p, reduce)``
    with ``params``), ``e`` the dict of each field's block with its halo and
    each scalar, and returns a dict of the same keys: each field's new cells
    and each new scalar (``alpha = e['rr'] / reduce(p * ap,
    reproducible=True)``). A reduction inside a step needs every cell up to
    date, so a state dict runs one step per exchange (``k = 1``, as on the
    automatic path) and ``check_every="auto"`` is 1; ``converged(e, reduce)``
    gets the same dict and may read a scalar the step reduced (``e['rr'] <
    tol``) without reducing again. ``reduce`` covers the cells the first field
    writes. :func:`~pgas.references.explicit.loop.run` takes the same state dict for a
    fixed number of steps.

    Args:
        kernel: local kernel (:mod:`pgas.references.explicit`); ``kernel(e, p)`` with ``params``;
            ``kernel(e, reduce)`` (``kernel(e, p, reduce)``) for a state dict.
        u: the field (its buffer is donated; use the result), or a state dict (one buffer
            held twice is copied first).
        converged: ``converged(e, reduce) -> bool`` (``converged(e, p, reduce)``
            with ``params``), written with operators NumPy and ``jax.numpy``
            share, so that :func:`pgas.mpi.run_until` runs the same function.
        max_steps: the most steps to run (>= 1, up to ``2**63 - 1``, as
            :func:`pgas.run_until`: past ``2**31 - 1`` in several loops).
        halo: halo width per axis (an int for all).
        region: window the kernel writes (NumPy slices in global coordinates).
        check_every: steps between checks (>= 1, a multiple of an int
            ``steps_per_exchange``) or ``"auto"``
            (:func:`pgas.loop.until.choose_check_every`).
        steps_per_exchange: ``k`` or ``"auto"``; with ``"auto"`` lowered to
            divide ``check_every``.
        params: a pytree of scalars, JAX arrays and read-only
            :class:`pgas.GlobalArray` fields split like ``u``; a field reaches
            the kernel and ``converged`` as its block with the same halo as
            ``e`` (exchanged once, before the loop). A number the kernel or
            ``converged`` reads from a module global or a closure (``tol``) is
            baked into the program instead: a changed one compiles anew
            (:func:`pgas.loop.outside.numbers_read`).

    Returns:
        A :class:`pgas.Until` ``(field, steps_taken)`` with ``.converged``,
        ``.check_every``, ``.plan`` and ``.note``.

    Raises:
        PgasError: a bad ``max_steps``, ``check_every`` or ``params``; a
            ``converged`` that does not reduce or returns more than one value.

    Warns:
        NonConvergenceWarning: ``max_steps`` was reached before ``converged`` held
            (inside ``jax.jit``, where ``steps_taken`` and ``converged`` are
            traced, it cannot warn).
        NonFiniteWarning: the loop stopped at a check where a value ``reduce``
            returned there (or a float scalar of a state dict) was NaN or
            infinite, as :func:`pgas.run_until` stops (``.finite`` is ``False``).

    >>> import numpy as np, pgas
    >>> u = pgas.from_numpy(np.array([0.0, 8.0, 0.0, 0.0]), pgas.make_mesh(devices=1),
    ...                     boundary=pgas.Keep())
    >>> out = run_until(lambda e: 0.5 * (e[:-2] + e[2:]), u,
    ...                 lambda e, reduce: reduce(abs(e[1:-1]), "max") < 1.0, 100, check_every=2)
    >>> out.steps_taken, out.state.to_numpy()
    (4, array([0. , 0.5, 0. , 0. ]))
    >>> def halve(e, reduce):                 # a field and a reduced scalar
    ...     u = 0.5 * e["u"][1:-1]
    ...     return {"u": u, "total": reduce(u, reproducible=True)}
    >>> state = {"u": pgas.from_numpy(np.full(4, 8.0), pgas.make_mesh(devices=1)), "total": 32.0}
    >>> out = run_until(halve, state, lambda e, reduce: e["total"] < 4, 100)
    >>> out.steps_taken, float(out.state["total"])
    (4, 2.0)
    """
    check_args(max_steps, check_every, steps_per_exchange)
    if isinstance(u, dict):
        return _run_until_state(kernel, u, converged, int(max_steps), halo, region, check_every,
                                steps_per_exchange, params)  # fmt: skip
    widths = widths_of(u.layout, halo)
    tree, leaves, fields = split_params(params, u.layout)
    k = choose(u, halo, steps_per_exchange).steps_per_exchange
    every, note = choose_check_every(check_every, k, False)
    how = plan(u, halo, math.gcd(every, k))
    counts.check_traced("check_every", every, "(the steps between two checks)")
    reads = numbers_read(kernel, converged)

    def compiled(steps: int) -> Callable:
        return until_program(kernel, SameCode(converged), u.layout, widths, region_key(region),
                             how.steps_per_exchange, every, steps, tree, fields,
                             reads=reads)  # fmt: skip

    data = distinct(u.data, leaves)  # donated: never a buffer the call also reads
    block, n, done, finite = _until(compiled, data, leaves, int(max_steps), every)
    return Until(GlobalArray(block, u.layout), n, done, every, how, note, finite)


def _run_until_state(kernel, state: dict, converged, max_steps: int, halo, region, check_every,
                     steps_per_exchange, params) -> Until:  # fmt: skip
    """:func:`run_until` on a state dict of fields and scalars (one step per exchange)."""
    check_state_steps(steps_per_exchange)
    keys, layouts, values, first = split_state(state)
    tree, leaves, fields = split_params(params, first)
    every, note = choose_check_every(check_every, 1, True)
    how = plan(GlobalArray(values[layouts.index(first)], first), halo, 1)
    reads = numbers_read(kernel, converged)

    def compiled(steps: int) -> Callable:
        return state_until_program(kernel, SameCode(converged), keys, layouts,
                                   halo_key(first, halo), region_key(region), every, steps, tree,
                                   fields, reads=reads)  # fmt: skip

    values = distinct(tuple(values), leaves)  # donated: each buffer once
    out, n, done, finite = _until(compiled, values, leaves, max_steps, every)
    return Until(state_of(keys, layouts, out), n, done, every, how, note, finite)
