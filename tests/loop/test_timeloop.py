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
    u = pgas.run(heat, pgas.from_numpy(x0, pgas.make_mesh(("x",))), 25, chunk=10,
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

    s = pgas.run(step, {"a": pgas.from_numpy(a0, mesh), "b": pgas.from_numpy(b0, mesh)}, 5)
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
    ref[1:-1] = ~ref[1:-1] ^ ref[2:]
    np.testing.assert_array_equal(pgas.run(flip_interior, b, 1).to_numpy(), ref)
    counts = pgas.from_numpy(np.arange(50, dtype=np.int32), mesh)
    counts[1:-1] = counts[:-2] + counts[2:]
    np.testing.assert_array_equal(counts.to_numpy()[1:-1], 2 * np.arange(1, 49))
    assert counts.dtype == np.int32 and int(pgas.max(counts)) == 96


# ---- double buffering (the CPU loop at k > 1) --------------------------------------------
def _peak_over_block(step, u, k, count=2):
    from pgas.loop.plan import plan
    from pgas.loop.timeloop import program

    how = plan(step, u, k)
    prog = program(step, how.steps_per_exchange, how.widths, None, None, how.double)
    m = prog.advance.lower(prog.enter(u), count).compile().memory_analysis()
    peak = m.argument_size_in_bytes + m.output_size_in_bytes + m.temp_size_in_bytes
    return (peak - m.alias_size_in_bytes) / (np.prod(u.layout.local_shape) * u.dtype.itemsize)


def _heat(u):
    u[1:-1] = 0.5 * u[1:-1] + 0.25 * (u[:-2] + u[2:])
    return u


def test_double_buffered_loop_holds_two_blocks():
    """XLA's memory analysis: two extended buffers per device, whatever the parity."""
    from stencils import life_torus

    heat = pgas.from_numpy(np.zeros(2**17, np.float32), pgas.make_mesh(("x",), devices=2))
    life = pgas.from_numpy(np.zeros((512, 512), np.uint8), pgas.make_mesh(("y", "x"), devices=1))
    assert pgas.plan.plan(_heat, heat).steps_per_exchange == 16
    assert pgas.plan.plan(life_torus, life).steps_per_exchange == 4
    assert pgas.plan.plan(life_torus, life, double=False).steps_per_exchange == 1  # callbacks
    for count in (2, 3):  # an odd count ends in the second buffer, without a copy
        assert _peak_over_block(_heat, heat, "auto", count) <= 2.01
        assert _peak_over_block(_heat, heat, 3, count) <= 2.01  # odd k: groups run in pairs
        assert _peak_over_block(life_torus, life, "auto", count) <= 2.1  # 2 x (520 / 512)**2


def test_a_field_returned_unchanged_stays_in_its_buffer():
    x0 = np.random.default_rng(3).random(203).astype(np.float32)
    c0 = np.random.default_rng(4).random(203).astype(np.float32)
    mesh = pgas.make_mesh(("x",), devices=3)

    def step(s):
        u, c = s["u"], s["c"]
        u[1:-1] = u[1:-1] + 0.1 * (c[:-2] - c[2:]) * u[1:-1]
        return {"u": u, "c": c}

    def make():
        return {"u": pgas.from_numpy(x0, mesh), "c": pgas.from_numpy(c0, mesh)}

    want = x0.copy()
    for _ in range(13):
        want[1:-1] = want[1:-1] + np.float32(0.1) * (c0[:-2] - c0[2:]) * want[1:-1]
    for k in (1, 2, 5, "auto"):
        out = pgas.run(step, make(), 13, steps_per_exchange=k)
        np.testing.assert_allclose(out["u"].to_numpy(), want, rtol=1e-6)
        np.testing.assert_array_equal(out["c"].to_numpy(), c0)
        ref = pgas.run(step, make(), 13, steps_per_exchange=1)["u"].to_numpy()
        np.testing.assert_array_equal(out["u"].to_numpy(), ref)


def test_loop_compiles_once_per_parity():
    from pgas.loop.timeloop import program

    program.cache_clear()
    u = pgas.from_numpy(np.arange(64.0, dtype=np.float32), pgas.make_mesh(("x",), devices=2))
    u = pgas.run(_heat, u, 6, chunk=3, steps_per_exchange=2)  # chunks of 3: odd, odd
    (prog,) = [program(_heat, 2, (1,), None, None, True)]
    assert program.cache_info().hits >= 1
    want = np.arange(64.0, dtype=np.float32)
    for _ in range(6):
        want[1:-1] = np.float32(0.5) * want[1:-1] + np.float32(0.25) * (want[:-2] + want[2:])
    np.testing.assert_array_equal(u.to_numpy(), want)
    assert prog.advance.runs[0]._cache_size() == 0 and prog.advance.runs[1]._cache_size() == 1


def test_a_local_transport_keeps_the_program_and_drops_the_collectives():
    """What benchmarks/deep_halo.py --overhead times: the same loop without exchange."""
    from pgas.loop.timeloop import program

    u = pgas.from_numpy(np.zeros(4096, np.float32), pgas.make_mesh(("x",), devices=2))
    texts = []
    for transport in (None, lambda slab, direction: slab):
        prog = program(_heat, 16, (1,), None, None, True, transport)
        texts.append(prog.advance.lower(prog.enter(u), 32).compile().as_text())
    # 2 per exchange: the groups' loop, and the two single steps of the leftover steps' loop
    assert texts[0].count("collective-permute(") == 6 and "all-gather" not in texts[0]
    assert texts[1].count("collective-permute(") == 0


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
    out = pgas.run(heat, u, 8, donate=True)  # asked: one field less on every device
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
        if done == 10:
            raise boom

    with pytest.raises(Stop) as caught:
        pgas.run(heat, u, 20, chunk=5, callback=callback)
    err = caught.value
    assert err is boom and err.pgas_step == 10
    np.testing.assert_array_equal(err.pgas_state.to_numpy(), heat_numpy(u0, 10))
    np.testing.assert_array_equal(u.to_numpy(), u0)  # the caller's array too
    assert any("stopped after 10 of 20 steps" in note for note in err.__notes__)


def test_a_count_past_int32_is_run_in_int32_pieces(monkeypatch):
    """The loop's trip count is an int32: a run past 2**31 - 1 steps calls the compiled loop
    (the program of each piece's parity) with int32 counts that add up to it exactly; with
    the limit lowered to 6 steps, a double-buffered run of 25 steps is 6 + 6 + 6 + 6 + 1
    steps, the bits of one run (NumPy's)."""
    import jax.numpy as jnp

    from pgas.loop import counts
    from pgas.loop.timeloop import _Counted

    calls = []

    def loop(parity):
        def run(state, count):
            assert count.dtype == jnp.int32 and int(count) % 2 == parity
            calls.append(int(count))
            return state + int(count)

        return run

    assert _Counted(loop(0), loop(1))(0, 10**12) == 10**12  # the steps given, one int32 each
    assert len(calls) == 466 and max(calls) == 2**31 - 2

    x0 = np.random.default_rng(15).random(64)
    mesh = pgas.make_mesh(("x",), devices=2)
    u = pgas.from_numpy(x0, mesh, boundary=pgas.Keep())
    real, seen = counts.pieces, []
    monkeypatch.setattr(counts, "INT32_STEPS", 6)
    monkeypatch.setattr(counts, "pieces", lambda *a: iter(seen.append(list(real(*a))) or seen[-1]))
    out = pgas.run(heat, u, 25, steps_per_exchange=3)
    assert seen == [[6, 6, 6, 6, 1]]
    np.testing.assert_array_equal(out.to_numpy(), heat_numpy(x0, 25))
