"""Frames: the fields of a state extended by a deep halo, and the group of k steps on them.

A *group* is what one iteration of a compiled loop runs (:mod:`pgas.loop`):
every field of the state is extended by a halo ``k`` times the step's reach
(:func:`frames`: one exchange per split axis, the extended block built once
by a concatenate behind an optimization barrier), the user's step runs ``k``
times on the extended blocks (each assignment computes a domain that much
narrower, see :mod:`pgas.lower`), and the fields' own cells are kept
(:func:`cores`). :func:`step_fn` wraps a user's step so that whole-array
expressions it returns become arrays.

Fields travel between groups in their blocks form ``(D0, b0, D1, b1, ...)``
with no extension (``ext`` all zeros); :func:`blocks` and :func:`physical`
convert a state from and to the physical form users hold.

Double buffering, on the CPU, is :mod:`pgas.loop.buffers`.

Halos per side. ``sides`` (:attr:`pgas.loop.plan.Plan.sides`, the step's
reach ``(below, above)`` per axis) makes every frame keep and exchange only
``k`` times each side's reach (``GlobalArray.ext`` holds ``(below, above)``
where the sides differ, :data:`pgas.grid.decomposition.Ext`): an upwind step
keeps no ghost cell above its blocks, in a single-buffered frame or in the two
buffers of a double-buffered loop, and its slabs of a later axis carry only
the cells kept of the earlier ones. ``None``: both sides, the symmetric frame.

Frames per field. A single-buffered group of one step (``k = 1``, the
remainder steps of a loop at ``k > 1``) frames each field by how far one step
reads it (``fields=``, :attr:`pgas.loop.plan.Plan.fields`): a field read at no
offset (conjugate gradients' ``x`` and ``r``) travels as its plain block, with
no extension and no exchange, and a field read on one side exchanges that side
only (CG on 1025x1025, 2x2 CPU devices: 4 collective-permutes per iteration
instead of 12, XLA's temporaries 10.8 MiB per device instead of 16.9). Read-only
fields follow their own reach the same way (``inputs=``, :func:`read_only`). At
``k > 1`` every field keeps the state's frame ``k`` times the step's reach: a
field's value at the start of a later sub-step depends on the others' halos.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterator
from typing import Any

import jax

from pgas.errors import PgasError
from pgas.globalview.array import GlobalArray
from pgas.globalview.forms import anchor_of, blocks_of, physical_of
from pgas.globalview.halo import Transport, extend
from pgas.globalview.lower import holding
from pgas.globalview.messages import together
from pgas.globalview.view import View
from pgas.grid.decomposition import Ext, ext_of, ext_sides
from pgas.grid.mesh import platform_of

__all__ = [
    "step_fn",
    "step_params",
    "hold",
    "frames",
    "cores",
    "blocks",
    "physical",
    "group",
    "group_program",
    "read_only",
    "loop_inputs",
    "frame_ext",
]

State = Any
Sides = tuple[tuple[int, int], ...]


def frame_ext(widths: tuple[int, ...], sides: Sides | None, k: int) -> Ext:
    """The halo a frame for ``k`` steps keeps: ``k`` times the step's reach per side
    (``sides``, or ``widths`` on both sides)."""
    reach = sides or tuple((w, w) for w in widths)
    return ext_of(tuple((k * lo, k * hi) for lo, hi in reach))


def _is_array(x) -> bool:
    return isinstance(x, GlobalArray)


def _fields(fn: Callable) -> Callable:
    """``fn`` on a state's fields; its scalars (0-d arrays, replicated) pass unchanged."""
    return lambda x: fn(x) if isinstance(x, GlobalArray) else x


def _as_array(x):
    return x.to_array() if isinstance(x, View) else x


def step_fn(step: Callable[..., State], params: Any = None) -> Callable[[State], State]:
    """Wrap ``step`` so that it returns arrays (whole-array expressions materialised).

    With ``params`` (not ``None``) the step is called ``step(state, params)``.

    >>> import numpy as np, pgas
    >>> u = pgas.from_numpy(np.arange(3.0), pgas.make_mesh(devices=1))
    >>> step_fn(lambda u: 2 * u)(u).to_numpy()
    array([0., 2., 4.])
    >>> step_fn(lambda u, c: c * u, 3.0)(u).to_numpy()
    array([0., 3., 6.])
    """

    @functools.wraps(step)
    def wrapped(state):
        out = step(state) if params is None else step(state, params)
        if out is None:
            raise PgasError(
                f"step function {getattr(step, '__name__', step)!r} returned None; return the "
                f"updated state (e.g. 'return u' after u[1:-1] = ...)"
            )
        return jax.tree.map(_as_array, out, is_leaf=lambda x: isinstance(x, View))

    return wrapped


def step_params(params: Any, takes: bool) -> Any:
    """What :func:`step_fn` gives a step besides its state: ``params`` (``()`` for none)
    where the step is called ``step(state, params)``, else ``None``.

    >>> step_params(None, True), step_params({"c": 1.0}, True), step_params(None, False)
    ((), {'c': 1.0}, None)
    """
    return (params if params is not None else ()) if takes else None


def hold(mesh, halo: tuple[int, ...]) -> bool:
    """Whether an extended block is held behind an optimization barrier (built once).

    On the CPU always: the sub-steps then read only the extended copy and XLA
    fuses them into one pass. On a GPU only for a halo on several axes: a 1-D
    extension left to XLA fuses into the first sub-step's kernel, which saves
    a pass over memory, while a 2-D extension without the barrier is folded
    back into its pieces, each read again (benchmarks/README.md, "GPU").

    >>> import pgas
    >>> hold(pgas.make_mesh(devices=1), (1,)), hold(pgas.make_mesh(devices=1), (1, 1))
    (True, True)
    """
    return platform_of(mesh) == "cpu" or sum(h > 0 for h in halo) > 1


def frames(state: State, halo: Ext, anchor: jax.Array | None = None,
           fields: tuple[Sides, ...] | None = None,
           moves: Callable[[int, bool], Transport] | None = None,
           joined: bool = False) -> State:  # fmt: skip
    """Every field extended by ``halo[i]`` cells (an int: on both sides, else ``(below,
    above)``): one exchange per split axis, only the cells kept.

    ``moves(axis, periodic)``: how the slabs of an axis travel (a
    :data:`pgas.globalview.halo.Transport`; default the global view's collective-permutes),
    for a caller that records them or gives them again (:mod:`pgas.loop.reverse`).

    The extended blocks are built by a concatenate, held behind an optimization
    barrier where that helps (:func:`hold`), so that the sub-steps read only
    them. ``anchor`` is a zero tied to the loop counter (see
    :class:`pgas.GlobalArray`). ``fields``: each field's own reach ``(below,
    above)`` per axis instead (in the order of the state's fields,
    :attr:`pgas.loop.plan.Plan.fields`); a field read at no offset is its plain
    block, with nothing exchanged. ``joined``: the slabs of fields of one layout and dtype
    travel together, one message per side and axis for all of them
    (:func:`pgas.globalview.messages.together`; the way back, :mod:`pgas.loop.reverse`);
    otherwise each field sends its own, as the CPU's double-buffered loop does (joined,
    its in-place exchange made XLA copy the buffers).
    """
    leaves, tree = jax.tree.flatten(state, is_leaf=_is_array)
    each = None if fields is None else iter(fields)
    arrays = [i for i, g in enumerate(leaves) if _is_array(g)]
    data, own = {}, {}
    for i in arrays:
        data[i], ext = blocks_of(leaves[i])
        if any(lo or hi for lo, hi in ext):
            raise PgasError("internal: frames() takes fields without halo")
        own[i] = ext_sides(halo[: leaves[i].layout.ndim]) if each is None else next(each)
    for axis in range(max((leaves[i].layout.ndim for i in arrays), default=0)):

        def run(i, move, axis=axis):
            lay = leaves[i].layout
            return extend(data[i], axis, own[i][axis], lay.axes[axis], lay.boundary[axis],
                          lay.block_iota(axis), move)  # fmt: skip

        going = [i for i in arrays if axis < leaves[i].layout.ndim and any(own[i][axis])]
        if joined:
            data.update(together(going, [leaves[i].layout for i in going], axis, moves, run))
            continue
        for i in going:
            periodic = leaves[i].layout.boundary[axis][0].periodic
            data[i] = run(i, None if moves is None else moves(axis, periodic))
    for i in arrays:
        lay, blocks, kept = leaves[i].layout, data[i], tuple(lo + hi for lo, hi in own[i])
        if any(kept) and hold(lay.mesh, kept):
            blocks = jax.lax.optimization_barrier(blocks)
        leaves[i] = GlobalArray(blocks, lay, ext_of(own[i]), anchor)
    return tree.unflatten(leaves)


def cores(state: State) -> State:
    """Every field's own cells, in the blocks form without halo."""

    def one(g: GlobalArray) -> GlobalArray:
        lay = g.layout
        return GlobalArray(lay.to_blocks(physical_of(g)), lay, (0,) * lay.ndim)

    return jax.tree.map(_fields(one), state, is_leaf=_is_array)


def blocks(state: State) -> State:
    """Every field in its blocks form without halo (what the loop carries)."""
    return jax.tree.map(_fields(lambda g: GlobalArray(blocks_of(g)[0], g.layout,
                                                      (0,) * g.layout.ndim)),
                        state, is_leaf=_is_array)  # fmt: skip


def physical(state: State) -> State:
    """Every field in its physical form (what users hold)."""
    return jax.tree.map(_fields(lambda g: GlobalArray(physical_of(g), g.layout)), state,
                        is_leaf=_is_array)  # fmt: skip


def group(body: Callable, widths: tuple[int, ...] | None, k: int,
          sides: Sides | None = None,
          fields: tuple[Sides, ...] | None = None) -> Callable:  # fmt: skip
    """``k`` steps with one exchange of a halo ``k * widths`` wide: ``group(state, counter)``.

    ``widths=None`` (a step no frame can hold, see :func:`pgas.plan.plan`): one
    step on the physical fields, each assignment exchanging its own halo.
    ``sides``: the step's reach per side (:attr:`pgas.loop.plan.Plan.sides`);
    only ``k`` times that is kept and exchanged. ``fields``: each field's reach for one
    step (:attr:`pgas.loop.plan.Plan.fields`), its frame at ``k = 1`` (a field
    read at no offset is not extended); ``k > 1`` frames every field alike.
    """
    if widths is None:
        if k != 1:
            raise PgasError(f"internal: a step without frames runs one step per group, not {k}")
        return lambda state, counter=None: blocks(body(physical(state)))

    def group(state, counter=None):
        anchor = None if counter is None else anchor_of(counter)
        own = fields if k == 1 else None  # k > 1: every field framed alike
        s = frames(state, frame_ext(widths, sides, k), anchor, own)
        for _ in range(k):
            s = body(s)
        return cores(s)

    return group


def group_program(step: Callable, widths: tuple[int, ...] | None, k: int, params: Any = None,
                  sides: Sides | None = None,
                  fields: tuple[Sides, ...] | None = None) -> Callable[[State], State]:  # fmt: skip
    """One exchange and ``k`` steps, physical state in and out (what comm_report compiles);
    ``params`` as :func:`step_fn` takes them (already :func:`read_only`); ``sides`` and
    ``fields`` as :func:`group` takes them."""
    run_group = group(step_fn(step, params), widths, k, sides, fields)
    return lambda state: physical(run_group(blocks(state)))


# ---- read-only fields ---------------------------------------------------------------------
def read_only(params: Any, widths: tuple[int, ...] | None, k: int,
              inputs: tuple[Sides, ...] | None = None) -> Any:  # fmt: skip
    """``params`` with every read-only :class:`GlobalArray` extended once for a loop.

    The halo is what a group's sub-steps read it with, at most ``k + 1``
    reaches per side (the state's ``k`` plus the read's own) and at most the
    smallest block (the plan's ``k`` fits a constant's reads there, see
    :func:`pgas.plan.plan`), so the field is exchanged once per call of the
    loop, never per group or sub-step. ``widths=None`` (no frames): unchanged.
    ``inputs``: at ``k = 1``, each read-only field's reach per side
    (:attr:`pgas.loop.plan.Plan.inputs`, in the order of ``params``' fields),
    exchanged instead: a field read at no offset is its plain block.

    >>> import numpy as np, pgas
    >>> c = pgas.from_numpy(np.arange(4.0), pgas.make_mesh(devices=1))
    >>> read_only({"c": c, "dt": 0.1}, (1,), 1)["c"].ext
    (2,)
    """
    if params is None or widths is None:
        return params
    if inputs is not None and k == 1:
        found, tree = jax.tree.flatten(params, is_leaf=_is_array)
        each = iter(inputs)
        found = [frames(g, (), fields=(next(each),)) if _is_array(g) and g.ext is None else g
                 for g in found]  # fmt: skip
        return tree.unflatten(found)

    def one(g):
        if not isinstance(g, GlobalArray) or g.ext is not None:
            return g
        lay = g.layout
        halo = tuple(min((k + 1) * w, ax.min_length) for w, ax in zip(widths, lay.axes))
        return frames(g, halo)

    return jax.tree.map(one, params, is_leaf=_is_array)


@contextlib.contextmanager
def loop_inputs(params: Any, fields: tuple, widths: tuple[int, ...] | None,
                k: int, inputs: tuple[Sides, ...] | None = None) -> Iterator[Any]:  # fmt: skip
    """What a loop reads besides its state, extended once: ``with loop_inputs(...) as params``.

    Yields ``params`` made :func:`read_only`; inside, the step's reads of the
    ``fields`` it takes from its enclosing scope (:class:`pgas.GlobalArray`
    constants, :func:`pgas.loop.outside.captured`) take copies extended the
    same way (:func:`pgas.globalview.lower.holding`). Trace the loop inside:
    both are exchanged once per call of the loop, as a parameter is, never per
    group or sub-step. ``widths=None`` (no frames): nothing is extended.
    ``inputs``: as :func:`read_only` takes them.

    >>> import numpy as np, pgas
    >>> c = pgas.from_numpy(np.arange(4.0), pgas.make_mesh(devices=1))
    >>> with loop_inputs({"dt": 0.1}, (c,), (1,), 1) as p:
    ...     p
    {'dt': 0.1}
    """
    if widths is None:
        yield params
        return
    copies = {id(g): (g.data, read_only(g, widths, k))
              for g in fields if g.layout.ndim == len(widths)}  # fmt: skip
    with holding(copies):
        yield read_only(params, widths, k, inputs)
