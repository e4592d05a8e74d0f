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

One module per concept:

- :mod:`~pgas.references.explicit.exchange`: :func:`exchange_halo`, the halo
  by ``ppermute``, and what a halo means for a layout;
- :mod:`~pgas.references.explicit.update`: ``k`` kernel steps on one
  exchange, :func:`choose` and :func:`plan` (``k``), :func:`step` and
  :func:`comm_report`;
- :mod:`~pgas.references.explicit.params`: the ``params`` of every program;
- :mod:`~pgas.references.explicit.checks`: ``reduce`` and the check loop of
  ``run_until``;
- :mod:`~pgas.references.explicit.state`: state dicts (several fields and
  scalars, reductions inside the step);
- :mod:`~pgas.references.explicit.loop`: :func:`run` (a fixed number of
  steps, :func:`program`);
- :mod:`~pgas.references.explicit.until`: :func:`run_until` (until a test
  holds, :func:`until_program`).
"""

from pgas.references.explicit.exchange import Halo as Halo
from pgas.references.explicit.exchange import Kernel as Kernel
from pgas.references.explicit.exchange import Sides as Sides
from pgas.references.explicit.exchange import exchange_halo
from pgas.references.explicit.loop import program, region_key, run
from pgas.references.explicit.state import state_program as state_program
from pgas.references.explicit.state import state_until_program as state_until_program
from pgas.references.explicit.until import run_until, until_program
from pgas.references.explicit.update import choose, comm_report, plan, step

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
