"""Deep halos: k steps per halo exchange on the automatic and explicit paths, against k = 1.

    python benchmarks/deep_halo.py [--tiny | --quick] [--out FILE]     # the sweep below
    python benchmarks/deep_halo.py --worker --devices D --stencil heat1d --size N --ks 1,2,auto
    python benchmarks/deep_halo.py --quick --platform gpu --out FILE  # on the GPUs present

For each configuration, in one worker process (its own virtual device count):

- the same-size copy roofline: a compiled ``fori_loop`` of ``y = -y`` on the
  field's own size and dtype (read + write, as a stencil step at best);
- ``pgas.run(step, u, steps, steps_per_exchange=k)`` (auto) and
  ``pgas.explicit.run(kernel, u, ..., steps_per_exchange=k)`` for each k,
  bitwise checked against k = 1;
- with ``--overhead``: the same local work with no exchange (the explicit
  kernel on each block with its edges clamped locally, halo 0, at k = 1; and
  ``pgas.run``'s own loop at its default k with a transport that gives every
  block its own slabs), so that ``time(exchange) / time(local) - 1`` is the
  communication overhead;
- XLA's memory analysis of the compiled auto loop (peak bytes per device over
  the local block).

The driver writes one JSON document (and is called by ``benchmarks/run.py``).
Timings are medians of repeats; compare ratios within one run.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

MODES = {
    "tiny": dict(
        heat=[(2**12, [2])], life=[(64, [2])], ks="1,auto", steps=8, repeats=2,
        overhead=[], demo=False,
    ),
    "quick": dict(
        heat=[(2**16, [1]), (2**24, [1]), (2**22, [2])], life=[(256, [4]), (2048, [1])],
        ks="1,2,4,8,16,auto", steps=64, repeats=5, overhead=[2, 4, 8], demo=True,
    ),
    "full": dict(
        heat=[(2**16, [1]), (2**20, [1]), (2**24, [1, 2, 4]), (1001, [4])],
        life=[(256, [1, 4]), (1024, [1]), (8192, [1])], ks="1,2,4,8,16,32,auto",
        steps=64, repeats=5, overhead=[2, 4, 8], demo=True,
    ),
}  # fmt: skip


def worker(a) -> list[dict]:
    """Each configuration, ``--stencil``/``--size`` then each ``--also``, in this process."""
    cases = [(a.stencil, a.size)] + [(s, int(n)) for s, n in (x.split(":") for x in a.also)]
    return [one_case(a, stencil, size) for stencil, size in cases]


def one_case(a, stencil: str, size: int) -> dict:
    if a.platform == "gpu":  # the first D GPUs; the copy loop below is the device's roofline
        os.environ["JAX_PLATFORMS"] = "cuda"
    else:
        os.environ["XLA_FLAGS"] = f"--xla_force_host_platform_device_count={a.devices}"
        os.environ["JAX_PLATFORMS"] = "cpu"
    import jax
    import jax.numpy as jnp
    import numpy as np
    from common import auto_peak_over_block, example_case, stats

    import pgas
    from pgas.loop.plan import plan
    from pgas.references import explicit

    case = example_case(stencil, size, a.devices)
    step, kernel, region, mesh, make = case.step, case.kernel, case.region, case.mesh, case.make
    cells = case.cells
    steps = a.steps
    device = mesh.devices.flat[0]
    out = {"devices": a.devices, "stencil": stencil, "size": size, "cells": cells,
           "steps": steps, "platform": device.platform, "device_kind": device.device_kind,
           "jax": jax.__version__, "results": []}  # fmt: skip

    def timed(prog, u) -> tuple[dict, object]:
        u = prog(u, 1)  # compile (the trip count is traced)
        jax.block_until_ready(u)
        times = []
        for _ in range(a.repeats):
            t = time.perf_counter()
            u = prog(u, steps)
            jax.block_until_ready(u)
            times.append(time.perf_counter() - t)
        return stats(times, cells * steps), u

    # the same-size copy roofline (read + write of the field per iteration)
    y = jax.device_put(jnp.asarray(make().to_numpy()), make().layout.sharding)
    cp = jax.jit(lambda x, n: jax.lax.fori_loop(0, n, lambda i, z: -z, x), donate_argnums=0)
    copy, _ = timed(lambda x, n: cp(x, jnp.int32(n)), y)
    out["copy_cells_per_s"] = copy["cells_per_s_median"]
    ref = None
    for backend in ("auto", "explicit"):
        for k in a.ks.split(","):
            k = k if k == "auto" else int(k)
            rec = {"backend": backend, "requested": k}
            if backend == "auto":
                rec["k"] = plan(step, make(), k).steps_per_exchange
                prog = lambda u, n: pgas.run(step, u, n, steps_per_exchange=k)  # noqa: E731
            else:
                rec["k"] = explicit.choose(make(), 1, k).steps_per_exchange
                prog = lambda u, n: explicit.run(kernel, u, n, 1, region,  # noqa: E731
                                                 steps_per_exchange=k)  # fmt: skip
            t, u = timed(prog, make())
            rec.update(t)
            rec["x_copy"] = rec["cells_per_s_median"] / out["copy_cells_per_s"]
            final = u.to_numpy()
            if ref is None:
                ref = final
            rec["bitwise_equal_to_first"] = bool(np.array_equal(final, ref))
            if backend == "auto":
                rep = pgas.comm_report(step, make(), steps_per_exchange=k)
                rec["permutes_per_step"] = rep.count("collective-permute")
                rec["halo_bytes_per_step"] = rep.bytes("collective-permute")
                rec["peak_over_block"] = auto_peak_over_block(step, make, k)
            out["results"].append(rec)
    if a.overhead:
        out["overhead"] = overhead(a, make, kernel, region, timed, explicit, jnp, step)
    print(json.dumps(out), flush=True)  # one line per configuration
    return out


def overhead(a, make, kernel, region, timed, explicit, jnp, step) -> dict:
    """Explicit path with its exchange against the same local work without one (k = 1).

    The local twin runs the same kernel on each block with its edges clamped
    locally (``jnp.pad(..., mode="edge")``): the same arithmetic and passes over
    memory, no collective. (A local twin of k > 1 sub-steps cannot be written
    this way: XLA would fuse the k padded sub-steps and recompute 3**k values.)
    """
    out = {}
    for k in (1,):

        def local(e, k=k):  # k sub-steps on the block alone
            for _ in range(k):
                e = kernel(jnp.pad(e, 1, mode="edge"))
            return e

        def exchanging(u, n, k=k):
            return explicit.run(kernel, u, n, 1, region, steps_per_exchange=k)

        def alone_run(u, n, f=local, k=k):  # n // k iterations of k local sub-steps
            return explicit.run(f, u, max(n // k, 1), 0, region, steps_per_exchange=1)

        with_exchange, _ = timed(exchanging, make())
        alone, _ = timed(alone_run, make())
        per_step = alone["seconds_median"] / max(a.steps // k, 1) * a.steps  # same step count
        out[f"k={k}"] = {"seconds_exchange": with_exchange["seconds_median"],
                         "seconds_local": per_step,
                         "overhead": with_exchange["seconds_median"] / per_step - 1}  # fmt: skip
    out.update(auto_overhead(step, make, timed))
    return out


def auto_overhead(step, make, timed) -> dict:
    """``pgas.run``'s double-buffered loop at the default k, with its exchange and with a
    transport that hands every block its own slabs (the same program, no collective)."""
    from pgas.loop.plan import plan
    from pgas.loop.timeloop import program

    u = make()
    how = plan(step, u)
    k, res = how.steps_per_exchange, {}
    for name, transport in (("exchange", None), ("local", lambda slab, direction: slab)):
        prog = program(step, k, how.widths, None, None, True, transport)
        t, _ = timed(lambda x, n, p=prog: p.advance(x, 2 * (n // 2)), prog.enter(make()))
        res[name] = t["seconds_median"]
    return {f"auto k={k}": {"seconds_exchange": res["exchange"], "seconds_local": res["local"],
                            "overhead": res["exchange"] / res["local"] - 1}}  # fmt: skip


def sweep(mode: str, platform: str = "cpu") -> dict:
    """Run every configuration of ``mode`` in its own worker process (on ``platform``)."""
    m = dict(MODES[mode], platform=platform)
    runs = []
    jobs = [("heat1d", n, d) for n, ds in m["heat"] for d in ds]
    jobs += [("life", n, d) for n, ds in m["life"] for d in ds]
    overheads = m["overhead"]
    if platform == "gpu":  # only as many devices as there are GPUs
        from gpu import gpu_count

        have = gpu_count(platform)
        jobs = [j for j in jobs if j[2] <= have]
        overheads = [d for d in overheads if d <= have]
    if mode == "tiny":  # one worker per device count: its configurations one after the other
        groups = {}
        for job in jobs:
            groups.setdefault(job[2], []).append(job[:2])
        for devices, cases in groups.items():
            runs += _worker(*cases[0], devices, m, overhead=False, also=cases[1:])
    else:
        for stencil, size, devices in jobs:
            runs += _worker(stencil, size, devices, m, overhead=False)
    for devices in overheads:
        runs += _worker("heat1d", 2**22 * devices, devices, m, overhead=True)
    return {"mode": mode, "runs": runs}


def _worker(stencil, size, devices, m, overhead, also=()) -> list[dict]:
    """One worker process: ``stencil`` at ``size``, then each (stencil, size) of ``also``."""
    cmd = [sys.executable, os.path.abspath(__file__), "--worker", "--devices", str(devices),
           "--stencil", stencil, "--size", str(size), "--ks", m["ks"] if not overhead else "1",
           "--steps", str(m["steps"]), "--repeats", str(m["repeats"])]  # fmt: skip
    cmd += ["--overhead"] if overhead else []
    cmd += [f"--also={s}:{n}" for s, n in also]
    cmd += ["--platform", m.get("platform", "cpu")]
    env = dict(os.environ)
    env.pop("XLA_FLAGS", None)
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=3600, env=env)
    if p.returncode != 0:
        return [{"stencil": s, "size": n, "devices": devices, "error": p.stderr[-2000:]}
                for s, n in [(stencil, size), *also]]  # fmt: skip
    return [json.loads(line) for line in p.stdout.strip().splitlines()[-1 - len(also) :]]


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--worker", action="store_true")
    ap.add_argument("--devices", type=int, default=1)
    ap.add_argument("--stencil", choices=("heat1d", "life"), default="heat1d")
    ap.add_argument("--size", type=int, default=2**20)
    ap.add_argument("--ks", default="1,2,4,8,auto")
    ap.add_argument("--steps", type=int, default=32)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--overhead", action="store_true")
    ap.add_argument(
        "--also",
        action="append",
        default=[],
        metavar="STENCIL:SIZE",
        help="worker: another configuration, run after the first in this process",
    )
    ap.add_argument(
        "--platform",
        choices=("cpu", "gpu"),
        default="cpu",
        help="gpu: the first --devices GPUs (JAX_PLATFORMS=cuda)",
    )
    ap.add_argument("--tiny", action="store_true")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--out")
    a = ap.parse_args(argv)
    if a.worker:
        worker(a)
        return
    res = sweep("tiny" if a.tiny else "quick" if a.quick else "full", a.platform)
    text = json.dumps(res, indent=1)
    if a.out:
        with open(a.out, "w") as fh:
            fh.write(text)
        import plots

        res["plot"] = plots.deep_halo_plot(res, os.path.dirname(os.path.abspath(a.out)))
    print(text)


if __name__ == "__main__":
    main()
