"""Multigrid transfers against NumPy (tests/poisson_numpy.py), per grid kind, on uneven
meshes; restriction is prolongation's transpose over 2 per axis; never an all-gather."""

import re

import jax
import numpy as np
import poisson_numpy as ref
import pytest

import pgas
from pgas.solvers import transfer

COLLECTIVE = re.compile(r"= (\S+) (collective-permute|all-gather|all-reduce|all-to-all)\(")
FACES = {"keep": pgas.Keep(), "periodic": pgas.Periodic(), "neumann": pgas.Neumann()}


def field(a, kinds, devices, spec=("y", "x")):
    mesh = pgas.make_mesh(spec[: a.ndim], devices=devices)
    return pgas.from_numpy(a, mesh, boundary=tuple(FACES[k] for k in kinds))


@pytest.mark.parametrize("kinds, shape, devices", [
    (("keep", "periodic"), (17, 12), 3),       # uneven blocks on the first axis
    (("neumann", "keep"), (12, 9), 4),         # a 2x2 mesh
])  # fmt: skip
def test_restrict_and_prolong_match_numpy_and_are_transposes(kinds, shape, devices):
    rng = np.random.default_rng(1)
    f = rng.random(shape)
    f[ref.unknowns(kinds)] += 0  # the unknowns carry data, the Keep edges zeros:
    edges = np.ones(shape, bool)
    edges[ref.unknowns(kinds)] = False
    f[edges] = 0.0
    coarse_shape = tuple((n - 1) // 2 + 1 if k == "keep" else n // 2 for k, n in zip(kinds, shape))
    c = rng.random(coarse_shape)
    c_edges = np.ones(coarse_shape, bool)
    c_edges[ref.unknowns(kinds)] = False
    c[c_edges] = 0.0

    got_r = jax.jit(transfer.restrict)(field(f, kinds, devices))
    got_p = jax.jit(transfer.prolong, static_argnums=1)(
        field(c, kinds, devices), field(f, kinds, devices).layout
    )
    want_r, want_p = f, c
    for axis, k in enumerate(kinds):
        want_r = ref.restrict_axis(want_r, axis, k)
        want_p = ref.prolong_axis(want_p, axis, k, shape[axis])
    np.testing.assert_allclose(got_r.to_numpy(), want_r, rtol=1e-14, atol=1e-15)
    np.testing.assert_allclose(got_p.to_numpy(), want_p, rtol=1e-14, atol=1e-15)
    # <R f, c> = <f, P c> / 2**d over the unknowns
    lhs = (want_r * c)[ref.unknowns(kinds)].sum()
    rhs = (f * want_p)[ref.unknowns(kinds)].sum() / 2 ** len(shape)
    assert lhs == pytest.approx(rhs, rel=1e-12)


def test_hierarchy_halves_while_every_device_keeps_two_cells():
    mesh = pgas.make_mesh(("y", "x"), devices=4)  # 2x2
    keep = pgas.zeros((65, 65), mesh, boundary=pgas.Keep()).layout
    assert [lay.shape for lay in transfer.hierarchy(keep)] == [
        (65, 65),
        (33, 33),
        (17, 17),
        (9, 9),
        (5, 5),
    ]  # 3 cells would leave a device 1
    assert len(transfer.hierarchy(keep, 2)) == 2
    odd = pgas.zeros((12, 10), mesh, boundary=pgas.Periodic()).layout
    assert [lay.shape for lay in transfer.hierarchy(odd)] == [(12, 10), (6, 5)]  # 5 is odd
    one = pgas.zeros((9,), pgas.make_mesh(("x",), devices=8), boundary=pgas.Keep()).layout
    assert [lay.shape for lay in transfer.hierarchy(one)] == [(9,)]  # 5 cells on 8 devices


def test_transfers_send_halo_sized_permutes_and_never_gather():
    mesh = pgas.make_mesh(("y", "x"), devices=4)
    f = pgas.zeros((33, 33), mesh, boundary=pgas.Keep())
    c = pgas.zeros((17, 17), mesh, boundary=pgas.Keep())
    for text in (
        jax.jit(transfer.restrict).lower(f).compile().as_text(),
        jax.jit(lambda c: transfer.prolong(c, f.layout)).lower(c).compile().as_text(),
    ):
        assert "all-gather" not in text and "all-to-all" not in text
        shapes = COLLECTIVE.findall(text)
        assert shapes and {kind for _, kind in shapes} == {"collective-permute"}
        for shape, _ in shapes:  # per device a block is 17 x 17 (fine) or 9 x 9 (coarse)
            dims = [int(d) for d in re.findall(r"\d+", shape.split("[")[1])]
            assert min(dims) <= 2, f"a permute of {shape}: more than a halo"
