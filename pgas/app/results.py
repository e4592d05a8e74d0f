"""Results: one record per run of a problem, on any backend, and how it is shown.

A :class:`Result` is what :func:`pgas.runner.run` returns and what
:func:`pgas.compare.compare` collects: where the run went (backend, platform,
device kind, devices, processes, mesh), how long the time loop took, the halo
messages and bytes per *physical* step (floats: with ``k`` steps per exchange a
step sends ``1/k`` of an exchange), the chosen ``k`` and why it was lowered,
the checksum of the final field, the snapshot store the run streamed to and,
on rank 0, the final field.

:func:`format_table` prints a comparison, :func:`summary_line` an example's first
summary line, and :func:`report` finishes an example's store (the run's results
into its attributes), draws its pictures from the store and prints the summary
and the JSON line (rank 0 only).
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from pgas.app.backends import BACKENDS

__all__ = ["Result", "format_table", "summary_line", "report", "versions"]

# what a run's Dataset records about it, besides the example's own attributes
_ATTRS = (
    "backend", "mesh", "devices", "processes", "steps", "seconds", "compute_seconds",
    "output_wait_seconds", "checksum", "platform", "device_kind", "steps_per_exchange",
    "steps_per_exchange_note",
)  # fmt: skip


@dataclasses.dataclass(frozen=True)
class Result:
    """One run of a problem on one backend.

    Attributes:
        backend: ``auto``, ``explicit`` or ``mpi``.
        devices: devices (JAX) or ranks (mpi).
        processes: processes in the run.
        mesh: devices per mesh axis.
        shape: global shape of the field.
        steps: the last step (the run did ``steps - start_step`` of them).
        seconds: wall time of the time loop as the user waited for it, output waits
            included (no compilation, no gather); ``cell_updates_per_second``
            is computed from it.
        checksum: of the final field (decoded), from every process's blocks, see
            :func:`pgas.io.checksum.checksum`.
        messages_per_step: halo messages per physical step, all senders together.
        bytes_per_step: halo bytes per physical step, all senders together.
        ideal_bytes_per_step: the stencil's halo bytes per device and step (0: unknown).
        steps_per_exchange: ``k``, physical steps per halo exchange, as run.
        steps_per_exchange_note: why ``k`` is lower than asked, else ``""``.
        platform: ``cpu`` or ``gpu``.
        device_kind: the device model.
        comm: the communication report as a dict (JAX) or the MPI counts.
        start_step: the step the run started from (> 0 after a restart).
        rank: this process's rank (only rank 0 holds ``field``).
        store: the snapshot store the run wrote (closed), or None.
        field: the final field, only when the run was asked to gather it
            (:func:`pgas.app.runner.run`'s ``gather``).
        diagnostics: the output's diagnostics of the final field, computed from
            every process's blocks (the same on every process).
        compute_seconds: the part of ``seconds`` not spent handing snapshots to the
            writer or waiting for it (``seconds`` where the run wrote nothing).
        output_wait_seconds: the part of ``seconds`` spent waiting for output
            (host copies, diagnostics, a writer still busy with the last snapshot).
        converged: for an iterative problem (:attr:`Problem.iterative`), whether
            its test held (``steps`` is then the steps taken); ``None`` otherwise.
        check_every: for an iterative problem, the steps between tests.

    >>> r = Result("auto", 1, 1, {"x": 1}, (8,), 10, 0.5, "ab")
    >>> r.cell_updates_per_second
    160.0
    """

    backend: str
    devices: int
    processes: int
    mesh: dict
    shape: tuple[int, ...]
    steps: int
    seconds: float
    checksum: str
    messages_per_step: float = 0.0
    bytes_per_step: float = 0.0
    ideal_bytes_per_step: int = 0
    steps_per_exchange: int = 1
    steps_per_exchange_note: str = ""
    platform: str = "cpu"
    device_kind: str = "cpu"
    comm: dict | None = None
    start_step: int = 0
    rank: int = 0
    store: str | None = dataclasses.field(default=None, compare=False)
    field: np.ndarray | None = dataclasses.field(default=None, repr=False, compare=False)
    diagnostics: dict = dataclasses.field(default_factory=dict, repr=False, compare=False)
    compute_seconds: float | None = None
    output_wait_seconds: float = 0.0
    converged: bool | None = None
    check_every: int | None = None

    def __post_init__(self) -> None:
        if self.compute_seconds is None:
            object.__setattr__(self, "compute_seconds", self.seconds - self.output_wait_seconds)

    @property
    def cell_updates_per_second(self) -> float:
        done = self.steps - self.start_step
        return math.prod(self.shape) * done / self.seconds if self.seconds > 0 else float("nan")

    def to_dict(self) -> dict:
        """The JSON-able fields (no arrays), plus ``cell_updates_per_second``."""
        d = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)
             if f.name not in ("field", "store", "rank", "diagnostics")}  # fmt: skip
        d["shape"] = list(self.shape)
        d["cell_updates_per_second"] = self.cell_updates_per_second
        return d

    @classmethod
    def from_dict(cls, d: dict, field: np.ndarray | None = None) -> Result:
        """The inverse of :meth:`to_dict` (e.g. a worker's JSON line).

        >>> r = Result("mpi", 2, 2, {"x": 2}, (8,), 1, 1.0, "ab")
        >>> Result.from_dict(r.to_dict()) == r
        True
        """
        known = {f.name for f in dataclasses.fields(cls)}
        kw = {k: v for k, v in d.items() if k in known}
        kw["shape"] = tuple(kw["shape"])
        return cls(**kw, field=field)


def _per_step(x: float) -> str:
    return str(float(x)) if float(x) == int(x) or abs(x) >= 0.01 else f"{x:.2e}"


def format_table(results: Sequence[Result]) -> str:
    """The comparison as a text table; ``equal`` compares checksums with the first row.

    Messages and bytes are per physical step (``k`` steps share one exchange).

    >>> r = Result("auto", 2, 1, {"x": 2}, (8,), 10, 0.5, "abcdef0123456789", 0.5, 2.0, 8, 8)
    >>> row = format_table([r]).splitlines()[1].split()
    >>> row[-1], row[3], row[6], row[7]
    ('yes', '8', '0.5', '2.0')
    """
    head = (f"{'backend':<9} {'platform':<8} {'devices/ranks':>13} {'k':>3} {'ms/step':>8} "
            f"{'Mcell/s':>8} {'msgs/step':>10} {'bytes/step':>11} {'ideal/dev':>10} "
            f"{'checksum':<17} equal")  # fmt: skip
    iterative = any(r.converged is not None for r in results)
    if iterative:  # the steps each backend took to converge ("!": it did not)
        head = head.replace(f"{'checksum':<17}", f"{'steps':>8} {'checksum':<17}")
    lines = [head]
    ref = results[0].checksum if results else None
    for r in results:
        who = r.processes if _ranks(r.backend) else r.devices
        taken = f"{r.steps - r.start_step}{'' if r.converged else '!'}"
        taken = f"{taken:>8} " if iterative else ""
        lines.append(
            f"{r.backend:<9} {r.platform:<8} {who:>13} {r.steps_per_exchange:>3} "
            f"{1e3 * r.seconds / max(r.steps - r.start_step, 1):>8.3f} "
            f"{r.cell_updates_per_second / 1e6:>8.1f} {_per_step(r.messages_per_step):>10} "
            f"{_per_step(r.bytes_per_step):>11} {r.ideal_bytes_per_step or '-':>10} "
            f"{taken}{r.checksum[:16]:<17} {'yes' if r.checksum == ref else 'NO'}"
        )
    kinds = sorted({f"{r.platform}: {r.device_kind}" for r in results})
    notes = sorted({f"{r.backend}: {r.steps_per_exchange_note}" for r in results
                    if r.steps_per_exchange_note})  # fmt: skip
    every = sorted({r.check_every for r in results if r.check_every})
    tests = [f"  steps: until the test held, tested every {', '.join(map(str, every))} steps "
             f"(!: it had not held after --steps)"] if iterative else []  # fmt: skip
    return "\n".join([*lines, *(f"  devices {k}" for k in kinds), *(f"  k {n}" for n in notes),
                      *tests])  # fmt: skip


def _ranks(backend: str) -> bool:
    """Whether a backend's runs count MPI ranks (not devices); a backend of the user's does not."""
    return backend in BACKENDS and BACKENDS[backend].launched


def summary_line(result: dict) -> str:
    """The first summary line of a run (from :func:`report`'s dict).

    >>> d = Result("auto", 2, 1, {"x": 2}, (8,), 10, 0.5, "ab" * 8).to_dict()
    >>> summary_line(dict(d, example="demo", dtype="float32"))[:40]
    'demo (8,) float32: 10 steps on auto (2 c'
    """
    where = (f"{result['processes']} MPI rank(s)" if _ranks(result["backend"])
             else f"{result['devices']} {result['platform']} device(s) "
                  f"[{result['device_kind']}]")  # fmt: skip
    return (
        f"{result['example']} {tuple(result['shape'])} {result['dtype']}: {result['steps']} steps "
        f"on {result['backend']} ({where}, mesh {result['mesh']}, k = "
        f"{result['steps_per_exchange']}) in {result['seconds']:.3f} s{_split(result)}, "
        f"{result['cell_updates_per_second'] / 1e6:.1f} Mcell/s; checksum "
        f"{result['checksum'][:16]}"
    ) + (f"\n  k {result['steps_per_exchange_note']}" if result["steps_per_exchange_note"] else "")


def _split(result: dict) -> str:
    """`` (compute 0.3 s, waiting for output 16.3 s)`` where the run waited for output."""
    wait = result.get("output_wait_seconds") or 0.0
    if wait <= 0:
        return ""
    return f" (compute {result['compute_seconds']:.3f} s, waiting for output {wait:.3f} s)"


def versions() -> dict:
    """pgas's and JAX's versions, for dataset attributes.

    >>> sorted(versions())
    ['jax_version', 'pgas_version']
    """
    import jax

    from pgas._version import __version__

    return {"pgas_version": __version__, "jax_version": jax.__version__}


def report(
    run: Result,
    opts,
    *,
    name: str,
    output,
    plot: Callable[[str, str, dict], Any],
    summary: Callable[[dict], str],
) -> dict | None:
    """Finish the store and draw the plots, print the summary and the JSON line (rank 0 only).

    The snapshots are already in ``run.store`` (streamed during the run, see
    :mod:`pgas.output`); process 0 adds the run's results (seconds, checksum)
    to its attributes, then draws each picture from the store (bounded memory).

    Args:
        run: the run's result.
        opts: its :class:`pgas.options.RunOptions`.
        name: the example's name.
        output: its :class:`pgas.output.Output`; its diagnostics of the final
            field also go into the JSON line.
        plot: ``plot(store, path, result)`` writes one picture from the store.
        summary: the summary text of the result dict.
    """
    if run.rank != 0:
        return None
    final = run.diagnostics
    result = {"example": name, **run.to_dict(), "dtype": opts.dtype,
              **{k: np.asarray(v).item() for k, v in final.items()}}  # fmt: skip
    if opts.checkpointing:
        result["checkpoint"] = opts.checkpoint
    result["written"] = written = _write(run, opts, result, plot)
    if not opts.quiet:
        print(summary(result))
        for path in written:
            print(f"  wrote {path}")
    if opts.json:
        print(json.dumps(result), flush=True)
    return result


def _write(run: Result, opts, result: dict, plot: Callable) -> list[str]:
    """Process 0, the store closed: the run's results into its attributes, then the plots."""
    if run.store is None:
        return []
    import shutil

    from pgas.io.output import update_attrs

    update_attrs(run.store, {k: result[k] for k in _ATTRS} | {"start_step": run.start_step})
    written = [run.store] if opts.out else []
    for path in opts.plot:
        written.append(str(plot(run.store, path, result)))
    if not opts.out:  # only drawn from: the scratch store goes
        shutil.rmtree(run.store, ignore_errors=True)
    return written
