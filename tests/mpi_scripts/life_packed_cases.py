"""Rank-side driver for tests/examples/test_life_packed.py: packed Life cases with pgas.mpi.

Usage: ``mpiexec -n P python life_packed_cases.py CASES.json OUT.json``.

Each case dict has ``size``, ``pattern``, ``steps`` and ``dims`` (ranks per
axis, or null). Every rank builds its words from global indices
(``packed.problem``); rank 0 writes, per case, the checksum and population of
the decoded uint8 board, the decoded board itself and the rank layout.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples" / "life"))


def main() -> None:
    import packed
    from mpi4py import MPI

    from pgas.app.problem import checksum
    from pgas.references import mpi as pm

    with pm.abort_on_error():
        cases = json.loads(Path(sys.argv[1]).read_text())
        out = {}
        for case in cases:
            p = packed.problem(case["size"], case["pattern"], seed=case.get("seed", 0))
            r = pm.run(p.kernel, p.init, p.shape, p.dtype, case["steps"], p.halo, p.boundary,
                       dims=case["dims"])  # fmt: skip
            if MPI.COMM_WORLD.rank == 0:
                board = p.decode(r.field)
                out[case["name"]] = {
                    "checksum": checksum(board),
                    "population": int(board.sum()),
                    "board": board.tolist(),
                    "dims": list(r.dims),
                    "ranks": MPI.COMM_WORLD.size,
                    "bytes_per_step": r.bytes_per_step,
                }
        if MPI.COMM_WORLD.rank == 0:
            Path(sys.argv[2]).write_text(json.dumps(out))


if __name__ == "__main__":
    main()
