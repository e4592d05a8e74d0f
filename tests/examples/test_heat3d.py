import numpy as np
import pytest
from helpers import heat3d_numpy
from stencils import heat3d

import pgas


# (11, 13, 9): uneven blocks on every axis (6/5, 7/6, 5/4); an even shape such as (16, 16, 16)
# takes the same code path, so it is not run as well (each shape compiles its own programs)
@pytest.mark.parametrize("shape", [(11, 13, 9)])
def test_heat3d_2x2x2(shape):
    x0 = np.random.default_rng(7).random(shape).astype(np.float32)
    mesh = pgas.make_mesh(("z", "y", "x"), shape=(2, 2, 2))
    u = pgas.from_numpy(x0, mesh, boundary=pgas.Keep())
    report = pgas.comm_report(heat3d, u, steps_per_exchange=1)
    assert report.gathers == 0 and report.count("all-reduce") == 0
    assert report.count("collective-permute") == 6
    assert report.ratio == 1.0
    deep = pgas.comm_report(heat3d, u, steps_per_exchange=2)  # two steps, one exchange
    assert deep.per_exchange("collective-permute") == 6 and deep.count("collective-permute") == 3
    assert deep.ratio == 1.0 and deep.gathers == 0
    np.testing.assert_array_equal(pgas.run(heat3d, u, 5).to_numpy(), heat3d_numpy(x0, 5))


def test_3d_array_with_replicated_axis_on_2d_mesh():
    x0 = np.random.default_rng(8).random((12, 10, 6))
    mesh = pgas.make_mesh(("y", "x"), shape=(4, 2))
    u = pgas.from_numpy(x0, mesh, spec=("y", None, "x"))
    np.testing.assert_array_equal(pgas.run(heat3d, u, 3).to_numpy(), heat3d_numpy(x0, 3))
    report = pgas.comm_report(heat3d, u)
    assert report.gathers == 0 and report.per_exchange("collective-permute") == 4
