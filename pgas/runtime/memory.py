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
overrides the threshold in bytes (``0`` leaves the C library's default). A C
library other than glibc is left alone. Imports nothing from pgas.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os

__all__ = ["DEFAULT_THRESHOLD", "return_freed_buffers", "trim_freed_memory"]

#: allocations from this size (bytes) up get their own mapping
DEFAULT_THRESHOLD = 1 << 20
_M_MMAP_THRESHOLD = -3  # glibc's mallopt parameter (malloc.h)


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
    mallopt = _glibc("mallopt")
    if mallopt is None:
        return False  # not glibc (or no C library by that name): nothing to set
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    return bool(mallopt(_M_MMAP_THRESHOLD, min(int(threshold), 2**31 - 1)))


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


def _glibc(function: str):
    """``function`` of the C library if it is glibc's (it has ``mallopt``), else None."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c"))
        libc.mallopt  # noqa: B018 - glibc's (musl and macOS have none)
        return getattr(libc, function)
    except (OSError, AttributeError, TypeError):
        return None
