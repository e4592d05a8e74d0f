"""Driver: run a :class:`~pgas.problem.Problem` from the command line, on any backend.

The examples (``examples/heat1d/heat1d.py``, ``examples/life/life.py``) keep the
science (physics, numerics, initial conditions) and hand this module a
:class:`pgas.problem.Problem`; the driver parses the shared options, runs it on
the chosen backend and writes the results:

- ``auto``: the global-view ``step`` under :func:`pgas.run`, on a mesh of
  ``--devices`` JAX devices (compiled chunks; snapshots come out of one
  ``lax.scan`` per chunk),
- ``explicit``: the local ``kernel`` with ``ppermute`` halos
  (:func:`pgas.explicit.run`), one compiled program per chunk,
- ``mpi``: the same kernel on NumPy blocks with mpi4py halos
  (:func:`pgas.mpi.run`), launched by the user with ``mpiexec -n P``.

Timings exclude compilation (a warm-up run compiles the same program first),
snapshot gathers and the progress bar. Every user error ends the program with
exit code 2 and a message that says what to change.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

import pgas
from pgas.errors import PgasError
from pgas.problem import Problem, checksum

BACKENDS = ("auto", "explicit", "mpi")


# ---- command line ------------------------------------------------------------------------
def _whole_number(text: str, least: int) -> int:
    try:
        value = int(text.replace("_", ""))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < least:
        bound = "positive (>= 1)" if least == 1 else f">= {least}"
        raise argparse.ArgumentTypeError(f"{text!r} must be {bound}")
    return value


def positive_int(text: str) -> int:
    """argparse type: a whole number >= 1 (underscores allowed: 1_000_003)."""
    return _whole_number(text, 1)


def non_negative_int(text: str) -> int:
    """argparse type: a whole number >= 0."""
    return _whole_number(text, 0)


def make_parser(
    doc: str, *, steps: int, dtypes: Sequence[str], plots: str
) -> argparse.ArgumentParser:
    """The options both examples share; the example adds its own afterwards."""
    lines = doc.strip().splitlines()
    ap = argparse.ArgumentParser(
        description=lines[0], epilog="\n".join(lines[1:]).strip(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )  # fmt: skip
    g = ap.add_argument_group("run")
    g.add_argument(
        "--backend",
        choices=BACKENDS,
        default="auto",
        help="auto: global view (pgas.run); explicit: local kernel + ppermute; "
        "mpi: NumPy + mpi4py, start with `mpiexec -n P` (default auto)",
    )
    g.add_argument(
        "--devices",
        type=positive_int,
        help="JAX devices (virtual CPU devices on a CPU); default: all local. In a "
        "multi-process run: devices PER PROCESS (the mesh spans all processes' devices)",
    )
    g.add_argument(
        "--distributed",
        action="store_true",
        help="multi-process JAX run: call pgas.distributed.initialize() before JAX starts "
        "(automatic when started by mpiexec or srun with --backend auto/explicit)",
    )
    g.add_argument(
        "--verbose",
        action="store_true",
        help="print the process/device layout (process 0) and each checkpoint written",
    )
    g.add_argument(
        "--steps", type=non_negative_int, default=steps, help=f"time steps (default {steps})"
    )
    g.add_argument(
        "--dtype",
        choices=tuple(dtypes),
        default=dtypes[0],
        help=f"field dtype (default {dtypes[0]})",
    )
    g.add_argument("--seed", type=int, default=0, help="seed of random initial conditions")
    g.add_argument(
        "--compare",
        action="store_true",
        help="also run the problem on auto, explicit and mpi (mpiexec) and print "
        "the comparison table (pgas.compare)",
    )
    o = ap.add_argument_group("output")
    o.add_argument(
        "--out",
        metavar="FILE",
        help="write snapshots + diagnostics as an xarray Dataset (.nc or .zarr)",
    )
    o.add_argument(
        "--snapshot-every",
        type=positive_int,
        metavar="K",
        help="snapshot every K steps (must divide --steps; default: about 50-100 "
        "snapshots when --out or --plot is given)",
    )
    o.add_argument("--plot", action="append", default=[], metavar="FILE", help=plots)
    o.add_argument(
        "--json",
        action="store_true",
        help="print one JSON object with the results as the last stdout line",
    )
    o.add_argument("--quiet", action="store_true", help="no progress bar, no summary")
    c = ap.add_argument_group("checkpoint/restart (--backend auto and explicit)")
    c.add_argument(
        "--checkpoint",
        metavar="DIR",
        help="checkpoint directory (default: next to --out, FILE.nc -> FILE.ckpt; "
        "without --out: out/<example>.ckpt)",
    )
    c.add_argument(
        "--checkpoint-every",
        type=positive_int,
        metavar="K",
        help="write a checkpoint every K steps (between compiled chunks of K steps) and "
        "after the last step",
    )
    c.add_argument(
        "--restart",
        action="store_true",
        help="continue from the checkpoint in --checkpoint DIR; starts from step 0 when "
        "there is none yet (so a requeued job script can always pass it)",
    )
    return ap


# ---- set-up (before JAX starts) ---------------------------------------------------------
def prepare(ap: argparse.ArgumentParser, args: argparse.Namespace, script: str,
            plot_suffixes: Sequence[str], snapshots: int) -> None:  # fmt: skip
    """Check the output options, start MPI or the JAX devices; errors exit with code 2.

    Sets ``args.snapshot_every`` (``None`` = no snapshots) and ``args.rank``.
    """
    from pgas.io import OutputPathError, check_writable

    if args.compare and args.backend == "mpi":
        ap.error("--compare runs all three backends itself (it starts mpiexec); run it "
                 "without mpiexec and without --backend mpi")  # fmt: skip
    for path in args.plot:
        if Path(path).suffix.lower() not in plot_suffixes:
            ap.error(f"--plot {path!r}: give a file ending in {' or '.join(plot_suffixes)}")
        if not Path(os.path.abspath(path)).parent.is_dir():
            ap.error(f"--plot {path!r}: directory {os.path.dirname(os.path.abspath(path))!r} "
                     f"does not exist; create it first (mkdir -p)")  # fmt: skip
    if args.out:
        try:
            check_writable(args.out)
        except OutputPathError as err:
            ap.error(f"--out: {err}")
    every, k = args.snapshot_every, args.checkpoint_every
    if every is not None and args.steps % every:
        ap.error(f"--snapshot-every {every} does not divide --steps {args.steps}; use e.g. "
                 f"--steps {(args.steps // every + 1) * every}")  # fmt: skip
    if every is not None and k is not None and k % every:
        ap.error(f"--checkpoint-every {k} must be a multiple of --snapshot-every {every} "
                 f"(checkpoints are written between snapshot chunks); use e.g. "
                 f"--checkpoint-every {(k // every + 1) * every}")  # fmt: skip
    if every is None and (args.out or args.plot):
        # with checkpoints: a divisor of both --steps and K
        every = _default_every(math.gcd(args.steps, k) if k else args.steps, snapshots,
                               args.steps)  # fmt: skip
    args.snapshot_every = every if (args.out or args.plot or every) and args.steps else None
    args.checkpointing = bool(args.checkpoint_every or args.restart)
    if args.checkpointing and args.backend == "mpi":
        ap.error("--checkpoint-every/--restart work on --backend auto and explicit only (the mpi "
                 "backend runs NumPy blocks and cannot checkpoint); run with --backend auto "
                 "--distributed under mpiexec or srun instead")  # fmt: skip
    if args.checkpoint is None:
        name = Path(script).stem
        args.checkpoint = (str(Path(args.out).with_suffix(".ckpt")) if args.out
                           else os.path.join("out", f"{name}.ckpt"))  # fmt: skip
    args.rank = 0
    if args.backend == "mpi":
        from pgas import mpi

        if not mpi.launched():
            ap.error(f"--backend mpi runs under an MPI launcher: start it with "
                     f"`mpiexec -n 4 {sys.executable} {script} --backend mpi ...` "
                     f"(or use --backend auto/explicit with --devices N)")  # fmt: skip
        args.rank = mpi.MPI.COMM_WORLD.rank
        return
    _start_jax(ap, args)


def _default_every(base: int, target: int, steps: int | None = None) -> int:
    """The smallest divisor of ``base`` giving at most ``target`` snapshots of ``steps``."""
    steps = base if steps is None else steps
    if base == 0:
        return 1
    for k in range(max(1, steps // target), base + 1):
        if base % k == 0 and steps // k <= target:
            return k
    return base


def _start_jax(ap: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    import jax
    from jax._src import xla_bridge

    from pgas import distributed

    devices, dtype = args.devices, args.dtype
    launched = distributed.detect_launcher() != "none"
    if args.distributed or launched:
        if args.compare:
            ap.error("--compare starts its own processes; run it in one process, not under "
                     "mpiexec/srun and without --distributed")  # fmt: skip
        try:
            info = distributed.initialize(local_device_count=devices, verbose=args.verbose)
        except PgasError as err:
            print(f"{ap.prog}: error: {type(err).__name__}: {err}", file=sys.stderr, flush=True)
            sys.exit(2)
        args.rank, args.multiprocess = info.process_id, info.process_count > 1
        if np.dtype(dtype).itemsize == 8:
            jax.config.update("jax_enable_x64", True)
        return
    args.multiprocess = False
    if devices is not None:
        if xla_bridge.backends_are_initialized():  # e.g. called in-process from a test
            if devices > len(jax.devices()):
                ap.error(f"--devices {devices}: JAX has only {len(jax.devices())} devices")
        else:
            pgas.use_cpu_devices(devices)
    if np.dtype(dtype).itemsize == 8:
        jax.config.update("jax_enable_x64", True)
    if args.verbose:
        distributed.describe()


# ---- running ----------------------------------------------------------------------------
@dataclasses.dataclass
class Outcome:
    """One run of a problem: what the examples print and write (fields on rank 0 only)."""

    backend: str
    devices: int
    processes: int
    mesh: dict
    shape: tuple[int, ...]
    steps: int
    seconds: float
    field: np.ndarray | None
    snapshots: np.ndarray | None
    times: np.ndarray | None
    comm: dict | None
    rank: int = 0
    start: int = 0  # the step this run started from (> 0 after --restart)

    @property
    def cell_updates_per_second(self) -> float:
        cells = math.prod(self.shape)
        done = self.steps - self.start
        return cells * done / self.seconds if self.seconds > 0 else float("nan")


class _Progress:
    """A tqdm bar on rank 0 of an interactive run, advanced between compiled chunks."""

    def __init__(self, steps: int, quiet: bool, rank: int, name: str):
        self.bar = None
        if not quiet and rank == 0 and sys.stdout.isatty() and steps:
            from tqdm import tqdm

            self.bar = tqdm(total=steps, unit="step", desc=name, leave=False)
        self.done = 0

    @property
    def on(self) -> bool:
        return self.bar is not None

    def __call__(self, done: int, state=None) -> None:
        if self.bar is not None:
            if state is not None and not isinstance(state, np.ndarray):
                import jax

                jax.block_until_ready(state)  # JAX dispatches asynchronously: wait for the chunk
            self.bar.update(done - self.done)
        self.done = done

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def _chunk(steps: int, every: int | None, progress: bool) -> int | None:
    """Steps per compiled chunk: about 1/20 of the run with a bar, a multiple of ``every``."""
    if every is None:
        return max(1, steps // 20) if progress else None
    shots = steps // every
    want = max(1, shots // (20 if progress else 4))
    parts = max(d for d in range(1, want + 1) if shots % d == 0)
    return every * parts


def simulate(problem: Problem, args: argparse.Namespace, meta: dict | None = None) -> Outcome:
    """Run ``problem`` for ``args.steps`` steps on ``args.backend``; see the module docstring.

    ``meta`` identifies the problem in checkpoints (``--checkpoint-every``, ``--restart``).
    """
    progress = _Progress(args.steps, args.quiet, args.rank, problem.name)
    try:
        if args.backend == "mpi":
            return _simulate_mpi(problem, args, progress)
        return _simulate_jax(problem, args, progress, meta or {"example": problem.name})
    finally:
        progress.close()


class _Checkpointer:
    """Saves the state through pgas.checkpoint every ``--checkpoint-every`` steps (all processes).

    Test hook: env ``PGAS_EXAMPLES_SLEEP_AFTER_CHECKPOINT=M`` makes the run print
    ``SLEEPING after checkpoint M`` and sleep after writing its M-th checkpoint
    (tests kill it there, deterministically).
    """

    def __init__(self, args, meta: dict):
        self.path, self.every, self.meta = args.checkpoint, args.checkpoint_every, meta
        self.rank, self.verbose, self.saved = args.rank, args.verbose, 0
        self.sleep_after = int(os.environ.get("PGAS_EXAMPLES_SLEEP_AFTER_CHECKPOINT") or 0)

    def restore(self, like):
        """``(state, step)`` from the checkpoint, or ``(like, 0)`` if there is none yet."""
        from pgas import checkpoint

        root = Path(self.path)
        if not (root / "LATEST").exists() and not any(root.glob("step-*")):
            # nothing committed yet (or only an interrupted first save): a fresh start
            self._say(f"restart: no checkpoint in {self.path} yet, starting from step 0",
                      always=True)  # fmt: skip
            return like, 0
        try:
            state, step = checkpoint.load(root, like, meta=self.meta)
        except checkpoint.CheckpointError as err:
            raise PgasError(
                f"--restart refused: {err}. Restart with the options of the run that wrote the "
                f"checkpoint, or give another --checkpoint DIR (or drop --restart to start over)"
            ) from None
        self._say(f"restart: from step {step} (checkpoint {self.path})", always=True)
        return state, step

    def save(self, state, step: int) -> None:
        import jax

        from pgas import checkpoint

        jax.block_until_ready(state.data)
        checkpoint.save(self.path, state, step=step, meta=self.meta)
        self.saved += 1
        self._say(f"checkpoint: step {step} written to {self.path}")
        if self.sleep_after and self.saved == self.sleep_after:
            self._say(f"SLEEPING after checkpoint {self.saved} (step {step})", always=True)
            time.sleep(3600)

    def _say(self, text: str, always: bool = False) -> None:
        if self.rank == 0 and (always or self.verbose):
            print(text, file=sys.stderr, flush=True)


def _simulate_jax(problem: Problem, args, progress: _Progress, meta: dict) -> Outcome:
    import jax

    from pgas import explicit
    from pgas.compare import _build

    # multi-process: --devices is per process (pgas.distributed.initialize made them), the
    # mesh spans the devices of all processes
    mesh = pgas.make_mesh(problem.mesh_axes,
                          devices=None if args.multiprocess else args.devices)  # fmt: skip
    build = lambda: _build(problem, mesh)  # noqa: E731 - each run donates its buffers
    steps, every, k = args.steps, args.snapshot_every, args.checkpoint_every
    ckpt = _Checkpointer(args, meta) if args.checkpointing else None
    u, start = build(), 0
    if ckpt is not None and args.restart:
        u, start = ckpt.restore(u)
        if start > steps:
            raise PgasError(
                f"the checkpoint in {args.checkpoint} is at step {start}, beyond --steps "
                f"{steps}; give --steps >= {start} or another --checkpoint"
            )
        if every and (steps - start) % every:
            raise PgasError(
                f"restarting at step {start}: --snapshot-every {every} does not divide the "
                f"{steps - start} remaining steps; choose a divisor of them"
            )
    left = steps - start
    chunk = k if k else _chunk(left, every, progress.on)
    progress.done = start
    if progress.bar is not None:
        progress.bar.update(start)
    first = u.to_numpy() if every else None  # gathered (every process)

    def between(done: int, state) -> None:  # after each compiled chunk of this run
        if k and ((done % k == 0) or done == left):
            ckpt.save(state, start + done)
        progress(start + done, state)

    if args.backend == "auto":
        comm = pgas.comm_report(problem.step, build()).to_dict()
        # warm-up: compile the very program the run uses (same chunk length)
        if left:
            pgas.run(problem.step, build(), min(chunk or 1, left), snapshot_every=every,
                     chunk=chunk)  # fmt: skip
        start_time = time.perf_counter()
        out = pgas.run(problem.step, u, left, snapshot_every=every, chunk=chunk,
                       callback=between if (k or progress.on) else None)  # fmt: skip
        u, snaps = out if every else (out, None)
        jax.block_until_ready(u.data)
        seconds = time.perf_counter() - start_time
        snapshots = None
        if every:
            rest = [snaps.to_numpy()] if snaps is not None else []
            snapshots = np.concatenate([first[None], *rest])
    else:
        kernel, halo, region = problem.kernel, problem.halo, problem.region
        comm = pgas.comm_report(lambda v: explicit.step(kernel, v, halo, region), build()).to_dict()
        jax.block_until_ready(explicit.run(kernel, build(), 1, halo, region).data)  # compile
        seconds, done, shots = 0.0, 0, [first] if every else []
        piece = every or k or chunk or left
        while done < left:
            n = min(piece, left - done)
            t0 = time.perf_counter()
            u = explicit.run(kernel, u, n, halo, region)
            jax.block_until_ready(u.data)
            seconds += time.perf_counter() - t0
            done += n
            if every:
                shots.append(u.to_numpy())
            between(done, u)
        snapshots = np.stack(shots) if every else None
    field = u.to_numpy()  # gathered on every process; only process 0 reports
    times = np.arange(start, steps + 1, every) if every else None
    return Outcome(args.backend, mesh.size, jax.process_count(), dict(mesh.shape), problem.shape,
                   steps, seconds, field, snapshots, times, comm, rank=jax.process_index(),
                   start=start)  # fmt: skip


def _simulate_mpi(problem: Problem, args, progress: _Progress) -> Outcome:
    from pgas import mpi

    every = args.snapshot_every
    chunk = _chunk(args.steps, every, progress.on)
    r = mpi.run(problem.kernel, problem.init, problem.shape, problem.dtype, args.steps,
                problem.halo, problem.boundary, problem.region, snapshot_every=every,
                chunk=chunk, callback=progress if progress.on else None)  # fmt: skip
    size = mpi.MPI.COMM_WORLD.size
    comm = {"messages_per_step": r.messages_per_step, "bytes_per_step": r.bytes_per_step,
            "rank_bytes_per_step": list(r.rank_bytes_per_step), "grid": r.grid}  # fmt: skip
    times = np.asarray(r.snapshot_steps) if every else None
    return Outcome("mpi", size, size, dict(zip(problem.mesh_axes, r.dims, strict=True)),
                   problem.shape, args.steps, r.seconds, r.field, r.snapshots, times, comm,
                   rank=mpi.MPI.COMM_WORLD.rank)  # fmt: skip


def run_or_exit(ap: argparse.ArgumentParser, fn: Callable[[], Any]) -> Any:
    """``fn()``, with pgas's own errors (bad sizes, device counts) turned into exit code 2."""
    try:
        return fn()
    except (PgasError, ValueError) as err:
        ap.error(str(err))


# ---- output -----------------------------------------------------------------------------
def versions() -> dict:
    import jax

    return {"pgas_version": pgas.__version__, "jax_version": jax.__version__}


def report(
    run: Outcome,
    args: argparse.Namespace,
    *,
    name: str,
    var: str,
    dims: Sequence[str],
    diagnostics: Callable[[np.ndarray], dict[str, np.ndarray]],
    attrs: dict,
    plot: Callable[[Any, str], Any],
    summary: Callable[[dict], str],
) -> dict | None:
    """Write the Dataset and plots, print the summary and the JSON line (rank 0 only).

    ``diagnostics(fields)`` maps snapshots ``(n, *shape)`` to per-snapshot
    global values; the last values also go into the JSON line.
    """
    if run.rank != 0:
        return None
    final = {k: v[-1].item() for k, v in diagnostics(run.field[None]).items()}
    result = {
        "example": name, "backend": run.backend, "devices": run.devices,
        "processes": run.processes, "mesh": run.mesh, "shape": list(run.shape),
        "steps": run.steps, "dtype": args.dtype, "seconds": run.seconds,
        "cell_updates_per_second": run.cell_updates_per_second,
        "checksum": checksum(run.field), **final, "comm": run.comm,
        "start_step": run.start,
    }  # fmt: skip
    if getattr(args, "checkpointing", False):
        result["checkpoint"] = args.checkpoint
    written = []
    if run.snapshots is not None and (args.out or args.plot):
        from pgas.io import to_dataset, write_dataset

        ds = to_dataset(
            run.snapshots, run.times, name=var, dims=dims,
            diagnostics=diagnostics(run.snapshots),
            attrs={"title": f"pgas example {name}", "backend": run.backend, "mesh": run.mesh,
                   "devices": run.devices, "processes": run.processes, "steps": run.steps,
                   "dtype": args.dtype, "snapshot_every": args.snapshot_every,
                   "seconds": run.seconds, "checksum": result["checksum"],
                   "start_step": run.start, **attrs,
                   **versions()},
        )  # fmt: skip
        if args.out:
            written.append(str(write_dataset(ds, args.out)))
        for path in args.plot:
            written.append(str(plot(ds, path)))
    result["written"] = written
    if not args.quiet:
        print(summary(result))
        for path in written:
            print(f"  wrote {path}")
    if args.json:
        print(json.dumps(result), flush=True)
    return result


def describe(result: dict) -> str:
    """The first summary line of a run."""
    where = (f"{result['processes']} MPI rank(s)" if result["backend"] == "mpi"
             else f"{result['devices']} device(s)")  # fmt: skip
    return (
        f"{result['example']} {tuple(result['shape'])} {result['dtype']}: {result['steps']} steps "
        f"on {result['backend']} ({where}, mesh {result['mesh']}) in {result['seconds']:.3f} s, "
        f"{result['cell_updates_per_second'] / 1e6:.1f} Mcell/s; checksum "
        f"{result['checksum'][:16]}"
    )


def compare_table(file: str, args: argparse.Namespace, kwargs: dict) -> None:
    """Run this example's ``problem`` on auto, explicit and mpi; print the table (pgas.compare)."""
    from pgas.compare import compare, format_table

    results = compare(f"{os.path.abspath(file)}:problem", args.steps, devices=args.devices,
                      **kwargs)  # fmt: skip
    print(f"comparison of backends ({args.steps} steps, equal checksums = bitwise equal fields):")
    print(format_table(results), flush=True)
