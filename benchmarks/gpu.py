"""The benchmark on GPUs: pgas against the device's copy loop and plain JAX, per step.

    python benchmarks/gpu.py [--tiny | --quick] [--platform gpu|cpu] [--out DIR]
    python benchmarks/run.py --platform gpu        # the same, and the README's GPU section

For each device count (1, 2, 4, ... up to the GPUs present) and each stencil
and size, one worker process times, in one run:

- ``copy``: the roofline, a compiled ``fori_loop`` of ``y = -y`` on the
  field's own size and dtype on the device (read + write, what a stencil
  step moves at best; not NumPy STREAM);
- ``auto`` (``pgas.run``, default steps per exchange), ``auto_k1``
  (``steps_per_exchange=1``; any ``auto_kN``), ``explicit`` at auto's ``k``
  and ``explicit_k1`` (``pgas.explicit.run``; any ``explicit_kN``);
- ``naive``: the global-view program in plain JAX on a sharded
  ``jax.Array`` (heat: ``u.at[1:-1].set(...)``; Life: the ``jnp.roll`` sum
  of the 8 neighbours);
- Life only: ``plain_separable`` (plain JAX, a 3-row sum by rolls, then the
  3-column sum), ``auto_separable`` (the same formula in pgas's global
  view, :func:`separable_life`) and ``auto_separable_k1`` (the same at
  ``steps_per_exchange=1``);
- with ``--command-buffers``: ``auto`` again under XLA's
  ``--xla_gpu_enable_command_buffer=+WHILE`` (a whole loop as one CUDA graph).

Every form is checked bitwise against ``auto_k1``. Per form it records
microseconds per step, the ratio to the copy loop, and for ``auto`` XLA's
memory analysis (peak bytes per device over the local block). The machine
record names the device, driver, CUDA, JAX and plugin versions. Timings are
medians of repeats, each long enough (``--min-seconds``) to hide the launch.
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
    "tiny": dict(heat=[1001, 2**12], life=[64], repeats=2, min_seconds=0.002),
    "quick": dict(heat=[1001, 2**20, 2**26], life=[1024, 8192], repeats=5, min_seconds=0.05),
    "full": dict(heat=[1001, 2**16, 2**20, 2**24, 2**26, 2**27], life=[256, 1024, 4096, 8192,
                 16384], repeats=7, min_seconds=0.1),
}  # fmt: skip
HEAT_FORMS = ["copy", "auto_k1", "auto", "explicit", "explicit_k1", "naive"]
LIFE_FORMS = HEAT_FORMS + ["plain_separable", "auto_separable", "auto_separable_k1"]


def separable_life(g):
    """Life in the global view with the neighbour sum written separably (3 + 3 reads).

    Bitwise equal to ``examples/life``'s step: integer sums of the same cells.
    """
    import pgas

    rows = g + pgas.shift(g, 1, 1) + pgas.shift(g, -1, 1)
    n = rows + pgas.shift(rows, 1, 0) + pgas.shift(rows, -1, 0) - g
    g[...] = ((n == 3) | ((g == 1) & (n == 2))).astype(g.dtype)
    return g


def machine_gpu() -> dict:
    """Device, driver, CUDA, JAX and plugin versions (what a GPU figure depends on)."""
    import importlib.metadata as md

    import jax

    import pgas

    rec = {"jax": jax.__version__, "pgas": pgas.__version__,
           "device_kind": jax.devices()[0].device_kind, "devices": len(jax.devices()),
           "platform": jax.devices()[0].platform}  # fmt: skip
    for dist in md.distributions():
        name = dist.metadata["Name"] or ""
        if name.startswith(("jax-cuda", "jax_cuda", "jaxlib", "nvidia-cuda-runtime")):
            rec[name] = dist.version
    try:
        q = "name,driver_version,memory.total"
        out = subprocess.run(["nvidia-smi", f"--query-gpu={q}", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=30).stdout  # fmt: skip
        rec["nvidia_smi"] = out.strip().splitlines()
        head = subprocess.run(["nvidia-smi"], capture_output=True, text=True, timeout=30).stdout
        cuda = [w for w in head.split("|") if "CUDA Version" in w]
        rec["cuda_driver_api"] = cuda[0].split(":")[-1].strip() if cuda else None
    except (OSError, subprocess.SubprocessError):
        rec["nvidia_smi"] = None
    return rec


def worker(a) -> list[dict]:
    """Each configuration, ``--stencil``/``--size``/``--forms`` then each ``--also``, in this
    process: one JSON line each."""
    cases = [(a.stencil, a.size, a.forms)]
    cases += [(s, int(n), forms) for s, n, forms in (x.split(":", 2) for x in a.also)]
    return [one_case(a, *case) for case in cases]


def one_case(a, stencil: str, size: int, forms: str) -> dict:
    os.environ["JAX_PLATFORMS"] = "cuda" if a.platform == "gpu" else "cpu"
    if a.platform == "cpu":
        os.environ["XLA_FLAGS"] = f"--xla_force_host_platform_device_count={a.devices}"
    import jax
    import jax.numpy as jnp
    import numpy as np
    from common import auto_peak_over_block, example_case
    from jax.sharding import NamedSharding, PartitionSpec

    import pgas
    from pgas.loop.plan import plan
    from pgas.references import explicit

    heat = stencil == "heat1d"
    case = example_case(stencil, size, a.devices)
    step, kernel, region, mesh, make = case.step, case.kernel, case.region, case.mesh, case.make
    dtype, cells, spec = case.dtype, case.cells, PartitionSpec(*mesh.axis_names)
    k_auto = plan(step, make()).steps_per_exchange

    def plain(body):
        loop = jax.jit(lambda x, n: jax.lax.fori_loop(0, n, lambda i, y: body(y), x),
                       donate_argnums=0)  # fmt: skip
        x0 = make().to_numpy()
        if x0.shape[0] % a.devices:  # plain JAX needs even blocks
            return None
        return (lambda x, n: loop(x, jnp.int32(n))), (
            lambda: jax.device_put(x0, NamedSharding(mesh, spec))
        )

    def naive(u):
        if heat:
            return u.at[1:-1].set(0.5 * u[1:-1] + 0.25 * (u[:-2] + u[2:]))
        n = sum(jnp.roll(jnp.roll(u, dy, 0), dx, 1)
                for dy in (-1, 0, 1) for dx in (-1, 0, 1) if (dy, dx) != (0, 0))  # fmt: skip
        return ((n == 3) | ((u == 1) & (n == 2))).astype(u.dtype)

    def separable(g):
        rows = g + jnp.roll(g, 1, 1) + jnp.roll(g, -1, 1)
        n = rows + jnp.roll(rows, 1, 0) + jnp.roll(rows, -1, 0) - g
        return ((n == 3) | ((g == 1) & (n == 2))).astype(g.dtype)

    def form(name):
        """``(prog(state, n) -> state, make_state)`` of one form, or None where it cannot run."""
        if name == "copy":
            return plain(lambda y: -y)
        if name == "naive":
            return plain(naive)
        if name == "plain_separable":
            return plain(separable)
        k = int(name.rsplit("_k", 1)[1]) if "_k" in name else None  # auto_k4, explicit_k4
        if name.startswith("auto"):
            s = separable_life if "separable" in name else step
            return (lambda u, n: pgas.run(s, u, n, steps_per_exchange=k or "auto")), make
        k = k or k_auto
        return (lambda u, n: explicit.run(kernel, u, n, 1, region, steps_per_exchange=k)), make

    def timed(prog, state):
        state = prog(state, 1)  # compile (the trip count is traced)
        jax.block_until_ready(state)
        n, took = 1, 0.0
        while took < a.min_seconds and n < 2**20:  # steps per timed call: long enough
            n *= 4
            t = time.perf_counter()
            state = prog(state, n)
            jax.block_until_ready(state)
            took = time.perf_counter() - t
        times = []
        for _ in range(a.repeats):
            t = time.perf_counter()
            state = prog(state, n)
            jax.block_until_ready(state)
            times.append((time.perf_counter() - t) / n)
        times.sort()
        return {"us_per_step": 1e6 * times[len(times) // 2], "us_per_step_min": 1e6 * times[0],
                "steps_per_call": n}, state  # fmt: skip

    out = {"devices": a.devices, "stencil": stencil, "size": size, "cells": cells,
           "k_auto": k_auto, "forms": {}}  # fmt: skip
    finals = {}
    for name in forms.split(","):
        f = form(name)
        if f is None:
            continue
        prog, start = f
        try:
            rec, state = timed(prog, start())
            # the same number of steps from the same start for every form: bitwise comparable
            finals[name] = np.asarray(prog(start(), 37).to_numpy() if hasattr(state, "to_numpy")
                                      else prog(start(), 37))  # fmt: skip
        except Exception as err:  # record and go on
            rec = {"error": f"{type(err).__name__}: {err}"[:800]}
        out["forms"][name] = rec
    ref = finals.get("auto_k1")
    copy = out["forms"].get("copy", {}).get("us_per_step")
    for name, rec in out["forms"].items():
        if name != "copy" and ref is not None and name in finals:
            rec["bitwise_equal"] = bool(np.array_equal(finals[name], ref))
        if copy and "us_per_step" in rec:
            rec["x_copy"] = copy / rec["us_per_step"]
    if "auto" in out["forms"]:
        out["forms"]["auto"]["peak_over_block"] = auto_peak_over_block(step, make)
    out["copy_GB_per_s"] = (2 * cells * np.dtype(dtype).itemsize / (copy * 1e-6) / 1e9
                            if copy else None)  # fmt: skip
    print(json.dumps(out), flush=True)  # one line per configuration
    return out


def _worker(stencil, size, devices, forms, m, platform, extra_env=None, also=()) -> list[dict]:
    """One worker process: ``stencil`` at ``size`` (its ``forms``), then each
    ``(stencil, size, forms)`` of ``also``."""
    cmd = [sys.executable, os.path.abspath(__file__), "--worker", "--devices", str(devices),
           "--stencil", stencil, "--size", str(size), "--forms", forms, "--platform", platform,
           "--repeats", str(m["repeats"]), "--min-seconds", str(m["min_seconds"])]  # fmt: skip
    cmd += [f"--also={s}:{n}:{f}" for s, n, f in also]
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    env.pop("XLA_FLAGS", None)
    env.update(extra_env or {})
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=1800, env=env)
    if p.returncode != 0:
        return [{"stencil": s, "size": n, "devices": devices, "error": p.stderr[-2000:]}
                for s, n, _ in [(stencil, size, forms), *also]]  # fmt: skip
    recs = [json.loads(line) for line in p.stdout.strip().splitlines()[-1 - len(also) :]]
    for rec in recs:
        rec.update({"xla_flags": extra_env.get("XLA_FLAGS")} if extra_env else {})
    return recs


def gpu_count(platform: str) -> int:
    if platform == "cpu":
        return 4
    p = subprocess.run([sys.executable, "-c", "import jax; print(len(jax.devices('cuda')))"],
                       capture_output=True, text=True, timeout=300)  # fmt: skip
    return int(p.stdout.strip() or 0) if p.returncode == 0 else 0


def sweep(mode: str, platform: str = "gpu", command_buffers: bool = False) -> dict:
    """Every configuration of ``mode`` on 1, 2, 4, ... devices, each in its own process."""
    m = MODES[mode]
    have = gpu_count(platform)
    if have == 0:
        raise SystemExit(f"--platform {platform}: JAX finds no GPU here; install JAX's GPU "
                         f'plugin (pip install -e ".[cuda]") or run --platform cpu')  # fmt: skip
    counts = [d for d in (1, 2, 4, 8, 16) if d <= have] if platform == "gpu" else [1]
    runs = []
    for d in counts:
        jobs = [("heat1d", n, ",".join(HEAT_FORMS)) for n in m["heat"]]
        jobs += [("life", n, ",".join(LIFE_FORMS)) for n in m["life"]]
        if mode == "tiny":  # one worker per device count: its configurations one after another
            (stencil, n, forms), rest = jobs[0], jobs[1:]
            runs += _worker(stencil, n, d, forms, m, platform, also=rest)
        else:
            for stencil, n, forms in jobs:
                runs += _worker(stencil, n, d, forms, m, platform)
    if command_buffers and platform == "gpu":
        flags = {"XLA_FLAGS": "--xla_gpu_enable_command_buffer=+WHILE"}
        for n in m["heat"]:
            runs += _worker("heat1d", n, 1, "auto_k1,auto", m, platform, flags)
    env = {}
    if platform == "gpu":
        code = "import gpu, json; print(json.dumps(gpu.machine_gpu()))"
        env = dict(os.environ, JAX_PLATFORMS="cuda")
        p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                           timeout=300, cwd=HERE, env=env)  # fmt: skip
        env = json.loads(p.stdout.strip().splitlines()[-1]) if p.returncode == 0 else {}
    return {"mode": mode, "platform": platform, "machine": env, "runs": runs}


def table(res: dict) -> str:
    """The results as a Markdown table: us per step, x copy, bitwise, peak memory per form."""
    head = "| stencil | cells | devices | k auto | form | us/step | x copy | bitwise | peak/block |"
    lines = [head, "| --- | ---: | ---: | ---: | --- | ---: | ---: | --- | ---: |"]
    for r in res["runs"]:
        if "error" in r:
            lines.append(f"| {r['stencil']} | {r['size']} | {r['devices']} | | error | | | | |")
            continue
        tag = " (+WHILE)" if r.get("xla_flags") else ""
        for name, f in r["forms"].items():
            if "us_per_step" not in f:
                lines.append(f"| {r['stencil']} | {r['cells']} | {r['devices']} | "
                             f"{r['k_auto']} | {name}{tag} | error | | | |")  # fmt: skip
                continue
            eq = {True: "yes", False: "NO"}.get(f.get("bitwise_equal"), "")
            peak = f"{f['peak_over_block']:.2f}" if "peak_over_block" in f else ""
            lines.append(f"| {r['stencil']} | {r['cells']} | {r['devices']} | {r['k_auto']} | "
                         f"{name}{tag} | {f['us_per_step']:.2f} | {f.get('x_copy', 0):.2f} | "
                         f"{eq} | {peak} |")  # fmt: skip
    return "\n".join(lines)


def write_readme(res: dict, path: str) -> None:
    """Put the table of ``res`` between the GPU markers of benchmarks/README.md."""
    start, end = "<!-- gpu:start -->", "<!-- gpu:end -->"
    mc = res["machine"]
    versions = ", ".join(f"{k} {v}" for k, v in mc.items() if k.startswith(("jax", "nvidia-")))
    driver = (mc.get("nvidia_smi") or ["?, ?"])[0].split(", ")[1]
    plain = [r for r in res["runs"] if r.get("copy_GB_per_s") and not r.get("xla_flags")]
    copies = ", ".join(f"{r['stencil']} {r['cells']}: {r['copy_GB_per_s']:.0f}" for r in plain)
    head = (f"Run `{res['mode']}` on {mc.get('devices')} x {mc.get('device_kind')} (driver "
            f"{driver}, CUDA {mc.get('cuda_driver_api')}); {versions}; pgas {mc.get('pgas')}. "
            f"Copy loop GB/s (read + write): {copies}")  # fmt: skip
    block = "\n".join([start, "", head + ".", "", table(res), "", end])
    text = open(path).read()
    if start not in text:
        text += f"\n{start}\n{end}\n"
    pre, rest = text.split(start, 1)
    open(path, "w").write(pre + block + rest.split(end, 1)[1])


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--worker", action="store_true")
    ap.add_argument("--devices", type=int, default=1)
    ap.add_argument("--stencil", choices=("heat1d", "life"), default="heat1d")
    ap.add_argument("--size", type=int, default=1001)
    ap.add_argument("--forms", default=",".join(HEAT_FORMS))
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--min-seconds", type=float, default=0.05)
    ap.add_argument(
        "--also",
        action="append",
        default=[],
        metavar="STENCIL:SIZE:FORMS",
        help="worker: another configuration, run after the first in this process",
    )
    ap.add_argument("--platform", choices=("gpu", "cpu"), default="gpu",
                    help="cpu: the same forms on CPU devices (to try the script)")  # fmt: skip
    ap.add_argument("--command-buffers", action="store_true",
                    help="also time auto with XLA command buffers on WHILE loops")  # fmt: skip
    ap.add_argument("--tiny", action="store_true")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--out", help="write gpu.json (and the table gpu.md) into this folder")
    a = ap.parse_args(argv)
    if a.worker:
        return worker(a)
    res = sweep("tiny" if a.tiny else "quick" if a.quick else "full", a.platform,
                a.command_buffers)  # fmt: skip
    if a.out:
        os.makedirs(a.out, exist_ok=True)
        with open(os.path.join(a.out, "gpu.json"), "w") as fh:
            json.dump(res, fh, indent=1)
        with open(os.path.join(a.out, "gpu.md"), "w") as fh:
            fh.write(table(res) + "\n")
    print(json.dumps(res["machine"]))
    print(table(res))
    return res


if __name__ == "__main__":
    main()
