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
from jax.sharding import AxisType, Mesh

from pgas.errors import DeviceCountError, MeshError
from pgas.grid.decomposition import dims_create
from pgas.runtime.devices import use_cpu_devices

__all__ = ["make_mesh", "use_cpu_devices", "platform_of"]


def platform_of(mesh: Mesh) -> str:
    """``"gpu"`` for a mesh of CUDA or ROCm devices, else ``"cpu"`` (what pgas tells apart).

    >>> import pgas
    >>> platform_of(pgas.make_mesh(devices=1))
    'cpu'
    """
    return "gpu" if mesh.devices.flat[0].platform in ("gpu", "cuda", "rocm") else "cpu"


def make_mesh(
    axis_names: Sequence[str] = ("x",),
    shape: Sequence[int] | None = None,
    devices: int | Sequence[jax.Device] | None = None,
) -> Mesh:
    """Build a mesh of named axes over all devices, a count of them, or a list.

    Args:
        axis_names: one name per mesh axis (1 to 3 axes), e.g. ``("y", "x")``.
        shape: devices per axis; by default ``dims_create(count, len(axis_names))``.
            One entry may be ``-1``: that axis takes the devices the others leave.
        devices: ``None`` for all devices (of every process), an ``int`` for the
            first that many, or an explicit list.

    Returns:
        A :class:`jax.sharding.Mesh` with Auto axis types.

    Raises:
        MeshError: on a bad axis name list or a shape that does not multiply out.
        DeviceCountError: when ``devices`` is below 1, or more devices are asked for than
            exist.

    >>> mesh = make_mesh(("x",), devices=1)
    >>> dict(mesh.shape)
    {'x': 1}
    >>> dict(make_mesh(("x", "y"), shape=(-1, 1), devices=1).shape)
    {'x': 1, 'y': 1}
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
        if devices < 1:
            raise DeviceCountError(
                f"devices = {devices!r}: give a whole number >= 1 (how many devices the mesh "
                f"uses), a list of devices, or None for all of them"
            )
        if devices > len(available):
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
    shape = _infer_shape(tuple(int(s) for s in shape), names, len(devs))
    if math.prod(shape) != len(devs):
        raise MeshError(
            f"shape = {shape} holds {math.prod(shape)} devices but {len(devs)} are used; "
            f"pick a shape whose product is {len(devs)}, or pass devices={math.prod(shape)}"
        )
    grid = np.array(devs, dtype=object).reshape(shape)
    return Mesh(grid, names, axis_types=(AxisType.Auto,) * len(names))


def _infer_shape(shape: tuple[int, ...], names: tuple[str, ...], count: int) -> tuple[int, ...]:
    """Check a mesh shape's length and sizes; replace one ``-1`` by what is left of ``count``."""
    if len(shape) != len(names):
        raise MeshError(
            f"shape = {shape} has {len(shape)} entries for axes {names}; give one size per axis"
        )
    if shape.count(-1) > 1 or any(s < 1 and s != -1 for s in shape):
        example = (-1,) + (1,) * (len(shape) - 1)
        raise MeshError(
            f"shape = {shape}: give sizes >= 1, with at most one -1 (the axis that takes the "
            f"devices the others leave), e.g. {example}"
        )
    if -1 not in shape:
        return shape
    known = math.prod(s for s in shape if s != -1)
    if count % known:
        raise MeshError(
            f"shape = {shape}: the other axes hold {known} devices, which does not divide the "
            f"{count} devices used; pick sizes whose product divides {count}, or pass "
            f"devices={known * max(count // known, 1)}"
        )
    return tuple(count // known if s == -1 else s for s in shape)
