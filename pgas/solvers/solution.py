"""What a solve returns: the solution and how the iteration ended, as a pytree.

A :class:`Solution` crosses ``jax.jit`` like any result: inside a trace its
counts are traced arrays, outside they are concrete (read them with ``int`` and
``bool``).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax

__all__ = ["Solution"]


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class Solution:
    """A solve's result (unpacks as ``x, iterations``, as :func:`pgas.run_until`'s).

    Attributes:
        x: the solution, a :class:`pgas.GlobalArray` of the right-hand side's layout.
        iterations: iterations (CG) or cycles (multigrid) run.
        converged: whether the relative residual fell to ``tol`` within the limit.
        residual: the relative residual ``||b - A x|| / ||b||`` at the end (over the
            unknowns: the edge cells of ``Keep`` faces hold boundary values, not unknowns).

    >>> import jax.numpy as jnp
    >>> s = Solution(jnp.zeros(2), jnp.asarray(3), jnp.asarray(True), jnp.asarray(1e-9))
    >>> x, iterations = s
    >>> int(iterations), bool(s.converged)
    (3, True)
    """

    x: Any
    iterations: Any
    converged: Any
    residual: Any

    def __iter__(self):
        return iter((self.x, self.iterations))
