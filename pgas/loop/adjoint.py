"""The adjoint of a run: a step affine in its state, transposed and run through the same loop.

Reverse mode of ``pgas.run(step, u, n)`` needs ``(S^T)^n`` applied to the
cotangent of the result, where ``S`` is the step's linear part. When ``S``
does not depend on the state (the step is affine in it: heat, advection,
any linear stencil with fixed coefficients), pgas builds ``S^T`` as a step of
its own (:func:`transposed`) and runs it for ``n`` steps through the loop
the forward runs (:func:`pgas.loop.programs.program`): deep halos, double
buffers, one exchange per ``k`` steps, nothing stored per step and no
recomputation. JAX's own transpose of the loop would give each step a
block-sized pad per read and their sum, exchanging every step
(benchmarks/README.md, "pgas inside JAX").

A transposed sub-step, on a frame of the cotangent extended by ``e`` cells
per side: the forward sub-step on a frame that wide writes the cells ``e -
reach`` wide; the transpose of its linear part (:func:`jax.linear_transpose`,
on the local blocks) takes the cotangent of those cells and gives every cell
of the frame the sum of what the cells reading it send back: *gather form*,
each cell reads the cotangents of the cells that read it, no scatter across
blocks. A cell ``y`` has its full sum when every cell reading it lies in the
written region: ``reach`` cells in from it, mirrored, so the transposed
sub-step's result is kept ``below + above`` cells in from the frame on each side
(the adjoint's reach per side, :func:`adjoint_reach`; its loop exchanges halos
that much wider, at most the forward's ``k`` steps per exchange,
:func:`adjoint_k`). A ghost cell beyond the domain edge sends nothing back into
the domain: a Dirichlet ghost is never written (its cotangent stays on it), a
Keep ghost is never read by a written cell, and a periodic ghost is a copy of
cells another block owns, which sums them itself.

:func:`transposable` decides whether a run qualifies: every leaf of the state a
field of an inexact dtype, no field with a Neumann face, and the step's tangent,
traced as a JAX program, independent of the state (:func:`affine`, a
conservative dependency walk over the jaxpr). A Neumann ghost is re-filled from
the face's cells after every assignment; giving its cotangent back to them in
every transposed sub-step made the transposed loop many times slower than the
forward (heat1d 2**20 cells on 2 CPU devices, 1000 steps: 14.1 s against 0.63 s;
measured before the forward re-filled Neumann ghosts by slabs), so such a run is
not transposed here.
Everything else (a nonlinear step, a derivative with respect to ``params`` or a
captured coefficient, a traced array read from the enclosing scope, scalars in the
state) is differentiated by JAX through
the single-step loop of :func:`pgas.loop.derivative.differentiable`.

Cost. A transposed sub-step is one fusion, but the transpose of a window read is
a ``pad``, and XLA's CPU code for a sum of pads costs more than the forward's
slices: the transposed loop took 1.4-1.9x the forward's time, and value-and-grad
2.1-2.8x the forward against 5.5-14x with JAX's transpose of the loop (heat1d
2**20 cells, 1000 steps, 2 CPU devices; ``benchmarks/reverse_pass.py``). The
same transpose written by hand as slices of one padded array took 130 ms against
JAX's 192 ms (forward 100 ms; 1000 sub-steps, 2**19 cells, one device); emitting
that form for any step is not done.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
from jax.extend.core import Var

from pgas.globalview.array import GlobalArray
from pgas.globalview.forms import blocks_of, narrowed
from pgas.grid.decomposition import ext_of, ext_sides
from pgas.loop.frames import step_fn

__all__ = ["transposable", "qualifies", "affine", "transposed", "adjoint_reach", "adjoint_k"]

State = Any


def _is_array(x) -> bool:
    return isinstance(x, GlobalArray)


def _fields_only(state: State) -> bool:
    """Every leaf of ``state`` is a field of an inexact dtype (no scalars, no integers)."""
    leaves = jax.tree.leaves(state, is_leaf=_is_array)
    return bool(leaves) and all(
        _is_array(g) and jnp.issubdtype(g.data.dtype, jnp.inexact) for g in leaves
    )


def _fields(state: State) -> tuple[list, Callable]:
    """The state's fields, and ``rebuild(datas)``: the state with those data."""
    leaves, tree = jax.tree.flatten(state, is_leaf=_is_array)

    def rebuild(datas):
        return tree.unflatten([GlobalArray(d, g.layout, g.ext, g.anchor)
                               for d, g in zip(datas, leaves)])  # fmt: skip

    return leaves, rebuild


def _depends(jaxpr, hit: list[bool]) -> list[bool]:
    """Which outputs of ``jaxpr`` depend on its inputs marked in ``hit``: a walk over the
    equations, into the programs of nested ``jit`` calls, and every other equation taken as
    a whole (conservative)."""
    found = {v for v, h in zip(jaxpr.invars, hit) if h}

    def marked(v) -> bool:
        return isinstance(v, Var) and v in found

    for eqn in jaxpr.eqns:
        ins = [marked(v) for v in eqn.invars]
        if not any(ins):
            continue
        inner = eqn.params.get("jaxpr")
        inner = getattr(inner, "jaxpr", inner)
        if inner is not None and len(getattr(inner, "invars", ())) == len(ins):
            outs = _depends(inner, ins)
        else:
            outs = [True] * len(eqn.outvars)
        found.update(v for v, o in zip(eqn.outvars, outs) if o)
    return [marked(v) for v in jaxpr.outvars]


def transposable(step: Callable, state: State, params: Any = None) -> bool:
    """Whether reverse mode runs :func:`transposed` ``step`` for a run of it on ``state``
    (see the module docstring).

    >>> import numpy as np, pgas
    >>> def heat(u):
    ...     u[1:-1] = 0.5 * u[1:-1] + 0.25 * (u[:-2] + u[2:])
    ...     return u
    >>> mesh = pgas.make_mesh(devices=1)
    >>> transposable(heat, pgas.from_numpy(np.zeros(8), mesh, boundary=pgas.Keep()))
    True
    >>> transposable(heat, pgas.from_numpy(np.zeros(8), mesh, boundary=pgas.Neumann()))
    False
    """
    return qualifies(state) and affine(step, state, params)


def qualifies(state: State) -> bool:
    """Whether reverse mode runs a run on ``state`` back through pgas's own loops (the
    transposed step here, or :mod:`pgas.loop.reverse`): every leaf a field of an inexact
    dtype, and no field with a face whose ghosts steps write (Neumann: giving their
    cotangent back to the face's cells every step is the slow path, see the module
    docstring).

    >>> import numpy as np, pgas
    >>> mesh = pgas.make_mesh(devices=1)
    >>> qualifies(pgas.from_numpy(np.zeros(8), mesh, boundary=pgas.Keep()))
    True
    >>> qualifies(pgas.from_numpy(np.zeros(8), mesh, boundary=pgas.Neumann()))
    False
    """
    if not _fields_only(state):
        return False
    leaves = jax.tree.leaves(state, is_leaf=_is_array)
    return not any(bc.refreshed for g in leaves for faces in g.layout.boundary for bc in faces)


def affine(step: Callable, state: State, params: Any = None) -> bool:
    """Whether ``step`` is affine in its state: its tangent does not depend on the state.

    Only fields of an inexact dtype qualify (see the module docstring).

    >>> import numpy as np, pgas
    >>> u = pgas.from_numpy(np.zeros(8), pgas.make_mesh(devices=1))
    >>> def heat(u):
    ...     u[1:-1] = 0.5 * u[1:-1] + 0.25 * (u[:-2] + u[2:])
    ...     return u
    >>> affine(heat, u), affine(lambda u: u * u, u)
    (True, False)
    """
    if not _fields_only(state):
        return False
    leaves, rebuild = _fields(state)
    datas = [g.data for g in leaves]
    body = step_fn(step, params)
    if not _fields_only(jax.eval_shape(lambda d: body(rebuild(d)), datas)):
        return False

    def tangent(u0, du):
        def apply(d):
            return [g.data for g in jax.tree.leaves(body(rebuild(d)), is_leaf=_is_array)]

        return jax.jvp(apply, (u0,), (du,))[1]

    closed = jax.make_jaxpr(tangent)(datas, datas)
    return not any(_depends(closed.jaxpr, [True] * len(datas) + [False] * len(datas)))


def adjoint_reach(reach: tuple[tuple[int, int], ...]) -> tuple[int, ...]:
    """How far a transposed step reads, per axis on both sides: ``below + above`` of the
    step's reach (a cell's sum needs every cell reading it written, see the module
    docstring).

    >>> adjoint_reach(((1, 1), (1, 0)))
    (2, 1)
    """
    return tuple(lo + hi for lo, hi in reach)


def adjoint_k(k: int, widths: tuple[int, ...], shortest: tuple[int, ...],
              read_only: bool) -> int:  # fmt: skip
    """The adjoint loop's steps per exchange: at most the forward's ``k``, its halo within
    the shortest block (``k + 1`` reaches where read-only fields are read at the frame's
    edge); 0 if not even one step fits.

    >>> adjoint_k(8, (2,), (9,), False), adjoint_k(8, (2,), (9,), True)
    (4, 3)
    """
    extra = 1 if read_only else 0
    fits = [n // w - extra for w, n in zip(widths, shortest) if w]
    return max(0, min([k, *fits]))


@functools.lru_cache(maxsize=64)
def transposed(step: Callable, takes_params: bool, widths: tuple[int, ...]) -> Callable:
    """The transposed step of an affine ``step``, as a step on frames (``widths``: its reach
    per axis, :func:`adjoint_reach`): ``adj(state)`` or ``adj(state, params)``.

    It runs inside a loop of :func:`pgas.loop.programs.program` only (it is given frames,
    fields extended by at least ``widths`` per side).
    """

    def adj(state, params=None):
        body = step_fn(step, params if takes_params else None)
        leaves, rebuild = _fields(state)
        exts: list = []

        def apply(d):
            out = jax.tree.leaves(body(rebuild(d)), is_leaf=_is_array)
            exts[:] = [blocks_of(g)[1] for g in out]
            return [blocks_of(g)[0] for g in out]

        zeros = [jnp.zeros_like(g.data) for g in leaves]
        jax.eval_shape(apply, zeros)  # the extension of each written field

        def linear(d):
            return jax.jvp(apply, (zeros,), (d,))[1]

        written = [narrowed(g.data, ext_sides(g.ext), e) for g, e in zip(leaves, exts)]
        back = jax.linear_transpose(linear, zeros)(written)[0]
        out = []
        for g, d in zip(leaves, back):
            keep = tuple((lo - w, hi - w) for (lo, hi), w in zip(ext_sides(g.ext), widths))
            out.append(GlobalArray(narrowed(d, ext_sides(g.ext), keep), g.layout, ext_of(keep),
                                   g.anchor))  # fmt: skip
        return jax.tree.unflatten(jax.tree.structure(state, is_leaf=_is_array), out)

    adj.__name__ = f"transposed_{getattr(step, '__name__', 'step')}"
    return adj
