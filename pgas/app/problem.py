"""Problem: one stencil problem, written for every backend.

A :class:`Problem` bundles what the automatic, explicit and MPI paths need to
solve the same global problem: the shape, dtype, boundary and halo of the
field, an initial condition as a function of global cell indices, the
global-view ``step`` (automatic path) and the local ``kernel`` on a block with
halo cells plus the ``region`` it writes (explicit and MPI paths). The
examples define their problems; :mod:`pgas.compare` runs one on all three
backends.

A problem is named by a *source*, ``"path/to/file.py:factory"`` or
``"package.module:factory"``, plus keyword arguments, so that an ``mpiexec``
worker process can rebuild it.
"""

from __future__ import annotations

import dataclasses
import importlib
import importlib.util
import inspect
import math
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from pgas.errors import PgasError
from pgas.io.checksum import checksum

__all__ = ["Problem", "load_problem", "checksum", "demo"]


@dataclasses.dataclass(frozen=True)
class Problem:
    """A stencil problem for all backends.

    Attributes:
        name: short name (``"heat1d"``, ``"life"``).
        shape: global shape.
        dtype: NumPy dtype name.
        init: ``init(*global_index_arrays) -> values`` (NumPy, elementwise).
        step: global-view step on a :class:`pgas.GlobalArray` (automatic path).
        kernel: local kernel ``kernel(ext) -> new`` (explicit and MPI paths).
        boundary: boundary condition(s) of the field.
        halo: halo width.
        region: global slices the kernel writes (``None``: everything).
        mesh_axes: mesh axis names, one per array axis.
        bytes_per_cell: bytes a step must move per cell (roofline).
        decode: maps stored values to the cells users see (e.g. bit-packed words
            to a uint8 board), applied to gathered fields and blocks before
            checksums, diagnostics and output; ``None``: stored values are cells.
            A plain function expands each value to a fixed number of cells per
            axis; a representation whose blocks hold different numbers of cells
            is a :class:`pgas.io.blocks.Decoding`, which also maps a block's region.
        cell_shape: the shape of the decoded field (default ``shape``): what a
            run reports and cell updates per second count.
        params: ``params(*global_index_arrays) -> values``: a read-only field
            (Jacobi's right-hand side) that ``step``, ``kernel`` and the tests
            also read, as their second argument (``step(u, b)``, ``kernel(e, b)``,
            ``b`` with the same halo as ``e``); iterative problems only.
        converged: makes the problem *iterative*: a run of ``steps`` runs until
            ``converged(u)`` (``converged(u, b)`` with ``params``) holds, at most
            ``steps`` steps (:func:`pgas.run_until`); a global-view test such as
            ``pgas.max(abs(r)) < tol``.
        local_converged: the same test on a block, for the explicit and MPI
            paths: ``local_converged(e, reduce)`` (``(e, b, reduce)`` with
            ``params``), see :func:`pgas.explicit.run_until`.
        check_every: steps between tests (an int >= 1, or ``"auto"``: 64 on every
            backend, :func:`pgas.app.iterate.check_every`).

    >>> p = Problem("demo", (8,), "float32", lambda i: i * 1.0, lambda u: u, lambda e: e,
    ...             None, 0, None, ("x",))
    >>> p.cells
    8
    """

    name: str
    shape: tuple[int, ...]
    dtype: str
    init: Callable[..., Any]
    step: Callable
    kernel: Callable
    boundary: object
    halo: int
    region: tuple[slice, ...] | None
    mesh_axes: tuple[str, ...]
    bytes_per_cell: int = 0
    decode: Callable[[np.ndarray], np.ndarray] | None = None
    cell_shape: tuple[int, ...] | None = None
    params: Callable[..., Any] | None = None
    converged: Callable[..., Any] | None = None
    local_converged: Callable[..., Any] | None = None
    check_every: int | str = "auto"

    def __post_init__(self) -> None:
        if (self.converged is None) != (self.local_converged is None):
            raise PgasError(
                f"problem {self.name!r}: give converged (the global-view test) and "
                f"local_converged (the same test on a block) together, or neither"
            )
        if self.params is not None and self.converged is None:
            raise PgasError(
                f"problem {self.name!r}: params (a read-only field) is for iterative problems; "
                f"give converged and local_converged too"
            )

    @property
    def iterative(self) -> bool:
        """Whether a run iterates until ``converged`` holds (``steps``: the most steps)."""
        return self.converged is not None

    @property
    def cells(self) -> int:
        """Cells of the field users see (``cell_shape``, else ``shape``)."""
        return math.prod(self.cell_shape or self.shape)

    @property
    def cells_per_value(self) -> int:
        """Cells ``init`` computes per stored value (64 for bit-packed words; else 1)."""
        return max(1, -(-self.cells // max(1, math.prod(self.shape))))


def load_problem(source: str, **kwargs) -> Problem:
    """Build a problem from ``"file.py:factory"`` or ``"module:factory"`` and keywords.

    >>> load_problem("pgas.problem:demo").name
    'demo'
    """
    where, sep, name = source.rpartition(":")
    if not sep or not where or not name:
        raise PgasError(
            f"problem source = {source!r}: write 'path/to/file.py:factory' or "
            f"'package.module:factory'"
        )
    if where.endswith(".py"):
        path = Path(where)
        if not path.is_file():
            raise PgasError(f"problem source {source!r}: file {where!r} does not exist")
        module_name = f"_pgas_problem_{path.stem}"
        module = sys.modules.get(module_name)
        if module is None:
            spec = importlib.util.spec_from_file_location(module_name, path)
            module = importlib.util.module_from_spec(spec)
            sys.modules[module_name] = module
            spec.loader.exec_module(module)
    else:
        module = importlib.import_module(where)
    factory = getattr(module, name, None)
    if not callable(factory):
        raise PgasError(f"problem source {source!r}: {where} has no function {name!r}")
    try:
        signature = inspect.signature(factory)
    except (TypeError, ValueError):  # a builtin without a signature: call it as it is
        signature = None
    try:
        if signature is not None:
            signature.bind(**kwargs)
    except TypeError as err:
        takes = ", ".join(signature.parameters) or "no arguments"
        raise PgasError(
            f"problem source {source!r}: {err}; {name} takes {takes} (give them with "
            f"--set KEY=VALUE)"
        ) from None
    if signature is not None:
        _check_types(name, signature, kwargs)
    try:
        problem = factory(**kwargs)
    except (TypeError, ValueError) as err:
        if isinstance(err, PgasError) or not kwargs:
            raise
        given = ", ".join(f"{k}={v!r}" for k, v in kwargs.items())
        raise PgasError(f"{name}({given}) refused its arguments: {err}") from err
    if not isinstance(problem, Problem):
        raise PgasError(f"{source} returned {type(problem).__name__}, not a pgas Problem")
    return problem


def _check_types(name: str, signature: inspect.Signature, kwargs: dict) -> None:
    """``--set KEY=VALUE`` whose value is not of the type of KEY's default: name both."""
    for key, value in kwargs.items():
        param = signature.parameters.get(key)
        default = None if param is None else param.default
        if default is None or default is inspect.Parameter.empty:
            continue
        want = type(default)
        ok = isinstance(value, want) and not (want is not bool and isinstance(value, bool))
        if want is float and isinstance(value, int) and not isinstance(value, bool):
            ok = True
        if not ok:
            raise PgasError(
                f"--set {key}={value!r}: {name}'s {key} takes {_kind(want)} (default "
                f"{default!r}), not {type(value).__name__}; e.g. --set {key}={default!r}"
            )


def _kind(t: type) -> str:
    return {int: "a whole number (int)", float: "a number (float)", bool: "true or false",
            str: "a string"}.get(t, t.__name__)  # fmt: skip


def demo(n: int = 8) -> Problem:
    """A problem whose step changes nothing: ``n`` cells ``0, 1, ...`` (doctests, smoke tests).

    >>> demo(4).shape
    (4,)
    """
    return Problem("demo", (n,), "float32", lambda i: i * 1.0, lambda u: u, lambda e: e,
                   None, 0, None, ("x",))  # fmt: skip
