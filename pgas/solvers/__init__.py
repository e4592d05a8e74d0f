"""Linear solvers in the global view: conjugate gradients and geometric multigrid.

Written with pgas's own arrays and loops: every iteration is global-view code
(halo-aware slices, strided slices between multigrid levels, reductions), the
iterations one compiled :func:`pgas.run_until` loop. Each solve returns a
:class:`Solution` (the field, the iterations, whether it converged, the
relative residual), is differentiable by implicit differentiation (one more
solve, never a trip back through the iterations), and runs inside ``jax.jit``
and inside a step of :func:`pgas.run` or :func:`pgas.run_until`.

- :func:`cg`: (preconditioned) conjugate gradients for any symmetric positive
  definite operator written as a function of fields;
- :class:`Poisson`: ``-div(a grad u)`` (5-point in 2-D, 7-point in 3-D) with
  ``Keep`` (Dirichlet), ``Neumann`` or ``Periodic`` faces, a constant or a
  variable coefficient; :func:`multigrid` solves it by V-cycles or full
  multigrid, and ``Poisson.vcycle`` preconditions :func:`cg`.

>>> import numpy as np, pgas
>>> n = 5
>>> b = pgas.from_numpy(np.ones((n, n)), pgas.make_mesh(devices=1), boundary=pgas.Keep())
>>> op = pgas.solvers.Poisson(h=1 / (n - 1))
>>> mg = pgas.solvers.multigrid(op, b, tol=1e-10)
>>> pcg = pgas.solvers.cg(op, b, M=op.vcycle, tol=1e-10)
>>> bool(abs(mg.x.to_numpy() - pcg.x.to_numpy()).max() < 1e-9)
True
"""

from pgas.solvers.krylov import cg
from pgas.solvers.multigrid import multigrid
from pgas.solvers.poisson_operator import Poisson
from pgas.solvers.solution import Solution

__all__ = ["cg", "multigrid", "Poisson", "Solution"]
