"""The explicit MPI path: NumPy blocks, ``Sendrecv`` halo exchange, mpi4py.

This is the reference every other backend is checked against, written the way
MPI stencil codes are written today (ImplicitGlobalGrid.jl's ``update_halo!``
is the model). Run a script that uses it with ``mpiexec -n P python script.py``.

One module per concept:

- :mod:`pgas.mpi.world`: the MPI library, :func:`abort_on_error`, and the
  launcher checks (:func:`launched`, :func:`require_launcher`,
  :func:`check_world`: ``mpiexec`` and mpi4py's library must agree);
- :mod:`pgas.mpi.grid`: :class:`CartGrid`, which block each rank holds;
- :mod:`pgas.mpi.exchange`: :func:`exchange_halo` (``Sendrecv`` of ghost slabs);
- :mod:`pgas.mpi.collectives`: :func:`allreduce`, :func:`gather`;
- :mod:`pgas.mpi.block`: this rank's block with its ghost rim and the
  deep-halo sub-steps, :func:`plan` (``k``);
- :mod:`pgas.mpi.result`: :class:`RunResult`, what every run returns;
- :mod:`pgas.mpi.loop`: :func:`run`, the time loop with deep halos
  (``steps_per_exchange``), bitwise equal to a single-process NumPy loop for
  any rank count;
- :mod:`pgas.mpi.checks`: ``reduce`` over all ranks and the loop of steps and
  checks;
- :mod:`pgas.mpi.until`: :func:`run_until`, the same loop until a test holds
  (one ``Allreduce`` per reduction in each check);
- :mod:`pgas.mpi.state`: state dicts (several fields and scalars, reductions
  inside the step) for both;
- :mod:`pgas.mpi.params`: the ``params`` of both (scalars, read-only fields
  exchanged once per run).
"""

from pgas.references.mpi.collectives import allreduce, gather
from pgas.references.mpi.exchange import MessageCounter, exchange_halo
from pgas.references.mpi.grid import CartGrid, cart_grid, fill_local, local_coordinates  # noqa: I001, E501 - after MPI
from pgas.references.mpi.loop import RunResult, plan, run
from pgas.references.mpi.until import run_until
from pgas.references.mpi.world import MPI, abort_on_error, check_world, launched, require_launcher

__all__ = [
    "MPI",
    "CartGrid",
    "MessageCounter",
    "RunResult",
    "abort_on_error",
    "allreduce",
    "cart_grid",
    "check_world",
    "exchange_halo",
    "gather",
    "launched",
    "fill_local",
    "local_coordinates",
    "plan",
    "require_launcher",
    "run",
    "run_until",
]
