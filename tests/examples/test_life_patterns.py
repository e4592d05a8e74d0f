"""Tests of examples/life/patterns.py: RLE, built-in patterns, boards, the NumPy step.

Each built-in pattern is checked against its known behaviour, stepped with the
module's own NumPy reference step on a torus large enough that nothing wraps.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

_PATH = Path(__file__).resolve().parents[2] / "examples" / "life" / "patterns.py"


def _load_module():
    # Loaded by path: examples/ is not a package and need not be on sys.path.
    name = "pgas_examples_life_patterns"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, _PATH)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


P = _load_module()


def picture(text: str) -> np.ndarray:
    """An ASCII picture ('O' alive, '.' dead) as a uint8 array: an independent encoding."""
    rows = [r.strip() for r in text.strip().splitlines()]
    return np.array([[c == "O" for c in r] for r in rows], dtype=np.uint8)


def run(board: np.ndarray, generations: int) -> list[np.ndarray]:
    """Boards of generations 0..generations."""
    out = [board]
    for _ in range(generations):
        out.append(P.life_step_numpy(out[-1]))
    return out


# --------------------------------------------------------------------------
# The built-in patterns
# --------------------------------------------------------------------------

PICTURES = {
    "block": "OO\nOO",
    "blinker": "OOO",
    "glider": ".O.\n..O\nOOO",
    "lwss": ".O..O\nO....\nO...O\nOOOO.",
    "r-pentomino": ".OO\nOO.\n.O.",
    "acorn": ".O.....\n...O...\nOO..OOO",
    "pulsar": """
        ..OOO...OOO..
        .............
        O....O.O....O
        O....O.O....O
        O....O.O....O
        ..OOO...OOO..
        .............
        ..OOO...OOO..
        O....O.O....O
        O....O.O....O
        O....O.O....O
        .............
        ..OOO...OOO..
    """,
    "gosper-glider-gun": """
        ........................O...........
        ......................O.O...........
        ............OO......OO............OO
        ...........O...O....OO............OO
        OO........O.....O...OO..............
        OO........O...O.OO....O.O...........
        ..........O.....O.......O...........
        ...........O...O....................
        ............OO......................
    """,
}


@pytest.mark.parametrize("name", sorted(PICTURES))
def test_builtin_matches_its_picture(name):
    pattern = P.load_pattern(name)
    assert pattern.dtype == np.uint8
    np.testing.assert_array_equal(pattern, picture(PICTURES[name]))


def test_every_builtin_has_a_picture():
    assert sorted(PICTURES) == P.builtin_names()


@pytest.mark.parametrize(
    "alias", ["gosper", "glider-gun", "Gosper Glider Gun", "gosper_glider_gun", "GUN"]
)
def test_gun_aliases(alias):
    np.testing.assert_array_equal(P.load_pattern(alias), P.load_pattern("gosper-glider-gun"))


def test_block_is_still():
    board = P.place((8, 8), P.load_pattern("block"))
    np.testing.assert_array_equal(P.life_step_numpy(board), board)


@pytest.mark.parametrize("name, period", [("blinker", 2), ("pulsar", 3)])
def test_oscillator_period(name, period):
    board = P.place((24, 24), P.load_pattern(name))
    boards = run(board, 2 * period)
    for g in range(1, period):
        assert not np.array_equal(boards[g], board), f"{name} repeats after {g} < {period}"
    np.testing.assert_array_equal(boards[period], board)
    np.testing.assert_array_equal(boards[2 * period], board)


def test_pulsar_population():
    assert int(P.load_pattern("pulsar").sum()) == 48


def test_glider_moves_one_diagonal_cell_every_4_generations():
    glider = P.load_pattern("glider")
    board = P.place((16, 16), glider, at=(2, 3))
    boards = run(board, 12)
    for k in (1, 2, 3):
        np.testing.assert_array_equal(boards[4 * k], P.place((16, 16), glider, at=(2 + k, 3 + k)))
    assert all(int(b.sum()) == 5 for b in boards)


def test_glider_wraps_around_the_torus():
    board = P.place((8, 8), P.load_pattern("glider"), at=(0, 0))
    np.testing.assert_array_equal(run(board, 32)[-1], board)  # 8 cells diagonally = 32 gens


def test_lwss_moves_two_cells_left_every_4_generations():
    board = P.place((12, 20), P.load_pattern("lwss"), at=(4, 10))
    boards = run(board, 8)
    np.testing.assert_array_equal(boards[4], np.roll(board, -2, axis=1))
    np.testing.assert_array_equal(boards[8], np.roll(board, -4, axis=1))


def test_gosper_gun_emits_a_glider_every_30_generations():
    gun = P.load_pattern("gosper-glider-gun")
    assert gun.shape == (9, 36) and int(gun.sum()) == 36
    board = P.place((80, 80), gun, at=(1, 1))
    boards = run(board, 150)
    for k in range(6):  # gliders move 7.5 cells per 30 generations: none wraps by 150
        b = boards[30 * k]
        # the gun itself is back in its initial phase ...
        np.testing.assert_array_equal(b[1:10, 1:37], gun)
        # ... and the population grew by one glider (5 cells) per period
        assert int(b.sum()) == 36 + 5 * k
    # the gliders travel down-right: after 150 generations cells exist far from the gun
    last = boards[150]
    assert last[30:, 30:].sum() > 0 and last[:1].sum() == 0


def test_r_pentomino_is_a_methuselah():
    start = P.load_pattern("r-pentomino")
    assert int(start.sum()) == 5
    # Known: it settles at generation 1103 with 116 cells (6 of them escaping gliders).
    # On a 512 torus the first glider has not met anything by then.
    board = P.place((512, 512), start)
    pops = [int(b.sum()) for b in run(board, 1110)]
    assert pops[1102] != 116
    assert pops[1103:] == [116] * 8
    assert max(pops) > 300


def test_acorn_is_a_methuselah():
    start = P.load_pattern("acorn")
    assert int(start.sum()) == 7
    # Known: it settles only at generation 5206 (633 cells); here only the early growth.
    boards = run(P.place((256, 256), start), 400)
    assert int(boards[400].sum()) > 300
    assert not any(np.array_equal(boards[400], boards[g]) for g in range(370, 400))


# --------------------------------------------------------------------------
# RLE
# --------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(PICTURES))
def test_builtin_round_trip(name):
    pattern = P.load_pattern(name)
    np.testing.assert_array_equal(P.parse_rle(P.to_rle(pattern, name=name)), pattern)


@settings(max_examples=60, deadline=None)
@given(
    arrays(
        np.uint8,
        st.tuples(st.integers(1, 12), st.integers(1, 90)),
        elements=st.integers(0, 1),
    )
)
def test_random_round_trip(board):
    text = P.to_rle(board)
    assert all(len(line) <= 70 for line in text.splitlines()[1:])
    np.testing.assert_array_equal(P.parse_rle(text), board)


def test_to_rle_counts_and_blank_rows():
    board = np.zeros((6, 5), np.uint8)
    board[1, 1:4] = 1
    board[4, 0] = 1
    assert P.to_rle(board).splitlines()[-1] == "$b3o3$o!"


def test_parse_tolerates_comments_breaks_spaces_and_other_letters():
    text = """#N Glider
#C a comment
#O someone

x=3,y=3, rule = b3/s23
b
o $ 2
b o$
3A! anything after the end is ignored: $$$ 9o
"""
    np.testing.assert_array_equal(P.parse_rle(text), P.load_pattern("glider"))


def test_parse_rule_optional_and_old_notation():
    for header in (
        "x = 3, y = 1",
        "x = 3, y = 1, rule = 23/3",
        "x = 3, y = 1, rule = S23/B3",
    ):
        np.testing.assert_array_equal(P.parse_rle(header + "\n3o!"), [[1, 1, 1]])


def test_parse_short_rows_and_missing_rows_are_dead():
    np.testing.assert_array_equal(P.parse_rle("x = 4, y = 3\no!"), [[1, 0, 0, 0], [0] * 4, [0] * 4])


@pytest.mark.parametrize(
    "text, line, words",
    [
        ("#C only a comment\n", 1, "no header"),
        ("x = 3\n3o!", 1, "both x and y"),
        ("x = 3, y = three\n3o!", 1, "not a non-negative integer"),
        ("x = 3, y = 1, z = 2\n3o!", 1, "unknown field 'z'"),
        ("width 3\n3o!", 1, "bad header"),
        ("#N t\nx = 3, y = 1\n2o\n2o!", 4, "longer than the header's x = 3"),
        ("x = 3, y = 1\n3o$o!", 2, "more rows than the header's y = 1"),
        ("x = 3, y = 2\nbo$\n3*!", 3, "unexpected character '*'"),
        ("x = 3, y = 1\n0o!", 2, "run count 0"),
        ("x = 3, y = 1\n3o\n", 2, "no closing '!'"),
    ],
)
def test_malformed_rle(text, line, words):
    with pytest.raises(P.RLEError, match="line") as info:
        P.parse_rle(text, source="t.rle")
    message = str(info.value)
    assert f"t.rle, line {line}:" in message
    assert words in message


@pytest.mark.parametrize("rule", ["B36/S23", "B3/S23:T10,10", "HighLife"])
def test_other_rules_are_refused(rule):
    with pytest.raises(P.UnsupportedRuleError, match="Conway's Life only") as info:
        P.parse_rle(f"x = 3, y = 1, rule = {rule}\n3o!")
    assert rule in str(info.value)
    assert isinstance(info.value, ValueError)


def test_rule_comment_is_checked():
    with pytest.raises(P.UnsupportedRuleError, match="line 1"):
        P.parse_rle("#r 34/34\nx = 3, y = 1\n3o!")


# --------------------------------------------------------------------------
# load_pattern, place, random_board, life_step_numpy
# --------------------------------------------------------------------------


def test_load_from_file(tmp_path):
    path = tmp_path / "my glider.rle"
    path.write_text(P.BUILTIN_PATTERNS["glider"])
    np.testing.assert_array_equal(P.load_pattern(path), P.load_pattern("glider"))
    np.testing.assert_array_equal(P.load_pattern(str(path)), P.load_pattern("glider"))
    other = tmp_path / "pattern.txt"  # an existing file without the suffix
    other.write_text("x = 3, y = 1\n3o!")
    np.testing.assert_array_equal(P.load_pattern(other), [[1, 1, 1]])


def test_load_bad_file_names_the_file(tmp_path):
    path = tmp_path / "bad.rle"
    path.write_text("x = 2, y = 1\n3o!")
    with pytest.raises(P.RLEError, match=r"bad\.rle, line 2"):
        P.load_pattern(path)


def test_unknown_name_lists_the_known_ones():
    with pytest.raises(P.UnknownPatternError) as info:
        P.load_pattern("spaceship-x")
    message = str(info.value)
    assert "'spaceship-x'" in message
    for name in P.builtin_names():
        assert name in message


def test_missing_rle_file(tmp_path):
    with pytest.raises(P.UnknownPatternError, match="does not exist"):
        P.load_pattern(tmp_path / "nope.rle")


def test_place_centres_by_default_and_copies():
    glider = P.load_pattern("glider")
    board = P.place((7, 9), glider)
    assert board.dtype == np.uint8 and board.shape == (7, 9)
    np.testing.assert_array_equal(board[2:5, 3:6], glider)
    assert int(board.sum()) == 5


def test_place_accepts_edges():
    board = P.place((5, 5), P.load_pattern("block"), at=(3, 3))
    assert board[3:, 3:].all() and int(board.sum()) == 4


@pytest.mark.parametrize(
    "shape, at, words",
    [
        ((20, 20), (0, 0), "use a board of at least 20x36"),
        ((40, 40), (35, 2), "use 0 <= y <= 31 and 0 <= x <= 4"),
        ((40, 40), (-1, 0), "(y=-1, x=0)"),
    ],
)
def test_place_refuses_what_does_not_fit(shape, at, words):
    with pytest.raises(P.PlacementError) as info:
        P.place(shape, P.load_pattern("gosper"), at=at)
    message = str(info.value)
    assert "9x36 pattern" in message and f"{shape[0]}x{shape[1]} board" in message
    assert words in message


@pytest.mark.parametrize("shape", [(0, 5), (4,), (4, 5, 6), "ab", (2.5, 3)])
def test_place_bad_shape(shape):
    with pytest.raises(P.PlacementError, match="board_shape"):
        P.place(shape, P.load_pattern("blinker"))


def test_random_board():
    a = P.random_board((64, 32), 0.3, seed=7)
    assert a.dtype == np.uint8 and a.shape == (64, 32)
    assert set(np.unique(a)) <= {0, 1}
    assert 0.2 < a.mean() < 0.4
    np.testing.assert_array_equal(a, P.random_board((64, 32), 0.3, seed=7))
    assert not np.array_equal(a, P.random_board((64, 32), 0.3, seed=8))
    assert P.random_board((5, 5), 0.0).sum() == 0
    assert P.random_board((5, 5), 1.0).sum() == 25


@pytest.mark.parametrize("density", [-0.1, 1.5, float("nan"), "half"])
def test_random_board_bad_density(density):
    with pytest.raises(P.DensityError, match=r"density = .* outside \[0, 1\]"):
        P.random_board((4, 4), density)


def test_random_board_bad_shape():
    with pytest.raises(P.DensityError, match="shape"):
        P.random_board((4, -4), 0.5)


def test_life_step_numpy_rules():
    # a lone cell dies, three in an L give birth to the fourth of a block
    board = np.zeros((6, 6), np.uint8)
    board[0, 0] = 1
    assert P.life_step_numpy(board).sum() == 0
    board = P.place((6, 6), picture("OO\nO."), at=(2, 2))
    np.testing.assert_array_equal(
        P.life_step_numpy(board), P.place((6, 6), picture("OO\nOO"), at=(2, 2))
    )
    # a full board dies of overcrowding; non-uint8 input is accepted
    assert P.life_step_numpy(np.ones((5, 5), bool)).sum() == 0


def test_life_step_numpy_wraps():
    board = np.zeros((5, 5), np.uint8)
    board[0, [4, 0, 1]] = 1  # a blinker across the x edge
    out = P.life_step_numpy(board)
    assert out[[4, 0, 1], 0].all() and int(out.sum()) == 3


def test_errors_are_value_errors():
    for cls in (
        P.UnknownPatternError,
        P.RLEError,
        P.UnsupportedRuleError,
        P.PlacementError,
        P.DensityError,
    ):
        assert issubclass(cls, P.PatternError) and issubclass(cls, ValueError)


def test_not_2d():
    with pytest.raises(P.PatternError, match="2-D"):
        P.life_step_numpy(np.zeros(5))
    with pytest.raises(P.PatternError, match="2-D"):
        P.to_rle(np.zeros((2, 2, 2)))


HUGE = "x = 100000000, y = 100000000, rule = B3/S23\nbo$2bo$3o!\n"


def test_huge_header_is_refused_before_allocating():
    with pytest.raises(P.RLEError, match=r"x = 100000000, y = 100000000 asks for") as info:
        P.parse_rle(HUGE, source="huge.rle")
    assert "huge.rle, line 1" in str(info.value) and "MAX_PATTERN_CELLS" in str(info.value)
    wide = f"x = {P.MAX_PATTERN_CELLS + 1}, y = 1\no!\n"
    with pytest.raises(P.RLEError, match="more than the"):
        P.parse_rle(wide)
    assert P.parse_rle(f"x = {P.MAX_PATTERN_CELLS // 4096}, y = 1\no!\n").shape[1] == 65536


def test_header_checked_against_the_board(tmp_path):
    path = tmp_path / "big.rle"
    path.write_text("x = 40, y = 3\no!\n")
    with pytest.raises(P.PlacementError, match=r"x = 40, y = 3 does not fit the 32x32 board"):
        P.load_pattern(str(path), board=(32, 32))
    assert P.load_pattern(str(path), board=(3, 40)).shape == (3, 40)
    with pytest.raises(P.PlacementError, match="at least 32x36"):
        P.load_pattern("gosper", board=(32, 32))


@pytest.mark.one_process
def test_life_example_exits_2_on_a_huge_header(tmp_path):
    import subprocess

    path = tmp_path / "huge.rle"
    path.write_text(HUGE)
    script = Path(__file__).resolve().parents[2] / "examples" / "life" / "life.py"
    r = subprocess.run(
        [sys.executable, str(script), "--devices", "1", "--size", "64x64", "--steps", "1",
         "--pattern", str(path)],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert r.returncode == 2, r.stderr[-2000:]
    assert "x = 100000000, y = 100000000 asks for" in r.stderr
    assert "Traceback" not in r.stderr
