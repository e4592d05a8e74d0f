"""Writing a checkpoint: prepare a temporary version, write every process's blocks, commit."""

from __future__ import annotations

import json
import os
import shutil
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import jax
import numpy as np

from pgas.globalview.array import GlobalArray
from pgas.io.blocks import host_blocks
from pgas.io.checkpoint.store import (
    FORMAT,
    FORMAT_VERSION,
    LATEST,
    MANIFEST,
    CheckpointError,
    agree,
    check_tiling,
    fsync_dir,
    json_meta,
    read_latest,
    state_fields,
    write_json,
)
from pgas.io.checksum import sha256

__all__ = ["save"]


def _tmp_name(step: int) -> str:
    return f".tmp-step-{step:09d}"


def _commit(tmp: Path, root: Path, step: int, keep: int) -> Path:
    """Rename the finished ``tmp`` into place and point ``LATEST`` at it (process 0)."""
    final = root / f"step-{step:09d}-{uuid.uuid4().hex[:8]}"
    os.rename(tmp, final)
    fsync_dir(root)
    pointer = root / f".{LATEST}.{uuid.uuid4().hex[:8]}"
    with open(pointer, "w") as f:
        f.write(final.name + "\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(pointer, root / LATEST)
    fsync_dir(root)
    # prune: keep the newest ``keep`` complete versions, remove debris
    versions = sorted(
        (p for p in root.iterdir() if p.name.startswith("step-") and p != final),
        key=lambda p: p.stat().st_mtime,
    )
    old = [p for p in versions if (p / MANIFEST).exists()][::-1][: keep - 1]
    for p in root.iterdir():
        if p == final or p in old or p.name == LATEST:
            continue
        if p.name.startswith(("step-", ".tmp-step-", f".{LATEST}.")):
            shutil.rmtree(p, ignore_errors=True) if p.is_dir() else p.unlink(missing_ok=True)
    return final


def save(
    path: str | os.PathLike[str],
    state: Any,
    *,
    step: int,
    meta: Mapping[str, Any] | None,
    keep: int = 1,
) -> Path:
    """Write a checkpoint of ``state`` after ``step`` steps, atomically.

    Call it on every process (it synchronises them). Three phases, each
    ending with all processes agreeing that it worked: process 0 prepares
    ``path/.tmp-step-<step>``; each process writes the blocks of its own
    shards; process 0 checks the tiling, writes the manifest and commits.

    Args:
        path: the checkpoint directory (created if needed).
        state: a :class:`pgas.GlobalArray` or a pytree (dict, tuple, ...) of them.
        step: steps done (a whole number >= 0); :func:`load` returns it.
        meta: what identifies the problem (stencil name, parameters, boundary,
            seed, ...); JSON-able; :func:`load` must be given the same.
        keep: complete versions to keep (>= 1); older ones are deleted after
            the new one is committed.

    Returns:
        The directory of the new version.

    Raises:
        CheckpointError: on a bad argument or a failed write (on every process).

    >>> import numpy as np, pgas, tempfile
    >>> u = pgas.from_numpy(np.ones(3, np.float32), pgas.make_mesh(devices=1))
    >>> save(tempfile.mkdtemp(), u, step=0, meta={}).name.startswith("step-000000000")
    True
    """
    if not isinstance(step, (int, np.integer)) or isinstance(step, bool) or step < 0:
        raise CheckpointError(
            f"step = {step!r}: give the number of steps done, a whole number >= 0"
        )
    if not isinstance(keep, int) or keep < 1:
        raise CheckpointError(f"keep = {keep!r}: keep at least 1 version")
    step = int(step)
    meta = json_meta(meta)
    names, arrays = state_fields(state, "state")
    root = Path(path)
    tmp = root / _tmp_name(step)
    first = jax.process_index() == 0
    agree(_prepare(root, tmp) if first else None, "creating the checkpoint directory")
    agree(_write_blocks(tmp, arrays), "writing the checkpoint blocks")
    final, error = (None, None)
    if first:
        final, error = _finish_version(tmp, root, names, arrays, step, meta, keep)
    agree(error, "committing the checkpoint")
    return final if final is not None else root / read_latest(root)


def _prepare(root: Path, tmp: Path) -> CheckpointError | None:
    """Process 0: create ``root`` and an empty ``tmp`` (removing a killed save's debris)."""
    try:
        if root.exists() and not root.is_dir():
            return CheckpointError(
                f"path = {str(root)!r} exists and is not a directory; give a directory "
                f"name for the checkpoint"
            )
        root.mkdir(parents=True, exist_ok=True)
        shutil.rmtree(tmp, ignore_errors=True)
        (tmp / "parts").mkdir(parents=True)
    except OSError as err:
        return CheckpointError(f"cannot create the checkpoint directory {str(tmp)!r}: {err}")
    return None


def _write_blocks(tmp: Path, arrays: list[GlobalArray]) -> CheckpointError | None:
    """Every process: its logical blocks, fsynced, and a part file listing them."""
    pid = jax.process_index()
    written = []
    try:
        for i, arr in enumerate(arrays):
            (tmp / f"f{i}").mkdir(exist_ok=True)
            for region, block in host_blocks(arr):
                offset = tuple(r.start for r in region)
                name = f"f{i}/b-{'_'.join(map(str, offset))}.npy"
                with open(tmp / name, "wb") as f:
                    np.save(f, block, allow_pickle=False)
                    f.flush()
                    os.fsync(f.fileno())
                written.append(dict(field=i, file=name, offset=list(offset),
                                    shape=list(block.shape), sha256=sha256(block)))  # fmt: skip
        write_json(tmp / "parts" / f"process-{pid:05d}.json", {"process": pid, "blocks": written})
    except OSError as err:
        return CheckpointError(f"process {pid} could not write its blocks into {str(tmp)!r}: {err}")
    return None


def _finish_version(tmp, root, names, arrays, step, meta, keep):
    """Process 0: check the tiling, write the manifest, commit; ``(final, error)``."""
    try:
        blocks = []
        for part in sorted((tmp / "parts").glob("process-*.json")):
            blocks += json.loads(part.read_text())["blocks"]
        fields = []
        for i, (name, arr) in enumerate(zip(names, arrays, strict=True)):
            mine = sorted((b for b in blocks if b["field"] == i), key=lambda b: b["offset"])
            check_tiling(name, arr.shape, mine, str(tmp))
            fields.append(dict(name=name, shape=list(arr.shape), dtype=arr.dtype.str,
                               blocks=[{k: b[k] for k in ("file", "offset", "shape", "sha256")}
                                       for b in mine]))  # fmt: skip
        from pgas._version import __version__

        manifest = dict(format=FORMAT, format_version=FORMAT_VERSION, step=step, meta=meta,
                        fields=fields, pgas_version=__version__,
                        process_count=jax.process_count(),
                        device_count=jax.device_count())  # fmt: skip
        write_json(tmp / MANIFEST, manifest)
        fsync_dir(tmp)
        return _commit(tmp, root, step, keep), None
    except (OSError, ValueError, KeyError) as err:
        if isinstance(err, CheckpointError):
            return None, err
        return None, CheckpointError(
            f"committing the checkpoint {str(tmp)!r} failed: {type(err).__name__}: {err}"
        )
