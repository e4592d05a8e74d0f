"""The explicit ppermute path: bitwise equal to the automatic path, same collectives."""

import numpy as np
import pytest
from helpers import heat_numpy, life_numpy
from problems import heat_kernel, heat_step, life_kernel, life_step

import pgas
from pgas.references import explicit

HEAT_REGION = (slice(1, -1),)


@pytest.mark.parametrize("devices", [1, 2, 3, 4, 8])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_heat_explicit_equals_numpy(devices, dtype):
    x0 = np.random.default_rng(devices).random(1003).astype(dtype)
    u = pgas.from_numpy(x0, pgas.make_mesh(("x",), devices=devices), boundary=pgas.Keep())
    out = explicit.run(heat_kernel, u, 11, halo=1, region=HEAT_REGION).to_numpy()
    np.testing.assert_array_equal(out, heat_numpy(x0, 11))


@pytest.mark.parametrize("mesh_shape", [(2, 4), (1, 2), (2, 1), (1, 1), (3, 2)])
def test_life_explicit_equals_numpy(mesh_shape):
    b0 = (np.random.default_rng(2).random((37, 53)) < 0.4).astype(np.uint8)
    mesh = pgas.make_mesh(("y", "x"), shape=mesh_shape, devices=int(np.prod(mesh_shape)))
    g = pgas.from_numpy(b0, mesh, boundary=pgas.Periodic())
    np.testing.assert_array_equal(explicit.run(life_kernel, g, 8).to_numpy(), life_numpy(b0, 8))


def _same_collectives(auto, expl):
    assert auto.count("collective-permute") == expl.count("collective-permute")
    assert auto.bytes("collective-permute") == expl.bytes("collective-permute")
    assert auto.gathers == expl.gathers == 0
    assert auto.ratio == expl.ratio == 1.0


def test_heat_same_hlo_collectives_as_auto():
    u = pgas.from_numpy(np.zeros(2**16, np.float32), pgas.make_mesh(("x",)), boundary=pgas.Keep())
    auto = pgas.comm_report(heat_step, u, steps_per_exchange=1)
    expl = explicit.comm_report(heat_kernel, u, 1, HEAT_REGION, steps_per_exchange=1)
    _same_collectives(auto, expl)
    assert expl.count("collective-permute") == 2 and expl.bytes() == 8


def test_life_same_hlo_collectives_as_auto():
    g = pgas.from_numpy(np.zeros((512, 512), np.uint8), pgas.make_mesh(("y", "x"), shape=(2, 4)))
    auto = pgas.comm_report(life_step, g, steps_per_exchange=1)
    expl = explicit.comm_report(life_kernel, g, steps_per_exchange=1)
    _same_collectives(auto, expl)
    assert expl.count("collective-permute") == 4


def test_exchange_halo_boundaries():
    x = np.arange(10.0)
    mesh = pgas.make_mesh(("x",), devices=3)
    for bc, left, right in [(pgas.Dirichlet(-1.0), [-1.0, -1.0], [-1.0, -1.0]),
                            (pgas.Neumann(), [1.0, 0.0], [9.0, 8.0]),
                            (pgas.Periodic(), [8.0, 9.0], [0.0, 1.0])]:  # fmt: skip
        u = pgas.from_numpy(x, mesh, boundary=bc)
        ext = explicit.step(lambda e: e[2:-2] * 0 + e[:-4], u, halo=2)  # reads 2 to the left
        assert ext.to_numpy()[:2].tolist() == left
        u = pgas.from_numpy(x, mesh, boundary=bc)
        ext = explicit.step(lambda e: e[4:], u, halo=2)  # reads 2 to the right
        assert ext.to_numpy()[-2:].tolist() == right


def test_explicit_errors():
    u = pgas.from_numpy(np.zeros(16, np.float32), pgas.make_mesh(("x",)))
    with pytest.raises(pgas.HaloError, match="wider than the smallest local block"):
        explicit.step(heat_kernel, u, halo=3)
    with pytest.raises(pgas.HaloError, match="kernel returned shape"):
        explicit.step(lambda e: e, u, halo=1)
    with pytest.raises(pgas.DTypeMismatchError, match="astype"):
        g = pgas.from_numpy(np.zeros((8, 8), np.uint8), pgas.make_mesh(("y", "x"), devices=4))
        explicit.step(lambda e: 0.5 * e[1:-1, 1:-1], g)
