"""Scalars in the state of a compiled loop: 0-d JAX arrays beside the fields.

The state of :func:`pgas.run` and :func:`pgas.run_until` is a pytree whose
leaves are :class:`pgas.GlobalArray` fields and scalars: 0-d ``jax.Array``
values, replicated on every device (a residual ``r . r``, a step size, a
time). A step computes a new scalar with a reduction (``pgas.sum(p * Ap)``),
which the compiled loop runs as one all-reduce of a scalar per step, and
returns it in the state. The frames of a loop pass scalars unchanged
(:mod:`pgas.loop.frames`); a step with a reduction inside runs one step per
exchange (:func:`pgas.loop.plan.plan` says so), and a state with scalars is
carried single-buffered.
"""

from __future__ import annotations

from typing import Any

import jax
import numpy as np

from pgas.errors import LayoutError, PgasError
from pgas.globalview.array import GlobalArray

__all__ = ["check_state", "has_scalars", "placed"]


def _is_array(x) -> bool:
    return isinstance(x, GlobalArray)


def check_state(state: Any, name: str = "state") -> None:
    """Every leaf of ``state`` is a :class:`pgas.GlobalArray` or a 0-d ``jax.Array``,
    and every field is on the same devices.

    Raises:
        PgasError: naming the leaf, what it is, and how to make a scalar of it.
        LayoutError: two fields on meshes of different devices.

    >>> import jax.numpy as jnp, numpy as np, pgas
    >>> u = pgas.from_numpy(np.zeros(4, np.float32), pgas.make_mesh(devices=1))
    >>> check_state((u, jnp.float32(0.0)))
    >>> try:
    ...     check_state((u, 0.5))
    ... except pgas.PgasError as err:
    ...     print(str(err)[:44])
    state[1] is a float (0.5): a state holds pga
    """
    found, _ = jax.tree_util.tree_flatten_with_path(state, is_leaf=_is_array)
    for path, leaf in found:
        if isinstance(leaf, GlobalArray):
            continue
        if isinstance(leaf, jax.Array) and leaf.ndim == 0:
            continue
        where = f"{name}{jax.tree_util.keystr(path)}"
        if isinstance(leaf, (jax.Array, np.ndarray)):
            what = f"an array of shape {tuple(leaf.shape)}"
            fix = ("wrap a field with pgas.from_numpy, keep scalars 0-d (e.g. pgas.sum(r * r)), "
                   "or pass a constant array by params=")  # fmt: skip
        else:
            what = f"a {type(leaf).__name__} ({leaf!r:.40})"
            fix = (f"make it one with jnp.asarray({leaf!r:.40}, dtype), or pass a constant "
                   f"by params=")  # fmt: skip
        raise PgasError(f"{where} is {what}: a state holds pgas.GlobalArrays and scalars "
                        f"(0-d JAX arrays); {fix}")  # fmt: skip
    _check_devices(found, name)


def _check_devices(found: list, name: str) -> None:
    """Every field of the state on the same devices: one compiled loop runs on one set."""
    first = None
    for path, leaf in found:
        if not isinstance(leaf, GlobalArray):
            continue
        mesh = leaf.layout.mesh
        if first is not None and mesh is first[3]:
            continue
        ids = sorted(d.id for d in mesh.devices.flat)
        where = f"{name}{jax.tree_util.keystr(path)}"
        if first is None:
            first = (where, ids, dict(mesh.shape), mesh)
        elif ids != first[1]:
            raise LayoutError(
                f"{where} is on a mesh {dict(mesh.shape)} of devices {ids}, {first[0]} on a "
                f"mesh {first[2]} of devices {first[1]}: the fields of a state run in one "
                f"compiled program, on one set of devices; make every field on one mesh "
                f"(mesh = pgas.make_mesh(...), then pgas.from_numpy(x, mesh) for each)"
            )


def has_scalars(state: Any) -> bool:
    """Whether ``state`` holds a scalar beside its fields.

    >>> import jax.numpy as jnp, numpy as np, pgas
    >>> u = pgas.from_numpy(np.zeros(4, np.float32), pgas.make_mesh(devices=1))
    >>> has_scalars(u), has_scalars({"u": u, "rr": jnp.float32(1.0)})
    (False, True)
    """
    return any(not _is_array(x) for x in jax.tree.leaves(state, is_leaf=_is_array))


def placed(state: Any) -> Any:
    """``state`` with each scalar replicated on its fields' mesh, as a compiled loop returns
    it: a scalar made with ``jnp.asarray`` sits on one device, and ``jax.jit`` would key a
    second program on it, so a run resumed from a loop's result (the next checkpoint chunk)
    would compile its loop again. Types are kept (a weak type too).

    >>> import jax.numpy as jnp, numpy as np, pgas
    >>> u = pgas.from_numpy(np.zeros(4, np.float32), pgas.make_mesh(devices=2))
    >>> placed({"u": u, "t": jnp.asarray(0.0)})["t"].sharding.is_fully_replicated
    True
    """
    fields = [x for x in jax.tree.leaves(state, is_leaf=_is_array) if _is_array(x)]
    if not fields:
        return state
    every = jax.sharding.NamedSharding(fields[0].layout.mesh, jax.sharding.PartitionSpec())

    def place(x):
        if _is_array(x) or not isinstance(x, jax.Array) or isinstance(x, jax.core.Tracer):
            return x
        return x if x.sharding == every else jax.device_put(x, every)

    return jax.tree.map(place, state, is_leaf=_is_array)
