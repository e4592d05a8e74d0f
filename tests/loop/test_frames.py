"""Frames and groups: k steps on one extension equal k single steps."""

import numpy as np
import pytest
from helpers import life_numpy
from stencils import life_torus

import pgas
from pgas.loop.frames import blocks, cores, frames, group, physical, step_fn


def test_frames_and_cores_round_trip():
    b0 = (np.random.default_rng(0).random((10, 14)) < 0.5).astype(np.uint8)
    g = pgas.from_numpy(b0, pgas.make_mesh(("y", "x"), shape=(2, 2), devices=4))
    f = frames(blocks(g), (3, 2))
    assert f.ext == (3, 2) and f.data.shape == (2, 5 + 6, 2, 7 + 4)
    np.testing.assert_array_equal(physical(cores(f)).to_numpy(), b0)


def test_a_group_is_k_steps():
    b0 = (np.random.default_rng(1).random((17, 19)) < 0.4).astype(np.uint8)
    g = pgas.from_numpy(b0, pgas.make_mesh(("y", "x"), shape=(2, 3), devices=6))
    run4 = group(step_fn(life_torus), (1, 1), 4)
    np.testing.assert_array_equal(physical(run4(blocks(g))).to_numpy(), life_numpy(b0, 4))


def test_step_fn_materialises_and_refuses_none():
    u = pgas.from_numpy(np.arange(3.0), pgas.make_mesh(devices=1))
    assert isinstance(step_fn(lambda u: u + 1)(u), pgas.GlobalArray)
    with pytest.raises(pgas.PgasError, match="returned None"):
        step_fn(lambda u: None)(u)


def test_hold_the_extended_block_on_cpu_and_for_2d_halos_on_gpu():
    from types import SimpleNamespace

    from pgas.loop.frames import hold

    gpu = SimpleNamespace(devices=np.array([SimpleNamespace(platform="cuda")]))
    assert hold(gpu, (1, 1)) and not hold(gpu, (2,)) and not hold(gpu, (0, 3))
    assert hold(pgas.make_mesh(devices=1), (2,))


def test_fields_of_one_layout_and_dtype_send_their_slabs_together():
    import re

    import jax

    mesh = pgas.make_mesh(("y", "x"), shape=(2, 2), devices=4)
    rng = np.random.default_rng(5)
    xs = {"u": rng.random((9, 10)), "v": rng.random((9, 10)),  # uneven blocks: 5/4 by 5/5
          "w": rng.random((9, 10)).astype(np.float32)}  # fmt: skip
    state = blocks({name: pgas.from_numpy(x, mesh, boundary=pgas.Keep()) for name, x in xs.items()})

    def framing(joined):
        return jax.jit(
            lambda s: {n: g.data for n, g in frames(s, (2, (1, 0)), joined=joined).items()}
        )

    def permutes(fn):
        hlo = fn.lower(state).compile().as_text()
        return sorted(re.findall(r"= (\w+\[[\d,]*\])\S* collective-permute\(", hlo))

    # per device: u and v (float64) together, w (float32) alone; along y both sides (2 cells
    # each, a block 5 wide), along x the side below (1 cell, the y-extended 9 rows): 6
    # messages, where one a field (not joined) is 9
    want = ["f64[1,4,1,5]"] * 2 + ["f32[1,2,1,5]"] * 2 + ["f64[1,9,1,2]", "f32[1,9,1,1]"]
    assert permutes(framing(True)) == sorted(want)
    assert len(permutes(framing(False))) == 9
    together = framing(True)(state)
    for name, g in state.items():  # each field exactly as framed alone
        np.testing.assert_array_equal(together[name], frames(g, (2, (1, 0))).data, err_msg=name)
