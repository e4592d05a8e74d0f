"""How far each assigned result reaches, per side, while a step is traced.

A read of an assignment records its offsets per side
(:attr:`pgas.globalview.lower.Read.sides`: the cells it reads below and above
the window). While :func:`pgas.loop.plan.plan` probes a step,
:func:`recording_sides` follows how far each result reaches per side
(:func:`sides_of`), through assignments that read each other's results: what a
compiled loop exchanges and keeps. The same book records each result's reach
into every data it was computed from (:func:`reads_of`, :func:`needs_of`): what
each field's frame is made of.

Contract: outside :func:`recording_sides` nothing is recorded
(:func:`record` returns at once) and :func:`sides_of` answers ``None``; the
books hold the data they key by ``id`` and end with the block, so an ``id`` is
never a stale one.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from pgas.globalview.forms import Sides

__all__ = ["recording_sides", "reads_of", "needs_of", "sides_of", "record"]

_BOOKS: list[dict[int, tuple[Any, Sides]]] = []
_NEEDS: list[dict[int, tuple[Any, Any, dict[int, tuple[Any, Sides]]]]] = []


@contextlib.contextmanager
def recording_sides() -> Iterator[dict]:
    """Record, while tracing a step, how far every assigned result reaches per side.

    Inside the block, each assignment's new data is recorded with its reach
    ``(below, above)`` per axis: the largest over its reads of the read array's
    own reach plus the read's offsets, and the target's old reach (cells
    outside the window keep their old values). Arrays never assigned reach 0.
    Each new data's reach into every data it was computed from is recorded
    too (:func:`reads_of`, :func:`needs_of`): what each field's frame is made of.

    >>> import numpy as np, pgas
    >>> u = pgas.from_numpy(np.arange(4.0), pgas.make_mesh(devices=1))
    >>> with recording_sides():
    ...     u[1:] = u[1:] - 0.5 * (u[1:] - u[:-1])
    ...     sides_of(u.data)
    ((1, 0),)
    """
    book: dict[int, tuple[Any, Sides]] = {}
    needs: dict = {}
    _BOOKS.append(book)
    _NEEDS.append(needs)
    try:
        yield book
    finally:
        _BOOKS.remove(book)
        _NEEDS.remove(needs)


def reads_of(data) -> dict[int, tuple[Any, Sides]]:
    """How far ``data``'s cells reach into every array data it was computed from, per side.

    Recorded inside :func:`recording_sides`: ``{id(source): (source, sides)}``
    over every data an assignment read (an array given to the step, one a
    parameter or the enclosing scope holds, or an earlier assignment's result),
    through assignments that read each other's results; ``data`` itself at 0.
    A data no assignment made reaches only itself. What
    :func:`pgas.loop.plan.plan` makes each field's frame of.

    >>> import numpy as np, pgas
    >>> u = pgas.from_numpy(np.arange(4.0), pgas.make_mesh(devices=1))
    >>> v, first = pgas.from_numpy(np.zeros(4), u.layout.mesh), u.data
    >>> with recording_sides():
    ...     u[1:] = u[1:] - 0.5 * (u[1:] - u[:-1])
    ...     v[1:-1] = u[1:-1]
    ...     reads_of(v.data)[id(first)][1]
    ((1, 0),)
    """
    for needs in reversed(_NEEDS):
        if id(data) in needs and needs[id(data)][0] is data:
            return needs[id(data)][2]
    return {id(data): (data, None)}


def needs_of(owners: dict[int, Any], ndim: int) -> dict[Any, Sides]:
    """How far, per side, every assignment recorded so far (:func:`recording_sides`) reads
    the data of each owner: ``{owner: sides}`` over the ``owners`` (``{id(data): owner}``
    of the data given to the step) and the data assigned into an array given to the
    step (``{id(array): owner}`` in ``owners`` too), each assignment's own cells
    computed from them. An owner never read at an offset maps to zeros; one never read
    is absent.

    >>> import numpy as np, pgas
    >>> u = pgas.from_numpy(np.arange(4.0), pgas.make_mesh(devices=1))
    >>> v = pgas.from_numpy(np.zeros(4), u.layout.mesh)
    >>> owners = {id(u.data): "u", id(v.data): "v"}
    >>> with recording_sides():
    ...     v[1:] = v[1:] + u[:-1]
    ...     needs_of(owners, 1)
    {'v': ((0, 0),), 'u': ((1, 0),)}
    """
    zero = ((0, 0),) * ndim
    out: dict[int, Sides] = {}
    book = _NEEDS[-1]
    for data, target, _ in book.values():  # data assigned into an array given to the step
        if id(target) in owners and id(data) not in owners:
            owners = {**owners, id(data): owners[id(target)]}
    for _, _, deps in book.values():
        for key, (_, far) in deps.items():
            who = owners.get(key)  # ids of live data: every one is held here or by the caller
            if who is None:
                continue
            got = out.get(who, zero)
            out[who] = tuple((max(g[0], f[0]), max(g[1], f[1]))
                             for g, f in zip(got, far or zero))  # fmt: skip
    return out


def sides_of(data) -> Sides | None:
    """The reach recorded for ``data`` (:func:`recording_sides`), ``None`` if not assigned.

    >>> sides_of(object()) is None
    True
    """
    for book in reversed(_BOOKS):
        if id(data) in book and book[id(data)][0] is data:
            return book[id(data)][1]
    return None


def record(target, reads: list, data) -> None:
    """Record ``data``, the new data of an assignment to ``target`` that made it from
    ``reads`` (:class:`pgas.globalview.lower.Read`), inside :func:`recording_sides`:
    its reach per side and its reach into every data it was computed from.

    >>> import numpy as np, pgas
    >>> u = pgas.from_numpy(np.arange(4.0), pgas.make_mesh(devices=1))
    >>> with recording_sides():
    ...     record(u, [], u.data)  # written from no read: it reaches nothing
    ...     sides_of(u.data)
    ((0, 0),)
    """
    if not _BOOKS:
        return
    ndim = target.layout.ndim
    zero = ((0, 0),) * ndim
    reach = [list(p) for p in sides_of(target.data) or zero]
    for read in reads:
        own = sides_of(read.array.data) or zero
        for axis, ((a, b), (lo, hi)) in enumerate(zip(own, read.per_side())):
            reach[axis] = [max(reach[axis][0], a + lo), max(reach[axis][1], b + hi)]
    _BOOKS[-1][id(data)] = (data, tuple((lo, hi) for lo, hi in reach))
    deps: dict[int, tuple[Any, Sides]] = {id(data): (data, zero)}
    sources = [(target.data, zero)] + [(r.array.data, r.per_side()) for r in reads]
    for source, offsets in sources:  # the target's old data: cells outside the window
        for key, (obj, far) in reads_of(source).items():
            far = far or zero
            got = deps.get(key, (obj, zero))[1]
            deps[key] = (obj, tuple((max(g[0], f[0] + o[0]), max(g[1], f[1] + o[1]))
                                    for g, f, o in zip(got, far, offsets)))  # fmt: skip
    _NEEDS[-1][id(data)] = (data, target, deps)
