"""Which launcher started this process, read from its environment (no MPI, no JAX).

``mpiexec`` (MPICH's hydra: ``PMI_RANK``/``PMI_SIZE``; Open MPI:
``OMPI_COMM_WORLD_*``; PMIx: ``PMIX_RANK``) wins over Slurm's ``srun``
(``SLURM_JOB_ID`` with ``SLURM_STEP_NODELIST`` or ``SLURM_PROCID``), because
``mpiexec`` inside an allocation sees the allocation's Slurm variables, which
describe another job. Inside ``sbatch``/``salloc`` but outside ``srun`` no
launcher is detected.

Both :mod:`pgas.distributed` (JAX start-up) and :mod:`pgas.mpi` (world size
checks) read the launcher from here.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping

__all__ = ["MPI_ENV", "Launch", "detect_launcher", "launch"]

MPI_ENV = ("PMI_RANK", "PMI_SIZE", "OMPI_COMM_WORLD_SIZE", "PMIX_RANK")
"""Variables any ``mpiexec`` sets: their presence means an MPI launcher."""

# (variable, what it holds) per launcher, first found wins.
_SIZE = {
    "mpi": ("PMI_SIZE", "OMPI_COMM_WORLD_SIZE"),
    "slurm": ("SLURM_STEP_NUM_TASKS", "SLURM_NTASKS", "SLURM_NPROCS"),
}
_RANK = {"mpi": ("PMI_RANK", "OMPI_COMM_WORLD_RANK", "PMIX_RANK"), "slurm": ("SLURM_PROCID",)}
_LOCAL_RANK = {
    "mpi": ("MPI_LOCALRANKID", "OMPI_COMM_WORLD_LOCAL_RANK", "PMI_LOCAL_RANK"),
    "slurm": ("SLURM_LOCALID",),
}
_LOCAL_SIZE = {
    "mpi": ("MPI_LOCALNRANKS", "OMPI_COMM_WORLD_LOCAL_SIZE", "PMI_LOCAL_SIZE"),
    "slurm": ("SLURM_NTASKS_PER_NODE",),
}


def detect_launcher(env: Mapping[str, str] | None = None) -> str:
    """Which launcher started this process: ``"mpi"``, ``"slurm"`` or ``"none"``.

    Args:
        env: the environment to inspect; default ``os.environ``.

    >>> detect_launcher({"PMI_RANK": "0", "PMI_SIZE": "2", "SLURM_JOB_ID": "7"})
    'mpi'
    >>> detect_launcher({"SLURM_JOB_ID": "7", "SLURM_STEP_NODELIST": "n1", "SLURM_PROCID": "0"})
    'slurm'
    >>> detect_launcher({"SLURM_JOB_ID": "7"})  # inside salloc/sbatch but not srun
    'none'
    """
    env = os.environ if env is None else env
    if any(k in env for k in MPI_ENV):
        return "mpi"
    if "SLURM_JOB_ID" in env and ("SLURM_STEP_NODELIST" in env or "SLURM_PROCID" in env):
        return "slurm"
    return "none"


@dataclasses.dataclass(frozen=True)
class Launch:
    """What the launcher says about this process (``None``: it does not say).

    Attributes:
        launcher: ``"mpi"``, ``"slurm"`` or ``"none"``.
        size: processes the launcher started, and ``size_from`` the variable read.
        rank: this process's rank among them.
        local_rank: its rank among the processes on this node.
        local_size: processes on this node.
    """

    launcher: str
    size: int | None = None
    size_from: str | None = None
    rank: int | None = None
    local_rank: int | None = None
    local_size: int | None = None


def _first(env: Mapping[str, str], names: tuple[str, ...]) -> tuple[str | None, int | None]:
    for name in names:
        text = env.get(name, "").strip()
        head = text.split("(")[0]  # SLURM_NTASKS_PER_NODE may read "2(x3)"
        if head.isdigit():
            return name, int(head)
    return None, None


def launch(env: Mapping[str, str] | None = None) -> Launch:
    """Read the launcher's process counts from the environment.

    >>> launch({"PMI_RANK": "1", "PMI_SIZE": "4", "MPI_LOCALRANKID": "1"})
    Launch(launcher='mpi', size=4, size_from='PMI_SIZE', rank=1, local_rank=1, local_size=None)
    >>> launch({}).size is None
    True
    """
    env = os.environ if env is None else env
    name = detect_launcher(env)
    if name == "none":
        return Launch(name)
    size_from, size = _first(env, _SIZE[name])
    return Launch(
        launcher=name,
        size=size,
        size_from=size_from,
        rank=_first(env, _RANK[name])[1],
        local_rank=_first(env, _LOCAL_RANK[name])[1],
        local_size=_first(env, _LOCAL_SIZE[name])[1],
    )
