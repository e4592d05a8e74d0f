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
