import pytest

import pgas


def test_make_mesh_default_and_shape():
    assert dict(pgas.make_mesh(("x",)).shape) == {"x": 8}
    assert dict(pgas.make_mesh(("y", "x")).shape) == {"y": 4, "x": 2}
    assert dict(pgas.make_mesh(("y", "x"), shape=(2, 4)).shape) == {"y": 2, "x": 4}
    assert dict(pgas.make_mesh(("z", "y", "x"), devices=8).shape) == {"z": 2, "y": 2, "x": 2}
    assert pgas.make_mesh(("x",), devices=3).size == 3


def test_too_many_devices():
    with pytest.raises(pgas.DeviceCountError, match="devices = 9, but only 8"):
        pgas.make_mesh(("x",), devices=9)


def test_bad_shape_and_names():
    with pytest.raises(pgas.MeshError, match="shape = \\(3, 2\\)"):
        pgas.make_mesh(("y", "x"), shape=(3, 2))
    with pytest.raises(pgas.MeshError, match="axis_names"):
        pgas.make_mesh(("x", "x"))
    with pytest.raises(pgas.MeshError, match="1 to 3"):
        pgas.make_mesh(("a", "b", "c", "d"))


def test_use_cpu_devices_after_start():
    pgas.use_cpu_devices(8)  # same count: fine
    with pytest.raises(pgas.DeviceCountError, match="already started with 8"):
        pgas.use_cpu_devices(4)


def test_minus_one_axis_is_inferred():
    assert dict(pgas.make_mesh(("x", "y"), shape=(-1, 2)).shape) == {"x": 4, "y": 2}
    assert dict(pgas.make_mesh(("x", "y"), shape=(2, -1)).shape) == {"x": 2, "y": 4}
    assert dict(pgas.make_mesh(("x",), shape=(-1,), devices=3).shape) == {"x": 3}
    mesh = pgas.make_mesh(("z", "y", "x"), shape=(2, -1, 2))
    assert dict(mesh.shape) == {"z": 2, "y": 2, "x": 2}


def test_minus_one_errors():
    with pytest.raises(pgas.MeshError, match=r"shape = \(-1, -1\): .*at most one -1"):
        pgas.make_mesh(("x", "y"), shape=(-1, -1))
    with pytest.raises(pgas.MeshError, match=r"shape = \(-1, 3\): the other axes hold 3 devices"):
        pgas.make_mesh(("x", "y"), shape=(-1, 3))
    with pytest.raises(pgas.MeshError, match=r"shape = \(0, 8\): give sizes >= 1"):
        pgas.make_mesh(("x", "y"), shape=(0, 8))
    with pytest.raises(pgas.MeshError, match=r"shape = \(-2, 4\)"):
        pgas.make_mesh(("x", "y"), shape=(-2, 4))
