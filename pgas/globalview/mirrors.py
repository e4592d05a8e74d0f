"""Ghost cells beyond a Neumann face: re-filled after an assignment, or later, by slabs.

An assignment to an array extended by halo cells (inside a compiled loop)
computes its ghost cells beyond a ``Neumann`` face from cells that are not the
ones they mirror, so it re-fills them from the cells next to the face
(:func:`mirror`, by :func:`pgas.halo.refill_mirror`). Inside a double-buffered
loop's sub-step that masked full-size select was a second pass over the block:
under :func:`deferring_mirrors` an assignment leaves those ghosts as they were
and marks its result in a :class:`Mirrors` (:func:`mirror_or_defer`); the
loop re-fills them where it writes the result into its buffer
(:meth:`Mirrors.place`, by :func:`pgas.halo.refill_mirror_slabs`).

Contract: a read of a marked result before that (a later assignment in the same
step) sees it re-filled (:func:`fresh`), so every read sees the values it
would see without deferring, and the loop's results are the same bits.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import jax

from pgas.globalview.forms import Sides
from pgas.globalview.halo import refill_mirror, refill_mirror_slabs

__all__ = ["Mirrors", "deferring_mirrors", "fresh", "mirror", "mirror_or_defer"]


class Mirrors:
    """The results whose ghost cells beyond a Neumann face wait to be re-filled
    (:func:`deferring_mirrors`): ``id(data) -> (data, layout, domain)``."""

    def __init__(self) -> None:
        self._waiting: dict[int, tuple[Any, Any, Sides]] = {}
        self._fresh: dict[int, tuple[Any, Any]] = {}

    def mark(self, data, layout, domain: Sides) -> None:
        self._waiting[id(data)] = (data, layout, domain)

    def waiting(self, data) -> tuple[Any, Sides] | None:
        """``(layout, domain)`` if ``data``'s ghosts wait to be re-filled, else None."""
        entry = self._waiting.get(id(data))
        return entry[1:] if entry is not None and entry[0] is data else None

    def fresh(self, data, anchor=None):
        """``data`` with its waiting ghosts re-filled (computed once), or ``data``."""
        entry = self._fresh.get(id(data))
        if entry is not None and entry[0] is data:
            return entry[1]
        found = self.waiting(data)
        if found is None:
            return data
        out = mirror(data, *found, anchor)
        self._fresh[id(data)] = (data, out)
        return out

    def place(self, data, buffer, at: list[int]) -> jax.Array:
        """``buffer``, into which ``data`` was written at index ``at``, with ``data``'s
        waiting ghosts re-filled in it by slabs (in place in a loop buffer)."""
        found = self.waiting(data)
        if found is None:
            return buffer
        lay, domain = found
        written = False  # slabs of an earlier axis in the buffer: later axes read them there
        for axis, d in enumerate(domain):
            if any(d):
                buffer = refill_mirror_slabs(buffer, data, at, axis, d, lay.axes[axis],
                                             lay.boundary[axis], lay.block_iota(axis),
                                             written)  # fmt: skip
                written = written or _refills(lay.boundary[axis], d)
        return buffer


_DEFERRED: list[Mirrors] = []


@contextlib.contextmanager
def deferring_mirrors() -> Iterator[Mirrors]:
    """Inside: an assignment to a framed array leaves the ghost cells beyond its Neumann
    faces as they were, and marks its result in the :class:`Mirrors` yielded.

    An assignment re-fills those ghosts from the cells next to the face
    (:func:`pgas.globalview.lower.write`); inside a double-buffered loop's sub-step
    that masked full-size select was a second pass over the block. The loop re-fills
    them instead where it writes the result into its buffer (:meth:`Mirrors.place`);
    a read of a marked array inside (a later assignment in the same step)
    re-fills them first, so every read sees what it saw before.

    >>> with deferring_mirrors() as mirrors:
    ...     mirrors.waiting(object()) is None
    True
    """
    mirrors = Mirrors()
    _DEFERRED.append(mirrors)
    try:
        yield mirrors
    finally:
        _DEFERRED.pop()


def fresh(data, anchor=None):
    """``data`` with the ghosts a :func:`deferring_mirrors` left waiting re-filled.

    >>> data = object()
    >>> fresh(data) is data  # nothing waits
    True
    """
    for mirrors in reversed(_DEFERRED):
        data = mirrors.fresh(data, anchor)
    return data


def mirror_or_defer(result, layout, domain: Sides, anchor=None):
    """``result`` (extension ``domain``) with its ghosts beyond Neumann faces re-filled;
    inside :func:`deferring_mirrors`, ``result`` as it is, marked to be re-filled later.

    >>> import numpy as np, pgas
    >>> u = pgas.from_numpy(np.arange(4.0), pgas.make_mesh(devices=1))
    >>> data = u.layout.to_blocks(u.data)
    >>> with deferring_mirrors() as mirrors:  # no Neumann face: nothing to re-fill
    ...     mirror_or_defer(data, u.layout, ((0, 0),)) is data, mirrors.waiting(data)
    (True, None)
    """
    if _DEFERRED and _mirrored(layout, domain):
        _DEFERRED[-1].mark(result, layout, domain)
        return result
    return mirror(result, layout, domain, anchor)


def _mirrored(layout, domain: Sides) -> bool:
    """Whether ``domain`` holds ghost cells beyond a Neumann face of ``layout``."""
    return any(_refills(faces, d) for faces, d in zip(layout.boundary, domain))


def _refills(faces: tuple, sides: tuple[int, int]) -> bool:
    """Whether ``sides`` halo cells of an axis hold ghosts beyond one of its Neumann ``faces``."""
    return bool((faces[0].refreshed and sides[0]) or (faces[1].refreshed and sides[1]))


def mirror(result, layout, domain: Sides, anchor=None):
    """``result`` (extension ``domain``) with its ghosts beyond Neumann faces re-filled.

    >>> import numpy as np, pgas
    >>> u = pgas.from_numpy(np.arange(4.0), pgas.make_mesh(devices=1), boundary=pgas.Neumann())
    >>> data = u.layout.to_blocks(u.data)  # padded by one ghost cell a side: 9, 0, 1, 2, 3, 9
    >>> framed = np.pad(np.asarray(data), ((0, 0), (1, 1)), constant_values=9.0)
    >>> mirror(framed, u.layout, ((1, 1),)).tolist()
    [[0.0, 0.0, 1.0, 2.0, 3.0, 3.0]]
    """
    for axis, d in enumerate(domain):
        if any(d):
            result = refill_mirror(result, axis, d, layout.axes[axis], layout.boundary[axis],
                                   layout.block_iota(axis), anchor)  # fmt: skip
    return result
