"""Progress between compiled chunks: how long a chunk is, and the bar it advances.

Contract: a run that hands control back between compiled chunks (for
snapshots, checkpoints or a progress bar) runs :func:`chunk_length` steps per
chunk: a multiple of the steps between snapshots, about 1/20 of the run with a
bar. :class:`Progress` is that bar: a tqdm bar on rank 0 of an interactive run
(stdout a terminal, not ``--quiet``), nothing otherwise; it waits for the
chunk's state before it advances, so the bar shows steps done, not dispatched.
"""

from __future__ import annotations

import sys

import numpy as np

__all__ = ["Progress", "chunk_length"]


def chunk_length(steps: int, every: int | None, progress: bool) -> int | None:
    """Steps per compiled chunk: about 1/20 of the run with a bar, a multiple of ``every``.

    >>> chunk_length(100, None, True), chunk_length(100, 10, False)
    (5, 20)
    """
    if every is None:
        return max(1, steps // 20) if progress else None
    shots = steps // every
    want = max(1, shots // (20 if progress else 4))
    parts = max(d for d in range(1, want + 1) if shots % d == 0)
    return every * parts


class Progress:
    """A tqdm bar on rank 0 of an interactive run, advanced between compiled chunks.

    >>> bar = Progress(10, quiet=True, rank=0, name="demo")  # quiet: no bar
    >>> bar.on, bar(5), bar.done
    (False, None, 5)
    """

    def __init__(self, steps: int, quiet: bool, rank: int, name: str):
        self.bar = None
        if not quiet and rank == 0 and sys.stdout.isatty() and steps:
            from tqdm import tqdm

            self.bar = tqdm(total=steps, unit="step", desc=name, leave=False)
        self.done = 0

    @property
    def on(self) -> bool:
        """Whether a bar is shown (a run then hands control back between chunks)."""
        return self.bar is not None

    def __call__(self, done: int, state=None) -> None:
        if self.bar is not None:
            if state is not None and not isinstance(state, np.ndarray):
                import jax

                jax.block_until_ready(state)  # JAX dispatches asynchronously: wait for the chunk
            self.bar.update(done - self.done)
        self.done = done

    def close(self) -> None:
        """Close the bar, if any."""
        if self.bar is not None:
            self.bar.close()
