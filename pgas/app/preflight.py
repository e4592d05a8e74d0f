"""Before a run creates anything: process 0 decides, once for every process, where it writes.

Contract: :func:`decide` asks process 0 alone (through a
:class:`pgas.runtime.group.Group`: :func:`group_of`) and shares the answer, so
that no process looks at a path another is already writing (a half-made store
is "not a Zarr store"). It finds where a ``--restart`` starts (the checkpoint
to load, or None), checks that ``--out`` can be written, and that an existing
``--out`` or ``--checkpoint`` may be touched: an existing ``--out`` is continued
by a restart from a checkpoint, replaced with ``--overwrite`` and refused
otherwise (a restart without a checkpoint names the checkpoint directories next
to it); an existing ``--checkpoint`` of a new run is replaced whole with
``--overwrite`` (moved aside, then removed: never half old, half new) and
refused otherwise. Every refusal is a :class:`pgas.errors.PgasError` naming the
option, the path and the fix.
"""

from __future__ import annotations

from pathlib import Path

from pgas.app.options import RunOptions
from pgas.app.platform import Session
from pgas.errors import PgasError

__all__ = ["decide", "group_of"]


def decide(opts: RunOptions, ckpt, group) -> dict:
    """What must be the same on every process, decided once on process 0 before any
    process creates anything: the output path is usable, and where a restart starts.

    A process that looked for itself could look after another had begun to write (a
    half-made store is "not a Zarr store") and disagree with the others.

    Args:
        opts: the run's options (``out``, ``checkpoint``, ``restart``, ``overwrite``).
        ckpt: the run's :class:`pgas.app.checkpointing.Checkpointer`, or None.
        group: the run's processes (:func:`group_of`).

    Returns:
        ``{"resume": point}``: the checkpoint a restart loads, or None.

    >>> decide(RunOptions(), None, group_of(Session(), None))
    {'resume': None}
    """
    from pgas.io.dataset import OutputPathError, check_writable

    def question() -> dict:
        point = ckpt.resume_point() if ckpt is not None and opts.restart else None
        if opts.out:
            try:
                target = check_writable(opts.out)
            except OutputPathError as err:
                raise PgasError(f"--out: {err}") from None
            if target.exists() or target.is_symlink():
                _may_write(opts, target, point)
        if ckpt is not None and opts.checkpoint_every and not opts.restart:
            _fresh_checkpoints(opts)
        return {"resume": point}

    return group.decide(question)


def group_of(session: Session, comm):
    """The :class:`pgas.runtime.group.Group` of a run's processes (``comm``'s), or of this
    one alone.

    >>> group_of(Session(), None).size
    1
    """
    from pgas.runtime.group import Group

    return Group(comm) if session.multiprocess else Group.local()


def _checkpoints_beside(target: Path) -> list[str]:
    """Checkpoint directories next to ``target`` (they hold a ``LATEST``)."""
    try:
        return sorted(str(p) for p in target.parent.iterdir() if (p / "LATEST").is_file())
    except OSError:
        return []


def _may_write(opts: RunOptions, target: Path, point: str | None) -> None:
    """An existing ``--out``: continued by a restart from a checkpoint, replaced with
    ``--overwrite``, refused otherwise (process 0, before anything is written)."""
    if opts.restart and point is not None:
        return  # this run's own continuation
    if opts.restart and not opts.overwrite:
        seen = _checkpoints_beside(target)
        raise PgasError(
            f"--restart refused: --out {target} exists but --checkpoint {opts.checkpoint} holds "
            f"no checkpoint, so the run would start from step 0 and replace the store. "
            f"Checkpoint directories next to it: {', '.join(seen) or 'none'}. Give the right "
            f"--checkpoint DIR, or --overwrite to start over"
        )
    if not opts.overwrite:
        raise PgasError(
            f"--out {target} exists; pgas replaces nothing it was not asked to: pass "
            f"--overwrite to replace it, --restart to continue it from its --checkpoint, or "
            f"choose another name"
        )


def _fresh_checkpoints(opts: RunOptions) -> None:
    """A new run's ``--checkpoint`` directory: empty or absent, or replaced with
    ``--overwrite`` (moved aside whole, then removed: never half old, half new)."""
    import shutil
    import uuid

    root = Path(opts.checkpoint)
    if not root.exists() or (root.is_dir() and not any(root.glob("[!.]*"))):
        return
    if not opts.overwrite:
        from pgas.io import checkpoint

        step = checkpoint.latest(root)
        what = f"a checkpoint of step {step}" if step is not None else "files"
        raise PgasError(
            f"--checkpoint {root} holds {what} of an earlier run; pass --restart to continue "
            f"from it, --overwrite to replace it, or give another --checkpoint DIR"
        )
    if not root.is_dir():
        raise PgasError(f"--checkpoint {root} is a file, not a directory; give a directory")
    old = root.with_name(f".{root.name}.{uuid.uuid4().hex[:12]}.old")
    root.rename(old)
    shutil.rmtree(old, ignore_errors=True)
