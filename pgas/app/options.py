"""Run options: the shared command line of the examples, checked once into a frozen record.

:func:`make_parser` builds the options both examples share (backend, platform,
devices, steps, steps per exchange, output, checkpoints); each example adds its
own group. A program with a command line of its own (``examples/poisson``) takes
single options from here instead (:func:`add_platform`, :func:`add_out`,
:func:`add_overwrite`, :func:`check_out`), so an option means the same in every
example. :func:`from_args` checks the parsed options against each other and
returns a :class:`RunOptions` (derived values such as the snapshot interval and
the checkpoint directory filled in); the argparse ``Namespace`` is never
changed. Every user error ends the program through ``ap.error``: exit code 2
and a message that says what to change.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TypeVar

from pgas.app.backends import BACKENDS, Backend, get
from pgas.errors import PgasError

__all__ = [
    "PLATFORMS", "RunOptions", "make_parser", "from_args", "or_exit",
    "positive_int", "non_negative_int", "steps_per_exchange", "default_every",
    "add_platform", "add_out", "add_overwrite", "check_out",
]  # fmt: skip

PLATFORMS = ("auto", "cpu", "gpu")
T = TypeVar("T")


# ---- argparse types ----------------------------------------------------------------------
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
    """argparse type: a whole number >= 1 (underscores allowed).

    >>> positive_int("1_000_003")
    1000003
    """
    return _whole_number(text, 1)


def non_negative_int(text: str) -> int:
    """argparse type: a whole number >= 0.

    >>> non_negative_int("0")
    0
    """
    return _whole_number(text, 0)


def steps_per_exchange(text: str) -> int | str:
    """argparse type of ``--steps-per-exchange``: ``auto`` or a whole number >= 1.

    >>> steps_per_exchange("auto"), steps_per_exchange("8")
    ('auto', 8)
    """
    if text.strip().lower() == "auto":
        return "auto"
    try:
        return _whole_number(text, 1)
    except argparse.ArgumentTypeError as err:
        raise argparse.ArgumentTypeError(f"{err}; give K >= 1 or auto") from None


# ---- the record ------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class RunOptions:
    """How to run a problem: what the command line asked for, checked and completed.

    Attributes:
        backend: ``auto``, ``explicit`` or ``mpi`` (:mod:`pgas.app.backends`), or a
            :class:`~pgas.app.backends.Backend`.
        platform: ``auto`` (JAX's default), ``cpu`` or ``gpu``.
        devices: JAX devices (per process in a multi-process run); None: all local.
        steps: time steps.
        dtype: field dtype name.
        steps_per_exchange: ``k`` as asked (an int >= 1 or ``"auto"``).
        snapshot_every: steps between snapshots; None: no snapshots.
        checkpoint: checkpoint directory.
        checkpoint_every: steps between checkpoints; None: none written.
        restart: continue from the checkpoint in ``checkpoint``.
        overwrite: replace an existing ``out`` or ``checkpoint`` (never otherwise).
        plot: picture files to write.

    >>> RunOptions(steps=10).checkpointing
    False
    """

    backend: str | Backend = "auto"
    platform: str = "auto"
    devices: int | None = None
    distributed: bool = False
    verbose: bool = False
    steps: int = 100
    dtype: str = "float32"
    seed: int = 0
    steps_per_exchange: int | str = "auto"
    compare: bool = False
    out: str | None = None
    snapshot_every: int | None = None
    plot: tuple[str, ...] = ()
    json: bool = False
    quiet: bool = True
    checkpoint: str | None = None
    checkpoint_every: int | None = None
    restart: bool = False
    overwrite: bool = False

    @property
    def checkpointing(self) -> bool:
        return bool(self.checkpoint_every or self.restart)


# ---- the parser ------------------------------------------------------------------------------
def make_parser(
    doc: str, *, steps: int, dtypes: Sequence[str], plots: str
) -> argparse.ArgumentParser:
    """The options both examples share; the example adds its own group afterwards.

    >>> make_parser("Demo.", steps=5, dtypes=("float32",), plots="x").parse_args([]).steps
    5
    """
    lines = doc.strip().splitlines()
    ap = argparse.ArgumentParser(
        description=lines[0], epilog="\n".join(lines[1:]).strip(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )  # fmt: skip
    _run_group(ap, steps, dtypes)
    _output_group(ap, plots)
    _checkpoint_group(ap)
    return ap


def add_platform(group) -> None:
    """``--platform auto|cpu|gpu``, as every example has it (:func:`pgas.app.platform.select`).

    >>> ap = argparse.ArgumentParser()
    >>> add_platform(ap)
    >>> ap.parse_args(["--platform", "cpu"]).platform
    'cpu'
    """
    group.add_argument(
        "--platform", choices=PLATFORMS, default="auto",
        help="JAX platform: auto (JAX's default: a GPU if one is installed), cpu (N virtual "
        "CPU devices with --devices N) or gpu (default auto)",
    )  # fmt: skip


def add_out(group, help: str) -> None:
    """``--out FILE``: a result written as an xarray Dataset (checked by :func:`check_out`).

    >>> ap = argparse.ArgumentParser()
    >>> add_out(ap, "the result")
    >>> ap.parse_args(["--out", "r.nc"]).out
    'r.nc'
    """
    group.add_argument("--out", metavar="FILE", help=help)


def add_overwrite(group, help: str = "replace an existing --out file or store (without it "
                  "an existing one is an error)") -> None:  # fmt: skip
    """``--overwrite``: replace what ``--out`` names (never otherwise).

    >>> ap = argparse.ArgumentParser()
    >>> add_overwrite(ap)
    >>> ap.parse_args([]).overwrite
    False
    """
    group.add_argument("--overwrite", action="store_true", help=help)


def _run_group(ap: argparse.ArgumentParser, steps: int, dtypes: Sequence[str]) -> None:
    group = ap.add_argument_group("run")
    add = group.add_argument
    add("--backend", choices=tuple(BACKENDS), default="auto",
        help="auto: global view (pgas.run); explicit: local kernel + ppermute; "
        "mpi: NumPy + mpi4py, start with `mpiexec -n P` (default auto)")  # fmt: skip
    add_platform(group)
    add("--devices", type=positive_int,
        help="JAX devices; default: all local. In a multi-process run: devices PER PROCESS "
        "(the mesh spans all processes' devices)")  # fmt: skip
    add("--distributed", action="store_true",
        help="multi-process JAX run: call pgas.distributed.initialize() before JAX starts "
        "(automatic when started by mpiexec or srun with --backend auto/explicit)")  # fmt: skip
    add(
        "--verbose",
        action="store_true",
        help="print the process/device layout (process 0) and each checkpoint written",
    )
    add("--steps", type=non_negative_int, default=steps, help=f"time steps (default {steps})")
    add("--steps-per-exchange", type=steps_per_exchange, default="auto", metavar="K|auto",
        help="physical steps per halo exchange (deep halos); lowered when the blocks are too "
        "small, and said so (default auto)")  # fmt: skip
    add("--dtype", choices=tuple(dtypes), default=dtypes[0],
        help=f"field dtype (default {dtypes[0]})")  # fmt: skip
    add("--seed", type=int, default=0, help="seed of random initial conditions")
    add("--compare", action="store_true",
        help="also run the problem on auto, explicit and mpi (mpiexec) and print the "
        "comparison table (pgas.compare)")  # fmt: skip


def _output_group(ap: argparse.ArgumentParser, plots: str) -> None:
    o = ap.add_argument_group("output")
    add_out(o, "write snapshots + diagnostics as an xarray Dataset (.nc or .zarr)")
    o.add_argument("--snapshot-every", type=positive_int, metavar="K",
                   help="snapshot every K steps (must divide --steps; default: about 50-100 "
                   "snapshots when --out or --plot is given)")  # fmt: skip
    o.add_argument("--plot", action="append", default=[], metavar="FILE", help=plots)
    o.add_argument(
        "--json",
        action="store_true",
        help="print one JSON object with the results as the last stdout line",
    )
    o.add_argument("--quiet", action="store_true", help="no progress bar, no summary")
    add_overwrite(o, "replace an existing --out file or store and --checkpoint directory "
                  "(without it an existing one is an error; --restart continues them; "
                  "plots are always replaced)")  # fmt: skip


def _checkpoint_group(ap: argparse.ArgumentParser) -> None:
    c = ap.add_argument_group("checkpoint/restart (--backend auto and explicit)")
    c.add_argument("--checkpoint", metavar="DIR",
                   help="checkpoint directory (default: next to --out, FILE.nc -> FILE.ckpt; "
                   "without --out: out/<example>.ckpt)")  # fmt: skip
    c.add_argument("--checkpoint-every", type=positive_int, metavar="K",
                   help="write a checkpoint every K steps (between compiled chunks of K "
                   "steps) and after the last step")  # fmt: skip
    c.add_argument(
        "--restart",
        action="store_true",
        help="continue --out and the run from the checkpoint in --checkpoint DIR; starts "
        "from step 0 when there is none yet and --out does not exist (so a requeued job "
        "script can always pass it); refuses when --out exists but DIR holds no checkpoint",
    )


# ---- checking -------------------------------------------------------------------------------
def default_every(base: int, target: int, steps: int | None = None) -> int:
    """The smallest divisor of ``base`` giving at most ``target`` snapshots of ``steps``.

    >>> default_every(1000, 64)
    20
    """
    steps = base if steps is None else steps
    if base == 0:
        return 1
    for k in range(max(1, steps // target), base + 1):
        if base % k == 0 and steps // k <= target:
            return k
    return base


def _check_output(ap: argparse.ArgumentParser, args: argparse.Namespace,
                  plot_suffixes: Sequence[str]) -> None:  # fmt: skip
    for path in args.plot:
        if Path(path).suffix.lower() not in plot_suffixes:
            ap.error(f"--plot {path!r}: give a file ending in {' or '.join(plot_suffixes)}")
        folder = os.path.dirname(os.path.abspath(path))
        if not Path(folder).is_dir():
            ap.error(f"--plot {path!r}: directory {folder!r} does not exist; create it first "
                     f"(mkdir -p)")  # fmt: skip
    if args.out:
        check_out(ap, args.out, distributed=args.distributed)


def check_out(ap: argparse.ArgumentParser, out: str, *, distributed: bool = False,
              overwrite: bool | None = None) -> None:  # fmt: skip
    """Check ``--out`` before the run (suffix, directory); errors exit with code 2.

    Args:
        ap: the parser (its ``error`` reports a bad path).
        out: the path given.
        distributed: a multi-process JAX run: only the directory is checked here.
        overwrite: ``--overwrite`` of a program that writes ``out`` once, at its end: an
            existing ``out`` without it is refused now (every process may look: none
            writes before the end). None: the runner decides later, on process 0
            (``--restart`` may continue it).

    >>> import tempfile
    >>> check_out(argparse.ArgumentParser(), tempfile.gettempdir() + "/pgas-doctest-absent.nc")
    """
    from pgas.io.dataset import OutputPathError, check_directory, check_writable
    from pgas.runtime.failure import launched_processes

    # What is AT the path: one process alone looks now (fail in the first second); the
    # processes of a launched run never look for themselves (one could look while another
    # creates the store): the runner decides that once, on process 0, for all of them.
    alone = launched_processes() == 1 and not distributed
    try:
        target = (check_writable if alone else check_directory)(out)
    except OutputPathError as err:
        ap.error(f"--out: {err}")
    if overwrite is False and (target.exists() or target.is_symlink()):
        ap.error(f"--out {target} exists; pgas replaces nothing it was not asked to: pass "
                 f"--overwrite to replace it, or choose another name")  # fmt: skip


def _snapshot_every(ap: argparse.ArgumentParser, args: argparse.Namespace,
                    snapshots: int) -> int | None:  # fmt: skip
    every, k, steps = args.snapshot_every, args.checkpoint_every, args.steps
    if every is not None and steps % every:
        ap.error(f"--snapshot-every {every} does not divide --steps {steps}; use e.g. "
                 f"--steps {(steps // every + 1) * every}")  # fmt: skip
    if every is not None and k is not None and k % every:
        ap.error(f"--checkpoint-every {k} must be a multiple of --snapshot-every {every} "
                 f"(checkpoints are written between snapshot chunks); use e.g. "
                 f"--checkpoint-every {(k // every + 1) * every}")  # fmt: skip
    wanted = bool(args.out or args.plot)
    if every is None and wanted:  # with checkpoints: a divisor of both --steps and K
        every = default_every(math.gcd(steps, k) if k else steps, snapshots, steps)
    return every if (wanted or every) and steps else None


def from_args(ap: argparse.ArgumentParser, args: argparse.Namespace, *, script: str,
              plot_suffixes: Sequence[str], snapshots: int) -> RunOptions:  # fmt: skip
    """Check the parsed options and return the run's record; errors exit with code 2.

    Args:
        ap: the parser (its ``error`` reports a bad option).
        args: what it parsed (not changed).
        script: the example's file (names the default checkpoint directory).
        plot_suffixes: picture formats the example writes.
        snapshots: about how many snapshots ``--out``/``--plot`` keep by default.

    >>> ap = make_parser("Demo.", steps=100, dtypes=("float32",), plots="x")
    >>> from_args(ap, ap.parse_args([]), script="demo.py", plot_suffixes=(), snapshots=10)
    ... # doctest: +ELLIPSIS
    RunOptions(backend='auto', platform='auto', ..., checkpoint='out/demo.ckpt', ...)
    """
    if args.compare and get(args.backend).launched:
        ap.error("--compare runs all three backends itself (it starts mpiexec); run it "
                 "without mpiexec and without --backend mpi")  # fmt: skip
    _check_output(ap, args, plot_suffixes)
    every = _snapshot_every(ap, args, snapshots)
    if (args.checkpoint_every or args.restart) and get(args.backend).launched:
        ap.error("--checkpoint-every/--restart work on --backend auto and explicit only (the mpi "
                 "backend runs NumPy blocks and cannot checkpoint); run with --backend auto "
                 "--distributed under mpiexec or srun instead")  # fmt: skip
    checkpoint = args.checkpoint
    if checkpoint is None:
        checkpoint = (str(Path(args.out).with_suffix(".ckpt")) if args.out
                      else os.path.join("out", f"{Path(script).stem}.ckpt"))  # fmt: skip
    return RunOptions(
        backend=args.backend, platform=args.platform, devices=args.devices,
        distributed=args.distributed, verbose=args.verbose, steps=args.steps, dtype=args.dtype,
        seed=args.seed, steps_per_exchange=args.steps_per_exchange, compare=args.compare,
        out=args.out, snapshot_every=every, plot=tuple(args.plot), json=args.json,
        quiet=args.quiet, checkpoint=checkpoint, checkpoint_every=args.checkpoint_every,
        restart=args.restart, overwrite=args.overwrite,
    )  # fmt: skip


def or_exit(ap: argparse.ArgumentParser, fn: Callable[[], T]) -> T:
    """``fn()``, with pgas's own errors (bad sizes, device counts) turned into exit code 2.

    The message names the error class when it is more specific than ``PgasError``.

    >>> or_exit(argparse.ArgumentParser(), lambda: 3)
    3
    """
    try:
        return fn()
    except (PgasError, ValueError) as err:
        plain = type(err) in (PgasError, ValueError)
        ap.error(str(err) if plain else f"{type(err).__name__}: {err}")
