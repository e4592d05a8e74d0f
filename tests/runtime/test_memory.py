"""pgas.runtime.memory: the C library's mmap threshold, set once per process."""

from __future__ import annotations

import ctypes.util
import platform

import pytest

from pgas.runtime.memory import DEFAULT_THRESHOLD, return_freed_buffers

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
