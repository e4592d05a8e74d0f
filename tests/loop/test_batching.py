"""The batching rule of linear_call (pgas.loop.batching): a vmap through a transposed loop."""

import jax
import jax.interpreters.batching
import jax.numpy as jnp
import numpy as np
import pytest

import pgas
from pgas.loop.batching import batched_linear_call, linear_call_primitive


def _scaled(x):
    """``3 x`` as a linear_call, its transpose ``3 ct``: a toy transposed loop."""
    return jax.custom_derivatives.linear_call(lambda r, v: 3 * v, lambda r, c: 3 * c, (), x)


def test_the_rule_is_registered_and_batches_a_linear_call(monkeypatch):
    """Without it JAX refuses a vmap of a linear_call; with it the batch is the loop over
    the values, in forward and reverse mode."""
    rules = jax.interpreters.batching.fancy_primitive_batchers
    assert rules[linear_call_primitive()] is batched_linear_call
    xs = jnp.array([1.0, -2.0, 0.5])
    monkeypatch.delitem(rules, linear_call_primitive())
    with pytest.raises(NotImplementedError, match="'linear_call' not implemented"):
        jax.vmap(_scaled)(xs)
    monkeypatch.undo()
    np.testing.assert_array_equal(jax.vmap(_scaled)(xs), 3 * xs)
    np.testing.assert_array_equal(jax.vmap(jax.grad(_scaled))(xs), [3.0, 3.0, 3.0])
    batched = jax.vmap(_scaled, in_axes=1, out_axes=1)(jnp.ones((2, 3)))
    np.testing.assert_array_equal(batched, 3 * np.ones((2, 3)))


def test_vmap_and_grad_compose_with_the_transposed_loop():
    """A vmap of a (jitted) gradient runs the transposed loop batched, through pgas's
    batching rule for linear_call; a gradient of a vmap transposes the derivative's loop
    instead. Both give the numbers of a loop over the values."""
    mesh = pgas.make_mesh(("x",), devices=2)
    u = pgas.from_numpy(np.random.default_rng(10).random(30), mesh, boundary=pgas.Keep())

    def step(u, c):
        u[1:-1] = (1 - 2 * c) * u[1:-1] + c * (u[:-2] + u[2:])
        return u

    def loss(u, c):
        return pgas.sum(pgas.run(step, u, 7, params=c) ** 2)

    cs = jnp.array([0.05, 0.2])
    grad = jax.jit(jax.grad(loss))
    each = np.stack([grad(u, c).to_numpy() for c in cs])
    np.testing.assert_allclose(jax.jit(jax.vmap(lambda c: grad(u, c).data))(cs), each,
                               rtol=1e-12)  # fmt: skip
    total = jax.jit(jax.grad(lambda u: jax.vmap(lambda c: loss(u, c))(cs).sum()))(u)
    np.testing.assert_allclose(total.to_numpy(), each.sum(0), rtol=1e-12)
