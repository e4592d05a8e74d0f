"""Physics of examples/life/life.py: known patterns and the NumPy reference, on pgas backends.

In-process (conftest: 8 CPU devices): the example's global-view ``life`` step
(pgas.run) and local ``kernel`` (pgas.explicit), on 2-D meshes whose shard
boundaries the patterns cross; the torus seam is crossed too. Boards are
compared with examples/life/patterns.py (``life_step_numpy``) bit for bit.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from helpers import load_example

import pgas
from pgas.app.state import build as _build
from pgas.references import explicit

_DIR = Path(__file__).resolve().parents[2] / "examples" / "life"


L = load_example("life")
P = L.patterns

MESHES = {"2x4": (2, 4), "4x2": (4, 2), "3x1": (3, 1)}


def generations(board: np.ndarray, steps: int, every: int, backend: str, mesh: str) -> np.ndarray:
    """Boards at generations 0, every, 2*every, ..., steps (shape (k, H, W))."""
    h, w = board.shape
    prob = L.problem(size=f"{h}x{w}", pattern="random", density=0.0)
    prob = type(prob)(**{**prob.__dict__, "init": lambda y, x: board[y, x]})
    m = pgas.make_mesh(("y", "x"), shape=MESHES[mesh], devices=int(np.prod(MESHES[mesh])))
    g = _build(prob, m)
    out = [g.to_numpy()]
    if backend == "auto":
        # a snapshot after every step leaves no room for a group of auto's k steps (compiled,
        # never run): k = 1 there
        k = 1 if every == 1 else "auto"
        g, snaps = pgas.run(L.life, g, steps, snapshot_every=every, steps_per_exchange=k)
        return np.concatenate([out[0][None], snaps.to_numpy()])
    for _ in range(steps // every):
        g = explicit.run(L.kernel, g, every, 1)
        out.append(g.to_numpy())
    return np.stack(out)


BACKENDS = [("auto", "2x4"), ("explicit", "4x2"), ("auto", "3x1")]


# The blinker and the glider: 64 generations on the same 16x16 board, every one recorded (one
# compiled program for both tests on each mesh).
@pytest.mark.parametrize(("backend", "mesh"), BACKENDS)
def test_blinker_has_period_two(backend, mesh):
    b0 = P.place((16, 16), P.load_pattern("blinker"), at=(7, 2))  # straddles x = 4 and y = 8
    gens = generations(b0, 64, 1, backend, mesh)
    assert gens[1].sum() == 3 and not np.array_equal(gens[1], b0)
    for t in range(0, 65, 2):
        np.testing.assert_array_equal(gens[t], b0)
        if t:
            np.testing.assert_array_equal(gens[t - 1], gens[1])


@pytest.mark.parametrize(("backend", "mesh"), BACKENDS)
def test_glider_moves_one_diagonal_cell_per_four_generations_across_shards_and_seam(backend, mesh):
    # 16x16 torus: 64 generations take the glider once around in both directions,
    # across every shard boundary and both seams of the torus.
    b0 = P.place((16, 16), P.load_pattern("glider"), at=(11, 12))
    gens = generations(b0, 64, 1, backend, mesh)[::4]
    assert len(gens) == 17
    for j, board in enumerate(gens):
        np.testing.assert_array_equal(
            board, np.roll(b0, (j, j), axis=(0, 1)), err_msg=f"gen {4 * j}"
        )


def test_gosper_gun_emits_a_glider_every_30_generations():
    b0 = P.place((64, 96), P.load_pattern("gosper-glider-gun"), at=(1, 1))
    gens = generations(b0, 120, 30, "auto", "2x4")
    pop = gens.reshape(len(gens), -1).sum(axis=1)
    assert pop.tolist() == [36 + 5 * k for k in range(5)]  # 36 gun cells + 5 per glider
    for k in range(2, 5):  # the gun (and its newest glider) repeat every 30 generations
        np.testing.assert_array_equal(gens[k][:12, :40], gens[1][:12, :40])
    ref = b0
    for _ in range(120):
        ref = P.life_step_numpy(ref)
    np.testing.assert_array_equal(gens[4], ref)


@pytest.mark.parametrize(
    ("backend", "mesh", "shape"),
    [
        ("auto", "2x4", (40, 64)),
        ("auto", "3x1", (50, 70)),
        ("explicit", "2x4", (50, 70)),
        ("explicit", "3x1", (40, 64)),
    ],
)
def test_random_board_equals_numpy_bitwise(backend, mesh, shape):
    b0 = P.random_board(shape, 0.35, seed=11)
    gens = generations(b0, 30, 10, backend, mesh)
    ref = b0
    for j in range(1, 4):
        for _ in range(10):
            ref = P.life_step_numpy(ref)
        assert gens[j].dtype == np.uint8
        np.testing.assert_array_equal(gens[j], ref)


def test_global_view_step_needs_at_most_four_collective_permutes():
    b0 = P.random_board((64, 64), 0.3, seed=1)
    prob = L.problem(size="64x64", pattern="random", density=0.3, seed=1)
    g = _build(prob, pgas.make_mesh(("y", "x"), shape=(2, 4)))
    np.testing.assert_array_equal(g.to_numpy(), b0)
    report = pgas.comm_report(L.life, g)
    assert report.per_exchange("collective-permute") == 4
    assert report.gathers == 0 and report.count("all-gather") == 0
    assert report.ratio == 1.0
