"""pgas.launcher: which launcher started a process, and what it says about the job."""

from __future__ import annotations

import pytest

from pgas.runtime.launcher import Launch, detect_launcher, launch

HYDRA = {"PMI_RANK": "2", "PMI_SIZE": "4", "MPI_LOCALRANKID": "0", "MPI_LOCALNRANKS": "2"}
OPENMPI = {
    "OMPI_COMM_WORLD_SIZE": "8",
    "OMPI_COMM_WORLD_RANK": "5",
    "OMPI_COMM_WORLD_LOCAL_RANK": "1",
    "OMPI_COMM_WORLD_LOCAL_SIZE": "4",
}
SRUN = {
    "SLURM_JOB_ID": "7",
    "SLURM_STEP_NODELIST": "n[1-2]",
    "SLURM_PROCID": "3",
    "SLURM_LOCALID": "1",
    "SLURM_NTASKS": "4",
    "SLURM_STEP_NUM_TASKS": "4",
    "SLURM_NTASKS_PER_NODE": "2(x2)",
}


@pytest.mark.parametrize(
    "env, name",
    [
        (HYDRA, "mpi"),
        (OPENMPI, "mpi"),
        ({"PMIX_RANK": "0"}, "mpi"),
        (SRUN, "slurm"),
        ({**SRUN, **HYDRA}, "mpi"),  # mpiexec inside an allocation
        ({"SLURM_JOB_ID": "7"}, "none"),  # the batch shell, outside srun
        ({}, "none"),
    ],
)
def test_detect(env, name):
    assert detect_launcher(env) == name


def test_launch_reads_counts():
    assert launch(HYDRA) == Launch("mpi", 4, "PMI_SIZE", 2, 0, 2)
    assert launch(OPENMPI) == Launch("mpi", 8, "OMPI_COMM_WORLD_SIZE", 5, 1, 4)
    assert launch(SRUN) == Launch("slurm", 4, "SLURM_STEP_NUM_TASKS", 3, 1, 2)
    assert launch({"PMIX_RANK": "0"}) == Launch("mpi", None, None, 0, None, None)
    assert launch({"SLURM_JOB_ID": "7", "SLURM_NTASKS": "9"}) == Launch("none")
    assert launch({"PMI_RANK": "0", "PMI_SIZE": "x"}).size is None  # unreadable: unknown
