"""Layer 6, io: what a run writes and reads back. Results, stores, snapshots, checkpoints, pictures.

Contract: a snapshot stream (:mod:`~pgas.io.snapshots`) writes every process's
own blocks, from a background thread, through a store format: one
:class:`~pgas.io.store.Format` per module (:mod:`~pgas.io.zarrstore`,
:mod:`~pgas.io.ncstore`), picked by suffix (:mod:`~pgas.io.formats`);
checkpoints (:mod:`~pgas.io.checkpoint`) are
atomic and process-local; results become xarray Datasets
(:mod:`~pgas.io.dataset`, re-exported here); pictures (:mod:`~pgas.io.plot`)
are drawn from a store with bounded memory. No process gathers a field here.
"""

from pgas.io.attributes import netcdf_safe_attrs
from pgas.io.dataset import (
    DatasetInputError,
    OutputPathError,
    ResultsError,
    check_writable,
    read_dataset,
    to_dataset,
    write_dataset,
)

__all__ = [
    "DatasetInputError", "OutputPathError", "ResultsError", "check_writable",
    "netcdf_safe_attrs", "read_dataset", "to_dataset", "write_dataset",
]  # fmt: skip
