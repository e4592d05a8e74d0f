"""Bit-packed Life against byte Life: G cell updates/s at 8192x8192 on 1, 2 and 4 devices.

    python benchmarks/life_packed.py [--tiny] [--out FILE]        # driver: 1, 2, 4 devices
    python benchmarks/life_packed.py --worker --devices D --size HxW --steps S

Each device count runs in its own subprocess (the XLA device-count flag must be
set before JAX starts) on a ``("y", "x")`` mesh from ``pgas.make_mesh``, with the
same random board (density 0.3, seed 0) for every case:

- packed ``auto``: ``pgas.run(step, words, steps)``, the global view of
  examples/life/packed.py; packed ``explicit``: ``pgas.explicit.run(kernel, ...)``;
- byte ``auto``: examples/life/life.py's step under ``pgas.run`` with
  ``steps_per_exchange`` 1 and 8 (which is all the byte example's best k can be
  on the automatic path; whether it changes anything depends on the pgas
  version, the JSON says what was measured); byte ``explicit`` with deep halos:
  a kernel of k byte Life sub-steps on a halo of k cells, k = 1, 2, 4, 8
  (FACTS: k = 8 was the fastest byte Life on this CPU).

Every case's first call (compile + ``check_steps`` steps from the initial board)
gives a checksum of the uint8 board (decoded for packed): all must be equal.
Then ``repeats`` timed calls of ``steps`` steps each; median G cell updates/s
(cells of the board, not words). The copy roofline is NumPy STREAM copy at the
field's own size: 2 B per cell update for bytes, 16 B per 64 cells for words.
Ratios are taken within one worker run (the machine is shared and noisy).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
LIFE = os.path.join(os.path.dirname(HERE), "examples", "life")
sys.path.insert(0, HERE)

MODES = {
    "full": dict(size="8192x8192", steps=64, byte_steps=16, check_steps=16, repeats=3,
                 devices=[1, 2, 4]),
    "tiny": dict(size="256x320", steps=16, byte_steps=8, check_steps=8, repeats=2,
                 devices=[1, 2]),
}  # fmt: skip
KS = (1, 2, 4, 8)


def deep_kernel(kernel, k: int):
    """k byte Life sub-steps on a block with k halo cells per side (each shrinks it by one)."""

    def kernel_k(e):
        for _ in range(k):
            e = kernel(e)
        return e

    kernel_k.__name__ = f"life_x{k}"
    return kernel_k


def _time(call, state, steps: int, repeats: int):
    """Wall times of ``repeats`` calls, and the process CPU time of each (all threads)."""
    times, cpu = [], []
    for _ in range(repeats):
        t, c = time.perf_counter(), time.process_time()
        state = call(state, steps)
        state.data.block_until_ready()
        times.append(time.perf_counter() - t)
        cpu.append(time.process_time() - c)
    return state, times, cpu


def _comm(step, g) -> dict:
    import pgas

    rep = pgas.comm_report(step, g, loop=True)
    return {"permutes_per_step": rep.count("collective-permute"),
            "bytes_per_step": rep.bytes("collective-permute"),
            "ideal_bytes_per_step": rep.ideal_bytes, "gathers": rep.gathers}  # fmt: skip


def worker(devices: int, size: str, steps: int, byte_steps: int, check_steps: int,
           repeats: int) -> dict:  # fmt: skip
    os.environ["XLA_FLAGS"] = (
        os.environ.get("XLA_FLAGS", "") + f" --xla_force_host_platform_device_count={devices}"
    )
    import jax

    jax.config.update("jax_enable_x64", True)
    sys.path.insert(0, LIFE)
    import life
    import packed
    from common import stats

    import pgas
    import pgas.references.explicit as ex
    from pgas.app.problem import checksum

    mesh = pgas.make_mesh(("y", "x"), devices=devices)
    pp, bp = packed.problem(size), life.problem(size)
    cells = pp.shape[0] * packed.packing(int(size.split("x")[1])).width

    def field(p):
        return pgas.from_function(p.init, p.shape, mesh, dtype=p.dtype, boundary=p.boundary)

    cases = [
        ("packed", "auto", 1, pp, lambda g, n: pgas.run(pp.step, g, n)),
        ("packed", "explicit", 1, pp, lambda g, n: ex.run(pp.kernel, g, n, halo=1)),
    ]
    for k in (1, 8):
        cases.append(("byte", "auto", k, bp,
                      lambda g, n, k=k: pgas.run(bp.step, g, n, steps_per_exchange=k)))  # fmt: skip
    for k in KS:
        kern = deep_kernel(bp.kernel, k)
        cases.append(("byte", "explicit", k, bp,
                      lambda g, n, kern=kern, k=k: ex.run(kern, g, n // k, halo=k)))  # fmt: skip
    out = {"devices": devices, "mesh": dict(mesh.shape), "size": size, "cells": cells,
           "results": []}  # fmt: skip
    for kind, backend, k, p, call in cases:
        rec = {"kind": kind, "backend": backend, "k": k}
        try:
            t = time.perf_counter()
            g = call(field(p), check_steps)
            board = np_board = g.to_numpy()
            rec["first_call_seconds"] = time.perf_counter() - t
            if p.decode is not None:
                board = p.decode(np_board)
            rec["checksum_after_check_steps"] = checksum(board)
            n = steps if kind == "packed" else byte_steps
            g, times, cpu = _time(call, g, n, repeats)
            rec.update(stats(times, cells * n), steps_per_call=n)
            rec["cells_per_cpu_s_median"] = stats(cpu, cells * n)["cells_per_s_median"]
            rec["ms_per_step"] = rec["seconds_median"] / n * 1e3
            if devices > 1 and backend == "auto" and k == 1:
                rec["comm"] = _comm(p.step, field(p))
        except Exception as err:  # record and go on
            rec["error"] = f"{type(err).__name__}: {err}"[:500]
        out["results"].append(rec)
    sums = {r.get("checksum_after_check_steps") for r in out["results"]}
    out["all_checksums_equal"] = len(sums) == 1 and None not in sums
    out["jax"] = jax.__version__
    return out


def roofline(size: str) -> dict:
    """Copy roofline in cell updates/s for the byte field and the packed field."""
    from stream import stream

    h, w = (int(v) for v in size.split("x"))
    sys.path.insert(0, LIFE)
    import packed

    out = {}
    fields = (("byte", h * w, 2.0), ("packed", h * packed.packing(w).words * 8, 16 / 64))
    for name, nbytes, per_cell in fields:
        gbs = stream(nbytes)["copy"]["GB_per_s_median"]
        out[name] = {"field_bytes": nbytes, "copy_GB_per_s": gbs, "bytes_per_cell": per_cell,
                     "cells_per_s": gbs * 1e9 / per_cell}  # fmt: skip
    return out


def summarise(res: dict) -> None:
    """Per device count: packed auto and best packed over the best byte case (one run)."""
    for d in sorted({r["devices"] for r in res["results"]}):
        rows = [r for r in res["results"] if r["devices"] == d and "cells_per_s_median" in r]
        best = {}
        for kind in ("packed", "byte"):
            got = [r for r in rows if r["kind"] == kind]
            if got:
                best[kind] = max(got, key=lambda r: r["cells_per_s_median"])
        auto = [r for r in rows if r["kind"] == "packed" and r["backend"] == "auto"]
        if "byte" in best and auto:
            byte = best["byte"]["cells_per_s_median"]
            res["ratios"].append({
                "devices": d,
                "byte_best": f"{best['byte']['backend']} k={best['byte']['k']}",
                "packed_auto_over_byte_best": auto[0]["cells_per_s_median"] / byte,
                "packed_best_over_byte_best": best["packed"]["cells_per_s_median"] / byte,
                "packed_auto_over_byte_best_cpu": auto[0]["cells_per_cpu_s_median"]
                / max(r["cells_per_cpu_s_median"] for r in rows if r["kind"] == "byte"),
                "target": 4.0 if d == 1 else 3.0,
            })  # fmt: skip


def sweep(mode: str, timeout: float = 1800) -> dict:
    m = MODES[mode]
    res = {"mode": mode, "config": m, "roofline": roofline(m["size"]), "results": [],
           "workers": [], "ratios": []}  # fmt: skip
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    env.pop("XLA_FLAGS", None)
    for d in m["devices"]:
        cmd = [sys.executable, os.path.abspath(__file__), "--worker", "--devices", str(d),
               "--size", m["size"], "--steps", str(m["steps"]), "--byte-steps",
               str(m["byte_steps"]), "--check-steps", str(m["check_steps"]), "--repeats",
               str(m["repeats"])]  # fmt: skip
        t = time.perf_counter()
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
        run = {"devices": d, "cmd": " ".join(cmd), "wall_seconds": time.perf_counter() - t,
               "load_average_after": os.getloadavg()}  # fmt: skip
        if p.returncode:
            run["error"] = p.stderr[-2000:]
        else:
            w = json.loads(p.stdout.strip().splitlines()[-1])
            run["all_checksums_equal"] = w["all_checksums_equal"]
            run["mesh"] = w["mesh"]
            res["results"] += [dict(r, devices=d) for r in w["results"]]
        res["workers"].append(run)
    summarise(res)
    return res


def table(res: dict) -> list[str]:
    roof = res["roofline"]
    lines = [f"copy roofline: byte {roof['byte']['cells_per_s'] / 1e9:.2f} G cell/s "
             f"({roof['byte']['copy_GB_per_s']:.1f} GB/s at {roof['byte']['field_bytes']} B), "
             f"packed {roof['packed']['cells_per_s'] / 1e9:.1f} G cell/s "
             f"({roof['packed']['copy_GB_per_s']:.1f} GB/s at {roof['packed']['field_bytes']} B)",
             "| devices | field | backend | k | ms/step | G cell/s | min-max | x own roofline "
             "| G cell per CPU s |", "|---|---|---|---|---|---|---|---|---|"]  # fmt: skip
    for r in res["results"]:
        if "error" in r:
            lines.append(f"| {r['devices']} | {r['kind']} | {r['backend']} | {r['k']} | "
                         f"error: {r['error'][:60]} | | | |")  # fmt: skip
            continue
        x = r["cells_per_s_median"] / roof[r["kind"]]["cells_per_s"]
        lines.append(f"| {r['devices']} | {r['kind']} | {r['backend']} | {r['k']} | "
                     f"{r['ms_per_step']:.2f} | {r['cells_per_s_median'] / 1e9:.2f} | "
                     f"{r['cells_per_s_min'] / 1e9:.2f}-{r['cells_per_s_max'] / 1e9:.2f} | "
                     f"{x:.2f} | {r['cells_per_cpu_s_median'] / 1e9:.2f} |")  # fmt: skip
    for q in res["ratios"]:
        lines.append(
            f"devices {q['devices']}: packed auto / byte best ({q['byte_best']}) = "
            f"{q['packed_auto_over_byte_best']:.1f}x, packed best / byte best = "
            f"{q['packed_best_over_byte_best']:.1f}x (target {q['target']:g}x); per CPU "
            f"second: {q['packed_auto_over_byte_best_cpu']:.1f}x"
        )
    for w in res["workers"]:
        lines.append(f"devices {w['devices']}: checksums equal: "
                     f"{w.get('all_checksums_equal', 'error')}; load average after "
                     f"{w['load_average_after'][0]:.1f}")  # fmt: skip
    return lines


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--tiny", action="store_true", help="a small board, seconds")
    ap.add_argument("--out", help="write the JSON here (default: stdout only)")
    ap.add_argument("--worker", action="store_true", help="one device count (internal)")
    ap.add_argument("--devices", type=int, default=1)
    full = MODES["full"]
    ap.add_argument("--size", default=full["size"])
    ap.add_argument("--steps", type=int, default=full["steps"])
    ap.add_argument("--byte-steps", type=int, default=full["byte_steps"])
    ap.add_argument("--check-steps", type=int, default=full["check_steps"])
    ap.add_argument("--repeats", type=int, default=full["repeats"])
    a = ap.parse_args(argv)
    if a.worker:
        out = worker(a.devices, a.size, a.steps, a.byte_steps, a.check_steps, a.repeats)
        json.dump(out, sys.stdout)
        print()
        return out
    res = sweep("tiny" if a.tiny else "full")
    if a.out:
        os.makedirs(os.path.dirname(os.path.abspath(a.out)), exist_ok=True)
        with open(a.out, "w") as fh:
            json.dump(res, fh, indent=1, default=str)
    print("\n".join(table(res)), file=sys.stderr)
    json.dump(res, sys.stdout, default=str)
    print()
    return res


if __name__ == "__main__":
    main()
