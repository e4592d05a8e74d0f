"""Reading a checkpoint back: check the manifest against the expected state, read own cells."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import jax
import numpy as np

from pgas.globalview.array import GlobalArray
from pgas.io.checkpoint.store import (
    CheckpointError,
    CheckpointMismatchError,
    CorruptCheckpointError,
    agree,
    check_tiling,
    json_meta,
    read_manifest,
    state_fields,
    version_dir,
)
from pgas.io.checksum import sha256

__all__ = ["load"]


def _diff(expected: Any, found: Any, prefix: str = "meta") -> list[str]:
    if isinstance(expected, dict) and isinstance(found, dict):
        out = []
        for k in sorted(set(expected) | set(found)):
            if k not in found:
                out.append(f"{prefix}[{k!r}] expected {expected[k]!r}, the checkpoint has none")
            elif k not in expected:
                out.append(f"{prefix}[{k!r}] = {found[k]!r} in the checkpoint, not expected")
            else:
                out += _diff(expected[k], found[k], f"{prefix}[{k!r}]")
        return out
    if expected == found:
        return []
    return [f"{prefix} expected {expected!r}, the checkpoint has {found!r}"]


class _BlockReader:
    """Reads logical regions of one field from its block files, checking each block once."""

    def __init__(self, version: Path, field: dict, dtype: np.dtype):
        self.version, self.field, self.dtype = version, field, dtype
        self.checked: dict[str, np.ndarray] = {}

    def _block(self, b: dict) -> np.ndarray:
        name = b["file"]
        if name not in self.checked:
            path = self.version / name
            try:
                data = np.load(path, allow_pickle=False)
            except FileNotFoundError:
                raise CorruptCheckpointError(
                    f"checkpoint {str(self.version)!r}, field {self.field['name']}: block file "
                    f"{name} is missing; the checkpoint is partial, restart from another one"
                ) from None
            except (OSError, ValueError) as err:
                raise CorruptCheckpointError(
                    f"checkpoint {str(self.version)!r}: block file {name} is unreadable ({err})"
                ) from None
            if (
                list(data.shape) != b["shape"]
                or data.dtype != self.dtype
                or (sha256(data) != b["sha256"])
            ):
                raise CorruptCheckpointError(
                    f"checkpoint {str(self.version)!r}, field {self.field['name']}: block file "
                    f"{name} does not match its sha256/shape/dtype in the manifest; the "
                    f"checkpoint is damaged, restart from another one"
                )
            self.checked[name] = data
        return self.checked[name]

    def region(self, lo: tuple[int, ...], hi: tuple[int, ...]) -> np.ndarray:
        out = np.zeros([h - low for low, h in zip(lo, hi, strict=True)], self.dtype)
        for b in self.field["blocks"]:
            blo = b["offset"]
            bhi = [o + n for o, n in zip(blo, b["shape"], strict=True)]
            a = [max(x, y) for x, y in zip(lo, blo, strict=True)]
            z = [min(x, y) for x, y in zip(hi, bhi, strict=True)]
            if any(x >= y for x, y in zip(a, z, strict=True)):
                continue
            src = tuple(slice(x - o, y - o) for x, y, o in zip(a, z, blo, strict=True))
            dst = tuple(slice(x - o, y - o) for x, y, o in zip(a, z, lo, strict=True))
            out[dst] = self._block(b)[src]
        return out


def _restore(like: GlobalArray, reader: _BlockReader) -> GlobalArray:
    """Build ``like``'s physical array shard by shard, reading only real (unpadded) cells."""
    layout = like.layout

    def callback(index):
        index = tuple(index) + (slice(None),) * (layout.ndim - len(index))
        pairs = [ax.global_index(np.arange(*sl.indices(ax.padded)))
                 for ax, sl in zip(layout.axes, index)]  # fmt: skip
        coords, valid = [c for c, _ in pairs], [v for _, v in pairs]
        real = [c[v] for c, v in zip(coords, valid, strict=True)]
        lo = tuple(int(r.min()) for r in real)
        hi = tuple(int(r.max()) + 1 for r in real)
        region = reader.region(lo, hi)
        out = np.zeros(tuple(len(c) for c in coords), like.dtype)
        where = np.ix_(*(np.flatnonzero(v) for v in valid))
        out[where] = region[np.ix_(*(r - a for r, a in zip(real, lo, strict=True)))]
        return out

    data = jax.make_array_from_callback(layout.physical_shape, layout.sharding, callback)
    return GlobalArray(data, layout)


def load(
    path: str | os.PathLike[str],
    like_state: Any,
    *,
    meta: Mapping[str, Any] | None,
) -> tuple[Any, int]:
    """Read the checkpoint at ``path`` into arrays laid out like ``like_state``.

    Call it on every process. Each process reads only the cells of its own
    shards; the checkpoint may have been written by another number of
    processes or devices.

    Args:
        path: the checkpoint directory given to :func:`save` (or one version
            directory inside it).
        like_state: a pytree of :class:`pgas.GlobalArray` with the expected
            structure, shapes and dtypes, laid out (mesh, spec, boundary,
            halo) as the restarted run needs; its values are not used.
        meta: the problem description; must equal the one saved.

    Returns:
        ``(state, step)``: the restored state (same structure as ``like_state``)
        and the number of steps done when it was saved.

    Raises:
        CheckpointMismatchError: fields, shape, dtype or meta differ.
        CorruptCheckpointError: missing, partial or damaged checkpoint.

    >>> import numpy as np, pgas, tempfile
    >>> mesh, d = pgas.make_mesh(devices=1), tempfile.mkdtemp()
    >>> from pgas.io.checkpoint import save
    >>> _ = save(d, pgas.full((2,), 7, mesh, dtype="uint8"), step=3, meta={"seed": 1})
    >>> u, step = load(d, pgas.zeros((2,), mesh, dtype="uint8"), meta={"seed": 1})
    >>> step, u.to_numpy()
    (3, array([7, 7], dtype=uint8))
    """
    expected_meta = json_meta(meta)
    names, arrays = state_fields(like_state, "like_state")
    treedef = jax.tree_util.tree_structure(like_state, is_leaf=lambda x: isinstance(x, GlobalArray))
    error, result = None, None
    try:
        version = version_dir(path)
        manifest = read_manifest(version)
        fields = manifest["fields"]
        where = f"checkpoint {str(version)!r}"
        found = [f["name"] for f in fields]
        if found != names:
            raise CheckpointMismatchError(
                f"{where} holds fields {found}, the state expects {names}; load it with a "
                f"state of the same structure (or it is another problem's checkpoint)"
            )
        for f, arr in zip(fields, arrays, strict=True):
            if tuple(f["shape"]) != arr.shape:
                raise CheckpointMismatchError(
                    f"{where}, field {f['name']}: shape {tuple(f['shape'])} in the checkpoint, "
                    f"{arr.shape} expected; it belongs to another problem size"
                )
            if np.dtype(f["dtype"]) != arr.dtype:
                raise CheckpointMismatchError(
                    f"{where}, field {f['name']}: dtype {np.dtype(f['dtype'])} in the "
                    f"checkpoint, {arr.dtype} expected; restart with the dtype it was saved with"
                )
        differences = _diff(expected_meta, manifest.get("meta", {}))
        if differences:
            raise CheckpointMismatchError(
                f"{where} was saved for another problem: {'; '.join(differences)}; pass the "
                f"meta of the run that wrote it, or start from scratch"
            )
        out = []
        for f, arr in zip(fields, arrays, strict=True):
            check_tiling(f["name"], arr.shape, f["blocks"], str(version))
            out.append(_restore(arr, _BlockReader(version, f, arr.dtype)))
        result = (jax.tree_util.tree_unflatten(treedef, out), int(manifest["step"]))
    except CheckpointError as err:
        error = err
    except (KeyError, TypeError, ValueError) as err:
        error = CorruptCheckpointError(
            f"checkpoint at {str(path)!r}: the manifest is malformed ({type(err).__name__}: "
            f"{err}); restart from another checkpoint"
        )
    agree(error, "loading the checkpoint")
    assert result is not None
    return result
