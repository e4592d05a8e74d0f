"""Peak memory per process of the examples, measured from outside the run.

    python benchmarks/memory.py --out benchmarks/results/memory            # the full table
    python benchmarks/memory.py --tiny --out /tmp/mem                      # a smoke run

Each case runs ``mpiexec -n P python examples/<x>.py --distributed ... --json --quiet``
(MPICH from PyPI) from a fresh launcher process that reads
``resource.getrusage(RUSAGE_CHILDREN).ru_maxrss`` once the job has ended: the peak
resident memory of the largest process of the job. The same case at a tiny size
(heat1d n = 1001, Life 64x256), with the same options (output included), gives the
baseline (JAX, the imports, the output's writer and compiled programs), and the
table reports ``(peak - baseline) / local block``: how many copies of its block
one process held at its peak. Writes ``memory.json`` and a Markdown table
(``memory.md``) to ``--out``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

_LAUNCH = """
import resource, subprocess, sys
r = subprocess.run(sys.argv[1:], capture_output=True, text=True)
sys.stderr.write(r.stderr[-3000:])
print(r.returncode, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)
"""


def _mpiexec() -> str:
    here = Path(sys.executable).parent / "mpiexec"
    return str(here) if here.exists() else "mpiexec"


def peak_rss(cmd: list[str], timeout: float = 900) -> int:
    """Peak RSS in bytes of the largest process ``cmd`` starts (read by a fresh launcher)."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("PMI", "OMPI_", "PMIX", "HYDRA", "SLURM", "XLA_FLAGS"))
    }
    env.update(JAX_PLATFORMS="cpu", PYTHONUNBUFFERED="1")
    proc = subprocess.run(
        [sys.executable, "-c", _LAUNCH, *cmd],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
        cwd=ROOT,
    )
    code, kb = proc.stdout.split()[-2:]
    if int(code) != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({code}):\n{proc.stderr[-2000:]}")
    return int(kb) * 1024


def case_cmd(
    example: str, processes: int, backend: str, size: str, packed: bool, out: str | None, dtype: str
) -> list[str]:
    """The command line of one case."""
    script = ROOT / "examples" / example / f"{example}.py"
    args = [
        _mpiexec(),
        "-n",
        str(processes),
        sys.executable,
        str(script),
        "--distributed",
        "--backend",
        backend,
        "--steps",
        "20",
        "--json",
        "--quiet",
    ]
    if example == "heat1d":
        args += ["--n", size, "--dtype", dtype, "--init", "gaussian"]
    else:
        args += ["--size", size] + (["--packed"] if packed else [])
    if out:
        args += ["--snapshot-every", "10", "--out", out]
    return args


def field_bytes(example: str, size: str, dtype: str) -> int:
    cells = int(np.prod([int(s.replace("_", "")) for s in size.split("x")]))
    return cells * (np.dtype(dtype).itemsize if example == "heat1d" else 1)


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, help="directory for memory.json and memory.md")
    ap.add_argument("--tiny", action="store_true", help="small sizes (a smoke run)")
    ap.add_argument("--processes", default="1,2,4", help="process counts, e.g. 1,2,4")
    ap.add_argument("--backends", default="auto,explicit,mpi")
    ap.add_argument("--examples", default="heat1d,life")
    a = ap.parse_args(argv)
    from common import machine

    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    sizes = {
        "heat1d": "100_003" if a.tiny else "16_000_003",
        "life": "256x256" if a.tiny else "8192x8192",
    }
    tiny = {"heat1d": "1001", "life": "64x256"}  # 4 words per row when packed
    rows, baselines = [], {}
    for example in a.examples.split(","):
        # heat1d with and without a snapshot store; Life as bytes and packed, with a store
        heat = [(False, None), (False, "zarr")]
        variants = heat if example == "heat1d" else [(False, "zarr"), (True, "zarr")]
        for backend in a.backends.split(","):
            for p in (int(x) for x in a.processes.split(",")):
                for packed, store in variants:
                    path = str(out / f"{example}-{backend}-{p}.zarr") if store else None
                    dtype = "float64"
                    kw = dict(packed=packed, out=path, dtype=dtype)
                    try:
                        key = (example, backend, p, packed, bool(store))
                        if key not in baselines:  # the same run at the tiny size
                            small = dict(kw, out=path and f"{path}.tiny.zarr")
                            baselines[key] = peak_rss(
                                case_cmd(example, p, backend, tiny[example], **small)
                            )
                            if path:
                                subprocess.run(["rm", "-rf", small["out"]], check=False)
                        base = baselines[key]
                        peak = peak_rss(case_cmd(example, p, backend, sizes[example], **kw))
                    except Exception as err:  # noqa: BLE001 - reported in the table
                        rows.append(
                            {
                                "example": example,
                                "backend": backend,
                                "processes": p,
                                "packed": packed,
                                "out": bool(store),
                                "error": str(err),
                            }
                        )
                        continue
                    if path:
                        subprocess.run(["rm", "-rf", path], check=False)
                    field = field_bytes(example, sizes[example], dtype)
                    block = field / p
                    rows.append(
                        {
                            "example": example,
                            "size": sizes[example],
                            "backend": backend,
                            "processes": p,
                            "packed": packed,
                            "out": bool(store),
                            "field_bytes": field,
                            "block_bytes": block,
                            "peak_bytes": peak,
                            "baseline_bytes": base,
                            "blocks_above_baseline": (peak - base) / block,
                        }
                    )
                    print(json.dumps(rows[-1]), flush=True)
    result = {"machine": machine(), "rows": rows}
    (out / "memory.json").write_text(json.dumps(result, indent=1))
    (out / "memory.md").write_text(table(result))
    print(table(result))
    return result


def table(result: dict) -> str:
    """The Markdown table of :func:`main`'s result."""
    mib = 2**20
    lines = [
        f"CPU: {result['machine'].get('cpu_model', '?')}",
        "",
        "| example | backend | P | form | block MiB | peak MiB | baseline MiB | "
        "(peak - baseline) / block |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in result["rows"]:
        form = ("packed" if r.get("packed") else "bytes") if r["example"] == "life" else "f64"
        form += " + --out" if r.get("out") else ""
        if "error" in r:
            lines.append(
                f"| {r['example']} | {r['backend']} | {r['processes']} | {form} | "
                f"error: {r['error'][:60]!r} | | | |"
            )
            continue
        lines.append(
            f"| {r['example']} {r['size']} | {r['backend']} | {r['processes']} | {form} "
            f"| {r['block_bytes'] / mib:.0f} | {r['peak_bytes'] / mib:.0f} | "
            f"{r['baseline_bytes'] / mib:.0f} | {r['blocks_above_baseline']:.1f} |"
        )
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
