"""What an MPI run returns: :class:`RunResult`, the same record from every entry point.

Contract: :func:`pgas.mpi.run` and :func:`pgas.mpi.run_until` (on a field or a
state dict) return a frozen :class:`RunResult`: the gathered field on rank 0,
the seconds of the time loop (max over ranks), the messages and bytes sent per
physical step (in total and per rank), the layout, the snapshots, ``k`` and,
from ``run_until``, whether and where it converged.
"""

from __future__ import annotations

import dataclasses

import numpy as np

__all__ = ["RunResult"]


@dataclasses.dataclass(frozen=True)
class RunResult:
    """What :func:`run` returns.

    Attributes:
        field: the final global field on rank 0 (``None`` elsewhere, and everywhere
            when :func:`run` was called with ``gather=False``); for a state dict, a
            dict of each gathered field and each scalar.
        seconds: wall time of the time loop (between barriers; no set-up, no gather).
        steps: time steps run.
        messages_per_step: messages sent per physical step (total / steps),
            summed over ranks.
        bytes_per_step: bytes sent per physical step, summed over ranks.
        rank_messages_per_step: messages sent per physical step by each rank.
        rank_bytes_per_step: bytes sent per physical step by each rank.
        grid: description of the layout (:meth:`CartGrid.describe`).
        dims: ranks per axis.
        snapshots: with ``snapshot_every=k``, the global field at steps
            ``0, k, 2k, ..., steps`` stacked on a leading axis, on rank 0 only
            (``None`` elsewhere and without ``snapshot_every``).
        snapshot_steps: the step number of each snapshot (every rank).
        steps_per_exchange: ``k``, physical steps per halo exchange.
        note: why ``k`` is lower than requested (blocks too small), else ``""``.
        wall_seconds: wall time of the time loop as the caller waited for it,
            snapshot gathers and callbacks included (``seconds`` leaves them out).
        converged: from :func:`pgas.mpi.run_until`: whether ``converged`` held at
            the last check (``None`` from :func:`run`).
        check_every: from :func:`pgas.mpi.run_until`: steps between checks.
        allreduces: ``Allreduce`` calls of this rank (one per reduction, two per
            reproducible sum): the checks of :func:`pgas.mpi.run_until` and the
            reductions of a state dict's kernel.
        finite: from :func:`pgas.mpi.run_until`: ``False`` where it stopped at a
            check whose reductions (or a float scalar of a state dict) were NaN or
            infinite, as :func:`pgas.run_until` stops (``None`` from :func:`run`).
    """

    field: np.ndarray | None
    seconds: float
    steps: int
    messages_per_step: float
    bytes_per_step: float
    rank_messages_per_step: tuple[float, ...]
    rank_bytes_per_step: tuple[float, ...]
    grid: str
    dims: tuple[int, ...]
    snapshots: np.ndarray | None = dataclasses.field(default=None, repr=False)
    snapshot_steps: tuple[int, ...] = ()
    steps_per_exchange: int = 1
    note: str = ""
    wall_seconds: float = float("nan")
    converged: bool | None = None
    check_every: int | None = None
    allreduces: int = 0
    finite: bool | None = None
