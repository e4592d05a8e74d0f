"""pgas.sum / min / max / mean against NumPy: padding never counts, integers do not overflow."""

from __future__ import annotations

import numpy as np
import pytest

import pgas


@pytest.mark.parametrize(
    "devices, shape, dtype",
    [(1, (7,), "float32"), (4, (10,), "int32"), (8, (1001,), "float64"), (4, (5, 7), "uint8")],
)
def test_against_numpy(devices, shape, dtype):
    names = ("x",) if len(shape) == 1 else ("y", "x")
    mesh = pgas.make_mesh(names, devices=devices)
    rng = np.random.default_rng(devices + len(shape))
    a = (rng.integers(1, 200, size=shape)).astype(dtype)  # all > 0: padding zeros would show
    u = pgas.from_numpy(a, mesh)
    assert pgas.min(u) == a.min() and pgas.max(u) == a.max()
    want = a.astype(np.float64 if a.dtype.kind == "f" else np.int64).sum()
    assert float(pgas.sum(u)) == pytest.approx(want, rel=1e-6)
    assert float(pgas.mean(u)) == pytest.approx(a.astype(np.float64).mean(), rel=1e-6)


def test_negative_values_and_padding():
    mesh = pgas.make_mesh(("x",), devices=4)
    a = -np.arange(1, 11, dtype=np.float64)  # 10 cells over 4 devices: 2 padding cells
    u = pgas.from_numpy(a, mesh)
    assert float(pgas.max(u)) == -1.0 and float(pgas.min(u)) == -10.0
    assert float(pgas.sum(u)) == -55.0 and float(pgas.mean(u)) == -5.5


def test_uint8_sum_does_not_wrap():
    mesh = pgas.make_mesh(("x",), devices=2)
    u = pgas.from_numpy(np.full(1000, 255, np.uint8), mesh)
    assert int(pgas.sum(u)) == 255_000


def test_bool():
    mesh = pgas.make_mesh(("x",), devices=2)
    u = pgas.from_numpy(np.array([True, False, True]), mesh)
    assert int(pgas.sum(u)) == 2 and bool(pgas.max(u)) and not bool(pgas.min(u))
