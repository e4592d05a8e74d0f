"""Double buffering: k steps on two buffers equal the single-buffered group, bit for bit."""

import jax.numpy as jnp
import numpy as np
from helpers import life_numpy
from stencils import life_torus

import pgas
from pgas.loop.buffers import double_group, framed, refreshed
from pgas.loop.frames import blocks, cores, frames, physical, step_fn


def test_double_group_is_k_steps_and_its_spare_buffer_holds_no_result():
    b0 = (np.random.default_rng(1).random((17, 19)) < 0.4).astype(np.uint8)
    g = pgas.from_numpy(b0, pgas.make_mesh(("y", "x"), shape=(2, 3), devices=6))  # uneven
    run4 = double_group(step_fn(life_torus), (1, 1), 4)
    pair = (framed(blocks(g), (4, 4)), framed(blocks(g), (4, 4)))
    out, spare = run4(pair, jnp.int32(0))  # k even: the result is back in the first buffer
    assert out.ext == (4, 4) and out.data.shape == spare.data.shape
    np.testing.assert_array_equal(physical(cores(out)).to_numpy(), life_numpy(b0, 4))


def test_refreshed_fills_the_halo_as_frames_does():
    x0 = np.random.default_rng(2).random((9, 10))
    mesh = pgas.make_mesh(("y", "x"), shape=(2, 2), devices=4)
    state = {n: pgas.from_numpy(x0 + i, mesh, boundary=pgas.Keep()) for i, n in enumerate("uv")}
    empty = framed(blocks(state), (2, 1))  # halos of zeros
    full = refreshed(empty)
    for n in "uv":
        want = frames(blocks(state)[n], (2, 1)).data
        np.testing.assert_array_equal(full[n].data, want, err_msg=n)
