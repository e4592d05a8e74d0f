"""An eager solve compiles once and is reused; inside jax.jit it is traced in place; loops
called on an outer loop's frames raise FrameError (the outer plan then drops frames)."""

import importlib

import jax
import numpy as np
import pytest

import pgas
from pgas.errors import FrameError
from pgas.loop.timeloop import check_not_framed
from pgas.solvers import outer


def test_eager_solves_compile_once_and_jit_traces_them():
    mesh = pgas.make_mesh(devices=1)
    b = pgas.from_numpy(np.ones(9), mesh, boundary=pgas.Keep())
    op = pgas.solvers.Poisson(h=0.125)
    mg = importlib.import_module("pgas.solvers.multigrid")
    solve = outer._compiled(mg._multigrid, (100, False))  # other tests may have used it
    first = pgas.solvers.multigrid(op, b, tol=1e-10)
    programs = solve._cache_size()
    again = pgas.solvers.multigrid(op, b * 2, tol=1e-9)  # new values and tol: no compile
    assert solve._cache_size() == programs
    assert np.allclose(again.x.to_numpy(), 2 * first.x.to_numpy(), rtol=1e-8)
    inside = jax.jit(lambda b: pgas.solvers.multigrid(op, b, tol=1e-10).x)(b)
    np.testing.assert_allclose(inside.to_numpy(), first.x.to_numpy(), rtol=1e-13)
    x = np.linspace(0, 1, 9)
    np.testing.assert_allclose(first.x.to_numpy(), x * (1 - x) / 2, atol=1e-9)  # -u'' = 1


def test_a_loop_given_framed_fields_raises_frame_error():
    u = pgas.from_numpy(np.zeros(4), pgas.make_mesh(devices=1))
    framed = pgas.GlobalArray(u.data, u.layout, ext=(1,))
    with pytest.raises(FrameError, match=r"state is a field held on an outer loop's"):
        check_not_framed(framed)
    with pytest.raises(FrameError, match=r"runs on whole fields"):
        outer.call(lambda static, b: b, (), (framed,), "probe")
    outer.check_tol(0.5)
    with pytest.raises(pgas.PgasError, match=r"tol = 1: give"):
        outer.check_tol(1)
