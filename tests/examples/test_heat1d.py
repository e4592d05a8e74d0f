"""1-D heat: bitwise against NumPy, ideal halo traffic, every form a user writes."""

import numpy as np
import pytest
from helpers import heat_numpy
from stencils import heat

import pgas


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_heat_2pow20_on_8_devices(dtype):
    x0 = np.random.default_rng(0).random(2**20).astype(dtype)
    u = pgas.from_numpy(x0, pgas.make_mesh(("x",)), boundary=pgas.Keep())
    report = pgas.comm_report(heat, u, steps_per_exchange=1)
    assert report.count("all-gather") == 0
    assert report.count("all-to-all") == 0
    assert report.count("all-reduce") == 0
    assert report.count("collective-permute") == 2
    assert report.bytes("collective-permute") == report.ideal_bytes == 2 * np.dtype(dtype).itemsize
    assert report.ratio == 1.0
    deep = pgas.comm_report(heat, u)  # auto: k steps per exchange of a k-wide halo
    k = deep.steps_per_exchange
    assert k > 1 and deep.per_exchange("collective-permute") == 2
    assert deep.count("collective-permute") == 2 / k and deep.gathers == 0
    assert deep.bytes("collective-permute") == deep.ideal_bytes == 2 * np.dtype(dtype).itemsize
    if dtype == np.float32:  # the run of blocks past 2**16 (float64 runs: test_heat_physics.py)
        # k = 2, of auto's parity: auto's 16 (the k above) is more than the 10 steps, a group
        # compiled and never run
        out = pgas.run(heat, u, steps=10, steps_per_exchange=2).to_numpy()
        np.testing.assert_array_equal(out, heat_numpy(x0, 10))


# 1026 cells on 8 devices (blocks of 128 and 129, k = 16: 25 steps are one group and 9 single
# steps; 1_000_003 cells, blocks past 2**16, ran the same code with k = 16 and only single
# steps, and test_heat_2pow20_on_8_devices runs blocks that large), 17 cells on 8 (blocks of 2
# and 3, k = 2), 5 on one device (k = 5). (1026 cells on 3 devices, 342 each, ran the first
# case's code with even blocks: test_functional_forms_agree runs even blocks.)
@pytest.mark.parametrize("n, devices", [(1026, 8), (17, 8), (5, 1)])
def test_uneven_sizes_bitwise(n, devices):
    x0 = np.random.default_rng(n).random(n).astype(np.float32)
    u = pgas.from_numpy(x0, pgas.make_mesh(("x",), devices=devices))
    steps = 25
    np.testing.assert_array_equal(pgas.run(heat, u, steps).to_numpy(), heat_numpy(x0, steps))
    report = pgas.comm_report(heat, pgas.from_numpy(x0, pgas.make_mesh(("x",), devices=devices)))
    assert report.gathers == 0 and report.ratio == 1.0


def test_loop_program_has_halo_permutes_in_body():
    u = pgas.from_numpy(np.zeros(4096, np.float32), pgas.make_mesh(("x",)))
    report = pgas.comm_report(heat, u, loop=True, steps_per_exchange=1)
    assert report.count("collective-permute") == 2 and report.gathers == 0
    assert report.bytes("collective-permute") == 8
    deep = pgas.comm_report(heat, u, loop=True, steps_per_exchange=4)
    assert deep.per_exchange("collective-permute") == 2 and deep.gathers == 0
    assert deep.count("collective-permute") == 0.5 and deep.bytes("collective-permute") == 8


def test_functional_forms_agree():
    x0 = np.random.default_rng(1).random(32).astype(np.float32)  # even blocks of 4 cells
    mesh = pgas.make_mesh(("x",))

    def at_set(u):
        return u.at[1:-1].set(0.5 * u[1:-1] + 0.25 * (u[:-2] + u[2:]))

    def returned_expression(u):  # whole-array form with the Keep boundary holding the edges
        return 0.5 * u + 0.25 * (pgas.shift(u, 1) + pgas.shift(u, -1))

    expected = heat_numpy(x0, 7)
    for step in (at_set, returned_expression):
        u = pgas.from_numpy(x0, mesh, boundary=pgas.Keep())
        np.testing.assert_array_equal(pgas.run(step, u, 7).to_numpy(), expected)
        report = pgas.comm_report(step, pgas.from_numpy(x0, mesh, boundary=pgas.Keep()))
        assert report.gathers == 0 and report.ratio == 1.0


def test_eager_assignment_outside_jit():
    x0 = np.arange(10.0, dtype=np.float32) ** 2
    u = pgas.from_numpy(x0, pgas.make_mesh(("x",), devices=4))
    heat(u)
    np.testing.assert_array_equal(u.to_numpy(), heat_numpy(x0, 1))


def test_fourth_order_stencil_halo_2():
    x0 = np.random.default_rng(2).random(35)  # blocks of 4 and 5 cells
    u = pgas.from_numpy(x0, pgas.make_mesh(("x",)), halo=2)

    def step(u):
        u[2:-2] = 0.5 * u[2:-2] + 0.125 * (u[1:-3] + u[3:-1]) + 0.125 * (u[:-4] + u[4:])
        return u

    ref = x0.copy()
    for _ in range(5):
        ref[2:-2] = 0.5 * ref[2:-2] + 0.125 * (ref[1:-3] + ref[3:-1]) + 0.125 * (ref[:-4] + ref[4:])
    np.testing.assert_array_equal(pgas.run(step, u, 5).to_numpy(), ref)
    report = pgas.comm_report(step, pgas.from_numpy(x0, pgas.make_mesh(("x",)), halo=2),
                              steps_per_exchange=1)  # fmt: skip
    assert report.count("collective-permute") == 2 and report.ideal_bytes == 2 * 2 * 8
    assert report.ratio == 1.0


def test_shardy_annotations_on_request():
    u = pgas.from_numpy(np.zeros(64, np.float32), pgas.make_mesh(("x",)))
    text = pgas.comm_report(heat, u, shardy=True).stablehlo
    assert "sdy.mesh" in text and "sdy.sharding" in text
    assert "ratio 1.00" in str(pgas.comm_report(heat, u))
