"""Backends: the three ways to run a problem, each one object with one small interface.

A :class:`Backend` makes the plan of a run (:meth:`Backend.plan`: ``k``, the
reach and halo, the buffering, and the note saying why; a
:class:`pgas.loop.plan.Plan`) and runs that plan (:meth:`Backend.run`);
:meth:`Backend.comm` reports the communication of the same plan. The runner,
``pgas compare``, the command line and the examples ask :func:`get` for a
backend by name and never re-derive what it decided. Adding a backend is one
new class here and one entry in :data:`BACKENDS`.

- :class:`Auto`: the global-view ``step`` under :func:`pgas.run` (Shardy
  places the halo exchanges; deep halos; double-buffered on the CPU).
- :class:`Explicit`: the local ``kernel`` on blocks with ``lax.ppermute`` halos
  under ``shard_map`` (:mod:`pgas.references.explicit`).
- :class:`Mpi`: the same kernel on NumPy blocks with mpi4py ``Sendrecv`` halos
  in processes started by ``mpiexec`` (:mod:`pgas.references.mpi`).

>>> from pgas.app.problem import demo
>>> from pgas.app.state import build, mesh_for
>>> p = demo()
>>> auto = get("auto")
>>> plan = auto.plan(p, build(p, mesh_for(p, 2)), "auto")
>>> plan.steps_per_exchange, plan.double
(1, False)
>>> auto.run(p, build(p, mesh_for(p, 2)), 3, plan).to_numpy()[:3]
array([0., 1., 2.], dtype=float32)
"""

from __future__ import annotations

import abc
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, ClassVar

from pgas.app.problem import Problem
from pgas.errors import PgasError

if TYPE_CHECKING:  # the backends import JAX and MPI only when they run
    from pgas.loop.plan import Plan

__all__ = ["Backend", "Auto", "Explicit", "Mpi", "BACKENDS", "get"]

Callback = Callable[[int, Any], None]


class Backend(abc.ABC):
    """One way to run a :class:`~pgas.app.problem.Problem`: plan it, run the plan, report it.

    Attributes:
        name: what ``--backend`` and the results call it.
        launched: runs in processes started by an MPI launcher (NumPy blocks),
            not on JAX devices: it counts ranks, not devices, and keeps no
            checkpoints.
    """

    name: ClassVar[str]
    launched: ClassVar[bool] = False

    @abc.abstractmethod
    def plan(self, problem: Problem, u, requested: int | str) -> Plan:
        """How a run of ``problem`` from the state ``u`` will be compiled, and why.

        Args:
            problem: the problem.
            u: its state (a :class:`pgas.GlobalArray`; ``None`` on :class:`Mpi`, whose
                ranks build their own blocks).
            requested: ``k``, steps per exchange (an int >= 1 or ``"auto"``).
        """

    @abc.abstractmethod
    def run(self, problem: Problem, u, steps: int, plan: Plan, *, chunk: int | None = None,
            callback: Callback | None = None):  # fmt: skip
        """Run ``steps`` steps of ``plan``, calling ``callback(done, state)`` after each chunk."""

    def comm(self, problem: Problem, u, plan: Plan, params=None):
        """The :class:`pgas.CommReport` of ``plan`` (``None``: the run counts its messages);
        ``params``: the read-only field of an iterative problem."""
        return None

    def run_until(self, problem: Problem, u, max_steps: int, requested: int | str,
                  check_every: int, *, params=None, callback: Callback | None = None,
                  gather: bool = False):  # fmt: skip
        """Run an iterative ``problem`` until its test holds, at most ``max_steps`` steps.

        Args:
            problem: a problem with ``converged`` (:attr:`Problem.iterative`).
            u: its state (``None`` on :class:`Mpi`).
            max_steps: the most steps.
            requested: ``k``, steps per exchange (an int >= 1 or ``"auto"``; lowered to
                divide ``check_every``).
            check_every: steps between tests, decided once for every backend
                (:func:`pgas.app.iterate.check_every`).
            params: the read-only field built from ``problem.params`` (JAX backends).
            callback: on :class:`Mpi`, ``callback(steps, block)`` once, at the end.
            gather: on :class:`Mpi`, gather the final field to rank 0.

        Returns:
            A :class:`pgas.Until` (JAX backends; its ``plan`` is what ran), or a
            :class:`pgas.mpi.RunResult` (:class:`Mpi`).
        """
        raise PgasError(f"backend {self.name!r} does not run iterative problems (run_until)")

    def warm_up_steps(self, steps: int, chunk: int | None) -> int:
        """Steps of a run that compiles what a timed run of ``steps`` in ``chunk`` uses."""
        return min(chunk, steps) if chunk else min(2 - steps % 2, steps)

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


class Auto(Backend):
    """The global view: ``problem.step`` under :func:`pgas.run`."""

    name = "auto"

    def plan(self, problem, u, requested):
        from pgas.loop.plan import plan

        return plan(problem.step, u, requested)

    def run(self, problem, u, steps, plan, *, chunk=None, callback=None):
        from pgas.loop.timeloop import run

        # the runner owns u: donating it saves a copy of the field on every device
        return run(problem.step, u, steps, chunk=chunk, callback=callback, plan=plan, donate=True)

    def comm(self, problem, u, plan, params=None):
        from pgas.loop.report import comm_report

        return comm_report(problem.step, u, plan=plan, params=params)

    def run_until(self, problem, u, max_steps, requested, check_every, *, params=None,
                  callback=None, gather=False):  # fmt: skip
        from pgas.loop.until import run_until

        return run_until(problem.step, u, problem.converged, max_steps,
                         check_every=check_every, params=params,
                         steps_per_exchange=requested, donate=True)  # fmt: skip


class Explicit(Backend):
    """The local kernel with ``lax.ppermute`` halos under ``shard_map``, one program per chunk."""

    name = "explicit"

    def plan(self, problem, u, requested):
        from pgas.references import explicit

        return explicit.plan(u, problem.halo, requested)

    def run(self, problem, u, steps, plan, *, chunk=None, callback=None):
        from pgas.loop import kept
        from pgas.references import explicit

        done, piece = 0, chunk or steps
        try:
            while done < steps:
                n = min(piece, steps - done)
                u = explicit.run(problem.kernel, u, n, problem.halo, problem.region,
                                 steps_per_exchange=plan.steps_per_exchange)  # fmt: skip
                done += n
                if callback is not None:
                    callback(done, u)
        except BaseException as err:  # as pgas.run: the state after the last chunk goes along
            kept.attach(err, lambda state: state, u, done, steps)
            raise
        return u

    def comm(self, problem, u, plan, params=None):
        from pgas.references import explicit

        kernel = problem.kernel
        if params is not None:  # the read-only field's block in the report: its exchange is
            kernel = lambda e, k=kernel: k(e, e)  # noqa: E731 - once per run, not per step
        return explicit.comm_report(kernel, u, problem.halo, problem.region,
                                    steps_per_exchange=plan.steps_per_exchange)  # fmt: skip

    def run_until(self, problem, u, max_steps, requested, check_every, *, params=None,
                  callback=None, gather=False):  # fmt: skip
        from pgas.references import explicit

        return explicit.run_until(problem.kernel, u, problem.local_converged, max_steps,
                                  halo=problem.halo, region=problem.region,
                                  check_every=check_every,
                                  steps_per_exchange=requested, params=params)  # fmt: skip

    def warm_up_steps(self, steps, chunk):
        return min(1, steps)  # one program for every step count (the trip count is traced)


class Mpi(Backend):
    """The kernel on NumPy blocks with mpi4py halos, in this process's rank of ``mpiexec``."""

    name = "mpi"
    launched = True

    def plan(self, problem, u, requested):
        from pgas.references import mpi

        return mpi.plan(problem.shape, problem.halo, mpi.MPI.COMM_WORLD.size, requested)

    def run(self, problem, u, steps, plan, *, chunk=None, callback=None, gather=True):
        """A :class:`pgas.mpi.RunResult` (the ranks build their blocks from ``problem.init``).

        ``gather``: gather the final field to rank 0 (``RunResult.field``).
        """
        from pgas.references import mpi

        return mpi.run(problem.kernel, problem.init, problem.shape, problem.dtype, steps,
                       problem.halo, problem.boundary, problem.region, chunk=chunk,
                       callback=callback, steps_per_exchange=plan.steps_per_exchange,
                       gather=gather, cells_per_value=problem.cells_per_value)  # fmt: skip

    def run_until(self, problem, u, max_steps, requested, check_every, *, params=None,
                  callback=None, gather=False):  # fmt: skip
        from pgas.references import mpi

        return mpi.run_until(problem.kernel, problem.init, problem.shape, problem.dtype,
                             problem.local_converged, max_steps, problem.halo, problem.boundary,
                             problem.region, check_every=check_every,
                             steps_per_exchange=requested, params=problem.params,
                             callback=callback, gather=gather)  # fmt: skip


#: the backends by name, in the order ``pgas compare`` runs them
BACKENDS: dict[str, Backend] = {b.name: b for b in (Auto(), Explicit(), Mpi())}


def get(name: str | Backend) -> Backend:
    """The backend called ``name`` (a :class:`Backend` is returned as it is).

    >>> get("explicit")
    Explicit()
    >>> get("gpu")
    Traceback (most recent call last):
    ...
    pgas.errors.PgasError: backend = 'gpu' is unknown; choose one of auto, explicit, mpi
    """
    if isinstance(name, Backend):
        return name
    try:
        return BACKENDS[name]
    except (KeyError, TypeError):
        raise PgasError(
            f"backend = {name!r} is unknown; choose one of {', '.join(BACKENDS)}"
        ) from None
