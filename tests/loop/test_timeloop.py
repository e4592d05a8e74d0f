"""Compiled loops: snapshots, chunks with callbacks, several fields, reductions."""

import numpy as np
from helpers import heat_numpy
from stencils import heat

import pgas


def test_snapshots_and_observe():
    x0 = np.random.default_rng(11).random(300).astype(np.float32)
    mesh = pgas.make_mesh(("x",))
    u, snaps = pgas.run(heat, pgas.from_numpy(x0, mesh, boundary=pgas.Keep()), 20,
                        snapshot_every=5)  # fmt: skip
    fields = snaps.to_numpy()
    assert fields.shape == (4, 300)
    for i in range(4):
        np.testing.assert_array_equal(fields[i], heat_numpy(x0, 5 * (i + 1)))
    _, totals = pgas.run(heat, pgas.from_numpy(x0, mesh), 20, snapshot_every=10, observe=pgas.sum)
    expected = [heat_numpy(x0, 10).sum(), heat_numpy(x0, 20).sum()]
    np.testing.assert_allclose(np.asarray(totals), expected, rtol=1e-5)


def test_chunks_call_back_between_compiled_chunks():
    x0 = np.random.default_rng(12).random(100).astype(np.float32)
    seen = []
    # k = 2: chunks of 10 and 5 steps, each parity (auto's k = 12 on blocks of 13 and 12
    # exceeds the chunks: its group would be compiled and never run)
    u = pgas.run(heat, pgas.from_numpy(x0, pgas.make_mesh(("x",))), 25, chunk=10,
                 steps_per_exchange=2,
                 callback=lambda done, s: seen.append((done, s.to_numpy()[50])))  # fmt: skip
    assert [d for d, _ in seen] == [10, 20, 25]
    np.testing.assert_array_equal(u.to_numpy(), heat_numpy(x0, 25))
    assert seen[-1][1] == heat_numpy(x0, 25)[50]


def test_pytree_of_fields_reaction_diffusion():
    mesh = pgas.make_mesh(("x",), devices=4)
    a0 = np.random.default_rng(13).random(64)
    b0 = np.random.default_rng(14).random(64)

    def step(s):
        a, b = s["a"], s["b"]
        a[1:-1] = a[1:-1] + 0.125 * (a[:-2] + a[2:] - 2 * a[1:-1]) - 0.0625 * b[1:-1]
        b[1:-1] = b[1:-1] + 0.0625 * a[1:-1]
        return {"a": a, "b": b}

    # k = 2: two groups and a step (auto's k = 16 on blocks of 16 exceeds the 5 steps: its group
    # would be compiled and never run)
    state = {"a": pgas.from_numpy(a0, mesh), "b": pgas.from_numpy(b0, mesh)}
    s = pgas.run(step, state, 5, steps_per_exchange=2)
    a, b = a0.copy(), b0.copy()
    for _ in range(5):
        a[1:-1] = a[1:-1] + 0.125 * (a[:-2] + a[2:] - 2 * a[1:-1]) - 0.0625 * b[1:-1]
        b[1:-1] = b[1:-1] + 0.0625 * a[1:-1]
    np.testing.assert_array_equal(s["a"].to_numpy(), a)
    np.testing.assert_array_equal(s["b"].to_numpy(), b)


def test_reductions_ignore_padding():
    x = np.random.default_rng(15).standard_normal((13, 7))
    u = pgas.from_numpy(x, pgas.make_mesh(("y", "x"), shape=(4, 2)))
    np.testing.assert_allclose(float(pgas.sum(u)), x.sum(), rtol=1e-12)
    assert float(pgas.min(u)) == x.min() and float(pgas.max(u)) == x.max()
    np.testing.assert_allclose(float(pgas.mean(u)), x.mean(), rtol=1e-12)
    for fn in (pgas.sum, pgas.min, pgas.max):
        report = pgas.comm_report(fn, u)
        assert report.count("all-reduce") == 1 and report.gathers == 0


def test_zero_steps_and_from_function():
    mesh = pgas.make_mesh(("y", "x"), shape=(2, 2), devices=4)
    u = pgas.from_function(lambda i, j: 10 * i + j, (5, 3), mesh, dtype=np.int32)
    np.testing.assert_array_equal(
        pgas.run(heat, u, 0).to_numpy(), 10 * np.arange(5)[:, None] + np.arange(3)
    )
    assert pgas.full((3,), 7, mesh, dtype=np.uint8).to_numpy().tolist() == [7, 7, 7]


def test_bool_and_int_fields():
    mesh = pgas.make_mesh(("x",), devices=4)
    alive = np.random.default_rng(16).random(50) < 0.5
    b = pgas.from_numpy(alive, mesh)

    def flip_interior(b):
        b[1:-1] = ~b[1:-1] ^ b[2:]
        return b

    ref = alive.copy()
    for _ in range(3):
        ref[1:-1] = ~ref[1:-1] ^ ref[2:]
    # k = 2: a group and a step in the double-buffered loop (auto's k = 12 on blocks of 13 and
    # 12: one step, its group compiled and never run)
    np.testing.assert_array_equal(pgas.run(flip_interior, b, 3, steps_per_exchange=2).to_numpy(),
                                  ref)  # fmt: skip
    counts = pgas.from_numpy(np.arange(50, dtype=np.int32), mesh)
    counts[1:-1] = counts[:-2] + counts[2:]
    np.testing.assert_array_equal(counts.to_numpy()[1:-1], 2 * np.arange(1, 49))
    assert counts.dtype == np.int32 and int(pgas.max(counts)) == 96


# ---- the caller's state, and the state at a failure -----------------------------------------
def _rod(devices=4, n=203):
    mesh = pgas.make_mesh(("x",), devices=devices)
    return pgas.from_function(lambda i: np.sin(i / 7.0), (n,), mesh, dtype="float32",
                              boundary=pgas.Keep())  # fmt: skip


def test_the_callers_array_stays_valid_unless_donated():
    import pytest

    u = _rod()
    u0 = u.to_numpy()
    for k in (1, 4):  # single- and double-buffered plans
        out = pgas.run(heat, u, 8, steps_per_exchange=k)
        np.testing.assert_array_equal(u.to_numpy(), u0)  # still usable, unchanged
        np.testing.assert_array_equal(out.to_numpy(), heat_numpy(u0, 8))
    # asked: one field less on every device (k = 4: the loop above; auto's k = 16 on blocks of
    # 51 and 50 exceeds the 8 steps, its group compiled and never run)
    out = pgas.run(heat, u, 8, donate=True, steps_per_exchange=4)
    np.testing.assert_array_equal(out.to_numpy(), heat_numpy(u0, 8))
    with pytest.raises(RuntimeError, match="deleted"):
        u.to_numpy()


def test_a_failed_callback_propagates_unchanged_with_the_last_state():
    import pytest

    class Stop(Exception):
        pass

    u = _rod()
    u0 = u.to_numpy()
    boom = Stop("disk full")

    def callback(done, state):
        if done == 8:
            raise boom

    with pytest.raises(Stop) as caught:  # chunks of 4 at k = 4: the double-buffered loop of
        # the test above (auto's k = 16 exceeds the chunks: its group would never run)
        pgas.run(heat, u, 20, chunk=4, callback=callback, steps_per_exchange=4)
    err = caught.value
    assert err is boom and err.pgas_step == 8
    np.testing.assert_array_equal(err.pgas_state.to_numpy(), heat_numpy(u0, 8))
    np.testing.assert_array_equal(u.to_numpy(), u0)  # the caller's array too
    assert any("stopped after 8 of 20 steps" in note for note in err.__notes__)
