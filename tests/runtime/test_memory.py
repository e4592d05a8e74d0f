"""pgas.runtime.memory: the C library's mmap threshold, set once per process, one heap for
all threads, and the memory its heaps keep after a compilation, given back."""

from __future__ import annotations

import ctypes.util
import os
import platform
import subprocess
import sys

import numpy as np
import pytest

from pgas.runtime.memory import (
    DEFAULT_THRESHOLD,
    return_freed_buffers,
    share_one_heap,
    trim_freed_memory,
)

glibc = pytest.mark.skipif(
    platform.system() != "Linux" or platform.libc_ver()[0] != "glibc", reason="not glibc"
)


def test_zero_leaves_the_default():
    assert return_freed_buffers(0) is False


@glibc
def test_glibc_takes_the_threshold(monkeypatch):
    assert ctypes.util.find_library("c")
    monkeypatch.delenv("PGAS_MMAP_THRESHOLD", raising=False)
    assert return_freed_buffers() is True  # DEFAULT_THRESHOLD
    assert return_freed_buffers(DEFAULT_THRESHOLD) is True


def test_the_environment_overrides(monkeypatch):
    monkeypatch.setenv("PGAS_MMAP_THRESHOLD", "0")
    assert return_freed_buffers() is False
    monkeypatch.setenv("PGAS_MMAP_THRESHOLD", "1MiB")
    with pytest.raises(ValueError, match="PGAS_MMAP_THRESHOLD = '1MiB'"):
        return_freed_buffers()


# four threads allocate at once, then glibc's malloc_stats() lists its heaps on stderr
_HEAPS = """
import ctypes, sys, threading
from pgas.runtime.memory import share_one_heap
if sys.argv[1] == "one":
    assert share_one_heap()
libc = ctypes.CDLL(None)
libc.malloc.restype, libc.malloc.argtypes = ctypes.c_void_p, [ctypes.c_size_t]
go = threading.Barrier(4)
def allocate():
    go.wait()
    kept = [libc.malloc(1000) for _ in range(1000)]
threads = [threading.Thread(target=allocate) for _ in range(4)]
for t in threads: t.start()
for t in threads: t.join()
libc.malloc_stats()
"""


@glibc
@pytest.mark.parametrize("setting", ["one", "default"])
def test_one_heap_serves_every_thread(setting):
    env = {k: v for k, v in os.environ.items() if k != "MALLOC_ARENA_MAX"}
    run = subprocess.run([sys.executable, "-c", _HEAPS, setting], env=env,
                         capture_output=True, text=True, check=True)  # fmt: skip
    heaps = run.stderr.count("Arena ")
    assert heaps == 1 if setting == "one" else heaps > 1, run.stderr


@glibc
def test_glibc_environment_decides_the_heaps(monkeypatch):
    monkeypatch.setenv("MALLOC_ARENA_MAX", "2")
    assert share_one_heap() is False


def _rss_kib() -> int:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmRSS:"))


@glibc
def test_trim_gives_back_what_small_freed_buffers_left_in_the_heap():
    """About 64 MiB of small buffers (as a compiler makes), every 64th kept alive so the
    freed ones are holes glibc cannot return on its own: trimming returns most of them."""
    pieces = [np.ones(100) for _ in range(2**16 * 2)]  # 800 B each, from glibc's heap
    kept = pieces[::64]
    del pieces
    before = _rss_kib()
    assert trim_freed_memory() is True
    released = before - _rss_kib()
    assert released > 32 * 1024, (before, released)  # KiB: at least half of the 64 MiB
    assert kept[0].sum() == 100
