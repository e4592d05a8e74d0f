"""Deep halos: k steps per exchange of a k-times-wider halo, bitwise equal to k = 1.

Every case runs the same global-view step (or local kernel) at several k, on step
counts that k does not divide, and compares the bits with NumPy's (k = 1 gives NumPy's
bits in every other test of the loop) or, where no NumPy is written here, with k = 1's.
The compiled programs are checked for one exchange (2 collective-permutes per split axis)
per k steps.
"""

import re

import jax.numpy as jnp
import numpy as np
import pytest
from helpers import NEIGHBOURS_2D, heat3d_numpy, heat_numpy, life_numpy
from stencils import heat, heat3d, life, life_torus

import pgas
from pgas.references import explicit


def _run_all_k(step, make, steps, ks=(2, 3, 5), want=None, **kw):
    """Final states at each k (as NumPy pytrees); asserts their bits are ``want``'s (a list
    of arrays, the leaves' order), or without ``want`` k = 1's; returns ``want`` or k = 1's."""
    if want is None:
        ref = pgas.run(step, make(), steps, steps_per_exchange=1, **kw)
        want = [x.to_numpy() for x in _arrays(ref)]
    ref_np = want
    for k in ks:
        out = pgas.run(step, make(), steps, steps_per_exchange=k, **kw)
        for a, b in zip(ref_np, (x.to_numpy() for x in _arrays(out)), strict=True):
            np.testing.assert_array_equal(b, a, err_msg=f"k = {k}")
    return ref_np


def _arrays(state):
    if isinstance(state, tuple) and len(state) == 2 and not isinstance(state[0], pgas.GlobalArray):
        state = state[0]
    leaves = [state] if isinstance(state, pgas.GlobalArray) else list(state.values()) if (
        isinstance(state, dict)) else list(state)  # fmt: skip
    return leaves


def test_heat_keep_uneven_sizes():
    """Blocks of 5 and 4 cells: at k = 4 (even) a halo as wide as a short block; k = 3 odd.
    (1003 cells on 3 devices took this uneven path; even blocks at k > 1: the wave and
    constant cases below; k = 2 ran the even loop of k = 4 with a shorter body.)"""
    x0 = np.random.default_rng(37).random(37).astype(np.float32)
    mesh = pgas.make_mesh(("x",), devices=8)
    make = lambda: pgas.from_numpy(x0, mesh, boundary=pgas.Keep())  # noqa: E731
    _run_all_k(heat, make, 17, ks=(3, 4), want=[heat_numpy(x0, 17)])


def test_halo_two_with_each_boundary():
    """One field per boundary kind in one state (each reads only itself): one program per k
    for the three."""
    x0 = np.random.default_rng(1).random(203)
    mesh = pgas.make_mesh(("x",), devices=4)
    bcs = {"d": pgas.Dirichlet(0.25), "n": pgas.Neumann(), "p": pgas.Periodic()}

    def step(s):  # fourth-order neighbours through shift: reads 2 cells across the edge
        for u in s.values():
            s1 = pgas.shift(u, 1) + pgas.shift(u, -1)
            s2 = pgas.shift(u, 2) + pgas.shift(u, -2)
            u[...] = 0.5 * u + 0.125 * s1 + 0.125 * s2
        return s

    def make():
        return {name: pgas.from_numpy(x0, mesh, boundary=bc, halo=2) for name, bc in bcs.items()}

    assert pgas.plan.plan(step, make(), 3).steps_per_exchange == 3  # no field lowers k
    want = []
    for bc in bcs.values():  # dict leaves in key order: d, n, p
        ref = x0.copy()
        mode = {pgas.Periodic: "wrap", pgas.Neumann: "symmetric",
                pgas.Dirichlet: "constant"}[type(bc)]  # fmt: skip
        for _ in range(13):
            kw = {"constant_values": 0.25} if mode == "constant" else {}
            e = np.pad(ref, 2, mode=mode, **kw)
            ref = 0.5 * ref + 0.125 * (e[1:-3] + e[3:-1]) + 0.125 * (e[:-4] + e[4:])
        want.append(ref)
    _run_all_k(step, make, 13, ks=(2, 3), want=want)  # even; odd (groups in pairs)


def test_where_apply_and_a_reduction_inside_the_step():
    x0 = np.random.default_rng(2).random(150)
    mesh = pgas.make_mesh(("x",), devices=3)

    def step(u):
        avg = 0.5 * (pgas.shift(u, 1) + pgas.shift(u, -1))
        u[...] = pgas.where(u > 0.6, pgas.apply(jnp.sqrt, u), avg) - 0.01 * pgas.mean(u)
        return u

    make = lambda: pgas.from_numpy(x0, mesh, boundary=pgas.Neumann())  # noqa: E731
    _run_all_k(step, make, 11, ks=(2, 4))


def test_wave_equation_two_time_levels():
    i = np.arange(120)
    u0, v0 = np.sin(2 * np.pi * i / 120), np.sin(2 * np.pi * (i - 1) / 120)
    mesh = pgas.make_mesh(("x",), devices=4)

    def step(s):  # leapfrog: new = 2u - old + c^2 (u[i-1] - 2u + u[i+1]), c^2 = 1/4
        u, old = s["u"], s["old"]
        new = 2.0 * u - old + 0.25 * (pgas.shift(u, 1) - 2.0 * u + pgas.shift(u, -1))
        return {"u": new.to_array(), "old": u}

    def make():
        return {"u": pgas.from_numpy(u0, mesh), "old": pgas.from_numpy(v0, mesh)}

    u, old = u0.copy(), v0.copy()
    for _ in range(19):
        u, old = 2.0 * u - old + 0.25 * (np.roll(u, 1) - 2.0 * u + np.roll(u, -1)), u
    _run_all_k(step, make, 19, ks=(2, 3), want=[old, u])  # dict leaves in key order: old, u


def _life_fixed_numpy(b: np.ndarray, steps: int) -> np.ndarray:
    """B3/S23 on the interior, the edge cells fixed (the slices of ``stencils.life``)."""
    b = b.copy()
    for _ in range(steps):
        n = sum(b[1 + dy : b.shape[0] - 1 + dy, 1 + dx : b.shape[1] - 1 + dx]
                for dy, dx in NEIGHBOURS_2D)  # fmt: skip
        c = b[1:-1, 1:-1]
        b[1:-1, 1:-1] = ((n == 3) | ((c == 1) & (n == 2))).astype(b.dtype)
    return b


def test_life_diagonals_torus_and_fixed_edges():
    """Both axes split, unevenly (19/18 by 18/18/17). (A (4, 2) mesh took the same frames; an
    unsplit axis, its wrap local: tests/examples/test_life.py at the automatic k.)"""
    b0 = (np.random.default_rng(3).random((37, 53)) < 0.35).astype(np.uint8)
    mesh = pgas.make_mesh(("y", "x"), shape=(2, 3), devices=6)
    make = lambda: pgas.from_numpy(b0, mesh)  # noqa: E731
    _run_all_k(life_torus, make, 9, ks=(2,), want=[life_numpy(b0, 9)])  # even k
    # slices: the edges stay fixed; odd k (groups in pairs)
    _run_all_k(life, make, 7, ks=(3,), want=[_life_fixed_numpy(b0, 7)])


def test_heat3d_mixed_boundaries():
    x0 = np.random.default_rng(4).random((11, 13, 9))
    mesh = pgas.make_mesh(("z", "y", "x"), shape=(2, 2, 2))
    bcs = [pgas.Keep(), (pgas.Dirichlet(0.5), pgas.Neumann()), pgas.Periodic()]
    make = lambda: pgas.from_numpy(x0, mesh, boundary=bcs)  # noqa: E731
    # even k: 3 groups and a single step; odd k: groups run in pairs, 6 steps and a single one.
    # The step writes the interior only: every face kind leaves NumPy's bits (edges kept)
    _run_all_k(heat3d, make, 7, ks=(2, 3), want=[heat3d_numpy(x0, 7)])


def test_snapshots_chunks_and_callbacks_at_any_step():
    x0 = np.random.default_rng(5).random(301).astype(np.float32)
    mesh = pgas.make_mesh(("x",), devices=4)
    seen = []
    # snapshots of 5 steps (a group and a step), chunks of 15: neither ends where k = 4 does;
    # both chunks scan 3 snapshots, one program (chunks of 18 and 12 steps compiled two)
    u, snaps = pgas.run(heat, pgas.from_numpy(x0, mesh, boundary=pgas.Keep()), 30,
                        snapshot_every=5, chunk=15, steps_per_exchange=4,
                        callback=lambda done, s: seen.append((done, s.to_numpy())))  # fmt: skip
    fields = snaps.to_numpy()
    for i in range(6):
        np.testing.assert_array_equal(fields[i], heat_numpy(x0, 5 * (i + 1)))
    assert [d for d, _ in seen] == [15, 30]
    np.testing.assert_array_equal(seen[0][1], heat_numpy(x0, 15))
    np.testing.assert_array_equal(u.to_numpy(), heat_numpy(x0, 30))


def test_k_lowered_when_blocks_are_too_small():
    u = pgas.from_numpy(np.zeros(40, np.float32), pgas.make_mesh(("x",), devices=8))  # 5 a block
    how = pgas.plan.plan(heat, u, 16)
    assert how.steps_per_exchange == 5 and "lowered from 16 to 5" in how.note
    report = pgas.comm_report(heat, u, steps_per_exchange=16)
    assert report.steps_per_exchange == 5 and "lowered" in str(report)
    assert pgas.plan.plan(heat, u, "auto").steps_per_exchange <= 5
    with pytest.raises(pgas.PgasError, match="steps_per_exchange = 0"):
        pgas.run(heat, u, 3, steps_per_exchange=0)


@pytest.mark.parametrize("bc, pairs", [(pgas.Keep(), 3), (pgas.Periodic(), 4)])
def test_one_exchange_per_k_steps_in_the_compiled_loop(bc, pairs):
    u = pgas.from_numpy(np.zeros(4096, np.float32), pgas.make_mesh(("x",), devices=4), boundary=bc)
    for k in (1, 4):
        report = pgas.comm_report(heat, u, loop=True, steps_per_exchange=k)
        permutes = [c for c in report.per_step if c.kind == "collective-permute"]
        assert len(permutes) == 2 and report.gathers == 0
        assert all(c.messages == pairs and c.bytes == 4 * k for c in permutes)  # D-1 on an edge
        assert report.count("collective-permute") == 2 / k and report.ratio == 1.0


@pytest.mark.parametrize("bc", [pgas.Keep(), pgas.Neumann(), pgas.Dirichlet(-1.0)])
def test_explicit_path_deep_halos(bc):
    x0 = np.random.default_rng(6).random(1001)
    mesh = pgas.make_mesh(("x",), devices=3)

    def kernel(e):
        return 0.5 * e[1:-1] + 0.25 * (e[:-2] + e[2:])

    region = (slice(1, -1),)
    # NumPy's bits (k = 1 gave them; the explicit path at k = 1 under each boundary kind:
    # tests/references/test_explicit.py, test_until_backends.py)
    want = heat_numpy(x0, 23)
    # groups of 2 steps, then 23 % 2 single ones: one loop for every k (k = 4 took it too; the
    # step writes the interior only, so no ghost's value reaches the result at any k)
    out = explicit.run(kernel, pgas.from_numpy(x0, mesh, boundary=bc), 23, 1, region, 2)
    np.testing.assert_array_equal(out.to_numpy(), want)
    auto = pgas.run(heat, pgas.from_numpy(x0, mesh, boundary=bc), 23, steps_per_exchange=2)
    np.testing.assert_array_equal(auto.to_numpy(), want)
    report = explicit.comm_report(kernel, pgas.from_numpy(x0, mesh, boundary=bc), 1, region,
                                  steps_per_exchange=2)  # fmt: skip
    assert (
        report.per_exchange("collective-permute") == 2 and report.count("collective-permute") == 1
    )


def test_explicit_life_deep_halos_uneven():
    b0 = (np.random.default_rng(7).random((29, 31)) < 0.4).astype(np.uint8)
    mesh = pgas.make_mesh(("y", "x"), shape=(2, 3), devices=6)

    def kernel(e):
        n = sum(e[1 + dy : e.shape[0] - 1 + dy, 1 + dx : e.shape[1] - 1 + dx]
                for dy, dx in NEIGHBOURS_2D)  # fmt: skip
        c = e[1:-1, 1:-1]
        return ((n == 3) | ((c == 1) & (n == 2))).astype(e.dtype)

    for k in (1, 3):
        out = explicit.run(kernel, pgas.from_numpy(b0, mesh), 10, 1, None, k)
        np.testing.assert_array_equal(out.to_numpy(), life_numpy(b0, 10))


def _mixed_case(devices=4, n=64):
    """A periodic field u and a Neumann coefficient c read across the same axis."""
    i = np.arange(n)
    u0, c0 = np.sin(i / 5.0), np.cos(i / 3.0)
    mesh = pgas.make_mesh(("x",), devices=devices)
    c = pgas.from_numpy(c0, mesh, boundary=pgas.Neumann())
    make = lambda: pgas.from_numpy(u0, mesh, boundary=pgas.Periodic())  # noqa: E731
    return u0, c0, c, make


def _mixed_numpy(u, c0, steps, two=False):
    e = np.pad(c0, 1, mode="symmetric")  # Neumann: the ghost mirrors the edge cell
    for _ in range(steps):
        if two:
            u = 0.5 * u + 0.125 * (e[:-2] + e[2:]) + 0.25 * np.roll(u, 1)
            u = 0.5 * u + 0.25 * np.roll(u, -1)
        else:
            u = 0.5 * u + 0.125 * (e[:-2] + e[2:]) + 0.125 * (np.roll(u, 1) + np.roll(u, -1))
    return u


def test_periodic_field_reading_a_neumann_constant_lowers_k_and_says_why():
    """Its halo cells across the wrap would read the constant's mirror ghosts: k drops to 1."""
    u0, c0, c, make = _mixed_case()

    def step(u):
        u[...] = (0.5 * u + 0.125 * (pgas.shift(c, 1) + pgas.shift(c, -1))
                  + 0.125 * (pgas.shift(u, 1) + pgas.shift(u, -1)))  # fmt: skip
        return u

    how = pgas.plan.plan(step, make(), 4)
    assert how.steps_per_exchange == 1 and how.widths == (1,)
    assert "lowered from 4 to 1: a periodic array reads a non-periodic one" in how.note
    assert "lowered from" in pgas.plan.plan(step, make()).note  # auto says it too
    _run_all_k(step, make, 13, ks=(3, "auto"), want=[_mixed_numpy(u0, c0, 13)])


def test_two_dependent_assignments_of_mixed_topology_run_without_frames():
    u0, c0, c, make = _mixed_case()

    def step(u):
        u[...] = 0.5 * u + 0.125 * (pgas.shift(c, 1) + pgas.shift(c, -1)) + 0.25 * pgas.shift(u, 1)
        u[...] = 0.5 * u + 0.25 * pgas.shift(u, -1)
        return u

    how = pgas.plan.plan(step, make(), "auto")
    assert how.widths is None and how.steps_per_exchange == 1
    assert how.note.startswith("k = 1, no deep halos: a periodic array")
    _run_all_k(step, make, 9, ks=(4,), want=[_mixed_numpy(u0, c0, 9, two=True)])
    rep = pgas.comm_report(step, make())  # each assignment exchanges its own halo
    assert rep.steps_per_exchange == 1 and rep.count("collective-permute") > 0
    assert rep.count("all-gather") == 0


def test_a_constant_read_across_the_axis_keeps_deep_halos():
    """A constant is extended as far as the state: frames narrow enough to hold it."""
    i = np.arange(32)
    u0, c0 = np.sin(i / 5.0), np.cos(i / 3.0)
    mesh = pgas.make_mesh(("x",), devices=4)
    c = pgas.from_numpy(c0, mesh, boundary=pgas.Periodic())
    make = lambda: pgas.from_numpy(u0, mesh, boundary=pgas.Periodic())  # noqa: E731

    def step(u):
        u[...] = (0.5 * u + 0.125 * (pgas.shift(c, 1) + pgas.shift(c, -1))
                  + 0.125 * (pgas.shift(u, 1) + pgas.shift(u, -1)))  # fmt: skip
        return u

    how = pgas.plan.plan(step, make())
    assert how.widths == (1,) and 1 < how.steps_per_exchange <= 8 // 2  # blocks of 8 cells
    ref = u0.copy()
    for _ in range(11):
        ref = (0.5 * ref + 0.125 * (np.roll(c0, 1) + np.roll(c0, -1))
               + 0.125 * (np.roll(ref, 1) + np.roll(ref, -1)))  # fmt: skip
    _run_all_k(step, make, 11, ks=(3, "auto"), want=[ref])  # odd; even (auto: 4)


# ---- Neumann faces in the double-buffered loop: ghosts re-filled in the buffer ----------
def _diffuse_2d(u):
    u[...] = u + 0.125 * (pgas.shift(u, 1, 0) + pgas.shift(u, -1, 0) + pgas.shift(u, 1, 1)
                          + pgas.shift(u, -1, 1) - 4 * u)  # fmt: skip
    return u


def _diffuse_2d_numpy(x, steps):
    for _ in range(steps):
        e = np.pad(x, 1, mode="symmetric")  # Neumann: the ghost mirrors the edge cell
        x = x + 0.125 * (e[:-2, 1:-1] + e[2:, 1:-1] + e[1:-1, :-2] + e[1:-1, 2:] - 4 * x)
    return x


def test_neumann_2d_on_uneven_blocks_equals_numpy_at_every_k():
    """A Neumann face on both axes, both split into blocks of unequal length (the last one
    shorter): the deep-halo loop re-fills the mirrored ghosts in its buffer after each
    sub-step, the second axis's from the first's (corners and halo rows included)."""
    x0 = np.random.default_rng(3).random((23, 31))
    mesh = pgas.make_mesh(("y", "x"), shape=(2, 3), devices=6)
    make = lambda: pgas.from_numpy(x0, mesh, boundary=pgas.Neumann())  # noqa: E731
    # k = 4: 2 groups and 3 steps (an even k, as auto's k = 8 on these blocks)
    _run_all_k(_diffuse_2d, make, 11, ks=(4,), want=[_diffuse_2d_numpy(x0, 11)])


def test_a_field_read_at_its_neumann_face_after_it_was_assigned_in_the_same_step():
    """u is assigned, then v reads u across its Neumann faces in the same step: v sees the
    ghosts of the new u (the re-fill the loop defers to its buffer is done for the read)."""

    def step(s):
        u, v = s["u"], s["v"]
        u[...] = u + 0.25 * (pgas.shift(u, 1, 0) - 2 * u + pgas.shift(u, -1, 0))
        v[...] = 0.5 * v + (pgas.shift(u, 1, 0) - pgas.shift(u, -1, 0))
        return {"u": u, "v": v}

    u0, v0 = np.random.default_rng(5).random((2, 41))
    mesh = pgas.make_mesh(("x",), devices=3)
    make = lambda: {n: pgas.from_numpy(x, mesh, boundary=pgas.Neumann())  # noqa: E731
                    for n, x in (("u", u0), ("v", v0))}  # fmt: skip
    u, v = u0, v0
    for _ in range(9):
        e = np.pad(u, 1, mode="symmetric")
        u = u + 0.25 * (e[:-2] - 2 * u + e[2:])
        e = np.pad(u, 1, mode="symmetric")
        v = 0.5 * v + (e[:-2] - e[2:])
    # k = 4: 2 groups and a step (auto's k = 13 on blocks of 14 and 13 exceeds the 9 steps)
    _run_all_k(step, make, 9, ks=(4,), want=[u, v])


def test_neumann_ghosts_are_refilled_by_slabs_not_block_sized_selects():
    """The compiled deep-halo loop of a Neumann step builds no block-sized pad: each
    sub-step's ghosts are slabs written into the buffer, so a sub-step stays one pass over
    the block (a masked full-size select of a padded slab made it 4-7x slower)."""
    mesh = pgas.make_mesh(("x",), devices=2)
    u = pgas.from_numpy(np.zeros(4096, np.float32), mesh, boundary=pgas.Neumann())
    hlo = pgas.loop.compiled(heat, u, 4).as_text()  # any k > 1 (auto's 16: a longer body)
    sizes = [int(m) for m in re.findall(r"= f32\[1,(\d+)\]\{1,0\} pad\(", hlo)]
    assert "while" in hlo and max(sizes, default=0) < 64, sizes
