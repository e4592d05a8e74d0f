"""A run's mesh, initial state and params, and the memory check (pgas.app.state)."""

import dataclasses
from pathlib import Path

import numpy as np
import pytest

from pgas.app import iterate
from pgas.app.problem import demo, load_problem
from pgas.app.state import build, build_params, check_memory, mesh_for
from pgas.errors import FieldTooLargeError

PROBLEMS = str(Path(__file__).resolve().parents[1] / "problems.py")


def test_mesh_and_build():
    p = load_problem(f"{PROBLEMS}:life")
    mesh = mesh_for(p, 4)
    assert dict(mesh.shape) == {"y": 2, "x": 2}
    u = build(p, mesh)
    y, x = np.meshgrid(np.arange(37), np.arange(53), indexing="ij")
    np.testing.assert_array_equal(u.to_numpy(), p.init(y, x))


def test_params_are_laid_out_as_the_state():
    p = dataclasses.replace(iterate.demo(10), params=lambda i: 2.0 * i)  # params: iterative
    mesh = mesh_for(p, 2)
    params = build_params(p, mesh)
    np.testing.assert_array_equal(params.to_numpy(), 2.0 * np.arange(10, dtype=np.float32))
    assert params.layout.axes == build(p, mesh).layout.axes


def test_a_field_too_large_is_refused_before_it_exists():
    mesh = mesh_for(demo(), 1)
    with pytest.raises(FieldTooLargeError, match=r"the demo field .* \(2 buffers of its"):
        check_memory(demo(10**14), mesh)
    p = dataclasses.replace(iterate.demo(10**14), params=lambda i: i)  # and a third: params
    with pytest.raises(FieldTooLargeError, match=r"the jacobi-demo field .* \(3 buffers of its"):
        check_memory(p, mesh)
