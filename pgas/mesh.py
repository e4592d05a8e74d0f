"""Device meshes with named axes, and virtual CPU devices for laptops and tests.

A mesh is a plain :class:`jax.sharding.Mesh` whose axes are of the *Auto* type,
so that JAX's Shardy partitioner, not the user, places the communication of a
global-view program. :func:`make_mesh` decomposes N devices over k axes like
``MPI_Dims_create`` or takes an explicit shape.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import jax
import numpy as np
from jax._src import xla_bridge
from jax.sharding import AxisType, Mesh

from pgas.decomposition import dims_create
from pgas.errors import DeviceCountError, MeshError

__all__ = ["make_mesh", "use_cpu_devices"]


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
    if not isinstance(count, int) or count < 1:
        raise DeviceCountError(f"count = {count!r}: ask for a whole number of devices >= 1")
    if xla_bridge.backends_are_initialized():
        have = len(jax.devices("cpu"))
        if have != count:
            raise DeviceCountError(
                f"use_cpu_devices({count}): JAX has already started with {have} CPU "
                f"device(s) and cannot change; call pgas.use_cpu_devices before any "
                f"JAX array is made, or set XLA_FLAGS=--xla_force_host_platform_device_count="
                f"{count} in the environment"
            )
        return
    jax.config.update("jax_num_cpu_devices", count)


def make_mesh(
    axis_names: Sequence[str] = ("x",),
    shape: Sequence[int] | None = None,
    devices: int | Sequence[jax.Device] | None = None,
) -> Mesh:
    """Build a mesh of named axes over all devices, a count of them, or a list.

    Args:
        axis_names: one name per mesh axis (1 to 3 axes), e.g. ``("y", "x")``.
        shape: devices per axis; by default ``dims_create(count, len(axis_names))``.
        devices: ``None`` for all devices (of every process), an ``int`` for the
            first that many, or an explicit list.

    Returns:
        A :class:`jax.sharding.Mesh` with Auto axis types.

    Raises:
        MeshError: on a bad axis name list or a shape that does not multiply out.
        DeviceCountError: when more devices are asked for than exist.

    >>> mesh = make_mesh(("x",), devices=1)
    >>> dict(mesh.shape)
    {'x': 1}
    """
    names = (axis_names,) if isinstance(axis_names, str) else tuple(axis_names)
    if not 1 <= len(names) <= 3 or len(set(names)) != len(names):
        raise MeshError(
            f"axis_names = {names!r}: give 1 to 3 distinct names, e.g. ('x',) or ('y', 'x')"
        )
    if not all(isinstance(n, str) and n for n in names):
        raise MeshError(f"axis_names = {names!r}: every axis name must be a non-empty string")
    available = jax.devices()
    if devices is None:
        devs = list(available)
    elif isinstance(devices, int):
        if not 1 <= devices <= len(available):
            raise DeviceCountError(
                f"devices = {devices}, but only {len(available)} device(s) exist; ask for at "
                f"most {len(available)}, or call pgas.use_cpu_devices({devices}) before JAX "
                f"starts to get virtual CPU devices"
            )
        devs = list(available[:devices])
    else:
        devs = list(devices)
    if shape is None:
        shape = dims_create(len(devs), len(names))
    shape = tuple(int(s) for s in shape)
    if len(shape) != len(names):
        raise MeshError(
            f"shape = {shape} has {len(shape)} entries for axes {names}; give one size per axis"
        )
    if math.prod(shape) != len(devs):
        raise MeshError(
            f"shape = {shape} holds {math.prod(shape)} devices but {len(devs)} are used; "
            f"pick a shape whose product is {len(devs)}, or pass devices={math.prod(shape)}"
        )
    grid = np.array(devs, dtype=object).reshape(shape)
    return Mesh(grid, names, axis_types=(AxisType.Auto,) * len(names))
