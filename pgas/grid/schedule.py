"""When a time loop stops: snapshots, chunks (callbacks) and groups of steps per exchange.

A run of ``steps`` steps is cut into *segments* that end where the caller
needs the field: after every ``snapshot_every`` steps (a snapshot) and after
every ``chunk`` steps (a callback, e.g. a progress bar or a checkpoint), and
at the end. A segment is run as *groups* of at most ``k`` steps, one halo
exchange each (deep halos), so a group never crosses a snapshot or callback
step. Every backend (:func:`pgas.run`, :func:`pgas.mpi.run`, the command-line
driver) checks its arguments and cuts its loop here. NumPy-free.

>>> every, chunk = check_schedule(10, snapshot_every=5)
>>> segments(10, every, chunk)
(5, 10)
>>> list(groups(5, 2))
[2, 2, 1]
"""

from __future__ import annotations

from collections.abc import Iterator

from pgas.errors import PgasError, whole_number

__all__ = ["check_schedule", "check_steps", "groups", "segments"]


def _whole(name: str, value: object, least: int) -> int:
    return whole_number(name, value, least)  # integral values (NumPy's too), no bools


def check_steps(steps: object) -> int:
    """Validate a step count (a whole number >= 0).

    >>> check_steps(3)
    3
    """
    return _whole("steps", steps, 0)


def check_schedule(
    steps: int, snapshot_every: int | None = None, chunk: int | None = None
) -> tuple[int | None, int | None]:
    """Validate ``snapshot_every`` and ``chunk`` of a run of ``steps`` steps.

    Args:
        steps: the run's length (>= 0).
        snapshot_every: keep the field at step 0 and after every that many
            steps; must divide ``steps``.
        chunk: call back after every that many steps; a multiple of
            ``snapshot_every`` when both are given.

    Returns:
        ``(every, chunk)``; ``chunk`` defaults to ``snapshot_every``.

    Raises:
        PgasError: a value that is not a whole number >= 1, a ``snapshot_every``
            that does not divide ``steps``, or a ``chunk`` that is not a
            multiple of ``snapshot_every``.

    >>> check_schedule(12, 4), check_schedule(12, 4, 8), check_schedule(7)
    ((4, 4), (4, 8), (None, None))
    """
    steps = check_steps(steps)
    every = None if snapshot_every is None else _whole("snapshot_every", snapshot_every, 1)
    chunk = None if chunk is None else _whole("chunk", chunk, 1)
    if every is not None and steps % every:
        raise PgasError(
            f"snapshot_every = {every} does not divide steps = {steps}; pick steps as a "
            f"multiple of it (e.g. steps = {(steps // every + 1) * every})"
        )
    if every is not None and chunk is not None and chunk % every:
        raise PgasError(f"chunk = {chunk} must be a multiple of snapshot_every = {every}")
    return every, (chunk if chunk is not None else every)


def segments(steps: int, every: int | None = None, chunk: int | None = None) -> tuple[int, ...]:
    """The step counts after which a loop must hand the field back, in order.

    Multiples of ``every`` and of ``chunk`` below ``steps``, and ``steps``
    itself (nothing for ``steps = 0``).

    >>> segments(10, None, 4), segments(10, 5, None), segments(0, None, None)
    ((4, 8, 10), (5, 10), ())
    """
    stops = {steps} if steps > 0 else set()
    for n in (every, chunk):
        if n:
            stops.update(range(n, steps, n))
    return tuple(sorted(stops))


def groups(steps: int, k: int) -> Iterator[int]:
    """Cut ``steps`` steps into groups of ``k`` (one halo exchange each); the last may be shorter.

    >>> list(groups(10, 4)), list(groups(3, 1)), list(groups(0, 8))
    ([4, 4, 2], [1, 1, 1], [])
    """
    k = _whole("steps_per_exchange", k, 1)
    done = 0
    while done < steps:
        size = min(k, steps - done)
        yield size
        done += size
