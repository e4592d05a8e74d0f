"""Problems: loading from a source string, the checksum, the demo problem."""

from pathlib import Path

import numpy as np
import pytest

import pgas
from pgas.app.problem import Problem, checksum, demo, load_problem

PROBLEMS = str(Path(__file__).resolve().parents[1] / "problems.py")


def test_load_from_a_file_and_a_module():
    p = load_problem(f"{PROBLEMS}:heat", n=31, dtype="float64")
    assert isinstance(p, Problem) and p.shape == (31,) and p.dtype == "float64" and p.cells == 31
    assert load_problem("pgas.problem:demo", n=5).shape == (5,)


@pytest.mark.parametrize(
    "source, needle",
    [
        ("heat", "write 'path/to/file.py:factory'"),
        (":heat", "write 'path/to/file.py:factory'"),
        (f"{PROBLEMS}:", "write 'path/to/file.py:factory'"),
        ("no/such/file.py:heat", "file 'no/such/file.py' does not exist"),
        (f"{PROBLEMS}:nope", "has no function 'nope'"),
        ("builtins:dict", "returned dict, not a pgas Problem"),
    ],
)
def test_load_errors_name_the_source_and_the_fix(source, needle):
    with pytest.raises(pgas.PgasError) as err:
        load_problem(source)
    assert needle in str(err.value)


def test_unknown_keyword_names_what_the_factory_takes():
    with pytest.raises(pgas.PgasError, match="size.*heat takes n, dtype .*--set KEY=VALUE"):
        load_problem(f"{PROBLEMS}:heat", size=3)


def test_the_problem_checksum_is_the_io_checksum():
    import pgas.io.checksum

    assert checksum is pgas.io.checksum.checksum


def test_demo_problem_keeps_its_cells():
    p = demo(6)
    assert p.init(np.arange(6)).tolist() == list(range(6)) and p.decode is None
