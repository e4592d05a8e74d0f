"""pgas.runtime.group: a decision is made on process 0 only and shared with every process."""

import pytest

from pgas.runtime.group import DecisionError, Group


class FakeComm:
    """An MPI communicator as process ``rank`` sees it; ``bcast`` returns process 0's value."""

    def __init__(self, rank, size, root_value=None):
        self.rank, self.size, self.root_value = rank, size, root_value

    def bcast(self, value, root=0):
        return value if self.rank == root else self.root_value

    def allgather(self, item):
        return [item] * self.size


def test_one_process_answers_itself():
    assert Group.local().decide(lambda: {"resume": None}) == {"resume": None}


def test_only_process_0_asks_the_question():
    asked = []
    g = Group(FakeComm(1, 2, {"answer": {"resume": "ck/step-000000040-ab"}}))
    got = g.decide(lambda: asked.append(1))
    assert got == {"resume": "ck/step-000000040-ab"} and asked == []


def test_process_0s_error_stops_every_process():
    g = Group(FakeComm(1, 2, {"error": "PgasError: --out: exists"}))
    with pytest.raises(DecisionError, match="process 0 stopped the run: PgasError: --out"):
        g.decide(lambda: 1 / 0)


def test_process_0_raises_its_own_error_unchanged():
    def question():
        raise ValueError("bad path")

    with pytest.raises(ValueError, match="bad path"):
        Group(FakeComm(0, 2)).decide(question)
