"""The reach of a step, measured on the widest deep-halo frames that hold it.

:func:`pgas.loop.plan.plan` traces a step once (nothing runs) on the state
framed by as many halo cells as its smallest block holds
(:func:`pgas.loop.frames.frames`), inside
:func:`pgas.globalview.reach.recording_sides`; what the frames lose over the
step is its reach per axis, and the book gives it per side and, per field of
the state and of ``params``, how far the step reads that field
(:func:`measure_reach`).

Some steps fit only narrower frames (:class:`~pgas.errors.FrameError`): a
constant read across an axis is extended as far as the state plus its own
reach, so the frames are narrowed until that fits, and ``k`` is lowered to
what they hold; a periodic field reading a non-periodic array across an axis
cannot compute its halo cells ahead (across the wrap they stand for cells
whose neighbours the other array's halo does not hold), so ``k = 1``, and a
step of several dependent assignments of that kind fits no frame: it runs
without frames, each assignment exchanging its own halo. The plan's note says
which.

Contract: only traces (``jax.eval_shape``), never runs the step; the answer's
``why`` is the message of the last :class:`~pgas.errors.FrameError` met, ``""``
where the widest frames held the step.
"""

from __future__ import annotations

from pgas.errors import FrameError, HaloError
from pgas.globalview.array import GlobalArray
from pgas.globalview.reach import needs_of, recording_sides, sides_of
from pgas.grid.decomposition import ext_sides
from pgas.loop.frames import frames, step_fn

__all__ = ["measure_reach"]


def measure_reach(step, state, probe: tuple[int, ...], params=None):
    """``(widths, frame, why, sides, fields)``: the step's reach per axis, measured on the
    widest frame (at most ``probe`` cells per axis) that holds it, and per side (``None``:
    the same on both sides, or not known); ``fields``: how far the step reads each field of
    the state and each read-only field of ``params``, per side (``(state's, params')``).

    A step that reads a constant across an axis, or an array of another
    topology (:class:`~pgas.errors.FrameError`), needs narrower frames: they
    are halved, then tried one cell at a time above the reach. ``widths`` is
    ``None`` when no frame holds the step.

    >>> import numpy as np, pgas
    >>> u = pgas.from_numpy(np.zeros(16), pgas.make_mesh(devices=1))
    >>> def upwind(u):
    ...     u[1:] = u[1:] - 0.5 * (u[1:] - u[:-1])
    ...     return u
    >>> measure_reach(upwind, u, (16,))
    ([1], (16,), '', ((1, 0),), ((((1, 0),),), ()))
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
