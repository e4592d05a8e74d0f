"""Attribute values every netCDF and Zarr writer accepts (``netcdf_safe_attrs``).

Contract: :func:`netcdf_safe_attrs` returns a new dict whose keys are ``str``
and whose values are kept when every writer takes them (``str``, real numbers:
NumPy scalars become Python numbers, integers beyond 64 bits their text; 1-D
numeric NumPy arrays, boolean ones as ``int8``) and converted otherwise:
``bool`` becomes ``int`` 0/1; tuples, lists, dicts and ``None`` become their
JSON text (``json.loads`` gives them back); anything else becomes
``str(value)``. Datasets (:mod:`pgas.io.dataset`) and snapshot stores
(:mod:`pgas.io.snapshots`, :mod:`pgas.io.output`) write their attributes
through it. Depends on NumPy only.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import numpy as np

__all__ = ["netcdf_safe_attrs"]


def netcdf_safe_attrs(attrs: Mapping[str, Any] | None) -> dict[str, Any]:
    """Convert attribute values to types every netCDF and Zarr writer accepts.

    ``str`` and real numbers are kept (NumPy scalars become Python numbers);
    ``bool`` becomes ``int`` (0 or 1); tuples, lists, dicts and ``None`` become
    JSON text; 1-D numeric NumPy arrays are kept (boolean ones as ``int8``);
    anything else becomes ``str(value)``. Keys become ``str``.

    Args:
        attrs: the attributes, or ``None``.

    Returns:
        A new dict.

    >>> netcdf_safe_attrs({"mesh": (2, 4), "periodic": True, "dt": np.float32(0.5),
    ...                    "bc": {"x": "periodic"}, "note": None})
    {'mesh': '[2, 4]', 'periodic': 1, 'dt': 0.5, 'bc': '{"x": "periodic"}', 'note': 'null'}
    """
    safe: dict[str, Any] = {}
    for key, value in (attrs or {}).items():
        safe[str(key)] = _safe_value(value)
    return safe


def _safe_value(value: Any) -> Any:
    if isinstance(value, str):
        return value
    if isinstance(value, (bool, np.bool_)):
        return int(value)
    if isinstance(value, (int, np.integer)):
        number = int(value)
        return number if -(2**63) <= number < 2**63 else str(number)
    if isinstance(value, (float, np.floating)):
        return float(value)
    if isinstance(value, np.ndarray) and value.ndim == 1:
        if value.dtype == np.bool_:
            return value.astype(np.int8)
        if np.issubdtype(value.dtype, np.integer) or np.issubdtype(value.dtype, np.floating):
            return value
    if value is None or isinstance(value, (list, tuple, dict)):
        return json.dumps(_jsonable(value))
    return str(value)


def _jsonable(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, np.generic):
        return value.item()
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return str(value)
