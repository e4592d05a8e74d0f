"""A run's checkpoints: saving between chunks, restarting from one, and saving on a failure.

Contract: a :class:`Checkpointer` saves the state through :mod:`pgas.io.checkpoint`
every ``--checkpoint-every`` steps (every process its blocks; collective),
finds the checkpoint a ``--restart`` loads (process 0, once:
:meth:`Checkpointer.resume_point`, decided by :func:`pgas.app.preflight.decide`)
and loads it on every process. :func:`restore` gives the state and step a run
starts from, refusing a checkpoint beyond ``--steps`` or whose remaining steps
``--snapshot-every`` does not divide. :func:`final_checkpoint` saves the state a
failed one-process run completed, so that ``--restart`` loses nothing. Messages
go to stderr on rank 0 (restarts always, saves with ``--verbose``).
"""

from __future__ import annotations

import sys
from pathlib import Path

from pgas.app.options import RunOptions
from pgas.app.platform import Session
from pgas.errors import PgasError

__all__ = ["Checkpointer", "restore", "final_checkpoint"]


class Checkpointer:
    """Saves the state through pgas.checkpoint every ``checkpoint_every`` steps (all processes).

    >>> ck = Checkpointer(RunOptions(checkpoint="ck", checkpoint_every=4), 0, {"example": "x"})
    >>> ck.path, ck.every
    ('ck', 4)
    """

    def __init__(self, opts: RunOptions, rank: int, meta: dict):
        self.path, self.every, self.meta = opts.checkpoint, opts.checkpoint_every, meta
        self.rank, self.verbose = rank, opts.verbose

    def resume_point(self) -> str | None:
        """Process 0 only (see :func:`pgas.app.preflight.decide`): the checkpoint version a
        restart loads.

        None for a fresh start: a directory that is absent, empty or holds only
        hidden debris of an interrupted first save. A complete checkpoint is
        named by its version directory, so every process loads the same one;
        anything else is returned as the directory itself, and loading it fails
        on every process with the reason.
        """
        from pgas.io import checkpoint
        from pgas.io.checkpoint.store import read_latest

        root = Path(self.path)
        if checkpoint.latest(root) is not None:
            return str(root / read_latest(root))
        if not any(root.glob("[!.]*")):
            return None
        return str(root)

    def restore(self, like, point: str | None):
        """``(state, step)`` from the checkpoint ``point`` (:meth:`resume_point`), or
        ``(like, 0)`` if there is none yet."""
        from pgas.io import checkpoint

        if point is None:
            self._say(f"restart: no checkpoint in {self.path} yet, starting from step 0",
                      always=True)  # fmt: skip
            return like, 0
        try:
            state, step = checkpoint.load(point, like, meta=self.meta)
        except checkpoint.CheckpointError as err:
            raise PgasError(
                f"--restart refused: {err}. Restart with the options of the run that wrote the "
                f"checkpoint, or give another --checkpoint DIR (or drop --restart to start over)"
            ) from None
        self._say(f"restart: from step {step} (checkpoint {self.path})", always=True)
        return state, step

    def reload(self, like, point: str):
        """The state :meth:`restore` returned from ``point`` once more (quietly)."""
        from pgas.io import checkpoint

        return checkpoint.load(point, like, meta=self.meta)[0]

    def save(self, state, step: int) -> None:
        """Save ``state`` as the checkpoint of ``step`` (collective: every process)."""
        import jax

        from pgas.io import checkpoint

        jax.block_until_ready(state)
        checkpoint.save(self.path, state, step=step, meta=self.meta)
        self._say(f"checkpoint: step {step} written to {self.path}")

    def _say(self, text: str, always: bool = False) -> None:
        if self.rank == 0 and (always or self.verbose):
            print(text, file=sys.stderr, flush=True)


def restore(problem, opts: RunOptions, ckpt: Checkpointer | None, u, decision: dict):
    """The state to start from and its step (a checkpoint's with ``restart``).

    ``decision`` is :func:`pgas.app.preflight.decide`'s (its ``"resume"``: the checkpoint
    to load).

    >>> restore(None, RunOptions(), None, "u", {"resume": None})  # no checkpoints: step 0
    ('u', 0)
    """
    if ckpt is None or not opts.restart:
        return u, 0
    u, start = ckpt.restore(u, decision["resume"])
    steps, every = opts.steps, opts.snapshot_every
    if start > steps:
        raise PgasError(
            f"the checkpoint in {opts.checkpoint} is at step {start}, beyond --steps "
            f"{steps}; give --steps >= {start} or another --checkpoint"
        )
    if every and (steps - start) % every:
        raise PgasError(
            f"restarting at step {start}: --snapshot-every {every} does not divide the "
            f"{steps - start} remaining steps; choose a divisor of them"
        )
    return u, start


def final_checkpoint(err: BaseException, ckpt: Checkpointer | None, stream, start: int,
                     session: Session) -> None:  # fmt: skip
    """Save the state the failed run completed (``err.pgas_state``, see :func:`pgas.run`) as a
    checkpoint, so that ``--restart`` loses nothing; a note on ``err`` says what happened.

    Only in a one-process run (the processes of a launched run do not fail together, and a
    checkpoint is collective: one failed process ends them all instead), and only when every
    snapshot before that step is committed (a failed snapshot stream cannot say so).

    >>> final_checkpoint(RuntimeError("no state on it"), None, None, 0, Session())  # nothing
    """
    state, done = getattr(err, "pgas_state", None), getattr(err, "pgas_step", None)
    if ckpt is None or state is None or not done or session.multiprocess:
        return
    from pgas.io import checkpoint

    step = start + done
    try:
        if checkpoint.latest(ckpt.path) == step:
            return  # written by the run itself just before the error
        if stream:
            stream.close()  # every snapshot written so far committed (the run is over)
        ckpt.save(state, step)
    except Exception as failed:  # noqa: BLE001 - the run's own error is what propagates
        err.add_note(f"pgas: no final checkpoint at step {step} ({type(failed).__name__}: "
                     f"{failed}); --restart continues from the last one written")  # fmt: skip
        return
    note = f"pgas: the state after step {step} was saved to {ckpt.path}; --restart continues it"
    err.add_note(note)
    ckpt._say(note, always=True)
