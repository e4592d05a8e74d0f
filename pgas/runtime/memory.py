"""Memory: give freed field-sized buffers back to the system, so a process's peak is its blocks.

Contract: :func:`return_freed_buffers` (called once per process by
:func:`pgas.app.platform.start`, before any array exists) makes the C library
serve every allocation of at least ``threshold`` bytes from its own mapping,
which is unmapped when freed. A run allocates and frees buffers of a block's
size many times (the initial condition, the warm-up, each compiled chunk's
output, snapshot copies); glibc's default raises its mapping threshold to the
size of the last such buffer freed (up to 32 MiB), after which buffers of up to
that size come from its heap, where freed ones stay resident and fragment, so a
process's resident memory grows with blocks it no longer holds. Setting the
threshold fixes it (and turns off that adjustment). ``PGAS_MMAP_THRESHOLD``
overrides the threshold in bytes (``0`` leaves the C library's default).

:func:`share_one_heap` (called by :func:`~pgas.app.platform.start` in every
process of a multi-process job) makes all of a process's threads allocate from
one heap: XLA's compiler allocates from several threads, and glibc gives each its
own heap (up to 8 per core), where what it freed stays resident.
:func:`trim_freed_memory` gives the free memory of the heaps back after a
compilation. A C library other than glibc is left alone. Imports nothing from pgas.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os

__all__ = ["DEFAULT_THRESHOLD", "return_freed_buffers", "share_one_heap", "trim_freed_memory"]

#: allocations from this size (bytes) up get their own mapping
DEFAULT_THRESHOLD = 1 << 20
_M_MMAP_THRESHOLD = -3  # glibc's mallopt parameters (malloc.h)
_M_ARENA_MAX = -8


def return_freed_buffers(threshold: int | None = None) -> bool:
    """Serve allocations of ``threshold`` bytes or more from mappings freed back at once.

    Args:
        threshold: bytes (default ``PGAS_MMAP_THRESHOLD`` or :data:`DEFAULT_THRESHOLD`;
            ``0`` changes nothing).

    Returns:
        True if the C library (glibc) took the setting, else False.

    Raises:
        ValueError: ``PGAS_MMAP_THRESHOLD`` is not a whole number of bytes.

    >>> return_freed_buffers(0)
    False
    """
    if threshold is None:
        text = os.environ.get("PGAS_MMAP_THRESHOLD", "").strip()
        try:
            threshold = int(text) if text else DEFAULT_THRESHOLD
        except ValueError:
            raise ValueError(
                f"PGAS_MMAP_THRESHOLD = {text!r}: give bytes as a whole number "
                f"(e.g. {DEFAULT_THRESHOLD}), or 0 for the C library's default"
            ) from None
    if threshold <= 0:
        return False
    return _mallopt(_M_MMAP_THRESHOLD, min(int(threshold), 2**31 - 1))


def share_one_heap() -> bool:
    """Let every thread of this process allocate from one heap (glibc: one arena).

    glibc gives a thread that allocates its own heap (an *arena*, up to 8 per core),
    and what a thread frees stays resident in its heap. XLA's compiler allocates
    tens of MiB in small pieces from several threads, so each compilation left
    several partly used heaps, more for larger shapes, which a run's blocks were
    then allocated beside. With one heap, the freed pieces are reused and trimmed
    in one place. Every process of a multi-process job calls this
    (:func:`pgas.app.platform.start`), where memory per process is the measure
    and the processes share the node's cores; a single process keeps glibc's
    default, which compiles a little faster (one heap made heat1d 1_000_003 on 2
    devices, 2000 steps, 4.8% slower as a whole process, all of it compiling:
    0.92-1.00 s against 0.76-0.82 s; 8 pairs, AMD EPYC). glibc's own
    ``MALLOC_ARENA_MAX``, when set, is left to decide.

    Returns:
        True if glibc took the setting; False if ``MALLOC_ARENA_MAX`` is set or the C
        library is not glibc.

    >>> from unittest import mock
    >>> with mock.patch.dict(os.environ, {"MALLOC_ARENA_MAX": "4"}):
    ...     share_one_heap()  # glibc's own setting decides
    False
    """
    if os.environ.get("MALLOC_ARENA_MAX", "").strip():
        return False
    return _mallopt(_M_ARENA_MAX, 1)


def trim_freed_memory() -> bool:
    """Give the free memory of the C library's heaps back to the system (``malloc_trim``).

    Returns:
        True if glibc released memory, False if there was none to release or the C
        library is not glibc.

    >>> import numpy as np
    >>> pieces = [np.ones(64) for _ in range(100_000)]  # small buffers: from the heap
    >>> del pieces
    >>> isinstance(trim_freed_memory(), bool)
    True
    """
    trim = _glibc("malloc_trim")
    if trim is None:
        return False
    trim.argtypes, trim.restype = [ctypes.c_size_t], ctypes.c_int
    return bool(trim(0))


def _mallopt(param: int, value: int) -> bool:
    """glibc's ``mallopt(param, value)``: True if it took the setting; False if it did not
    or the C library is not glibc (nothing to set)."""
    mallopt = _glibc("mallopt")
    if mallopt is None:
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    return bool(mallopt(param, value))


def _glibc(function: str):
    """``function`` of the C library if it is glibc's (it has ``mallopt``), else None."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c"))
        libc.mallopt  # noqa: B018 - glibc's (musl and macOS have none)
        return getattr(libc, function)
    except (OSError, AttributeError, TypeError):
        return None
