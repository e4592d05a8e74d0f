"""Iterative problems: run until the test holds, on any backend, and return one Result.

:func:`run` is what :func:`pgas.app.runner.run` does with a problem that has a
``converged`` test (:attr:`~pgas.app.problem.Problem.iterative`): ``opts.steps``
is the most steps, and the backend's
:meth:`~pgas.app.backends.Backend.run_until` runs the problem
(:func:`pgas.run_until`, :func:`pgas.explicit.run_until` or
:func:`pgas.mpi.run_until`) after a warm-up run that compiles it (JAX
backends). The :class:`~pgas.app.results.Result` counts the steps taken in
``steps`` and says whether the test held (``converged``) and how often it was
tested (``check_every``, decided once for every backend: :func:`check_every`), so
``pgas compare`` of a solver compares iterations and checksums. Its ``k`` and
messages are those of the plan that ran; the messages and bytes per step are
the halo exchanges of the steps (the MPI path also counts the one exchange of
each test). Snapshots, checkpoints and restarts are
not offered for these runs: the options that ask for them are refused.
"""

from __future__ import annotations

import time

import numpy as np

from pgas.app.backends import Backend
from pgas.app.final import final_checksum
from pgas.app.options import RunOptions
from pgas.app.platform import Session
from pgas.app.problem import Problem
from pgas.app.results import Result
from pgas.app.state import build, build_params, mesh_for
from pgas.errors import PgasError
from pgas.loop.until import CHECK_COST_STEPS

__all__ = ["run", "check_every", "CHECK_EVERY"]

#: steps between tests of an iterative problem whose ``check_every`` is ``"auto"``: the
#: same on every backend (each lowers its ``k`` to divide it), so all take the same steps
CHECK_EVERY = CHECK_COST_STEPS


def check_every(problem: Problem) -> int:
    """Steps between tests for every backend: the problem's, or :data:`CHECK_EVERY`.

    ``pgas.run_until``'s own ``"auto"`` rounds 64 to the backend's ``k``, which
    may differ between backends; decided here once, every backend tests at the
    same steps.

    >>> check_every(demo()), CHECK_EVERY
    (2, 64)
    """
    return CHECK_EVERY if problem.check_every == "auto" else int(problem.check_every)


def run(problem: Problem, opts: RunOptions, backend: Backend, session: Session,
        gather: bool = False) -> Result:  # fmt: skip
    """Run the iterative ``problem`` on ``backend`` until its test holds (at most ``opts.steps``).

    >>> from pgas.app import runner
    >>> from pgas.app.problem import load_problem
    >>> p = load_problem("pgas.app.iterate:demo")
    >>> r = runner.run(p, RunOptions(steps=100, devices=2))
    >>> r.steps, r.converged, r.check_every
    (4, True, 2)
    """
    for flag, value in (("--out", opts.out), ("--plot", opts.plot),
                        ("--checkpoint-every", opts.checkpoint_every),
                        ("--restart", opts.restart)):  # fmt: skip
        if value:
            raise PgasError(
                f"{flag} {value!r} with the iterative problem {problem.name!r}: a run until "
                f"convergence writes no snapshots or checkpoints; leave {flag} out"
            )
    if backend.launched:
        return _run_mpi(problem, opts, backend, gather)
    return _run_jax(problem, opts, backend, session, gather)


def _run_jax(problem: Problem, opts: RunOptions, backend: Backend, session: Session,
             gather: bool) -> Result:  # fmt: skip
    import jax

    from pgas.io.blocks import host_blocks
    from pgas.runtime.memory import trim_freed_memory

    mesh = mesh_for(problem, opts.devices, session.multiprocess)
    params = build_params(problem, mesh)  # read-only: built once, never donated
    k, every = opts.steps_per_exchange, check_every(problem)
    warm = backend.run_until(problem, build(problem, mesh), opts.steps, k, every, params=params)
    jax.block_until_ready(warm.state)  # compiled: the timed run below reuses the program
    del warm  # one state at a time
    trim_freed_memory()  # what the compiler freed, given back before the timed run's state
    u = build(problem, mesh)
    t0 = time.perf_counter()
    out = backend.run_until(problem, u, opts.steps, k, every, params=params)
    jax.block_until_ready(out.state)
    seconds = time.perf_counter() - t0
    report = backend.comm(problem, out.state, out.plan, params)  # compiles only
    trim_freed_memory()
    comm = None
    if jax.process_count() > 1:
        from pgas.io.output import mpi_comm

        comm = mpi_comm()
    digest = final_checksum(problem, host_blocks(out.state, copy=False), comm,
                            jax.process_count())  # fmt: skip
    field = out.state.to_numpy() if gather else None
    if field is not None and problem.decode is not None:
        field = problem.decode(field)
    return Result(
        backend.name, mesh.size, jax.process_count(), dict(mesh.shape),
        problem.cell_shape or problem.shape, out.steps_taken, seconds, digest,
        messages_per_step=float(report.messages_total), bytes_per_step=float(report.bytes_total),
        ideal_bytes_per_step=int(report.ideal_bytes),
        steps_per_exchange=out.plan.steps_per_exchange, steps_per_exchange_note=out.plan.note,
        platform=session.platform, device_kind=session.device_kind, comm=report.to_dict(),
        rank=jax.process_index(), field=field, converged=out.converged,
        check_every=out.check_every,
    )  # fmt: skip


def _run_mpi(problem: Problem, opts: RunOptions, backend: Backend, gather: bool) -> Result:
    from pgas.references import mpi

    world = mpi.MPI.COMM_WORLD
    last = []

    def keep(done: int, block: np.ndarray) -> None:
        last[:] = [block]

    r = backend.run_until(problem, None, opts.steps, opts.steps_per_exchange,
                          check_every(problem), callback=keep, gather=gather)  # fmt: skip
    grid = mpi.cart_grid(problem.shape, r.dims)  # the blocks run_until built (same dims, order)
    digest = final_checksum(problem, [(grid.block(), last[0])], world, world.size)
    field = r.field if r.field is None or problem.decode is None else problem.decode(r.field)
    comm = {"messages_per_step": r.messages_per_step, "bytes_per_step": r.bytes_per_step,
            "rank_bytes_per_step": list(r.rank_bytes_per_step), "grid": r.grid,
            "allreduces": r.allreduces}  # fmt: skip
    return Result(
        backend.name, world.size, world.size, dict(zip(problem.mesh_axes, r.dims, strict=True)),
        problem.cell_shape or problem.shape, r.steps, r.wall_seconds, digest,
        messages_per_step=float(r.messages_per_step), bytes_per_step=float(r.bytes_per_step),
        steps_per_exchange=r.steps_per_exchange, steps_per_exchange_note=r.note,
        platform="cpu", device_kind="numpy (mpi4py)", comm=comm, rank=world.rank, field=field,
        compute_seconds=r.seconds, converged=r.converged, check_every=r.check_every,
    )  # fmt: skip


def demo(n: int = 4) -> Problem:
    """A 1-D Jacobi that converges after 4 steps (checked every 2): doctests and smoke tests.

    >>> demo().iterative
    True
    """
    from pgas.globalview.reduce import max as global_max
    from pgas.grid.boundary import Keep

    def step(u):
        u[1:-1] = 0.5 * (u[:-2] + u[2:])
        return u

    return Problem(
        "jacobi-demo", (n,), "float32", lambda i: 8.0 * (i == 1), step,
        lambda e: 0.5 * (e[:-2] + e[2:]), Keep(), 1, None, ("x",),
        converged=lambda u: global_max(abs(u)) < 1.0,
        local_converged=lambda e, reduce: reduce(abs(e[1:-1]), "max") < 1.0, check_every=2,
    )  # fmt: skip
