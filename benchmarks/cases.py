"""JAX worker: one process per device count. Prints one JSON document per stencil on stdout.

python benchmarks/cases.py --devices D --stencil heat1d_f32 --sizes 65536,... \
    --backends auto,explicit,naive,numpy --steps S --repeats R
python benchmarks/cases.py ... --stencil heat1d_f32,life_u8 --sizes 4096/64   # one line each
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--devices", type=int, required=True)
    ap.add_argument("--stencil", required=True, help="one, or several comma-separated")
    ap.add_argument(
        "--sizes",
        required=True,
        help="comma-separated cells per axis (heat: N, life: side); per stencil, /-separated",
    )
    ap.add_argument("--backends", default="auto,explicit,naive,numpy")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument(
        "--details", action="store_true", help="comm report, memory analysis, compile time"
    )
    a = ap.parse_args()
    os.environ["XLA_FLAGS"] = (
        os.environ.get("XLA_FLAGS", "") + f" --xla_force_host_platform_device_count={a.devices}"
    )
    import jax
    import jax.numpy as jnp
    import numpy as np

    if any(s.endswith("f64") for s in a.stencil.split(",")):
        jax.config.update("jax_enable_x64", True)

    from common import (
        DTYPES,
        example_stencils,
        heat_np,
        init_heat,
        init_life,
        life_np,
        peak_rss_bytes,
        stats,
    )

    import pgas
    import pgas.references.explicit

    heat_step, heat_kernel = example_stencils("heat1d")
    life_step, life_kernel = example_stencils("life")

    def naive_heat(u):
        return u.at[1:-1].set(0.5 * u[1:-1] + 0.25 * (u[:-2] + u[2:]))

    def naive_life(g):
        n = sum(
            jnp.roll(jnp.roll(g, dy, 0), dx, 1)
            for dy in (-1, 0, 1)
            for dx in (-1, 0, 1)
            if (dy, dx) != (0, 0)
        )
        return ((n == 3) | ((g == 1) & (n == 2))).astype(jnp.uint8)

    # --stencil A,B --sizes SIZES_A/SIZES_B: the stencils one after the other in this
    # process (--tiny: one launch), one JSON document per stencil, one line each
    for stencil, sizes in zip(a.stencil.split(","), a.sizes.split("/"), strict=True):
        dtype = np.dtype(DTYPES[stencil])
        heat = stencil.startswith("heat")
        out = {"devices": a.devices, "stencil": stencil, "results": []}
        for size in [int(s) for s in sizes.split(",")]:
            if heat:
                mesh = pgas.make_mesh(("x",), devices=a.devices)
                shape = (size,)
                make = lambda: pgas.from_function(
                    init_heat, shape, mesh, boundary=pgas.Keep(), dtype=dtype
                )  # noqa: E731
            else:
                dims = pgas.dims_create(a.devices, 2)
                mesh = pgas.make_mesh(("y", "x"), shape=dims, devices=a.devices)
                shape = (size, size)
                make = lambda: pgas.from_function(init_life, shape, mesh, dtype=dtype)  # noqa: E731
            cells = int(np.prod(shape))
            steps = a.steps
            ref = None
            for backend in a.backends.split(","):
                rec = {
                    "backend": backend,
                    "size": size,
                    "cells": cells,
                    "steps": steps,
                    "devices": a.devices,
                }
                try:
                    if backend == "numpy":
                        if a.devices != 1:
                            continue
                        if heat:
                            u = init_heat(np.arange(size)).astype(dtype)
                            fn = lambda u: [heat_np(u) for _ in range(steps)] and u  # noqa: E731
                        else:
                            i, j = np.meshgrid(np.arange(size), np.arange(size), indexing="ij")
                            u = init_life(i, j)

                            def fn(g):
                                for _ in range(steps):
                                    g = life_np(g)
                                return g

                        fn(u.copy())
                        times = []
                        for _ in range(a.repeats):
                            v = u.copy()
                            t = time.perf_counter()
                            fn(v)
                            times.append(time.perf_counter() - t)
                        rec.update(stats(times, cells * steps))
                        out["results"].append(rec)
                        continue
                    if backend in ("auto", "explicit", "auto_k1", "explicit_k1"):
                        k = 1 if backend.endswith("_k1") else "auto"
                        rec["steps_per_exchange_requested"] = k
                        if backend.startswith("auto"):
                            step = heat_step if heat else life_step
                            prog = lambda u, n: pgas.run(step, u, steps=n, steps_per_exchange=k)  # noqa: E731
                            rec["steps_per_exchange"] = pgas.plan.plan(
                                step, make(), k
                            ).steps_per_exchange
                        else:
                            kern = heat_kernel if heat else life_kernel
                            region = (slice(1, -1),) if heat else None
                            prog = lambda u, n: pgas.explicit.run(
                                kern, u, n, halo=1, region=region, steps_per_exchange=k
                            )  # noqa: E731
                            rec["steps_per_exchange"] = pgas.explicit.choose(
                                make(), 1, k
                            ).steps_per_exchange
                        u = make()
                        t = time.perf_counter()
                        u = prog(u, 1)
                        u.data.block_until_ready()
                        rec["compile_seconds"] = (
                            time.perf_counter() - t
                        )  # trace + compile the whole loop + 1 step
                        # the double-buffered loop compiles one program per parity
                        u = prog(u, steps)
                        u.data.block_until_ready()
                        times = []
                        for _ in range(a.repeats):
                            t = time.perf_counter()
                            u = prog(u, steps)
                            u.data.block_until_ready()
                            times.append(time.perf_counter() - t)
                        rec.update(stats(times, cells * steps))
                        if a.details:
                            rec.update(
                                details(
                                    backend.removesuffix("_k1"),
                                    k,
                                    heat,
                                    heat_step,
                                    life_step,
                                    make,
                                    mesh,
                                    a,
                                    jax,
                                    jnp,
                                    pgas,
                                    heat_kernel,
                                    life_kernel,
                                )
                            )
                        # correctness vs the other backends at 1 + repeats*steps steps
                        final = u.to_numpy()
                    elif backend == "naive":
                        from jax.sharding import NamedSharding, PartitionSpec

                        spec = PartitionSpec("x") if heat else PartitionSpec("y", "x")
                        x0 = make().to_numpy()
                        x = (
                            jax.device_put(x0, NamedSharding(mesh, spec))
                            if size % a.devices == 0 or not heat
                            else None
                        )
                        if x is None:
                            continue
                        f = naive_heat if heat else naive_life
                        prog = jax.jit(
                            lambda x, n: jax.lax.fori_loop(0, n, lambda i, y: f(y), x),
                            donate_argnums=0,
                        )
                        t = time.perf_counter()
                        x = prog(x, jnp.int32(1))
                        x.block_until_ready()
                        rec["compile_seconds"] = time.perf_counter() - t
                        # the same steps as the pgas backends' warm-up
                        x = prog(x, jnp.int32(steps))
                        x.block_until_ready()
                        times = []
                        for _ in range(a.repeats):
                            t = time.perf_counter()
                            x = prog(x, jnp.int32(steps))
                            x.block_until_ready()
                            times.append(time.perf_counter() - t)
                        rec.update(stats(times, cells * steps))
                        if a.details:
                            txt = prog.lower(x, jnp.int32(2)).compile().as_text()
                            from pgas.loop.report import parse_collectives

                            cols = [c for c in parse_collectives(txt, loop=True) if c.per_step]
                            rec["comm"] = {
                                "messages_per_step": len(cols),
                                "bytes_per_step": sum(c.bytes for c in cols),
                                "kinds": sorted({c.kind for c in cols}),
                            }
                        final = np.asarray(x)
                    else:
                        raise SystemExit(f"unknown backend {backend}")
                    if ref is None:
                        ref = (backend, final)
                    else:
                        rec["equal_to_" + ref[0]] = bool(np.array_equal(final, ref[1]))
                except Exception as err:  # record, go on: one failing backend loses no other
                    rec["error"] = f"{type(err).__name__}: {err}"[:500]
                out["results"].append(rec)
        out["peak_rss_bytes"] = peak_rss_bytes()
        print(json.dumps(out), flush=True)


def details(
    backend, k, heat, heat_step, life_step, make, mesh, a, jax, jnp, pgas, heat_kernel, life_kernel
) -> dict:
    """Collectives per step (vs ideal), compile time of the whole loop, memory analysis."""
    import numpy as np

    import pgas.references.explicit as ex
    from pgas.loop.timeloop import compiled as compiled_loop

    rec = {}
    u = make()
    local_bytes = int(np.prod(u.layout.local_shape)) * np.dtype(u.dtype).itemsize
    if backend == "auto":
        step = heat_step if heat else life_step
        rep = pgas.comm_report(step, u, loop=True, steps_per_exchange=k).to_dict()
        compiled = compiled_loop(step, u, k)
    else:
        kern = heat_kernel if heat else life_kernel
        region = (slice(1, -1),) if heat else None
        rep = ex.comm_report(kern, u, 1, region, steps_per_exchange=k, loop=True).to_dict()
        kk = ex.choose(u, 1, k).steps_per_exchange
        fn = ex.program(kern, u.layout, (1,) * u.layout.ndim, ex.region_key(region), kk)
    rec["comm"] = {
        "messages_per_step": rep["messages_per_step"],
        "bytes_per_step": rep["halo_bytes_per_step_all_devices"],
        "permutes_per_step": rep["collective-permute"]["count_per_step"],
        "ideal_bytes_per_step": rep["ideal_halo_bytes_per_step"],
        "halo_ratio": rep["halo_ratio"],
        "steps_per_exchange": rep["steps_per_exchange"],
        "report": rep,
    }
    if backend != "auto":
        compiled = fn.lower(u.data, jnp.int32(2)).compile()
    m = compiled.memory_analysis()
    if m is not None:
        peak = (
            m.argument_size_in_bytes
            + m.output_size_in_bytes
            + m.temp_size_in_bytes
            - m.alias_size_in_bytes
        )
        rec["memory"] = {
            "argument_bytes": m.argument_size_in_bytes,
            "output_bytes": m.output_size_in_bytes,
            "temp_bytes": m.temp_size_in_bytes,
            "alias_bytes": m.alias_size_in_bytes,
            "peak_bytes": peak,
            "local_block_bytes": local_bytes,
            "peak_over_block": peak / local_bytes,
        }
    txt = compiled.as_text()
    rec["hlo_while_body"] = hlo_body_stats(txt)
    return rec


def hlo_body_stats(txt: str) -> dict:
    """Fusions, copies and concatenates in the compiled while body (passes over memory)."""
    import re

    m = re.search(r"\n(%\S*region_0\S* \(.*?\n})", txt, re.S)
    names = re.findall(r"body=(%\S+?),", txt)
    body = ""
    for name in names:
        mm = re.search(r"\n" + re.escape(name) + r" \(.*?\n}", txt, re.S)
        if mm:
            body = mm.group(0)
    body = body or (m.group(1) if m else "")
    return {
        "fusions": len(re.findall(r" fusion\(", body)),
        "copies": len(re.findall(r"= \S+ copy\(", body)),
        "concatenates": len(re.findall(r" concatenate\(", body)),
    }


if __name__ == "__main__":
    main()
