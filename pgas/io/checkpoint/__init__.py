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

from pgas.io.checkpoint.reader import load
from pgas.io.checkpoint.store import (
    FORMAT,
    FORMAT_VERSION,
    CheckpointError,
    CheckpointMismatchError,
    CorruptCheckpointError,
    latest,
)
from pgas.io.checkpoint.writer import save

__all__ = [
    "FORMAT",
    "FORMAT_VERSION",
    "CheckpointError",
    "CheckpointMismatchError",
    "CorruptCheckpointError",
    "latest",
    "load",
    "save",
]
