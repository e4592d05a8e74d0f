"""The end of a run: the final field's checksum and diagnostics, from each process's blocks.

Contract: :func:`final_values` decodes this process's ``(region, block)`` pieces
of the final state (the problem's ``decode``, block by block), hashes them into
the checksum of the whole decoded field (:func:`pgas.io.checksum.checksum`,
collective over ``comm``: one small reduction, no gather) and computes the
diagnostics of an :class:`pgas.io.output.Output`, combined the same way;
:func:`final_checksum` is the checksum alone. :func:`decode_field` decodes a
gathered field (the ``Result.field`` of ``gather=True``). Every backend of
:mod:`pgas.app.runner` and :mod:`pgas.app.iterate` ends here.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from pgas.app.problem import Problem

__all__ = ["Final", "final_values", "final_checksum", "decode_field"]


@dataclasses.dataclass(frozen=True)
class Final:
    """The checksum of the final (decoded) field and its diagnostics (a name -> value dict)."""

    checksum: str
    diagnostics: dict


def decode_field(problem: Problem, values: np.ndarray | None) -> np.ndarray | None:
    """The gathered ``values`` decoded by ``problem.decode`` (as they are without one; None
    stays None).

    >>> from pgas.app.problem import demo
    >>> decode_field(demo(2), np.zeros(2)), decode_field(demo(), None)
    (array([0., 0.]), None)
    """
    return values if values is None or problem.decode is None else problem.decode(values)


def final_values(problem: Problem, output, pieces, comm, processes: int) -> Final:
    """Checksum and diagnostics of the final field from this process's blocks (collective).

    Args:
        problem: the problem (its ``decode``, ``cell_shape`` or ``shape`` and ``dtype``).
        output: a :class:`pgas.io.output.Output` whose diagnostics to compute, or None.
        pieces: this process's ``(region, block)`` pairs of the final state.
        comm: the processes' communicator (mpi4py), or None for one process.
        processes: how many processes hold pieces.

    >>> from pgas.app.problem import checksum, demo
    >>> block = np.arange(8, dtype="float32")
    >>> final_values(demo(), None, [((slice(0, 8),), block)], None, 1).checksum == checksum(block)
    True
    """
    from pgas.io.blocks import decode_piece, decoded_dtype
    from pgas.io.checksum import checksum_pieces
    from pgas.io.output import reducer

    cells = tuple(problem.cell_shape or problem.shape)
    dtype = decoded_dtype(problem.decode, problem.dtype, len(cells))
    decoded = [decode_piece(p, problem.decode, cells) for p in pieces]
    digest = checksum_pieces(decoded, cells, dtype, comm, processes)
    diagnostics = output.diagnostics if output is not None else None
    values = diagnostics([c for _, c in decoded], reducer(comm, processes)) if diagnostics else {}
    return Final(digest, dict(values))


def final_checksum(problem: Problem, pieces, comm, processes: int) -> str:
    """The checksum of the final field from this process's ``(region, block)`` pieces
    (collective over ``comm``; see :func:`pgas.io.checksum.checksum`).

    >>> from pgas.app.problem import checksum, demo
    >>> block = np.arange(8, dtype="float32")
    >>> final_checksum(demo(), [((slice(0, 8),), block)], None, 1) == checksum(block)
    True
    """
    return final_values(problem, None, pieces, comm, processes).checksum
