"""A batching rule for ``linear_call``, which JAX lacks: ``vmap`` through a transposed loop.

Contract: importing this module registers :func:`batched_linear_call` as the
batching rule of the primitive :func:`jax.custom_derivatives.linear_call`
binds (:func:`linear_call_primitive`), unless JAX has one already. The
derivative of a loop inside JAX (:mod:`pgas.loop.derivative`) makes the
transposed loop a ``linear_call``'s transpose; without this rule a ``vmap`` of
a gradient through it fails (``NotImplementedError: Batching rule for
'linear_call' not implemented``). A batched ``linear_call`` runs its callee,
a linear function JAX transposes itself: the numbers of a loop over the batch.
"""

from __future__ import annotations

import jax
import jax.extend.core
import jax.interpreters.batching

__all__ = ["batched_linear_call", "linear_call_primitive"]


def batched_linear_call(axis_data, args, dims, *, callee, **_):
    """Batching rule of ``linear_call``, which JAX lacks: a batched ``linear_call`` runs its
    callee, a linear function that JAX transposes itself.

    A ``jax.vmap`` of a gradient batches the transposed loop's ``linear_call`` (its
    callee is the transposed loop), which then runs batched. A gradient of a ``vmap``
    batches the forward's tangent, which JAX then transposes itself (the derivative's
    loop). Either way the numbers are those of a loop over the batch.

    >>> import jax, jax.numpy as jnp
    >>> double = lambda x: jax.custom_derivatives.linear_call(
    ...     lambda r, v: 2 * v, lambda r, c: 2 * c, (), x)
    >>> jax.vmap(double)(jnp.arange(3.0)).tolist()
    [0.0, 2.0, 4.0]
    """
    outs = jax.vmap(jax.extend.core.jaxpr_as_fun(callee), in_axes=list(dims),
                    axis_size=axis_data.size, axis_name=axis_data.name,
                    spmd_axis_name=axis_data.spmd_name)(*args)  # fmt: skip
    return outs, [0] * len(outs)


def linear_call_primitive():
    """The primitive :func:`jax.custom_derivatives.linear_call` binds (found by tracing one).

    >>> linear_call_primitive().name
    'linear_call'
    """
    call = lambda x: jax.custom_derivatives.linear_call(lambda r, v: v, lambda r, c: c, (), x)  # noqa: E731
    return jax.make_jaxpr(call)(0.0).eqns[0].primitive


jax.interpreters.batching.fancy_primitive_batchers.setdefault(
    linear_call_primitive(), batched_linear_call
)
