"""A run on a JAX backend (``auto``, ``explicit``): the runner's phases, in order.

Contract of :func:`run` (what :func:`pgas.app.runner.run` does on a JAX
backend): process 0 decides where the run writes (:func:`pgas.app.preflight.decide`);
the mesh is made and a field too large for it refused before the state exists
(:mod:`pgas.app.state`); the state is built or restored from a checkpoint
(:mod:`pgas.app.checkpointing`); the backend plans it once and reports the
plan's communication (compiling only); :func:`timed` compiles the loop with a
warm-up run of the state itself, builds the state again and times the run,
handing the snapshot stream (:mod:`pgas.app.streaming`), the checkpoints and the
progress bar (:mod:`pgas.app.progress`) each chunk's state in between; the
checksum and diagnostics come from each process's blocks (:mod:`pgas.app.final`).
A process never holds two states, and gives what XLA's compiler freed back
(:func:`pgas.runtime.memory.trim_freed_memory`) once the comm report and once the
warm-up have compiled. A failed timed run saves what it computed
(:func:`pgas.app.checkpointing.final_checkpoint`).
"""

from __future__ import annotations

import time

from pgas.app.backends import Backend
from pgas.app.checkpointing import Checkpointer, final_checkpoint, restore
from pgas.app.final import decode_field, final_values
from pgas.app.options import RunOptions
from pgas.app.platform import Session
from pgas.app.preflight import decide, group_of
from pgas.app.problem import Problem
from pgas.app.progress import Progress, chunk_length
from pgas.app.results import Result
from pgas.app.state import build, check_memory, mesh_for
from pgas.app.streaming import closed_after, open_stream, run_attrs, snapshot_every
from pgas.loop.plan import Plan
from pgas.runtime.memory import trim_freed_memory

__all__ = ["run", "timed"]


def run(problem: Problem, opts: RunOptions, backend: Backend, session: Session,
        progress: Progress, meta: dict, output, gather: bool) -> Result:  # fmt: skip
    """Run ``problem`` on the JAX ``backend``; see the module docstring and
    :func:`pgas.app.runner.run` (which makes ``progress`` and ``meta``).

    >>> from pgas.app.backends import get
    >>> from pgas.app.problem import demo
    >>> r = run(demo(), RunOptions(steps=2, devices=1), get("auto"), Session(),
    ...         Progress(2, True, 0, "demo"), {"example": "demo"}, None, False)
    >>> r.backend, r.steps, r.start_step
    ('auto', 2, 0)
    """
    import jax

    comm = None
    if session.multiprocess:
        from pgas.io.output import mpi_comm

        comm = mpi_comm()
    ckpt = Checkpointer(opts, session.rank, meta) if opts.checkpointing else None
    decision = decide(opts, ckpt, group_of(session, comm))  # before anything is created
    mesh = mesh_for(problem, opts.devices, session.multiprocess)
    check_memory(problem, mesh)  # before the state exists: a field too large is refused
    fresh = lambda: build(problem, mesh)  # noqa: E731 - each run donates its buffers
    u, start = restore(problem, opts, ckpt, fresh(), decision)
    if start:  # the warm-up consumes the state: the timed run starts from it once more
        again = lambda: ckpt.reload(fresh(), decision["resume"])  # noqa: E731
    else:
        again = fresh
    left, every, ck_every = opts.steps - start, snapshot_every(opts), opts.checkpoint_every
    handover = bool(every or ck_every or progress.on)  # a callback between chunks
    plan = backend.plan(problem, u, opts.steps_per_exchange)
    report = backend.comm(problem, u, plan)  # compiles only: the state is not consumed
    trim_freed_memory()  # what the compiler freed, given back before the run's buffers exist
    attrs = run_attrs(problem, opts, backend, session.platform, session.device_kind, mesh.size,
                      jax.process_count(), dict(mesh.shape), plan, start)  # fmt: skip
    if ck_every and start == 0 and left and snapshot_every(opts):
        # before the store exists: a store of a run with checkpoints always has a checkpoint to
        # continue from, so a requeued --restart after an early kill continues (not refuses)
        ckpt.save(u, 0)
    stream = open_stream(problem, opts, output, attrs, u.layout.axes, comm, jax.process_count(),
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
        final_checkpoint(err, ckpt, stream, start, session)

    with closed_after(stream):
        if stream:
            stream.write(start, u)
        held = [u]  # handed to the warm-up, which consumes it: one state at a time
        del u
        u, seconds, waited = timed(problem, backend, plan, held, left, chunk, callback, again,
                                   stream, on_error)  # fmt: skip
    from pgas.io.blocks import host_blocks

    final = final_values(problem, output, host_blocks(u, copy=False), comm, jax.process_count())
    field = decode_field(problem, u.to_numpy()) if gather else None  # only when asked
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


def timed(problem, backend: Backend, plan: Plan, held: list, left: int, chunk, callback, again,
          stream, on_error=None):  # fmt: skip
    """Compile (a warm-up of what the timed run uses), then the timed run of ``plan``.

    The warm-up runs a step count that compiles the same programs
    (:meth:`~pgas.app.backends.Backend.warm_up_steps`: the same chunk length, or a
    count of the same parity, since a double-buffered loop has a program per parity),
    with a callback where the run has one. It runs on the state itself (``held``, a
    one-element list this function empties, so that no caller keeps it alive), which
    is then freed and built again (``again()``) for the timed run: a process never
    holds two states.

    Returns:
        ``(state, seconds, output_wait_seconds)``: the final state, the timed run's
        wall time (as the user waited for it, output included) and the part of it
        spent waiting for ``stream``.

    >>> from pgas.app.backends import get
    >>> from pgas.app.problem import demo
    >>> p, mesh = demo(), mesh_for(demo(), 1)
    >>> plan = get("auto").plan(p, build(p, mesh), 1)
    >>> u, seconds, waited = timed(p, get("auto"), plan, [build(p, mesh)], 2, None, None,
    ...                            lambda: build(p, mesh), None)
    >>> u.shape, waited
    ((8,), 0.0)
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
