"""Capacity: a field that cannot fit in memory is refused before it is allocated.

A field larger than memory used to end its process with no word from pgas: the
kernel's out-of-memory killer ends a CPU run (``Killed``, exit 137), a GPU run
stops in XLA's allocator. :func:`check_fits` compares what a field needs with
what its devices can hold and raises
:class:`~pgas.errors.FieldTooLargeError` naming both sizes and the fix; it runs
in :func:`pgas.zeros`, :func:`pgas.full`, :func:`pgas.from_function`,
:func:`pgas.from_numpy` (one buffer) and in the example runner (two buffers: the
state and the loop's second buffer); :func:`check_host_fits` does the same for
the NumPy block of each rank of the MPI reference path.

What a device can hold (:func:`device_memory`):

* GPUs and other accelerators: ``device.memory_stats()["bytes_limit"]`` each.
* CPU devices: every CPU device of a process lives in the host's memory, so the
  blocks of all of them together are compared with the memory this process can
  get: ``MemAvailable`` plus ``SwapFree`` of ``/proc/meminfo`` (elsewhere the free
  pages of ``os.sysconf``), capped by the room left under its cgroup's limit
  (Slurm jobs, containers; page cache counts as free), shared by the processes
  the launcher started on this node.
* unknown (no statistics): nothing is checked.

Fields under :data:`SMALL` (64 MiB in all) are not checked; ``PGAS_MEMORY_CHECK=0``
turns the check off. Imports nothing from pgas but its errors and the launcher.

>>> check_fits((4,), "float32", [], buffers=2)  # no device: nothing to check
>>> gib(3 << 29)
'1.50 GiB'
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from pgas.errors import FieldTooLargeError

__all__ = ["SMALL", "check_fits", "check_host_fits", "device_memory", "host_available", "gib"]

#: bytes (all blocks of a process together) below which nothing is checked
SMALL = 1 << 26


def gib(nbytes: float) -> str:
    """``nbytes`` in GiB, two decimals.

    >>> gib(2**30), gib(5 * 2**40)
    ('1.00 GiB', '5120.00 GiB')
    """
    return f"{nbytes / 2**30:.2f} GiB"


def _meminfo(path: str = "/proc/meminfo") -> dict[str, int]:
    """``/proc/meminfo`` in bytes by name (empty where there is none)."""
    try:
        text = Path(path).read_text()
    except OSError:
        return {}
    out = {}
    for line in text.splitlines():
        name, _, rest = line.partition(":")
        fields = rest.split()
        if fields and fields[0].isdigit():
            out[name] = int(fields[0]) * (1024 if fields[1:] == ["kB"] else 1)
    return out


def _read_int(path: Path) -> int | None:
    try:
        text = path.read_text().strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None


def _stat(path: Path, key: str) -> int:
    try:
        for line in path.read_text().splitlines():
            name, _, value = line.partition(" ")
            if name == key and value.strip().isdigit():
                return int(value)
    except OSError:
        pass
    return 0


def _cgroup_room(root: Path = Path("/sys/fs/cgroup"), me: str = "/proc/self/cgroup") -> int | None:
    """Bytes this process's cgroups still allow (limit less use, page cache counted as
    free), the least over the cgroup and its parents; None where no limit is set."""
    try:
        lines = Path(me).read_text().splitlines()
    except OSError:
        return None
    rooms = []
    for line in lines:
        _, controllers, where = line.split(":", 2) if line.count(":") >= 2 else ("", "", "")
        if controllers == "":  # cgroup v2
            base, files = root, ("memory.max", "memory.current", "memory.stat", "file")
        elif "memory" in controllers.split(","):  # cgroup v1
            base, files = root / "memory", ("memory.limit_in_bytes", "memory.usage_in_bytes",
                                            "memory.stat", "total_cache")  # fmt: skip
        else:
            continue
        path = base / where.strip("/")
        while True:
            limit, used = _read_int(path / files[0]), _read_int(path / files[1])
            if limit is not None and used is not None and limit < 1 << 60:
                rooms.append(max(0, limit - used + _stat(path / files[2], files[3])))
            if path == base or base not in path.parents:
                break
            path = path.parent
    return min(rooms) if rooms else None


def _local_processes() -> int:
    from pgas.runtime.launcher import launch

    return max(1, launch().local_size or 1)


def host_available() -> int | None:
    """Bytes of host memory this process can still get (see the module); None if unknown.

    >>> host_available() > 0
    True
    """
    info = _meminfo()
    if "MemAvailable" in info:
        free = info["MemAvailable"] + info.get("SwapFree", 0)
    else:
        try:
            free = os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
        except (ValueError, OSError, AttributeError):
            return None
    room = _cgroup_room()
    return free if room is None else min(free, room)


def device_memory(device: Any) -> int | None:
    """Bytes one accelerator can hold (``memory_stats()["bytes_limit"]``), None if unknown.

    CPU devices have no memory of their own: see :func:`host_available`.

    >>> import jax
    >>> device_memory(jax.devices("cpu")[0]) is None
    True
    """
    if device.platform == "cpu":
        return None
    try:
        stats = device.memory_stats() or {}
    except Exception:  # noqa: BLE001 - a backend without statistics: nothing to check
        return None
    limit = stats.get("bytes_limit")
    return int(limit) if limit else None


def check_fits(block_shape: Sequence[int], dtype: Any, devices: Sequence[Any], *,
               buffers: int = 1, shape: Sequence[int] | None = None,
               what: str = "the field") -> None:  # fmt: skip
    """Refuse a field whose blocks cannot fit in its devices' memory, before it is allocated.

    Args:
        block_shape: one device's block (the largest), in stored values.
        dtype: the stored dtype.
        devices: this process's devices that hold a block.
        buffers: blocks each device holds at once (a run: the state and the loop's
            second buffer).
        shape: the global shape, for the message.
        what: what is allocated, for the message.

    Raises:
        FieldTooLargeError: naming the bytes needed and held, and the fix.

    >>> import jax
    >>> check_fits((2**50,), "float32", jax.devices("cpu")[:1], what="u")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    pgas.errors.FieldTooLargeError: u (float32) needs 4194304.00 GiB per device (its ...
    """
    dt = np.dtype(dtype)
    block = math.prod(int(n) for n in block_shape) * dt.itemsize
    per_device = block * buffers
    if per_device * len(devices) < SMALL or os.environ.get("PGAS_MEMORY_CHECK", "") == "0":
        return  # fits anywhere (most arrays: no file is read for them), or asked not to check
    field = f"{what} {tuple(shape)}" if shape is not None else what
    held = f"{buffers} buffers of its" if buffers > 1 else "its"
    head = f"{field} ({dt}) needs {gib(per_device)} per device ({held} {tuple(block_shape)} block)"
    smaller = ["make the field smaller"] + (["store it in float32"] if dt.itemsize > 4 else [])
    cpus = [d for d in devices if d.platform == "cpu"]
    if cpus:
        _check_host(per_device * len(cpus), f"{head}; its {len(cpus)} CPU device(s) share "
                    f"this process's memory", smaller)  # fmt: skip
    for device in devices:
        limit = device_memory(device)
        if limit is not None and per_device > limit:
            fix = _either(["spread it over more devices (--devices, more nodes)", *smaller])
            raise FieldTooLargeError(
                f"{head}, but {device.platform}:{device.id} ({device.device_kind}) holds "
                f"{gib(limit)}; {fix}"
            )


def check_host_fits(block_shape: Sequence[int], dtype: Any, *, buffers: int = 1,
                    shape: Sequence[int] | None = None,
                    what: str = "the field") -> None:  # fmt: skip
    """:func:`check_fits` for a block held in this process's own memory (a NumPy block: the
    MPI reference path, one block per rank).

    >>> check_host_fits((4,), "float64", buffers=2)  # small: nothing to check
    """
    dt = np.dtype(dtype)
    need = math.prod(int(n) for n in block_shape) * dt.itemsize * buffers
    if need < SMALL or os.environ.get("PGAS_MEMORY_CHECK", "") == "0":
        return
    field = f"{what} {tuple(shape)}" if shape is not None else what
    held = f"{buffers} buffers of its" if buffers > 1 else "its"
    smaller = ["make the field smaller"] + (["store it in float32"] if dt.itemsize > 4 else [])
    _check_host(need, f"{field} ({dt}) needs {gib(need)} per process ({held} "
                f"{tuple(block_shape)} block)", smaller)  # fmt: skip


def _check_host(need: int, head: str, smaller: list[str]) -> None:
    """Refuse ``need`` bytes of this process's memory where it can get less."""
    have, share = host_available(), _local_processes()
    if have is not None and need > have // share:
        whose = f" ({gib(have)} shared by {share} processes on this node)" if share > 1 else ""
        fix = _either(["run on more nodes (processes with memory of their own)", *smaller])
        raise FieldTooLargeError(
            f"{head}: {gib(need)}, but it can get {gib(have // share)}{whose}; {fix}"
        )


def _either(fixes: list[str]) -> str:
    """``a, b or c``.

    >>> _either(["a", "b", "c"])
    'a, b or c'
    """
    return ", ".join(fixes[:-1]) + f" or {fixes[-1]}" if len(fixes) > 1 else fixes[0]
