"""How a step will be compiled: halo widths, steps per exchange, buffering; decided once.

:func:`plan` traces a global-view step once (nothing runs) and records in a
:class:`Plan` how :func:`pgas.run` compiles it and what
:func:`pgas.comm_report` reports: the halo width the step reads across each
axis, ``k`` physical steps per halo exchange (*deep halos*), and whether the
loop is double-buffered. Backends (:mod:`pgas.app.backends`) make one plan per
run and hand it down; nothing downstream decides again.

Deep halos. One exchange of a halo ``k`` times the stencil's width, then ``k``
steps on the extended blocks: every sub-step recomputes a shrinking rim of
halo cells instead of receiving them, and each block's own cells come out
bitwise equal to ``k`` single steps. A loop iteration then pays one
synchronisation per ``k`` steps.

The model behind ``"auto"`` (:func:`model`; the sweeps it was fitted to are in
benchmarks/README.md, "Deep halos" and "GPU"), shared by the automatic,
explicit and MPI paths through :func:`choose_steps_per_exchange`:

- On the CPU at ``k > 1`` the loop is double-buffered
  (:mod:`pgas.loop.frames`): a group of ``k`` steps costs one exchange, an
  in-place write of the halo slabs and one pass over the block per sub-step,
  plus the rims the sub-steps recompute. Deep halos add no pass, only rims,
  and remove ``k - 1`` exchanges out of ``k``: ``k = 16`` for a reach along
  one axis, ``k = 4`` for 2-D and 3-D stencils on large blocks. A
  single-buffered loop (explicit, MPI, a GPU) pays a pass per
  sub-step on top of building the extended block, so 2-D/3-D stencils on
  large blocks keep ``k = 1`` there.
- On small blocks (at most :data:`SMALL_BLOCK` cells per device) a step costs
  its synchronisation, not its bytes: ``k = 16`` (1-D) or ``8``.
- On a GPU every loop iteration has a fixed cost whatever it computes and
  sub-steps run as separate kernels, so ``k`` is above all the steps per
  iteration that amortise it: ``32`` on small blocks, else ``16``, except a
  1-D reach on more than ``2**24`` cells, where ``k = 2`` lets two sub-steps
  share a kernel.
- ``k`` never exceeds what the smallest block holds (``block // width``).
- Some steps fit only narrower frames (:class:`~pgas.errors.FrameError`): a
  constant read across an axis is extended as far as the state plus its own
  reach, so ``k`` is lowered until that fits; a periodic field reading a
  non-periodic array across an axis cannot compute its halo cells ahead
  (across the wrap they stand for cells whose neighbours the other array's
  halo does not hold), so ``k = 1``, and a step of several dependent
  assignments of that kind runs without frames, each assignment exchanging
  its own halo. The plan's note says which.

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
(:attr:`Plan.fields`, :attr:`Plan.inputs`; :func:`pgas.globalview.lower.needs_of`):
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
from collections.abc import Sequence

import numpy as np

from pgas.errors import FrameError, HaloError, PgasError, whole_number
from pgas.globalview.array import GlobalArray
from pgas.globalview.lower import needs_of, recording_sides, sides_of
from pgas.globalview.reduce import traced_reductions
from pgas.grid.decomposition import ext_sides
from pgas.grid.mesh import platform_of
from pgas.loop.frames import double_buffered, frames, step_fn
from pgas.loop.scalars import has_scalars

__all__ = [
    "Plan",
    "Choice",
    "plan",
    "model",
    "choose_steps_per_exchange",
    "check_steps_per_exchange",
    "signature",
]

AUTO = "auto"
SMALL_BLOCK = 2**16  # cells per device below which a step costs its synchronisation, not bytes


def check_steps_per_exchange(value: object, name: str = "steps_per_exchange") -> int | str:
    """Validate a ``steps_per_exchange`` argument: an int >= 1 or ``"auto"``.

    >>> check_steps_per_exchange("auto"), check_steps_per_exchange(4)
    ('auto', 4)
    """
    if isinstance(value, str) and value == AUTO:
        return AUTO
    try:
        return whole_number(name, value, 1)
    except PgasError as err:
        raise PgasError(f"{err}, or 'auto'") from None


@dataclasses.dataclass(frozen=True)
class Choice:
    """The steps per exchange a run uses, and why.

    Attributes:
        steps_per_exchange: ``k``, physical steps per halo exchange.
        requested: what the caller asked for (an int or ``"auto"``).
        note: why ``k`` differs from an int request (blocks too small), else ``""``.
    """

    steps_per_exchange: int
    requested: int | str
    note: str = ""


def model(min_block: Sequence[int], widths: Sequence[int], platform: str,
          double: bool = False) -> int:  # fmt: skip
    """The ``k`` ``"auto"`` picks before the block-size cap (the model; see the module docstring).

    ``double``: the loop is double-buffered (:func:`pgas.frames.double_buffered`).

    >>> model((2**22,), (1,), "cpu"), model((4096, 4096), (1, 1), "cpu", double=True)
    (16, 4)
    >>> model((4096, 4096), (1, 1), "cpu")  # single-buffered: a pass per sub-step plus rims
    1
    >>> model((128, 128), (1, 1), "cpu"), model((1001,), (1,), "gpu")
    (8, 32)
    >>> model((2**26,), (1,), "gpu"), model((8192, 8192), (1, 1), "gpu")
    (2, 16)
    """
    cells = math.prod(min_block)
    axes = sum(w > 0 for w in widths)
    if platform == "gpu":  # a fixed cost per loop iteration: amortise it
        if cells <= SMALL_BLOCK:
            return 32
        return 2 if axes <= 1 and cells > 2**24 else 16  # large 1-D: two sub-steps share a kernel
    if cells <= SMALL_BLOCK:  # latency-bound: one synchronisation per k steps
        return 8 if axes > 1 else 16
    if axes <= 1:  # a 1-D reach
        return 16
    return 4 if double else 1  # 9- and 27-point stencils: a pass per sub-step either way


def choose_steps_per_exchange(
    requested: int | str,
    min_block: Sequence[int],
    widths: Sequence[int],
    platform: str = "cpu",
    double: bool = False,
) -> Choice:
    """Pick ``k``, the physical steps per halo exchange.

    Args:
        requested: an int >= 1, or ``"auto"``.
        min_block: cells of the smallest block along each axis.
        widths: halo cells one step reads across each axis (0: not read across).
        platform: ``"cpu"`` or ``"gpu"`` (:func:`pgas.mesh.platform_of`).
        double: the loop is double-buffered (:func:`pgas.frames.double_buffered`).

    Returns:
        A :class:`Choice`. An int request is lowered (and says so in ``note``)
        when a halo of ``k * width`` would not fit in the smallest block.

    >>> choose_steps_per_exchange(4, (100,), (1,)).steps_per_exchange
    4
    >>> choose_steps_per_exchange(8, (5,), (1,)).note[:22]
    'lowered from 8 to 5: a'
    """
    requested = check_steps_per_exchange(requested)
    fit = min((b // w for b, w in zip(min_block, widths) if w), default=None)
    if requested == AUTO:
        k = 1 if fit is None else max(1, min(model(min_block, widths, platform, double), fit))
        return Choice(k, requested)
    if fit is None or requested <= fit:
        return Choice(requested, requested)
    axis = next(a for a, (b, w) in enumerate(zip(min_block, widths)) if w and b // w == fit)
    note = (
        f"lowered from {requested} to {max(fit, 1)}: a halo of {requested} x {widths[axis]} "
        f"cell(s) is wider than the smallest block ({min_block[axis]} cells) on axis {axis}"
    )
    return Choice(max(fit, 1), requested, note)


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
            (:func:`pgas.loop.frames.double_group`); decided here, once, and
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

    The answer is cached per step, state structure (layouts, shapes, dtypes)
    and request, so :func:`pgas.run` pays the trace once, not per call.

    Args:
        step: a step function as given to :func:`pgas.run`.
        state: a :class:`pgas.GlobalArray` or a pytree of them.
        steps_per_exchange: ``k`` (an int >= 1) or ``"auto"``.
        double: whether the loop may be double-buffered (default: where the
            platform has it, :func:`pgas.loop.frames.double_buffered`).
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
    return _plan(step, (*signature((state, params)), requested, double), state, params)


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
    widths, held, why, sides, per_field = _reach(step, state, probe, params)
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


def _reach(step, state, probe: tuple[int, ...], params=None):
    """``(widths, frame, why, sides)``: the step's reach per axis, measured on the widest
    frame (at most ``probe`` cells per axis) that holds it, and per side (``None``: the
    same on both sides, or not known).

    A step that reads a constant across an axis, or an array of another
    topology (:class:`~pgas.errors.FrameError`), needs narrower frames: they
    are halved, then tried one cell at a time above the reach. ``widths`` is
    ``None`` when no frame holds the step.
    """
    import jax

    def measure(t: int):
        size = tuple(min(p, t) for p in probe)
        found: list = []
        fields: list = []

        def probe_step(s, p):
            with recording_sides():
                framed = frames(s, size)
                given, inputs = _leaves(framed), _leaves(p)
                data = [g.data for g in given]  # alive while the owners are keyed by id
                owners = {id(g): ("state", i) for i, g in enumerate(given)}
                owners.update({id(d): ("state", i) for i, d in enumerate(data)})
                owners.update({id(g.data): ("params", j) for j, g in enumerate(inputs)})
                out = step_fn(step, p)(framed)
                found.extend(_side_of(g, {id(d) for d in data}) for g in _leaves(out))
                needs = needs_of(owners, len(probe))
                for kind, arrays in (("state", given), ("params", inputs)):
                    fields.append(tuple(needs.get((kind, i), ((0, 0),) * g.layout.ndim)
                                        for i, g in enumerate(arrays)))  # fmt: skip
            return out

        out = jax.eval_shape(probe_step, state, params)
        widths = [0] * len(probe)
        for leaf in jax.tree.leaves(out, is_leaf=lambda x: isinstance(x, GlobalArray)):
            if isinstance(leaf, GlobalArray) and leaf.ext is not None:
                for axis, (p, e) in enumerate(zip(size, ext_sides(leaf.ext))):
                    widths[axis] = max(widths[axis], p - min(e))
        return widths, size, _per_side(widths, found), tuple(fields)

    def answer(measured, why):
        widths, size, sides, fields = measured
        return widths, size, why, sides, fields

    try:
        return answer(measure(max(probe)), "")
    except FrameError as err:
        why = str(err)
    high, t = max(probe), max(probe) // 2
    while t >= 1:
        try:
            return answer(measure(t), why)
        except FrameError as err:
            high, t, why = t, t // 2, str(err)
        except HaloError:  # narrower than the reach: try the frames between
            break
    for between in range(high - 1, t, -1):
        try:
            return answer(measure(between), why)
        except FrameError as err:
            why = str(err)
        except HaloError:
            continue
    return None, None, why, None, None


def _leaves(tree) -> list[GlobalArray]:
    import jax

    return [x for x in jax.tree.leaves(tree, is_leaf=lambda x: isinstance(x, GlobalArray))
            if isinstance(x, GlobalArray)]  # fmt: skip


def _side_of(g: GlobalArray, given: set[int]):
    """A result's reach per side: recorded, zero if it is a field given unchanged,
    ``None`` if unknown (data no assignment made)."""
    recorded = sides_of(g.data)
    if recorded is not None:
        return recorded
    return ((0, 0),) * g.layout.ndim if id(g.data) in given else None


def _per_side(widths: list[int], found: list) -> tuple[tuple[int, int], ...] | None:
    """The reach per side over every result, each side at most ``widths``; ``None`` when
    it is symmetric (``widths`` on both sides) or any result's is unknown."""
    if any(f is None for f in found):
        return None
    sides = [[0, 0] for _ in widths]
    for reach in found:
        for axis, (lo, hi) in enumerate(reach):
            sides[axis] = [max(sides[axis][0], lo), max(sides[axis][1], hi)]
    out = tuple((lo, hi) for lo, hi in sides)
    if any(max(p) > w for p, w in zip(out, widths)) or out == tuple((w, w) for w in widths):
        return None  # never wider than the frames; symmetric: as it always was
    return out
