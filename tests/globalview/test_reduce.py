"""pgas.sum / min / max / mean against NumPy: padding never counts, integers do not overflow."""

from __future__ import annotations

import itertools

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


def _edges(n: int, parts: int) -> list[int]:
    """Cells of an axis of ``n`` cells split over ``parts`` blocks of ``ceil(n / parts)``: the
    first and last cell of every block (the last block's next to its padding) and a middle."""
    size = -(-n // parts)
    return sorted({n // 2} | {c for lo in range(0, n, size) for c in (lo, min(lo + size, n) - 1)})


#: (shape, mesh shape, dtype): 1-D on 1, 3 and 4 devices, 2-D on 2x2 and 3x2; uneven but one
NON_FINITE_MESHES = [((10,), (1,), "float64"), ((10,), (3,), "float64"),
                     ((10,), (4,), "float64"), ((5, 7), (2, 2), "float64"),
                     ((7, 5), (3, 2), "float32")]  # fmt: skip


@pytest.mark.parametrize("shape, dims, dtype", NON_FINITE_MESHES)
def test_nan_and_inf_in_every_block_position_reduce_as_numpy(shape, dims, dtype):
    """A NaN or an infinity in the first, middle or last block, at a block's first or last
    cell (next to the padding of an uneven one): max, min, sum and mean give NumPy's answer
    (a NaN gives NaN). Three compiled reductions per mesh; an expression reduces through
    the same ones (tests/loop/test_until.py reduces one inside a loop)."""
    names = ("x",) if len(shape) == 1 else ("y", "x")
    mesh = pgas.make_mesh(names, shape=dims, devices=int(np.prod(dims)))
    base = np.random.default_rng(len(shape) + dims[0]).random(shape).astype(dtype) - 0.5
    cells = list(itertools.product(*(_edges(n, d) for n, d in zip(shape, dims))))
    cases = [{cell: value} for cell in cells for value in (np.nan, np.inf, -np.inf)]
    cases.append({cells[0]: np.inf, cells[-1]: np.nan})  # an inf and a NaN in other blocks
    cases.append({cells[0]: -np.inf, cells[-1]: np.inf})  # their sum is NaN
    for case in cases:
        a = base.copy()
        for cell, value in case.items():
            a[cell] = value
        u = pgas.from_numpy(a, mesh)
        got = {"max": pgas.max(u), "min": pgas.min(u), "sum": pgas.sum(u), "mean": pgas.mean(u)}
        with np.errstate(invalid="ignore"):
            want = {"max": a.max(), "min": a.min(), "sum": a.sum(), "mean": a.mean()}
        for name, value in got.items():
            if np.isfinite(want[name]):  # a finite answer: a finite value's sum, in any order
                assert np.isfinite(value) and value == pytest.approx(want[name], rel=1e-5), name
            else:
                np.testing.assert_array_equal(np.asarray(value), want[name],
                                              err_msg=f"{name} with {case}")  # fmt: skip
