"""Rank-side driver for tests/references/test_mpi.py: runs stencil cases with pgas.mpi.

Usage: ``mpiexec -n P python stencil_cases.py CASES.json OUT_DIR``.

``CASES.json`` is a list of case dicts (see tests/references/test_mpi.py). Rank 0 writes
``OUT_DIR/fields.npz`` (one gathered field per case) and ``OUT_DIR/meta.json``
(message counts, dims, and the errors the error cases raised). Kernels and
initial conditions live here, without MPI imports, so that the test can
import them to build its single-process references.
"""

from __future__ import annotations

import json
import os
import sys

import numpy as np


def heat(e):
    return 0.5 * e[1:-1] + 0.25 * (e[:-2] + e[2:])


def life(e):
    c = e[1:-1, 1:-1]
    n = (
        e[:-2, :-2]
        + e[:-2, 1:-1]
        + e[:-2, 2:]
        + e[1:-1, :-2]
        + e[1:-1, 2:]
        + e[2:, :-2]
        + e[2:, 1:-1]
        + e[2:, 2:]
    )
    return ((n == 3) | ((c == 1) & (n == 2))).astype(c.dtype)


def lap3d(e):
    c = e[1:-1, 1:-1, 1:-1]
    return c + 0.1 * (
        (e[:-2, 1:-1, 1:-1] + e[2:, 1:-1, 1:-1])
        + (e[1:-1, :-2, 1:-1] + e[1:-1, 2:, 1:-1])
        + (e[1:-1, 1:-1, :-2] + e[1:-1, 1:-1, 2:])
        - 6 * c
    )


def wide(e):
    c = e[2:-2]
    return c + 0.05 * (-e[:-4] + 16 * e[1:-3] - 30 * c + 16 * e[3:-1] - e[4:]) / 12


def aniso(e):  # halo (2, 1), with corner terms
    c = e[2:-2, 1:-1]
    return c + 0.05 * (
        (e[:-4, 1:-1] + e[4:, 1:-1])
        + (e[2:-2, :-2] + e[2:-2, 2:])
        + (e[:-4, :-2] + e[4:, 2:])
        - 6 * c
    )


def upwind(e):  # halo ((1, 0),): reads one cell below
    return e[1:] - 0.5 * (e[1:] - e[:-1])


def downwind(e):  # halo ((0, 1),): reads one cell above
    return e[:-1] - 0.5 * (e[:-1] - e[1:])


def two_below(e):  # halo ((2, 0),)
    return e[2:] - 0.5 * (e[1:-1] - e[:-2]) - 0.25 * (e[2:] - e[1:-1])


def upwind2d(e):  # halo ((1, 0), (1, 0))
    return e[1:, 1:] - 0.25 * (e[1:, 1:] - e[:-1, 1:]) - 0.25 * (e[1:, 1:] - e[1:, :-1])


KERNELS = {"heat": heat, "life": life, "lap3d": lap3d, "wide": wide, "aniso": aniso,
           "upwind": upwind, "downwind": downwind, "two_below": two_below,
           "upwind2d": upwind2d}  # fmt: skip

INITS = {
    "heat": lambda x: ((x * 37) % 101) / 101.0,
    "life": lambda i, j: (((i * 7 + j * 13) ** 2 + 3 * i) % 5 < 2).astype(np.uint8),
    "lap3d": lambda i, j, k: ((i * 31 + j * 17 + k * 7) % 23) / 23.0,
    "wide": lambda x: ((x * 13) % 29) / 29.0,
    "aniso": lambda i, j: ((i * 11 + j * 5) % 17) / 17.0,
    "upwind": lambda x: ((x * 13) % 29) / 29.0,
    "downwind": lambda x: ((x * 7) % 31) / 31.0,
    "two_below": lambda x: ((x * 11) % 23) / 23.0,
    "upwind2d": lambda i, j: ((i * 11 + j * 5) % 17) / 17.0,
}


def parse_boundary(spec):
    """JSON boundary spec -> pgas boundary: "periodic", "keep", "neumann",
    {"dirichlet": v}, or a list with one condition or [low, high] per axis."""
    from pgas.grid.boundary import Dirichlet, Keep, Neumann, Periodic

    if isinstance(spec, str):
        return {"periodic": Periodic, "keep": Keep, "neumann": Neumann}[spec]()
    if isinstance(spec, dict):
        return Dirichlet(spec["dirichlet"])
    return [
        parse_boundary(s) if not isinstance(s, list) else tuple(map(parse_boundary, s))
        for s in spec
    ]


def parse_region(spec):
    return None if spec is None else tuple(slice(*s) for s in spec)


def error_checks(pm, size):
    """Calls that must raise the named pgas error (collectively, on every rank)."""
    from pgas.grid.boundary import Periodic

    def halo_too_wide():
        g = pm.cart_grid((2 * size - 1,), dims=(size,))
        pm.exchange_halo(np.zeros(g.local_shape[0] + 4), g, 2, Periodic())

    def periodic_mismatch():
        g = pm.cart_grid((10 * size,))
        pm.exchange_halo(np.zeros(g.local_shape[0] + 2), g, 1, Periodic())

    def bad_ext_shape():
        g = pm.cart_grid((10 * size,))
        pm.exchange_halo(np.zeros(g.local_shape[0]), g, 1, parse_boundary("keep"))

    checks = {
        "dims_mismatch": lambda: pm.cart_grid((8, 8), dims=(size + 1, 1)),
        "halo_too_wide": halo_too_wide,
        "periodic_mismatch": periodic_mismatch,
        "bad_ext_shape": bad_ext_shape,
        "bad_op": lambda: pm.allreduce(1, "prod"),
    }
    if size > 1:
        checks["too_few_cells"] = lambda: pm.cart_grid((size - 1,))
    else:  # run() re-raises only with one rank (with more it aborts)
        checks["region_step"] = lambda: pm.run(
            heat,
            INITS["heat"],
            (10,),
            "float64",
            1,
            1,
            parse_boundary("keep"),
            region=(slice(0, None, 2),),
        )
        checks["kernel_shape"] = lambda: pm.run(
            lambda e: e, INITS["heat"], (10,), "float64", 1, 1, parse_boundary("keep")
        )
    out = {}
    for name, call in checks.items():
        try:
            call()
            out[name] = [None, "no error"]
        except Exception as err:  # noqa: BLE001 - the test checks the type
            out[name] = [type(err).__name__, str(err)]
    return out


def run_case(pm, case, kernel, k):
    """One run of a case with ``k`` steps per exchange; also the callback calls, in order."""
    called = []

    def callback(done, block):
        called.append([done, float(np.asarray(block, np.float64).sum())])

    res = pm.run(
        kernel,
        INITS[case["kernel"]],
        tuple(case["shape"]),
        case["dtype"],
        case["steps"],
        case["halo"],
        parse_boundary(case["boundary"]),
        region=parse_region(case.get("region")),
        dims=case.get("dims"),
        snapshot_every=case.get("snapshot_every"),
        chunk=case.get("chunk"),
        callback=callback if case.get("chunk") else None,
        steps_per_exchange=k,
    )
    return res, called


def main() -> None:
    from mpi4py import MPI

    from pgas.references import mpi as pm

    with pm.abort_on_error():
        with open(sys.argv[1]) as f:
            cases = json.load(f)
        out_dir = sys.argv[2]
        world = MPI.COMM_WORLD
        fields, meta = {}, {}
        for case in cases:
            kind = case.get("kind", "run")
            if kind == "errors":
                meta[case["name"]] = error_checks(pm, world.size)
                continue
            if kind == "reduce":
                v = np.float32(world.rank + 1)
                meta[case["name"]] = {
                    op: [float(r), type(r).__name__]
                    for op in ("sum", "min", "max")
                    for r in [pm.allreduce(v, op)]
                }
                continue
            kernel = KERNELS[case["kernel"]]
            if kind == "fail":
                calls = [0]

                def kernel(e, _k=kernel):
                    calls[0] += 1
                    if world.rank == 1 and calls[0] == 3:
                        raise RuntimeError("deliberate failure on rank 1 at step 3")
                    return _k(e)

            for k in case.get("ks", [1]):
                key = f"{case['name']}@{k}"
                res, called = run_case(pm, case, kernel, k)
                if world.rank == 0:
                    fields[key] = res.field
                    if res.snapshots is not None:
                        fields[key + "/snapshots"] = res.snapshots
                meta[key] = {
                    "messages_per_step": res.messages_per_step,
                    "bytes_per_step": res.bytes_per_step,
                    "rank_messages_per_step": list(res.rank_messages_per_step),
                    "rank_bytes_per_step": list(res.rank_bytes_per_step),
                    "dims": list(res.dims),
                    "seconds": res.seconds,
                    "grid": res.grid,
                    "steps_per_exchange": res.steps_per_exchange,
                    "note": res.note,
                    "snapshot_steps": list(res.snapshot_steps),
                    "callbacks": called,
                }
        if world.rank == 0:
            np.savez(os.path.join(out_dir, "fields.npz"), **fields)
            with open(os.path.join(out_dir, "meta.json"), "w") as f:
                world_size = pm.check_world(world.size)
                json.dump({"size": world.size, "world": world_size, "cases": meta}, f)


if __name__ == "__main__":
    main()
