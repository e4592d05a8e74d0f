"""Game of Life patterns: the RLE format, built-in patterns, boards and a NumPy step.

Contract:

* Every board and pattern is a 2-D ``numpy.uint8`` array indexed ``[y, x]``
  (row, column), ``1`` alive and ``0`` dead. Row 0 is the top row of the RLE
  picture, so a glider ``bob$2bo$3o!`` moves towards larger ``y`` and ``x``.
* :func:`parse_rle` reads the standard run-length encoded format (Golly,
  LifeWiki): ``#`` comment lines (``#N name``, ``#C ...``, ``#O ...``), the
  header ``x = W, y = H[, rule = B3/S23]``, then runs ``<count><tag>`` with
  tags ``b`` (dead), ``o`` (alive), ``$`` (end of row) and ``!`` (end of
  pattern). Whitespace and line breaks may appear anywhere in the body, other
  letters (multi-state files) are read as alive, ``.`` as dead, and text after
  ``!`` is ignored. Only Conway's Life (``B3/S23``, also written ``23/3``) is
  accepted; a missing rule means Life.
* This module depends on NumPy only (not on the rest of ``pgas``), so tests
  and examples can use it as an independent reference:
  :func:`life_step_numpy` is one generation on a periodic torus.

Every error is a :class:`PatternError` (a ``ValueError``) whose message names
the parameter or line, the value and the fix.

>>> g = load_pattern("glider")
>>> board = place((8, 8), g, at=(0, 0))
>>> for _ in range(4):
...     board = life_step_numpy(board)
>>> bool((board == place((8, 8), g, at=(1, 1))).all())
True
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Iterable, Sequence
from itertools import groupby
from pathlib import Path

import numpy as np

__all__ = [
    "BUILTIN_PATTERNS",
    "DensityError",
    "PatternError",
    "PlacementError",
    "RLEError",
    "UnknownPatternError",
    "UnsupportedRuleError",
    "builtin_names",
    "life_step_numpy",
    "load_pattern",
    "parse_rle",
    "place",
    "random_board",
    "to_rle",
]


class PatternError(ValueError):
    """Base class of every error this module raises for a bad input."""


class UnknownPatternError(PatternError):
    """A pattern name that is not built in, or a pattern file that does not exist."""


class RLEError(PatternError):
    """Malformed RLE text; the message gives the source, the line number and the reason."""


class UnsupportedRuleError(RLEError):
    """An RLE file for a rule other than Conway's Life (B3/S23)."""


class PlacementError(PatternError):
    """A pattern that does not fit on the board at the requested position."""


class DensityError(PatternError):
    """A random-board density outside [0, 1], or a bad board shape."""


# --------------------------------------------------------------------------
# Built-in patterns, written from the standard definitions (LifeWiki) and
# checked by tests/examples/test_life_patterns.py with life_step_numpy.
# --------------------------------------------------------------------------

BUILTIN_PATTERNS: dict[str, str] = {
    "block": """\
#N Block
#C Still life, 4 cells.
x = 2, y = 2, rule = B3/S23
2o$2o!
""",
    "blinker": """\
#N Blinker
#C Period-2 oscillator, 3 cells.
x = 3, y = 1, rule = B3/S23
3o!
""",
    "glider": """\
#N Glider
#C Moves one cell down and one right (+y, +x) every 4 generations, 5 cells.
x = 3, y = 3, rule = B3/S23
bob$2bo$3o!
""",
    "lwss": """\
#N Lightweight spaceship
#C Moves two cells left (-x) every 4 generations, 9 cells.
x = 5, y = 4, rule = B3/S23
bo2bo$o4b$o3bo$4o!
""",
    "pulsar": """\
#N Pulsar
#C Period-3 oscillator, 48 cells.
x = 13, y = 13, rule = B3/S23
2b3o3b3o2$o4bobo4bo$o4bobo4bo$o4bobo4bo$2b3o3b3o2$2b3o3b3o$o4bobo4bo$
o4bobo4bo$o4bobo4bo2$2b3o3b3o!
""",
    "gosper-glider-gun": """\
#N Gosper glider gun
#O Bill Gosper
#C Period-30 gun: emits one glider (+y, +x) every 30 generations, 36 cells.
x = 36, y = 9, rule = B3/S23
24bo$22bobo$12b2o6b2o12b2o$11bo3bo4b2o12b2o$2o8bo5bo3b2o$2o8bo3bob2o4b
obo$10bo5bo7bo$11bo3bo$12b2o!
""",
    "r-pentomino": """\
#N R-pentomino
#C Methuselah: 5 cells that settle only at generation 1103 (116 cells).
x = 3, y = 3, rule = B3/S23
b2o$2o$bo!
""",
    "acorn": """\
#N Acorn
#O Charles Corderman
#C Methuselah: 7 cells that settle only at generation 5206 (633 cells).
x = 7, y = 3, rule = B3/S23
bo$3bo$2o2b3o!
""",
}

_ALIASES: dict[str, str] = {
    "gosper": "gosper-glider-gun",
    "glider-gun": "gosper-glider-gun",
    "gosper-gun": "gosper-glider-gun",
    "gun": "gosper-glider-gun",
    "r": "r-pentomino",
    "rpentomino": "r-pentomino",
    "lightweight-spaceship": "lwss",
}


def builtin_names() -> list[str]:
    """The names :func:`load_pattern` knows, sorted (aliases not included).

    Returns:
        The canonical built-in pattern names.

    >>> builtin_names()[:3]
    ['acorn', 'blinker', 'block']
    """
    return sorted(BUILTIN_PATTERNS)


# --------------------------------------------------------------------------
# RLE reading and writing
# --------------------------------------------------------------------------

_LIFE_RULES = {"b3/s23", "s23/b3", "23/3", "life"}


def _check_rule(rule: str, where: str) -> None:
    if re.sub(r"\s+", "", rule).lower() not in _LIFE_RULES:
        raise UnsupportedRuleError(
            f"{where}: rule = {rule.strip()!r} is not supported: pgas simulates Conway's "
            f"Life only (B3/S23, also written 23/3); use a Life pattern, or fix the rule "
            f"field if the pattern is meant for Life"
        )


def _parse_header(line: str, where: str) -> tuple[int, int]:
    fields: dict[str, str] = {}
    last_key = ""
    for part in line.split(","):
        key, sep, value = part.partition("=")
        key = key.strip().lower()
        if not sep and last_key == "rule":
            # a rule such as "B3/S23:T10,10" contains a comma: keep it whole
            fields["rule"] += "," + part
            continue
        if not sep or not key:
            raise RLEError(
                f"{where}: bad header {line.strip()!r}: expected 'x = W, y = H' with an "
                f"optional ', rule = B3/S23'; write the header in that form"
            )
        if key not in ("x", "y", "rule"):
            raise RLEError(
                f"{where}: bad header {line.strip()!r}: unknown field {key!r}; the header "
                f"has only the fields x, y and rule"
            )
        fields[key] = value
        last_key = key
    if "x" not in fields or "y" not in fields:
        raise RLEError(
            f"{where}: bad header {line.strip()!r}: it must give both x and y "
            f"('x = W, y = H'); add the missing field"
        )
    size = {}
    for key in ("x", "y"):
        value = fields[key].strip()
        if not value.isdigit():
            raise RLEError(
                f"{where}: bad header: {key} = {value!r} is not a non-negative integer; "
                f"give the pattern's {'width' if key == 'x' else 'height'} in cells"
            )
        size[key] = int(value)
    if "rule" in fields:
        _check_rule(fields["rule"], where)
    return size["y"], size["x"]


MAX_PATTERN_CELLS = 2**28
"""The largest pattern (``x * y`` cells, one byte each) :func:`parse_rle` allocates."""


def _check_size(height: int, width: int, board: tuple[int, int] | None, where: str) -> None:
    """Refuse a header too large for the board or for memory, before anything is allocated."""
    if board is not None and (height > board[0] or width > board[1]):
        raise PlacementError(
            f"{where}: the header's pattern x = {width}, y = {height} does not fit the "
            f"{board[0]}x{board[1]} board; use a board of at least "
            f"{max(board[0], height)}x{max(board[1], width)} (--size), or a smaller pattern"
        )
    if height * width > MAX_PATTERN_CELLS:
        raise RLEError(
            f"{where}: the header's x = {width}, y = {height} asks for {height * width:,} "
            f"cells, more than the {MAX_PATTERN_CELLS:,} a pattern may have "
            f"(MAX_PATTERN_CELLS); fix x and y in the header (they give the pattern's bounding "
            f"box in cells)"
        )


def parse_rle(
    text: str, *, source: str = "<string>", board: tuple[int, int] | None = None
) -> np.ndarray:
    """Parse a pattern in RLE format.

    The header is checked before anything is allocated: against ``board``
    when given, and against :data:`MAX_PATTERN_CELLS`.

    Args:
        text: the RLE text (comments, header, body).
        source: a name for the text used in error messages (e.g. the file path).
        board: ``(rows, cols)`` of the board the pattern must fit, if known.

    Returns:
        A ``uint8`` array of shape ``(y, x)`` from the header; cells the body
        does not mention are dead.

    Raises:
        RLEError: no or bad header, an unexpected character, a row longer than
            ``x``, more rows than ``y``, a zero count, or no closing ``!``; the
            message gives the line number.
        UnsupportedRuleError: a rule other than B3/S23.
        PlacementError: a header larger than ``board``.

    >>> parse_rle("#N Glider\\nx = 3, y = 3, rule = B3/S23\\nbob$2bo$3o!")
    array([[0, 1, 0],
           [0, 0, 1],
           [1, 1, 1]], dtype=uint8)
    """
    lines = text.splitlines()
    header_index = _find_header(lines, source)
    where = f"{source}, line {header_index + 1}"
    height, width = _parse_header(lines[header_index], where)
    _check_size(height, width, board, where)
    return _parse_body(lines, header_index + 1, np.zeros((height, width), np.uint8), source)


def _find_header(lines: list[str], source: str) -> int:
    """Index of the header line (the first that is neither blank nor a ``#`` comment)."""
    for index, line in enumerate(lines):
        stripped = line.strip()
        if not stripped:
            continue
        if stripped.startswith("#"):
            if stripped[:2] == "#r" and stripped[2:].strip():
                _check_rule(stripped[2:], f"{source}, line {index + 1}")
            continue
        return index
    raise RLEError(
        f"{source}, line {max(len(lines), 1)}: no header line found: an RLE pattern "
        f"starts (after '#' comment lines) with 'x = W, y = H, rule = B3/S23'; add the header"
    )


def _parse_body(lines: list[str], start: int, board: np.ndarray, source: str) -> np.ndarray:
    """Fill ``board`` from the runs of ``lines[start:]``, up to the closing ``!``."""
    height, width = board.shape
    row = col = 0
    digits = ""
    for index in range(start, len(lines)):
        line = lines[index]
        where = f"{source}, line {index + 1}"
        if line.lstrip().startswith("#"):
            continue
        for char in line:
            if char.isspace():
                continue
            if char.isdigit():
                digits += char
                continue
            count = int(digits) if digits else 1
            digits = ""
            if count == 0:
                raise RLEError(
                    f"{where}: run count 0 before {char!r}; counts are positive (omit the "
                    f"count for a run of 1)"
                )
            if char == "!":
                return board
            if char == "$":
                row += count
                col = 0
                continue
            _check_run(char, row, col + count, height, width, where)
            if char not in "b.":
                board[row, col : col + count] = 1
            col += count
    raise RLEError(
        f"{source}, line {len(lines)}: the pattern has no closing '!' (the file may be "
        f"truncated); end the body with '!'"
    )


def _check_run(char: str, row: int, end: int, height: int, width: int, where: str) -> None:
    if not (char.isalpha() or char == "."):
        raise RLEError(
            f"{where}: unexpected character {char!r}; the body may contain only "
            f"counts, 'b' (dead), 'o' (alive), '$' (end of row) and '!' (end)"
        )
    if row >= height:
        raise RLEError(
            f"{where}: the body has more rows than the header's y = {height}; "
            f"fix y in the header or remove the extra rows"
        )
    if end > width:
        raise RLEError(
            f"{where}: row {row} is longer than the header's x = {width} "
            f"(it reaches {end} cells); fix x in the header or the row"
        )


def _wrap(tokens: Iterable[str], width: int = 70) -> list[str]:
    lines: list[str] = []
    current = ""
    for token in tokens:
        if current and len(current) + len(token) > width:
            lines.append(current)
            current = ""
        current += token
    lines.append(current)
    return lines


def to_rle(board: np.ndarray, *, name: str | None = None, comments: Sequence[str] = ()) -> str:
    """Write a board in RLE format (the inverse of :func:`parse_rle`).

    Trailing dead cells of a row and trailing empty rows are omitted; the
    header keeps the full size, so ``parse_rle(to_rle(b))`` equals ``b != 0``.
    Body lines are at most 70 characters.

    Args:
        board: a 2-D array; non-zero cells are alive.
        name: written as a ``#N`` line if given.
        comments: each written as a ``#C`` line.

    Returns:
        The RLE text, ending with a newline.

    Raises:
        PatternError: if ``board`` is not 2-D.

    >>> print(to_rle(np.array([[0, 1, 0], [0, 0, 1], [1, 1, 1]]), name="Glider"), end="")
    #N Glider
    x = 3, y = 3, rule = B3/S23
    bo$2bo$3o!
    """
    cells = np.asarray(board)
    if cells.ndim != 2:
        raise PatternError(
            f"board has shape {cells.shape}; to_rle writes 2-D boards, pass one (y, x) board"
        )
    tokens: list[str] = []
    pending_rows = 0
    for r, row in enumerate(cells != 0):
        if r:
            pending_rows += 1
        runs = [(alive, len(list(group))) for alive, group in groupby(row.tolist())]
        if runs and not runs[-1][0]:
            runs.pop()
        if not runs:
            continue
        if pending_rows:  # row ends since the last written row (or leading empty rows)
            tokens.append(f"{pending_rows if pending_rows > 1 else ''}$")
        pending_rows = 0
        for alive, n in runs:
            tokens.append(f"{n if n > 1 else ''}{'o' if alive else 'b'}")
    tokens.append("!")
    head = [f"#N {name}"] if name else []
    head += [f"#C {c}" for c in comments]
    head.append(f"x = {cells.shape[1]}, y = {cells.shape[0]}, rule = B3/S23")
    return "\n".join(head + _wrap(tokens)) + "\n"


# --------------------------------------------------------------------------
# Loading and placing
# --------------------------------------------------------------------------


def _canonical(name: str) -> str:
    key = re.sub(r"[\s_]+", "-", name.strip().lower())
    return _ALIASES.get(key, key)


def load_pattern(
    name_or_path: str | os.PathLike[str], board: tuple[int, int] | None = None
) -> np.ndarray:
    """Load a built-in pattern by name, or an RLE file from disk.

    A value ending in ``.rle`` (any case), or naming an existing file, is
    read from disk; anything else is a built-in name. Names ignore case, and
    ``_`` or spaces stand for ``-``; ``gosper``, ``glider-gun`` and ``gun``
    are aliases of ``gosper-glider-gun``.

    Args:
        name_or_path: a built-in name (see :func:`builtin_names`) or a path.
        board: ``(rows, cols)`` of the board it must fit (checked before
            allocating, see :func:`parse_rle`).

    Returns:
        The pattern as a ``uint8`` array ``(y, x)``.

    Raises:
        UnknownPatternError: an unknown name or a missing ``.rle`` file.
        RLEError: the file is not valid RLE.

    >>> load_pattern("blinker")
    array([[1, 1, 1]], dtype=uint8)
    >>> load_pattern("Gosper").shape
    (9, 36)
    """
    text = os.fspath(name_or_path)
    if text.lower().endswith(".rle") or os.path.isfile(text):
        path = Path(text)
        if not path.is_file():
            raise UnknownPatternError(
                f"pattern file {text!r} does not exist; give the path of an existing .rle "
                f"file, or a built-in name: {', '.join(builtin_names())}"
            )
        return parse_rle(
            path.read_text(encoding="utf-8", errors="replace"), source=text, board=board
        )
    key = _canonical(text)
    if key not in BUILTIN_PATTERNS:
        raise UnknownPatternError(
            f"unknown pattern {text!r}; built-in patterns are: {', '.join(builtin_names())} "
            f"(aliases: {', '.join(sorted(_ALIASES))}); or give a path to an .rle file"
        )
    return parse_rle(BUILTIN_PATTERNS[key], source=f"<built-in {key}>", board=board)


def _board_shape(shape: object, parameter: str, error: type[PatternError]) -> tuple[int, int]:
    try:
        given = tuple(shape)  # type: ignore[call-overload]
        dims = tuple(int(d) for d in given)
        ok = len(dims) == 2 and all(d > 0 and d == g for d, g in zip(dims, given, strict=True))
    except (TypeError, ValueError):
        ok = False
    if not ok:
        raise error(
            f"{parameter} = {shape!r} is not a board shape; give two positive integers "
            f"(rows, columns), e.g. (256, 512)"
        )
    return dims[0], dims[1]


def place(
    board_shape: tuple[int, int],
    pattern: np.ndarray,
    at: tuple[int, int] | None = None,
) -> np.ndarray:
    """An empty board with ``pattern`` placed at ``at``.

    Args:
        board_shape: ``(rows, columns)`` of the board.
        pattern: a 2-D array; non-zero cells are alive.
        at: ``(y, x)`` of the pattern's top-left cell; ``None`` centres it.

    Returns:
        A new ``uint8`` board of ``board_shape``.

    Raises:
        PlacementError: a bad shape, or the pattern does not fit at ``at``
            (no wrap-around); the message gives the board size, the pattern
            size, the position, and the fix.

    >>> place((3, 5), load_pattern("blinker"), at=(1, 1))
    array([[0, 0, 0, 0, 0],
           [0, 1, 1, 1, 0],
           [0, 0, 0, 0, 0]], dtype=uint8)
    """
    rows, cols = _board_shape(board_shape, "board_shape", PlacementError)
    cells = np.asarray(pattern)
    if cells.ndim != 2:
        raise PlacementError(
            f"pattern has shape {cells.shape}; place needs a 2-D (y, x) pattern, e.g. "
            f"from load_pattern"
        )
    ph, pw = cells.shape
    if at is None:
        y, x = (rows - ph) // 2, (cols - pw) // 2
    else:
        try:
            y, x = (int(v) for v in at)
        except (TypeError, ValueError):
            raise PlacementError(
                f"at = {at!r} is not a position; give (y, x) as two integers"
            ) from None
    if y < 0 or x < 0 or y + ph > rows or x + pw > cols:
        if ph > rows or pw > cols:
            fix = f"use a board of at least {max(rows, ph)}x{max(cols, pw)}"
        else:
            fix = (
                f"use 0 <= y <= {rows - ph} and 0 <= x <= {cols - pw}, "
                f"or a board of at least {max(rows, y + ph)}x{max(cols, x + pw)}"
            )
        raise PlacementError(
            f"a {ph}x{pw} pattern (rows x columns) at (y={y}, x={x}) does not fit a "
            f"{rows}x{cols} board: it would cover rows {y}..{y + ph - 1} and columns "
            f"{x}..{x + pw - 1}; {fix}"
        )
    board = np.zeros((rows, cols), dtype=np.uint8)
    board[y : y + ph, x : x + pw] = cells != 0
    return board


def random_board(shape: tuple[int, int], density: float, seed: int | None = 0) -> np.ndarray:
    """A board whose cells are alive independently with probability ``density``.

    Args:
        shape: ``(rows, columns)``.
        density: probability that a cell is alive, in ``[0, 1]``.
        seed: seed of ``numpy.random.default_rng``; the same seed gives the
            same board. ``None`` draws fresh entropy.

    Returns:
        A ``uint8`` board.

    Raises:
        DensityError: ``density`` outside ``[0, 1]`` (or NaN), or a bad shape.

    >>> b = random_board((4, 6), 0.5, seed=1)
    >>> b.shape, b.dtype, bool((b == random_board((4, 6), 0.5, seed=1)).all())
    ((4, 6), dtype('uint8'), True)
    """
    dims = _board_shape(shape, "shape", DensityError)
    try:
        p = float(density)
    except (TypeError, ValueError):
        p = math.nan
    if not 0.0 <= p <= 1.0:
        raise DensityError(
            f"density = {density!r} is outside [0, 1]; give the fraction of live cells, e.g. 0.3"
        )
    rng = np.random.default_rng(seed)
    return (rng.random(dims) < p).astype(np.uint8)


def life_step_numpy(board: np.ndarray) -> np.ndarray:
    """One Game of Life generation (B3/S23) on a periodic torus, in NumPy.

    The reference the JAX versions are tested against: the 8 neighbours are
    summed with ``np.roll``, then ``(n == 3) | ((b == 1) & (n == 2))``.

    Args:
        board: a 2-D array; non-zero cells are alive.

    Returns:
        The next generation as a new ``uint8`` array.

    Raises:
        PatternError: if ``board`` is not 2-D.

    >>> life_step_numpy(np.array([[0, 0, 0], [1, 1, 1], [0, 0, 0]]))[:, 1]
    array([1, 1, 1], dtype=uint8)
    """
    cells = np.asarray(board)
    if cells.ndim != 2:
        raise PatternError(
            f"board has shape {cells.shape}; life_step_numpy steps a 2-D (y, x) board"
        )
    b = (cells != 0).astype(np.uint8)
    n = np.zeros_like(b)
    for dy in (-1, 0, 1):
        for dx in (-1, 0, 1):
            if dy or dx:
                n += np.roll(b, (dy, dx), axis=(0, 1))
    return ((n == 3) | ((b == 1) & (n == 2))).astype(np.uint8)
