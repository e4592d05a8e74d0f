"""Deep halos: exchange a halo of width k once every k steps (1-D heat, float32, periodic).

    python benchmarks/deep_halo.py [--tiny] [--out FILE]          # driver: 1, 2, 4 devices
    python benchmarks/deep_halo.py --worker --devices D --size N   # one device count

The kernel applies k heat steps to the extended block (block + k halo cells per
side); every sub-step ``0.5 * e[1:-1] + 0.25 * (e[:-2] + e[2:])`` shrinks it by one
cell per side, so after k sub-steps it is the block's new values.
``pgas.explicit.run(kernel_k, u, steps // k, halo=k)`` is then ``steps`` physical
steps with one halo exchange per k steps. The price is redundant compute: the
sub-steps also update the shrinking halo: sub-step j computes k - j halo cells per
side, k * (k - 1) / 2 extra cell updates per block side per k steps, i.e. k - 1 per
block per physical step; every exchange moves k cells per side instead of 1.

Measured per k = 1, 2, 4, 8 and device count: time per physical step, G cell
updates/s (physical updates, not counting the redundant ones), collective-permutes
and their bytes per physical step (``pgas.comm_report`` of one ``explicit.step``,
divided by k), and whether the final field is bitwise equal to the k = 1 run; on a
small field, bitwise equality with a NumPy periodic reference (``np.roll``).
The driver runs one subprocess per device count (the XLA device-count flag must
be set before JAX starts) and prints / writes one JSON document.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

KS = (1, 2, 4, 8)
MODES = {
    # size: cells; steps: physical steps per timed call (a multiple of every k)
    "tiny": dict(size=2**16, steps=8, repeats=2, devices=[1, 2, 4], ref_size=512, ref_steps=16),
    "full": dict(size=2**22, steps=64, repeats=5, devices=[1, 2, 4], ref_size=4096, ref_steps=64),
}


def heat_np_periodic(u, steps):
    """NumPy reference: ``steps`` periodic heat steps (float32 stays float32)."""
    half, quarter = u.dtype.type(0.5), u.dtype.type(0.25)
    for _ in range(steps):
        u = half * u + quarter * (np.roll(u, 1) + np.roll(u, -1))
    return u


def make_kernel(k: int):
    """k heat sub-steps on a block with k halo cells per side."""

    def kernel(e):
        for _ in range(k):
            e = 0.5 * e[1:-1] + 0.25 * (e[:-2] + e[2:])
        return e

    kernel.__name__ = f"heat_x{k}"
    return kernel


def worker(devices: int, size: int, steps: int, repeats: int, ks, ref_size, ref_steps) -> dict:
    os.environ["XLA_FLAGS"] = (
        os.environ.get("XLA_FLAGS", "") + f" --xla_force_host_platform_device_count={devices}"
    )
    import jax
    from common import init_heat, stats

    import pgas
    import pgas.explicit as ex

    dtype = np.float32
    mesh = pgas.make_mesh(("x",), devices=devices)

    def make(n):
        return pgas.from_function(init_heat, (n,), mesh, boundary=pgas.Periodic(), dtype=dtype)

    kernels = {k: make_kernel(k) for k in ks}
    out = {"devices": devices, "size": size, "steps": steps, "repeats": repeats, "results": []}
    ref_final = None
    # NumPy reference on a small field, same initial values
    x0 = init_heat(np.arange(ref_size)).astype(dtype)
    small_ref = heat_np_periodic(x0.copy(), ref_steps)
    for k in ks:
        kern = kernels[k]
        rec = {"k": k, "devices": devices, "cells": size, "steps": steps}
        try:
            if steps % k:
                raise ValueError(f"steps {steps} is not a multiple of k = {k}")
            # compile (one iteration on a throw-away field)
            t = time.perf_counter()
            ex.run(kern, make(size), 1, halo=k).data.block_until_ready()
            rec["compile_seconds"] = time.perf_counter() - t
            u = make(size)
            times = []
            for _ in range(repeats):
                t = time.perf_counter()
                u = ex.run(kern, u, steps // k, halo=k)
                u.data.block_until_ready()
                times.append(time.perf_counter() - t)
            rec.update(stats(times, size * steps))
            rec["seconds_per_step"] = rec["seconds_median"] / steps
            # per block per k steps: 2 sides x k (k - 1) / 2; per physical step: k - 1
            rec["redundant_updates_per_step"] = devices * (k - 1)
            rec["redundant_fraction"] = rec["redundant_updates_per_step"] / size
            final = u.to_numpy()
            if ref_final is None:
                ref_final = final
            rec["equal_to_k1"] = bool(np.array_equal(final, ref_final))
            # communication of one explicit step (k physical steps), per physical step
            rep = pgas.comm_report(lambda v: ex.step(kern, v, k), make(size), loop=True)
            rec["comm"] = {
                "permutes_per_exchange": rep.count("collective-permute"),
                "bytes_per_exchange": rep.bytes("collective-permute"),
                "permutes_per_step": rep.count("collective-permute") / k,
                "bytes_per_step": rep.bytes("collective-permute") / k,
                "messages_total_per_step": rep.messages_total / k,
                "bytes_total_per_step": rep.bytes_total / k,
                "gathers": rep.gathers,
            }
            # small field vs NumPy periodic reference
            v = ex.run(kern, make(ref_size), ref_steps // k, halo=k).to_numpy()
            rec["equal_to_numpy_small"] = bool(np.array_equal(v, small_ref))
            rec["max_abs_diff_numpy_small"] = float(np.max(np.abs(v - small_ref)))
        except Exception as err:  # record and go on
            rec["error"] = f"{type(err).__name__}: {err}"[:500]
        out["results"].append(rec)
    out["jax"] = jax.__version__
    return out


def sweep(mode: str = "full", timeout: float = 1800) -> dict:
    """Run the worker once per device count (subprocesses); one JSON-ready dict."""
    m = MODES[mode]
    res = {"mode": mode, "config": dict(m, ks=list(KS)), "results": [], "runs": []}
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    env.pop("XLA_FLAGS", None)
    for d in m["devices"]:
        cmd = [sys.executable, os.path.abspath(__file__), "--worker", "--devices", str(d)]
        cmd += ["--size", str(m["size"]), "--steps", str(m["steps"])]
        cmd += ["--repeats", str(m["repeats"]), "--ref-size", str(m["ref_size"])]
        cmd += ["--ref-steps", str(m["ref_steps"])]
        t = time.perf_counter()
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
        run = {"devices": d, "cmd": " ".join(cmd), "wall_seconds": time.perf_counter() - t}
        if p.returncode != 0:
            run["error"] = p.stderr[-2000:]
        else:
            r = json.loads(p.stdout.strip().splitlines()[-1])
            res["results"] += r["results"]
        res["runs"].append(run)
    # speedup of k over k = 1 at the same device count
    for r in res["results"]:
        one = [
            x
            for x in res["results"]
            if x["devices"] == r["devices"] and x["k"] == 1 and "seconds_median" in x
        ]
        if one and "seconds_median" in r:
            r["speedup_vs_k1"] = one[0]["seconds_median"] / r["seconds_median"]
    return res


def table(res: dict) -> list[str]:
    """Markdown table of a sweep."""
    lines = [
        "| devices | k | ms/step | G cell/s | min-max | vs k=1 | permutes/step | bytes/step "
        "| redundant | = k=1 | = NumPy |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in sorted(res["results"], key=lambda r: (r["devices"], r["k"])):
        if "error" in r:
            lines.append(f"| {r['devices']} | {r['k']} | error | | | | | | | | |")
            continue
        c = r["comm"]
        lines.append(
            f"| {r['devices']} | {r['k']} | {r['seconds_per_step'] * 1e3:.2f} | "
            f"{r['cells_per_s_median'] / 1e9:.3f} | "
            f"{r['cells_per_s_min'] / 1e9:.3f}-{r['cells_per_s_max'] / 1e9:.3f} | "
            f"{r.get('speedup_vs_k1', float('nan')):.2f} | {c['permutes_per_step']:g} | "
            f"{c['bytes_per_step']:g} | {r['redundant_fraction']:.1e} | "
            f"{'yes' if r['equal_to_k1'] else 'NO'} | "
            f"{'yes' if r['equal_to_numpy_small'] else 'NO'} |"
        )
    return lines


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--tiny", action="store_true", help=f"{MODES['tiny']['size']} cells, seconds")
    ap.add_argument("--out", help="write the JSON here (default: stdout only)")
    ap.add_argument("--worker", action="store_true", help="one device count (internal)")
    ap.add_argument("--devices", type=int, default=1)
    ap.add_argument("--size", type=int, default=MODES["full"]["size"])
    ap.add_argument("--steps", type=int, default=MODES["full"]["steps"])
    ap.add_argument("--repeats", type=int, default=MODES["full"]["repeats"])
    ap.add_argument("--ref-size", type=int, default=MODES["full"]["ref_size"])
    ap.add_argument("--ref-steps", type=int, default=MODES["full"]["ref_steps"])
    a = ap.parse_args(argv)
    if a.worker:
        out = worker(a.devices, a.size, a.steps, a.repeats, KS, a.ref_size, a.ref_steps)
        json.dump(out, sys.stdout)
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
