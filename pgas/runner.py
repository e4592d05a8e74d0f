"""Runner: run a :class:`~pgas.problem.Problem` on any backend and return one Result.

:func:`run` takes a problem and its :class:`~pgas.options.RunOptions` and
runs the problem's *time loop* (``problem.loop``, else :func:`default_loop`):

- ``auto``: the global-view ``step`` under :func:`pgas.run`, on a mesh of
  ``devices`` JAX devices (compiled chunks),
- ``explicit``: the local ``kernel`` with ``ppermute`` halos
  (:func:`pgas.explicit.run`), one compiled program per chunk,
- ``mpi``: the same kernel on NumPy blocks with mpi4py halos
  (:func:`pgas.mpi.run`), in a process started by ``mpiexec -n P``.

The runner does the rest, the same for every problem: it picks ``k``, the
steps per halo exchange (:func:`pgas.plan.choose_steps_per_exchange`), builds
or restores the state, compiles first (a warm-up run of the same program), times
the loop, and between compiled chunks of ``snapshot_every`` steps hands each
snapshot to a :class:`pgas.output.Stream` (every process its own blocks, written
to ``opts.out`` from a background thread while the next chunk computes), then
writes checkpoints (once the snapshots before are committed) and advances
a progress bar. Memory does not grow with the number of snapshots; the field is
gathered once, at the end, and decoded (``problem.decode``) for the checksum. A time loop is
``loop(problem, u, steps, how)`` with ``how`` a :class:`Loop`; ``u`` is ``None``
on ``mpi`` (the ranks build their own blocks from ``problem.init``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from pgas.errors import PgasError
from pgas.options import RunOptions
from pgas.plan import Choice, choose_steps_per_exchange
from pgas.platform import Session
from pgas.problem import Problem, checksum
from pgas.results import Result

__all__ = ["Loop", "run", "default_loop", "build", "mesh_for", "chunk_length", "scratch_store"]


@dataclasses.dataclass(frozen=True)
class Loop:
    """How the runner asks a time loop to run: the arguments of ``pgas.run`` and friends.

    Attributes:
        backend: ``auto``, ``explicit`` or ``mpi``.
        steps_per_exchange: ``k``, physical steps per halo exchange.
        chunk: steps per compiled chunk, or None for one.
        callback: ``callback(steps_done, state)`` between chunks (snapshots, checkpoints,
            progress; this process's block on ``mpi``), or None.
    """

    backend: str
    steps_per_exchange: int = 1
    chunk: int | None = None
    callback: Callable[[int, Any], None] | None = None


def default_loop(p: Problem, u, steps: int, how: Loop):
    """The time loop of a problem that brings none: the problem's step or kernel, run.

    >>> import pgas
    >>> from pgas.problem import demo
    >>> p = demo()
    >>> default_loop(p, build(p, mesh_for(p, 1)), 3, Loop("auto")).to_numpy()[:3]
    array([0., 1., 2.], dtype=float32)
    """
    import pgas
    from pgas import explicit

    k = how.steps_per_exchange
    if how.backend == "auto":
        return pgas.run(p.step, u, steps, chunk=how.chunk,
                        callback=how.callback, steps_per_exchange=k)  # fmt: skip
    if how.backend == "explicit":
        return explicit.run(p.kernel, u, steps, p.halo, p.region, steps_per_exchange=k)
    from pgas import mpi

    return mpi.run(p.kernel, p.init, p.shape, p.dtype, steps, p.halo, p.boundary, p.region,
                   chunk=how.chunk,
                   callback=how.callback, steps_per_exchange=k)  # fmt: skip


def mesh_for(problem: Problem, devices: int | None, multiprocess: bool = False):
    """The problem's mesh over ``devices`` local devices (all processes' when multiprocess).

    >>> from pgas.problem import demo
    >>> dict(mesh_for(demo(), 2).shape)
    {'x': 2}
    """
    from pgas.mesh import make_mesh

    return make_mesh(problem.mesh_axes, devices=None if multiprocess else devices)


def build(problem: Problem, mesh):
    """The problem's initial field on ``mesh`` (a fresh one per call: runs donate buffers).

    >>> from pgas.problem import demo
    >>> build(demo(), mesh_for(demo(), 1)).shape
    (8,)
    """
    from pgas.array import from_function

    return from_function(problem.init, problem.shape, mesh, dtype=problem.dtype,
                         boundary=problem.boundary, halo=problem.halo or None)  # fmt: skip


def chunk_length(steps: int, every: int | None, progress: bool) -> int | None:
    """Steps per compiled chunk: about 1/20 of the run with a bar, a multiple of ``every``.

    >>> chunk_length(100, None, True), chunk_length(100, 10, False)
    (5, 20)
    """
    if every is None:
        return max(1, steps // 20) if progress else None
    shots = steps // every
    want = max(1, shots // (20 if progress else 4))
    parts = max(d for d in range(1, want + 1) if shots % d == 0)
    return every * parts


def _choice(problem: Problem, requested, blocks: tuple[int, ...], platform: str) -> Choice:
    halo = problem.halo
    widths = tuple(halo) if isinstance(halo, (tuple, list)) else (halo,) * len(problem.shape)
    return choose_steps_per_exchange(requested, blocks, widths,
                                     platform="gpu" if platform == "gpu" else "cpu")  # fmt: skip


class _Progress:
    """A tqdm bar on rank 0 of an interactive run, advanced between compiled chunks."""

    def __init__(self, steps: int, quiet: bool, rank: int, name: str):
        self.bar = None
        if not quiet and rank == 0 and sys.stdout.isatty() and steps:
            from tqdm import tqdm

            self.bar = tqdm(total=steps, unit="step", desc=name, leave=False)
        self.done = 0

    @property
    def on(self) -> bool:
        return self.bar is not None

    def __call__(self, done: int, state=None) -> None:
        if self.bar is not None:
            if state is not None and not isinstance(state, np.ndarray):
                import jax

                jax.block_until_ready(state)  # JAX dispatches asynchronously: wait for the chunk
            self.bar.update(done - self.done)
        self.done = done

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


class _Checkpointer:
    """Saves the state through pgas.checkpoint every ``checkpoint_every`` steps (all processes)."""

    def __init__(self, opts: RunOptions, rank: int, meta: dict):
        self.path, self.every, self.meta = opts.checkpoint, opts.checkpoint_every, meta
        self.rank, self.verbose = rank, opts.verbose

    def restore(self, like):
        """``(state, step)`` from the checkpoint, or ``(like, 0)`` if there is none yet.

        A directory that is absent, empty or holds only hidden debris of an
        interrupted first save is a fresh start; anything else must load.
        """
        from pgas import checkpoint

        root = Path(self.path)
        if checkpoint.latest(root) is None and not any(root.glob("[!.]*")):
            self._say(f"restart: no checkpoint in {self.path} yet, starting from step 0",
                      always=True)  # fmt: skip
            return like, 0
        try:
            state, step = checkpoint.load(root, like, meta=self.meta)
        except checkpoint.CheckpointError as err:
            raise PgasError(
                f"--restart refused: {err}. Restart with the options of the run that wrote the "
                f"checkpoint, or give another --checkpoint DIR (or drop --restart to start over)"
            ) from None
        self._say(f"restart: from step {step} (checkpoint {self.path})", always=True)
        return state, step

    def save(self, state, step: int) -> None:
        import jax

        from pgas import checkpoint

        jax.block_until_ready(state)
        checkpoint.save(self.path, state, step=step, meta=self.meta)
        self._say(f"checkpoint: step {step} written to {self.path}")

    def _say(self, text: str, always: bool = False) -> None:
        if self.rank == 0 and (always or self.verbose):
            print(text, file=sys.stderr, flush=True)


def run(problem: Problem, opts: RunOptions, session: Session | None = None,
        meta: dict | None = None, output=None) -> Result:  # fmt: skip
    """Run ``problem`` for ``opts.steps`` steps on ``opts.backend``; see the module docstring.

    Args:
        problem: the problem (its ``loop`` runs it, else :func:`default_loop`).
        opts: the run's options.
        session: what :func:`pgas.platform.start` found (default: one process here).
        meta: identifies the problem in checkpoints (default ``{"example": name}``).
        output: a :class:`pgas.output.Output` (the field's name, dims, attributes and
            diagnostics) for the snapshots streamed to ``opts.out`` (or, with only
            ``opts.plot``, to :func:`scratch_store`); default ``Output()``.

    >>> from pgas.problem import demo
    >>> r = run(demo(), RunOptions(steps=3, devices=2))
    >>> r.backend, r.devices, r.checksum == checksum(np.arange(8, dtype="float32"))
    ('auto', 2, True)
    """
    if session is None:
        from pgas.platform import describe

        session = Session(**describe()) if opts.backend != "mpi" else Session()
    progress = _Progress(opts.steps, opts.quiet, session.rank, problem.name)
    try:
        if opts.backend == "mpi":
            return _run_mpi(problem, opts, progress, output)
        return _run_jax(problem, opts, session, progress, meta or {"example": problem.name},
                        output)  # fmt: skip
    finally:
        progress.close()


def _decode(problem: Problem, values: np.ndarray | None) -> np.ndarray | None:
    return values if values is None or problem.decode is None else problem.decode(values)


def _restore(problem, opts, ckpt, u):
    """The state to start from and its step (a checkpoint's with ``restart``)."""
    if ckpt is None or not opts.restart:
        return u, 0
    u, start = ckpt.restore(u)
    steps, every = opts.steps, opts.snapshot_every
    if start > steps:
        raise PgasError(
            f"the checkpoint in {opts.checkpoint} is at step {start}, beyond --steps "
            f"{steps}; give --steps >= {start} or another --checkpoint"
        )
    if every and (steps - start) % every:
        raise PgasError(
            f"restarting at step {start}: --snapshot-every {every} does not divide the "
            f"{steps - start} remaining steps; choose a divisor of them"
        )
    return u, start


def _comm(problem: Problem, backend: str, u, k: int) -> Any:
    import pgas
    from pgas import explicit

    if backend == "auto":
        return pgas.comm_report(problem.step, u, steps_per_exchange=k)
    return explicit.comm_report(problem.kernel, u, problem.halo, problem.region,
                                steps_per_exchange=k)  # fmt: skip


def _jax_choice(problem: Problem, backend: str, requested, u, callbacks: bool) -> Choice:
    """The steps per exchange the JAX paths will use (what pgas.run / explicit.run choose;
    ``pgas.run`` with a callback between chunks is single-buffered)."""
    from pgas import explicit
    from pgas.plan import plan

    if backend == "auto":
        return plan(problem.step, u, requested, double=False if callbacks else None).choice
    return explicit.choose(u, problem.halo, requested)


def _run_jax(problem: Problem, opts: RunOptions, session: Session, progress: _Progress,
             meta: dict, output) -> Result:  # fmt: skip
    import jax

    mesh = mesh_for(problem, opts.devices, session.multiprocess)
    fresh = lambda: build(problem, mesh)  # noqa: E731 - each run donates its buffers
    callbacks = bool(opts.snapshot_every or opts.checkpoint_every or progress.on)
    choice = _jax_choice(problem, opts.backend, opts.steps_per_exchange, fresh(), callbacks)
    k, ck_every = choice.steps_per_exchange, opts.checkpoint_every
    ckpt = _Checkpointer(opts, session.rank, meta) if opts.checkpointing else None
    u, start = _restore(problem, opts, ckpt, fresh())
    left = opts.steps - start
    report = _comm(problem, opts.backend, fresh(), k)
    attrs = _attrs(problem, opts, session.platform, session.device_kind, mesh.size,
                   jax.process_count(), dict(mesh.shape), choice, start)  # fmt: skip
    comm = None
    if session.multiprocess:
        from pgas.output import mpi_comm

        comm = mpi_comm()
    stream = _stream(problem, opts, output, attrs, u.layout.axes, comm, jax.process_count(),
                     start)  # fmt: skip
    every = opts.snapshot_every if stream else None
    chunk = every or ck_every or chunk_length(left, None, progress.on)
    progress(start)

    def between(done: int, state) -> None:  # after each compiled chunk of this run
        if every and done % every == 0:
            stream.write(start + done, state)  # returns once this process's blocks are copied
        if ck_every and (done % ck_every == 0 or done == left):
            if stream:  # every snapshot before this step committed: a restart loses none
                stream.flush()
            ckpt.save(state, start + done)
        progress(start + done, state)

    loop = problem.loop or default_loop
    with _closed_after(stream):
        if stream:
            stream.write(start, u)
        if opts.backend == "auto":
            cb = between if (every or ck_every or progress.on) else None
            u, seconds = _auto_run(problem, loop, u, left, Loop("auto", k, chunk, cb), fresh,
                                   stream)  # fmt: skip
        else:
            u, seconds = _explicit_pieces(problem, loop, u, left, Loop("explicit", k), chunk,
                                          between, fresh)  # fmt: skip
    field = u.to_numpy()  # the one gather of the run (every process), for the checksum
    field = _decode(problem, field)
    return Result(
        opts.backend, mesh.size, jax.process_count(), dict(mesh.shape),
        problem.cell_shape or problem.shape,
        opts.steps, seconds, checksum(field), messages_per_step=float(report.messages_total),
        bytes_per_step=float(report.bytes_total), ideal_bytes_per_step=int(report.ideal_bytes),
        steps_per_exchange=k, steps_per_exchange_note=choice.note, platform=session.platform,
        device_kind=session.device_kind, comm=report.to_dict(), start_step=start,
        rank=jax.process_index(), field=field, store=stream.path if stream else None,
    )  # fmt: skip


@contextlib.contextmanager
def _closed_after(stream):
    """Close ``stream`` after the block (it commits the last snapshot); abort it on an error."""
    if stream is None:
        yield
        return
    try:
        yield
    except BaseException:
        stream.abort()
        raise
    stream.close()


def _auto_run(problem, loop, u, left, how, fresh, stream):
    """The auto path: compile (a warm-up of the same chunk length), then the timed run.

    The warm-up compiles what the timed run uses: the same chunk length, or a count of the
    same parity (a double-buffered loop has a program per parity), and a callback where
    the run has one (which keeps the loop single-buffered, see :func:`pgas.run`).
    """
    import jax

    if left:
        n = min(how.chunk, left) if how.chunk else min(2 - left % 2, left)
        quiet = (lambda done, state: None) if how.callback else None
        loop(problem, fresh(), n, dataclasses.replace(how, callback=quiet))
    outside = stream.seconds if stream else 0.0
    t0 = time.perf_counter()
    u = loop(problem, u, left, how)
    jax.block_until_ready(u)
    seconds = time.perf_counter() - t0 - ((stream.seconds - outside) if stream else 0.0)
    return u, seconds  # without the snapshot hand-overs (as the explicit and mpi paths)


def _explicit_pieces(problem, loop, u, left, how, piece, between, fresh):
    """The explicit path in pieces of ``piece`` steps (snapshots, checkpoints, progress)."""
    import jax

    jax.block_until_ready(loop(problem, fresh(), 1, how))  # compile (the trip count is traced)
    seconds, done = 0.0, 0
    piece = piece or left
    while done < left:
        n = min(piece, left - done)
        t0 = time.perf_counter()
        u = loop(problem, u, n, how)
        jax.block_until_ready(u)
        seconds += time.perf_counter() - t0
        done += n
        between(done, u)
    return u, seconds


def _attrs(problem, opts, platform, device_kind, devices, processes, mesh, choice, start) -> dict:
    """The run's attributes known before it starts (process 0 writes them once)."""
    from pgas.results import versions

    return {"title": f"pgas example {problem.name}", "example": problem.name,
            "backend": opts.backend, "mesh": mesh, "devices": devices, "processes": processes,
            "platform": platform, "device_kind": device_kind, "dtype": opts.dtype,
            "steps_per_exchange": choice.steps_per_exchange,
            "steps_per_exchange_note": choice.note, "snapshot_every": opts.snapshot_every,
            "start_step": start, **versions()}  # fmt: skip


def scratch_store(picture: str) -> str:
    """Where a run with ``--plot`` but no ``--out`` keeps its snapshots until drawn.

    >>> scratch_store("out/heat.png")
    'out/heat.png.snapshots.zarr'
    """
    return f"{picture}.snapshots.zarr"


def _stream(problem: Problem, opts: RunOptions, output, attrs: dict, axes, comm, processes: int,
            start: int):  # fmt: skip
    """The :class:`pgas.output.Stream` of a run with ``--out`` or ``--plot``, else None."""
    if not opts.snapshot_every or not (opts.out or opts.plot):
        return None
    from pgas.blocks import block_chunks
    from pgas.output import Output, Stream

    output = output or Output()
    if output.dims is None:
        output = dataclasses.replace(output, dims=tuple(problem.mesh_axes))
    cells = tuple(problem.cell_shape or problem.shape)
    factor = [-(-c // s) for c, s in zip(cells, problem.shape)]  # cells per stored value
    dtype = np.dtype(problem.dtype)
    if problem.decode is not None:
        dtype = np.asarray(problem.decode(np.zeros((1,) * len(cells), dtype))).dtype
    restart = start if opts.restart and start > 0 else None
    return Stream(opts.out or scratch_store(opts.plot[0]), output, cells, dtype, problem.decode,
                  block_chunks(axes, factor), attrs, restart, comm, processes)  # fmt: skip


def _run_mpi(problem: Problem, opts: RunOptions, progress: _Progress, output) -> Result:
    from pgas import mpi
    from pgas.decomposition import dims_create

    world = mpi.MPI.COMM_WORLD
    dims = dims_create(world.size, len(problem.shape))
    blocks = tuple(s // d for s, d in zip(problem.shape, dims))
    choice = _choice(problem, opts.steps_per_exchange, blocks, "cpu")  # what mpi.run chooses
    grid = mpi.cart_grid(problem.shape, dims)  # the blocks mpi.run builds (same dims, order)
    mesh = dict(zip(problem.mesh_axes, dims, strict=True))
    attrs = _attrs(problem, opts, "cpu", "numpy (mpi4py)", world.size, world.size, mesh,
                   choice, 0)  # fmt: skip
    stream = _stream(problem, opts, output, attrs, grid.axes, world, world.size, 0)
    every, region = (opts.snapshot_every if stream else None), grid.block()

    def between(done: int, block: np.ndarray) -> None:
        if every and done % every == 0:
            if block.shape != grid.local_shape:
                raise PgasError(f"mpi.run's block {block.shape} is not {grid.local_shape}")
            stream.write(done, block, region)
        progress(done)

    chunk = every or chunk_length(opts.steps, None, progress.on)
    how = Loop("mpi", choice.steps_per_exchange, chunk,
               between if (every or progress.on) else None)  # fmt: skip
    with _closed_after(stream):
        if stream:
            index = np.meshgrid(*mpi.local_coordinates(grid), indexing="ij")
            stream.write(0, np.asarray(problem.init(*index)).astype(problem.dtype), region)
        r = (problem.loop or default_loop)(problem, None, opts.steps, how)
    comm = {"messages_per_step": r.messages_per_step, "bytes_per_step": r.bytes_per_step,
            "rank_bytes_per_step": list(r.rank_bytes_per_step), "grid": r.grid}  # fmt: skip
    field = _decode(problem, r.field)  # gathered on rank 0 once, at the end, for the checksum
    return Result(
        "mpi", world.size, world.size, dict(zip(problem.mesh_axes, r.dims, strict=True)),
        problem.cell_shape or problem.shape, opts.steps, r.seconds,
        checksum(field) if field is not None else "",
        messages_per_step=float(r.messages_per_step), bytes_per_step=float(r.bytes_per_step),
        steps_per_exchange=r.steps_per_exchange, steps_per_exchange_note=r.note,
        platform="cpu", device_kind="numpy (mpi4py)", comm=comm, rank=world.rank, field=field,
        store=stream.path if stream else None,
    )  # fmt: skip
