"""pgas.sum(..., reproducible=True): the same bits on every mesh, equal to the pre-rounded sum
written in NumPy here (tests/helpers.py), within a tight bound of math.fsum; its HLO."""

from __future__ import annotations

import math

import jax
import numpy as np
import pytest
from helpers import reprosum_numpy

import pgas
from pgas.references import explicit

MESHES = [(3, (1, 3)), (4, (2, 2))]  # an uneven split and a 2-D mesh (1 device: the 1-D test)


def values(shape, dtype, seed=0):
    """Signs and magnitudes mixed (a plain sum's bits depend on its order)."""
    rng = np.random.default_rng(seed)
    a = rng.standard_normal(shape) * 10.0 ** rng.integers(-6, 6, size=shape)
    return a.astype(dtype)


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_same_bits_on_every_mesh_as_numpy_and_close_to_fsum(dtype):
    a, b = values((15, 13), dtype), values((15, 13), dtype, 1)
    want = reprosum_numpy(a, a.size)
    products = reprosum_numpy(a * b, a.size)  # rounded products, as NumPy: no FMA with sigma
    window = reprosum_numpy(a[1:-1, 2:] - a[:-2, :-2], a.size)

    def sums(u, v):  # under jax.jit, as in a loop: one program per mesh (eagerly, ~16 a sum)
        return (pgas.sum(u, reproducible=True), pgas.sum(u * v, reproducible=True),
                pgas.sum(u[1:-1, 2:] - u[:-2, :-2], reproducible=True))  # fmt: skip

    for devices, shape in MESHES:
        mesh = pgas.make_mesh(("y", "x"), shape=shape, devices=devices)
        got, prod, win = jax.jit(sums)(pgas.from_numpy(a, mesh), pgas.from_numpy(b, mesh))
        assert got.dtype == np.dtype(dtype) and got.tobytes() == np.asarray(want).tobytes()
        assert prod == products
        assert win == window
    exact = math.fsum(a.astype(np.float64).ravel())
    p = np.finfo(dtype).nmant + 1
    e = math.frexp(float(np.abs(a).max()))[1]
    folds, level = (2, 8) if dtype == "float64" else (3, 8)  # 195 cells: L = 8
    bound = a.size * 2.0 ** (e - folds * (p - level)) + 2 * folds * abs(exact) * 2.0**-p
    assert abs(float(want) - exact) <= bound


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_1d_uneven_and_any_order_gives_one_result(dtype):
    a = values(101, dtype, 2)
    want = reprosum_numpy(a, a.size)
    perm = np.random.default_rng(3).permutation(a.size)
    for devices in (1, 3):  # one block, and uneven ones (34, 34, 33)
        mesh = pgas.make_mesh(("x",), devices=devices)
        assert pgas.sum(pgas.from_numpy(a, mesh), reproducible=True) == want
        assert pgas.sum(pgas.from_numpy(a[perm], mesh), reproducible=True) == want


def test_zeros_infinities_nans_huge_values_and_integers():
    mesh = pgas.make_mesh(("x",), devices=3)

    def rsum(a):
        return float(pgas.sum(pgas.from_numpy(np.asarray(a), mesh), reproducible=True))

    assert rsum(np.zeros(7)) == 0.0
    assert rsum([1.0, np.inf, 2.0, -3.0]) == np.inf
    assert rsum([1.0, -np.inf, 2.0]) == -np.inf
    assert np.isnan(rsum([np.inf, 1.0, -np.inf])) and np.isnan(rsum([1.0, np.nan, 2.0]))
    assert rsum([1e308, 1e308, -1e308, 0.5]) == 1e308  # scaled by a power of two: exact
    assert rsum([1e16, 1.0, -1e16, 1.0]) == 2.0  # a plain left-to-right sum gives 0.0
    ints = pgas.from_numpy(np.arange(10, dtype=np.int32), mesh)
    assert int(pgas.sum(ints, reproducible=True)) == 45


def test_hlo_two_scalar_all_reduces_and_no_all_gather():
    mesh = pgas.make_mesh(("y", "x"), shape=(2, 2), devices=4)
    u = pgas.from_numpy(values((15, 13), "float64"), mesh)
    for reproducible, count in [(False, 1), (True, 2)]:
        hlo = jax.jit(lambda v, r=reproducible: pgas.sum(v * v, reproducible=r)).lower(u)
        text = hlo.compile().as_text()
        reduces = [ln for ln in text.splitlines() if " all-reduce(" in ln]
        assert len(reduces) == count and " all-gather(" not in text
        assert all("f64[]" in ln or "f64[3]" in ln for ln in reduces), reduces  # max, 2+1 lanes


def test_the_lanes_are_one_reduction():
    """Each lane's sum is the same in any order (a fold's is exact, the non-finite values'
    is inf, -inf or nan), so the folds and the non-finite lane share one pass over the block
    (a variadic reduce) after the max's (the bits of both: the tests above)."""
    mesh = pgas.make_mesh(("y", "x"), shape=(2, 2), devices=4)
    u = pgas.from_numpy(values((15, 13), "float64"), mesh)
    jaxpr = jax.make_jaxpr(lambda v: pgas.sum(v * v, reproducible=True))(u).jaxpr
    seen = []

    def walk(j) -> None:
        for e in j.eqns:
            shapes = [v.aval.shape for v in e.invars if hasattr(v.aval, "shape")]
            seen.append((e.primitive.name, len(e.outvars), shapes[0] if shapes else ()))
            for param in e.params.values():
                for sub in param if isinstance(param, (list, tuple)) else [param]:
                    sub = getattr(sub, "jaxpr", sub)
                    if hasattr(sub, "eqns"):
                        walk(sub)

    walk(jaxpr)
    block = [r for r in seen if r[0].startswith("reduce") and len(r[2]) == 2]
    assert sorted((name, outs) for name, outs, _ in block) == [("reduce", 3), ("reduce_max", 1)]


def test_the_gradient_of_a_reproducible_sum_is_the_plain_sums():
    mesh = pgas.make_mesh(("y", "x"), shape=(2, 2), devices=4)
    a = values((15, 13), "float64")
    u = pgas.from_numpy(a, mesh)
    for reproducible in (True, False):  # the max that places the folds has no derivative
        g = jax.jit(jax.grad(lambda v, r=reproducible: pgas.sum(v * v, reproducible=r)))(u)
        np.testing.assert_array_equal(g.to_numpy(), 2 * a)


@pytest.mark.parametrize("call, match", [
    (lambda u: pgas.min(u, reproducible=True), "reproducible=True with 'min'"),
    (lambda u: pgas.max(u, reproducible=True), "reproducible=True with 'max'"),
    (lambda u: pgas.sum(u, reproducible="yes"), "reproducible = 'yes': give True or False"),
])  # fmt: skip
def test_bad_inputs(call, match):
    u = pgas.from_numpy(np.ones(4), pgas.make_mesh(("x",), devices=1))
    with pytest.raises(pgas.PgasError, match=match):
        call(u)


def test_a_float32_grid_too_large_for_the_folds_is_refused():
    from pgas.globalview import reprosum

    with pytest.raises(pgas.PgasError, match="grid of 8388608 cells in float32.*sum in float64"):
        reprosum.total(np.ones(3, np.float32), size=2**23)
    assert reprosum.total(np.ones(3, np.float32), size=2**22) == 3


def test_local_view_reduce_refuses_a_reproducible_max():
    u = pgas.from_numpy(np.ones(4), pgas.make_mesh(("x",), devices=1))

    def test(e, reduce):
        return reduce(e[1:-1], "max", reproducible=True) < 0

    with pytest.raises(pgas.PgasError, match="reproducible=True with 'max'"):
        explicit.run_until(lambda e: e[1:-1], u, test, 2)
