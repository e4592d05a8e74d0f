"""PNG plots from results.json."""

from __future__ import annotations

import os

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def throughput_plots(res: dict, outdir: str) -> list[str]:
    files = []
    for stencil, rows in res["throughput"].items():
        fig, ax = plt.subplots(figsize=(7, 4.5))
        by = {}
        for r in rows:
            if "cells_per_s_median" in r:
                by.setdefault(r["backend"], []).append(r)
        for b, rr in sorted(by.items()):
            rr.sort(key=lambda r: r["cells"])
            x = [r["cells"] for r in rr]
            ax.errorbar(
                x,
                [r["cells_per_s_median"] / 1e9 for r in rr],
                yerr=[
                    [(r["cells_per_s_median"] - r["cells_per_s_min"]) / 1e9 for r in rr],
                    [(r["cells_per_s_max"] - r["cells_per_s_median"]) / 1e9 for r in rr],
                ],
                marker="o",
                label=b,
                capsize=2,
            )
        roof = res["roofline"].get(stencil, [])
        if roof:
            roof = sorted(roof, key=lambda r: r["cells"])
            ax.plot(
                [r["cells"] for r in roof],
                [r["ceiling_cells_per_s"] / 1e9 for r in roof],
                "k--",
                label="roofline (STREAM copy, 1 thread)",
            )
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("cells")
        ax.set_ylabel("G cell updates / s")
        ax.set_title(f"{stencil}: throughput vs size (1 device / 1 process)")
        ax.legend(fontsize=8)
        ax.grid(True, which="both", alpha=0.3)
        f = os.path.join(outdir, f"throughput_{stencil}.png")
        fig.tight_layout()
        fig.savefig(f, dpi=90)
        plt.close(fig)
        files.append(f)
    return files


def backend_bars(res: dict, outdir: str) -> str:
    rows = res["comparison"]
    fig, ax = plt.subplots(figsize=(8, 4.5))
    labels = [f"{r['stencil']}\n{r['backend']}@{r['workers']}" for r in rows]
    vals = [r.get("x_roofline") or 0 for r in rows]
    names = sorted({r["backend"] for r in rows})
    colors = [f"C{names.index(r['backend']) % 10}" for r in rows]
    ax.bar(range(len(rows)), vals, color=colors)
    ax.axhline(1.0, color="k", ls="--", lw=1)
    ax.set_xticks(range(len(rows)))
    ax.set_xticklabels(labels, rotation=90, fontsize=7)
    ax.set_ylabel("x roofline (per worker)")
    ax.set_title("backends at the largest size")
    fig.tight_layout()
    f = os.path.join(outdir, "backends.png")
    fig.savefig(f, dpi=90)
    plt.close(fig)
    return f


def scaling_plots(res: dict, outdir: str) -> list[str]:
    files = []
    for kind in ("strong", "weak"):
        rows = res["scaling"].get(kind, [])
        fig, ax = plt.subplots(figsize=(6, 4))
        by = {}
        for r in rows:
            if r.get("efficiency") is not None:
                by.setdefault(r["backend"], []).append(r)
        for b, rr in sorted(by.items()):
            rr.sort(key=lambda r: r["workers"])
            ax.plot([r["workers"] for r in rr], [r["efficiency"] for r in rr], marker="o", label=b)
        ax.axhline(1.0, color="k", ls="--", lw=1)
        ax.set_xscale("log", base=2)
        ax.set_xlabel("devices / processes")
        ax.set_ylabel("parallel efficiency")
        ax.set_title(f"{kind} scaling, heat1d float32 (2 physical cores)")
        ax.legend(fontsize=8)
        f = os.path.join(outdir, f"scaling_{kind}.png")
        fig.tight_layout()
        fig.savefig(f, dpi=90)
        plt.close(fig)
        files.append(f)
    return files


def deep_halo_plot(sweep: dict, outdir: str) -> str:
    """Time per physical step against k (steps per exchange), one panel per configuration."""
    runs = [r for r in sweep["runs"] if "results" in r and len({x["k"] for x in r["results"]}) > 1]
    fig, axes = plt.subplots(1, max(len(runs), 1), figsize=(3.6 * max(len(runs), 1), 3.6),
                             squeeze=False)  # fmt: skip
    for ax, r in zip(axes[0], runs):
        for backend, marker in (("auto", "o"), ("explicit", "s")):
            rows = sorted((x for x in r["results"] if x["backend"] == backend
                           and x["requested"] != "auto"), key=lambda x: x["k"])  # fmt: skip
            ax.plot([x["k"] for x in rows],
                    [1e6 * x["seconds_median"] / r["steps"] for x in rows],
                    marker=marker, label=backend)  # fmt: skip
            auto = [x for x in r["results"] if x["backend"] == backend and x["requested"] == "auto"]
            if auto:
                ax.plot(
                    [auto[0]["k"]],
                    [1e6 * auto[0]["seconds_median"] / r["steps"]],
                    "k*",
                    markersize=12,
                    label=f"{backend}: auto" if backend == "auto" else None,
                )
        copy = 1e6 * r["cells"] / r["copy_cells_per_s"]
        ax.axhline(copy, color="grey", ls="--", label="same-size copy")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("k (steps per exchange)")
        ax.set_title(f"{r['stencil']} {r['size']}, {r['devices']} dev", fontsize=9)
    axes[0][0].set_ylabel("us per physical step")
    axes[0][0].legend(fontsize=7)
    fig.tight_layout()
    path = os.path.join(outdir, "deep_halo.png")
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
