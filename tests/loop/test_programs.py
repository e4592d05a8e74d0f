"""The compiled programs of a loop: two buffers on the CPU at k > 1, one compile per parity,
another transport, int32 trip counts (pgas.loop.programs)."""

import jax.numpy as jnp
import numpy as np
from helpers import heat_numpy
from stencils import heat

import pgas
from pgas.loop import counts
from pgas.loop.plan import plan
from pgas.loop.programs import _Counted, program


def _peak_over_block(step, u, k, count=2):

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
        assert _peak_over_block(_heat, heat, 4, count) <= 2.01  # even k (auto's 16: longer)
        assert _peak_over_block(_heat, heat, 3, count) <= 2.01  # odd k: groups run in pairs
    # 2-D (each parity: heat above)
    assert _peak_over_block(life_torus, life, "auto", 2) <= 2.1  # 2 x (520 / 512)**2


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
    # even and odd k (groups in pairs); "auto" would be 16, more than the 13 steps: its group
    # would be compiled and never run
    for k in (1, 2, 5):
        out = pgas.run(step, make(), 13, steps_per_exchange=k)
        np.testing.assert_allclose(out["u"].to_numpy(), want, rtol=1e-6)
        np.testing.assert_array_equal(out["c"].to_numpy(), c0)
        ref = pgas.run(step, make(), 13, steps_per_exchange=1)["u"].to_numpy()
        np.testing.assert_array_equal(out["u"].to_numpy(), ref)


def test_loop_compiles_once_per_parity():

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

    u = pgas.from_numpy(np.zeros(4096, np.float32), pgas.make_mesh(("x",), devices=2))
    texts = []
    for transport in (None, lambda slab, direction: slab):  # k = 4: the loops of the k = 16
        prog = program(_heat, 4, (1,), None, None, True, transport)  # timed, shorter bodies
        texts.append(prog.advance.lower(prog.enter(u), 32).compile().as_text())
    # 2 per exchange: the groups' loop, and the two single steps of the leftover steps' loop
    assert texts[0].count("collective-permute(") == 6 and "all-gather" not in texts[0]
    assert texts[1].count("collective-permute(") == 0


def test_a_count_past_int32_is_run_in_int32_pieces(monkeypatch):
    """The loop's trip count is an int32: a run past 2**31 - 1 steps calls the compiled loop
    (the program of each piece's parity) with int32 counts that add up to it exactly; with
    the limit lowered to 6 steps, a double-buffered run of 25 steps is 6 + 6 + 6 + 6 + 1
    steps, the bits of one run (NumPy's)."""
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
