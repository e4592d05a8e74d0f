"""What a step returns, checked against the state it got: pgas's error instead of JAX's.

A compiled loop carries the state from one step to the next, so a step returns
a state of the same structure (the same containers, keys and number of
leaves), each field of its global shape and each scalar of its shape and dtype
(a field's dtype is cast back, as an assignment casts). A step that returns
its state costs nothing here.

JAX finds a mismatch as its loop's carry error (a ``TypeError`` about the
``carry``), or earlier, where the loop maps over the state and the step's result
together (a ``ValueError``: "Dict key mismatch"). After such an error
:func:`explain` traces the step once more (nothing runs) and names what it
returned against what it got.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax

from pgas.errors import PgasError
from pgas.globalview.array import GlobalArray
from pgas.loop.frames import step_fn

__all__ = ["explain", "mismatch"]


def _is_array(x) -> bool:
    return isinstance(x, GlobalArray)


class _Text:
    """A leaf shown as its description (``GlobalArray[40] float64``, ``int32[]``)."""

    def __init__(self, text: str) -> None:
        self.text = text

    def __repr__(self) -> str:
        return self.text


def _describe(leaf) -> str:
    shape = list(getattr(leaf, "shape", ()))
    dtype = getattr(leaf, "dtype", type(leaf).__name__)
    return f"GlobalArray{shape} {dtype}" if _is_array(leaf) else f"{dtype}{shape}"


def _shown(tree) -> str:
    leaves, treedef = jax.tree.flatten(tree, is_leaf=_is_array)
    return repr(treedef.unflatten([_Text(_describe(x)) for x in leaves]))


def mismatch(step: Callable, state: Any, params: Any = None) -> str | None:
    """What ``step`` returns for ``state`` that a loop cannot carry, as a message; ``None``
    where it returns a state like ``state`` (or where tracing it fails otherwise).

    >>> import jax.numpy as jnp, numpy as np, pgas
    >>> u = pgas.from_numpy(np.zeros(4), pgas.make_mesh(devices=1))
    >>> mismatch(lambda s: (s[0], s[1] + 0.5), (u, jnp.int32(0)))[:60]
    'the step returned (GlobalArray[4] float64, float64[]) for th'
    >>> mismatch(lambda u: u, u) is None
    True
    """
    seen: dict = {}

    def probe(s, p):
        seen["out"] = step_fn(step, p)(s)

    try:
        jax.eval_shape(probe, state, params)
    except Exception:  # noqa: BLE001 -- the caller's own error says more
        return None
    out = seen["out"]
    got, want = (
        jax.tree.structure(out, is_leaf=_is_array),
        jax.tree.structure(state, is_leaf=_is_array),
    )
    what = None
    if got != want:
        what = "another structure"
    else:
        paths = jax.tree_util.tree_flatten_with_path(state, is_leaf=_is_array)[0]
        for (path, before), after in zip(paths, jax.tree.leaves(out, is_leaf=_is_array)):
            where = f"state{jax.tree_util.keystr(path)}"
            if _is_array(before) != _is_array(after):
                what = f"{where} is {_describe(before)}, the step returned {_describe(after)}"
            elif _is_array(before) and tuple(before.shape) != tuple(after.shape):
                what = f"the field {where} has shape {tuple(before.shape)}, the step returned " \
                       f"{tuple(after.shape)}"  # fmt: skip
            elif not _is_array(before) and (jax.numpy.shape(before) != jax.numpy.shape(after)
                                            or before.dtype != after.dtype):  # fmt: skip
                what = f"the scalar {where} is {_describe(before)}, the step returned " \
                       f"{_describe(after)}"  # fmt: skip
            if what:
                break
    if what is None:
        return None
    return (
        f"the step returned {_shown(out)} for the state {_shown(state)} ({what}): a loop "
        f"carries the state from step to step, so a step returns the structure it got, each "
        f"field of its shape and each scalar of its shape and dtype; return the state "
        f"updated (u[1:-1] = ...; return u) and keep each scalar's dtype "
        f"(jnp.asarray(value, s.dtype))"
    )


def explain(err: BaseException, step: Callable, state: Any, params: Any = None) -> None:
    """Raise a :class:`~pgas.errors.PgasError` from ``err``, JAX's error in a loop (a
    ``TypeError`` or ``ValueError``), where ``step`` returns a state unlike ``state``
    (:func:`mismatch`); else return, and the caller re-raises ``err``.

    >>> explain(KeyError("other"), lambda u: u, None)
    """
    if not isinstance(err, (TypeError, ValueError)) or isinstance(err, PgasError):
        return
    message = mismatch(step, state, params)
    if message is not None:
        raise PgasError(message) from err
