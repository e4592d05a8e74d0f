"""Bit-packed Life (examples/life/packed.py) against the byte version, bitwise, on every backend.

The reference is the byte example itself: ``life.board`` (the same initial board)
stepped by ``life.kernel`` in NumPy on a wrap-padded board, the computation its
MPI path does with one rank. Every packed result is decoded to the uint8 board
and compared cell by cell, with the checksum and population the runner reports.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from helpers import load_example

import pgas
import pgas.references.explicit
from pgas.app.problem import checksum

ROOT = Path(__file__).resolve().parents[2]
MPIEXEC = Path(sys.executable).parent / "mpiexec"
sys.path.insert(0, str(ROOT / "examples" / "life"))
import packed  # noqa: E402

L = load_example("life")


def byte_life(size: str, pattern: str = "random", steps: int = 0, **kw) -> np.ndarray:
    """The byte example's board after ``steps`` generations (its kernel, in NumPy)."""
    b = L.board(size, pattern, **kw)
    for _ in range(steps):
        b = L.kernel(np.pad(b, 1, mode="wrap"))
    return b


def packed_run(p, devices: int, backend: str, steps: int) -> np.ndarray:
    mesh = pgas.make_mesh(("y", "x"), devices=devices)
    g = pgas.from_function(p.init, p.shape, mesh, dtype=p.dtype, boundary=p.boundary)
    if backend == "auto":
        g = pgas.run(p.step, g, steps)
    else:
        g = pgas.explicit.run(p.kernel, g, steps, halo=p.halo)
    return p.decode(g.to_numpy())


def assert_same_board(got: np.ndarray, want: np.ndarray) -> None:
    assert got.dtype == np.uint8 and got.shape == want.shape
    assert checksum(got) == checksum(want)
    assert int(got.sum()) == int(want.sum())
    np.testing.assert_array_equal(got, want)


# ---- packing ------------------------------------------------------------------------------
def test_bit_order_cell_x_is_bit_x_mod_64_of_word_x_div_64():
    for x in (0, 1, 63, 64, 100, 191):
        b = np.zeros((1, 192), np.uint8)
        b[0, x] = 1
        want = np.zeros((1, 3), np.uint64)
        want[0, x // 64] = np.uint64(1) << np.uint64(x % 64)
        np.testing.assert_array_equal(packed.pack(b), want)


@pytest.mark.parametrize("width", [1, 5, 63, 64, 65, 100, 127, 128, 130, 191, 193, 4097])
def test_packing_covers_the_row_once(width):
    pk = packed.packing(width)
    lengths, starts = pk.lengths(), pk.starts()
    assert lengths.sum() == width and lengths.max() - lengths.min() <= 1
    assert (starts == np.concatenate([[0], np.cumsum(lengths)[:-1]])).all()
    assert lengths.max() == 64 if width % 64 == 0 else lengths.max() <= 63
    assert pk.words == -(-width // (64 if width % 64 == 0 else 63))
    b = (np.random.default_rng(width).random((3, width)) < 0.5).astype(np.uint8)
    w = packed.pack(b)
    assert w.dtype == np.uint64 and w.shape == (3, pk.words)
    np.testing.assert_array_equal(packed.unpack(w, width), b)
    np.testing.assert_array_equal(pk.decode(np.stack([w, w])), np.stack([b, b]))  # snapshots
    # any run of whole word columns decodes alone (a block of a decomposed board)
    j = np.arange(pk.words)
    for lo, hi in ((0, 1), (pk.words // 2, pk.words)):
        cells = b[:, pk.starts(j[lo]) : pk.starts(j[hi - 1]) + pk.lengths(j[hi - 1])]
        np.testing.assert_array_equal(pk.decode(w[:, lo:hi]), cells)


@pytest.mark.parametrize("size, pattern", [("20x130", "random"), ("12x128", "gosper"),
                                           ("9x70", "glider"), ("7x5", "blinker")])  # fmt: skip
def test_words_from_global_indices_equal_the_packed_byte_board(size, pattern):
    p = packed.problem(size, pattern, density=0.4, seed=2)
    y, j = np.indices(p.shape)
    np.testing.assert_array_equal(p.init(y, j), packed.pack(L.board(size, pattern, density=0.4,
                                                                     seed=2)))  # fmt: skip
    # one block only (rows 3.., words 1..): the words of those indices, nothing else
    np.testing.assert_array_equal(p.init(y[3:, 1:], j[3:, 1:]), p.init(y, j)[3:, 1:])


@pytest.mark.parametrize("width", [1, 5, 37, 63, 64, 65, 100, 127, 130, 191, 193])
def test_numpy_kernel_any_width(width):
    size = f"9x{width}"
    p = packed.problem(size, density=0.4, seed=width)
    w = p.init(*np.indices(p.shape))
    for _ in range(7):
        w = p.kernel(np.pad(w, 1, mode="wrap"))
    assert_same_board(p.decode(w), byte_life(size, steps=7, density=0.4, seed=width))


# ---- the JAX backends on meshes of 1 and 6 devices ------------------------------------------
@pytest.mark.parametrize("size", ["31x128", "29x130"])  # 2 full words; 3 words of 44, 43, 43
@pytest.mark.parametrize("devices", [1, 6])  # 2, 3 and 2x3 meshes: test_life_packed_output.py
def test_random_boards_equal_byte_version(devices, size):
    p = packed.problem(size, density=0.35, seed=devices)
    want = byte_life(size, steps=6, density=0.35, seed=devices)
    for backend in ("auto", "explicit"):
        assert_same_board(packed_run(p, devices, backend, 6), want)


@pytest.mark.parametrize("size, devices, backend", [("40x100", 4, "auto"),
                                                    ("40x128", 6, "explicit")])  # fmt: skip
def test_every_builtin_pattern_equals_byte_version(size, devices, backend):
    names = L.patterns.builtin_names()
    assert len(names) >= 8
    for name in names:
        p = packed.problem(size, name)
        assert_same_board(packed_run(p, devices, backend, 12), byte_life(size, name, steps=12))


def test_glider_crosses_the_ragged_seam():
    # 70 cells = 2 words of 35: the torus seam is between word 1's last cell and word 0's first
    p = packed.problem("12x70", "glider", at="4,66")
    got = packed_run(p, 4, "auto", 16)
    assert_same_board(got, byte_life("12x70", "glider", at="4,66", steps=16))
    assert got[:, :3].sum() > 0  # the glider wrapped around


def test_comm_report_one_word_halo_per_side():
    p = packed.problem("64x256")  # words (64, 4): blocks of 32 rows x 2 words on a 2x2 mesh
    mesh = pgas.make_mesh(("y", "x"), shape=(2, 2), devices=4)
    g = pgas.from_function(p.init, p.shape, mesh, dtype=p.dtype, boundary=p.boundary)
    report = pgas.comm_report(p.step, g, loop=True, steps_per_exchange=1)
    assert report.gathers == 0 and report.count("all-gather") == 0
    assert report.count("collective-permute") == 4
    # rows: 2 sides x 1 row x 2 words x 8 B; words: 2 sides x 1 word x (32 + 2) rows x 8 B
    assert report.ideal_bytes == 2 * 2 * 8 + 2 * 34 * 8
    assert report.bytes("collective-permute") == report.ideal_bytes
    assert report.ratio == 1.0
    deep = pgas.comm_report(p.step, g, loop=True, steps_per_exchange=2)  # a halo of 2 words
    assert deep.per_exchange("collective-permute") == 4 and deep.count("collective-permute") == 2
    assert deep.ratio == 1.0 and deep.gathers == 0


# ---- errors -------------------------------------------------------------------------------
@pytest.mark.parametrize("width", [0, -3, 2.5, True, "64"])
def test_bad_width(width):
    with pytest.raises(packed.PackingError, match="width"):
        packed.packing(width)


def test_bad_words_and_boards():
    with pytest.raises(packed.PackingError, match=r"uint64\[\.\.\., rows, 3\]"):
        packed.unpack(np.zeros((2, 2), np.uint64), 130)
    with pytest.raises(packed.PackingError, match="dtype int64"):
        packed.unpack(np.zeros((2, 3), np.int64), 130)
    with pytest.raises(packed.PackingError, match="2-D"):
        packed.pack(np.zeros((2, 2, 2), np.uint8))


def test_more_blocks_than_words_along_x():
    p = packed.problem("8x64")  # one word per row
    with pytest.raises(packed.PackingError, match="at least 128 cells wide, or at most 1 part"):
        packed.check_mesh(packed.packing(64), 2)
    packed.check_mesh(packed.packing(65), 2)  # 2 words of 33 and 32 cells: fine
    mesh = pgas.make_mesh(("y", "x"), shape=(1, 2), devices=2)
    with pytest.raises(pgas.LayoutError, match="axis 1 has 1 cells but mesh axis 'x' has 2"):
        pgas.from_function(p.init, p.shape, mesh, dtype=p.dtype, boundary=p.boundary)


def test_words_must_be_uint64():
    p = packed.problem("8x64")
    g = pgas.from_numpy(np.zeros(p.shape, np.uint32), pgas.make_mesh(("y", "x"), devices=1))
    with pytest.raises(packed.PackingError, match="jax_enable_x64"):
        pgas.run(p.step, g, 1)
    with pytest.raises(packed.PackingError, match="uint32"):
        p.kernel(np.zeros((3, 3), np.uint32))


# ---- MPI: one mpiexec -n 3 launch, several cases ----------------------------------------------
MPI_CASES = [
    dict(name="random-128", size="31x128", pattern="random", steps=6, dims=None),
    dict(name="random-130-x3", size="29x130", pattern="random", steps=6, dims=[1, 3], seed=1),
    dict(name="random-200-x3", size="20x200", pattern="random", steps=5, dims=[1, 3], seed=2),
    dict(name="gosper-192-x3", size="24x192", pattern="gosper", steps=31, dims=[1, 3]),
    dict(name="pulsar-65", size="21x65", pattern="pulsar", steps=4, dims=[3, 1]),
]


@pytest.mark.skipif(not MPIEXEC.exists(), reason="no mpiexec next to the interpreter")
def test_mpiexec_3_ranks(tmp_path):
    cases, out = tmp_path / "cases.json", tmp_path / "out.json"
    cases.write_text(json.dumps(MPI_CASES))
    drop = ("PMI", "OMPI_", "PMIX", "HYDRA", "SLURM", "XLA_FLAGS")
    env = {k: v for k, v in os.environ.items() if not k.startswith(drop)}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    script = ROOT / "tests" / "mpi_scripts" / "life_packed_cases.py"
    cmd = [str(MPIEXEC), "-n", "3", sys.executable, str(script), str(cases), str(out)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=240, env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    res = json.loads(out.read_text())
    for case in MPI_CASES:
        r = res[case["name"]]
        want = byte_life(case["size"], case["pattern"], case["steps"], seed=case.get("seed", 0))
        assert r["ranks"] == 3 and np.prod(r["dims"]) == 3
        if case["dims"]:
            assert r["dims"] == case["dims"]
        assert r["checksum"] == checksum(want) and r["population"] == int(want.sum())
        np.testing.assert_array_equal(np.array(r["board"], np.uint8), want)
