"""How a step will be compiled: halo widths, steps per exchange, buffering; decided once.

:func:`plan` traces a global-view step once (nothing runs) and records in a
:class:`Plan` how :func:`pgas.run` compiles it and what
:func:`pgas.comm_report` reports: the halo width the step reads across each
axis, ``k`` physical steps per halo exchange (*deep halos*), and whether the
loop is double-buffered. Backends (:mod:`pgas.app.backends`) make one plan per
run and hand it down; nothing downstream decides again. The reach is measured
on deep-halo frames (:mod:`pgas.loop.probe`); ``k`` comes from the model in
:mod:`pgas.loop.choice` (:func:`~pgas.loop.choice.choose_steps_per_exchange`),
lowered where the step fits only narrower frames, and to 1 where it computes a
reduction.

Halos per side. The reach is also recorded per side of each axis
(:attr:`Plan.sides`: the cells a step reads below and above each block,
through assignments that read each other's results), and a loop exchanges
only those, ``k`` times over (:attr:`Plan.exchanged`): an upwind step that
reads one cell below sends one slab of ``k`` cells, up, and its frames keep
those ``k`` cells below each block and none above (:mod:`pgas.loop.frames`).
:attr:`Plan.halo` stays the larger side per axis. A symmetric stencil's plan
is what it always was.

Frames per field. The same trace records, for every field of the state and
every read-only field of ``params``, how far one step reads it per side
(:attr:`Plan.fields`, :attr:`Plan.inputs`; :func:`pgas.globalview.reach.needs_of`):
the reach of every assignment's own cells into the data of that field, through
the assignments that read each other's results (a field written pointwise from
another and then read at an offset needs that offset in both) and the
reductions (a sum of ``u[1:] - u[:-1]`` reads ``u`` one cell below). A
single-buffered step then frames each field by its own reach: a field read at
no offset is not extended nor exchanged. Conjugate gradients (``x``, ``r``,
``p``; only ``p`` read at an offset) exchanges ``p``'s halo alone. The plan
tries the frames on the step's trace and keeps the state's frame where they
do not hold it; ``None`` where every field takes the state's frame (one
field, or all read alike: the program is the one it always was). At ``k > 1``
every field keeps the state's frame.
"""

from __future__ import annotations

import dataclasses
import math
import weakref

import numpy as np

from pgas.errors import FrameError, HaloError, PgasError
from pgas.globalview.array import GlobalArray
from pgas.globalview.reduce import traced_reductions
from pgas.grid.mesh import platform_of
from pgas.loop.buffers import double_buffered
from pgas.loop.choice import AUTO, Choice, check_steps_per_exchange, choose_steps_per_exchange
from pgas.loop.frames import step_fn
from pgas.loop.outside import numbers_read
from pgas.loop.probe import measure_reach
from pgas.loop.scalars import has_scalars

__all__ = ["Plan", "plan", "signature"]


@dataclasses.dataclass(frozen=True)
class Plan:
    """How :func:`pgas.run` compiles a step (see the module docstring).

    Attributes:
        widths: halo cells one step reads across each array axis (the reach of
            the whole step: an assignment reading another's result adds up);
            ``None`` for a step no frame can hold, which then runs one step per
            iteration with every assignment exchanging its own halo.
        choice: the steps per exchange, ``k``, and why.
        halo: cells exchanged per side and axis once per ``k`` steps (``k * widths``).
        platform: ``"cpu"`` or ``"gpu"``.
        double: the loop carries every field extended, in two buffers
            (:func:`pgas.loop.buffers.double_group`); decided here, once, and
            only ever true at ``k > 1``.
        sides: the step's reach per side, ``(below, above)`` per axis, each at
            most ``widths``; ``None``: ``widths`` on both sides.
        fields: how far one step reads each field of the state, ``(below,
            above)`` per axis, in the order of the state's fields; the frame of
            a single-buffered step (see the module docstring). ``None``: every
            field the state's frame.
        inputs: the same for the read-only fields of ``params``, in their order.
        reduces: the step computes a reduction (an all-reduce of a scalar each
            step): it runs at ``k = 1``, and :func:`pgas.run_until` checks it
            every step under ``check_every="auto"``.
    """

    widths: tuple[int, ...] | None
    choice: Choice
    halo: tuple[int, ...]
    platform: str
    double: bool = False
    sides: tuple[tuple[int, int], ...] | None = None
    fields: tuple[tuple[tuple[int, int], ...], ...] | None = None
    inputs: tuple[tuple[tuple[int, int], ...], ...] | None = None
    reduces: bool = False

    @property
    def frames(self) -> dict:
        """What a single-buffered group of one step frames each field with: ``fields=`` and
        ``inputs=`` for :func:`pgas.loop.frames.group` and
        :func:`pgas.loop.frames.loop_inputs`; empty where every field takes the state's frame
        (a symmetric plan's program is the one it always was)."""
        out = {}
        if self.fields is not None:
            out["fields"] = self.fields
        if self.inputs is not None:
            out["inputs"] = self.inputs
        return out

    @property
    def reach(self) -> tuple[tuple[int, int], ...] | None:
        """The step's reach per side (``sides``, or ``widths`` on both sides); ``None``
        for a step without frames."""
        if self.widths is None:
            return None
        return self.sides or tuple((w, w) for w in self.widths)

    @property
    def exchanged(self) -> tuple[tuple[int, int], ...]:
        """Cells exchanged per side, ``(below, above)`` per axis, once per ``k`` steps."""
        reach = self.reach or tuple((0, 0) for _ in self.halo)
        k = self.steps_per_exchange
        return tuple((k * lo, k * hi) for lo, hi in reach)

    @property
    def steps_per_exchange(self) -> int:
        """``k``: physical steps per halo exchange."""
        return self.choice.steps_per_exchange

    @property
    def reads(self) -> int:
        """Cells a cell update may read: the neighbourhood of the step's reach (per side)."""
        return math.prod(lo + hi + 1 for lo, hi in self.reach or ())

    @property
    def note(self) -> str:
        return self.choice.note


def plan(step, state, steps_per_exchange: int | str = AUTO, double: bool | None = None,
         params=None) -> Plan:  # fmt: skip
    """Trace ``step`` once on ``state`` (nothing runs) and decide how to compile it.

    The answer is cached per step, state structure (layouts, shapes, dtypes),
    request and the numbers the step reads from outside
    (:func:`pgas.loop.outside.numbers_read`: a changed global or closure number,
    such as a slice bound, traces anew), so :func:`pgas.run` pays the trace once,
    not per call.

    Args:
        step: a step function as given to :func:`pgas.run`.
        state: a :class:`pgas.GlobalArray` or a pytree of them.
        steps_per_exchange: ``k`` (an int >= 1) or ``"auto"``.
        double: whether the loop may be double-buffered (default: where the
            platform has it, :func:`pgas.loop.buffers.double_buffered`).
            The plan records the decision (:attr:`Plan.double`).
        params: what :func:`pgas.run` passes as ``step(state, params)`` (``None``:
            ``step(state)``); a read-only :class:`pgas.GlobalArray` in it counts as
            a constant.

    >>> import numpy as np, pgas
    >>> u = pgas.from_numpy(np.zeros(64, np.float32), pgas.make_mesh(devices=1))
    >>> def heat(u):
    ...     u[1:-1] = 0.5 * u[1:-1] + 0.25 * (u[:-2] + u[2:])
    ...     return u
    >>> p = plan(heat, u, steps_per_exchange=4)
    >>> p.widths, p.steps_per_exchange, p.halo, p.double
    ((1,), 4, (4,), True)
    >>> def upwind(u):
    ...     u[1:] = u[1:] - 0.5 * (u[1:] - u[:-1])
    ...     return u
    >>> p = plan(upwind, u, steps_per_exchange=4)
    >>> p.sides, p.exchanged
    (((1, 0),), ((4, 0),))
    >>> def accumulate(s):  # only u is read at an offset: v is not extended
    ...     u, v = s
    ...     v[:] = v + u
    ...     return upwind(u), v
    >>> plan(accumulate, (u, u.copy()), steps_per_exchange=1).fields
    (((1, 0),), ((0, 0),))
    """
    requested = check_steps_per_exchange(steps_per_exchange)
    key = (numbers_read(step), *signature((state, params)), requested, double)
    return _plan(step, key, state, params)


def signature(tree) -> tuple:
    """``(treedef, shapes and dtypes)`` of a pytree: what a trace of it depends on (layouts
    are in the treedef).

    >>> import numpy as np
    >>> signature((np.zeros(3), 0.5))[1]
    (((3,), 'float64'), ((), 'float'))
    """
    import jax

    leaves, treedef = jax.tree.flatten(tree)
    return treedef, tuple((np.shape(x), str(getattr(x, "dtype", type(x).__name__)))
                          for x in leaves)  # fmt: skip


def _plan(step, key, state, params) -> Plan:
    try:
        hash(key)
    except TypeError:  # an unhashable static part: no cache
        return _trace(step, state, *key[-2:], params)
    cache = _CACHE.setdefault(step, {}) if _weakrefable(step) else {}
    if key not in cache and len(cache) >= _PER_STEP:  # a number it reads changes every call
        cache.clear()
    if key not in cache:
        cache[key] = _trace(step, state, *key[-2:], params)
    return cache[key]


def _weakrefable(fn) -> bool:
    try:
        weakref.ref(fn)
    except TypeError:
        return False
    return True


_CACHE: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_PER_STEP = 64  # plans kept per step, as many as the program cache keeps programs


def _trace(step, state, requested, double, params=None) -> Plan:
    import jax

    arrays = [x for x in jax.tree.leaves(state, is_leaf=lambda x: isinstance(x, GlobalArray))
              if isinstance(x, GlobalArray)]  # fmt: skip
    if not arrays:
        raise PgasError("state holds no pgas.GlobalArray; build it with pgas.from_numpy")
    ndim = max(a.layout.ndim for a in arrays)  # fields of fewer axes use the first entries
    probe = tuple(min(a.layout.axes[i].min_length for a in arrays if i < a.layout.ndim)
                  for i in range(ndim))  # fmt: skip
    platform = platform_of(arrays[0].layout.mesh)
    before = traced_reductions()
    widths, held, why, sides, per_field = measure_reach(step, state, probe, params)
    reduces = traced_reductions() > before  # a reduction inside the step
    if widths is not None:
        fields, inputs = _framed(step, state, params, widths, sides, per_field)
    if widths is not None and reduces:
        note = (
            "k = 1, no deep halos: the step computes a reduction (one all-reduce of a "
            "scalar per step), which needs every cell of the grid up to date each step"
        )
        return Plan(tuple(widths), Choice(1, requested, note if requested != 1 else ""),
                    (*widths,), platform, sides=sides, fields=fields, inputs=inputs,
                    reduces=True)  # fmt: skip
    if has_scalars(state):
        double = False  # scalars in the state: the single-buffered loop carries them
    if widths is None:  # no frame holds the step: one step per iteration, halos per assignment
        note = f"k = 1, no deep halos: {why}" if requested == AUTO or requested > 1 else ""
        return Plan(None, Choice(1, requested, note), (0,) * ndim, platform, reduces=reduces)
    double = double_buffered(arrays[0].layout.mesh) if double is None else double
    choice = choose_steps_per_exchange(requested, probe, widths, platform, double)
    cap = min((p // w for p, w in zip(held, widths) if w), default=None)
    if why and cap is not None and choice.steps_per_exchange > cap:  # a constant, a topology
        note = f"lowered from {choice.steps_per_exchange} to {cap}: {why}"
        choice = Choice(cap, requested, note)
    k = choice.steps_per_exchange
    return Plan(tuple(widths), choice, tuple(k * w for w in widths), platform, double and k > 1,
                sides, fields, inputs)  # fmt: skip


def _framed(step, state, params, widths, sides, per_field):
    """``(fields, inputs)``: each field's and read-only field's reach per side for one step
    (:attr:`Plan.fields`), ``None`` where every one takes the state's frame, or where the
    step does not run on such frames (then it keeps the state's)."""
    import jax

    if per_field is None:
        return None, None
    fields, inputs = per_field
    reach = sides or tuple((w, w) for w in widths)

    def same(f):
        return all(tuple(fs) == tuple(r) for fs, r in zip(f, reach))

    fields = None if all(same(f) for f in fields) else fields
    inputs = None if all(same(f) for f in inputs) else inputs
    if fields is None and inputs is None:
        return None, None
    try:  # the frames must hold the step's every assignment: try them on its trace
        jax.eval_shape(lambda s, p: _one_step(step, s, p, tuple(widths), sides, fields, inputs),
                       state, params)  # fmt: skip
    except (HaloError, FrameError):
        return None, None
    return fields, inputs


def _one_step(step, state, params, widths, sides, fields, inputs):
    from pgas.loop.frames import blocks, group, read_only

    held = read_only(params, widths, 1, inputs)
    return group(step_fn(step, held), widths, 1, sides, fields)(blocks(state))
