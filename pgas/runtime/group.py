"""The processes of one run, as one: decisions made once on process 0 and shared.

Some questions must get the same answer on every process of a run: is the
output path usable, does the store exist, is there a checkpoint to resume and
at which step. If every process looked at the file system itself, one could
look after another had begun to create something (a half-made store is "not
a Zarr store") and the processes would disagree: one raises, the others wait
in the next collective. So such a question is answered once, on process 0,
before any process creates anything, and the answer (or the error) is sent to
all: :meth:`Group.decide`.

A :class:`Group` talks through an MPI communicator where the run has one
(``mpiexec``, the mpi backend) and through JAX's processes otherwise (``srun``
without MPI). With one process nothing is sent.

>>> g = Group.local()
>>> g.decide(lambda: {"start": 40})
{'start': 40}
>>> g.agree(None)
([], 0)
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, TypeVar

import numpy as np

from pgas.errors import PgasError

__all__ = ["Group", "DecisionError"]

T = TypeVar("T")


class DecisionError(PgasError):
    """A decision made on process 0 failed there; raised on the other processes."""


class Group:
    """The processes writing or deciding together (see the module).

    Args:
        comm: an MPI communicator of the processes, or None: JAX's processes
            (``jax.process_index()``, ``jax.process_count()``).
    """

    def __init__(self, comm: Any = None, *, rank: int | None = None, size: int | None = None):
        self.comm = comm
        if rank is not None and size is not None:
            self.rank, self.size = rank, size
        elif comm is not None:
            self.rank, self.size = comm.rank, comm.size
        else:
            import jax

            self.rank, self.size = jax.process_index(), jax.process_count()

    @classmethod
    def local(cls) -> Group:
        """One process alone (nothing is sent)."""
        return cls(rank=0, size=1)

    def agree(self, message: str | None, value: int = 0) -> tuple[list[str], int]:
        """A barrier that tells every process which processes failed (and why), and
        process 0's ``value``."""
        if self.size == 1:
            return ([message] if message else []), value
        if self.comm is not None:
            everyone = self.comm.allgather((message, value))
            return [f"process {r}: {m}" for r, (m, _) in enumerate(everyone) if m], everyone[0][1]
        from jax.experimental import multihost_utils

        rows = multihost_utils.process_allgather(np.array([message is not None, value], np.int64))
        rows = np.asarray(rows).reshape(self.size, 2)
        failed = np.flatnonzero(rows[:, 0])
        notes = [message if r == self.rank else f"process {r}: see its error" for r in failed]
        return notes, int(rows[0, 1])

    def share(self, value: Any) -> Any:
        """Process 0's ``value`` (anything JSON can carry) on every process; collective."""
        if self.size == 1:
            return value
        if self.comm is not None:
            return self.comm.bcast(value if self.rank == 0 else None, root=0)
        from jax.experimental import multihost_utils

        data = json.dumps(value).encode() if self.rank == 0 else b""
        length = multihost_utils.broadcast_one_to_all(np.array(len(data), np.int64))
        buffer = np.zeros(int(length), np.uint8)
        if self.rank == 0:
            buffer[:] = np.frombuffer(data, np.uint8)
        got = multihost_utils.broadcast_one_to_all(buffer)
        return json.loads(np.asarray(got, np.uint8).tobytes().decode())

    def decide(self, question: Callable[[], T]) -> T:
        """Run ``question()`` on process 0 only and return its answer on every process.

        An exception on process 0 is raised there unchanged and, as a
        :class:`DecisionError` with the same message, on every other process;
        no process is left waiting. Nothing may be created before the answer
        is known everywhere, so ``question`` only looks (or creates what all
        processes then use, on process 0, before answering).
        """
        answer, error = None, None
        if self.rank == 0:
            try:
                answer = question()
            except Exception as exc:  # noqa: BLE001 (sent to every process, raised below)
                error = exc
        shared = self.share(
            {"error": f"{type(error).__name__}: {error}"}
            if error is not None
            else {"answer": answer}  # fmt: skip
        )
        if error is not None:
            raise error
        if "error" in shared:
            raise DecisionError(f"process 0 stopped the run: {shared['error']}")
        return shared["answer"]
