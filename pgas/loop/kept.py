"""What :func:`pgas.run` keeps for its caller: the caller's state, and the state at a failure.

* Without ``donate=True`` the loop never invalidates the caller's arrays:
  :func:`entered` gives the loop its own copy (none is made where entering the
  loop's form copies anyway, as a double-buffered plan does).
* An exception from a chunk or a callback propagates unchanged, with
  :func:`attach` adding ``pgas_step`` (the steps completed) and ``pgas_state``
  (the state after them, in the caller's form) to it, and a note saying so.
* What a loop consumes never holds one buffer twice: :func:`distinct` copies
  the repeats (a state ``{"r": b, "p": b}``, ``b.copy()`` sharing ``b``'s
  buffer, a donated field also passed in ``params``), for XLA refuses to
  donate one buffer twice (or one the same call also reads) and the process
  then crashed.

>>> import numpy as np, pgas
>>> u = pgas.from_numpy(np.arange(3.0), pgas.make_mesh(devices=1))
>>> v = entered(lambda s: s, u)
>>> v is not u and v.data is not u.data
True
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp

from pgas.globalview.array import GlobalArray

__all__ = ["entered", "attach", "distinct"]


def _arrays(state: Any) -> list[jax.Array]:
    """The buffers of ``state``: its fields' data and its scalars."""
    leaves = jax.tree.leaves(state, is_leaf=lambda x: isinstance(x, GlobalArray))
    return [x.data if isinstance(x, GlobalArray) else x for x in leaves]


def _copy(leaf: Any) -> Any:
    if isinstance(leaf, GlobalArray):
        return GlobalArray(jnp.copy(leaf.data), leaf.layout, leaf.ext, leaf.anchor)
    return jnp.copy(leaf)  # a scalar of the state


def _copied(state: Any) -> Any:
    return jax.tree.map(_copy, state, is_leaf=lambda x: isinstance(x, GlobalArray))


def entered(enter: Callable, state: Any) -> Any:
    """``enter(state)`` as a state the loop may consume, ``state`` left valid."""
    out = enter(state)
    return _copied(state) if out is state else out


def _buffers(x: Any) -> frozenset:
    """The device buffers of a JAX array (none for a tracer, a deleted array or a value that
    is not a JAX array: nothing is donated there)."""
    if not isinstance(x, jax.Array) or isinstance(x, jax.core.Tracer) or x.is_deleted():
        return frozenset()
    try:
        return frozenset(s.data.unsafe_buffer_pointer() for s in x.addressable_shards)
    except Exception:  # noqa: BLE001 - a backend without buffer pointers: the array itself
        return frozenset({id(x)})


def distinct(donated: Any, kept: Any = ()) -> Any:
    """``donated`` with a copy of each array whose buffer came before: earlier in ``donated``,
    or anywhere in ``kept`` (what the same call reads without consuming, e.g. ``params``).

    The first of each buffer (in the order of ``jax.tree.leaves``: a dict's keys sorted) is
    kept as it is; only a repeat costs a copy. ``donated`` and ``kept`` are pytrees of
    :class:`~pgas.globalview.array.GlobalArray` fields, JAX arrays and other values (left
    as they are).

    >>> import numpy as np, pgas
    >>> u = pgas.from_numpy(np.arange(3.0), pgas.make_mesh(devices=1))
    >>> v = u.copy()  # the same buffer
    >>> state = distinct({"r": u, "p": v})
    >>> state["p"] is v, state["r"].data is u.data, state["r"].to_numpy().tolist()
    (True, False, [0.0, 1.0, 2.0])
    >>> distinct(u, kept={"k": u}).data is u.data  # read by the same call
    False
    """
    seen: set = set()
    for x in _arrays(kept):
        seen.update(_buffers(x))

    def one(leaf: Any) -> Any:
        mine = _buffers(leaf.data if isinstance(leaf, GlobalArray) else leaf)
        if mine & seen:
            return _copy(leaf)
        seen.update(mine)
        return leaf

    return jax.tree.map(one, donated, is_leaf=lambda x: isinstance(x, GlobalArray))


def attach(err: BaseException, leave: Callable, state: Any, done: int, steps: int) -> None:
    """Add ``pgas_step = done`` and ``pgas_state`` (``leave(state)``, or None where a failed
    chunk consumed the buffers) to ``err``, with a note."""
    kept = None
    if all(not a.is_deleted() for a in _arrays(state)):
        try:
            kept = leave(state)
        except Exception:  # noqa: BLE001 - the original error is what propagates
            kept = None
    err.pgas_step, err.pgas_state = done, kept
    where = "its .pgas_state" if kept is not None else "lost (a failed chunk consumed it)"
    err.add_note(f"pgas.run stopped after {done} of {steps} steps (.pgas_step); the state "
                 f"after step {done} is {where}")  # fmt: skip
