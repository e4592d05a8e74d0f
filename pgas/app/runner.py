"""Runner: run a :class:`~pgas.app.problem.Problem` on any backend and return one Result.

:func:`run` takes a problem and its :class:`~pgas.app.options.RunOptions`,
asks the backend (:mod:`pgas.app.backends`: ``auto``, ``explicit`` or ``mpi``)
for the run's plan once, and runs that plan, so the ``k`` in the
:class:`~pgas.app.results.Result` is the ``k`` that ran.

The runner does the rest, the same for every problem: it builds or restores
the state, compiles first (a warm-up run of the same program), times the
loop (its wall time, output waits included and reported apart:
``compute_seconds``, ``output_wait_seconds``), and between compiled chunks of
``snapshot_every`` steps hands each snapshot to a :class:`pgas.io.output.Stream`
(every process its own blocks, written to ``opts.out`` from a background thread while the next chunk
computes), then writes checkpoints (once the snapshots before are committed)
and advances a progress bar. Memory does not grow with the number of
snapshots.

What a run holds per process, from the first line to the last, on every
backend: its own blocks of the state and the buffers of the compiled loop over
them (on ``mpi``: the extended block and the kernel's temporaries of one slab
of rows), plus one host copy of its blocks for snapshots (made once, then
refilled at each snapshot once the one before is written). Never
a second state: the initial condition is built block by block, a slab of
cells at a time (:func:`pgas.from_function` with the problem's
``cells_per_value``, or each rank's cells on ``mpi``), and the run waits until
the devices hold it; the warm-up runs on the state itself, which is then freed
and built (or loaded from the checkpoint) again. Snapshots are written a row of
store chunks at a time (decoded row by row), checkpoints block by block; the
checksum (:func:`pgas.io.checksum.checksum`) and the final diagnostics are
computed from each process's blocks and combined with one small reduction.
Freed buffers go back to the system (:func:`pgas.runtime.memory.return_freed_buffers`,
called by :func:`pgas.app.platform.start`), and so does the memory XLA's compiler
freed, once the comm report and the warm-up have compiled
(:func:`pgas.runtime.memory.trim_freed_memory`); every process of a multi-process
job allocates from one heap (:func:`pgas.runtime.memory.share_one_heap`).
Nothing gathers the field unless asked: ``run(..., gather=True)`` puts the
whole decoded field in :attr:`Result.field` (on every process for ``auto`` and
``explicit``, on rank 0 for ``mpi``), at the cost of the whole field on each of
them.
"""

from __future__ import annotations

import contextlib
import dataclasses
import sys
import time
from pathlib import Path

import numpy as np

from pgas.app.backends import Backend, get
from pgas.app.options import RunOptions
from pgas.app.platform import Session
from pgas.app.problem import Problem
from pgas.app.results import Result
from pgas.errors import PgasError
from pgas.loop.plan import Plan
from pgas.runtime.memory import trim_freed_memory

__all__ = [
    "run",
    "build",
    "build_params",
    "check_memory",
    "mesh_for",
    "chunk_length",
    "scratch_store",
    "final_checksum",
]


def mesh_for(problem: Problem, devices: int | None, multiprocess: bool = False):
    """The problem's mesh over ``devices`` local devices (all processes' when multiprocess).

    >>> from pgas.app.problem import demo
    >>> dict(mesh_for(demo(), 2).shape)
    {'x': 2}
    """
    from pgas.grid.mesh import make_mesh

    return make_mesh(problem.mesh_axes, devices=None if multiprocess else devices)


def build(problem: Problem, mesh):
    """The problem's initial field on ``mesh`` (a fresh one per call: runs donate buffers).

    >>> from pgas.app.problem import demo
    >>> build(demo(), mesh_for(demo(), 1)).shape
    (8,)
    """
    import jax

    from pgas.globalview.array import from_function

    u = from_function(problem.init, problem.shape, mesh, dtype=problem.dtype,
                      boundary=problem.boundary, halo=problem.halo or None,
                      cells_per_value=problem.cells_per_value)  # fmt: skip
    # the host values go to the devices asynchronously: until they have, a process holds
    # the state twice, so wait here rather than allocate the run's buffers on top of that
    return jax.block_until_ready(u)


def check_memory(problem: Problem, mesh) -> None:
    """Refuse a problem whose run cannot fit its devices' memory, before anything is allocated:
    a run holds the state, the loop's second buffer and the ``params`` field, if any.

    Raises:
        FieldTooLargeError: naming the size and the fix (:mod:`pgas.runtime.capacity`).

    >>> from pgas.app.problem import demo
    >>> check_memory(demo(), mesh_for(demo(), 1))
    """
    from pgas.globalview.array import fits
    from pgas.grid.layout import make_layout

    layout = make_layout(problem.shape, mesh, None, problem.boundary, problem.halo or None)
    fits(layout, np.dtype(problem.dtype), buffers=2 + (problem.params is not None),
         what=f"the {problem.name} field")  # fmt: skip


def build_params(problem: Problem, mesh):
    """The read-only field of ``problem.params`` on ``mesh`` (laid out as the state), or None.

    >>> from pgas.app.problem import demo
    >>> build_params(demo(), mesh_for(demo(), 1)) is None
    True
    """
    if problem.params is None:
        return None
    from pgas.globalview.array import from_function

    return from_function(problem.params, problem.shape, mesh, dtype=problem.dtype,
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

    def resume_point(self) -> str | None:
        """Process 0 only (see :func:`_decide`): the checkpoint version a restart loads.

        None for a fresh start: a directory that is absent, empty or holds only
        hidden debris of an interrupted first save. A complete checkpoint is
        named by its version directory, so every process loads the same one;
        anything else is returned as the directory itself, and loading it fails
        on every process with the reason.
        """
        from pgas.io import checkpoint
        from pgas.io.checkpoint.store import read_latest

        root = Path(self.path)
        if checkpoint.latest(root) is not None:
            return str(root / read_latest(root))
        if not any(root.glob("[!.]*")):
            return None
        return str(root)

    def restore(self, like, point: str | None):
        """``(state, step)`` from the checkpoint ``point`` (:meth:`resume_point`), or
        ``(like, 0)`` if there is none yet."""
        from pgas.io import checkpoint

        if point is None:
            self._say(f"restart: no checkpoint in {self.path} yet, starting from step 0",
                      always=True)  # fmt: skip
            return like, 0
        try:
            state, step = checkpoint.load(point, like, meta=self.meta)
        except checkpoint.CheckpointError as err:
            raise PgasError(
                f"--restart refused: {err}. Restart with the options of the run that wrote the "
                f"checkpoint, or give another --checkpoint DIR (or drop --restart to start over)"
            ) from None
        self._say(f"restart: from step {step} (checkpoint {self.path})", always=True)
        return state, step

    def reload(self, like, point: str):
        """The state :meth:`restore` returned from ``point`` once more (quietly)."""
        from pgas.io import checkpoint

        return checkpoint.load(point, like, meta=self.meta)[0]

    def save(self, state, step: int) -> None:
        import jax

        from pgas.io import checkpoint

        jax.block_until_ready(state)
        checkpoint.save(self.path, state, step=step, meta=self.meta)
        self._say(f"checkpoint: step {step} written to {self.path}")

    def _say(self, text: str, always: bool = False) -> None:
        if self.rank == 0 and (always or self.verbose):
            print(text, file=sys.stderr, flush=True)


def run(problem: Problem, opts: RunOptions, session: Session | None = None,
        meta: dict | None = None, output=None, gather: bool = False) -> Result:  # fmt: skip
    """Run ``problem`` for ``opts.steps`` steps on ``opts.backend``; see the module docstring.

    Args:
        problem: the problem.
        opts: the run's options (``opts.backend``: a name, or a
            :class:`~pgas.app.backends.Backend`).
        session: what :func:`pgas.app.platform.start` found (default: one process here).
        meta: identifies the problem in checkpoints (default ``{"example": name}``).
        output: a :class:`pgas.io.output.Output` (the field's name, dims, attributes and
            diagnostics) for the snapshots streamed to ``opts.out`` (or, with only
            ``opts.plot``, to :func:`scratch_store`); default ``Output()``. Its
            diagnostics of the final field go to :attr:`Result.diagnostics`.
        gather: also gather the final (decoded) field into :attr:`Result.field`
            (every process; rank 0 on ``mpi``); the whole field on each of them.

    >>> from pgas.app.problem import checksum, demo
    >>> r = run(demo(), RunOptions(steps=3, devices=2))
    >>> r.backend, r.devices, r.checksum == checksum(np.arange(8, dtype="float32")), r.field
    ('auto', 2, True, None)
    """
    backend = get(opts.backend)
    if session is None:
        from pgas.app.platform import describe

        session = Session() if backend.launched else Session(**describe())
    if problem.iterative:  # until its test holds, at most opts.steps steps
        from pgas.app import iterate

        return iterate.run(problem, opts, backend, session, gather)
    progress = _Progress(opts.steps, opts.quiet, session.rank, problem.name)
    try:
        if backend.launched:
            return _run_mpi(problem, opts, backend, progress, output, gather)
        return _run_jax(problem, opts, backend, session, progress,
                        meta or {"example": problem.name}, output, gather)  # fmt: skip
    finally:
        progress.close()


def _decode(problem: Problem, values: np.ndarray | None) -> np.ndarray | None:
    return values if values is None or problem.decode is None else problem.decode(values)


def _decide(opts: RunOptions, ckpt, group) -> dict:
    """What must be the same on every process, decided once on process 0 before any
    process creates anything: the output path is usable, and where a restart starts.

    A process that looked for itself could look after another had begun to write (a
    half-made store is "not a Zarr store") and disagree with the others.
    """
    from pgas.io.dataset import OutputPathError, check_writable

    def question() -> dict:
        point = ckpt.resume_point() if ckpt is not None and opts.restart else None
        if opts.out:
            try:
                target = check_writable(opts.out)
            except OutputPathError as err:
                raise PgasError(f"--out: {err}") from None
            if target.exists() or target.is_symlink():
                _may_write(opts, target, point)
        if ckpt is not None and opts.checkpoint_every and not opts.restart:
            _fresh_checkpoints(opts)
        return {"resume": point}

    return group.decide(question)


def _checkpoints_beside(target: Path) -> list[str]:
    """Checkpoint directories next to ``target`` (they hold a ``LATEST``)."""
    try:
        return sorted(str(p) for p in target.parent.iterdir() if (p / "LATEST").is_file())
    except OSError:
        return []


def _may_write(opts: RunOptions, target: Path, point: str | None) -> None:
    """An existing ``--out``: continued by a restart from a checkpoint, replaced with
    ``--overwrite``, refused otherwise (process 0, before anything is written)."""
    if opts.restart and point is not None:
        return  # this run's own continuation
    if opts.restart and not opts.overwrite:
        seen = _checkpoints_beside(target)
        raise PgasError(
            f"--restart refused: --out {target} exists but --checkpoint {opts.checkpoint} holds "
            f"no checkpoint, so the run would start from step 0 and replace the store. "
            f"Checkpoint directories next to it: {', '.join(seen) or 'none'}. Give the right "
            f"--checkpoint DIR, or --overwrite to start over"
        )
    if not opts.overwrite:
        raise PgasError(
            f"--out {target} exists; pgas replaces nothing it was not asked to: pass "
            f"--overwrite to replace it, --restart to continue it from its --checkpoint, or "
            f"choose another name"
        )


def _fresh_checkpoints(opts: RunOptions) -> None:
    """A new run's ``--checkpoint`` directory: empty or absent, or replaced with
    ``--overwrite`` (moved aside whole, then removed: never half old, half new)."""
    import shutil
    import uuid

    root = Path(opts.checkpoint)
    if not root.exists() or (root.is_dir() and not any(root.glob("[!.]*"))):
        return
    if not opts.overwrite:
        from pgas.io import checkpoint

        step = checkpoint.latest(root)
        what = f"a checkpoint of step {step}" if step is not None else "files"
        raise PgasError(
            f"--checkpoint {root} holds {what} of an earlier run; pass --restart to continue "
            f"from it, --overwrite to replace it, or give another --checkpoint DIR"
        )
    if not root.is_dir():
        raise PgasError(f"--checkpoint {root} is a file, not a directory; give a directory")
    old = root.with_name(f".{root.name}.{uuid.uuid4().hex[:12]}.old")
    root.rename(old)
    shutil.rmtree(old, ignore_errors=True)


def _group(session: Session, comm):
    from pgas.runtime.group import Group

    return Group(comm) if session.multiprocess else Group.local()


def _restore(problem, opts, ckpt, u, decision: dict):
    """The state to start from and its step (a checkpoint's with ``restart``)."""
    if ckpt is None or not opts.restart:
        return u, 0
    u, start = ckpt.restore(u, decision["resume"])
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


def _run_jax(problem: Problem, opts: RunOptions, backend: Backend, session: Session,
             progress: _Progress, meta: dict, output, gather: bool) -> Result:  # fmt: skip
    import jax

    comm = None
    if session.multiprocess:
        from pgas.io.output import mpi_comm

        comm = mpi_comm()
    ckpt = _Checkpointer(opts, session.rank, meta) if opts.checkpointing else None
    decision = _decide(opts, ckpt, _group(session, comm))  # before anything is created
    mesh = mesh_for(problem, opts.devices, session.multiprocess)
    check_memory(problem, mesh)  # before the state exists: a field too large is refused
    fresh = lambda: build(problem, mesh)  # noqa: E731 - each run donates its buffers
    u, start = _restore(problem, opts, ckpt, fresh(), decision)
    if start:  # the warm-up consumes the state: the timed run starts from it once more
        again = lambda: ckpt.reload(fresh(), decision["resume"])  # noqa: E731
    else:
        again = fresh
    left, every, ck_every = opts.steps - start, _snapshot_every(opts), opts.checkpoint_every
    handover = bool(every or ck_every or progress.on)  # a callback between chunks
    plan = backend.plan(problem, u, opts.steps_per_exchange)
    report = backend.comm(problem, u, plan)  # compiles only: the state is not consumed
    trim_freed_memory()  # what the compiler freed, given back before the run's buffers exist
    attrs = _attrs(problem, opts, backend, session.platform, session.device_kind, mesh.size,
                   jax.process_count(), dict(mesh.shape), plan, start)  # fmt: skip
    if ck_every and start == 0 and left and _snapshot_every(opts):
        # before the store exists: a store of a run with checkpoints always has a checkpoint to
        # continue from, so a requeued --restart after an early kill continues (not refuses)
        ckpt.save(u, 0)
    stream = _stream(problem, opts, output, attrs, u.layout.axes, comm, jax.process_count(),
                     start)  # fmt: skip
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

    callback = between if handover else None

    def on_error(err: BaseException) -> None:  # the timed run failed: keep what it computed
        _final_checkpoint(err, ckpt, stream, start, session)

    with _closed_after(stream):
        if stream:
            stream.write(start, u)
        held = [u]  # handed to the warm-up, which consumes it: one state at a time
        del u
        u, seconds, waited = _timed(problem, backend, plan, held, left, chunk, callback, again,
                                    stream, on_error)  # fmt: skip
    from pgas.io.blocks import host_blocks

    final = _final(problem, output, host_blocks(u, copy=False), comm, jax.process_count())
    field = _decode(problem, u.to_numpy()) if gather else None  # only when asked
    return Result(
        backend.name, mesh.size, jax.process_count(), dict(mesh.shape),
        problem.cell_shape or problem.shape,
        opts.steps, seconds, final.checksum, messages_per_step=float(report.messages_total),
        bytes_per_step=float(report.bytes_total), ideal_bytes_per_step=int(report.ideal_bytes),
        steps_per_exchange=plan.steps_per_exchange, steps_per_exchange_note=plan.note,
        platform=session.platform, device_kind=session.device_kind, comm=report.to_dict(),
        start_step=start, rank=jax.process_index(), field=field,
        store=stream.path if stream else None, diagnostics=final.diagnostics,
        output_wait_seconds=waited,
    )  # fmt: skip


@dataclasses.dataclass(frozen=True)
class _Final:
    checksum: str
    diagnostics: dict


def _final(problem: Problem, output, pieces, comm, processes: int) -> _Final:
    """Checksum and diagnostics of the final field from this process's blocks (collective)."""
    from pgas.io.blocks import decode_piece, decoded_dtype
    from pgas.io.checksum import checksum_pieces
    from pgas.io.output import reducer

    cells = tuple(problem.cell_shape or problem.shape)
    dtype = decoded_dtype(problem.decode, problem.dtype, len(cells))
    decoded = [decode_piece(p, problem.decode, cells) for p in pieces]
    digest = checksum_pieces(decoded, cells, dtype, comm, processes)
    diagnostics = output.diagnostics if output is not None else None
    values = diagnostics([c for _, c in decoded], reducer(comm, processes)) if diagnostics else {}
    return _Final(digest, dict(values))


def final_checksum(problem: Problem, pieces, comm, processes: int) -> str:
    """The checksum of the final field from this process's ``(region, block)`` pieces
    (collective over ``comm``; see :func:`pgas.io.checksum.checksum`)."""
    return _final(problem, None, pieces, comm, processes).checksum


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


def _final_checkpoint(err: BaseException, ckpt, stream, start: int, session: Session) -> None:
    """Save the state the failed run completed (``err.pgas_state``, see :func:`pgas.run`) as a
    checkpoint, so that ``--restart`` loses nothing; a note on ``err`` says what happened.

    Only in a one-process run (the processes of a launched run do not fail together, and a
    checkpoint is collective: one failed process ends them all instead), and only when every
    snapshot before that step is committed (a failed snapshot stream cannot say so).
    """
    state, done = getattr(err, "pgas_state", None), getattr(err, "pgas_step", None)
    if ckpt is None or state is None or not done or session.multiprocess:
        return
    from pgas.io import checkpoint

    step = start + done
    try:
        if checkpoint.latest(ckpt.path) == step:
            return  # written by the run itself just before the error
        if stream:
            stream.close()  # every snapshot written so far committed (the run is over)
        ckpt.save(state, step)
    except Exception as failed:  # noqa: BLE001 - the run's own error is what propagates
        err.add_note(f"pgas: no final checkpoint at step {step} ({type(failed).__name__}: "
                     f"{failed}); --restart continues from the last one written")  # fmt: skip
        return
    note = f"pgas: the state after step {step} was saved to {ckpt.path}; --restart continues it"
    err.add_note(note)
    ckpt._say(note, always=True)


def _timed(problem, backend: Backend, plan: Plan, held: list, left: int, chunk, callback, again,
           stream, on_error=None):  # fmt: skip
    """Compile (a warm-up of what the timed run uses), then the timed run of ``plan``.

    The warm-up runs a step count that compiles the same programs
    (:meth:`~pgas.app.backends.Backend.warm_up_steps`: the same chunk length, or a
    count of the same parity, since a double-buffered loop has a program per parity),
    with a callback where the run has one. It runs on the state itself (``held``, a
    one-element list this function empties, so that no caller keeps it alive), which
    is then freed and built again (``again()``) for the timed run: a process never
    holds two states.
    """
    import jax

    u = held.pop()
    if left:
        if stream:  # the first snapshot written (its host copy freed) before the warm-up
            stream.flush()
        quiet = (lambda done, state: None) if callback else None
        n = backend.warm_up_steps(left, chunk)
        warm = backend.run(problem, u, n, plan, chunk=chunk, callback=quiet)
        del u
        jax.block_until_ready(warm)
        del warm
        trim_freed_memory()  # the loop's compilation: freed, not resident under the run
        u = again()
    before = stream.seconds if stream else 0.0
    t0 = time.perf_counter()
    try:
        u = backend.run(problem, u, left, plan, chunk=chunk, callback=callback)
        jax.block_until_ready(u)
    except BaseException as err:
        if on_error is not None:
            on_error(err)
        raise
    seconds = time.perf_counter() - t0  # as the user waited for it, output included
    return u, seconds, (stream.seconds - before) if stream else 0.0


def _attrs(problem, opts, backend, platform, device_kind, devices, processes, mesh, plan,
           start) -> dict:  # fmt: skip
    """The run's attributes known before it starts (process 0 writes them once)."""
    from pgas.app.results import versions

    return {"title": f"pgas example {problem.name}", "example": problem.name,
            "backend": backend.name, "mesh": mesh, "devices": devices, "processes": processes,
            "platform": platform, "device_kind": device_kind, "dtype": opts.dtype,
            "steps_per_exchange": plan.steps_per_exchange,
            "steps_per_exchange_note": plan.note, "snapshot_every": opts.snapshot_every,
            "start_step": start, **versions()}  # fmt: skip


def scratch_store(picture: str) -> str:
    """Where a run with ``--plot`` but no ``--out`` keeps its snapshots until drawn.

    >>> scratch_store("out/heat.png")
    'out/heat.png.snapshots.zarr'
    """
    return f"{picture}.snapshots.zarr"


def _snapshot_every(opts: RunOptions) -> int | None:
    """Steps between snapshots, or None: a run snapshots only what it writes or draws."""
    return opts.snapshot_every if opts.snapshot_every and (opts.out or opts.plot) else None


def _stream(problem: Problem, opts: RunOptions, output, attrs: dict, axes, comm, processes: int,
            start: int):  # fmt: skip
    """The :class:`pgas.io.output.Stream` of a run with ``--out`` or ``--plot``, else None."""
    if not _snapshot_every(opts):
        return None
    from pgas.io.blocks import block_chunks, decoded_dtype, split_chunks
    from pgas.io.output import Output, Stream

    output = output or Output()
    if output.dims is None:
        output = dataclasses.replace(output, dims=tuple(problem.mesh_axes))
    cells = tuple(problem.cell_shape or problem.shape)
    factor = [-(-c // s) for c, s in zip(cells, problem.shape)]  # cells per stored value
    dtype = decoded_dtype(problem.decode, problem.dtype, len(cells))
    restart = start if opts.restart and start > 0 else None
    # the runner decided (process 0, before anything was created) that --out may be replaced;
    # the scratch store of --plot is pgas's own
    overwrite = opts.overwrite or opts.restart or not opts.out
    return Stream(opts.out or scratch_store(opts.plot[0]), output, cells, dtype, problem.decode,
                  split_chunks(block_chunks(axes, factor), dtype.itemsize), attrs, restart,
                  comm, processes,
                  overwrite)  # fmt: skip


def _run_mpi(problem: Problem, opts: RunOptions, backend: Backend, progress: _Progress,
             output, gather: bool) -> Result:  # fmt: skip
    from pgas.grid.decomposition import dims_create
    from pgas.references import mpi
    from pgas.runtime.group import Group

    world = mpi.MPI.COMM_WORLD
    _decide(opts, None, Group(world))  # before anything is created
    dims = dims_create(world.size, len(problem.shape))
    plan = backend.plan(problem, None, opts.steps_per_exchange)
    grid = mpi.cart_grid(problem.shape, dims)  # the blocks mpi.run builds (same dims, order)
    mesh = dict(zip(problem.mesh_axes, dims, strict=True))
    attrs = _attrs(problem, opts, backend, "cpu", "numpy (mpi4py)", world.size, world.size,
                   mesh, plan, 0)  # fmt: skip
    stream = _stream(problem, opts, output, attrs, grid.axes, world, world.size, 0)
    every, region = _snapshot_every(opts), grid.block()
    slab = max(1, (1 << 16) // problem.cells_per_value)  # cells per call of init: about 2**16

    last = []  # this rank's final block (a view of the loop's buffer: no copy)

    def between(done: int, block: np.ndarray) -> None:
        last[:] = [block]
        if every and done % every == 0:
            if block.shape != grid.local_shape:
                raise PgasError(f"mpi.run's block {block.shape} is not {grid.local_shape}")
            stream.write(done, block, region)
        progress(done)

    chunk = every or chunk_length(opts.steps, None, progress.on)
    with _closed_after(stream):
        if stream:
            block = np.empty(grid.local_shape, problem.dtype)
            stream.write(0, mpi.fill_local(block, problem.init, grid, slab), region)
            del block
        r = backend.run(problem, None, opts.steps, plan, chunk=chunk, callback=between,
                        gather=gather)  # fmt: skip
    comm = {"messages_per_step": r.messages_per_step, "bytes_per_step": r.bytes_per_step,
            "rank_bytes_per_step": list(r.rank_bytes_per_step), "grid": r.grid}  # fmt: skip
    if not last:  # no step ran: the state is the initial condition
        last.append(mpi.fill_local(np.empty(grid.local_shape, problem.dtype), problem.init, grid,
                                   slab))  # fmt: skip
    final = _final(problem, output, [(region, last[0])], world, world.size)
    field = _decode(problem, r.field)  # rank 0, only when asked (gather)
    return Result(
        backend.name, world.size, world.size, dict(zip(problem.mesh_axes, r.dims, strict=True)),
        problem.cell_shape or problem.shape, opts.steps, r.wall_seconds,
        final.checksum,
        messages_per_step=float(r.messages_per_step), bytes_per_step=float(r.bytes_per_step),
        steps_per_exchange=r.steps_per_exchange, steps_per_exchange_note=r.note,
        platform="cpu", device_kind="numpy (mpi4py)", comm=comm, rank=world.rank, field=field,
        store=stream.path if stream else None, diagnostics=final.diagnostics,
        compute_seconds=r.seconds, output_wait_seconds=max(r.wall_seconds - r.seconds, 0.0),
    )  # fmt: skip
