"""The explicit path's state dicts: several fields and scalars, reductions inside the step.

Contract: a state dict holds :class:`pgas.GlobalArray` fields split alike and
0-d scalars (:func:`split_state` checks it). Its kernel, ``kernel(e, reduce)``
(``kernel(e, p, reduce)`` with params), gets ``e``, each field's block with its
halo and each scalar, and returns a dict of the same keys: each field's new
cells and each new scalar (conjugate gradients: ``alpha = e['rr'] / reduce(p *
ap, reproducible=True)``). A reduction needs every cell up to date, so a state
runs one step per exchange (``k = 1``). One step program serves both
:func:`state_program` (:func:`pgas.references.explicit.loop.run`, a fixed
number of steps) and :func:`state_until_program`
(:func:`pgas.references.explicit.until.run_until`): the same steps give the
same bits.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np
from jax import shard_map
from jax.sharding import PartitionSpec

from pgas.errors import HaloError, PgasError
from pgas.globalview.array import GlobalArray
from pgas.globalview.lower import check_dtype
from pgas.globalview.view import normalize_index
from pgas.grid.decomposition import halo_sides
from pgas.grid.layout import Layout
from pgas.loop.decision import all_finite, check_decision
from pgas.references.explicit.checks import converged_of, reducer, while_checks
from pgas.references.explicit.exchange import block_numbers, extended
from pgas.references.explicit.params import given, param_specs
from pgas.references.explicit.update import merge

__all__ = ["split_state", "state_program", "state_until_program", "state_of"]


def split_state(state: dict) -> tuple[tuple, tuple, list, Layout]:
    """A state dict as (keys, layout of each field or ``None`` for a scalar, leaves, the first
    field's layout), checked: fields split alike, scalars 0-d.

    >>> import numpy as np, pgas
    >>> u = pgas.from_numpy(np.zeros(4), pgas.make_mesh(devices=1))
    >>> keys, layouts, leaves, first = split_state({"u": u, "total": 0.0})
    >>> keys, layouts[1], first is u.layout
    (('u', 'total'), None, True)
    """
    keys, layouts, leaves, first = tuple(state), [], [], None
    for key, value in state.items():
        if isinstance(value, GlobalArray):
            if first is None:
                first = value.layout
            elif not value.layout.same_grid(first):
                raise PgasError(
                    f"state[{key!r}] has shape {value.shape} split {value.layout.spec} over "
                    f"{dict(value.layout.mesh.shape)}; every field of a state is split like the "
                    f"first ({first.shape} split {first.spec}): build them on the same mesh"
                )  # fmt: skip
            layouts.append(value.layout)
            leaves.append(value.data)
        elif isinstance(value, (jax.Array, np.ndarray, np.generic, int, float)) and \
                np.ndim(value) == 0:  # fmt: skip
            layouts.append(None)
            leaves.append(jnp.asarray(value))
        else:
            shape = f" of shape {np.shape(value)}" if hasattr(value, "shape") else ""
            raise PgasError(
                f"state[{key!r}] is a {type(value).__name__}{shape}; a state dict holds "
                f"pgas.GlobalArray fields and 0-d scalars (e.g. jnp.asarray(0.0))"
            )
    if first is None:
        raise PgasError(f"the state {sorted(state)} holds no pgas.GlobalArray field")
    return keys, tuple(layouts), leaves, first


def _check_new(new, keys: tuple, layouts: tuple, blocks: dict, want: tuple) -> None:
    """What a multi-field kernel returned: the state's keys, a block per field, 0-d scalars."""
    if not isinstance(new, dict) or set(new) != set(keys):
        got = sorted(new) if isinstance(new, dict) else type(new).__name__
        raise PgasError(
            f"kernel returned {got}; a kernel of a state dict returns a dict with the state's "
            f"keys {list(keys)}: the new cells of each field (e['u'][1:-1] for halo 1) and "
            f"each new scalar"
        )
    for key, lay in zip(keys, layouts):
        shape = tuple(np.shape(new[key]))
        if lay is None and shape != ():
            raise PgasError(
                f"kernel returned shape {shape} for the scalar {key!r}; return a 0-d value "
                f"(a reduction such as reduce(r * r), or arithmetic on scalars)"
            )
        if lay is not None and shape != want:
            raise HaloError(
                f"kernel returned shape {shape} for the field {key!r} on a block of shape "
                f"{want}; return new values for every cell of the block (e[{key!r}][1:-1] for "
                f"halo 1)"
            )
        if lay is not None:
            check_dtype(np.dtype(new[key].dtype), np.dtype(blocks[key].dtype), False)


class _StateStep:
    """One step of a state dict inside ``shard_map``, one exchange of each field's halo: the
    kernel on the view (each field's block with its halo, each scalar), then each field's
    cells merged (the update region's) and each scalar cast to its dtype.

    Built once per program by :func:`state_program` (a fixed number of steps) and
    :func:`state_until_program` (a ``while`` loop); ``leaves``, ``tree`` and ``fields`` are
    ``params`` as in :func:`pgas.references.explicit.until.until_program`.
    """

    def __init__(self, kernel: Callable, keys: tuple, layouts: tuple, widths: tuple,
                 region_key, leaves, tree, fields: tuple) -> None:  # fmt: skip
        region = None if region_key is None else tuple(slice(*r) for r in region_key)
        first = next(lay for lay in layouts if lay is not None)
        self.window = normalize_index(region if region is not None else (), first.shape)
        if not all(self.window.kept):
            raise HaloError("region must be slices (integers would drop an axis); use i:i+1")
        self.sides = halo_sides(widths, first.ndim)
        self.widths = tuple(max(p) for p in self.sides)
        self.zero = ((0, 0),) * first.ndim
        self.kernel, self.keys, self.layouts = kernel, keys, layouts
        self.numbers = block_numbers(first)
        self.call = given(leaves, tree, fields, first, self.sides, 1)
        self.reduce = reducer(first, self.window, self.widths, self.numbers)

    def _blocks(self, values) -> dict:
        """Each field in blocks form with its halo (``sides``)."""
        return {k: v if lay is None else extended(v, lay, self.sides, self.numbers)
                for k, v, lay in zip(self.keys, values, self.layouts)}  # fmt: skip

    def _seen(self, blocks: dict) -> dict:
        """The kernel's view of ``blocks``: each field's block with its halo, the scalars."""
        return {k: blocks[k] if lay is None else blocks[k].reshape(blocks[k].shape[1::2])
                for k, lay in zip(self.keys, self.layouts)}  # fmt: skip

    def view(self, values) -> dict:
        """What a check reads: the view of ``values`` (each field's halo exchanged)."""
        return self._seen(self._blocks(values))

    def __call__(self, values: tuple) -> tuple:
        """The state leaves one step later."""
        blocks = self._blocks(values)
        new = self.call(self.kernel, self._seen(blocks), self.reduce)
        want = next(v.shape for v, lay in zip(values, self.layouts) if lay is not None)
        _check_new(new, self.keys, self.layouts, dict(zip(self.keys, values)), want)
        out = []
        for k, v, lay in zip(self.keys, values, self.layouts):
            if lay is None:
                out.append(jnp.asarray(new[k]).astype(v.dtype))
                continue
            merged = merge(blocks[k], new[k], lay, self.window, self.widths, self.sides,
                            self.zero, self.numbers, None)  # fmt: skip
            out.append(merged.reshape(v.shape))
        return tuple(out)


@functools.lru_cache(maxsize=32)
def state_program(kernel: Callable, keys: tuple, layouts: tuple, widths: tuple, region_key,
                  tree=None, fields: tuple = (), reads: tuple = ()) -> Callable:  # fmt: skip
    """The compiled program of :func:`pgas.references.explicit.loop.run` on a state dict:
    ``(state leaves, steps, *params) -> state leaves``, one step per exchange.

    Arguments as :func:`state_until_program`'s.
    """

    def loop(state, n, *leaves):
        step = _StateStep(kernel, keys, layouts, widths, region_key, leaves, tree, fields)
        return jax.lax.fori_loop(0, n, lambda i, x: step(x), tuple(state))

    specs = param_specs(layouts)  # a field's split, a scalar replicated: as for params
    mesh = next(lay for lay in layouts if lay is not None).mesh
    sharded = shard_map(loop, mesh=mesh, in_specs=(specs, PartitionSpec(), *param_specs(fields)),
                        out_specs=specs)  # fmt: skip
    return jax.jit(sharded, donate_argnums=0)


@functools.lru_cache(maxsize=32)
def state_until_program(kernel: Callable, converged: Callable, keys: tuple, layouts: tuple,
                        widths: tuple, region_key, every: int, max_steps: int, tree=None,
                        fields: tuple = (), reads: tuple = ()) -> Callable:  # fmt: skip
    """The compiled program of :func:`pgas.references.explicit.until.run_until` on a state
    dict:
    ``(state leaves, *params) -> (state leaves, steps, done, finite)``, one step per exchange.

    ``layouts`` holds each state key's layout (``None``: a 0-d scalar, replicated);
    ``tree`` and ``fields`` describe ``params`` as in
    :func:`pgas.references.explicit.until.until_program`. A check is not
    finite where a value it reduced or a float scalar of the state is NaN or infinite.
    ``reads``: the numbers the kernel (and ``converged``) read from module globals and
    closures (:func:`pgas.loop.outside.numbers_read`), a part of the key only: a changed one
    compiles anew, never a stale program.
    """
    scalars = any(lay is None for lay in layouts)

    def loop(state, *leaves):
        step = _StateStep(kernel, keys, layouts, widths, region_key, leaves, tree, fields)
        reduce = step.reduce

        def advance(values, n: int):  # n static
            return jax.lax.fori_loop(0, n, lambda i, x: step(x), values)

        def check(values):
            before, seen = reduce.calls, len(reduce.seen)
            view = step.view(values)
            out = step.call(converged_of(converged), view, reduce)
            done = jnp.asarray(check_decision(out, reduce.calls - before, scalars), jnp.bool_)
            return done, all_finite(reduce.seen[seen:], view)

        return while_checks(advance, check, tuple(state), every, max_steps)

    specs = param_specs(layouts)
    mesh = next(lay for lay in layouts if lay is not None).mesh
    sharded = shard_map(loop, mesh=mesh, in_specs=(specs, *param_specs(fields)),
                        out_specs=(specs, *(PartitionSpec(),) * 3))  # fmt: skip
    return jax.jit(sharded, donate_argnums=0)


def state_of(keys: tuple, layouts: tuple, leaves) -> dict:
    """The state dict of a state program's leaves.

    >>> import numpy as np, pgas
    >>> u = pgas.from_numpy(np.zeros(4), pgas.make_mesh(devices=1))
    >>> out = state_of(("u", "total"), (u.layout, None), (u.data, 0.0))
    >>> out["u"].shape, out["total"]
    ((4,), 0.0)
    """
    return {k: GlobalArray(v, lay) if lay is not None else v
            for k, v, lay in zip(keys, leaves, layouts)}  # fmt: skip
