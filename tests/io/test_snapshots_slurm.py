"""One local-Slurm job (2 nodes x 1 task, `srun --mpi=none`) streaming heat into one Zarr
store and one netCDF file through pgas.snapshots; both equal NumPy bitwise.

Without MPI the JAX processes agree through JAX's own collectives, and the .nc goes
through JAX's all-gather. Skipped where Slurm cannot be started (see slurm_cluster).
"""

import sys
from pathlib import Path

import numpy as np
import pytest
import xarray as xr

try:
    from . import slurm_cluster
    from .helpers import heat_numpy
except ImportError:  # tests/ is not a package: pytest put it on sys.path
    import slurm_cluster
    from helpers import heat_numpy

ROOT = Path(__file__).resolve().parents[2]

JOB = """#!/bin/bash
#SBATCH --job-name=pgas-snapshots
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=1
#SBATCH --time=00:05:00
set -euo pipefail
srun --mpi=none {python} tests/dist_scripts/stream.py {out}/run.zarr --also {out}/run.nc \\
    --every 5 --snapshots 4
"""


@pytest.mark.slow
def test_slurm_job_writes_one_store(cluster, tmp_path):
    script, log = tmp_path / "job.sbatch", tmp_path / "job.out"
    script.write_text(JOB.format(python=sys.executable, out=tmp_path))
    env = {k: v for k, v in cluster.items() if not k.startswith(("PGAS_", "XLA_FLAGS", "PMI"))}
    env.update(JAX_PLATFORMS="cpu", PGAS_LOCAL_DEVICES="1", PYTHONUNBUFFERED="1",
               PYTHONPATH=str(ROOT))  # fmt: skip
    job = slurm_cluster.submit(script, env, cwd=ROOT, args=(f"--output={log}",))
    state = slurm_cluster.wait_job(job, 180, env)
    text = log.read_text(errors="replace") if log.exists() else "(no output file)"
    assert state == "COMPLETED", f"job {job} ended {state}:\n{text[-4000:]}"
    u0 = np.sin(np.arange(1001) / 10.0).astype(np.float32)
    for name in ("run.zarr", "run.nc"):
        opener = xr.open_zarr if name.endswith(".zarr") else xr.open_dataset
        with opener(tmp_path / name) as ds:
            assert ds.attrs["processes"] == 2
            assert ds["time"].values.tolist() == [0, 5, 10, 15]
            for i, t in enumerate([0, 5, 10, 15]):
                assert ds["u"].values[i].tobytes() == heat_numpy(u0, t).tobytes(), (name, t)
