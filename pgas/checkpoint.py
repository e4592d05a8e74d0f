"""Checkpoint and restart of a pytree of global arrays, process-local and atomic.

Contract:

* On disk, ``path`` is a directory::

      path/LATEST                      name of the current version (replaced atomically)
      path/step-000000040-<id>/        one complete version
          manifest.json                written last; a version without it is incomplete
          parts/process-00001.json     what process 1 wrote, with a sha256 per block
          f0/b-<offsets>.npy           one logical block of field 0 (no padding)

  :func:`save` writes a new version into ``path/.tmp-step-<step>``, then
  process 0 checks that the blocks of all processes tile every field, writes
  ``manifest.json``, renames the directory to its version name and finally
  replaces ``LATEST`` with ``os.replace``. A job killed at any moment leaves
  ``LATEST`` naming either the previous complete version or the new one;
  older versions (beyond ``keep``) and debris are deleted only after that.
* Each process writes only the logical blocks of its own shards (one replica
  of each), and on :func:`load` reads only the cells of its own shards, from
  whichever blocks hold them: the process and device counts of the restart
  may differ from the writer's.
* The manifest records step, per-field name, shape and dtype, the user's
  ``meta`` (whatever identifies the problem: stencil, parameters, boundary,
  seed) and the pgas version. :func:`load` raises
  :class:`CheckpointMismatchError` naming the field and both values when the
  expected shape, dtype, field names or ``meta`` differ, and
  :class:`CorruptCheckpointError` for a missing or unreadable manifest, a
  missing block or a checksum mismatch; with several processes the error is
  raised on all of them (nobody is left waiting in a collective).

>>> import numpy as np, pgas, tempfile
>>> from pgas import checkpoint
>>> mesh = pgas.make_mesh(devices=1)
>>> u = pgas.from_numpy(np.arange(5.0, dtype=np.float32), mesh)
>>> d = tempfile.mkdtemp()
>>> _ = checkpoint.save(d, {"u": u}, step=10, meta={"stencil": "heat"})
>>> state, step = checkpoint.load(d, {"u": pgas.zeros((5,), mesh)}, meta={"stencil": "heat"})
>>> step, state["u"].to_numpy()
(10, array([0., 1., 2., 3., 4.], dtype=float32))
>>> checkpoint.latest(d)
10
"""

from __future__ import annotations

import json
import math
import os
import shutil
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import jax
import numpy as np

from pgas.array import GlobalArray
from pgas.errors import PgasError
from pgas.problem import checksum

__all__ = [
    "CheckpointError",
    "CheckpointMismatchError",
    "CorruptCheckpointError",
    "latest",
    "load",
    "save",
]

FORMAT = "pgas-checkpoint"
FORMAT_VERSION = 1
_LATEST = "LATEST"
_MANIFEST = "manifest.json"


class CheckpointError(PgasError):
    """A checkpoint that cannot be written or read."""


class CheckpointMismatchError(CheckpointError):
    """A complete checkpoint of a different problem (shape, dtype, fields or meta)."""


class CorruptCheckpointError(CheckpointError):
    """A checkpoint that is missing, partial or damaged."""


# ---------------------------------------------------------------------------- helpers
def _fields(state: Any, what: str) -> tuple[list[str], list[GlobalArray]]:
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


def _jsonable(meta: Mapping[str, Any] | None) -> dict:
    if meta is None:
        return {}
    if not isinstance(meta, Mapping):
        raise CheckpointError(f"meta = {meta!r}: give a dict (e.g. {{'stencil': 'heat'}})")
    try:
        return json.loads(json.dumps(dict(meta), sort_keys=True, default=str))
    except (TypeError, ValueError) as err:
        raise CheckpointError(f"meta = {meta!r} cannot be stored as JSON ({err})") from None


def _write_json(path: Path, obj: Any) -> None:
    with open(path, "w") as f:
        json.dump(obj, f, indent=1, sort_keys=True)
        f.flush()
        os.fsync(f.fileno())


def _fsync_dir(path: Path) -> None:
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


def _multi() -> bool:
    return jax.process_count() > 1


def _barrier(name: str) -> None:
    if _multi():
        from jax.experimental import multihost_utils

        multihost_utils.sync_global_devices(name)


def _agree(error: BaseException | None, what: str) -> None:
    """Raise on every process if any process failed (so no one waits in a collective)."""
    if not _multi():
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


def _logical_blocks(arr: GlobalArray):
    """(offset, local logical data) of each distinct block this process owns."""
    lay = arr.layout
    for shard in arr.data.addressable_shards:
        if shard.replica_id != 0:
            continue
        offset, sel = [], []
        for ax, sl in zip(lay.axes, shard.index, strict=True):
            b = (sl.start or 0) // ax.block
            offset.append(ax.offset(b))
            sel.append(slice(0, ax.length(b)))
        yield tuple(offset), np.asarray(shard.data)[tuple(sel)]


def _tmp_name(step: int) -> str:
    return f".tmp-step-{step:09d}"


# ---------------------------------------------------------------------------- save
def _commit(tmp: Path, root: Path, step: int, keep: int) -> Path:
    """Rename the finished ``tmp`` into place and point ``LATEST`` at it (process 0)."""
    final = root / f"step-{step:09d}-{uuid.uuid4().hex[:8]}"
    os.rename(tmp, final)
    _fsync_dir(root)
    pointer = root / f".{_LATEST}.{uuid.uuid4().hex[:8]}"
    with open(pointer, "w") as f:
        f.write(final.name + "\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(pointer, root / _LATEST)
    _fsync_dir(root)
    # prune: keep the newest ``keep`` complete versions, remove debris
    versions = sorted(
        (p for p in root.iterdir() if p.name.startswith("step-") and p != final),
        key=lambda p: p.stat().st_mtime,
    )
    old = [p for p in versions if (p / _MANIFEST).exists()][::-1][: keep - 1]
    for p in root.iterdir():
        if p == final or p in old or p.name == _LATEST:
            continue
        if p.name.startswith(("step-", ".tmp-step-", f".{_LATEST}.")):
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
    meta = _jsonable(meta)
    names, arrays = _fields(state, "state")
    root = Path(path)
    tmp = root / _tmp_name(step)
    first = jax.process_index() == 0
    _agree(_prepare(root, tmp) if first else None, "creating the checkpoint directory")
    _agree(_write_blocks(tmp, arrays), "writing the checkpoint blocks")
    final, error = (None, None)
    if first:
        final, error = _finish_version(tmp, root, names, arrays, step, meta, keep)
    _agree(error, "committing the checkpoint")
    return final if final is not None else root / _read_latest(root)


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
            for offset, block in _logical_blocks(arr):
                name = f"f{i}/b-{'_'.join(map(str, offset))}.npy"
                with open(tmp / name, "wb") as f:
                    np.save(f, block, allow_pickle=False)
                    f.flush()
                    os.fsync(f.fileno())
                written.append(dict(field=i, file=name, offset=list(offset),
                                    shape=list(block.shape), sha256=checksum(block)))  # fmt: skip
        _write_json(tmp / "parts" / f"process-{pid:05d}.json", {"process": pid, "blocks": written})
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
            _check_tiling(name, arr.shape, mine, str(tmp))
            fields.append(dict(name=name, shape=list(arr.shape), dtype=arr.dtype.str,
                               blocks=[{k: b[k] for k in ("file", "offset", "shape", "sha256")}
                                       for b in mine]))  # fmt: skip
        from pgas import __version__

        manifest = dict(format=FORMAT, format_version=FORMAT_VERSION, step=step, meta=meta,
                        fields=fields, pgas_version=__version__,
                        process_count=jax.process_count(),
                        device_count=jax.device_count())  # fmt: skip
        _write_json(tmp / _MANIFEST, manifest)
        _fsync_dir(tmp)
        return _commit(tmp, root, step, keep), None
    except (OSError, ValueError, KeyError) as err:
        if isinstance(err, CheckpointError):
            return None, err
        return None, CheckpointError(
            f"committing the checkpoint {str(tmp)!r} failed: {type(err).__name__}: {err}"
        )


def _check_tiling(name: str, shape: tuple[int, ...], blocks: list[dict], where: str) -> None:
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


# ---------------------------------------------------------------------------- read
def _read_latest(root: Path) -> str:
    try:
        return (root / _LATEST).read_text().strip()
    except OSError as err:
        raise CorruptCheckpointError(
            f"no complete checkpoint at {str(root)!r} ({_LATEST} unreadable: {err}); save one "
            f"first, or give the directory of a checkpoint"
        ) from None


def _version_dir(path: str | os.PathLike[str]) -> Path:
    root = Path(path)
    if (root / _MANIFEST).exists() and not (root / _LATEST).exists():
        return root  # a version directory given directly
    if not root.is_dir():
        raise CorruptCheckpointError(
            f"path = {str(root)!r}: no checkpoint there (not a directory); check the path"
        )
    return root / _read_latest(root)


def _manifest(version: Path) -> dict:
    try:
        manifest = json.loads((version / _MANIFEST).read_text())
    except FileNotFoundError:
        raise CorruptCheckpointError(
            f"checkpoint {str(version)!r} has no {_MANIFEST}: it is incomplete (a save was "
            f"interrupted or files were removed); restart from another checkpoint"
        ) from None
    except (OSError, ValueError) as err:
        raise CorruptCheckpointError(
            f"checkpoint {str(version)!r}: {_MANIFEST} is unreadable ({err}); the checkpoint "
            f"is damaged, restart from another one"
        ) from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise CorruptCheckpointError(
            f"{str(version / _MANIFEST)!r} is not a pgas checkpoint manifest"
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
        return int(_manifest(_version_dir(path))["step"])
    except (CheckpointError, KeyError, TypeError, ValueError):
        return None


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
                or (checksum(data) != b["sha256"])
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
        pairs = [ax.global_index(np.arange(ax.padded)[sl]) for ax, sl in zip(layout.axes, index)]
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
    >>> _ = save(d, pgas.full((2,), 7, mesh, dtype="uint8"), step=3, meta={"seed": 1})
    >>> u, step = load(d, pgas.zeros((2,), mesh, dtype="uint8"), meta={"seed": 1})
    >>> step, u.to_numpy()
    (3, array([7, 7], dtype=uint8))
    """
    expected_meta = _jsonable(meta)
    names, arrays = _fields(like_state, "like_state")
    treedef = jax.tree_util.tree_structure(like_state, is_leaf=lambda x: isinstance(x, GlobalArray))
    error, result = None, None
    try:
        version = _version_dir(path)
        manifest = _manifest(version)
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
            _check_tiling(f["name"], arr.shape, f["blocks"], str(version))
            out.append(_restore(arr, _BlockReader(version, f, arr.dtype)))
        result = (jax.tree_util.tree_unflatten(treedef, out), int(manifest["step"]))
    except CheckpointError as err:
        error = err
    except (KeyError, TypeError, ValueError) as err:
        error = CorruptCheckpointError(
            f"checkpoint at {str(path)!r}: the manifest is malformed ({type(err).__name__}: "
            f"{err}); restart from another checkpoint"
        )
    _agree(error, "loading the checkpoint")
    assert result is not None
    return result
