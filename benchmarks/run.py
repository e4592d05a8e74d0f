"""Run the benchmark suite in one command: roofline, peers, scaling, communication, memory.

    python benchmarks/run.py [--quick | --tiny] [--out DIR]
    python benchmarks/run.py --platform gpu [--quick]   # benchmarks/gpu.py, the GPU section

Writes DIR/results.json, DIR/*.png and regenerates the results table of
benchmarks/README.md (between the marker comments; not in --tiny mode or with
--no-readme). Device counts differ per process, so every configuration runs in
its own subprocess (JAX: XLA_FLAGS device count; MPI: mpiexec -n P); --tiny runs the
stencils of one device count in one process, and its 1-worker scaling rows are the
1-device throughput runs'.
The deep-halo sweep (benchmarks/deep_halo.py) runs last, under the key "deep_halo".
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

from common import BYTES_PER_CELL, DTYPES, machine  # noqa: E402
from stream import stream  # noqa: E402

MODES = {
    # sizes: heat cells; life side. steps per timed call; repeats of the timed call.
    "tiny": dict(
        heat=[2**12],
        life=[64],
        steps=3,
        repeats=2,
        devices=[1, 2],
        procs=[1, 2],
        strong=2**12,
        weak=2**11,
    ),
    "quick": dict(
        heat=[2**16, 2**20, 2**22],
        life=[256, 1024],
        steps=10,
        repeats=3,
        devices=[1, 2, 4],
        procs=[1, 2],
        strong=2**22,
        weak=2**21,
    ),
    "full": dict(
        heat=[2**16, 2**18, 2**20, 2**22, 2**24, 2**26],
        life=[256, 1024, 2048, 4096, 8192],
        steps=10,
        repeats=5,
        devices=[1, 2, 4, 8],
        procs=[1, 2, 4],
        strong=2**24,
        weak=2**23,
    ),
}


def sh(cmd: list[str], timeout: float, count: int = 1) -> list[dict]:
    """Run a worker; its last ``count`` lines of output, one JSON document each (their
    ``wall_seconds``: the whole run's)."""
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    env.pop("XLA_FLAGS", None)
    t = time.perf_counter()
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
    if p.returncode != 0:
        return [{"error": p.stderr[-2000:], "cmd": " ".join(cmd), "results": []}
                for _ in range(count)]  # fmt: skip
    docs = [json.loads(line) for line in p.stdout.strip().splitlines()[-count:]]
    for out in docs:
        out["wall_seconds"] = time.perf_counter() - t
    return docs


def jax_case(devices, stencils, sizes, backends, m, details=True) -> list[dict]:
    """cases.py on ``devices`` devices: one process for ``stencils``, each at its ``sizes``."""
    cmd = [
        sys.executable,
        os.path.join(HERE, "cases.py"),
        "--devices",
        str(devices),
        "--stencil",
        ",".join(stencils),
        "--sizes",
        "/".join(",".join(map(str, s)) for s in sizes),
        "--backends",
        backends,
        "--steps",
        str(m["steps"]),
        "--repeats",
        str(m["repeats"]),
    ] + (["--details"] if details else [])
    return sh(cmd, 1800, len(stencils))


def mpi_case(procs, stencils, sizes, m) -> list[dict]:
    """mpi_case.py under ``mpiexec -n procs``: one launch for ``stencils``, each at ``sizes``."""
    mpiexec = os.path.join(os.path.dirname(sys.executable), "mpiexec")
    cmd = [
        mpiexec,
        "-n",
        str(procs),
        sys.executable,
        os.path.join(HERE, "mpi_case.py"),
        "--stencil",
        ",".join(stencils),
        "--sizes",
        "/".join(",".join(map(str, s)) for s in sizes),
        "--steps",
        str(m["steps"]),
        "--repeats",
        str(m["repeats"]),
    ]
    return sh(cmd, 1800, len(stencils))


def cells_of(stencil, size):
    return size if stencil.startswith("heat") else size * size


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--tiny", action="store_true", help="seconds; for the tests")
    ap.add_argument("--out", default=os.path.join(HERE, "results"))
    ap.add_argument("--no-readme", action="store_true")
    ap.add_argument("--platform", choices=("cpu", "gpu"), default="cpu",
                    help="gpu: benchmarks/gpu.py on the GPUs present, and the README's GPU "
                    "section")  # fmt: skip
    a = ap.parse_args(argv)
    mode = "tiny" if a.tiny else "quick" if a.quick else "full"
    m = MODES[mode]
    os.makedirs(a.out, exist_ok=True)
    if a.platform == "gpu":
        import gpu

        res = gpu.main([f"--{mode}", "--command-buffers", "--out", a.out])
        if not a.no_readme and mode != "tiny":
            gpu.write_readme(res, os.path.join(HERE, "README.md"))
        return res
    t0 = time.perf_counter()
    res = {
        "mode": mode,
        "machine": machine(),
        "config": m,
        "roofline": {},
        "stream": [],
        "throughput": {},
        "scaling": {"strong": [], "weak": []},
        "comparison": [],
        "runs": [],
    }

    # 1. roofline: STREAM at each field size
    sbytes = sorted(
        {
            cells_of(s, n) * (BYTES_PER_CELL[s] // 2)
            for s in DTYPES
            for n in m[s.split("_")[0].replace("1d", "")]
        }
    )
    bw = {}
    for nbytes in sbytes:
        st = stream(nbytes, repeats=3 if mode != "full" else 7)
        res["stream"].append(st)
        bw[nbytes] = st
    for s in DTYPES:
        res["roofline"][s] = []
        for n in m[s.split("_")[0].replace("1d", "")]:
            st = bw[cells_of(s, n) * (BYTES_PER_CELL[s] // 2)]
            res["roofline"][s].append(
                {
                    "size": n,
                    "cells": cells_of(s, n),
                    "bytes_per_cell": BYTES_PER_CELL[s],
                    "copy_GB_per_s": st["copy"]["GB_per_s_median"],
                    "triad_GB_per_s": st["triad"]["GB_per_s_median"],
                    "ceiling_cells_per_s": st["copy"]["GB_per_s_median"] * 1e9 / BYTES_PER_CELL[s],
                }
            )

    def roof(s, cells):
        rr = [r for r in res["roofline"].get(s, []) if r["cells"] == cells]
        return rr[0]["ceiling_cells_per_s"] if rr else None

    def annotate(rec, s):
        rec["stencil"] = s
        if "cells_per_s_median" in rec:
            rec["T_eff_GB_per_s"] = rec["cells_per_s_median"] * BYTES_PER_CELL[s] / 1e9
            c = roof(s, rec["cells"])
            if c:
                rec["x_roofline"] = rec["cells_per_s_median"] / c
        return rec

    # 2. throughput, one device / one process, all backends (--tiny: the details, comm report,
    # memory and compile of each backend, only on 2 devices, in the scaling runs below; the
    # three stencils in one process, and in one launch of mpiexec, heat1d_f32 also at the
    # sizes of the 1-worker scaling runs, which use these runs)
    names = list(DTYPES)
    sizes = [m[s.split("_")[0].replace("1d", "")] for s in names]
    pairs = list(zip(names, sizes))
    if mode == "tiny":
        run_sizes = [sorted({*n, m["strong"], m["weak"]}) if s == "heat1d_f32" else n
                     for s, n in pairs]  # fmt: skip
        one = jax_case(1, names, run_sizes, "auto,explicit,naive,numpy", m, details=False)
        one_mpi = mpi_case(1, names, run_sizes, m)
    else:
        one = [jax_case(1, [s], [n], "auto,explicit,naive,numpy", m)[0] for s, n in pairs]
        one_mpi = [mpi_case(1, [s], [n], m)[0] for s, n in pairs]
    first = {}  # stencil -> (its JAX run, its MPI run) on one worker
    for (s, n), r, r_mpi in zip(pairs, one, one_mpi):
        first[s] = (r, r_mpi)
        rows = []
        for run in (r, r_mpi):
            res["runs"].append({k: v for k, v in run.items() if k != "results"})
            rows += [x for x in run["results"] if x["size"] in n]
        res["throughput"][s] = [annotate(x, s) for x in rows]

    def reused(run, sizes, backends=None) -> dict | None:
        """--tiny: the throughput run above when it has these sizes (1 worker), not run again."""
        if mode != "tiny" or sorted({x["size"] for x in run["results"]}) != sizes:
            return None
        keep = [dict(x) for x in run["results"] if backends is None or x["backend"] in backends]
        return dict(run, results=keep)

    # 3. scaling (heat1d float32): strong at a fixed size, weak at a fixed size per worker
    s = "heat1d_f32"
    for d in m["devices"]:
        sizes = sorted({m["strong"], m["weak"] * d})
        r = reused(first[s][0], sizes, {"auto", "explicit", "naive"}) if d == 1 else None
        if r is None:
            r = jax_case(d, [s], [sizes], "auto,explicit,naive", m, details=d > 1)[0]
            res["runs"].append({k: v for k, v in r.items() if k != "results"})
        for x in r["results"]:
            x["workers"] = d
            if x["size"] == m["strong"]:
                res["scaling"]["strong"].append(annotate(dict(x), s))
            if x["size"] == m["weak"] * d:
                res["scaling"]["weak"].append(annotate(dict(x), s))
    for p in m["procs"]:
        sizes = sorted({m["strong"], m["weak"] * p})
        r = reused(first[s][1], sizes) if p == 1 else None
        if r is None:
            r = mpi_case(p, [s], [sizes], m)[0]
            res["runs"].append({k: v for k, v in r.items() if k != "results"})
        for x in r["results"]:
            x["workers"] = p
            x["peak_rss_bytes_per_process"] = r.get("peak_rss_bytes_per_process")
            if x["size"] == m["strong"]:
                res["scaling"]["strong"].append(annotate(dict(x), s))
            if x["size"] == m["weak"] * p:
                res["scaling"]["weak"].append(annotate(dict(x), s))
    for kind in ("strong", "weak"):
        rows = res["scaling"][kind]
        for x in rows:
            one = [
                y
                for y in rows
                if y["backend"] == x["backend"] and y["workers"] == 1 and "seconds_median" in y
            ]
            if not one or "seconds_median" not in x:
                x["efficiency"] = None
                continue
            t1 = one[0]["seconds_median"]
            w = x["workers"]
            x["speedup"] = t1 / x["seconds_median"] * (w if kind == "weak" else 1)
            x["efficiency"] = (
                t1 / x["seconds_median"] if kind == "weak" else t1 / (w * x["seconds_median"])
            )

    # comparison rows: largest throughput size for 1 worker, plus the 2-worker strong case
    for s, rows in res["throughput"].items():
        big = max(x["cells"] for x in rows)
        for x in rows:
            if x["cells"] == big and "cells_per_s_median" in x:
                res["comparison"].append(
                    dict(
                        stencil=s,
                        backend=x["backend"],
                        workers=1,
                        cells=big,
                        gcells=x["cells_per_s_median"] / 1e9,
                        x_roofline=x.get("x_roofline"),
                    )
                )
    for x in res["scaling"]["strong"]:
        if x["workers"] == 2 and "cells_per_s_median" in x:
            res["comparison"].append(
                dict(
                    stencil="heat1d_f32",  # the scaling runs
                    backend=x["backend"],
                    workers=2,
                    cells=x["cells"],
                    gcells=x["cells_per_s_median"] / 1e9,
                    x_roofline=(x.get("x_roofline") or 0) / 2,
                )
            )
    res["ratios"] = ratios(res)

    # 4. deep halos: k steps per exchange, auto and explicit, against k = 1 and a copy loop
    import deep_halo

    res["deep_halo"] = deep_halo.sweep(mode)
    res["total_seconds"] = time.perf_counter() - t0

    import plots

    res["plots"] = [
        os.path.basename(f)
        for f in plots.throughput_plots(res, a.out)
        + [plots.backend_bars(res, a.out)]
        + plots.scaling_plots(res, a.out)
        + [plots.deep_halo_plot(res["deep_halo"], a.out)]
    ]
    with open(os.path.join(a.out, "results.json"), "w") as fh:
        json.dump(res, fh, indent=1, default=str)
    if not a.no_readme and mode != "tiny":
        write_readme(res)
    print(
        f"wrote {a.out}/results.json and {len(res['plots'])} plots in {res['total_seconds']:.0f} s"
    )
    return res


def ratios(res) -> dict:
    """Headline ratios at the largest size, measured in this run."""
    out = {}
    for s, rows in res["throughput"].items():
        big = max(x["cells"] for x in rows)
        g = {x["backend"]: x.get("cells_per_s_median") for x in rows if x["cells"] == big}
        if g.get("auto"):
            for b in ("explicit", "naive", "handwritten", "mpi", "numpy"):
                if g.get(b):
                    out[f"{s}: auto / {b} (1 worker)"] = g["auto"] / g[b]
    for x in res["scaling"]["weak"]:
        if x["workers"] == 2 and x.get("efficiency") is not None:
            out[f"weak efficiency 1->2, {x['backend']}"] = x["efficiency"]
    return out


def write_readme(res, path: str = os.path.join(HERE, "README.md")) -> None:
    """Rewrite the results between the marker comments of ``path`` (benchmarks/README.md)."""
    start, end = "<!-- results:start -->", "<!-- results:end -->"
    mc = res["machine"]
    backends = sorted({x["backend"] for rows in res["throughput"].values() for x in rows})
    lines = [
        start,
        "",
        f"Run `{res['mode']}` on {mc['cpu_model']}, {mc['cores']} cores, "
        f"{mc['memory_bytes'] / 2**30:.0f} GiB, L3 {mc['l3_cache']}; jax {mc['jax']}, "
        f"numpy {mc['numpy']}, pgas {mc['pgas']}; {mc['date']} "
        f"(load average {', '.join(f'{v:.1f}' for v in mc['load_average'])}).",
        "",
        "G cell/s, median [min-max], and x roofline; the roofline is NumPy STREAM copy at the "
        "field's size, 1 thread:",
        "",
        "| stencil | cells | copy GB/s | triad GB/s | ceiling G cell/s | "
        + " | ".join(backends)
        + " |",
        "|---|---|---|---|---|" + "---|" * len(backends),
    ]
    for s, rows in res["throughput"].items():
        roof = {r["cells"]: r for r in res["roofline"].get(s, [])}
        for cells in sorted({x["cells"] for x in rows}):
            r = roof.get(cells)
            cols = (
                [f"{r['copy_GB_per_s']:.1f}", f"{r['triad_GB_per_s']:.1f}",
                 f"{r['ceiling_cells_per_s'] / 1e9:.2f}"]
                if r else ["", "", ""]
            )  # fmt: skip
            by = {x["backend"]: x for x in rows if x["cells"] == cells}
            for b in backends:
                x = by.get(b)
                if x is None:
                    cols.append("")
                elif "cells_per_s_median" not in x:
                    cols.append("error")
                else:
                    cols.append(
                        f"{x['cells_per_s_median'] / 1e9:.3f} "
                        f"[{x['cells_per_s_min'] / 1e9:.3f}-{x['cells_per_s_max'] / 1e9:.3f}] "
                        f"{x.get('x_roofline', float('nan')):.2f}x"
                    )
            lines.append(f"| {s} | {cells} | " + " | ".join(cols) + " |")
    lines += [
        "",
        "Scaling, heat1d float32 (virtual CPU devices on 2 cores; processes via mpiexec):",
        "",
        "| kind | backend | workers | cells | G cell/s | efficiency | msgs/step | bytes/step "
        "| ideal "
        "| peak mem / block | compile s |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for kind in ("strong", "weak"):
        for x in sorted(res["scaling"][kind], key=lambda r: (r["backend"], r["workers"])):
            c = x.get("comm", {})
            mem = x.get("memory", {})
            eff = x.get("efficiency")
            effs = "" if eff is None else f"{eff:.2f}"
            mems = f"{mem['peak_over_block']:.2f}" if mem else ""
            comps = f"{x['compile_seconds']:.2f}" if "compile_seconds" in x else ""
            lines.append(
                f"| {kind} | {x['backend']} | {x['workers']} | {x['cells']} | "
                f"{x.get('cells_per_s_median', float('nan')) / 1e9:.3f} | "
                f"{effs} | {c.get('messages_per_step', '')} | "
                f"{c.get('bytes_per_step', '')} | {c.get('ideal_bytes_per_step', '')} | "
                f"{mems} | {comps} |"
            )
    others = [b for b in backends if b != "auto"]
    lines += [
        "",
        "auto / each backend at the largest size, 1 worker (same run):",
        "",
        "| stencil | " + " | ".join(others) + " |",
        "|---|" + "---|" * len(others),
    ]
    for s in res["throughput"]:
        got = [res["ratios"].get(f"{s}: auto / {b} (1 worker)") for b in others]
        lines.append(f"| {s} | " + " | ".join("" if v is None else f"{v:.2f}" for v in got) + " |")
    weak = [(k.rsplit(", ", 1)[1], v) for k, v in res["ratios"].items() if k.startswith("weak")]
    if weak:
        lines += ["", "Weak efficiency 1->2: " + ", ".join(f"{b} {v:.2f}" for b, v in weak) + "."]
    lines += ["", end]
    text = open(path).read() if os.path.exists(path) else f"# Benchmarks\n\n{start}\n{end}\n"
    if start not in text:
        text += f"\n{start}\n{end}\n"
    pre, rest = text.split(start, 1)
    post = rest.split(end, 1)[1]
    open(path, "w").write(pre + "\n".join(lines) + post)


if __name__ == "__main__":
    main()
