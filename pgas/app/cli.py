"""The ``pgas`` command line.

``pgas compare SOURCE [--steps N] [--devices N] [--platform auto|cpu|gpu] [--ranks P]
[--backends auto,explicit,mpi] [--steps-per-exchange K|auto] [--set key=value ...] [--json]``
runs one problem on the three backends and prints the comparison table (see
:mod:`pgas.compare`). ``pgas report SOURCE`` prints what the compiler sent for
one step of the automatic path. SOURCE is ``path/to/file.py:factory`` or
``package.module:factory``. Bad arguments exit with code 2 and a message.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence

from pgas.app.options import PLATFORMS, positive_int, steps_per_exchange
from pgas.errors import PgasError

__all__ = ["main"]


def _value(text: str):
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def _kwargs(ap: argparse.ArgumentParser, pairs: Sequence[str]) -> dict:
    out = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            ap.error(f"--set {pair!r}: write key=value, e.g. --set n=1000")
        out[key] = _value(value)
    return out


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="pgas", description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="command", required=True)
    c = sub.add_parser("compare", help="run one problem on auto, explicit and mpi backends")
    r = sub.add_parser("report", help="collectives the compiler inserted for one step")
    for p in (c, r):
        p.add_argument("source", help="path/to/file.py:factory or package.module:factory")
        p.add_argument("--devices", type=positive_int, help="JAX devices (default: all local)")
        p.add_argument("--platform", choices=PLATFORMS, default="auto",
                       help="JAX platform (default auto: JAX's default)")  # fmt: skip
        p.add_argument(
            "--steps-per-exchange",
            type=steps_per_exchange,
            default="auto",
            metavar="K|auto",
            help="physical steps per halo exchange (default auto)",
        )
        p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                       help="keyword argument of the problem factory (repeatable)")  # fmt: skip
    c.add_argument("--steps", type=positive_int, default=100)
    c.add_argument("--ranks", type=positive_int, help="MPI ranks (default: as many as devices)")
    c.add_argument("--backends", default="auto,explicit,mpi")
    c.add_argument("--json", action="store_true", help="print the results as JSON")
    r.add_argument("--shardy", action="store_true", help="also print the Shardy StableHLO")
    return ap


def _report(args: argparse.Namespace, kwargs: dict) -> None:
    import jax
    import numpy as np

    from pgas.app.problem import load_problem
    from pgas.app.state import build, build_params, mesh_for
    from pgas.loop.report import comm_report

    problem = load_problem(args.source, **kwargs)
    if np.dtype(problem.dtype).itemsize == 8:  # a float64 problem needs 64-bit JAX
        jax.config.update("jax_enable_x64", True)
    k = args.steps_per_exchange
    mesh = mesh_for(problem, args.devices)
    report = comm_report(problem.step, build(problem, mesh), shardy=args.shardy,
                         steps_per_exchange=k, params=build_params(problem, mesh))  # fmt: skip
    print(report)
    if args.shardy:
        print(report.stablehlo)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``pgas`` command; returns the exit code.

    >>> main(["report", "pgas.problem:demo", "--devices", "1"])  # doctest: +ELLIPSIS
    communication of ...
    ...
    0
    """
    ap = _parser()
    args = ap.parse_args(argv)
    kwargs = _kwargs(ap, args.set)
    try:
        from pgas.app.platform import select

        select(args.platform, args.devices)
        if args.command == "report":
            _report(args, kwargs)
            return 0
        from pgas.app.compare import compare
        from pgas.app.results import format_table

        results = compare(args.source, args.steps, devices=args.devices, ranks=args.ranks,
                          backends=args.backends.split(","),
                          steps_per_exchange=args.steps_per_exchange, **kwargs)  # fmt: skip
    except (PgasError, ValueError) as err:
        name = "" if type(err) in (PgasError, ValueError) else f"{type(err).__name__}: "
        print(f"pgas {args.command}: error: {name}{err}", file=sys.stderr, flush=True)
        return 2
    if args.json:
        print(json.dumps([x.to_dict() for x in results]))
    else:
        print(format_table(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
