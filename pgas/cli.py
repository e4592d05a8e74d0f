"""The ``pgas`` command line.

``pgas compare SOURCE [--steps N] [--devices N] [--ranks P] [--backends auto,explicit,mpi]
[--set key=value ...] [--json]`` runs one problem on the three backends and
prints the comparison table (see :mod:`pgas.compare`). ``pgas report SOURCE``
prints what the compiler sent for one step of the automatic path.
SOURCE is ``path/to/file.py:factory`` or ``package.module:factory``.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence

__all__ = ["main"]


def _value(text: str):
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def _kwargs(pairs: Sequence[str]) -> dict:
    out = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise SystemExit(f"pgas: --set {pair!r}: write key=value, e.g. --set n=1000")
        out[key] = _value(value)
    return out


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``pgas`` command.

    >>> main(["--help"]) if False else 0
    0
    """
    ap = argparse.ArgumentParser(prog="pgas", description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="command", required=True)
    c = sub.add_parser("compare", help="run one problem on auto, explicit and mpi backends")
    r = sub.add_parser("report", help="collectives the compiler inserted for one step")
    for p in (c, r):
        p.add_argument("source", help="path/to/file.py:factory or package.module:factory")
        p.add_argument("--devices", type=int, help="virtual CPU devices (default: all local)")
        p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                       help="keyword argument of the problem factory (repeatable)")  # fmt: skip
    c.add_argument("--steps", type=int, default=100)
    c.add_argument("--ranks", type=int, help="MPI ranks (default: as many as devices)")
    c.add_argument("--backends", default="auto,explicit,mpi")
    c.add_argument("--json", action="store_true", help="print the results as JSON")
    r.add_argument("--shardy", action="store_true", help="also print the Shardy StableHLO")
    args = ap.parse_args(argv)

    import pgas

    if args.devices:
        pgas.use_cpu_devices(args.devices)
    kwargs = _kwargs(args.set)
    if args.command == "compare":
        from pgas.compare import compare, format_table

        results = compare(args.source, args.steps, devices=args.devices, ranks=args.ranks,
                          backends=args.backends.split(","), **kwargs)  # fmt: skip
        if args.json:
            print(json.dumps([x.to_dict() for x in results]))
        else:
            print(format_table(results))
        return 0
    from pgas.compare import _build, _mesh_for
    from pgas.problem import load_problem

    problem = load_problem(args.source, **kwargs)
    report = pgas.comm_report(problem.step, _build(problem, _mesh_for(problem, args.devices)),
                              shardy=args.shardy)  # fmt: skip
    print(report)
    if args.shardy:
        print(report.stablehlo)
    return 0


if __name__ == "__main__":
    sys.exit(main())
