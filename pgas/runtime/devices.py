"""Devices a process starts with: virtual CPU devices for laptops and tests.

JAX fixes its device count when its backend starts; :func:`use_cpu_devices`
asks for the count before that and says so clearly when it is too late.
"""

from __future__ import annotations

import jax

from pgas.errors import DeviceCountError

__all__ = ["use_cpu_devices"]


def use_cpu_devices(count: int) -> None:
    """Ask JAX for ``count`` virtual CPU devices (stand-ins for GPUs).

    Must run before JAX starts its backend (before the first array or
    ``jax.devices()``). Calling it again with the same count is harmless.

    Args:
        count: number of CPU devices, >= 1.

    Raises:
        DeviceCountError: if JAX has already started with another count.

    >>> use_cpu_devices(len(jax.devices("cpu")))  # no-op once started with that count
    """
    if isinstance(count, bool) or not isinstance(count, int) or count < 1:
        raise DeviceCountError(f"count = {count!r}: ask for a whole number of devices >= 1")
    try:
        # Public API only: JAX raises RuntimeError once its backend runs with
        # another count, and does nothing for the same count.
        jax.config.update("jax_num_cpu_devices", count)
    except RuntimeError:
        have = len(jax.devices("cpu"))
        raise DeviceCountError(
            f"use_cpu_devices({count}): JAX has already started with {have} CPU "
            f"device(s) and cannot change; call pgas.use_cpu_devices before any "
            f"JAX array is made, or set XLA_FLAGS=--xla_force_host_platform_device_count="
            f"{count} in the environment"
        ) from None
