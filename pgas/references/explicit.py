"""The explicit path: local kernels on blocks with halo cells, ppermute under shard_map.

This is the ImplicitGlobalGrid / MPI way of writing a stencil, inside one JAX
program: every device holds its block, :func:`exchange_halo` fills the halo
cells by ``lax.ppermute`` with the neighbouring devices (two-phase, corners
included; boundary conditions at the domain edges), and a *local kernel*
computes the new values of the block from the extended block::

    def heat(e):                        # e: block with 1 halo cell per side
        return 0.5 * e[1:-1] + 0.25 * (e[:-2] + e[2:])

The kernel contract, shared with the MPI backend (:mod:`pgas.mpi`): it takes
the extended block (``block + 2 * halo`` cells per axis) and returns the new
values of all the block's cells, using only operators and methods that NumPy
and ``jax.numpy`` arrays share. The update-region semantics are the automatic
path's: a cell takes the kernel's value only inside ``region`` (global
coordinates, NumPy slices) and outside the outer cells of ``Keep`` faces;
padding cells never show.

Deep halos, as on the automatic path: with ``steps_per_exchange=k`` one
exchange fills a halo ``k * halo`` wide and the kernel runs ``k`` times on the
extended block, each time on a block ``halo`` cells narrower per side (the
kernel works on any size: it returns its input's interior); the block's own
cells come out bitwise equal to ``k`` single steps.

Halos per side: ``halo`` may give, per axis, the cells the kernel reads below
and above, ``halo=((1, 0),)`` for an upwind step. The kernel then receives the
block with ``below`` cells before it and ``above`` after it per axis (``m``
times that in the frame of deep halos, ``m`` the sub-steps left), and returns
its input less ``below`` / ``above`` (``e[1:]``); only those sides are kept and
exchanged, as on the automatic path (:attr:`pgas.loop.plan.Plan.sides`): the
frame keeps ``k * (below, above)`` cells, none on a side not read. An int or
one width per axis means both sides, as before.

The halo exchange is :func:`pgas.halo.extend`, the same code the automatic path
uses, with ``ppermute`` instead of the global-view shift as transport; both
compile to the same collective-permutes (``D - 1`` pairs per direction on a
non-periodic axis: nothing crosses the domain edge).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence

import jax
import jax.numpy as jnp
import numpy as np
from jax import shard_map
from jax.sharding import PartitionSpec

from pgas.errors import HaloError, PgasError
from pgas.globalview.array import GlobalArray
from pgas.globalview.halo import extend, refill_mirror
from pgas.globalview.lower import anchor_of, check_dtype
from pgas.globalview.reduce import extreme, reproducible_kind, reproducible_psum
from pgas.globalview.view import normalize_index
from pgas.grid.decomposition import Ext, ext_pair, halo_sides
from pgas.grid.layout import Layout
from pgas.grid.mesh import platform_of
from pgas.grid.schedule import check_steps
from pgas.loop import counts
from pgas.loop.decision import all_finite, call_converged, check_decision
from pgas.loop.frames import hold
from pgas.loop.plan import Choice, Plan, choose_steps_per_exchange
from pgas.loop.report import CommReport, compiled_report, exchanges_of
from pgas.loop.until import (
    SameCode,
    Until,
    check_args,
    check_state_steps,
    choose_check_every,
    warn_non_finite,
    warn_not_converged,
)

__all__ = [
    "exchange_halo",
    "step",
    "run",
    "run_until",
    "plan",
    "choose",
    "comm_report",
    "program",
    "until_program",
    "region_key",
]

Kernel = Callable[[jax.Array], jax.Array]
Halo = int | Sequence[int] | Sequence[tuple[int, int]]
Sides = tuple[tuple[int, int], ...]


def _sides(layout: Layout, halo: Halo) -> Sides:
    """``halo`` as ``(below, above)`` per axis (:func:`pgas.grid.decomposition.halo_sides`)."""
    sides = halo_sides(halo, layout.ndim)
    for axis, pair in enumerate(sides):
        if max(pair):
            layout.check_halo(axis, max(pair))
    return sides


def _widths(layout: Layout, halo: Halo) -> tuple[int, ...]:
    """The larger side of ``halo`` per axis (what a ``Keep`` face keeps, the plan's widths)."""
    return tuple(max(p) for p in _sides(layout, halo))


def _asymmetric(sides: Sides) -> Sides | None:
    """``sides``, or ``None`` where both sides of every axis are equal (as a plan records it)."""
    return None if all(lo == hi for lo, hi in sides) else sides


def _block_numbers(layout: Layout) -> list[jax.Array]:
    """This device's block number per array axis (inside shard_map)."""
    return [
        jnp.zeros((), jnp.int32) if name is None else jax.lax.axis_index(name)
        for name in layout.spec
    ]


def _ppermute(name: str | None, parts: int, periodic: bool):
    def move(slab, direction):
        if name is None or parts == 1:
            return slab
        perm = [(i, (i + direction) % parts) for i in range(parts)
                if periodic or 0 <= i + direction < parts]  # fmt: skip
        return jax.lax.ppermute(slab, name, perm)

    return move


def _extended(block: jax.Array, layout: Layout, ext: Ext, numbers) -> jax.Array:
    """The local block in blocks form ``(1, b0 + below0 + above0, 1, ...)`` with the halo
    ``ext`` (:data:`pgas.grid.decomposition.Ext`: an int per axis for both sides, else
    ``(below, above)``); only the cells kept are exchanged."""
    blocks = block.reshape(tuple(x for n in block.shape for x in (1, n)))
    for axis, e in enumerate(ext):
        if any(ext_pair(e)):
            ax, faces = layout.axes[axis], layout.boundary[axis]
            move = _ppermute(layout.spec[axis], ax.parts, faces[0].periodic)
            blocks = extend(blocks, axis, e, ax, faces, numbers[axis], transport=move)
    return blocks


def exchange_halo(block: jax.Array, layout: Layout, halo: Halo) -> jax.Array:
    """The local block with ``halo`` cells added on every side, filled from the neighbours.

    Call inside ``shard_map`` over ``layout.mesh`` with the array's spec.
    Axis by axis (corners included), each side is one ``lax.ppermute`` of a
    halo slab (nothing crosses a non-periodic domain edge); ghost cells at
    the domain edges follow the array's boundary conditions; a short
    block's right halo sits right after its last real cell.

    Args:
        block: this device's physical block (``layout.local_shape``).
        layout: the global array's layout.
        halo: width per axis (an int for all), or a ``(below, above)`` pair per axis.

    Returns:
        The extended block, ``local_shape + 2 * halo`` per axis
        (``local_shape + below + above`` for pairs: only those sides are exchanged).

    >>> import numpy as np, pgas
    >>> from jax import shard_map
    >>> u = pgas.from_numpy(np.arange(4.0), pgas.make_mesh(devices=1))
    >>> f = shard_map(lambda b: exchange_halo(b, u.layout, 1), mesh=u.mesh,
    ...               in_specs=u.layout.sharding.spec, out_specs=u.layout.sharding.spec)
    >>> np.asarray(f(u.data)).tolist()
    [3.0, 0.0, 1.0, 2.0, 3.0, 0.0]
    >>> f = shard_map(lambda b: exchange_halo(b, u.layout, ((1, 0),)), mesh=u.mesh,
    ...               in_specs=u.layout.sharding.spec, out_specs=u.layout.sharding.spec)
    >>> np.asarray(f(u.data)).tolist()
    [3.0, 0.0, 1.0, 2.0, 3.0]
    """
    ext = _extended(block, layout, _sides(layout, halo), _block_numbers(layout))
    return ext.reshape(ext.shape[1::2])


def _local_update(kernel: Kernel, layout: Layout, sides: Sides, region, k: int) -> Callable:
    """``k`` kernel steps on one exchange of a halo ``k * sides`` wide (see the module doc).

    The frame keeps ``k`` times each side's reach, ``k * (below, above)`` per axis, all of
    it exchanged; each sub-step gives the kernel the whole frame and keeps what it returns,
    a frame narrower by ``(below, above)``.
    """
    window = normalize_index(region if region is not None else (), layout.shape)
    if not all(window.kept):
        raise HaloError("region must be slices (integers would drop an axis); use i:i+1")
    widths = tuple(max(p) for p in sides)
    one_sided = _asymmetric(sides)

    def update(block, counter=None):
        numbers = _block_numbers(layout)
        anchor = None if counter is None else anchor_of(counter)
        ext = tuple((k * lo, k * hi) for lo, hi in sides)
        blocks = _extended(block, layout, ext, numbers)
        if hold(layout.mesh, tuple(lo + hi for lo, hi in ext)):  # built once, read by the
            blocks = jax.lax.optimization_barrier(blocks)  # kernel alone (as in pgas.run)
        for _ in range(k):
            dom = tuple((e - lo, f - hi) for (e, f), (lo, hi) in zip(ext, sides))
            new = kernel(blocks.reshape(blocks.shape[1::2]))
            want = tuple(n + lo + hi for n, (lo, hi) in zip(block.shape, dom))
            if new.shape != want:
                shown = widths if one_sided is None else sides
                raise HaloError(
                    f"kernel returned shape {new.shape} for a block of shape {want} with halo "
                    f"{shown}; it must return new values for every cell of the block (e[1:-1] "
                    f"for halo 1, e[1:] for halo ((1, 0),))"
                )
            check_dtype(np.dtype(new.dtype), np.dtype(block.dtype), False)
            blocks = _merge(blocks, new, layout, window, widths, ext, dom, numbers, anchor)
            ext = dom
        return blocks.reshape(block.shape)

    return update


def _merge(blocks, new, layout: Layout, window, widths, ext: Sides, dom: Sides, numbers,
           anchor) -> jax.Array:  # fmt: skip
    """The kernel's values inside the update mask, the old ones elsewhere; ghosts re-filled.

    ``blocks`` keep ``ext`` cells ``(below, above)`` per axis, ``new`` and the result
    ``dom``."""
    for axis, ((e, _), (lo, hi)) in enumerate(zip(ext, dom)):
        if ext[axis] != dom[axis]:
            blocks = jax.lax.slice_in_dim(blocks, e - lo, e + layout.axes[axis].block + hi,
                                          axis=2 * axis + 1)  # fmt: skip
    new = new.astype(blocks.dtype).reshape(blocks.shape)
    numbers = [b.reshape(()) for b in numbers]
    mask = layout.window_mask(window.start, window.extent, widths, block=numbers, ext=dom,
                              anchor=anchor)  # fmt: skip
    out = new if mask is None else jnp.where(mask, new, blocks)
    for axis, d in enumerate(dom):
        if any(d):
            out = refill_mirror(out, axis, d, layout.axes[axis], layout.boundary[axis],
                                numbers[axis], anchor)  # fmt: skip
    return out


def _sharded(fn: Callable, layout: Layout) -> Callable:
    spec = PartitionSpec(*layout.spec)
    return shard_map(fn, mesh=layout.mesh, in_specs=spec, out_specs=spec)


def choose(u: GlobalArray, halo: Halo = 1, steps_per_exchange: int | str = "auto") -> Choice:
    """The steps per exchange the explicit path uses for ``u`` and ``halo``.

    >>> import numpy as np, pgas
    >>> u = pgas.from_numpy(np.zeros(10), pgas.make_mesh(devices=1))
    >>> choose(u, 1, 16).steps_per_exchange
    10
    """
    lay = u.layout
    min_block = [a.min_length for a in lay.axes]
    return choose_steps_per_exchange(steps_per_exchange, min_block, _widths(lay, halo),
                                     platform_of(lay.mesh))  # fmt: skip


def plan(u: GlobalArray, halo: Halo = 1, steps_per_exchange: int | str = "auto") -> Plan:
    """The plan of an explicit run of ``u``: ``k`` (:func:`choose`), a halo ``k * halo`` wide.

    Single-buffered: each group reads an extended copy of the block. A halo per
    side is recorded in :attr:`Plan.sides`; ``k`` times it is exchanged.

    >>> import numpy as np, pgas
    >>> u = pgas.from_numpy(np.zeros(10), pgas.make_mesh(devices=1))
    >>> p = plan(u, 1, 4)
    >>> p.steps_per_exchange, p.halo, p.double
    (4, (4,), False)
    >>> plan(u, ((1, 0),), 4).exchanged
    ((4, 0),)
    """
    sides = _sides(u.layout, halo)
    widths = tuple(max(p) for p in sides)
    choice = choose(u, halo, steps_per_exchange)
    k = choice.steps_per_exchange
    return Plan(widths, choice, tuple(k * w for w in widths), platform_of(u.layout.mesh),
                sides=_asymmetric(sides))  # fmt: skip


def step(kernel: Kernel, u: GlobalArray, halo: Halo = 1, region=None,
         steps_per_exchange: int = 1) -> GlobalArray:  # fmt: skip
    """``steps_per_exchange`` explicit steps on one halo exchange (for reports and tests).

    >>> import numpy as np, pgas
    >>> mesh = pgas.make_mesh(devices=1)
    >>> u = pgas.from_numpy(np.array([0.0, 4.0, 0.0]), mesh, boundary=pgas.Keep())
    >>> step(lambda e: 0.5 * e[1:-1] + 0.25 * (e[:-2] + e[2:]), u).to_numpy()
    array([0., 2., 0.])
    """
    k = choose(u, halo, steps_per_exchange).steps_per_exchange
    update = _local_update(kernel, u.layout, _sides(u.layout, halo), region, k)
    return GlobalArray(_sharded(update, u.layout)(u.data), u.layout)


def comm_report(
    kernel: Kernel,
    u: GlobalArray,
    halo: Halo = 1,
    region=None,
    steps_per_exchange: int | str = "auto",
    loop: bool = False,
) -> CommReport:
    """What the compiler sent for the explicit path, per physical step (see pgas.comm_report).

    >>> import numpy as np, pgas
    >>> u = pgas.from_numpy(np.zeros(8, np.float32), pgas.make_mesh(devices=1))
    >>> comm_report(lambda e: e[1:-1], u, 1, steps_per_exchange=2).steps_per_exchange
    2
    """
    how = plan(u, halo, steps_per_exchange)
    c = how.choice
    k, lay = c.steps_per_exchange, u.layout
    fn = lambda v: step(kernel, v, halo, region, k)  # noqa: E731
    args: tuple = (u,)
    if loop:
        fn = lambda v, n: jax.lax.fori_loop(0, n, lambda i, x: step(kernel, x, halo, region, k), v)  # noqa: E731  fmt: skip
        args = (u, jnp.int32(2))
    exchanges = exchanges_of(lay, how.exchanged, u.dtype.itemsize)
    return compiled_report(fn, args, name=getattr(kernel, "__name__", "kernel"),
                           mesh=dict(lay.mesh.shape), exchanges=exchanges,
                           steps_per_exchange=k, note=c.note, loop=loop)  # fmt: skip


@functools.lru_cache(maxsize=32)
def program(kernel: Kernel, layout: Layout, widths: tuple, region_key, k: int, tree=None,
            fields: tuple = ()) -> Callable:  # fmt: skip
    """The compiled program of :func:`run`: ``(block, steps, *params) -> block`` (cached per
    kernel, layout, halo, region, ``k`` and the params' structure and fields, see
    :func:`_split_params`; a new value of the params does not compile). ``widths``: the halo
    per axis, or per side (``(below, above)`` pairs)."""
    region = None if region_key is None else tuple(slice(*r) for r in region_key)
    sides = halo_sides(widths, layout.ndim)

    def loop(block, n, *leaves):  # one buffer: each group reads its own extended copy
        call = _given(leaves, tree, fields, layout, sides, k)
        group = _local_update(lambda e: call(kernel, e), layout, sides, region, k)
        single = _local_update(lambda e: call(kernel, e), layout, sides, region, 1)
        block = jax.lax.fori_loop(0, n // k, lambda i, b: group(b, i), block)
        return jax.lax.fori_loop(0, n % k, lambda i, b: single(b, i), block)

    spec = PartitionSpec(*layout.spec)
    sharded = shard_map(loop, mesh=layout.mesh, in_specs=(spec, PartitionSpec(),
                        *_param_specs(fields)), out_specs=spec)  # fmt: skip
    return jax.jit(sharded, donate_argnums=0)


# ---- params: scalars, JAX arrays and read-only fields, for run and run_until ----------------
def _split_params(params, layout: Layout):
    """``params`` as (structure, leaves, layout of each field leaf or ``None``), checked."""
    if params is None:
        return None, [], ()
    found, tree = jax.tree_util.tree_flatten_with_path(
        params, is_leaf=lambda x: isinstance(x, GlobalArray)
    )
    leaves, fields = [], []
    for path, leaf in found:
        where = f"params{jax.tree_util.keystr(path)}"
        if isinstance(leaf, GlobalArray):
            if not leaf.layout.same_grid(layout):
                raise PgasError(
                    f"{where} has shape {leaf.shape} split {leaf.layout.spec} over "
                    f"{dict(leaf.layout.mesh.shape)}; a field in params must be split like the "
                    f"state ({layout.shape} split {layout.spec}): build it on the same mesh"
                )  # fmt: skip
            leaves.append(leaf.data)
            fields.append(leaf.layout)
        elif isinstance(leaf, (jax.Array, np.ndarray, np.generic, int, float)):
            leaves.append(jnp.asarray(leaf))
            fields.append(None)
        else:
            raise PgasError(
                f"{where} is a {type(leaf).__name__}; params hold scalars, JAX arrays and "
                f"pgas.GlobalArrays (read-only fields): pass other settings by closure"
            )  # fmt: skip
    return jax.tree.structure(jax.tree.unflatten(tree, [0] * len(leaves))), leaves, tuple(fields)


def _param_specs(fields: tuple) -> tuple[PartitionSpec, ...]:
    """The ``shard_map`` spec of each params leaf: a field's split, else replicated."""
    return tuple(PartitionSpec() if lay is None else PartitionSpec(*lay.spec) for lay in fields)


def _given(leaves, tree, fields: tuple, layout: Layout, sides: Sides, k: int) -> Callable:
    """``call(fn, e, *more)``: ``fn(e, params, *more)`` (``fn(e, *more)`` without params).

    Shared by :func:`program`, :func:`until_program` and :class:`_StateStep` (``e``
    a state dict: the shape of its fields' blocks). Inside ``shard_map``, once per
    run: each field leaf is extended by the deep halo, ``k`` times ``sides`` (the sides the
    kernel reads, as the state's frame), one exchange; every call hands the kernel the part
    of it around ``e``: ``below`` cells before the block's cells and ``above`` after them,
    whatever the sub-step.
    """
    if tree is None:
        return lambda fn, e, *more: fn(e, *more)
    deep = tuple((k * lo, k * hi) for lo, hi in sides)
    numbers = _block_numbers(layout)
    ext = []
    for x, lay in zip(leaves, fields):
        if lay is not None:
            x = _extended(x, lay, deep, numbers)
            x = x.reshape(x.shape[1::2])
        ext.append(x)

    def call(fn, e, *more):
        shape = next(v.shape for v in e.values() if v.ndim) if isinstance(e, dict) else e.shape
        fitted = [x if lay is None else _fit(x, shape, sides, deep)
                  for x, lay in zip(ext, fields)]  # fmt: skip
        return fn(e, jax.tree.unflatten(tree, fitted), *more)

    return call


def _fit(ext: jax.Array, shape: tuple[int, ...], sides: Sides, deep: Sides):
    """Of a field's block extended by ``deep`` cells ``(below, above)``, the part aligned with
    a state block of ``shape``: the block with ``m`` times ``sides`` around it (a state's
    frame keeps a whole number of reaches per side)."""
    cut = []
    for n, s, (lo, hi), (d, e) in zip(ext.shape, shape, sides, deep):
        m = (s - (n - d - e)) // (lo + hi) if lo + hi else 0
        cut.append(slice(d - m * lo, d - m * lo + s))
    return ext[tuple(cut)]


def _key(layout: Layout, halo: Halo) -> tuple:
    """The halo as :func:`program` keys it: widths per axis, or per side where they differ."""
    sides = _sides(layout, halo)
    return tuple(max(p) for p in sides) if _asymmetric(sides) is None else sides


def region_key(region) -> tuple | None:
    """A hashable form of a region of slices (the cache key of :func:`program`).

    >>> region_key((slice(1, -1),))
    ((1, -1, None),)
    """
    if region is None:
        return None
    return tuple((s.start, s.stop, s.step) for s in (region if isinstance(region, tuple)
                                                      else (region,)))  # fmt: skip


def run(
    kernel: Kernel,
    u: GlobalArray | dict,
    steps: int,
    halo: Halo = 1,
    region=None,
    steps_per_exchange: int | str = "auto",
    params=None,
) -> GlobalArray | dict:
    """Run ``steps`` explicit steps as one compiled ``shard_map`` + ``fori_loop`` program.

    A state dict (conjugate gradients for a fixed number of iterations): ``u``
    may be a dict of :class:`pgas.GlobalArray` fields split alike and 0-d
    scalars, with the kernel of :func:`run_until`'s state dicts,
    ``kernel(e, reduce)`` (``kernel(e, p, reduce)`` with ``params``) returning
    a dict of the same keys; one step per exchange (``k = 1``). The new state
    dict is bitwise equal to the state of :func:`run_until` with the same
    kernel after the same number of steps (one step program serves both).

    Args:
        kernel: local kernel (see the module docstring); ``kernel(e, reduce)`` for a
            state dict (:func:`run_until`).
        u: the field (its buffer is donated; use the result), or a state dict (its
            buffers donated too).
        steps: number of steps (>= 0).
        halo: halo width per axis (an int for all), or per side: a ``(below, above)``
            pair per axis (``((1, 0),)`` for an upwind kernel ``e[1:] - c * (e[1:] -
            e[:-1])``); only the sides read are exchanged.
        region: window the kernel writes (NumPy slices in global coordinates);
            default the whole array.
        steps_per_exchange: ``k``: one exchange of a halo ``k * halo`` wide, then
            ``k`` kernel steps on the extended block; ``"auto"`` chooses
            (:func:`choose`). Every ``k`` gives the same bits.
        params: as :func:`pgas.run`'s: the kernel is called ``kernel(e, params)``.
            A pytree of scalars and JAX arrays (replicated on every device) and
            read-only :class:`pgas.GlobalArray` fields split like ``u``: a field
            is extended once per run by ``k * halo`` (one exchange, before the
            loop) and reaches the kernel as its block with the same halo as
            ``e``. All are arguments of the compiled program: a new value does
            not compile.

    Returns:
        The new field, or the new state dict (its fields ``GlobalArray``, its scalars 0-d
        arrays).

    Raises:
        PgasError: a bad ``steps`` or ``params``; for a state dict, a bad leaf, a kernel
            that returns other keys or shapes, or ``steps_per_exchange`` other than 1.

    >>> import numpy as np, pgas
    >>> mesh = pgas.make_mesh(devices=1)
    >>> u = pgas.from_numpy(np.array([0.0, 4.0, 0.0]), mesh, boundary=pgas.Keep())
    >>> run(lambda e: 0.5 * e[1:-1] + 0.25 * (e[:-2] + e[2:]), u, 2).to_numpy()
    array([0., 1., 0.])
    >>> def halve(e, reduce):                 # a field and a reduced scalar
    ...     u = 0.5 * e["u"][1:-1]
    ...     return {"u": u, "total": reduce(u, reproducible=True)}
    >>> out = run(halve, {"u": pgas.from_numpy(np.full(4, 8.0), mesh), "total": 32.0}, 3)
    >>> out["u"].to_numpy(), float(out["total"])
    (array([1., 1., 1., 1.]), 4.0)
    """
    if not isinstance(steps, jax.core.Tracer):  # a traced count (inside jax.jit) runs as given
        steps = check_steps(steps)
    if isinstance(u, dict):
        return _run_state(kernel, u, steps, halo, region, steps_per_exchange, params)
    tree, leaves, fields = _split_params(params, u.layout)
    k = choose(u, halo, steps_per_exchange).steps_per_exchange
    compiled = program(kernel, u.layout, _key(u.layout, halo), region_key(region), k, tree,
                       fields)  # fmt: skip
    return GlobalArray(_counted(compiled, u.data, steps, *leaves), u.layout)


def _counted(compiled: Callable, data, steps, *leaves):
    """``compiled(data, steps, *leaves)`` with an int32 trip count: a Python int ``steps`` past
    ``2**31 - 1`` runs in pieces (:func:`pgas.loop.counts.pieces`, the same bits); a traced
    one as it is."""
    if isinstance(steps, jax.core.Tracer):
        return compiled(data, steps, *leaves)
    for piece in counts.pieces(steps):
        data = compiled(data, jnp.int32(piece), *leaves)
    return data


# ---- run_until: iterate to convergence -----------------------------------------------------
_IDENTITY = {"sum": 0, "max": -np.inf, "min": np.inf}


def _reducer(layout: Layout, window, widths, numbers) -> Callable:
    """``reduce(values, op, reproducible=False)``: ``values`` of the block's cells reduced over
    the cells the kernel writes (region minus ``Keep`` cells, no padding) on every device: one
    all-reduce; a float sum with ``reproducible=True`` is :func:`pgas.sum`'s reproducible sum
    (the same bits as on the automatic and MPI paths), two all-reduces. A NaN gives NaN, as
    in NumPy (:func:`pgas.globalview.reduce.extreme`). ``reduce.seen`` keeps every value
    it returned (a check reads them: :func:`pgas.loop.decision.all_finite`)."""
    axes = tuple(name for name in layout.spec if name is not None)
    numbers = [b.reshape(()) for b in numbers]
    mask = layout.window_mask(window.start, window.extent, widths, block=numbers)

    def reduce(values, op: str = "sum", reproducible: bool = False):
        out = reduced(values, op, reproducible)
        reduce.seen.append(out)
        return out

    def reduced(values, op: str, reproducible: bool):
        reduce.calls += 1
        if op not in _IDENTITY:
            raise PgasError(f"op = {op!r} is not a reduction; use one of {tuple(_IDENTITY)}")
        values = jnp.asarray(values)
        blocks = values.reshape(tuple(x for n in values.shape for x in (1, n)))
        if reproducible_kind(values.dtype, reproducible, op):
            if mask is not None:
                blocks = jnp.where(mask, blocks, jnp.zeros((), values.dtype))
            return reproducible_psum(blocks, math.prod(layout.shape), axes)
        if mask is not None:
            fill = _IDENTITY[op]
            if not jnp.issubdtype(values.dtype, jnp.floating) and op != "sum":
                info = jnp.iinfo(values.dtype)
                fill = info.min if op == "max" else info.max
            blocks = jnp.where(mask, blocks, jnp.asarray(fill, values.dtype))
        local = getattr(jnp, op)(blocks)
        if op != "sum":
            return extreme(local, op, axes)
        return jax.lax.psum(local, axes) if axes else local

    reduce.calls, reduce.seen = 0, []
    return reduce


@functools.lru_cache(maxsize=32)
def until_program(kernel: Kernel, converged: Callable, layout: Layout, widths: tuple,
                  region_key, k: int, every: int, max_steps: int, tree=None,
                  fields: tuple = ()) -> Callable:  # fmt: skip
    """The compiled program of :func:`run_until`:
    ``(block, *params) -> (block, steps, done, finite)``.

    ``tree`` is the structure of ``params`` (``None``: no params) and ``fields`` the layout
    of each leaf that is a field (``None`` for a scalar); fields get their halo once. It
    stops at a check that holds or whose reductions are not finite
    (:func:`pgas.loop.decision.all_finite`); the step counter is an int32 (an int64 past
    ``2**31 - 1``, :func:`pgas.loop.counts.counter_dtype`).
    """
    region = None if region_key is None else tuple(slice(*r) for r in region_key)
    window = normalize_index(region if region is not None else (), layout.shape)

    def loop(block, *leaves):
        numbers = _block_numbers(layout)
        sides = halo_sides(widths, layout.ndim)
        call = _given(leaves, tree, fields, layout, sides, k)
        group = _local_update(lambda e: call(kernel, e), layout, sides, region, k)
        single = _local_update(lambda e: call(kernel, e), layout, sides, region, 1)
        reduce = _reducer(layout, window, widths, numbers)

        def advance(b, n: int):  # n static: whole groups of k, then single steps
            b = jax.lax.fori_loop(0, n // k, lambda i, x: group(x, i), b)
            return jax.lax.fori_loop(0, n % k, lambda i, x: single(x, i), b)

        def check(b):
            e = _extended(b, layout, widths, numbers)
            before, seen = reduce.calls, len(reduce.seen)
            out = call(_converged_of(converged), e.reshape(e.shape[1::2]), reduce)
            done = jnp.asarray(check_decision(out, reduce.calls - before), jnp.bool_)
            return done, all_finite(reduce.seen[seen:])

        return _while(advance, check, block, every, max_steps)

    spec = PartitionSpec(*layout.spec)
    sharded = shard_map(loop, mesh=layout.mesh, in_specs=(spec, *_param_specs(fields)),
                        out_specs=(spec, *(PartitionSpec(),) * 3))  # fmt: skip
    return jax.jit(sharded, donate_argnums=0)


def _converged_of(converged: Callable) -> Callable:
    """``converged`` called through :func:`pgas.loop.decision.call_converged` (Python ``if`` on
    a reduction: a PgasError saying how to write it)."""
    return lambda *args: call_converged(converged, *args)


def _while(advance: Callable, check: Callable, start, every: int, max_steps: int) -> tuple:
    """``(values, steps, done, finite)``: ``advance(values, every)`` then ``check(values) ->
    (done, finite)`` until a check holds or is not finite, or ``max_steps`` would be passed;
    the ``max_steps % every`` steps left then run, with a last check, unless it stopped."""
    count = counts.counter_dtype(max_steps, every)

    def cond(c):
        return ~c[2] & c[3] & (c[1] <= max_steps - every)

    def body(c):
        values = advance(c[0], every)
        return values, c[1] + every, *check(values)

    begin = (start, jnp.zeros((), count), jnp.zeros((), jnp.bool_), jnp.ones((), jnp.bool_))
    out = jax.lax.while_loop(cond, body, begin)
    rest = max_steps % every
    if rest:

        def tail(c):
            values = advance(c[0], rest)
            return values, c[1] + rest, *check(values)

        out = jax.lax.cond(out[2] | ~out[3], lambda c: c, tail, out)
    return out


def _until(compiled: Callable, values, leaves: list, max_steps: int, every: int) -> tuple:
    """Run ``compiled`` (an until program of ``max_steps``'s pieces, :func:`until_program`
    or :func:`state_until_program`): ``(values, steps, done, finite)``, Python values
    outside a trace; warns where it did not converge."""
    if any(isinstance(x, jax.core.Tracer) for x in (*jax.tree.leaves(values), *leaves)):
        counts.check_traced("max_steps", max_steps, "inside a trace")
        return compiled(max_steps)(values, *leaves)  # inside jax.jit: traced, no warning
    n = 0
    for size in counts.pieces(max_steps, every):  # one loop unless past 2**31 - 1 steps
        values, m, done, finite = compiled(size)(values, *leaves)
        n, done, finite = n + int(m), bool(done), bool(finite)
        if done or not finite:
            break
    if not finite:
        warn_non_finite(n, every, stacklevel=3)
    elif not done:
        warn_not_converged(max_steps, every, stacklevel=3)
    return values, n, done, finite


def run_until(
    kernel: Kernel,
    u: GlobalArray,
    converged: Callable,
    max_steps: int,
    *,
    halo: int | Sequence[int] = 1,
    region=None,
    check_every: int | str = "auto",
    steps_per_exchange: int | str = "auto",
    params=None,
):
    """Run the local ``kernel`` until ``converged`` holds: one ``shard_map`` + ``while_loop``.

    The explicit twin of :func:`pgas.run_until`: every ``check_every`` steps
    (deep halos between checks, as :func:`run`) the halo of ``u`` is exchanged
    once (``halo`` wide) and ``converged(e, reduce)`` runs on every device,
    ``e`` the block with its halo; ``reduce(values, op="sum")`` reduces
    ``values`` of the block's own cells (``e[1:-1]`` for halo 1) over the
    cells the kernel writes (``region`` minus ``Keep`` cells, no padding) on
    all devices, one all-reduce (``psum``/``pmax``/``pmin``) per call. The loop
    stops at the first check that holds, or after ``max_steps`` steps: the
    same ``steps_taken`` as :func:`pgas.run_until` with the same
    ``check_every``, and the field bitwise equal to ``run(kernel, u,
    steps_taken)``. The reductions are not bitwise equal across backends or
    decompositions (another order of the sum): they only decide when to stop,
    unless they are ``reduce(..., reproducible=True)`` (the same bits everywhere).

    A state dict (conjugate gradients): ``u`` may be a dict of
    :class:`pgas.GlobalArray` fields split alike and 0-d scalars. Its kernel
    reduces inside the step, ``kernel(e, reduce)`` (``kernel(e, p, reduce)``
    with ``params``), ``e`` the dict of each field's block with its halo and
    each scalar, and returns a dict of the same keys: each field's new cells
    and each new scalar (``alpha = e['rr'] / reduce(p * ap,
    reproducible=True)``). A reduction inside a step needs every cell up to
    date, so a state dict runs one step per exchange (``k = 1``, as on the
    automatic path) and ``check_every="auto"`` is 1; ``converged(e, reduce)``
    gets the same dict and may read a scalar the step reduced (``e['rr'] <
    tol``) without reducing again. ``reduce`` covers the cells the first field
    writes. :func:`run` takes the same state dict for a fixed number of steps.

    Args:
        kernel: local kernel (module docstring); ``kernel(e, p)`` with ``params``;
            ``kernel(e, reduce)`` (``kernel(e, p, reduce)``) for a state dict.
        u: the field (its buffer is donated; use the result), or a state dict.
        converged: ``converged(e, reduce) -> bool`` (``converged(e, p, reduce)``
            with ``params``), written with operators NumPy and ``jax.numpy``
            share, so that :func:`pgas.mpi.run_until` runs the same function.
        max_steps: the most steps to run (>= 1, up to ``2**63 - 1``, as
            :func:`pgas.run_until`: past ``2**31 - 1`` in several loops).
        halo: halo width per axis (an int for all).
        region: window the kernel writes (NumPy slices in global coordinates).
        check_every: steps between checks (>= 1, a multiple of an int
            ``steps_per_exchange``) or ``"auto"``
            (:func:`pgas.loop.until.choose_check_every`).
        steps_per_exchange: ``k`` or ``"auto"``; with ``"auto"`` lowered to
            divide ``check_every``.
        params: a pytree of scalars, JAX arrays and read-only
            :class:`pgas.GlobalArray` fields split like ``u``; a field reaches
            the kernel and ``converged`` as its block with the same halo as
            ``e`` (exchanged once, before the loop).

    Returns:
        A :class:`pgas.Until` ``(field, steps_taken)`` with ``.converged``,
        ``.check_every``, ``.plan`` and ``.note``.

    Raises:
        PgasError: a bad ``max_steps``, ``check_every`` or ``params``; a
            ``converged`` that does not reduce or returns more than one value.

    Warns:
        NonConvergenceWarning: ``max_steps`` was reached before ``converged`` held
            (inside ``jax.jit``, where ``steps_taken`` and ``converged`` are
            traced, it cannot warn).
        NonFiniteWarning: the loop stopped at a check where a value ``reduce``
            returned there (or a float scalar of a state dict) was NaN or
            infinite, as :func:`pgas.run_until` stops (``.finite`` is ``False``).

    >>> import numpy as np, pgas
    >>> u = pgas.from_numpy(np.array([0.0, 8.0, 0.0, 0.0]), pgas.make_mesh(devices=1),
    ...                     boundary=pgas.Keep())
    >>> out = run_until(lambda e: 0.5 * (e[:-2] + e[2:]), u,
    ...                 lambda e, reduce: reduce(abs(e[1:-1]), "max") < 1.0, 100, check_every=2)
    >>> out.steps_taken, out.state.to_numpy()
    (4, array([0. , 0.5, 0. , 0. ]))
    >>> def halve(e, reduce):                 # a field and a reduced scalar
    ...     u = 0.5 * e["u"][1:-1]
    ...     return {"u": u, "total": reduce(u, reproducible=True)}
    >>> state = {"u": pgas.from_numpy(np.full(4, 8.0), pgas.make_mesh(devices=1)), "total": 32.0}
    >>> out = run_until(halve, state, lambda e, reduce: e["total"] < 4, 100)
    >>> out.steps_taken, float(out.state["total"])
    (4, 2.0)
    """
    check_args(max_steps, check_every, steps_per_exchange)
    if isinstance(u, dict):
        return _run_until_state(kernel, u, converged, int(max_steps), halo, region, check_every,
                                steps_per_exchange, params)  # fmt: skip
    widths = _widths(u.layout, halo)
    tree, leaves, fields = _split_params(params, u.layout)
    k = choose(u, halo, steps_per_exchange).steps_per_exchange
    every, note = choose_check_every(check_every, k, False)
    how = plan(u, halo, math.gcd(every, k))
    counts.check_traced("check_every", every, "(the steps between two checks)")

    def compiled(steps: int) -> Callable:
        return until_program(kernel, SameCode(converged), u.layout, widths, region_key(region),
                             how.steps_per_exchange, every, steps, tree, fields)  # fmt: skip

    block, n, done, finite = _until(compiled, u.data, leaves, int(max_steps), every)
    return Until(GlobalArray(block, u.layout), n, done, every, how, note, finite)


# ---- multi-field states: dicts of fields and scalars, reductions inside the step ------------
def _split_state(state: dict) -> tuple[tuple, tuple, list, Layout]:
    """A state dict as (keys, layout of each field or ``None`` for a scalar, leaves, the first
    field's layout), checked: fields split alike, scalars 0-d."""
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
    ``params`` as in :func:`until_program`.
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
        self.numbers = _block_numbers(first)
        self.call = _given(leaves, tree, fields, first, self.sides, 1)
        self.reduce = _reducer(first, self.window, self.widths, self.numbers)

    def _blocks(self, values) -> dict:
        """Each field in blocks form with its halo (``sides``)."""
        return {k: v if lay is None else _extended(v, lay, self.sides, self.numbers)
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
            merged = _merge(blocks[k], new[k], lay, self.window, self.widths, self.sides,
                            self.zero, self.numbers, None)  # fmt: skip
            out.append(merged.reshape(v.shape))
        return tuple(out)


@functools.lru_cache(maxsize=32)
def state_program(kernel: Callable, keys: tuple, layouts: tuple, widths: tuple, region_key,
                  tree=None, fields: tuple = ()) -> Callable:  # fmt: skip
    """The compiled program of :func:`run` on a state dict:
    ``(state leaves, steps, *params) -> state leaves``, one step per exchange.

    Arguments as :func:`state_until_program`'s.
    """

    def loop(state, n, *leaves):
        step = _StateStep(kernel, keys, layouts, widths, region_key, leaves, tree, fields)
        return jax.lax.fori_loop(0, n, lambda i, x: step(x), tuple(state))

    specs = _param_specs(layouts)  # a field's split, a scalar replicated: as for params
    mesh = next(lay for lay in layouts if lay is not None).mesh
    sharded = shard_map(loop, mesh=mesh, in_specs=(specs, PartitionSpec(), *_param_specs(fields)),
                        out_specs=specs)  # fmt: skip
    return jax.jit(sharded, donate_argnums=0)


@functools.lru_cache(maxsize=32)
def state_until_program(kernel: Callable, converged: Callable, keys: tuple, layouts: tuple,
                        widths: tuple, region_key, every: int, max_steps: int, tree=None,
                        fields: tuple = ()) -> Callable:  # fmt: skip
    """The compiled program of :func:`run_until` on a state dict:
    ``(state leaves, *params) -> (state leaves, steps, done, finite)``, one step per exchange.

    ``layouts`` holds each state key's layout (``None``: a 0-d scalar, replicated);
    ``tree`` and ``fields`` describe ``params`` as in :func:`until_program`. A check is not
    finite where a value it reduced or a float scalar of the state is NaN or infinite.
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
            out = step.call(_converged_of(converged), view, reduce)
            done = jnp.asarray(check_decision(out, reduce.calls - before, scalars), jnp.bool_)
            return done, all_finite(reduce.seen[seen:], view)

        return _while(advance, check, tuple(state), every, max_steps)

    specs = _param_specs(layouts)
    mesh = next(lay for lay in layouts if lay is not None).mesh
    sharded = shard_map(loop, mesh=mesh, in_specs=(specs, *_param_specs(fields)),
                        out_specs=(specs, *(PartitionSpec(),) * 3))  # fmt: skip
    return jax.jit(sharded, donate_argnums=0)


def _state_of(keys: tuple, layouts: tuple, leaves) -> dict:
    """The state dict of a state program's leaves."""
    return {k: GlobalArray(v, lay) if lay is not None else v
            for k, v, lay in zip(keys, leaves, layouts)}  # fmt: skip


def _run_state(kernel, state: dict, steps, halo, region, steps_per_exchange, params) -> dict:
    """:func:`run` on a state dict of fields and scalars (one step per exchange)."""
    check_state_steps(steps_per_exchange)
    keys, layouts, values, first = _split_state(state)
    tree, leaves, fields = _split_params(params, first)
    compiled = state_program(kernel, keys, layouts, _key(first, halo), region_key(region), tree,
                             fields)  # fmt: skip
    return _state_of(keys, layouts, _counted(compiled, tuple(values), steps, *leaves))


def _run_until_state(kernel, state: dict, converged, max_steps: int, halo, region, check_every,
                     steps_per_exchange, params) -> Until:  # fmt: skip
    """:func:`run_until` on a state dict of fields and scalars (one step per exchange)."""
    check_state_steps(steps_per_exchange)
    keys, layouts, values, first = _split_state(state)
    tree, leaves, fields = _split_params(params, first)
    every, note = choose_check_every(check_every, 1, True)
    how = plan(GlobalArray(values[layouts.index(first)], first), halo, 1)

    def compiled(steps: int) -> Callable:
        return state_until_program(kernel, SameCode(converged), keys, layouts,
                                   _key(first, halo), region_key(region), every, steps, tree,
                                   fields)  # fmt: skip

    out, n, done, finite = _until(compiled, tuple(values), leaves, max_steps, every)
    return Until(_state_of(keys, layouts, out), n, done, every, how, note, finite)
