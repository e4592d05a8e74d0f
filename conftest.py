"""Test set-up: 8 virtual CPU devices (stand-ins for GPUs) and 64-bit JAX.

The device count is fixed once JAX starts, so it is set here, before any test
imports JAX; meshes of 1, 2, 3, 4, 6 and 8 devices use subsets.
"""

import os
import sys

os.environ.setdefault("JAX_PLATFORMS", "cpu")
import jax  # noqa: E402

import pgas  # noqa: E402

pgas.use_cpu_devices(8)
jax.config.update("jax_enable_x64", True)
jax.devices()  # start the backend now: in-process runs of the examples cannot change the count


def pytest_report_header(config):
    import mpi4py
    from mpi4py import MPI

    return [
        f"pgas {pgas.__version__}, jax {jax.__version__}, {len(jax.devices())} "
        f"{jax.devices()[0].platform} devices, python {sys.version.split()[0]}",
        f"mpi4py {mpi4py.__version__}, MPI: {MPI.Get_library_version().splitlines()[0]}",
    ]
