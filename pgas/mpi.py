"""The explicit MPI path: NumPy blocks, ``Sendrecv`` halo exchange, mpi4py.

This is the reference every other backend is checked against, written the way
MPI stencil codes are written today (ImplicitGlobalGrid.jl's ``update_halo!``
is the model). Run a script that uses it with ``mpiexec -n P python script.py``.

Contract:

- Decomposition: the same as the JAX side. Array axis ``i`` is Cartesian
  dimension ``i``; ``dims`` defaults to :func:`pgas.decomposition.dims_create`;
  ranks are numbered row-major (``reorder=False``). The rank at coordinate
  ``c`` on axis ``i`` holds ``BlockAxis(N_i, dims[i]).length(c)`` cells from
  global index ``offset(c)``: no padding, no rank ever holds the global array
  (except the root of :func:`gather`, for output).
- Halo: a local block is stored with ``halo[i]`` ghost cells on both faces of
  axis ``i``. :func:`exchange_halo` fills them in place, axis by axis (later
  axes send slabs that include the filled halos of earlier axes, so edges
  and corners are right for 9- and 27-point stencils). At a non-periodic
  domain edge the ghost cells come from the boundary condition (Dirichlet:
  the value; Neumann and Keep: the mirror, ghost ``-1-j`` = cell ``j``).
- Update region (the same on every backend): cell ``g`` takes the kernel's
  value only if ``g`` lies in ``region`` and, on a ``Keep()`` face, ``g`` is
  not among the outermost ``halo`` cells of that face.
- Results are bitwise identical to a single-process NumPy loop of the same
  arithmetic, for any rank count.
- An exception on any rank of a multi-rank run ends the whole job
  (:func:`abort_on_error`); nothing is left hanging in a collective.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import os
import sys
import traceback
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np

try:
    from mpi4py import MPI
except ImportError as _err:  # pragma: no cover - exercised in a subprocess test
    raise ImportError(
        f"pgas.mpi needs mpi4py and an MPI library ({_err}); install both with "
        f"`pip install mpi4py mpich`"
    ) from _err

from pgas.boundary import Dirichlet, Keep, Periodic, normalize_boundary
from pgas.decomposition import BlockAxis, dims_create
from pgas.errors import (
    DeviceCountError,
    HaloError,
    IndexingError,
    LayoutError,
    PgasError,
    ShapeMismatchError,
)

__all__ = [
    "CartGrid",
    "MessageCounter",
    "RunResult",
    "abort_on_error",
    "allreduce",
    "cart_grid",
    "exchange_halo",
    "gather",
    "launched",
    "local_coordinates",
    "require_launcher",
    "run",
]

_LAUNCHER_ENV = ("PMI_RANK", "PMI_SIZE", "OMPI_COMM_WORLD_SIZE", "PMIX_RANK")


@dataclasses.dataclass(frozen=True, eq=False)
class CartGrid:
    """A global grid cut into one block per rank of a Cartesian communicator.

    Attributes:
        comm: the ``MPI.Cartcomm`` (one Cartesian dimension per array axis).
        global_shape: cells of the whole field per axis.
        dims: ranks per axis.
        periods: whether each axis wraps around.
        coords: this rank's Cartesian coordinates.
        axes: the block distribution of each axis.
        neighbours: ``(low, high)`` rank per axis; ``MPI.PROC_NULL`` beyond a
            non-periodic edge.
    """

    comm: Any
    global_shape: tuple[int, ...]
    dims: tuple[int, ...]
    periods: tuple[bool, ...]
    coords: tuple[int, ...]
    axes: tuple[BlockAxis, ...]
    neighbours: tuple[tuple[int, int], ...]

    @property
    def rank(self) -> int:
        """This rank in :attr:`comm`."""
        return self.comm.rank

    @property
    def size(self) -> int:
        """Number of ranks."""
        return self.comm.size

    @property
    def ndim(self) -> int:
        """Number of axes."""
        return len(self.global_shape)

    def block(self, coords: Sequence[int] | None = None) -> tuple[slice, ...]:
        """Global slices of the block at ``coords`` (default: this rank's)."""
        coords = self.coords if coords is None else coords
        return tuple(
            slice(ax.offset(c), ax.offset(c) + ax.length(c))
            for ax, c in zip(self.axes, coords, strict=True)
        )

    @property
    def local_shape(self) -> tuple[int, ...]:
        """Cells this rank holds per axis (without halo)."""
        return tuple(ax.length(c) for ax, c in zip(self.axes, self.coords, strict=True))

    def describe(self) -> str:
        """One line: global shape, rank layout and block lengths."""
        return (
            f"global {self.global_shape} over {self.size} rank(s): dims {self.dims}, "
            f"periodic {self.periods}, block lengths {tuple(a.lengths for a in self.axes)}"
        )


def cart_grid(
    global_shape: Sequence[int],
    dims: Sequence[int] | None = None,
    periods: bool | Sequence[bool] = False,
    comm: Any = None,
) -> CartGrid:
    """Build the Cartesian communicator and block layout for a global grid.

    Collective over ``comm``.

    Args:
        global_shape: cells per axis of the global field.
        dims: ranks per axis (1 for an axis that is not split); default
            ``dims_create(comm.size, len(global_shape))``.
        periods: one flag for all axes or one per axis (``True`` = wraps).
        comm: the communicator to split (default ``MPI.COMM_WORLD``).

    Returns:
        The :class:`CartGrid` of this rank.

    Raises:
        DeviceCountError: if ``prod(dims)`` differs from the number of ranks.
        LayoutError: on a wrong ``dims``/``periods`` length or an axis with
            fewer cells than ranks.

    >>> grid = cart_grid((1001,))          # doctest: +SKIP
    >>> grid.local_shape                    # rank 0 of 4  # doctest: +SKIP
    (251,)
    """
    comm = MPI.COMM_WORLD if comm is None else comm
    shape = tuple(int(n) for n in global_shape)
    ndim = len(shape)
    if ndim < 1 or any(n < 1 for n in shape):
        raise LayoutError(f"global_shape = {shape}: give at least one axis, each >= 1 cell")
    dims = dims_create(comm.size, ndim) if dims is None else tuple(int(d) for d in dims)
    if len(dims) != ndim or any(d < 1 for d in dims):
        raise LayoutError(
            f"dims = {dims} for a {ndim}-D grid: give {ndim} positive integers "
            f"(1 for an axis that is not split)"
        )
    if math.prod(dims) != comm.size:
        raise DeviceCountError(
            f"dims = {dims} asks for {math.prod(dims)} ranks but the communicator has "
            f"{comm.size}; launch with `mpiexec -n {math.prod(dims)}` or pass dims whose "
            f"product is {comm.size} (or dims=None)"
        )
    periods = (
        (bool(periods),) * ndim
        if isinstance(periods, (bool, np.bool_))
        else tuple(bool(p) for p in periods)
    )
    if len(periods) != ndim:
        raise LayoutError(f"periods = {periods} for a {ndim}-D grid: give one flag or {ndim}")
    for i, (n, d) in enumerate(zip(shape, dims, strict=True)):
        if n < d:
            raise LayoutError(
                f"global_shape[{i}] = {n} cells cannot be split over dims[{i}] = {d} ranks; "
                f"use fewer ranks on axis {i} (dims=...) or a larger grid"
            )
    cart = comm.Create_cart(dims, periods=periods, reorder=False)
    return CartGrid(
        comm=cart,
        global_shape=shape,
        dims=dims,
        periods=periods,
        coords=tuple(cart.Get_coords(cart.rank)),
        axes=tuple(BlockAxis(n, d) for n, d in zip(shape, dims, strict=True)),
        neighbours=tuple(tuple(cart.Shift(i, 1)) for i in range(ndim)),
    )


def local_coordinates(grid: CartGrid) -> tuple[np.ndarray, ...]:
    """Global indices of this rank's cells, one 1-D array per axis.

    Build the initial field from them with
    ``np.meshgrid(*local_coordinates(grid), indexing="ij")``.
    """
    return tuple(np.arange(s.start, s.stop) for s in grid.block())


@dataclasses.dataclass
class MessageCounter:
    """Messages and bytes this rank has sent (self-copies are not messages)."""

    messages: int = 0
    bytes: int = 0


def _halo_tuple(halo: int | Sequence[int], ndim: int) -> tuple[int, ...]:
    h = (int(halo),) * ndim if isinstance(halo, (int, np.integer)) else tuple(int(x) for x in halo)
    if len(h) != ndim or any(x < 0 for x in h):
        raise HaloError(f"halo = {halo!r} for a {ndim}-D grid: give one width >= 0 or {ndim}")
    return h


def _check_halo(grid: CartGrid, halo: tuple[int, ...]) -> None:
    for i, (h, ax) in enumerate(zip(halo, grid.axes, strict=True)):
        if h > ax.min_length:
            raise HaloError(
                f"halo[{i}] = {h} is wider than the smallest block on axis {i} "
                f"({ax.min_length} cells of {ax.size} over {ax.parts} rank(s)); use fewer "
                f"ranks on axis {i} (dims=...), a larger grid, or a narrower stencil"
            )


def exchange_halo(
    ext: np.ndarray,
    grid: CartGrid,
    halo: int | Sequence[int],
    boundary: object,
    counter: MessageCounter | None = None,
) -> None:
    """Fill the ghost cells of a local block in place.

    Axis by axis: ``Sendrecv`` of contiguous copies with the two neighbours
    (tag ``2*axis`` for data moving up, ``2*axis + 1`` moving down), a local
    copy on a periodic axis with one rank, the boundary condition at a
    non-periodic domain edge.

    Args:
        ext: the block with halo, shape ``local_shape[i] + 2*halo[i]``.
        grid: the layout.
        halo: ghost width, one for all axes or one per axis.
        boundary: as accepted by :func:`pgas.boundary.normalize_boundary`;
            periodic axes must match ``grid.periods``.
        counter: if given, incremented with the messages and bytes sent.

    Raises:
        HaloError: a halo wider than the smallest block of its axis.
        LayoutError: a periodic boundary on an axis the grid does not wrap
            (or the reverse).
        ShapeMismatchError: ``ext`` of the wrong shape.
    """
    halo, faces = _checked(ext.shape, grid, halo, boundary)
    _exchange(ext, grid, halo, faces, counter)


def _checked(shape, grid: CartGrid, halo, boundary):
    """Validate an exchange once; return the halo tuple and the normalized faces."""
    halo = _halo_tuple(halo, grid.ndim)
    faces = normalize_boundary(boundary, grid.ndim)
    want = tuple(n + 2 * h for n, h in zip(grid.local_shape, halo, strict=True))
    if tuple(shape) != want:
        raise ShapeMismatchError(
            f"ext.shape = {tuple(shape)}, but a block of {grid.local_shape} cells with halo "
            f"{halo} needs {want}; allocate local_shape + 2*halo per axis"
        )
    _check_halo(grid, halo)
    for a, (lo, _) in enumerate(faces):
        if isinstance(lo, Periodic) != grid.periods[a]:
            raise LayoutError(
                f"boundary on axis {a} is {lo!r} but the grid has periods[{a}] = "
                f"{grid.periods[a]}; build the grid with cart_grid(..., periods="
                f"{tuple(isinstance(f[0], Periodic) for f in faces)})"
            )
    return halo, faces


def _exchange(ext, grid, halo, faces, counter) -> None:
    for a, h in enumerate(halo):
        if h:
            _exchange_axis(ext, grid, a, halo, faces[a], counter)


_NOTHING = np.empty(0, np.uint8)


def _exchange_axis(ext, grid, a, halo, faces, counter) -> None:
    h, n = halo[a], grid.local_shape[a]
    # Earlier axes: full extent (their halos are filled); later axes: interior only.
    rest = [
        slice(None) if b < a else slice(halo[b], halo[b] + grid.local_shape[b])
        for b in range(grid.ndim)
    ]

    def sl(start: int, stop: int) -> tuple[slice, ...]:
        rest[a] = slice(start, stop)
        return tuple(rest)

    low_ghost, high_ghost = sl(0, h), sl(h + n, 2 * h + n)
    low_cells, high_cells = sl(h, 2 * h), sl(n, n + h)
    if grid.periods[a] and grid.dims[a] == 1:
        ext[low_ghost] = ext[high_cells]
        ext[high_ghost] = ext[low_cells]
        return
    down, up = grid.neighbours[a]
    for src_cells, ghost, dest, source, tag in (
        (high_cells, low_ghost, up, down, 2 * a),
        (low_cells, high_ghost, down, up, 2 * a + 1),
    ):
        if dest == source == MPI.PROC_NULL:
            continue
        send = _NOTHING if dest == MPI.PROC_NULL else np.ascontiguousarray(ext[src_cells])
        target = ext[ghost]
        recv = target if target.flags.c_contiguous else np.empty(target.shape, ext.dtype)
        grid.comm.Sendrecv([send, MPI.BYTE], dest, tag, [recv, MPI.BYTE], source, tag)
        if dest != MPI.PROC_NULL and counter is not None:
            counter.messages += 1
            counter.bytes += send.nbytes
        if source != MPI.PROC_NULL and recv is not target:
            ext[ghost] = recv
    if down == MPI.PROC_NULL:
        _fill_edge(ext, low_ghost, low_cells, faces[0], a)
    if up == MPI.PROC_NULL:
        _fill_edge(ext, high_ghost, high_cells, faces[1], a)


def _fill_edge(ext, ghost, cells, bc, axis) -> None:
    if isinstance(bc, Dirichlet):
        ext[ghost] = bc.value
    else:  # Neumann and Keep: ghost -1-j mirrors cell j
        ext[ghost] = np.flip(ext[cells], axis=axis)


_OPS = {"sum": MPI.SUM, "min": MPI.MIN, "max": MPI.MAX}


def allreduce(value: Any, op: str = "sum", grid: CartGrid | None = None) -> Any:
    """Reduce a scalar over all ranks; every rank gets the same result.

    Args:
        value: a Python or NumPy scalar.
        op: ``"sum"``, ``"min"`` or ``"max"``.
        grid: whose communicator to use (default ``MPI.COMM_WORLD``).

    Returns:
        A NumPy scalar of ``value``'s type.

    >>> allreduce(2.0, "max")   # one rank
    np.float64(2.0)
    """
    if op not in _OPS:
        raise PgasError(f"op = {op!r} is not a reduction; use one of {tuple(_OPS)}")
    comm = MPI.COMM_WORLD if grid is None else grid.comm
    return comm.allreduce(np.asarray(value)[()], op=_OPS[op])


def gather(block: np.ndarray, grid: CartGrid, root: int = 0) -> np.ndarray | None:
    """Assemble the global array on ``root`` (for output only).

    Args:
        block: this rank's cells, shape ``grid.local_shape`` (no halo).
        grid: the layout.
        root: the rank that receives the result.

    Returns:
        The global array on ``root``, ``None`` on every other rank.
    """
    if block.shape != grid.local_shape:
        raise ShapeMismatchError(
            f"block.shape = {block.shape} on rank {grid.rank}, expected {grid.local_shape}; "
            f"pass the cells without halo, e.g. ext[1:-1]"
        )
    send = np.ascontiguousarray(block)
    if grid.rank != root:
        grid.comm.Gatherv([send, MPI.BYTE], None, root=root)
        return None
    blocks = [grid.block(grid.comm.Get_coords(r)) for r in range(grid.size)]
    counts = [math.prod(s.stop - s.start for s in b) * send.itemsize for b in blocks]
    displs = np.concatenate([[0], np.cumsum(counts)[:-1]]).tolist()
    buf = np.empty(sum(counts), np.uint8)
    grid.comm.Gatherv([send, MPI.BYTE], [buf, counts, displs, MPI.BYTE], root=root)
    out = np.empty(grid.global_shape, send.dtype)
    for b, c, d in zip(blocks, counts, displs, strict=True):
        out[b] = buf[d : d + c].view(send.dtype).reshape([s.stop - s.start for s in b])
    return out


@contextlib.contextmanager
def abort_on_error() -> Iterator[None]:
    """End every rank when one raises (context manager or decorator).

    With more than one rank, an exception prints ``rank R of P`` and the
    traceback to stderr and calls ``COMM_WORLD.Abort(1)``, so ``mpiexec``
    returns within seconds instead of hanging in the next collective. With one
    rank the exception propagates normally.

    >>> with abort_on_error():
    ...     pass
    """
    try:
        yield
    except Exception:
        world = MPI.COMM_WORLD
        if world.size == 1:
            raise
        sys.stderr.write(
            f"pgas.mpi: rank {world.rank} of {world.size} failed, aborting "
            f"all ranks:\n{traceback.format_exc()}"
        )
        sys.stderr.flush()
        world.Abort(1)


def launched() -> bool:
    """Whether this process was started by an MPI launcher (``mpiexec``/``srun``).

    True when ``COMM_WORLD`` has more than one rank or a launcher's environment
    variable (``PMI_RANK``, ``OMPI_COMM_WORLD_SIZE``, ...) is set; a plain
    ``python script.py`` gives False.

    >>> isinstance(launched(), bool)
    True
    """
    return MPI.COMM_WORLD.size > 1 or any(k in os.environ for k in _LAUNCHER_ENV)


def require_launcher(expected_ranks: int) -> None:
    """Fail early, saying how to launch, unless ``COMM_WORLD`` has ``expected_ranks``.

    Raises:
        DeviceCountError: started without ``mpiexec``, with another rank count,
            or with the ``mpiexec`` of another MPI library.
    """
    size = MPI.COMM_WORLD.size
    if size == expected_ranks:
        return
    script = " ".join(sys.argv) if sys.argv and sys.argv[0] else "script.py"
    how = f"`mpiexec -n {expected_ranks} python {script}`"
    env = [k for k in _LAUNCHER_ENV if k in os.environ]
    if size == 1 and not env:
        raise DeviceCountError(
            f"expected_ranks = {expected_ranks}, but this process was started without an MPI "
            f"launcher (COMM_WORLD has 1 rank); launch it with {how}"
        )
    if size == 1 and expected_ranks > 1:
        raise DeviceCountError(
            f"expected_ranks = {expected_ranks}, but COMM_WORLD has 1 rank although a launcher "
            f"set {env[0]}: that mpiexec belongs to another MPI library than mpi4py's "
            f"({MPI.Get_library_version().splitlines()[0].strip()}); launch with "
            f"{os.path.join(os.path.dirname(sys.executable), 'mpiexec')} -n {expected_ranks}"
        )
    raise DeviceCountError(
        f"expected_ranks = {expected_ranks}, but COMM_WORLD has {size} ranks; launch with {how}"
    )


@dataclasses.dataclass(frozen=True)
class RunResult:
    """What :func:`run` returns.

    Attributes:
        field: the final global field on rank 0, ``None`` elsewhere.
        seconds: wall time of the time loop (between barriers; no set-up, no gather).
        steps: time steps run.
        messages_per_step: messages sent per step, summed over ranks.
        bytes_per_step: bytes sent per step, summed over ranks.
        rank_messages_per_step: messages sent per step by each rank.
        rank_bytes_per_step: bytes sent per step by each rank.
        grid: description of the layout (:meth:`CartGrid.describe`).
        dims: ranks per axis.
        snapshots: with ``snapshot_every=k``, the global field at steps
            ``0, k, 2k, ..., steps`` stacked on a leading axis, on rank 0 only
            (``None`` elsewhere and without ``snapshot_every``).
        snapshot_steps: the step number of each snapshot (every rank).
    """

    field: np.ndarray | None
    seconds: float
    steps: int
    messages_per_step: int
    bytes_per_step: int
    rank_messages_per_step: tuple[int, ...]
    rank_bytes_per_step: tuple[int, ...]
    grid: str
    dims: tuple[int, ...]
    snapshots: np.ndarray | None = dataclasses.field(default=None, repr=False)
    snapshot_steps: tuple[int, ...] = ()


def _update_box(grid: CartGrid, halo, faces, region) -> tuple[slice, ...]:
    """Local slices of the cells this rank updates (a box: region ∩ not-Keep-cells)."""
    if region is None:
        region = (slice(None),) * grid.ndim
    elif isinstance(region, slice):
        region = (region,)
    if not isinstance(region, tuple) or len(region) != grid.ndim:
        raise IndexingError(
            f"region = {region!r}: give a tuple of {grid.ndim} slices, "
            f"e.g. {(slice(1, -1),) * grid.ndim}"
        )
    box = []
    for a, (s, ax, c) in enumerate(zip(region, grid.axes, grid.coords, strict=True)):
        if not isinstance(s, slice) or s.step not in (None, 1):
            raise IndexingError(
                f"region[{a}] = {s!r}: each entry must be a slice with unit "
                f"step; write slice(i, i + 1) for a single index"
            )
        lo, hi, _ = s.indices(ax.size)
        if isinstance(faces[a][0], Keep):
            lo = max(lo, halo[a])
        if isinstance(faces[a][1], Keep):
            hi = min(hi, ax.size - halo[a])
        first = min(max(lo - ax.offset(c), 0), ax.length(c))
        box.append(slice(first, max(first, min(hi - ax.offset(c), ax.length(c)))))
    return tuple(box)


def run(
    kernel: Callable[[np.ndarray], Any],
    init: Callable[..., Any],
    global_shape: Sequence[int],
    dtype: Any,
    steps: int,
    halo: int | Sequence[int],
    boundary: object,
    region: tuple[slice, ...] | slice | None = None,
    grid: CartGrid | None = None,
    dims: Sequence[int] | None = None,
    *,
    snapshot_every: int | None = None,
    chunk: int | None = None,
    callback: Callable[[int, np.ndarray], None] | None = None,
) -> RunResult:
    """Run an explicit stencil time loop over all ranks and gather the result.

    Each step: :func:`exchange_halo`, ``new = kernel(ext)``, then the cells of
    the update region take ``new``. Collective over ``COMM_WORLD`` (or
    ``grid.comm``); an exception on any rank aborts all of them.

    Args:
        kernel: ``kernel(ext) -> new``: the block with halo in, the new values of
            all local cells out (shape ``local_shape``), written with operators
            that work on NumPy and jax.numpy arrays.
        init: ``init(*global_index_arrays) -> values`` for this rank's cells.
        global_shape: cells per axis.
        dtype: the field's dtype.
        steps: number of time steps.
        halo: ghost width, one or one per axis.
        boundary: as accepted by :func:`pgas.boundary.normalize_boundary`.
        region: global slices (unit step, negative indices allowed) of the
            cells that are updated; ``None`` = all.
        grid: a layout from :func:`cart_grid`; default built from ``dims`` and
            the periodic axes of ``boundary``.
        dims: ranks per axis when ``grid`` is not given.
        snapshot_every: gather the field to rank 0 at step 0 and after every
            that many steps (must divide ``steps``); see
            :attr:`RunResult.snapshots`. Rank 0 holds all snapshots.
        chunk: call ``callback`` after every that many steps (a multiple of
            ``snapshot_every`` if both are given); default: ``snapshot_every``,
            else only at the end.
        callback: ``callback(steps_done, block)`` on every rank between
            chunks, with this rank's cells (no halo; do not modify them), e.g.
            for a progress bar on rank 0. Never called per step unless
            ``chunk=1``.

    Snapshot gathers and callbacks are not counted in ``seconds``.

    Returns:
        A :class:`RunResult`; its ``field`` (and ``snapshots``) are set on rank 0 only.

    >>> heat = lambda e: 0.5 * e[1:-1] + 0.25 * (e[:-2] + e[2:])
    >>> r = run(heat, lambda x: (x == 5) * 1.0, (11,), "float64", 1, 1, Keep())
    >>> r.field[4:7]
    array([0.25, 0.5 , 0.25])
    """
    with abort_on_error():
        faces = normalize_boundary(boundary, len(global_shape))
        if grid is None:
            grid = cart_grid(global_shape, dims, tuple(isinstance(f[0], Periodic) for f in faces))
        elif tuple(global_shape) != grid.global_shape:
            raise ShapeMismatchError(
                f"global_shape = {tuple(global_shape)} but grid has "
                f"{grid.global_shape}; pass the grid built for this shape"
            )
        halo = _halo_tuple(halo, grid.ndim)
        pairs = list(zip(grid.local_shape, halo, strict=True))
        ext = np.zeros([n + 2 * h for n, h in pairs], np.dtype(dtype))
        core = ext[tuple(slice(h, h + n) for n, h in pairs)]
        halo, faces = _checked(ext.shape, grid, halo, faces)
        if int(steps) != steps or steps < 0:
            raise PgasError(f"steps = {steps!r}: give a whole number >= 0")
        every, chunk = _check_chunks(int(steps), snapshot_every, chunk)
        box = _update_box(grid, halo, faces, region)
        full = all(s.stop - s.start == n for s, (n, _) in zip(box, pairs, strict=True))
        values = init(*np.meshgrid(*local_coordinates(grid), indexing="ij"))
        try:
            core[...] = values
        except ValueError as err:
            raise ShapeMismatchError(
                f"init returned shape {np.shape(values)} for a block of {grid.local_shape}: "
                f"compute it elementwise from the index arrays it receives ({err})"
            ) from None
        counter = MessageCounter()
        snaps = [gather(core, grid)] if every else []
        outside = 0.0  # seconds spent in gathers and callbacks
        grid.comm.Barrier()
        start = MPI.Wtime()
        for step in range(int(steps)):
            _exchange(ext, grid, halo, faces, counter)
            new = np.asarray(kernel(ext))
            if step == 0 and new.shape != grid.local_shape:
                raise ShapeMismatchError(
                    f"kernel returned shape {new.shape} on rank {grid.rank} for a block of "
                    f"{grid.local_shape} cells with halo {halo}; return the new values of the "
                    f"local cells only, e.g. 0.5*e[1:-1] + 0.25*(e[:-2] + e[2:])"
                )
            if full:
                core[...] = new
            else:
                core[box] = new[box]
            done = step + 1
            if (every and done % every == 0) or (callback and chunk and done % chunk == 0):
                t0 = MPI.Wtime()
                if every and done % every == 0:
                    snaps.append(gather(core, grid))
                if callback is not None and chunk and done % chunk == 0:
                    callback(done, core)
                outside += MPI.Wtime() - t0
        if callback is not None and (not chunk or int(steps) % chunk):
            t0 = MPI.Wtime()
            callback(int(steps), core)
            outside += MPI.Wtime() - t0
        grid.comm.Barrier()
        seconds = float(grid.comm.allreduce(MPI.Wtime() - start - outside, op=MPI.MAX))
        per = max(int(steps), 1)
        counts = grid.comm.allgather((counter.messages // per, counter.bytes // per))
        field = gather(core, grid)
        return RunResult(
            field=field,
            seconds=seconds,
            steps=int(steps),
            messages_per_step=sum(m for m, _ in counts),
            bytes_per_step=sum(b for _, b in counts),
            rank_messages_per_step=tuple(m for m, _ in counts),
            rank_bytes_per_step=tuple(b for _, b in counts),
            grid=grid.describe(),
            dims=grid.dims,
            snapshots=np.stack(snaps) if every and grid.rank == 0 else None,
            snapshot_steps=tuple(range(0, int(steps) + 1, every)) if every else (),
        )


def _check_chunks(steps: int, every: int | None, chunk: int | None):
    """Validate ``snapshot_every`` and ``chunk`` of :func:`run`; default chunk = every."""
    for name, value in (("snapshot_every", every), ("chunk", chunk)):
        if value is not None and (int(value) != value or value < 1):
            raise PgasError(f"{name} = {value!r}: give a whole number >= 1")
    if every is not None and steps % every:
        raise PgasError(
            f"snapshot_every = {every} does not divide steps = {steps}; pick steps as a "
            f"multiple of it (e.g. steps = {(steps // every + 1) * every})"
        )
    if every is not None and chunk is not None and chunk % every:
        raise PgasError(f"chunk = {chunk} must be a multiple of snapshot_every = {every}")
    return (int(every) if every else None), (int(chunk) if chunk else every)
