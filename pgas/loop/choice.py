"""The steps per halo exchange a run uses (``k``), and the cost model behind ``"auto"``.

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
- Some steps fit only narrower frames: :func:`pgas.loop.plan.plan` lowers
  ``k`` further (:mod:`pgas.loop.probe`, :class:`~pgas.errors.FrameError`).

Contract: nothing here traces or runs a step; the choice depends only on the
request, the smallest block, the step's reach per axis, the platform and the
buffering, and an int request is only ever lowered, with a note saying why.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence

from pgas.errors import PgasError, whole_number

__all__ = ["Choice", "model", "choose_steps_per_exchange", "check_steps_per_exchange"]

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

    ``double``: the loop is double-buffered (:func:`pgas.loop.buffers.double_buffered`).

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
        double: the loop is double-buffered (:func:`pgas.loop.buffers.double_buffered`).

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
