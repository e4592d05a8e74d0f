"""The on-disk format of a checkpoint: names, errors, the manifest, and the processes' agreement.

Shared by :mod:`pgas.checkpoint.writer` and :mod:`pgas.checkpoint.reader`; the
contract is in :mod:`pgas.checkpoint`.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import jax
import numpy as np

from pgas.errors import PgasError
from pgas.globalview.array import GlobalArray

__all__ = [
    "FORMAT",
    "FORMAT_VERSION",
    "LATEST",
    "MANIFEST",
    "CheckpointError",
    "CheckpointMismatchError",
    "CorruptCheckpointError",
    "state_fields",
    "json_meta",
    "write_json",
    "fsync_dir",
    "multi_process",
    "agree",
    "check_tiling",
    "read_latest",
    "version_dir",
    "read_manifest",
    "latest",
]


FORMAT = "pgas-checkpoint"


FORMAT_VERSION = 1


LATEST = "LATEST"


MANIFEST = "manifest.json"


class CheckpointError(PgasError):
    """A checkpoint that cannot be written or read."""


class CheckpointMismatchError(CheckpointError):
    """A complete checkpoint of a different problem (shape, dtype, fields or meta)."""


class CorruptCheckpointError(CheckpointError):
    """A checkpoint that is missing, partial or damaged."""


def state_fields(state: Any, what: str) -> tuple[list[str], list[GlobalArray]]:
    """The pytree paths and global arrays of ``state``; CheckpointError for any other leaf."""
    leaves = jax.tree_util.tree_flatten_with_path(
        state, is_leaf=lambda x: isinstance(x, GlobalArray)
    )[0]
    names, arrays = [], []
    for path, leaf in leaves:
        name = jax.tree_util.keystr(path) or "state"
        if not isinstance(leaf, GlobalArray):
            raise CheckpointError(
                f"{what} leaf {name} is a {type(leaf).__name__}; checkpoints hold pytrees of "
                f"pgas.GlobalArray only: make it a GlobalArray or keep it in meta"
            )
        if leaf.batch_ndim:
            raise CheckpointError(
                f"{what} leaf {name} has {leaf.batch_ndim} batch axes (stacked snapshots); "
                f"checkpoint the state, not the snapshots"
            )
        names.append(name)
        arrays.append(leaf)
    if not arrays:
        raise CheckpointError(f"{what} holds no pgas.GlobalArray; pass the simulation state")
    return names, arrays


def json_meta(meta: Mapping[str, Any] | None) -> dict:
    """``meta`` as it reads back from JSON (keys sorted, non-JSON values as strings)."""
    if meta is None:
        return {}
    if not isinstance(meta, Mapping):
        raise CheckpointError(f"meta = {meta!r}: give a dict (e.g. {{'stencil': 'heat'}})")
    try:
        return json.loads(json.dumps(dict(meta), sort_keys=True, default=str))
    except (TypeError, ValueError) as err:
        raise CheckpointError(f"meta = {meta!r} cannot be stored as JSON ({err})") from None


def write_json(path: Path, obj: Any) -> None:
    """Write ``obj`` as JSON and fsync it."""
    with open(path, "w") as f:
        json.dump(obj, f, indent=1, sort_keys=True)
        f.flush()
        os.fsync(f.fileno())


def fsync_dir(path: Path) -> None:
    """Fsync a directory (its entries), where the system allows it."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def multi_process() -> bool:
    """Whether this JAX job has more than one process."""
    return jax.process_count() > 1


def agree(error: BaseException | None, what: str) -> None:
    """Raise on every process if any process failed (so no one waits in a collective)."""
    if not multi_process():
        if error is not None:
            raise error
        return
    from jax.experimental import multihost_utils

    flags = np.asarray(
        multihost_utils.process_allgather(np.array([error is not None], np.int32))
    ).reshape(-1)
    if error is not None:
        raise error
    bad = [int(p) for p in np.flatnonzero(flags)]
    if bad:
        raise CheckpointError(f"{what} failed on process(es) {bad}; see their error messages")


def check_tiling(name: str, shape: tuple[int, ...], blocks: list[dict], where: str) -> None:
    """The blocks of one field must cover it exactly (total size and no overlap)."""
    total = sum(math.prod(b["shape"]) for b in blocks)
    starts = {tuple(b["offset"]) for b in blocks}
    inside = all(
        0 <= o and o + n <= s
        for b in blocks
        for o, n, s in zip(b["offset"], b["shape"], shape, strict=True)
    )
    if total != math.prod(shape) or len(starts) != len(blocks) or not inside:
        raise CorruptCheckpointError(
            f"checkpoint {where!r}, field {name}: its {len(blocks)} block(s) hold {total} cells "
            f"for shape {tuple(shape)} ({math.prod(shape)} cells); it is partial or damaged: "
            f"restart from another checkpoint"
        )


def read_latest(root: Path) -> str:
    """The version directory name ``LATEST`` points at."""
    try:
        return (root / LATEST).read_text().strip()
    except OSError as err:
        raise CorruptCheckpointError(
            f"no complete checkpoint at {str(root)!r} ({LATEST} unreadable: {err}); save one "
            f"first, or give the directory of a checkpoint"
        ) from None


def version_dir(path: str | os.PathLike[str]) -> Path:
    """The version a path means: a checkpoint directory (its ``LATEST``) or one version."""
    root = Path(path)
    if (root / MANIFEST).exists() and not (root / LATEST).exists():
        return root  # a version directory given directly
    if not root.is_dir():
        raise CorruptCheckpointError(
            f"path = {str(root)!r}: no checkpoint there (not a directory); check the path"
        )
    return root / read_latest(root)


def read_manifest(version: Path) -> dict:
    """The manifest of a version, checked for its format; CorruptCheckpointError if unreadable."""
    try:
        manifest = json.loads((version / MANIFEST).read_text())
    except FileNotFoundError:
        raise CorruptCheckpointError(
            f"checkpoint {str(version)!r} has no {MANIFEST}: it is incomplete (a save was "
            f"interrupted or files were removed); restart from another checkpoint"
        ) from None
    except (OSError, ValueError) as err:
        raise CorruptCheckpointError(
            f"checkpoint {str(version)!r}: {MANIFEST} is unreadable ({err}); the checkpoint "
            f"is damaged, restart from another one"
        ) from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise CorruptCheckpointError(
            f"{str(version / MANIFEST)!r} is not a pgas checkpoint manifest"
        )
    if manifest.get("format_version") != FORMAT_VERSION:
        raise CheckpointMismatchError(
            f"checkpoint {str(version)!r} has format_version = {manifest.get('format_version')}"
            f", this pgas reads {FORMAT_VERSION}; use the pgas version that wrote it "
            f"({manifest.get('pgas_version')})"
        )
    return manifest


def latest(path: str | os.PathLike[str]) -> int | None:
    """The step of the complete checkpoint at ``path``, or None if there is none.

    >>> import tempfile
    >>> latest(tempfile.mkdtemp()) is None
    True
    """
    try:
        return int(read_manifest(version_dir(path))["step"])
    except (CheckpointError, KeyError, TypeError, ValueError):
        return None
