"""The benchmark driver runs end to end at a tiny size, writes its JSON and plots."""

import json
import os
import re
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MPIEXEC = os.path.join(os.path.dirname(sys.executable), "mpiexec")


@pytest.mark.skipif(not os.path.exists(MPIEXEC), reason="needs mpiexec next to the interpreter")
def test_tiny_run_writes_results_and_plots(tmp_path):
    out = tmp_path / "bench"
    subprocess.run(
        [sys.executable, os.path.join(ROOT, "benchmarks", "run.py"), "--tiny", "--out", str(out)],
        check=True,
        timeout=300,
    )
    res = json.loads((out / "results.json").read_text())
    for key in (
        "cpu_model",
        "cores",
        "memory_bytes",
        "device_kind",
        "jax",
        "numpy",
        "pgas",
        "date",
    ):
        assert key in res["machine"]
    assert set(res["throughput"]) == {"heat1d_f32", "heat1d_f64", "life_u8"}
    for stencil, rows in res["throughput"].items():
        backends = {r["backend"] for r in rows}
        assert {"auto", "explicit", "naive", "numpy", "mpi", "handwritten"} <= backends, stencil
        for r in rows:
            assert "error" not in r, r
            assert {
                "seconds_median",
                "seconds_min",
                "seconds_max",
                "cells_per_s_median",
                "x_roofline",
            } <= set(r)
            if r["backend"] in ("explicit", "naive"):
                assert r["equal_to_auto"] is True
    for r in res["roofline"]["heat1d_f32"]:
        assert r["bytes_per_cell"] == 8 and r["ceiling_cells_per_s"] > 0
    assert {r["workers"] for r in res["scaling"]["strong"]} >= {1, 2}
    auto2 = [r for r in res["scaling"]["strong"] if r["backend"] == "auto" and r["workers"] == 2][0]
    # messages per physical step: 2 per exchange on 2 devices, one exchange per k steps
    k = auto2["comm"]["steps_per_exchange"]
    assert auto2["comm"]["messages_per_step"] == 2 / k and auto2["comm"]["ideal_bytes_per_step"] > 0
    assert auto2["memory"]["peak_over_block"] > 0
    mpi2 = [r for r in res["scaling"]["strong"] if r["backend"] == "mpi" and r["workers"] == 2][0]
    k, steps = mpi2["steps_per_exchange"], mpi2["steps"]  # one exchange per group of <= k steps
    assert mpi2["comm"]["messages_per_step"] == 2 * -(-steps // k) / steps
    for name in res["plots"]:
        assert (out / name).stat().st_size > 1000
    runs = res["deep_halo"]["runs"]  # tiny: heat 4096 and life 64 on 2 devices
    assert {(r["stencil"], r["devices"]) for r in runs} == {("heat1d", 2), ("life", 2)}
    for run in runs:
        assert "error" not in run, run
        assert run["copy_cells_per_s"] > 0
        for r in run["results"]:
            assert r["bitwise_equal_to_first"] is True, (run["stencil"], r)
            assert r["cells_per_s_median"] > 0 and r["x_copy"] > 0
            if r["backend"] == "auto":  # 2 devices, one split axis: 2 permutes per k steps
                assert r["permutes_per_step"] == 2 / r["k"], (run["stencil"], r)
                assert r["peak_over_block"] > 0


@pytest.mark.one_process
def test_gpu_benchmark_runs_its_forms_and_writes_its_section(tmp_path):
    """benchmarks/gpu.py on CPU devices (its --platform cpu): every form bitwise, one table."""
    out = tmp_path / "gpu"
    subprocess.run(
        [sys.executable, os.path.join(ROOT, "benchmarks", "gpu.py"), "--tiny", "--platform",
         "cpu", "--out", str(out)],
        check=True, timeout=300,
    )  # fmt: skip
    res = json.loads((out / "gpu.json").read_text())
    runs = {(r["stencil"], r["size"]): r for r in res["runs"]}
    assert set(runs) == {("heat1d", 1001), ("heat1d", 4096), ("life", 64)}
    life = runs["life", 64]["forms"]
    assert {"copy", "auto", "auto_k1", "explicit", "naive", "plain_separable",
            "auto_separable"} <= set(life)  # fmt: skip
    for r in res["runs"]:
        for name, f in r["forms"].items():
            assert "error" not in f and f["us_per_step"] > 0, (name, f)
            assert name == "copy" or f["bitwise_equal"] is True, name
    sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
    import gpu

    res["machine"] = {"devices": 1, "device_kind": "test", "jax": "0", "pgas": "0"}
    readme = tmp_path / "README.md"
    readme.write_text("# Benchmarks\n\nbefore\n<!-- gpu:start -->\nold\n<!-- gpu:end -->\nafter\n")
    gpu.write_readme(res, str(readme))
    text = readme.read_text()
    assert "old" not in text and "before" in text and "after" in text
    assert "| life | 4096 | 1 | 8 | auto_separable |" in text


@pytest.mark.one_process
def test_memory_benchmark_reads_the_peak_of_the_child_from_outside():
    """benchmarks/memory.py's launcher sees a child's peak, not its own (a 256 MiB array)."""
    sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
    try:
        import memory
    finally:
        sys.path.pop(0)
    grow = "import numpy as np; a = np.ones(2**25); print(a.sum())"  # 2**25 float64: 256 MiB
    small = memory.peak_rss([sys.executable, "-c", "print(1)"])
    big = memory.peak_rss([sys.executable, "-c", grow])
    assert small < 2**28 <= big < small + 2**28 + 2**27, (small, big)
    row = {"example": "heat1d", "size": "9", "backend": "mpi", "processes": 2, "packed": False,
           "out": True, "block_bytes": 2**20, "peak_bytes": 5 * 2**20,
           "baseline_bytes": 2**20, "blocks_above_baseline": 4.0}  # fmt: skip
    text = memory.table({"machine": {"cpu_model": "X"}, "rows": [row]})
    assert "| heat1d 9 | mpi | 2 | f64 + --out | 1 | 5 | 1 | 4.0 |" in text
    with pytest.raises(RuntimeError, match="failed"):
        memory.peak_rss([sys.executable, "-c", "raise SystemExit(3)"])


README = os.path.join(ROOT, "benchmarks", "README.md")


def _slug(heading: str) -> str:
    """GitHub's anchor of a Markdown heading."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def _anchors(path: str) -> set[str]:
    text = open(path).read()
    return {_slug(h) for h in re.findall(r"^#+ (.+)$", text, flags=re.MULTILINE)}


def test_readme_at_most_350_lines():
    """benchmarks/README.md stays a reference: figures, commands, findings (history: CHANGELOG)."""
    with open(README) as fh:
        lines = fh.read().splitlines()
    assert len(lines) <= 350, len(lines)


def test_readme_relative_links_resolve():
    """Every relative link of benchmarks/README.md names a file that exists, and its anchor."""
    text = open(README).read()
    links = re.findall(r"\]\(([^)\s]+)\)", text)
    assert len(links) > 20, links
    here = os.path.dirname(README)
    for link in links:
        if re.match(r"[a-z]+:", link):
            continue
        path, _, anchor = link.partition("#")
        target = os.path.normpath(os.path.join(here, path)) if path else README
        assert os.path.exists(target), link
        if anchor and target.endswith(".md"):
            assert anchor in _anchors(target), link


def test_results_table_written_between_the_markers(tmp_path):
    """run.py's writer: one row per stencil and size, a column per backend, ratios, markers."""
    import importlib.util

    # benchmarks/run.py imports its neighbours (`common`, `stream`, ...); tests/dist_scripts
    # has modules of those names too, which another test may have imported first: run.py gets
    # its own, and the others are put back after
    bench = os.path.join(ROOT, "benchmarks")
    names = {f[:-3] for f in os.listdir(bench) if f.endswith(".py")}
    saved = {n: sys.modules.pop(n) for n in names if n in sys.modules}
    sys.path.insert(0, bench)
    try:
        spec = importlib.util.spec_from_file_location(
            "pgas_bench_run", os.path.join(bench, "run.py")
        )
        run = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(run)
    finally:
        sys.path.pop(0)
        for n in names:
            sys.modules.pop(n, None)
        sys.modules.update(saved)
    cell = {"cells_per_s_median": 2e9, "cells_per_s_min": 1e9, "cells_per_s_max": 3e9,
            "x_roofline": 0.5}  # fmt: skip
    res = {
        "mode": "tiny",
        "machine": {"cpu_model": "X", "cores": 2, "memory_bytes": 2**30, "l3_cache": "1K",
                    "jax": "0", "numpy": "0", "pgas": "0", "date": "d",
                    "load_average": [1.0, 1.0, 1.0]},
        "throughput": {"heat1d_f32": [dict(cell, backend="auto", cells=64),
                                      dict(cell, backend="naive", cells=64),
                                      {"backend": "mpi", "cells": 64}]},
        "roofline": {"heat1d_f32": [{"cells": 64, "copy_GB_per_s": 16.0, "triad_GB_per_s": 8.0,
                                     "ceiling_cells_per_s": 4e9}]},
        "scaling": {"strong": [], "weak": []},
        "ratios": {"heat1d_f32: auto / naive (1 worker)": 1.0,
                   "weak efficiency 1->2, auto": 0.75},
    }  # fmt: skip
    readme = tmp_path / "README.md"
    readme.write_text("before\n<!-- results:start -->\nold\n<!-- results:end -->\nafter\n")
    run.write_readme(res, str(readme))
    text = readme.read_text()
    assert "old" not in text and text.startswith("before\n") and text.endswith("\nafter\n")
    assert "| cells | copy GB/s | triad GB/s | ceiling G cell/s | auto | mpi | naive |" in text
    assert "| heat1d_f32 | 64 | 16.0 | 8.0 | 4.00 | 2.000 [1.000-3.000] 0.50x | error | " in text
    assert "| heat1d_f32 |  | 1.00 |" in text  # auto / mpi: none (mpi failed), auto / naive: 1.00
    assert "Weak efficiency 1->2: auto 0.75." in text
